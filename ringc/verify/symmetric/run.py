"""The run on the quotient: the symmetric back end of the run check (hangs, balance, byte
counts; `core.CHECKS`).

Executing event i on every device at once is a valid interleaving, and the
state stays rotation-symmetric, so device 0 alone, with every deposit it sends to
device t received from device -t by itself, runs exactly as the ring does. The run is
maximal when device 0 blocks (then all do): hangs and exit balance are decided exactly
(`simulate.py`'s persistence argument).
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from itertools import accumulate, chain

from ..events import DmaStart, Event, SemWait, Signal, deposits
from ..order import sums_to
from ..xor import group_of
from .analysis import Key, SymmetricAnalysis, Unclear
from .program import SymmetricProgram

__all__ = ["Feeds", "feeds_of", "check_run", "certify"]


class Feeds:
    """What adds to one semaphore of device 0: per sending device (offset), its events
    and their indices in program order, what each adds and the running totals; and device
    0's waits on it, in program order, with the cumulative demand up to each. Filled by
    `feeds_of`, then read only."""

    def __init__(self) -> None:
        self.events: dict[int, list[Event]] = {}
        self.amount: dict[int, list[int]] = {}
        self.waits: list[int] = []
        self.values: list[int] = []
        self.signals = False  # some feed is a signal, not a DMA
        self.thresholds = False  # some wait does not decrement (Mosaic GPU): the demand is not a sum

    def finish(self) -> None:
        self.index = {k: [ev.index for ev in evs] for k, evs in self.events.items()}
        self.total = {k: [0, *accumulate(v)] for k, v in self.amount.items()}
        self.demand = list(accumulate(self.values))

    def copies(self, waits: bool) -> "Feeds":
        """The DMAs among the feeds (the same lists when there is no signal), with the
        waits or none."""
        out = Feeds()
        if not self.signals:
            out.events, out.amount, out.index, out.total = self.events, self.amount, self.index, self.total
        else:
            for k, evs in self.events.items():
                kept = [(ev, x) for ev, x in zip(evs, self.amount[k]) if type(ev.action) is DmaStart]
                if kept:
                    out.events[k] = [ev for ev, _ in kept]
                    out.amount[k] = [x for _, x in kept]
            out.finish()
        out.waits, out.values, out.demand = (self.waits, self.values, self.demand) if waits else ([], [], [])
        return out

    def available(self, offset: int, limit: int) -> int:
        """How many of `offset`'s feeds come before its event `limit`."""
        return bisect.bisect_left(self.index[offset], limit)

    @property
    def own(self) -> bool:
        """Fed by device 0 alone (a local copy's semaphore, a send side): its waits need no rows."""
        return len(self.index) == 1 and 0 in self.index


def feeds_of(program: SymmetricProgram) -> tuple[dict[Key, Feeds], dict[Key, Feeds]]:
    """Device 0's semaphores' feeds: device 0's deposit into device t's semaphore, rotated
    by -t, is device -t's deposit into device 0's. Every deposit's, and the DMAs' alone,
    in one pass over device 0's events, which also lists each semaphore's waits (the first
    dict has an entry for every semaphore waited on, fed or not; the second, for each one
    a DMA feeds, its waits if it is a DMA semaphore, `order.dma_ends`)."""
    neg = group_of(program).neg
    offsets: dict[int, int] = {}  # owner -> offset of the sender, asked once per owner
    every: defaultdict[Key, Feeds] = defaultdict(Feeds)
    for ev in program.events:
        a = ev.action
        cls = type(a)
        if cls is SemWait:
            fed = every[(a.sem[1], a.sem[2])]
            fed.waits.append(ev.index)
            fed.values.append(a.value)
            fed.thresholds |= not a.decrement
            continue
        if cls is not DmaStart and cls is not Signal:
            continue
        for sem, amount in deposits(a):
            k = offsets.get(sem[0])
            if k is None:
                k = offsets[sem[0]] = neg(sem[0])
            fed = every[(sem[1], sem[2])]
            evs = fed.events.get(k)
            if evs is None:
                evs = fed.events[k] = []
                fed.amount[k] = []
            evs.append(ev)
            fed.amount[k].append(amount)
            if cls is Signal:
                fed.signals = True
    kinds = program.representatives.sem_kinds
    for fed in every.values():
        fed.finish()
    dma = {key: fed.copies(kinds.get(key[0]) == "dma") for key, fed in every.items()
           if any(type(ev.action) is DmaStart for evs in fed.events.values() for ev in evs)}
    return dict(every), dma


def check_run(program: SymmetricProgram, feeds: tuple[dict[Key, Feeds], dict[Key, Feeds]] | None = None) -> None:
    """Device 0 (so every device) runs to the end, every semaphore ends at 0, and every
    DMA wait expects a sum of the sizes of the DMAs on its semaphore (`check.byte_findings`).
    Decided from `feeds_of` (`feeds`, if the caller has them): run alone, device 0 reaches a
    wait with every deposit of its earlier events made (its deposit into device t's
    semaphore is device -t's into its own) and every earlier wait's demand taken, so it
    blocks there iff those deposits fall short of the wait's cumulative demand; it stops at
    the first such wait in program order."""
    every, dma = feeds_of(program) if feeds is None else feeds
    events = program.events
    hang = len(events)
    for fed in every.values():
        supply = [(fed.index[k], fed.total[k]) for k in fed.index]
        for i, demand in zip(fed.waits, fed.demand):
            if i >= hang:
                break
            if sum(total[bisect.bisect_left(index, i)] for index, total in supply) < demand:
                hang = i
                break
    if hang < len(events):
        raise Unclear(f"a hang at line {events[hang].line}")
    for fed in every.values():
        if sum(total[-1] for total in fed.total.values()) != (fed.demand[-1] if fed.demand else 0):
            raise Unclear("a semaphore ends non-zero")
    wrong = len(events)
    kinds = program.representatives.sem_kinds
    for key, fed in dma.items():
        if kinds.get(key[0]) != "dma" or not fed.waits:
            continue
        sizes = Counter(chain.from_iterable(fed.amount.values()))
        fits: dict[int, bool] = {}
        for i, demand, before in zip(fed.waits, fed.demand, [0, *fed.demand]):
            if i >= wrong:
                break
            value = demand - before
            ok = fits.get(value)
            if ok is None:
                ok = fits[value] = sums_to(value, sizes)
            if not ok:
                wrong = i
                break
    if wrong < len(events):
        raise Unclear(f"a byte count mismatch at line {events[wrong].line}")


def certify(a: SymmetricAnalysis) -> bool:
    """The run check's symmetric back end: True when device 0, so every device, runs to the
    end with every semaphore at 0 and every DMA wait a sum of its DMAs' sizes (`Unclear`
    otherwise). Leaves the feeds for the races' back end."""
    a.feeds = feeds_of(a.program)
    check_run(a.program, a.feeds)
    return True
