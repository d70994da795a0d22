"""The symbolic data flow replays only what the reported outputs depend on
(`semantics.check_semantics`, `semantics._slice`): its mismatches must be exactly those of
replaying every event of the run, in order, for every device (the replay written out
here), on broken schedules (racy and not), library schedules, and at several N."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import ringc
from ringc.collectives import Buffers, collective_of
from ringc.verify.semantics import Memory, apply, check_semantics, mismatches
from ringc.verify.simulate import maximal_run
from ringc.verify.unroll import unroll

TESTS = Path(__file__).parent
BROKEN = yaml.safe_load((TESTS / "broken" / "expected.yaml").read_text())
# Wrong results with and without races, a matmul, an accumulate with and without a base.
CASES = sorted(name for name, e in BROKEN.items()
               if "wrong_result" in e["kinds"] and "data" not in e and "topology" not in e)[:12]
LIBRARY = ["all_reduce_ring.yaml", "reduce_scatter_pipelined.yaml", "matmul_reduce_scatter.yaml"]


def _full_replay(sched, program, order) -> list:
    collective, buffers = collective_of(sched), Buffers.of(sched)
    inputs = [name for name, buf in sched.buffers.items() if buf.kind == "input"]
    mem = Memory(program.shapes)
    for d in range(program.n):
        for name in inputs:
            mem.init_input(d, name)
    for ev in order:
        apply(mem, ev, program.n)
    return mismatches(collective, buffers, mem, range(program.n), program.n, program.shapes)


def _sliced(sched, program, order, **kw) -> list:
    inputs = [name for name, buf in sched.buffers.items() if buf.kind == "input"]
    return check_semantics(collective_of(sched), Buffers.of(sched), inputs, program, order, program.shapes, **kw)


@pytest.mark.parametrize("path", [TESTS / "broken" / c for c in CASES] + [TESTS.parent / "schedules" / s for s in LIBRARY],
                         ids=lambda p: p.stem)
@pytest.mark.parametrize("n", [4, pytest.param(8, marks=pytest.mark.slow)])
def test_sliced_data_flow_equals_the_full_replay(path, n):
    sched = ringc.load(str(path))
    program = unroll(sched, sizes={sched.axes[0]: n})
    m = maximal_run(program)
    if not m.finished():
        pytest.skip("hangs: no data flow")
    want = _full_replay(sched, program, m.order)
    assert _sliced(sched, program, m.order) == want
    assert _sliced(sched, program, m.order, limit=2) == want[:2]
    if path.parent.name == "broken":
        assert want, "a broken case the data flow calls right: the comparison would prove nothing"
