"""The one verifier core: `run(subject, options) -> Report` for every front end.

A front end (a YAML schedule, `check.check`; a traced Pallas program,
`pallas.importer._check_jaxpr`; a front end to come) hands the verifier a `Subject`: two
ways to produce what to check, and nothing else.

- `quotient()`: device 0's events with the symmetry that maps them to every other device's
  proved (a `symmetric.program.SymmetricProgram`), as a `Candidate`; None when the
  front end cannot prove one. The quotient only ever certifies a clean run
  (`on_quotient`): any finding, or a question it cannot answer, sends the subject to the
  full analysis, which decides and explains.
- `full()`: every device's events, as a `Candidate`, for `full_report`.

`CHECKS` is the one list of checks, in the order their findings are reported; each says
whether and how it runs on a quotient (`OnQuotient`). `run` is the one place that chooses
between the quotient and the full analysis, and `apply_strict` the one place `--strict`
turns warnings into errors. A `Candidate` carries the program with what the checks read
beside it: the description of buffers, axes and file (`spec`, anything with the
`spec.Spec` protocol's fields: a `Schedule`, or the Pallas importer's `KernelSpec`), the placement on
the topology, the meaning (`(Collective, Buffers)`, or None for none), what a verdict on it
assumes, and `steps` where the front end has proved how accesses move between devices.

The full analysis, in dependency order:

1. targets and routes (`placement.py`): every remote action goes to an existing device,
   a neighbour on the topology ideally, and one the hardware can route to; megacore rules,
   DMA element types, independence of `parallel` grid axes;
2. the maximal run: hangs, semaphores non-zero at exit, DMAs never waited, byte counts;
3. if the run completes: races over all interleavings, then the symbolic data flow.
"""

from __future__ import annotations

import gc
from collections import Counter, defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Callable

from ..collectives import Buffers, Collective
from ..errors import ScheduleError
from .events import ZEROED_KINDS, Compute, DmaStart, Event, Program, SemWait, Signal, deposits, feeders, sem_text
from . import messages as M
from .findings import Finding, Report, Severity
from .order import DMA_ORDERS, compute_order, dma_ends, sums_to
from .placement import (Placement, labels, rotated_route_summary, route_findings, route_summary,
                        xor_route_summary, xor_routes_symmetric)
from .races import describe, event_accesses, find_races
from .semantics import box_inside, box_meets, check_semantics, unwritten_outputs, unwritten_reads
from .simulate import Machine, maximal_run
from .spec import Spec
from .symmetric import flow as symmetric_flow, races as symmetric_races, run as symmetric_run
from .symmetric.analysis import SymmetricAnalysis
from .symmetric.certify import clean
from .symmetric.moves import full_data_steps
from .symmetric.program import Group, SymmetricProgram
from .symmetry import memory_steps




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
    demand = ev.action.value if not ev.action.decrement else sum(
        e.action.value for e in program.devices[ev.device]
        if isinstance(e.action, SemWait) and e.action.sem == sem and e.action.decrement)
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
    # A model wait (a GPU's join of its blocks, its launch barrier) is stuck only because a
    # process it waits for is: report the user's waits, and a model wait only when none is.
    users = [ev for ev in stuck if program.sem_kinds.get(ev.action.sem[1]) != "launch"]
    stuck = users or stuck
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
        if program.sem_kinds.get(sem[1]) in ZEROED_KINDS:
            continue  # zeroed before the next launch: what threshold waits leave is no finding
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
            declared = (program.dtypes.get(a.src.buffer), program.dtypes.get(a.dst.buffer))
            src, dst = a.viewed or declared
            if src is None or dst is None or src == dst:
                continue
            seen.add(ev.line)
            # (a side seen through a bitcast view is named as the kernel wrote it: `x_hbm.bitcast(int16)`)
            names = [b if t == own else f"{b}.bitcast({t})"
                     for b, t, own in zip((a.src.buffer, a.dst.buffer), (src, dst), declared)]
            findings.append(M.DTYPE_MISMATCH.finding(
                what=describe(ev), at=program.where(ev), src=names[0], src_dtype=src, dst=names[1],
                dst_dtype=dst, event=ev))
    return findings


def _parallel_key(program: Program, ev: Event) -> tuple[int, ...]:
    return tuple(ev.point[k] for k in program.parallel if k < len(ev.point))


def parallel_findings(program: Program, outputs: frozenset[str] = frozenset()) -> list[Finding]:
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
      itself); semaphores other devices also feed are left to the other checks;
    - outputs (`outputs`, the kernel's output buffers): a write into a region another index
      wrote too (an output block whose index ignores the axis, written back by each: the
      result is whichever ran last, or on two TensorCores both at once).

    One finding per op line, at the dependent event, naming the axis and the event it
    depends on. The model's own writes (kernel entry and exit, a pipeline's fresh window)
    are no dependency, and what a fresh window or output block holds (garbage) depends on
    no iteration: a read of it is the kernel's business (megablox's gmm merges a new output
    block under a row mask, rows it overwrites later)."""
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
                    if a.kind == "allocate":   # fresh garbage: what an earlier iteration left there is gone
                        written[a.dst.buffer] = [e for e in written[a.dst.buffer] if not box_inside(e[0], a.dst.box)]
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
                if w.buffer in outputs:
                    dep = next((e for box, k, e in written[w.buffer] if k != key and box_meets(box, w.box)), None)
                    if dep is not None:
                        report(ev, dep, "overwrites the output of")
                written[w.buffer] = [e for e in written[w.buffer] if not box_inside(e[0], w.box)] + [(w.box, key, ev)]
    return findings


def _own_copy(spec: Spec, a: Any) -> bool:
    """A Pallas kernel's core 1 (its half of a `parallel` grid axis) copying into its own VMEM
    or SMEM with its own semaphore, or waiting for such a copy (JAX's paged attention with
    `megacore_mode`): each TensorCore has its own VMEM and DMA semaphores, so this is no
    shared state. Only where the spec says its cores split a grid (`Spec.split_grid`): a
    `megacore: true` schedule's core 1 issues no DMA at all."""
    if isinstance(a, DmaStart):
        return not a.remote and spec.buffers[a.dst.buffer].memory in ("vmem", "smem")
    return isinstance(a, SemWait) and a.why == "wait"


def _hbm_touched(spec: Spec, events: list[Event]) -> dict[str, list]:
    """The boxes of each HBM buffer that core 0's `events` read or write on their device."""
    out: dict[str, list] = defaultdict(list)
    for ev in events:
        a = ev.action
        regions = ([a.src, a.dst] if isinstance(a, DmaStart) else
                   [a.dst, *a.reads] if isinstance(a, Compute) and a.work else [])
        for r in regions:
            if r.device == ev.device and spec.buffers[r.buffer].memory == "hbm":
                out[r.buffer].append(r.box)
    return out


def _own_rows(spec: Spec, a: Any, core0: dict[str, list]) -> bool:
    """Core 1 of a split `parallel` grid axis copying locally into HBM where core 0 reads and
    writes nothing (JAX's megacore pipelining template: each core's steps write back their
    own rows of the output): no shared state. Rows core 0 also touches stay a finding."""
    return (isinstance(a, DmaStart) and not a.remote and spec.buffers[a.dst.buffer].memory == "hbm"
            and not any(box_meets(box, a.dst.box) for box in core0.get(a.dst.buffer, ())))


def _core1_hangs(program: Program) -> list[Finding]:
    """Core 1's own copies run in its program order on one core: a wait for more bytes than its
    own copies on that semaphore started is a hang (core 0's copies land in core 0's VMEM and
    semaphores; a prefetch across the split, never started on core 1, is one)."""
    out = []
    for events in program.second_core:
        held: Counter = Counter()
        for ev in events:
            a = ev.action
            if isinstance(a, DmaStart) and not a.remote:
                for sem, n in deposits(a):
                    held[sem] += n
            elif isinstance(a, SemWait) and a.why == "wait":
                if held[a.sem] < a.value:
                    out.append(M.HANG.finding(at=program.where(ev), what=describe(ev),
                                              arrives=f"{held[a.sem]} bytes", event=ev,
                                              reason="on core 1 (its half of the parallel grid axis) no copy of its "
                                                     "own started them: each TensorCore has its own semaphores and "
                                                     "VMEM, so a copy core 0 started does not land here"))
                    break
                held[a.sem] -= a.value
    return out


def megacore_findings(spec: Spec, program: Program) -> list[Finding]:
    """With `megacore: true`, both TensorCores of a chip run the kernel. Core 1 must not
    touch shared state: no DMA, signal, semaphore wait or barrier (the tutorial's advice:
    issue DMAs from one core), and outputs live in HBM (each core would write back its own
    VMEM copy of a VMEM output). Remote copies go HBM to HBM: a VMEM operand would be
    some core's private memory. With that, core 1 only computes on its own VMEM, and core
    0's events are the whole story for the other checks. The same holds for a `parallel`
    grid axis, which such a chip splits over its cores (`Unroller.split`)."""
    if not spec.megacore and not program.second_core:
        return []
    findings, seen = (_core1_hangs(program) if spec.split_grid else []), set()
    for d, events in enumerate(program.second_core):
        core0 = _hbm_touched(spec, program.devices[d]) if spec.split_grid else {}
        for ev in events:
            a = ev.action
            if (isinstance(a, Compute) or ev.line in seen
                    or (spec.split_grid and (_own_copy(spec, a) or _own_rows(spec, a, core0)))):
                continue
            seen.add(ev.line)
            findings.append(M.MEGACORE_DMA.finding(what=describe(ev), at=program.where(ev), event=ev,
                                                   front=program.front))
    for name in (n for n, b in spec.buffers.items() if b.kind == "output" and b.memory == "vmem"):
        findings.append(M.MEGACORE_VMEM_OUTPUT.finding(name=name, line=program.line_text(spec.buffers[name].line),
                                                       front=program.front))
    for events in program.devices:
        for ev in events:
            a = ev.action
            if not (isinstance(a, DmaStart) and a.remote) or ev.line in seen:
                continue
            private = [r.buffer for r in (a.src, a.dst) if spec.buffers[r.buffer].memory == "vmem"]
            if private:
                seen.add(ev.line)
                findings.append(M.MEGACORE_VMEM_COPY.finding(what=describe(ev), at=program.where(ev),
                                                              buffer=private[0], event=ev))
    return findings



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
    moving as the events carry it (`symmetric.moves.full_data_steps`, `gauge.py`): with the run
    race-free, device 0's output then decides every device's (`check_semantics`)."""
    if len(program.axis_sizes) > 1:
        return False
    return full_data_steps(program, collective, buffers, {key: (step,) for key, step in steps.items()}) is not None



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



def dma_order_known(dma_order: str, spec: Any) -> None:
    """Refuse a DMA ordering model that is not one of `order.DmaOrder`'s."""
    if dma_order not in DMA_ORDERS:
        raise ScheduleError(f"unknown DMA ordering model {dma_order!r}", file=spec.file,
                            fix=f"use one of {', '.join(DMA_ORDERS)}")


def wrapped(placement: Placement) -> bool:
    """Only wrapped axes are symmetric: on a line or mesh the end devices' routes differ; a
    mesh's own device order (`Placement.chips`) is no translation of the chips."""
    return placement.chips is None and all(placement.topo.wrap[k] for k in placement.along)


# ------------------------------------------------------------------ subjects and options


@dataclass
class Candidate:
    """A program to check, with what the checks read beside it (see the module's docstring).
    `assumptions`: what a verdict on it assumes beyond the DMA ordering (the front end's)."""
    spec: Spec
    program: "Program | SymmetricProgram"  # symmetric: a quotient, for `on_quotient`
    placement: Placement
    meaning: "tuple[Collective, Buffers] | None"
    steps: dict | None = None
    assumptions: list[str] = field(default_factory=list)


@dataclass
class Subject:
    """What a front end verifies: its quotient (None: none proved) and its full program,
    each produced only when `run` asks for it."""
    quotient: Callable[[], Candidate | None]
    full: Callable[[], Candidate]


@dataclass(frozen=True)
class Options:
    """How to verify. `dma_order`: "any" (default) or "in-order" (`order.DMA_ORDERS`,
    docs/verification.md); `strict`: warnings are errors; `jobs`: processes the quotient may
    use (default `background.default_jobs()`, `symmetric.certify.clean`); `use_symmetry`: whether
    the full analysis may learn the translation symmetry of the order
    (`order.compute_order`; the tests turn it off to compare)."""
    dma_order: str = "any"
    strict: bool = False
    jobs: int | None = None
    use_symmetry: bool = True


# ------------------------------------------------------------------ the checks


class OnQuotient(Enum):
    """How a check runs on a quotient (device 0's events with the symmetry proved)."""
    SAME = "runs on device 0's events as on every device's: a finding sends the subject to the full analysis"
    CERTIFIED = "its symmetric back end certifies it on device 0's events (`symmetric.certify.clean`)"


@dataclass
class Analysis:
    """One full analysis of a candidate: what the checks found so far that later ones read
    (the maximal run, the order, the proved steps, the races) and the notes of values the
    meaning check does not follow."""
    candidate: Candidate
    options: Options
    machine: Machine | None = None
    races: list[Finding] = field(default_factory=list)
    steps: dict | None = None
    order: Any = None
    notes: list[str] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.machine is not None and self.machine.finished()


@dataclass(frozen=True)
class Check:
    """One check: its name, how it runs on a quotient, whether its warnings stand on the
    quotient (the route warnings are every device's: routes depend only on the offset on
    wrapped axes), and its back ends: `full`, on every device's events, reads and extends
    the `Analysis` and returns the findings; `symmetric` (a check `OnQuotient.CERTIFIED`
    has one, a check `SAME` runs `full` on device 0's program instead), on a
    `SymmetricProgram`, reads and extends the `symmetric.analysis.SymmetricAnalysis` and
    certifies a clean run or not (`symmetric/`)."""
    name: str
    on_quotient: OnQuotient
    full: Callable[[Analysis], list[Finding]]
    keeps_warnings: bool = False
    symmetric: Callable[[SymmetricAnalysis], bool] | None = None

    def __post_init__(self) -> None:
        if (self.symmetric is not None) != (self.on_quotient is OnQuotient.CERTIFIED):
            raise ValueError(f"check {self.name!r}: a check {self.on_quotient.name} has "
                             f"{'a' if self.on_quotient is OnQuotient.CERTIFIED else 'no'} symmetric back end")


def _routes(a: Analysis) -> list[Finding]:
    return route_findings(a.candidate.program, a.candidate.placement)


def _megacore(a: Analysis) -> list[Finding]:
    return megacore_findings(a.candidate.spec, a.candidate.program)


def _dtypes(a: Analysis) -> list[Finding]:
    return dtype_findings(a.candidate.program)


def _parallel(a: Analysis) -> list[Finding]:
    spec = a.candidate.spec
    return parallel_findings(a.candidate.program,
                             frozenset(n for n, b in spec.buffers.items() if b.kind == "output"))


def _run(a: Analysis) -> list[Finding]:
    a.machine = maximal_run(a.candidate.program)
    return run_findings(a.candidate.program, a.machine)


def _races(a: Analysis) -> list[Finding]:
    """Races over all interleavings, when the run completes. Under "any", each race that
    needs two DMAs of one link to land out of order is labelled (`Finding.relies_on`: the
    in-order intervals are computed only if there is a race to label); under "in-order"
    those are not reported."""
    if not a.finished:
        return []
    c, dma_order = a.candidate, a.options.dma_order
    program = c.program
    a.order = compute_order(program, use_symmetry=a.options.use_symmetry)
    a.steps = (c.steps if c.steps is not None else memory_steps(program)) if a.order.symmetric else None
    memory = {0} if a.steps is not None else None  # see symmetry.py
    ends = dma_ends(program, a.order, memory, dma_order)
    fifo = (lambda: dma_ends(program, a.order, memory, "in-order")) if dma_order == "any" else None
    a.races = find_races(program, a.order, ends, devices=memory, in_order=fifo)
    return a.races


def _meaning(a: Analysis) -> list[Finding]:
    """The symbolic data flow against the meaning, when the run completes; with the run
    race-free and the accesses' steps proved, device 0's output decides every device's."""
    c = a.candidate
    if not a.finished:
        return []
    if c.meaning is None:   # no meaning to compare with: what no run can fill is still wrong
        return [] if a.races else unwritten_findings(c.spec, c.program)
    program, (collective, buffers) = c.program, c.meaning
    inputs = [name for name, buf in c.spec.buffers.items() if buf.kind == "input"]
    symmetric = not a.races and a.steps is not None and _meaning_moves(collective, buffers, program, a.steps)
    findings = []
    for mm in check_semantics(collective, buffers, inputs, program, a.machine.order, program.shapes, limit=8,
                              symmetric=symmetric):
        if mm.unfollowed:  # a value the model does not follow: a note, the block is not checked
            note = (f"not followed: {mm.unfollowed}; the meaning of `{buffers.output}` is not checked "
                    f"where it holds that value (device {program.label(mm.device)}: {mm.where}, ...)")
            if not any(n.startswith(f"not followed: {mm.unfollowed};") for n in a.notes):
                a.notes.append(note)
            continue
        if mm.device < 0:   # the output's shape: no device's values compared, nothing written to name
            shape = M.WRONG_SHAPE.finding(where=mm.where, got=mm.got, collective=collective.kind, want=mm.want)
            if all(f.message != shape.message for f in findings):   # (one per output, however it is asked)
                findings.append(shape)
            continue
        last = _last_write(a.machine.order, program.device_count, mm)
        written = (M.LAST_WRITE.format(what=describe(last), at=program.where(last)) if last is not None
                   else M.NOTHING_WRITES)
        findings.append(M.WRONG_RESULT.finding(
            label=program.label(mm.device), where=mm.where, got=mm.got, collective=collective.kind,
            want=mm.want, last=written, event=last, device=mm.device))
    return findings


def unwritten_findings(spec: Spec, program: Program) -> list[Finding]:
    """One `unwritten_output` finding per output that nothing fills on some device
    (`semantics.unwritten_outputs`), and one `unwritten_read` per scratch nothing fills
    whose reads reach an output filled otherwise (`semantics.unwritten_reads`), naming the
    devices."""
    events = [ev for evs in program.devices for ev in evs]
    devices = range(program.device_count)

    def named(ds: list[int]) -> str:
        shown = ", ".join(program.label(d) for d in ds[:8]) + (", ..." if len(ds) > 8 else "")
        return f"device {shown}" if len(ds) == 1 else f"devices {shown}"

    missing: dict[str, list[int]] = defaultdict(list)
    for d, name in unwritten_outputs(spec.buffers, events, devices):
        missing[name].append(d)
    findings = [M.UNWRITTEN_OUTPUT.finding(name=name, line=program.line_text(spec.buffers[name].line),
                                           devices=named(ds), device=ds[0])
                for name, ds in missing.items()]
    read: dict[str, list[tuple[int, Event, str]]] = defaultdict(list)
    for d, name, ev, output in unwritten_reads(spec.buffers, events, devices):
        read[name].append((d, ev, output))
    for name, hits in read.items():
        _, ev, output = hits[0]
        findings.append(M.UNWRITTEN_READ.finding(
            at=program.where(ev), name=name, line=program.line_text(spec.buffers[name].line),
            devices=named([d for d, _, _ in hits]), output=output, event=ev, device=hits[0][0]))
    return findings


# A verdict's note when the run cannot complete: the checks that need a run to the end.
UNFINISHED = ("the run hangs (its [hang] findings), so what needs a run to the end was not checked: races over "
              "every interleaving, semaphores and DMAs left at exit, and the meaning{calls}; fix the hang, then check "
              "again")


# Every check, in the order of its findings in a report.
CHECKS: tuple[Check, ...] = (
    Check("routes", OnQuotient.SAME, _routes, keeps_warnings=True),
    Check("megacore", OnQuotient.SAME, _megacore),
    Check("dtypes", OnQuotient.SAME, _dtypes),
    Check("parallel", OnQuotient.SAME, _parallel),
    Check("run", OnQuotient.CERTIFIED, _run, symmetric=symmetric_run.certify),
    Check("races", OnQuotient.CERTIFIED, _races, symmetric=symmetric_races.certify),
    Check("meaning", OnQuotient.CERTIFIED, _meaning, symmetric=symmetric_flow.certify),
)


# ------------------------------------------------------------------ the two back ends


def _report(c: Candidate, findings: list[Finding], options: Options, notes: list[str] = ()) -> Report:
    report = Report(c.program, findings, assumptions=[f"DMA ordering: {DMA_ORDERS[options.dma_order]}"]
                    + c.assumptions + list(notes))
    if c.placement.topo.spec != "ring":  # the default `--topology ring` of N devices goes unsaid
        report.placement = c.placement.describe()
    return report


def full_report(c: Candidate, options: Options) -> Report:
    """Every check of `CHECKS` on every device's events: the verdict, explained."""
    dma_order_known(options.dma_order, c.spec)
    if c.placement.topo.ndim > 1:
        c.program.device_labels = labels(c.program, c.placement)
    a = Analysis(c, options)
    findings = [f for check in CHECKS for f in check.full(a)]
    if a.machine is not None and not a.finished:   # said, not left silent: what a hang leaves unchecked
        calls = any(ev.invocation for d in c.program.devices for ev in d)
        a.notes.append(UNFINISHED.format(calls=" (in every kernel call, the ones before the hang included)"
                                         if calls else ""))
    report = _report(c, findings, options, a.notes)
    report.routes = route_summary(c.program, c.placement)
    return report


def on_quotient(c: Candidate, options: Options) -> Report | None:
    """The clean report (route warnings aside) of `c.program`, a `SymmetricProgram` (over
    translations: `rotation.rotation_unroll` for a schedule, `pallas.interpret.Lanes` for a
    traced kernel; over `Group.XOR`: `xor.xor_unroll`), checked on the quotient; None when
    the full analysis must decide (any other finding, or the quotient cannot tell). The checks `OnQuotient.SAME` run as they
    are: routes depend only on the offset on wrapped axes, so device 0's route findings are
    every device's, and the full analysis reports each op's first, which is device 0's:
    warnings (a far send) are the same list; an error sends the program to the full path.
    Under XOR symmetry routes depend on the device, so the quotient is taken only on a ring
    where each offset's hop count is the same from every device
    (`placement.xor_routes_symmetric`), and the route summary counts every device's sends
    (`placement.xor_route_summary`). The checks `OnQuotient.CERTIFIED` are certified
    together by their symmetric back ends (`symmetric.certify.clean`), under the "any" DMA ordering; a program clean under it is
    clean under "in-order" too (in order, every DMA interval ends no later:
    `order.dma_ends`)."""
    dma_order_known(options.dma_order, c.spec)
    sym, placement = c.program, c.placement
    if not isinstance(sym, SymmetricProgram):
        raise TypeError(f"on_quotient checks a SymmetricProgram, not a {type(sym).__name__}")
    program = sym.representatives  # what the checks `OnQuotient.SAME` read: device 0's program
    if not wrapped(placement):
        return None
    if placement.topo.ndim > 1:  # before the route findings, which name devices by their labels
        program.device_labels = labels(program, placement)
    xor = sym.group is Group.XOR
    if xor and not xor_routes_symmetric(program, placement):
        return None
    a, kept = Analysis(replace(c, program=program), options), []
    for check in CHECKS:
        if check.on_quotient is OnQuotient.SAME:
            found = check.full(a)
            if any(f.severity != Severity.WARNING or not check.keeps_warnings for f in found):
                return None
            kept += found
    certified = tuple(check.symmetric for check in CHECKS if check.on_quotient is OnQuotient.CERTIFIED)
    if certified and not clean(c.spec, sym, c.meaning, options.jobs, certified):
        return None
    report = _report(c, kept, options)
    report.routes = xor_route_summary(program, placement) if xor else rotated_route_summary(program, placement)
    return report


def run(subject: Subject, options: Options = Options()) -> Report:
    """The verdict on `subject`: the quotient's when it certifies a clean run, else the full
    analysis'; under `options.strict`, warnings are errors."""
    with collector_paused():  # unrolling and the analyses allocate millions of tuples
        q = subject.quotient()
        report = None if q is None else on_quotient(q, options)
        if report is None:
            report = full_report(subject.full(), options)
    return apply_strict(report, options.strict)


def apply_strict(report: Any, strict: bool) -> Any:
    """`--strict`: every warning of `report` (a missing wraparound, a far send) becomes an
    error, saying so."""
    if strict:
        for f in getattr(report, "findings", ()):
            if f.severity == Severity.WARNING:
                f.severity = Severity.ERROR
                f.message += " [an error under --strict]"
    return report
