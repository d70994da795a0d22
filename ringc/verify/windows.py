"""Pipeline windows fused in the data flow: a nested pipeline's blocks computed straight
from their HBM regions into their destinations, without the VMEM windows in between.

A nested pipeline (`pipeline:`, Pallas' `emit_pipeline`) copies each input block from
HBM into a slot of a VMEM window, computes on the slots, and copies each output slot back
to HBM. Replayed event by event (`semantics.apply`), every block moves three times (in,
compute, out), and the windows' own bookkeeping (a fresh window holds garbage:
`allocate`) costs as much again. `FusedMemory` replays the same events, but a copy-in only
notes which HBM region the slot now stands for (a *binding*), the body's computes on an
output slot wait (*pending*) until the slot is copied out, and then run once, with every
slot replaced by the region it stands for: an input slot by its binding's source, the
output slot by the copy's destination.

**Why the outcome is the same.** Let S be the region an input slot was loaded from, T the
region an output slot is copied to. Replayed, the input slot holds S's value as of the
copy-in; the body's computes map slots onto slots elementwise over their kept dims; the
copy-out writes T the output slot's value. Fused, the same computes run at the copy-out on
S and T: a copy maps kept dims onto kept dims in order, so S onto T goes as S onto the
slots onto T did, and every term names coordinates of input buffers, never of a window,
so each value comes out the same. That holds under these conditions, checked as the
events go; when one fails, `FusedMemory.step` raises `Unfused` and the caller replays
everything plainly:
- An output slot's first compute replaces all of it and does not read it
  (`Compute.overwrites`), so nothing the window held before reaches T; the later ones
  write the same box (the key is the slot's exact box), and read only it, bound input
  slots (with the very box and kept dims they were bound with) and non-window regions
  (each watched from that compute on, as the source of a binding of its own).
- Nothing else touches a window: a remote copy, a copy between windows, a compute outside
  the windows that reads an output slot, a copy-out of a slot with no pending compute, a
  copy-in into an output slot with pending ones, are refused. A compute outside the
  windows that reads input slots (an accumulator kept across the pipeline's steps) runs
  at its event, on their sources.
- Each binding's source still holds, when it is read, what it held when it was bound: every
  write in between (an event's, a landing's or a fused compute's; all go through
  `Memory.write`) that meets a watched source marks its binding stale, and a stale
  binding is never read.
The windows' own contents are not kept: outside the pattern above nothing reads them, and
no collective's output is a window. Every write to a non-window buffer happens at the
event where the replay makes it (a pending compute's at its copy-out), so the non-window
memory is the replay's after every event, including what a landing reads. Pieces may be
cut into different boxes than the replay's (the slot's pieces are not the source's), which
changes no value.
"""

from __future__ import annotations

from typing import Callable

from ..collectives import Box
from .events import COMPUTES, Compute, DmaStart, Event, Region
from .semantics import Memory, apply, box_meets

__all__ = ["Unfused", "FusedMemory"]


class Unfused(Exception):
    """The events leave the pattern `FusedMemory` proves: replay them plainly."""


class _Binding:
    """An input slot stands for `src` (its copy-in's source); `stale` once `src` was
    written since."""

    __slots__ = ("src", "stale")

    def __init__(self, src: Region) -> None:
        self.src, self.stale = src, False


def _source(b: _Binding) -> Region:
    """The region a binding stands for; refused once it was written since it was bound."""
    if b.stale:
        raise Unfused(f"`{b.src.buffer}` was written between its copy-in and its use")
    return b.src


Pending = list[tuple[Compute, dict[int, "_Binding | None"]]]


class FusedMemory(Memory):
    """A `Memory` that replays events with the pipeline windows `windows` fused (module
    docstring): `step` in place of `semantics.apply`."""

    rebuild_after = 64  # new bindings between two rebuilds of the watch (`_watching`)

    def __init__(self, shapes: dict[str, tuple[int, ...]], windows: frozenset[str]):
        super().__init__(shapes)
        self.windows = windows
        # input slots: window buffer -> slot box -> (slot region, binding)
        self.bound: dict[str, dict[Box, tuple[Region, _Binding]]] = {}
        # output slots: window buffer -> slot box -> (slot region, its computes, each with the bindings it reads)
        self.pending: dict[str, dict[Box, tuple[Region, Pending]]] = {}
        # source buffer -> every live binding (and some dead ones); None: rebuild (`_rebuild`)
        self._watch: dict[str, list[_Binding]] | None = {}
        self._added = 0  # bindings added since the last rebuild

    def step(self, ev: Event, n: int, remote_copy: Callable[[Event], None] | None = None) -> None:
        """`semantics.apply(self, ev, n, remote_copy)`, windows fused."""
        a, windows = ev.action, self.windows
        cls = type(a)
        if cls is DmaStart:
            into, out_of = a.dst.buffer in windows, a.src.buffer in windows
            if not into and not out_of:
                apply(self, ev, n, remote_copy)
            elif a.remote or (into and out_of):
                raise Unfused(f"{a.copy}: a remote copy or a copy between windows")
            elif into:
                self._load(a.src, a.dst)
            else:
                self._store(a.src, a.dst)
        elif cls is Compute:
            if a.dst.buffer in windows:
                self._compute(a)
            elif any(r.buffer in windows for r in a.reads):
                self._direct(a)
            else:
                COMPUTES[a.kind].effect(self, a)

    # -- the watch on bindings' sources ---------------------------------------------------
    def write(self, r: Region, new: list, canonical: bool = False) -> None:
        watch = self._watch
        if watch is None:
            watch = self._rebuild()
        bindings = watch.get(r.buffer)
        if bindings:
            for b in bindings:
                if b.src.device == r.device and box_meets(b.src.box, r.box):
                    b.stale = True
        super().write(r, new, canonical)

    def _watching(self, b: _Binding) -> _Binding:
        """`b`, watched from now on. Bindings that die stay watched (harmlessly) until the
        next rebuild, which comes after every `rebuild_after` new ones: the watch stays short."""
        if self._watch is not None:
            self._watch.setdefault(b.src.buffer, []).append(b)
            self._added += 1
            if self._added >= self.rebuild_after:
                self._watch = None
        return b

    def _rebuild(self) -> dict[str, list[_Binding]]:
        """The live bindings by source buffer: the bound slots' and those pending computes read."""
        live = {id(b): b for slots in self.bound.values() for _, b in slots.values()}
        live.update((id(b), b) for slots in self.pending.values() for _, ops in slots.values()
                    for _, reads in ops for b in reads.values() if b is not None)
        watch: dict[str, list[_Binding]] = {}
        for b in live.values():
            watch.setdefault(b.src.buffer, []).append(b)
        self._watch, self._added = watch, 0
        return watch

    # -- the pattern ---------------------------------------------------------------------
    def _load(self, src: Region, dst: Region) -> None:
        """A copy-in: the slot `dst` now stands for `src` (a slot it overlaps no longer does)."""
        box = dst.box
        if any(box_meets(b, box) for b in self.pending.get(dst.buffer, ())):
            raise Unfused(f"a copy into `{dst.buffer}`, which holds computed data")
        slots = self.bound.setdefault(dst.buffer, {})
        for b in [b for b in slots if b != box and box_meets(b, box)]:
            del slots[b]
        slots[box] = (dst, self._watching(_Binding(src)))

    def _input(self, r: Region) -> _Binding:
        """The binding an input slot read `r` stands for (same box and kept dims as loaded)."""
        bound = self.bound.get(r.buffer, {}).get(r.box)
        if bound is None or bound[0].kept != r.kept:
            raise Unfused(f"`{r.buffer}` is read where no copy-in loaded it")
        return bound[1]

    def _run(self, a: Compute, dst: Region, stand_in: Callable[[Region], Region]) -> None:
        """`a` into `dst`, each region it reads replaced by `stand_in`'s."""
        def read(r: Region | None) -> Region | None:
            return None if r is None else stand_in(r)
        COMPUTES[a.kind].effect(self, Compute(a.kind, dst, read(a.src), read(a.rhs), a.accumulate, read(a.base),
                                              a.contract, a.fn))

    def _direct(self, a: Compute) -> None:
        """A compute outside the windows that reads input slots (a matmul into an
        accumulator kept across the pipeline's steps): it runs now, on their sources."""
        self._run(a, a.dst, lambda r: _source(self._input(r)) if r.buffer in self.windows else r)

    def _compute(self, a: Compute) -> None:
        """A compute into a window slot: pending until the slot is copied out, or, for the
        model's own `enter`/`allocate`, the window's garbage (no slot stands for anything).
        What it reads outside the windows is watched from now on, as a binding of itself."""
        dst = a.dst
        if a.kind in ("enter", "allocate"):
            for table in (self.bound, self.pending):
                slots = table.get(dst.buffer, {})
                for b in [b for b in slots if box_meets(b, dst.box)]:
                    del slots[b]
            return
        if a.kind == "exit":  # the caller takes the memory back: no effect (`events.COMPUTES`)
            return
        slots = self.pending.setdefault(dst.buffer, {})
        entry = slots.get(dst.box)
        if entry is not None and entry[0].kept != dst.kept:
            raise Unfused(f"`{dst.buffer}` computed with other kept dims")
        reads: dict[int, _Binding | None] = {}  # per region read (by id): its binding; None: the slot itself
        for r in a.reads:
            if r.buffer not in self.windows:
                reads[id(r)] = self._watching(_Binding(r))
            elif r.buffer == dst.buffer and r.box == dst.box:
                if entry is None or r.kept != dst.kept:
                    raise Unfused(f"{a.kind} reads `{dst.buffer}` before it is computed")
                reads[id(r)] = None
            else:
                reads[id(r)] = self._input(r)
        if a.overwrites and None not in reads.values():  # (one that reads the slot adds to its computes)
            if (any(b != dst.box and box_meets(b, dst.box) for b in slots)
                    or any(box_meets(b, dst.box) for b in self.bound.get(dst.buffer, ()))):
                raise Unfused(f"{a.kind} into part of a slot of `{dst.buffer}`")
            slots[dst.box] = (dst, [(a, reads)])
        elif entry is None:
            raise Unfused(f"{a.kind} reads `{dst.buffer}` before it is computed")
        else:
            entry[1].append((a, reads))

    def _store(self, src: Region, dst: Region) -> None:
        """A copy-out: the slot's pending computes run with the slot replaced by `dst` and
        every other region read by its binding's source."""
        slots = self.pending.get(src.buffer, {})
        entry = slots.get(src.box)
        if entry is None or entry[0].kept != src.kept:
            raise Unfused(f"a copy out of `{src.buffer}` with nothing computed in it")
        for op, reads in entry[1]:
            self._run(op, dst, lambda r, reads=reads: dst if reads[id(r)] is None else _source(reads[id(r)]))
        del slots[src.box]
