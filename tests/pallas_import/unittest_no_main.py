"""A unittest module as serving stacks keep them: TestCase classes, no `unittest.main()`
line (pytest collects the classes whatever their names). `test_copy` copies and waits;
`test_copy_unwaited` starts the copy and never waits for it (the planted bug)."""

import unittest

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _copy(x, wait):
    def kernel(x_hbm, o_hbm, sem):
        copy = pltpu.make_async_copy(x_hbm, o_hbm, sem)
        copy.start()
        if wait:
            copy.wait()

    return pl.pallas_call(
        kernel,
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        scratch_shapes=[pltpu.SemaphoreType.DMA],
    )(x)


class CopyTest(unittest.TestCase):

    def test_copy(self):
        x = jnp.ones((8, 128), jnp.float32)
        self.assertTrue(bool((jax.jit(_copy, static_argnums=1)(x, True) == x).all()))

    def test_copy_unwaited(self):
        x = jnp.ones((8, 128), jnp.float32)
        jax.jit(_copy, static_argnums=1)(x, False)
