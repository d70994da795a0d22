"""Run two of the issue-31 real-style kernels under JAX's TPU interpret mode with the race
detector, on 4 CPU devices, and compare with ringc's verdicts:

    python benchmarks/real_style_interpret.py permute   # tests/pallas_import/real_style/old_api_permute_cases.py:
        # ringc: 4 sends FAILED race (write/write on the neighbour's output), 1 send ok;
        # interpret: "RACE DETECTED" with 4 sends (dma_execution_mode on_wait and eager), none with 1
    python benchmarks/real_style_interpret.py scatter   # tests/pallas_import/real_style/multihost_scatter.py:
        # ringc: ok; interpret: no race, every (token, top-k) row at its expert's slot

The published files these stand for (an older JAX interpret-mode test, a multi-host scatter
microbenchmark) are listed with their own interpret-mode runs in tests/real_kernels/more_manifest.yaml.
"""

import contextlib
import io
import os
import sys
from pathlib import Path

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["SCATTER_SINGLE_HOST"] = "1"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402

HERE = Path(__file__).parent.parent / "tests" / "pallas_import" / "real_style"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(Path(__file__).parent.parent))


def _races(run) -> int:
    """How many races the interpreter's detector prints while `run()` runs."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        run()
    return out.getvalue().count("RACE DETECTED")


def permute() -> None:
    from ringc.pallas.compat import AliasLog, aliases
    with aliases(AliasLog()):  # the module's 2024 spellings (TPUMemorySpace, backend='mosaic_tpu')
        import old_api_permute_cases as m
        from jax.experimental import shard_map
        P = jax.sharding.PartitionSpec
        mesh = jax.make_mesh((4,), ("x",))
        x = jax.device_put(jnp.arange(8 * 512, dtype=jnp.float32).reshape(8, 512),
                           jax.sharding.NamedSharding(mesh, P(None, "x")))
        for mode in ("on_wait", "eager"):
            for sends in (1, 4):
                with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(detect_races=True, dma_execution_mode=mode)):
                    call = m.permute(sends)
                    f = jax.jit(shard_map.shard_map(call, mesh=mesh, in_specs=P(None, "x"), out_specs=P(None, "x"),
                                                    check_rep=False))
                    out = []
                    n = _races(lambda: out.append(np.asarray(f(x))))
                want = np.roll(np.asarray(x).reshape(8, 4, 128), 1, axis=1).reshape(8, 512)
                print(f"{mode:8s} sends={sends}: races reported {n}, result == ppermute {np.array_equal(out[0], want)}")


def scatter() -> None:
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(detect_races=True, dma_execution_mode="on_wait")):
        import multihost_scatter as m
        spec = jax.sharding.PartitionSpec(("data", "expert"))
        run = jax.jit(jax.shard_map(m.scatter, mesh=m.mesh, in_specs=(spec,), out_specs=spec, check_vma=False))
        x = jnp.arange(m.NDEV * m.TOKENS * 128, dtype=jnp.float32).reshape(m.NDEV * m.TOKENS, 128)
        x = jax.device_put(x, jax.sharding.NamedSharding(m.mesh, spec))
        out = []
        n = _races(lambda: out.append(np.asarray(run(x))))
    got = out[0].reshape(m.NDEV, m.LOCAL_EXPERTS, m.ROWS, 128)
    xs = np.asarray(x).reshape(m.NDEV, m.TOKENS, 128)
    want = np.zeros_like(got)
    for src in range(m.NDEV):
        for a in range(m.ASSIGNMENTS):
            e = (a * 3) % m.EXPERTS
            want[e // m.LOCAL_EXPERTS, e % m.LOCAL_EXPERTS, src * m.PER_SOURCE + a // m.EXPERTS] = xs[src, a // m.TOP_K]
    print(f"scatter: races reported {n}, every row at its expert's slot {np.array_equal(got, want)}")


if __name__ == "__main__":
    {"permute": permute, "scatter": scatter}[sys.argv[1] if len(sys.argv) > 1 else "permute"]()
