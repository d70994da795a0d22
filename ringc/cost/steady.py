"""Steady-state pricing of long pipelines: time a few iterations, skip the rest by their period.

A nested pipeline over a large array is thousands of identical rows (the all-gather
matmul's 8-row blocks: 2,048 rows per ring step at 256 MiB). The unroller spells such a
pipeline in four or five rows and says that two of them repeat (`Program.folds`,
`Unroller.fold_pipelines`: the rows make the same events but for the HBM blocks, whose
place does not change any time); `Unfolded` reads device 0's events as if every
repetition were spelled, making each event when the timed run first reaches it.

`SteadyState` watches the timed run (`TimedMachine`) at the start of each repetition.
The timed run is deterministic: what happens after that moment is a function of the
machine's state then (the transfers in flight with their bytes left and their resources,
the timed events pending on the heap, the semaphores with their deposits, the device's
clock), of the events still to run, and of nothing else. Written relative to the moment
(times as offsets from `now`, events as offsets from the program counter), the state at
the start of repetition r + 1 equal to the one at the start of repetition r means the
run from r + 1 on is the run from r on moved by P (the time between them) and by one
repetition's events, as long as the events ahead repeat too. So repetitions r + 1 .. r +
s (s = the ones left but the last) take s P, and the machine jumps: the clock, the heap
and the device's clock move on by s P, the program counter by s repetitions, the events
in flight become the ones s repetitions later, and each resource's accounts (bytes,
busy time, busy spans) gain s times what they gained in the repetition before. The
last repetition and whatever follows are timed event by event.

Equal means: the same discrete parts (events, semaphores, resources, kinds) and times and
byte counts equal within a relative 1e-9 (`close`): floats that went through a different
number of additions. One part may differ: a transfer from before the fold still in flight
(the ring step a matmul's pipeline overlaps) has fewer bytes left at each repetition. Its
rate at any moment depends only on which transfers are in flight (max-min fairness), not
on its bytes left, so while the rest repeats it moves the same bytes in every repetition
(checked over two), and the run repeats as long as it does not end: the jump stops two
repetitions short of its end, takes its bytes off, and the repetitions around its end are
timed. Where the state never repeats, every repetition is timed, under the `timed_events`
limit (`model.estimate`).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Sequence

from ..verify.events import Event

if TYPE_CHECKING:
    from .timeline import TimedMachine

DEVICE, INJECT, FLOWS, DEPOSIT = range(4)  # the timed run's heap entries (`timeline.py`)

__all__ = ["Unfolded", "SteadyState", "Skip", "ASSUMPTION", "REL_TOL"]

REL_TOL = 1e-9  # how close two states' times and bytes must be to be one state (`close`)

ASSUMPTION = ("long pipelines priced from their steady state: the timed run repeats (to a relative 1e-9) "
              "from one repetition of identical rows to the next, so the rows between are skipped by its "
              "period (docs/cost-model.md)")


class Unfolded(Sequence[Event]):
    """Device 0's events as if every fold were spelled out (`Program.folds`: events
    [start, end) stand for `times` repetitions). An event past the first repetition, or
    after a fold, is made on first reading, at its own position, and kept (events are
    compared by identity)."""

    def __init__(self, events: list[Event], folds: tuple[tuple[int, int, int, int, int], ...]):
        self.events = events
        # per fold: (logical start, logical end, spelled start, period, outer index's
        # position in `Event.inner`, logical end of its pipeline, rows it adds after it)
        self.folds: list[tuple[int, int, int, int, int, int, int]] = []
        shift = 0
        for start, end, times, depth, stop in folds:
            length = end - start
            self.folds.append((start + shift, start + shift + times * length, start, length, depth,
                               stop + shift + (times - 1) * length, 2 * (times - 1)))
            shift += (times - 1) * length
        self.length = len(events) + shift
        self.starts = [f[0] for f in self.folds]
        self.made: dict[int, Event] = {}

    def __len__(self) -> int:
        return self.length

    def place(self, i: int) -> tuple[int, int, int]:
        """Where logical event i is spelled, its pipeline's outer index's position in
        `Event.inner`, and the rows to add to that index."""
        k = bisect_right(self.starts, i) - 1
        if k < 0:
            return i, 0, 0
        lo, hi, start, length, depth, stop, rows = self.folds[k]
        if i < hi:
            return start + (i - lo) % length, depth, 2 * ((i - lo) // length)
        return start + length + (i - hi), depth, rows if i < stop else 0

    def __getitem__(self, i: int) -> Event:  # type: ignore[override]
        if i < 0:
            i += self.length
        if not 0 <= i < self.length:
            raise IndexError(i)
        if not self.folds or i < self.folds[0][0] + self.folds[0][3]:
            return self.events[i]
        ev = self.made.get(i)
        if ev is None:
            j, depth, rows = self.place(i)
            ev = self.events[j]
            inner = ev.inner
            if rows:  # the row it is in (its name in findings and the critical path)
                name, row = inner[depth]
                inner = (*inner[:depth], (name, row + rows), *inner[depth + 1:])
            ev = self.made[i] = replace(ev, index=i, inner=inner)
        return ev

    def __iter__(self):
        return (self[i] for i in range(self.length))

    def repetition(self, i: int) -> tuple[int, int, int] | None:
        """(fold, repetition, repetitions) when logical event i starts a repetition of a fold."""
        k = bisect_right(self.starts, i) - 1
        if k < 0:
            return None
        lo, hi, _, length = self.folds[k][:4]
        if lo <= i < hi and (i - lo) % length == 0:
            return k, (i - lo) // length, (hi - lo) // length
        return None


@dataclass(frozen=True)
class Skip:
    """Repetitions the timed run jumped: events [first, first + events) from `start` to `end`."""
    first: int
    events: int
    start: float
    end: float
    repetitions: int
    drifting: int = 0  # transfers from before the fold in flight across the jump

    @property
    def period(self) -> float:
        return (self.end - self.start) / self.repetitions


def close(a: float, b: float, scale: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=REL_TOL * scale)


class SteadyState:
    """Watches a timed run of one device (the quotient) at each repetition's start, and
    jumps over the repetitions whose run is the one before moved by a period."""

    def __init__(self, machine: "TimedMachine", events: Unfolded):
        self.m = machine
        self.events = events
        # fold -> the last three repetitions' starts: (repetition, discrete, numbers, drift, now, accounts)
        self.seen: dict[int, list[tuple]] = {}
        self.skips: list[Skip] = []
        self.checked = -1  # the last program counter looked at

    # -- the state, relative to now and to the program counter --------------------------
    def state(self, pc: int, first: int) -> tuple[tuple, list[tuple[float, float | None]], list[tuple[float, float]]]:
        """The discrete part; the numbers with the scale each is compared at (None: a time,
        compared at the period); and the bytes left of each transfer from before the fold
        with its size (`drift`). An event of the fold (from `first` on) is named by its
        offset from `pc`, one before it by itself: it is the same event in the next
        repetition (a transfer still in flight, a deposit no wait has taken yet). When the
        next transfer ends (the heap's `FLOWS` entry) follows from the transfers, so it is
        left out."""
        m = self.m
        now = m.now
        discrete: list[Any] = []
        numbers: list[tuple[float, float | None]] = [(m.clock[0] - now, None)]

        def rel(ev: Event) -> tuple[int, int]:
            return (1, ev.index - pc) if ev.index >= first else (0, ev.index)

        heap = []
        for t, _, kind, payload in m.heap:
            if kind == DEVICE:  # a wake-up, unless superseded
                if m.pending[payload] != t:
                    continue
                key: tuple = (kind, payload)
            elif kind == INJECT:
                key = (kind, rel(payload.event))
            elif kind == FLOWS:
                continue
            else:  # a deposit
                sem, amount, ev = payload
                key = (kind, sem, amount, rel(ev))
            heap.append((key, t - now))
        heap.sort()
        discrete.append(tuple(k for k, _ in heap))
        numbers += [(dt, None) for _, dt in heap]
        flows = sorted(((rel(f.key.event), tuple(sorted(f.uses.items()))), f.remaining, f.rate, f.size)
                       for f in m.net.flows)
        discrete.append(tuple(k for k, *_ in flows))
        drift: list[tuple[float, float]] = []
        for key, remaining, rate, size in flows:
            if key[0][0]:
                numbers.append((remaining, size))
            else:  # a transfer from before the fold moves on from repetition to repetition
                drift.append((remaining, size))
            numbers.append((rate, rate))
        discrete.append(tuple(sorted((s, v) for s, v in m.value.items() if v)))
        discrete.append(tuple(sorted((s, tuple((rel(d.event), d.remaining) for d in q))
                                     for s, q in m.deposits.items() if q)))
        discrete.append(tuple(sorted((s, tuple(w)) for s, w in m.blocked_on.items())))
        return tuple(discrete), numbers, drift

    # -- the hook -----------------------------------------------------------------------
    def at(self, pc: int) -> None:
        """Called when device 0 is about to run event `pc` at `now`."""
        if pc == self.checked:
            return
        self.checked = pc
        where = self.events.repetition(pc)
        if where is None:
            return
        fold, rep, times = where
        m = self.m
        discrete, numbers, drift = self.state(pc, self.events.folds[fold][0])
        seen = self.seen.setdefault(fold, [])
        if seen and seen[-1][0] != rep - 1:
            seen.clear()  # (consecutive repetitions only)
        seen.append((rep, discrete, numbers, drift, m.now, m.net.accounts()))
        del seen[:-3]
        if len(seen) < 2:
            return
        _, discrete0, numbers0, drift0, start, accounts = seen[-2]
        if discrete0 != discrete or len(numbers0) != len(numbers):
            return
        period = m.now - start
        skip = times - 1 - rep  # keep the last repetition: it runs into what follows
        if skip < 1 or period <= 0:
            return
        for (a, _), (b, scale) in zip(numbers0, numbers):
            if not close(a, b, period if scale is None else scale):
                return
        moved: list[float] = []
        if drift:  # transfers from before the fold: the same bytes moved in each of two repetitions
            if len(seen) < 3 or seen[0][1] != discrete:
                return
            for (a, size), (b, _), (c, _) in zip(seen[0][3], drift0, drift):
                if not close(a - b, b - c, size):
                    return
                moved.append(b - c)
                if b - c > 0:  # none may end in the repetitions skipped, nor in the one after
                    skip = min(skip, int(c / (b - c)) - 2)
            if skip < 1:
                return
        self.jump(pc, skip, period, start, accounts, moved)

    def jump(self, pc: int, skip: int, period: float, start: float, accounts: tuple,
             moved_bytes: list[float]) -> None:
        m = self.m
        first, _, _, length = self.events.folds[self.events.repetition(pc)[0]][:4]
        moved = skip * length
        shift = skip * period
        now = m.now
        # the events in flight: the same ones `skip` repetitions later
        renamed: dict[Event, Event] = {}

        def later(ev: Event) -> Event:
            if ev.index < first:  # from before the fold: the same event after the jump
                return ev
            new = renamed.get(ev)
            if new is None:
                new = renamed[ev] = self.events[ev.index + moved]
                if ev in m.begin:
                    m.begin[new] = m.begin[ev] + shift
                if ev in m.end:
                    m.end[new] = m.end[ev] + shift
                dma = m.dmas.pop(ev, None)
                if dma is not None:
                    dma.event = new
                    dma.issued += shift
                    dma.injected += shift
                    m.dmas[new] = dma
            return new

        heap = []
        for t, seq, kind, payload in m.heap:
            if kind == DEVICE and m.pending[payload] != t or kind == FLOWS and payload != m.version:
                continue
            if kind == INJECT:
                later(payload.event)
            elif kind == DEPOSIT:
                sem, amount, ev = payload
                payload = (sem, amount, later(ev))
            heap.append((t + shift, seq, kind, payload))
        outside = sorted((f for f in m.net.flows if f.key.event.index < first),
                         key=lambda f: (f.key.event.index, tuple(sorted(f.uses.items()))))
        for f, gone in zip(outside, moved_bytes):  # (in `state`'s order)
            f.remaining -= skip * gone
        for f in m.net.flows:
            later(f.key.event)
        for q in m.deposits.values():
            for d in q:
                d.event = later(d.event)
        heapq.heapify(heap)
        m.heap = heap
        m.pending = [p + shift if p is not None else None for p in m.pending]
        m.clock = [c + shift for c in m.clock]
        m.now = now + shift
        # each resource gains `skip` times what it gained in the repetition before
        m.net.repeat(accounts, skip, period)
        # the next transfer to end may be one from before the fold, now nearer its end
        m.version += 1
        t = m.net.next_completion()
        if t is not None:
            heapq.heappush(m.heap, (t, next(m.seq), FLOWS, m.version))
        m.pc[0] += moved
        self.skips.append(Skip(pc, moved, now, now + shift, skip, len(outside)))
        self.seen.clear()

    def skipped(self, index: int) -> Skip | None:
        """The skip that jumped over logical event `index`, if any."""
        for s in self.skips:
            if s.first <= index < s.first + s.events:
                return s
        return None
