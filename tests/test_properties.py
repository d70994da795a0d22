"""Properties over device counts and over mutants of the library schedules."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import pytest
from conftest import without_runtime_data
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

import ringc
from ringc import topology as T
from ringc.ir import ScheduleError, load_text
from ringc.testing import check_sized, supported_size, topology_for
from ringc.verify.symmetric.program import SymmetricProgram

REPO = Path(__file__).resolve().parent.parent
LIBRARY = without_runtime_data(sorted((REPO / "schedules").glob("*.yaml")))
IDS = [p.stem for p in LIBRARY]


@lru_cache(maxsize=None)
def _load(path: Path):
    return ringc.load(path)


def assert_verified(path: Path, n: int) -> None:
    """On a ring of n devices, or for a multi-axis schedule a torus of about n (`topology_for`)."""
    sched = _load(path)
    report = check_sized(sched, n)
    errors = [f for f in report.findings if f.severity == "error"]
    assert report.ok and not errors, report.to_text()
    size = supported_size(sched, n) if len(sched.axes) == 1 else T.parse(topology_for(sched, n)).size
    assert report.program.n == size and all(len(events) > 0 for events in _held(report).devices)


def _held(report):
    """The events the report's program holds: device 0's alone for a clean quotient."""
    p = report.program
    return p.representatives if isinstance(p, SymmetricProgram) else p


# ------------------------------------------------------ library over device counts


@pytest.mark.parametrize("path", LIBRARY, ids=IDS)
@settings(max_examples=12, deadline=None)
@given(n=st.integers(2, 24))
def test_library_verifies_for_any_n(path, n):
    # The 2-D and 3-D bandwidth schedules take 5-10 s to check at 24 devices: up to 12 here,
    # up to 64 under slow.
    assume(path.stem not in MANY_STREAMS or n <= 12)
    assert_verified(path, n)


MANY_STREAMS = {"all_reduce_2d_bidirectional", "all_reduce_3d_bidirectional"}


@pytest.mark.slow
@pytest.mark.parametrize("path", LIBRARY, ids=IDS)
@settings(max_examples=12, deadline=None)
@given(n=st.integers(2, 64))
@example(n=2)
@example(n=3)
@example(n=7)
@example(n=8)
@example(n=64)
def test_library_verifies_for_any_n_up_to_64(path, n):
    assert_verified(path, n)


@pytest.mark.slow
@pytest.mark.parametrize("n", range(2, 65))
@pytest.mark.parametrize("path", LIBRARY, ids=IDS)
def test_library_verifies_for_every_n_up_to_64(path, n):
    assert_verified(path, n)


# ------------------------------------------------------- deleting one sync op

SYNC_OPS = ("wait", "wait_send", "wait_recv", "sem_wait", "signal")
_OP = re.compile(r"^(?P<indent>\s*)- (?P<key>\w+):")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def sync_op_deletions(text: str) -> list[tuple[int, int, str]]:
    """(first line, end line, description) of every wait/sem_wait/signal op, as a line
    range to delete (0-based, end exclusive). An op that is alone in a `when`'s `do:`
    takes its `when` block with it, so the result still loads."""
    lines = text.splitlines(keepends=True)

    def block_end(i: int) -> int:
        inner = _indent(lines[i]) + 2  # the op's keys are indented past its `- `
        j = i + 1
        while j < len(lines) and lines[j].strip() and _indent(lines[j]) >= inner \
                and not (lines[j].lstrip().startswith("- ") and _indent(lines[j]) == _indent(lines[i])):
            j += 1
        return j

    out = []
    for i, line in enumerate(lines):
        m = _OP.match(line)
        if not m or m["key"] not in SYNC_OPS:
            continue
        start, end = i, block_end(i)
        siblings = [k for k in range(i - 1, -1, -1) if lines[k].strip()]
        prev = lines[siblings[0]] if siblings else ""
        alone = prev.strip() == "do:" and not (end < len(lines) and _indent(lines[end]) == _indent(line)
                                               and lines[end].lstrip().startswith("- "))
        if alone:
            when = next(k for k in range(i - 1, -1, -1) if lines[k].lstrip().startswith("- when:"))
            start, end = when, block_end(when)
        out.append((start, end, f"line {i + 1}: {line.strip()}"))
    return out


def delete(text: str, start: int, end: int) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines[:start] + lines[end:])


SUBJECTS = ["all_reduce_ring", "reduce_scatter_bidirectional", "all_gather_ring", "ppermute_right",
            "all_gather_bidirectional", "all_to_all_ring", "all_gather_2d", "all_reduce_2d", "all_gather_megacore"]
TEXTS = {name: (REPO / "schedules" / f"{name}.yaml").read_text() for name in SUBJECTS}
DELETIONS = [(name, d) for name in SUBJECTS for d in sync_op_deletions(TEXTS[name])]


def test_deletions_cover_every_sync_op():
    for name in SUBJECTS:
        text = TEXTS[name]
        count = sum(1 for line in text.splitlines() if (m := _OP.match(line)) and m["key"] in SYNC_OPS)
        assert len([d for n, d in DELETIONS if n == name]) == count > 0
    # every deletion removes one op and leaves a schedule that still loads
    for name, (start, end, what) in DELETIONS:
        mutated = delete(TEXTS[name], start, end)
        sched = load_text(mutated, f"{name}[-{what}]")
        assert sched.name == name
        assert mutated.count("\n") < TEXTS[name].count("\n")


def _events(report) -> int:
    p = _held(report)
    return sum(len(events) for events in p.devices + p.second_core)


def _assert_deletion_rejected(name: str, deletion: tuple[int, int, str], n: int) -> None:
    start, end, what = deletion
    sched = load_text(delete(TEXTS[name], start, end), f"{name}[-{what}]")
    try:
        report = check_sized(sched, n)  # a torus of about n devices for the 2-D schedules
    except ScheduleError:  # rejected as bad input: also not accepted
        return
    if _events(report) == _events(check_sized(_load(REPO / "schedules" / f"{name}.yaml"), n)):
        return  # the op never runs at this N (e.g. all_to_all_ring's handshake at N = 2)
    assert not report.ok, f"deleting {what} from {name} is accepted at N={n}"
    assert any(f.severity == "error" for f in report.findings)


@settings(max_examples=25, deadline=None)
@given(case=st.sampled_from([c for c in DELETIONS if c[0] in SUBJECTS[:2]]), n=st.integers(2, 6))
def test_deleting_a_wait_or_signal_is_caught(case, n):
    _assert_deletion_rejected(case[0], case[1], n)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("case", DELETIONS, ids=[f"{n}:{d[2]}" for n, d in DELETIONS])
def test_every_wait_or_signal_deletion_is_caught(case, n):
    _assert_deletion_rejected(case[0], case[1], n)
