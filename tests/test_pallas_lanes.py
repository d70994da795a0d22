"""Evaluating every device at once (`ringc.pallas.interpret.Lanes`): the proof that every
device runs device 0's events translated, checked against evaluating each device on its own."""

from pathlib import Path

import numpy as np
import pytest

import ringc
from ringc.pallas import check_module, importer
from ringc.pallas.interpret import Diverge, Lanes
from ringc.pallas.values import Buffer, Ref
from ringc.verify.events import Compute, DmaStart, Event, SemWait, Signal
from ringc.verify.quotient import Rotator

LIBRARY = Path(__file__).parent.parent / "schedules"
# Kernels whose every device runs device 0's events translated (one per kind of traffic),
# and two whose devices differ (XOR partners; every device sends to every other).
SYMMETRIC = ["all_reduce_ring", "all_gather_matmul", "all_reduce_2d", "reduce_scatter_bidirectional"]
ASYMMETRIC = ["all_gather_hypercube", "all_to_all_direct"]


def _check(tmp_path: Path, stem: str, lanes: bool, monkeypatch):
    sched = ringc.load(str(LIBRARY / f"{stem}.yaml"))
    out = tmp_path / f"{stem}.py"
    out.write_text(ringc.emit(sched))
    monkeypatch.setattr(importer, "LANES", lanes)
    if len(sched.axes) == 1:
        return check_module(str(out), 4)
    return check_module(str(out), topology="torus:2x2")


def _translated(ev: Event, d: int, rot: Rotator) -> tuple:
    """Device 0's event as device d runs it (`Program.rotation`)."""
    add = rot.torus.adder(d)

    def sem(s):
        return None if s is None else (add[s[0]], s[1], s[2])

    a = ev.action
    if isinstance(a, DmaStart):
        a = DmaStart(a.copy, rot.region(a.src, d), rot.region(a.dst, d), sem(a.send_sem), sem(a.recv_sem))
    elif isinstance(a, Compute):
        a = Compute(a.kind, *(None if r is None else rot.region(r, d) for r in (a.dst, a.src, a.rhs)),
                    a.accumulate, None if a.base is None else rot.region(a.base, d))
    elif isinstance(a, (SemWait, Signal)):
        a = type(a)(sem(a.sem), *[getattr(a, f) for f in a.__dataclass_fields__ if f != "sem"])
    return (add[ev.device], ev.index, ev.point, int(ev.line), ev.invocation, a)


@pytest.mark.parametrize("stem", SYMMETRIC)
def test_every_device_runs_device_0s_events_translated(tmp_path, stem, monkeypatch):
    fast = _check(tmp_path, stem, True, monkeypatch)
    full = _check(tmp_path, stem, False, monkeypatch)
    assert fast.ok and full.ok
    program = fast.program
    assert program.rotation is not None and len(program.devices) == 1
    assert full.program.rotation is None and len(full.program.devices) == program.n
    rot = Rotator(program)
    for d, events in enumerate(full.program.devices):
        want = [_translated(ev, d, rot) for ev in program.devices[0]]
        got = [(ev.device, ev.index, ev.point, int(ev.line), ev.invocation, ev.action) for ev in events]
        assert got == want, f"device {d}"


@pytest.mark.parametrize("stem", ASYMMETRIC)
def test_devices_that_differ_are_evaluated_one_by_one(tmp_path, stem, monkeypatch):
    report = _check(tmp_path, stem, True, monkeypatch)
    assert report.ok, report.to_text()
    assert report.program.rotation is None and len(report.program.devices) == report.program.n


def _ref(starts: list[int], length: int = 2) -> Ref:
    buf = Buffer("o", (8, 4), np.float32, "vmem", "output")
    return Ref(buf, 0, ((starts[0], starts[0] + length), (0, 4)), (0, 1), ((0, np.array(starts)),))


def test_a_box_must_move_by_one_step_per_device():
    lanes = Lanes({"x": 4})
    lanes.place(_ref([0, 2, 4, 6]))
    assert lanes.steps == {("o", 0): (2,)}
    lanes.place(_ref([2, 4, 6, 0]))  # (2 + 2 d) mod 8: the same step, wrapping round
    with pytest.raises(Diverge):
        lanes.place(_ref([0, 4, 0, 4]))  # a step of 4 on its own, but this dimension moves by 2
    with pytest.raises(Diverge):
        Lanes({"x": 4}).place(_ref([0, 2, 6, 4]))  # not a fixed step
    fixed = Lanes({"x": 4})
    fixed.place(_ref([0, 2, 4, 6]))
    with pytest.raises(Diverge):  # the same dimension not moving elsewhere: no single step
        fixed.place(Ref(_ref([0]).buffer, 0, ((0, 2), (0, 4)), (0, 1)))


def test_a_target_must_be_a_translation():
    lanes = Lanes({"x": 4})
    assert lanes.target(np.array([1, 2, 3, 0])) == 1
    assert lanes.target(np.array([3, 0, 1, 2])) == 3
    for bad in (np.array([1, 0, 3, 2]), 1, np.array([0, 0, 0, 0])):
        with pytest.raises(Diverge):
            lanes.target(bad)
    torus = Lanes({"x": 2, "y": 3})
    assert torus.target(np.array([1, 2, 0, 4, 5, 3])) == 1  # (0, +1): y wraps within each row
    with pytest.raises(Diverge):
        torus.target(np.array([1, 2, 3, 4, 5, 0]))  # +1 on the flat ids is no translation of the torus
