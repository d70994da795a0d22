"""Time and peak memory of `ringc check` at scale, for every library schedule.

    python benchmarks/verify_scale.py [--min-n 64] [--max-n 1024] [--repeats 3] [--only NAME]
                                      [--timeout 120] [--jobs J] [--jax]

One-axis schedules run on rings of N = 64..1024 (--min-n, --max-n); two-axis ones on
the tori 8x8, 16x16 and 32x32; three-axis ones on 8x8x8 and 16x16x16 (--max-torus caps
the side). Columns: schedule, topology, events (of all devices), path (whether the
quotient decided from device 0's events alone, `ringc/verify/symmetric/`, `xor` when it
was the XOR quotient of `ringc/verify/xor.py`, or the full analysis did), check s (wall)
and cpu s (this process's and its children's: with --jobs 2, the default on 2 cores, a
large check runs its data flow in a forked child, `ringc/verify/background.py`), each the
best of --repeats runs, peak MiB (a separate traced run in one process, --jobs 1: what a
check holds; with two processes each holds at most that) and bytes per event. Each row runs in its own process, killed
after --timeout seconds (the row then says `timeout`), so one slow row cannot eat the
run. The load average is printed before and after, since a loaded machine inflates the
times; CPU time is what load inflates least. Targets (issue 17, idle 2-core machine):
every library schedule under 2 s at N = 1024 on a ring and on torus:32x32, three axes on
16x16x16 under 5 s. (`benchmarks/cli_start.py` times the command line's start.)

With --jax it also times one JAX interpret-mode run (with its race detector) at N = 8
and 16 and prints the ratio: how much faster the all-interleavings proof is than one
dynamic execution.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TORI = {2: ("torus:8x8", "torus:16x16", "torus:32x32"), 3: ("torus:8x8x8", "torus:16x16x16")}


def _cpu() -> float:
    """CPU seconds of this process and of its children that have ended."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def measure(sched, n: int | None, topology: str = "ring", repeats: int = 3,
            jobs: int | None = None) -> tuple[float, float, float, int, bool, str]:
    """`ringc.check` on `topology` (a ring of n by default) with `jobs` processes (default:
    `check`'s): wall and CPU seconds (children's included), each the best of `repeats`
    runs, as `timeit` advises (the others measure the machine's noise; CPU time is what a
    loaded machine inflates least), peak MiB of a one-process run, events, ok, path."""
    from ringc import check
    from ringc.verify.symmetric.program import SymmetricProgram
    seconds = cpu = float("inf")
    for _ in range(repeats):
        report = None  # free the last report first: a live heap of millions of objects slows the next run
        t0, c0 = time.perf_counter(), _cpu()
        report = check(sched, n, topology=topology, jobs=jobs)
        seconds = min(seconds, time.perf_counter() - t0)
        cpu = min(cpu, _cpu() - c0)
    tracemalloc.start()  # a second, traced run: tracing slows Python several-fold
    check(sched, n, topology=topology, jobs=1)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    path = ("full" if not isinstance(report.program, SymmetricProgram) else "xor" if report.program.group == "xor"
            else "quotient")
    return seconds, cpu, peak, report.program.event_count, report.ok, path


def _row(conn, path: Path, n: int | None, topology: str, repeats: int, jobs: int | None) -> None:
    """A child process: one row's measurement, sent back through `conn`."""
    import ringc
    try:
        conn.send(measure(ringc.load(path), n, topology, repeats, jobs))
    except Exception as e:  # shown in the row, not a traceback in the middle of the table
        conn.send(f"{type(e).__name__}: {e}")
    conn.close()


def measure_with_timeout(path: Path, n: int | None, topology: str, repeats: int, timeout: float,
                         jobs: int | None = None):
    """`measure` in a forked process killed after `timeout` seconds: its result, an error
    text, or None for a timeout."""
    ctx = multiprocessing.get_context("fork")
    here, there = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_row, args=(there, path, n, topology, repeats, jobs))
    proc.start()
    there.close()
    result = here.recv() if here.poll(timeout) else None
    if result is None:
        proc.kill()
    proc.join()
    return result


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cores"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--min-n", type=int, default=64)
    ap.add_argument("--max-n", type=int, default=1024)
    ap.add_argument("--max-torus", type=int, default=32, help="largest torus side (two axes; 16 for three)")
    ap.add_argument("--repeats", type=int, default=3, help="time the best of this many runs")
    ap.add_argument("--only", action="append", help="schedules whose name contains this (repeatable)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per row before it is killed")
    ap.add_argument("--jobs", type=int, help="processes per check (default: check's, 2 on 2+ cores)")
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
    for path in sorted((ROOT / "schedules").glob("*.yaml")):
        if args.only and not any(o in path.stem for o in args.only):
            continue
        sched = ringc.load(path)
        if sched.data:  # checked per sample of its runtime data: see tests/test_data.py
            print(f"{path.stem:40} {'-':>16} skipped: reads runtime data (ringc check --data random:K)", flush=True)
            continue
        axes = len(sched.axes)
        runs = [(n, "ring", f"ring:{n}") for n in rings] if axes == 1 else \
            [(None, t, t) for t in TORI[axes] if int(t.split(":")[1].split("x")[0]) <= args.max_torus]
        for n, topology, label in runs:
            result = measure_with_timeout(path, n, topology, args.repeats, args.timeout, args.jobs)
            if not isinstance(result, tuple):
                print(f"{path.stem:40} {label:>16} {result or f'timeout after {args.timeout:g} s'}", flush=True)
                continue
            s, cpu, mib, events, ok, how = result
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
