"""The one verifier core (`ringc/verify/core.py`): one list of checks, each saying how it runs
on a quotient; `run` the one place that chooses the quotient or the full analysis, and
`apply_strict` the one `--strict`. A front end hands it a `Subject`; its spec is anything with
the `spec.Spec` fields, not only a YAML `Schedule`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

import ringc
from ringc.verify import core
from ringc.verify.check import candidate, check, quotient_report, resolve_topology
from ringc.verify.rotation import rotation_unroll
from ringc.verify.events import Program
from ringc.verify.symmetric.certify import BACK_ENDS
from ringc.verify.symmetric.program import SymmetricProgram
from ringc.verify.unroll import unroll

ROOT = Path(__file__).resolve().parent.parent
RING = ROOT / "schedules" / "all_gather_ring.yaml"
MEGACORE_BOTH = ROOT / "tests" / "broken" / "all_gather_megacore_both_cores.yaml"
NO_WAIT = ROOT / "tests" / "broken" / "ppermute_no_wait.yaml"


def _subject(sched, placement, quotient: bool = True, full: bool = True) -> core.Subject:
    """`sched`'s subject, whose parts fail the test when `run` asks for one it must not."""
    def q():
        assert quotient, "the quotient was asked for"
        program = rotation_unroll(sched, placement.sizes, 1)
        return None if program is None else candidate(sched, program, placement)

    def f():
        assert full, "the full analysis was asked for"
        return candidate(sched, unroll(sched, sizes=placement.sizes), placement)
    return core.Subject(q, f)


def test_every_check_is_declared_once_with_its_quotient_rule():
    names = [c.name for c in core.CHECKS]
    assert len(names) == len(set(names))
    assert {c.on_quotient for c in core.CHECKS} == set(core.OnQuotient)
    assert [c.name for c in core.CHECKS if c.keeps_warnings] == ["routes"]


def test_a_clean_quotient_is_the_verdict_and_the_full_analysis_never_runs():
    sched = ringc.load(RING)
    placement = resolve_topology(sched, 8, "ring")
    report = core.run(_subject(sched, placement, full=False))
    assert report.ok and isinstance(report.program, SymmetricProgram)


def test_a_finding_on_the_quotient_sends_the_subject_to_the_full_analysis():
    for path, kind in ((NO_WAIT, "dma_not_waited"), (MEGACORE_BOTH, "megacore_dma")):
        sched = ringc.load(path)
        placement = resolve_topology(sched, 4, "ring")
        q = _subject(sched, placement).quotient()
        assert q is not None, path.name  # the symmetry holds: the finding is the quotient's to refuse
        assert core.on_quotient(q, core.Options()) is None, path.name
        report = core.run(_subject(sched, placement))
        assert kind in report.kinds() and isinstance(report.program, Program), path.name


def test_strict_turns_warnings_into_errors_once():
    sched = ringc.load(RING)
    loose = check(sched, 8, topology="line:8")
    assert loose.ok and any(f.severity == "warning" for f in loose.findings)
    strict = check(sched, 8, topology="line:8", strict=True)
    assert not strict.ok
    assert all(f.message.count("[an error under --strict]") == 1 for f in strict.findings)
    assert [f.kind for f in strict.findings] == [f.kind for f in loose.findings]


@dataclass
class _Buf:
    kind: str
    memory: str
    line: int = 0


@dataclass
class _Spec:
    """A front end's own description of a program: only the `spec.Spec` fields."""
    name: str
    file: str
    axes: list[str]
    buffers: dict[str, _Buf]
    megacore: bool = False
    split_grid: bool = False

    def line_of(self, key: str) -> int:
        return 0


@pytest.mark.parametrize("path", [RING, NO_WAIT, MEGACORE_BOTH], ids=lambda p: p.stem)
def test_any_spec_with_the_protocols_fields_gets_the_same_verdict(path):
    """A front end that is not YAML: the same events, described by a plain `Spec`, get the
    same findings as the schedule that produced them."""
    sched = ringc.load(path)
    placement = resolve_topology(sched, 4, "ring")
    c = candidate(sched, unroll(sched, sizes=placement.sizes), placement)
    want = core.full_report(c, core.Options())
    spec = _Spec(sched.name, sched.file, list(sched.axes),
                 {n: _Buf(b.kind, b.memory, b.line) for n, b in sched.buffers.items()}, sched.megacore)
    mine = core.Candidate(spec, unroll(sched, sizes=placement.sizes), placement, c.meaning)
    got = core.full_report(mine, core.Options())
    assert [f.message for f in got.findings] == [f.message for f in want.findings]
    assert got.ok == want.ok


def test_an_unknown_dma_order_is_one_message_naming_the_file():
    sched = ringc.load(RING)
    placement = resolve_topology(sched, 4, "ring")
    with pytest.raises(ringc.ScheduleError, match="unknown DMA ordering model 'lifo'") as e:
        core.run(_subject(sched, placement), core.Options(dma_order="lifo"))
    assert e.value.file == sched.file
    assert quotient_report(sched, placement, 1) is not None


def test_a_certified_check_has_a_symmetric_back_end_and_a_same_check_none():
    """`Check` refuses a check the quotient would certify without a back end to certify it,
    and a `SAME` check (its full back end decides on device 0's program) with one."""
    with pytest.raises(ValueError, match="CERTIFIED has a symmetric back end"):
        core.Check("new", core.OnQuotient.CERTIFIED, lambda a: [])
    with pytest.raises(ValueError, match="SAME has no symmetric back end"):
        core.Check("new", core.OnQuotient.SAME, lambda a: [], symmetric=lambda a: True)
    certified = [c.symmetric for c in core.CHECKS if c.on_quotient is core.OnQuotient.CERTIFIED]
    assert certified == list(BACK_ENDS)  # `clean`'s default is the core's list, in its order


def test_a_symmetric_program_holds_device_0_alone():
    """A `SymmetricProgram` is device 0's events and the group: a program of every device
    is refused, and the one `rotation_unroll` makes counts every device's events."""
    sched = ringc.load(RING)
    full = unroll(sched, 4)
    with pytest.raises(ValueError, match="device 0's events alone"):
        SymmetricProgram(full, {})
    sym = rotation_unroll(sched, 4)
    assert sym.events == sym.representatives.devices[0] and sym.event_count == full.event_count
