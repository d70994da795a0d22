"""A Mosaic GPU test module in the style of JAX's 0.7-0.9 distributed GPU tests
(`tests/pallas/gpu_pallas_distributed_test.py` at jax-v0.8.0): a `MultiProcessTest` base, one
process per GPU (skipped on one process), the removed `mgpu.supports_cross_device_collectives`
asked in setUp, and `jt_multiprocess.main()` as the runner. With BROKEN, the sender signals
before its store: the receiver may read the row before it lands."""
import jax
from jax import lax
import jax.numpy as jnp
from jax._src import test_multiprocess as jt_multiprocess
from jax.experimental import pallas as pl
from jax.experimental.mosaic import gpu as mgpu
from jax.experimental.pallas import mosaic_gpu as plgpu

P = jax.sharding.PartitionSpec
BROKEN = False


class RemoteStoreTest(jt_multiprocess.MultiProcessTest):

  def setUp(self):
    if jax.process_count() == 1:
      self.skipTest("Test requires multiple processes.")
    if not mgpu.supports_cross_device_collectives():
      self.skipTest("NVSHMEM library unavailable.")
    super().setUp()

  def test_right_permute(self):
    n = jax.device_count()

    def kernel(x_ref, y_ref, sem):
      right = lax.rem(lax.axis_index("x") + 1, n)
      if BROKEN:
        pl.semaphore_signal(sem, device_id=right)
      plgpu.remote_ref(y_ref, right)[...] = x_ref[...]
      if not BROKEN:
        pl.semaphore_signal(sem, device_id=right)
      pl.semaphore_wait(sem)

    f = plgpu.kernel(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                     scratch_shapes=[plgpu.SemaphoreType.REGULAR])
    mesh = jax.make_mesh((n,), ("x",))
    y = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                              check_vma=False))(jnp.zeros((8 * n, 128), jnp.float32))
    self.assertEqual(y.shape, (8 * n, 128))


if __name__ == "__main__":
  jt_multiprocess.main()
