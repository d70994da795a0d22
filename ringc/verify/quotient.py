"""Check a rotation-symmetric program from device 0's events alone.

When `rotation.rotation_unroll` proves that device d runs device 0's events rotated by d,
the whole ring is the quotient of one device by the rotation, and each check needs one
device's events, O(events per device) instead of O(N * events per device):

- **Run.** Executing event i on every device at once is a valid interleaving, and the
  state stays rotation-symmetric, so device 0 alone, with every deposit it sends to
  device t received from device -t by itself, runs exactly as the ring does. The run is
  maximal when device 0 blocks (then all do): hangs and exit balance are decided exactly
  (`simulate.py`'s persistence argument).
- **Order.** Must-happen-before is rotation-invariant: (p, i) before (q, j) iff device 0's
  event i is before (q - p, j). Row `cut[i][k]` is the first event of device k forced
  after device 0's event i. In a finished program an event can only force events of
  other devices with a *larger* index (otherwise rotating the ordering around the ring
  closes a cycle), so one backward sweep over i computes every row from later ones:
  cut[i] = min(cut[i + 1], over the waits (k, w) that i feeds: w and cut[w] rotated by
  k). Which feeds force a wait is the counting rule of `order.py` (a feed is necessary
  when the other feeds not forced after the wait fall short of its demand), evaluated
  with the rows already known; it can only miss orderings, never invent one, so a clean
  verdict here is sound. Rows are vectors (`_Rows`), shared between events that feed no
  other device: O(N * remote feeds) memory.
- **Races.** Only device 0's memory is checked (`symmetry.memory_symmetric`): its own
  accesses, and the DMAs of devices -t that land in it, which are device 0's own remote
  DMAs rotated by -t.
- **Data flow.** Device 0's memory is replayed on its own; a remote DMA lands what
  device -t sends, device 0's source rotated by -t (device ids and every box). Device
  d's output is device 0's rotated by d, and the collective's meaning rotates the same
  way (`meaning_rotates`), so device 0's output decides all of them.

Any finding at all sends `check` back to the full analysis, which explains it: this is a
fast path for the clean verdict, never a second source of findings.
"""

from __future__ import annotations

import bisect
from dataclasses import replace
from collections import Counter, defaultdict
from itertools import accumulate
from typing import Any

from ..ir import schema as S
from .events import Compute, DmaStart, Event, Program, Region, SemWait, Signal, deposits
from .order import DmaEnds, Order, sums_to
from .races import Access, accesses, race
from .rotation import NotRotational, Torus
from .xor import group_of
from .gauge import Gauge, device_dims
from ..collectives import KDIM, PRODUCT, Buffers, Collective, Piece, collective_of
from .semantics import Memory, apply, canonical_value, device_run, device_span, mismatches, term_leaves, with_leaves

__all__ = ["Key", "Rotator", "meaning_rotates", "data_steps", "quotient_order", "clean", "expand"]

Key = tuple[str, tuple[int, ...]]  # a semaphore of device 0: (name, index)


class _Unclear(Exception):
    """The quotient cannot give the clean verdict: let the full analysis decide."""


def _key(sem) -> Key:
    return (sem[1], sem[2])


# -- rotation of regions and values -------------------------------------------------

class Rotator:
    """Moves device 0's regions and symbolic values to device delta."""

    def __init__(self, program: Program, steps: dict[tuple[str, int], tuple[int, ...]] | None = None):
        self.n = program.n
        self.torus = group_of(program)
        self.xor = program.group == "xor"  # a box of step (1,) has its index XORed by delta
        # The boxes' steps (`Program.rotation`), or a gauge of them that also moves the data
        # of whole-accessed dims (`gauge.py`; whole boxes stay whole either way).
        self.steps = (program.rotation or {}) if steps is None else steps
        self.shapes = program.shapes
        self.moves: dict[tuple[str, int], tuple[int, ...]] = {}
        self.regions: dict[tuple[int, int], tuple[Region, Region]] = {}

    def _moves(self, buffer: str, delta: int) -> tuple[int, ...]:
        """How far each dimension of a buffer moves on device delta (r . delta,
        `rotation.box_step`), one entry per dimension: asked once per buffer and delta.
        Coordinate x of a dimension that moves by m is at (x + m) % size on device delta
        (x ^ m under XOR)."""
        key = (buffer, delta)
        moves = self.moves.get(key)
        if moves is None:
            out = []
            for dim in range(len(self.shapes[buffer])):
                r = self.steps.get((buffer, dim))
                if self.xor:
                    out.append(delta if r and any(r) else 0)
                else:
                    out.append(self.torus.step(r, delta) if r else 0)
            moves = self.moves[key] = tuple(out)
        return moves

    def region(self, region: Region, delta: int) -> Region:
        """An access on device delta (a whole dimension stays whole). The unroller shares
        one Region between the events that access it, and the races and the data flow
        both ask: kept per region object (the entry holds it, so its id stays its own)."""
        key = (id(region), delta)
        hit = self.regions.get(key)
        if hit is None:
            hit = self.regions[key] = (region, self._region(region, delta))
        return hit[1]

    def _region(self, region: Region, delta: int) -> Region:
        box = []
        shape, xor = self.shapes[region.buffer], self.xor
        for dim, ((lo, hi), move) in enumerate(zip(region.box, self._moves(region.buffer, delta))):
            size = shape[dim]
            if not move or hi - lo == size:  # a dimension that does not move stays
                box.append((lo, hi))
                continue
            start = lo ^ move if xor else (lo + move) % size
            if start + hi - lo > size:
                raise _Unclear(f"`{region.buffer}` dim {dim} wraps under rotation")
            box.append((start, start + hi - lo))
        return Region(region.buffer, self.torus.add(region.device, delta), tuple(box), region.kept, region.itemsize)

    def _split(self, buffer: str, box, delta: int):
        """`box` cut where rotating it by delta would wrap a dimension around its end (under
        XOR: into single indices along a dimension that moves, whose order XOR permutes)."""
        boxes = [box]
        for dim, (size, move) in enumerate(zip(self.shapes[buffer], self._moves(buffer, delta))):
            shift = move % size
            if not shift:
                continue
            if self.xor:
                boxes = [b[:dim] + ((i, i + 1),) + b[dim + 1:] for b in boxes for i in range(*b[dim])]
                continue
            cut = size - shift
            boxes = [part for b in boxes for part in
                     ((b[:dim] + ((b[dim][0], cut),) + b[dim + 1:], b[:dim] + ((cut, b[dim][1]),) + b[dim + 1:])
                      if b[dim][0] < cut < b[dim][1] else (b,))]
        return boxes

    def pieces(self, buffer: str, pieces: list[Piece], delta: int) -> list[Piece]:
        """Canonical pieces on device delta. Rotating terms that do not wrap keeps the
        value canonical but for the terms' order; a wrapped run may merge with another."""
        out = []
        moves, shape, xor = self._moves(buffer, delta), self.shapes[buffer], self.xor
        moving = any(moves)
        for p in pieces:
            parts, wrapped = [], False
            for box in (self._split(buffer, p.box, delta) if moving else (p.box,)):
                new_box = []
                for (lo, hi), m, size in zip(box, moves, shape):  # each start moved (`_moves`)
                    start = lo ^ m if xor else (lo + m) % size
                    new_box.append((start, start + hi - lo))
                new_box = tuple(new_box)
                terms = [self.term(t, box, new_box, delta) for t in p.value]
                wrapped = wrapped or any(len(ts) > 1 for ts in terms)
                parts.append(Piece(new_box, tuple(u for ts in terms for u in ts)))
            if wrapped or len(parts) > 1:
                out += [Piece(q.box, canonical_value(q.value, q.box)) for q in _rejoin(parts)]
            else:
                out += [Piece(q.box, tuple(sorted(q.value, key=repr))) for q in parts]
        return out

    def term(self, term, box, new_box, delta: int) -> list:
        """The term on device delta. A run of devices whose translation is not one run
        (it wraps some axis) becomes the runs of its image (`Torus.image`); a product's
        factors are cut where either's devices wrap (`Torus.runs`), so they stay paired."""
        if term[0] == PRODUCT and (term[1][0] == PRODUCT or term[2][0] == PRODUCT):
            return self.nested(term, box, new_box, delta)
        if term[0] == PRODUCT:
            _, a, b, k0, k1 = term
            fa, fb = self.term(a, box, new_box, delta), self.term(b, box, new_box, delta)
            if len(fa) == len(fb) == 1:
                return [(PRODUCT, fa[0], fb[0], k0, k1)]
            if self.xor:  # XOR does not keep device j + off paired with j
                raise _Unclear("a product over a run of devices under XOR")
            # A run wrapped: cut it where either factor's devices wrap.
            (lo, hi), off = device_span(a[1]), device_span(b[1])[0] - device_span(a[1])[0]
            cuts = [c - off for c in self.torus.cuts(lo + off, hi + off, delta)]
            return [self.term((PRODUCT, (a[0], device_run(x0, x1), a[2]), (b[0], device_run(x0 + off, x1 + off), b[2]), k0, k1),
                              box, new_box, delta)[0] for x0, x1, _ in self.torus.runs(lo, hi, delta, cuts)]
        name, dev, imap = term
        entries = []
        if imap:  # garbage and opaque data have no map (and no buffer of that name)
            moves, shape, xor = self._moves(name, delta), self.shapes[name], self.xor
        for i, (d, off) in enumerate(imap):  # each coordinate moved by its dim's move m (`_moves`)
            m = moves[i]
            if d is not None and d < 0:  # a contraction index (KDIM, or a nested product's)
                if any(self.steps.get((name, i), ())):
                    raise _Unclear("a contraction dimension that moves under rotation")
                entries.append((d, off))
            elif d is None:
                entries.append((None, off ^ m if xor else (off + m) % shape[i]))
            else:
                lo, hi = box[d]
                if xor and hi - lo > 1 and m:
                    raise _Unclear(f"input `{name}` dim {i} is read along a run that XOR permutes")
                x = (lo + off) ^ m if xor else (lo + off + m) % shape[i]
                if x + hi - lo > shape[i]:
                    raise _Unclear(f"input `{name}` dim {i} wraps under rotation")
                entries.append((d, x - new_box[d][0]))
        first, end = device_span(dev)
        if end == first + 1:
            return [(name, self.torus.add(first, delta), tuple(entries))]
        return [(name, device_run(y0, y1), tuple(entries)) for y0, y1 in self.torus.image(first, end, delta)]


    def nested(self, term, box, new_box, delta: int) -> list:
        """A product with a product factor on device delta: its plain factors moved one by
        one; where the factors whose devices are a run (they advance together) wrap, the
        run is cut so that each piece's factors stay paired (`term`'s rule, for any depth)."""
        leaves = term_leaves(term)
        moved = [self.term(leaf, box, new_box, delta) for leaf in leaves]
        if all(len(m) == 1 for m in moved):
            return [with_leaves(term, [m[0] for m in moved])]
        spans = [device_span(leaf[1]) for leaf in leaves]
        runs = [sp for sp in spans if sp[1] - sp[0] > 1]
        lo, hi = runs[0]
        cuts = {c - (r0 - lo) for r0, r1 in runs for c in self.torus.cuts(r0, r1, delta)}
        out = []
        for x0, x1, _ in self.torus.runs(lo, hi, delta, cuts):
            part = [(n, device_run(s0 + x0 - lo, s0 + x1 - lo), m) if s1 - s0 > 1 else (n, d, m)
                    for (n, d, m), (s0, s1) in zip(leaves, spans)]
            out.append(with_leaves(term, [self.term(leaf, box, new_box, delta)[0] for leaf in part]))
        return out


def expand(program: Program) -> Program:
    """Every device's events of a program that holds device 0's (`Program.rotation`): device
    d's are device 0's translated by d, every device id moved by d and every box by its
    dimension's step (`Rotator`). For the full analysis, which decides and explains what the
    quotient cannot, without evaluating every device again (`pallas.importer`)."""
    rot = Rotator(program)
    target_of = {id(ev): t for ev, t in program.targets}
    devices: list[list[Event]] = []
    targets: list[tuple[Event, int]] = []
    # Events share regions (a buffer's slot, a value register): each distinct one is
    # moved once per device, and every event names its regions by number.
    uniq: dict[Region | None, int] = {None: 0}

    def number(r: Region | None) -> int:
        k = uniq.get(r)
        if k is None:
            k = uniq[r] = len(uniq)
        return k

    plan = []
    for ev in program.devices[0]:
        a = ev.action
        if isinstance(a, DmaStart):
            plan.append((ev, a, number(a.src), number(a.dst), 0, 0, target_of.get(id(ev))))
        elif isinstance(a, Compute):
            plan.append((ev, a, number(a.dst), number(a.src), number(a.rhs), number(a.base), target_of.get(id(ev))))
        else:
            plan.append((ev, a, 0, 0, 0, 0, target_of.get(id(ev))))
    regions = list(uniq)
    new = object.__new__
    for d in range(program.n):
        add = rot.torus.adder(d)
        moved_regions = [None] + [rot.region(r, d) for r in regions[1:]]

        def sem(s):
            return None if s is None else (add[s[0]], s[1], s[2])

        out = []
        for ev, a, i, j, k, m, t in plan:
            cls = type(a)
            if cls is DmaStart or cls is Compute:  # `_moved`, inline: every other field as it is
                b = new(cls)
                fields = b.__dict__
                fields.update(a.__dict__)
                if cls is DmaStart:
                    fields["src"], fields["dst"] = moved_regions[i], moved_regions[j]
                    fields["send_sem"], fields["recv_sem"] = sem(a.send_sem), sem(a.recv_sem)
                else:
                    fields["dst"], fields["src"] = moved_regions[i], moved_regions[j]
                    fields["rhs"], fields["base"] = moved_regions[k], moved_regions[m]
                a = b
            elif cls is SemWait:
                a = SemWait(sem(a.sem), a.value, a.why, a.copy)
            elif cls is Signal:
                a = Signal(sem(a.sem), a.inc, a.why)
            moved = Event(add[ev.device], ev.index, ev.point, ev.line, a, ev.invocation, ev.inner)
            out.append(moved)
            if t is not None:
                targets.append((moved, add[t]))
        devices.append(out)
    # every other field (labels, call names, dtypes, parallel dims, ...) as it is
    return replace(program, devices=devices, targets=targets, rotation=None)


def _moved(action: Any, **changes: Any) -> Any:
    """`dataclasses.replace` for the frozen actions, without its per-call field checks (a
    quarter of `expand`): a copy of every field, then the changes."""
    new = object.__new__(type(action))
    fields = new.__dict__
    fields.update(action.__dict__)
    fields.update(changes)
    return new


def _rejoin(parts: list[Piece]) -> list[Piece]:
    """Two halves of a piece cut by `Rotator._split` that sit side by side again after the
    rotation, holding the same terms (before canonical form fixes single-index dims), are one piece (a whole relay buffer passed around
    the ring would otherwise gain a piece at every step)."""
    if len(parts) != 2:
        return parts
    a, b = sorted(parts, key=lambda p: p.box)
    apart = [d for d, (x, y) in enumerate(zip(a.box, b.box)) if x != y]
    if len(apart) == 1 and a.box[apart[0]][1] == b.box[apart[0]][0] and a.value == b.value:
        d = apart[0]
        return [Piece(a.box[:d] + ((a.box[d][0], b.box[d][1]),) + a.box[d + 1:], a.value)]
    return parts


# Collectives whose meaning commutes with every permutation p of the devices that moves
# each buffer's device dims by p (the block of device j goes to p(j)): a sum over all
# devices, a gather into the slot of each device, a scatter of each device's slot. With
# a step of (1,) read as "XOR by d" (`xor.py`), `Collective.meaning_rotates` then checks
# that the program moves exactly the device dims, which is what the permutation d -> d ^ t
# does to the meaning. (ppermute's meaning, a shift, is not XOR-symmetric; the products'
# factors pair device j with j + off.)
XOR_MEANINGS = ("psum", "all_gather", "psum_scatter", "all_to_all")


def meaning_rotates(collective: Collective, buffers: Buffers, program: Program,
                    steps: dict[tuple[str, int], tuple[int, ...]] | None = None) -> bool:
    """The collective's meaning on device d is device 0's translated by d, for the steps the
    program found, or `steps` (a gauge of them, `gauge.py`) (`Collective.meaning_rotates`;
    a step is a vector, one entry per axis)."""
    steps = (program.rotation or {}) if steps is None else steps
    shapes = program.shapes
    axes = len(program.axis_sizes)
    if program.group == "xor" and collective.kind not in XOR_MEANINGS:
        return False

    def r(buf: str, i: int) -> tuple[int, ...]:
        size = shapes[buf][i]
        return tuple(v % size for v in steps.get((buf, i), (0,) * axes))

    return collective.meaning_rotates(r, shapes, buffers, axes)


# -- the run -------------------------------------------------------------------------

def _run(program: Program) -> None:
    """Device 0 (so every device) runs to the end, every semaphore ends at 0, and every
    DMA wait expects a sum of the sizes of the DMAs on its semaphore (`check.byte_findings`)."""
    value: dict[Key, int] = defaultdict(int)
    sizes: dict[Key, list[int]] = defaultdict(list)
    for ev in program.devices[0]:
        a = ev.action
        if isinstance(a, SemWait):
            if value[_key(a.sem)] < a.value:
                raise _Unclear(f"a hang at line {ev.line}")
            value[_key(a.sem)] -= a.value
            continue
        dma = isinstance(a, DmaStart)
        for sem, amount in deposits(a):  # device 0's deposits on device t: device -t's on device 0
            value[_key(sem)] += amount
            if dma:
                sizes[_key(sem)].append(amount)
    if any(value.values()):
        raise _Unclear("a semaphore ends non-zero")
    counts = {key: Counter(v) for key, v in sizes.items()}
    for ev in program.devices[0]:
        a = ev.action
        if (isinstance(a, SemWait) and program.sem_kinds.get(a.sem[1]) == "dma"
                and _key(a.sem) in counts and not sums_to(a.value, counts[_key(a.sem)])):
            raise _Unclear(f"a byte count mismatch at line {ev.line}")


# -- the order -----------------------------------------------------------------------

class _Feeds:
    """What adds to one semaphore of device 0: per sending device (offset), its events'
    indices in program order with running totals of what they add."""

    def __init__(self) -> None:
        self.index: dict[int, list[int]] = defaultdict(list)
        self.amount: dict[int, list[int]] = defaultdict(list)
        self.events: dict[int, list[Event]] = defaultdict(list)

    def add(self, offset: int, ev: Event, amount: int) -> None:
        self.index[offset].append(ev.index)
        self.amount[offset].append(amount)
        self.events[offset].append(ev)

    def finish(self) -> None:
        self.total = {k: [0, *accumulate(v)] for k, v in self.amount.items()}

    def available(self, offset: int, limit: int) -> int:
        """How many of `offset`'s feeds come before its event `limit`."""
        return bisect.bisect_left(self.index[offset], limit)


def _feeds(program: Program) -> tuple[dict[Key, _Feeds], dict[Key, _Feeds]]:
    """Device 0's semaphores' feeds: device 0's deposit into device t's semaphore, rotated
    by -t, is device -t's deposit into device 0's. Every deposit's, and the DMAs' alone,
    in one pass over device 0's events."""
    neg = group_of(program).neg
    offsets: dict[int, int] = {}  # owner -> offset of the sender, asked once per owner
    every: dict[Key, _Feeds] = defaultdict(_Feeds)
    dma: dict[Key, _Feeds] = defaultdict(_Feeds)
    for ev in program.devices[0]:
        a = ev.action
        found = deposits(a)
        if not found:
            continue
        is_dma = isinstance(a, DmaStart)
        for sem, amount in found:
            k = offsets.get(sem[0])
            if k is None:
                k = offsets[sem[0]] = neg(sem[0])
            key = (sem[1], sem[2])
            every[key].add(k, ev, amount)
            if is_dma:
                dma[key].add(k, ev, amount)
    for f in every.values():
        f.finish()
    for f in dma.values():
        f.finish()
    return every, dma


def _limits(feeds: _Feeds, row: Any, index: int) -> dict[int, int]:
    """Per offset, the feeds not forced after device 0's event `index` (whose cut row is
    `row`): own feeds before it, device k's before its event row[k]."""
    return {k: feeds.available(k, index if k == 0 else int(row[k])) for k in feeds.index}


SMALL = 64  # below this many devices, rows are lists: importing numpy would cost more


class _Rows:
    """The vector operations of the order's rows (one entry per device): numpy arrays, or
    for a small torus plain lists, which give the same values."""

    def __init__(self, torus: Torus):
        self.torus = torus
        self.np = None
        self.perms: dict[int, list[int]] = {}
        if torus.n > SMALL:
            import numpy
            self.np = numpy

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

    def lower(self, cur: Any, row: Any, k: int, w: int) -> Any:
        """`minimum(cur, moved)` where moved is `seen_from(row, k)` with entry k set to w;
        `cur` is a fresh copy the caller owns (it is changed in place). On a ring of numpy
        rows: two slice minima, no rolled copy (the same values: moved[j] = row[j - k])."""
        t = self.torus
        if self.np is None or not isinstance(t, Torus) or len(t.shape) > 1:
            moved = self.seen_from(row, k)
            moved[k] = w
            return self.minimum(cur, moved)
        keep = min(int(cur[k]), w)
        n = t.n
        np = self.np
        np.minimum(cur[k:], row[:n - k], out=cur[k:])
        np.minimum(cur[:k], row[n - k:], out=cur[:k])
        cur[k] = keep
        return cur


def quotient_order(program: Program, feeds: dict[Key, _Feeds] | None = None) -> Order:
    """`feeds`: `_feeds(program)[0]`, if the caller has it."""
    events, n = program.devices[0], program.n
    torus = group_of(program)
    length = len(events)
    if feeds is None:
        feeds = _feeds(program)[0]
    demand: dict[int, int] = {}  # wait index -> cumulative demand on its semaphore
    running: dict[Key, int] = defaultdict(int)
    for ev in events:
        if isinstance(ev.action, SemWait):
            running[_key(ev.action.sem)] += ev.action.value
            demand[ev.index] = running[_key(ev.action.sem)]
    edges: dict[int, dict[int, int]] = defaultdict(dict)  # feed index -> {device offset: first wait it forces}
    vec = _Rows(torus)
    cur = vec.full(length)  # nothing forced after the end
    rows: list[Any] = [cur]
    at = [0] * length
    for i in range(length - 1, -1, -1):
        if i in edges:
            cur = cur.copy()  # the rows already made hold the old one
            for k, w in edges[i].items():
                cur = vec.lower(cur, rows[at[w]], k, w)
            rows.append(cur)
        at[i] = len(rows) - 1
        a = events[i].action
        if not isinstance(a, SemWait):
            continue
        fed = feeds.get(_key(a.sem))
        if fed is None:
            raise _Unclear("a wait nothing feeds")
        limits = _limits(fed, cur, i)
        slack = sum(fed.total[k][c] for k, c in limits.items()) - demand[i]
        if slack < 0:
            raise _Unclear("a wait the order cannot satisfy")
        for k, count in limits.items():
            if k == 0:
                continue  # program order already
            # The last necessary feed of device k implies its earlier ones.
            j = next((j for j in range(count - 1, -1, -1) if fed.amount[k][j] > slack), None)
            if j is None:
                continue
            src = fed.index[k][j]
            if src >= i:
                raise _Unclear("an ordering against the ring's direction")
            back = torus.neg(k)
            edges[src][back] = min(edges[src].get(back, i), i)
    return Order(program, [[rows[at[i]] for i in range(length)]], symmetric=True, torus=torus)


# -- races ---------------------------------------------------------------------------

def _ends(program: Program, order: Order, feeds: dict[Key, _Feeds] | None = None) -> tuple[dict, dict]:
    """`order.dma_ends` for device 0's semaphores, with prefix sums: a feed's interval
    ends at the first wait whose possible supply (feeds not forced after it) is no more
    than its cumulative demand. Keyed by device 0's DMA start: its source's end (the read
    side), and its destination's end (the write side) in the device it lands in, which
    for a remote DMA is its copy rotated into device 0 (`_incoming`): one receive side
    per DMA, so one key each. `feeds`: `_feeds(program)[1]`, if the caller has it."""
    if feeds is None:
        feeds = _feeds(program)[1]
    neg = group_of(program).neg
    row = order.cuts[0]
    read_end: dict[Event, Event | None] = {}
    write_end: dict[Event, Event | None] = {}
    waits: dict[Key, list[Event]] = defaultdict(list)
    kinds = program.sem_kinds
    for ev in program.devices[0]:
        a = ev.action
        if isinstance(a, SemWait) and kinds.get(a.sem[1]) == "dma":
            waits[_key(a.sem)].append(ev)
    for key, fed in feeds.items():
        ends = {k: [None] * len(ix) for k, ix in fed.index.items()}  # per offset, per feed
        done = dict.fromkeys(fed.index, 0)
        demand = 0
        own = list(fed.index) == [0]  # fed by device 0 alone (a local copy's semaphore): no rows needed
        for w in waits[key]:
            demand += w.action.value
            if own:
                c = bisect.bisect_left(fed.index[0], w.index)
                if fed.total[0][c] <= demand:
                    ends0 = ends[0]
                    for j in range(done[0], c):
                        ends0[j] = w
                    done[0] = max(done[0], c)
                continue
            limits = _limits(fed, row[w.index], w.index)
            if sum(fed.total[k][c] for k, c in limits.items()) <= demand:
                for k, c in limits.items():
                    ends_k = ends[k]
                    for j in range(done[k], c):
                        ends_k[j] = w
                    done[k] = max(done[k], c)
        for k, evs in fed.events.items():
            ends_k = ends[k]
            for j, ev in enumerate(evs):
                a: DmaStart = ev.action
                end = ends_k[j]
                if k == 0 and a.send_sem is not None and _key(a.send_sem) == key:
                    read_end[ev] = end
                if _key(a.recv_sem) == key and neg(a.recv_sem[0]) == k:
                    write_end[ev] = end
                    if a.send_sem is None:
                        read_end[ev] = end
    return read_end, write_end


def _incoming(program: Program, rot: Rotator) -> list[tuple[Event, Event]]:
    """The remote DMAs that land in device 0: each of device 0's, with its copy rotated by
    minus its offset."""
    out = []
    for ev in program.devices[0]:
        a = ev.action
        if isinstance(a, DmaStart) and a.remote:
            delta = rot.torus.neg(a.dst.device)
            moved = DmaStart(a.copy, rot.region(a.src, delta), rot.region(a.dst, delta),
                             (delta, *a.send_sem[1:]), (0, *a.recv_sem[1:]), a.explicit_self)
            out.append((ev, Event(delta, ev.index, ev.point, ev.line, moved, ev.invocation, ev.inner)))
    return out


def _race_free(program: Program, order: Order, rot: Rotator, feeds: dict[Key, _Feeds] | None = None) -> bool:
    """`feeds`: `_feeds(program)[1]`, if the caller has it."""
    read_end, write_end = _ends(program, order, feeds)
    events = program.devices[0]
    local = Program(program.schedule_name, program.file, program.n, program.grid_names,
                    [[ev for ev in events if not (isinstance(ev.action, DmaStart) and ev.action.remote)]],
                    program.sem_kinds, program.shapes)
    accs = [acc for acc in accesses(local, DmaEnds(read_end, write_end), described=False) if acc.region.device == 0]
    for ev in events:
        a = ev.action
        if isinstance(a, DmaStart) and a.remote:
            accs.append(Access(a.src, False, ev, read_end.get(ev), "send"))
    for ev, moved in _incoming(program, rot):
        accs.append(Access(moved.action.dst, True, moved, write_end.get(ev), "receive"))
    groups: dict[str, list[Access]] = defaultdict(list)
    written: set[str] = set()
    for acc in accs:
        groups[acc.region.buffer].append(acc)
        if acc.write:
            written.add(acc.region.buffer)
    columns: dict[int, list[int]] = {}
    # Two reads never race (`races.race`): a buffer nothing writes (an input) is skipped.
    return not any(_concurrent_pairs(group, order, columns) for buf, group in groups.items() if buf in written)


def _column(rows: list[Any], k: int) -> list[int]:
    """`rows[e][k]` for every e, as plain ints (non-decreasing in e, for `bisect`): the rows
    are shared between consecutive events, so each distinct row is read once."""
    out: list[int] = []
    last, value = None, 0
    for row in rows:
        if row is not last:
            last, value = row, int(row[k])
        out.append(value)
    return out


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


def _concurrent_pairs(group: list[Access], order: Order, columns: dict[int, list[int]]) -> bool:
    """Whether two accesses race, by a sweep over device 0's program order. Every access
    here ends at an event of device 0, and starts at one of device 0 or of device k; a
    start (k, j) is placed just after the last event of device 0 that must precede it
    (rows are monotone, so those events are a prefix). On that line, one access must be
    over before the other begins iff their spans do not meet: the sweep only looks at
    spans that meet, and `races.race` decides each such pair exactly. Two reads never
    race (`races.race`), so a read is only held against the live writes."""
    rows = order.cuts[0]
    never = float("inf")
    spans = []
    for i, acc in enumerate(group):
        ev, end = acc.start, acc.end
        if ev.device == 0:
            lo = ev.index
        else:
            column = columns.get(ev.device)
            if column is None:
                column = columns[ev.device] = _column(rows, ev.device)
            lo = bisect.bisect_right(column, ev.index)
        spans.append((lo, end.index if end is not None else never, i))
    spans.sort()
    # Live accesses, bucketed by where they start along the leading dimension, so a new
    # one meets only those it may overlap; boxes over a quarter of it are always met.
    # Writes and reads are kept apart (index 1 and 0).
    extent = max(acc.region.box[0][1] for acc in group)
    lead = [acc.region.box[0] for acc in group]
    narrow = [hi - lo <= extent / 4 for lo, hi in lead]
    width = max((hi - lo for (lo, hi), small in zip(lead, narrow) if small), default=1)
    keys = sorted({lo for (lo, _), small in zip(lead, narrow) if small})
    buckets: tuple[dict[int, _Live], dict[int, _Live]] = ({}, {})
    wide = (_Live(), _Live())
    both, writes = (1, 0), (1,)
    for lo, hi, i in spans:
        acc = group[i]
        first, last = lead[i]
        near = keys if not narrow[i] else \
            keys[bisect.bisect_left(keys, first - width + 1):bisect.bisect_left(keys, last)]
        for w in (both if acc.write else writes):
            bucket = buckets[w]
            for key in near:
                live = bucket.get(key)
                if live is not None:
                    for _, j in live.current(lo):
                        if race(group[j], acc, order):
                            return True
            for _, j in wide[w].current(lo):
                if race(group[j], acc, order):
                    return True
        if narrow[i]:
            live = buckets[acc.write].get(first)
            if live is None:
                live = buckets[acc.write][first] = _Live()
            live.add(lo, (hi, i))
        else:
            wide[acc.write].add(lo, (hi, i))
    return False


# -- data flow -----------------------------------------------------------------------

def _data_flow_right(sched: S.Schedule, program: Program, meaning: Any = "schedule",
                     boxes: Rotator | None = None) -> bool:
    """Device 0's memory replayed, each remote DMA landing what device -t sends, then
    compared with the collective's meaning. `boxes`: a Rotator of the same program whose
    rotated regions are reused (the races ask for the same ones). The gauge's steps only
    move dims accessed whole, and a whole dim stays whole, so a region moves the same
    under either."""
    if meaning is None:
        return True  # no meaning to check
    collective, buffers = (collective_of(sched), Buffers.of(sched)) if meaning == "schedule" else meaning
    steps = data_steps(program, collective, buffers)
    if steps is None:
        return False
    rot = Rotator(program, steps)
    if boxes is not None:
        rot.regions = boxes.regions
    n, mem = program.n, Memory(program.shapes)
    for name, buf in sched.buffers.items():
        if buf.kind == "input":
            mem.init_input(0, name)

    def land(ev: Event) -> None:  # what device -t sends lands in device 0
        a: DmaStart = ev.action
        delta = rot.torus.neg(a.dst.device)
        src, dst = rot.region(a.src, delta), rot.region(a.dst, delta)
        mem.move(rot.pieces(a.src.buffer, mem.read(a.src), delta), src, dst)

    for ev in program.devices[0]:
        apply(mem, ev, n, land)
    return not mismatches(collective, buffers, mem, [0], n, program.shapes)


def data_steps(program: Program, collective: Collective, buffers: Buffers,
               boxes: dict[tuple[str, int], tuple[int, ...]] | None = None) -> dict | None:
    """Steps under which device 0's events commute with the translation of the memory and
    the collective's meaning translates too (`gauge.py`): the boxes' steps (`boxes`, by
    default `Program.rotation`) and the free steps of whole-accessed dims at 0, else at the
    meaning's device dims; None when no gauge does both."""
    xor = program.group == "xor"
    boxes = (program.rotation or {}) if boxes is None else boxes
    gauge = Gauge(program.devices[0], boxes, program.shapes, len(program.axis_sizes), xor)
    tried = [{}] if xor else [{}, device_dims(buffers, len(program.axis_sizes))]
    for prefer in tried:
        steps = gauge.steps(prefer)
        if steps is not None and meaning_rotates(collective, buffers, program, steps):
            return steps
    return None


def clean(sched: S.Schedule, program: Program, meaning: Any = "schedule") -> bool:
    """True when the rotated program runs to the end with every semaphore at 0, has no race
    and computes the collective; False when something fails or the quotient cannot tell.
    `meaning`: the schedule's collective, or `(Collective, Buffers)`, or None for no meaning
    check (a traced kernel: `sched` then only names its buffers' kinds). (Routes and
    megacore rules are checked by `check.rotated_report` on the same events.)"""
    try:
        _run(program)
        every, dma = _feeds(program)
        order = quotient_order(program, every)
        rot = Rotator(program)
        return _race_free(program, order, rot, dma) and _data_flow_right(sched, program, meaning, rot)
    except (_Unclear, NotRotational):
        return False
