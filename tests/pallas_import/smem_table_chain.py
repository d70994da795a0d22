"""An index table computed by one pallas_call into an SMEM output and read by the next as an
SMEM input (tpu-inference's fused GDN kernels compute their chunk tables so): kernel 1
writes the row to copy and its double-buffer slot; kernel 2 copies that row of x through
slot `row % 2` of a VMEM buffer, unless the row's boolean flag (a script argument, cast to
int32 for SMEM) says to zero it instead.

CHAIN_ROW picks the row kernel 1 computes (from the script's `n`): 7 is the last row of x,
8 is past its end (an out_of_bounds finding naming the SMEM read)."""

import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

ROW = int(os.environ.get("CHAIN_ROW", "7"))
SMEM = pl.BlockSpec(memory_space=pltpu.SMEM)
ANY = pl.BlockSpec(memory_space=pl.ANY)


def table_kernel(n_ref, table_ref):
    table_ref[0] = n_ref[0] + 1      # the row to copy
    table_ref[1] = (n_ref[0] + 1) % 2  # its slot


def copy_kernel(table_ref, flags_ref, x_hbm, o_hbm, buf, sems):
    row, slot = table_ref[0], table_ref[1]

    @pl.when(flags_ref[row % 8] == 0)
    def _zero():
        o_hbm[0:1, :] = jnp.zeros((1, 128), jnp.float32)

    @pl.when(flags_ref[row % 8] != 0)
    def _copy():
        load = pltpu.make_async_copy(x_hbm.at[pl.ds(row, 1)], buf.at[pl.ds(slot, 1)], sems.at[slot])
        load.start()
        load.wait()
        store = pltpu.make_async_copy(buf.at[pl.ds(slot, 1)], o_hbm.at[pl.ds(0, 1)], sems.at[slot])
        store.start()
        store.wait()


@jax.jit
def run(n, flags, x):
    table = pl.pallas_call(table_kernel, in_specs=[SMEM], out_specs=SMEM,
                           out_shape=jax.ShapeDtypeStruct((2,), jnp.int32))(n)
    return pl.pallas_call(copy_kernel, in_specs=[SMEM, SMEM, ANY], out_specs=ANY,
                          out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                          scratch_shapes=[pltpu.VMEM((2, 128), jnp.float32),
                                          pltpu.SemaphoreType.DMA((2,))])(table, flags.astype(jnp.int32), x)


flags = np.ones(8, np.bool_)
result = run(jnp.array([ROW - 1], jnp.int32), jnp.array(flags), jnp.ones((8, 128), jnp.float32))
