"""The emitted modules' runtime helpers are real Python (`ringc/codegen/runtime.py`): they
run here, on Python ints and on traced scalars, and the emitter copies exactly their source."""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import pytest

from ringc.codegen import pallas
from ringc.codegen import runtime as R


def test_emitter_copies_the_runtime_source():
    for name, text in pallas._HELPERS.items():
        want = inspect.getsource(getattr(R, name))
        if name in pallas._MULTI_AXIS_VARIANTS:  # the multi-axis and two-core `_device`s
            want = want.replace(f"def {name}(", f"def {pallas._MULTI_AXIS_VARIANTS[name]}(", 1)
        assert text.strip("\n") == want.strip("\n"), name
    missing = {n for n, f in vars(R).items() if inspect.isfunction(f) and f.__module__ == R.__name__} - set(pallas._HELPERS)
    assert not missing, f"runtime helpers the emitter does not know: {missing}"


@pytest.mark.parametrize("a, b", [(-1, 4), (5, 4), (-7, 3), (0, 5), (9, -4)])
def test_mod_and_floordiv_round_like_python(a, b):
    assert R._mod(a, b) == a % b and R._floordiv(a, b) == a // b
    traced = jax.jit(lambda x, y: (R._mod(x, y), R._floordiv(x, y)))(jnp.int32(a), jnp.int32(b))
    assert (int(traced[0]), int(traced[1])) == (a % b, a // b)


def test_logic_stays_static_on_python_values():
    assert R._and(1, 0) is False and R._or(0, 2) is True and R._not(0) is True
    assert R._min(3, 1, 2) == 1 and R._max(3, 1, 2) == 3
    assert bool(jax.jit(lambda x: R._and(x > 0, x < 5))(jnp.int32(3)))
    assert int(jax.jit(lambda x: R._max(x, 7))(jnp.int32(9))) == 9


def test_select_and_log2_on_python_and_traced_values():
    assert R._select(True, 1, 2) == 1 and R._select(0, 1, 2) == 2
    assert int(jax.jit(lambda c: R._select(c > 0, 5, 7))(jnp.int32(-1))) == 7
    assert R._log2(8) == 3 and int(jax.jit(R._log2)(jnp.int32(64))) == 6
    with pytest.raises(ValueError, match="6 is not a power of two"):
        R._log2(6)


def test_check_divides_and_config_refuse_bad_input(monkeypatch):
    with pytest.raises(ValueError, match="does not divide exactly"):
        R._check_divides(7, 2, "rows")
    monkeypatch.setattr(R, "PARAMS", {"rows": 8})
    mesh = jax.sharding.Mesh(jax.devices()[:1], ("x",))
    assert R._config(mesh, {"rows": 16}) == (1, {"rows": 16})
    with pytest.raises(ValueError, match="unknown parameter cols"):
        R._config(mesh, {"cols": 1})
    assert R._interpret_mode(None) is False and R._interpret_mode(False) is False
