"""Fluid flows over shared resources, with max-min fair rates (progressive filling).

A resource is anything with a bandwidth that DMAs share: a directed ICI link, or a
chip's memory system. A flow (one DMA's bytes) uses a set of resources, each with a
coefficient (bytes of that resource's capacity per byte moved: 2 for a copy that reads
and writes the same HBM). Rates are the max-min fair allocation: raise every flow's rate
together until some resource is full, freeze the flows through it, continue with the rest
(Bertsekas & Gallager, "Data Networks", 6.5.2). Between changes rates are constant, so
the next completion time is exact.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Hashable

Resource = Hashable

_EPS = 1e-12


class Repeated(list):
    """An entry of a busy-span list (`FluidNetwork.active`) for repetitions timed by their
    period (`FluidNetwork.repeat`): [start, end] of all of them, `count` periods of
    `period` seconds each busy in `pieces` (offsets from the start of each period)."""

    def __init__(self, start: float, pieces: list[tuple[float, float]], period: float, count: int):
        super().__init__([start, start + count * period])
        self.pieces, self.period, self.count = pieces, period, count

    @property
    def busy(self) -> float:
        return self.count * sum(b - a for a, b in self.pieces)


@dataclass(eq=False)
class Flow:
    key: object                           # what the caller tracks (a DMA's event)
    uses: dict[Resource, float]           # resource -> coefficient
    remaining: float                      # bytes still to move
    size: float = 0.0                     # bytes at the start
    rate: float = 0.0                     # bytes/s, set by `FluidNetwork.allocate`
    bottleneck: Resource | None = None    # the resource that froze it in the last allocation
    limited: dict[Resource, float] = field(default_factory=lambda: defaultdict(float))  # seconds per bottleneck


@dataclass
class FluidNetwork:
    capacity: dict[Resource, float]
    now: float = 0.0
    flows: list[Flow] = field(default_factory=list)
    used: dict[Resource, float] = field(default_factory=lambda: defaultdict(float))     # capacity-bytes consumed
    busy: dict[Resource, float] = field(default_factory=lambda: defaultdict(float))     # seconds in use
    active: dict[Resource, list[list[float]]] = field(default_factory=lambda: defaultdict(list))  # [start, end]s

    def advance(self, t: float) -> None:
        """Move every flow on at its current rate until time t."""
        dt = t - self.now
        if dt > 0:
            in_use: set[Resource] = set()
            for f in self.flows:
                moved = min(f.remaining, f.rate * dt)
                f.remaining -= moved
                if f.bottleneck is not None:
                    f.limited[f.bottleneck] += dt
                for r, c in f.uses.items():
                    self.used[r] += moved * c
                    in_use.add(r)
            for r in in_use:
                self.busy[r] += dt
                spans = self.active[r]
                if spans and spans[-1][1] >= self.now and not isinstance(spans[-1], Repeated):
                    spans[-1][1] = t
                else:
                    spans.append([self.now, t])
        self.now = max(self.now, t)

    def accounts(self) -> tuple[float, dict[Resource, float], dict[Resource, float], dict[Resource, int]]:
        """What `repeat` needs of the accounts now: the time, bytes and busy seconds per
        resource, and how many busy spans each has."""
        return self.now, dict(self.used), dict(self.busy), {r: len(spans) for r, spans in self.active.items()}

    def repeat(self, since: tuple, count: int, period: float) -> None:
        """Move on `count` periods of `period` seconds as the last one (from the `accounts`
        taken `since`, a period ago) went: every resource gains `count` times the bytes and
        busy time it gained, and its busy spans in those periods are one `Repeated` entry.
        The flows in flight are the caller's (`cost/steady.py`)."""
        start, used, busy, spans = since
        for r in list(self.used):
            self.used[r] += count * (self.used[r] - used.get(r, 0.0))
        for r in list(self.busy):
            self.busy[r] += count * (self.busy[r] - busy.get(r, 0.0))
        for r, active in self.active.items():
            pieces = []
            for span in active[max(spans.get(r, 0) - 1, 0):]:
                if isinstance(span, Repeated):
                    continue
                a, b = max(span[0], start), min(span[1], self.now)
                if b > a:
                    pieces.append((a - start, b - start))
            if pieces:
                active.append(Repeated(self.now, pieces, period, count))
        self.now += count * period

    def add(self, flow: Flow) -> None:
        for r in flow.uses:
            if r not in self.capacity:
                raise KeyError(f"flow uses unknown resource {r!r}")
        flow.size = flow.size or flow.remaining
        self.flows.append(flow)
        self.allocate()

    def finished(self) -> list[Flow]:
        """Remove and return the flows that have (up to rounding) no bytes left."""
        done = [f for f in self.flows if self._done(f)]
        for f in done:
            if f.remaining > 1e-9 * f.size + _EPS:  # finished by the clock's resolution: its
                for r, c in f.uses.items():          # residue crossed the resources in no time
                    self.used[r] += f.remaining * c
                f.remaining = 0.0
        if done:
            self.flows = [f for f in self.flows if f not in done]
            self.allocate()
        return done

    def _done(self, f: Flow) -> bool:
        """No bytes left up to rounding, or too few to move the clock: the time they need at
        the flow's rate is below the resolution of a float at `now` (else the clock would
        stand still on them, e.g. 4e-8 B at 2.8e12 B/s at 244 us)."""
        return f.remaining <= 1e-9 * f.size + _EPS or (f.rate > 0 and self.now + f.remaining / f.rate <= self.now)

    def allocate(self) -> None:
        """Max-min fair rates by progressive filling."""
        residual = dict(self.capacity)
        active = [f for f in self.flows]
        for f in active:
            f.rate, f.bottleneck = 0.0, None
        while active:
            load: dict[Resource, float] = defaultdict(float)
            for f in active:
                for r, c in f.uses.items():
                    load[r] += c
            # The first resource to fill if every active flow speeds up by the same amount.
            inc, full = min((residual[r] / l, r) for r, l in load.items() if l > 0)
            for f in active:
                f.rate += inc
            for r, l in load.items():
                residual[r] -= inc * l
            saturated = {r for r, l in load.items() if residual[r] <= 1e-9 * self.capacity[r]}
            saturated.add(full)
            still = []
            for f in active:
                hit = next((r for r in f.uses if r in saturated), None)
                if hit is None:
                    still.append(f)
                else:
                    f.bottleneck = hit
            active = still

    def next_completion(self) -> float | None:
        """When the first flow finishes at the current rates (None if nothing moves)."""
        times = [f.remaining / f.rate for f in self.flows if f.rate > 0]
        return self.now + min(times) if times else None
