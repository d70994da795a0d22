"""A right permute of a bfloat16 KV block through uint32 views, the way ragged paged
attention moves packed KV (tpu-inference's rpa_v3_cp kernel): the DMA copies
`x_ref.bitcast(jnp.uint32)` into `recv_ref.bitcast(jnp.uint32)` (a [16, 128] bfloat16 ref
is an [8, 128] uint32 one: row r packs rows 2r and 2r + 1), the kernel reads the keys back
with a strided load of the uint32 view (every other row) and stores the whole block.

--param late=1 waits for the receive after the strided load: a race on the rows it reads.
--param strided_store=1 stores through a strided slice, which ringc does not model; --param
strided_view=1 bitcasts a strided slice, which it refuses too."""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec
AXIS = "x"


def packed_kv_kernel(x_ref, out_ref, keys_ref, recv_ref, send_sem, recv_sem, *, late, strided_store, strided_view):
    me = lax.axis_index("x")
    right = lax.rem(me + 1, lax.psum(1, "x"))
    copy = pltpu.make_async_remote_copy(
        src_ref=x_ref.bitcast(jnp.uint32),
        dst_ref=recv_ref.bitcast(jnp.uint32),
        send_sem=send_sem,
        recv_sem=recv_sem,
        device_id=(right,),
        device_id_type=pltpu.DeviceIdType.MESH,
    )
    copy.start()
    if not late:
        copy.wait_recv()
    if strided_view:
        keys = recv_ref.at[pl.ds(0, 8, 2)].bitcast(jnp.uint32)[...]
    else:
        keys = recv_ref.bitcast(jnp.uint32)[pl.ds(0, 4, 2)]
    if strided_store:
        keys_ref.bitcast(jnp.uint32)[pl.ds(0, 2, 2)] = keys[0:2]
    else:
        keys_ref.bitcast(jnp.uint32)[...] = keys
    if late:
        copy.wait_recv()
    out_ref[...] = recv_ref[...]
    copy.wait_send()


def packed_kv(x, *, axis_name="x", late=0, strided_store=0, strided_view=0):
    del axis_name
    rows, cols = x.shape
    return pl.pallas_call(
        functools.partial(packed_kv_kernel, late=bool(late), strided_store=bool(strided_store),
                          strided_view=bool(strided_view)),
        out_shape=(jax.ShapeDtypeStruct((rows, cols), x.dtype), jax.ShapeDtypeStruct((rows // 2, cols), x.dtype)),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=(pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pltpu.VMEM)),
        scratch_shapes=[pltpu.VMEM((rows, cols), x.dtype), pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
    )(x)
