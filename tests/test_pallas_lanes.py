"""Evaluating every device at once (`ringc.pallas.interpret.Lanes`): the proof that every
device runs device 0's events translated, checked against evaluating each device on its own."""

from pathlib import Path

import numpy as np
import pytest

import ringc
from ringc.pallas import check_module, importer
from ringc.pallas.interpret import Diverge, Lanes
from ringc.pallas.values import Buffer, Ref
from ringc.verify.symmetric.moves import expand
from ringc.verify.events import Program
from ringc.verify.symmetric.program import SymmetricProgram

LIBRARY = Path(__file__).parent.parent / "schedules"
# Kernels whose every device runs device 0's events translated (one per kind of traffic;
# the direct all-to-all sends to every other device, far sends warned on the quotient too),
# and two whose devices differ (XOR partners; megacore's two TensorCores).
SYMMETRIC = ["all_reduce_ring", "all_gather_matmul", "all_reduce_2d", "reduce_scatter_bidirectional",
             "all_to_all_direct"]
ASYMMETRIC = ["all_gather_hypercube", "all_gather_megacore"]


def _check(tmp_path: Path, stem: str, lanes: bool, monkeypatch):
    sched = ringc.load(str(LIBRARY / f"{stem}.yaml"))
    out = tmp_path / f"{stem}.py"
    out.write_text(ringc.emit(sched))
    monkeypatch.setattr(importer, "LANES", lanes)
    if len(sched.axes) == 1:
        return check_module(str(out), 4)
    return check_module(str(out), topology="torus:2x2")


def _events(program) -> list[list[tuple]]:
    return [[(ev.device, ev.index, ev.point, int(ev.line), ev.invocation, ev.inner, ev.action) for ev in events]
            for events in program.devices]


@pytest.mark.parametrize("stem", SYMMETRIC)
def test_every_device_runs_device_0s_events_translated(tmp_path, stem, monkeypatch):
    """Device 0's events, translated to every device (`quotient.expand`), are exactly what
    evaluating each device on its own gives: the symmetry `Lanes` proved holds."""
    fast = _check(tmp_path, stem, True, monkeypatch)
    full = _check(tmp_path, stem, False, monkeypatch)
    assert fast.ok and full.ok
    program = fast.program
    assert isinstance(program, SymmetricProgram) and len(program.representatives.devices) == 1
    assert isinstance(full.program, Program) and len(full.program.devices) == program.n
    spelled = expand(program)
    assert _events(spelled) == _events(full.program)
    key = {id(ev): (ev.device, ev.index) for events in spelled.devices + full.program.devices for ev in events}
    assert [(key[id(ev)], t) for ev, t in spelled.targets] == [(key[id(ev)], t) for ev, t in full.program.targets]


@pytest.mark.parametrize("stem", ASYMMETRIC)
def test_devices_that_differ_are_evaluated_one_by_one(tmp_path, stem, monkeypatch):
    report = _check(tmp_path, stem, True, monkeypatch)
    assert report.ok, report.to_text()
    assert isinstance(report.program, Program) and len(report.program.devices) == report.program.n


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


@pytest.mark.parametrize("stem", ["all_reduce_no_capacity_wait", "all_gather_no_wait_recv"])
def test_findings_of_a_symmetric_kernel_are_those_of_every_device_evaluated(tmp_path, stem, monkeypatch):
    """The quotient gives only the clean verdict; a symmetric kernel with findings is checked
    in full on device 0's events spelled out for every device, with the same findings, word
    for word, as evaluating every device on its own."""
    sched = ringc.load(str(Path(__file__).parent / "broken" / f"{stem}.yaml"))
    out = tmp_path / f"{stem}.py"
    out.write_text(ringc.emit(sched))
    reports = []
    for lanes in (True, False):
        monkeypatch.setattr(importer, "LANES", lanes)
        reports.append(check_module(str(out), 4))
    fast, full = reports
    assert not fast.ok and fast.findings
    assert [f.message for f in fast.findings] == [f.message for f in full.findings]


def test_expand_keeps_every_field_and_every_event_detail(tmp_path, monkeypatch):
    """`expand` spells device 0's events out for every device and changes nothing else: the
    program's other fields (element types, parallel dims, labels, ...) and each action's
    own fields (a matmul's contracted dims, an explicit self-copy) survive. (A merge once
    rebuilt them field by field and dropped the newer ones: a transposed matmul then read
    as `a @ b`.)"""
    import dataclasses
    from ringc.verify.events import Compute
    fast = _check(tmp_path, "all_gather_matmul_t", True, monkeypatch)
    program = fast.program
    assert isinstance(program, SymmetricProgram) and program.representatives.dtypes
    spelled = expand(program)
    for f in dataclasses.fields(program.representatives):
        if f.name not in ("devices", "targets"):
            assert getattr(spelled, f.name) == getattr(program.representatives, f.name), f.name
    contracts = {ev.action.contract for ev in spelled.devices[0] if isinstance(ev.action, Compute)
                 and ev.action.kind == "matmul"}
    assert contracts == {(1, 1)}


CORPUS = Path(__file__).parent / "pallas"


@pytest.mark.parametrize("name", ["all_gather_wrong_direction.py", "reduce_scatter_overlapping_slices.py",
                                  "all_gather_matmul_wrong_block.py", "matmul_reduce_scatter_no_reduce.py"])
def test_ring_steps_are_what_memory_steps_learns(name, monkeypatch):
    """A kernel with findings is checked in full on device 0's events spelled out; the
    access steps the full analysis needs are read off device 0's events and the proved
    translation (`importer.ring_steps`) instead of being learned from every device: they
    must be exactly what `symmetry.memory_steps` learns (and checks) on the full program."""
    from ringc.verify import core
    from ringc.verify.symmetry import memory_steps
    seen = {}
    real = core.full_report

    def spy(candidate, options):
        seen["program"], seen["steps"] = candidate.program, candidate.steps
        return real(candidate, options)

    monkeypatch.setattr(core, "full_report", spy)
    monkeypatch.syspath_prepend(str(CORPUS))
    report = check_module(str(CORPUS / name), 4)
    assert not report.ok
    assert seen["steps"] is not None and seen["steps"]
    assert seen["steps"] == memory_steps(seen["program"])
