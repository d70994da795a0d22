"""Wall time of a small `ringc check` from the shell, and where its start-up goes.

    python benchmarks/cli_start.py [--runs 10] [--root PATH]

Runs `python -m ringc check schedules/ppermute_right.yaml --devices 4` (20 events) --runs
times in fresh processes, as a shell would, and prints the best and median wall time
(the target: under 0.5 s), then the slowest imports of one run from `python -X importtime`.
`--root` times another checkout (e.g. the main branch) for a before/after comparison.
The load average is printed, since other processes inflate the times.

Python's bytecode cache is on, in a temporary PYTHONPYCACHEPREFIX, after one warm-up run,
as for an installed package (pip compiles it): with PYTHONDONTWRITEBYTECODE set, every
start would also compile every module it imports.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMAND = ["-m", "ringc", "check", "schedules/ppermute_right.yaml", "--devices", "4"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout to time (default: this one)")
    ap.add_argument("--top", type=int, default=12, help="how many imports to list")
    args = ap.parse_args()
    cache = tempfile.mkdtemp(prefix="ringc-pycache-")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(args.root.resolve()), PYTHONPYCACHEPREFIX=cache)
    cmd = [sys.executable, *COMMAND]
    subprocess.run(cmd, cwd=args.root, env=env, check=True, capture_output=True)  # fills the bytecode cache
    print("load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cores")
    times, cpu = [], []
    for _ in range(args.runs):
        r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        subprocess.run(cmd, cwd=args.root, env=env, check=True, capture_output=True)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append(time.perf_counter() - t0)
        cpu.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    bare = []
    for _ in range(args.runs):  # the interpreter alone, for reference
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
        bare.append(time.perf_counter() - t0)
    print(f"{' '.join(['python', *COMMAND])} ({args.root}):")
    print(f"  wall best {min(times):.3f} s, median {statistics.median(times):.3f} s over {args.runs} runs; "
          f"CPU (user + sys) best {min(cpu):.3f} s (python -c pass: wall best {min(bare):.3f} s)")
    done = subprocess.run([sys.executable, "-X", "importtime", *COMMAND], cwd=args.root, env=env, capture_output=True,
                          text=True, check=True)
    rows = []
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "cumulative" not in line:
            _, cumulative, name = line.split("|")
            rows.append((int(cumulative), name.rstrip()))
    top = [(c, n) for c, n in rows if n.strip().count(".") == 0 or n.strip().startswith("ringc")]
    print("  slowest imports (cumulative, one run under -X importtime):")
    for c, n in sorted(top, reverse=True)[:args.top]:
        print(f"  {c / 1e3:8.1f} ms {n}")


if __name__ == "__main__":
    main()
