"""Pipeline windows fused in the data flow (`ringc/verify/windows.py`): where the fused
replay runs to the end, every buffer but the windows ends as the plain replay leaves it;
where the events leave the pattern it proves, it refuses (`Unfused`) and the plain replay
decides."""

from __future__ import annotations

import dataclasses
from bisect import bisect_left
from pathlib import Path

import pytest
from conftest import without_runtime_data
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ringc
from ringc.errors import ScheduleError
from ringc.verify.symmetric import flow
from ringc.verify.check import meaning_of
from ringc.verify.events import Compute, DmaStart, Event, Region
from ringc.verify.rotation import rotation_unroll
from ringc.verify.semantics import Memory, apply, canonical_value, restrict_value
from ringc.verify.windows import FusedMemory, Unfused

ROOT = Path(__file__).resolve().parent.parent
CASES = [p for p in without_runtime_data([q for d in ("schedules", "tests/broken", "tests/mutants")
                                          for q in sorted((ROOT / d).glob("*.yaml"))])
         if p.name != "expected.yaml"]


def _differences(a: Memory, b: Memory, windows: frozenset[str]) -> list[str]:
    """Where two memories hold different values outside `windows`: every overlap of their
    pieces compared canonically (the fused replay may cut a buffer into other boxes)."""
    out = []
    for key in sorted(set(a.index) | set(b.index)):
        device, buffer = key
        if buffer in windows:
            continue
        full = tuple((0, s) for s in a.shapes[buffer])
        region = Region(buffer, device, full, tuple(range(len(full))), 4)
        theirs = sorted(b.read(region), key=lambda q: q.box[0])
        starts = [q.box[0][0] for q in theirs]
        longest = max((q.box[0][1] - q.box[0][0] for q in theirs), default=0)
        for p in a.read(region):
            lo, hi = p.box[0]
            for q in theirs[bisect_left(starts, lo - longest + 1):bisect_left(starts, hi)]:
                ix = tuple((max(x0, y0), min(x1, y1)) for (x0, x1), (y0, y1) in zip(p.box, q.box))
                if any(lo >= hi for lo, hi in ix):
                    continue
                u = canonical_value(restrict_value(p.value, p.box, ix), ix)
                v = canonical_value(restrict_value(q.value, q.box, ix), ix)
                if u != v:
                    out.append(f"{buffer}@{device} {ix}: {u} != {v}")
    return out


def _sizes(sched) -> "int | dict[str, int]":
    """N = 4 on a ring, a 2x3 torus, a 2x2x2 one."""
    return {1: 4, 2: dict(zip(sched.axes, (2, 3))), 3: dict(zip(sched.axes, (2, 2, 2)))}[len(sched.axes)]


def test_fused_data_flow_is_the_plain_one_on_the_corpus(monkeypatch):
    """Every library schedule, broken case and mutant with a nested pipeline, rotated (N = 4,
    torus 2x3, 2x2x2): the fused replay either refuses or ends with every non-window buffer
    as the plain replay's, and gives the same verdict. Most fuse to the end (the pattern is
    what `pipeline:` unrolls to); `reduce_scatter_pipelined_no_base` reads an output window
    it never wrote, and must be refused."""
    memories: list[Memory] = []
    real = flow.mismatches

    def kept(collective, buffers, mem, *rest):
        memories.append(mem)
        return real(collective, buffers, mem, *rest)
    monkeypatch.setattr(flow, "mismatches", kept)
    fused, refused = [], []
    for path in CASES:
        sched = ringc.load(path)
        try:
            program = rotation_unroll(sched, _sizes(sched))
        except ScheduleError:  # a size the schedule refuses
            continue
        if program is None or not program.representatives.windows:
            continue
        memories.clear()
        try:
            verdict = flow.data_flow_right(sched, program, meaning_of(sched))
        except Exception as e:  # the quotient cannot tell (its own exceptions): both agree below
            verdict = type(e)
        plain = dataclasses.replace(program, representatives=dataclasses.replace(program.representatives,
                                                                                 windows=frozenset()))
        try:
            again = flow.data_flow_right(sched, plain, meaning_of(sched))
        except Exception as e:
            again = type(e)
        assert verdict == again, path.name
        if len(memories) == 2:
            one, two = memories
            (fused if isinstance(one, FusedMemory) else refused).append(path.stem)
            assert _differences(one, two, program.representatives.windows) == [], path.name
    assert "reduce_scatter_pipelined_no_base" in refused
    assert len(fused) >= 12 and {"all_reduce_bidirectional", "reduce_scatter_pipelined", "all_gather_matmul_streamed",
                                 "all_reduce_2d_bidirectional", "all_reduce_3d_bidirectional"} <= set(fused), fused


# -- the pattern's conditions, one event sequence each -----------------------------------------

SHAPES = {"x": (4, 4), "h": (4, 4), "o": (4, 4), "w": (2, 2, 4), "v": (2, 2, 4)}
WINDOWS = frozenset({"w", "v"})


def _hbm(buffer: str, row: int) -> Region:
    return Region(buffer, 0, ((row, row + 2), (0, 4)), (0, 1), 4)


def _slot(buffer: str, slot: int) -> Region:
    return Region(buffer, 0, ((slot, slot + 1), (0, 2), (0, 4)), (1, 2), 4)


def _copy(src: Region, dst: Region) -> Event:
    return Event(0, 0, (), 0, DmaStart("c", src, dst, None, (0, "s", ())))


def _compute(kind: str, dst: Region, src: Region | None = None, base: Region | None = None) -> Event:
    return Event(0, 0, (), 0, Compute(kind, dst, src, base=base))


def _replays(events: list[Event], rebuild_after: int = FusedMemory.rebuild_after) -> tuple[Memory, FusedMemory | None]:
    plain, fused = Memory(SHAPES), FusedMemory(SHAPES, WINDOWS)
    fused.rebuild_after = rebuild_after
    for m in (plain, fused):
        m.init_input(0, "x")
    for ev in events:
        apply(plain, ev, 1)
    try:
        for ev in events:
            fused.step(ev, 1)
    except Unfused:
        return plain, None
    return plain, fused


def _block(row: int, out: str = "o", slot: int = 0) -> list[Event]:
    """One pipeline step: o[row:row+2] = x[row:row+2] + h[row:row+2] through the windows."""
    return [_compute("allocate", Region("w", 0, ((0, 2), (0, 2), (0, 4)), (0, 1, 2), 4)),
            _copy(_hbm("x", row), _slot("w", slot)),
            _compute("accumulate", _slot("v", slot), _slot("w", slot), base=_hbm("h", row)),
            _copy(_slot("v", slot), _hbm(out, row))]


def test_a_pipeline_step_fuses_to_the_same_memory():
    events = [_copy(_hbm("x", 2), _hbm("h", 0)), _copy(_hbm("x", 0), _hbm("h", 2))] + _block(0) + _block(2, slot=1)
    plain, fused = _replays(events)
    assert fused is not None and _differences(plain, fused, WINDOWS) == []
    assert ("0", "w") not in fused.index and (0, "w") not in fused.index  # the windows were never written


@pytest.mark.parametrize("events, why", [
    # the source changes between the copy-in and the compute that reads it
    ([_copy(_hbm("x", 0), _slot("w", 0)), _copy(_hbm("h", 0), _hbm("x", 0)),
      _compute("accumulate", _slot("v", 0), _slot("w", 0), base=_hbm("h", 0)),
      _copy(_slot("v", 0), _hbm("o", 0))], "written between"),
    # an output slot read before anything was computed in it (accumulate without a base)
    ([_copy(_hbm("x", 0), _slot("w", 0)), _compute("accumulate", _slot("v", 0), _slot("w", 0)),
      _copy(_slot("v", 0), _hbm("o", 0))], "before it is computed"),
    # a copy out of a slot with nothing computed in it
    ([_copy(_hbm("x", 0), _slot("w", 0)), _copy(_slot("w", 0), _hbm("o", 0))], "nothing computed"),
    # a slot read that no copy-in loaded
    ([_compute("assign", _slot("v", 0), _slot("w", 1)), _copy(_slot("v", 0), _hbm("o", 0))], "no copy-in"),
    # a compute outside the windows reads a slot whose source changed since its copy-in
    ([_copy(_hbm("x", 0), _slot("w", 0)), _copy(_hbm("h", 0), _hbm("x", 0)),
      _compute("assign", _hbm("o", 0), _slot("w", 0))], "written between"),
    # a compute into part of a slot that holds a computed block
    ([_copy(_hbm("x", 0), _slot("w", 0)), _compute("assign", _slot("v", 0), _slot("w", 0)),
      _compute("zero", Region("v", 0, ((0, 1), (0, 1), (0, 4)), (1, 2), 4))], "part of a slot"),
    # a copy between windows
    ([_copy(_hbm("x", 0), _slot("w", 0)), _copy(_slot("w", 0), _slot("v", 0))], "between windows"),
])
def test_leaving_the_pattern_is_refused(events, why):
    fused = FusedMemory(SHAPES, WINDOWS)
    fused.init_input(0, "x")
    with pytest.raises(Unfused, match=why):
        for ev in events:
            fused.step(ev, 1)


# -- any event sequence: refused, or the plain replay's memory ----------------------------------

def _regions(draw, window: bool) -> Region:
    if window:
        return _slot(draw(st.sampled_from(sorted(WINDOWS))), draw(st.integers(0, 1)))
    return _hbm(draw(st.sampled_from(["x", "h", "o"])), draw(st.sampled_from([0, 2, 0, 2, 1])))


def _event(draw) -> Event:
    """Any one event on the test's buffers: a copy in, out, between anything; an
    allocation; a compute into a slot or HBM, reading slots or HBM."""
    kind = draw(st.sampled_from(["load", "store", "copy", "compute", "allocate", "direct"]))
    if kind == "load":
        return _copy(_regions(draw, False), _regions(draw, True))
    if kind == "store":
        return _copy(_regions(draw, True), _regions(draw, False))
    if kind == "copy":
        return _copy(_regions(draw, draw(st.booleans())), _regions(draw, draw(st.booleans())))
    if kind == "allocate":
        name = draw(st.sampled_from(sorted(WINDOWS)))
        return _compute("allocate", Region(name, 0, ((0, 2), (0, 2), (0, 4)), (0, 1, 2), 4))
    dst = _regions(draw, kind == "compute")
    op = draw(st.sampled_from(["assign", "accumulate", "accumulate_base", "zero"]))
    src, base = _regions(draw, draw(st.booleans())), _regions(draw, draw(st.booleans()))
    if op == "zero":
        return _compute("zero", dst)
    if op == "accumulate_base":
        return _compute("accumulate", dst, src, base=base)
    return _compute(op, dst, src)


def _step(draw) -> list[Event]:
    """A pipeline step as `pipeline:` unrolls it: load a block into an input slot, compute
    an output slot from it (and from HBM), maybe add to it again, copy it out."""
    w, v, slot = _slot("w", draw(st.integers(0, 1))), _slot("v", draw(st.integers(0, 1))), None
    out = [_copy(_regions(draw, False), w)]
    if draw(st.booleans()):  # a write between the copy-in and the use (harmless unless it meets the source)
        out.append(_copy(_regions(draw, False), _regions(draw, False)))
    first = draw(st.sampled_from(["assign", "accumulate_base", "direct", "add"]))
    if first == "direct":  # an accumulator outside the windows, then the slot from it
        acc = _regions(draw, False)
        out += [_compute("accumulate", acc, w, base=_regions(draw, False)), _compute("assign", v, acc)]
    elif first == "assign":
        out.append(_compute("assign", v, w))
    elif first == "add":  # v += w: reads what the slot held before (a pipeline with no base)
        out.append(_compute("accumulate", v, w))
    else:
        out.append(_compute("accumulate", v, w, base=_regions(draw, False)))
    again = draw(st.sampled_from(["", "add", "base"]))
    if again == "add":  # v += w, or += HBM
        out.append(_compute("accumulate", v, draw(st.sampled_from([w, _regions(draw, False)]))))
    elif again == "base":  # v = w + v: replaces the slot, reading it
        out.append(_compute("accumulate", v, w, base=v))
    return out + [_copy(v, _regions(draw, False))]


@st.composite
def _programs(draw) -> list[Event]:
    """Pipeline steps (`_step`), with any events (`_event`) put anywhere among them."""
    events = [ev for _ in range(draw(st.integers(1, 4))) for ev in _step(draw)]
    for _ in range(draw(st.integers(0, 3))):
        events.insert(draw(st.integers(0, len(events))), _event(draw))
    return events


@settings(max_examples=600, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_programs(), st.sampled_from([64, 1, 2]))
def test_any_sequence_is_refused_or_replayed_the_same(events, rebuild_after):
    """Random copies in and out of two windows' slots, computes into slots and into HBM
    (reading slots or not), stray copies and allocations, the watch on sources rebuilt
    after every 1, 2 or 64 new bindings: wherever the fused replay runs
    to the end, every non-window buffer holds what the plain replay leaves. (Dropping any
    one of `FusedMemory`'s conditions makes this fail: 9 deliberate breaks tried, each
    caught by these 600 derandomized examples.)"""
    plain, fused = _replays(events, rebuild_after)
    if fused is not None:
        assert _differences(plain, fused, WINDOWS) == []
