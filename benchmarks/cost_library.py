"""Efficiency (bound / estimate) of every library schedule on ring:16, v5e:4x4 (an axis of 4
for a 1-axis schedule, the whole 4x4 for a 2-axis one), torus:4x4 and v5p:4x4x4 (an axis of
4, a 4x4 plane or the whole 4x4x4 cube, by the schedule's axes), at 4 KiB, 1 MiB and
256 MiB, and why those under 95% at 256 MiB fall short.

    python benchmarks/cost_library.py [--sizes 4KiB,1MiB,256MiB] [--topologies ring:16,v5e:4x4,...]
                                      [--schedules schedules/*.yaml] [--markdown]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tables import print_table  # benchmarks/tables.py (the script's folder is on the path)

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    sys.path.insert(0, str(ROOT))
    import ringc
    from ringc.cost import CostError, estimate, hardware
    from ringc.cost.sizing import parse_size, size_text
    from ringc.errors import ScheduleError

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4KiB,1MiB,256MiB")
    ap.add_argument("--topologies", default="ring:16,v5e:4x4,torus:4x4,v5p:4x4x4")
    ap.add_argument("--schedules", nargs="*", default=sorted(str(p) for p in (ROOT / "schedules").glob("*.yaml")))
    ap.add_argument("--markdown", action="store_true", help="print a markdown table")
    ap.add_argument("--progress", action="store_true", help="also print each row to stderr as it is priced")
    args = ap.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    topologies = args.topologies.split(",")

    head = ["schedule", "topology", "N"] + [f"{size_text(s)}" for s in sizes]
    rows, reasons = [], []
    t0 = time.perf_counter()
    for path in args.schedules:
        sched = ringc.load(path)
        for topo in topologies:
            try:
                hw = hardware(topo, sched)
            except (ValueError, ScheduleError) as err:  # e.g. a 2-axis schedule on ring:16
                rows.append([sched.name, topo, "-"] + ["n/a"] * len(sizes))
                reasons.append((sched.name, topo, "any size", [getattr(err, "message", str(err))]))
                continue
            cells = []
            for size in sizes:
                try:
                    e = estimate(sched, hw, nbytes=size)
                except (CostError, ScheduleError) as err:
                    cells.append("n/a")
                    reasons.append((sched.name, topo, size_text(size), [getattr(err, "message", str(err))]))
                    continue
                cells.append(f"{e.efficiency:.1%} ({e.seconds * 1e6:.4g} us)" + ("" if e.fits else " !VMEM"))
                if size == max(sizes) and e.efficiency < 0.95:
                    reasons.append((sched.name, topo, size_text(size), e.why()))
            rows.append([sched.name, topo, str(hw.placement.n)] + cells)
            if args.progress:  # a row as soon as it is priced (a long run shows where it is)
                print(f"[{time.perf_counter() - t0:7.1f} s] " + "  ".join(rows[-1]), file=sys.stderr, flush=True)

    print("efficiency = lower bound / simulated estimate (estimate in parentheses); "
          "chip figures from ringc/cost/chips.py; !VMEM: the kernel's VMEM buffers do not fit one "
          "core at that size (the TPU compiler rejects it)\n")
    print_table(head, rows, args.markdown)
    print(f"\nunder 95% at {size_text(max(sizes))}, and why:")
    for name, topo, size, why in reasons:
        print(f"- {name} on {topo} ({size}): " + "; ".join(why))
    print(f"\n({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
