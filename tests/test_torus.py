"""The torus quotient (`rotation.py`, `quotient.py` on several axes) against the full
analysis: on every library schedule, broken schedule and mutant, and the torus test
schedules in tests/torus/ (some break the symmetry on purpose), at small tori. The
quotient must never call clean what the full analysis rejects, must give the same report
when it answers, and must answer for every clean, translation-symmetric schedule."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import without_runtime_data

import ringc
from ringc.testing import supports
from ringc.verify.check import check, check_program, quotient_report, resolve_topology
from ringc.verify.rotation import rotation_unroll
from ringc.verify.events import Program
from ringc.verify.symmetric.program import SymmetricProgram
from ringc.verify.unroll import unroll

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = without_runtime_data(sorted((ROOT / "schedules").glob("*.yaml")))
TORUS = sorted((ROOT / "tests" / "torus").glob("*.yaml"))
BROKEN = [p for p in without_runtime_data(sorted((ROOT / "tests" / "broken").glob("*.yaml")))
          + sorted((ROOT / "tests" / "mutants").glob("*.yaml")) if p.name != "expected.yaml"]
# Correct, and symmetric except for what the name says: the quotient must answer for these.
SYMMETRIC_CLEAN = {"all_gather_2d", "all_reduce_2d", "all_gather_3d", "all_reduce_2d_bidirectional",
                   "all_reduce_3d_bidirectional",
                   # its level 1 moves rows x[a] whole: how x's y dim moves comes from the
                   # gauge (`gauge.py`), which the row's whole copies into rx pin
                   "reduce_scatter_hierarchical"}
# One corner does something else on purpose: never translation symmetric. The first is
# still correct (the full analysis says so), the second hangs.
ASYMMETRIC = {"all_gather_2d_corner_copies_twice", "all_reduce_2d_corner_skips_barrier"}
CLEAN = SYMMETRIC_CLEAN | {"all_gather_2d_corner_copies_twice"}
TORI = {2: ("torus:2x3", "torus:3x3", "torus:4x4"), 3: ("torus:2x2x2",)}


def _axes(path: Path) -> int:
    return len(ringc.load(path).axes)


def _json(report) -> dict:
    out = report.to_json()
    out.pop("seconds", None)
    return out


def agree(sched, topo: str, along: str | None = None, calls: int = 1):
    """The quotient's answer and the full report; asserts they agree."""
    placement = resolve_topology(sched, None, topo, along)
    try:
        full = check_program(sched, unroll(sched, sizes=placement.sizes, invocations=calls), placement)
    except ringc.ScheduleError:
        full = None
    fast = quotient_report(sched, placement, calls)
    if fast is not None:
        assert full is not None and full.ok, \
            f"{sched.name} on {topo}: quotient clean, full finds {full.kinds() if full else 'a bad-input error'}"
        assert _json(fast) == _json(full), f"{sched.name} on {topo}: reports differ"
    return fast, full


@pytest.mark.parametrize("path", [p for p in LIBRARY + TORUS if _axes(p) > 1], ids=lambda p: p.stem)
def test_torus_quotient_agrees_with_the_full_analysis(path):
    sched = ringc.load(path)
    for topo in TORI[len(sched.axes)]:
        for calls in ((1, 2) if topo in ("torus:2x3", "torus:2x2x2") else (1,)):
            fast, full = agree(sched, topo, calls=calls)
            if path.stem in SYMMETRIC_CLEAN:
                assert full is not None and full.ok and fast is not None, f"{path.stem} on {topo} x{calls}"
            if path.stem in ASYMMETRIC:
                assert rotation_unroll(sched, resolve_topology(sched, None, topo).sizes, calls) is None
                assert fast is None
            assert (full is not None and full.ok) == (path.stem in CLEAN), f"{path.stem} on {topo} x{calls}"


@pytest.mark.parametrize("path", [p for p in LIBRARY + BROKEN if _axes(p) == 1], ids=lambda p: p.stem)
def test_one_axis_schedules_along_a_torus_axis(path):
    """A one-axis schedule along one axis of a torus is a ring per row (or column): the
    quotient's report, labels and routes are the full analysis's."""
    sched = ringc.load(path)
    for topo, along in (("torus:2x3", "y"), ("torus:4x4", "x")):
        if not supports(sched, int(topo.split(":")[1].split("x")["xy".index(along)])):
            continue  # a hypercube on a ring of 3
        fast, full = agree(sched, topo, along)
        if path in LIBRARY:  # the quotient answers, unless a route warning asks the full analysis to explain it
            warned = any(f.severity == "warning" for f in full.findings)
            assert full.ok and (fast is not None or warned), f"{path.stem} on {topo} along {along}"


@pytest.mark.parametrize("topo", ["mesh:3x3", "v5e:4x4", "v4:2x2x2"])
def test_no_quotient_without_wraparound(topo):
    """Only wrapped axes are translation symmetric: on a mesh the corner devices' routes
    differ, so the full analysis decides (and reports the missing wraparound)."""
    for name in ("all_gather_2d", "all_gather_3d"):
        path = ROOT / ("schedules" if name == "all_gather_2d" else "tests/torus") / f"{name}.yaml"
        sched = ringc.load(path)
        if len(sched.axes) > len(topo.split(":")[1].split("x")):
            continue
        report = check(sched, topology=topo)
        assert isinstance(report.program, Program)
        assert quotient_report(sched, resolve_topology(sched, None, topo), 1) is None


def test_check_takes_the_torus_quotient():
    sched = ringc.load(ROOT / "schedules" / "all_reduce_2d.yaml")
    report = check(sched, topology="torus:8x8")
    assert report.ok and isinstance(report.program, SymmetricProgram) and len(report.program.representatives.devices) == 1


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in LIBRARY + TORUS if _axes(p) > 1], ids=lambda p: p.stem)
def test_torus_quotient_agrees_on_larger_tori(path):
    sched = ringc.load(path)
    for topo in {2: ("torus:2x5", "torus:5x3", "torus:6x4", "torus:2x8"), 3: ("torus:2x3x2", "torus:3x3x3")}[len(sched.axes)]:
        fast, full = agree(sched, topo)
        if path.stem in SYMMETRIC_CLEAN:
            assert fast is not None and full.ok, f"{path.stem} on {topo}"


# Where the quotient does not apply and the full analysis decides (same verdict): the
# hypercube's partner `me ^ (1 << k)` is no rotation. (The one-shot all-reduce and the
# direct all-to-all send past their neighbours: route warnings, which the quotient reports.)
FULL_ANALYSIS = {"all_gather_hypercube"}


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in LIBRARY + BROKEN if _axes(p) == 1], ids=lambda p: p.stem)
def test_one_axis_schedules_along_larger_tori(path):
    from ringc.testing import supports
    sched = ringc.load(path)
    for topo, along in (("torus:3x5", "y"), ("torus:6x2", "x"), ("torus:2x2x3", "z"), ("torus:3x4", "y")):
        n = {"torus:3x5": 5, "torus:6x2": 6, "torus:2x2x3": 3, "torus:3x4": 4}[topo]
        if not supports(sched, n):  # a hypercube runs on powers of two only
            continue
        for calls in (1, 2):
            fast, full = agree(sched, topo, along, calls)
            if path in LIBRARY:
                assert full.ok, f"{path.stem} on {topo} along {along} x{calls}"
                if path.stem not in FULL_ANALYSIS:
                    assert fast is not None, f"{path.stem} on {topo} along {along} x{calls}: no quotient"


@pytest.mark.parametrize("name, sizes", [("all_reduce_ring", {"i": 5}), ("all_gather_2d", {"x": 3, "y": 4}),
                                         ("all_reduce_2d", {"x": 4, "y": 3})])
def test_rows_as_lists_and_as_numpy_agree(name, sizes, monkeypatch):
    """Small tori keep the order's rows as lists, large ones as numpy arrays: same rows."""
    from ringc.verify.symmetric import order as sym_order
    sched = ringc.load(ROOT / "schedules" / f"{name}.yaml")
    program = rotation_unroll(sched, dict(zip(sched.axes, sizes.values())))
    as_lists = [list(r) for r in sym_order.quotient_order(program).cuts[0]]
    monkeypatch.setattr(sym_order, "SMALL", 0)
    order = sym_order.quotient_order(program)
    assert type(order.cuts[0][0]).__module__ == "numpy"
    assert [list(map(int, r)) for r in order.cuts[0]] == as_lists


# Issue 16: the streamed 2-D and 3-D all-reduces at their default 8 rows are one piece;
# with 16 rows (2 pieces) or 32 rows and chunks=4 they run the software-pipelined program.
PIPELINED = [("all_reduce_2d_bidirectional", topo, params)
             for topo in ("torus:2x2", "torus:2x3", "torus:3x4", "torus:4x4")
             for params in ({"rows": 16}, {"rows": 32, "chunks": 4})] + \
            [("all_reduce_3d_bidirectional", "torus:2x2x2", {"rows": 16}),
             ("all_reduce_3d_bidirectional", "torus:2x3x2", {"rows": 32, "chunks": 4})]


@pytest.mark.parametrize("stem, topo, params", PIPELINED, ids=lambda v: str(v))
def test_pipelined_torus_all_reduce_verifies(stem, topo, params):
    sched = ringc.load(ROOT / "schedules" / f"{stem}.yaml", params=params)
    report = check(sched, None, topology=topo)
    assert report.ok, report.findings


def test_pipelined_2d_all_reduce_needs_four_receive_semaphores_per_phase():
    """Three semaphores in turn let a neighbour's later piece satisfy the wait for an
    earlier one: the verifier finds the race (the header's claim)."""
    text = (ROOT / "schedules" / "all_reduce_2d_bidirectional.yaml").read_text()
    assert text.count("k % 4]") == 20 and text.count("j % 4]") == 8
    racy = ringc.load_text(text.replace("k % 4]", "k % 3]").replace("j % 4]", "j % 3]"), "racy.yaml")
    racy = racy.model_copy(update={"params": {**racy.params, "rows": 32, "chunks": 4}})
    report = check(racy, None, topology="torus:4x4")
    assert not report.ok and any(f.kind == "race" for f in report.findings)
