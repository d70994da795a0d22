"""Time and peak memory of `ringc check` versus N, for every library schedule.

    python benchmarks/verify_scale.py [--max-n 1024] [--max-n-2d 64] [--repeats 3] [--jax]

One-axis schedules run on a ring of N; `path` says whether the quotient check decided
(device 0's events only, `ringc/verify/quotient.py`) or the full analysis did. Two-axis
schedules run on a torus of about N (`ringc.testing.topology_for`), always in full, so
they stop at --max-n-2d. The target: N = 1024 on a ring in under 2 s per schedule.

With --jax it also times one JAX interpret-mode run (with its race detector) at N = 8
and 16 and prints the ratio: how much faster the all-interleavings proof is than one
dynamic execution.
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(sched, n: int, repeats: int = 3) -> tuple[float, float, int, bool, str]:
    """On a ring of n devices; a schedule over two axes on a torus of about n (`topology_for`).
    The time is the best of `repeats` runs, as `timeit` advises: the others measure the
    machine's noise."""
    from ringc.testing import check_sized
    seconds = float("inf")
    for _ in range(repeats):
        report = None  # free the last report first: a live heap of millions of objects slows the next run
        t0 = time.perf_counter()
        report = check_sized(sched, n)
        seconds = min(seconds, time.perf_counter() - t0)
    tracemalloc.start()  # a second, traced run: tracing slows Python several-fold
    check_sized(sched, n)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    path = "quotient" if report.program.rotation is not None else "full"
    return seconds, peak, report.program.event_count, report.ok, path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-n", type=int, default=1024)
    ap.add_argument("--max-n-2d", type=int, default=64, help="largest N for two-axis schedules (full analysis)")
    ap.add_argument("--repeats", type=int, default=3, help="time the best of this many runs")
    ap.add_argument("--jax", action="store_true", help="also time JAX interpret mode at N=8, 16")
    args = ap.parse_args()
    if args.jax:
        sys.path.insert(0, str(ROOT))
        from ringc.run import ensure_host_devices
        ensure_host_devices(16)
    import ringc

    sizes = [n for n in (4, 8, 16, 32, 64, 128, 256, 512, 1024) if n <= args.max_n]
    print(f"{'schedule':40} {'N':>5} {'events':>9} {'path':>8} {'check s':>8} {'peak MiB':>9} {'B/event':>8}  ok")
    for path in sorted((ROOT / "schedules").glob("*.yaml")):
        sched = ringc.load(path)
        for n in sizes:
            if len(sched.axes) > 1 and n > args.max_n_2d:
                break
            s, mib, events, ok, how = measure(sched, n, args.repeats)
            print(f"{path.stem:40} {n:>5} {events:>9} {how:>8} {s:>8.3f} {mib:>9.1f} {mib * 2**20 / events:>8.1f}  {ok}",
                  flush=True)
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
