"""(Named *_cases.py so that pytest does not collect it.) Remote DMAs in the style of JAX's own distributed Pallas TPU tests (an absltest module
with parameterized tests; cf. jax-ml/jax tests/pallas/tpu_pallas_distributed_test.py, the
`select_ref` tests, and tpu_pallas_interpret_distributed_test.py). Written for ringc's
regression tests, not copied.

- test_exchange_selected (0, 1): the source of the DMA is `pl.select_ref(i, a, b)`, the
  index from a 0-d SMEM operand; a ready handshake with the partner first: correct.
- test_exchange_no_recv_wait: the same, its receive never waited: `dma_not_waited`.
- test_strided_send: a strided slice ringc does not model: "not checked", while the other
  tests' kernels are still checked.
"""

from absl.testing import absltest, parameterized
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec


def _exchange(which, recv_wait=True, strided=False):
    def kernel(idx_ref, a_ref, b_ref, o_ref):
        def body(ready, send_sem, recv_sem):
            partner = lax.rem(lax.axis_index("x") + 1, lax.axis_size("x"))
            source = lax.rem(lax.axis_index("x") + lax.axis_size("x") - 1, lax.axis_size("x"))
            pl.semaphore_signal(ready, device_id=source, device_id_type=pl.DeviceIdType.LOGICAL)
            pl.semaphore_wait(ready)
            src = pl.select_ref(idx_ref[...], a_ref, b_ref)
            if strided:
                src = a_ref.at[pl.ds(0, 4, stride=2)]
                dst = o_ref.at[pl.ds(0, 4)]
            else:
                dst = o_ref
            copy = pltpu.make_async_remote_copy(src, dst, send_sem, recv_sem, device_id=partner,
                                                device_id_type=pl.DeviceIdType.LOGICAL)
            copy.start()
            copy.wait_send()
            if recv_wait:
                copy.wait_recv()

        pl.run_scoped(body, pltpu.SemaphoreType.REGULAR, pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA)

    def per_shard(idx, a, b):
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pltpu.VMEM),
                      pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM))(idx, a, b)

    n = jax.device_count()
    mesh = jax.sharding.Mesh(jax.devices(), ("x",))
    f = jax.jit(jax.shard_map(per_shard, mesh=mesh, in_specs=(P(), P("x"), P("x")), out_specs=P("x"),
                              check_vma=False))
    a = jnp.arange(n * 8 * 128, dtype=jnp.float32).reshape(n * 8, 128)
    return f(jnp.array(which, jnp.int32), a, -a)


class SelectRefTest(parameterized.TestCase):

    @parameterized.parameters(0, 1)
    def test_exchange_selected(self, which):
        y = _exchange(which)
        self.assertEqual(y.shape[1], 128)

    def test_exchange_no_recv_wait(self):
        _exchange(0, recv_wait=False)

    def test_strided_send(self):
        _exchange(0, strided=True)


if __name__ == "__main__":
    absltest.main()
