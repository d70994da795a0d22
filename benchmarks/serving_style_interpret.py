"""Run tests/pallas_import/serving_style/topk_route.py under JAX's TPU interpret mode with the
race detector, on 4 CPU devices, and compare with ringc's verdicts (issue 31):

    python benchmarks/serving_style_interpret.py          # ringc: ok; interpret: no race, rows routed by argmax
    python benchmarks/serving_style_interpret.py wrong    # ringc: out_of_bounds at line 48; interpret: an
                                                          # out-of-bounds write raised by the interpreter
"""

import functools
import os
import sys
from pathlib import Path

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=5"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

pl.pallas_call = functools.partial(pl.pallas_call, interpret=pltpu.InterpretParams(detect_races=True))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "pallas_import" / "serving_style"))
import topk_route  # noqa: E402


def main() -> int:
    wrong = int(sys.argv[1:] == ["wrong"])
    n = 4
    mesh = jax.make_mesh((n,), ("ep",), devices=jax.devices()[:n])
    tokens = jax.device_put(jnp.arange(8 * n * 128, dtype=jnp.float32).reshape(8 * n, 128),
                            NamedSharding(mesh, P("ep")))
    logits = jax.device_put(jax.random.normal(jax.random.key(0), (8 * n, 2 * n)), NamedSharding(mesh, P()))
    f = jax.jit(jax.shard_map(lambda t, lg: topk_route.route_tokens(t, lg, wrong=wrong), mesh=mesh,
                              in_specs=(P("ep"), P()), out_specs=P("ep"), check_vma=False))
    try:
        out = np.asarray(f(tokens, logits)).reshape(n, 2, 8 * n, 128)
    except Exception as e:  # noqa: BLE001 - the interpreter's bounds check, raised from a device callback
        why = [line for line in str(e).splitlines() if "Out-of-bounds" in line]
        print(f"interpret mode: {why[-1] if why else type(e).__name__}")
        return 1
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
    races = ipc.races.races_found if getattr(ipc, "races", None) else False
    ids = np.asarray(jnp.argmax(logits, axis=1))
    routed = all(np.array_equal(out[e // 2, e % 2, t], np.asarray(tokens)[t]) for t, e in enumerate(ids))
    print(f"interpret mode: races found: {races}; every token in its expert's row: {routed}")
    return 0 if routed and not races else 1


if __name__ == "__main__":
    sys.exit(main())
