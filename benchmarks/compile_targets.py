"""Compile every library schedule for TPU targets with the real compiler (libtpu, no TPU)
and print a table: status, lowering + compile time, and the compiler's memory figures.

    python benchmarks/compile_targets.py [--target v5e:2x2 ...]

Times are wall-clock on this machine; the first compile in the process also pays for
loading libtpu.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TARGETS = ["v5e:2x2", "v5p:2x2x1", "v4:2x2x1", "v6e:2x2"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", action="append", help=f"default: {' '.join(DEFAULT_TARGETS)}")
    args = ap.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.path.insert(0, str(ROOT))
    import ringc
    from ringc.units import size_text

    print("| schedule | target | N | result | lower + compile (s) | VMEM scoped | HBM args | HBM out "
          "| HBM temp | HBM peak | code |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for path in sorted((ROOT / "schedules").glob("*.yaml")):
        sched = ringc.load(path)
        for target in args.target or DEFAULT_TARGETS:
            r = ringc.compile_for(sched, target)
            m = r.memory
            sizes = [size_text(m[k], decimals=1) if k in m else "-" for k in
                     ("vmem_scoped", "hbm_argument", "hbm_output", "hbm_temp", "hbm_peak", "generated_code")]
            status = "ok" if r.ok else f"FAILED [{r.error.kind}]"
            print(f"| {path.stem} | {target} | {r.devices} | {status} | "
                  f"{r.lower_seconds:.2f} + {r.compile_seconds:.2f} | {' | '.join(sizes)} |")


if __name__ == "__main__":
    main()
