"""A kernel over both TensorCores of each chip written with `pl.core_map` inside
`pl.run_state`, as JAX's core_map docs write one: core c copies its half of the rows of x
into out on the same device and core, then the devices swap nothing else. `BROKEN = True`
makes both cores copy the first half (a race on out's rows; the second half unwritten)."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

BROKEN = False


def per_shard(x):
    cores = pltpu.create_tensorcore_mesh("core", num_cores=2)
    half = x.shape[0] // 2

    @pl.run_state
    def run(refs):
        x_ref, o_ref = refs

        @pl.core_map(cores)
        def _():
            core = jax.lax.axis_index("core")
            start = 0 if BROKEN else core * half

            def scoped(sem):
                copy = pltpu.make_async_copy(x_ref.at[pl.ds(start, half)], o_ref.at[pl.ds(start, half)], sem)
                copy.start()
                copy.wait()

            pl.run_scoped(scoped, pltpu.SemaphoreType.DMA)

    return run((x, jnp.zeros_like(x)))[1]


mesh = jax.make_mesh((jax.device_count(),), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
copy = jax.jit(jax.shard_map(per_shard, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
out = copy(jnp.ones((16 * jax.device_count(), 128), jnp.float32))
