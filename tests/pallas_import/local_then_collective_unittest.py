"""A unittest module whose tests run a single-device kernel, then a collective one under
shard_map; `test_b_broken` stops with an error between the two. Its collective is never
traced, so it cannot be checked: the verdict's notes say so (it once passed silently, its
single-device call counted as the test's kernel call), and the two Capture objects, whose
fields hold arrays, compare as themselves (once an internal error)."""

import unittest
import jax, jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def local(x):
    return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def _permute(x_ref, o_ref, send_sem, recv_sem):
    right = lax.rem(lax.axis_index("x") + 1, lax.psum(1, "x"))
    c = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(right,),
                                     device_id_type=pl.DeviceIdType.MESH)
    c.start()
    c.wait_recv()
    c.wait_send()


class T(unittest.TestCase):
    def _run(self, fail):
        x = jnp.ones((8, 128), jnp.float32)
        jax.jit(local)(x)
        if fail:
            raise RuntimeError("broke before the collective")
        n = jax.device_count()
        mesh = jax.make_mesh((n,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
        f = pl.pallas_call(_permute, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                           in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
                           out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                           scratch_shapes=[pltpu.SemaphoreType.DMA] * 2)
        jax.jit(jax.shard_map(f, mesh=mesh, in_specs=jax.P("x"), out_specs=jax.P("x"), check_vma=False))(
            jnp.ones((8 * n, 128), jnp.float32))

    def test_a_ok(self):
        self._run(False)

    def test_b_broken(self):
        self._run(True)


if __name__ == "__main__":
    unittest.main()
