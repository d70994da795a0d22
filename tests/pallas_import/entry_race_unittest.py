"""The kernel of entry_race.py in a unittest module, as JAX's Pallas TPU tests are written:
test_signal_right races at entry (the DMA goes to a device the barrier never heard from),
test_signal_left is the fixed handshake. test_device_barrier and test_skip_barrier run kernels
that differ only in their compiler params (no barrier of their own; Mosaic's device barrier
skipped or not): checked as two calls, not one call and an identical copy."""

import sys
import unittest
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

sys.path.insert(0, str(Path(__file__).parent))
from entry_race import permute  # noqa: E402

P = jax.sharding.PartitionSpec


class EntryRaceTest(unittest.TestCase):
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

    def run_kernel(self, **kw):  # every test's kernel call is made on this line
        return permute(self.x, self.mesh, **kw)

    def test_signal_right(self):
        np.testing.assert_array_equal(self.run_kernel(signal_right=True), self.reference())

    def test_signal_right_double(self):
        np.testing.assert_array_equal(self.run_kernel(signal_right=True, double=True), self.reference())

    def test_device_barrier(self):  # the same call line and jaxpr as test_skip_barrier: other compiler params
        np.testing.assert_array_equal(self.run_kernel(signal_right=True, sync="device"), self.reference())

    def test_skip_barrier(self):
        np.testing.assert_array_equal(self.run_kernel(signal_right=True, sync="skip"), self.reference())

    def test_signal_left(self):
        np.testing.assert_array_equal(self.run_kernel(signal_right=False), self.reference())


if __name__ == "__main__":
    unittest.main()
