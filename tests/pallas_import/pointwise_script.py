"""A script whose kernel applies tanh to what it receives, next to a lax reference. The
reference names the meaning, elementwise functions included (POINTWISE_REFERENCE in the
environment, set by the test):

- after (default): `jnp.tanh(lax.ppermute(x))`: the kernel computes it (ok);
- before: `lax.ppermute(jnp.tanh(x))`: the same meaning, tanh commutes with moving data (ok);
- plain: `lax.ppermute(x)`: the kernel's tanh is a wrong_result;
- twice: `lax.ppermute(2.0 * x)`: not what the kernel computes (wrong_result)."""

import os

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec
REFERENCE = os.environ.get("POINTWISE_REFERENCE", "after")


def kernel(x_ref, o_ref, scratch, send_sem, recv_sem):
    right = lax.rem(lax.axis_index("x") + 1, lax.psum(1, "x"))
    copy = pltpu.make_async_remote_copy(src_ref=x_ref, dst_ref=scratch, send_sem=send_sem, recv_sem=recv_sem,
                                        device_id=(right,), device_id_type=pl.DeviceIdType.MESH)
    copy.start()
    copy.wait_recv()
    o_ref[...] = jnp.tanh(scratch[...])
    copy.wait_send()


n = jax.device_count()
mesh = jax.make_mesh((n,), ("x",))
call = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                      in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                      out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                      scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)] + [pltpu.SemaphoreType.DMA] * 2)
x = jax.device_put(jnp.ones((8 * n, 128), jnp.float32), jax.sharding.NamedSharding(mesh, P("x", None)))
out = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x", None), out_specs=P("x", None), check_vma=False))(x)

perm = [(i, (i + 1) % n) for i in range(n)]
body = {"after": lambda x: jnp.tanh(lax.ppermute(x, "x", perm)),
        "before": lambda x: lax.ppermute(jnp.tanh(x), "x", perm),
        "plain": lambda x: lax.ppermute(x, "x", perm),
        "twice": lambda x: lax.ppermute(2.0 * x, "x", perm)}[REFERENCE]
ref = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x", None), out_specs=P("x", None)))(x)
