"""Time of `ringc check` on tori and TPU slices, for every library schedule.

    python benchmarks/topology_scale.py [--big]

One-axis schedules run along one axis of each topology (every row checked by one
instance, routes for all of them); two-axis schedules over its first two axes. --big adds
torus:16x16 and torus:8x8x8 for the two-axis schedules (about a minute each on 16x16).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big", action="store_true", help="two-axis schedules on 16x16 and 8x8x8 too")
    args = ap.parse_args()
    import ringc
    from ringc.topology import parse
    from ringc.verify.placement import place, sends

    one_axis = [("torus:16x16", "y"), ("torus:8x8x8", "z"), ("v5e:16x16", "x"), ("v5p:4x4x8", "z")]
    two_axes = [("torus:4x4", None), ("v5e:8x8", None), ("torus:4x4x4", None)]
    if args.big:
        two_axes += [("torus:8x8x8", None), ("torus:16x16", None)]
    print(f"{'schedule':30} {'topology':14} {'along':5} {'N':>4} {'inst':>4} {'events':>7} {'sends':>7} "
          f"{'max hops':>8} {'check s':>8}  result")
    for path in sorted((ROOT / "schedules").glob("*.yaml")):
        sched = ringc.load(path)
        for spec, along in (one_axis if len(sched.axes) == 1 else two_axes):
            t0 = time.perf_counter()
            report = ringc.check(sched, topology=spec, along=along)
            seconds = time.perf_counter() - t0
            placement = place(sched, parse(spec), along)
            routes = sends(report.program, placement)
            kinds = sorted(report.kinds()) or ["clean"]
            print(f"{path.stem:30} {spec:14} {along or '-':5} {report.program.n:>4} {placement.instances:>4} "
                  f"{sum(len(d) for d in report.program.devices):>7} {len(routes):>7} "
                  f"{max((r.hops for r in routes), default=0):>8} {seconds:>8.2f}  "
                  f"{'ok' if report.ok else 'FAILED'} {','.join(kinds)}")


if __name__ == "__main__":
    main()
