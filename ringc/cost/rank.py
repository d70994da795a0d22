"""`ringc cost --collective psum --topology T --sweep A..B`: which library schedule at which size.

Every schedule of the library (`schedules/*.yaml`, or `--library DIR`) that computes the
collective and spans the whole topology with one instance (a ring schedule on `ring:16`,
a 2-axis one on `v5e:4x4`, a 3-axis one on `v5p:4x4x4`) is priced at every size of the
sweep; the table ranks them per size, NCCL-tuner style. Schedules that do not fit the
topology are listed with the reason. A schedule's own params stay at their defaults
except the one `--bytes` sizing sets (tune the rest with `ringc tune`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..collectives import kind_named
from ..ir import schema as S
from ..errors import ScheduleError
from .model import CostError, Estimate, estimate, hardware
from ..units import size_text, time_text
from .. import progress
from ..ir.loader import load
from .plot import png_bytes, require_matplotlib


def library_dir() -> Path:
    """The library shipped next to the package (the repository's `schedules/`)."""
    return Path(__file__).resolve().parents[2] / "schedules"


@dataclass
class Ranking:
    collective: str
    topology: str
    sizes: list[int]
    table: dict[str, list[Estimate | None]]  # schedule name -> one estimate per size
    skipped: list[tuple[str, str]]            # (schedule, why)

    def winner(self, i: int) -> str | None:
        timed = [(row[i].seconds, name) for name, row in self.table.items() if row[i] is not None and row[i].fits]
        return min(timed)[1] if timed else None

    def to_text(self) -> str:
        names = list(self.table)
        lines = [f"{self.collective} on {self.topology}: estimate (efficiency) of each library schedule; "
                 f"* marks the fastest that fits, ! a size whose VMEM buffers do not fit a core (the compiler "
                 f"rejects it)"]
        head = ["V"] + names
        rows = []
        for i, size in enumerate(self.sizes):
            best = self.winner(i)
            cells = [size_text(next(r[i].bound.volume for r in self.table.values() if r[i]) if best else size)]
            for name in names:
                e = self.table[name][i]
                mark = "*" if name == best else "" if e is None or e.fits else "!"
                cells.append("-" if e is None else f"{mark}{time_text(e.seconds)} ({e.efficiency:.0%})")
            rows.append(cells)
        widths = [max(len(r[k]) for r in [head] + rows) for k in range(len(head))]
        for r in [head] + rows:
            lines.append("  " + "  ".join(c.rjust(w) for c, w in zip(r, widths)))
        lines += [f"  not ranked: {name}: {why}" for name, why in self.skipped]
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"collective": self.collective, "topology": self.topology, "sizes": self.sizes,
                "winners": [self.winner(i) for i in range(len(self.sizes))],
                "schedules": {name: [None if e is None else {"bytes": e.bound.volume, "estimate_s": e.seconds,
                                                             "efficiency": e.efficiency, "vmem_bytes": e.vmem,
                                                             "fits_vmem": e.fits} for e in row]
                              for name, row in self.table.items()},
                "skipped": [{"schedule": n, "why": w} for n, w in self.skipped]}


def collective_kind(name: str) -> S.CollectiveKind:
    kind = kind_named(name)
    if kind is None:
        raise ValueError(f"unknown collective {name!r}; one of {', '.join(S.CollectiveKind)}")
    return kind


def rank(collective: str, topology: str, sizes: list[int], library: Path | None = None,
         **hw_options) -> Ranking:
    kind = collective_kind(collective)
    directory = library or library_dir()
    paths = sorted(Path(directory).glob("*.yaml"))
    if not paths:
        raise ValueError(f"no schedules in {directory}")
    table: dict[str, list[Estimate | None]] = {}
    skipped: list[tuple[str, str]] = []
    scheds = [s for s in map(load, paths) if s.collective.kind == kind]
    with progress.bar(len(scheds) * len(sizes), f"ranking {kind}", unit="estimate") as bar:
        for sched in scheds:
            bar.describe(f"ranking {kind}: {sched.name}")
            _rank_one(sched, topology, sizes, hw_options, table, skipped, bar)
    if not table:
        raise ValueError(f"no library schedule computes {kind} over the whole of {topology}"
                         + "".join(f"\n  {n}: {w}" for n, w in skipped))
    return Ranking(kind, topology, sizes, table, skipped)


def _rank_one(sched: S.Schedule, topology: str, sizes: list[int], hw_options: dict,
              table: dict[str, list[Estimate | None]], skipped: list[tuple[str, str]], bar) -> None:
    """One schedule's row of the ranking, or the reason it has none."""
    try:
        hw = hardware(topology, sched, **hw_options)
    except (ValueError, ScheduleError) as e:
        skipped.append((sched.name, getattr(e, "message", str(e)).splitlines()[0]))
        bar.update(len(sizes))
        return
    chips = hw.placement.topo.size
    if hw.placement.n != chips:
        skipped.append((sched.name, f"one instance spans {hw.placement.n} of the {chips} chips "
                                    f"(price it with `ringc cost --along`)"))
        bar.update(len(sizes))
        return
    row: list[Estimate | None] = []
    why = ""
    for size in sizes:
        try:
            row.append(estimate(sched, hw, nbytes=size))
        except (ScheduleError, CostError) as e:
            row.append(None)
            why = why or getattr(e, "message", str(e)).splitlines()[0]
        bar.update()
    if all(e is None for e in row):  # e.g. a hypercube on a ring of 6: say why, not a row of dashes
        skipped.append((sched.name, why))
        return
    table[sched.name] = row


NO_FIT = "does not fit VMEM (the compiler rejects it)"


def ranking_figure(r: Ranking):
    """Estimated time and efficiency of each schedule against size. A size whose VMEM
    buffers do not fit a core is drawn as a hollow cross on a dotted line, not as a point of
    the curve (the compiler would reject it: its time is not one anyone can have)."""
    plt = require_matplotlib()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True, gridspec_kw={"height_ratios": [3, 1.6]})
    any_misfit = False
    for name, row in r.table.items():
        pts = [(e.bound.volume, e.seconds, e.efficiency, e.fits) for e in row if e is not None]
        if not pts:
            continue
        xs, ts, effs, fits = zip(*pts)
        (line,) = top.loglog(xs, ts, ":", lw=1, alpha=0.6)  # the whole curve, faint
        color = line.get_color()
        line.set_label("_" + name)
        fit = [(x, t, f) for x, t, f, ok in pts if ok]
        bad = [(x, t, f) for x, t, f, ok in pts if not ok]
        if fit:
            fx, ft, fe = zip(*fit)
            top.loglog(fx, ft, "o-", ms=4, color=color, label=name, gid=f"fits:{name}")
            bottom.semilogx(fx, [100 * f for f in fe], "o-", ms=3, color=color, gid=f"fits:{name}")
        if bad:
            any_misfit = True
            bx, bt, be = zip(*bad)
            top.loglog(bx, bt, "x", ms=8, mew=1.8, color=color, gid=f"misfit:{name}",
                       label=name if not fit else "_" + name)
            bottom.semilogx(bx, [100 * f for f in be], "x", ms=6, mew=1.5, color=color, gid=f"misfit:{name}")
    if any_misfit:
        top.plot([], [], "x", color="gray", ms=8, mew=1.8, label=NO_FIT)
    top.set_ylabel("estimated time (s)")
    top.set_title(f"{r.collective} on {r.topology}: the library's schedules")
    top.grid(True, which="both", alpha=0.3)
    top.legend(fontsize=8)
    bottom.set_ylabel("efficiency (%)")
    bottom.set_ylim(0, 105)
    bottom.set_xlabel("collective size V")
    ticks = r.sizes[:: max(1, len(r.sizes) // 8)]
    bottom.set_xticks(ticks, [size_text(s) for s in ticks], rotation=30)
    return fig


def ranking_png(r: Ranking) -> bytes:
    plt = require_matplotlib()
    fig = ranking_figure(r)
    data = png_bytes(fig)
    plt.close(fig)
    return data
