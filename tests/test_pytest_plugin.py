"""`pytest --ringc` (ringc/pytest_plugin.py) and `ringc check` on a pytest-style test module.

The module under test is tests/pallas_import/pytest_permute.py: a clean right permute
(parametrized: the same kernel twice) and one that zeroes its send buffer before
`wait_send`, which interpret mode (eager DMAs) runs correctly and ringc finds racy. The
runs are pytester's in-process ones, on this process's nine CPU devices (tests/conftest.py).
"""

import importlib.metadata
import os
import tomllib
from pathlib import Path

import pytest

from ringc.errors import ScheduleError
from ringc.pallas import check_file

pytest_plugins = ["pytester"]

HERE = Path(__file__).parent
SOURCE = (HERE / "pallas_import" / "pytest_permute.py").read_text()
RACY = "test_permute.py::test_right_permute_reuses_send_buffer"


@pytest.fixture(autouse=True, scope="module")
def warm():
    """Run both kernels and their checks once in this process first: pytester's in-process
    runs unload the modules imported during a run, and JAX's interpret-mode modules must not
    be imported twice (their native registrations abort the process)."""
    import functools
    import jax
    import ringc
    namespace: dict = {}
    exec(compile(SOURCE, "pytest_permute.py", "exec"), namespace)
    mesh = namespace["mesh"].__wrapped__()
    x = namespace["inputs"](mesh, 0)
    namespace["right_permute"](x, mesh)
    ringc.check_pallas(functools.partial(namespace["right_permute"], mesh=mesh, reuse_early=True), (x,), mesh)
    import ringc.pytest_plugin  # noqa: F401
    jax.block_until_ready(x)


def plugin_args() -> list[str]:
    """`-p ringc.pytest_plugin` unless ringc is installed with its pytest11 entry point (then
    pytest loads it already, and naming it again would register it twice)."""
    installed = any(ep.value == "ringc.pytest_plugin" for ep in importlib.metadata.entry_points(group="pytest11"))
    return [] if installed else ["-p", "ringc.pytest_plugin"]


def run(pytester, source=SOURCE, *args):
    pytester.makepyfile(test_permute=source)
    return pytester.runpytest(*plugin_args(), "-p", "no:cacheprovider", *args)


def test_the_entry_point_is_registered():
    project = tomllib.loads((HERE.parent / "pyproject.toml").read_text())
    assert project["project"]["entry-points"]["pytest11"] == {"ringc": "ringc.pytest_plugin"}


def test_installed_pytest_loads_it_from_the_entry_point(pytester, monkeypatch, tmp_path):
    """A fresh pytest process finds the plugin through its pytest11 entry point (a
    distribution's metadata on the path stands for `pip install ringc`): `--ringc` works
    with no `-p`."""
    dist = tmp_path / "site" / "ringc_entry_point-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ringc-entry-point\nVersion: 0\n")
    (dist / "entry_points.txt").write_text("[pytest11]\nringc = ringc.pytest_plugin\n")
    monkeypatch.setenv("PYTHONPATH", f"{HERE.parent}{os.pathsep}{dist.parent}")
    pytester.makepyfile(test_permute=SOURCE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--ringc", "-k", "reuses")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["ringc: 1 distinct kernel checked (1 call recorded): 0 ok, 1 failed*"])


def test_without_ringc_both_kernels_pass_in_interpret_mode(pytester):
    result = run(pytester)
    result.assert_outcomes(passed=3)
    assert "ringc" not in result.stdout.str().split("passed")[-1]


def test_with_ringc_the_racy_kernel_fails_its_test_and_identical_kernels_are_checked_once(pytester):
    result = run(pytester, SOURCE, "--ringc")
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    assert f"FAILED {RACY}" in out
    # The finding at the kernel's line, and the run that shows it.
    assert "test_permute.py:35: error: [race] race on device 0's `send_buf[0:8, 0:128]`" in out
    assert "a run that shows it:" in out and "> device 0 (line 35): zero send_buf[0:8, 0:128]" in out
    # Three kernel calls, two distinct kernels: test_right_permute[0] and [1] share one.
    assert "ringc: 2 distinct kernels checked (3 calls recorded): 1 ok, 1 failed" in out
    assert "first run by test_permute.py::test_right_permute[0]" in out
    # The clean kernel's test compares with lax.ppermute: that names the meaning checked.
    assert "right_permute_kernel: ok (N = 4 (x=4), 1 pallas_call(s); meaning: ppermute by 1" in out
    assert out.count("assumes: DMA ordering: any order") == 1  # said once, in the summary


def test_the_marker_skips_or_adjusts_the_check(pytester):
    skip = SOURCE.replace("def test_right_permute_reuses_send_buffer",
                          "@pytest.mark.ringc(skip=True)\ndef test_right_permute_reuses_send_buffer")
    result = run(pytester, skip, "--ringc")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["ringc: 1 distinct kernel checked (2 calls recorded): 1 ok, 0 failed*"])

    adjusted = SOURCE.replace("def test_right_permute_reuses_send_buffer",
                              "@pytest.mark.ringc(dma_order='in-order', invocations=2)\n"
                              "def test_right_permute_reuses_send_buffer")
    result = run(pytester, adjusted, "--ringc")
    result.assert_outcomes(passed=2, failed=1)  # in order or not, twice or once: the race stays
    out = result.stdout.str()
    assert "(N = 4 (x=4), 1 pallas_call(s) x 2 invocations;" in out
    assert "assumes: DMA ordering: in order" in out


def test_a_bad_marker_is_one_message(pytester):
    bad = SOURCE.replace("def test_right_permute_reuses_send_buffer",
                         "@pytest.mark.ringc(order='fifo')\ndef test_right_permute_reuses_send_buffer")
    result = run(pytester, bad, "--ringc")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*test_permute.py:*: @pytest.mark.ringc: unknown option 'order'",
                                 "*fix: use skip, dma_order, invocations"])
    assert "Traceback" not in result.stdout.str()


def test_ringc_check_runs_a_pytest_module_and_titles_verdicts_with_node_ids(tmp_path):
    path = tmp_path / "test_permute.py"
    path.write_text(SOURCE)
    reports = check_file(str(path), 4)
    by_test = {r.title.split(": ")[0]: r for r in reports}
    assert set(by_test) == {"test_permute.py::test_right_permute[0]", RACY}
    clean = by_test["test_permute.py::test_right_permute[0]"]
    assert clean.ok and "and 1 identical call" in clean.title
    assert by_test[RACY].kinds() == {"race"}
    assert any("ringc ran its 3 tests with pytest" in a for a in clean.assumptions)


def test_ringc_check_notes_tests_that_skip_or_break(tmp_path):
    path = tmp_path / "test_notes.py"
    path.write_text(SOURCE + "\n\ndef test_skipped():\n    pytest.skip('TPU only')\n\n\n"
                             "def test_broken(mesh):\n    raise RuntimeError('breaks before its kernel')\n")
    reports = check_file(str(path), 2)
    notes = [a for r in reports for a in r.assumptions if a.startswith("script note")]
    assert any("test_notes.py::test_skipped skipped" in a and "TPU only" in a for a in notes)
    assert any("test_notes.py::test_broken stopped before any kernel call (RuntimeError: breaks before its kernel)"
               in a for a in notes)
    with pytest.raises(ScheduleError, match="ran no pallas_call"):
        empty = tmp_path / "test_empty.py"
        empty.write_text("def test_nothing():\n    assert True\n")
        check_file(str(empty), 2)


def test_kernels_run_by_fixtures_are_checked_with_the_test(pytester):
    fixture = SOURCE + """

@pytest.fixture
def permuted(mesh):
    return right_permute(inputs(mesh, 3), mesh, reuse_early=True)


def test_uses_a_fixture(permuted):
    assert permuted.shape == (32, 128)
"""
    result = run(pytester, fixture, "--ringc", "-k", "fixture")
    result.assert_outcomes(failed=1)
    assert "test_permute.py:35: error: [race]" in result.stdout.str()
    result.stdout.fnmatch_lines(["ringc: 1 distinct kernel checked (1 call recorded): 0 ok, 1 failed*"])


def test_the_cli_checks_a_pytest_module(tmp_path, capsys):
    from ringc.cli import main
    path = tmp_path / "test_permute.py"
    path.write_text(SOURCE)
    assert main(["check", str(path), "--devices", "2", "-q"]) == 1
    captured = capsys.readouterr()
    assert "test_permute.py::test_right_permute_reuses_send_buffer: right_permute_kernel" in captured.out
    assert "N=2: FAILED" in captured.out
    assert "1 ok, 1 failed" in captured.err


def test_bad_options_and_no_kernels(pytester):
    result = run(pytester, SOURCE, "--ringc", "--ringc-invocations", "0")
    result.stderr.fnmatch_lines(["ERROR: --ringc-invocations 0: not a count from 1 to 64*"])
    assert "Traceback" not in result.stderr.str()
    pytester.makepyfile(test_plain="def test_nothing():\n    assert True\n")
    result = pytester.runpytest(*plugin_args(), "-p", "no:cacheprovider", "--ringc", "test_plain.py")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["ringc: 0 distinct kernels checked (0 calls recorded): 0 ok, 0 failed*",
                                 "*no test ran a distributed Pallas kernel*"])
