"""A distributed kernel test written against JAX 0.4.3x, as JAX's own interpret-mode tests were
(tests/pallas/tpu_interpret_test.py before the distributed tests moved out): absltest, the old
`jax.experimental.shard_map.shard_map(..., check_rep=False)`, `pltpu.TPUMemorySpace`,
`pltpu.TPUCompilerParams`, and `pl.pallas_call(..., interpret=True, backend='mosaic_tpu')`.

`test_repeated_permute` sends the same block to the right neighbour SENDS times, each send
waited with `.wait()` (send, then this device's receive): nothing orders a device's next
send after its previous one landed at the neighbour, so two DMAs write the neighbour's
output at once (a write-write race; JAX's interpret mode with detect_races=True reports it).
`test_single_permute` sends it once: ok.
"""

import contextlib

from absl.testing import absltest
import numpy as np

import jax
from jax import lax
from jax._src import test_util as jtu
from jax.experimental import pallas as pl
from jax.experimental import shard_map
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp

P = jax.sharding.PartitionSpec

_exit_stack = contextlib.ExitStack()


def setUpModule():
  _exit_stack.enter_context(jtu.set_host_platform_device_count(4))


def tearDownModule():
  _exit_stack.close()


def permute(sends):
  num_devices = jax.device_count()

  def kernel(input_ref, output_ref, send_sem, recv_sem):
    my_id = lax.axis_index('x')
    left = lax.rem(my_id + num_devices - 1, jnp.int32(num_devices))
    right = lax.rem(my_id + 1, jnp.int32(num_devices))
    barrier_sem = pltpu.get_barrier_semaphore()
    pltpu.semaphore_signal(barrier_sem, device_id=(left,), device_id_type=pltpu.DeviceIdType.MESH)
    pltpu.semaphore_signal(barrier_sem, device_id=(right,), device_id_type=pltpu.DeviceIdType.MESH)
    pltpu.semaphore_wait(barrier_sem, 2)

    def body(i, carry):
      copy = pltpu.make_async_remote_copy(
          src_ref=input_ref, dst_ref=output_ref, send_sem=send_sem, recv_sem=recv_sem,
          device_id=(right,), device_id_type=pltpu.DeviceIdType.MESH)
      copy.start()
      copy.wait()
      return i + 1, carry
    lax.scan(body, 0, jnp.arange(float(sends)))

  return pl.pallas_call(
      kernel,
      out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
      grid_spec=pltpu.PrefetchScalarGridSpec(
          num_scalar_prefetch=0,
          in_specs=[pl.BlockSpec(memory_space=pltpu.TPUMemorySpace.ANY)],
          out_specs=pl.BlockSpec(memory_space=pltpu.TPUMemorySpace.ANY),
          scratch_shapes=[pltpu.SemaphoreType.DMA] * 2),
      compiler_params=pltpu.TPUCompilerParams(collective_id=3),
      interpret=True,
      backend='mosaic_tpu',
  )


class OldApiPermuteTest(jtu.JaxTestCase):

  def _check(self, sends):
    num_devices = jax.device_count()
    mesh = jax.make_mesh((num_devices,), ('x',))
    partition = P(None, 'x')
    x = jax.device_put(jnp.ones((8, 128 * num_devices), jnp.float32),
                       jax.sharding.NamedSharding(mesh, partition))
    out = jax.jit(shard_map.shard_map(permute(sends), mesh=mesh, in_specs=partition,
                                      out_specs=partition, check_rep=False))(x)
    np.testing.assert_allclose(out, x)

  def test_single_permute(self):
    self._check(1)

  def test_repeated_permute(self):
    self._check(4)


if __name__ == "__main__":
  absltest.main(testLoader=jtu.JaxTestLoader())
