"""A right permute whose make_inputs needs concrete values: it draws a random shift and turns
it into a Python int (`int(jax.random.randint(...))`), as test helpers do. Traced (under
`jax.eval_shape`) that is a ConcretizationTypeError; ringc runs make_inputs for real instead.

--param late=1 reads the received block before waiting for it: a race."""

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


def kernel(x_ref, o_ref, scratch, send_sem, recv_sem, *, late):
    right = lax.rem(lax.axis_index("x") + 1, lax.psum(1, "x"))
    copy = pltpu.make_async_remote_copy(src_ref=x_ref, dst_ref=scratch, send_sem=send_sem, recv_sem=recv_sem,
                                        device_id=(right,), device_id_type=pl.DeviceIdType.MESH)
    copy.start()
    if not late:
        copy.wait_recv()
    o_ref[...] = scratch[...]
    if late:
        copy.wait_recv()
    copy.wait_send()


def build(mesh, *, interpret=None, rows=8, cols=128, late=0):
    call = pl.pallas_call(
        functools.partial(kernel, late=bool(late)),
        out_shape=jax.ShapeDtypeStruct((rows, cols), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((rows, cols), jnp.float32), pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        interpret=pltpu.InterpretParams() if interpret else False,
    )
    return jax.jit(jax.shard_map(call, mesh=mesh, in_specs=IN_SPECS, out_specs=OUT_SPECS, check_vma=False))


def make_inputs(mesh, key, *, rows=8, cols=128, **params):
    n = mesh.shape["x"]
    k1, k2 = jax.random.split(jax.random.key(key))
    shift = int(jax.random.randint(k1, (), 0, n * rows))  # concrete: a Python int
    x = jnp.roll(jnp.arange(n * rows * cols, dtype=jnp.float32).reshape(n * rows, cols), shift, axis=0)
    return (jax.device_put(x, jax.sharding.NamedSharding(mesh, P("x", None))),)
