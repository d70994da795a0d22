"""A custom_vjp test as kernel libraries write them: the forward kernel, a check of its
result, then the backward kernel. Under ringc the forward's result is a zeros placeholder,
so the check fails; the backward kernel must still be traced and checked. Its index map
reads block i + 1 of a 2-block array (the planted bug: out of bounds at i = 1)."""

import unittest

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl


def double_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def _blocks(kernel, x, index_map):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
                          in_specs=[pl.BlockSpec((8, 128), index_map)],
                          out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))(x)


@jax.custom_vjp
def double(x):
    return _blocks(double_kernel, x, lambda i: (i, 0))


def double_fwd(x):
    return double(x), None


def double_bwd(_, g):
    return (_blocks(double_kernel, g, lambda i: (i + 1, 0)),)   # the planted bug


double.defvjp(double_fwd, double_bwd)


class DoubleTest(unittest.TestCase):

    def test_forward_then_backward(self):
        x = jnp.ones((16, 128), jnp.float32)
        out, vjp = jax.vjp(double, x)
        np.testing.assert_allclose(out, 2 * x)
        (dx,) = vjp(jnp.ones_like(out))
        self.assertTrue(bool(jnp.all(dx == 2)))


if __name__ == "__main__":
    unittest.main()
