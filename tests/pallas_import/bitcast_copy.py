"""A DMA from a bitcast view of an HBM input, as JAX's TPU tests write one: an (8, 128)
array of 32-bit elements seen as (16, 128) of 16-bit ones, copied into a 16-bit output.

BITCAST_CASE picks the types: `ints` (int32 seen as int16 into int16: integers whose values
ringc follows), `floats` (float32 seen as bfloat16 into bfloat16) and `mismatch` (float32
seen as int16 into bfloat16: the copy moves int16 into bfloat16, which Mosaic refuses).
"""

import os

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CASE = os.environ.get("BITCAST_CASE", "ints")
SOURCE, VIEW, OUT = {"ints": (jnp.int32, jnp.int16, jnp.int16),
                     "floats": (jnp.float32, jnp.bfloat16, jnp.bfloat16),
                     "mismatch": (jnp.float32, jnp.int16, jnp.bfloat16)}[CASE]


def copy_viewed(src_hbm, dst_hbm, sem):
    copy = pltpu.make_async_copy(src_hbm.bitcast(VIEW), dst_hbm, sem)
    copy.start()
    copy.wait()


@jax.jit
def run(x):
    return pl.pallas_call(
        copy_viewed,
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        out_shape=jax.ShapeDtypeStruct((16, 128), OUT),
        scratch_shapes=[pltpu.SemaphoreType.DMA],
    )(x)


y = run(jnp.arange(8 * 128, dtype=SOURCE).reshape(8, 128))
