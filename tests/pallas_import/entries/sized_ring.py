"""A ragged ring step in the style of a grouped-matmul reduce-scatter (tpu-inference's
gmm_fused_rs): each device sends the first `sizes[me]` rows of its block to its right
neighbour, and the receiver, which knows the block is `ROWS` rows, waits for all of them.
The kernel's contract: every entry of `sizes` is ROWS (the routing fills each block).

ringc fills an integer array given without a value with zeros, which breaks the contract:
nothing is sent and the wait hangs, a finding that comes from the made-up inputs. With
`--arg 'sizes=int32[N]@=np.full(N, 8)'` the kernel is checked on values that keep it; with
`=np.full(N, 4)` it hangs for real (half the rows never come)."""

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

ROWS = 8


def _kernel(sizes_ref, x_ref, o_ref, send_sem, recv_sem):
    me = lax.axis_index("x")
    right = lax.rem(me + 1, lax.psum(1, "x"))
    rows = sizes_ref[me]
    send = pltpu.make_async_remote_copy(src_ref=x_ref.at[pl.ds(0, rows)], dst_ref=o_ref.at[pl.ds(0, rows)],
                                        send_sem=send_sem, recv_sem=recv_sem, device_id=(right,),
                                        device_id_type=pl.DeviceIdType.MESH)
    send.start()
    whole = pltpu.make_async_remote_copy(src_ref=x_ref, dst_ref=o_ref, send_sem=send_sem, recv_sem=recv_sem,
                                         device_id=(right,), device_id_type=pl.DeviceIdType.MESH)
    whole.wait_recv()
    send.wait_send()


def sized_ring(sizes, x, *, axis_name="x"):
    del axis_name
    return pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(1,),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA] * 2),
    )(sizes, x)
