"""The data flow on the quotient: the symmetric back end of the meaning check.

Device 0's memory is replayed on its own; a remote DMA lands what
device -t sends, device 0's source rotated by -t (device ids and every box). Device
d's output is device 0's rotated by d, and the collective's meaning rotates the same
way (`meaning_rotates`), so device 0's output decides all of them.
"""

from __future__ import annotations

from ...collectives import Buffers, Collective
from ..background import Background
from ..events import DmaStart, Event
from ..rotation import NotRotational
from ..semantics import Memory, apply, mismatches, unwritten_outputs, unwritten_reads
from ..spec import Spec
from ..windows import FusedMemory, Unfused
from .analysis import SymmetricAnalysis, Unclear
from .moves import Rotator, data_steps
from .program import SymmetricProgram

__all__ = ["FORK_EVENTS", "data_flow_right", "fork", "certify"]


def data_flow_right(spec: Spec, program: SymmetricProgram, meaning: "tuple[Collective, Buffers] | None",
                     boxes: Rotator | None = None) -> bool:
    """Device 0's memory replayed, each remote DMA landing what device -t sends, then
    compared with the collective's meaning. `boxes`: a Rotator of the same program whose
    rotated regions are reused (the races ask for the same ones). The gauge's steps only
    move dims accessed whole, and a whole dim stays whole, so a region moves the same
    under either."""
    if meaning is None:   # no meaning to check: device 0 stands for every device's outputs being filled
        events = program.representatives.devices[0]
        return not unwritten_outputs(spec.buffers, events, None) and not unwritten_reads(spec.buffers, events, None)
    collective, buffers = meaning
    steps = data_steps(program, collective, buffers)
    if steps is None:
        return False
    rot = Rotator(program, steps)
    if boxes is not None:
        rot.regions = boxes.regions
    n, events = program.n, program.events

    def fresh(memory: Memory) -> Memory:
        for name, buf in spec.buffers.items():
            if buf.kind == "input":
                memory.init_input(0, name)
        return memory

    def land(ev: Event) -> None:  # what device -t sends lands in device 0
        a: DmaStart = ev.action
        delta = rot.torus.neg(a.dst.device)
        src, dst = rot.region(a.src, delta), rot.region(a.dst, delta)
        mem.move(rot.pieces(a.src.buffer, mem.read(a.src), delta), src, dst)

    mem: Memory | None = None
    if program.representatives.windows:  # pipeline windows fused (`windows.py`); the plain replay where they do not fit
        mem = fresh(FusedMemory(program.shapes, program.representatives.windows))
        try:
            for ev in events:
                mem.step(ev, n, land)
        except Unfused:
            mem = None
    if mem is None:
        mem = fresh(Memory(program.shapes))
        for ev in events:
            apply(mem, ev, n, land)
    return not mismatches(collective, buffers, mem, [0], n, program.shapes)


# Device 0 events from which the data flow runs in a second process (`fork`). Measured on
# a 2-core machine whose timings vary by a third from run to run (best and median of 5,
# `--jobs 1` against 2): at 10,000 events the fork and the pages it copies cost what the
# overlap saves; from 20,000 the best times are within 5% (either way) or up to 12% better,
# and the medians 5-30% better.
FORK_EVENTS = 20_000


def fork(a: SymmetricAnalysis, jobs: int) -> None:
    """With `jobs` > 1, a meaning and at least `FORK_EVENTS` events, start the data flow in
    a forked child (`background.Background`) while this process checks the run, the order
    and the races: the same answer, in about the time of the longer half. The child
    computes its own rotated regions (the serial one reuses the races'); a region rotates
    the same either way."""
    if jobs > 1 and a.meaning is not None and len(a.program.events) >= FORK_EVENTS:
        spec, program, meaning = a.spec, a.program, a.meaning
        a.flow = Background(lambda: _flow_clean(spec, program, meaning))


def certify(a: SymmetricAnalysis) -> bool:
    """The meaning check's symmetric back end: True when device 0's output, so every
    device's, is the collective's meaning (the forked child's answer when `fork` started one)."""
    answer = a.flow.result() if a.flow is not None else None
    return answer if answer is not None else data_flow_right(a.spec, a.program, a.meaning, a.rot)


def _flow_clean(spec: Spec, program: SymmetricProgram, meaning: "tuple[Collective, Buffers] | None") -> bool:
    """The data flow's part of the clean verdict, in the forked child: a quotient that cannot tell is a no."""
    try:
        return data_flow_right(spec, program, meaning)
    except (Unclear, NotRotational):
        return False
