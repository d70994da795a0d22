"""The data flow in a second process (`background.py`, `quotient.clean` with jobs > 1):
the same verdict as one process, a failed or dead child falls back to the parent, and no
child outlives the check."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest
from conftest import without_runtime_data

import ringc
from ringc.errors import ScheduleError
from ringc.verify.symmetric import certify, flow
from ringc.verify.background import Background, default_jobs
from ringc.verify.check import meaning_of
from ringc.verify.rotation import rotation_unroll

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
ROOT = Path(__file__).resolve().parent.parent


def _reaped(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_answers_come_back():
    assert Background(lambda: True).result() is True
    assert Background(lambda: False).result() is False
    big = {i: (i, str(i)) for i in range(100_000)}   # megabytes: more than a pipe holds at once
    assert Background(lambda: big).result() == big


def _synth_in_two_processes_as_in_one(setup: str = "", two: str = "") -> None:
    """Run `ringc synth` (psum_scatter on torus:4x4 at 64 KiB and 256 MiB, no check) with one
    process and with two (`two` set up for it, after `setup`) in a fresh interpreter: a
    test process that has loaded jax must not fork. Both give the same estimates."""
    import subprocess
    import sys
    code = f"""
import json, os, sys
from ringc.synth import search
{setup}
out = []
for jobs in (1, 2):
    search.default_jobs = lambda: jobs
    if jobs == 2:
{textwrap.indent(two or "pass", "        ")}
    r = search.synth("psum_scatter", "torus:4x4", [64 * 2**10, 256 * 2**20], compile=False, verify=False)
    out.append(json.dumps([[p.candidate.name, sorted((str(k), v) for k, v in p.points.items()),
                            sorted(p.problems.items())] for p in r.priced], default=str))
assert "jax" not in sys.modules
print(out[0] == out[1], len(json.loads(out[0])))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert res.returncode == 0, res.stderr[-2000:]
    same, n = res.stdout.split()
    assert same == "True" and int(n) >= 5


def test_synth_prices_the_same_with_half_its_candidates_in_a_child():
    """`ringc synth` prices its candidates in this process and a forked child where a second
    core is free, each taking the next one not taken; the estimates, winners and frontier
    are the ones one process gives."""
    _synth_in_two_processes_as_in_one()


def test_synth_prices_here_what_a_failing_child_took():
    """A child that fails after taking candidates (here: on its second) answers nothing, and
    every candidate it took is priced in the parent: the same estimates as one process."""
    _synth_in_two_processes_as_in_one(setup="""
parent, price, seen = os.getpid(), search._price, []
def failing(p, hw, sizes):
    if os.getpid() != parent:
        seen.append(p)
        if len(seen) == 2:
            raise RuntimeError("the child fails")
    price(p, hw, sizes)
""", two="search._price = failing")


def test_a_failing_or_dead_child_answers_nothing():
    """The parent then computes the answer itself and raises what the child raised."""
    def boom() -> bool:
        raise ValueError("computed again in the parent")
    assert Background(boom).result() is None
    assert Background(lambda: os._exit(3)).result() is None


def test_close_kills_and_reaps():
    flow = Background(lambda: time.sleep(60) or True)
    pid = flow.pid
    start = time.monotonic()
    flow.close()
    assert time.monotonic() - start < 10 and _reaped(pid)
    assert flow.result() is None  # closed: nothing to read


def test_default_jobs_is_one_with_jax_loaded(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "jax", sys.modules.get("jax") or object())
    assert default_jobs() == 1


CASES = [p for p in without_runtime_data([q for d in ("schedules", "tests/broken", "tests/mutants")
                                          for q in sorted((ROOT / d).glob("*.yaml"))])
         if p.name != "expected.yaml" and len(ringc.load(p).axes) == 1]


def test_two_processes_give_one_process_verdict(monkeypatch):
    """Every one-axis library schedule, broken case and mutant at N = 4: `clean` with
    the data flow forked (FORK_EVENTS lowered so small programs fork too) says what it says
    in one process. The broken cases include schedules whose only fault is the data (a
    wrong block, a missing reduction), so a child whose answer were lost or always yes
    would disagree."""
    monkeypatch.setattr(flow, "FORK_EVENTS", 0)
    flows = []
    real = flow.Background

    def counted(compute):
        flows.append(compute)
        return real(compute)
    monkeypatch.setattr(flow, "Background", counted)
    verdicts, data_only = 0, 0
    for path in CASES:
        sched = ringc.load(path)
        for n in (4,):  # (N = 4 has 11 cases whose only fault is the data)
            try:
                program = rotation_unroll(sched, {sched.axes[0]: n})
            except ScheduleError:  # a size the schedule refuses
                continue
            if program is None:
                continue
            meaning = meaning_of(sched)
            one = certify.clean(sched, program, meaning, jobs=1)
            two = certify.clean(sched, program, meaning, jobs=2)
            assert one == two, (path.name, n)
            verdicts += 1
            if not one and certify.clean(sched, program, meaning=None, jobs=1):
                data_only += 1  # clean but for the data flow
    assert verdicts >= 80 and data_only >= 8 and len(flows) >= verdicts, (verdicts, data_only, len(flows))
