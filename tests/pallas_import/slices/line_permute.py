"""A right permute over a one-axis mesh of every device, laid out the way JAX's
`ops/tpu/all_gather.py` and tpu-inference's collectives lay theirs out
(`jax.sharding.Mesh(jax.devices(), ("x",))`): with `--topology v5e:2x2` its 4 devices are the
slice's 4 chips in `jax.devices()` order, x fastest, (0,0) (1,0) (0,1) (1,1), so device 1's
send to device 2 crosses two links and device 3 sits at (1, 1)."""

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec
n = jax.device_count()
mesh = jax.sharding.Mesh(jax.devices(), ("x",))


def kernel(x_ref, o_ref, send_sem, recv_sem):
    right = lax.rem(lax.axis_index("x") + 1, n)
    copy = pltpu.make_async_remote_copy(src_ref=x_ref, dst_ref=o_ref, send_sem=send_sem, recv_sem=recv_sem,
                                        device_id=(right,), device_id_type=pltpu.DeviceIdType.MESH)
    copy.start()
    copy.wait()


permute = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                         in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec(memory_space=pl.ANY),
                         scratch_shapes=[pltpu.SemaphoreType.DMA] * 2)
x = jnp.zeros((8 * n, 128), jnp.float32)
y = jax.jit(jax.shard_map(permute, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))(x)
