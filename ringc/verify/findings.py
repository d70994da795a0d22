"""What `ringc check` reports: findings a person can follow, and the per-(file, N) report."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .events import Event, Program
from .symmetric.program import SymmetricProgram

# Every kind of finding the verifier produces. Tests assert on these names.
KINDS = {
    "hang": "a wait that can never be satisfied",
    "unbalanced": "a semaphore non-zero at exit (over-signalled)",
    "dma_not_waited": "a DMA started and never waited",
    "byte_mismatch": "a DMA wait's byte count is no sum of the sizes of the DMAs on its semaphore (a warning)",
    "bad_target": "a send to a device that does not exist (a missing `% N`?)",
    "self_target": "a remote copy or signal to the sending device itself",
    "not_neighbour": "a send to a device that is not a graph neighbour",
    "no_wraparound": "a ring send around the end of an axis without wraparound links (several hops)",
    "unroutable": "a send TPU v5e cannot route: not at a power-of-2 offset",
    "megacore_dma": "megacore: a DMA or semaphore operation issued from core 1",
    "megacore_vmem": "megacore: a VMEM output, or a remote copy to or from VMEM",
    "race": "two unordered accesses to the same memory, at least one a write",
    "dtype_mismatch": "a DMA between buffers of different element types (the TPU compiler refuses it)",
    "parallel_dependency": "an iteration of a `parallel` grid axis depends on another iteration of it",
    "wrong_result": "an output block differs from the collective's meaning",
    "unwritten_output": "an output nothing fills: no copy or store into it carries a value (checked where there is "
                        "no meaning to compare with)",
    "unwritten_read": "a read of scratch nothing fills whose value reaches an output (checked where there is no "
                      "meaning to compare with)",
    "vmem_overflow": "a Pallas kernel's blocks and scratch take more VMEM than the generation's limit (or its "
                     "vmem_limit_bytes) lets it use",
    "out_of_bounds": "an access outside its buffer: runtime data (--data) puts a region there (a ragged size "
                     "that overflows the receive buffer), or a Pallas kernel indexes a ref out of range",
}


class Severity(StrEnum):
    ERROR = "error"      # the check fails
    WARNING = "warning"  # reported; the check passes unless `--strict`


@dataclass
class Finding:
    kind: str
    message: str
    severity: Severity = Severity.ERROR
    event: Event | None = None
    related: list[Event] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    device: int | None = None
    # What the finding needs beyond the model's guarantees, e.g. "out-of-order landing on one
    # link" (`races.OUT_OF_ORDER`): it goes away under `--dma-order in-order`. None: nothing.
    relies_on: str | None = None

    def to_json(self, program: Program | SymmetricProgram) -> dict[str, Any]:
        ev = self.event
        return {
            "kind": self.kind,
            "severity": self.severity,
            "device": ev.device if ev else self.device,
            "device_label": program.label(ev.device if ev else self.device)
            if (ev or self.device is not None) else None,  # e.g. "(1, 2)" on a 2-D topology
            "step": dict(zip(program.grid_names, ev.point)) if ev else None,
            # a Pallas kernel's loops around the event, outermost first (`Event.loops`)
            "loops": [{"line": int(at), "iteration": i} for at, i, _ in ev.loops] if ev else [],
            "invocation": ev.invocation if ev else None,
            "line": int(ev.line) if ev else None,
            "file": getattr(ev.line, "file", program.file) if ev else program.file,
            **({"via": ev.line.via} if ev and getattr(ev.line, "via", "") else {}),
            "message": self.message,
            "related": [{"device": r.device, "step": dict(zip(program.grid_names, r.point)),
                         "line": int(r.line), "file": getattr(r.line, "file", program.file)} for r in self.related],
            "trace": self.trace,
            "relies_on": self.relies_on,
        }

    def to_text(self, program: Program | SymmetricProgram, explain: bool = False) -> str:
        ev = self.event  # a line may carry its own file (a Pallas kernel's helper module)
        loc = f"{getattr(ev.line, 'file', program.file)}:{int(ev.line)}: " if ev else f"{program.file}: "
        head = f"{loc}{self.severity}: [{self.kind}] {self.message}"
        via = getattr(ev.line, "via", "") if ev else ""
        if via:  # the access is in a shared helper: how the kernel got there
            head += f"\n    line {int(ev.line)} is {via}"
        if explain and self.trace:
            head += "\n    a run that shows it:\n" + "\n".join(f"      {t}" for t in self.trace)
        return head


@dataclass
class Report:
    program: Program | SymmetricProgram  # symmetric: the quotient certified the clean verdict
    findings: list[Finding]
    seconds: float = 0.0
    placement: str | None = None  # where it was checked, e.g. "torus:4x4 (...) along x"; None: the default ring
    routes: dict | None = None     # `placement.route_summary`: sends, hops, the busiest link
    assumptions: list[str] = field(default_factory=list)  # what a verdict assumes (Pallas imports)
    title: str | None = None       # which of a script's kernel calls this is, e.g. "right_permute (line 252)"
    # Integer inputs ringc made up (zeros) that the kernel reads (an entry function's arrays
    # given without `=VALUE`), and the `--arg` that gives the first one's values: the headline
    # says the verdict is about them.
    made_up: tuple[str, ...] = ()
    made_up_fix: str = ""
    # A script that did not run to its end (a package it imports is not installed): what
    # stopped it and the fix; the kernels it would have run later are not checked.
    stopped: str = ""

    @property
    def ok(self) -> bool:
        return not any(f.severity == Severity.ERROR for f in self.findings)

    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == Severity.ERROR]

    def kinds(self) -> set[str]:
        return {f.kind for f in self.findings}

    def to_json(self) -> dict[str, Any]:
        p = self.program
        return {"file": p.file, "schedule": p.schedule_name, "N": p.device_count,
                **({"processes": p.n} if p.n != p.device_count else {}), "topology": self.placement,
                "routes": self.routes, "ok": self.ok,
                **({"call": self.title} if self.title else {}), "assumptions": self.assumptions,
                **({"made_up_inputs": list(self.made_up)} if self.made_up else {}),
                **({"script_stopped": self.stopped} if self.stopped else {}),
                "seconds": round(self.seconds, 4),
                "findings": [f.to_json(p) for f in self.findings]}

    SHOWN_PER_KIND = 5  # text output lists this many findings of each kind; --explain and JSON list all

    def to_text(self, explain: bool = False) -> str:
        p = self.program
        status = "ok" if self.ok else "FAILED"
        events = p.event_count
        on = f" on {self.placement}" if self.placement else ""
        call = f" {self.title}" if self.title else ""
        n = p.device_count
        if p.cores > 1:  # TPU: each TensorCore a process of its own
            on = f" ({p.cores} TensorCores each){on}"
        elif n != p.n:  # Mosaic GPU: the blocks are processes of their own
            on = f" ({p.n - n:,} block processes){on}"
        lines = [f"{p.file}{call} N={n}{on}: {status} ({events} events, {self.seconds:.2f}s)"]
        if self.made_up:
            names = ", ".join(self.made_up)
            lines[0] = (f"{p.file}{call} N={n}{on}: {status} on made-up inputs ({events} events, "
                        f"{self.seconds:.2f}s): {'its findings may come from' if not self.ok else 'it covers only'} "
                        f"the zeros ringc made up for {names}; give real values: {self.made_up_fix}")
        if self.stopped:
            lines.append(f"  the script did not run to its end: {self.stopped}; statements that needed it failed, "
                         "and kernel calls they would have made were not checked")
        lines += [f"  assumes: {a}" for a in self.assumptions]
        shown: dict[str, int] = {}
        for f in self.findings:
            shown[f.kind] = shown.get(f.kind, 0) + 1
            if explain or shown[f.kind] <= self.SHOWN_PER_KIND:
                lines.append("  " + f.to_text(p, explain).replace("\n", "\n  "))
        lines += [f"  ... and {count - self.SHOWN_PER_KIND} more [{kind}] findings (all of them: --explain or "
                  "--format json)" for kind, count in shown.items() if not explain and count > self.SHOWN_PER_KIND]
        return "\n".join(lines)
