"""A right permute written by hand whose receive goes through arithmetic on the way out:
`o_ref[...] = scratch[...] * SCALE + BIAS` (ringc check --param scale=2 --param op=neg ...).

op selects the arithmetic on the received block:
- mul: `scratch * scale` (scale=1: `* 1.0`, the identity; scale=2: twice a permute, NOT a permute)
- add0: `scratch + 0`
- cast: `scratch.astype(float32)` (same dtype), and `astype(bfloat16)` when cast=1 (narrowing)
- neg: `-scratch`
- tanh: `jnp.tanh(scratch)`: pointwise, followed as an uninterpreted f
- bias: `scratch * 1.0 + b_ref` with b a second input that is not part of the collective
- square: `scratch * scratch`, a product of two tensors ringc does not follow (a note)
- ones: stores a constant (never a collective's value: a wrong_result, not a note)
- full_mul: `scratch * jnp.full(shape, scale)`: scaling by a broadcast constant
- exp_before: the sender applies exp before sending (into a VMEM buffer), the receiver stores
  what it got; exp_after: the receiver applies exp. Both hold exp of the left block.
"""

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
IN_SPECS = (P("x", None), P("x", None))
OUT_SPECS = P("x", None)


def kernel(x_ref, b_ref, o_ref, scratch, staged, send_sem, recv_sem, *, op, scale):
    my_id = lax.axis_index("x")
    right = lax.rem(my_id + 1, lax.psum(1, "x"))
    src = x_ref
    if op == "exp_before":
        staged[...] = jnp.exp(x_ref[...])
        src = staged
    copy = pltpu.make_async_remote_copy(src_ref=src, dst_ref=scratch, send_sem=send_sem, recv_sem=recv_sem,
                                        device_id=(right,), device_id_type=pltpu.DeviceIdType.MESH)
    copy.start()
    copy.wait_recv()
    if op == "mul":
        o_ref[...] = scratch[...] * scale
    elif op == "add0":
        o_ref[...] = scratch[...] + 0
    elif op == "cast":
        o_ref[...] = scratch[...].astype(jnp.float32)
    elif op == "narrow":
        o_ref[...] = scratch[...].astype(jnp.bfloat16).astype(jnp.float32)
    elif op == "neg":
        o_ref[...] = -scratch[...]
    elif op == "tanh":
        o_ref[...] = jnp.tanh(scratch[...])
    elif op == "bias":
        o_ref[...] = scratch[...] * 1.0 + b_ref[...]
    elif op == "square":
        o_ref[...] = scratch[...] * scratch[...]
    elif op == "exp_before":
        o_ref[...] = scratch[...]
    elif op == "exp_after":
        o_ref[...] = jnp.exp(scratch[...])
    elif op == "ones":
        o_ref[...] = jnp.ones(o_ref.shape, o_ref.dtype)
    elif op == "full_mul":
        o_ref[...] = scratch[...] * jnp.full(o_ref.shape, scale, o_ref.dtype)
    copy.wait_send()


def build(mesh, *, interpret=None, rows=8, cols=128, op="mul", scale=1.0):
    call = pl.pallas_call(
        functools.partial(kernel, op=op, scale=scale),
        out_shape=jax.ShapeDtypeStruct((rows, cols), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((rows, cols), jnp.float32), pltpu.VMEM((rows, cols), jnp.float32), pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        interpret=pltpu.InterpretParams() if interpret else False,
    )
    return jax.jit(jax.shard_map(call, mesh=mesh, in_specs=IN_SPECS, out_specs=OUT_SPECS, check_vma=False))


def make_inputs(mesh, key, *, rows=8, cols=128, **params):
    n = mesh.shape["x"]
    x = jax.random.normal(jax.random.key(key), (2, n * rows, cols), jnp.float32)
    return tuple(jax.device_put(a, jax.sharding.NamedSharding(mesh, P("x", None))) for a in x)
