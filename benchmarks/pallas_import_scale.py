"""Time of `ringc check kernel.py` versus N: the library's kernels as `ringc emit` writes them,
the hand-written corpus, and the broken and mutant schedules emitted as kernels.

    python benchmarks/pallas_import_scale.py [--n 8 16 32 64] [--schedules all_gather_ring ...]
    python benchmarks/pallas_import_scale.py --corpus [--n 64] [--only reduce_scatter ...]
    python benchmarks/pallas_import_scale.py --broken [--n 64] [--only ...]

Default: each library schedule (one axis) is emitted to a temporary module and checked as
Pallas on a ring of N, next to the YAML check of the same schedule at the same N.
`--corpus`: every kernel of `tests/pallas/manifest.yaml` (the hand-written kernels, most
with planted bugs) with its params. `--broken`: every single-axis ring case of
`tests/broken/` and `tests/mutants/` (no runtime data), emitted and checked as Pallas, next
to its YAML check. Columns: `trace` (import the module, build, `jax.make_jaxpr`), `evaluate`
(every pallas_call on every device and grid point through the rule table,
`ringc/pallas/interpret.py`: every device at once when that proves them translates of
device 0, else device by device), `verify` (the YAML path's verifier: the rotation
quotient on device 0's events, the symmetric analysis of findings, or the full
`check_program`), and the finding kinds. `events` counts every device's. The first check
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


def _row(name: str, n: int, report, total: float, yaml_s: float | None) -> str:
    ph = report.phases
    yaml_text = f"{yaml_s:>6.2f}" if yaml_s is not None else f"{'':>6}"
    kinds = ",".join(sorted(report.kinds())) or "-"
    return (f"{name:45} {n:>4} {report.program.event_count:>8} {total - ph['evaluate'] - ph['verify']:>7.2f} "
            f"{ph['evaluate']:>9.2f} {ph['verify']:>7.2f} {total:>7.2f} {yaml_text}  "
            f"{'ok' if report.ok else 'FAILED'} {kinds}")


def _header() -> None:
    print(f"{'kernel':45} {'N':>4} {'events':>8} {'trace':>7} {'evaluate':>9} {'verify':>7} {'total':>7} "
          f"{'YAML':>6}  verdict kinds", flush=True)


def _timed(fn, *args, **kwargs):
    t0 = time.process_time()
    out = fn(*args, **kwargs)
    return out, time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=None, help="device counts (default 8 16 32 64; 64 with "
                    "--corpus or --broken)")
    ap.add_argument("--schedules", nargs="+", default=None, help="library schedule names (default: all one-axis)")
    ap.add_argument("--corpus", action="store_true", help="the hand-written kernels of tests/pallas/")
    ap.add_argument("--broken", action="store_true", help="tests/broken/ and tests/mutants/, emitted")
    ap.add_argument("--only", nargs="+", default=None, help="with --corpus/--broken: names containing one of these")
    args = ap.parse_args()
    ns = args.n or ([64] if args.corpus or args.broken else [8, 16, 32, 64])
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.path.insert(0, str(ROOT))
    import yaml
    import ringc
    from ringc.pallas import check_module

    def wanted(name: str) -> bool:
        return args.only is None or any(o in name for o in args.only)

    check_module(str(ROOT / "tests" / "pallas" / "right_permute.py"), 4)  # JAX's imports and first trace
    _header()
    if args.corpus:
        manifest = yaml.safe_load((ROOT / "tests" / "pallas" / "manifest.yaml").read_text())["kernels"]
        sys.path.insert(0, str(ROOT / "tests" / "pallas"))
        for entry in manifest:
            if not wanted(entry["file"]):
                continue
            for n in ns:
                report, total = _timed(check_module, str(ROOT / "tests" / "pallas" / entry["file"]), n,
                                       params=entry.get("params") or {})
                print(_row(entry["file"], n, report, total, None), flush=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        if args.broken:
            for corpus in ("broken", "mutants"):
                expected = yaml.safe_load((ROOT / "tests" / corpus / "expected.yaml").read_text())
                for name, entry in sorted(expected.items()):
                    if "data" in entry or "topology" in entry or not wanted(name):
                        continue
                    path = ROOT / "tests" / corpus / name
                    s = ringc.load(str(path))
                    if len(s.axes) != 1:
                        continue
                    out = Path(tmp) / f"{path.stem}.py"
                    out.write_text(ringc.emit(s))
                    k = entry.get("invocations", 1)
                    for n in ns:
                        report, total = _timed(check_module, str(out), n, invocations=k)
                        want, yaml_s = _timed(ringc.check, s, n, invocations=k)
                        same = "" if want.kinds() == report.kinds() and want.ok == report.ok else \
                            f"  (YAML: {','.join(sorted(want.kinds()))})"
                        print(_row(f"{corpus}/{path.stem}", n, report, total, yaml_s) + same, flush=True)
            return
        paths = sorted((ROOT / "schedules").glob("*.yaml"))
        scheds = [(p, ringc.load(str(p))) for p in paths if args.schedules is None or p.stem in args.schedules]
        scheds = [(p, s) for p, s in scheds if len(s.axes) == 1]
        for p, s in scheds:
            out = Path(tmp) / f"{p.stem}.py"
            out.write_text(ringc.emit(s))
            for n in ns:
                report, total = _timed(check_module, str(out), n)
                _, yaml_s = _timed(ringc.check, s, n)
                print(_row(p.stem, n, report, total, yaml_s), flush=True)


if __name__ == "__main__":
    main()
