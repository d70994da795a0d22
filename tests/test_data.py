"""Runtime data (`data:`): declarations, constraints, samples, data files, and `check --data`."""

from __future__ import annotations

import json
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
