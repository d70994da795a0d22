"""`ringc check`: unroll for one N and run every check, in dependency order.

1. targets and routes (`placement.py`): every remote action goes to an existing device,
   a neighbour on the topology ideally, and one the hardware can route to;
2. the maximal run: hangs, semaphores non-zero at exit, DMAs never waited, byte counts;
3. if the run completes: races over all interleavings, then the symbolic data flow.
"""

from __future__ import annotations

import gc
import time
from collections import Counter, defaultdict
from contextlib import contextmanager

from dataclasses import dataclass
from typing import Any, Callable

from ..collectives import Buffers, Collective, collective_of
from ..ir import schema as S
from ..errors import ScheduleError
from .. import topology
from math import prod

from .events import Compute, DmaStart, Event, Program, SemWait, Signal, deposits, feeders, sem_text
from . import messages as M
from .findings import Finding, Report, Severity
from .order import DMA_ORDERS, compute_order, dma_ends, sums_to
from . import quotient
from .placement import (Placement, labels, place, rotated_route_summary, route_findings, route_summary,
                        xor_route_summary, xor_routes_symmetric)
from .races import describe, event_accesses, find_races
from .semantics import box_inside, box_meets, check_semantics
from .simulate import Machine, maximal_run
from .symmetry import memory_steps
from .rotation import rotation_unroll
from .xor import xor_unroll
from .unroll import DataFault, unroll
from ..data import sample_text


def resolve_topology(sched: S.Schedule, n: int | None, topo: "str | topology.Topology",
                     along: str | None = None) -> Placement:
    """The schedule placed on `topo` (a `--topology` spelling; `ring` takes `n` devices)."""
    if isinstance(topo, str):
        try:
            topo = topology.parse(topo, n)
        except ValueError as e:
            raise ScheduleError(str(e), file=sched.file, fix="see `ringc check --help`") from None
    elif n is not None and n != topo.size:
        raise ScheduleError(f"topology {topo.spec} has {topo.size} devices, but N={n}", file=sched.file,
                            fix=f"pass {topo.size} devices or another topology")
    return place(sched, topo, along)


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
        parts.append(f"device {program.label(d)} never gets to {describe(f)} ({program.where(f)}{at})")
    if len(firsts) > 3:
        parts.append(f"and {len(firsts) - 3} more devices")
    supply = sum(_adds(f) for f in feeders)
    demand = sum(e.action.value for e in program.devices[ev.device]
                 if isinstance(e.action, SemWait) and e.action.sem == sem)
    if not feeders:
        parts.append(f"nothing ever adds to {sem_text(sem)} on device {program.label(ev.device)}")
    elif demand > supply:
        parts.append(f"over the whole kernel {sem_text(sem)} on device {program.label(ev.device)} receives {supply} but "
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
        findings.append(M.HANG.finding(
            at=program.where(ev), what=describe(ev), arrives=m.value[a.sem], reason=reason, event=ev,
            trace=[f"{program.where(e)}: {describe(e)}" for e in m.order if e.device == ev.device][-6:]))
    findings += byte_findings(program)
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
            findings.append(M.DMA_NOT_WAITED.finding(
                what=describe(ev), at=program.where(ev), side=side, sem=sem_text(sem), label=program.label(sem[0]),
                value=m.value[sem], total=total, event=ev))
        else:
            findings.append(M.UNBALANCED.finding(
                sem=sem_text(sem), label=program.label(sem[0]), value=m.value[sem], what=describe(ev),
                at=program.where(ev), event=ev))
    return findings


def byte_findings(program: Program) -> list[Finding]:
    """A DMA semaphore counts bytes from any DMA that signals it, so a wait may take the
    total of several DMAs (one descriptor sized to the total, used only for its wait), or a
    part of one: the counting model (`order.dma_ends`) is exact about what has landed, and
    hangs, balance and races follow from the counts. A wait whose byte count is no sum of
    the sizes of the DMAs on its semaphore (`sums_to`) is still suspicious (a descriptor of
    the wrong size): a warning, once per op, naming every DMA on that semaphore and their
    total."""
    on_sem: dict = defaultdict(list)
    for events in program.devices:
        for ev in events:
            if isinstance(ev.action, DmaStart):
                for sem in (ev.action.recv_sem, ev.action.send_sem):
                    if sem is not None:
                        on_sem[sem].append(ev)
    findings, flagged, sizes = [], set(), {}
    for events in program.devices:
        for ev in events:
            a = ev.action
            if (not isinstance(a, SemWait) or program.sem_kinds.get(a.sem[1]) != "dma"
                    or not on_sem[a.sem] or ev.line in flagged):
                continue
            dmas = on_sem[a.sem]
            if a.sem not in sizes:
                sizes[a.sem] = Counter(d.action.nbytes for d in dmas)
            if sums_to(a.value, sizes[a.sem]):
                continue
            flagged.add(ev.line)
            by_copy: dict[str, list[Event]] = defaultdict(list)
            for d in dmas:
                by_copy[d.action.copy].append(d)
            listed = "; ".join(
                f"copy `{name}` {len(evs)} x {evs[0].action.nbytes} bytes (first at {program.where(evs[0])})"
                if len(evs) > 1 else f"copy `{name}` {evs[0].action.nbytes} bytes ({program.where(evs[0])})"
                for name, evs in list(by_copy.items())[:6])
            if len(by_copy) > 6:
                listed += f"; and {len(by_copy) - 6} more copies"
            total = sum(d.action.nbytes for d in dmas)
            findings.append(M.BYTE_MISMATCH.finding(
                what=describe(ev), at=program.where(ev), value=a.value, sem=sem_text(a.sem),
                label=program.label(a.sem[0]), listed=listed, total=total, event=ev, related=[dmas[0]]))
    return findings


def dtype_findings(program: Program) -> list[Finding]:
    """A DMA copies bytes: between buffers of different element types it would reinterpret
    them, and Mosaic refuses it (`tpu.enqueue_dma` needs one type). Once per op line, at the
    copy's start, naming both types and the `cast` that converts in VMEM."""
    findings, seen = [], set()
    for events in program.devices:
        for ev in events:
            a = ev.action
            if not isinstance(a, DmaStart) or ev.line in seen:
                continue
            src, dst = program.dtypes.get(a.src.buffer), program.dtypes.get(a.dst.buffer)
            if src is None or dst is None or src == dst:
                continue
            seen.add(ev.line)
            findings.append(M.DTYPE_MISMATCH.finding(
                what=describe(ev), at=program.where(ev), src=a.src.buffer, src_dtype=src, dst=a.dst.buffer,
                dst_dtype=dst, event=ev))
    return findings


def _parallel_key(program: Program, ev: Event) -> tuple[int, ...]:
    return tuple(ev.point[k] for k in program.parallel if k < len(ev.point))


def parallel_findings(program: Program) -> list[Finding]:
    """A `parallel` grid axis promises that its iterations are independent: Mosaic may run
    them in any order, and a megacore chip splits the axis over its two TensorCores, each
    with its own VMEM and semaphores. So on each device, nothing at one index of a parallel
    axis may depend on what ran at another index of it:

    - memory: a region read (a compute's operand, an accumulated destination, a DMA's
      source) whose last writer before it, in grid order, ran at another index (a compute, a
      local DMA, or a remote DMA landing here, counted at its sender's grid point: SPMD
      steps line up, so a block received in step s and forwarded in step s + 1 ties the two
      steps together); a write stops counting once a later one covers it (a partly
      overwritten one still counts: conservative); inputs are never written;
    - semaphores: a wait that consumes (first in, first out) what this device deposited at
      another index on its own semaphore (a local DMA, a remote DMA's send side, a signal to
      itself); semaphores other devices also feed are left to the other checks.

    One finding per op line, at the dependent event, naming the axis and the event it
    depends on. The model's own writes (kernel entry and exit, a pipeline's fresh window)
    are no dependency."""
    if not program.parallel:
        return []
    findings, seen = [], set()

    def report(ev: Event, dep: Event, what: str) -> None:
        if ev.line in seen:
            return
        seen.add(ev.line)
        axes = [program.grid_names[k] for k in program.parallel
                if k < len(ev.point) and k < len(dep.point) and ev.point[k] != dep.point[k]]
        names = ", ".join(f"`{a}`" for a in axes)
        findings.append(M.PARALLEL_DEPENDENCY.finding(
            what=describe(ev), at=program.where(ev), how=what, dep=describe(dep), dep_at=program.where(dep),
            axes=names, event=ev, related=[dep]))

    every = [ev for events in [*program.devices, *program.second_core] for ev in events]
    remote_fed = {sem for ev in every for sem, _ in deposits(ev.action) if sem[0] != ev.device}
    landings: dict[int, list[Event]] = defaultdict(list)  # remote DMAs, by the device they land on
    for ev in every:
        if isinstance(ev.action, DmaStart) and ev.action.dst.device != ev.device:
            landings[ev.action.dst.device].append(ev)
    for d, core0 in enumerate(program.devices):
        # In grid order. A remote DMA's landing counts as a write at its sender's grid point
        # (before this device's own events there): SPMD steps line up, so a block received in
        # one step and used in the next is a dependency between the two steps.
        own = core0 + (program.second_core[d] if d < len(program.second_core) else [])
        events = sorted([((e.invocation, e.point, e.inner, e.index), False, e) for e in own]
                        + [((e.invocation, e.point, (), -1), True, e) for e in landings[d]], key=lambda t: t[0])
        written: dict[str, list[tuple[Any, tuple[int, ...], Event]]] = defaultdict(list)
        queues: dict[Any, list[list]] = defaultdict(list)
        for _, landing, ev in events:
            a, key = ev.action, _parallel_key(program, ev)
            if landing:
                written[a.dst.buffer] = [*(e for e in written[a.dst.buffer] if not box_inside(e[0], a.dst.box)),
                                         (a.dst.box, key, ev)]
                continue
            reads, writes = [], []
            if isinstance(a, Compute):
                if not a.work:
                    continue
                reads = list(a.reads) + ([a.dst] if a.reads_dst else [])
                writes = [a.dst]
            elif isinstance(a, DmaStart):
                reads = [a.src] if a.src.device == d else []
                writes = [a.dst] if a.dst.device == d else []
            elif isinstance(a, SemWait) and a.sem not in remote_fed:
                need, queue = a.value, queues[a.sem]
                while need > 0 and queue:
                    take = min(need, queue[0][0])
                    if queue[0][1] != key:
                        report(ev, queue[0][2], "waits for")
                    queue[0][0] -= take
                    need -= take
                    if not queue[0][0]:
                        queue.pop(0)
            for sem, amount in deposits(a):
                if sem[0] == d and sem not in remote_fed:
                    queues[sem].append([amount, key, ev])
            for r in reads:
                dep = next((w for box, k, w in written[r.buffer] if k != key and box_meets(box, r.box)), None)
                if dep is not None:
                    report(ev, dep, "reads what")
            for w in writes:  # the last writer: earlier writes this one covers no longer count
                written[w.buffer] = [e for e in written[w.buffer] if not box_inside(e[0], w.box)] + [(w.box, key, ev)]
    return findings


def megacore_findings(sched: S.Schedule, program: Program) -> list[Finding]:
    """With `megacore: true`, both TensorCores of a chip run the kernel. Core 1 must not
    touch shared state: no DMA, signal, semaphore wait or barrier (the tutorial's advice:
    issue DMAs from one core), and outputs live in HBM (each core would write back its own
    VMEM copy of a VMEM output). Remote copies go HBM to HBM: a VMEM operand would be
    some core's private memory. With that, core 1 only computes on its own VMEM, and core
    0's events are the whole story for the other checks. The same holds for a `parallel`
    grid axis, which such a chip splits over its cores (`Unroller.split`)."""
    if not sched.megacore and not program.second_core:
        return []
    findings, seen = [], set()
    for events in program.second_core:
        for ev in events:
            a = ev.action
            if isinstance(a, Compute) or ev.line in seen:
                continue
            seen.add(ev.line)
            findings.append(M.MEGACORE_DMA.finding(what=describe(ev), at=program.where(ev), event=ev))
    for name in (n for n, b in sched.buffers.items() if b.kind == "output" and b.memory == "vmem"):
        findings.append(M.MEGACORE_VMEM_OUTPUT.finding(name=name, line=sched.buffers[name].line))
    for events in program.devices:
        for ev in events:
            a = ev.action
            if not (isinstance(a, DmaStart) and a.remote) or ev.line in seen:
                continue
            private = [r.buffer for r in (a.src, a.dst) if sched.buffers[r.buffer].memory == "vmem"]
            if private:
                seen.add(ev.line)
                findings.append(M.MEGACORE_VMEM_COPY.finding(what=describe(ev), at=program.where(ev),
                                                              buffer=private[0], event=ev))
    return findings


def meaning_of(sched: S.Schedule, data: dict | None = None) -> "tuple[Collective, Buffers] | None":
    """A YAML schedule's meaning: its collective's class and the roles of its buffers; with
    runtime data, the collective of that sample (`Collective.with_data`, ragged_all_to_all)."""
    if sched.collective is None:
        return None
    collective = collective_of(sched)
    if data is not None and hasattr(collective, "with_data"):
        collective = collective.with_data(data)
    return collective, Buffers.of(sched)


def check_program(sched: S.Schedule, program: Program, placement: "Placement | str" = topology.DEFAULT, *,
                  use_symmetry: bool = True, dma_order: str = "any", meaning: Any = "schedule",
                  steps: dict[tuple[str, int], int] | None = None) -> Report:
    """Every check of `program` (unrolled on `placement`). `dma_order` is the DMA ordering
    model (`order.DMA_ORDERS`): under "any" each race that needs two DMAs of one link to land
    out of order is labelled (`Finding.relies_on`); under "in-order" those are not reported.
    `meaning` is what the program computes, `(Collective, Buffers)` or None (no meaning
    check); by default the schedule's own (`meaning_of`). `sched` supplies the rest: its
    file, axes, megacore flag and buffers' kinds and memories (a traced Pallas program
    passes its own description, `pallas.importer.KernelSpec`). `steps`: what
    `symmetry.memory_steps` would find, when the caller has proved it (a traced kernel whose
    devices were evaluated at once: `pallas.importer.ring_steps`), so it is not learned and
    checked again on every device."""
    if meaning == "schedule":
        meaning = meaning_of(sched)
    _dma_order_known(dma_order, sched)
    if not isinstance(placement, Placement):
        placement = resolve_topology(sched, program.n if len(sched.axes) == 1 else None, placement)
    if placement.topo.ndim > 1:
        program.device_labels = labels(program, placement)
    findings = (route_findings(program, placement) + megacore_findings(sched, program) + dtype_findings(program)
                + parallel_findings(program))
    m = maximal_run(program)
    findings += run_findings(program, m)
    unfollowed: list[str] = []
    if m.finished():
        order = compute_order(program, use_symmetry=use_symmetry)
        steps = (steps if steps is not None else memory_steps(program)) if order.symmetric else None
        memory = {0} if steps is not None else None  # see symmetry.py
        ends = dma_ends(program, order, memory, dma_order)
        # Under "any", label what the in-order model would not report (its intervals are
        # computed only if there is a race to label).
        fifo = (lambda: dma_ends(program, order, memory, "in-order")) if dma_order == "any" else None
        races = find_races(program, order, ends, devices=memory, in_order=fifo)
        findings += races
        if meaning is not None:
            collective, buffers = meaning
            inputs = [name for name, buf in sched.buffers.items() if buf.kind == "input"]
            symmetric = not races and steps is not None and _meaning_moves(collective, buffers, program, steps)
            for mm in check_semantics(collective, buffers, inputs, program, m.order, program.shapes, limit=8,
                                      symmetric=symmetric):
                if mm.unfollowed:  # a value the model does not follow: a note, the block is not checked
                    note = (f"not followed: {mm.unfollowed}; the meaning of `{buffers.output}` is not checked "
                            f"where it holds that value (device {program.label(mm.device)}: {mm.where}, ...)")
                    if not any(n.startswith(f"not followed: {mm.unfollowed};") for n in unfollowed):
                        unfollowed.append(note)
                    continue
                last = _last_write(m.order, program.n, mm)
                written = (M.LAST_WRITE.format(what=describe(last), at=program.where(last)) if last is not None
                           else M.NOTHING_WRITES)
                findings.append(M.WRONG_RESULT.finding(
                    label=program.label(mm.device), where=mm.where, got=mm.got, collective=collective.kind,
                    want=mm.want, last=written, event=last, device=mm.device))
    report = Report(program, findings, assumptions=[f"DMA ordering: {DMA_ORDERS[dma_order]}"]
                    + schedule_assumptions(sched) + unfollowed)
    if not topology.sized_by_devices(placement.topo.spec):  # the default `--topology ring` of N devices goes unsaid
        report.placement = placement.describe()
    report.routes = route_summary(program, placement)
    return report


def _dma_order_known(dma_order: str, sched: Any) -> None:
    """Refuse a DMA ordering model that is not one of `order.DmaOrder`'s."""
    if dma_order not in DMA_ORDERS:
        raise ScheduleError(f"unknown DMA ordering model {dma_order!r}", file=sched.file,
                            fix=f"use one of {', '.join(DMA_ORDERS)}")


def _last_write(order: list[Event], n: int, mm) -> Event | None:
    """The last event of the run that writes into the box `mm` found wrong (its line is where
    a wrong result is reported), or None when nothing writes it."""
    if not mm.buffer:  # a shape mismatch: no box
        return None
    last = None
    for ev, region, write, _ in event_accesses(order, n):
        if type(ev.action) is Compute and not ev.action.work:  # the model's own (kernel exit): not the user's
            continue
        if write and region.device == mm.device and region.buffer == mm.buffer and all(
                a < d and c < b for (a, b), (c, d) in zip(region.box, mm.box)):
            last = ev
    return last


def _meaning_moves(collective: Collective, buffers: Buffers, program: Program, steps: dict[tuple[str, int], int]) -> bool:
    """On a ring (one axis), the collective's meaning on device d is device 0's moved the way
    `symmetry.memory_steps` found the accesses move, with the data of whole-accessed dims
    moving as the events carry it (`quotient.data_steps`, `gauge.py`): with the run
    race-free, device 0's output then decides every device's (`check_semantics`)."""
    if len(program.axis_sizes) > 1:
        return False
    return quotient.data_steps(program, collective, buffers, {key: (step,) for key, step in steps.items()}) is not None


def schedule_assumptions(sched: S.Schedule) -> list[str]:
    """What a verdict on the schedule assumes beyond the DMA ordering: what its collective's
    meaning check leaves out (`Collective.assumes`), and for a split-phase program how its
    calls run (docs/verification.md, "Programs of several kernels"). (A traced Pallas
    program, `pallas.importer.KernelSpec`, says its own.)"""
    note = collective_of(sched).assumes if isinstance(sched, S.Schedule) else None
    meaning = [note] if note else []
    if not getattr(sched, "kernels", None):
        return meaning
    handed = [f"{sem} ({k} -> {t})" for k in sched.program for sem in sched.kernels[k].returns
              for t in [next((t for t in sched.program[sched.program.index(k) + 1:]
                              if sem in sched.kernels[t].takes), "?")]]
    return meaning + [f"a program of {len(sched.program)} pallas_calls ({', '.join(sched.program)}), run in this order with "
            "nothing else touching their arrays in between; semaphores handed on: "
            f"{', '.join(handed) or 'none'}; balance is checked at the end of the program"]


def _quotient(sched: S.Schedule, placement: Placement, invocations: int) -> "Candidate | None":
    """Device 0's events of a translation-symmetric schedule on a ring or torus, or of an
    XOR-symmetric one (a hypercube's partners `me ^ (1 << k)`, `xor.py`) on a ring, the
    symmetry proved (`rotation.py`); None when there is none to prove."""
    if not _wrapped(placement):
        return None
    program = rotation_unroll(sched, placement.sizes, invocations)
    if program is None and placement.topo.kind == "ring" and len(placement.sizes) == 1:
        program = xor_unroll(sched, prod(placement.sizes.values()), invocations)
    return None if program is None else Candidate(sched, program, placement)


def quotient_report(sched: S.Schedule, placement: Placement, invocations: int, dma_order: str = "any",
                    jobs: int | None = None) -> Report | None:
    """The clean report (route warnings aside) of a schedule from device 0's events alone
    (`_quotient`, `rotated_report`); None when the full analysis must decide."""
    q = _quotient(sched, placement, invocations)
    return None if q is None else rotated_report(sched, q.program, placement, dma_order, jobs=jobs)


def _wrapped(placement: Placement) -> bool:
    """Only wrapped axes are symmetric: on a line or mesh the end devices' routes differ."""
    return all(placement.topo.wrap[k] for k in placement.along)


def rotated_report(sched: S.Schedule, program: Program, placement: Placement, dma_order: str = "any",
                   meaning: Any = "schedule", jobs: int | None = None) -> Report | None:
    """The clean report (route warnings aside) of `program`, device 0's events with
    `Program.rotation` set (every device proved to run them translated:
    `rotation.rotation_unroll` for a schedule, `pallas.interpret.Lanes` for a traced
    kernel), checked on the quotient (`quotient.py`); None when the full analysis must
    decide (any other finding, or the quotient cannot tell). `meaning` as in
    `check_program`. Routes depend only on the offset on wrapped axes, so device 0's route
    findings are every device's, and the full analysis reports each op's first, which is
    device 0's: warnings (a far send) are the same list; an error sends the program to the
    full path. Under XOR symmetry (`Program.group == "xor"`) routes depend on the device,
    so the quotient is taken only on a ring where each offset's hop count is the same from
    every device (`placement.xor_routes_symmetric`), and the route summary counts every
    device's sends (`placement.xor_route_summary`). The quotient decides under the "any" DMA
    ordering; a program clean under it is clean under "in-order" too (in order, every DMA
    interval ends no later: `order.dma_ends`). `jobs` as in `quotient.clean`."""
    if meaning == "schedule":
        meaning = meaning_of(sched)
    topo = placement.topo
    if not _wrapped(placement):
        return None
    if topo.ndim > 1:  # before the route findings, which name devices by their labels
        program.device_labels = labels(program, placement)
    xor = program.group == "xor"
    if xor and not xor_routes_symmetric(program, placement):
        return None
    routes = route_findings(program, placement)
    if (any(f.severity != Severity.WARNING for f in routes) or megacore_findings(sched, program)
            or dtype_findings(program) or parallel_findings(program) or not quotient.clean(sched, program, meaning, jobs)):
        return None
    report = Report(program, routes, assumptions=[f"DMA ordering: {DMA_ORDERS[dma_order]}"]
                    + schedule_assumptions(sched))
    if not topology.sized_by_devices(topo.spec):
        report.placement = placement.describe()
    report.routes = xor_route_summary(program, placement) if xor else rotated_route_summary(program, placement)
    return report


@contextmanager
def collector_paused():
    """The analysis allocates millions of small tuples that never form cycles; Python's
    cyclic collector would scan them over and over (a quarter of the time at N = 1024)
    and free nothing. Reference counting still frees everything."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _data_report(sched: S.Schedule, placement: Placement, invocations: int, dma_order: str,
                 samples: list[dict], how: str) -> Report:
    """The verdict on runtime data: each sample unrolled and checked in full (data differs per
    device, so there is no quotient); the first sample with a finding is reported, naming
    it, else the last clean one. Every verdict says it rests on these samples only."""

    free = [k for k, d in sched.data.items() if d.source is None]
    if not samples:
        raise ScheduleError("no data samples to check", file=sched.file, fix="give --data random:K with K >= 1")
    report = None
    for i, sample in enumerate(samples, start=1):
        label = f"data sample {i} of {len(samples)}"
        shown = sample_text(sample, free)
        try:
            program = unroll(sched, sizes=placement.sizes, invocations=invocations, data=sample)
        except DataFault as fault:
            n = prod(placement.sizes.values())
            grid = ("core", *sched.grid) if sched.megacore else tuple(sched.grid)
            program = Program(sched.name, sched.file, n, grid, [[] for _ in range(n)], {}, {},
                              axis_sizes=dict(placement.sizes))
            where = Event(fault.device, 0, fault.point, fault.line, None)  # type: ignore[arg-type]
            findings = [M.OUT_OF_BOUNDS.finding(message=fault.message, sample=label, shown=shown, event=where)]
            report = Report(program, findings, assumptions=[f"DMA ordering: {DMA_ORDERS[dma_order]}"])
        else:
            report = check_program(sched, program, placement, dma_order=dma_order,
                                   meaning=meaning_of(sched, sample))
            for f in report.findings:
                f.message += f" [{label}: {shown}]"
        if not report.ok:
            report.assumptions.append(f"runtime data: {how}; {label} shows the findings ({shown}); a verdict "
                                      "on sampled data, not on all data")
            return report
    report.assumptions.append(f"runtime data: {how}, every one checked clean; a verdict on these samples, "
                              "not on all data the constraints allow")
    return report


# ------------------------------------------------------------------ the one verifier core
#
# One verifier core for every front end.
#
# A front end (a YAML schedule, `check.check`; a traced Pallas program,
# `pallas.importer._check_jaxpr`; a front end to come) hands the verifier a `Subject`: two
# ways to produce what to check, and nothing else.
#
# - `quotient()`: device 0's events with the symmetry that maps them to every other device's
#   proved (`Program.rotation`, or `Program.group == "xor"`), as a `Candidate`; None when the
#   front end cannot prove one. The quotient only ever certifies a clean run
#   (`check.rotated_report`): any finding, or a question it cannot answer, sends the subject
#   to the full analysis, which decides and explains.
# - `full()`: every device's events, as a `Candidate`, for `check.check_program`.
#
# `verify(subject)` is the one place that chooses between them, and `apply_strict` the one
# place `--strict` turns warnings into errors. A `Candidate` carries the program with what
# the checks read beside it: the description of buffers, axes and file (`spec`: a
# `Schedule`, or the Pallas importer's `KernelSpec`), the placement on the topology, the
# meaning (`(Collective, Buffers)`, None for none, or "schedule" for the schedule's own), and
# `steps` where the front end has proved how accesses move between devices.


@dataclass
class Candidate:
    """A program to check, with what the checks read beside it (see "the one verifier core")."""
    spec: Any
    program: Program
    placement: Any
    meaning: Any = "schedule"
    steps: dict | None = None


@dataclass
class Subject:
    """What a front end verifies: its quotient (None: none proved) and its full program,
    each produced only when `verify` asks for it."""
    quotient: Callable[[], Candidate | None]
    full: Callable[[], Candidate]


def verify(subject: Subject, *, dma_order: str = "any", strict: bool = False, jobs: int | None = None) -> Report:
    """The verdict on `subject`: the quotient's when it certifies a clean run, else the full
    analysis' (`check.check_program`); under `strict`, warnings are errors."""
    with collector_paused():  # unrolling and the analyses allocate millions of tuples (see below)
        q = subject.quotient()
        report = None if q is None else rotated_report(q.spec, q.program, q.placement, dma_order=dma_order,
                                                       meaning=q.meaning, jobs=jobs)
        if report is None:
            f = subject.full()
            report = check_program(f.spec, f.program, f.placement, dma_order=dma_order, meaning=f.meaning,
                                   steps=f.steps)
    return apply_strict(report, strict)


def apply_strict(report: Any, strict: bool) -> Any:
    """`--strict`: every warning of `report` (a missing wraparound, a far send) becomes an
    error, saying so."""
    if strict:
        for f in getattr(report, "findings", ()):
            if f.severity == Severity.WARNING:
                f.severity = Severity.ERROR
                f.message += " [an error under --strict]"
    return report


def check(sched: S.Schedule, n: int | None = None, *, topology: "str | topology.Topology" = topology.DEFAULT,
          invocations: int = 1, along: str | None = None, strict: bool = False, dma_order: str = "any",
          data: "list[dict] | None" = None, data_how: str = "given samples", jobs: int | None = None) -> Report:
    """Verify `sched` on a topology: `n` devices on a ring by default, or a `--topology`
    spelling such as `torus:4x4` or `v5e:4x4` (then `n`, if given, must be its size), with
    the schedule's axes along `along` (e.g. `y`). `strict` turns warnings into errors.
    `dma_order`: "any" (default) or "in-order" (`order.DMA_ORDERS`, docs/verification.md).
    `data`: samples of the schedule's runtime data (`ringc.data`; `data_how` says where they
    came from), each checked in turn (`_data_report`). `jobs`: processes the quotient may
    use (default `background.default_jobs()`; `quotient.clean`). Raises `ScheduleError` for
    bad input."""
    t0 = time.perf_counter()
    placement = resolve_topology(sched, n, topology, along)
    _dma_order_known(dma_order, sched)
    if data is not None and not sched.data:
        raise ScheduleError(f"`{sched.name}` declares no runtime data, so --data has nothing to give",
                            file=sched.file, fix="drop --data")
    if data is not None:  # each sample its own program: no quotient
        with collector_paused():
            report = apply_strict(_data_report(sched, placement, invocations, dma_order, data, data_how), strict)
    else:
        report = verify(Subject(
            quotient=lambda: _quotient(sched, placement, invocations),
            full=lambda: Candidate(sched, unroll(sched, sizes=placement.sizes, invocations=invocations), placement)),
            dma_order=dma_order, strict=strict, jobs=jobs)
    report.seconds = time.perf_counter() - t0
    return report
