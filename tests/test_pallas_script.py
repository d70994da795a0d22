"""`ringc check` on scripts and notebooks as published (no build(mesh)): `ringc/pallas/script.py`.

The fixture `tests/pallas_import/notebook_permute.py` is written the way the Pallas
distributed tutorial's cells are: a TPU assert, a mesh over `jax.devices()`, kernels run at
top level next to their `lax` references. Its second kernel has a planted race.
"""

import json
from pathlib import Path

import pytest

from ringc.ir.errors import ScheduleError
from ringc.pallas import check_file

from conftest import line_of

NOTEBOOK = Path(__file__).parent / "pallas_import" / "notebook_permute.py"
TEXT = NOTEBOOK.read_text()
BUG = next(line for line in TEXT.splitlines() if "# the planted bug" in line and "wait_send" in line)
COPY_LINE = [i for i, line in enumerate(TEXT.splitlines(), 1) if "remote_copy_op.start()" in line][1]


def test_script_kernels_are_captured_and_checked_in_order():
    first, second = check_file(str(NOTEBOOK), 3)
    assert first.ok, first.to_text()
    assert "right_permute_kernel" in first.title and "kernel call 1 of 2" in first.title
    assert any("meaning: ppermute by 1" in a for a in first.assumptions)
    # The TPU assert is reported, not fatal, and not silent.
    assert any(f"line {line_of(TEXT, 'Please run this notebook with TPU')}: AssertionError" in a
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
                            "PermuteTest.test_permute_on_tpu"}
    # The same kernel in two tests (other interpret settings) is checked once, and says so.
    assert "and 1 identical call" in by_test["PermuteTest.test_permute_eager"].title
    assert by_test["PermuteTest.test_permute_eager"].ok
    assert by_test["PermuteTest.test_permute_on_tpu"].ok  # skipped off TPU, rerun as on a TPU
    broken = by_test["PermuteTest.test_permute_no_recv_wait"]
    assert {"dma_not_waited", "race"} <= broken.kinds()
    notes = [a for r in reports for a in r.assumptions if a.startswith("script note")]
    assert any("test_broken_before_any_kernel stopped before any kernel call" in a for a in notes)
