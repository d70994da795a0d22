"""Each TensorCore copies 8 rows of x, from the offset the caller passes, into its half of out:
the offset is an int32 array copied into SMEM inside the kernel, as JAX's core_map guide
prefetches an index. `OFFSET` past the shard's 16 rows makes each copy read outside x."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

OFFSET = 4


def _kernel(refs, out_ref, offset_smem, sem):
    x_ref, offset_ref = refs
    core = jax.lax.axis_index("core")
    pltpu.sync_copy(offset_ref, offset_smem)
    start = offset_smem[0]
    pltpu.async_copy(x_ref.at[pl.ds(start, 8)], out_ref.at[pl.ds(core * 8, 8)], sem).wait()


def per_shard(x, offset):
    return pl.kernel(_kernel, out_type=jax.ShapeDtypeStruct((16, 128), x.dtype),
                     mesh=pltpu.create_tensorcore_mesh("core", num_cores=2),
                     scratch_types=[pltpu.SMEM((1,), jnp.int32), pltpu.SemaphoreType.DMA])((x, offset))


mesh = jax.make_mesh((jax.device_count(),), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
run = jax.jit(jax.shard_map(per_shard, mesh=mesh, in_specs=(P("x"), P()), out_specs=P("x"), check_vma=False))
out = run(jnp.ones((16 * jax.device_count(), 128), jnp.float32), jnp.array([OFFSET], jnp.int32))
