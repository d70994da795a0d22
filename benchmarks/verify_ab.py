"""N = 1024 check times of two ringc trees side by side, in one run (issue 33's done-when: a
redesign of the verifier keeps the large-N checks within 10% of before).

Each measurement is a fresh process with the tree first on PYTHONPATH, taking the best of 3
`ringc.check` CPU times (children included: the quotient's data flow may run in a forked
child); the two trees alternate case by case, and the best of the rounds is kept, so load
on a shared machine falls on both alike.

    git archive <before-commit> | tar -x -C /tmp/before
    python benchmarks/verify_ab.py --before /tmp/before [--after .] [--rounds 2] [--only NAME] [--markdown]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from tables import print_table

CASES = [("all_gather_ring", "ring:1024"), ("all_reduce_ring", "ring:1024"),
         ("reduce_scatter_bidirectional", "ring:1024"), ("all_gather_hypercube", "ring:1024"),
         ("all_gather_matmul", "ring:1024"), ("all_reduce_bidirectional", "ring:1024"),
         ("all_reduce_2d", "torus:32x32"), ("all_gather_2d", "torus:32x32"),
         ("all_reduce_3d_bidirectional", "torus:8x8x8")]

CHILD = r'''
import resource, sys, ringc
name, topo, root = sys.argv[1:4]
sched = ringc.load(f"{root}/schedules/{name}.yaml")

def cpu():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime

best = float("inf")
for _ in range(3):
    t0 = cpu()
    report = ringc.check(sched, topology=topo, jobs=1)
    best = min(best, cpu() - t0)
print(best, report.ok)
'''


def measure(root: str, name: str, topo: str) -> float | None:
    env = dict(os.environ, PYTHONPATH=root, JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", CHILD, name, topo, root], env=env, capture_output=True,
                         text=True, cwd="/")
    if out.returncode:
        print(f"{root}: {name} on {topo} failed: {out.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    return float(out.stdout.split()[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="a ringc tree (e.g. a git archive of the old commit)")
    ap.add_argument("--after", default=str(Path(__file__).resolve().parent.parent), help="default: this tree")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds; the best is kept (default 2)")
    ap.add_argument("--only", help="one schedule name")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    trees = {"before": str(Path(args.before).resolve()), "after": str(Path(args.after).resolve())}
    cases = [c for c in CASES if not args.only or c[0] == args.only]
    best: dict[tuple[str, str], float] = {}
    for _ in range(args.rounds):
        for name, topo in cases:
            for label, root in trees.items():
                t = measure(root, name, topo)
                if t is not None:
                    best[label, name] = min(best.get((label, name), float("inf")), t)
    rows, total = [], {"before": 0.0, "after": 0.0}
    for name, topo in cases:
        b, a = best.get(("before", name)), best.get(("after", name))
        if b is None or a is None:
            continue
        total["before"] += b
        total["after"] += a
        rows.append([name, topo, f"{b:.3f}", f"{a:.3f}", f"{a / b:.2f}"])
    if total["before"]:
        rows.append(["total", "", f"{total['before']:.3f}", f"{total['after']:.3f}",
                     f"{total['after'] / total['before']:.3f}"])
    print_table(["schedule", "topology", "before s", "after s", "after/before"], rows, args.markdown)


if __name__ == "__main__":
    main()
