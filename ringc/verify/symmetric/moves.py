"""How the group moves device 0's regions and symbolic values to device delta
(`Rotator`), every device's events spelled out from device 0's (`expand`), and the steps
under which the collective's meaning moves with the data (`meaning_rotates`,
`data_steps`, `gauge.py`)."""

from __future__ import annotations

from dataclasses import replace

from ...collectives import PRODUCT, Buffers, Collective, Piece
from ..events import Compute, DmaStart, Event, Program, Region, SemWait, Signal
from ..gauge import Gauge, device_dims
from ..semantics import base_name, canonical_value, device_run, device_span, sorted_terms, term_leaves, with_leaves
from ..xor import group_of
from .analysis import Unclear
from .program import Group, SymmetricProgram

__all__ = ["Rotator", "expand", "meaning_rotates", "data_steps", "full_data_steps"]


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
                raise Unclear(f"`{region.buffer}` dim {dim} wraps under rotation")
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
                raise Unclear("a product over a run of devices under XOR")
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
                    raise Unclear("a contraction dimension that moves under rotation")
                out.append((d, off))
            else:
                lo, hi = box[d]
                if xor and hi - lo > 1 and m:
                    raise Unclear(f"input `{name}` dim {len(out)} is read along a run that XOR permutes")
                x = (lo + off) ^ m if xor else (lo + off + m) % size
                if x + hi - lo > size:
                    raise Unclear(f"input `{name}` dim {len(out)} wraps under rotation")
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
            if cls is DmaStart or cls is Compute:  # moved inline: every other field as it is
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
            moved = Event(add[ev.device], ev.index, ev.point, ev.line, a, ev.invocation, ev.inner, ev.loops)
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
