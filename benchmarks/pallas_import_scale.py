"""Time of `ringc check kernel.py` versus N, for the library's kernels as `ringc emit` writes them.

    python benchmarks/pallas_import_scale.py [--n 8 16 32 64] [--schedules all_gather_ring ...]

Each library schedule (one axis) is emitted to a temporary module and checked as Pallas
on a ring of N. Columns: `trace` (import the module, build, `jax.make_jaxpr`), `evaluate`
(every pallas_call on every device and grid point through the rule table,
`ringc/pallas/interpret.py`: every device at once when that proves them translates of
device 0, else device by device), `verify` (the YAML path's verifier: the rotation
quotient on device 0's events, or the full `check_program`), and the YAML check of the
same schedule at the same N for comparison. `events` counts every device's. The first check
in the process also pays for importing JAX; it is run once at N = 4 before timing.
Times are CPU seconds (`time.process_time`): the machines this runs on are shared.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--schedules", nargs="+", default=None, help="library schedule names (default: all one-axis)")
    args = ap.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.path.insert(0, str(ROOT))
    import ringc
    from ringc.pallas import check_module

    paths = sorted((ROOT / "schedules").glob("*.yaml"))
    scheds = [(p, ringc.load(str(p))) for p in paths if args.schedules is None or p.stem in args.schedules]
    scheds = [(p, s) for p, s in scheds if len(s.axes) == 1]
    with tempfile.TemporaryDirectory() as tmp:
        modules = {}
        for p, s in scheds:
            out = Path(tmp) / f"{p.stem}.py"
            out.write_text(ringc.emit(s))
            modules[p.stem] = out
        check_module(str(next(iter(modules.values()))), 4)  # JAX's imports and first trace
        print(f"{'kernel':45} {'N':>4} {'events':>8} {'trace':>7} {'evaluate':>9} {'verify':>7} {'total':>7} "
              f"{'YAML':>6}  verdict")
        for p, s in scheds:
            for n in args.n:
                t0 = time.process_time()
                report = check_module(str(modules[p.stem]), n)
                total = time.process_time() - t0
                ph = report.phases
                t1 = time.process_time()
                ringc.check(s, n)
                yaml_s = time.process_time() - t1
                print(f"{p.stem:45} {n:>4} {report.program.event_count:>8} {total - ph['evaluate'] - ph['verify']:>7.2f} "
                      f"{ph['evaluate']:>9.2f} {ph['verify']:>7.2f} {total:>7.2f} {yaml_s:>6.2f}  "
                      f"{'ok' if report.ok else 'FAILED'}", flush=True)


if __name__ == "__main__":
    main()
