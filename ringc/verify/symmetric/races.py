"""Races on the quotient: the symmetric back end of the race check.

Only device 0's memory is checked (`symmetry.memory_symmetric`): its own
accesses, and the DMAs of devices -t that land in it, which are device 0's own remote
DMAs rotated by -t. Each ends at an event of device 0, so on device 0's program order,
with a start of device k placed after the events that must precede it, only accesses
whose spans meet can race (`_concurrent_pairs`).
"""

from __future__ import annotations

import bisect
from itertools import accumulate, chain
from typing import Any

from ..events import DmaStart, Event, Region
from ..order import Order
from ..races import Access, event_accesses, race
from ..xor import group_of
from .analysis import Key, SymmetricAnalysis
from .moves import Rotator
from .order import feeds_before, numpy_for, quotient_order
from .program import SymmetricProgram
from .run import Feeds, feeds_of

__all__ = ["ENDS", "OVERLAPS", "PAIRS", "quotient_ends", "race_free", "certify"]


def quotient_ends(program: SymmetricProgram, order: Order, feeds: dict[Key, Feeds] | None = None) -> tuple[list, list]:
    """`order.dma_ends` for device 0's semaphores, with prefix sums: a feed's interval
    ends at the first wait whose possible supply (feeds not forced after it) is no more
    than its cumulative demand. Per event index of device 0's DMA starts: the index of the
    wait that ends its source's interval (the read side), and its destination's (the write
    side) in the device it lands in, which for a remote DMA is its copy rotated into device
    0 (`_incoming`): one receive side per DMA, so one entry each. None: never (or no DMA).
    A semaphore fed by device 0 alone needs no rows: its feeds before a wait are those
    with a smaller index, and once all have ended no later wait changes anything.
    `feeds`: `feeds_of(program)[1]`, if the caller has it."""
    if feeds is None:
        feeds = feeds_of(program)[1]
    neg = group_of(program).neg
    offsets: dict[int, int] = {}
    row = order.cuts[0]
    length = len(program.events)
    read_end: list[int | None] = [None] * length
    write_end: list[int | None] = [None] * length
    np = numpy_for(order.torus.n)
    line = _Line(order)
    for key, fed in feeds.items():
        ends = {k: [None] * len(ix) for k, ix in fed.index.items()}  # per offset, per feed
        if np is not None and len(fed.waits) > ENDS:
            ends = _numpy_ends(np, fed, line)
        elif fed.own:
            index0, total0, ends0 = fed.index[0], fed.total[0], ends[0]
            done, last = 0, len(index0)
            for w, demand in zip(fed.waits, fed.demand):
                c = bisect.bisect_left(index0, w)
                if c > done and total0[c] <= demand:
                    ends0[done:c] = [w] * (c - done)
                    done = c
                    if done == last:
                        break
        else:
            done_k = dict.fromkeys(fed.index, 0)
            for w, demand in zip(fed.waits, fed.demand):
                limits = feeds_before(fed, row[w], w)
                if sum(fed.total[k][c] for k, c in limits.items()) <= demand:
                    for k, c in limits.items():
                        if c > done_k[k]:
                            ends[k][done_k[k]:c] = [w] * (c - done_k[k])
                            done_k[k] = c
        name, index = key
        for k, evs in fed.events.items():
            for ev, end in zip(evs, ends[k]):
                a: DmaStart = ev.action
                send, recv = a.send_sem, a.recv_sem
                if send is None:  # a local copy: fed to its one semaphore, by device 0
                    read_end[ev.index] = write_end[ev.index] = end
                    continue
                if k == 0 and send[1] == name and send[2] == index:
                    read_end[ev.index] = end
                if recv[1] == name and recv[2] == index:
                    back = offsets.get(recv[0])
                    if back is None:
                        back = offsets[recv[0]] = neg(recv[0])
                    if back == k:
                        write_end[ev.index] = end
    return read_end, write_end


ENDS = 64  # a semaphore with more waits than this has its DMA ends found with numpy (a large torus)


def _numpy_ends(np: Any, fed: Feeds, line: _Line) -> dict[int, list[int | None]]:
    """`quotient_ends` of one semaphore with numpy: per offset k, where each wait's limit falls
    among k's feeds (the rows' entry k, from `line`; for device 0 the wait itself), so
    which waits end what they can supply ("ok"). The loop ends the feeds [done, c) at each
    ok wait whose limit c is past `done`, and c only grows from wait to wait (rows are
    monotone), so feed j ends at the first ok wait whose limit is past j."""
    waits = np.array(fed.waits, dtype=np.int64)
    supply = np.zeros(len(waits), dtype=np.int64)
    limits = {}
    for k, index in fed.index.items():
        at = waits if k == 0 else line.entries(np, k, waits)
        limits[k] = np.searchsorted(np.array(index, dtype=np.int64), at, side="left")
        supply += np.array(fed.total[k], dtype=np.int64)[limits[k]]
    ok = supply <= np.array(fed.demand, dtype=np.int64)
    ending = waits[ok]
    out = {}
    for k, c in limits.items():
        first = np.searchsorted(c[ok], np.arange(len(fed.index[k])), side="right")
        out[k] = [None if f == len(ending) else w for f, w in
                  zip(first.tolist(), ending[np.minimum(first, len(ending) - 1)].tolist() if len(ending) else first.tolist())]
    return out


def _incoming(program: SymmetricProgram, rot: Rotator) -> list[tuple[Event, int, Region, Region]]:
    """The remote DMAs that land in device 0: each of device 0's, with minus its offset
    (the device that starts it) and its regions rotated by that."""
    out = []
    neg = rot.torus.neg
    for ev in program.events:
        a = ev.action
        if type(a) is DmaStart and a.send_sem is not None:
            delta = neg(a.dst.device)
            out.append((ev, delta, rot.region(a.src, delta), rot.region(a.dst, delta)))
    return out


def _moved(ev: Event, delta: int, src: Region, dst: Region) -> Event:
    """An incoming DMA (`_incoming`) as the event of the device that starts it."""
    a: DmaStart = ev.action
    moved = DmaStart(a.copy, src, dst, (delta, *a.send_sem[1:]), (0, *a.recv_sem[1:]), a.explicit_self)
    return Event(delta, ev.index, ev.point, ev.line, moved, ev.invocation, ev.inner, ev.loops)


class _Accesses:
    """The accesses to device 0's memory, as columns, one entry per access: its region
    (numbered: the unroller shares regions, so there are few), whether it writes, where
    it starts on device 0's line (`_Line`) and the event of device 0 after which it is
    over (its own, for a point; None: never). In this order: device 0's own accesses
    (`races.event_accesses` of its events but its remote DMAs, on its own memory), from
    `sends` on its remote DMAs' send sides, and from `landing` on the remote DMAs that
    land in it (`_incoming`). `access` makes one an `races.Access` again."""

    def __init__(self, program: SymmetricProgram, ends: tuple[list, list], rot: Rotator, line: _Line):
        events = self.events = program.events
        read_end, write_end = ends
        local = [ev for ev in events if not (type(ev.action) is DmaStart and ev.action.send_sem is not None)]
        rows = [(region, w, ev.index, (write_end if w else read_end)[ev.index] if copy else ev.index)
                for ev, region, w, copy in event_accesses(local, program.n) if region.device == 0]
        self.sends = len(rows)
        incoming = _incoming(program, rot)
        rows += [(ev.action.src, False, ev.index, read_end[ev.index]) for ev, _, _, _ in incoming]
        self.landing = len(rows)
        rows += [(dst, True, line.place(delta, ev.index) if delta != 0 else ev.index, write_end[ev.index])
                 for ev, delta, _, dst in incoming]
        ids: dict[int, int] = {}
        self.reg = [ids.setdefault(id(region), len(ids)) for region, _, _, _ in rows]
        self.regions: list[Region] = list({id(region): region for region, _, _, _ in rows}.values())
        self.write = [w for _, w, _, _ in rows]
        self.lo = [lo for _, _, lo, _ in rows]
        self.hi: list[int | None] = [hi for _, _, _, hi in rows]
        self.incoming = incoming
        self._columns: tuple | None = None
        self._leads: tuple | None = None

    def columns(self, np: Any) -> tuple[Any, Any, Any, Any]:
        """`lo`, `hi` (never: the largest int64), `write` and `reg` as numpy arrays (made once)."""
        if self._columns is None:
            never = np.iinfo(np.int64).max
            self._columns = (np.array(self.lo, dtype=np.int64),
                             np.array([never if end is None else end for end in self.hi], dtype=np.int64),
                             np.array(self.write, dtype=bool), np.array(self.reg, dtype=np.intp))
        return self._columns

    def groups(self, np: Any = None) -> list[Any]:
        """The accesses of each buffer something writes (two reads never race, `races.race`):
        lists of positions, or with numpy arrays of them."""
        code: dict[str, int] = {}
        buffer_of = [code.setdefault(r.buffer, len(code)) for r in self.regions]
        if np is None:
            by: list[list[int]] = [[] for _ in code]
            written = [False] * len(code)
            for j, (k, w) in enumerate(zip(self.reg, self.write)):
                by[buffer_of[k]].append(j)
                written[buffer_of[k]] = written[buffer_of[k]] or w
            return [group for group, w in zip(by, written) if w]
        _, _, write, reg = self.columns(np)
        buffers = np.array(buffer_of, dtype=np.intp)[reg]
        by = np.argsort(buffers, kind="stable")
        bounds = np.searchsorted(buffers[by], np.arange(len(code) + 1))
        written = np.bincount(buffers[write], minlength=len(code)) > 0
        return [by[bounds[b]:bounds[b + 1]] for b in np.flatnonzero(written).tolist()]

    def leads(self, np: Any) -> tuple[Any, Any]:
        """Where each region starts and ends along its buffer's leading dimension (numpy
        arrays, made once; a buffer of rank 0 is one element: [0, 1))."""
        if self._leads is None:
            flat = chain.from_iterable(r.box[0] if r.box else (0, 1) for r in self.regions)
            both = np.fromiter(flat, dtype=np.int64, count=2 * len(self.regions)).reshape(-1, 2)
            self._leads = (both[:, 0], both[:, 1])
        return self._leads

    def access(self, j: int) -> Access:
        region, write, end = self.regions[self.reg[j]], self.write[j], self.hi[j]
        end_ev = None if end is None else self.events[end]
        if j < self.landing:
            return Access(region, write, self.events[self.lo[j]], end_ev, "" if j < self.sends else "send")
        return Access(region, write, _moved(*self.incoming[j - self.landing]), end_ev, "receive")


def race_free(program: SymmetricProgram, order: Order, rot: Rotator, feeds: dict[Key, Feeds] | None = None) -> bool:
    """Whether no two accesses to device 0's memory race (the module docstring): device 0's
    own accesses, its remote DMAs' send sides and the remote DMAs that land in it
    (`_Accesses`), each buffer's decided by `_concurrent_pairs`. `feeds`:
    `feeds_of(program)[1]`, if the caller has it."""
    accs = _Accesses(program, quotient_ends(program, order, feeds), rot, _Line(order))
    return not any(_concurrent_pairs(accs, group, order) for group in accs.groups(numpy_for(order.torus.n)))


class _Line:
    """Device 0's program order, the line the race sweep runs on. An event (k, j) of
    device k is placed just after the last event of device 0 that must precede it (rows
    are monotone, so those events are a prefix): at bisect_right(column, j), where the
    column holds rows[e][k] for every e. The rows come in runs (`Order.runs`), so that is
    where the last run whose entry k is at most j ends: each run is read once per k."""

    def __init__(self, order: Order):
        assert order.runs is not None, "an order from `quotient_order`, which keeps its runs"
        self.runs = order.runs
        self.columns: dict[int, tuple[list[int], list[int]]] = {}

    def _column(self, k: int) -> tuple[list[int], list[int]]:
        """Entry k of each run's row, and where each run ends (after a leading 0)."""
        column = self.columns.get(k)
        if column is None:
            rows, counts = self.runs
            column = self.columns[k] = ([int(row[k]) for row in rows], [0, *accumulate(counts)])
        return column

    def place(self, k: int, j: int) -> int:
        values, ends = self._column(k)
        return ends[bisect.bisect_right(values, j)]

    def entries(self, np: Any, k: int, at: Any) -> Any:
        """rows[e][k] for each event e of the numpy array `at`."""
        values, ends = self._column(k)
        return np.array(values, dtype=np.int64)[np.searchsorted(np.array(ends[1:]), at, side="right")]


class _Live:
    """Accesses whose spans may still meet a later one, by (end, index), dropped once over.
    `low` is the earliest end among them, so asking while none is over costs nothing; a
    list that is only appended to is swept when it has doubled since its last sweep, so
    keeping it costs O(1) per access, amortized."""

    __slots__ = ("items", "swept", "low")

    def __init__(self) -> None:
        self.items: list[tuple[float, int]] = []
        self.swept = 0
        self.low = float("inf")

    def current(self, lo: int) -> list[tuple[float, int]]:
        if self.low < lo:
            self.items = items = [item for item in self.items if item[0] >= lo]
            self.low = min(items)[0] if items else float("inf")
        self.swept = len(self.items)
        return self.items

    def add(self, lo: int, item: tuple[float, int]) -> None:
        self.items.append(item)
        if item[0] < self.low:
            self.low = item[0]
        if len(self.items) > 2 * self.swept + 8:
            self.current(lo)


PAIRS = 1 << 21  # at most this many pairs of meeting spans are listed at once (numpy), else swept
OVERLAPS = 256  # more pairs than this where one writes: their regions' overlap is found with numpy


def _concurrent_pairs(accs: _Accesses, group: Any, order: Order) -> bool:
    """Whether two of the accesses `group` (positions in `accs`, one buffer's) race. Every
    access here ends at an event of device 0 (or never), and starts at one of device 0 or
    of device k, placed on device 0's line (`_Line`). Two accesses whose spans [start, end]
    on that line do not meet are ordered: the earlier one's end (its start, for a point)
    is an event of device 0 before where the later one starts, so before it in every
    interleaving (program order, or the prefix of device 0 that must precede a start of
    device k). So only pairs whose spans meet can race, and `races.race` decides each such
    pair exactly. Two ways to visit them, the same verdict: with numpy (a large torus),
    every pair whose spans meet is listed at once (`_meeting`), and those where one writes
    and the regions overlap (both necessary for `race`) are asked; or (few devices, or more
    than `PAIRS` such pairs) a sweep along the line that keeps the live accesses bucketed
    by where they start along the leading dimension, so a new one meets only those it may
    overlap (boxes over a quarter of it are always met), and holds a read only against the
    live writes."""
    np = numpy_for(order.torus.n)
    if np is not None:
        found = _meeting(np, accs, group, order)
        if found is not None:
            return found
        group = group.tolist()
    never = float("inf")
    spans = sorted((accs.lo[j], never if accs.hi[j] is None else accs.hi[j], i) for i, j in enumerate(group))
    members = [accs.access(j) for j in group]
    extent = max(acc.region.box[0][1] for acc in members)
    lead = [acc.region.box[0] for acc in members]
    narrow = [hi - lo <= extent / 4 for lo, hi in lead]
    width = max((hi - lo for (lo, hi), small in zip(lead, narrow) if small), default=1)
    keys = sorted({lo for (lo, _), small in zip(lead, narrow) if small})
    buckets: tuple[dict[int, _Live], dict[int, _Live]] = ({}, {})
    wide = (_Live(), _Live())
    both, writes = (1, 0), (1,)
    for lo, hi, i in spans:
        acc = members[i]
        first, last = lead[i]
        near = (keys if not narrow[i] else
                keys[bisect.bisect_left(keys, first - width + 1):bisect.bisect_left(keys, last)])
        for w in (both if acc.write else writes):
            bucket = buckets[w]
            for key in near:
                live = bucket.get(key)
                if live is not None:
                    for _, j in live.current(lo):
                        if race(members[j], acc, order):
                            return True
            for _, j in wide[w].current(lo):
                if race(members[j], acc, order):
                    return True
        if narrow[i]:
            live = buckets[acc.write].get(first)
            if live is None:
                live = buckets[acc.write][first] = _Live()
            live.add(lo, (hi, i))
        else:
            wide[acc.write].add(lo, (hi, i))
    return False


def _ranges(np: Any, starts: Any, counts: Any) -> tuple[Any, Any]:
    """Item i repeated counts[i] times, and beside it starts[i], starts[i] + 1, ...: every
    (item, position) of the ranges, flat."""
    total = int(counts.sum())
    items = np.repeat(np.arange(len(counts)), counts)
    return items, starts[items] + np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)


def _meeting(np: Any, accs: _Accesses, at: Any, order: Order) -> bool | None:
    """`_concurrent_pairs` with numpy, for the accesses at positions `at`. Sorted by
    (start, end), the accesses whose spans meet the one of rank r are those after it that
    start no later than it ends: ranks r + 1 .. stop[r] - 1, found by binary search. An
    access whose region is one index along the buffer's leading dimension (a slot) can
    only overlap another of the same index or one wider there, so the pairs listed are:
    a wide one with everything its span meets after it; one of one index with the wide
    ones its span meets after it; and two of the same index whose spans meet (sorted by
    (index, start, end), a range again). So every pair that may race (spans meet, regions
    overlap) is listed without a loop over them (the sweep visits the same pairs, but for
    those its buckets skip, which cannot overlap). Of the pairs where one writes, those
    whose regions meet along the leading dimension are asked (when they are many, those
    whose whole boxes overlap: both necessary for `races.race`). None when the pairs
    listed are more than `PAIRS`."""
    lo_all, hi_all, write_all, reg_all = accs.columns(np)
    lead_lo, lead_hi = accs.leads(np)
    by = np.lexsort((hi_all[at], lo_all[at]))
    ranked = at[by]  # positions in `accs`, by rank
    lo, hi, reg = lo_all[ranked], hi_all[ranked], reg_all[ranked]
    m = len(at)
    stop = np.searchsorted(lo, hi, side="right")
    slot = lead_lo[reg]
    narrow = lead_hi[reg] - slot == 1
    wide = np.flatnonzero(~narrow)
    thin = np.flatnonzero(narrow)
    wide_counts = np.maximum(stop[wide] - wide - 1, 0)  # a wide one: the ranks after it its span meets
    after = np.searchsorted(wide, thin, side="right")  # one of one index: the wide ranks in its range
    mixed_counts = np.maximum(np.searchsorted(wide, stop[thin], side="left") - after, 0)
    # two of one index: ranks of `thin` by (index, rank), each index's block keyed apart
    by_slot = thin[np.argsort(slot[thin], kind="stable")]
    width = int(lo.max()) + 1 if m else 1
    if m and int(slot.max()) * width >= 1 << 62:
        return None
    key = slot[by_slot] * width + lo[by_slot]
    reach = slot[by_slot] * width + np.minimum(hi[by_slot], width - 1)
    same_counts = np.maximum(np.searchsorted(key, reach, side="right") - np.arange(1, len(by_slot) + 1), 0)
    if int(wide_counts.sum()) + int(mixed_counts.sum()) + int(same_counts.sum()) > PAIRS:
        return None
    i, j = _ranges(np, wide + 1, wide_counts)
    firsts, seconds = [wide[i]], [j]
    i, j = _ranges(np, after, mixed_counts)
    firsts.append(thin[i])
    seconds.append(wide[j])
    i, j = _ranges(np, np.arange(1, len(by_slot) + 1), same_counts)
    firsts.append(by_slot[i])
    seconds.append(by_slot[j])
    a, b = ranked[np.concatenate(firsts)], ranked[np.concatenate(seconds)]
    if not len(a):
        return False
    a, b = a[write_all[a] | write_all[b]], b[write_all[a] | write_all[b]]
    ra, rb = reg_all[a], reg_all[b]
    meet = (lead_lo[ra] < lead_hi[rb]) & (lead_lo[rb] < lead_hi[ra])
    a, b, ra, rb = a[meet], b[meet], ra[meet], rb[meet]
    if len(a) > OVERLAPS:
        regions = accs.regions
        ids = np.unique(np.concatenate([ra, rb]))
        used = [regions[k] for k in ids.tolist()]
        rank = len(used[0].box)
        number = np.zeros(len(regions), dtype=np.intp)
        number[ids] = np.arange(len(used))
        flat = chain.from_iterable(chain.from_iterable(r.box for r in used))
        boxes = np.fromiter(flat, dtype=np.int64, count=2 * rank * len(used)).reshape(len(used), rank, 2)
        device = np.fromiter((r.device for r in used), dtype=np.int64, count=len(used))
        ra, rb = number[ra], number[rb]
        ba, bb = boxes[ra], boxes[rb]
        overlap = (device[ra] == device[rb]) & ((ba[..., 0] < bb[..., 1]) & (bb[..., 0] < ba[..., 1])).all(axis=1)
        a, b = a[overlap], b[overlap]
    return any(race(accs.access(p), accs.access(q), order) for p, q in zip(a.tolist(), b.tolist()))


def certify(a: SymmetricAnalysis) -> bool:
    """The race check's symmetric back end: True when no two accesses to device 0's memory
    (so to any device's) can be unordered with one a write. Reads the run's feeds
    (`run.certify`) and leaves the order and the rotated regions for the data flow."""
    every, dma = a.feeds if a.feeds is not None else feeds_of(a.program)
    a.order = quotient_order(a.program, every)
    a.rot = Rotator(a.program)
    return race_free(a.program, a.order, a.rot, dma)
