"""Emitted kernels versus hand-written Pallas kernels of the same algorithms, in TPU
interpret mode on CPU devices: same N, same shapes, same inputs, same InterpretParams.

    python benchmarks/interpret_vs_handwritten.py [--devices 4] [--repeats 5] [--quick]

| emitted from                               | hand-written (benchmarks/handwritten.py) |
|--------------------------------------------|------------------------------------------|
| schedules/all_reduce_ring.yaml             | `build_all_reduce`                       |
| schedules/reduce_scatter_bidirectional.yaml| `build_reduce_scatter`                   |
| schedules/reduce_scatter_pipelined.yaml    | `build_reduce_scatter_large`             |

Each kernel is compiled once, then run `--repeats` times; the table shows the best time
of each (interpret mode's time is mostly its per-operation callbacks, which is what the
emitted code could add) and emitted / hand-written. The target is a ratio of at most 1.1.
Both outputs are also compared with each other and with the lax reference.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

TARGET = 1.1

# (label, schedule, hand-written builder, params): a small and a larger shape each.
CASES = [
    ("all-reduce", "all_reduce_ring", "build_all_reduce", {"rows": 8, "cols": 128}),
    ("all-reduce", "all_reduce_ring", "build_all_reduce", {"rows": 64, "cols": 512}),
    ("bidirectional reduce-scatter", "reduce_scatter_bidirectional", "build_reduce_scatter",
     {"rows": 16, "cols": 128}),
    ("bidirectional reduce-scatter", "reduce_scatter_bidirectional", "build_reduce_scatter",
     {"rows": 64, "cols": 512}),
    ("large-block reduce-scatter", "reduce_scatter_pipelined", "build_reduce_scatter_large",
     {"rows": 16, "cols": 256, "bm": 8, "bn": 128}),
    ("large-block reduce-scatter", "reduce_scatter_pipelined", "build_reduce_scatter_large",
     {"rows": 256, "cols": 512, "bm": 64, "bn": 256}),
    ("large-block reduce-scatter", "reduce_scatter_pipelined", "build_reduce_scatter_large",
     {"rows": 512, "cols": 1024, "bm": 64, "bn": 128}),
]


def best_times(fns, inputs, repeats: int) -> tuple[list[float], list[object]]:
    """Compile each function, then time them in turn (so load on the machine hits both
    alike); the best time of each, and its output."""
    import jax

    compiled = [fn.lower(*inputs).compile() for fn in fns]
    best, outs = [float("inf")] * len(fns), [None] * len(fns)
    for _ in range(repeats):
        for i, c in enumerate(compiled):
            start = time.perf_counter()
            outs[i] = jax.block_until_ready(c(*inputs))
            best[i] = min(best[i], time.perf_counter() - start)
    return best, outs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="only the small shapes")
    args = ap.parse_args()

    from ringc.run import ensure_host_devices
    ensure_host_devices(args.devices)
    import jax
    import numpy as np
    from jax.experimental.pallas import tpu as pltpu

    import handwritten
    import ringc
    from ringc.reference import reference
    from ringc.run import load_module

    n = args.devices
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:n]), ("x",))
    interpret = pltpu.InterpretParams()  # the same for both: race detection off, DMAs on wait
    labels = [c[0] for c in CASES]
    cases = [c for i, c in enumerate(CASES) if not args.quick or labels.index(c[0]) == i]

    print(f"interpret mode, N = {n}, best of {args.repeats} runs after compilation")
    header = f"{'kernel':30} {'params':36} {'hand-written ms':>15} {'emitted ms':>11} {'ratio':>6}  result"
    print(header)
    print("-" * len(header))
    worst = 0.0
    for label, stem, builder, params in cases:
        sched = ringc.load(ROOT / "schedules" / f"{stem}.yaml", params)
        module = load_module(sched)
        inputs = module.make_inputs(mesh, 0)
        emitted = module.build(mesh, interpret=interpret)
        hand = getattr(handwritten, builder)(mesh, **params, interpret=interpret)
        pltpu.reset_tpu_interpret_mode_state()
        (t_hand, t_emit), (out_hand, out_emit) = best_times([hand, emitted], inputs, args.repeats)
        want = np.asarray(reference(sched, mesh)(*inputs))
        same = np.array_equal(np.asarray(out_hand), np.asarray(out_emit))
        err = float(np.max(np.abs(np.asarray(out_emit) - want)))
        ratio = t_emit / t_hand
        worst = max(worst, ratio)
        shown = ", ".join(f"{k}={v}" for k, v in params.items())
        result = f"{'identical' if same else 'DIFFERENT'}, |emitted - lax| {err:.1e}"
        print(f"{label:30} {shown:36} {t_hand * 1e3:>15.1f} {t_emit * 1e3:>11.1f} {ratio:>6.2f}  {result}")
    verdict = "met" if worst <= TARGET else "MISSED"
    print(f"\nworst ratio {worst:.2f} (target <= {TARGET}: {verdict})")
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
