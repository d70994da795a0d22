"""Kernels in a test module, in the style of JAX's own Pallas TPU tests: each test builds its
mesh, runs its kernel and compares with `lax`. `ringc check` runs the tests itself (what
`unittest.main()` would do) and checks every kernel call they make.

- test_permute_eager / test_permute_on_wait: the same kernel twice (checked once).
- test_permute_on_tpu: skips itself off TPU; ringc reruns it with JAX's test helpers
  answering as on a TPU, so its kernel is checked too.
- test_permute_no_recv_wait: the planted bug, a receive never waited.
- test_broken_before_any_kernel: raises before its kernel runs (reported as a note).
"""

import unittest

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax._src import test_util as jtu
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec


def permute(x, mesh, *, wait_recv=True, interpret=None):
    n = mesh.shape["x"]

    def kernel(x_ref, o_ref, send_sem, recv_sem):
        right = lax.rem(lax.axis_index("x") + 1, n)
        copy = pltpu.make_async_remote_copy(src_ref=x_ref, dst_ref=o_ref, send_sem=send_sem, recv_sem=recv_sem,
                                            device_id=(right,), device_id_type=pl.DeviceIdType.MESH)
        copy.start()
        if wait_recv:
            copy.wait_recv()
        copy.wait_send()

    call = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((x.shape[0] // n, x.shape[1]), x.dtype),
                          in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec(memory_space=pl.ANY),
                          scratch_shapes=[pltpu.SemaphoreType.DMA] * 2, interpret=interpret)
    return jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))(x)


class PermuteTest(unittest.TestCase):
    def setUp(self):
        n = jax.device_count()
        self.mesh = jax.make_mesh((n,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
        self.x = jax.device_put(jnp.arange(8 * n * 128, dtype=jnp.float32).reshape(8 * n, 128),
                                jax.sharding.NamedSharding(self.mesh, P("x")))

    def reference(self):
        n = self.mesh.shape["x"]
        perm = [(i, (i + 1) % n) for i in range(n)]
        return jax.jit(jax.shard_map(lambda x: lax.ppermute(x, "x", perm), mesh=self.mesh, in_specs=P("x"),
                                     out_specs=P("x")))(self.x)

    def test_permute_eager(self):
        out = permute(self.x, self.mesh, interpret=pltpu.InterpretParams(dma_execution_mode="eager"))
        np.testing.assert_array_equal(out, self.reference())

    def test_permute_on_wait(self):
        out = permute(self.x, self.mesh, interpret=pltpu.InterpretParams(dma_execution_mode="on_wait"))
        np.testing.assert_array_equal(out, self.reference())

    def test_permute_on_tpu(self):
        if not jtu.test_device_matches(["tpu"]):
            self.skipTest("TPU only")
        x = jnp.concatenate([self.x, self.x])  # 16 rows per device: its own kernel
        permute(x, self.mesh)

    def test_permute_no_recv_wait(self):
        np.testing.assert_array_equal(permute(self.x, self.mesh, wait_recv=False), self.reference())

    def test_broken_before_any_kernel(self):
        raise RuntimeError("this test breaks before its kernel")


if __name__ == "__main__":
    unittest.main()
