"""Run tests/pallas_import/serving_style/moe_counts.py under JAX's TPU interpret mode with the
race detector, on 4 CPU devices, and compare with ringc's verdicts (issue 31):

    python benchmarks/moe_counts_interpret.py       # ringc: ok; interpret: no race, every token at its row
    python benchmarks/moe_counts_interpret.py 1     # ringc: race at line 72 (the SMEM table read before
                                                    # the staging DMA's wait); interpret: the read sees the
                                                    # table not yet copied (uninitialized, 2147483647), then
                                                    # an out-of-bounds read of `counts_smem` by that expert id
    python benchmarks/moe_counts_interpret.py 2     # ringc: hang at line 106; interpret: the run never ends
                                                    # (stopped after --timeout seconds)
"""

import functools
import os
import sys
import threading
from pathlib import Path

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

pl.pallas_call = functools.partial(pl.pallas_call, interpret=pltpu.InterpretParams(detect_races=True))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "pallas_import" / "serving_style"))
import moe_counts  # noqa: E402

TIMEOUT = 120.0


def routed_right(out: np.ndarray, tokens: np.ndarray, ids: np.ndarray, n: int) -> bool:
    """Whether every token is at its row, by numpy: per device, per local expert, the tokens
    routed to it in device order (rows past an expert's count are not written: interpret mode
    leaves them uninitialized)."""
    fill = np.zeros(2 * n, int)
    for t, e in enumerate(ids):  # the tokens are in device order already
        if not np.array_equal(out[e // 2, e % 2, fill[e]], tokens[t]):
            return False
        fill[e] += 1
    return True


def main() -> int:
    wrong = int(sys.argv[1]) if sys.argv[1:] else 0
    n, rows = 4, 8
    mesh = jax.make_mesh((n,), ("ep",), devices=jax.devices()[:n])
    tokens = jax.device_put(jnp.arange(rows * n * 128, dtype=jnp.float32).reshape(rows * n, 128),
                            NamedSharding(mesh, P("ep")))
    logits = jax.device_put(jax.random.normal(jax.random.key(0), (rows * n, 2 * n)), NamedSharding(mesh, P("ep")))
    f = jax.jit(jax.shard_map(lambda t, lg: moe_counts.dispatch(t, lg, wrong=wrong), mesh=mesh,
                              in_specs=(P("ep"), P("ep")), out_specs=P("ep"), check_vma=False))
    result: dict = {}

    def run() -> None:
        try:
            result["out"] = np.asarray(f(tokens, logits))
        except Exception as e:  # noqa: BLE001 - the interpreter's own errors, reported
            result["error"] = e

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(TIMEOUT)
    if worker.is_alive():
        print(f"interpret mode: no result after {TIMEOUT:.0f} s (the run hangs)")
        sys.stdout.flush()
        os._exit(1)
    if "error" in result:
        lines = str(result["error"]).splitlines()
        why = [line for line in lines if "Out-of-bounds" in line] or lines[:1]
        print(f"interpret mode: {why[-1]}")
        return 1
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
    races = ipc.races.races_found if getattr(ipc, "races", None) else False
    ids = np.asarray(jnp.argmax(logits, axis=1))
    out = result["out"].reshape(n, 2, n * rows, 128)
    routed = routed_right(out, np.asarray(tokens), ids, n)
    print(f"interpret mode: races found: {races}; every token at its expert's row: {routed}")
    return 0 if routed and not races else 1


if __name__ == "__main__":
    sys.exit(main())
