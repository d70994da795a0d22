"""Runtime data (`data:`): declarations, constraints, samples, data files, and `check --data`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings

import ringc
from ringc.data import derive, load_samples, problems
from ringc.ir import expr as E
from ringc.ir.errors import ScheduleError
from ringc.testing import data_samples, draw_samples

ROOT = Path(__file__).resolve().parent.parent
RAGGED = ROOT / "schedules" / "ragged_all_to_all.yaml"


@pytest.fixture(scope="module")
def ragged():
    return ringc.load(RAGGED)


def test_item_expressions_read_one_element():
    e = E.parse("send_sizes[(me + 1) % N] > 0")
    assert E.names(e) == {"send_sizes", "me", "N"}
    assert E.to_text(e) == "send_sizes[(me + 1) % N] > 0"
    assert E.evaluate(e, {"send_sizes": (0, 3), "me": 0, "N": 2}) is True
    assert E.to_python(E.parse("sizes[t]"), {"sizes": "sizes_"}) == "sizes_[t]"
    with pytest.raises(E.ExprError, match="outside data array `sizes` of length 2"):
        E.evaluate(E.parse("sizes[2]"), {"sizes": (1, 2)})
    with pytest.raises(E.ExprError, match="is a data array"):
        E.evaluate(E.parse("sizes + 1"), {"sizes": (1, 2)})
    with pytest.raises(E.ExprError, match="not a data array"):
        E.evaluate(E.parse("rows[0]"), {"rows": 8})


@settings(max_examples=30, deadline=None)
@given(data=data_samples(ringc.load(RAGGED), 3))
def test_drawn_samples_satisfy_every_constraint(data):
    sched = ringc.load(RAGGED)
    assert problems(sched, 3, data) == []
    sizes = data["send_sizes"]
    assert all(sum(row) <= 8 for row in sizes)                         # sum_at_most: rows
    assert all(sum(sizes[j][d] for j in range(3)) <= 8 for d in range(3))  # receive capacity


def test_derived_arrays_and_reproducible_draws(ragged):
    s = derive(ragged, 2, {"send_sizes": [[1, 2], [3, 0]]})
    assert s["input_offsets"] == ((0, 1), (0, 3))
    assert s["recv_sizes"] == ((1, 3), (2, 0))
    assert s["recv_offsets"] == ((0, 1), (0, 2))
    assert s["output_offsets"] == ((0, 0), (1, 2))   # device 1's rows land after device 0's
    assert draw_samples(ragged, 3, 4, seed=5) == draw_samples(ragged, 3, 4, seed=5)
    assert len(draw_samples(ragged, 3, 4, seed=5)) == 4


def test_problems_name_the_broken_constraint(ragged):
    s = derive(ragged, 2, {"send_sizes": [[5, 4], [0, 0]]})
    assert any("sums to 9" in t for _, t in problems(ragged, 2, s))
    s = derive(ragged, 2, {"send_sizes": [[0, 6], [0, 6]]})
    assert [n for n, _ in problems(ragged, 2, s)] == ["recv_sizes"]   # 12 rows for device 1's 8
    s = dict(derive(ragged, 2, {"send_sizes": [[1, 1], [1, 1]]}), input_offsets=((0, 0), (0, 1)))
    assert any("exclusive prefix sum" in t for _, t in problems(ragged, 2, s))


# ------------------------------------------------------------------ check --data


def _variant(tmp_path, ragged_text, old, new, name):
    assert old in ragged_text
    path = tmp_path / f"{name}.yaml"
    path.write_text(ragged_text.replace(old, new))
    return ringc.load(path)


def test_check_with_data_names_the_sample_and_says_it_is_sampled(ragged):
    samples = draw_samples(ragged, 3, 6, seed=1)
    report = ringc.check(ragged, 3, data=samples, data_how="random:6")
    assert report.ok and not report.findings, report.to_text()
    assert any("a verdict on these samples, not on all data" in a for a in report.assumptions)
    with pytest.raises(ScheduleError, match="--data random:K"):
        ringc.check(ragged, 3)                    # runtime data needs samples


@pytest.mark.parametrize("old, new, kind", [
    # the receive buffer's constraint dropped: some sample overflows it
    ("transpose_of: send_sizes, sum_at_most: out_rows}", "transpose_of: send_sizes}", "out_of_bounds"),
    # the handshake dropped: a neighbour's rows can land before init is copied into out
    ('      - signal: "ready[step]"\n        to: source\n      - sem_wait: "ready[step]"\n', "", "race"),
    # the sender's offset instead of the receiver's
    ('dst: "out[output_offsets[target]:', 'dst: "out[input_offsets[target]:', "wrong_result"),
    # a receive never waited for
    ("      - when: recv_sizes[source] > 0\n        do:\n          - wait_recv: arrive\n", "", "dma_not_waited"),
])
def test_broken_variants_are_caught_on_some_sample(tmp_path, ragged, old, new, kind):
    sched = _variant(tmp_path, RAGGED.read_text(), old, new, kind)
    report = ringc.check(sched, 3, data=draw_samples(sched, 3, 10, seed=0), data_how="random:10")
    assert kind in report.kinds(), report.to_text()
    finding = next(f for f in report.findings if f.kind == kind)
    assert "[data sample " in finding.message and "send_sizes = [[" in finding.message
    assert any("a verdict on sampled data, not on all data" in a for a in report.assumptions)


def test_the_explorer_agrees_on_a_sample(ragged):
    """The independent explorer (explore.py) on the unrolled events of one sample: no hang,
    no race, nothing left at exit, as `check` says."""
    from ringc.verify.explore import explore
    from ringc.verify.unroll import unroll

    sample = draw_samples(ragged, 3, 3, seed=2)[-1]
    result = explore(unroll(ragged, 3, data=sample), max_states=60_000)
    assert result.complete and not result.hang and not result.race and not result.nonzero_exit


def test_data_file_samples_and_their_errors(tmp_path, ragged):
    good = tmp_path / "data.json"
    good.write_text(json.dumps({"samples": [{"send_sizes": [[1, 2], [3, 0]]},
                                            {"send_sizes": [[0, 1, 1], [2, 0, 0], [1, 1, 1]]}]}, indent=1))
    loaded = load_samples(str(good), ragged)
    assert [n for n, _ in loaded] == [2, 3] and loaded[0][1]["output_offsets"] == ((0, 0), (1, 2))
    report = ringc.check(ragged, 2, data=[loaded[0][1]], data_how="data.json")
    assert report.ok, report.to_text()

    def error(text):
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        with pytest.raises(ScheduleError) as e:
            load_samples(str(bad), ragged)
        assert e.value.file == str(bad) and e.value.fix
        return e.value

    e = error('{"send_sizes": [[1, 2],\n [3, 0]')
    assert "not JSON" in e.message and e.line == 2
    e = error('{\n "send_sizes": [[9, 0], [0, 0]]\n}')           # 9 > rows = 8
    assert "every value must lie in 0..8" in e.message and e.line == 2
    e = error('{\n "send_sizes": [[1, 1], [1, 1]],\n "sizes": [[0, 0], [0, 0]]\n}')
    assert "`sizes` is no data array" in e.message and e.line == 3
    e = error('{\n "send_sizes": [[1, 1], [1, 1]],\n "input_offsets": [[0, 0], [0, 1]]\n}')
    assert "exclusive prefix sum" in e.message and e.line == 3


def test_malformed_constraints_are_bad_input_with_line_and_fix(tmp_path):
    text = RAGGED.read_text()
    cases = [
        ("input_offsets:  {shape: [N], prefix_sum_of: send_sizes}", "input_offsets:  {shape: [N], prefix_sum_of: sends}",
         "derived from `sends`, which is no data array"),
        ("send_sizes:     {shape: [N], range: [0, rows], sum_at_most: rows}", "send_sizes:     {shape: [N], sum_at_most: rows}",
         "needs `range: [lo, hi]`"),
        ("send_sizes:     {shape: [N], range: [0, rows], sum_at_most: rows}",
         "send_sizes:     {shape: [N], range: [0, me], sum_at_most: rows}", "unknown name `me` in range"),
        ("input_offsets:  {shape: [N], prefix_sum_of: send_sizes}",
         "input_offsets:  {shape: [N], prefix_sum_of: send_sizes, range: [0, 1]}", "applies to free arrays only"),
    ]
    for old, new, message in cases:
        assert old in text
        path = tmp_path / "bad.yaml"
        path.write_text(text.replace(old, new))
        with pytest.raises(ScheduleError, match=re.escape(message)) as e:
            ringc.load(path)
        key = new.split(":")[0].strip()
        assert e.value.line == next(i for i, l in enumerate(path.read_text().splitlines(), 1)
                                    if l.startswith(f"  {key}:")), (message, e.value)


def test_cli_check_data(tmp_path, capsys):
    from ringc.cli import main

    assert main(["check", str(RAGGED), "--devices", "2..3", "--data", "random:4", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert out.count(": ok (") == 2 and "random:4, seed 3" in out
    broken = ROOT / "tests" / "broken" / "ragged_all_to_all_receive_overflow.yaml"
    assert main(["check", str(broken), "--devices", "3", "--data", "random:10"]) == 1
    assert "[out_of_bounds]" in capsys.readouterr().out
    assert main(["check", str(RAGGED), "--devices", "2", "--data", "random:0"]) == 2
    assert "positive integer" in capsys.readouterr().err
