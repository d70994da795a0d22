"""`ringc cost`: time a schedule on a topology and compare it with the lower bound."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import prod
from typing import Any, Callable

from .. import limits, topology as T
from ..collectives import TITLES
from ..ir import schema as S
from ..ir.resolve import walk_ops
from ..units import size_text, time_text
from ..verify.events import Event, Program
from ..verify.placement import place
from ..verify.races import describe
from ..verify.symmetric.program import SymmetricProgram
from ..verify.unroll import Unroller, unroll, window_id
from .bounds import Bound, lower_bound
from .chips import chip as chip_named, of_topology, too_few_cores
from .diagnose import diagnose
from .quotient import ASSUMPTION, QuotientMachine
from .steady import ASSUMPTION as STEADY
from .sizing import fit_volume
from .timeline import Hardware, PathStep, TimedMachine, resource_text
from ..ir.dtypes import itemsize, tiled_shape
from ..verify.rotation import rotation_unroll


class CostError(Exception):
    """The schedule cannot be priced: it hangs or sends to a device that does not exist.
    (`ringc check` explains why; exit code 1, like a failed check.)"""


def hardware(topology: str, sched: S.Schedule, *, along: str | None = None, n: int | None = None,
             chip: str | None = None, hop_latency: float | None = None,
             dma_overhead: float | None = None) -> Hardware:
    """The hardware a `--topology`/`--along`/`--chip` choice describes for `sched`: its axes
    bound to the topology's as `ringc check` binds them, one instance priced. `n` (from
    `--devices`) sizes a bare `ring` and must match the instance otherwise. The hop latency
    and DMA issue time default to the chip's (`Chip.hop_latency`, `Chip.dma_overhead`).
    Raises ValueError, or ScheduleError for a bad `along`."""
    bare_ring = T.sized_by_devices(topology)
    if bare_ring and n is None:
        raise ValueError("`ringc cost` needs a sized topology, e.g. ring:16 or v5e:4x4")
    topo = T.parse(topology, n if bare_ring else None)
    placement = place(sched, topo, along)
    if n is not None and n != placement.n:
        raise ValueError(f"{placement.describe(per_instance=True)} gives {placement.n} devices per instance of "
                         f"`{sched.name}`, "
                         f"not {n}; choose --devices {placement.n}, another topology, or --along")
    # Placing is O(devices x axes) (`Placement.links`); the work of the timed run is bounded
    # where it is known, before unrolling (`estimate`).
    figures = chip_named(chip) if chip else of_topology(topo)
    if (figures.fabric == "nvswitch") != topo.switched:
        raise ValueError(f"chip {figures.name} " + (f"joins its GPUs through NVSwitch, not a grid of links: price it "
                                                     f"on h100:N, not {topo.spec}" if not topo.switched else
                                                     f"has ICI links to grid neighbours, not an NVSwitch port: "
                                                     f"{topo.spec} takes its own chip (drop --chip)"))
    refusal = too_few_cores(sched.name, sched.cores, figures.name)
    if refusal:
        raise ValueError(f"{refusal}: price it on v5p or v4 (e.g. --topology v5p:4x4x4, or --chip v5p on a ring or "
                         "torus)")
    return Hardware(figures, placement, figures.hop_latency if hop_latency is None else hop_latency,
                    figures.dma_overhead if dma_overhead is None else dma_overhead)


def memory_of(sched: S.Schedule) -> dict[str, str]:
    """Where each buffer lives; a pipeline's block windows are VMEM."""
    windows = {window_id(op, name): "vmem" for op in walk_ops(sched.all_ops) if isinstance(op, S.Pipeline)
               for name in op.specs}
    return {**windows, **{name: buf.memory for name, buf in sched.buffers.items()}}


def tiled_bytes(shape: tuple[int, ...], dtype: str, tiled: bool = True) -> int:
    """Bytes of an array of `shape` in a TPU core's VMEM, laid out as Mosaic's memref layout
    does: the last dim padded to whole 128 lanes, the one before to whole tiles of 8 rows
    of 32 bits (16 of bf16, 32 of int8), or, where it has fewer rows than that, to the
    power of 2 that holds them (a [4, 16, 16, 11, 128] float32 window takes 8 MiB, not 5.5;
    a [.., 4, 1] one 128 lanes a row). `tiled=False`: the plain bytes (a GPU's shared
    memory)."""
    size = itemsize(dtype)
    dims = tiled_shape(shape, size) if tiled else shape
    return prod(dims) * size


def vmem_buffers(sched: S.Schedule, shapes: dict[str, tuple[int, ...]], tiled: bool = True) -> int:
    """Bytes of the VMEM buffers the schedule declares (its VMEM inputs, outputs and
    scratch), each padded to whole tiles (`tiled_bytes`; `tiled=False` on a GPU): without
    the nested pipelines' blocks, known from the buffers' shapes alone."""
    return sum(tiled_bytes(shapes[n], sched.dtype_of(n), tiled) for n, b in sched.buffers.items() if b.memory == "vmem")


def vmem_need(sched: S.Schedule, shapes: dict[str, tuple[int, ...]], tiled: bool = True) -> int:
    """Bytes of VMEM the kernel's own buffers take: its VMEM buffers (`vmem_buffers`) plus
    the largest nested pipeline's blocks (each twice: `emit_pipeline` double-buffers, and
    pipelines run one after another, so the compiler reuses their space), each padded to
    whole tiles. Semaphores and the compiler's own temporaries are not counted: a lower
    bound on what the TPU compiler allocates (for the library at 256 MiB it is exactly the
    scoped VMEM that `ringc compile` reports). `shapes`: the unrolled program's concrete
    shapes."""
    blocks = [sum(tiled_bytes(shapes[window_id(op, name)], sched.dtype_of(spec.ref.name), tiled)
                  for name, spec in op.specs.items())
              for op in walk_ops(sched.all_ops) if isinstance(op, S.Pipeline)]
    return vmem_buffers(sched, shapes, tiled) + max(blocks, default=0)


def vmem_capacity(schedule, chip) -> int:
    """VMEM a kernel may use on one core: the chip's, or less where the schedule's
    `vmem_limit_mib` says so (the compiler's scoped limit then)."""
    limit = schedule.vmem_limit_mib
    return min(chip.vmem_bytes, limit * 2**20) if limit and chip.tpu else chip.vmem_bytes


@dataclass
class Estimate:
    schedule: S.Schedule
    program: Program
    hw: Hardware
    machine: TimedMachine
    bound: Bound
    # Broadcast copies timed as one multicast each (switched topologies, `multicast_copies`),
    # and then the same schedule timed with a copy per GPU instead, side by side.
    multicast: frozenset[str] = frozenset()
    per_gpu: "Estimate | None" = None
    _path: list[PathStep] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def seconds(self) -> float:
        return self.machine.makespan

    @property
    def vmem(self) -> int:
        """VMEM the kernel's buffers need on one core (`vmem_need`)."""
        return vmem_need(self.schedule, self.program.shapes, tiled=self.hw.chip.tpu)

    @property
    def vmem_capacity(self) -> int:
        return vmem_capacity(self.schedule, self.hw.chip)

    @property
    def fits(self) -> bool:
        """Whether those buffers fit in one core's VMEM capacity (necessary for the kernel to
        compile; `ringc compile` is the sufficient test)."""
        return self.vmem <= self.vmem_capacity

    def vmem_text(self) -> str:
        have = size_text(self.hw.chip.vmem_bytes)
        if self.vmem_capacity < self.hw.chip.vmem_bytes:   # its vmem_limit_mib is the capacity
            cap = size_text(self.vmem_capacity)
            if self.fits:
                return (f"{size_text(self.vmem)} of the {cap} its vmem_limit_mib allows per core "
                        f"({self.hw.chip.name}: {have})")
            return (f"{size_text(self.vmem)}: DOES NOT FIT in the {cap} its vmem_limit_mib allows per core "
                    f"({self.hw.chip.name}: {have}); the TPU compiler rejects this size: raise `vmem_limit_mib` "
                    "(up to the core's VMEM) or keep the arrays in HBM and stream them through VMEM blocks")
        if not self.hw.chip.tpu:  # a GPU kernel's grid stages blocks through its SMs' shared memory
            if self.fits:
                return f"{size_text(self.vmem)} of the {have} of shared memory of all SMs ({self.hw.chip.name})"
            return (f"{size_text(self.vmem)}: more than the {have} of shared memory of all the SMs of an "
                    f"{self.hw.chip.name}: keep the arrays in HBM and stream them through blocks (a nested "
                    "`pipeline`)")
        if self.fits:
            return f"{size_text(self.vmem)} of {have} per core ({self.hw.chip.name})"
        return (f"{size_text(self.vmem)}: DOES NOT FIT in the {have} of a {self.hw.chip.name} core; the TPU "
                "compiler rejects this size: keep the arrays in HBM and stream them through VMEM blocks "
                "(a nested `pipeline`), as schedules/all_reduce_bidirectional.yaml does")

    @property
    def efficiency(self) -> float:
        return self.bound.seconds / self.seconds if self.seconds > 0 else 1.0

    @property
    def bottleneck(self) -> tuple[Any, float] | None:
        """The busiest link (capacity used / capacity over the run), else the busiest resource."""
        use = self.machine.utilization()
        links = {r: u for r, u in use.items() if r[0] == "link"}
        pool = links or use
        if not pool:
            return None
        r = max(sorted(pool, key=str), key=lambda k: pool[k])
        return r, pool[r]

    def critical_path(self) -> list[PathStep]:
        if self._path is None:  # asked by the text, the JSON, the summary and the diagnosis
            self._path = self.machine.critical_path()
        return self._path

    @property
    def assumptions(self) -> list[str]:
        """What the estimate assumes beyond the model (docs/cost-model.md)."""
        out = [ASSUMPTION] if isinstance(self.machine, QuotientMachine) else []
        if self.machine.steady is not None and self.machine.steady.skips:
            out.append(STEADY)
        if self.schedule.cores > 1:
            out.append(f"TensorCores: each of a chip's {self.schedule.cores} cores runs its own events and issues its "
                       "own DMAs (the issue time per core); the chip's links and HBM are shared by its cores")
        if self.multicast:
            names = ", ".join(f"`{n}`" for n in sorted(self.multicast))
            out.append(f"multicast: copy {names} sends one region to every other GPU, one start after another (a "
                       "broadcast): timed as one multimem store, its bytes once through the source's port out and "
                       "the switch's port into each target, as `ringc emit --target mgpu` writes it "
                       "(multimem=True); `per GPU` below times a copy to each GPU instead")
        return out

    def path_summary(self) -> dict[str, float]:
        """Seconds of the critical path by cause: transfers, latency, own work (compute, issue).
        Repetitions timed by their period (a "steady" step, `cost/steady.py`) count as the
        period before them does, once per repetition."""
        return self._summary(self.critical_path(), float("-inf"), float("inf"))

    def _summary(self, steps: list[PathStep], lo: float, hi: float) -> dict[str, float]:
        """`path_summary` of the part of `steps` between times lo and hi."""
        out = {"transfer": 0.0, "hop_latency": 0.0, "signal": 0.0, "device": 0.0}
        for step in steps:
            seconds = min(step.end, hi) - max(step.start, lo)
            if seconds <= 0:
                continue
            if step.kind == "dma":
                dma = self.machine.dmas[step.first]
                lat = self.hw.placement.hops_of(dma.links) * self.hw.hop_latency if step.end >= dma.landed else 0.0
                lat = max(0.0, min(step.end, hi) - max(step.end - lat, lo))  # (at the end of the step)
                out["hop_latency"] += lat
                out["transfer"] += seconds - lat
            elif step.kind == "signal":
                out["signal"] += seconds
            elif step.kind == "steady":
                before = self._summary([st for st in steps if st.kind != "steady"],
                                       step.start - step.period, step.start)
                for k, v in before.items():
                    out[k] += v * seconds / step.period
            else:
                out["device"] += seconds
        return out

    # -- output -----------------------------------------------------------------
    def header(self) -> str:
        s = self.schedule
        params = ", ".join(f"{k}={v}" for k, v in s.params.items())
        cores = f" ({s.cores} TensorCores each)" if s.cores > 1 else ""
        return (f"{s.file}: {s.name} ({TITLES[s.collective.kind]}), N={self.program.device_count}{cores} on "
                f"{self.hw.placement.describe(per_instance=True)}, chip {self.hw.chip.name}; "
                f"V = {size_text(self.bound.volume)} "
                f"({params})")

    def to_json(self) -> dict[str, Any]:
        bn = self.bottleneck
        return {
            "file": self.schedule.file, "schedule": self.schedule.name,
            "collective": self.schedule.collective.kind, "N": self.program.device_count,
            "cores": self.schedule.cores,
            "topology": self.hw.placement.topo.spec, "along": self.hw.placement.describe(), "chip": self.hw.chip.name,
            "params": dict(self.schedule.params), "bytes": self.bound.volume,
            "estimate_s": self.seconds, "bound_s": self.bound.seconds, "efficiency": self.efficiency,
            **({"multicast": sorted(self.multicast), "estimate_per_gpu_copies_s": self.per_gpu.seconds}
               if self.per_gpu is not None else {}),
            **({"bound_in_switch_s": self.bound.in_switch.seconds,
                "efficiency_in_switch": self.bound.in_switch.seconds / self.seconds if self.seconds > 0 else 1.0}
               if self.bound.in_switch is not None else {}),
            "bound": self.bound.to_json(),
            "bottleneck": ({"resource": resource_text(bn[0]), "utilization": bn[1]} if bn else None),
            "critical_path": [{"kind": st.kind, "device": st.device, "start_s": st.start, "end_s": st.end,
                               "from_line": st.first.line, "to_line": st.last.line, "detail": st.detail
                               or self._run_text(st)} for st in self.critical_path()],
            "critical_path_breakdown_s": self.path_summary(),
            "why": self.why(),
            "assumptions": self.assumptions,
            "hop_latency_s": self.hw.hop_latency, "dma_overhead_s": self.hw.dma_overhead,
            "vmem_bytes": self.vmem, "vmem_capacity_bytes": self.vmem_capacity, "fits_vmem": self.fits,
        }

    def why(self) -> list[str]:
        """Why the estimate is short of the bound (empty at 95% efficiency or more)."""
        return diagnose(self)

    def _run_text(self, st: PathStep) -> str:
        def where(ev: Event) -> str:  # on the quotient, device 0's event on the device it stands for
            return self.program.where(ev if ev.device == st.device else replace(ev, device=st.device))
        if st.first is st.last:
            return f"{where(st.first)}: {describe(st.first)}"
        return f"{where(st.first)} .. {where(st.last)}"

    def to_text(self, path_steps: int = 8) -> str:
        lines = [self.header()] + [f"  assumes:   {a}" for a in self.assumptions]
        comps = ", ".join(f"{k} {time_text(v)}" for k, v in self.bound.components.items())
        lines.append(f"  estimate   {time_text(self.seconds)}")
        if self.per_gpu is not None:
            lines.append(f"  per GPU    {time_text(self.per_gpu.seconds)}  (the broadcasts as a copy to each GPU, "
                         f"multimem=False; {self.per_gpu.efficiency:.1%} of the bound)")
        lines.append(f"  bound      {time_text(self.bound.seconds)}  ({self.bound.binding}; {comps})")
        lines.append(f"  efficiency {self.efficiency:.1%}")
        sw = self.bound.in_switch
        if sw is not None:
            comps = ", ".join(f"{k} {time_text(sw.components[k])}" for k in ("ingress", "egress"))
            lines.append(f"  with NVLS  {time_text(sw.seconds)}  (the bound with multicast and in-switch reduction, "
                         f"NVLink SHARP, which unicast copies cannot use; {sw.binding}; {comps}); "
                         f"{sw.seconds / self.seconds:.1%} of the estimate")
        lines.append(f"  VMEM       {self.vmem_text()}")
        bn = self.bottleneck
        if bn:
            lines.append(f"  bottleneck {resource_text(bn[0])}, busy {bn[1]:.0%} of the run")
        lines += [f"  why short:  {reason}" for reason in self.why()]
        summary = self.path_summary()
        lines.append("  critical path: " + ", ".join(f"{k.replace('_', ' ')} {time_text(v)}" for k, v in summary.items() if v))
        path = self.critical_path()
        shown = path if len(path) <= path_steps else path[:path_steps // 2] + [None] + path[-path_steps // 2:]
        for st in shown:
            if st is None:
                lines.append(f"    ... {len(path) - path_steps} more steps ...")
                continue
            text = st.detail or self._run_text(st)
            lines.append(f"    {time_text(st.start):>10} .. {time_text(st.end):>10}  {st.kind:6} {text}")
        return "\n".join(lines)


def multicast_copies(sched: S.Schedule, program: Program, hw: Hardware) -> frozenset[str]:
    """The remote copies a switched topology sends by multicast: broadcasts at these sizes
    (`verify/broadcast.py`, on every device's events: `program` when it has them, else
    unrolled here). None on a grid of links, which has no multicast."""
    remote = [n for n, c in sched.copies.items() if c.remote]
    if not hw.placement.topo.switched or not remote:
        return frozenset()
    from ..verify.broadcast import broadcast_copies
    if len(program.devices) != program.n or program.folds:
        program = unroll(sched, sizes=hw.placement.sizes)
    return frozenset(broadcast_copies(sched, program, remote))


def estimate_program(sched: S.Schedule, program: "Program | SymmetricProgram", hw: Hardware, *,
                     too_many: Callable[[], None] | None = None, multicast: bool = True) -> Estimate:
    """Time an unrolled program: every device's events, or device 0's alone on the symmetric
    quotient of a `SymmetricProgram` (`cost/quotient.py`), a folded one from its steady
    state (`Program.folds`, `cost/steady.py`; `too_many` refuses once its run passes
    `timed_events` events). On a switched topology its broadcasts are timed as multicasts
    (`multicast_copies`), and, with `multicast`, again as a copy per GPU (`Estimate.per_gpu`).
    Raises CostError if it cannot run to the end."""
    given = program
    symmetric = program if isinstance(program, SymmetricProgram) else None
    if symmetric is not None:
        program = symmetric.representatives  # device 0's program: what the estimate's texts name
    n = program.device_count  # (with `cores: 2`, a process per core: N chips)
    if n != hw.placement.n:
        raise ValueError(f"{hw.placement.describe(per_instance=True)} has {hw.placement.n} devices on the axis, "
                         f"but the program was unrolled for N={n}")
    for ev, target in program.targets:
        if not 0 <= target < n:
            raise CostError(f"{program.file}:{ev.line}: {describe(ev)} at {program.where(ev)} targets device "
                            f"{target}, which does not exist for N={n}; see `ringc check`")
    machine = (QuotientMachine(symmetric, hw, memory_of(sched)) if symmetric is not None
               else TimedMachine(program, hw, memory_of(sched)))
    machine.too_many = too_many
    if multicast:
        machine.multicast = multicast_copies(sched, program, hw)
    machine.run()
    if not machine.finished():
        first = machine.stuck()[0]
        raise CostError(f"{program.file}:{first.line}: the schedule hangs ({machine.stuck_devices()} device(s) never "
                        f"finish; first: {program.where(first)}: {describe(first)}); see `ringc check`")
    est = Estimate(sched, program, hw, machine, lower_bound(sched, program, hw), machine.multicast)
    if machine.multicast:
        est.per_gpu = estimate_program(sched, given, hw, too_many=too_many, multicast=False)
    return est


def check_one_device(sched: S.Schedule, sizes: dict[str, int], *, folded: bool = False) -> None:
    """Refuse, before unrolling, a timed run of device 0's events (the quotient) past the
    `timed_events` limit: the timeline costs far more per event than the verifier (every
    transfer's start and end re-rates the flows in flight), so a nested pipeline of tiny
    blocks over a large array (a matmul's default 8-row blocks at 256 MiB) would run for
    many minutes. Counted from above, as the unroller counts (`Unroller.ctx.work`).
    `folded`: the long pipelines are folded (`Unroller.fold_pipelines`), and what the timed
    run will run is not known before it runs: pass when the folded events are within the
    limit (the run itself refuses with this message past it: `estimate_program`)."""
    n = prod(sizes.values())
    if folded:  # (its spelled events: under the unroller's own limits, unlike all of them)
        u = Unroller(sched, n, sizes)
        u.fold_pipelines()
        if u.folding and u.ctx.work(1, 1) <= limits.value("timed_events"):
            return
    events = Unroller(sched, n, sizes).ctx.work(1, 1)
    params = ", ".join(f"{k}={v}" for k, v in sched.params.items())
    limits.check("timed_events", events, f"the events of device 0 to time ({params}), counted from above,",
                 file=sched.file, fix=_smaller_blocks(sched))


def _smaller_blocks(sched: S.Schedule) -> str:
    blocks = sorted(p for p in sched.params if p in {"bm", "bn", "bk", "block", "chunks"})
    return (f"choose larger blocks or fewer pieces ({', '.join(f'--param {b}=...' for b in blocks)})"
            if blocks else "price a smaller size")


def check_every_device(sched: S.Schedule, sizes: dict[str, int], symmetric_placement: bool = False) -> None:
    """Refuse, before unrolling, a timed run of every device past the `events` limit. Its
    work grows as N^2 per event: each of the N devices' events may start or end a transfer,
    and every start or end re-rates the transfers in flight, some on each of the N devices
    (`network.FluidNetwork.allocate`). A device's events are counted from above, as the
    unroller counts them (`Unroller.ctx.work`), without unrolling."""
    n = prod(sizes.values())
    events = Unroller(sched, n, sizes).ctx.work(1, 1)
    limits.check("timed_events", n * events, f"the events of all {n} devices to time, counted from above,",
                 file=sched.file, fix=_smaller_blocks(sched))
    limits.check("events", n * n * events,
                 f"the timed run of every device ({n} devices x {events:,} events each, counted from above, "
                 f"x {n} devices' transfers re-rated at each)", file=sched.file,
                 fix=("the schedule is not proved translation-symmetric (`ringc check` says whether it is "
                      "checked from device 0's events), so every device is timed: price fewer devices"
                      if symmetric_placement else
                      "price a placement whose axes all wrap (a ring, torus or whole-cube slice), where a "
                      "translation-symmetric schedule is timed from device 0's events alone, or fewer devices"))


def estimate(sched: S.Schedule, hw: Hardware, *, nbytes: int | None = None, every_device: bool = False,
             steady: bool = True) -> Estimate:
    """Time `sched` on `hw`, with its params chosen for `nbytes` if given. A schedule proved
    translation-symmetric on a placement whose routes are (`Placement.symmetric`) is timed
    from device 0's events on the quotient (`cost/quotient.py`; the same estimate, bound,
    bottleneck and efficiency as timing every device), its long pipelines from their
    steady state (`cost/steady.py`; `steady=False` times every row, for the tests); any
    other, or with `every_device` (a timeline of every device, for `ringc show`), is timed
    on every device."""
    sizes = hw.placement.sizes
    if nbytes is not None:
        sched = fit_volume(sched, sizes, nbytes)
    program = None
    if not every_device and hw.placement.symmetric:
        check_one_device(sched, sizes, folded=steady)
        program = rotation_unroll(sched, sizes, fold=steady)
    if program is None:
        check_every_device(sched, sizes, hw.placement.symmetric and not every_device)
        program = unroll(sched, sizes=sizes)
    refuse = (lambda: check_one_device(sched, sizes)) if program.folds else None
    return estimate_program(sched, program, hw, too_many=refuse)


__all__ = ["CostError", "Estimate", "estimate", "estimate_program", "check_one_device", "check_every_device", "hardware",
           "memory_of", "multicast_copies", "tiled_bytes", "vmem_buffers", "vmem_need"]
