"""The per-device timeline as a PNG (matplotlib), optionally with a `check` finding drawn on it.

Each device is a band of its own colour, with one lane for its core (compute, and the waits
it is blocked in) and one lane per DMA in flight at once: a lane never holds two bars that
overlap, so concurrent copies sit one above the other instead of on top of each other.
Bars are labelled where they are wide enough (the copy and its destination, the compute,
what a wait waits for). With a finding, its events are outlined in red and numbered, the
rest of the run is dimmed, and the finding's message is printed under the plot.

`layout()` is the drawing's structure without matplotlib (lanes, bars, highlighted events):
the tests assert on it, not on pixels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..cost.plot import png_bytes, require_matplotlib
from ..cost.timeline import TimedMachine
from ..verify.events import Event
from ..verify.findings import Finding
from .ops import op_text, point_text

COLORS = {"dma": "tab:blue", "compute": "tab:green", "wait": "tab:orange"}
KIND_NAMES = {"dma": "DMA (issue to landed)", "compute": "compute", "wait": "blocked in a wait"}
# One tint per device (a qualitative palette, repeated past 8 devices).
DEVICE_TINTS = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#2a9d8f", "#b8860b", "#e15759", "#9c755f"]
LANE_HEIGHT = 0.8        # of a lane's unit height
INCHES_PER_LANE = 0.32
PLOT_WIDTH_IN = 11.0
LABEL_CHAR_IN = 0.062    # width of one character of the bar labels (6.5 pt), inches


@dataclass
class Lane:
    device: int
    name: str            # "core", "DMA 1", "DMA 2", ...
    y: float             # centre, in data units (lane 0 at the top)


@dataclass
class Bar:
    lane: int            # index into Layout.lanes
    kind: str            # "dma" | "compute" | "wait" | "stuck" | "mark"
    start: float         # seconds
    end: float
    label: str
    event: Event | None
    highlighted: int = 0  # 1-based number of the finding's event it shows, 0 if none


@dataclass
class Layout:
    lanes: list[Lane] = field(default_factory=list)
    bars: list[Bar] = field(default_factory=list)
    horizon: float = 0.0     # seconds: the right edge of the run
    right: float = 0.0       # seconds: the right edge of the drawing (room for stuck waits)

    def lanes_of(self, device: int) -> list[Lane]:
        return [l for l in self.lanes if l.device == device]

    @property
    def highlighted(self) -> list[Bar]:
        return sorted((b for b in self.bars if b.highlighted), key=lambda b: b.highlighted)


def _pack(intervals: list[tuple[float, float, int]]) -> dict[int, int]:
    """Interval partitioning: each (start, end, key) to the first sub-lane whose last bar
    has ended by its start; returns key -> sub-lane."""
    ends: list[float] = []
    out: dict[int, int] = {}
    for start, end, key in sorted(intervals):
        for k, e in enumerate(ends):
            if e <= start:
                ends[k] = end
                out[key] = k
                break
        else:
            ends.append(end)
            out[key] = len(ends) - 1
    return out


def _finding_events(machine: TimedMachine, finding: Finding | None) -> list[Event]:
    if finding is None:
        return []
    events = [e for e in [finding.event, *finding.related] if e is not None]
    if finding.kind == "hang":
        events += [e for e in machine.stuck() if e not in events]
    seen: list[Event] = []
    for e in events:
        if e not in seen:
            seen.append(e)
    return seen


def layout(machine: TimedMachine, finding: Finding | None = None) -> Layout:
    """Lanes and bars of the timeline; the finding's events highlighted and numbered."""
    program = machine.program
    n = program.n
    horizon = max(machine.makespan, machine.now) or 1e-9
    events = _finding_events(machine, finding)
    number = {e: k + 1 for k, e in enumerate(events)}
    stuck = [e for e in events if e not in machine.end and e not in machine.dmas]
    right = horizon * (1.18 if stuck else 1.0)
    out = Layout(horizon=horizon, right=right)
    spans = []
    for span in machine.spans:
        end = span.end if span.end == span.end else horizon  # NaN: a DMA that never landed
        spans.append((span, span.start, max(end, span.start)))
    for d in range(n):
        mine = [(i, s, a, b) for i, (s, a, b) in enumerate(spans) if s.device == d]
        core = _pack([(a, b, i) for i, s, a, b in mine if s.kind != "dma"])
        dma = _pack([(a, b, i) for i, s, a, b in mine if s.kind == "dma"])
        core_lanes = max(core.values(), default=0) + 1
        dma_lanes = max(dma.values(), default=-1) + 1
        base = len(out.lanes)
        for k in range(core_lanes):
            out.lanes.append(Lane(d, "core" if core_lanes == 1 else f"core {k + 1}", len(out.lanes)))
        for k in range(dma_lanes):
            out.lanes.append(Lane(d, f"DMA {k + 1}", len(out.lanes)))
        for i, s, a, b in mine:
            lane = base + (core[i] if s.kind != "dma" else core_lanes + dma[i])
            out.bars.append(Bar(lane, s.kind, a, b, s.label, s.event, number.get(s.event, 0)))
        # The finding's events that are no span: a signal (a mark at its time) or a wait
        # that never completes (a bar from where it blocks to past the end of the run).
        drawn = {s.event for _, s, _, _ in mine}
        for ev in events:
            if ev.device != d or ev in drawn:
                continue
            text = f"{op_text(ev, program)} ({point_text(program.grid_names, ev.point)}, line {ev.line})"
            if ev in stuck:
                start = machine.begin.get(ev, horizon)
                out.bars.append(Bar(base, "stuck", start, right, f"stuck forever: {text}", ev, number[ev]))
            else:
                t = machine.begin.get(ev, machine.end.get(ev, horizon))
                out.bars.append(Bar(base, "mark", t, machine.end.get(ev, t), text, ev, number[ev]))
    return out


def timeline_png(machine: TimedMachine, title: str, finding: Finding | None = None) -> bytes:
    plt = require_matplotlib()
    from matplotlib.patches import Patch
    lay = layout(machine, finding)
    program = machine.program
    scale, unit = _scale(lay.horizon)
    lanes = len(lay.lanes)
    fig, ax = plt.subplots(figsize=(PLOT_WIDTH_IN, min(1.6 + INCHES_PER_LANE * lanes, 60)))
    axes_in = ax.get_position().width * fig.get_figwidth()
    chars_per_second = axes_in / LABEL_CHAR_IN / (lay.right * 1.01)  # label characters that fit per second
    y_of = lambda lane: lanes - 1 - lay.lanes[lane].y  # noqa: E731  (lane 0 at the top)
    for d in range(program.n):
        ys = [y_of(i) for i, l in enumerate(lay.lanes) if l.device == d]
        tint = DEVICE_TINTS[d % len(DEVICE_TINTS)]
        ax.axhspan(min(ys) - 0.5, max(ys) + 0.5, color=tint, alpha=0.10 if d % 2 == 0 else 0.18, lw=0)
        ax.axhline(min(ys) - 0.5, color="gray", lw=0.6)
    dim = finding is not None
    for bar in lay.bars:
        y = y_of(bar.lane)
        width = max(bar.end - bar.start, lay.horizon * 0.004)
        if bar.kind in ("stuck", "mark"):
            ax.broken_barh([(bar.start / scale, width / scale)], (y - 0.45, 0.9), facecolors="mistyrose"
                           if bar.kind == "stuck" else "red", edgecolors="red", linewidth=2, zorder=3)
        else:
            ax.broken_barh([(bar.start / scale, width / scale)], (y - LANE_HEIGHT / 2, LANE_HEIGHT),
                           facecolors=COLORS[bar.kind], edgecolors="red" if bar.highlighted else "black",
                           linewidth=2.2 if bar.highlighted else 0.3,
                           alpha=1.0 if bar.highlighted or not dim else 0.35, zorder=3 if bar.highlighted else 2)
        fits = int(width * chars_per_second) - 1
        if bar.kind not in ("stuck", "mark") and fits >= 4:
            text = bar.label if len(bar.label) <= fits else bar.label[:fits - 1] + "…"
            ax.text((bar.start + width / 2) / scale, y, text, ha="center", va="center", fontsize=6.5,
                    color="white" if bar.kind == "dma" else "black", clip_on=True, zorder=4)
        if bar.highlighted:
            label = (bar.label if bar.kind in ("stuck", "mark") else
                     f"{op_text(bar.event, program)} ({point_text(program.grid_names, bar.event.point)}, "
                     f"line {bar.event.line})")
            ax.annotate(f"{bar.highlighted}", (bar.start / scale, y + 0.42), color="white", fontsize=7,
                        fontweight="bold", ha="center", va="center", zorder=6,
                        bbox={"boxstyle": "circle,pad=0.2", "fc": "red", "ec": "red"})
            ax.annotate(label, ((bar.start + lay.horizon * 0.008) / scale, y + 0.42), color="darkred",
                        fontsize=7, va="center", zorder=6,
                        bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8})
    marked = lay.highlighted
    if finding is not None and finding.kind == "race" and len(marked) >= 2:
        (a, b) = marked[0], marked[1]
        ax.annotate("", xy=(a.start / scale, y_of(a.lane)), xytext=(b.start / scale, y_of(b.lane)),
                    arrowprops={"arrowstyle": "<->", "color": "red", "lw": 1.5}, zorder=5)
    ticks = [y_of(i) for i in range(lanes)]
    label = getattr(program, "label", str)  # `(1, 2)` on a 2-D topology once check has placed it
    names = [f"device {_device_name(label, l.device)}  {l.name}" if l is lay.lanes_of(l.device)[0] else l.name
             for l in lay.lanes]
    ax.set_yticks(ticks, names, fontsize=7.5)
    for tick, lane in zip(ax.get_yticklabels(), lay.lanes):
        tick.set_color(DEVICE_TINTS[lane.device % len(DEVICE_TINTS)])
        if lane is lay.lanes_of(lane.device)[0]:
            tick.set_fontweight("bold")
    ax.tick_params(axis="y", length=0)
    ax.set_ylim(-0.5, lanes - 0.5)
    ax.set_xlim(0, lay.right * 1.01 / scale)
    ax.set_xlabel(f"time ({unit})")
    ax.grid(True, axis="x", alpha=0.3)
    handles = [Patch(color=c, label=KIND_NAMES[k]) for k, c in COLORS.items()]
    if finding is not None:
        handles.append(Patch(facecolor="white", edgecolor="red", linewidth=2, label="the finding's events"))
        if any(b.kind == "stuck" for b in lay.bars):
            handles.append(Patch(facecolor="mistyrose", edgecolor="red", label="waits forever"))
        ax.annotate(f"[{finding.kind}] " + _wrap(finding.message, 170), xy=(0, 0), xycoords="axes fraction",
                    xytext=(-90, -40), textcoords="offset points", va="top", fontsize=7.5, color="darkred")
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), fontsize=8, ncols=len(handles),
              frameon=False)
    ax.set_title(title, fontsize=10, pad=22)
    data = png_bytes(fig)
    plt.close(fig)
    return data


def _device_name(label, device: int) -> str:
    name = label(device)
    return str(device) if name == str(device) else f"{device} {name}"


def _scale(makespan: float) -> tuple[float, str]:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if makespan >= 10 * scale:
            return scale, unit
    return 1e-9, "ns"


def _wrap(text: str, width: int, most: int = 4) -> str:
    words, lines, cur = text.split(), [], ""
    for w in words:
        if len(cur) + len(w) + 1 > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}".strip()
    lines.append(cur)
    return "\n".join(lines[:most]) + (" ..." if len(lines) > most else "")

