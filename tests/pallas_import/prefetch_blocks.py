"""A pipelined gather: the BlockSpec's index map reads the block to fetch from a scalar-prefetch
table (`lambda i, ids: (ids[i], 0)`), as paged-attention and MoE kernels do; each device copies
its blocks in table order (COLLECTIVE = None: races and bounds only).

--param bad=1 puts a block index past the array into the table: the pipeline's fetch reads out
of range, an out_of_bounds finding at the kernel's line naming the SMEM read."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec
COLLECTIVE = None
AXIS = "x"
IN_SPECS = (P(), P("x", None))
OUT_SPECS = P("x", None)
BLOCKS = 4


def kernel(ids_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...]


def build(mesh, *, interpret=None, bad=0):
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((BLOCKS * 8, 128), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(BLOCKS,),
            in_specs=[pl.BlockSpec((8, 128), lambda i, ids: (ids[i], 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i, ids: (i, 0))),
        interpret=pltpu.InterpretParams() if interpret else False,
    )
    return jax.jit(jax.shard_map(call, mesh=mesh, in_specs=IN_SPECS, out_specs=OUT_SPECS, check_vma=False))


def make_inputs(mesh, key, *, bad=0):
    n = mesh.shape["x"]
    ids = np.array([3, 1, 2, 0], np.int32)
    if bad:
        ids[2] = BLOCKS
    x = jax.random.normal(jax.random.key(key), (n * BLOCKS * 8, 128), jnp.float32)
    return (jnp.asarray(ids), jax.device_put(x, jax.sharding.NamedSharding(mesh, P("x", None))))
