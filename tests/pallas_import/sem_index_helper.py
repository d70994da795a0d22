"""A semaphore array of 2 indexed at INDEX through a helper that starts the remote copy (as
MIT 6.S894 lab solutions write it): INDEX = 2 is out of range."""
import jax
from jax import lax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec
N = jax.device_count()
INDEX = 2
mesh = jax.make_mesh((N,), ("x",))


def rdma_start(src, dst, dev, send_sem, recv_sem):   # helper, like the lab's
  pltpu.make_async_remote_copy(src, dst, send_sem, recv_sem, device_id=(dev,),
                               device_id_type=pltpu.DeviceIdType.MESH).start()


def kernel(x_ref, o_ref, send_sems, recv_sems):
  right = lax.rem(lax.axis_index("x") + 1, N)
  rdma_start(x_ref, o_ref, right, send_sems.at[0], recv_sems.at[INDEX])  # shape (2,)
  c = pltpu.make_async_remote_copy(x_ref, o_ref, send_sems.at[0], recv_sems.at[INDEX],
                                   device_id=(right,), device_id_type=pltpu.DeviceIdType.MESH)
  c.wait_send()
  c.wait_recv()


f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                   in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
                   out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                   scratch_shapes=[pltpu.SemaphoreType.DMA((2,)), pltpu.SemaphoreType.DMA((2,))])
jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))(
    jnp.zeros((8 * N, 128), jnp.float32))
