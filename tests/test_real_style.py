"""Kernels written in the style of real public code (tests/pallas_import/real_style/),
each a regression test for something `ringc check` got wrong on the published original
(the sources and verdicts: tests/real_kernels/manifest.yaml)."""

from pathlib import Path

from ringc.cli import main
from ringc.pallas import check_file

HERE = Path(__file__).parent / "pallas_import" / "real_style"


def test_select_ref_and_scalar_smem_operands_are_checked():
    """`pl.select_ref(idx_ref[...], a, b)` with a 0-d SMEM index (JAX's
    tpu_pallas_distributed_test.py select_ref tests): was "SelectTransform is not supported",
    and a 0-d ref in a racy program an IndexError."""
    reports = check_file(str(HERE / "select_ref_cases.py"), 4)
    by_test = {r.title.split(":")[0].split(" (")[0]: r for r in reports}
    assert by_test["SelectRefTest.test_exchange_selected0"].ok
    assert by_test["SelectRefTest.test_exchange_selected1"].ok
    assert by_test["SelectRefTest.test_exchange_no_recv_wait"].kinds() == {"dma_not_waited", "race"}
    strided = by_test["SelectRefTest.test_strided_send"]
    assert not strided.ok and "strided slice" in strided.to_text()


def test_a_call_not_checked_among_others_is_summed_up(capsys):
    """A test module with one call ringc cannot check: its own "not checked" verdict and the
    summary line (was: internal error, `CallError` has no `program`)."""
    rc = main(["check", str(HERE / "select_ref_cases.py"), "--devices", "4"])
    captured = capsys.readouterr()
    assert rc == 1
    assert "not checked" in captured.out
    assert "4 verdicts in 1 file: 2 ok, 2 failed" in captured.err


def test_a_race_between_two_runs_of_one_line_in_a_helper_says_which_is_which():
    """Two DMAs started from one line of a Python loop, through a helper (the way
    tpu-inference's kernels start theirs in `_start_or_wait_copy`): the two accesses of the
    write-write race are told apart, and the finding names the helper's callers."""
    path = HERE / "loop_sends.py"
    text = path.read_text().splitlines()
    start = next(i for i, line in enumerate(text, 1) if "copy.start()" in line)
    call = next(i for i, line in enumerate(text, 1) if "copies.append(_start(" in line)
    launch = next(i for i, line in enumerate(text, 1) if line.startswith("result = launch(x)"))
    report, = check_file(str(path), 4)
    assert report.kinds() == {"race"}
    assert report.title.startswith(f"send_halves_kernel (line {launch}, through launch() at line ")
    race = report.findings[0]
    assert int(race.event.line) == start
    assert "(1st time the line runs there)" in race.message and "(2nd time)" in race.message
    assert race.event.line.via == f"in _start(), called from send_halves_kernel() at line {call}"
    assert f"line {start} is in _start(), called from send_halves_kernel() at line {call}" in report.to_text()


def test_a_markdown_note_skips_its_pseudocode_blocks_and_checks_its_example():
    """A design note's ```py pseudocode (jax-ml/jax docs/pallas/design/async_note.md has
    `pl.pallas_call(k, out_shape=x, ...)`) was "not valid Python" for the whole file."""
    report, = check_file(str(HERE / "design_note.md"), 3)
    assert report.ok and report.title.startswith("permute_kernel (line ")
    assert any("is not valid Python" in a and "ringc skipped it" in a for a in report.assumptions)


def test_top_level_prints_of_values_are_not_run_but_prints_that_call_the_script_are():
    """The tutorial prints slices of its 1 GiB sharded arrays (`input_arr[::4, 0]`): 20 s on
    CPU devices, for output ringc drops. A print that calls the script's own function may
    run a kernel, so it runs."""
    import ast

    from ringc.pallas.script import _only_prints

    def only(src):
        return _only_prints(ast.parse(src).body[0])
    assert only("print('Input:', x.shape, x[::4, 0])")
    assert only("print('Difference', jnp.mean(jnp.abs(a - b)))")
    assert only("print(f'{x.sum():.3f}')")
    assert not only("print(run(x))")
    assert not only("print(x, file=log)")
    assert not only("y = print(x)")


def test_a_library_switch_picks_the_kernel_with_a_word_param(capsys):
    """A per-shard `reduce_scatter(x, axis_name, mode="auto")` whose default runs lax (as
    collective libraries such as erfanzar/ejkernel's do): `--param mode=one_shot` selects the
    kernel (--param took integers only), and without it the message names the switch."""
    path = str(HERE / "one_shot_reduce_scatter.py")
    base = ["check", path, "--devices", "4", "--entry", "reduce_scatter", "--arg", "x=float32[32*N,128]@x"]
    assert main(base) == 2
    assert "it kept its defaults mode='auto', wait_sends=True" in capsys.readouterr().err
    assert main(base + ["--param", "mode=one_shot"]) == 0
    assert "reduce_scatter(x=float32[32*N,128]@x, mode=one_shot): _kernel" in capsys.readouterr().out
    assert main(base + ["--param", "mode=one_shot", "--param", "wait_sends=false"]) == 1
    out = capsys.readouterr().out
    assert "[dma_not_waited]" in out and "wait_sends=False" in out


def test_a_schedule_refuses_a_word_param(capsys):
    schedule = str(Path(__file__).parent.parent / "schedules" / "all_reduce_ring.yaml")
    assert main(["check", schedule, "--devices", "2", "--param", "rows=many"]) == 2
    assert "a schedule's parameters are integers" in capsys.readouterr().err


def test_a_generic_kernel_wrapper_is_titled_with_the_kernel_it_runs():
    """beshrislambouli/TPU-Collectives runs every kernel inside a `kernel_wrapper` that loops
    with `lax.fori_loop`: its 11 verdicts were all `kernel_wrapper (line 859, ...)`. Now the
    title names the user's kernel the wrapper runs, and the script line and helpers."""
    path = HERE / "looped_launch.py"
    text = path.read_text().splitlines()
    main_line = next(i for i, line in enumerate(text, 1) if line.strip() == "main()")
    first, second = check_file(str(path), 4)
    assert first.title.startswith(f"shift_kernel in kernel_wrapper (line {main_line}, through main() at line ")
    assert "run_scenario() at line" in first.title
    assert {f.kind for f in first.errors()} == {f.kind for f in second.errors()} == {"race"}


def test_newer_jax_tensorcore_mesh_is_refused_by_name(tmp_path):
    """JAX's tpu_pallas_interpret_distributed_test.py (at cec06d1) builds
    `pltpu.TensorCoreMesh(...)`, a name the jax ringc runs on lacks: it was an empty
    AttributeError; now it is the TensorCore-mesh refusal, at its line."""
    import pytest

    from ringc.errors import ScheduleError
    script = tmp_path / "core_mesh.py"
    script.write_text("import jax\nfrom jax.experimental.pallas import tpu as pltpu\n\n"
                      "mesh = pltpu.TensorCoreMesh(axis_name='core', num_cores=2)\n")
    with pytest.raises(ScheduleError) as e:
        check_file(str(script), 2)
    assert "TensorCore meshes (pltpu.TensorCoreMesh) are not supported" in str(e.value)
    assert e.value.line == 4
