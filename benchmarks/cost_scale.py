"""How long `ringc cost` takes to price the library's and the synthesized schedules at large
sizes on large slices (issue 36, "cost that scales"): every schedule in schedules/ and
schedules/synth/ on ring:16, v5e:16x16, v5p:4x4x4, v5p:4x4x8, v5p:8x8x8 and v5p:16x16x16 where it
applies (its axes bind to the slice), at 256 MiB and 1 GiB. Each cell is the CPU time of
`cost.estimate` (sizing, unrolling device 0, timing; the schedule's file already loaded;
CPU, not wall time, so that a shared machine's load does not inflate it),
with the estimate's efficiency and how it was timed: `q` on the symmetry quotient
(device 0's events), `all` on every device, `steady` when long pipelines were priced from
their steady state (ringc/cost/steady.py); `n/a` says why below the table (one line per
schedule and reason). Each estimate runs in a child process with a time limit
(`--timeout`, default 60 s), so a case that does not finish reads `>60 s`.

    python benchmarks/cost_scale.py [--sizes 256MiB,1GiB] [--topologies ring:16,...]
                                    [--schedules schedules/*.yaml schedules/synth/*.yaml]
                                    [--timeout 60] [--markdown]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import re
import sys
import time
from pathlib import Path

from tables import print_table  # benchmarks/tables.py (the script's folder is on the path)

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGIES = "ring:16,v5e:16x16,v5p:4x4x4,v5p:4x4x8,v5p:8x8x8,v5p:16x16x16"


def price(path: str, topo: str, size: int, out) -> None:
    """In a child: load, place, time one estimate; send (seconds, cell text) or (None, why)."""
    sys.path.insert(0, str(ROOT))
    import ringc
    from ringc.cost import CostError, estimate, hardware
    from ringc.errors import ScheduleError
    sched = ringc.load(path)
    try:
        hw = hardware(topo, sched)
    except (ValueError, ScheduleError) as err:
        out.send((None, "-", getattr(err, "message", str(err))))
        return
    t = time.process_time()
    try:
        e = estimate(sched, hw, nbytes=size)
    except (CostError, ScheduleError, ValueError) as err:
        out.send((None, "n/a", getattr(err, "message", str(err)).splitlines()[0]))
        return
    took = time.process_time() - t
    how = "q" if e.assumptions else "all"
    if e.machine.steady is not None and e.machine.steady.skips:
        how += ", steady"  # long pipelines from their steady state (ringc/cost/steady.py)
    out.send((took, f"{took:.2f} s ({e.efficiency:.0%}, {how})", ""))


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from ringc.cost.sizing import parse_size, size_text

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="256MiB,1GiB")
    ap.add_argument("--topologies", default=TOPOLOGIES)
    ap.add_argument("--schedules", nargs="*", default=sorted(str(p.relative_to(ROOT)) for p in
                                                             [*(ROOT / "schedules").glob("*.yaml"),
                                                              *(ROOT / "schedules" / "synth").glob("*.yaml")]))
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per estimate before it is abandoned")
    ap.add_argument("--markdown", action="store_true", help="print a markdown table")
    ap.add_argument("--summary", action="store_true",
                    help="one row per schedule: its slowest slice at each size (the docs' table)")
    ap.add_argument("--progress", action="store_true", help="also print each row to stderr as it is priced")
    args = ap.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    topologies = args.topologies.split(",")
    ctx = mp.get_context("fork")

    head = ["schedule", "topology"] + [size_text(s) for s in sizes]
    rows, times = [], []
    slowest: dict[str, dict[int, tuple[float, str] | None]] = {}  # schedule -> size -> (s, slice)
    notes: dict[tuple[str, str], list[str]] = {}  # (schedule, reason without numbers) -> [first reason, where...]
    t0 = time.perf_counter()
    for path in args.schedules:
        name = Path(path).stem
        for topo in topologies:
            cells = []
            for size in sizes:
                recv, send = ctx.Pipe(duplex=False)
                child = ctx.Process(target=price, args=(str(ROOT / path), topo, size, send))
                child.start()
                got = recv.recv() if recv.poll(args.timeout) else None
                if got is None:
                    child.kill()
                    cells.append(f">{args.timeout:.0f} s")
                    times.append(args.timeout)
                else:
                    took, text, why = got
                    cells.append(text)
                    if took is not None:
                        times.append(took)
                        was = slowest.setdefault(name, {}).get(size)
                        slowest[name][size] = max(was, (took, topo)) if was else (took, topo)
                    elif text != "-":
                        slowest.setdefault(name, {}).setdefault(size, None)
                        key = (name, re.sub(r"\d[\d,]*", "#", why))
                        notes.setdefault(key, [why]).append(f"{topo} {size_text(size)}")
                child.join()
                if cells[-1] == "-":
                    break  # does not apply to this slice
            if cells[-1] == "-":
                continue
            rows.append([name, topo] + cells)
            if args.progress:
                print(f"[{time.perf_counter() - t0:7.1f} s] " + "  ".join(rows[-1]), file=sys.stderr, flush=True)

    print("CPU time of `cost.estimate` per schedule, slice and size (efficiency, and how it was timed: "
          "q = symmetry quotient, all = every device); "
          "schedules whose axes do not bind to a slice are left out\n")
    if args.summary:
        head = ["schedule", "slices"] + [f"slowest at {size_text(s)}" for s in sizes]
        count = {name: sum(r[0] == name for r in rows) for name in slowest}
        rows = [[name, str(count[name])] + [f"{by[s][0]:.2f} s ({by[s][1]})" if by.get(s) else "n/a" for s in sizes]
                for name, by in slowest.items()]
    print_table(head, rows, args.markdown)
    if notes:
        print("\nn/a:")
        for (name, _), (why, *where) in notes.items():
            print(f"- {name} on {', '.join(where)}; at the first: {why}")
    if times:
        over = sum(t >= 1.0 for t in times)
        print(f"\n{len(times)} estimates, slowest {max(times):.2f} s, {over} at 1 s or more "
              f"({time.perf_counter() - t0:.1f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
