"""Broadcast copies: a remote copy that, on every device, sends one region to every other
device, the starts one right after another.

On a GPU behind an NVSwitch such a copy can go out as one multicast (`multimem.st`): the
source's data crosses its port once and the switch delivers it to every GPU, where per-peer
copies cross the port N - 1 times. The Mosaic GPU emitter (`codegen/mgpu.py`) writes it so.
The schedule's meaning is unchanged: every target gets the same bytes into the same region
that its own copy would have written, at the same point of the sender's program (nothing
runs between the starts, so nothing can change the source or act on the arrivals in
between); what multicast adds is a write into the sender's own copy of that region, which is
why no event of the program may touch it, unless that region is the copy's source (an
all-gather sending its block on from where it holds it): then the multicast writes there the
value it holds, and any use of it is as before (a write to the source before the copies
are waited for is a race in the schedule itself).

The test is on an unrolled program (one N and parameter set): a caller that emits code for
every N asks at the sizes it checks, as `ringc check` proves the schedule at those sizes.
"""

from __future__ import annotations

from typing import Iterable

from ..ir import schema as S
from .events import Compute, DmaStart, Program, Region

__all__ = ["broadcast_copies", "why_not_broadcast"]


def _regions(action: object, scratch: frozenset[str]) -> list[Region]:
    """The memory an event's action reads or writes, but for the model's own writes when the
    kernel starts (`enter`, `allocate`) and the caller taking back a scratch buffer (`exit`)."""
    if isinstance(action, DmaStart):
        return [action.src, action.dst]
    if isinstance(action, Compute):
        if action.kind in ("enter", "allocate") or (action.kind == "exit" and action.dst.buffer in scratch):
            return []
        return [r for r in (action.dst, action.src, action.rhs, action.base) if r is not None]
    return []


def why_not_broadcast(sched: S.Schedule, program: Program, name: str) -> str | None:
    """None when remote copy `name` is a broadcast in `program`, an unrolling of `sched`; else
    why not, in words. (The schedule's scratch buffers are no caller's: what they hold when the
    kernel ends does not matter.)"""
    scratch = frozenset(sched.buffers_of("hbm_scratch", "vmem_scratch"))
    n = program.n
    mine: list[Region] = []  # each device's own copy of the region the copy writes elsewhere
    for d, events in enumerate(program.devices):
        starts = [e for e in events if isinstance(e.action, DmaStart) and e.action.copy == name]
        if not starts:
            if n > 1:
                return f"device {d} never starts it"
            continue
        first = starts[0].action
        if not first.remote:
            return "it is a local copy"
        if [e.index for e in starts] != list(range(starts[0].index, starts[0].index + len(starts))):
            return f"on device {d} other events run between its starts"
        targets = sorted(e.action.dst.device for e in starts)
        if targets != [t for t in range(n) if t != d]:
            return f"device {d} sends it to devices {targets}, not to each other device once"
        if any((e.action.src, e.action.dst.buffer, e.action.dst.box) != (first.src, first.dst.buffer, first.dst.box)
               for e in starts):
            return f"device {d} sends different regions to different devices"
        if any(e.invocation != starts[0].invocation for e in starts):
            return f"device {d} starts it in several calls"
        own = Region(first.dst.buffer, d, first.dst.box, first.dst.kept, first.dst.itemsize)
        if own != first.src:  # (a copy of a region into the same region elsewhere: the multicast
            mine.append(own)  # writes ours with what it holds, so any use of it is as before)
    if not mine:
        return None
    by_device = {r.device: r for r in mine}
    for events in program.devices:
        for e in events:
            for region in _regions(e.action, scratch):
                own = by_device.get(region.device)
                if own is not None and region.overlaps(own):
                    return (f"device {region.device}'s own {own.text()} is used (line {e.line}): a multicast "
                            "would write it too")
    return None


def broadcast_copies(sched: S.Schedule, program: Program, names: Iterable[str] | None = None) -> set[str]:
    """Of the remote copies `names` (default: all of `sched`'s), those that are broadcasts in
    `program`, an unrolling of `sched`."""
    if names is None:
        names = [n for n, c in sched.copies.items() if c.remote]
    return {name for name in names if why_not_broadcast(sched, program, name) is None}
