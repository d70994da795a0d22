"""A chapter of a Pallas book in the style of `05_memory_spaces.md`: single-device kernels
(a TensorCore doubling a block in VMEM, twice), then a SparseCore kernel over a vector-subcore
mesh. ringc refuses SparseCore in one line at the line that uses it, also when the file's
other kernels are single-device ones it would not check."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu_sc as plsc


def double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


doubled = jax.jit(pl.pallas_call(double, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32)))
y = doubled(jnp.ones((8, 128), jnp.float32))
z = doubled(y)

mesh = plsc.VectorSubcoreMesh(core_axis_name="core", subcore_axis_name="subcore")  # the SparseCore line
