"""`ringc tune`: choose a schedule's parameters with the cost model.

Every combination of the swept parameters (`--param-range chunks=1..16`) is priced at the
requested size (`--bytes`, which sets the row parameter as `ringc cost` does), on the
requested topology. Where libtpu is installed, each choice is also compiled for a TPU
slice with the same number of chips (`ringc compile`), and choices the compiler rejects
(a VMEM overflow, a tile the sizes break) are dropped with the compiler's reason; the
scoped VMEM it reports is shown. The fastest remaining choice is then checked with the
verifier on the same placement (no hang, no race, the collective's result), so the
tuner never recommends a schedule that `ringc check` would refuse.

The estimate is the cost model's (docs/cost-model.md): the ranking is as good as the
model, and the model's known limits (no DMA chunking, one timed run) apply.
"""

from __future__ import annotations

import itertools
import textwrap
import re
from dataclasses import dataclass, field
from math import isqrt

from .. import progress
from ..ir import schema as S
from ..errors import ScheduleError
from .model import CostError, Estimate, estimate
from ..units import size_text, time_text
from .timeline import Hardware
from ..compile import compile_for
from ..verify.check import check


def parse_range(text: str) -> tuple[str, list[int]]:
    """`chunks=1..16` (every integer), `chunks=1,2,4` (a list), `chunks=4` -> (name, values)."""
    m = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*=\s*(.+?)\s*", text)
    if not m:
        raise ValueError(f"expected NAME=A..B or NAME=A,B,C, got {text!r}")
    name, spec = m.groups()
    try:
        if ".." in spec:
            lo, hi = (int(v) for v in spec.split(".."))
            values = list(range(lo, hi + 1))
        else:
            values = [int(v) for v in spec.split(",")]
    except ValueError:
        raise ValueError(f"expected integers in {text!r}, e.g. {name}=1..16 or {name}=1,2,4") from None
    if not values:
        raise ValueError(f"the range {text!r} is empty")
    return name, values


@dataclass
class Choice:
    params: dict[str, int]
    estimate: Estimate | None = None
    problem: str = ""            # why it was dropped ("" if it is a candidate)
    vmem: int | None = None      # scoped VMEM the compiler reported, bytes
    compiled: bool | None = None  # None: not compiled

    @property
    def seconds(self) -> float:
        return self.estimate.seconds if self.estimate else float("inf")


@dataclass
class TuneResult:
    schedule: S.Schedule
    hw: Hardware
    nbytes: int
    choices: list[Choice]
    target: str | None
    compiler_note: str = ""
    best: Choice | None = None
    verified: str = ""
    notes: list[str] = field(default_factory=list)

    def to_text(self) -> str:
        names = list(self.choices[0].params) if self.choices else []
        first = next((c.estimate for c in self.choices if c.estimate), None)
        head = (first.header().rsplit(";", 1)[0] if first else f"{self.schedule.file}: {self.schedule.name}")
        lines = [f"{head}; tuning at {size_text(self.nbytes)}",
                 f"  compiled for {self.target}" if self.target else f"  not compiled: {self.compiler_note}"]
        cols = names + ["estimate", "efficiency", "VMEM", "verdict"]
        rows = []
        for c in sorted(self.choices, key=lambda c: (bool(c.problem), c.seconds)):
            e = c.estimate
            rows.append([str(c.params[n]) for n in names] + [
                time_text(e.seconds) if e else "-", f"{e.efficiency:.1%}" if e else "-",
                size_text(c.vmem) if c.vmem is not None else "-",
                ("best" if c is self.best else "ok") if not c.problem else c.problem])
        widths = [max(len(r[i]) for r in [cols] + rows) for i in range(len(cols))]
        for r in [cols] + rows:
            lines.append("  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
        if self.best:
            shown = ", ".join(f"{k}={v}" for k, v in self.best.params.items())
            lines.append(f"  best: {shown} ({time_text(self.best.seconds)}, {self.best.estimate.efficiency:.1%} "
                         f"of the bound); {self.verified}")
        else:
            lines.append("  no choice is left: " + "; ".join(sorted({c.problem for c in self.choices})))
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"file": self.schedule.file, "bytes": self.nbytes, "target": self.target,
                "compiler_note": self.compiler_note, "verified": self.verified,
                "best": self.best.params if self.best else None,
                "choices": [{"params": c.params, "estimate_s": c.estimate.seconds if c.estimate else None,
                             "efficiency": c.estimate.efficiency if c.estimate else None,
                             "vmem_bytes": c.vmem, "compiled": c.compiled, "problem": c.problem or None}
                            for c in self.choices]}


def compile_target(hw: Hardware, sched: S.Schedule) -> str:
    """A TPU slice of the topology's chip with as many chips as one instance of the schedule:
    its own grid for a multi-axis schedule, the most nearly square grid for a ring."""
    chip = hw.chip.name
    three_d = hw.chip.ici_links == 6
    if len(sched.axes) > 1:
        dims = [hw.placement.sizes[a] for a in sched.axes]
    else:
        n = hw.placement.n
        a = max(d for d in range(1, isqrt(n) + 1) if n % d == 0)
        dims = [a, n // a]
    if three_d:
        dims = (dims + [1, 1])[:3] if len(dims) < 3 else dims
    return f"{chip}:" + "x".join(map(str, dims))


def compiler_available() -> str:
    """'' if libtpu can be loaded, else why not."""
    try:
        import libtpu  # noqa: F401  (the `tpu` extra)
    except ImportError:
        return 'libtpu is not installed: pip install "ringc[tpu]" to compile the choices (or pass --no-compile)'
    return ""


def tune(sched: S.Schedule, hw: Hardware, nbytes: int, ranges: dict[str, list[int]], *,
         compile: bool = True, verify: bool = True) -> TuneResult:
    """Price every combination of `ranges`, drop what the compiler rejects, verify the best."""
    for name in ranges:
        if name not in sched.params:
            raise ScheduleError(f"--param-range {name}: `{sched.name}` has no parameter `{name}`",
                                file=sched.file, fix=f"its parameters are {', '.join(sched.params) or 'none'}")
    note = "--no-compile" if not compile else compiler_available()
    target = None if note else compile_target(hw, sched)
    choices: list[Choice] = []
    combos = list(itertools.product(*ranges.values()))
    with progress.bar(len(combos), f"tuning {sched.name}", unit="choice") as bar:
        for values in combos:
            params = {**sched.params, **dict(zip(ranges, values))}
            bar.describe(f"tuning {sched.name}: " + ", ".join(f"{k}={params[k]}" for k in ranges))
            choice = Choice({k: params[k] for k in ranges})
            choices.append(choice)
            _price(choice, sched, params, hw, nbytes, target)
            bar.update()
    result = TuneResult(sched, hw, nbytes, choices, target, note)
    for choice in sorted((c for c in choices if not c.problem), key=lambda c: c.seconds):
        with progress.bar(None, f"verifying {', '.join(f'{k}={v}' for k, v in choice.params.items())}"):
            verdict = _verify(choice.estimate) if verify else "not verified (--no-verify)"
        if verdict.startswith("REFUSED"):
            choice.problem = verdict  # the fastest is not always correct: try the next
            continue
        result.best, result.verified = choice, verdict
        break
    if target and len(sched.params) and any(c.compiled is False for c in choices):
        result.notes.append("the compiler sees the whole kernel at this size on one slice: VMEM-resident "
                            "buffers larger than the core's VMEM are rejected whatever the parameters")
    return result


def _price(choice: Choice, sched: S.Schedule, params: dict[str, int], hw: Hardware, nbytes: int,
           target: str | None) -> None:
    """Estimate one choice, and compile it if it fits; `choice.problem` says why it is dropped."""
    try:
        choice.estimate = estimate(sched.model_copy(update={"params": params}), hw, nbytes=nbytes)
    except ScheduleError as e:
        why = re.sub(r"^--bytes [^:]*: ", "", e.message)  # the size is in the table's heading
        choice.problem = "shapes: " + textwrap.shorten(why, width=120, placeholder=" ...")
        return
    except CostError:
        choice.problem = "hangs (see ringc check)"
        return
    if not choice.estimate.fits:  # known without the compiler: do not spend a compile on it
        choice.problem = f"VMEM: needs {size_text(choice.estimate.vmem)}, a core has {size_text(hw.chip.vmem_bytes)}"
        return
    if target:
        _compile(choice, target)


def _compile(choice: Choice, target: str) -> None:
    sched = choice.estimate.schedule
    try:
        res = compile_for(sched, target)
    except ScheduleError as e:
        choice.problem = "compile: " + e.message[:60]
        choice.compiled = False
        return
    choice.compiled = res.ok
    if res.ok:
        choice.vmem = res.memory.get("vmem_scoped")
    else:
        choice.problem = f"rejected by the compiler: {getattr(res.error, 'kind', 'compiler_error')}"


def _verify(e: Estimate) -> str:
    """`ringc check` on the estimate's placement (topology and axes), with the chosen params."""
    pl = e.hw.placement
    along = ",".join("xyz"[k] for k in pl.along)
    report = check(e.schedule, topology=pl.topo.spec, along=along)
    errors = [f for f in report.findings if f.severity == "error"]
    if errors:
        return f"REFUSED by ringc check: {errors[0].kind}"
    return f"verified by ringc check on {pl.describe()}"
