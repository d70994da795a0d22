"""The exhaustive interleaving explorer (`ringc.verify.explore`) as ground truth for `ringc check`.

- Library schedules at N = 2, 3, 4: the explorer sees no race, no hang and a clean exit,
  and `ringc.check` passes.
- Broken variants made by text replacement, and the `tests/broken/` corpus: the explorer's
  verdicts (race? hang? non-zero exit?) equal the analysis's finding kinds, and the pairs
  of YAML lines it finds racing equal the pairs the analysis reports.
- The partial-order reduction is checked against the unreduced search, and the three DMA
  models against each other.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import without_runtime_data

import ringc
from ringc.testing import supports
from ringc.verify.check import check
from ringc.verify.unroll import unroll
from ringc.verify.explore import ExploreResult, explore

REPO = Path(__file__).parent.parent
SCHEDULES = REPO / "schedules"
BUDGET = 400_000  # states; the library needs at most a few hundred with the default reduction


def library(stem: str) -> str:
    return (SCHEDULES / f"{stem}.yaml").read_text()


# Library (schedule, N) pairs the explorer must finish within BUDGET; others may be skipped.
MUST_COMPLETE = ({("ppermute_right", n) for n in (2, 3, 4)} | {("all_gather_ring", n) for n in (2, 3, 4)}
                 | {("all_reduce_ring", n) for n in (2, 3)}
                 | {("reduce_scatter_bidirectional", n) for n in (2, 3)})


MUST_COMPLETE |= {(stem, n) for stem in ("all_gather_bidirectional", "all_gather_bidirectional_unrolled",
                                          "all_to_all_ring", "all_gather_megacore",
                                          "all_gather_2d", "all_reduce_2d", "reduce_scatter_hierarchical")
                  for n in (2, 3, 4)}


@pytest.mark.parametrize("n", [2, 3, 4])
def test_library_schedule_is_clean_in_every_interleaving(schedule_path, n):
    """On a ring of n devices; a 2-D schedule on a 2 x n torus."""
    sched = ringc.load(schedule_path)
    if not supports(sched, n):
        pytest.skip(f"{sched.name} is defined for powers of two only")
    if len(sched.axes) == 3:  # 2 x 2 x n: too many states to explore; the analysis alone
        assert check(sched, topology=f"torus:2x2x{n}").ok
        return
    if len(sched.axes) == 2:
        res = explore(unroll(sched, sizes={"x": 2, "y": n}), max_states=BUDGET)
        assert res.complete and not (res.races or res.hang or res.nonzero_exit), res.summary()
        assert check(sched, topology=f"torus:2x{n}").ok
        return
    res = explore(unroll(sched, n), max_states=BUDGET)
    if not res.complete:
        assert (schedule_path.stem, n) not in MUST_COMPLETE, f"explorer incomplete: {res.summary()}"
        pytest.skip(f"incomplete within {BUDGET} states")
    assert not res.races, [(a.device, a.line, b.device, b.line) for a, b in res.races[:5]]
    assert not res.hang, res.stuck
    assert not res.nonzero_exit, res.final
    assert res.terminals == 1  # persistence: every maximal run ends in the same state
    assert check(sched, n).ok


# Broken variants: (label, library schedule, old text, new text). The replaced text must occur.
MUTANTS = [
    # races
    ("ag_shared_recv_sem", "all_gather_ring", 'recv_sem: "recv_sems[step]"', 'recv_sem: "recv_sems[0]"'),
    ("ag_wrong_direction", "all_gather_ring", "to: right", "to: left"),
    ("ag_dropped_wait_recv", "all_gather_ring", "  - wait: forward\n", "  - wait_send: forward\n"),
    ("ag_no_own_wait", "all_gather_ring", "      - wait: own\n", ""),
    ("ar_no_capacity_wait", "all_reduce_ring", "  - sem_wait: capacity\n", ""),
    ("ar_over_signal", "all_reduce_ring", "  - signal: capacity\n    to: left\n",
     "  - signal: capacity\n    to: left\n    inc: 2\n"),
    ("ar_dropped_local_wait", "all_reduce_ring", "  - wait: load\n", ""),
    ("ar_read_before_wait", "all_reduce_ring", "  - wait: load\n  - accumulate: out\n    src: receive\n",
     "  - accumulate: out\n    src: receive\n  - wait: load\n"),
    ("ar_no_wait_send", "all_reduce_ring", "  - wait: pass\n", "  - wait_recv: pass\n"),
    ("ar_no_barrier", "all_reduce_ring", "      - barrier: [left, right]\n", ""),
    ("ar_no_initial_wait", "all_reduce_ring", "      - start: initial\n      - wait: initial\n",
     "      - start: initial\n"),
    ("ar_load_on_recv_sem", "all_reduce_ring", "dst: receive, sem: copy_sem", "dst: receive, sem: recv_sem"),
    ("rs_no_load_wait", "reduce_scatter_bidirectional", "  - wait: load\n", ""),
    ("rs_no_store_wait", "reduce_scatter_bidirectional", "  - start: store\n  - wait: store\n",
     "  - start: store\n"),
    ("rs_no_right_wait_send", "reduce_scatter_bidirectional", "      - wait: right_copy\n",
     "      - wait_recv: right_copy\n"),
    ("rs_no_initial_left_wait", "reduce_scatter_bidirectional",
     "      - start: initial_left\n      - wait: initial_left\n", "      - start: initial_left\n"),
    # hangs
    ("ar_no_capacity_signal", "all_reduce_ring", "  - signal: capacity\n    to: left\n", ""),
    ("ar_over_wait", "all_reduce_ring", "  - sem_wait: capacity\n", "  - sem_wait: capacity\n    value: 2\n"),
    ("pp_missing_mod", "ppermute_right", "to: right", "to: me + 1"),
    ("rs_no_prologue_right_signal", "reduce_scatter_bidirectional",
     "      - signal: right_capacity\n        to: left\n      - signal: left_capacity\n",
     "      - signal: left_capacity\n"),
    # neither: other findings only, or none
    ("ar_no_zero", "all_reduce_ring", "      - zero: out\n", ""),
    ("pp_no_wait", "ppermute_right", "  - wait: push\n", ""),
    ("pp_no_wait_recv", "ppermute_right", "  - wait: push\n", "  - wait_send: push\n"),
    ("rs_no_right_capacity_wait", "reduce_scatter_bidirectional",
     "      - sem_wait: right_capacity\n      - start: right_copy\n", "      - start: right_copy\n"),
    ("ag_send_sem_is_recv_sem", "all_gather_ring", 'send_sem: send_sem, recv_sem: "recv_sems[step]"',
     'send_sem: "recv_sems[step]", recv_sem: "recv_sems[step]"'),
]
MUTANT = {label: (base, old, new) for label, base, old, new in MUTANTS}
# Racy variants whose state space at N = 4 is far beyond the budget (millions of states).
TOO_BIG_AT_4 = {"ar_no_capacity_wait", "ar_over_signal", "rs_no_initial_left_wait"}
# Explored in full at N = 3 it takes half a minute: the default suite keeps N = 2, `slow` adds 3.
SLOW_AT_3 = {"rs_no_initial_left_wait"}


def mutant(label: str) -> ringc.Schedule:
    base, old, new = MUTANT[label]
    text = library(base)
    assert old in text, f"{label}: `{old!r}` no longer occurs in {base}.yaml"
    return ringc.load_text(text.replace(old, new, 1), f"{base}[{label}]")


def verdicts(res: ExploreResult) -> dict[str, bool]:
    return {"race": res.race, "hang": res.hang, "exit": res.nonzero_exit and not res.hang}


def analysis_verdicts(kinds: set[str]) -> dict[str, bool]:
    hang = "hang" in kinds
    # Exit balance is only meaningful when the kernel exits (check skips it on a hang).
    return {"race": "race" in kinds, "hang": hang,
            "exit": not hang and bool(kinds & {"unbalanced", "dma_not_waited"})}


def line_pairs_explored(res: ExploreResult) -> set[frozenset[int]]:
    return {frozenset((a.line, b.line)) for a, b in res.races}


def line_pairs_reported(report) -> set[frozenset[int]] | None:
    """The analysis reports one race finding per pair of YAML lines (at most 20)."""
    found = [f for f in report.findings if f.kind == "race"]
    if len(found) >= 20:
        return None
    return {frozenset((f.event.line, *(r.line for r in f.related[:1]))) for f in found}


def assert_agreement(sched: ringc.Schedule, n: int, budget: int = BUDGET, invocations: int = 1) -> None:
    report = check(sched, n, invocations=invocations)
    res = explore(unroll(sched, n, invocations=invocations), max_states=budget)
    reported = line_pairs_reported(report)
    if not res.complete:
        # Whatever the explorer did reach is real: the analysis must report it too.
        assert not res.race or "race" in report.kinds(), res.summary()
        assert not res.hang or "hang" in report.kinds(), res.summary()
        assert reported is None or line_pairs_explored(res) <= reported
        pytest.skip(f"incomplete, agreed on what was reached: {res.summary()}")
    assert verdicts(res) == analysis_verdicts(report.kinds()), (res.summary(), sorted(report.kinds()))
    if reported is not None:  # the same racing ops, not just the same verdict
        assert line_pairs_explored(res) == reported


def _mutant_cases():
    for label, *_ in MUTANTS:
        for n in (2, 3, 4):
            slow = (n == 4 and label in TOO_BIG_AT_4) or (n == 3 and label in SLOW_AT_3)
            marks = [pytest.mark.slow] if slow else []
            yield pytest.param(label, n, marks=marks, id=f"{label}-N{n}")


@pytest.mark.parametrize("label, n", list(_mutant_cases()))
def test_explorer_agrees_with_analysis_on_broken_variants(label, n):
    # The too-big cases only get the one-sided check on what a small budget reaches.
    assert_agreement(mutant(label), n, 100_000 if n == 4 and label in TOO_BIG_AT_4 else BUDGET)


BROKEN = without_runtime_data(sorted((REPO / "tests" / "broken").glob("*.yaml")))
BROKEN = [p for p in BROKEN if p.stem != "expected"]
BROKEN_TOO_BIG_AT_4 = {"all_reduce_no_capacity_wait", "all_reduce_over_signal", "ring_attention_no_credit_wait",
                       "reduce_scatter_wrong_direction"}


def _broken_cases():
    for path in BROKEN:
        for n in (2, 3, 4):
            slow = n == 4 and path.stem in BROKEN_TOO_BIG_AT_4
            yield pytest.param(path, n, marks=[pytest.mark.slow] if slow else [], id=f"{path.stem}-N{n}")


@pytest.mark.parametrize("path, n", list(_broken_cases()))
def test_explorer_agrees_with_analysis_on_broken_corpus(path, n):
    """The same comparison over `tests/broken/` (each a small edit of a library schedule)."""
    try:
        sched = ringc.load(path)
        unroll(sched, n)
    except ringc.ScheduleError as e:
        pytest.skip(f"not a valid schedule at N={n}: {e}")
    assert_agreement(sched, n, 100_000 if n == 4 and path.stem in BROKEN_TOO_BIG_AT_4 else BUDGET)


def test_variants_cover_races_hangs_and_clean_cases():
    """The variant set exercises every verdict, at N = 3 (at least 8 distinct variants)."""
    seen = {"race": 0, "hang": 0, "neither": 0}
    for label, *_ in MUTANTS:
        kinds = check(mutant(label), 3).kinds()
        seen["race" if "race" in kinds else "hang" if "hang" in kinds else "neither"] += 1
    assert len(MUTANTS) >= 8 and seen["race"] >= 8 and seen["hang"] >= 3 and seen["neither"] >= 3, seen


def test_shared_recv_sem_race_needs_the_byte_split():
    """The seed's warning: with one receive semaphore, a fast left neighbour's next DMA fills
    the wait meant for the previous one while that one's last byte is still in flight; the
    device then forwards the slot that is still being written."""
    sched = mutant("ag_shared_recv_sem")
    assert not explore(unroll(sched, 2)).race  # one step: nothing to confuse
    res = explore(unroll(sched, 3))
    assert res.complete and res.race and not res.hang
    lines = {(a.line, b.line) for a, b in res.races}
    fwd = next(ev.line for ev in unroll(sched, 3).devices[0] if getattr(ev.action, "copy", None) == "forward")
    assert (fwd, fwd) in lines  # a forward DMA still writing what the next forward reads


def test_race_pairs_name_the_conflicting_events():
    sched = mutant("ar_read_before_wait")
    res = explore(unroll(sched, 2))
    kinds = {(type(a.action).__name__, type(b.action).__name__) for a, b in res.races}
    assert ("DmaStart", "Compute") in kinds or ("Compute", "DmaStart") in kinds
    for a, b in res.races:
        assert a is not b and (a.device, a.index) < (b.device, b.index)


def test_hang_reports_where_devices_stop():
    res = explore(unroll(mutant("ar_no_capacity_signal"), 3))
    assert res.complete and res.hang and res.stuck
    assert all(type(ev.action).__name__ == "SemWait" and ev.action.sem[1] == "capacity" for ev in res.stuck)


def test_nonzero_exit_reports_final_values():
    res = explore(unroll(mutant("rs_no_right_capacity_wait"), 3))
    assert res.complete and not res.hang and res.nonzero_exit
    assert {name for _, name, _ in res.final} == {"right_capacity"}


def test_budget_exhaustion_is_reported():
    res = explore(unroll(mutant("ar_no_capacity_wait"), 3), max_states=500)
    assert not res.complete and res.states <= 500


# -- the reduction and the DMA models -------------------------------------------------------

SMALL = [("lib", "ppermute_right", 3), ("lib", "all_gather_ring", 3), ("lib", "all_reduce_ring", 2),
         ("ag_shared_recv_sem", None, 3), ("ag_wrong_direction", None, 3), ("ag_dropped_wait_recv", None, 3),
         ("ar_no_capacity_wait", None, 2), ("ar_over_signal", None, 2), ("ar_dropped_local_wait", None, 2),
         ("ar_read_before_wait", None, 2), ("ar_no_wait_send", None, 2), ("ar_no_barrier", None, 2),
         ("ar_no_capacity_signal", None, 2), ("ar_over_wait", None, 3), ("pp_missing_mod", None, 3),
         ("pp_no_wait", None, 3), ("ag_send_sem_is_recv_sem", None, 3)]


def _small_program(label, base, n):
    return unroll(ringc.load_text(library(base), base) if label == "lib" else mutant(label), n)


def _outcome(res: ExploreResult):
    assert res.complete, res.summary()
    return ({(a.device, a.index, b.device, b.index) for a, b in res.races}, res.hang,
            res.nonzero_exit, res.final, [(e.device, e.index) for e in res.stuck])


@pytest.mark.parametrize("model", ["independent", "causal", "coupled"])
@pytest.mark.parametrize("label, base, n", SMALL, ids=[f"{lb if lb != 'lib' else b}-N{n}" for lb, b, n in SMALL])
def test_reduction_finds_exactly_what_the_full_search_finds(label, base, n, model):
    """Same racing pairs, hang, exit values with the partial-order reduction as without."""
    program = _small_program(label, base, n)
    full = explore(program, max_states=300_000, dma_model=model, reduction="none")
    if not full.complete:
        pytest.skip("full search too big")
    want = _outcome(full)
    for reduction in ("local", "withhold"):
        res = explore(program, dma_model=model, reduction=reduction)
        assert _outcome(res) == want, reduction
        assert res.states <= full.states


LARGER = [  # (label, base, N, model, slow): full searches of 5k .. 1.5M states
    ("lib", "all_reduce_ring", 3, "coupled", False),
    ("lib", "reduce_scatter_bidirectional", 2, "independent", False),
    ("ar_no_capacity_wait", None, 3, "coupled", False),
    ("ar_no_wait_send", None, 3, "coupled", False),
    ("rs_no_right_wait_send", None, 2, "independent", False),
    ("lib", "all_reduce_ring", 3, "independent", True),
    ("lib", "all_gather_ring", 4, "independent", True),
    ("ag_wrong_direction", None, 4, "independent", True),
]


@pytest.mark.parametrize("label, base, n, model", [
    pytest.param(*case[:4], marks=[pytest.mark.slow] if case[4] else [],
                 id=f"{case[0] if case[0] != 'lib' else case[1]}-N{case[2]}-{case[3]}") for case in LARGER])
def test_reduction_matches_full_search_on_larger_cases(label, base, n, model):
    program = _small_program(label, base, n)
    full = explore(program, max_states=3_000_000, dma_model=model, reduction="none")
    want = _outcome(full)
    for reduction in ("local", "withhold"):
        assert _outcome(explore(program, max_states=3_000_000, dma_model=model, reduction=reduction)) == want


@pytest.mark.parametrize("schedule", ["all_gather_ring", "all_reduce_ring", "reduce_scatter_bidirectional"])
def test_library_is_clean_without_the_withholding_reduction(schedule):
    """The cheaper `local` reduction (no withholding runs, nothing shared with the analysis's
    ordering idea) reaches the same verdict at N = 3."""
    res = explore(unroll(ringc.load(SCHEDULES / f"{schedule}.yaml"), 3), reduction="local")
    assert res.complete and not res.race and not res.hang and not res.nonzero_exit


def _exits(ev) -> bool:
    return getattr(ev.action, "kind", None) == "exit"


def test_dma_models_are_nested():
    """coupled ⊂ causal ⊂ independent: the analysis assumes no ordering between a DMA's send and
    receive sides beyond the semaphore counts, so only `independent` matches it in general.

    - `ar_no_wait_send` at N = 2: the only path to a device's next write of its `pass` source
      runs through the neighbour's receive wait on that very DMA; the source read is unfinished
      only if its send side may lag behind its receive side (independent model).
    - `ag_shared_recv_sem` at N = 3: the left neighbour starts its next DMA only after its send
      wait; if a send completing means the bytes landed (coupled), no race remains.
    (Races with a device's kernel exit are left out: a send never waited outlives the kernel
    in every model.)"""
    def race(label, n, model):
        res = explore(unroll(mutant(label), n), dma_model=model)
        assert res.complete
        return any(not _exits(a) and not _exits(b) for a, b in res.races)

    assert [race("ar_no_wait_send", 2, m) for m in ("independent", "causal", "coupled")] == [True, False, False]
    assert [race("ag_shared_recv_sem", 3, m) for m in ("independent", "causal", "coupled")] == [True, True, False]
    assert "race" in check(mutant("ar_no_wait_send"), 2).kinds()
    assert "race" in check(mutant("ag_shared_recv_sem"), 3).kinds()


@pytest.mark.parametrize("stem", ["all_reduce_ring", "reduce_scatter_bidirectional"])
def test_back_to_back_invocations_are_clean(stem):
    sched = ringc.load(SCHEDULES / f"{stem}.yaml")
    res = explore(unroll(sched, 3, invocations=2), max_states=BUDGET)
    assert res.complete and not res.race and not res.hang and not res.nonzero_exit
    assert check(sched, 3, invocations=2).ok


def test_bad_arguments():
    program = unroll(ringc.load(SCHEDULES / "ppermute_right.yaml"), 2)
    with pytest.raises(ValueError):
        explore(program, dma_model="magic")
    with pytest.raises(ValueError):
        explore(program, reduction="magic")
