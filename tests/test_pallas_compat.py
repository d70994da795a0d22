"""The shims for Pallas APIs that moved (`ringc/pallas/compat.py`), run for real in JAX's
interpret mode: each must keep the old meaning exactly, and the verdict must name it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
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


def test_removed_pltpu_repeat_is_jnp_tile_along_its_axis():
    log = AliasLog()
    x = jnp.arange(16.0).reshape(2, 8)
    with aliases(log):
        got = pltpu.repeat(x, 3, axis=1)
        with pytest.raises(ValueError, match="out of range"):
            pltpu.repeat(x, 2, axis=-1)
    np.testing.assert_array_equal(got, jnp.concatenate([x, x, x], axis=1))
    assert log.used == ["pltpu.repeat(x, r, axis) -> jnp.tile(x, r along axis)"]
    assert "repeat" not in vars(pltpu)


def test_jit_abstracted_axes_none_is_dropped_and_any_other_value_refused():
    log = AliasLog()
    with aliases(log):
        assert jax.jit(lambda a: a + 1, abstracted_axes=None)(1) == 2
        with pytest.raises(TypeError, match="fix: drop abstracted_axes"):
            jax.jit(lambda a: a, abstracted_axes=("n",))
    assert log.used and log.used[0].startswith("jax.jit(abstracted_axes=None) -> jax.jit")
    with pytest.raises(TypeError):  # outside the block, jax's own jit
        jax.jit(lambda a: a, abstracted_axes=None)


def test_a_blockspec_subclass_in_the_old_order_is_copied_as_a_plain_blockspec():
    """ejkernel's `PatchBlockSpec(index_map, block_shape)`: jax 0.10's pallas_call copies a
    spec without a memory space with `BlockSpec.replace`, which fails on the subclass; under
    the aliases the kernel runs (interpret mode) and gives the right result."""
    class OldOrder(pl.BlockSpec):
        def __init__(self, index_map, block_shape):
            super().__init__(block_shape=block_shape, index_map=index_map)

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    def run():
        spec = OldOrder(lambda i: (i, 0), (8, 128))
        return pl.pallas_call(kernel, grid=(2,), in_specs=[spec], out_specs=spec, interpret=True,
                              out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32))(jnp.ones((16, 128)))
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        run()
    log = AliasLog()
    with aliases(log):
        np.testing.assert_array_equal(run(), 2 * np.ones((16, 128)))
    assert any("OldOrder) -> a plain pl.BlockSpec" in a for a in log.used)


def test_pl_load_and_store_are_the_same_primitives_under_their_old_names():
    def kernel(x_ref, o_ref):
        pl.store(o_ref, (slice(None), pl.ds(0, 128)), pl.load(x_ref, (slice(None), pl.ds(0, 128))) + 1)

    log = AliasLog()
    with aliases(log):
        got = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                             interpret=True)(jnp.ones((8, 128)))
    np.testing.assert_array_equal(got, 2 * np.ones((8, 128)))
    assert "pl.load(ref, idx) -> ref[idx] (the same primitive)" in log.used
    assert "load" not in vars(pl) and "store" not in vars(pl)


def test_dict_compiler_params_keep_their_dimension_semantics():
    """haoliuhl/ringattention passes `compiler_params=dict(mosaic=dict(dimension_semantics=...))`:
    jax 0.10 traces it with the semantics lost and fails to lower it; under the aliases it is
    `pltpu.CompilerParams` (the megacore split reads it), and it runs."""
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 3

    def run():
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(kernel, grid=(2,), in_specs=[spec], out_specs=spec, interpret=True,
                              out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
                              compiler_params=dict(mosaic=dict(dimension_semantics=("parallel",))))
    x = jnp.ones((16, 128))
    original = pl.pallas_call
    log = AliasLog()
    with aliases(log):
        jaxpr = jax.make_jaxpr(run())(x)
        np.testing.assert_array_equal(run()(x), 3 * np.ones((16, 128)))
    params = jaxpr.eqns[0].params["compiler_params"]
    params = params.get("mosaic_tpu", params) if isinstance(params, dict) else params
    assert "parallel" in str(params.dimension_semantics).lower()
    assert log.used == ["pl.pallas_call(compiler_params=dict(mosaic=dict(...))) -> compiler_params=pltpu.CompilerParams"
                        "(...) (the dict form is gone)"]
    assert pl.pallas_call is original


def test_jax_lib_xla_bridge_answers_get_backend():
    import jax.lib
    log = AliasLog()
    with aliases(log):
        assert jax.lib.xla_bridge.get_backend().platform == jax.default_backend()
    assert log.used == ["jax.lib.xla_bridge.get_backend -> jax.extend.backend.get_backend"]
    assert not hasattr(jax.lib, "xla_bridge")
