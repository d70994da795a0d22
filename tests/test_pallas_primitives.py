"""The importer's one primitive table (ringc/pallas/primitives.py): registrations carry
flags, the kernel interpreter and the outer walker dispatch on it, control flow is written
once, and a primitive ringc cannot model is an error naming it and the user's line.
(Coverage of Mosaic TPU's primitives: tests/test_coverage.py.)"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import checkify
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import ringc
from ringc.errors import ScheduleError
from ringc.pallas import importer, interpret
from ringc.pallas.primitives import ELEMENTWISE, PRIMITIVES, Does, PrimitiveTable


def test_every_registration_says_how_it_is_evaluated():
    """A primitive with neither rule is pure (evaluated from its flags), refused, or a lax
    collective between the kernels (computed there, with its words for the verdict); one that
    touches memory or semaphores has a kernel rule or is refused (never evaluated as pure)."""
    for name, p in PRIMITIVES.items():
        refused = Does.UNSUPPORTED in p.does
        if p.kernel is None and p.outer is None and p.gpu is None:
            assert refused or Does.PURE in p.does or p.words is not None, name
        if p.words is not None:
            assert Does.COLLECTIVE in p.does and p.words({"axis_name": "x", "perm": [(0, 1), (1, 0)]}, {"x": 2})
        if p.does & (Does.MEMORY | Does.SEMAPHORE) and not refused:
            assert p.kernel is not None or p.gpu is not None, \
                f"`{name}` touches memory or semaphores but has no kernel rule"
        if p.lanewise or p.scalar is not None:
            assert p.numpy is not None, f"`{name}`: lanewise or scalar evaluation without numpy"
    assert {"add", "mul", "tanh", "exp"} <= ELEMENTWISE and "dot_general" not in ELEMENTWISE


def test_a_second_rule_for_a_primitive_is_refused():
    table = PrimitiveTable("a test table", "pallas_tpu")
    try:
        table.kernel("thing", does=Does.MEMORY, doc="a thing")(lambda it, eqn, invals: [])
        with pytest.raises(ValueError, match="two kernel rules for `thing`"):
            table.kernel("thing", does=Does.MEMORY, doc="again")(lambda it, eqn, invals: [])
        with pytest.raises(ValueError, match="registered as"):
            table.outer("thing", does=Does.PURE)(lambda w, eqn, ins: [])
        with pytest.raises(ValueError, match="needs its flags"):
            table.outer("other")(lambda w, eqn, ins: [])
    finally:
        from ringc.ir.rules import TABLES
        TABLES.remove(table)


def test_pure_flags_evaluate_like_xla():
    """The flags' numpy and integer evaluations: C division and remainder, select_n."""
    div, rem, sel = PRIMITIVES["div"], PRIMITIVES["rem"], PRIMITIVES["select_n"]
    assert div.scalar(-7, 2) == -3 and rem.scalar(-7, 2) == -1 and div.scalar(1, 0) is None
    assert list(div.numpy({}, np.array([-7, 7]), np.array([2, -2]))) == [-3, -3]
    assert list(rem.numpy({}, np.array([-7, 7]), np.array([2, -2]))) == [-1, 1]
    assert list(sel.numpy({}, np.array([0, 1]), np.array(5), np.array([6, 7]))) == [5, 7]


def _kernel_with(extra, *, scratch: tuple = (), read_before_wait: bool = False):
    """A right shift by one device whose kernel also runs `extra(*scratch refs)`; with
    `read_before_wait`, it reads its output before the DMA into it is waited (a race)."""
    def kernel(x_ref, o_ref, send, recv, *more):
        extra(*more)
        me = jax.lax.axis_index("x")
        dma = pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=(me + 1) % 2,
                                           device_id_type=pl.DeviceIdType.LOGICAL)
        dma.start()
        if read_before_wait:
            x_ref[...] = o_ref[...]
        dma.wait()

    def fn(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              in_specs=[pl.BlockSpec(memory_space=pltpu.ANY)],
                              out_specs=pl.BlockSpec(memory_space=pltpu.ANY),
                              scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA, *scratch])(x)
    return fn


def _check(fn):
    mesh = jax.make_mesh((2,), ("x",), devices=jax.devices()[:2])
    sharded = jax.shard_map(fn, mesh=mesh, in_specs=jax.P("x"), out_specs=jax.P("x"), check_vma=False)
    x = jax.ShapeDtypeStruct((16, 128), jnp.float32, sharding=jax.NamedSharding(mesh, jax.P("x")))
    return ringc.check_pallas(sharded, (x,), mesh, "ppermute")


def test_the_kernel_checks_without_the_extra_primitive():
    fn = _kernel_with(lambda: None)
    report = _check(fn)
    assert report.ok, report.to_text()


def test_a_refused_primitive_is_an_error_naming_it_and_its_line():
    """`check` (checkify's error effect) is registered as refused."""
    def check():
        checkify.check(jax.lax.axis_index("x") >= 0, "negative")

    fn = _kernel_with(check)
    line = inspect.getsourcelines(check)[1] + 1
    with pytest.raises(ScheduleError) as e:
        _check(fn)
    text = str(e.value)
    assert "ringc does not know the primitive `check`" in text
    assert f"test_pallas_primitives.py:{line}" in text, text


def test_the_cores_prng_is_no_effect_and_its_bits_are_unknown_data():
    """`pltpu.prng_seed` seeds the core's own PRNG (no memory or semaphore effect; JAX's
    tpu_pallas_random_test.py was refused on it): the kernel is checked. Its bits are
    tensor data of unknown value: a branch on them is sampled and the verdict says so; and
    the race a kernel has beside them is still found."""
    def seed():
        pltpu.prng_seed(jax.lax.axis_index("x"))
        pltpu.prng_random_bits((8, 128))

    assert _check(_kernel_with(seed)).ok

    def branch(v):
        pltpu.prng_seed(7)
        bits = pltpu.prng_random_bits((8, 128))

        @pl.when(bits.astype(jnp.float32)[0, 0] > 0)   # a branch the bits decide
        def _():
            v[...] = jnp.zeros((8, 128), jnp.float32)

    report = _check(_kernel_with(branch, scratch=(pltpu.VMEM((8, 128), jnp.float32),)))
    assert report.ok, report.to_text()
    assert "sampled" in report.to_text()
    report = _check(_kernel_with(seed, read_before_wait=True))   # the neighbour's write races this read
    assert not report.ok and "race" in report.to_text()


def test_an_unregistered_primitive_with_effects_is_an_error(monkeypatch):
    """A primitive the table lacks is pure only without effects, refs and sub-jaxprs: with
    the DMA rule taken out, the kernel's `dma_start` is an error, never skipped."""
    monkeypatch.setattr(PRIMITIVES["dma_start"], "kernel", None)
    fn = _kernel_with(lambda: None)
    with pytest.raises(ScheduleError, match="ringc does not know the primitive `dma_start`"):
        _check(fn)


def test_the_outer_walker_and_the_interpreter_share_the_loops():
    """`scan` and `while` have one loop each (`primitives.scan_loop`, `while_loop`), used by
    both evaluators, which say what their loop condition is (`truth`) and their limit error."""
    for evaluator in (interpret.Interpreter, importer._Outer):
        assert callable(evaluator.run_closed) and callable(evaluator.truth) and callable(evaluator.too_many)
    assert PRIMITIVES["scan"].kernel is not None and PRIMITIVES["scan"].outer is not None
    assert PRIMITIVES["while"].kernel is not None and PRIMITIVES["while"].outer is not None
    assert PRIMITIVES["pallas_call"].outer is not None and PRIMITIVES["pallas_call"].kernel is None


@pytest.mark.parametrize("stride", [None, 1, 3])
def test_roll_on_concrete_values_is_mosaics(stride):
    """`pltpu.roll` on values ringc knows (an int8 block from a constant: 26 of JAX's tests
    were 'cannot evaluate roll', sweep 10): numpy as Mosaic lowers it, compared with JAX's
    own TPU interpret mode, strided too."""
    x = np.arange(8 * 128, dtype=np.int32).reshape(8, 128)

    def k(x_ref, o_ref):
        o_ref[...] = pltpu.roll(x_ref[...], 5, 1, stride=stride, stride_axis=None if stride is None else 0)
    jax_says = pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=pltpu.InterpretParams())(x)
    ours = PRIMITIVES["roll"].numpy({"axis": 1, "stride": stride, "stride_axis": None if stride is None else 0}, x, 5)
    assert np.array_equal(np.asarray(jax_says), ours)
    assert not np.array_equal(ours, x)
