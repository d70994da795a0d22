"""Blocks that do not divide the array, as published kernels write them: a script (no
build(mesh)) whose first kernel runs `pltpu.emit_pipeline` over a 300 x 200 float32 array
in 128 x 128 blocks, and whose second copies the last rows of an HBM array by hand.

emit_pipeline rounds a partial last block up to whole (8, 128) tiles (rows 256:304, lanes
128:256 of a 300 x 200 array): a TPU stores the array in those tiles, so the DMA stays inside
its memory, and the kernel masks what the padding holds. ROWS sets how many rows the
hand-written copy moves from row 296: 8 ends inside the tile padding (rows 296:304 of 300,
tiled to 304), 16 runs past it (296:312): an access out of the array.
"""

import os

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

ROWS = int(os.environ.get("PADDED_ROWS", "8"))
M, N, B = 300, 200, 128


def add_one_block(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def add_one_kernel(x_hbm, o_hbm):
    pltpu.emit_pipeline(
        add_one_block,
        grid=(pl.cdiv(M, B), pl.cdiv(N, B)),
        in_specs=[pl.BlockSpec((B, B), lambda i, j: (i, j))],
        out_specs=pl.BlockSpec((B, B), lambda i, j: (i, j)),
    )(x_hbm, o_hbm)


@jax.jit
def add_one(x):
    return pl.pallas_call(
        add_one_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
    )(x)


def tail_kernel(x_hbm, o_ref, buf, sem):
    start = pl.multiple_of(296 + pl.program_id(0) * ROWS, 8)   # traced, as a block's start is
    copy = pltpu.make_async_copy(x_hbm.at[pl.ds(start, ROWS)], buf, sem)
    copy.start()
    copy.wait()
    o_ref[...] = buf[0:4]


@jax.jit
def tail(x):
    return pl.pallas_call(
        tail_kernel,
        grid=(1,),
        out_shape=jax.ShapeDtypeStruct((4, 256), x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((ROWS, 256), jnp.float32), pltpu.SemaphoreType.DMA(())],
    )(x)


x = jnp.zeros((M, N), jnp.float32)
y = add_one(x)
t = tail(jnp.zeros((M, 256), jnp.float32))
