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

def _checked(path, text: str, devices: int = 1):
    """The one verdict of `text` written to `path`, checked on `devices` devices."""
    path.write_text(text)
    (report,) = check_file(str(path), devices)
    return report


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
    report = _checked(path, BITCAST.replace("ROWS", "..."))
    assert report.ok, report.to_text()
    report = _checked(path, BITCAST.replace("y_ref[ROWS]", "y_ref.at[pl.ds(pl.program_id(0) + 4, 8)][...]"))
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
    # at the BlockSpec's index map, where the fix goes (JAX's debug info of its lambda), not the call
    lambda_line = 1 + SCAN_COUNTER.splitlines().index(
        "            in_specs=[pl.BlockSpec((8, 128), lambda i, s: (s[0] % 4 + SHIFT, 0))],")
    assert {int(f.event.line) for f in report.findings} == {lambda_line}, report.to_text()


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


LOOPED = HEAD + """
N = 4


def kernel(x_ref, out_ref, loop_sems, send_sem, recv_sem):
    me = lax.axis_index("i")

    def body(_, __):
        out_ref[...] = jnp.zeros(out_ref.shape, out_ref.dtype)   # races with the neighbour's copy
        cp = pltpu.make_async_remote_copy(src_ref=x_ref, dst_ref=out_ref, send_sem=send_sem, recv_sem=recv_sem,
                                          device_id=(me + 1) % N, device_id_type=pltpu.DeviceIdType.LOGICAL)
        cp.start()
        cp.wait_send()
        cp.wait_recv()
        for d in (1, N - 1):
            pltpu.semaphore_signal(loop_sems.at[0], device_id=(me + d) % N, device_id_type=pltpu.DeviceIdType.LOGICAL)
        pltpu.semaphore_wait(loop_sems.at[0], 2)
    lax.fori_loop(0, ITERS, body, None)


def launch(x):
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)], out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.SemaphoreType.REGULAR((1,)), pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA])(x)


f = jax.jit(jax.shard_map(launch, mesh=jax.make_mesh((N,), ("i",)), in_specs=P("i"), out_specs=P("i"),
                          check_vma=False))
f(jnp.ones((N * 8, 128), jnp.float32))
"""


def test_a_race_in_a_loop_names_the_iteration_on_each_side(tmp_path):
    """TPU-Collectives' benchmark loop: the finding names the loop's iteration on each side
    (`Event.loops`), where the grid point alone would not say which runs race."""
    path = tmp_path / "looped.py"
    path.write_text(LOOPED.replace("ITERS", "3"))
    (report,) = check_file(str(path), 4)
    race = next(f for f in report.findings if f.kind == "race")
    assert race.message.count("iteration 0 of the loop at line 25") >= 2, race.message
    assert race.to_json(report.program)["loops"] == [{"line": 25, "iteration": 0}], race.to_json(report.program)


def test_a_test_module_laying_out_a_fixed_mesh_is_told_the_devices_it_needs(tmp_path):
    """A pytest module that builds a (1, 8) mesh stops on ringc's 4 devices: the fix says
    `--devices 8` (as for a script), and with it the kernel, in the module it imports, is checked."""
    (tmp_path / "mesh8_kernel.py").write_text(HEAD + textwrap.dedent("""
        def _kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...] + 1.0

        def add_one(x):
            return pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    """))
    (tmp_path / "another_kernel.py").write_text("import jax\n# pl.pallas_call lives here too\n")
    path = tmp_path / "test_mesh8.py"
    path.write_text(HEAD + textwrap.dedent("""
        from jax.experimental import mesh_utils
        from jax.sharding import Mesh
        from mesh8_kernel import add_one

        def test_add_one():
            mesh = Mesh(mesh_utils.create_device_mesh((1, 8), devices=jax.devices()), ("dp", "sp"))
            g = jax.jit(jax.shard_map(add_one, mesh=mesh, in_specs=P("sp"), out_specs=P("sp"), check_vma=False))
            g(jnp.zeros((64, 128), jnp.float32))
    """))
    with pytest.raises(ScheduleError) as refused:
        check_file(str(path), 4)
    assert "check with --devices 8" in refused.value.fix, refused.value.fix
    (report,) = check_file(str(path), 8)
    assert report.ok, report.to_text()


def test_an_entry_failing_on_a_stubs_value_or_a_made_up_argument_says_so(tmp_path):
    """Ring attention's launcher, called with --stub einops: unpacking the shape of the stub's
    stand-in raises a ValueError, which names the stub call; the parameters ringc made
    arrays for (a flag, a dict) are named, with how to pass them."""
    from ringc.pallas.entries import parse_arg
    path = tmp_path / "ring.py"
    path.write_text(HEAD + textwrap.dedent("""
        from notinstalled_einops import rearrange

        def launcher(q, float32_logits, blockwise_kwargs, axis_name="x"):
            batch, heads, length, dim = rearrange(q, "b q h d -> b h q d").shape
            return pl.pallas_call(lambda x_ref, o_ref: None, out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype))(q)
    """))
    with pytest.raises(ScheduleError) as refused:
        check_file(str(path), 4, stubs=("notinstalled_einops",), entry="launcher",
                   args=[parse_arg("q=float32[1,128*N,1,128]@,x")])
    fix = refused.value.fix
    assert "the stub notinstalled_einops.rearrange()" in fix, fix
    assert "ringc passed arrays it made for `float32_logits`, `blockwise_kwargs`" in fix, fix


ASSERTED_LOOP = HEAD + """
import functools


def kernel(x_hbm, o_ref, buf, sem, *, bs):
    cp = pltpu.make_async_copy(x_hbm.at[pl.ds(pl.program_id(0) + 8, bs)], buf, sem)   # rows 8..8+bs of 16
    cp.start()
    cp.wait()
    o_ref[...] = buf[...]


@functools.partial(jax.jit, static_argnames="bs")
def run(x, bs):
    assert STATIC, "a static check under jit"
    return pl.pallas_call(
        functools.partial(kernel, bs=bs), in_specs=[pl.BlockSpec(memory_space=pltpu.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM), grid=(1,), out_shape=jax.ShapeDtypeStruct((bs, 128), x.dtype),
        scratch_shapes=[pltpu.VMEM((bs, 128), x.dtype), pltpu.SemaphoreType.DMA])(x)


x = jnp.arange(16 * 128, dtype=jnp.float32).reshape(16, 128)
for bs in [8, 16]:
    assert np.allclose(run(x, bs), x[8:8 + bs])
"""


def test_a_failed_assert_on_placeholder_results_does_not_end_the_scripts_loop(tmp_path):
    """A tutorial checks each block size's result with a bare `assert` (simveit/learn_pallas):
    the placeholder zeros fail it, and the loop goes on, so the second size's out-of-range
    read is found; the verdict says the assert did not stop the script. A static `assert`
    under a JAX trace still stops its statement, as Python's does."""
    path = tmp_path / "sizes.py"
    path.write_text(ASSERTED_LOOP.replace("STATIC", "bs <= 16"))
    first, second = check_file(str(path), 1)
    assert first.ok and any("a failed assert at line" in a and "did not stop it" in a for a in first.assumptions)
    assert not second.ok and {f.kind for f in second.findings} == {"out_of_bounds"}, second.to_text()
    path.write_text(ASSERTED_LOOP.replace("STATIC", "bs <= 8"))
    reports = check_file(str(path), 1)
    assert [r.ok for r in reports] == [True], [r.to_text() for r in reports]
    assert any("AssertionError: a static check under jit" in a for a in reports[0].assumptions), reports[0].assumptions


def test_a_pytest_module_skipping_below_8_devices_is_told_to_check_with_8(tmp_path):
    """Inferact/tpu-megakernels' tests `pytest.skip("needs 8 devices")` on ringc's 4: the fix
    names --devices 8 (it named --entry)."""
    path = tmp_path / "test_needs8.py"
    path.write_text(HEAD + textwrap.dedent("""
        import pytest

        def test_permute():
            if len(jax.devices()) < 8:
                pytest.skip("needs 8 devices")
            f = pl.pallas_call(lambda x_ref, o_ref: None, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32))
            jax.jit(f)(jnp.zeros((8, 128), jnp.float32))
    """))
    with pytest.raises(ScheduleError) as refused:
        check_file(str(path), 4)
    assert "check with --devices 8" in refused.value.fix, refused.value.fix


UNFILLED = HEAD + """
N = 4


def kernel(x_ref, o_ref, scratch_ref):
    BODY


def launch(x):
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)], out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)])(x)


f = jax.jit(jax.shard_map(launch, mesh=jax.make_mesh((N,), ("i",)), in_specs=P("i"), out_specs=P("i"),
                          check_vma=False))
f(jnp.ones((N * 8, 128), jnp.float32))
"""


def test_an_output_nothing_fills_is_an_error_where_there_is_no_meaning(tmp_path):
    """MIT 6.S894's lab starter (sweep 22): kernels left as `pass` were all ok, since their
    scripts' references name no meaning ringc reads. An output no copy or store fills is
    `unwritten_output`, on the devices where it is so; a copy of the input, or a constant, fills it."""
    path = tmp_path / "todo.py"
    cases = {
        "pass": [0, 1, 2, 3],                                                        # the TODO body
        "@pl.when(lax.axis_index('i') == 1)\n    def _():\n        o_ref[...] = x_ref[...]": [0, 2, 3],
        "o_ref[...] = scratch_ref[...]": [0, 1, 2, 3],                               # scratch nothing fills
        "o_ref[...] = x_ref[...] + 1.0": [],
        "o_ref[...] = jnp.zeros_like(o_ref)": [],
        "scratch_ref[...] = x_ref[...]\n    o_ref[...] = scratch_ref[...] * 2.0": [],
    }
    for body, unfilled in cases.items():
        text = UNFILLED.replace("BODY", body)
        path.write_text(text)
        call = 1 + text.splitlines().index("    return pl.pallas_call(")
        (report,) = check_file(str(path), 4)
        found = [f for f in report.findings if f.kind == "unwritten_output"]
        if not unfilled:
            assert report.ok, (body, report.to_text())
            continue
        assert {f.kind for f in report.findings} == {"unwritten_output"}, (body, report.to_text())
        devices = ", ".join(map(str, unfilled))
        assert f"output `o_ref` (line {call}) is never written on device{'s' if len(unfilled) > 1 else ''} {devices}:" \
            in found[0].message, (body, found[0].message)


def test_a_reference_computed_before_its_call_that_names_no_meaning_is_said(tmp_path):
    """The lab harness computes `expected` first, a ppermute swapping pairs of devices (not
    one shift): the verdict says the reference was seen and why no meaning came of it (it
    said nothing, and the kernel looked checked against it)."""
    path = tmp_path / "swap.py"
    path.write_text(UNFILLED.replace("BODY", "o_ref[...] = x_ref[...]").replace(
        "f(jnp.ones((N * 8, 128), jnp.float32))",
        "x = jnp.ones((N * 8, 128), jnp.float32)\n"
        "expected = jax.jit(jax.shard_map(lambda v: lax.ppermute(v, 'i', [(0, 1), (1, 0), (2, 3), (3, 2)]),\n"
        "                                 mesh=jax.make_mesh((N,), ('i',)), in_specs=P('i'), out_specs=P('i')))(x)\n"
        "f(x)"))
    (report,) = check_file(str(path), 4)
    assert report.ok and any("computes a lax reference with `ppermute` that ringc cannot read" in a
                             and "permutes devices other than by one shift" in a for a in report.assumptions), \
        report.assumptions


def test_an_import_of_jax_core_is_no_question_about_tensorcores(tmp_path):
    """`from jax.core import Var` failing on JAX 0.10 (a notebook's helper, sweep 22): the
    fix is the import, not `--tpu v5p` (the word `core` of a module path is no count of cores)."""
    path = tmp_path / "old_import.py"
    path.write_text(HEAD + "from jax.core import Var\n\n"
                    "out = jax.jit(lambda a: pl.pallas_call(lambda x_ref, o_ref: None,\n"
                    "              out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype))(a))(Var)\n")
    with pytest.raises(ScheduleError) as refused:
        check_file(str(path), 1)
    assert "--tpu v5p" not in refused.value.fix and "ImportError raised at line 8" in refused.value.fix, \
        refused.value.fix


def test_a_module_of_triton_kernels_is_told_so_before_any_entry(tmp_path):
    """RorroArt/pallas_attn (sweep 22): the first message said only "no entry function"; the
    file imports `jax.experimental.pallas.triton`, which ringc does not check: said at once."""
    path = tmp_path / "paged.py"
    path.write_text(HEAD + "from jax.experimental.pallas import triton as plt\n\n"
                    "def paged_attention(q, k, v):\n"
                    "    return pl.pallas_call(lambda *r: None, out_shape=q,\n"
                    "                          compiler_params=plt.CompilerParams(num_warps=4))(q, k, v)\n")
    with pytest.raises(ScheduleError) as refused:
        check_file(str(path), 1)
    assert refused.value.fix.startswith("the file imports jax.experimental.pallas.triton"), refused.value.fix


def test_a_read_of_scratch_nothing_fills_into_an_output_is_an_error(tmp_path):
    """R-Oliver/sfp's notebook all-reduce (sweep 24): the remote copy lands in the neighbour's
    output, then each device stores `local + recv_scratch`, a scratch nothing writes. The
    output is filled (from the input), so `unwritten_output` said nothing, and the kernel was
    ok. A read of scratch that nothing fills, into what reaches an output, is `unwritten_read`
    at the read's line; initialising the scratch, or reading it only into scratch the caller
    never sees, is not."""
    path = tmp_path / "reads.py"
    cases = {
        "o_ref[...] = x_ref[...] + scratch_ref[...]": True,
        "tmp = scratch_ref[...]\n    o_ref[...] = x_ref[...] * 2.0 + tmp": True,
        "scratch_ref[...] = jnp.zeros_like(scratch_ref)\n    o_ref[...] = x_ref[...] + scratch_ref[...]": False,
        "scratch_ref[...] = x_ref[...]\n    o_ref[...] = x_ref[...] + scratch_ref[...]": False,
        "o_ref[...] = x_ref[...]\n    scratch_ref[...] = scratch_ref[...] * 2.0": False,   # reaches no output
    }
    for body, garbage in cases.items():
        text = UNFILLED.replace("BODY", body)
        path.write_text(text)
        (report,) = check_file(str(path), 4)
        if not garbage:
            assert report.ok, (body, report.to_text())
            continue
        assert {f.kind for f in report.findings} == {"unwritten_read"}, (body, report.to_text())
        (found,) = report.findings
        line = 1 + next(k for k, ln in enumerate(text.splitlines()) if "scratch_ref[...]" in ln and "o_ref" in ln
                        or ln.strip().startswith("tmp ="))
        assert found.event is not None and found.event.line == line, (body, found.message)
        assert "scratch `scratch_ref`" in found.message and "reaches output `o_ref`" in found.message, found.message
        assert "devices 0, 1, 2, 3" in found.message, found.message


AXIS_GATHER = HEAD + """
mesh = jax.make_mesh((2, 2), ("x", "y"))


def kernel(in_ref, out_ref, local_sem, send_sem, recv_sem):
    h = in_ref.shape[0]
    me = lax.axis_index("x")
    y = lax.axis_index("y")
    right = lax.rem(me + 1, 2)
    c = pltpu.make_async_copy(in_ref, out_ref.at[pl.ds(me * h, h)], local_sem)
    c.start()
    c.wait()
    r = pltpu.make_async_remote_copy(out_ref.at[pl.ds(me * h, h)], out_ref.at[pl.ds(me * h, h)], send_sem, recv_sem,
                                     device_id=TARGET, device_id_type=pltpu.DeviceIdType.MESH)
    r.start()
    r.wait()


def gather(x):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((2 * x.shape[0], x.shape[1]), x.dtype),
                          in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec(memory_space=pl.ANY),
                          scratch_shapes=[pltpu.SemaphoreType.DMA] * 3)(x)


w = jnp.arange(16 * 128, dtype=jnp.float32).reshape(16, 128)
ref = jax.jit(jax.shard_map(lambda x: lax.all_gather(x, "x", tiled=True), mesh=mesh, in_specs=P("x", None),
                            out_specs=P("x", None)))(w)
out = jax.jit(jax.shard_map(gather, mesh=mesh, in_specs=P("x", None), out_specs=P("x", None), check_vma=False))(w)
"""


def test_a_reference_along_one_axis_of_the_mesh_means_one_collective_per_group(tmp_path):
    """R-Oliver/sfp's notebook (sweep 24) all-gathers along `x` of a 2x2 mesh, against
    `lax.all_gather(x, "x", tiled=True)`: ringc sized the gather by all 4 devices, and the
    correct kernel was FAILED `wrong_result`. The meaning is one all-gather per group of the
    devices sharing their y coordinate; a kernel that sends along y instead, or to the wrong
    group, is still caught."""
    path = tmp_path / "axis.py"
    path.write_text(AXIS_GATHER.replace("TARGET", "(right, y)"))
    (report,) = check_file(str(path), 4)
    assert report.ok, report.to_text()
    assert any(a.startswith("meaning: all_gather along mesh axis x: one per group of the 2 devices that share their "
                            "y coordinate") for a in report.assumptions), report.assumptions
    path.write_text(AXIS_GATHER.replace("TARGET", "(me, 1 - y)"))     # along y: the other group's block
    (report,) = check_file(str(path), 4)
    assert "wrong_result" in {f.kind for f in report.findings}, report.to_text()
    path.write_text(AXIS_GATHER.replace("TARGET", "(right, 0)"))      # every device's into group y = 0
    (report,) = check_file(str(path), 4)
    assert not report.ok, report.to_text()


SAME_LINE_STARTS = HEAD + """
mesh = jax.make_mesh((2,), ("x",))


def kernel(in_ref, out_ref, local_sem, ssr, ssl, rsr, rsl):
    h = in_ref.shape[0]
    me = lax.axis_index("x")
    right = lax.rem(me + 1, 2)
    left = lax.rem(me + 1, 2)
    c = pltpu.make_async_copy(in_ref, out_ref.at[pl.ds(me * h, h)], local_sem)
    c.start(); c.wait()
    slot = out_ref.at[pl.ds(me * h, h)]
    r = pltpu.make_async_remote_copy(slot, slot, ssr, rsr, device_id=(right,), device_id_type=pltpu.DeviceIdType.MESH)
    l = pltpu.make_async_remote_copy(slot, slot, ssl, rsl, device_id=(left,), device_id_type=pltpu.DeviceIdType.MESH)
    r.start(); l.start(); r.wait(); l.wait()


def ag(x):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((2 * x.shape[0], x.shape[1]), x.dtype),
                          in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec(memory_space=pl.ANY),
                          scratch_shapes=[pltpu.SemaphoreType.DMA] * 5)(x)


out = jax.jit(jax.shard_map(ag, mesh=mesh, in_specs=P("x", None), out_specs=P("x", None), check_vma=False))(
    jnp.ones((16, 128), jnp.float32))
"""


def test_a_race_between_two_copies_started_on_one_line_names_their_semaphores(tmp_path):
    """R-Oliver/sfp's bidirectional all-gather on a ring of 2 (sweep 24): left and right are
    one device, so `r.start(); l.start()` write one slot there twice. The race named both
    `out_ref->out_ref` at one line and called them the 1st and 2nd run of the line; they are
    two copies, told apart by their semaphores, and they move the same bytes."""
    path = tmp_path / "both_ways.py"
    path.write_text(SAME_LINE_STARTS)
    (report,) = check_file(str(path), 2)
    races = [f for f in report.findings if f.kind == "race"]
    assert races, report.to_text()
    text = races[0].message
    assert "(on ssr/rsr)" in text and "(on ssl/rsl)" in text and "time the line runs" not in text, text
    assert "both copy device 1's `out_ref[8:16, 0:128]` there: the same bytes" in text, text


WHERE_RESET = HEAD + """
def kernel(x_ref, o_ref, acc_ref):
    j = pl.program_id(1)
    RESET
    acc_ref[...] += x_ref[...]
    o_ref[...] = acc_ref[...]


out = pl.pallas_call(
    kernel, grid=(4, 4),
    in_specs=[pl.BlockSpec((None, 8, 128), lambda b, t: (b, t, 0))],
    out_specs=pl.BlockSpec((None, 8, 128), lambda b, t: (b, t, 0)),
    out_shape=jax.ShapeDtypeStruct((4, 32, 128), jnp.float32),
    scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)],
    compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
)(jnp.ones((4, 32, 128), jnp.float32))
"""


def test_a_where_that_throws_a_loaded_value_away_is_no_dependency(tmp_path):
    """jax-llm-examples' serving attention (sweep 23) resets a carried scratch with
    `jnp.where(j != 0, acc_ref[...], 0)` on a `parallel` grid axis: at j = 0 the value read
    goes nowhere, so no iteration of the parallel axis depends on another, but the load
    was a read of the last iteration's scratch, FAILED `parallel_dependency`. A where whose
    condition is known takes its case, and a load only it read is no read; a load used
    besides, or a where that keeps the old value, still depends."""
    path = tmp_path / "reset.py"
    cases = {
        "acc_ref[...] = jnp.where(j != 0, acc_ref[...], jnp.zeros_like(acc_ref))": True,
        "acc_ref[...] = jnp.where(j >= 0, acc_ref[...], jnp.zeros_like(acc_ref))": False,     # keeps it at j = 0
        "a = acc_ref[...]\n    acc_ref[...] = jnp.where(j != 0, a, jnp.zeros_like(a)) + a * 0.5": False,
    }
    for reset, ok in cases.items():
        path.write_text(WHERE_RESET.replace("RESET", reset))
        (report,) = check_file(str(path), 1)
        if ok:
            assert report.ok, (reset, report.to_text())
        else:
            assert {f.kind for f in report.findings} == {"parallel_dependency"}, (reset, report.to_text())


def test_a_test_stopping_after_its_first_kernel_call_says_what_stopped_it(tmp_path):
    """jax-llm-examples' ragged attention test (sweep 23) calls its kernel, then imports
    `tune_jax` (not installed) before 25 tuned block sizes: the verdict was a plain ok, the
    other sizes never traced and nothing said. A test stopped after its first kernel calls
    by anything but a failed check of the placeholder results is a note naming the line and
    the error; a failed assert on the placeholders is expected, and says nothing."""
    path = tmp_path / "tuned_test.py"
    body = HEAD + """
def kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def add_one(x):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def test_main():
    x = jnp.zeros((8, 128), jnp.float32)
    y = jax.jit(add_one)(x)
    AFTER
"""
    path.write_text(body.replace("AFTER", "from tune_jax_not_installed import tune"))
    (report,) = check_file(str(path), 1)
    line = 1 + body.splitlines().index("    AFTER")
    assert any(f"test tuned_test.py::test_main stopped at line {line} after its first kernel calls "
               "(ModuleNotFoundError: No module named 'tune_jax_not_installed')" in a for a in report.assumptions), \
        report.assumptions
    path.write_text(body.replace("AFTER", "assert float(y.sum()) == 8 * 128.0"))
    (report,) = check_file(str(path), 1)
    assert not any("stopped at line" in a for a in report.assumptions), report.assumptions


def test_a_grouped_meanings_ranks_and_members_are_the_mesh_groups():
    """`GroupedMeaning` on a (2, 3, 4) mesh along (z, x): every device is the member of its own
    rank, each group holds the 8 devices that share y, and ranks go z major, as JAX indexes an
    axis tuple."""
    from ringc.collectives import unravel
    from ringc.verify.semantics import GroupedMeaning
    g = GroupedMeaning(None, (2, 3, 4), (2, 0), ("z", "x"))
    assert g.group_size == 8
    for d in range(24):
        assert g.member(d, g.rank(d)) == d
        group = [g.member(d, k) for k in range(8)]
        assert sorted(group) == sorted(e for e in range(24) if unravel(e, (2, 3, 4))[1] == unravel(d, (2, 3, 4))[1])
        # JAX's index along ("z", "x"): z major, x minor
        assert [(unravel(e, (2, 3, 4))[2], unravel(e, (2, 3, 4))[0]) for e in group[:4]] == [(0, 0), (0, 1), (1, 0), (1, 1)]


VMEM_KERNEL = HEAD + """
def double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def call(x):
    return pl.pallas_call(double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), PARAMS)(x)


y = jax.jit(call)(jnp.ones((ROWS, 128), jnp.float32))
"""
MOVING = "grid=(2,), in_specs=[pl.BlockSpec((ROWS // 2, 128), lambda i: (i, 0))], out_specs=pl.BlockSpec((ROWS // 2, 128), lambda i: (i, 0))"


@pytest.mark.parametrize("rows, params, over", [
    (32768, "", True),                                                                     # 16 + 16 MiB whole: over v5e's 16
    (16384, "", False),                                                                    # 8 + 8 MiB: fits
    (32768, "compiler_params=pltpu.CompilerParams(vmem_limit_bytes=40 * 2**20)", False),   # its own limit: fits
    (32768, "compiler_params=pltpu.CompilerParams(vmem_limit_bytes=30 * 2**20)", True),    # its own limit: over
    (16384, MOVING, False),                                                                # 2 x (4 + 4) MiB: fits
    (32768, MOVING, True),                                                                 # 2 x (8 + 8) MiB: over
])
def test_a_kernel_over_its_vmem_is_found_as_the_tpu_compiler_refuses_it(tmp_path, rows, params, over):
    """R-Oliver/sfp's bandwidth notebook (sweep 24) runs whole-array VMEM blocks of 16 MiB in and
    out, a loop its author marks `# This OOMs`: ringc said ok. A pallas_call whose blocks (twice
    where they move with the grid) and scratch are over the generation's scoped VMEM (or its
    vmem_limit_bytes) is `vmem_overflow`; libtpu's own compiler, on CPU for a v5e, refuses
    exactly the same kernels."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding
    pytest.importorskip("libtpu")
    text = VMEM_KERNEL.replace("PARAMS", params.replace("ROWS", str(rows))).replace(", )", ")").replace("ROWS", str(rows))
    path = tmp_path / "bandwidth.py"
    path.write_text(text)
    (report,) = check_file(str(path), 1)
    found = [f for f in report.findings if f.kind == "vmem_overflow"]
    assert bool(found) == over, report.to_text()
    if found:
        assert found[0].message.startswith("pallas_call `double` keeps at least 32.00 MiB in VMEM"), found[0].message
    # the same pallas_call, compiled by the TPU compiler for a v5e
    env: dict = {}
    exec(compile(text.split("\ny = ")[0], str(path), "exec"), env)
    device = topologies.get_topology_desc("v5e:2x2", platform="tpu").devices[0]
    try:
        jax.jit(env["call"]).lower(jax.ShapeDtypeStruct((rows, 128), jnp.float32,
                                                        sharding=SingleDeviceSharding(device))).compile()
        refused = False
    except Exception as e:   # noqa: BLE001 - the compiler's own error
        assert "vmem" in str(e).lower(), e
        refused = True
    assert refused == over


SCHEDULE = HEAD + """
WIN, NWIN = 8, 2


def build_schedule(lens_ref, sched_hbm, win_smem, sem):
    def build_window(w, _):
        for i in range(WIN):
            win_smem[i] = lens_ref[w * WIN + i] * 2
        pltpu.async_copy(win_smem, sched_hbm.at[pl.ds(pl.multiple_of(w * WIN, WIN), WIN)], sem).wait()
    lax.fori_loop(0, NWIN - 1, build_window, None)   # the windows it needs: window 0


def use_schedule(sched_hbm, x_hbm, o_ref, sched_smem, buf, sem):
    pltpu.async_copy(sched_hbm, sched_smem, sem).wait()
    n = sched_smem[ENTRY]
    pltpu.async_copy(x_hbm.at[pl.ds(0, n)], buf.at[pl.ds(0, n)], sem).wait()
    o_ref[...] = jnp.zeros_like(o_ref)
    o_ref[pl.ds(0, 8)] = buf[pl.ds(0, 8)]


@jax.jit
def run(lens, x):
    sched = pl.pallas_call(build_schedule, out_shape=jax.ShapeDtypeStruct((WIN * NWIN,), jnp.int32),
                           in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)], out_specs=pl.BlockSpec(memory_space=pl.ANY),
                           scratch_shapes=[pltpu.SMEM((WIN,), jnp.int32), pltpu.SemaphoreType.DMA(())])(lens)
    return pl.pallas_call(use_schedule, out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32),
                          in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)],
                          out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                          scratch_shapes=[pltpu.SMEM((WIN * NWIN,), jnp.int32), pltpu.VMEM((64, 128), jnp.float32),
                                          pltpu.SemaphoreType.DMA(())])(sched, x)


run(jnp.full((WIN * NWIN,), LEN, jnp.int32), jnp.ones((64, 128), jnp.float32))
"""


def test_a_schedule_built_in_part_and_copied_whole_keeps_what_is_known(tmp_path):
    """tpu-inference's stacked RPA writeback (sweep 25) builds its schedule in SMEM one window
    at a time, only the windows it needs, streams each into an HBM output, and the next
    kernel copies that whole array into SMEM and reads a built entry as a DMA size: one
    never-written entry made the whole copy unknown, and all 7 calls were not checked. The
    known entries stay known; an entry nothing wrote is runtime data where it is read, and
    a DMA sized by a known entry past its buffer is still out of bounds."""
    path = tmp_path / "stacked.py"
    report = _checked(path, SCHEDULE.replace("ENTRY", "0").replace("LEN", "4"))
    assert report.ok, report.to_text()
    report = _checked(path, SCHEDULE.replace("ENTRY", "0").replace("LEN", "40"))     # 80 rows of a 64-row buffer
    assert "out_of_bounds" in {f.kind for f in report.findings}, report.to_text()
    report = _checked(path, SCHEDULE.replace("ENTRY", "9").replace("LEN", "4"))      # an entry nothing wrote
    assert ("is read from `sched_smem` at line 22, which a DMA at line 21 filled from `sched_hbm`, where nothing wrote "
            "those elements with values ringc knows") in report.to_text(), report.to_text()


EMPTY_DMA = HEAD + """
def kernel(meta_ref, x_hbm, o_ref, buf, sem):
    start, n = meta_ref[0], meta_ref[1]
    copy = pltpu.make_async_copy(x_hbm.at[pl.ds(0, n)], buf.at[pl.ds(start, n)], sem)
    copy.start()
    copy.wait()
    pltpu.sync_copy(x_hbm, buf)
    o_ref[...] = buf[...]


out = jax.jit(lambda meta, x: pl.pallas_call(
    kernel, out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32),
    grid_spec=pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(1,), in_specs=[pl.BlockSpec(memory_space=pltpu.ANY)],
        out_specs=pl.BlockSpec((64, 128), lambda i, m: (0, 0)),
        scratch_shapes=[pltpu.VMEM((64, 128), jnp.float32), pltpu.SemaphoreType.DMA(())]))(meta, x))(
    jnp.array([65, ROWS], jnp.int32), jnp.ones((64, 128), jnp.float32))
"""


def test_an_empty_dma_past_the_end_is_no_access_and_an_smem_built_output_is_written(tmp_path):
    """tpu-inference's fused MoE masks padding rows with `pl.ds(start, should_gather)`, a DMA of
    0 rows whose start may be past the buffer (sweep 25): 15 `out_of_bounds` errors buried its
    real race. An empty slice touches nothing; one row there is still out of bounds. And a
    kernel that fills an SMEM scratch with scalar stores and copies it to its HBM output
    (serving metadata) writes that output: it was `unwritten_output`."""
    path = tmp_path / "empty.py"
    report = _checked(path, EMPTY_DMA.replace("ROWS", "0"))
    assert report.ok, report.to_text()
    report = _checked(path, EMPTY_DMA.replace("ROWS", "1"))
    assert "out_of_bounds" in {f.kind for f in report.findings}, report.to_text()
    report = _checked(path, HEAD + """
def build(lens_ref, sched_hbm, sched_smem, sem):
    for i in range(8):
        sched_smem[i] = lens_ref[i] * 2
    pltpu.async_copy(sched_smem, sched_hbm, sem).wait()


jax.jit(lambda lens: pl.pallas_call(build, out_shape=jax.ShapeDtypeStruct((8,), jnp.int32),
                                    in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
                                    out_specs=pl.BlockSpec(memory_space=pl.ANY),
                                    scratch_shapes=[pltpu.SMEM((8,), jnp.int32), pltpu.SemaphoreType.DMA(())])(lens))(
    jnp.arange(8, dtype=jnp.int32))
""")
    assert report.ok, report.to_text()


ROUTED = HEAD + """
T, E, K, H = 16, 4, 2, 128


def kernel(sizes_ref, x_ref, o_ref):
    o_ref[...] = jnp.zeros_like(o_ref)

    def body(r, _):
        o_ref[pl.ds(r, 1)] = x_ref[pl.ds(r, 1)]
    lax.fori_loop(0, ROWS, body, None)


@jax.jit
def moe(x, logits):
    _, idx = lax.top_k(logits, K)
    sizes = jnp.sum(idx.reshape(-1)[:, None] == jnp.arange(E)[None], axis=0).astype(jnp.int32)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((T, H), jnp.float32),
                          grid_spec=pltpu.PrefetchScalarGridSpec(
                              num_scalar_prefetch=1, grid=(1,),
                              in_specs=[pl.BlockSpec((T, H), lambda i, s: (0, 0))],
                              out_specs=pl.BlockSpec((T, H), lambda i, s: (0, 0))))(sizes, x)


moe(jnp.ones((T, H), jnp.float32), jax.random.normal(jax.random.key(0), (T, E)))
"""


def test_group_sizes_counted_from_a_routers_top_k_before_the_kernel_are_sampled(tmp_path):
    """Serving stacks count per-expert group sizes from the router's `top_k` in the jitted code
    and pass them as scalar prefetch (sweep 25): the call was not checked ("computed before
    the kernel from values ringc does not know"), though the README says top-k routing is
    sampled. The indices are sampled in their range, distinct per row, and the sizes follow;
    a loop past the tokens is then out of bounds."""
    path = tmp_path / "routed.py"
    report = _checked(path, ROUTED.replace("ROWS", "sizes_ref[0]"))
    assert report.ok, report.to_text()
    assert any("values from tensor data: `top_k` at line 22 (before the kernels) is runtime data; ringc sampled its "
               "indices in their range [0, 4), distinct in each row" in a for a in report.assumptions), report.assumptions
    report = _checked(path, ROUTED.replace("ROWS", "sizes_ref[0] + T"))
    assert "out_of_bounds" in {f.kind for f in report.findings}, report.to_text()


def test_a_kernel_taking_a_pallas_prng_key_is_checked(tmp_path):
    """JAX's `tpu_pallas_random_test.py` (sweep 26) passes a typed Pallas PRNG key (`key<pl>`,
    an extended dtype numpy cannot size) in SMEM: the VMEM accounting raised an internal
    error on it. Its bytes are the key's own."""
    path = tmp_path / "key.py"
    path.write_text(HEAD + """
import functools
from jax import random as jax_random


@functools.partial(pl.pallas_call, grid=(),
                   in_specs=[pl.BlockSpec((pl.squeezed,), lambda: (0,), memory_space=pltpu.SMEM)],
                   out_specs=pl.BlockSpec((8, 128)), out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32))
def kernel(key_ref, o_ref):
    o_ref[...] = jax_random.uniform(key_ref[...], shape=o_ref.shape)


jax.jit(kernel)(pltpu.to_pallas_key(jax_random.key(0, impl="rbg"))[None])
""")
    (report,) = check_file(str(path), 1)
    assert report.ok, report.to_text()


SELECTED = HEAD + """
from functools import partial


@partial(pl.pallas_call, in_specs=[pl.BlockSpec(memory_space=pltpu.HBM)] * 4,
         out_specs=pl.BlockSpec(memory_space=pltpu.HBM), out_shape=jax.ShapeDtypeStruct((32, COLS), jnp.int32))
def kernel(*hbm_refs):
    *x_hbm_refs, y_hbm_ref = hbm_refs

    def body(sem):
        @pl.loop(0, 4)
        def _(i):
            COPY
    pl.run_scoped(body, pltpu.SemaphoreType.DMA(2))


x = jnp.arange(32 * COLS).reshape((32, COLS))
jax.jit(kernel)(*jnp.split(x, 4))
"""


def test_a_select_ref_index_past_the_refs_takes_the_last_as_mosaic_lowers_it(tmp_path):
    """JAX's `test_select_ref` (sweep 26) loops 4 indices over `pl.select_ref(i, sem.at[0],
    sem.at[1])`: Mosaic lowers select_ref as nested ifs whose last else is the last ref, so
    indices 2 and 3 take `sem.at[1]`, and the test passes; ringc refused the call. It takes
    the last ref too, and says so."""
    report = _checked(tmp_path / "select.py", SELECTED.replace("COLS", "128").replace(
        "COPY", "pltpu.async_copy(pl.select_ref(i, *x_hbm_refs), y_hbm_ref.at[pl.ds(8 * i, 8)],\n"
                "                             pl.select_ref(i, sem.at[0], sem.at[1])).wait()"))
    assert report.ok, report.to_text()
    assert any("a `pl.select_ref` of 2 refs used at line" in a and "gets index 2" in a for a in report.assumptions), \
        report.assumptions


def test_a_nested_select_ref_reshaped_to_its_shape_is_the_ref_it_selects(tmp_path):
    """JAX's `test_select_ref_nested` (sweep 26): `pl.select_ref(i, *(pl.select_ref(0,
    r.at[:, :128], r.at[:, 128:]) for r in refs)).reshape(8, 128)`: the outer selection kept
    the inner one's transforms unapplied ("a reshape of `?`, which is not a ref"), and the
    reshape to the shape the slice has was refused as a view of memory that is not
    contiguous. The selected slice is the ref; a reshape to its own shape is no view."""
    report = _checked(tmp_path / "nested.py", SELECTED.replace("COLS", "256").replace(
        "COPY", "nested = (pl.select_ref(0, r.at[:, :128], r.at[:, 128:]) for r in x_hbm_refs)\n"
                "            pltpu.async_copy(pl.select_ref(i, *nested).reshape(8, 128),\n"
                "                             y_hbm_ref.at[pl.ds(8 * i, 8), :128], sem.at[0]).wait()"))
    assert report.ok, report.to_text()
