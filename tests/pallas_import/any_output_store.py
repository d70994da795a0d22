"""A right permute whose output lives in HBM (`memory_space=pl.ANY`, as JAX's interpret-mode
tests write it) and is stored directly: `o_ref[...] = scratch[...]` after the receive.

--param early=1 stores before the receive wait: a race on the landing buffer."""

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


def kernel(x_ref, o_ref, scratch, send_sem, recv_sem, *, early):
    right = lax.rem(lax.axis_index("x") + 1, lax.psum(1, "x"))
    copy = pltpu.make_async_remote_copy(src_ref=x_ref, dst_ref=scratch, send_sem=send_sem, recv_sem=recv_sem,
                                        device_id=(right,), device_id_type=pl.DeviceIdType.MESH)
    copy.start()
    if early:
        o_ref[...] = scratch[...]
    copy.wait_recv()
    if not early:
        o_ref[...] = scratch[...]
    copy.wait_send()


def build(mesh, *, interpret=None, rows=8, cols=128, early=0):
    call = pl.pallas_call(
        functools.partial(kernel, early=bool(early)),
        out_shape=jax.ShapeDtypeStruct((rows, cols), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((rows, cols), jnp.float32), pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        interpret=pltpu.InterpretParams() if interpret else False,
    )
    return jax.jit(jax.shard_map(call, mesh=mesh, in_specs=IN_SPECS, out_specs=OUT_SPECS, check_vma=False))


def make_inputs(mesh, key, *, rows=8, cols=128, **params):
    n = mesh.shape["x"]
    x = jax.random.normal(jax.random.key(key), (n * rows, cols), jnp.float32)
    return (jax.device_put(x, jax.sharding.NamedSharding(mesh, P("x", None))),)
