"""A mesh laid out from JAX's own device list, as tpu-inference's `make_optimized_mesh` does
(`sorted(xla_bridge.devices(), key=lambda d: d.coords)`): every route to the devices
(`jax._src.xla_bridge`'s and `jax`'s) must give the N devices the script runs on, each
answering `coords`; then the right permute over them is checked."""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax._src import xla_bridge as xb
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec
n = xb.device_count()
assert n == jax.device_count() == xb.local_device_count() == jax.local_device_count()
assert len(xb.local_devices()) == len(jax.local_devices()) == n
devices = sorted(xb.devices(), key=lambda d: d.coords)
mesh = jax.sharding.Mesh(np.array(devices), ("x",))


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
