"""How the data in a dimension moves under a translation, where no box says it.

`rotation.py` proves that every box of a buffer moves along each dimension by a fixed
step per device (`SymmetricProgram.steps`, (buffer, dim) -> step vector): device d's box is
device 0's moved by r . d. A dimension only ever accessed *whole* gets no step there:
any step maps its one box onto itself. The quotient's data flow needs more than boxes,
though. It reads device d's memory as device 0's translated: every device id moved by d,
and every buffer dimension by a step, whole or not (`symmetric.moves.Rotator.pieces`). That
reading is right iff every event that moves data commutes with the translation.

**The condition.** Take an event that maps dimension i of a read region elementwise onto
dimension j of its destination (a copy, an accumulate, a matmul's free dims): position
lo_s + k goes to lo_d + k. On device d the read box starts at lo_s + m_s . d and the
destination at lo_d + m_d . d, where m is the dimension's step r if the access is partial
(its box moves) and 0 if it is whole (its box is the whole dimension on every device). If
device d's memory is device 0's translated (position p of device 0's buffer is at
p + r . d on device d), device d's event reads device 0's positions lo_s + k + (m_s - r_s) . d
and writes what device 0 has at lo_d + k + (m_d - r_d) . d. The result is translated
iff those agree for every d:

    eff(read, i) == eff(destination, j),   eff = r for a whole access, 0 for a partial one.

Partial accesses (eff 0 on both sides) always agree: the boxes carry the data along. A
whole access carries nothing, so its dimension's step must be the other side's. A
contracted dimension is summed over: it must not move at all (eff 0). A dimension picked
by a point index has length 1, so its eff is 0 either way.

**The gauge.** The steps `rotation.py` found are fixed; the step of a dimension accessed
only whole is free. Equal-eff constraints join free steps into classes (union-find); a
class meeting a fixed step takes it. Two different fixed steps meeting mean the events
do not commute with any translation of the memory: `Gauge.steps` returns None and the
quotient leaves the verdict to the full analysis (before, such a program was replayed
as if they commuted: tests/test_quotient.py, `test_whole_copies_pin_their_steps`).
A free class no constraint fixes may take any step; the caller offers the ones the
collective's meaning needs (the device dims of its input and output: `device_dims`), and
any choice is a correct reading of the same run.

Under the XOR group (`xor.py`) a step says only whether a dimension moves (its index is
XORed by d): steps compare by that.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

from ..collectives import Buffers
from ..ir.rules import RuleTable
from .events import Compute, DmaStart, Event, Region, matmul_dims

__all__ = ["Gauge", "PAIRS", "device_dims"]

Step = tuple[int, ...]
Dim = tuple[str, int]  # (buffer, dim)

# `PAIRS[kind](compute)`: the (read region, read dim, destination dim) triples a compute
# maps elementwise onto its destination, and the (region, dim) pairs it sums over. Kinds
# that move no data from a read (zero, opaque, the model's own writes) have none.
PAIRS: RuleTable[Callable[[Compute], tuple[list[tuple[Region, int, int]], list[tuple[Region, int]]]]] = (
    RuleTable("gauge (ringc/verify/gauge.py PAIRS)", "compute"))


def _kept(src: Region, dst: Region) -> list[tuple[Region, int, int]]:
    """A copy's mapping: the kept dims of each side in order (`semantics.Memory.translate`)."""
    return [(src, i, j) for i, j in zip(src.kept, dst.kept)]


PAIRS.register("enter", "allocate", "exit", "zero", "opaque", "signal")(lambda a: ([], []))
PAIRS.register("assign", "cast", "load")(lambda a: (_kept(a.src, a.dst), []))
PAIRS.register("accumulate")(lambda a: (_kept(a.src, a.dst) + (_kept(a.base, a.dst) if a.base is not None else []), []))


@PAIRS.register("matmul")
def _matmul(a: Compute) -> tuple[list[tuple[Region, int, int]], list[tuple[Region, int]]]:
    """dst = src @ rhs (`semantics.Memory.matmul`): src's free dim onto dst's rows, rhs's
    onto its columns; both contracted dims summed over."""
    ka, ra, kb, cb = matmul_dims(a.src, a.rhs, a.contract)
    rd, cd = a.dst.kept
    return [(a.src, ra, rd), (a.rhs, cb, cd)], [(a.src, ka), (a.rhs, kb)]


class Gauge:
    """The equal-eff constraints of device 0's events (module docstring) over `steps`, the
    fixed steps of a translation-symmetric program, on buffers of `shapes`."""

    def __init__(self, events: Iterable[Event], steps: Mapping[Dim, Step], shapes: Mapping[str, tuple[int, ...]],
                 axes: int, xor: bool = False):
        self.fixed, self.shapes, self.axes, self.xor = steps, shapes, axes, xor
        self.zero: Step = (0,) * axes
        self.parent: dict[Dim, Dim] = {}
        self.value: dict[Dim, Step] = {}  # per class root that a fixed step pins
        self.conflict = False
        # An action's constraints depend only on which dims of each region are whole: each
        # distinct (kind, buffers, kept dims, whole dims) is joined once.
        # The unroller shares Region objects between events, so a region's shape is kept by
        # its id (and an action seen is skipped by its id) while the events, which hold
        # every action and region, are alive.
        seen: set[tuple] = set()
        shaped: dict[int, tuple] = {}
        acted: set[int] = set()  # the unroller shares an action between the events that repeat it
        shape = self._shape

        def of(region: Region | None) -> tuple | None:
            if region is None:
                return None
            s = shaped.get(id(region))
            if s is None:
                s = shaped[id(region)] = shape(region)
            return s
        for ev in events:
            a = ev.action
            cls = type(a)
            if cls is not DmaStart and cls is not Compute or id(a) in acted:
                continue
            acted.add(id(a))
            if cls is DmaStart:
                key = (of(a.src), of(a.dst))
            else:
                key = (a.kind, a.contract, of(a.dst), of(a.src), of(a.rhs), of(a.base))
            if key in seen:
                continue
            seen.add(key)
            pairs, summed = (_kept(a.src, a.dst), []) if cls is DmaStart else PAIRS[a.kind](a)
            for src, i, j in pairs:
                self._join(self._eff(src, i), self._eff(a.dst, j))
            for region, i in summed:
                self._join(self._eff(region, i), self._norm(self.zero, 1))

    def _shape(self, region: Region | None) -> tuple | None:
        """What of a region the constraints read: its buffer, kept dims and whole dims."""
        if region is None:
            return None
        shape = self.shapes[region.buffer]
        return (region.buffer, region.kept,
                tuple(hi - lo == size for (lo, hi), size in zip(region.box, shape)))

    # -- the constraint terms: a fixed step, or a free dimension -------------------------
    def _norm(self, step: Step, size: int) -> Step:
        if self.xor:  # a move is "XOR the index by d" or none
            return (int(any(step)),)
        return tuple(v % size for v in step)

    def _eff(self, region: Region, dim: int) -> "Step | Dim":
        size = self.shapes[region.buffer][dim]
        lo, hi = region.box[dim]
        if hi - lo != size or size == 1:
            return self._norm(self.zero, size)  # a partial box carries its data along
        key = (region.buffer, dim)
        if key in self.fixed:
            return self._norm(self.fixed[key], size)
        return key

    def _find(self, x: Dim) -> Dim:
        root = x
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while x != root:
            self.parent[x], x = root, self.parent[x]
        return root

    def _join(self, a: "Step | Dim", b: "Step | Dim") -> None:
        fixed_a, fixed_b = not isinstance(a[0], str), not isinstance(b[0], str)
        if fixed_a and fixed_b:
            self.conflict = self.conflict or a != b
            return
        if fixed_a:
            a, b = b, a
        ra = self._find(a)
        if fixed_a or fixed_b:
            self._pin(ra, b)
            return
        rb = self._find(b)
        if ra != rb:
            self.parent[rb] = ra
            if rb in self.value:
                self._pin(ra, self.value.pop(rb))

    def _pin(self, root: Dim, step: Step) -> None:
        if self.value.setdefault(root, step) != step:
            self.conflict = True

    # -- the answer -----------------------------------------------------------------------
    def steps(self, prefer: Mapping[Dim, Step] | None = None) -> dict[Dim, Step] | None:
        """Every dimension's step: the fixed ones, each free class at its pinned step, else
        at the first step `prefer` offers for one of its members, else 0 (only nonzero
        steps are listed, as in `SymmetricProgram.steps`); None when the constraints conflict."""
        if self.conflict:
            return None
        chosen: dict[Dim, Step] = {}
        for dim, step in (prefer or {}).items():
            if dim not in self.fixed:
                chosen.setdefault(self._find(dim), self._norm(step, self.shapes[dim[0]][dim[1]]))
        out = dict(self.fixed)
        for name, shape in self.shapes.items():
            for i in range(len(shape)):
                key = (name, i)
                if key in self.fixed:
                    continue
                root = self._find(key)
                step = self.value.get(root, chosen.get(root, self.zero))
                if any(step):
                    out[key] = step
        return out


def device_dims(buffers: Buffers, axes: int) -> dict[Dim, Step]:
    """The steps a collective's meaning asks of its buffers' device dims (`Buffers.dims`,
    `collectives._Steps.devices`): dim i, one per axis, moves one block along axis i."""
    names = [buffers.input, buffers.output, buffers.rhs, buffers.values]
    return {(name, i): tuple(int(a == i) for a in range(axes))
            for name in names if name is not None and buffers.dims(name) == axes for i in range(axes)}
