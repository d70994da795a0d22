"""Steady-state pricing (`ringc/cost/steady.py`): a long pipeline is spelled in a few rows
(`Unroller.fold_pipelines`), timed until its run repeats, and the repetitions between are
skipped by their period. Every test compares it with timing every row (`steady=False`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import ringc
from ringc import limits
from ringc.cost import estimate, hardware
from ringc.cost.sizing import fit_volume
from ringc.cost.steady import REL_TOL, SteadyState, Unfolded
from ringc.ir import schema as S
from ringc.errors import ScheduleError
from ringc.ir.loader import load_text
from ringc.ir.resolve import walk_ops
from ringc.verify.rotation import rotation_unroll
from ringc.verify.unroll import Unroller, foldable

LIB = Path(__file__).resolve().parent.parent / "schedules"
KiB, MiB = 2**10, 2**20


def _folding(path: Path) -> bool:
    sched = ringc.load(path)
    return any(isinstance(op, S.Pipeline) and foldable(sched, op) for op in walk_ops(sched.all_ops))


# the library's schedules with a pipeline that folds (the matmuls, the pipelined reduce-scatter, ...)
FOLDING = [p for p in sorted(LIB.glob("*.yaml")) if _folding(p)]
TOPOLOGIES = ["ring:4", "ring:5", "torus:2x4", "v5p:2x2x2"]
SIZES = [64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 8 * MiB]


def _both(path: Path, topology: str, nbytes: int):
    sched = ringc.load(path)
    try:
        hw = hardware(topology, sched)
    except (ValueError, ScheduleError):
        return None  # its axes do not bind to this topology
    return estimate(sched, hw, nbytes=nbytes), estimate(sched, hw, nbytes=nbytes, steady=False)


def _same(fast, exact, where) -> None:
    assert fast.seconds == pytest.approx(exact.seconds, rel=1e-9), where
    assert fast.efficiency == pytest.approx(exact.efficiency, rel=1e-9), where
    (rf, uf), (re_, ue) = fast.bottleneck, exact.bottleneck
    assert uf == pytest.approx(ue, rel=1e-6), where
    assert fast.machine.link_bytes() == pytest.approx(exact.machine.link_bytes(), rel=1e-9), where
    for k, v in exact.path_summary().items():
        assert fast.path_summary()[k] == pytest.approx(v, rel=1e-6, abs=1e-12), (where, k)
    assert fast.why() == exact.why(), where
    assert fast.vmem == exact.vmem and fast.bound == exact.bound, where


def test_the_library_has_folding_pipelines():
    names = {p.stem for p in FOLDING}
    assert {"all_gather_matmul", "reduce_scatter_pipelined", "all_gather_matmul_t"} <= names


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(FOLDING), topology=st.sampled_from(TOPOLOGIES), nbytes=st.sampled_from(SIZES))
def test_steady_pricing_equals_timing_every_row(path, topology, nbytes):
    both = _both(path, topology, nbytes)
    assume(both is not None)  # (a 2-axis schedule on a ring)
    fast, exact = both
    _same(fast, exact, (path.stem, topology, nbytes))


def test_steady_pricing_skips_and_says_so():
    """At 4 MiB on ring:16 the all-gather matmul's pipelines are 32 rows: some are skipped,
    the estimate says it assumes the steady state, and equals timing every row."""
    fast, exact = _both(LIB / "all_gather_matmul.yaml", "ring:16", 4 * MiB)
    _same(fast, exact, "all_gather_matmul")
    skips = fast.machine.steady.skips
    assert skips and sum(s.events for s in skips) > len(fast.program.devices[0])
    assert fast.machine.executed < exact.machine.executed / 3
    assert any("steady state" in a for a in fast.assumptions) and not any("steady" in a for a in exact.assumptions)
    assert any(st.kind == "steady" for st in fast.critical_path())
    assert "repetitions of" in fast.to_text(path_steps=1000)


def test_a_transfer_in_flight_across_the_skip_moves_on():
    """At 8 MiB on ring:4 the all-gather matmul's ring step (a transfer from before the
    pipeline) is still in flight when the pipeline's rows settle: skipped with it, its
    bytes taken off by the repetitions skipped, and the estimate as timing every row."""
    fast, exact = _both(LIB / "all_gather_matmul.yaml", "ring:4", 8 * MiB)
    assert any(s.drifting for s in fast.machine.steady.skips)
    _same(fast, exact, "all_gather_matmul at 8 MiB")


def test_unfolded_events_are_the_unrolled_ones():
    """Every event of the folded program, read through `Unfolded`, is the full unrolling's
    event at the same place but for where its HBM block is: the same line, inner indices
    (the row it stands for), kind of action, bytes and semaphores."""
    sched = ringc.load(LIB / "all_gather_matmul.yaml")
    sched = fit_volume(sched, {"x": 4}, 1 * MiB)
    full = rotation_unroll(sched, {"x": 4})
    folded = rotation_unroll(sched, {"x": 4}, fold=True)
    assert not full.folds and folded.folds
    events = Unfolded(folded.events, folded.folds)
    assert len(events) == len(full.events) > len(folded.events)

    def shape(ev):
        a = ev.action
        return (ev.line, ev.inner, ev.point, type(a).__name__, getattr(a, "nbytes", None), getattr(a, "sem", None),
                getattr(a, "send_sem", None), getattr(a, "recv_sem", None), getattr(a, "kind", None),
                getattr(getattr(a, "dst", None), "buffer", None), getattr(getattr(a, "dst", None), "shape", None))
    for i, (a, b) in enumerate(zip(events, full.events)):
        assert a.index == i and shape(a) == shape(b), i


def test_the_verifier_never_sees_a_folded_program():
    sched = fit_volume(ringc.load(LIB / "all_gather_matmul.yaml"), {"x": 4}, 1 * MiB)
    assert not rotation_unroll(sched, {"x": 4}).folds


PIPELINE = """
name: p
collective: {{kind: all_gather, input: x, output: out}}
params: {{rows: 128, bm: 8}}
buffers:
  x: {{kind: input, shape: [rows, 128]}}
  out: {{kind: output, slots: N, shape: [rows, 128]}}
  acc: {{kind: vmem_scratch, shape: [bm, 128], dtype: float32}}
grid: {{step: 1}}
body:
  - pipeline: {{i: rows // bm}}
    inputs:
      a: {{ref: x, block: [bm, 128], index: [{index}, 0]}}
    do:
      - {body}
"""


@pytest.mark.parametrize("index, body, folds", [
    ("i", "zero: acc", True),
    ("i // 2", "zero: acc", False),  # two rows share a block: rows differ in what they fetch
    ("i", "when: i == 0\n        do: [zero: acc]", False),  # a row differs from the others
])
def test_only_pipelines_whose_rows_repeat_fold(index, body, folds):
    sched = load_text(PIPELINE.format(index=index, body=body), "p.yaml")
    op = next(op for op in walk_ops(sched.all_ops) if isinstance(op, S.Pipeline))
    assert foldable(sched, op) is folds
    u = Unroller(sched, 2, {"x": 2})
    u.fold_pipelines()
    assert bool(u.folding) is folds


def test_a_pipeline_fed_by_remote_arrivals_does_not_fold():
    sched = ringc.load(LIB / "all_gather_matmul_streamed.yaml")
    ops = [op for op in walk_ops(sched.all_ops) if isinstance(op, S.Pipeline)]
    assert [foldable(sched, op) for op in ops] == [not op.arrivals for op in ops] and any(op.arrivals for op in ops)


def test_a_run_that_never_repeats_is_timed_in_full_and_refused_past_the_limit(monkeypatch):
    """Where the state never repeats, every repetition is timed: with the skip disabled the
    estimate is the same, and past `timed_events` it is refused with the limit's message,
    counted from above as before unrolling."""
    sched = ringc.load(LIB / "all_gather_matmul.yaml")
    hw = hardware("ring:4", sched)
    exact = estimate(sched, hw, nbytes=1 * MiB, steady=False)
    monkeypatch.setattr(SteadyState, "jump", lambda self, *args: None)
    never = estimate(sched, hw, nbytes=1 * MiB)
    assert not never.machine.steady.skips and never.seconds == exact.seconds
    with limits.overridden({"timed_events": never.machine.executed - 1}):
        with pytest.raises(ScheduleError, match=r"the events of device 0 to time .* counted from above, is "
                                                r"[0-9,]+, over the limit `timed_events`"):
            estimate(sched, hw, nbytes=1 * MiB)


def test_a_different_state_is_not_skipped(monkeypatch):
    """The comparison must reject a state that differs: with every state's numbers moved
    by more than the tolerance at each repetition, nothing is skipped."""
    sched = ringc.load(LIB / "all_gather_matmul.yaml")
    hw = hardware("ring:4", sched)
    state = SteadyState.state
    calls = []

    def drifting(self, pc, first):
        discrete, numbers, drift = state(self, pc, first)
        calls.append(pc)
        return discrete, [(v + len(calls) * 1e3 * REL_TOL * (s or 1.0), s) for v, s in numbers], drift
    monkeypatch.setattr(SteadyState, "state", drifting)
    e = estimate(sched, hw, nbytes=1 * MiB)
    assert calls and not e.machine.steady.skips


@pytest.mark.parametrize("path", ["all_gather_matmul", "all_gather_matmul_bidirectional", "all_gather_matmul_t",
                                  "reduce_scatter_pipelined"])
def test_the_matmuls_price_at_256MiB_and_1GiB_without_the_limit(path):
    """The issue's case: refused before (2.9 million events to time on ring:16 at 256 MiB);
    now timed from the same few thousand events at both sizes, most rows skipped, and the
    time scales with the bytes (the rows are 4x as many)."""
    sched = ringc.load(LIB / f"{path}.yaml")
    hw = hardware("ring:16", sched)
    small, big = estimate(sched, hw, nbytes=256 * MiB), estimate(sched, hw, nbytes=1024 * MiB)
    for e in (small, big):
        assert e.machine.executed < limits.value("timed_events") // 50
        assert e.machine.steady.skips and 0 < e.efficiency < 1
    assert big.machine.executed == small.machine.executed
    assert big.seconds == pytest.approx(4 * small.seconds, rel=0.01)
