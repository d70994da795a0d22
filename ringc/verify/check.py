"""`ringc check`: unroll for one N and run every check, in dependency order.

1. targets: every remote action goes to an existing device, a graph neighbour ideally;
2. the maximal run: hangs, semaphores non-zero at exit, DMAs never waited, byte counts;
3. if the run completes: races over all interleavings, then the symbolic data flow.
"""

from __future__ import annotations

import time
from collections import defaultdict

from ..ir import schema as S
from ..ir.errors import ScheduleError
from .. import topology
from .events import DmaStart, Event, Program, SemWait, Signal, feeders, sem_text
from .findings import Finding, Report
from .order import compute_order, dma_ends
from .races import describe, find_races
from .semantics import check_semantics
from .simulate import Machine, maximal_run
from .unroll import unroll


def check_targets(program: Program, topo: str) -> list[Finding]:
    try:
        graph = topology.build(topo, program.n)
    except ValueError as e:
        raise ScheduleError(str(e), file=program.file, fix="see `ringc check --help`") from None
    findings, seen = [], set()
    for ev, target in program.targets:
        a = ev.action
        what = f"copy `{a.copy}`" if isinstance(a, DmaStart) else f"{a.why} on {sem_text(a.sem)}"
        if not 0 <= target < program.n:
            if ("bad", ev.line) not in seen:
                seen.add(("bad", ev.line))
                findings.append(Finding(
                    "bad_target", f"{what} at {program.where(ev)} targets device {target}, which does not "
                                  f"exist for N={program.n}: is a `% N` missing?", event=ev))
        elif target == ev.device and isinstance(a, DmaStart):
            if ("self", ev.line) not in seen:
                seen.add(("self", ev.line))
                findings.append(Finding("self_target", f"{what} at {program.where(ev)} sends to its own "
                                                       "device; use a local copy", severity="warning", event=ev))
        elif target != ev.device:
            h = topology.hops(graph, ev.device, target)
            if h > 1 and ("far", ev.line) not in seen:
                seen.add(("far", ev.line))
                findings.append(Finding(
                    "not_neighbour", f"{what} at {program.where(ev)} goes to device {target}, {h} hops away "
                                     f"on a {topo} of {program.n}; it is routed through other devices and "
                                     "competes for their links", severity="warning", event=ev))
    return findings


def _adds(ev: Event) -> int:
    a = ev.action
    return a.inc if isinstance(a, Signal) else a.nbytes


def _hang_reason(program: Program, m: Machine, ev: Event, feeders: list[Event]) -> str:
    """Why the wait `ev` never passes: the events that would feed its semaphore and never
    run (its own later start: a wait before its start), or a count that can never add up."""
    sem = ev.action.sem
    missing = [f for f in feeders if f.index >= m.pc[f.device]]
    parts = []
    own = [f for f in missing if f.device == ev.device and f.index > ev.index]
    if own:
        f = own[0]
        dma = isinstance(f.action, DmaStart)
        what = f"the start of copy `{f.action.copy}`" if dma else "the signal"
        parts.append(f"{what} that would feed it, {program.where(f)}, comes after this wait on the same "
                     f"device: the wait on {sem_text(sem)} precedes the {'start' if dma else 'signal'} "
                     "of what it waits for")
    firsts: dict[int, Event] = {}
    for f in missing:
        if f.device != ev.device:
            firsts.setdefault(f.device, f)
    for d, f in list(firsts.items())[:3]:
        blocked = m.devices[d][m.pc[d]] if m.pc[d] < len(m.devices[d]) else None
        at = f", stuck at line {blocked.line}" if blocked is not None else ""
        parts.append(f"device {d} never gets to {describe(f)} ({program.where(f)}{at})")
    if len(firsts) > 3:
        parts.append(f"and {len(firsts) - 3} more devices")
    supply = sum(_adds(f) for f in feeders)
    demand = sum(e.action.value for e in program.devices[ev.device]
                 if isinstance(e.action, SemWait) and e.action.sem == sem)
    if not feeders:
        parts.append(f"nothing ever adds to {sem_text(sem)} on device {ev.device}")
    elif demand > supply:
        parts.append(f"over the whole kernel {sem_text(sem)} on device {ev.device} receives {supply} but "
                     f"its waits take {demand}: it is waited for more than it is signalled")
    if not parts:
        parts.append("every event that adds to it has run, and earlier waits consumed it")
    return "; ".join(parts)


def run_findings(program: Program, m: Machine) -> list[Finding]:
    findings: list[Finding] = []
    stuck = m.stuck()
    fed_by = feeders(program) if stuck else {}
    for ev in stuck:
        a: SemWait = ev.action
        reason = _hang_reason(program, m, ev, fed_by.get(a.sem, []))
        findings.append(Finding(
            "hang", f"hang at {program.where(ev)}: {describe(ev)}, but only "
                    f"{m.value[a.sem]} can ever arrive; {reason}", event=ev,
            trace=[f"{program.where(e)}: {describe(e)}" for e in m.order if e.device == ev.device][-6:]))
    # Byte counts: a DMA wait must expect the size of some DMA on its semaphore. (Which
    # DMA a wait ends up consuming depends on arrival order; sizes do not.)
    sizes: dict = defaultdict(dict)
    for events in program.devices:
        for ev in events:
            if isinstance(ev.action, DmaStart):
                for sem in (ev.action.recv_sem, ev.action.send_sem):
                    if sem is not None:
                        sizes[sem].setdefault(ev.action.nbytes, ev)
    flagged = set()
    for events in program.devices:
        for ev in events:
            a = ev.action
            if (not isinstance(a, SemWait) or program.sem_kinds.get(a.sem[1]) != "dma"
                    or not sizes[a.sem] or a.value in sizes[a.sem] or ev.line in flagged):
                continue
            flagged.add(ev.line)
            size, src = next(iter(sizes[a.sem].items()))
            findings.append(Finding(
                "byte_mismatch", f"{describe(ev)} at {program.where(ev)} expects {a.value} bytes, but the "
                                 f"DMAs on {sem_text(a.sem)} carry {', '.join(map(str, sizes[a.sem]))} bytes, "
                                 f"e.g. {describe(src)} at {program.where(src)}",
                event=ev, related=[src]))
    if stuck:
        return findings  # balance at exit is moot when the kernel never exits
    leftover: dict[tuple[str, int], list] = defaultdict(list)
    for sem, queue in m.deposits.items():
        for dep in queue:
            if dep.remaining:
                leftover[(sem, dep.event.line)].append(dep)
    reported = set()
    for (sem, _), deps in sorted(leftover.items(), key=lambda kv: (kv[0][0][0], kv[0][1])):
        ev: Event = deps[0].event
        kind_of_sem = program.sem_kinds.get(sem[1])
        key = (sem[1], ev.line)
        if key in reported:
            continue
        reported.add(key)
        total = sum(d.remaining for d in deps)
        if kind_of_sem == "dma" and isinstance(ev.action, DmaStart):
            side = "receive" if ev.action.recv_sem == sem else "send"
            findings.append(Finding(
                "dma_not_waited", f"{describe(ev)} at {program.where(ev)} is never waited on its {side} side: "
                                  f"{sem_text(sem)} on device {sem[0]} ends at {m.value[sem]} "
                                  f"({total} bytes from this copy)", event=ev))
        else:
            findings.append(Finding(
                "unbalanced", f"{sem_text(sem)} on device {sem[0]} ends at {m.value[sem]}, not 0: "
                              f"{describe(ev)} at {program.where(ev)} is never matched by a wait",
                event=ev))
    return findings


def check_program(sched: S.Schedule, program: Program, topo: str = "ring") -> Report:
    findings = check_targets(program, topo)
    m = maximal_run(program)
    findings += run_findings(program, m)
    if m.finished():
        order = compute_order(program)
        findings += find_races(program, order, dma_ends(program, order))
        for mm in check_semantics(sched, program, m.order, program.shapes)[:8]:
            findings.append(Finding(
                "wrong_result", f"device {mm.device}: {mm.where} ends as {mm.got}, but "
                                f"{sched.collective.kind} needs {mm.want}", device=mm.device))
    return Report(program, findings)


def check(sched: S.Schedule, n: int, *, topology: str = "ring", invocations: int = 1) -> Report:
    """Verify `sched` for `n` devices. Raises `ScheduleError` for bad input."""
    t0 = time.perf_counter()
    program = unroll(sched, n, invocations=invocations)
    report = check_program(sched, program, topology)
    report.seconds = time.perf_counter() - t0
    return report
