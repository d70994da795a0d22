"""A right permute written by hand, the way the Pallas distributed tutorial writes it:
every device sends its block to its right neighbour with one remote DMA, then reads
what its left neighbour sent.

With WAIT_RECV_AFTER_READ set (ringc check --param late=1), the receive wait comes after
the kernel reads the received block: a race."""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec
COLLECTIVE = "ppermute"
SHIFT = 1
AXIS = "x"
IN_SPECS = (P("x", None),)
OUT_SPECS = P("x", None)


def right_permute_kernel(x_ref, out_ref, recv_buf, send_sem, recv_sem, *, late):
    my_id = lax.axis_index("x")
    num_devices = lax.psum(1, "x")
    right = lax.rem(my_id + 1, num_devices)
    copy = pltpu.make_async_remote_copy(
        src_ref=x_ref,
        dst_ref=recv_buf,
        send_sem=send_sem,
        recv_sem=recv_sem,
        device_id=(right,),
        device_id_type=pltpu.DeviceIdType.MESH,
    )
    copy.start()
    if not late:
        copy.wait_recv()
    out_ref[...] = recv_buf[...]
    if late:
        copy.wait_recv()
    copy.wait_send()


def build(mesh, *, interpret=None, rows=8, cols=128, late=0):
    kernel = pl.pallas_call(
        functools.partial(right_permute_kernel, late=bool(late)),
        out_shape=jax.ShapeDtypeStruct((rows, cols), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((rows, cols), jnp.float32), pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        interpret=pltpu.InterpretParams() if interpret else False,
    )
    return jax.jit(jax.shard_map(kernel, mesh=mesh, in_specs=IN_SPECS, out_specs=OUT_SPECS, check_vma=False))


def make_inputs(mesh, key, *, rows=8, cols=128, late=0):
    n = mesh.shape["x"]
    x = jax.random.normal(jax.random.key(key), (n * rows, cols), jnp.float32)
    return (jax.device_put(x, jax.sharding.NamedSharding(mesh, P("x", None))),)
