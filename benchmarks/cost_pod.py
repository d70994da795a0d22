"""`ringc cost` at pod size: wall and CPU time of the command, and how it was timed.

    python benchmarks/cost_pod.py [--all] [--compare]

Each row runs `ringc cost FILE --topology T --format json` in a fresh process (startup
included) and reports its wall and CPU seconds, whether the run was timed on the
symmetric quotient (device 0's events, `ringc/cost/quotient.py`) or on every device, and
the estimate and efficiency. The default rows are a whole pod: the 3-axis all-reduce on
v5p:16x16x16 and the tutorial's ring all-reduce on ring:4096 (4,096 chips each), and the
2-axis schedules on v5e:16x16 (a v5e pod, 256 chips) and torus:64x64 (4,096). `--all`
prices every library schedule over a whole pod of its axes. `--compare` adds v5p:4x4x4
(64 chips) timed both ways (`estimate(..., every_device=True)` in-process), the size where
timing every device was last feasible.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from tables import print_table  # benchmarks/tables.py (the script's folder is on the path)

ROOT = Path(__file__).resolve().parent.parent
POD = {1: "ring:4096", 2: "torus:64x64", 3: "v5p:16x16x16"}
DEFAULT = [("all_reduce_3d_bidirectional", "v5p:16x16x16"), ("all_reduce_ring", "ring:4096"),
           ("all_gather_ring", "ring:4096"), ("all_reduce_2d_bidirectional", "v5e:16x16"),
           ("all_reduce_2d_bidirectional", "torus:64x64")]


def run(stem: str, topology: str) -> list[str]:
    path = ROOT / "schedules" / f"{stem}.yaml"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "ringc", "cost", str(path), "--topology", topology, "--format",
                           "json"], capture_output=True, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT),
                                                                                  "PATH": "/usr/bin:/bin"})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode:
        return [stem, topology, "-", "-", "-", "-", f"{wall:.1f}", f"{cpu:.1f}",
                f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1][:80]}"]
    doc = json.loads(proc.stdout)
    how = "quotient" if doc.get("assumptions") else "every device"
    return [stem, topology, str(doc["N"]), how, f"{doc['estimate_s'] * 1e6:.4g} us", f"{doc['efficiency']:.1%}",
            f"{wall:.1f}", f"{cpu:.1f}", ""]


def compare() -> list[str]:
    """v5p:4x4x4 in-process, both ways: the quotient against every device."""
    sys.path.insert(0, str(ROOT))
    import ringc
    from ringc.cost import estimate, hardware
    sched = ringc.load(ROOT / "schedules" / "all_reduce_3d_bidirectional.yaml")
    hw = hardware("v5p:4x4x4", sched)
    out = []
    for every in (False, True):
        t0, c0 = time.perf_counter(), time.process_time()
        e = estimate(sched, hw, every_device=every)
        out.append(f"  v5p:4x4x4 all_reduce_3d_bidirectional, {'every device' if every else 'quotient':12}: "
                   f"{e.seconds * 1e6:.6g} us, efficiency {e.efficiency:.4%}, {time.perf_counter() - t0:.2f} s wall, "
                   f"{time.process_time() - c0:.2f} s CPU")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all", action="store_true", help="every library schedule over a whole pod of its axes")
    ap.add_argument("--compare", action="store_true", help="v5p:4x4x4 timed both ways, in-process")
    args = ap.parse_args()
    rows = list(DEFAULT)
    if args.all:
        import yaml
        for path in sorted((ROOT / "schedules").glob("*.yaml")):
            axes = len(yaml.safe_load(path.read_text()).get("axes", ["x"]))
            if (path.stem, POD[axes]) not in rows:
                rows.append((path.stem, POD[axes]))
    head = ["schedule", "topology", "N", "timed on", "estimate", "efficiency", "wall s", "CPU s", ""]
    table = [head]
    for stem, topo in rows:
        table.append(run(stem, topo))
        print("  ".join(table[-1]), file=sys.stderr, flush=True)
    print_table(head, table[1:])
    if args.compare:
        print("\n".join(compare()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
