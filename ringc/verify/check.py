"""`ringc check` of a YAML schedule: the front end that unrolls it for one N (or each sample
of its runtime data) and hands it to the one verifier core (`core.run`: the checks, the
quotient-or-full choice, `--strict`)."""

from __future__ import annotations

import time
from math import prod
from typing import Any

from ..collectives import Buffers, Collective, collective_of
from ..ir import schema as S
from ..errors import ScheduleError
from .. import topology

from .core import (Candidate, Options, Subject, apply_strict, collector_paused, dma_order_known, full_report,
                   on_quotient, run, wrapped)
from .events import Event, Program
from . import messages as M
from .findings import Report
from .order import DMA_ORDERS
from .placement import Placement, place
from .spec import Spec
from .symmetric.program import SymmetricProgram
from .cores import composed
from .rotation import rotation_unroll
from .xor import xor_unroll
from .unroll import DataFault, traced_indices, unroll
from ..data import sample_text

def resolve_topology(sched: Spec, n: int | None, topo: "str | topology.Topology",
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


def meaning_of(sched: S.Schedule, data: dict | None = None) -> "tuple[Collective, Buffers] | None":
    """A YAML schedule's meaning: its collective's class and the roles of its buffers; with
    runtime data, the collective of that sample (`Collective.with_data`, ragged_all_to_all)."""
    if sched.collective is None:
        return None
    collective = collective_of(sched)
    if data is not None and hasattr(collective, "with_data"):
        collective = collective.with_data(data)
    return collective, Buffers.of(sched)



def candidate(sched: S.Schedule, program: "Program | SymmetricProgram", placement: Placement, meaning: Any = "schedule",
              steps: dict | None = None) -> Candidate:
    """`program`, unrolled from `sched` on `placement`, as the verifier core's `Candidate`:
    the schedule is its spec, `meaning` by default the schedule's own (`meaning_of`), and
    the verdict's assumptions the schedule's (`schedule_assumptions`)."""
    return Candidate(sched, program, placement, meaning_of(sched) if meaning == "schedule" else meaning, steps,
                     schedule_assumptions(sched))


def check_program(sched: S.Schedule, program: Program, placement: "Placement | str" = topology.DEFAULT, *,
                  use_symmetry: bool = True, dma_order: str = "any", meaning: Any = "schedule",
                  steps: dict[tuple[str, int], int] | None = None) -> Report:
    """Every check of `program` (unrolled from `sched` on `placement`, a `Placement` or a
    `--topology` spelling), in full (`core.full_report`); `dma_order`, `use_symmetry` as in
    `core.Options`, `meaning` and `steps` as in `candidate`."""
    dma_order_known(dma_order, sched)
    if not isinstance(placement, Placement):
        placement = resolve_topology(sched, program.n if len(sched.axes) == 1 else None, placement)
    return full_report(candidate(sched, program, placement, meaning, steps),
                       Options(dma_order=dma_order, use_symmetry=use_symmetry))


def schedule_assumptions(sched: S.Schedule) -> list[str]:
    """What a verdict on the schedule assumes beyond the DMA ordering: what its collective's
    meaning check leaves out (`Collective.assumes`), and for a split-phase program how its
    calls run (docs/verification.md, "Programs of several kernels"). (A traced Pallas
    program says its own: `pallas.importer._check_jaxpr`.)"""
    note = collective_of(sched).assumes
    meaning = [note] if note else []
    if sched.cores > 1:
        meaning.append(f"TensorCores: each chip's {sched.cores} cores run the body as processes of their own, in any "
                       "interleaving, started together by the chip's kernel call and all ended before it returns; "
                       "HBM is the chip's and shared, VMEM and semaphores are each core's; a remote copy or signal "
                       "lands on the same core of its target chip (device d is chip d and its core 0)")
    if not sched.kernels:
        return meaning
    handed = [f"{sem} ({k} -> {t})" for k in sched.program for sem in sched.kernels[k].returns
              for t in [next((t for t in sched.program[sched.program.index(k) + 1:]
                              if sem in sched.kernels[t].takes), "?")]]
    return meaning + [f"a program of {len(sched.program)} pallas_calls ({', '.join(sched.program)}), run in this order with "
            "nothing else touching their arrays in between; semaphores handed on: "
            f"{', '.join(handed) or 'none'}; balance is checked at the end of the program"]


def cores_known(sched: S.Schedule, placement: Placement) -> None:
    """`cores: 2` on a slice of a generation with one TensorCore per chip is bad input."""
    generation = placement.topo.generation
    if sched.cores == 1 or generation is None:
        return
    from ..cost.chips import too_few_cores
    refusal = too_few_cores(sched.name, sched.cores, generation)
    if refusal:
        raise ScheduleError(refusal, file=sched.file, line=sched.line_of("cores"),
                            fix="check it on a v5p or v4 slice (e.g. --topology v5p:4x4x4), or on ring:N / torus")


def _quotient(sched: S.Schedule, placement: Placement, invocations: int) -> "Candidate | None":
    """Device 0's events of a translation-symmetric schedule on a ring or torus, or of an
    XOR-symmetric one (a hypercube's partners `me ^ (1 << k)`, `xor.py`) on a ring, the
    symmetry proved (`rotation.py`); None when there is none to prove. With `cores: 2`,
    chip 0's two cores joined into one process where that decides (`cores.composed`)."""
    if not wrapped(placement):
        return None
    program = rotation_unroll(sched, placement.sizes, invocations)
    if sched.cores > 1:
        program = composed(program) if program is not None else None
        return None if program is None else candidate(sched, program, placement)
    if program is None and placement.topo.kind == "ring" and len(placement.sizes) == 1:
        program = xor_unroll(sched, prod(placement.sizes.values()), invocations)
    return None if program is None else candidate(sched, program, placement)


def quotient_report(sched: S.Schedule, placement: Placement, invocations: int, dma_order: str = "any",
                    jobs: int | None = None) -> Report | None:
    """The clean report (route warnings aside) of a schedule from device 0's events alone
    (`_quotient`, `core.on_quotient`); None when the full analysis must decide."""
    q = _quotient(sched, placement, invocations)
    return None if q is None else on_quotient(q, Options(dma_order=dma_order, jobs=jobs))


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


def check(sched: S.Schedule, n: int | None = None, *, topology: "str | topology.Topology" = topology.DEFAULT,
          invocations: int = 1, along: str | None = None, strict: bool = False, dma_order: str = "any",
          data: "list[dict] | None" = None, data_how: str = "given samples", jobs: int | None = None) -> Report:
    """Verify `sched` on a topology: `n` devices on a ring by default, or a `--topology`
    spelling such as `torus:4x4` or `v5e:4x4` (then `n`, if given, must be its size), with
    the schedule's axes along `along` (e.g. `y`). `strict` turns warnings into errors.
    `dma_order`: "any" (default) or "in-order" (`order.DMA_ORDERS`, docs/verification.md).
    `data`: samples of the schedule's runtime data (`ringc.data`; `data_how` says where they
    came from), each checked in turn (`_data_report`). `jobs`: processes the quotient may
    use (default `background.default_jobs()`; `symmetric.certify.clean`). Raises `ScheduleError` for
    bad input."""
    t0 = time.perf_counter()
    placement = resolve_topology(sched, n, topology, along)
    cores_known(sched, placement)
    dma_order_known(dma_order, sched)
    if data is not None and not sched.data:
        raise ScheduleError(f"`{sched.name}` declares no runtime data, so --data has nothing to give",
                            file=sched.file, fix="drop --data")
    traced_indices(sched, placement.sizes)   # what the emitted kernel traces but no device may run
    if data is not None:  # each sample its own program: no quotient
        with collector_paused():
            report = apply_strict(_data_report(sched, placement, invocations, dma_order, data, data_how), strict)
    else:
        report = run(Subject(
            quotient=lambda: _quotient(sched, placement, invocations),
            full=lambda: candidate(sched, unroll(sched, sizes=placement.sizes, invocations=invocations), placement)),
            Options(dma_order=dma_order, strict=strict, jobs=jobs))
    report.seconds = time.perf_counter() - t0
    return report
