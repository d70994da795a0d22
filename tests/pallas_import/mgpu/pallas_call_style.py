"""A multi-GPU Mosaic GPU kernel written with `pl.pallas_call` (as JAX's 0.8-0.9
distributed GPU tests write them: whole operands in GMEM, semaphores in `scratch_shapes`,
no compiler params) over a grid of 2 blocks, each sending its half of the rows to the next
GPU. With BROKEN, the signal goes before the store: the receiver may read the rows first."""
import jax
from jax import lax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

P = jax.sharding.PartitionSpec
N = jax.device_count()
BROKEN = False
mesh = jax.make_mesh((N,), ("x",))


def kernel(x_ref, y_ref, sem):
  right = lax.rem(lax.axis_index("x") + 1, N)
  rows = pl.ds(pl.program_id(0) * 8, 8)
  if BROKEN:
    pl.semaphore_signal(sem, device_id=right)
  plgpu.remote_ref(y_ref, right)[rows] = x_ref[rows]
  if not BROKEN:
    pl.semaphore_signal(sem, device_id=right)
  pl.semaphore_wait(sem)
  y_ref[rows] = y_ref[rows] + 1


permute = pl.pallas_call(
    kernel,
    grid=(2,),
    in_specs=[pl.BlockSpec(memory_space=plgpu.GMEM)],
    out_specs=pl.BlockSpec(memory_space=plgpu.GMEM),
    out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
    scratch_shapes=[plgpu.SemaphoreType.REGULAR],
)

y = jax.jit(jax.shard_map(permute, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                          check_vma=False))(jnp.zeros((16 * N, 128), jnp.float32))
