"""Time and peak memory of `ringc check` at scale, for every library schedule.

    python benchmarks/verify_scale.py [--max-n 1024] [--repeats 3] [--only NAME] [--jax]

One-axis schedules run on rings of N = 64..1024 (--min-n, --max-n); two-axis ones on
the tori 8x8, 16x16 and 32x32; three-axis ones on 8x8x8 and 16x16x16. The library has
no three-axis schedule, so those rows use the test schedule tests/torus/all_gather_3d.yaml.
`path` says whether the quotient decided (device 0's events only, `ringc/verify/quotient.py`)
or the full analysis did. Times are the best of --repeats runs; the load average is
printed before and after, since a loaded machine inflates them. Targets: every library
schedule under 2 s at N = 1024 on a ring and on torus:32x32, three axes on 16x16x16
under 5 s. (`benchmarks/cli_start.py` times the command line's start.)

With --jax it also times one JAX interpret-mode run (with its race detector) at N = 8
and 16 and prints the ratio: how much faster the all-interleavings proof is than one
dynamic execution.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TORI = {2: ("torus:8x8", "torus:16x16", "torus:32x32"), 3: ("torus:8x8x8", "torus:16x16x16")}
THREE_AXES = [ROOT / "tests" / "torus" / "all_gather_3d.yaml"]


def measure(sched, n: int | None, topology: str = "ring",
            repeats: int = 3) -> tuple[float, float, float, int, bool, str]:
    """`ringc.check` on `topology` (a ring of n by default): wall and CPU seconds, each the
    best of `repeats` runs, as `timeit` advises (the others measure the machine's noise;
    CPU time is what a loaded machine inflates least), peak MiB, events, ok, path."""
    from ringc import check
    seconds = cpu = float("inf")
    for _ in range(repeats):
        report = None  # free the last report first: a live heap of millions of objects slows the next run
        t0, c0 = time.perf_counter(), time.process_time()
        report = check(sched, n, topology=topology)
        seconds = min(seconds, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    tracemalloc.start()  # a second, traced run: tracing slows Python several-fold
    check(sched, n, topology=topology)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    path = "quotient" if report.program.rotation is not None else "full"
    return seconds, cpu, peak, report.program.event_count, report.ok, path


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cores"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--min-n", type=int, default=64)
    ap.add_argument("--max-n", type=int, default=1024)
    ap.add_argument("--max-torus", type=int, default=32, help="largest torus side (two axes; 16 for three)")
    ap.add_argument("--repeats", type=int, default=3, help="time the best of this many runs")
    ap.add_argument("--only", action="append", help="schedules whose name contains this (repeatable)")
    ap.add_argument("--jax", action="store_true", help="also time JAX interpret mode at N=8, 16")
    args = ap.parse_args()
    if args.jax:
        from ringc.run import ensure_host_devices
        ensure_host_devices(16)
    import ringc

    print(_load())
    rings = [n for n in (4, 8, 16, 32, 64, 128, 256, 512, 1024) if args.min_n <= n <= args.max_n]
    print(f"{'schedule':40} {'topology':>16} {'events':>10} {'path':>8} {'check s':>8} {'cpu s':>7} {'peak MiB':>9} "
          f"{'B/event':>8}  ok")
    for path in sorted((ROOT / "schedules").glob("*.yaml")) + THREE_AXES:
        if args.only and not any(o in path.stem for o in args.only):
            continue
        sched = ringc.load(path)
        axes = len(sched.axes)
        runs = [(n, "ring", f"ring:{n}") for n in rings] if axes == 1 else \
            [(None, t, t) for t in TORI[axes] if int(t.split(":")[1].split("x")[0]) <= args.max_torus]
        for n, topology, label in runs:
            s, cpu, mib, events, ok, how = measure(sched, n, topology, args.repeats)
            print(f"{path.stem:40} {label:>16} {events:>10} {how:>8} {s:>8.3f} {cpu:>7.3f} {mib:>9.1f} "
                  f"{mib * 2**20 / events:>8.1f}  {ok}", flush=True)
    print(_load())
    if args.jax:
        from ringc.run import run_schedule
        print(f"\n{'schedule':32} {'N':>5} {'jax interpret s':>16} {'ringc check s':>14} {'ratio':>7}")
        for path in sorted((ROOT / "schedules").glob("*.yaml")):
            sched = ringc.load(path)
            if len(sched.axes) > 1:
                continue  # interpret mode on a 2-D mesh: see benchmarks/topology_scale.py
            for n in (8, 16):
                run = run_schedule(sched, n)
                s = measure(sched, n)[0]
                print(f"{path.stem:32} {n:>5} {run.seconds:>16.3f} {s:>14.3f} {run.seconds / s:>7.1f}x")


if __name__ == "__main__":
    main()
