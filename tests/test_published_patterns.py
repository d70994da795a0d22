"""Patterns of public code that did not reach a verdict, or reached a wrong one (sweep 19):
an eager `shard_map` dropping a kernel output, a Mosaic-only primitive on known integers, a
scan's counter as scalar prefetch, a limit stopping a script after its kernel calls, and
notebooks with non-ASCII text or a cell left to the reader. Each has its broken twin."""

from __future__ import annotations

import json
import textwrap

import pytest

from ringc import limits
from ringc.errors import ScheduleError
from ringc.pallas import check_file

HEAD = """\
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
P = jax.sharding.PartitionSpec
"""

# A flash-style kernel uses its first output as scratch: zeroed at j == 0 and accumulated,
# with a `parallel` first grid axis (maxdiffusion's ring attention); the caller keeps `out[1]`.
SCRATCH_OUTPUT = HEAD + """
def kernel(x_ref, acc_ref, o_ref):
    j = pl.program_id(2)

    @pl.when(j == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += x_ref[...]

    @pl.when(j == pl.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...]


def call(x):
    out = pl.pallas_call(
        kernel, grid=(2, 2, 2),
        in_specs=[pl.BlockSpec((None, 128, 128), lambda h, i, j: (h, i, 0))],
        out_specs=[pl.BlockSpec((128, 128), lambda *_: (0, 0)),
                   pl.BlockSpec((None, 128, 128), lambda h, i, j: (h, i, 0))],
        out_shape=[jax.ShapeDtypeStruct((128, 128), jnp.float32), jax.ShapeDtypeStruct((2, 256, 128), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary", "arbitrary")),
    )(x)
    return KEPT


run = jax.shard_map(call, mesh=jax.make_mesh((2,), ("ring",)), in_specs=P(None, "ring", None),
                    out_specs=P(None, "ring", None), check_vma=False)
run(jnp.ones((2, 512, 128), jnp.float32))
"""


def test_an_eager_shard_map_dropping_a_scratch_output_is_checked_as_under_jit(tmp_path):
    path = tmp_path / "eager.py"
    path.write_text(SCRATCH_OUTPUT.replace("KEPT", "out[1]"))
    (report,) = check_file(str(path), 2, tpu="v5p")
    assert report.ok, report.to_text()
    assert any("calls a shard_map outside jax.jit" in a for a in report.assumptions), report.assumptions
    assert any("never reads output `acc_ref`" in a for a in report.assumptions), report.assumptions
    # the output read by the caller: each core's VMEM copy written back over the other's
    path.write_text(SCRATCH_OUTPUT.replace("KEPT", "out[1] + out[0][None, :, :].sum()"))
    (report,) = check_file(str(path), 2, tpu="v5p")
    assert not report.ok and "megacore_vmem" in {f.kind for f in report.findings}, report.to_text()


BITCAST = HEAD + """
def kernel(x_ref, y_ref):
    y_ref[ROWS] = pltpu.bitcast(x_ref[...], jnp.float32)


pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32), grid=(1,))(
    np.arange(8 * 128, dtype=np.int32).reshape(8, 128))
"""


def test_a_mosaic_only_primitive_on_known_integers_is_carried_as_data(tmp_path):
    """JAX cannot evaluate `pltpu.bitcast` off TPU: on integers ringc knows (a small int
    input), its result is data, not a refusal (JAX's tpu_ops_test: 132 calls); the kernel is
    still checked, so a store past the output is found."""
    path = tmp_path / "bitcast.py"
    path.write_text(BITCAST.replace("ROWS", "..."))
    (report,) = check_file(str(path), 1)
    assert report.ok, report.to_text()
    path.write_text(BITCAST.replace("y_ref[ROWS]", "y_ref.at[pl.ds(pl.program_id(0) + 4, 8)][...]"))
    (report,) = check_file(str(path), 1)
    assert not report.ok and {f.kind for f in report.findings} == {"out_of_bounds"}, report.to_text()


SCAN_COUNTER = HEAD + """
n = jax.device_count()


def kernel(start_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def step(x, start):
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((8, 128), x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(1,),
            in_specs=[pl.BlockSpec((8, 128), lambda i, s: (s[0] % 4 + SHIFT, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i, s: (0, 0))),
    )(start, x)


def per_shard(x):
    def body(carry, idx):
        start = ((lax.axis_index("x") - idx) % n)[None]
        return carry + step(x, start.astype(jnp.int32)), None
    acc, _ = lax.scan(body, jnp.zeros((8, 128), x.dtype), jnp.arange(0, n))
    return acc


f = jax.jit(jax.shard_map(per_shard, mesh=jax.make_mesh((n,), ("x",)), in_specs=P("x", None),
                          out_specs=P("x", None), check_vma=False))
f(jnp.ones((32 * n, 128), jnp.float32))
"""


def test_a_scans_counter_is_known_in_each_iteration(tmp_path):
    """`lax.scan` over `jnp.arange(n)` (ring attention's step counter): each iteration's
    value is known, so a block index from it is followed, and one past the array found."""
    path = tmp_path / "scan.py"
    path.write_text(SCAN_COUNTER.replace("SHIFT", "0"))
    (report,) = check_file(str(path), 4)
    assert report.ok and report.program is not None, report.to_text()
    path.write_text(SCAN_COUNTER.replace("SHIFT", "1"))
    (report,) = check_file(str(path), 4)
    assert not report.ok and {f.kind for f in report.findings} == {"out_of_bounds"}, report.to_text()


def test_a_limit_that_stops_a_script_keeps_the_verdicts_of_the_calls_before_it(tmp_path, monkeypatch):
    """A tutorial's stress loop after its kernel call: the call is checked, then the limit's
    message (it used to replace every verdict)."""
    path = tmp_path / "stress.py"
    path.write_text(HEAD + textwrap.dedent("""
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...] + 1.0

        y = jax.jit(lambda x: pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x))(
            jnp.zeros((8, 128), jnp.float32))
        while True:
            pass
    """))
    monkeypatch.setenv(limits.LIMITS["user_code_s"].env, "3")
    reports = []
    with pytest.raises(ScheduleError, match="the limit `user_code_s`") as stopped:
        for report in check_file(str(path), 1, iterate=True):
            reports.append(report)
    assert [r.ok for r in reports] == [True], [r.to_text() for r in reports]
    assert stopped.value.line == 14, stopped.value


def _notebook(cells: list[str]) -> str:
    """A notebook as Jupyter writes it: non-ASCII as it is, one source line per string."""
    return json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                                  "source": c.splitlines(keepends=True)} for c in cells],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1, ensure_ascii=False)


NOTEBOOK_CELLS = [
    HEAD,
    'def kernel(x_ref, o_ref):\n    """x → x + 1 ✓"""\n    o_ref[...] = x_ref[...] + 1.0\n',
    "def puzzle(x_ref, o_ref):\n    # your code here\n",
    "y = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32))(jnp.zeros((8, 128)))\n",
]


def test_a_notebook_with_non_ascii_text_and_a_cell_left_to_the_reader_is_checked(tmp_path):
    path = tmp_path / "puzzles.ipynb"
    path.write_text(_notebook(NOTEBOOK_CELLS))
    (report,) = check_file(str(path), 1)
    assert report.ok, report.to_text()
    assert any("is not valid Python" in a and "skipped it" in a for a in report.assumptions), report.assumptions
    # the same cells as a percent-format script (jupytext)
    script = tmp_path / "puzzles.py"
    script.write_text("".join(f"# %%\n{c}\n" for c in NOTEBOOK_CELLS))
    (report,) = check_file(str(script), 1)
    assert report.ok and any("the cell at lines" in a for a in report.assumptions), report.to_text()
    # a plain script with the same error is refused, at its line
    plain = tmp_path / "plain.py"
    plain.write_text("".join(NOTEBOOK_CELLS))
    with pytest.raises(ScheduleError, match="not valid Python") as refused:
        check_file(str(plain), 1)
    assert refused.value.line == 13, refused.value


def test_a_finding_on_a_kernel_in_another_file_names_that_file(tmp_path):
    """maxdiffusion's test module imports its kernel: a finding with no event of its own
    (a VMEM output on megacore) names the kernel's file with its line, not `line 69` of the
    test module."""
    head, _, rest = SCRATCH_OUTPUT.partition("\ndef call(x):")
    (tmp_path / "kernels.py").write_text(head + "\ndef call(x):" + rest.split("\n\nrun = ")[0].replace(
        "KEPT", "out"))
    path = tmp_path / "test_it.py"
    path.write_text(HEAD + "from kernels import call\n\n"
                    "run = jax.jit(jax.shard_map(call, mesh=jax.make_mesh((2,), ('ring',)), in_specs=P(None, 'ring', None),\n"
                    "                            out_specs=(P(), P(None, 'ring', None)), check_vma=False))\n"
                    "run(jnp.ones((2, 512, 128), jnp.float32))\n")
    (report,) = check_file(str(path), 2, tpu="v5p")
    said = [f.message for f in report.findings if f.kind == "megacore_vmem"]
    assert said and "output `acc_ref` (kernels.py:" in said[0], report.to_text()
