"""The shims for Pallas APIs that moved (`ringc/pallas/compat.py`), run for real in JAX's
interpret mode: each must keep the old meaning exactly, and the verdict must name it."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from ringc.pallas.compat import AliasLog, aliases
from ringc.pallas.script import register_cpu_tpu_info

register_cpu_tpu_info()  # emit_pipeline asks for the TPU generation while it traces


def _accumulate(x, o, accumulate):
    """out = o + x through a nested pipeline written against the old API."""
    def kernel(x_hbm, o_in, o_hbm):
        del o_in  # aliased to o_hbm

        def inner(x_ref, acc_ref):
            acc_ref[...] = x_ref[...]  # "accumulate" is the pipeline's job with should_accumulate_out

        spec = pl.BlockSpec((8, 128), lambda i: (i, 0), memory_space=pltpu.MemorySpace.ANY)
        pltpu.emit_pipeline(inner, grid=(x_hbm.shape[0] // 8,), in_specs=[spec], out_specs=spec,
                            should_accumulate_out=accumulate)(x_hbm, o_hbm)

    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(o.shape, o.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)] * 2, out_specs=pl.BlockSpec(memory_space=pl.ANY),
        input_output_aliases={1: 0}, interpret=pltpu.InterpretParams())(x, o)


def test_should_accumulate_out_adds_each_block_to_the_output():
    x = jnp.arange(32 * 128, dtype=jnp.float32).reshape(32, 128)
    o = jnp.full((32, 128), 5.0, jnp.float32)
    log = AliasLog()
    with aliases(log):
        added = _accumulate(x, o, True)
        written = _accumulate(x, o, False)
    np.testing.assert_array_equal(added, x + 5.0)
    np.testing.assert_array_equal(written, x)
    assert any("should_accumulate_out=True" in a for a in log.used)
    assert any("MemorySpace.ANY -> pl.ANY" in a for a in log.used)
    assert any("memory_space=ANY -> VMEM" in a for a in log.used)


def test_the_shims_are_gone_after_the_check():
    with aliases(AliasLog()):
        pass
    assert not hasattr(pltpu.MemorySpace, "ANY")
    import inspect
    assert "should_accumulate_out" not in inspect.signature(pltpu.emit_pipeline).parameters


def _doubled(x, spec):
    """x * 2 through a gridded pallas_call whose blocks `spec(block_shape, index_map)` makes."""
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // 8,),
                          in_specs=[spec], out_specs=spec, interpret=True)(x)


def test_the_old_blockspec_argument_order_means_what_it_meant():
    """Before jax 0.4.31 a BlockSpec took the index map first: `pl.BlockSpec(lambda i: (i, 0),
    (8, 128))`. Under the shim it is today's `pl.BlockSpec((8, 128), lambda i: (i, 0))`, the
    verdict says so, and today's order is untouched (and nothing is noted for it)."""
    x = jnp.arange(32 * 128, dtype=jnp.float32).reshape(32, 128)
    log = AliasLog()
    with aliases(log):
        new = _doubled(x, pl.BlockSpec((8, 128), lambda i: (i, 0)))
        assert log.used == []
        old = _doubled(x, pl.BlockSpec(lambda i: (i, 0), (8, 128)))
    np.testing.assert_array_equal(np.asarray(old), np.asarray(x) * 2)
    np.testing.assert_array_equal(np.asarray(new), np.asarray(x) * 2)
    assert any("pl.BlockSpec(index_map, block_shape)" in u for u in log.used)
    before = pl.BlockSpec.__init__
    with aliases(AliasLog()):
        pass
    assert pl.BlockSpec.__init__ is before  # put back after the run
