"""A kernel over both TensorCores of each chip, written by hand with `pl.kernel` over the
TensorCore mesh: core c copies its half of the rows of x into the left neighbour's out, on
the same core there, then waits for its own half to arrive. `--param same_rows=1` makes both
cores send the first half (a race on the neighbour's rows, the second half never written)."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P


def _kernel(x_ref, o_ref, send_sem, recv_sem, *, axis, same_rows):
    me = jax.lax.axis_index(axis)
    n = jax.lax.axis_size(axis)
    core = jax.lax.axis_index("core")
    half = x_ref.shape[0] // 2
    start = 0 if same_rows else core * half
    copy = pltpu.make_async_remote_copy(
        x_ref.at[pl.ds(start, half)], o_ref.at[pl.ds(start, half)], send_sem, recv_sem,
        device_id={axis: jax.lax.rem(me + n - 1, n), "core": core},
        device_id_type=pltpu.DeviceIdType.MESH)
    copy.start()
    copy.wait()


def shift_left(x, axis_name: str = "x", same_rows: int = 0):
    """Per shard: this device's rows go to the device before it, half from each core."""
    return pl.kernel(functools.partial(_kernel, axis=axis_name, same_rows=same_rows),
                     out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                     mesh=pltpu.create_tensorcore_mesh("core", num_cores=2),
                     scratch_types=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA])(x)


def run(x, mesh, same_rows: int = 0):
    return jax.jit(jax.shard_map(functools.partial(shift_left, same_rows=same_rows), mesh=mesh,
                                 in_specs=P("x"), out_specs=P("x"), check_vma=False))(x)
