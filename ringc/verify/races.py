"""Race-freedom over every interleaving.

An access is a region of one device's memory read or written over an interval of
events: a DMA reads its source from its start until the wait that guarantees the send
is done, and writes its destination from its start until the wait that guarantees the
bytes landed (`order.dma_ends`); compute reads and writes at its own event. Two accesses
to overlapping memory, at least one a write, race unless one must end before the other
starts (`order.Order.before`). Both relations hold over all interleavings, so this
decides race-freedom for the whole schedule, not for one execution.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from .events import Compute, DmaStart, Event, Program, Region, SemWait, Signal, sem_text
from .findings import Finding
from .order import DmaEnds, Order
from .simulate import Machine


@dataclass(frozen=True)
class Access:
    region: Region
    write: bool
    start: Event
    end: Event | None      # the event after which it is over; None: never guaranteed
    what: str              # e.g. "DMA `pass` from device 1 writes"

    @property
    def point(self) -> bool:
        return self.end is self.start


def describe(ev: Event) -> str:
    a = ev.action
    if isinstance(a, DmaStart):
        to = f"device {a.dst.device} " if a.remote else ""
        return f"start {'remote' if a.remote else 'local'} copy `{a.copy}`: {a.src.text()} -> {to}{a.dst.text()}"
    if isinstance(a, SemWait):
        what = f"{a.why} `{a.copy}`" if a.copy else a.why
        return f"{what}: wait {sem_text(a.sem)} >= {a.value}"
    if isinstance(a, Signal):
        return f"signal {sem_text(a.sem)} on device {a.sem[0]} (+{a.inc})"
    if isinstance(a, Compute):
        if a.kind == "enter":
            return f"enter the kernel (call {ev.invocation + 1}): {a.dst.text()} now belongs to it"
        if a.kind == "allocate":
            return f"the pipeline allocates {a.dst.text()} (garbage until written)"
        if a.kind == "zero":
            return f"zero {a.dst.text()}"
        if a.kind == "matmul":
            return f"{a.dst.text()} {'+=' if a.accumulate else '='} {a.src.text()} @ {a.rhs.text()}"
        if a.kind == "cast":
            return f"{a.dst.text()} = cast({a.src.text()})"
        if a.base is not None:
            return f"{a.dst.text()} = {a.base.text()} + {a.src.text()}"
        op = "+=" if a.kind == "accumulate" else "="
        return f"{a.dst.text()} {op} {a.src.text()}"
    return repr(a)


def accesses(program: Program, ends: DmaEnds) -> list[Access]:
    out: list[Access] = []
    for events in program.devices:
        for ev in events:
            a = ev.action
            if isinstance(a, DmaStart):
                if not 0 <= a.dst.device < program.n:
                    continue
                arrow = f" (device {ev.device} -> {a.dst.device})" if a.remote else ""
                out.append(Access(a.src, False, ev, ends.read_end.get(ev),
                                  f"copy `{a.copy}`{arrow} reads it as its source"))
                out.append(Access(a.dst, True, ev, ends.write_end.get(ev), f"copy `{a.copy}`{arrow} writes it"))
            elif isinstance(a, Compute) and a.kind == "enter":
                out.append(Access(a.dst, True, ev, ev, f"device {ev.device} enters the kernel (call "
                                  f"{ev.invocation + 1}; before that the memory belongs to whatever ran before)"))
            elif isinstance(a, Compute) and a.kind == "allocate":
                out.append(Access(a.dst, True, ev, ev, "a pipeline allocates it"))
            elif isinstance(a, Compute):
                verb = {"zero": "zeroes", "assign": "assigns", "accumulate": "accumulates into",
                        "cast": "casts into", "matmul": "multiplies into"}[a.kind]
                out.append(Access(a.dst, True, ev, ev, f"`{a.kind}` {verb} it"))
                for r in a.reads:
                    out.append(Access(r, False, ev, ev, f"`{a.kind}` reads it"))
    return out


def _ordered(order: Order, first: Access, second: Access) -> bool:
    """`first` is over before `second` begins, in every interleaving."""
    if first.point:
        return order.before(first.start, second.start)
    return first.end is not None and order.before(first.end, second.start)


def _why(program: Program, a: Access, b: Access) -> str:
    if a.end is None:
        return (f"nothing ever waits for copy `{a.start.action.copy}` to finish on that side, "
                f"so it may still be in flight at any later point")
    if a.point:
        return (f"{program.where(b.start)} can run before {program.where(a.start)} finishes, "
                f"and the other way round")
    return (f"{program.where(b.start)} can run before {program.where(a.end)} ({describe(a.end)}) "
            f"guarantees the copy is done, and nothing makes the copy start after it")


def _witness(program: Program, a: Access, b: Access) -> list[str]:
    """A concrete interleaving where both accesses are live at once."""
    for held in ([x for x in (a, b) if not x.point and x.end is not None],
                 [x for x in (a,) if not x.point and x.end is not None]):
        limits = [len(ev) for ev in program.devices]
        for acc in held:
            limits[acc.end.device] = min(limits[acc.end.device], acc.end.index)
        m = Machine(program, limits).run()
        done = set(m.order)
        if a.start in done and b.start in done:
            first_pos, last = sorted((m.order.index(a.start), m.order.index(b.start)))
            involved = {a.start.device, b.start.device, a.region.device}
            steps = [e for e in m.order[:last + 1] if e.device in involved]
            # Keep both racing events and a little context before the first one.
            start = max(0, steps.index(m.order[first_pos]) - 4)
            steps = steps[start:]
            if len(steps) > 16:
                steps = steps[:6] + [e for e in steps[6:-6] if e in (a.start, b.start)] + steps[-6:]
            lines = [f"{'>' if e in (a.start, b.start) else ' '} {program.where(e)}: {describe(e)}"
                     for e in steps]
            for acc in held:
                lines.append(f"  ... {program.where(acc.end)} ({describe(acc.end)}) has not happened yet")
            return lines
    return []


def _local(acc: Access) -> bool:
    """Started and finished by the device that owns the memory: ordered by program order."""
    dev = acc.region.device
    return acc.start.device == dev and acc.end is not None and acc.end.device == dev


def _candidate_pairs(group: list[Access]):
    """The pairs of one memory's accesses that may race. Two local accesses race iff their
    program-order intervals overlap, so those are found by a sweep over program order
    (a pipeline's many window accesses never meet pairwise); the few pairs with a remote
    access are enumerated."""
    local = sorted((a for a in group if _local(a)), key=lambda a: a.start.index)
    active: list[Access] = []   # local accesses still live at the current program position
    for b in local:
        active = [a for a in active if a.end.index >= b.start.index]
        yield from ((a, b) for a in active)
        if not b.point:
            active.append(b)
    remote = [a for a in group if not _local(a)]
    rank = {id(a): i for i, a in enumerate(remote)}
    others = sorted(group, key=lambda acc: acc.region.box[0][0])
    for i, a in enumerate(remote):
        for b in others:  # spatial sweep on the leading dimension
            if b.region.box[0][0] >= a.region.box[0][1]:
                break
            if rank.get(id(b), len(remote)) > i:
                yield (a, b)


def find_races(program: Program, order: Order, ends: DmaEnds, limit: int = 20) -> list[Finding]:
    by_memory: dict[tuple[int, str], list[Access]] = defaultdict(list)
    for acc in accesses(program, ends):
        by_memory[(acc.region.device, acc.region.buffer)].append(acc)
    findings: list[Finding] = []
    seen: set[tuple[int, int]] = set()
    for group in by_memory.values():
        for a, b in _candidate_pairs(group):
            if not (a.write or b.write) or a.start is b.start or not a.region.overlaps(b.region):
                continue
            if _ordered(order, a, b) or _ordered(order, b, a):
                continue
            key = (a.start.line, b.start.line)
            if key in seen:
                continue  # one finding per pair of ops; the first instance explains it
            seen.add(key)
            first, second = (a, b) if not a.point else (b, a)
            mem = f"device {a.region.device}'s `{a.region.text()}`"
            if b.region.box != a.region.box:
                mem += f" (overlapping `{b.region.text()}`)"
            msg = (f"race on {mem}: {first.what} from {program.where(first.start)}, while "
                   f"{second.what} at {program.where(second.start)}. Nothing orders them: "
                   f"{_why(program, first, second)}")
            findings.append(Finding("race", msg, event=second.start, related=[first.start],
                                    trace=_witness(program, first, second)))
            if len(findings) >= limit:
                return findings
    return findings
