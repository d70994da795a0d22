"""The must-happen-before order on the quotient, for the races' symmetric back end.

Must-happen-before is rotation-invariant: (p, i) before (q, j) iff device 0's
event i is before (q - p, j). Row `cut[i][k]` is the first event of device k forced
after device 0's event i. In a finished program an event can only force events of
other devices with a *larger* index (otherwise rotating the ordering around the ring
closes a cycle), so one backward sweep over i computes every row from later ones:
cut[i] = min(cut[i + 1], over the waits (k, w) that i feeds: w and cut[w] rotated by
k). Which feeds force a wait is the counting rule of `order.py` (a feed is necessary
when the other feeds not forced after the wait fall short of its demand), evaluated
with the rows already known; it can only miss orderings, never invent one, so a clean
verdict here is sound. Rows are vectors (`_Rows`), shared between events that feed no
other device: O(N * remote feeds) memory. Only waits and the feeds that force them
change anything, so the sweep visits only those (`quotient_order`).
"""

from __future__ import annotations

import bisect
import heapq
from typing import Any

from ..events import Signal
from ..order import Order
from ..rotation import Torus
from ..xor import group_of
from .analysis import Key, Unclear
from .program import SymmetricProgram
from .run import Feeds, feeds_of

__all__ = ["SMALL", "feeds_before", "numpy_for", "quotient_order"]


def feeds_before(feeds: Feeds, row: Any, index: int) -> dict[int, int]:
    """Per offset, the feeds not forced after device 0's event `index` (whose cut row is
    `row`): own feeds before it, device k's before its event row[k]."""
    return {k: feeds.available(k, index if k == 0 else int(row[k])) for k in feeds.index}


SMALL = 64  # below this many devices, rows are lists: importing numpy would cost more


def numpy_for(n: int) -> Any:
    """numpy on a torus of more than `SMALL` devices, else None."""
    if n <= SMALL:
        return None
    import numpy
    return numpy


class _Rows:
    """The vector operations of the order's rows (one entry per device): numpy arrays, or
    for a small torus plain lists, which give the same values."""

    def __init__(self, torus: Torus):
        self.torus = torus
        self.np = numpy_for(torus.n)
        self.perms: dict[int, list[int]] = {}

    def full(self, value: int) -> Any:
        return self.np.full(self.torus.n, value, dtype=self.np.int32) if self.np else [value] * self.torus.n

    def seen_from(self, row: Any, k: int) -> Any:
        """Device 0's row seen from device k: moved[j] = row[j - k] on the torus (a copy)."""
        t = self.torus
        if self.np is not None:
            if not isinstance(t, Torus):  # XOR: moved[j] = row[j ^ k]
                return row[self.np.arange(t.n) ^ k]
            if len(t.shape) == 1:
                return self.np.roll(row, k)
            return self.np.roll(row.reshape(t.shape), t.coord(k), axis=tuple(range(len(t.shape)))).reshape(-1)
        perm = self.perms.get(k)
        if perm is None:
            perm = self.perms[k] = [t.sub(j, k) for j in range(t.n)]
        return [row[i] for i in perm]

    def minimum(self, a: Any, b: Any) -> Any:
        return self.np.minimum(a, b) if self.np is not None else list(map(min, a, b))

    def lowered(self, cur: Any, edges: list[tuple[Any, int, int]]) -> Any:
        """A new row: `cur` (left as it is) lowered by each edge (row, k, w) to
        `minimum(cur, moved)`, where moved is `seen_from(row, k)` with entry k set to w. On a
        ring of numpy rows: two slice minima per edge into the new row, no rolled copy (the
        same values: moved[j] = row[j - k])."""
        t = self.torus
        np = self.np
        if np is None or not isinstance(t, Torus) or len(t.shape) > 1:
            for row, k, w in edges:
                moved = self.seen_from(row, k)
                moved[k] = w
                cur = self.minimum(cur, moved)  # a new row
            return cur
        n = t.n
        out = np.empty_like(cur)
        for row, k, w in edges:
            keep = min(int(cur[k]), w)
            np.minimum(cur[k:], row[:n - k], out=out[k:])
            np.minimum(cur[:k], row[n - k:], out=out[:k])
            out[k] = keep
            cur = out
        return out


def quotient_order(program: SymmetricProgram, feeds: dict[Key, Feeds] | None = None) -> Order:
    """The rows of the module docstring's backward sweep. Only waits and the events that
    feed another device's waits are visited: a row changes only at an event that forces
    some wait (an edge), and every event between two such shares the later one's row. A
    semaphore fed by device 0 alone (`Feeds.own`) adds no edge, and whether its own feeds
    before a wait meet the demand needs no row: those waits are checked in one pass and
    not visited (the first failure, in the sweep's order, raises where the sweep would).
    `feeds`: `feeds_of(program)[0]`, if the caller has it."""
    events = program.events
    torus = group_of(program)
    length = len(events)
    if feeds is None:
        feeds = feeds_of(program)[0]
    visit: list[tuple[int, int, Feeds | None]] = []  # (wait index, cumulative demand, its feeds)
    unmet = -1  # the last wait fed by device 0 alone that its feeds before it cannot satisfy
    for fed in feeds.values():
        if not fed.waits:
            continue
        if not fed.index:
            visit += [(i, d, None) for i, d in zip(fed.waits, fed.demand)]  # a wait nothing feeds
        elif fed.own:
            index0, total0 = fed.index[0], fed.total[0]
            for i, d in zip(reversed(fed.waits), reversed(fed.demand)):
                if total0[bisect.bisect_left(index0, i)] < d:
                    unmet = max(unmet, i)
                    break
        else:
            visit += [(i, d, fed) for i, d in zip(fed.waits, fed.demand)]
    visit.sort(key=lambda v: v[0], reverse=True)
    neg = torus.neg
    vec = _Rows(torus)
    cur = full = vec.full(length)  # nothing forced after the end
    edges: dict[int, dict[int, int]] = {}  # feed index -> {device offset: first wait it forces}
    pending: list[int] = []  # the edges' feed indices, negated (a heap: the largest first)
    row_of: dict[int, Any] = {}  # wait index -> its row, for the waits an edge names
    changes: list[tuple[int, Any]] = []  # (feed index, the row from it on back), descending

    def apply_edges(above: int) -> None:
        nonlocal cur
        while pending and -pending[0] > above:
            src = -heapq.heappop(pending)
            cur = vec.lowered(cur, [(row_of[w], k, w) for k, w in edges.pop(src).items()])
            changes.append((src, cur))

    for i, demand, fed in visit:
        if unmet > i:
            raise Unclear("a wait the order cannot satisfy")
        apply_edges(i)
        if fed is None:
            raise Unclear("a wait nothing feeds")
        limits = feeds_before(fed, cur, i)
        slack = sum(fed.total[k][c] for k, c in limits.items()) - demand
        if slack < 0:
            raise Unclear("a wait the order cannot satisfy")
        supply = slack + demand  # what the feeds not forced after the wait could add
        for k, count in limits.items():
            if k == 0:
                continue  # program order already
            # The last necessary feed of device k implies its earlier ones. A feed is
            # necessary when the others fall short without it (`amount[j] > slack`), or when
            # it is a signal and the feeds of device k before it, with every other device's,
            # fall short: a signal lands when it runs, so none of device k's later feeds has
            # landed before it (a DMA's may land after later ones: not so for a DMA).
            amount = fed.amount[k]
            j = count - 1
            while j >= 0 and amount[j] <= slack:
                j -= 1
            total = fed.total[k]
            need = demand - (supply - total[count])  # what device k must add itself
            p = bisect.bisect_left(total, need, 0, count + 1) - 1  # the last feed j with total[j] < need
            if fed.thresholds:  # (the demand of a wait that does not decrement is not a running sum)
                p = -1
            while p > j and type(fed.events[k][p].action) is not Signal:
                p -= 1
            j = max(j, p)
            if j < 0:
                continue
            src = fed.index[k][j]
            if src >= i:
                raise Unclear("an ordering against the ring's direction")
            back = neg(k)
            forced = edges.get(src)
            if forced is None:
                forced = edges[src] = {}
                heapq.heappush(pending, -src)
            forced[back] = min(forced.get(back, i), i)
            row_of[i] = cur
    if unmet >= 0:
        raise Unclear("a wait the order cannot satisfy")
    apply_edges(-1)
    # Event e's row is the one made at the first change at or after e (after every change:
    # the full row), so runs of consecutive events share one.
    distinct = [row for _, row in reversed(changes)] + [full]
    bounds = [src for src, _ in reversed(changes)] + [length - 1]
    counts = [bounds[0] + 1] + [b - a for a, b in zip(bounds, bounds[1:])]
    cuts: list[Any] = []
    for row, count in zip(distinct, counts):
        cuts += [row] * count
    return Order(program.representatives, [cuts], symmetric=True, torus=torus, runs=(distinct, counts))
