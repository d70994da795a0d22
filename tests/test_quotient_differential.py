"""The quotient against the full analysis on semantic mutants of the library.

`test_quotient.py` and `test_torus.py` compare the two on the library and on hand-made
corpora. Here hypothesis mutates a library schedule's *meaning*: an index of a region
replaced (by `0`, `me`, a neighbour's slot, the last slot), an index dropped so the
access becomes whole, `me` shifted, a direction reversed. Most mutants are bad input or
wrong, some stay correct; for every valid one, on rings of 2, 3 and 4 (and a 2x3 torus
for two-axis schedules), the quotient must never call clean what the full analysis
rejects, and when it answers its report must be the full analysis's. (It is a guard, not
a proof: run on the code before the gauge of `ringc/verify/gauge.py`, 600 examples did
not hit the whole-copy gap that `test_quotient.py::test_whole_copies_pin_their_steps`
shows by hand.)

`RINGC_DIFF_EXAMPLES` sets the number of examples (default 40; the `slow` test runs 600).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from conftest import without_runtime_data
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import ringc
from ringc.verify.check import check_program, quotient_report, resolve_topology
from ringc.verify.unroll import unroll

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = without_runtime_data(sorted((ROOT / "schedules").glob("*.yaml")))
# Every mutant is checked in full on each size: the streamed 2-D and 3-D all-reduces
# (0.3-0.7 s each) are left to the slow run.
SMALL = [p for p in LIBRARY if p.stem not in ("all_reduce_2d_bidirectional", "all_reduce_3d_bidirectional")]
INDEXES = ["0", "me", "(me + 1) % N", "(me - 1) % N", "N - 1", "(me + 2) % N"]
EXAMPLES = int(os.environ.get("RINGC_DIFF_EXAMPLES", "40"))


def _sites(text: str, buffers: list[str]) -> list[re.Match]:
    """Every indexed access `buf[...]` of the schedule's buffers (no nested brackets)."""
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, buffers)) + r")\[([^\[\]\n]*)\]")
    return list(pattern.finditer(text))


@st.composite
def mutants(draw, paths: list[Path]) -> tuple[str, str]:
    path = draw(st.sampled_from(paths))
    text = path.read_text()
    sched = ringc.load(path)
    sites = _sites(text, list(sched.buffers))
    kind = draw(st.sampled_from(["index", "drop", "shift", "direction"]))
    if kind == "direction":
        dirs = list(re.finditer(r"\bto: (right|left)(_\w+)?\b", text))
        assume(dirs)
        m = draw(st.sampled_from(dirs))
        other = "left" if m.group(1) == "right" else "right"
        return path.stem, text[:m.start(1)] + other + text[m.end(1):]
    assume(sites)
    m = draw(st.sampled_from(sites))
    parts = m.group(2).split(",")
    if kind == "drop":
        new = m.group(1)
    elif kind == "index":
        i = draw(st.integers(0, len(parts) - 1))
        parts[i] = (" " if i else "") + draw(st.sampled_from(INDEXES))
        new = f"{m.group(1)}[{','.join(parts)}]"
    else:
        assume("me" in m.group(2))
        shifted = re.sub(r"\bme\b", "(me + 1)", m.group(2), count=1)
        new = f"{m.group(1)}[{shifted}]"
    return path.stem, text[:m.start()] + new + text[m.end():]


def _agree(stem: str, text: str) -> None:
    try:
        sched = ringc.load_text(text, f"{stem}.yaml")
    except ringc.ScheduleError:
        assume(False)
    tori = {1: ["ring:2", "ring:3", "ring:4"], 2: ["torus:2x3"], 3: ["torus:2x2x2"]}[len(sched.axes)]
    for topo in tori:
        try:
            placement = resolve_topology(sched, None, topo)
            full = check_program(sched, unroll(sched, sizes=placement.sizes), placement)
        except ringc.ScheduleError:
            continue  # bad input at this size (an index past the end): the quotient raises it too
        try:
            fast = quotient_report(sched, placement, 1)
        except ringc.ScheduleError as e:
            pytest.fail(f"{stem} on {topo}: the quotient raised {e} where the full analysis did not")
        if fast is None:
            continue
        assert full.ok, f"{stem} on {topo}: quotient clean, full finds {sorted(full.kinds())}\n{text}"
        assert [f.to_text(full.program) for f in fast.findings] == [f.to_text(full.program) for f in full.findings]


_SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


@settings(max_examples=EXAMPLES, **_SETTINGS)
@given(mutants(SMALL))
def test_quotient_never_calls_clean_what_the_full_analysis_rejects(case):
    _agree(*case)


@pytest.mark.slow
@settings(max_examples=600, **_SETTINGS)
@given(mutants(LIBRARY))
def test_quotient_agrees_on_many_mutants_slow(case):
    _agree(*case)
