"""The per-device timeline as a PNG (matplotlib), optionally with a `check` finding drawn on it."""

from __future__ import annotations

from ..cost.plot import png_bytes, require_matplotlib
from ..cost.timeline import TimedMachine
from ..verify.events import Event
from ..verify.findings import Finding
from .ops import op_text, point_text

COLORS = {"dma": "tab:blue", "compute": "tab:green", "wait": "tab:orange"}
LANES = {"dma": 0.27, "compute": 0.0, "wait": -0.27}  # offset of each lane inside a device's row
HEIGHT = 0.24


def timeline_png(machine: TimedMachine, title: str, finding: Finding | None = None) -> bytes:
    plt = require_matplotlib()
    from matplotlib.patches import Patch
    program = machine.program
    n = program.n
    scale, unit = _scale(max(machine.makespan, machine.now))
    fig, ax = plt.subplots(figsize=(11, 1.0 + 0.9 * n))
    for span in machine.spans:
        end = span.end if span.end == span.end else machine.now  # NaN: a DMA that never landed
        y = n - 1 - span.device + LANES[span.kind]
        ax.broken_barh([(span.start / scale, max(end - span.start, 0) / scale)], (y - HEIGHT / 2, HEIGHT),
                       facecolors=COLORS[span.kind], edgecolors="black", linewidth=0.3, alpha=0.85)
    ax.set_yticks([n - 1 - d for d in range(n)], [f"device {d}" for d in range(n)])
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylim(-0.6, n - 0.4)
    ax.grid(True, axis="x", alpha=0.3)
    handles = [Patch(color=c, label=k) for k, c in COLORS.items()]
    if finding is not None:
        _draw_finding(ax, machine, finding, scale, n)
        handles.append(Patch(color="red", label=f"finding: {finding.kind}"))
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), fontsize=8, ncols=len(handles),
              frameon=False)
    ax.set_title(title, fontsize=10, pad=22)
    data = png_bytes(fig)
    plt.close(fig)
    return data


def _scale(makespan: float) -> tuple[float, str]:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if makespan >= 10 * scale:
            return scale, unit
    return 1e-9, "ns"


def _event_times(machine: TimedMachine, ev: Event) -> tuple[float, float] | None:
    if ev in machine.dmas:
        dma = machine.dmas[ev]
        end = dma.landed if dma.landed == dma.landed else machine.now
        return dma.issued, end
    if ev in machine.begin:
        return machine.begin[ev], machine.end.get(ev, machine.now)
    return None


def _draw_finding(ax, machine: TimedMachine, finding: Finding, scale: float, n: int) -> None:
    """Mark the finding's events: a hang's stuck waits run red to the end of the run; a race's
    two accesses are outlined in red with a line between them."""
    program = machine.program
    marked = []
    events = [e for e in [finding.event, *finding.related] if e is not None]
    if finding.kind == "hang":
        events += [e for e in machine.stuck() if e not in events]
    horizon = max(machine.makespan, machine.now) or 1e-9
    right = horizon * 1.15  # room for "never" bars
    for k, ev in enumerate(events):
        y = n - 1 - ev.device
        label_y = y + 0.38 if k % 2 == 0 else y - 0.48
        times = _event_times(machine, ev)
        if times is None or ev not in machine.end:  # never completes: a stuck wait
            start = machine.begin.get(ev, horizon)
            ax.broken_barh([(start / scale, (right - start) / scale)], (y - 0.4, 0.8),
                           facecolors="mistyrose", edgecolors="red", linewidth=2)
            ax.annotate(f"stuck forever: {op_text(ev, program)} (line {ev.line})", (start / scale, label_y),
                        color="red", fontsize=8)
            marked.append((start, y))
            continue
        start, end = times
        ax.broken_barh([(start / scale, max(end - start, horizon * 0.005) / scale)], (y - 0.4, 0.8),
                       facecolors="none", edgecolors="red", linewidth=2)
        ax.annotate(f"{op_text(ev, program)} ({point_text(program.grid_names, ev.point)}, line {ev.line})",
                    (start / scale, label_y), color="red", fontsize=8)
        marked.append((start, y))
    if finding.kind == "hang":
        ax.set_xlim(right=right / scale)
    if len(marked) >= 2 and finding.kind == "race":
        (x0, y0), (x1, y1) = marked[0], marked[1]
        ax.annotate("", xy=(x1 / scale, y1), xytext=(x0 / scale, y0),
                    arrowprops={"arrowstyle": "<->", "color": "red", "lw": 1.5})
    ax.figure.text(0.01, -0.02, f"{finding.kind}: " + _wrap(finding.message, 160), va="top", fontsize=7,
                   color="red")


def _wrap(text: str, width: int) -> str:
    words, lines, cur = text.split(), [], ""
    for w in words:
        if len(cur) + len(w) + 1 > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}".strip()
    lines.append(cur)
    return "\n".join(lines[:3]) + (" ..." if len(lines) > 3 else "")
