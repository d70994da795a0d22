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
in `dma_ends` (the argument is in its docstring). A DMA semaphore counts bytes, whatever
DMA they come from, so one wait may take the total of several DMAs (a descriptor sized
to the total, used only for its wait) or a part of one: only the counts matter.

Rotation symmetry (`symmetry.py`): when device d's semaphore traffic is device 0's with
every owner moved by d, holding device p before event i gives device 0's cuts rotated by
p. One incremental pass then replaces N of them: O(events) instead of O(N * events).
"""

from __future__ import annotations

from enum import StrEnum

from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Iterable
from functools import lru_cache
from dataclasses import dataclass
from typing import Any

from .events import DMA_KINDS, DmaStart, Event, Program, SemId, SemWait, Signal, feeders
from .simulate import Machine
from .symmetry import semaphore_symmetric

__all__ = ["DmaOrder", "DMA_ORDERS", "Order", "compute_order", "DmaEnds", "dma_ends", "link", "sums_to"]

# The DMA ordering models (`ringc check --dma-order`): what each assumes, as a verdict's
# assumptions line says it. docs/verification.md ("DMA ordering") gives the sources.
class DmaOrder(StrEnum):
    """The DMA ordering models (`--dma-order`): a closed set; each is its own text."""
    ANY = "any"
    IN_ORDER = "in-order"


DMA_ORDERS: dict[DmaOrder, str] = {
    DmaOrder.ANY: ("any order: a DMA's bytes may land in any order, also after the bytes of a DMA started "
            "later on the same link, until a wait on its semaphore covers them (the default, safe model)"),
    DmaOrder.IN_ORDER: ("in order per link (--dma-order in-order): the remote DMAs from one device to another "
                 "land in the order they were started, each side (send, receive) completing in that order; "
                 "DMAs on different links, and local copies, in any order"),
}


def link(ev: Event) -> tuple[int, int] | None:
    """The (source, destination) devices of a remote DMA start, or None (a local copy, or
    not a DMA). The source is the starting device: a copy reads its own device's memory."""
    a = ev.action
    if isinstance(a, DmaStart) and a.remote:
        return (ev.device, a.dst.device)
    return None


def sums_to(value: int, sizes: "Iterable[int] | dict[int, int]") -> bool:
    """Whether some sub-multiset of `sizes` (sizes, or a dict size -> how many) adds up to
    `value` exactly: subset sum over the distinct sizes, each used at most as often as it
    occurs. The sizes on one semaphore are few and the distinct ones fewer (one to three in
    practice), so the search over how many of each size is small; memoized, and cut off at
    100,000 steps, where it answers True (no warning rather than a wrong one)."""
    counts = dict(sizes) if isinstance(sizes, dict) else Counter(sizes)
    if counts.get(value):
        return True
    return _sums_to(value, tuple(sorted(((s, c) for s, c in counts.items() if s > 0), reverse=True)))


@lru_cache(maxsize=4096)
def _sums_to(value: int, items: tuple[tuple[int, int], ...]) -> bool:
    budget = [100_000]
    seen: set[tuple[int, int]] = set()
    left = [sum(s * c for s, c in items[i:]) for i in range(len(items) + 1)]

    def go(i: int, rest: int) -> bool:
        if rest == 0:
            return True
        if i == len(items) or rest > left[i] or (i, rest) in seen:
            return False
        budget[0] -= 1
        if budget[0] < 0:
            return True
        seen.add((i, rest))
        size, count = items[i]
        return any(go(i + 1, rest - k * size) for k in range(min(count, rest // size), -1, -1))

    return go(0, value)


@dataclass
class Order:
    program: Program
    cuts: list[list[tuple[int, ...]]]  # cuts[p][i] = positions of all devices while p waits before i
    symmetric: bool = False            # only cuts[0] is stored; device p's are it rotated by p
    torus: Any = None                  # with `symmetric`: the translations (`rotation.Torus`), else a ring
    # With `symmetric`, from `symmetric.order.quotient_order`: cuts[0] as runs of consecutive events
    # that share one row (the distinct rows in event order, and how many events each covers).
    runs: tuple[list[Any], list[int]] | None = None

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

    # Must-happen-before contains program order and is transitive, so the events of one
    # device that e must happen before are a suffix of its events, and those that must
    # happen before f a prefix: each boundary is a bisection (log of the events), which
    # keeps the DMA intervals and the race candidates of a long loop near linear.

    def first_after(self, e: Event, q: int) -> int:
        """The index of the first event of device q that e must happen before (every later
        one too); the number of q's events when there is none."""
        events = self.program.devices[q]
        return bisect_left(range(len(events)), True, key=lambda j: self.before(e, events[j]))

    def count_before(self, f: Event, q: int) -> int:
        """How many events of device q must happen before f (its first ones)."""
        events = self.program.devices[q]
        return bisect_left(range(len(events)), True, key=lambda j: not self.before(events[j], f))


def compute_order(program: Program, *, use_symmetry: bool = True) -> Order:
    if use_symmetry and program.blocks:
        return block_order(program)
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


_SEM_ACTIONS = (SemWait, Signal, DmaStart)
_NEVER = 1 << 62  # a threshold no position reaches: the process finished while the other was held


class BlockOrder(Order):
    """Must-happen-before for Mosaic GPU programs, one row per class of interchangeable blocks.

    The machine sees only a process's semaphore events (waits, signals, copy starts); what
    it does between them changes no count. Two blocks whose processes make the same
    semaphore events in the same order, each naming its own block's semaphores (`Program.
    block_sems`) where the other names its own, are interchangeable: swapping blocks b and
    b' on every GPU (σ) maps every run to a run. So while a process p of block b is held
    before its k-th semaphore event, process q gets exactly as far as σ(q) does while σ(p)
    is held before its k-th: one incremental pass per process of one block of each class
    (and per launch process) gives every row, as `compute_order`'s passes do for each
    process. When every GPU's processes are GPU 0's with every semaphore's GPU moved by the
    same offset (a ring, a multicast emitted from the sender on), rotating the GPUs (ρ) is
    one more such map, and only GPU 0's processes are held. Positions are compared by
    semaphore events: q stops at a wait, and f is after that wait iff the semaphore events of
    q up to f include it (`upto`).

    A block's processes are its warpgroups on every GPU, and its copy engine: the same block
    index on every GPU is swapped together, since a remote signal reaches the same block on
    the peer. 132 idle blocks of an H100 make one class."""

    def __init__(self, program: Program, rows: dict[int, list[tuple[int, ...]]], rep_of: dict[int, int],
                 swap: dict[int, list[int]], rotate: list[list[int]] | None, upto: list[list[int]],
                 before_sem: list[list[int]]):
        super().__init__(program, [], False)
        self.rows, self.rep_of, self.swap, self.rotate = rows, rep_of, swap, rotate
        self.upto, self.before_sem = upto, before_sem
        self.blocks, self.places = program.blocks, program.places

    def before(self, e: Event, f: Event) -> bool:
        if e.device == f.device:
            return e.index < f.index
        p, q = e.device, f.device
        if self.rotate is not None:  # ρ: GPU 0's process in p's place
            back = self.rotate[self.places[p]]
            p, q = back[p], back[q]
        rep = self.rep_of.get(p, p)
        if rep != p:  # σ: the representative block's process in p's place
            sigma = self.swap[self.blocks[p]]
            p, q = rep, sigma[q]
        row = self.rows[p][self.before_sem[e.device][e.index]]
        pc = row[q]
        upto = self.upto[q]
        threshold = upto[pc] if pc < len(upto) else _NEVER
        return self.upto[f.device][f.index] >= threshold


def _relative(sem: SemId | None, block: int, gpu: int, gpus: int, block_sems: frozenset[str]) -> Any:
    """A semaphore as a process of `block` on `gpu` names it: its own block's as "own", and its
    GPU as an offset from `gpu`."""
    if sem is None:
        return None
    owner, name, idx = sem
    if name in block_sems and idx:
        idx = ("own" if idx[0] == block else ("block", idx[0]), *idx[1:])
    return ((owner - gpu) % gpus, name, idx)


def _names_other_block(sem: Any) -> bool:
    """A relative semaphore (`_relative`) of another block than the process's own."""
    return isinstance(sem, tuple) and bool(sem[2]) and isinstance(sem[2][0], tuple)


def _signature(events: list[Event], block: int, gpu: int, gpus: int, block_sems: frozenset[str]) -> tuple:
    rel = lambda sem: _relative(sem, block, gpu, gpus, block_sems)  # noqa: E731
    out = []
    for ev in events:
        a = ev.action
        if isinstance(a, SemWait):
            out.append(("w", rel(a.sem), a.value, a.decrement))
        elif isinstance(a, Signal):
            out.append(("s", rel(a.sem), a.inc))
        elif isinstance(a, DmaStart):
            out.append(("d", rel(a.recv_sem), rel(a.send_sem), a.nbytes))
    return tuple(out)


def block_order(program: Program) -> BlockOrder:
    """`BlockOrder`: rows for the launch processes and for one block of each class (on GPU 0
    only when the GPUs are one rotation of each other)."""
    n, blocks, names, places, gpus = program.n, program.blocks, program.block_sems, program.places, program.memories
    upto: list[list[int]] = []
    before_sem: list[list[int]] = []
    for events in program.devices:
        u, b, c = [], [], 0
        for ev in events:
            b.append(c)
            if isinstance(ev.action, _SEM_ACTIONS):
                c += 1
            u.append(c)
        b.append(c)
        upto.append(u)
        before_sem.append(b)
    # Each process's place: (GPU, block, its position among that block's processes on that GPU).
    slot: dict[tuple[int, int, int], int] = {}
    seen: dict[tuple[int, int], int] = defaultdict(int)
    where: list[tuple[int, int, int]] = []
    for p in range(n):
        key = (places[p], blocks[p])
        where.append((*key, seen[key]))
        slot[where[-1]] = p
        seen[key] += 1
    sigs = [_signature(program.devices[p], blocks[p], places[p], gpus, names) for p in range(n)]
    foreign = [any(_names_other_block(x) for item in sig for x in item[1:3]) for sig in sigs]
    # ρ: rotating the GPUs, when every process is GPU 0's counterpart moved
    rotate: list[list[int]] | None = []
    for d in range(gpus):
        back = list(range(n))  # GPU d's process -> GPU 0's
        for p in range(n):
            g, blk, j = where[p]
            q = slot.get(((g - d) % gpus, blk, j))
            if q is None or sigs[q] != sigs[p]:
                rotate = None
                break
            back[p] = q
        if rotate is None:
            break
        rotate.append(back)
    members: dict[int, list[int]] = defaultdict(list)
    for p in range(n):
        if blocks[p] >= 0:
            members[blocks[p]].append(p)
    column = {blk: (blk,) if any(foreign[p] for p in procs) else tuple((where[p][0], where[p][2], sigs[p])
                                                                     for p in procs)
              for blk, procs in members.items()}
    classes: dict[tuple, int] = {}
    rep_block = {blk: classes.setdefault(column[blk], blk) for blk in sorted(members)}
    rep_of: dict[int, int] = {}
    swap: dict[int, list[int]] = {}
    for blk, rep in rep_block.items():
        if rep == blk:
            continue
        sigma = list(range(n))
        for p, r in zip(members[blk], members[rep]):
            sigma[p], sigma[r] = r, p
            rep_of[p] = r
        swap[blk] = sigma
    held = [p for p in range(n) if (blocks[p] < 0 or rep_block[blocks[p]] == blocks[p])
            and (rotate is None or places[p] == 0)]
    rows: dict[int, list[tuple[int, ...]]] = {}
    for p in held:
        events = program.devices[p]
        limits = [len(ev) for ev in program.devices]
        limits[p] = 0
        m = Machine(program, limits).run()
        row = [tuple(m.pc)]
        for i, ev in enumerate(events):
            if not isinstance(ev.action, _SEM_ACTIONS):
                continue
            m.release(p, i + 1)
            if m.pc[p] <= i:  # held at a wait it can never pass: nothing after it runs either
                row.extend([row[-1]] * (before_sem[p][-1] - len(row) + 1))
                break
            snap = tuple(m.pc)
            row.append(snap if snap != row[-1] else row[-1])
        rows[p] = row
    return BlockOrder(program, rows, rep_of, swap, rotate, upto, before_sem)


@dataclass(frozen=True)
class DmaEnds:
    """For each DMA start: the wait after which its source is free (`read_end`) and the
    wait after which its destination is final (`write_end`); None = never guaranteed."""
    read_end: dict[Event, Event | None]
    write_end: dict[Event, Event | None]


def dma_ends(program: Program, order: Order, owners: set[int] | None = None, dma_order: str = "any") -> DmaEnds:
    """The DMA intervals, for the semaphores owned by `owners` (default: every device).

    The counting model. A DMA semaphore counts bytes from any DMA that signals it, a DMA's
    bytes arrive one by one after its start, and a wait of v bytes completes once the count
    is at least v and takes v. So which DMAs have fully landed when a wait W completes is
    decided by counts alone. Let W be the k-th wait on semaphore s, D the demand of waits
    1..k on s (all of one device, in program order), P the DMAs on s whose start is not
    forced after W (`Order.before`), S their bytes. For a DMA X in P:

    *X may be in flight when W completes iff S_X - 1 >= D*, where S_X is the most the DMAs
    of P can have delivered while X's last byte is missing. With `dma_order="any"` S_X = S:
    every other DMA of P may have landed. With `"in-order"` the remote DMAs of one link
    (source and destination device, `link`) land in start order, so a DMA of X's link
    started after X has delivered nothing while X is in flight: S_X = S minus their bytes.

    Why: (if) by persistence (`simulate.py`) the run that holds W's device just before W
    executes every start of P at once; let every DMA of P land fully, except X with one
    byte missing and, in order, X's later link-mates with none. The count that reaches s
    is then S_X - 1 >= D, and the waits before W took D - v, so W can complete with X in
    flight. (Only if) when W completes, waits 1..k have taken D bytes, all from DMAs that
    started before W completed, which are in P; with X's last byte missing they supply at
    most S_X - 1 < D. The "if" direction assumes the held run's starts need none of the
    missing bytes: when one does, the count above overstates what can arrive, so X is
    taken as possibly in flight when it is not. That error only makes intervals longer:
    sound (no race is missed), and exact in the common case where the waits are tight.

    So X has landed at W iff S_X <= D, and X's interval ends at the first such wait (a later
    wait of the same device completes after it), or never (it may be in flight until the
    kernel exits). With `"any"` the condition is the same for every X in P: all of P has
    landed or none is known to have. A wait for the total of several DMAs (S = D) ends them
    all; a total short by one DMA (S > D) ends none. Under `"in-order"` S_X <= S, so every
    interval ends no later than under `"any"`: the in-order races are a subset.
    """
    if dma_order not in DMA_ORDERS:
        raise ValueError(f"dma_order must be one of {sorted(DMA_ORDERS)}, not {dma_order!r}")
    in_order = dma_order == "in-order"
    deposits = {sem: [e for e in fed if isinstance(e.action, DmaStart)] for sem, fed in feeders(program).items()}
    waits: dict[SemId, list[Event]] = defaultdict(list)
    for events in program.devices:
        for ev in events:
            a = ev.action
            if isinstance(a, SemWait) and program.sem_kinds.get(a.sem[1]) in DMA_KINDS:
                waits[a.sem].append(ev)

    def first_guaranteeing_wait(sem: SemId) -> dict[Event, Event | None]:
        ends: dict[Event, Event | None] = {d: None for d in deposits[sem]}
        # The DMAs on `sem` in lanes: a lane is one link's (in-order: they land in start
        # order) or one device's local copies, in program order. The DMAs of a device not
        # forced after a wait are a prefix of its DMAs (`Order.first_after`), so of each
        # lane; and those a wait lands are a prefix of each lane's (below), so each lane
        # keeps how many of its DMAs have an end (`done`), and every DMA is ended once.
        lanes: dict[tuple, list[Event]] = defaultdict(list)
        for d in deposits[sem]:
            key = link(d) if in_order else None
            lanes[(d.device, key)].append(d)
        by_device: dict[int, list[tuple[list[int], list[int], list[Event]]]] = defaultdict(list)
        for (device, _), lane in lanes.items():
            lane.sort(key=lambda d: d.index)
            sums = [0]
            for d in lane:
                sums.append(sums[-1] + d.action.nbytes)
            by_device[device].append(([d.index for d in lane], sums, lane))
        done = {id(lane): 0 for lane in lanes.values()}
        open_count = len(ends)
        demand = 0
        for w in waits[sem]:
            # a threshold wait (Mosaic GPU) asks for its value in all; a decrementing one takes it
            demand = demand + w.action.value if w.action.decrement else max(demand, w.action.value)
            if not open_count:
                break
            # P: per lane, how many of its DMAs are not forced after w; S: their bytes.
            possible = []
            for device, rows in by_device.items():
                cut = order.first_after(w, device)
                possible.extend((sums, lane, bisect_left(idx, cut)) for idx, sums, lane in rows)
            supply = sum(sums[m] for sums, _, m in possible)
            for sums, lane, m in possible:
                if m == 0:
                    continue
                if in_order and link(lane[0]) is not None:
                    # S_X for the j-th DMA of a link: the supply without the link's DMAs
                    # after it (sums[m] - sums[j + 1]); S_X <= D holds for a prefix.
                    landed = bisect_right(sums, demand - supply + sums[m], 1, m + 1) - 1
                else:
                    landed = m if supply <= demand else 0
                first = done[id(lane)]
                for d in lane[first:landed]:
                    ends[d] = w
                if landed > first:
                    open_count -= landed - first
                    done[id(lane)] = landed
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
