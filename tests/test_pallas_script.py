"""`ringc check` on scripts and notebooks as published (no build(mesh)): `ringc/pallas/script.py`.

The fixture `tests/pallas_import/notebook_permute.py` is written the way the Pallas
distributed tutorial's cells are: a TPU assert, a mesh over `jax.devices()`, kernels run at
top level next to their `lax` references. Its second kernel has a planted race.
"""

import json
import textwrap
from pathlib import Path

import pytest

from ringc.errors import ScheduleError
from ringc.pallas import check_file


NOTEBOOK = Path(__file__).parent / "pallas_import" / "notebook_permute.py"
TEXT = NOTEBOOK.read_text()
BUG = next(line for line in TEXT.splitlines() if "# the planted bug" in line and "wait_send" in line)
COPY_LINE = [i for i, line in enumerate(TEXT.splitlines(), 1) if "remote_copy_op.start()" in line][1]


def test_script_kernels_are_captured_and_checked_in_order():
    first, second = check_file(str(NOTEBOOK), 3)
    assert first.ok, first.to_text()
    assert "right_permute_kernel" in first.title and "kernel call 1 of 2" in first.title
    assert any("meaning: ppermute by 1" in a for a in first.assumptions)
    # The TPU assert holds: the devices answer as a TPU v5e, and the verdict says so.
    assert not any("AssertionError" in a for a in first.assumptions)
    assert any(a.startswith("devices answer as TPU v5e (--tpu)") and "asked device_kind" in a
               for a in first.assumptions)
    assert not second.ok
    assert "race" in second.kinds()
    assert {int(f.event.line) for f in second.findings if f.kind == "race"} == {COPY_LINE}
    assert any("meaning: all_gather" in a for a in second.assumptions)


def test_the_fixed_script_checks_clean(tmp_path):
    fixed = tmp_path / "fixed.py"
    fixed.write_text(TEXT.replace(BUG, "    remote_copy_op.wait()"))
    reports = check_file(str(fixed), 3)
    assert [r.ok for r in reports] == [True, True], "\n".join(r.to_text() for r in reports)


def test_a_myst_notebook_reports_lines_of_the_md_file(tmp_path):
    """Code cells of a MyST notebook, with prose and cell options between them: findings
    point at the .md file's lines."""
    cells = TEXT.split("# Cell 2:")
    md = ["# A notebook", "", "Some prose with `code`.", "", "```{code-cell} ipython3", "---",
          "id: abc", "---", *cells[0].splitlines(), "```", "", "More prose.", "", "```{code-cell} ipython3",
          "%matplotlib inline", "# Cell 2:" + cells[1].rstrip("\n").split("\n", 1)[0],
          *cells[1].rstrip("\n").split("\n")[1:], "```"]
    path = tmp_path / "notebook.md"
    path.write_text("\n".join(md) + "\n")
    first, second = check_file(str(path), 3)
    assert first.ok and not second.ok
    md_copy = [i for i, line in enumerate(md, 1) if "remote_copy_op.start()" in line][1]
    assert {int(f.event.line) for f in second.findings if f.kind == "race"} == {md_copy}


def test_json_names_the_call():
    _, second = check_file(str(NOTEBOOK), 3)
    out = json.loads(json.dumps(second.to_json()))
    assert out["call"].startswith("all_gather_kernel (line ")
    assert out["ok"] is False


@pytest.mark.parametrize("text, message, line", [
    ("import jax\nx = 1 +\n", "not valid Python", 2),
    ("import jax\nprint(jax.devices())\n", "ran no pallas_call", None),
])
def test_scripts_that_give_nothing_to_check_are_errors(tmp_path, text, message, line):
    path = tmp_path / "s.py"
    path.write_text(text)
    with pytest.raises(ScheduleError) as e:
        check_file(str(path), 2)
    assert message in str(e.value)
    assert e.value.line == line


def test_a_script_takes_no_along():
    with pytest.raises(ScheduleError, match="--along"):
        check_file(str(NOTEBOOK), 2, along="y")


def test_a_script_takes_no_params_and_needs_devices():
    with pytest.raises(ScheduleError, match="takes no params"):
        check_file(str(NOTEBOOK), 2, params={"rows": 8})
    with pytest.raises(ScheduleError, match="--devices"):
        check_file(str(NOTEBOOK), None)


UNITTESTS = Path(__file__).parent / "pallas_import" / "unittest_permute.py"


def test_a_test_module_runs_its_tests_and_checks_every_kernel_call():
    reports = check_file(str(UNITTESTS), 3)
    by_test = {r.title.split(":")[0]: r for r in reports}
    assert set(by_test) == {"PermuteTest.test_permute_eager", "PermuteTest.test_permute_no_recv_wait",
                            "PermuteTest.test_permute_on_tpu", "PermuteTest.test_permute_on_wait"}
    # The same kernel in two tests (other interpret settings) is checked once: each test gets
    # the verdict, titled with its own line, and the second says it is the first's.
    assert by_test["PermuteTest.test_permute_eager"].ok
    again = by_test["PermuteTest.test_permute_on_wait"]
    assert again.ok and any(a.startswith("identical to kernel call ") and "checked once" in a
                            for a in again.assumptions)
    assert by_test["PermuteTest.test_permute_on_tpu"].ok  # skipped off TPU, rerun as on a TPU
    broken = by_test["PermuteTest.test_permute_no_recv_wait"]
    assert {"dma_not_waited", "race"} <= broken.kinds()
    notes = [a for r in reports for a in r.assumptions if a.startswith("script note")]
    assert any("test_broken_before_any_kernel stopped before any kernel call" in a for a in notes)


def test_a_module_of_functions_has_its_entry_function_called():
    """JAX's own all-gather op, unmodified (`ringc check .../ops/tpu/all_gather.py`): no build,
    no top-level call; ringc calls `all_gather(x, mesh=, axis_name=)` with a default x."""
    from jax.experimental.pallas.ops.tpu import all_gather as op
    ok, = check_file(op.__file__, 2)
    assert ok.ok, ok.to_text()
    assert ok.title.startswith("all_gather(x=float32[8*N,128]@x (default; set with --arg))")
    racy, = check_file(op.__file__, 3)
    assert racy.kinds() == {"race"}
    assert any("entry functions ringc called" in a and "all_gather ran 1 kernel call" in a for a in racy.assumptions)


def test_entry_and_arg_name_the_call():
    from jax.experimental.pallas.ops.tpu import all_gather as op
    from ringc.pallas.entries import parse_arg
    report, = check_file(op.__file__, 2, entry="all_gather", args=[parse_arg("x=float32[16*N,128]@x")])
    assert report.ok and "x=float32[16*N,128]@x)" in report.title
    with pytest.raises(ScheduleError, match="no function of that name"):
        check_file(op.__file__, 2, entry="all_gatherr")


@pytest.mark.parametrize("text, message", [
    ("x=float32[8*N,128]@x,", None),
    ("x float32[8]", "is not NAME=DTYPE"),
    ("x=float99[8]", "unknown dtype"),
    ("x=float32[8]@x,y", "2 sharding entries for 1 dimensions"),
])
def test_arg_syntax(text, message):
    from ringc.pallas.entries import parse_arg
    if message is None:
        a = parse_arg(text)
        assert (a.name, a.dtype, a.dims, a.spec) == ("x", "float32", ("8*N", "128"), ("x", ""))
    else:
        with pytest.raises(ValueError, match=message):
            parse_arg(text)


def test_a_module_inside_its_package_imports_it_and_takes_keywords(tmp_path):
    """A kernel module that imports its own package (`from pkg.kernels import helpers`) is
    run with the package's root on the path, as in its repository; `--param` passes integer
    keywords to the entry function."""
    kernels = tmp_path / "repo" / "pkg" / "kernels"
    kernels.mkdir(parents=True)
    (kernels / "__init__.py").write_text("")
    (kernels / "helpers.py").write_text("def wait_recv(copy, late):\n    if not late:\n        copy.wait_recv()\n")
    module = UNITTESTS.read_text().split("class PermuteTest")[0]
    module = module.replace("        if wait_recv:\n            copy.wait_recv()\n", "        helpers.wait_recv(copy, late)\n")
    module = module.replace("def permute(x, mesh, *, wait_recv=True, interpret=None):",
                            "def permute(x, *, mesh, axis_name, late=0, interpret=None):")
    module = module.replace('"""Kernels in a test module', '"""Kernels in a package module').replace(
        "import unittest\n", "import unittest\n\nfrom pkg.kernels import helpers\n")
    path = kernels / "permute.py"
    path.write_text(module)
    ok, = check_file(str(path), 3)
    assert ok.ok, ok.to_text()
    late, = check_file(str(path), 3, params={"late": 1})
    assert "late=1" in late.title and {"dma_not_waited", "race"} <= late.kinds()


def test_entry_and_arg_are_refused_for_a_schedule():
    from cli_run import assert_refused, run_cli
    from conftest import REPO
    o = run_cli(["check", str(REPO / "schedules" / "ppermute_right.yaml"), "--devices", "2",
                 "--arg", "x=float32[8*N,128]@x"])
    assert_refused(o, says="--entry, --arg")


MATMUL_T_SCRIPT = """\
import jax
from jax import lax
import kernel_module

mesh = jax.make_mesh((jax.device_count(),), ("x",))
x, y = kernel_module.make_inputs(mesh, 0)
out = kernel_module.build(mesh)(x, y)
ref = jax.jit(jax.shard_map(lambda x, y: lax.all_gather(x, "x", tiled=True) @ y.T, mesh=mesh,
                            in_specs=kernel_module.IN_SPECS, out_specs=kernel_module.OUT_SPECS, check_vma=False))(x, y)
"""


def test_a_lax_reference_of_x_times_y_transposed_names_the_transposed_meaning(tmp_path):
    """`lax.all_gather(x) @ y.T` next to a kernel names all_gather_matmul_t (a 2-D transpose
    feeding the dot counts as its dimension numbers): the emitted library kernel checks clean
    against it, and the same kernel multiplying by y, not y.T, is a wrong result."""
    import ringc
    repo = Path(__file__).parent.parent
    for yaml_path, ok in ((repo / "schedules" / "all_gather_matmul_t.yaml", True),
                          (repo / "tests" / "broken" / "all_gather_matmul_t_not_transposed.yaml", False)):
        case = tmp_path / yaml_path.stem
        case.mkdir()
        # A module name per case: the scripts run in this process, which keeps what they import.
        (case / f"{yaml_path.stem}.py").write_text(ringc.emit(ringc.load(str(yaml_path))))
        (case / "script.py").write_text(MATMUL_T_SCRIPT.replace("kernel_module", yaml_path.stem))
        report, = check_file(str(case / "script.py"), 2)
        assert any("meaning: all_gather_matmul_t" in a for a in report.assumptions), report.to_text()
        assert report.ok == ok and (ok or report.kinds() == {"wrong_result"}), report.to_text()


def test_collective_matmul_references_are_named_by_their_dot():
    """One collective and one dot_general: which operand the collective feeds or reads, and
    whether y is contracted on its last dim (`y.T`, an einsum `nk`), name the meaning."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import PartitionSpec as P
    from ringc.pallas.script import lax_reference as _reference
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]), ("x",))
    x, y, yt = jnp.ones((64, 256)), jnp.ones((256, 512)), jnp.ones((512, 256))
    gathered = (P("x", None), P(None, "x")), P(None, "x")
    cases = [
        (lambda x, y: lax.all_gather(x, "x", tiled=True) @ y, (x, y), gathered, "all_gather_matmul"),
        (lambda x, y: lax.all_gather(x, "x", tiled=True) @ y.T, (x, yt), ((P("x", None),) * 2, P(None, "x")),
         "all_gather_matmul_t"),
        (lambda x, y: jnp.einsum("jmk,nk->jmn", lax.all_gather(x, "x"), y, preferred_element_type=jnp.float32),
         (x, yt), ((P("x", None),) * 2, P(None, "x")), "all_gather_matmul_t"),
        (lambda x, y: lax.psum_scatter(x @ y, "x", tiled=True), (x, y), ((P(None, "x"), P("x", None)), P("x", None)),
         "matmul_psum_scatter"),
        (lambda x, y: lax.psum_scatter(x @ y.T, "x", tiled=True), (x, yt), ((P(None, "x"),) * 2, P("x", None)),
         "matmul_psum_scatter_t"),
        # y @ all_gather(x).T: the gathered x is not the left operand, no collective matmul
        (lambda x, y: y @ lax.all_gather(x, "x", tiled=True).T, (x, yt), ((P("x", None),) * 2, P(None, "x")), None),
        # gathered along the contraction dim (TPU-Collectives' reference, sweep 18: a false
        # wrong_result on a correct kernel), or the product scattered along dim 1: not the table's
        (lambda x, y: lax.all_gather(x, "x", axis=1, tiled=True) @ y, (x, y), ((P(None, "x"), P(None, None)),
                                                                             P(None, None)), None),
        (lambda x, y: lax.psum_scatter(x @ y, "x", scatter_dimension=1, tiled=True), (x, y),
         ((P(None, "x"), P("x", None)), P(None, "x")), None),
    ]
    for f, args, (ins, out), want in cases:
        fn = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=ins, out_specs=out, check_vma=False))
        got = _reference(jax.make_jaxpr(fn)(*args).jaxpr)
        assert (got and got["kind"]) == want, (want, got)


def test_a_test_that_errs_after_single_device_calls_only_is_a_note():
    path = Path(__file__).parent / "pallas_import" / "local_then_collective_unittest.py"
    local, report, broken = check_file(str(path), 4)
    assert local.ok and local.program.n == 1 and "T.test_a_ok: _copy" in local.title, local.to_text()
    assert report.ok and "T.test_a_ok: _permute" in report.title, report.to_text()
    assert broken.ok and "T.test_b_broken: _copy" in broken.title, broken.to_text()
    note, = [a for a in local.assumptions if "test_b_broken" in a]
    assert "stopped with an error after single-device kernel calls only (RuntimeError: broke before the " \
           "collective)" in note and "was not checked" in note
    assert not any("test_a_ok stopped" in a for a in local.assumptions + report.assumptions)


def test_a_kernel_calling_a_helper_the_file_lacks_names_the_line_that_raised(tmp_path):
    """A copy of the tutorial's reduce-scatter published without its `local_barrier` helper:
    the top-level statement that runs the kernel fails with a NameError inside the kernel body.
    The refusal names the kernel's line, not only the statement's, and its fix says to fix that
    error first (it said to pass --entry)."""
    script = tmp_path / "copied.py"
    script.write_text(
        "import jax\nimport jax.numpy as jnp\nfrom jax.experimental import pallas as pl\n"
        "from jax.experimental.pallas import tpu as pltpu\n\n"
        "mesh = jax.make_mesh((jax.device_count(),), ('x',))\n\n\n"
        "def kernel(x_ref, o_ref):\n"
        "    local_barrier()\n"
        "    o_ref[...] = x_ref[...]\n\n\n"
        "def run(x):\n"
        "    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32))(x)\n\n\n"
        "out = jax.jit(jax.shard_map(run, mesh=mesh, in_specs=jax.P('x'), out_specs=jax.P('x'), check_vma=False))(\n"
        "    jnp.zeros((8 * jax.device_count(), 128)))\n")
    with pytest.raises(ScheduleError) as e:
        check_file(str(script), 2)
    assert "line 18: NameError: name 'local_barrier' is not defined, raised at line 10 (ringc ran the next" \
        in e.value.message
    assert e.value.fix.startswith("the NameError raised at line 10 stopped the script before its kernel ran")



def test_the_first_failing_statement_is_named_not_the_errors_it_caused(tmp_path):
    """A JAX test file imports a test utility from jax._src that the installed wheel lacks
    (`from jax._src import hypothesis_test_util as htu`): every later use of `htu` is a
    NameError inside a function. The fix names the import (it named the first NameError) and
    says where JAX's test utilities are."""
    script = tmp_path / "uses_test_util.py"
    script.write_text(
        "import jax\nimport jax.numpy as jnp\n"
        "from jax._src import no_such_test_util as htu\n\n\n"
        "def make():\n"
        "    return htu.inputs()\n\n\n"
        "x = make()\n")
    with pytest.raises(ScheduleError) as e:
        check_file(str(script), 2)
    assert "line 3: ImportError" in e.value.message and "line 10: NameError" in e.value.message
    assert e.value.fix.startswith("the ImportError raised at line 3 stopped the script before its kernel ran"), \
        e.value.fix
    assert "not the installed wheel" in e.value.fix


AXIS_TYPES_BY_POSITION = '''
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

n = jax.device_count()
mesh = jax.make_mesh((n,), ("x",), (jax.sharding.AxisType.Explicit,))


def kernel(x_ref, o_ref, send_sem, recv_sem):
    right = jax.lax.rem(jax.lax.axis_index("x") + 1, n)
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(right,),
                                        device_id_type=pltpu.DeviceIdType.MESH)
    copy.start()
    copy.wait()


@jax.jit
def permute(x):
    def shard(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                              in_specs=[pl.BlockSpec(memory_space=pltpu.ANY)],
                              out_specs=pl.BlockSpec(memory_space=pltpu.ANY),
                              scratch_shapes=[pltpu.SemaphoreType.DMA] * 2)(x)
    return jax.shard_map(shard, mesh=mesh, in_specs=jax.P("x"), out_specs=jax.P("x"), check_vma=False)(x)


permute(jax.device_put(jnp.zeros((8 * n, 128), jnp.float32), jax.sharding.NamedSharding(mesh, jax.P("x"))))
'''


def test_make_mesh_takes_axis_types_by_position(tmp_path):
    """`jax.make_mesh(shape, names, (AxisType.Explicit,))`, as JAX's signature allows: ringc's
    stand-in (the script's devices) took `axis_types` by keyword only and raised a TypeError
    of its own, refused as the script's."""
    path = tmp_path / "explicit_mesh.py"
    path.write_text(AXIS_TYPES_BY_POSITION)
    (report,) = check_file(str(path), 4)
    assert report.ok, report.to_text()
    assert not any("without axis_types" in a for a in report.assumptions)


def test_a_kernel_the_script_only_lowers_is_checked_as_if_called(tmp_path):
    """`print(f.lower(x).compiler_ir())`, as scripts that dump a kernel's Mosaic payload do:
    the print is run (not skipped as output only), the lowering's program is captured, and
    the verdict says the script never called it. A kernel that forgets to wait is still
    found."""
    text = AXIS_TYPES_BY_POSITION.replace('mesh = jax.make_mesh((n,), ("x",), (jax.sharding.AxisType.Explicit,))',
                                          'mesh = jax.make_mesh((n,), ("x",))')
    text = text.replace("\npermute(jax.device_put(", "\nprint(permute.lower(jax.device_put(").rstrip() + ".compiler_ir())\n"
    path = tmp_path / "lowered.py"
    path.write_text(text)
    (report,) = check_file(str(path), 4)
    assert report.ok, report.to_text()
    assert any("only lowers this jitted function" in a for a in report.assumptions), report.assumptions
    path.write_text(text.replace("    copy.wait()\n", ""))
    (report,) = check_file(str(path), 4)
    assert not report.ok and "dma_not_waited" in report.kinds(), report.to_text()


def _skipping_test_module(setup: str) -> str:
    """A unittest module of one copy kernel whose setUp is `setup` (lines that may skip it)."""
    return ("import unittest\nimport jax\nimport jax.numpy as jnp\nfrom jax.experimental import pallas as pl\n\n\n"
            "class KernelTest(unittest.TestCase):\n"
            "    def setUp(self):\n" + setup + "\n"
            "    def test_copy(self):\n"
            "        def kernel(x_ref, o_ref):\n"
            "            o_ref[...] = x_ref[...]\n"
            "        pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32))(jnp.zeros((8, 128)))\n\n\n"
            "if __name__ == '__main__':\n"
            "    unittest.main()\n")


def test_a_test_module_whose_tests_all_skip_themselves_says_which_tpus_ringc_answers_as(tmp_path):
    """As vLLM tpu-inference's MoE test, each test skips itself on a TPU older than v7: the fix
    names the skip and the generations `--tpu` offers (it suggested --entry first)."""
    path = tmp_path / "needs_v7_test.py"
    path.write_text(_skipping_test_module("        self.skipTest('Expect TPUv7+')\n"))
    with pytest.raises(ScheduleError) as e:
        check_file(str(path), 2)
    assert e.value.fix.startswith("every test that ran skipped itself (Expect TPUv7+): where it asks for a TPU "
                                  "generation, ringc answers as --tpu's (v5e, v5p, v4, v6e, v7x; v5e now), so pick "
                                  "the one it needs (--tpu v7x)"), e.value.fix


def test_a_long_test_module_clears_jaxs_caches_under_memory_pressure_and_keeps_no_data_arrays(tmp_path, monkeypatch):
    """A test module of hundreds of tests grew by its compiled functions and by every captured
    call's argument arrays (JetStream's 864 tests: 14 GB, sweep 17). Captures keep only what
    the check reads (small integers' values, other arrays' shapes), and over half of
    `user_code_mib` between tests ringc clears JAX's caches, and says so."""
    import numpy as np
    from ringc import limits
    from ringc.pallas import script as script_mod
    path = tmp_path / "copy_test.py"
    path.write_text(_skipping_test_module("        pass\n"))
    monkeypatch.setattr(limits, "resident_mib", lambda: limits.value("user_code_mib"))
    report, = check_file(str(path), 1)
    assert report.ok and any("cleared JAX's caches" in a for a in report.assumptions), report.assumptions
    kept = script_mod.snapshot_args((np.zeros((8, 128), np.float32), np.arange(4, dtype=np.int32), 3))
    assert type(kept[0]).__name__ == "ShapeDtypeStruct" and kept[1].tolist() == [0, 1, 2, 3] and kept[2] == 3
    assert script_mod.small_ints(kept[0]) is None


def test_a_reference_pairs_with_a_kernel_call_by_the_array_itself_not_its_id():
    """Captured calls no longer keep their argument arrays alive, so an id() may name a later
    array: sweep 18's TPU-Collectives run took a ppermute kernel's meaning from another
    scenario's all_gather reference on a new array (a false wrong_result). The pairing holds
    the first argument weakly and compares the object."""
    import gc
    import numpy as np
    from ringc.pallas.script import FirstArg
    a = np.zeros(3)
    first = FirstArg((a, 1))
    assert first.names((a,)) and not first.names((np.zeros(3),)) and not first.names(())
    del a
    gc.collect()
    assert not first.names((np.zeros(3),))
    assert FirstArg((7,)).names((7,))   # a Python scalar, kept as it is


def test_a_test_module_of_sparsecore_kernels_is_told_they_are_not_modelled(tmp_path):
    """JAX's tpu_pallas_mpmd_test skips below v5p ("SparseCore only supported on TPU v5p+"):
    the advice was to pick a --tpu, and at v5p the kernels are refused (sweep 17). The fix
    says at once that SparseCore kernels are not modelled at any --tpu."""
    path = tmp_path / "sc_test.py"
    path.write_text(_skipping_test_module("        self.skipTest('SparseCore only supported on TPU v5p+')\n"))
    with pytest.raises(ScheduleError) as e:
        check_file(str(path), 2)
    assert "SparseCore kernels (jax.experimental.pallas.tpu_sc), which ringc does not model at any --tpu" \
        in e.value.fix and "pick the one it needs" not in e.value.fix, e.value.fix


def test_a_test_module_that_skips_for_its_device_count_names_the_count(tmp_path):
    """Sweep 12 (tpu-inference's all_gather_matmul test: `if jax.device_count() != 8:
    self.skipTest('Not enough devices for test')`): the skip names no count, the file does;
    the fix names it and the --devices that runs the tests, and with it the kernel is checked."""
    path = tmp_path / "eight_test.py"
    path.write_text(_skipping_test_module("        if jax.device_count() != 8:\n"
                                          "            self.skipTest('Not enough devices for test')\n"))
    with pytest.raises(ScheduleError) as e:
        check_file(str(path), 4)
    assert e.value.fix.startswith("every test that ran skipped itself (Not enough devices for test): it compares the "
                                  "device count with 8 (`device_count() != 8`, line 9): check with --devices 8"), e.value.fix
    report, = check_file(str(path), 8)
    assert report.ok, report.to_text()


def test_a_python_file_without_devices_runs_on_a_default_count_it_states(tmp_path, capsys):
    """Sweep 14: every published file's first `ringc check FILE.py` was refused for want of
    --devices. A Python file now runs on 4 CPU devices, or on the count its code compares the
    device count with (tpu-inference's `!= 8`), and each verdict says so; a schedule (.yaml)
    still needs --devices (its N is the question)."""
    from ringc.cli import main
    path = tmp_path / "eight_test.py"
    path.write_text(_skipping_test_module("        if jax.device_count() != 8:\n"
                                          "            self.skipTest('Not enough devices for test')\n"))
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    # (a one-chip kernel, so N=1; on fewer than 8 devices its test would have skipped itself)
    assert "N=1: ok" in out and ("assumes: --devices 8, not given: the file compares the device count with 8 "
                                 "(`device_count() != 8`, line 9)") in out, out
    assert main(["check", str(NOTEBOOK.parent / "right_permute.py")]) == 0
    out = capsys.readouterr().out
    assert "N=4: ok" in out and "assumes: --devices 4, not given: ringc's default for a Python file (4)" in out, out
    assert main(["check", str(NOTEBOOK.parents[2] / "schedules" / "all_gather_ring.yaml")]) == 2
    assert "--devices is required" in capsys.readouterr().err


def test_a_reference_that_does_more_than_its_collective_names_no_meaning():
    """`all_gather(x)[:, axis_index]` is an all-to-all, `psum(x * mask)` no psum of x,
    `psum(x[:4])` a sum of part of x: none is read as the collective's meaning (a false
    wrong_result before, on marin's spike_transport_mgpu.py); what only converts, reshapes or
    applies a function elementwise still is."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import PartitionSpec as P
    from ringc.pallas.script import _unread_reference, lax_reference as _reference
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]), ("x",))
    x, mask = jnp.ones((32, 128)), jnp.ones((32, 128))
    cases = [
        (lambda v: lax.all_gather(v, "x", axis=0, tiled=False)[:, lax.axis_index("x")], (x,), None),
        (lambda v, m: lax.psum(v * m, "x"), (x, mask), None),
        (lambda v: lax.psum(v[:4], "x"), (x,), None),
        (lambda v: lax.psum(v, "x") + v, (x,), None),
        (lambda v: lax.all_gather(v, "x", tiled=True).T, (x,), None),
        (lambda v: lax.psum(v.astype(jnp.bfloat16), "x").reshape(-1), (x,), "psum"),
        (lambda v: jnp.tanh(lax.ppermute(v, "x", [(i, (i + 1) % 4) for i in range(4)])), (x,), "ppermute"),
        (lambda v: lax.psum(2.0 * v, "x"), (x,), "psum"),
    ]
    for f, args, want in cases:
        fn = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P("x"),) * len(args), out_specs=P("x"), check_vma=False))
        jaxpr = jax.make_jaxpr(fn)(*args).jaxpr
        got = _reference(jaxpr)
        assert (got and got["kind"]) == want, (want, got)
        assert want is not None or _unread_reference(jaxpr) in ("all_gather", "psum")   # (named in a note)


LAUNCHED_BY_MAIN = '''
import jax
from absl import flags
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

TILE = 64


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def tiled_copy(x, *, axis_name="x"):
    if x.shape[0] % TILE:
        raise NotImplementedError(f"rows ({x.shape[0]}) must be a multiple of the tile ({TILE})")
    return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


if __name__ == "__main__":
    flags.DEFINE_integer("ringc_launcher_processes", None, "as JAX's multiprocess test launcher defines one")
    raise ValueError("num_processes must be set")
'''


def test_an_entry_that_fails_is_what_the_fix_names_not_the_files_main(tmp_path):
    """JAX's op modules end in a test launcher (`if __name__ == "__main__":`) that fails under
    ringc and defines absl flags: the entry function's own error leads the fix, with the
    --arg given, and the second N does not meet the flag defined twice."""
    from ringc.pallas.entries import parse_arg
    path = tmp_path / "launched_by_main.py"
    path.write_text(LAUNCHED_BY_MAIN)
    for n in (2, 3):
        with pytest.raises(ScheduleError) as e:
            check_file(str(path), n, entry="tiled_copy", args=[parse_arg("x=float32[8*N,128]@x")])
        assert "DuplicateFlagError" not in e.value.message, e.value.message
        assert e.value.fix.startswith("tiled_copy raised NotImplementedError: rows (") and \
            "when ringc called it with --arg x=float32[8*N,128]@x" in e.value.fix, e.value.fix
        # where in the file (tpu-inference's gmm_v2_ag_rs.py calls a helper with the wrong arity at
        # line 343, and the fix said only "fix it there"; sweep 10)
        raised = LAUNCHED_BY_MAIN.split("\n").index('        raise NotImplementedError(f"rows ({x.shape[0]}) must be '
                                                  'a multiple of the tile ({TILE})")') + 1
        assert f"(at line {raised}) when ringc called it" in e.value.fix, e.value.fix
        assert "stopped the script" not in e.value.fix


def test_a_module_with_no_kernel_of_its_own_names_the_file_beside_it_that_has_one(tmp_path):
    """JAX's paged_attention/util.py and ragged_paged_attention/tuned_block_sizes.py (sweep 9)
    got the generic `--entry` fix: the file has no kernel call; the one beside it does."""
    (tmp_path / "util.py").write_text("import jax.numpy as jnp\n\n\ndef pad(x, to):\n    return jnp.pad(x, to)\n")
    (tmp_path / "kernel.py").write_text("from jax.experimental import pallas as pl\n\n\ndef f(x):\n"
                                        "    return pl.pallas_call(None, out_shape=x)(x)\n")
    with pytest.raises(ScheduleError) as e:
        check_file(str(tmp_path / "util.py"), 2)
    assert e.value.fix.startswith("the file has no pallas_call, pl.kernel or core_map of its own: check the file "
                                  f"that defines the kernel (kernel.py beside it: ringc check {tmp_path / 'kernel.py'})"
                                  "; else name the function"), e.value.fix
    with pytest.raises(ScheduleError) as e:   # a file with a kernel call of its own that ran none: not said
        check_file(str(tmp_path / "kernel.py"), 2)
    assert "has no pallas_call" not in e.value.fix, e.value.fix


# a right permute and its pallas_call, for the scripts below
PERMUTE_KERNEL = '''

def permute_kernel(x_ref, o_ref, send, recv):
    right = jax.lax.rem(jax.lax.axis_index("x") + 1, jax.lax.axis_size("x"))
    c = pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=(right,),
                                     device_id_type=pl.DeviceIdType.MESH)
    c.start()
    c.wait()


def call(x):
    return pl.pallas_call(permute_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec(memory_space=pl.ANY),
                          scratch_shapes=[pltpu.SemaphoreType.DMA] * 2)(x)
'''

HIDDEN_BY_A_MISSING_IMPORT = '''
from functools import partial
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import ringc_not_installed_helpers as helpers

mesh = jax.make_mesh((jax.device_count(),), ("x",))

''' + PERMUTE_KERNEL + '''


first = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=jax.P("x"), out_specs=jax.P("x"), check_vma=False))


@jax.jit
@partial(jax.shard_map, mesh=mesh, in_specs=jax.P("x"), out_specs=jax.P("x"), check_vma=False)
@helpers.assert_max_traces(n=1)
def second(x):
    return call(x)


x = jnp.zeros((8 * jax.device_count(), 128), jnp.float32)
first(x)
second(x)
'''


def test_a_missing_import_that_stopped_later_kernels_is_said_on_the_verdict(tmp_path, capsys):
    """A package the script imports is not installed and a later kernel sits behind it (as
    roll_shard.py's chex): the kernel that ran is checked, and its verdict and the summary say
    the script stopped short, with the fix (it was a script note among the assumptions)."""
    from ringc.cli import main
    path = tmp_path / "hidden.py"
    path.write_text(HIDDEN_BY_A_MISSING_IMPORT)
    (report,) = check_file(str(path), 2)
    assert report.ok and "ringc_not_installed_helpers" in report.stopped and "--stub" in report.stopped
    assert "the script did not run to its end" in report.to_text()
    assert main(["check", str(path), "--devices", "2", "-q"]) == 0   # (-q: the summary line for one verdict)
    assert "1 from a script that stopped short" in capsys.readouterr().err


TWO_TESTS = ('''
import unittest
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

''' + PERMUTE_KERNEL + '''

def run(x, mesh):
    return jax.jit(jax.shard_map(call, mesh=mesh, in_specs=jax.P("x"), out_specs=jax.P("x"), check_vma=False))(x)


class PermuteTest(unittest.TestCase):
    def test_small(self):
        run(jnp.zeros((8 * jax.device_count(), 128)), jax.make_mesh((jax.device_count(),), ("x",)))

    def test_heavy_benchmark(self):
        raise AssertionError("ran: a benchmark that would run for minutes on CPU")


if __name__ == "__main__":
    unittest.main()
''')


@pytest.mark.parametrize("style", ["unittest", "pytest"])
def test_a_test_filter_runs_only_the_tests_it_names(tmp_path, style):
    """`--test PATTERN` (a substring of the test's name, or a glob): a test module with a
    heavy benchmark (sglang-jax's fused_moe_v1_test.py ran past 300 s) runs only the tests
    it names; every verdict says how many were left out; a pattern that matches no test is
    one message."""
    text = TWO_TESTS
    if style == "pytest":
        text = (text.replace("class PermuteTest(unittest.TestCase):\n", "")
                .replace("    def test_small(self):\n        run(", "def test_small():\n    run(")
                .replace("    def test_heavy_benchmark(self):\n        raise", "def test_heavy_benchmark():\n    raise")
                .replace('\n\nif __name__ == "__main__":\n    unittest.main()\n', "\n"))
    path = tmp_path / f"{style}_cases.py"
    path.write_text(text)
    for pattern in ("test_small", "*small", "test_sm*"):   # (a glob of the test's own name: sweep 11)
        (report,) = check_file(str(path), 2, tests=pattern)
        assert report.ok and "test_small" in report.title, report.to_text()
        assert any(a.startswith(f"--test {pattern!r} ran only the tests it names: 1 other test left out")
                   for a in report.assumptions), report.assumptions
        assert not any("ran: a benchmark" in a for a in report.assumptions)
    with pytest.raises(ScheduleError, match="--test 'nothing' leaves none of the module's 2 tests to run") as e:
        check_file(str(path), 2, tests="nothing")
    assert "some of its tests: " in e.value.fix and "test_small" in e.value.fix, e.value.fix
    with pytest.raises(ScheduleError) as e:   # a typo: the nearest names are offered
        check_file(str(path), 2, tests="test_smal_")
    assert "the nearest of its tests: " in e.value.fix and "test_small" in e.value.fix, e.value.fix
    # --test repeated: a test any pattern names runs (a second --test replaced the first, sweep 11)
    (report,) = check_file(str(path), 2, tests=("small", "no_such_test"))
    assert report.ok and any(a.startswith("--test 'small' --test 'no_such_test' ran only the tests it names")
                             for a in report.assumptions), report.assumptions
    # --skip-test: the heavy one left out by name (JAX's tpu_pallas_test.py has a 6 GiB test among 3,218)
    (report,) = check_file(str(path), 2, skip_tests=("*heavy*",))
    assert report.ok and "test_small" in report.title, report.to_text()
    assert any(a.startswith("--skip-test '*heavy*' ran only the tests it names: 1 other test left out")
               for a in report.assumptions), report.assumptions
    with pytest.raises(ScheduleError, match="--test 'small' --skip-test 'test_' leaves none of the module's 2 tests"):
        check_file(str(path), 2, tests="small", skip_tests=("test_",))


def test_a_test_that_skips_for_its_device_count_names_the_count_to_check_with(tmp_path):
    """A test that skips itself with more than one device (JAX's tpu_pallas_interpret_test.py:
    `requires 1 device, found 4`): the reason kept is its own, not the retry's (answered as a
    TPU it skips for another reason), and the fix names --devices 1."""
    path = tmp_path / "one_device_only.py"
    path.write_text(
        "import unittest\nimport jax\n\n\n"
        "class OneDevice(unittest.TestCase):\n"
        "    def setUp(self):\n"
        "        if jax.device_count() > 1:\n"
        "            self.skipTest(f'requires 1 device, found {jax.device_count()}')\n\n"
        "    def test_it(self):\n"
        "        pass\n\n\n"
        "if __name__ == '__main__':\n"
        "    unittest.main()\n")
    with pytest.raises(ScheduleError) as e:
        check_file(str(path), 2)
    assert "requires 1 device, found 2" in e.value.fix and "check with --devices 1" in e.value.fix, e.value.fix


def test_a_module_inside_a_package_named_like_a_pypi_package_does_not_shadow_it(tmp_path):
    """tokamax/_src holds its own jaxtyping.py (imported as tokamax._src.jaxtyping): a kernel
    file under it that imports the PyPI `jaxtyping`, not installed, is told that (the folder
    was put on the path, and the private module's `from jaxtyping import Array` was a circular
    ImportError blamed on the file)."""
    src = tmp_path / "pkg" / "_src"
    (src / "ops").mkdir(parents=True)
    for d in (tmp_path / "pkg", src, src / "ops"):
        (d / "__init__.py").write_text("")
    (src / "jaxtyping.py").write_text("from jaxtyping import Array\n")
    kernel = src / "ops" / "kernel.py"
    kernel.write_text("import jaxtyping_ringc_absent as jt\nimport jax\nx = jt.Array\n")
    (src / "jaxtyping_ringc_absent.py").write_text("from jaxtyping_ringc_absent import Array\n")
    with pytest.raises(ScheduleError) as e:
        check_file(str(kernel), 2)
    assert "`jaxtyping_ringc_absent`, which is not installed" in e.value.message, e.value.message


DYNAMIC_GRID = (
    "from functools import partial\nimport jax, jax.numpy as jnp\nfrom jax.experimental import pallas as pl\n"
    "from jax.experimental.pallas import tpu as pltpu\n\n"
    "mesh = jax.make_mesh((jax.device_count(),), ('x',))\n\n\n"
    "def add_one(x_ref, o_ref):\n    o_ref[...] = x_ref[...] + 1\n\n\n"
    "@jax.jit\n"
    "@partial(jax.shard_map, mesh=mesh, in_specs=(jax.P('x'), jax.P()), out_specs=jax.P('x'), check_vma=False)\n"
    "def f(x, sizes):\n"
    "    n = COUNT\n"
    "    return pl.pallas_call(add_one, grid=(n,), out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),\n"
    "                          in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],\n"
    "                          out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))(x)\n\n\n"
    "y = f(jnp.zeros((32 * jax.device_count(), 128), jnp.float32), jnp.array(SIZES, jnp.int32))\n")


def _dynamic_grid(tmp_path, count="jnp.sum(sizes > 0).astype(jnp.int32)", sizes="[1, 1, 1, 0]"):
    path = tmp_path / "dynamic_grid.py"
    path.write_text(DYNAMIC_GRID.replace("COUNT", count).replace("SIZES", sizes))
    line = next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if "pl.pallas_call(" in ln)
    return path, line


def test_a_grid_sized_at_run_time_from_known_values_is_checked_at_the_size_the_program_computes(tmp_path):
    """A grid whose size is traced (megablox gmm's tiles counted from group_sizes under jit)
    is sized from the values the program was given, followed through jit: checked at that
    size, and the verdict says which sizes it covers."""
    path, _ = _dynamic_grid(tmp_path)
    (report,) = check_file(str(path), 2)
    assert report.ok, report.to_text()
    assert any("has a grid sized at run time ('dynamic',): checked with the sizes the program computes from the "
               "values it was given, (3,)" in a for a in report.assumptions), report.assumptions


def test_a_grid_sized_at_run_time_that_is_empty_for_the_values_given_is_said_not_refused(tmp_path):
    """No active tile (megablox's gmm on a shard whose groups have no rows): the kernel runs
    nothing for these values, which is correct code, not an input to refuse. The verdict is
    ok and says nothing of the kernel was checked (a static empty grid is still refused:
    tests/test_entries.py)."""
    path, _ = _dynamic_grid(tmp_path, sizes="[0, 0, 0, 0]")
    (report,) = check_file(str(path), 2)
    assert report.ok and not report.findings, report.to_text()
    assert any("has a grid sized at run time that is empty for the values it was given, (0,): its kernel's body "
               "never runs for them, so nothing of it is checked" in a for a in report.assumptions), report.assumptions


def test_a_grid_sized_at_run_time_past_the_array_is_out_of_bounds(tmp_path):
    """The broken case: the count the program computes (5 tiles of 8 rows) runs past the
    shard's 32 rows, an out_of_bounds finding at the kernel's BlockSpec."""
    path, _ = _dynamic_grid(tmp_path, sizes="[1, 1, 1, 1, 1]")
    (report,) = check_file(str(path), 2)
    assert not report.ok and "out_of_bounds" in report.kinds(), report.to_text()


def test_a_grid_sized_at_run_time_from_tensor_data_is_refused_at_its_line(tmp_path):
    """A size counted from tensor data (not known before the run): one message at the
    pallas_call's line with a fix that applies (it had no line, and "use a static grid")."""
    path, line = _dynamic_grid(tmp_path, count="jnp.sum(x[:, 0] > 0).astype(jnp.int32)")
    (report,) = check_file(str(path), 2)
    text = report.to_text()
    assert not report.ok and f"dynamic_grid.py:{line}: error: pallas_call `call 1` has a grid sized at run time" in text, text
    assert "from values ringc does not know (tensor data)" in text and "--arg NAME=int32[...]@=np.array" in text


def test_an_internal_error_in_one_kernel_call_leaves_the_others_checked(tmp_path, monkeypatch):
    """ringc's own bug while checking one call (a TypeError where a closed-over scalar became
    an array) lost every verdict of JAX's tpu_pallas_state_test.py: now that call is "not
    checked" with an internal error that says whose bug it is, and the others get theirs."""
    import ringc.pallas.importer as importer
    path = tmp_path / "hidden.py"
    path.write_text(HIDDEN_BY_A_MISSING_IMPORT.replace("import ringc_not_installed_helpers as helpers\n", "")
                    .replace("@helpers.assert_max_traces(n=1)\n", ""))
    real, calls = importer.check_capture, []

    def flaky(cap, *args, **kwargs):
        calls.append(cap)
        if len(calls) == 1:
            raise TypeError("int() argument must be a string, a bytes-like object or a real number, not 'Ref'")
        return real(cap, *args, **kwargs)
    monkeypatch.setattr(importer, "check_capture", flaky)
    monkeypatch.delenv("RINGC_DEBUG", raising=False)
    first, second = check_file(str(path), 2)
    assert not first.ok and "internal error while checking this kernel call: TypeError" in first.to_text()
    assert "ringc's bug, not the kernel's" in first.to_text()
    assert second.ok, second.to_text()


def test_a_scripts_verdicts_come_as_each_call_is_checked(tmp_path, monkeypatch):
    """`ringc check` prints each verdict when it is decided (a file whose later calls take long
    printed nothing before a timeout): the iterator gives the first call's report before the
    second call is checked."""
    import ringc.pallas.importer as importer
    path = tmp_path / "two_calls.py"
    path.write_text(HIDDEN_BY_A_MISSING_IMPORT.replace("import ringc_not_installed_helpers as helpers\n", "")
                    .replace("@helpers.assert_max_traces(n=1)\n", ""))
    real, checked = importer.check_capture, []
    monkeypatch.setattr(importer, "check_capture", lambda cap, *a, **k: checked.append(cap) or real(cap, *a, **k))
    reports = check_file(str(path), 2, iterate=True)
    assert not isinstance(reports, list) and checked == []
    first = next(reports)
    assert first.ok and len(checked) == 1
    second = next(reports)   # (the same kernel: checked once, the same verdict)
    assert second.ok and "identical to kernel call 1" in second.to_text()
    assert next(reports, None) is None


def test_an_output_of_the_wrong_shape_for_the_meaning_is_one_finding_without_a_device(tmp_path):
    """A right permute checked as an all-gather (`--collective all_gather`): its output has
    the input's shape, not [N, ...]. One wrong_result naming the output's shape (it was printed
    twice, on "device -1", with "nothing writes it"); as a ppermute the same kernel is clean."""
    path = tmp_path / "permute.py"
    path.write_text("import jax, jax.numpy as jnp\nfrom jax.experimental import pallas as pl\n"
                    "from jax.experimental.pallas import tpu as pltpu\n\n"
                    "mesh = jax.make_mesh((jax.device_count(),), ('x',))\n" + PERMUTE_KERNEL +
                    "\n\nf = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=jax.P('x'), out_specs=jax.P('x'), "
                    "check_vma=False))\ny = f(jnp.zeros((8 * jax.device_count(), 128), jnp.float32))\n")
    (report,) = check_file(str(path), 2, collective="all_gather")
    shape = [f for f in report.findings if f.kind == "wrong_result"]
    assert len(shape) == 1 and "has shape [8, 128], but all_gather needs shape [N, *input shape]" in shape[0].message
    assert "device -1" not in report.to_text() and "nothing writes it" not in report.to_text()
    (clean,) = check_file(str(path), 2, collective="ppermute")
    assert clean.ok, clean.to_text()


def test_a_harness_that_gathers_both_results_names_the_meaning_inside(tmp_path):
    """MIT 6.S894's lab harness gathers the kernel's result and its `lax` reference with
    `all_gather(tiled=True)` and computes the reference first: the meaning is the collective
    inside (it had none, and --collective made every call "not checked"); a reference that
    shifts by 2 makes the same kernel a wrong_result; --collective names it too."""
    path = Path(__file__).parent / "pallas_import" / "gathered_harness.py"
    ok, = check_file(str(path), 4)
    assert ok.ok, ok.to_text()
    assert any("meaning: ppermute by 1, from the lax reference" in a and "run before the kernel call" in a
               for a in ok.assumptions), ok.assumptions
    assert any("lax.all_gather(tiled=True) of the kernel's output `o_ref`" in a for a in ok.assumptions)
    bad = tmp_path / "gathered_harness.py"
    bad.write_text(path.read_text().replace("SHIFT = 1", "SHIFT = 2"))
    wrong, = check_file(str(bad), 4)
    assert wrong.kinds() == {"wrong_result"}, wrong.to_text()
    bare = tmp_path / "bare.py"
    bare.write_text(path.read_text().replace("expected = gathered(reference)(x)\n", ""))
    named, = check_file(str(bare), 4, collective="ppermute")
    assert named.ok and any("from --collective" in a for a in named.assumptions), named.to_text()


def test_a_semaphore_index_out_of_range_is_a_finding_with_its_callers(tmp_path):
    """A semaphore array indexed past its end (in a helper the kernel calls) is an
    out_of_bounds finding at the helper's line with the call chain, and the check goes on
    (it stopped the call, "not checked", at the helper's line alone); in range it is ok."""
    path = Path(__file__).parent / "pallas_import" / "sem_index_helper.py"
    bad, = check_file(str(path), 4)
    assert bad.kinds() == {"out_of_bounds"}, bad.to_text()
    text = bad.to_text()
    assert "semaphore `recv_sems` index 2 is out of range [0, 2)" in text
    assert "is in rdma_start(), called from kernel()" in text, text
    ok_path = tmp_path / "sem_index_helper.py"
    ok_path.write_text(path.read_text().replace("INDEX = 2", "INDEX = 1"))
    ok, = check_file(str(ok_path), 4)
    assert ok.ok, ok.to_text()


def test_a_grid_sized_at_run_time_from_each_devices_shard_is_each_devices_own(tmp_path):
    """Sizes sharded over the mesh give each device its own grid (2 tiles on device 0, 1 on
    device 1): each is checked at its own, and the verdict lists both."""
    path, _ = _dynamic_grid(tmp_path)
    path.write_text(path.read_text().replace("in_specs=(jax.P('x'), jax.P())", "in_specs=(jax.P('x'), jax.P('x'))"))
    (report,) = check_file(str(path), 2)
    assert report.ok, report.to_text()
    assert any("(1,), (2,) (other values give other grids" in a for a in report.assumptions), report.assumptions


def test_a_single_device_kernel_at_top_level_is_checked_as_one_chips_program(tmp_path):
    """Tutorials' and serving stacks' kernels run on one device, called with no shard_map: each
    is checked as one chip's program (N = 1; it was "not a collective, not checked"), saying
    so; both halves of a double buffer on one DMA semaphore (JetStream's chunked prefill,
    sweep 8) is a race: a wait can be satisfied by the other half's bytes."""
    path = Path(__file__).parent / "pallas_import" / "single_device.py"
    ok, = check_file(str(path), 2)
    assert ok.ok and ok.program.n == 1 and ok.title.startswith("double_halves (line "), ok.to_text()
    assert "N=1: ok" in ok.to_text() and " on ring:1" not in ok.to_text()
    assert any(a.startswith("COLLECTIVE is None: one chip's kernel, called outside shard_map") for a in ok.assumptions)
    shared = tmp_path / "shared.py"
    shared.write_text(path.read_text().replace("SHARED_SEM = False", "SHARED_SEM = True"))
    bad, = check_file(str(shared), 2)
    assert not bad.ok and "race" in bad.kinds(), bad.to_text()
    assert any("race on device 0's `buf[0, 0:8, 0:128]`" in f.message for f in bad.findings), bad.to_text()


CONSTRUCTS = '''
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl

def kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1

def call(x):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

x = jnp.zeros((8, 128), jnp.float32)
jax.jit(jax.checkpoint(call))(x)
jax.jit(lambda x: jax.lax.cond(x[0, 0] > 0, call, lambda x: x, x))(x)
'''


def test_a_kernel_under_jax_checkpoint_is_checked_and_one_under_cond_is_said_not_checked(tmp_path):
    """`jax.checkpoint` (`remat2`) is a nested function: its kernels are checked. A kernel
    inside a `cond` whose branch depends on tensor data is "not checked", and the fix is one a
    user can act on (the old one said "call them directly"; a known branch is checked:
    `test_a_cond_between_kernels_checks_the_branch_its_known_index_takes`)."""
    path = tmp_path / "constructs.py"
    path.write_text(CONSTRUCTS)
    remat, cond = check_file(str(path), 1)
    assert remat.ok, remat.to_text()
    assert "a lax.cond (or lax.switch) between kernel calls whose branch is not known" in cond.error.message
    assert "--entry NAME" in cond.error.fix


SAME_ERROR = '''
import unittest
from absl.testing import parameterized

RAN = []


class Missing(parameterized.TestCase):
    @parameterized.parameters(*range(8))
    def test_it(self, k):
        RAN.append(k)
        return missing_module.kernel(k)


if __name__ == "__main__":
    unittest.main()
'''


@pytest.mark.parametrize("style", ["unittest", "pytest"])
def test_tests_that_all_stop_with_one_error_before_any_kernel_end_the_run(tmp_path, style):
    """maxtext's kernel tests whose kernels come from a package missing here ran 176 tests,
    100 s, to say so (sweep 10): after `SAME_FAILURES` tests in a row stop before any kernel
    call with the same error, the rest are not run, and the message says so and names the
    error's line."""
    from ringc.pallas.script import SAME_FAILURES
    text = SAME_ERROR
    if style == "pytest":
        text = ("import pytest\n\n\n@pytest.mark.parametrize('k', range(8))\ndef test_it(k):\n"
                "    return missing_module.kernel(k)\n")
    path = tmp_path / f"{style}_missing.py"
    path.write_text(text)
    with pytest.raises(ScheduleError) as e:
        check_file(str(path), 1)
    assert f"no test ran a kernel call, and the last {SAME_FAILURES} run all stopped before any with the same error (NameError: " \
           f"name 'missing_module' is not defined): ringc ran none of the {8 - SAME_FAILURES} other tests" \
           in e.value.message, e.value.message


def test_a_conftest_that_fails_to_import_is_the_message(tmp_path):
    """A pytest repository whose tests/conftest.py imports torch (sdh1014/pallas-kernel, sweep
    11): pytest ran none of the module's tests, and ringc said "ran its 0 tests" with a fix
    about --entry. The conftest's missing package is the message, at its line; --stub fixes it."""
    (tmp_path / "conftest.py").write_text("import ringc_missing_torch_like  # fixtures only\n")
    path = tmp_path / "copy_case.py"
    from conftest import COPY_CALL, COPY_KERNEL
    path.write_text(COPY_KERNEL + f"def test_copy():\n    x = jnp.zeros((8, 128), jnp.float32)\n"
                                  f"    jax.jit(lambda x: {COPY_CALL})(x)\n")
    with pytest.raises(ScheduleError) as e:
        check_file(str(path), 1)
    assert e.value.file == str(tmp_path / "conftest.py") and e.value.line == 1, e.value
    assert e.value.message == "the file imports `ringc_missing_torch_like`, which is not installed"
    report, = check_file(str(path), 1, stubs=("ringc_missing_torch_like",))
    assert report.ok, report.to_text()


def test_a_pytest_module_whose_own_imports_are_missing_names_them_all(tmp_path):
    """A pytest-style module importing packages that are not installed (ejkernel's tests need
    jaxtyping, beartype, chex, ...; sweep 17): pytest cannot collect it, and ringc said so in
    parentheses inside "no entry function ran one". Now the one message of a missing package,
    at its line, naming every one the module imports, with the --stub for each."""
    path = tmp_path / "needs_two.py"
    from conftest import COPY_CALL, COPY_KERNEL
    path.write_text("import ringc_absent_one  # noqa\nimport ringc_absent_two  # noqa\n" + COPY_KERNEL
                    + f"def test_copy():\n    x = jnp.zeros((8, 128), jnp.float32)\n"
                      f"    jax.jit(lambda x: {COPY_CALL})(x)\n")
    with pytest.raises(ScheduleError) as e:
        check_file(str(path), 1)
    assert e.value.line == 1 and "`ringc_absent_one`, which is not installed" in e.value.message, e.value
    assert "--stub ringc_absent_one --stub ringc_absent_two" in e.value.fix, e.value.fix
    report, = check_file(str(path), 1, stubs=("ringc_absent_one", "ringc_absent_two"))
    assert report.ok, report.to_text()


def test_a_pytest_test_stopped_by_a_stubs_value_names_the_stub(tmp_path):
    """A test building its data with the stubbed package (sdh1014/pallas-kernel's tests use
    torch; sweep 18) stops before its kernel: the note names the stub call whose stand-in
    the code used, as a script's does."""
    path = tmp_path / "test_torch_data.py"
    path.write_text("import ringc_absent_torch as torch\nimport jax\n\n\ndef test_data():\n"
                    "    x = torch.randn(8, 128) ** 2.0\n")
    with pytest.raises(ScheduleError) as e:
        check_file(str(path), 1, stubs=("ringc_absent_torch",))
    assert "the code called the stub ringc_absent_torch.randn() at line 6" in e.value.message, e.value.message
    # the same test as a unittest module: the same note
    path.write_text("import unittest\nimport ringc_absent_torch as torch\n\n\nclass T(unittest.TestCase):\n"
                    "    def test_data(self):\n        x = torch.randn(8, 128) ** 2.0\n\n\n"
                    "if __name__ == '__main__':\n    unittest.main()\n")
    with pytest.raises(ScheduleError) as e:
        check_file(str(path), 1, stubs=("ringc_absent_torch",))
    assert "the code called the stub ringc_absent_torch.randn() at line 7" in e.value.message, e.value.message


HANG_IN_CALL_2 = '''
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
HBM = pl.BlockSpec(memory_space=pltpu.HBM)
def _start_body(x_ref, o_ref, sem):
  pltpu.make_async_copy(x_ref, o_ref, sem).start()
def _done_body(x_ref, d_ref, o_ref, sem):
  pltpu.make_async_copy(x_ref, d_ref, sem).wait()
start = pl.pallas_call(_start_body, in_specs=[HBM], out_specs=HBM,
    out_shape=jax.ShapeDtypeStruct((512,), jnp.float32), scratch_shapes=[pltpu.SemaphoreType.DMA])
done = pl.pallas_call(_done_body, in_specs=[HBM, HBM], out_specs=HBM,
    out_shape=jax.ShapeDtypeStruct((512,), jnp.float32), scratch_shapes=[pltpu.SemaphoreType.DMA],
    input_output_aliases={1: 0})
y = jax.jit(lambda x: done(x, start(x)))(jnp.zeros((512,), jnp.float32))
'''


def test_a_hang_says_what_it_left_unchecked_in_the_calls_before_it_too(tmp_path):
    """Sweep 12: a start kernel whose DMA is never waited, then a done kernel waiting on a
    semaphore of its own (not the start's): the hang in call 2 is reported, and the verdict
    says that races, what is left at exit and the meaning were not checked, call 1's
    included (alone, call 1 has a never-waited DMA and exit races). A clean run says nothing
    of the kind."""
    path = tmp_path / "start_done.py"
    path.write_text(HANG_IN_CALL_2)
    report, = check_file(str(path), 2)
    assert report.kinds() == {"hang"}, report.to_text()
    assert any(a.startswith("the run hangs (its [hang] findings), so what needs a run to the end was not checked")
               and "the ones before the hang included" in a for a in report.assumptions), report.assumptions
    alone = tmp_path / "start_only.py"
    alone.write_text(HANG_IN_CALL_2.replace("done(x, start(x))", "start(x)"))
    report, = check_file(str(alone), 2)
    assert {"dma_not_waited", "race"} <= report.kinds() and "hang" not in report.kinds(), report.to_text()
    assert not any("the run hangs" in a for a in report.assumptions)


AOT_SCRIPT = '''
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental import topologies

topology = topologies.get_topology_desc("v5e:2x2", platform="tpu")   # to compile ahead of time


def kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


y = jax.jit(pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32)))(jnp.zeros((8, 128)))
'''


def test_libtpu_started_by_the_script_prints_nothing_before_the_verdicts(tmp_path):
    """Sweep 12: a script that asks libtpu for a topology (to compile ahead of time) made it
    print warnings and an INVALID_ARGUMENT line on a machine without a TPU, before ringc's
    verdicts. The same script run by Python prints them (the premise); run by `ringc check`,
    stderr is clean."""
    import os
    import subprocess
    import sys
    from ringc.compile import _NO_TPU_ENV, libtpu_available
    if not libtpu_available():
        pytest.skip("needs libtpu (the tpu extra)")
    path = tmp_path / "aot.py"
    path.write_text(AOT_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in _NO_TPU_ENV}
    env["JAX_PLATFORMS"] = "cpu"
    plain = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=300)
    assert "INVALID_ARGUMENT" in plain.stderr or "could not determine TPU" in plain.stderr, plain.stderr[-2000:]
    run = subprocess.run([sys.executable, "-m", "ringc", "check", str(path), "--devices", "1"], capture_output=True,
                         text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "INVALID_ARGUMENT" not in run.stderr and "could not determine TPU" not in run.stderr, run.stderr[-2000:]


def test_raw_mosaic_gpu_tests_are_named_unsupported_and_the_skips_not_called_every_test():
    """Sweep 14 (JAX's tests/mosaic/gpu_distributed_test.py): tests that build raw Mosaic GPU
    kernels (`as_gpu_kernel`, not Pallas) stop at the `mosaic_gpu_p` primitive and the rest
    skip themselves; the fix said "every test that ran skipped itself" and nothing of raw
    Mosaic GPU. It now leads with that and says the other tests skipped."""
    from types import SimpleNamespace
    from ringc.pallas.importer import _no_kernel_fix
    notes = ["test T.test_a stopped before any kernel call (NotImplementedError: MLIR translation rule for "
             "primitive 'mosaic_gpu_p' not found for platform cpu): its kernels were not checked",
             "test T.test_b skipped itself (Only works on GPU with capability >= sm90): its kernels were not checked"]
    script = SimpleNamespace(notes=notes, entry_errors=[], entry_numbers=[], entry_switches=[])
    fix = _no_kernel_fix(script, "gpu_distributed_test.py", "; ".join(notes), "h100", None, [])
    assert fix.startswith("its kernels are raw Mosaic GPU (jax.experimental.mosaic.gpu"), fix
    assert "every test that did not stop skipped itself (Only works on GPU" in fix and "every test that ran" not in fix
    plain = SimpleNamespace(notes=notes[1:], entry_errors=[], entry_numbers=[], entry_switches=[])
    fix = _no_kernel_fix(plain, "gpu_test.py", notes[1], "h100", None, [])
    assert "raw Mosaic GPU" not in fix and "every test that ran skipped itself" in fix, fix


# -- blocks that do not divide the array (JAX's own padded emit_pipeline tests) --------------
PADDED = Path(__file__).parent / "pallas_import" / "padded_pipeline.py"


def test_a_partial_last_block_inside_the_hbm_tile_padding_is_no_finding():
    """emit_pipeline's last block of a 300 x 200 array is rows 256:304, lanes 128:256: inside
    the (8, 128) tiles the array is stored in, as JAX rounds it. No out_of_bounds finding, and
    no race between the last block and the one before it (the box is not shifted back into
    the array); the verdict says what it accepted."""
    pipeline, tail = check_file(str(PADDED), 2)
    for report in (pipeline, tail):
        assert report.ok, report.to_text()
    padding = [a for a in pipeline.assumptions if a.startswith("HBM tile padding")]
    assert len(padding) == 2 and "`x_hbm` (300x200 float32)" in padding[0] and "(304x256)" in padding[0]


def test_an_access_past_the_tile_padding_is_still_out_of_bounds(monkeypatch):
    monkeypatch.setenv("PADDED_ROWS", "16")   # rows 296:312 of a 300-row array tiled to 304
    pipeline, tail = check_file(str(PADDED), 2)
    assert pipeline.ok, pipeline.to_text()
    assert tail.kinds() == {"out_of_bounds"}, tail.to_text()
    assert "slice 296:312 of `x_hbm` dimension 0 is out of range [0, 300)" in tail.to_text()


# -- a DMA from a bitcast view (JAX's test_dma_bitcasted_ref) ----------------------------------
BITCAST = Path(__file__).parent / "pallas_import" / "bitcast_copy.py"


@pytest.mark.parametrize("case", ["ints", "floats"])
def test_a_dma_from_a_bitcast_view_moves_the_views_type(monkeypatch, case):
    """int32 seen as int16 into int16 (integers ringc follows: their values do not carry
    through the view), float32 seen as bfloat16 into bfloat16: one type on both sides, no
    dtype_mismatch and no internal error."""
    monkeypatch.setenv("BITCAST_CASE", case)
    report, = check_file(str(BITCAST), 2)
    assert report.ok, report.to_text()


def test_a_bitcast_view_of_another_type_than_the_destination_is_still_a_mismatch(monkeypatch):
    monkeypatch.setenv("BITCAST_CASE", "mismatch")
    report, = check_file(str(BITCAST), 2)
    assert report.kinds() == {"dtype_mismatch"}, report.to_text()
    assert "copies `src_hbm.bitcast(int16)` (int16) into `dst_hbm` (bfloat16)" in report.to_text()


# -- pallas_calls on pl.run_state refs (JAX's stateful kernels, tpu_pallas_state_test.py) -------
STATEFUL = Path(__file__).parent / "pallas_import" / "stateful_calls.py"


@pytest.mark.parametrize("case, kinds", [("ok", set()), ("nowait", {"dma_not_waited", "race"}),
                                          ("same_dst", {"race"})])
def test_pallas_calls_on_run_state_refs_are_checked_as_jax_discharges_them(monkeypatch, case, kinds):
    """A start kernel returning the semaphore of the copy it starts, a done kernel waiting on
    it, both closing over run_state's refs: checked as JAX lowers them (each a pallas_call
    on arrays with its refs aliased), where they were refused. Two refs made from one array
    are two buffers (no false race); a copy never waited, or two copies into one ref while
    both are in flight, are found."""
    monkeypatch.setenv("STATE_CASE", case)
    report, = check_file(str(STATEFUL), 2)
    assert report.kinds() == kinds, report.to_text()
    if case == "nowait":   # the refs named as the body unpacks them (`x_ref, y_ref, y2_ref = refs`)
        assert "copy `x_ref->y2_ref`" in report.to_text(), report.to_text()


def test_an_smem_table_one_kernel_computes_is_read_by_the_next(monkeypatch):
    """Kernel 1 stores a row and its slot into an SMEM output; kernel 2 reads them as an SMEM
    input, and branches on a boolean flag the script passed: the values are followed (the
    slice start was "not known before the kernel runs"), and a row past the array is an
    out_of_bounds finding naming the table read."""
    path = Path(__file__).parent / "pallas_import" / "smem_table_chain.py"
    monkeypatch.setenv("CHAIN_ROW", "7")
    ok, = check_file(str(path), 2)
    assert ok.ok and not ok.findings, ok.to_text()
    monkeypatch.setenv("CHAIN_ROW", "8")
    past, = check_file(str(path), 2)
    assert past.kinds() == {"out_of_bounds"}, past.to_text()
    assert "the index is 8, read from `table_ref[0]`" in past.to_text()


@pytest.mark.parametrize("case, kinds, branch", [("copy", set(), "branch 1 of 2 (of a lax.cond: its true branch)"),
                                                  ("nowait", {"dma_not_waited", "race"}, "branch 0 of 2")])
def test_a_cond_between_kernels_checks_the_branch_its_known_index_takes(monkeypatch, case, kinds, branch):
    """`lax.cond` choosing between kernels on a mode the script passed (it was refused as a
    construct ringc does not follow into): the branch taken is checked, and said; the
    other branch's kernel is not, and that is said too."""
    monkeypatch.setenv("COND_CASE", case)
    report, = check_file(str(Path(__file__).parent / "pallas_import" / "cond_between_kernels.py"), 2)
    assert report.kinds() == kinds, report.to_text()
    assert any(branch in a and "other branches' kernels are not checked" in a for a in report.assumptions), \
        report.assumptions


def test_a_cond_between_kernels_on_tensor_data_is_refused_at_its_line(monkeypatch):
    monkeypatch.setenv("COND_CASE", "data")
    report, = check_file(str(Path(__file__).parent / "pallas_import" / "cond_between_kernels.py"), 2)
    assert report.error is not None and "whose branch is not known before the run" in report.error.message
    assert report.error.line == 38, report.to_text()


def test_a_unittest_module_without_a_main_line_runs_its_test_cases():
    """pytest runs a TestCase module that has no `unittest.main()`: ringc runs its tests too
    (tpu-inference keeps two such kernel test modules), and says so; each test's kernel is
    checked (the unwaited copy is found)."""
    path = Path(__file__).parent / "pallas_import" / "unittest_no_main.py"
    ok, unwaited = check_file(str(path), 2)
    assert "CopyTest.test_copy:" in ok.title and ok.ok, ok.to_text()
    assert "CopyTest.test_copy_unwaited" in unwaited.title and "dma_not_waited" in unwaited.kinds(), unwaited.to_text()
    assert any("TestCase classes ran as pytest runs them" in a for a in ok.assumptions), ok.assumptions


# -- a count indexed out of one input by another, before the kernel (tpu-inference's conv1d) ---
FROM_INDEX = Path(__file__).parent / "pallas_import" / "prefetch_from_index.py"


@pytest.mark.parametrize("last, kinds", [("2", set()), ("3", {"out_of_bounds"})])
def test_a_count_indexed_before_the_kernel_is_followed(monkeypatch, last, kinds):
    """`total[last[-1]]`: a dynamic_slice at a squeezed index, computed before the kernel. Its
    value bounds the kernel's loop and sizes its copies: 20 rows are checked clean, 40 run
    past the 32-row array (the copies of rows 32:40 are out of bounds), never "not known"."""
    monkeypatch.setenv("PREFETCH_LAST", last)
    report, = check_file(str(FROM_INDEX), 2)
    assert report.kinds() == kinds, report.to_text()
    if kinds:
        assert "slice 32:40 of `x_hbm` dimension 0 is out of range [0, 32)" in report.to_text()


def test_a_glob_ending_at_a_parameterized_tests_name_names_it(tmp_path):
    """`--test '*.test_permute1'` names `PermuteTest.test_permute1 (shift=2)`: an absl
    parameterized test's title carries its parameters after the name (sweep 15)."""
    from ringc.pallas.script import _matches
    title = "PermuteTest.test_permute1 (shift=2)"
    assert _matches(title, "*.test_permute1") and _matches(title, "PermuteTest.test_perm*")
    assert not _matches(title, "*.test_permute0") and not _matches("PermuteTest.test_permute10 (shift=3)",
                                                                   "*.test_permute1")


def test_a_test_name_ending_in_a_digit_is_not_the_start_of_its_siblings_names():
    """`--test test_paged_attention2` ran JetStream's test_paged_attention2, 20..29, 200..299
    (101 tests, 9 minutes; sweep 17): a substring that only lacks trailing digits names
    another case of the parameterized family. A pattern without a trailing digit still names
    the family, and a longer name that goes on with a letter still matches."""
    from ringc.pallas.script import _matches
    assert _matches("T.test_case2 (24)", "test_case2") and not _matches("T.test_case20 (168)", "test_case2")
    assert not _matches("case.py::test_case21[x]", "test_case2")
    assert _matches("T.test_case20 (168)", "test_case") and _matches("T.test_case2_bf16", "test_case2")


def test_a_script_setting_its_cpu_device_count_runs_on_ringcs(tmp_path):
    """`jax.config.update("jax_num_cpu_devices", 8)` after `import jax` (how scripts get CPU
    devices): ringc's devices are already there, so the update is said once, not a
    RuntimeError note, and JAX's config is left as it was."""
    import jax
    path = tmp_path / "cpu_devices.py"
    path.write_text('import jax\njax.config.update("jax_num_cpu_devices", 8)\n'
                    + (Path(__file__).parent / "pallas_import" / "unittest_no_main.py").read_text())
    reports = check_file(str(path), 2)
    assert reports and all("RuntimeError" not in a for r in reports for a in r.assumptions)
    assert any("jax.config.update('jax_num_cpu_devices', 8): not applied; ringc runs the script on 2 devices"
               in a for a in reports[0].assumptions), reports[0].assumptions
    assert "update" not in vars(jax.config)


def test_a_chapter_of_fragments_without_a_kernel_says_so_first(tmp_path):
    """A Markdown chapter whose code cells are fragments naming block sizes it never defines,
    and whose prose (not code) says `pallas_call`: the file has no kernel of its own, which is
    the fix to give, not the first fragment's NameError (a tutorial's chapter 13, sweep 15)."""
    path = tmp_path / "chapter.md"
    path.write_text("# Ragged attention\n\nEach mode has its own `pallas_call`.\n\n```python\n"
                    "q_blocks = seq_len // BQ\nkv_blocks = seq_len // BKV\n```\n")
    with pytest.raises(ScheduleError) as e:
        check_file(str(path), 2)
    assert e.value.fix.startswith("the file has no pallas_call, pl.kernel or core_map of its own"), e.value.fix
    assert "NameError" not in e.value.fix


def test_calls_of_one_kernel_body_with_other_index_maps_are_not_identical(tmp_path):
    """Two pallas_calls of the same body whose BlockSpec index maps differ select different
    blocks: the second (block i + 1 of a 2-block array: out of bounds) is checked on its own,
    not given the first one's verdict (the grid mapping's text leaves the index maps out)."""
    path = tmp_path / "two_maps.py"
    path.write_text(textwrap.dedent('''
        import jax, jax.numpy as jnp
        from jax.experimental import pallas as pl

        def double(x_ref, o_ref):
            o_ref[...] = x_ref[...] * 2.0

        def call(x, index_map):
            return pl.pallas_call(double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
                                  in_specs=[pl.BlockSpec((8, 128), index_map)],
                                  out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))(x)

        x = jnp.ones((16, 128), jnp.float32)
        same = call(x, lambda i: (i, 0))
        shifted = call(x, lambda i: (i + 1, 0))
        '''))
    first, second = check_file(str(path), 2)
    assert first.ok, first.to_text()
    assert second.kinds() == {"out_of_bounds"}, second.to_text()
    assert not any("identical to kernel call 1" in a for a in second.assumptions)


def test_a_failed_check_of_placeholder_results_does_not_hide_the_kernels_after_it():
    """The forward kernel's result is a placeholder, so the test's check of it fails; the
    backward kernel called after the check is still traced and checked (its planted bug
    found), and the verdict names the check that did not stop the test (sweep 16)."""
    path = Path(__file__).parent / "pallas_import" / "vjp_checked_between.py"
    forward, backward = check_file(str(path), 2)
    assert forward.ok, forward.to_text()
    assert backward.kinds() == {"out_of_bounds"}, backward.to_text()
    assert any("a failed assert_allclose at line 45 (the kernels' results are placeholders) did not stop it" in a
               for a in forward.assumptions), forward.assumptions


def test_a_file_that_asks_jax_for_cpu_devices_runs_on_that_many(tmp_path):
    """google-deepmind/simply's multi-device tests (sweep 24) set
    `XLA_FLAGS=--xla_force_host_platform_device_count=8` before importing jax and lay out a
    mesh of 8: on ringc's default 4 every test died reshaping the devices, with advice to
    use --entry. The file's own count is the default, and the verdict says why; a comment
    naming the flag asks for nothing."""
    from ringc.pallas.asked import DEFAULT_DEVICES, default_devices
    path = tmp_path / "multi_test.py"
    path.write_text("import os\nos.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')\n"
                    "import jax\nif jax.device_count() < 2:\n    raise SystemExit\n")
    n, why = default_devices(str(path))
    assert n == 8 and why.startswith("the file asks JAX for 8 CPU devices (`xla_force_host_platform_device_count=8`, "
                                     "line 2)"), (n, why)
    path.write_text("# run with XLA_FLAGS=--xla_force_host_platform_device_count=8\nimport jax\n")
    assert default_devices(str(path))[0] == DEFAULT_DEVICES


@pytest.mark.parametrize("test, devices", [
    ("if jax.device_count() > 1:", 1), ("if jax.device_count() >= 2:", 1), ("if jax.device_count() < 8:", 8),
    ("if jax.device_count() != 2:", 2), ("if 8 > jax.device_count():", 8), ("if jax.device_count() <= 4:", 5)])
def test_the_devices_a_test_module_asks_for_follow_its_comparison(tmp_path, test, devices):
    """JAX's single-device pipeline tests skip when `jax.device_count() > 1` (sweep 26): ringc
    ran them on 4 devices (at least the count compared, as for `< 8`), so every test skipped.
    The comparison's direction decides: above a count skips, so at most it; a comment naming
    a comparison asks for nothing."""
    from ringc.pallas.asked import default_devices
    path = tmp_path / "one_test.py"
    path.write_text(f"# skips when device_count() > 7\nimport jax\n{test}\n    raise SystemExit\n")
    assert default_devices(str(path))[0] == devices


def test_the_syntax_of_a_newer_python_is_named_as_such(tmp_path):
    """JAX's splash attention test (sweep 26) writes a PEP 695 `type` alias, Python 3.12: on
    3.11 ringc said "not valid Python: invalid syntax / fix the syntax". It names the syntax
    and the Python it needs; a real syntax error is still one."""
    import sys
    path = tmp_path / "newer.py"
    path.write_text("import jax\n\ntype Mask = tuple[int, int]\n")
    with pytest.raises(ScheduleError) as e:
        check_file(str(path), 1)
    if sys.version_info < (3, 12):
        assert e.value.line == 3 and e.value.message.startswith("line 3 uses a `type` alias (PEP 695, Python 3.12)"), \
            e.value.message
        assert e.value.fix.startswith("run ringc from a Python that new"), e.value.fix
    path.write_text("import jax\n\ndef f(:\n    pass\n")
    with pytest.raises(ScheduleError, match="not valid Python"):
        check_file(str(path), 1)


def test_a_kernel_jax_runs_from_its_own_code_is_said_to_be_out_of_reach(tmp_path):
    """JAX's `tpu_pallas_random_test.py` (sweep 26) draws with `impl="pallas_philox4x32"`: the
    Pallas PRNG's kernel runs inside `jax.random.uniform`, for real on the CPU devices, and
    fails "Only interpret mode is supported on CPU backend"; ringc said "fix it there" of
    correct code. It says the kernel ran outside its capture, and how to reach one."""
    path = tmp_path / "philox.py"
    path.write_text("import jax\nfrom jax import random as jax_random\n"
                    "from jax.experimental.pallas.ops.tpu.random import philox  # noqa: F401\n\n"
                    "key = jax_random.key(0, impl='pallas_philox4x32')\n"
                    "values = jax.jit(lambda k: jax_random.uniform(k, shape=(512, 512)))(key)\n")
    with pytest.raises(ScheduleError) as e:
        check_file(str(path), 1)
    assert "a pallas_call ran for real on the CPU devices, outside ringc's capture" in e.value.fix, e.value.fix
