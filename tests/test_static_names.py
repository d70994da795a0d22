"""Issue 13 section 1: lets of N and params used like params (shapes, grid and block
sizes), and static guards (a `when:` of N and params: a Python `if` in the kernel, and
the verifier unrolls only the branch taken)."""

from __future__ import annotations

from pathlib import Path

import pytest

import ringc
from ringc.ir import ScheduleError, load_text
from ringc.ir.resolve import resolved
from ringc.verify.unroll import unroll
from ringc.verify.events import DmaStart

REPO = Path(__file__).resolve().parent.parent
PIPE = (REPO / "schedules" / "reduce_scatter_pipelined.yaml").read_text()
RING = (REPO / "schedules" / "all_gather_ring.yaml").read_text()


def edited(text: str, *pairs: tuple[str, str]) -> str:
    for old, new in pairs:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


# The pipelined reduce-scatter with its row block a let: `bm: half // M` (M row blocks).
BLOCK_LET = edited(PIPE, ("params: {rows: 16, cols: 256, bm: 8, bn: 128}", "params: {rows: 16, cols: 256, M: 1, bn: 128}"),
                   ("  half: rows // 2\n", "  half: rows // 2\n  bm: half // M   # rows per block\n"))


def test_a_let_of_params_sizes_a_pipeline_block_and_grid():
    sched = load_text(BLOCK_LET, "block_let.yaml")
    assert set(resolved(sched).static_lets) == {"half", "bm"}
    assert ringc.check(sched, 4).ok
    module = ringc.emit(sched)
    # outside the kernel the let is written out; inside, it is the kernel's local
    assert "pl.BlockSpec((rows // 2 // M, bn)" in module and "bm = _floordiv(half, M)" in module
    base = ringc.check(ringc.load(REPO / "schedules" / "reduce_scatter_pipelined.yaml"), 4)
    assert base.program.event_count == ringc.check(sched, 4).program.event_count


def test_a_let_in_a_shape_divides_exactly():
    sched = load_text(BLOCK_LET, "block_let.yaml", params={"M": 3})
    with pytest.raises(ScheduleError, match=r"rows // 2 // M = 8 // 3 does not divide exactly"):
        unroll(sched, 4)


def test_a_let_of_the_device_in_a_shape_names_its_cause():
    text = edited(BLOCK_LET, ("  bm: half // M ", "  bm: half // M + me * 0 "))
    with pytest.raises(ScheduleError, match=r"let `bm` in pipeline grid size `i` .* depends on `me`") as info:
        load_text(text, "s.yaml")
    assert info.value.fix and "N, params and lets of those only" in info.value.fix


GUARDED = edited(RING, ("  - start: forward\n  - wait: forward\n",
                        "  - start: forward\n  - when: N > 1      # always: a static guard\n    do:\n"
                        "      - wait: forward\n  - when: N > 4\n    do:\n      - start: own\n      - wait: own\n"))


def test_a_static_guard_is_a_python_if_and_is_decided_per_n():
    sched = load_text(GUARDED, "guarded.yaml")
    guards = [op.when for op in sched.body if isinstance(op, ringc.ir.schema.When)]
    assert [resolved(sched).is_static(g) for g in guards] == [False, True, True]
    module = ringc.emit(sched)
    assert "    if N > 1:\n" in module and "@pl.when(N > 1)" not in module
    assert "@pl.when(step == 0)" in module  # a guard of the grid stays a pl.when
    # the copy `own` runs at step 0; under `N > 4` at every step, only from N = 8 on
    own = {n: sum(1 for d in unroll(sched, n).devices for e in d
               if isinstance(e.action, DmaStart) and e.action.copy == "own")
           for n in (4, 8)}
    assert own == {4: 4, 8: 8 + 8 * 7}
    assert ringc.check(sched, 4).ok and ringc.check(sched, 8).ok
