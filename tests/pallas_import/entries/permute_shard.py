"""A per-shard launcher, the way kernel libraries write them: `right_permute(x)` calls
`pl.pallas_call` on one device's shard and must run inside the caller's `jax.shard_map`
over a mesh axis named "tp" (the name is fixed in the kernel). It takes arrays only.

With `late=1` (ringc check --param late=1) the receive wait comes after the kernel reads the
received block: a race, and the wait is late."""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

TP = "tp"


def _permute_kernel(x_ref, out_ref, recv_buf, send_sem, recv_sem, *, late):
    me = lax.axis_index(TP)
    right = lax.rem(me + 1, lax.axis_size(TP))
    copy = pltpu.make_async_remote_copy(src_ref=x_ref, dst_ref=recv_buf, send_sem=send_sem, recv_sem=recv_sem,
                                        device_id=(right,), device_id_type=pltpu.DeviceIdType.MESH)
    copy.start()
    if not late:
        copy.wait_recv()
    out_ref[...] = recv_buf[...]
    if late:
        copy.wait_recv()
    copy.wait_send()


def right_permute(x: jax.Array, late: int = 0) -> jax.Array:
    return pl.pallas_call(
        functools.partial(_permute_kernel, late=bool(late)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM(x.shape, x.dtype), pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
    )(x)
