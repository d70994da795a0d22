"""The quotient check of a `cores: 2` program: chip 0's two cores as one process.

`rotation._cores_unroll` proves that every chip's core c runs chip 0's core-c events
translated by the chip. The symmetric back ends (`symmetric/`) take one representative
process, so `composed` joins the two cores into one: core 0's events up to its wait for
core 1 to end, then core 1's body, then core 0's exit, with core 1's own VMEM buffers and
semaphores renamed (`NAME@core1`) so that they stay its own. Why that program decides the
one with a process per core (`Unroller.core_events`), when `composed` makes it:

- The cores share no semaphore: every semaphore is a core's own and a remote copy or
  signal goes to the same core (`unroll.on_core`); only the launch and join counts join
  them, and the composition keeps their order (core 1 runs after core 0's entry and
  before its exit). So no chain of synchronisation leads from a core-1 event to a core-0
  event, and the one-process program orders each core's events among themselves exactly
  as the two-process program does: the same runs of each core (hangs, balance) and the
  same races between two events of one core.
- It orders every core-0 event of a chip before its core-1 events, which would hide a
  race between the cores: `separated` rules that out first. For every HBM buffer both
  cores touch, one of them writing, their accesses (the kernel's entry and exit aside:
  they come before and after both cores) lie in disjoint index ranges of a dimension that
  no translation moves (its step is 0 along every axis): no element is touched by both
  cores where one of them writes, on any chip.
- With no element shared that way, the final memory is each core's writes together,
  which is what the composition computes; the meaning is checked on it.

`check` takes the composition's verdict only when it is clean; any finding sends the
schedule to the full analysis, which names the core of each event.
"""

from __future__ import annotations

from collections import defaultdict

from .events import Action, Compute, DmaStart, Event, Program, Region, SemId, SemWait, Signal, remapped
from .symmetric.program import SymmetricProgram
from .unroll import CORE_JOIN, CORE_LAUNCH

__all__ = ["composed", "separated", "CORE_SUFFIX"]

CORE_SUFFIX = "@core"  # + the core: a second core's own buffers and semaphores in the composition

_BOUNDARY = ("enter", "exit", "allocate")


def _launch_or_join(ev: Event) -> bool:
    a = ev.action
    return isinstance(a, (Signal, SemWait)) and a.sem[1].startswith((CORE_LAUNCH, CORE_JOIN))


def _own(rep: Program) -> set[str]:
    """The buffers each core has its own of (VMEM): core 1's are on its process, past the chips."""
    n = rep.device_count
    return {r.buffer for ev in rep.devices[n] for r in _regions(ev.action) if r.device >= n}


def separated(sym: SymmetricProgram) -> bool:
    """No HBM element is touched by both cores with a write (the module docstring): for
    each buffer of the chip's memory both cores touch, one of them writing, a dimension
    that no translation moves on which the cores' index ranges do not meet."""
    rep = sym.representatives
    n, own = rep.device_count, _own(rep)
    touched: list[dict[str, list[tuple[Region, bool]]]] = [defaultdict(list) for _ in range(rep.cores)]
    for c in range(rep.cores):
        for ev in rep.devices[c * n]:
            a = ev.action
            if isinstance(a, DmaStart):
                accesses = [(a.src, False), (a.dst, True)]
            elif isinstance(a, Compute) and a.kind not in _BOUNDARY:
                accesses = [(r, False) for r in a.reads] + [(a.dst, True)]
            else:
                continue
            for region, writes in accesses:
                if region is not None and region.buffer not in own:  # the chip's memory, not a core's VMEM
                    touched[c][region.buffer].append((region, writes))
    for buffer in set(touched[0]) & set(touched[1]):
        sides = [touched[0][buffer], touched[1][buffer]]
        if not any(w for side in sides for _, w in side):
            continue  # both only read it
        dims = len(sides[0][0][0].box)
        if not any(all(s == 0 for s in sym.steps.get((buffer, d), ())) and _apart(sides, d) for d in range(dims)):
            return False
    return True


def _apart(sides: list[list[tuple[Region, bool]]], dim: int) -> bool:
    """The two cores' index ranges along `dim` do not meet."""
    spans = [sorted({r.box[dim] for r, _ in side}) for side in sides]
    return all(b <= c or d <= a for a, b in spans[0] for c, d in spans[1])


def composed(sym: SymmetricProgram) -> SymmetricProgram | None:
    """The one-process program of chip 0's cores (the module docstring); None when the
    cores may touch one HBM element with a write (`separated`), or the program is not the
    two cores' of `rotation._cores_unroll`."""
    rep = sym.representatives
    n = rep.device_count
    if rep.cores != 2 or not separated(sym):
        return None
    core0, core1 = rep.devices[0], rep.devices[n]
    if not (_sems_on(core0, n, first=True) and _sems_on(core1, n, first=False)):
        return None  # a semaphore both cores touch: not the program `on_core` makes
    join = next((i for i, ev in enumerate(core0) if isinstance(ev.action, SemWait)
                 and ev.action.sem[1].startswith(CORE_JOIN)), None)
    if join is None or any(_launch_or_join(ev) for ev in core0[join + 1:]):
        return None  # (one invocation: one join)
    own = _own(rep)
    body = [ev for ev in core1 if not _launch_or_join(ev)]
    second = {id(ev) for ev in body}
    order = [ev for ev in [*core0[:join], *body, *core0[join + 1:]] if not _launch_or_join(ev)]
    events: list[Event] = []
    for ev in order:
        action = _renamed(ev.action, n) if id(ev) in second else ev.action
        events.append(Event(0, len(events), ev.point, ev.line, action, ev.invocation, ev.inner, ev.loops))
    renamed = lambda name: f"{name}{CORE_SUFFIX}1"  # noqa: E731
    shapes = {**rep.shapes, **{renamed(b): rep.shapes[b] for b in own}}
    kinds = {**rep.sem_kinds, **{renamed(s): k for s, k in rep.sem_kinds.items()}}
    dtypes = {**rep.dtypes, **{renamed(b): rep.dtypes[b] for b in own if b in rep.dtypes}}
    moved = {id(ev): new for ev, new in zip(order, events)}
    targets = [(moved[id(ev)], t) for ev, t in rep.targets if id(ev) in moved]
    program = Program(rep.schedule_name, rep.file, n, rep.grid_names, [events], kinds, shapes, targets,
                      axis_sizes=dict(rep.axis_sizes), dtypes=dtypes, parallel=rep.parallel, cores=rep.cores,
                      front=rep.front)
    steps = {**sym.steps, **{(renamed(b), d): v for (b, d), v in sym.steps.items() if b in own}}
    return SymmetricProgram(program, steps)


def _sems_on(events: list[Event], n: int, first: bool) -> bool:
    """Every semaphore of `events` but the launch and join counts is core 0's (owner < n,
    `first`) or core 1's (owner >= n): the cores share none."""
    for ev in events:
        if _launch_or_join(ev):
            continue
        a = ev.action
        sems = ([a.send_sem, a.recv_sem] if isinstance(a, DmaStart) else
                [a.sem] if isinstance(a, (SemWait, Signal)) else [])
        if any(s is not None and (s[0] < n) != first for s in sems):
            return False
    return True


def _regions(a: Action) -> list[Region]:
    if isinstance(a, DmaStart):
        return [a.src, a.dst]
    if isinstance(a, Compute):
        return [r for r in (a.dst, *a.reads) if r is not None]
    return []


def _renamed(a: Action, n: int) -> Action:
    """A core-1 action on chip 0 with its own VMEM and semaphores renamed, back on chip numbering."""
    def region(r: Region) -> Region:
        return r if r.device < n else Region(f"{r.buffer}{CORE_SUFFIX}1", r.device - n, r.box, r.kept, r.itemsize)

    def sem(s: SemId) -> SemId:
        return (s[0] - n if s[0] >= n else s[0], f"{s[1]}{CORE_SUFFIX}1", s[2])
    return remapped(a, region, sem)
