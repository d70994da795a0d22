"""A `lax.cond` that chooses between two kernels (a serving stack's decode or prefill path):
the branch whose index is known before the run is the one checked, and the verdict says so.
Inside shard_map, every device takes the branch of the mode the script passed.

COND_CASE picks a variant: `copy` (mode 1: the copy kernel, which waits for its copy: ok),
`nowait` (mode 0: the kernel that never waits: dma_not_waited), `data` (the branch depends on
tensor data: refused at the cond's line, naming what to do)."""

import os

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

CASE = os.environ.get("COND_CASE", "copy")
ANY = pl.BlockSpec(memory_space=pl.ANY)


def copy_kernel(x_hbm, o_hbm, sem):
    copy = pltpu.make_async_copy(x_hbm, o_hbm, sem)
    copy.start()
    copy.wait()


def nowait_kernel(x_hbm, o_hbm, sem):
    pltpu.make_async_copy(x_hbm, o_hbm, sem).start()


def launch(kernel, x):
    return pl.pallas_call(kernel, in_specs=[ANY], out_specs=ANY, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          scratch_shapes=[pltpu.SemaphoreType.DMA(())])(x)


def per_shard(mode, x):
    take = (x[0, 0] > 0) if CASE == "data" else (mode[0] > 0)
    return jax.lax.cond(take, lambda x: launch(copy_kernel, x), lambda x: launch(nowait_kernel, x), x)


mesh = jax.make_mesh((jax.device_count(),), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
run = jax.jit(jax.shard_map(per_shard, mesh=mesh, in_specs=(P(), P("x")), out_specs=P("x"), check_vma=False))
out = run(jnp.array([0 if CASE == "nowait" else 1], jnp.int32), jnp.ones((8 * jax.device_count(), 128), jnp.float32))
