"""The search of `ringc synth`: price every candidate of every family at every size, keep
the latency-bandwidth Pareto frontier and the sizes where the winner changes, and take
at each size the fastest candidate that verifies.

- **Pricing** is `ringc cost`'s (`cost.estimate`, on the symmetry quotient where the
  schedule is proved translation-symmetric): model against model, not hardware. A
  candidate whose VMEM buffers do not fit a core at a size (`Estimate.fits`) is not a
  winner at that size. Candidates are ranked by efficiency (the bound at the V their
  shapes achieve over their estimate: shapes must divide, so V is met to within
  `SIZE_SLACK`, and time alone would favour a smaller V); one the model cannot price (shapes that do not divide, a hang,
  a size past the limits) is listed with the reason. Where a second core is free, every
  other candidate is priced in a forked child (`_price_all`).
- **Frontier**: each candidate's latency is its estimate at `LATENCY_PROBE` (4 KiB) and
  its bandwidth cost the slope from there to the largest size (seconds per byte); the
  frontier is the candidates no other beats on both.
- **Verification**: the winner at a size is checked with `ringc check` on the slice
  (every device, or chip 0's events on the symmetry quotient for large N, as `ringc
  check --topology` does) at its template's small rows (the structure: chunks, pipeline,
  semaphores), then again with the params sized for that size (the rows the estimate and
  the compile use: a split the small rows divide and the sized ones do not shows there),
  then compiled for the slice's generation (`ringc compile`, when libtpu is installed and
  `compile` is on; a refusal for the compiler's default scoped VMEM is compiled again with
  `vmem_limit_mib` raised, `_compile`). A candidate that fails any of them is dropped at
  that size and the next fastest taken.
"""

from __future__ import annotations

import difflib
import multiprocessing
import time
from dataclasses import dataclass, field, replace
from typing import Any

from .. import limits, progress, topology as T
from ..collectives import NAMES, kind_named
from ..errors import LimitError, ScheduleError
from ..units import size_text, time_text
from .families import Candidate, collectives, families as default_families
from .families.base import with_vmem_limit
from ..compile import compile_for, target_devices, with_params
from ..cost.bounds import bound_of
from ..cost.model import CostError, estimate, hardware, vmem_buffers, vmem_capacity
from ..cost.sizing import fit_volume
from ..cost.tune import compile_target, compiler_available
from ..ir.loader import load_text
from ..verify.background import Background, default_jobs
from ..verify.check import check
from ..verify.placement import axis_names
from ..verify.unroll import buffer_shapes

LATENCY_PROBE = 4 * 1024
# The search's own budget of fluid-network work per estimate (`timed_flows`, unless the
# user sets that limit): a candidate with thousands of transfers in flight at once (a
# one-shot to every chip of v5p:16x16x16 at 256 MiB re-rates 16 million, over a minute) is
# listed as not priced there after about 6 s instead.
SEARCH_TIMED_FLOWS = 2_000_000
SIZE_SLACK = 0.25   # a candidate's achieved V may differ from the request by this fraction


@dataclass
class Priced:
    """One candidate's estimates: size -> (seconds, efficiency, bound seconds, binding,
    fits VMEM, the sized params), or the reason it could not be priced."""
    candidate: Candidate
    schedule: Any = None                      # the loaded template (small rows)
    points: dict[int, tuple] = field(default_factory=dict)
    problems: dict[int, str] = field(default_factory=dict)
    over_limit: dict[int, tuple[str, int]] = field(default_factory=dict)   # size -> (limit, the amount it needs)
    volumes: dict[int, int] = field(default_factory=dict)   # size -> the V its shapes achieve there
    hw: Any = None                            # its placement on the slice (cost.hardware)
    # (schedule, hardware) of `candidate.priced_as`, timed in its place (against the slice's bound)
    proxy: Any = None
    verdict: str | None = None                # None: not verified yet; "" ok; else why dropped
    verified: str = ""
    compiled: str = ""
    # size -> "" if `ringc check` also proved it with the params sized there (the rows the
    # estimate and the compile use: a region split that the template's rows divide and the
    # sized rows do not is caught there), else why it was dropped at that size.
    sized_verdicts: dict[int, str] = field(default_factory=dict)
    # `_precheck`'s answers, ahead of `_choose`: (verdict, verified) and size -> sized verdict,
    # taken by `_verify` and `_verify_sized` instead of checking again
    checked: tuple[str, str] | None = None
    sized_checked: dict[int, str] = field(default_factory=dict)

    @property
    def priced_as(self) -> str:
        """What was timed in its place (`proxy`), in words."""
        sched, hw = self.proxy
        return (f"as `{sched.name}` on {hw.placement.topo.spec}, the same run with its devices relabeled, "
                f"every transfer over one link (the slice's bound)")

    def seconds(self, size: int) -> float | None:
        p = self.points.get(size)
        return p[0] if p else None

    def usable(self, size: int) -> bool:
        p = self.points.get(size)
        return p is not None and p[4] and self.verdict in (None, "") and self.sized_verdicts.get(size, "") == ""


@dataclass
class Choice:
    size: int
    winner: Priced | None
    runner_up: Priced | None
    dropped: list[tuple[str, str]]            # (candidate, why) tried before the winner


@dataclass
class SynthResult:
    collective: str
    topology: str
    chip: str
    sizes: list[int]
    priced: list[Priced]
    choices: list[Choice]
    frontier: list[tuple[Priced, float, float]]   # (candidate, latency s, s per byte)
    changes: list[tuple[int, str, str]]           # (size, before, after)
    seconds: float
    compile_note: str
    skipped: list[tuple[str, str]] = field(default_factory=list)   # (candidate, why not priced)

    @property
    def ok(self) -> bool:
        return all(c.winner is not None for c in self.choices)

    def winners(self) -> list[Priced]:
        out: list[Priced] = []
        for c in self.choices:
            if c.winner is not None and c.winner not in out:
                out.append(c.winner)
        return out

    # -- emission ---------------------------------------------------------------------
    def yaml_of(self, p: Priced) -> str:
        """The winner's schedule with a header saying what it is and why it wins."""
        won = [c for c in self.choices if c.winner is p]
        c = p.candidate
        lines = [f"# ringc synth {self.collective} --topology {self.topology} "
                 + (f"--bytes {size_text(self.sizes[0]).replace(' ', '')}" if len(self.sizes) == 1
                    else f"--sweep {size_text(self.sizes[0]).replace(' ', '')}..{size_text(self.sizes[-1]).replace(' ', '')}"),
                 f"# Winner: {c.label}, family `{c.family}`: {c.what}.",
                 f"# Params: {', '.join(f'{k}={v}' for k, v in p.schedule.params.items())} (rows and cols are "
                 "solved from the arrays at run time;",
                 "#   --bytes V sets them for pricing)."]
        for ch in won:
            sec, eff, bound, binding, _, sized = p.points[ch.size]
            rows = ", ".join(f"{k}={v}" for k, v in sized.items() if k in ("rows", "cols"))
            ru = ch.runner_up
            ru_text = f"runner-up {_runner_up_text(ru, ch.size)}" if ru else "no runner-up"
            lines.append(f"# At {size_text(ch.size)} ({rows}): estimate {time_text(sec)}, {eff:.1%} of the bound "
                         f"{time_text(bound)} ({binding}); {ru_text}"
                         + ("; checked with these params too." if p.sized_verdicts.get(ch.size) == "" else "."))
            for name, why in ch.dropped:
                lines.append(f"#   dropped before it: {name}: {why}")
        lines.append(f"# Why: the fastest of {len(self.priced)} candidates on the {self.chip} cost model "
                     "(docs/cost-model.md; model against model, not hardware).")
        if p.proxy is not None:
            lines.append(f"# Priced: {p.priced_as}.")
        lines.append(f"# Checked: {p.verified}.")
        lines.append(f"# Compiled: {p.compiled or self.compile_note}.")
        lines.append("#")
        return "\n".join(lines) + "\n" + c.text

    # -- output -----------------------------------------------------------------------
    def to_text(self) -> str:
        n = T.parse(self.topology).size
        out = [f"ringc synth {self.collective} on {self.topology} ({n} chips, {self.chip}): "
               f"{len(self.priced)} candidates from {len({p.candidate.family for p in self.priced})} families, "
               f"searched in {self.seconds:.1f}s (cost model estimates, not hardware)"]
        head = ["V", "winner", "estimate", "bound", "of bound", "runner-up"]
        rows = []
        for ch in self.choices:
            w, ru = ch.winner, ch.runner_up
            if w is None:
                rows.append([size_text(ch.size), "none verifies", "-", "-", "-", "-"])
                continue
            sec, eff, bound, binding, _, _ = w.points[ch.size]
            rows.append([size_text(ch.size), w.candidate.label, time_text(sec), f"{time_text(bound)} ({binding})",
                         f"{eff:.1%}", _runner_up_text(ru, ch.size) if ru else "-"])
        widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
        for r in [head] + rows:
            out.append("  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
        for size, before, after in self.changes:
            out.append(f"  winner changes at {size_text(size)}: {before} -> {after}")
        out.append(f"  latency-bandwidth frontier (estimate at {size_text(LATENCY_PROBE)}; "
                   "time per MiB beyond it):")
        for p, lat, per_byte in self.frontier:
            slope = f"{time_text(per_byte * 2**20)}/MiB" if per_byte != float("inf") else "fits VMEM at no larger size"
            out.append(f"    {p.candidate.label}: {time_text(lat)}, {slope}")
        for p in self.winners():
            out.append(f"  {p.candidate.name}: {p.verified}; compiled: {p.compiled or self.compile_note}")
            if p.proxy is not None:
                out.append(f"  {p.candidate.name}: priced {p.priced_as}")
        for ch in self.choices:
            for name, why in ch.dropped:
                out.append(f"  dropped at {size_text(ch.size)}: {name}: {why}")
        for label, why in self.skipped:
            out.append(f"  not a candidate: {label}: {why}")
        unpriced = sorted({(p.candidate.label, why) for p in self.priced for why in p.problems.values()})
        for label, why in unpriced:
            out.append(f"  not priced: {label}: {why}")
        out += self._none_hints()
        return "\n".join(out)

    def _none_hints(self) -> list[str]:
        """Where a size has no winner and candidates were left unpriced by ringc's own limits
        (not by VMEM): the `--limit` that would price them (slower), the largest need each."""
        lines = []
        for ch in self.choices:
            if ch.winner is not None:
                continue
            need: dict[str, int] = {}
            for p in self.priced:
                if ch.size in p.over_limit:
                    name, amount = p.over_limit[ch.size]
                    need[name] = max(need.get(name, 0), amount)
            if need:
                flags = " ".join(f"--limit {n}={v}" for n, v in sorted(need.items()))
                lines.append(f"  none verifies at {size_text(ch.size)}: {flags} prices the candidates over "
                             f"ringc's limits (slower: every chip is timed where the slice has no symmetry)")
        return lines

    def to_json(self) -> dict:
        def point(p: Priced, size: int) -> dict | None:
            if size not in p.points:
                return None
            sec, eff, bound, binding, fits, sized = p.points[size]
            return {"estimate_s": sec, "efficiency": eff, "bound_s": bound, "binding": binding, "fits_vmem": fits,
                    "params": sized}
        return {"collective": self.collective, "topology": self.topology, "chip": self.chip, "sizes": self.sizes,
                "search_s": self.seconds, "compile_note": self.compile_note or None,
                "choices": [{"bytes": ch.size,
                             "winner": ch.winner.candidate.name if ch.winner else None,
                             "runner_up": ch.runner_up.candidate.name if ch.runner_up else None,
                             **(point(ch.winner, ch.size) or {} if ch.winner else {}),
                             "dropped": [{"candidate": n, "why": w} for n, w in ch.dropped]}
                            for ch in self.choices],
                "changes": [{"bytes": s, "from": a, "to": b} for s, a, b in self.changes],
                "frontier": [{"candidate": p.candidate.name, "latency_s": lat,
                              "seconds_per_byte": pb if pb != float("inf") else None}
                             for p, lat, pb in self.frontier],
                "candidates": [{"name": p.candidate.name, "family": p.candidate.family, "params": p.candidate.params,
                                "verdict": p.verdict, "verified": p.verified or None, "compiled": p.compiled or None,
                                "priced_as": p.priced_as if p.proxy is not None else None,
                                "sized_checks": {str(s): w or "ok" for s, w in p.sized_verdicts.items()},
                                "points": [point(p, s) for s in self.sizes],
                                "problems": {str(s): w for s, w in p.problems.items()}}
                               for p in self.priced]}


# -- input ---------------------------------------------------------------------------------

def collective_of(name: str) -> str:
    """The collective `ringc synth` searches for `name` (psum, all_gather, psum_scatter, or an
    alias such as all_reduce); ValueError with a did-you-mean otherwise."""
    kinds = collectives()
    kind = kind_named(name)
    if kind in kinds:
        return kind
    known = list(kinds) + [a for a, k in NAMES.items() if k in kinds and a != k]
    near = difflib.get_close_matches(name.lower(), known, n=1)
    hint = f"; did you mean {near[0]}?" if near else ""
    raise ValueError(f"ringc synth searches {', '.join(kinds)}, not {name!r}{hint}")


def squeezed(topo: T.Topology) -> tuple[T.Topology, str | None]:
    """The topology the families generate for, and the `--along` that binds their schedules
    to `topo`: on a slice with axes of one chip (v5p:2x2x1, the v5p-8 slice), the other
    axes alone (a 2-D schedule along x, y; a 3-D family's axis of one would have no step to
    send on). Raises ValueError for one chip: a collective over it moves nothing."""
    kept = topo.wide_axes
    if not kept:
        raise ValueError(f"{topo.spec} is one chip: a collective over it moves no data, so there is nothing to "
                         "synthesize (choose a slice of two chips or more)")
    if len(kept) == topo.ndim:
        return topo, None
    names = axis_names(topo)
    gen = replace(topo, shape=tuple(topo.shape[i] for i in kept), wrap=tuple(topo.wrap[i] for i in kept))
    return gen, ",".join(names[i] for i in kept)


def topology_of(spec: str) -> T.Topology:
    if T.sized_by_devices(spec):
        raise ValueError("`ringc synth` needs a sized topology, e.g. ring:16, torus:4x4 or v5p:4x4x4")
    try:
        return T.parse(spec)
    except ScheduleError as e:
        raise ValueError(e.message) from None


def _runner_up_text(ru: "Priced", size: int) -> str:
    """The runner-up, its estimate and its share of the bound: the share is what ranks them,
    as the candidates' shapes reach different V (a runner-up may take less time at a smaller V)."""
    return f"{ru.candidate.label} {time_text(ru.seconds(size))} ({ru.points[size][1]:.1%})"


# -- the search ------------------------------------------------------------------------------

def _price(p: Priced, hw, sizes: list[int]) -> None:
    """Price `p` at each size, smallest first. A size whose achieved V (the shapes must
    divide) is more than `SIZE_SLACK` away from the request is not a point; once the
    VMEM buffers do not fit, larger sizes are not priced (they need more). A candidate with
    a proxy (`Candidate.priced_as`) is timed as the proxy, against the slice's bound."""
    budget = limits.value("timed_flows")
    if budget == limits.LIMITS["timed_flows"].default:
        budget = SEARCH_TIMED_FLOWS
    sched, where = p.proxy or (p.schedule, hw)   # what is timed, and on what
    too_big = None
    for size in sorted(sizes):
        fitted = None
        if too_big is None:
            try:
                fitted = fit_volume(sched, where.placement.sizes, size)   # once: the VMEM test and the timing share it
            except ScheduleError as err:
                p.problems[size] = err.message.splitlines()[0][:320]
                continue
            if _vmem_buffers(fitted, where) > vmem_capacity(fitted, where.chip):
                too_big = size  # known without timing it (a one-shot's N staged shards at 256 MiB)
        if too_big is not None:
            limit = "its vmem_limit_mib" if p.schedule.vmem_limit_mib else "a core"
            p.problems[size] = f"its VMEM buffers do not fit {limit} from {size_text(too_big)} on"
            continue
        try:
            with limits.overridden({"timed_flows": budget}):
                e = estimate(fitted, where)
        except (ScheduleError, CostError, ValueError) as err:
            p.problems[size] = (getattr(err, "message", None) or str(err)).splitlines()[0][:320]
            if isinstance(err, LimitError):
                p.over_limit[size] = (err.limit, int(err.amount))
            continue
        sized = {k: v for k, v in e.schedule.params.items()}
        bound = e.bound
        if p.proxy is not None:   # the slice's bound, for the candidate with the proxy's params
            mine = p.schedule.model_copy(update={"params": sized})
            bound = bound_of(mine, hw.placement.n, buffer_shapes(mine, hw.placement.sizes), hw)
        if abs(bound.volume - size) > SIZE_SLACK * size:
            p.problems[size] = (f"its shapes give V = {size_text(bound.volume)} at best, not "
                                f"{size_text(size)}")
            continue
        eff = bound.seconds / e.seconds if e.seconds > 0 else 1.0
        p.points[size] = (e.seconds, eff, bound.seconds, bound.binding, e.fits, sized)
        p.volumes[size] = bound.volume
        if not e.fits:
            too_big = size


def _price_all(found: list[Priced], sizes: list[int], bar=None) -> None:
    """`_price` every candidate, here and in a forked child where a second core is free
    (`verify.background`: the same deterministic pricing, its estimates sent back). Each
    process takes the next candidate not yet taken (a counter they share), so that two
    slow candidates do not fall to one of them (by every other one, v5p:4x4x4's all-reduce
    split its 12.9 s of pricing 7.1 s to 5.2 s). A child that fails leaves its share to be
    priced here. `bar` counts the candidates priced (the child's when its answer comes)."""
    forked = default_jobs() > 1 and len(found) > 1
    taken = multiprocessing.Value("i", 0) if forked else None

    def price(shown=None) -> list[tuple]:
        out = []
        while True:
            if taken is None:
                i = len(out)
            else:
                with taken.get_lock():
                    i, taken.value = taken.value, taken.value + 1
            if i >= len(found):
                return out
            p = found[i]
            _price(p, p.hw, sizes)
            out.append((i, p.points, p.problems, p.over_limit, p.volumes))
            if shown is not None:
                shown.update()

    child = Background(price) if forked else None
    try:
        mine = price(bar)
        answer = child.result() if child is not None else None
    finally:
        if child is not None:
            child.close()
    done = {i for i, *_ in mine}
    if answer is None:   # (no child, or it failed: what it took is priced here)
        for i, p in enumerate(found):
            if i not in done:
                _price(p, p.hw, sizes)
                if bar is not None:
                    bar.update()
        return
    if bar is not None:
        bar.update(len(answer))
    for i, points, problems, over_limit, volumes in answer:
        p = found[i]
        p.points, p.problems, p.over_limit, p.volumes = points, problems, over_limit, volumes


def _vmem_buffers(sized, hw) -> int:
    """`cost.model.vmem_buffers` of the sized schedule (no pipeline windows: a lower bound on
    `Estimate.vmem`, known without unrolling); 0 if the shapes do not divide (the timed run
    then says why)."""
    try:
        shapes = buffer_shapes(sized, hw.placement.sizes)
    except ScheduleError:
        return 0
    return vmem_buffers(sized, shapes, hw.chip.tpu)


def _verify(p: Priced, topo: T.Topology, along: str | None = None, jobs: int | None = None) -> None:
    """`ringc check` on the slice (`along` its axes of more than one chip, where some have
    one) at the template's small rows; sets verdict and verified. `jobs` as `check`'s."""
    if p.checked is not None:   # checked ahead (`_precheck`)
        p.verdict, p.verified = p.checked
        return
    t0 = time.perf_counter()
    try:
        report = check(p.schedule, topology=topo.spec, along=along, jobs=jobs)
    except ScheduleError as e:
        p.verdict = f"refused by ringc check: {e.message.splitlines()[0]}"
        return
    errors = [f for f in report.findings if f.severity == "error"]
    if errors:
        p.verdict = f"refused by ringc check: [{errors[0].kind}] {errors[0].message.splitlines()[0][:120]}"
        return
    rows = ", ".join(f"{k}={v}" for k, v in p.schedule.params.items() if k in ("rows", "cols"))
    p.verdict = ""
    p.verified = (f"ringc check ok on {topo.spec}{f' --along {along}' if along else ''} (N={topo.size}, {rows}) in "
                  f"{time.perf_counter() - t0:.2f}s")


def _verify_sized(p: Priced, topo: T.Topology, size: int, along: str | None = None, jobs: int | None = None) -> None:
    """`ringc check` on the slice with the params sized for `size`, where they differ from
    the template's (already proved by `_verify`); sets `sized_verdicts[size]`. Within the
    check's limits (`--limit`): a check past them drops the candidate at that size."""
    if size in p.sized_checked:   # checked ahead (`_precheck`)
        p.sized_verdicts[size] = p.sized_checked[size]
        return
    sized = p.points[size][5]
    proved = [p.schedule.params] + [p.points[s][5] for s, why in p.sized_verdicts.items() if not why]
    if sized in proved:   # the template's params, or a size's already proved
        p.sized_verdicts[size] = ""
        return
    rows = ", ".join(f"{k}={v}" for k, v in sized.items() if k in ("rows", "cols"))
    try:
        report = check(with_params(p.schedule, sized), topology=topo.spec, along=along, jobs=jobs)
    except ScheduleError as e:
        p.sized_verdicts[size] = f"refused by ringc check at {rows}: {e.message.splitlines()[0][:120]}"
        return
    errors = [f for f in report.findings if f.severity == "error"]
    p.sized_verdicts[size] = (f"refused by ringc check at {rows}: [{errors[0].kind}] "
                              f"{errors[0].message.splitlines()[0][:120]}" if errors else "")


def _precheck(priced: list[Priced], sizes: list[int], topo: T.Topology, along: str | None) -> None:
    """Check each size's likely winner (the most efficient there) ahead of `_choose`, on two
    cores where a second is free: the candidates are dealt in turn to this process and a
    forked child, each check on one core (`jobs=1`), and the child's verdicts are sent
    back. The answers are kept aside (`Priced.checked`, `sized_checked`) for `_choose`,
    which takes them in its own order (what it drops, and where, is as without them) and
    checks only what was not checked ahead. A child that fails leaves its share to
    `_choose`. v5p:4x4x4's all-reduce: three winners, 1.8 s of checks one after another,
    1.2 s this way."""
    leads: dict[int, list[int]] = {}   # index in priced -> the sizes it leads
    for size in sizes:
        live = [i for i, p in enumerate(priced) if p.usable(size)]
        if live:
            leads.setdefault(max(live, key=lambda i: priced[i].points[size][1]), []).append(size)
    jobs = list(leads.items())
    if default_jobs() < 2 or len(jobs) < 2:
        return

    def verify(share: list[tuple[int, list[int]]]) -> list[tuple]:
        out = []
        for i, its in share:
            p = priced[i]
            _verify(p, topo, along, jobs=1)
            for size in its if not p.verdict else ():
                _verify_sized(p, topo, size, along, jobs=1)
            # kept aside, and p left unverified as `_choose` expects to find it
            p.checked, p.sized_checked = (p.verdict, p.verified), dict(p.sized_verdicts)
            p.verdict, p.verified, p.sized_verdicts = None, "", {}
            out.append((i, p.checked, p.sized_checked))
        return out

    child = Background(lambda: verify(jobs[1::2]))
    try:
        verify(jobs[0::2])
        answer = child.result()
    finally:
        child.close()
    for i, checked, sized in answer or ():
        priced[i].checked, priced[i].sized_checked = checked, sized


def _compile(p: Priced, hw, size: int, note: str) -> None:
    """Compile the winner, sized for `size`, for a slice of the topology's generation. One
    the compiler refuses for VMEM (its default scoped limit is a fraction of the chip's) and
    that sets no `vmem_limit_mib` is compiled again with the core's VMEM as the limit, and
    kept with that line (`with_vmem_limit`: it changes what the compiler allows, not what the
    kernel does, so the check stands)."""
    if note or p.compiled:
        return
    target = compile_target(hw, p.schedule)
    res, err = _compiled(p.schedule, hw, size, target)
    raised = ""
    if res is not None and not res.ok and getattr(res.error, "kind", "") == "vmem_overflow" \
            and p.schedule.vmem_limit_mib is None:
        text = with_vmem_limit(p.candidate.text, hw.chip, "libtpu's default scoped VMEM refused it")
        sched = load_text(text, f"<synth:{p.candidate.name}>")
        again, err2 = _compiled(sched, hw, size, target)
        if again is not None and again.ok:
            p.candidate, p.schedule, res = replace(p.candidate, text=text), sched, again
            raised = f" with vmem_limit_mib: {sched.vmem_limit_mib} (its default scoped VMEM refused it)"
    if err:
        p.verdict = f"refused by the TPU compiler: {err}"
        return
    if not res.ok:
        p.verdict = f"rejected by the TPU compiler for {target}: {getattr(res.error, 'kind', 'compiler_error')}"
        return
    p.compiled = f"ok for {target} at {size_text(size)}{raised}"


def _compilable(found: list[Priced], topology: str) -> None:
    """Refuse, before any pricing, a slice whose compile targets (`compile_target`, the
    slice itself for a TPU slice) libtpu describes for no candidate: every winner would be
    dropped by the compiler after minutes of search (v5e:3x3 is no v5e slice)."""
    why = {}
    for target in dict.fromkeys(compile_target(p.hw, p.schedule) for p in found):
        try:
            target_devices(target)
            return
        except ScheduleError as e:
            why[target] = e.message.splitlines()[0]
    if why:
        target, msg = next(iter(why.items()))
        raise ValueError(f"{topology}: the winners would be compiled for {target}, and libtpu compiles for no such "
                         f"slice ({msg.removeprefix(f'target {target!r}: ')}); pass --no-compile to search it "
                         "on the cost model alone, or name a slice libtpu knows (e.g. v5e:2x4, v5e:4x4, v5p:2x2x4)")


def _compiled(sched, hw, size: int, target):
    """(the compile result, None), or (None, why) where the schedule cannot be compiled."""
    try:
        return compile_for(fit_volume(sched, hw.placement.sizes, size), target), None
    except ScheduleError as e:
        return None, e.message.splitlines()[0][:120]


def synth(collective: str, topology: str, sizes: list[int], *, families: list | None = None,
          compile: bool = True, verify: bool = True, chip: str | None = None, **hw_options) -> SynthResult:
    """Search the families for `collective` on `topology` at each of `sizes` (bytes).
    Raises ValueError for bad input (collective, topology, sizes)."""
    t0 = time.perf_counter()
    kind = collective_of(collective)
    topo = topology_of(topology)
    gen_topo, along = squeezed(topo)
    if not sizes or any(s < 1 for s in sizes):
        raise ValueError("sizes must be positive byte counts")
    sizes = sorted(set(sizes))
    gens = default_families() if families is None else families
    priced: list[Priced] = []
    skipped: list[tuple[str, str]] = []
    chip_name = ""
    probe = [LATENCY_PROBE] if LATENCY_PROBE not in sizes else []
    found: list[Priced] = []
    for fam in gens:
        for cand in fam.generate(kind, gen_topo):
            try:
                sched = load_text(cand.text, f"<synth:{cand.name}>")
                hw = hardware(topology, sched, along=along, chip=chip, **hw_options)
                proxy = None
                if cand.priced_as is not None:
                    text, where = cand.priced_as
                    other = load_text(text, f"<synth:{cand.name} on {where}>")
                    proxy = (other, hardware(where, other, chip=hw.chip.name, hop_latency=hw.hop_latency,
                                             dma_overhead=hw.dma_overhead))
            except (ScheduleError, ValueError) as e:
                skipped.append((cand.name, (getattr(e, "message", None) or str(e)).splitlines()[0]))
                continue
            if hw.placement.n != topo.size:
                continue  # one instance does not span the slice
            chip_name = hw.chip.name
            found.append(Priced(cand, sched, hw=hw, proxy=proxy))
    note = "--no-compile" if not compile else compiler_available()
    if verify and not note:
        _compilable(found, topology)
    with progress.bar(len(found), f"pricing {kind} candidates on {topology}", unit="candidate") as bar:
        _price_all(found, probe + sizes, bar)
    for p in found:
        same = next((q for q in priced if q.points and q.points == p.points), None)
        if same is not None:  # the same schedule by another road (a family's default params)
            skipped.append((p.candidate.label, f"prices exactly as {same.candidate.label}"))
            continue
        priced.append(p)
    if not priced:
        why_not = [(fam.FAMILY, fam.unavailable(kind, gen_topo)) for fam in gens if hasattr(fam, "unavailable")]
        raise ValueError(f"no family generates {kind} on {topology}"
                         + "".join(f"\n  {n}: {w}" for n, w in skipped + [(f, w) for f, w in why_not if w]))
    choices = []
    with progress.bar(None, "verifying the fastest") as bar:
        if verify:
            bar.describe(f"checking the fastest at each size on {topo.spec}")
            _precheck(priced, sizes, topo, along)
        for size in sizes:
            choices.append(_choose(priced, size, topo, along, verify, compile, note, bar))
    changes = []
    for before, after in zip(choices, choices[1:]):
        a = before.winner.candidate.label if before.winner else "none"
        b = after.winner.candidate.label if after.winner else "none"
        if a != b:
            changes.append((after.size, a, b))
    frontier = _frontier(priced, sizes[-1])
    return SynthResult(kind, topology, chip_name, sizes, priced, choices, frontier, changes,
                       time.perf_counter() - t0, note, skipped)


def _choose(priced: list[Priced], size: int, topo: T.Topology, along: str | None, verify: bool, compile: bool,
            note: str, bar) -> Choice:
    """The winner at `size`: the most efficient candidate that verifies there (`_verify`,
    `_verify_sized`, `_compile`), the ones dropped before it, and the runner-up."""
    dropped: list[tuple[str, str]] = []
    winner = None
    while True:
        live = sorted((p for p in priced if p.usable(size)), key=lambda p: -p.points[size][1])
        if not live:
            break
        best = live[0]
        if verify and best.verdict is None:
            bar.describe(f"checking {best.candidate.name} on {topo.spec}")
            _verify(best, topo, along)
            if best.verdict:
                dropped.append((best.candidate.label, best.verdict))
                continue
        if verify and size not in best.sized_verdicts:
            bar.describe(f"checking {best.candidate.name} at {size_text(size)}")
            _verify_sized(best, topo, size, along)
            if best.sized_verdicts[size]:
                dropped.append((best.candidate.label, best.sized_verdicts[size]))
                continue
        if verify and compile and not note and not best.compiled:
            bar.describe(f"compiling {best.candidate.name} for {topo.spec}")
            _compile(best, best.hw, size, note)
            if best.verdict:
                dropped.append((best.candidate.label, best.verdict))
                continue
        winner = best
        break
    runner = next((p for p in sorted((p for p in priced if p.usable(size) and p is not winner),
                                     key=lambda p: -p.points[size][1])), None)
    return Choice(size, winner, runner, dropped)


def _frontier(priced: list[Priced], big: int) -> list[tuple[Priced, float, float]]:
    """Candidates no other beats on both latency (the estimate at LATENCY_PROBE) and
    bandwidth (seconds per byte from there to the largest size at which it fits VMEM, up
    to `big`; infinite if none), fastest latency first. Candidates that fail verification
    are left out."""
    pts = []
    for p in priced:
        lat = p.seconds(LATENCY_PROBE)
        if lat is None or p.verdict:
            continue
        fits = [s for s in sorted(p.points) if s > LATENCY_PROBE and p.usable(s)]
        per_byte = (p.seconds(fits[-1]) - lat) / (fits[-1] - LATENCY_PROBE) if fits else float("inf")
        pts.append((p, lat, per_byte))
    front = [a for a in pts if not any((b[1] <= a[1] and b[2] <= a[2]) and (b[1] < a[1] or b[2] < a[2])
                                       for b in pts)]
    return sorted(front, key=lambda t: t[1])
