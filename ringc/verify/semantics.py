"""Symbolic data flow: prove the outputs equal the collective's meaning.

Like MSCCLang's chunk checker, but over regions instead of fixed chunks. Memory is a
set of boxes per (device, buffer), each holding a symbolic sum of *terms*. A term is
"input buffer `x` of device j, read through an affine index map", so a copy or an
accumulate just translates boxes and merges sums; nothing depends on the data's size.
At the end every output box is compared with what the collective prescribes: which
device's block (ppermute, all_gather, all_to_all) or which sum of blocks (psum,
psum_scatter).

Effects are applied in the order of the maximal run, a DMA's at its start. That is
sound for the outcome because the race analysis separately proves no access overlaps
an in-flight DMA; a racy schedule is reported as such and its data flow is moot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..ir import schema as S
from .events import Compute, DmaStart, Event, Program, Region

Box = tuple[tuple[int, int], ...]
# A term's index map: for each input dimension, (buffer dim, offset) or (None, constant).
IndexMap = tuple[tuple[int | None, int], ...]
Term = tuple[str, int, IndexMap]            # (input buffer, device, map); "?buf" = uninitialized buf
Value = tuple[Term, ...]                     # a sorted multiset: a sum of terms
UNINIT = "?"


@dataclass(frozen=True)
class Piece:
    box: Box
    value: Value


def _intersect(a: Box, b: Box) -> Box | None:
    out = []
    for (a0, a1), (b0, b1) in zip(a, b):
        lo, hi = max(a0, b0), min(a1, b1)
        if lo >= hi:
            return None
        out.append((lo, hi))
    return tuple(out)


def _subtract(a: Box, b: Box) -> list[Box]:
    """a minus b, as disjoint boxes."""
    if _intersect(a, b) is None:
        return [a]
    out, rest = [], list(a)
    for d, ((a0, a1), (b0, b1)) in enumerate(zip(a, b)):
        if a0 < b0:
            out.append(tuple(rest[:d] + [(a0, b0)] + rest[d + 1:]))
        if b1 < a1:
            out.append(tuple(rest[:d] + [(b1, a1)] + rest[d + 1:]))
        rest[d] = (max(a0, b0), min(a1, b1))
    return out


def _canonical(term: Term, box: Box) -> Term:
    """Fix map entries over dims where the box is a single index, so equal data compares equal."""
    name, dev, imap = term
    fixed = tuple((None, box[d][0] + off) if d is not None and box[d][1] - box[d][0] == 1 else (d, off)
                  for d, off in imap)
    return (name, dev, fixed)


def _value(terms: Iterable[Term], box: Box) -> Value:
    return tuple(sorted(_canonical(t, box) for t in terms))


class Memory:
    """Symbolic contents of every (device, buffer)."""

    def __init__(self, shapes: dict[str, tuple[int, ...]]):
        self.shapes = shapes
        self.pieces: dict[tuple[int, str], list[Piece]] = {}

    def init_input(self, device: int, name: str) -> None:
        box = tuple((0, s) for s in self.shapes[name])
        ident = tuple((d, 0) for d in range(len(box)))
        self.pieces[(device, name)] = [Piece(box, ((name, device, ident),))]

    def read(self, r: Region) -> list[Piece]:
        out, covered = [], []
        lo, hi = r.box[0]
        for p in self.pieces.get((r.device, r.buffer), []):
            if p.box[0][1] <= lo or p.box[0][0] >= hi:
                continue  # the common case, decided on the leading dim without a call
            ix = _intersect(p.box, r.box)
            if ix is not None:  # stored values are canonical for their own box already
                out.append(Piece(ix, p.value if ix == p.box else _value(p.value, ix)))
                covered.append(ix)
        gaps = [r.box]
        for c in covered:
            gaps = [g for gap in gaps for g in _subtract(gap, c)]
        out += [Piece(g, ((UNINIT + r.buffer, r.device, ()),)) for g in gaps]
        return out

    def write(self, r: Region, new: list[Piece]) -> None:
        key = (r.device, r.buffer)
        lo, hi = r.box[0]
        kept = [q for p in self.pieces.get(key, [])
                for q in ([p] if p.box[0][1] <= lo or p.box[0][0] >= hi else
                          [Piece(b, p.value) for b in _subtract(p.box, r.box)])]
        self.pieces[key] = kept + [Piece(p.box, _value(p.value, p.box)) for p in new]

    @staticmethod
    def translate(pieces: list[Piece], src: Region, dst: Region) -> list[Piece]:
        """Move pieces read from `src` to the matching coordinates of `dst`."""
        shift = {s: (d, dst.box[d][0] - src.box[s][0]) for s, d in zip(src.kept, dst.kept)}
        out = []
        for p in pieces:
            box = [dst.box[d] for d in range(len(dst.box))]
            for s, (d, off) in shift.items():
                box[d] = (p.box[s][0] + off, p.box[s][1] + off)
            terms = []
            for name, dev, imap in p.value:
                new_map = []
                for d, off in imap:
                    if d is None:
                        new_map.append((None, off))
                    elif d in shift:
                        nd, delta = shift[d]
                        new_map.append((nd, off - delta))
                    else:  # a point-indexed source dim: a constant coordinate
                        new_map.append((None, p.box[d][0] + off))
                terms.append((name, dev, tuple(new_map)))
            out.append(Piece(tuple(box), tuple(terms)))
        return out

    def copy(self, src: Region, dst: Region) -> None:
        self.write(dst, self.translate(self.read(src), src, dst))

    def accumulate(self, src: Region, dst: Region) -> None:
        incoming = self.translate(self.read(src), src, dst)
        result = []
        for a in self.read(dst):
            for b in incoming:
                ix = _intersect(a.box, b.box)
                if ix is not None:
                    result.append(Piece(ix, a.value + b.value))
        self.write(dst, result)

    def forget(self, dst: Region) -> None:
        """Whatever ran before the kernel left garbage here."""
        self.write(dst, [Piece(dst.box, ((UNINIT + dst.buffer, dst.device, ()),))])

    def zero(self, dst: Region) -> None:
        self.write(dst, [Piece(dst.box, ())])


def _unravel(j: int, dims: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for d in reversed(dims):
        j, c = divmod(j, d)
        out.append(c)
    return tuple(reversed(out))


def device_dims(sched: S.Schedule, buffer: str) -> int:
    """How many leading dims of `buffer` index devices (row-major), where the collective has
    such dims: its slot dims (`slots: N`, or `slots: [N_x, N_y]` over two axes), at least 1."""
    return max(1, len(sched.buffers[buffer].slots))


def expected(sched: S.Schedule, n: int, device: int, out_shape: tuple[int, ...],
             in_shape: tuple[int, ...]) -> list[Piece]:
    """What the collective prescribes for the output of `device`, as pieces. Device-indexed
    dims may be split row-major over several leading dims (see `device_dims`)."""
    c = sched.collective
    x = sched.io_buffer("input")
    full = tuple((0, s) for s in out_shape)
    rank = len(in_shape)
    k_in, k_out = device_dims(sched, x), device_dims(sched, sched.io_buffer("output"))

    def term(dev: int, imap: IndexMap) -> Term:
        return (x, dev, imap)

    def point(j: int) -> Box:
        return tuple((i, i + 1) for i in _unravel(j, out_shape[:k_out]))

    def fixed(dev: int) -> IndexMap:  # the input's device dims at `dev`'s block
        return tuple((None, i) for i in _unravel(dev, in_shape[:k_in]))

    ident = tuple((d, 0) for d in range(rank))
    if c.kind == "ppermute":
        return [Piece(full, (term((device - c.shift) % n, ident),))]
    if c.kind == "psum":
        return [Piece(full, tuple(term(j, ident) for j in range(n)))]
    if c.kind == "all_gather":
        shifted = tuple((d + k_out, 0) for d in range(rank))
        return [Piece(point(j) + full[k_out:], (term(j, shifted),)) for j in range(n)]
    if c.kind == "psum_scatter":
        imap = fixed(device) + tuple((d, 0) for d in range(rank - k_in))
        return [Piece(full, tuple(term(j, imap) for j in range(n)))]
    if c.kind == "all_to_all":
        imap = fixed(device) + tuple((k_out + d, 0) for d in range(rank - k_in))
        return [Piece(point(j) + full[k_out:], (term(j, imap),)) for j in range(n)]
    raise AssertionError(c.kind)


def shape_problem(sched: S.Schedule, n: int, in_shape: tuple[int, ...],
                  out_shape: tuple[int, ...]) -> str | None:
    """None if `out_shape` can hold the collective of `in_shape` on n devices, else the shape
    it needs. The device dims (`device_dims`) multiply to N."""
    kind = sched.collective.kind
    k_in, k_out = device_dims(sched, sched.io_buffer("input")), device_dims(sched, sched.io_buffer("output"))

    def devices(shape: tuple[int, ...], k: int) -> bool:
        size = 1
        for d in shape[:k]:
            size *= d
        return len(shape) > k and size == n

    if kind in ("ppermute", "psum"):
        ok, want = out_shape == in_shape, f"shape {list(in_shape)}"
    elif kind == "all_gather":
        ok = devices(out_shape, k_out) and out_shape[k_out:] == in_shape
        want = f"shape [N, *input shape] = {[n, *in_shape]} (N may be split over leading slots)"
    elif kind == "psum_scatter":
        ok = devices(in_shape, k_in) and out_shape == in_shape[k_in:]
        want = f"the input's leading N blocks (slots) and output shape {list(in_shape[k_in:])}"
    else:  # all_to_all
        ok = devices(in_shape, k_in) and devices(out_shape, k_out) and in_shape[k_in:] == out_shape[k_out:]
        want = f"input and output both of N={n} blocks (slots) of the same shape"
    return None if ok else want


def render_value(value: Value, box: Box) -> str:
    if not value:
        return "0"
    parts = []
    for name, dev, imap in value:
        if name.startswith(UNINIT):
            parts.append(f"uninitialized `{name[1:]}` of device {dev}")
            continue
        idx = []
        for d, off in imap:
            idx.append(str(off) if d is None else f"{box[d][0] + off}:{box[d][1] + off}")
        parts.append(f"{name}@{dev}[{', '.join(idx)}]")
    return " + ".join(parts)


def box_text(name: str, box: Box) -> str:
    return f"{name}[{', '.join(f'{a}:{b}' if b - a > 1 else str(a) for a, b in box)}]"


@dataclass(frozen=True)
class Mismatch:
    device: int
    where: str
    got: str
    want: str


def check_semantics(sched: S.Schedule, program: Program, order: list[Event],
                    shapes: dict[str, tuple[int, ...]]) -> list[Mismatch]:
    """Replay the run symbolically and compare every output box with the collective."""
    n = program.n
    mem = Memory(shapes)
    x, out = sched.io_buffer("input"), sched.io_buffer("output")
    for d in range(n):
        for name, buf in sched.buffers.items():
            if buf.kind == "input":
                mem.init_input(d, name)
    for ev in order:
        a = ev.action
        if isinstance(a, DmaStart):
            if 0 <= a.dst.device < n:
                mem.copy(a.src, a.dst)
        elif isinstance(a, Compute):
            if a.kind == "enter":
                mem.forget(a.dst)
            elif a.kind == "exit":
                continue  # the caller reads the memory as it is
            elif a.kind == "zero":
                mem.zero(a.dst)
            elif a.kind == "assign":
                mem.copy(a.src, a.dst)
            else:
                mem.accumulate(a.src, a.dst)
    mismatches = []
    want_shape = shape_problem(sched, n, tuple(shapes[x]), tuple(shapes[out]))
    if want_shape is not None:
        return [Mismatch(-1, out, f"shape {list(shapes[out])}",
                         f"{want_shape} for {sched.collective.kind} of `{x}` {list(shapes[x])}")]
    for d in range(n):
        full = tuple((0, s) for s in shapes[out])
        got = mem.read(Region(out, d, full, tuple(range(len(full))), 1))
        for w in expected(sched, n, d, shapes[out], shapes[x]):
            for g in got:
                ix = _intersect(g.box, w.box)
                if ix is None:
                    continue
                gv, wv = _value(g.value, ix), _value(w.value, ix)
                if gv != wv:
                    mismatches.append(Mismatch(d, box_text(out, ix), render_value(gv, ix), render_value(wv, ix)))
    return mismatches
