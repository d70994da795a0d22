"""An SMEM count computed before the kernel by indexing one integer input with another, as
serving stacks' ragged kernels do (`num_tokens = query_start_loc[num_seqs]`), then used to
size the kernel's loop and copies: a last, partial tile copies the rows left.

`total[last[-1]]` is a dynamic_slice whose index is a squeeze of a slice: its value must be
followed (it bounds the loop and sizes every copy). PREFETCH_LAST picks the entry: 2 gives
20 rows (two tiles and a half), 3 gives 40 rows, past the 32-row array: the fifth tile's
copy runs out of it.
"""

import os

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

TILE, TILES = 8, 4
LAST = int(os.environ.get("PREFETCH_LAST", "2"))


def add_one_rows(count_ref, x_hbm, o_hbm, buf, sem):
    rows = count_ref[0]

    @pl.loop(0, (rows + TILE - 1) // TILE)   # the tiles the count covers
    def _(t):
        start = t * TILE
        size = jnp.minimum(rows - start, TILE)
        load = pltpu.make_async_copy(x_hbm.at[pl.ds(start, size)], buf.at[pl.ds(0, size)], sem)
        load.start()
        load.wait()
        buf[...] = buf[...] + 1.0
        store = pltpu.make_async_copy(buf.at[pl.ds(0, size)], o_hbm.at[pl.ds(start, size)], sem)
        store.start()
        store.wait()


@jax.jit
def add_one(x, total, last):
    count = total[last[-1]].reshape(1)
    return pl.pallas_call(
        add_one_rows,
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        scratch_shapes=[pltpu.VMEM((TILE, 128), jnp.float32), pltpu.SemaphoreType.DMA],
    )(count, x)


y = add_one(jnp.zeros((TILES * TILE, 128), jnp.float32), jnp.array([0, 8, 20, 40], jnp.int32),
            jnp.array([0, 1, LAST], jnp.int32))
