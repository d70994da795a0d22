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
    reports = check_file(str(HERE / "select_ref_test.py"), 4)
    by_test = {r.title.split(":")[0].split(" (")[0]: r for r in reports}
    assert by_test["SelectRefTest.test_exchange_selected0"].ok
    assert by_test["SelectRefTest.test_exchange_selected1"].ok
    assert by_test["SelectRefTest.test_exchange_no_recv_wait"].kinds() == {"dma_not_waited", "race"}
    strided = by_test["SelectRefTest.test_strided_send"]
    assert not strided.ok and "strided slice" in strided.to_text()


def test_a_call_not_checked_among_others_is_summed_up(capsys):
    """A test module with one call ringc cannot check: its own "not checked" verdict and the
    summary line (was: internal error, `CallError` has no `program`)."""
    rc = main(["check", str(HERE / "select_ref_test.py"), "--devices", "4"])
    captured = capsys.readouterr()
    assert rc == 1
    assert "not checked" in captured.out
    assert "4 verdicts in 1 file: 2 ok, 2 failed" in captured.err
