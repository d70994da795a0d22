"""Must-happen-before over all interleavings, exactly, from the semaphore machine.

Event e = (p, i) must happen before f = (q, j) iff f cannot execute in any run where e
has not executed. Withholding e means stopping device p just before event i. By the
persistence argument in `simulate.py`, the maximal run of that stopped system executes
exactly the events that can happen before e in *some* interleaving. So

    e must-happen-before f  <=>  j >= cut[p][i][q]

where cut[p][i][q] is how far device q gets while p is held before its event i. For each
p the cuts are computed incrementally: hold p at 0, run, release one event, run, ...
Device q's position only changes when p releases a signal or a DMA start, so consecutive
cuts share one tuple. Cost: one incremental pass per device, O(N * events) in time and
O(N * signals) distinct cut tuples in memory.

DMA completion is not an event of the machine (it deposits at start). Whether a DMA's
bytes must all have landed before a wait W is decided by counting, at byte granularity,
in `dma_ends`: with S = the bytes deposited on W's semaphore by starts not forced after
W and D = the cumulative demand of W and the earlier waits on that semaphore, a DMA
that may still have a byte in flight lets W complete iff S - 1 >= D. So every DMA not
forced after W has fully landed before W iff S <= D. This is sound (it can only make
an interval longer than the truth), and exact when the waits' supply is tight, as in
every correctly synchronised schedule.

Rotation symmetry (`symmetry.py`): when device d's semaphore traffic is device 0's with
every owner moved by d, holding device p before event i gives device 0's cuts rotated by
p. One incremental pass then replaces N of them: O(events) instead of O(N * events).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from .events import DmaStart, Event, Program, SemId, SemWait, feeders
from .simulate import Machine
from .symmetry import semaphore_symmetric


@dataclass
class Order:
    program: Program
    cuts: list[list[tuple[int, ...]]]  # cuts[p][i] = positions of all devices while p waits before i
    symmetric: bool = False            # only cuts[0] is stored; device p's are it rotated by p
    torus: Any = None                  # with `symmetric`: the translations (`rotation.Torus`), else a ring

    def before(self, e: Event, f: Event) -> bool:
        """e must happen before f in every interleaving."""
        if e.device == f.device:
            return e.index < f.index
        if self.symmetric:
            rel = self.torus.sub(f.device, e.device) if self.torus is not None else (f.device - e.device) % self.program.n
            return f.index >= self.cuts[0][e.index][rel]
        return f.index >= self.cuts[e.device][e.index][f.device]

    def can_precede(self, f: Event, e: Event) -> bool:
        """f can happen while e has not yet happened."""
        return not self.before(e, f)


def compute_order(program: Program, *, use_symmetry: bool = True) -> Order:
    n = program.n
    symmetric = use_symmetry and semaphore_symmetric(program)
    cuts: list[list[tuple[int, ...]]] = []
    for p in range(1 if symmetric else n):
        total = len(program.devices[p])
        limits = [len(ev) for ev in program.devices]
        limits[p] = 0
        m = Machine(program, limits).run()
        row: list[tuple[int, ...]] = []
        snapshot = tuple(m.pc)
        for i in range(total + 1):
            row.append(snapshot)
            if i == total:
                break
            before = m.pc[p]
            m.release(p, i + 1)
            if m.pc[p] == before:
                # p is blocked before its event i even with everything else running:
                # nothing after it can be released either.
                row.extend([snapshot] * (total - i))
                break
            if tuple(m.pc) != snapshot:
                snapshot = tuple(m.pc)
        cuts.append(row[:total + 1])
    return Order(program, cuts, symmetric)


@dataclass(frozen=True)
class DmaEnds:
    """For each DMA start: the wait after which its source is free (`read_end`) and the
    wait after which its destination is final (`write_end`); None = never guaranteed."""
    read_end: dict[Event, Event | None]
    write_end: dict[Event, Event | None]


def dma_ends(program: Program, order: Order, owners: set[int] | None = None) -> DmaEnds:
    """The DMA intervals, for the semaphores owned by `owners` (default: every device)."""
    deposits = {sem: [e for e in fed if isinstance(e.action, DmaStart)] for sem, fed in feeders(program).items()}
    waits: dict[SemId, list[Event]] = defaultdict(list)
    for events in program.devices:
        for ev in events:
            a = ev.action
            if isinstance(a, SemWait) and program.sem_kinds.get(a.sem[1]) == "dma":
                waits[a.sem].append(ev)

    def first_guaranteeing_wait(sem: SemId) -> dict[Event, Event | None]:
        ends: dict[Event, Event | None] = {d: None for d in deposits[sem]}
        open_deps = list(deposits[sem])
        demand = 0
        for w in waits[sem]:
            demand += w.action.value
            if not open_deps:
                break
            possible = [d for d in deposits[sem] if not order.before(w, d)]
            if sum(d.action.nbytes for d in possible) <= demand:
                for d in possible:
                    if ends[d] is None:
                        ends[d] = w
                open_deps = [d for d in open_deps if ends[d] is None]
        return ends

    read_end: dict[Event, Event | None] = {}
    write_end: dict[Event, Event | None] = {}
    for sem in deposits:
        if owners is not None and sem[0] not in owners:
            continue
        ends = first_guaranteeing_wait(sem)
        for dep, end in ends.items():
            a = dep.action
            if a.send_sem == sem:
                read_end[dep] = end
            if a.recv_sem == sem:
                write_end[dep] = end
                if a.send_sem is None:
                    read_end[dep] = end  # a local copy has one semaphore for both sides
    return DmaEnds(read_end, write_end)
