"""Pipelines fed by remote copies (issue 14, section 5): a pipeline input block that
`arrives:` by a remote copy is waited for before the pipeline fetches it.

The library schedule (schedules/all_gather_matmul_streamed.yaml) and its broken variants
(tests/broken/all_gather_matmul_streamed_*.yaml) are checked, emitted, run and round-tripped
by the suites that take every library and broken schedule; these are the cases around them.
"""

from __future__ import annotations

import pytest
from conftest import REPO

import ringc
from ringc.ir.loader import load_text
from ringc.pallas import check_module
from ringc.run import run_schedule
from ringc.verify.unroll import unroll

AGMS = (REPO / "schedules" / "all_gather_matmul_streamed.yaml").read_text()

# A ppermute whose only pipeline block is the whole landing buffer: Pallas copies such a
# block once, synchronously, before the pipeline's loop (not through `copy_in`), so the
# emitted kernel waits for its arrival before running the pipeline at all.
WHOLE = """\
name: ppermute_fed_whole
collective: ppermute
params: {rows: 8, cols: 128}
buffers:
  x:       {kind: input,  shape: [rows, cols]}
  out:     {kind: output, shape: [rows, cols]}
  landing: {kind: hbm_scratch, shape: [rows, cols]}
semaphores: {send_sem: dma, recv_sem: dma}
barrier: {collective_id: 0}
grid: {step: 1}
copies:
  push: {src: x, dst: landing, to: right, send_sem: send_sem, recv_sem: recv_sem}
body:
  - barrier: [left, right]
  - start: push
  - pipeline: {i: 1}
    inputs:
      a: {ref: landing, block: [rows, cols], index: [0, 0], arrives: push}
    outputs:
      o: {ref: out, block: [rows, cols], index: [0, 0]}
    do:
      - assign: o
        src: a
  - wait_send: push
"""


def test_a_whole_region_block_waits_for_its_arrival_before_the_pipeline(tmp_path):
    sched = load_text(WHOLE, "whole.yaml")
    assert all(ringc.check(sched, n).ok for n in (2, 3, 4))
    text = ringc.emit(sched)
    assert "arrivals=[_a_arrives]," in text and "_push().wait_recv()" in text
    result = run_schedule(sched, 2, seed=1)
    assert result.races_found is False and result.ok, result
    module = tmp_path / "whole.py"
    module.write_text(text)
    assert check_module(str(module), 3).ok
    # Without the arrival, the fetch reads the landing buffer while the copy writes it.
    late = load_text(WHOLE.replace(", arrives: push}", "}").replace("  - wait_send: push", "  - wait: push"),
                     "late.yaml")
    assert "race" in ringc.check(late, 3).kinds()


def test_a_chunk_waited_for_at_every_fetch_of_its_blocks_hangs():
    """Two column blocks (cols = 2 bn): each chunk's first k block is fetched once per j.
    Waiting at every `k == 0` waits twice for one arrival: the verifier reports the hang
    the kernel would have (the guard `j == 0 and k == 0` waits once)."""
    wide = {"cols": 256}
    assert ringc.check(load_text(AGMS, "agms.yaml", params=wide), 3).ok
    twice = load_text(AGMS.replace("when: j == 0 and k == 0}", "when: k == 0}"), "twice.yaml", params=wide)
    assert ringc.check(twice, 3).kinds() >= {"hang"}


@pytest.mark.parametrize("n", [2, 5])
def test_the_arrival_waits_are_the_only_receive_waits(n):
    """Every block's arrival is waited for by the pipeline itself: the unrolled program's
    receive waits are exactly one per chunk and received slot, each at an `arrives:` line."""
    sched = ringc.load(REPO / "schedules" / "all_gather_matmul_streamed.yaml")
    program = unroll(sched, n)
    lines = {i for i, line in enumerate(AGMS.splitlines(), 1) if line.strip().startswith("arrives:")}
    assert len(lines) == 2  # step 1's pipeline (send_own's chunks) and the later steps' (forward's)
    waits = [ev for ev in program.devices[0] if getattr(ev.action, "why", None) == "wait_recv"]
    chunks = sched.params["rows"] // sched.params["bm"]
    assert len(waits) == chunks * (n - 1)
    assert {ev.line for ev in waits} == (lines if n > 2 else {min(lines)})
