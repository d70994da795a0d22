"""`ringc check kernel.py` on hand-written Pallas kernels (tests/pallas_import/)."""

from pathlib import Path

import pytest

from conftest import line_of
from ringc.pallas import check_module

HERE = Path(__file__).parent / "pallas_import"
RIGHT_PERMUTE = HERE / "right_permute.py"


@pytest.mark.parametrize("n", [2, 3, 4])
def test_hand_written_right_permute_passes(n):
    report = check_module(str(RIGHT_PERMUTE), n)
    assert report.ok, report.to_text()
    assert report.program.n == n


def test_wait_recv_after_the_read_is_a_race_at_the_read():
    report = check_module(str(RIGHT_PERMUTE), 4, params={"late": 1})
    races = [f for f in report.findings if f.kind == "race"]
    assert races, report.to_text()
    read = line_of(RIGHT_PERMUTE.read_text(), "out_ref[...] = recv_buf[...]")
    assert {int(f.event.line) for f in races} == {read}
    assert races[0].event.line.file.endswith("right_permute.py")
    text = report.to_text()
    assert f"right_permute.py:{read}: error: [race]" in text
