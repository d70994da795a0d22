"""The verifier's semaphore machine on a clock: a discrete-event timing of one run.

`TimedMachine` is `verify.simulate.Machine` with time. It executes the same unrolled
events under the same semaphore semantics (`Machine.execute`); only the two effects that
take time on hardware are deferred:
- a DMA start costs the issuing core `dma_overhead`, then its bytes flow through the
  directed links of its route (and the memories at both ends) at max-min fair rates
  (`network.FluidNetwork`); the send semaphore is credited when the last byte has left,
  the receive semaphore `hops x hop_latency` later;
- a remote signal arrives `hops x hop_latency` after it is sent.
A broadcast copy (`multicast`, `verify/broadcast.py`) on a switched topology is one multicast
(`multimem.st`, as the Mosaic GPU emitter writes it): its first start of a run sends the bytes
once through the source's port out, and the switch through every target's port in; the
run's other starts only signal (no DMA issue) and end when it does.
Compute ops hold their core for their roofline time. A wait holds its core until its
semaphore has the value. Events are processed in time order, so contention is exact for
the fluid model.
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Callable

from .. import limits
from ..units import time_text
from ..verify.events import COMPUTES, Compute, DmaStart, Event, Program, Region, SemId, SemWait, Signal
from ..verify.simulate import Machine
from .chips import DMA_ISSUE_OVERHEAD, HOP_LATENCY, Chip
from .network import Flow, FluidNetwork, Resource
from .steady import DEPOSIT, DEVICE, FLOWS, INJECT, SteadyState, Unfolded
from ..topology import SWITCH
from ..verify.placement import Link, Placement, coord_text, link_text

_DEVICE, _INJECT, _FLOWS, _DEPOSIT = DEVICE, INJECT, FLOWS, DEPOSIT


@dataclass(frozen=True)
class Hardware:
    """What the timing depends on besides the program: chip, placement and link figures."""
    chip: Chip
    placement: Placement
    hop_latency: float = HOP_LATENCY
    dma_overhead: float = DMA_ISSUE_OVERHEAD

    def link_capacity(self, link: Link) -> float:
        """One way, bytes/s: one ICI link, or a GPU's port into or out of the switch fabric
        (all its NVLinks: `Chip.port_bandwidth`)."""
        return self.chip.port_bandwidth if self.placement.topo.switched else self.chip.link_bandwidth

    def in_bandwidth(self, device: int) -> float:
        """Bytes/s that can arrive at a device from the others of its instance: its links in
        (`Placement.degree` of them; through a switch, its one port out of the fabric)."""
        return self.placement.degree(device) * (self.chip.port_bandwidth if self.placement.topo.switched
                                                else self.chip.link_bandwidth)

    def capacities(self) -> dict[Resource, float]:
        caps: dict[Resource, float] = {("link", *link): self.link_capacity(link) for link in self.placement.links}
        for d in range(self.placement.n):
            caps[("hbm", d)] = self.chip.hbm_bandwidth
            caps[("vmem", d)] = self.chip.vmem_bandwidth
        return caps


def resource_text(r: Resource) -> str:
    if r[0] == "link":
        return "link " + link_text((r[1], r[2]))
    return f"{r[0].upper()} of device {r[1]}"


@dataclass
class Dma:
    """One DMA's life: issued by its core, bytes flowing, source read, bytes landed."""
    event: Event
    issued: float
    injected: float = 0.0
    sent: float = float("nan")      # last byte left the source (send semaphore credited)
    landed: float = float("nan")    # last byte arrived (receive semaphore credited)
    links: list[Link] = field(default_factory=list)
    flow: Flow | None = None
    # A start of a broadcast run (`TimedMachine.multicast`): the run's first start, whose one
    # multicast flow carries the run's bytes (itself, for the first), and the later starts
    # waiting for it to end.
    leader: "Dma | None" = None
    riders: list["Dma"] = field(default_factory=list)

    @property
    def bottleneck(self) -> Resource | None:
        """The resource that limited this DMA's rate for the longest time."""
        if self.flow is None or not self.flow.limited:
            return None
        return max(self.flow.limited.items(), key=lambda kv: kv[1])[0]


@dataclass(frozen=True)
class Span:
    """A bar on a device's timeline."""
    device: int
    kind: str       # "dma" (outgoing, issue to landed), "compute", "wait" (blocked)
    start: float
    end: float
    event: Event
    label: str


@dataclass(frozen=True)
class PathStep:
    """One link of the critical path: a device's own work, or a transfer between devices."""
    kind: str        # "run" (program order on one device), "dma", "signal"
    device: int
    start: float
    end: float
    first: Event
    last: Event
    detail: str = ""
    period: float = 0.0  # "steady": repetitions timed by their period (`steady.py`), each this long

    @property
    def seconds(self) -> float:
        return self.end - self.start


class TimedMachine(Machine):
    def __init__(self, program: Program, hw: Hardware, memory: dict[str, str]):
        super().__init__(program, account=True)
        if program.device_count != hw.placement.n:
            raise ValueError(f"the program has {program.device_count} devices but the placement {hw.placement.n}")
        # The devices whose events run: all of them, or device 0 alone on the symmetric
        # quotient (`cost/quotient.py`); targets are checked against program.n.
        self.n = len(program.devices)
        self.hw = hw
        self.memory = memory  # buffer name -> "hbm" | "vmem"
        self.ready.clear()
        self.now = 0.0
        self.clock = [0.0] * self.n
        self.pending: list[float | None] = [None] * self.n
        self.heap: list = []
        self.seq = itertools.count()
        self.net = FluidNetwork(self.capacities())
        self.version = 0
        self.begin: dict[Event, float] = {}
        self.end: dict[Event, float] = {}
        self.dmas: dict[Event, Dma] = {}
        self.spans: list[Span] = []
        self.blocked: set[Event] = set()
        # device -> the last deposit that woke it: (source event, arrival, the semaphore's owner
        # as the source saw it); a blocked wait -> the same, for the critical path
        self.waker: dict[int, tuple[Event, float, int]] = {}
        self.cause: dict[Event, tuple[Event, float, int]] = {}
        self.arrival: dict[tuple[Event, SemId], float] = {}  # (source, sem) -> when its deposit arrived
        # Broadcast copies timed as one multicast (`estimate_program`; empty: each start its own
        # copy), and the last broadcast start of each device (to find the run it continues).
        self.multicast: frozenset[str] = frozenset()
        self.last_broadcast: dict[int, Dma] = {}
        self.rerated = 0  # transfers re-rated so far (`timed_flows`: the fluid network's work)
        self.rerate_limit = limits.value("timed_flows")
        # A folded program (`Program.folds`, pricing only): device 0's events unfolded as
        # they are reached, and the repetitions whose run repeats skipped (`cost/steady.py`).
        self.steady: SteadyState | None = None
        if program.folds:
            if self.n != 1:
                raise ValueError("a folded program is timed on device 0's events alone (the quotient)")
            events = Unfolded(program.devices[0], program.folds)
            self.devices = [events]
            self.limits = [len(events)]
            self.steady = SteadyState(self, events)
        # Called when the events run pass `timed_events` (a folded program whose repetitions
        # never settle): refuses as `model.check_one_device` does before unrolling.
        self.too_many: Callable[[], None] | None = None
        self.executed = 0
        self.event_limit = limits.value("timed_events")

    # -- scheduling ---------------------------------------------------------
    def _push(self, t: float, kind: int, payload) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), kind, payload))

    def _wake(self, d: int, t: float) -> None:
        if self.pending[d] is not None and self.pending[d] <= t:
            return
        self.pending[d] = t
        self._push(t, _DEVICE, d)

    # -- what the quotient (`cost/quotient.py`) changes ----------------------------
    def capacities(self) -> dict[Resource, float]:
        caps = self.hw.capacities()
        for p in range(self.program.device_count, self.program.n):  # `cores: 2`: each core's VMEM
            caps[("vmem", p)] = self.hw.chip.vmem_bandwidth
        return caps

    def home(self, sem: SemId) -> SemId:
        """The semaphore a deposit lands in (every device's own here)."""
        return sem

    def uses(self, a: DmaStart, links: list[Link]) -> dict[Resource, float]:
        """The resources a DMA's bytes flow through, with coefficients: the memory at each
        end (a local HBM -> HBM copy uses its HBM twice) and every link of its route."""
        uses: dict[Resource, float] = defaultdict(float)
        for region in (a.src, a.dst):
            if 0 <= region.device < self.program.n:  # (a send to a missing device is a `check` finding)
                uses[(self.memory[region.buffer], region.device)] += 1.0
        for link in links:
            uses[("link", *link)] += 1.0
        return dict(uses)

    def source_device(self, device: int, source: Event, owner: int) -> int:
        """The device whose event `source` fed a semaphore that `owner` names, seen from the
        device that waited on it (`device`): here simply the event's own device."""
        return source.device

    def link_bytes(self) -> float:
        """Bytes carried by all the links together (a byte crossing k links counts k times;
        through a switch, once: the links into the fabric are not counted)."""
        return sum(used for r, used in self.net.used.items() if r[0] == "link" and r[2] != SWITCH)

    def links_into(self) -> dict[int, list[list[list[float]]]]:
        """Per device, the busy spans of each link into it that carried data."""
        index = {c: d for d, c in enumerate(self.hw.placement.coords)}
        into: dict[int, list[list[list[float]]]] = defaultdict(list)
        for r, spans in self.net.active.items():
            if r[0] == "link" and r[2] in index:
                into[index[r[2]]].append(spans)
        return into

    @property
    def alike(self) -> int:
        """How many devices each timed device stands for (`links_into`): 1 here."""
        return 1

    def stuck_devices(self) -> int:
        """Devices that never finish."""
        return len(self.stuck())

    # -- arrivals -----------------------------------------------------------------
    def _arrive(self, sem: SemId, amount: int, source: Event) -> None:
        owner, sem = sem[0], self.home(sem)
        waiters = self.blocked_on.get(sem, ())
        self.arrival[(source, sem)] = self.now
        self._deposit(sem, amount, source)
        for waiter in waiters:
            self.waker[waiter] = (source, self.now, owner)

    def _reschedule_flows(self) -> None:
        """After a start or end of a transfer, which re-rated every transfer in flight: count
        them against `timed_flows`, and schedule the next completion."""
        self.rerated += len(self.net.flows)
        if self.rerated > self.rerate_limit:
            limits.check("timed_flows", self.rerated,
                         f"the transfers re-rated by the timed run ({len(self.net.flows):,} in flight at "
                         f"{time_text(self.now)})", file=self.program.file,
                         fix="a schedule with that many transfers in flight at once (a one-shot to every "
                             "chip of a large slice) is for small sizes: price it at a smaller size")
        self.version += 1
        t = self.net.next_completion()
        if t is not None:
            self._push(t, _FLOWS, self.version)

    # -- the two timed effects ----------------------------------------------
    def _signal(self, ev: Event, a: Signal) -> None:
        # between chips (a TensorCore's process runs on its chip: `Program.place`)
        source, target = self.program.place(ev.device), a.sem[0]
        if not 0 <= target < self.program.n or (target := self.program.place(target)) == source:
            self._arrive(a.sem, a.inc, ev)
            return
        self._push(self.now + self.hw.placement.hops(source, target) * self.hw.hop_latency,
                   _DEPOSIT, (a.sem, a.inc, ev))

    def _start_dma(self, ev: Event, a: DmaStart) -> None:
        dma = Dma(ev, issued=self.now, injected=self.now + self.hw.dma_overhead)
        if a.copy in self.multicast and a.remote:
            prev = self.last_broadcast.get(ev.device)
            same_run = prev is not None and prev.event.action.copy == a.copy and prev.event.index == ev.index - 1
            dma.leader = prev.leader if same_run else dma
            self.last_broadcast[ev.device] = dma
            if same_run:  # a later start of a multicast issues no copy: it only signals (as a signal, no core time)
                dma.injected = self.now
        self.dmas[ev] = dma
        self.clock[ev.device] = dma.injected
        self._push(dma.injected, _INJECT, dma)

    def _inject(self, dma: Dma) -> None:
        a: DmaStart = dma.event.action
        if a.remote and 0 <= a.dst.device < self.program.n:
            src, dst = self.program.place(a.src.device), self.program.place(a.dst.device)
            if src != dst:
                dma.links = self.hw.placement.route(src, dst)
        if dma.leader is not None and dma.leader is not dma:  # a later start of a multicast
            if dma.leader.sent == dma.leader.sent:  # (not NaN: its flow has ended)
                self._finish(dma)
            else:
                dma.leader.riders.append(dma)
            return
        uses = self.multicast_uses(a) if dma.leader is dma else self.uses(a, dma.links)
        dma.flow = Flow(dma, uses, float(a.nbytes))
        self.net.advance(self.now)
        self.net.add(dma.flow)
        self._reschedule_flows()

    def multicast_uses(self, a: DmaStart) -> dict[Resource, float]:
        """The resources of a multicast from `a`'s source to every other device: the source's
        memory and the first link of its routes (its port out) once, and each target's memory
        and the rest of its route (the switch's port into it) per target. (`uses` counts no
        region on device -1: each part names only the end it is about.)"""
        def at(region: Region, device: int) -> Region:
            return Region(region.buffer, device, region.box, region.kept, region.itemsize)

        targets = [t for t in range(self.program.n) if t != a.src.device]
        routes = {t: self.hw.placement.route(a.src.device, t) for t in targets}
        parts = [(replace(a, dst=at(a.dst, -1)), routes[targets[0]][:1])]
        parts += [(replace(a, src=at(a.src, -1), dst=at(a.dst, t)), routes[t][1:]) for t in targets]
        uses: dict[Resource, float] = defaultdict(float)
        for start, links in parts:
            for r, c in self.uses(start, links).items():
                uses[r] += c
        return dict(uses)

    def _finish(self, dma: Dma) -> None:
        """A DMA's last byte has left its source: credit the send semaphore now and the
        receive semaphore when the bytes land (its route's hops later)."""
        a: DmaStart = dma.event.action
        dma.sent = self.now
        if a.send_sem is None:
            dma.landed = self.now
            self._arrive(a.recv_sem, a.nbytes, dma.event)
            return
        self._arrive(a.send_sem, a.nbytes, dma.event)
        dma.landed = self.now + self.hw.placement.hops_of(dma.links) * self.hw.hop_latency
        if dma.landed == self.now:
            self._arrive(a.recv_sem, a.nbytes, dma.event)
        else:
            self._push(dma.landed, _DEPOSIT, (a.recv_sem, a.nbytes, dma.event))

    def _flows_done(self) -> None:
        self.net.advance(self.now)
        for flow in self.net.finished():
            dma: Dma = flow.key
            self._finish(dma)
            for rider in dma.riders:
                self._finish(rider)
            dma.riders.clear()
        self._reschedule_flows()

    # -- devices --------------------------------------------------------------
    def _step_device(self, d: int) -> None:
        events = self.devices[d]
        while self.pc[d] < self.limits[d]:
            if self.clock[d] > self.now:
                self._wake(d, self.clock[d])
                return
            self.clock[d] = self.now
            if self.steady is not None:
                self.steady.at(self.pc[d])  # (may jump over repetitions: pc and now move on)
            ev = events[self.pc[d]]
            self.begin.setdefault(ev, self.now)
            if not self.execute(ev):
                self.blocked.add(ev)
                return
            a = ev.action
            if isinstance(a, SemWait) and ev in self.blocked:
                self.cause[ev] = self.waker[d]
                what = a.copy or a.sem[1]
                self.spans.append(Span(d, "wait", self.begin[ev], self.now, ev, f"{a.why} {what}"))
            elif isinstance(a, Compute):
                t = compute_time(a, self.hw.chip, self.memory)
                self.clock[d] = self.now + t
                if t > 0:
                    self.spans.append(Span(d, "compute", self.now, self.clock[d], ev, f"{a.kind} {a.dst.buffer}"))
            self.end[ev] = self.clock[d]
            self.order.append(ev)
            self.pc[d] += 1
            self.executed += 1
            if self.executed > self.event_limit and self.too_many is not None:
                self.too_many()

    def run(self) -> "TimedMachine":
        for d in range(self.n):
            self._wake(d, 0.0)
        while self.heap:
            t, _, kind, payload = heapq.heappop(self.heap)
            self.now = t
            if kind == _DEVICE:
                if self.pending[payload] != t:
                    continue  # superseded by an earlier wake-up
                self.pending[payload] = None
                self._step_device(payload)
            elif kind == _INJECT:
                self._inject(payload)
            elif kind == _FLOWS:
                if payload == self.version:
                    self._flows_done()
            else:
                self._arrive(*payload)
            while self.ready:
                self._wake(self.ready.popleft(), self.now)
        for dma in self.dmas.values():
            a: DmaStart = dma.event.action
            label = f"{a.copy} -> d{a.dst.device}" if a.remote else f"{a.copy} (local)"
            self.spans.append(Span(dma.event.device, "dma", dma.issued, dma.landed, dma.event, label))
        return self

    # -- results --------------------------------------------------------------
    @property
    def makespan(self) -> float:
        return max(self.end.values(), default=0.0)

    def critical_path(self) -> list[PathStep]:
        """The chain of dependencies that ends last: a device's own work back to the wait
        that held it, the transfer that released the wait, the device that started it...
        Each step names the device it happens on (`source_device`, `translate`: on the
        quotient, device 0's events stand for every device's)."""
        if not self.end:
            return []
        last = max(self.end, key=lambda e: (self.end[e], e.device))
        steps: list[PathStep] = []
        ev: Event | None = last
        device = last.device
        run_end, run_last = self.end[last], last
        while ev is not None:
            if ev in self.cause:
                src, arrived, owner = self.cause[ev]
                steps.append(PathStep("run", device, arrived, run_end, ev, run_last))
                device = self.source_device(device, src, owner)
                if isinstance(src.action, DmaStart):
                    dma = self.dmas[src]
                    a = src.action
                    hops = self.hw.placement.hops_of(dma.links)
                    how = (f"{a.nbytes} B over {hops} hop{'s' if hops != 1 else ''}"
                           if a.remote else f"{a.nbytes} B local")
                    steps.append(PathStep("dma", device, dma.injected, arrived, src, ev,
                                          f"copy `{a.copy}` {self.dname(device)}->{self.dname(self.translate(device, a.dst.device))}: {how}"))
                    ev, run_end, run_last = src, dma.injected, src
                else:
                    steps.append(PathStep("signal", device, self.end[src], arrived, src, ev,
                                          f"{src.action.why} {self.dname(device)}->{self.dname(self.translate(device, src.action.sem[0]))}"))
                    ev, run_end, run_last = src, self.end[src], src
                continue
            prev = self.devices[ev.device][ev.index - 1] if ev.index else None
            skip = self.steady.skipped(prev.index) if self.steady is not None and prev is not None else None
            if skip is not None and prev not in self.end:  # repetitions jumped (`steady.py`)
                steps.append(PathStep("run", device, skip.end, run_end, ev, run_last))
                before = self.devices[ev.device][prev.index - skip.events]
                steps.append(PathStep("steady", device, skip.start, skip.end, before, ev,
                                      f"{skip.repetitions:,} repetitions of {skip.events // skip.repetitions:,} "
                                      f"events, {time_text(skip.period)} each, as the one before",
                                      skip.period))
                ev, run_end, run_last = before, skip.start, before
                continue
            if prev is None:
                steps.append(PathStep("run", device, 0.0, run_end, ev, run_last))
            ev = prev
        steps.reverse()
        return [s for s in steps if s.end > s.start or s.kind != "run"]

    def dname(self, p: int) -> str:
        """A process as the critical path names it: `d3`, or `d3c1` for chip 3's core 1 (`cores: 2`)."""
        n = self.program.device_count
        return f"d{p}" if self.program.cores == 1 or p < n else f"d{self.program.place(p)}c{p // n}"

    def translate(self, device: int, target: int) -> int:
        """Device `target` as named by an event that runs on `device` (the same here)."""
        return target

    def utilization(self) -> dict[Resource, float]:
        """Fraction of the run each resource spent at full capacity-equivalent."""
        span = self.makespan or 1.0
        return {r: used / (self.net.capacity[r] * span) for r, used in self.net.used.items()}


def compute_time(a: Compute, chip: Chip, memory: dict[str, str]) -> float:
    """Roofline: max(FLOPs / peak, bytes / bandwidth of the memory each operand is in), the
    FLOPs its kind's (`events.COMPUTES[kind].flops`), the bytes those of the regions it
    touches (its destination too when it reads it, `Compute.reads_dst`). The race model's
    own writes (entry, exit, allocate) take no time."""
    spec = COMPUTES[a.kind]
    if not a.work:
        return 0.0
    if spec.flops is None:
        raise ValueError(f"the cost model cannot price `{a.dst.buffer}`: an imported Pallas kernel's own "
                         f"arithmetic (an `{a.kind}` compute) has no known FLOP count")
    reads: list[Region] = [r for r in vars(a).values() if isinstance(r, Region) and r is not a.dst]
    writes = [a.dst]
    if a.reads_dst:
        reads.append(a.dst)
    flops = spec.flops(a)

    def bw(r: Region) -> float:
        return chip.hbm_bandwidth if memory.get(r.buffer) == "hbm" else chip.vmem_bandwidth
    memory_time = sum(r.nbytes / bw(r) for r in reads + writes)
    return max(flops / chip.bf16_flops, memory_time)


def simulate(program: Program, hw: Hardware, memory: dict[str, str]) -> TimedMachine:
    return TimedMachine(program, hw, memory).run()


__all__ = ["Hardware", "Dma", "Span", "PathStep", "TimedMachine", "simulate", "compute_time",
           "resource_text", "coord_text"]
