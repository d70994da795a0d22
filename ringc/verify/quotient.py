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
  other device: O(N * remote feeds) memory. Only waits and the feeds that force them
  change anything, so the sweep visits only those (`quotient_order`).
- **Races.** Only device 0's memory is checked (`symmetry.memory_symmetric`): its own
  accesses, and the DMAs of devices -t that land in it, which are device 0's own remote
  DMAs rotated by -t. Each ends at an event of device 0, so on device 0's program order,
  with a start of device k placed after the events that must precede it, only accesses
  whose spans meet can race (`_concurrent_pairs`).
- **Data flow.** Device 0's memory is replayed on its own; a remote DMA lands what
  device -t sends, device 0's source rotated by -t (device ids and every box). Device
  d's output is device 0's rotated by d, and the collective's meaning rotates the same
  way (`meaning_rotates`), so device 0's output decides all of them.

Any finding at all sends `check` back to the full analysis, which explains it: this is a
fast path for the clean verdict, never a second source of findings.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import replace
from collections import Counter, defaultdict
from itertools import accumulate, chain
from typing import Any

from .events import Compute, DmaStart, Event, Program, Region, SemWait, Signal, deposits
from .symmetric.program import Group, SymmetricProgram
from .order import DmaEnds, Order, sums_to
from .races import Access, event_accesses, race
from .rotation import NotRotational, Torus
from .xor import group_of
from .background import Background, default_jobs
from .gauge import Gauge, device_dims
from ..collectives import KDIM, PRODUCT, Buffers, Collective, Piece
from .semantics import (Memory, apply, base_name, canonical_value, device_run, device_span, mismatches, sorted_terms, term_leaves,
                        with_leaves)
from .spec import Spec
from .windows import FusedMemory, Unfused

__all__ = ["Key", "Rotator", "meaning_rotates", "data_steps", "full_data_steps", "quotient_order", "FORK_EVENTS", "clean", "expand"]

Key = tuple[str, tuple[int, ...]]  # a semaphore of device 0: (name, index)


class _Unclear(Exception):
    """The quotient cannot give the clean verdict: let the full analysis decide."""


def _key(sem) -> Key:
    return (sem[1], sem[2])


# -- rotation of regions and values -------------------------------------------------

class Rotator:
    """Moves device 0's regions and symbolic values to device delta."""

    def __init__(self, program: SymmetricProgram, steps: dict[tuple[str, int], tuple[int, ...]] | None = None):
        self.n = program.n
        self.torus = group_of(program)
        self.xor = program.group is Group.XOR  # a box of step (1,) has its index XORed by delta
        # The boxes' steps (`SymmetricProgram.steps`), or a gauge of them that also moves the data
        # of whole-accessed dims (`gauge.py`; whole boxes stay whole either way).
        self.steps = program.steps if steps is None else steps
        self.shapes = program.shapes
        self.moves: dict[tuple[str, int], tuple[int, ...]] = {}
        self.dims: dict[tuple[str, int], tuple[tuple[int, int, bool], ...]] = {}
        self.regions: dict[tuple[int, int], tuple[Region, Region]] = {}
        self.landings: dict[tuple, list] = {}  # `_boxes`

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

    def _dims(self, buffer: str, delta: int) -> tuple[tuple[int, int, bool], ...]:
        """Per dimension of a buffer on device delta: its move (`_moves`), its size, and
        whether it has a step at all (a contraction index must not move): asked once per
        buffer and delta."""
        key = (buffer, delta)
        dims = self.dims.get(key)
        if dims is None:
            dims = self.dims[key] = tuple((m, size, any(self.steps.get((buffer, i), ())))
                                          for i, (m, size) in enumerate(zip(self._moves(buffer, delta),
                                                                            self.shapes[buffer])))
        return dims

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
        for p in pieces:
            boxes, value = self._boxes(buffer, p.box, delta), p.value
            if len(boxes) == 1 and len(value) == 1:  # the common case: one box, one term
                box, new_box = boxes[0]
                ts = self.term(value[0], box, new_box, delta)
                if len(ts) == 1:
                    out.append(Piece(new_box, (ts[0],)))
                else:  # wrapped: the runs of its image, summed
                    out.append(Piece(new_box, canonical_value(tuple(ts), new_box)))
                continue
            parts, wrapped = [], False
            for box, new_box in boxes:
                maps: dict = {}  # the terms' maps moved (`_map`): a run and its wrapped part share theirs
                terms = []
                for t in value:
                    ts = self.term(t, box, new_box, delta, maps)
                    if len(ts) > 1:
                        wrapped = True
                    terms += ts
                parts.append(Piece(new_box, tuple(terms)))
            if wrapped or len(parts) > 1:
                out += [Piece(q.box, canonical_value(q.value, q.box)) for q in _rejoin(parts)]
            else:
                out += [q if len(q.value) < 2 else Piece(q.box, sorted_terms(q.value)) for q in parts]
        return out

    def _boxes(self, buffer: str, box, delta: int) -> list:
        """`box` cut where rotating it would wrap (`_split`), each part with where it lands
        on device delta (each start moved by its dim's move, `_moves`): asked once per
        buffer, box and delta (a buffer's few slots and blocks)."""
        key = (buffer, box, delta)
        hit = self.landings.get(key)
        if hit is None:
            moves, shape, xor = self._moves(buffer, delta), self.shapes[buffer], self.xor
            hit = []
            for part in (self._split(buffer, box, delta) if any(moves) else (box,)):
                new_box = []
                for (lo, hi), m, size in zip(part, moves, shape):
                    start = lo ^ m if xor else (lo + m) % size
                    new_box.append((start, start + hi - lo))
                hit.append((part, tuple(new_box)))
            if len(self.landings) >= 1 << 14:
                self.landings.clear()
            self.landings[key] = hit
        return hit

    def term(self, term, box, new_box, delta: int, maps: dict | None = None) -> list:
        """The term on device delta. A run of devices whose translation is not one run
        (it wraps some axis) becomes the runs of its image (`Torus.image`); a product's
        factors are cut where either's devices wrap (`Torus.runs`), so they stay paired.
        `maps`: the maps moved so far for these boxes (`_map`), if kept."""
        if term[0] == PRODUCT and (term[1][0] == PRODUCT or term[2][0] == PRODUCT):
            return self.nested(term, box, new_box, delta, maps)
        if term[0] == PRODUCT:
            _, a, b, k0, k1 = term
            fa, fb = self.term(a, box, new_box, delta, maps), self.term(b, box, new_box, delta, maps)
            if len(fa) == len(fb) == 1:
                return [(PRODUCT, fa[0], fb[0], k0, k1)]
            if self.xor:  # XOR does not keep device j + off paired with j
                raise _Unclear("a product over a run of devices under XOR")
            # A run wrapped: cut it where either factor's devices wrap.
            (lo, hi), off = device_span(a[1]), device_span(b[1])[0] - device_span(a[1])[0]
            cuts = [c - off for c in self.torus.cuts(lo + off, hi + off, delta)]
            return [self.term((PRODUCT, (a[0], device_run(x0, x1), a[2]), (b[0], device_run(x0 + off, x1 + off), b[2]), k0, k1),
                              box, new_box, delta, maps)[0] for x0, x1, _ in self.torus.runs(lo, hi, delta, cuts)]
        name, dev, imap = term
        entries = self._map(name, imap, box, new_box, delta, maps) if imap else ()
        if isinstance(dev, int):
            return [(name, self.torus.adder(delta)[dev], entries)]
        first, end = dev
        if end == first + 1:
            return [(name, self.torus.adder(delta)[first], entries)]
        return [(name, device_run(y0, y1), entries) for y0, y1 in self.torus.image(first, end, delta)]

    def _map(self, name: str, imap, box, new_box, delta: int, maps: dict | None):
        """A plain term's map on device delta, kept in `maps` (if given) by name and map."""
        key = (name, imap)
        if maps is not None:
            entries = maps.get(key)
            if entries is not None:
                return entries
        out = []
        xor = self.xor
        # each coordinate moved by its dim's move m (`_moves`); garbage and opaque data have
        # no map (and no buffer of that name)
        for (d, off), (m, size, stepped) in zip(imap, self._dims(base_name(name), delta)):
            if d is None:
                out.append((None, off ^ m if xor else (off + m) % size))
            elif d < 0:  # a contraction index (KDIM, or a nested product's)
                if stepped:
                    raise _Unclear("a contraction dimension that moves under rotation")
                out.append((d, off))
            else:
                lo, hi = box[d]
                if xor and hi - lo > 1 and m:
                    raise _Unclear(f"input `{name}` dim {len(out)} is read along a run that XOR permutes")
                x = (lo + off) ^ m if xor else (lo + off + m) % size
                if x + hi - lo > size:
                    raise _Unclear(f"input `{name}` dim {len(out)} wraps under rotation")
                out.append((d, x - new_box[d][0]))
        entries = tuple(out)
        if maps is not None:
            maps[key] = entries
        return entries

    def nested(self, term, box, new_box, delta: int, maps: dict | None = None) -> list:
        """A product with a product factor on device delta: its plain factors moved one by
        one; where the factors whose devices are a run (they advance together) wrap, the
        run is cut so that each piece's factors stay paired (`term`'s rule, for any depth)."""
        leaves = term_leaves(term)
        moved = [self.term(leaf, box, new_box, delta, maps) for leaf in leaves]
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
            out.append(with_leaves(term, [self.term(leaf, box, new_box, delta, maps)[0] for leaf in part]))
        return out


def expand(program: SymmetricProgram) -> Program:
    """Every device's events of a symmetric program, as a `Program`: device
    d's are device 0's translated by d, every device id moved by d and every box by its
    dimension's step (`Rotator`). For the full analysis, which decides and explains what the
    quotient cannot, without evaluating every device again (`pallas.importer`)."""
    rot = Rotator(program)
    target_of = {id(ev): t for ev, t in program.representatives.targets}
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
    for ev in program.events:
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
    return replace(program.representatives, devices=devices, targets=targets)


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


def meaning_rotates(collective: Collective, buffers: Buffers, program: SymmetricProgram,
                    steps: dict[tuple[str, int], tuple[int, ...]] | None = None) -> bool:
    """The collective's meaning on device d is device 0's translated by d, for the steps the
    program found, or `steps` (a gauge of them, `gauge.py`) (`Collective.meaning_rotates`;
    a step is a vector, one entry per axis)."""
    return _rotates(collective, buffers, program.shapes, len(program.axis_sizes), program.group,
                    program.steps if steps is None else steps)


def _rotates(collective: Collective, buffers: Buffers, shapes: dict[str, tuple[int, ...]], axes: int, group: Group,
             steps: dict[tuple[str, int], tuple[int, ...]]) -> bool:
    """`meaning_rotates` on what it reads: the shapes, the number of axes, the group, the steps."""
    if group is Group.XOR and not collective.xor_symmetric:
        return False

    def r(buf: str, i: int) -> tuple[int, ...]:
        size = shapes[buf][i]
        return tuple(v % size for v in steps.get((buf, i), (0,) * axes))

    return collective.meaning_rotates(r, shapes, buffers, axes)


# -- the run -------------------------------------------------------------------------

def _run(program: SymmetricProgram, feeds: tuple[dict[Key, _Feeds], dict[Key, _Feeds]] | None = None) -> None:
    """Device 0 (so every device) runs to the end, every semaphore ends at 0, and every
    DMA wait expects a sum of the sizes of the DMAs on its semaphore (`check.byte_findings`).
    Decided from `_feeds` (`feeds`, if the caller has them): run alone, device 0 reaches a
    wait with every deposit of its earlier events made (its deposit into device t's
    semaphore is device -t's into its own) and every earlier wait's demand taken, so it
    blocks there iff those deposits fall short of the wait's cumulative demand; it stops at
    the first such wait in program order."""
    every, dma = _feeds(program) if feeds is None else feeds
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
        raise _Unclear(f"a hang at line {events[hang].line}")
    for fed in every.values():
        if sum(total[-1] for total in fed.total.values()) != (fed.demand[-1] if fed.demand else 0):
            raise _Unclear("a semaphore ends non-zero")
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
        raise _Unclear(f"a byte count mismatch at line {events[wrong].line}")


# -- the order -----------------------------------------------------------------------

class _Feeds:
    """What adds to one semaphore of device 0: per sending device (offset), its events
    and their indices in program order, what each adds and the running totals; and device
    0's waits on it, in program order, with the cumulative demand up to each. Filled by
    `_feeds`, then read only."""

    def __init__(self) -> None:
        self.events: dict[int, list[Event]] = {}
        self.amount: dict[int, list[int]] = {}
        self.waits: list[int] = []
        self.values: list[int] = []
        self.signals = False  # some feed is a signal, not a DMA

    def finish(self) -> None:
        self.index = {k: [ev.index for ev in evs] for k, evs in self.events.items()}
        self.total = {k: [0, *accumulate(v)] for k, v in self.amount.items()}
        self.demand = list(accumulate(self.values))

    def copies(self, waits: bool) -> "_Feeds":
        """The DMAs among the feeds (the same lists when there is no signal), with the
        waits or none."""
        out = _Feeds()
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


def _feeds(program: SymmetricProgram) -> tuple[dict[Key, _Feeds], dict[Key, _Feeds]]:
    """Device 0's semaphores' feeds: device 0's deposit into device t's semaphore, rotated
    by -t, is device -t's deposit into device 0's. Every deposit's, and the DMAs' alone,
    in one pass over device 0's events, which also lists each semaphore's waits (the first
    dict has an entry for every semaphore waited on, fed or not; the second, for each one
    a DMA feeds, its waits if it is a DMA semaphore, `order.dma_ends`)."""
    neg = group_of(program).neg
    offsets: dict[int, int] = {}  # owner -> offset of the sender, asked once per owner
    every: defaultdict[Key, _Feeds] = defaultdict(_Feeds)
    for ev in program.events:
        a = ev.action
        cls = type(a)
        if cls is SemWait:
            fed = every[(a.sem[1], a.sem[2])]
            fed.waits.append(ev.index)
            fed.values.append(a.value)
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


def _limits(feeds: _Feeds, row: Any, index: int) -> dict[int, int]:
    """Per offset, the feeds not forced after device 0's event `index` (whose cut row is
    `row`): own feeds before it, device k's before its event row[k]."""
    return {k: feeds.available(k, index if k == 0 else int(row[k])) for k in feeds.index}


SMALL = 64  # below this many devices, rows are lists: importing numpy would cost more


def _numpy(n: int) -> Any:
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
        self.np = _numpy(torus.n)
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


def quotient_order(program: SymmetricProgram, feeds: dict[Key, _Feeds] | None = None) -> Order:
    """The rows of the module docstring's backward sweep. Only waits and the events that
    feed another device's waits are visited: a row changes only at an event that forces
    some wait (an edge), and every event between two such shares the later one's row. A
    semaphore fed by device 0 alone (`_Feeds.own`) adds no edge, and whether its own feeds
    before a wait meet the demand needs no row: those waits are checked in one pass and
    not visited (the first failure, in the sweep's order, raises where the sweep would).
    `feeds`: `_feeds(program)[0]`, if the caller has it."""
    events, n = program.events, program.n
    torus = group_of(program)
    length = len(events)
    if feeds is None:
        feeds = _feeds(program)[0]
    visit: list[tuple[int, int, _Feeds | None]] = []  # (wait index, cumulative demand, its feeds)
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
            raise _Unclear("a wait the order cannot satisfy")
        apply_edges(i)
        if fed is None:
            raise _Unclear("a wait nothing feeds")
        limits = _limits(fed, cur, i)
        slack = sum(fed.total[k][c] for k, c in limits.items()) - demand
        if slack < 0:
            raise _Unclear("a wait the order cannot satisfy")
        for k, count in limits.items():
            if k == 0:
                continue  # program order already
            # The last necessary feed of device k implies its earlier ones.
            amount = fed.amount[k]
            j = count - 1
            while j >= 0 and amount[j] <= slack:
                j -= 1
            if j < 0:
                continue
            src = fed.index[k][j]
            if src >= i:
                raise _Unclear("an ordering against the ring's direction")
            back = neg(k)
            forced = edges.get(src)
            if forced is None:
                forced = edges[src] = {}
                heapq.heappush(pending, -src)
            forced[back] = min(forced.get(back, i), i)
            row_of[i] = cur
    if unmet >= 0:
        raise _Unclear("a wait the order cannot satisfy")
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


# -- races ---------------------------------------------------------------------------

def _ends(program: SymmetricProgram, order: Order, feeds: dict[Key, _Feeds] | None = None) -> tuple[list, list]:
    """`order.dma_ends` for device 0's semaphores, with prefix sums: a feed's interval
    ends at the first wait whose possible supply (feeds not forced after it) is no more
    than its cumulative demand. Per event index of device 0's DMA starts: the index of the
    wait that ends its source's interval (the read side), and its destination's (the write
    side) in the device it lands in, which for a remote DMA is its copy rotated into device
    0 (`_incoming`): one receive side per DMA, so one entry each. None: never (or no DMA).
    A semaphore fed by device 0 alone needs no rows: its feeds before a wait are those
    with a smaller index, and once all have ended no later wait changes anything.
    `feeds`: `_feeds(program)[1]`, if the caller has it."""
    if feeds is None:
        feeds = _feeds(program)[1]
    neg = group_of(program).neg
    offsets: dict[int, int] = {}
    row = order.cuts[0]
    length = len(program.events)
    read_end: list[int | None] = [None] * length
    write_end: list[int | None] = [None] * length
    np = _numpy(order.torus.n)
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
                limits = _limits(fed, row[w], w)
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


def _numpy_ends(np: Any, fed: _Feeds, line: _Line) -> dict[int, list[int | None]]:
    """`_ends` of one semaphore with numpy: per offset k, where each wait's limit falls
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
    return Event(delta, ev.index, ev.point, ev.line, moved, ev.invocation, ev.inner)


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


def _race_free(program: SymmetricProgram, order: Order, rot: Rotator, feeds: dict[Key, _Feeds] | None = None) -> bool:
    """Whether no two accesses to device 0's memory race (the module docstring): device 0's
    own accesses, its remote DMAs' send sides and the remote DMAs that land in it
    (`_Accesses`), each buffer's decided by `_concurrent_pairs`. `feeds`:
    `_feeds(program)[1]`, if the caller has it."""
    accs = _Accesses(program, _ends(program, order, feeds), rot, _Line(order))
    return not any(_concurrent_pairs(accs, group, order) for group in accs.groups(_numpy(order.torus.n)))


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
    np = _numpy(order.torus.n)
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
        near = keys if not narrow[i] else \
            keys[bisect.bisect_left(keys, first - width + 1):bisect.bisect_left(keys, last)]
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


# -- data flow -----------------------------------------------------------------------

def _data_flow_right(spec: Spec, program: SymmetricProgram, meaning: "tuple[Collective, Buffers] | None",
                     boxes: Rotator | None = None) -> bool:
    """Device 0's memory replayed, each remote DMA landing what device -t sends, then
    compared with the collective's meaning. `boxes`: a Rotator of the same program whose
    rotated regions are reused (the races ask for the same ones). The gauge's steps only
    move dims accessed whole, and a whole dim stays whole, so a region moves the same
    under either."""
    if meaning is None:
        return True  # no meaning to check
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


def data_steps(program: SymmetricProgram, collective: Collective, buffers: Buffers,
               boxes: dict[tuple[str, int], tuple[int, ...]] | None = None) -> dict | None:
    """Steps under which device 0's events commute with the translation of the memory and
    the collective's meaning translates too (`gauge.py`): the boxes' steps (`boxes`, by
    default `SymmetricProgram.steps`) and the free steps of whole-accessed dims at 0, else at the
    meaning's device dims; None when no gauge does both."""
    return _gauge_steps(program.events, program.shapes, len(program.axis_sizes), program.group, collective,
                        buffers, program.steps if boxes is None else boxes)


def full_data_steps(program: Program, collective: Collective, buffers: Buffers,
                    boxes: dict[tuple[str, int], tuple[int, ...]]) -> dict | None:
    """`data_steps` of every device's program on a ring whose accesses on device d are
    device 0's moved by `boxes` (learned and checked on every device: `symmetry.memory_steps`),
    read off device 0's events: for the full analysis' meaning check (`core._meaning`)."""
    return _gauge_steps(program.devices[0], program.shapes, len(program.axis_sizes), Group.TRANSLATION, collective,
                        buffers, boxes)


def _gauge_steps(events: list[Event], shapes: dict[str, tuple[int, ...]], axes: int, group: Group,
                 collective: Collective, buffers: Buffers, boxes: dict[tuple[str, int], tuple[int, ...]]) -> dict | None:
    xor = group is Group.XOR
    gauge = Gauge(events, boxes, shapes, axes, xor)
    tried = [{}] if xor else [{}, device_dims(buffers, axes)]
    for prefer in tried:
        steps = gauge.steps(prefer)
        if steps is not None and _rotates(collective, buffers, shapes, axes, group, steps):
            return steps
    return None


# Device 0 events from which the data flow runs in a second process (`clean`). Measured on
# a 2-core machine whose timings vary by a third from run to run (best and median of 5,
# `--jobs 1` against 2): at 10,000 events the fork and the pages it copies cost what the
# overlap saves; from 20,000 the best times are within 5% (either way) or up to 12% better,
# and the medians 5-30% better.
FORK_EVENTS = 20_000


def clean(spec: Spec, program: SymmetricProgram, meaning: "tuple[Collective, Buffers] | None",
          jobs: int | None = None) -> bool:
    """True when the rotated program runs to the end with every semaphore at 0, has no race
    and computes the collective; False when something fails or the quotient cannot tell.
    `meaning`: `(Collective, Buffers)`, or None for no meaning check; `spec` names the
    buffers' kinds (`spec.Spec`: a schedule, or a traced kernel's description). (Routes and
    megacore rules are checked by `core.on_quotient` on the same events.)

    With `jobs` > 1 (default `background.default_jobs()`) and at least `FORK_EVENTS` events,
    the data flow runs in a forked child while this process checks the run, the order and
    the races (`background.Background`): the same two answers, in about the time of the
    longer half. The child's data flow computes its own rotated regions (the serial one
    reuses the races'); a region rotates the same either way."""
    jobs = default_jobs() if jobs is None else jobs
    flow = None
    if jobs > 1 and meaning is not None and len(program.events) >= FORK_EVENTS:
        flow = Background(lambda: _flow_clean(spec, program, meaning))
    try:
        every, dma = _feeds(program)
        _run(program, (every, dma))
        order = quotient_order(program, every)
        rot = Rotator(program)
        if not _race_free(program, order, rot, dma):
            return False
        answer = flow.result() if flow is not None else None
        return answer if answer is not None else _data_flow_right(spec, program, meaning, rot)
    except (_Unclear, NotRotational):
        return False
    finally:
        if flow is not None:
            flow.close()


def _flow_clean(spec: Spec, program: SymmetricProgram, meaning: "tuple[Collective, Buffers] | None") -> bool:
    """The data flow's part of `clean`'s answer: a quotient that cannot tell is a no."""
    try:
        return _data_flow_right(spec, program, meaning)
    except (_Unclear, NotRotational):
        return False
