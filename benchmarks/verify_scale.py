"""Time and peak memory of `ringc check` versus N, for every library schedule.

    python benchmarks/verify_scale.py [--max-n 64] [--jax]

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


def measure(sched, n: int) -> tuple[float, float, int, bool]:
    """On a ring of n devices; a schedule over two axes on a torus of about n (`topology_for`)."""
    from ringc.testing import check_sized
    t0 = time.perf_counter()
    report = check_sized(sched, n)
    seconds = time.perf_counter() - t0
    tracemalloc.start()  # a second, traced run: tracing slows Python several-fold
    check_sized(sched, n)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    events = sum(len(d) for d in report.program.devices)
    return seconds, peak, events, report.ok


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-n", type=int, default=64)
    ap.add_argument("--jax", action="store_true", help="also time JAX interpret mode at N=8, 16")
    args = ap.parse_args()
    if args.jax:
        sys.path.insert(0, str(ROOT))
        from ringc.run import ensure_host_devices
        ensure_host_devices(16)
    import ringc

    sizes = [n for n in (4, 8, 16, 32, 64, 128, 256, 512, 1024) if n <= args.max_n]
    print(f"{'schedule':32} {'N':>5} {'events':>8} {'check s':>9} {'peak MiB':>9} {'MiB/kevent':>10}  ok")
    for path in sorted((ROOT / "schedules").glob("*.yaml")):
        sched = ringc.load(path)
        for n in sizes:
            s, mib, events, ok = measure(sched, n)
            print(f"{path.stem:32} {n:>5} {events:>8} {s:>9.3f} {mib:>9.1f} {mib / events * 1000:>10.2f}  {ok}")
    if args.jax:
        from ringc.run import run_schedule
        print(f"\n{'schedule':32} {'N':>5} {'jax interpret s':>16} {'ringc check s':>14} {'ratio':>7}")
        for path in sorted((ROOT / "schedules").glob("*.yaml")):
            sched = ringc.load(path)
            if len(sched.axes) > 1:
                continue  # interpret mode on a 2-D mesh: see benchmarks/topology_scale.py
            for n in (8, 16):
                run = run_schedule(sched, n)
                s, _, _, _ = measure(sched, n)
                print(f"{path.stem:32} {n:>5} {run.seconds:>16.3f} {s:>14.3f} {run.seconds / s:>7.1f}x")


if __name__ == "__main__":
    main()
