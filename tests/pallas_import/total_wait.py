"""A right permute sent in two halves and waited once for their total, by hand: the two
remote copies share one send and one receive semaphore, and a third descriptor over the
whole block, never started, is used only for its waits (its size is the halves' total).
A DMA semaphore counts bytes from whichever DMA delivers them, so each wait completes
when both halves are in: correct, and ringc accepts it.

With `--param short=1` the waits use the first half's descriptor instead: a total short
by one DMA. Then the wait can pass with either half still landing (the other supplies the
bytes it counts), one half is never waited, and reading the buffer races with a copy."""

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


def total_wait_kernel(x_ref, out_ref, recv_buf, send_sem, recv_sem, *, half, short):
    my_id = lax.axis_index("x")
    right = lax.rem(my_id + 1, lax.psum(1, "x"))

    def copy(rows):
        return pltpu.make_async_remote_copy(
            src_ref=x_ref.at[rows], dst_ref=recv_buf.at[rows], send_sem=send_sem, recv_sem=recv_sem,
            device_id=(right,), device_id_type=pl.DeviceIdType.MESH)

    first, second = copy(pl.ds(0, half)), copy(pl.ds(half, half))
    first.start()
    second.start()
    # The total: never started, sized to both halves, used only for its waits.
    waited = first if short else copy(pl.ds(0, 2 * half))
    waited.wait_recv()
    out_ref[...] = recv_buf[...]
    waited.wait_send()


def build(mesh, *, interpret=None, rows=8, cols=128, short=0):
    kernel = pl.pallas_call(
        functools.partial(total_wait_kernel, half=rows // 2, short=bool(short)),
        out_shape=jax.ShapeDtypeStruct((rows, cols), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((rows, cols), jnp.float32), pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        interpret=pltpu.InterpretParams() if interpret else False,
    )
    return jax.jit(jax.shard_map(kernel, mesh=mesh, in_specs=IN_SPECS, out_specs=OUT_SPECS, check_vma=False))


def make_inputs(mesh, key, *, rows=8, cols=128, short=0):
    n = mesh.shape["x"]
    x = jax.random.normal(jax.random.key(key), (n * rows, cols), jnp.float32)
    return (jax.device_put(x, jax.sharding.NamedSharding(mesh, P("x", None))),)
