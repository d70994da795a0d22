"""A single-device kernel as tutorials and serving stacks write them, called at top level
with no shard_map: x (in HBM) is copied into VMEM in two halves, double-buffered, each half
on its own DMA semaphore, and doubled into the output. ringc checks it as one chip's
program (N = 1). `SHARED_SEM = True` is the bug JetStream's chunked prefill has (sweep 8):
both halves' copies on one semaphore, so the first wait can be satisfied by the second
copy's bytes and the first half read before it landed."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

SHARED_SEM = False


def double_halves(x_hbm, o_ref, buf, sems):
    second = 0 if SHARED_SEM else 1
    first_copy = pltpu.make_async_copy(x_hbm.at[pl.ds(0, 8)], buf.at[0], sems.at[0])
    second_copy = pltpu.make_async_copy(x_hbm.at[pl.ds(8, 8)], buf.at[1], sems.at[second])
    first_copy.start()
    second_copy.start()
    first_copy.wait()
    o_ref[pl.ds(0, 8), :] = buf[0] * 2
    second_copy.wait()
    o_ref[pl.ds(8, 8), :] = buf[1] * 2


x = jnp.arange(16 * 128, dtype=jnp.float32).reshape(16, 128)
out = jax.jit(pl.pallas_call(
    double_halves, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
    in_specs=[pl.BlockSpec(memory_space=pltpu.ANY)],
    scratch_shapes=[pltpu.VMEM((2, 8, 128), jnp.float32), pltpu.SemaphoreType.DMA((2,))]))(x)
