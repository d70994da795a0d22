"""Mermaid diagrams of a schedule, all derived from its unrolled events and their timed run:
the memory hierarchy (`graph TB`), the ring (`graph LR`), the per-device timeline
(`gantt`) and the per-step state machine (`stateDiagram-v2`)."""

from __future__ import annotations

import re
from collections import defaultdict

from ..ir import schema as S
from ..ir.resolve import walk_ops
from ..verify.events import Compute, DmaStart, Program
from ..cost.timeline import TimedMachine
from .ops import direction, op_text, point_text, points_text

HBM_STYLE = "fill:#e1f5fe"
VMEM_STYLE = "fill:#fff3e0"


def _quoted(text: str) -> str:
    """Text for a quoted mermaid label: no double quotes, no entity or comment markers."""
    return text.replace('"', "'").replace("#", "No. ").replace("%%", "%")


def _plain(text: str) -> str:
    """Text for an unquoted label (gantt task names, state descriptions)."""
    return re.sub(r"[:;#{}\"%]", " ", text).strip()


# --- memory hierarchy ---------------------------------------------------------------------

def memory_diagram(sched: S.Schedule, program: Program) -> str:
    lines = ["graph TB"]
    spaces = {"hbm": [], "vmem": []}
    for name, buf in sched.buffers.items():
        spaces[buf.memory].append(name)
    for space, title in (("hbm", "HBM"), ("vmem", "VMEM")):
        if not spaces[space]:
            continue
        lines.append(f'    subgraph {space.upper()}["{title}"]')
        for name in spaces[space]:
            buf = sched.buffers[name]
            shape = list(program.shapes[name])
            note = {"input": "input", "output": "output", "hbm_scratch": "scratch",
                    "vmem_scratch": "scratch"}[buf.kind]
            lines.append(f'        B_{name}["{_quoted(name)}<br/>{shape} {sched.dtype_of(name)}<br/>{note}"]')
        lines.append("    end")
    edges: dict[tuple[str, str], set[str]] = defaultdict(set)
    for name, copy in sched.copies.items():
        kind = f"remote DMA {name}" if copy.remote else f"local DMA {name}"
        edges[(copy.src.name, copy.dst.name)].add(kind)
    # A pipeline's block names stand for the HBM regions they stream.
    streams = {name: spec.ref.name for op in walk_ops(sched.all_ops) if isinstance(op, S.Pipeline)
               for name, spec in op.specs.items()}
    for op in walk_ops(sched.all_ops):  # compute ops: an edge from each region read to the one written
        if op.copy_halves or not op.writes:
            continue
        dst = op.refs("writes")[0].name
        for ref in op.refs("reads"):
            edges[(streams.get(ref.name, ref.name), streams.get(dst, dst))].add(op.tag)
    for (src, dst), kinds in edges.items():
        lines.append(f'    B_{src} -->|"{_quoted("<br/>".join(sorted(kinds)))}"| B_{dst}')
    for name, buf in sched.buffers.items():
        lines.append(f"    style B_{name} {HBM_STYLE if buf.memory == 'hbm' else VMEM_STYLE}")
    return "\n".join(lines)


# --- ring -----------------------------------------------------------------------------------

def ring_diagram(program: Program, coords: list[str] | None = None) -> str:
    n = program.n
    sizes = program.axis_sizes
    shape = f" ({', '.join(f'{a}={k}' for a, k in sizes.items())})" if len(sizes) > 1 else ""
    lines = ["graph LR", f'    subgraph ring["{n} devices{shape}"]']
    for d in range(n):
        where = f"<br/>{_quoted(coords[d])}" if coords else ""
        lines.append(f'        D{d}["Device {d}{where}"]')
    lines.append("    end")
    edges: dict[tuple[int, int], set[str]] = defaultdict(set)
    for events in program.devices:
        for ev in events:
            a = ev.action
            if isinstance(a, DmaStart) and a.remote and 0 <= a.dst.device < n and a.dst.device != ev.device:
                edges[(ev.device, a.dst.device)].add(a.copy)
    for (s, t), copies in sorted(edges.items()):
        way = direction(program, s, t)
        arrow = {"right": "right →", "left": "← left"}.get(way, way)
        lines.append(f'    D{s} -->|"{arrow}<br/>{_quoted(", ".join(sorted(copies)))}"| D{t}')
    for d in range(n):
        lines.append(f"    style D{d} fill:#c8e6c9")
    return "\n".join(lines)


# --- timeline -------------------------------------------------------------------------------

def _unit(makespan: float) -> tuple[str, float]:
    """A tick so that the run is between ~30 and ~30,000 ticks long."""
    for name, scale in (("ms", 1e-3), ("us", 1e-6), ("100 ns", 1e-7), ("10 ns", 1e-8)):
        if makespan / scale >= 30:
            return name, scale
    return "ns", 1e-9


def gantt(machine: TimedMachine, title: str, max_tasks: int = 400) -> str:
    """Per-device sections: DMAs (issue to landed), compute, and blocked waits."""
    program = machine.program
    name, scale = _unit(machine.makespan)
    lines = ["gantt", f"    title {_plain(title)} (1 tick = {name})", "    dateFormat X", "    axisFormat %s"]
    by_device: dict[int, list] = defaultdict(list)
    for span in machine.spans:
        by_device[span.device].append(span)
    count = 0
    tag = {"dma": "active", "compute": "done", "wait": "crit"}
    for d in range(program.n):
        lines.append(f"    section device {d}")
        for span in sorted(by_device[d], key=lambda s: (s.start, s.kind)):
            if count >= max_tasks:
                break
            start = int(round(span.start / scale))
            end = span.end if span.end == span.end else machine.makespan  # NaN: never landed
            end = max(start + 1, int(round(end / scale)))
            label = f"{span.label} ({point_text(program.grid_names, span.event.point)})"
            lines.append(f"    {_plain(label)} :{tag[span.kind]}, t{count}, {start}, {end}")
            count += 1
    if count < len(machine.spans):  # mermaid slows to a crawl on thousands of tasks
        lines.append(f"    %% {len(machine.spans) - count} later spans not drawn (at most {max_tasks} tasks)")
    return "\n".join(lines)


# --- state machine ----------------------------------------------------------------------------

def phases(program: Program, device: int = 0) -> tuple[list[tuple], dict[tuple, list], list[tuple]]:
    """Group the device's grid points by what it does there (the sequence of ops).
    Returns (signatures in first-seen order, signature -> points, the point sequence)."""
    ops_at: dict[tuple, list] = defaultdict(list)
    seq: list[tuple] = []
    for ev in program.devices[device]:
        if isinstance(ev.action, Compute) and not ev.action.work:
            continue
        if not seq or seq[-1] != ev.point:
            seq.append(ev.point)
        ops_at[ev.point].append(op_text(ev, program))
    groups: dict[tuple, list] = {}
    for pt in seq:
        groups.setdefault(tuple(ops_at[pt]), []).append(pt)
    return list(groups), groups, [tuple(ops_at[pt]) for pt in seq]


def state_diagram(program: Program, device: int = 0) -> str:
    sigs, groups, seq = phases(program, device)
    index = {sig: i for i, sig in enumerate(sigs)}
    names = program.grid_names
    ids = []
    for i, sig in enumerate(sigs):
        base = re.sub(r"\W+", "_", points_text(names, groups[sig]).replace("..", "_to_")).strip("_")
        ids.append(f"S{i}_{base}"[:60])
    lines = ["stateDiagram-v2"]
    if seq:
        lines.append(f"    [*] --> {ids[index[seq[0]]]}")
    for i, sig in enumerate(sigs):
        lines.append(f"    state {ids[i]} {{")
        subs = [f"{ids[i]}_{k}" for k in range(len(sig))]
        if subs:
            lines.append(f"        [*] --> {subs[0]}")
        for k, text in enumerate(sig):
            lines.append(f"        {subs[k]} : {_plain(text)}")
        for a, b in zip(subs, subs[1:]):
            lines.append(f"        {a} --> {b}")
        if subs:
            lines.append(f"        {subs[-1]} --> [*]")
        lines.append("    }")
    flat = [index[sig] for sig in seq]
    moves: dict[tuple[int, int], list] = defaultdict(list)
    for a, b, pt in zip(flat, flat[1:], _sequence_points(groups, seq)[1:]):
        moves[(a, b)].append(pt)
    for (a, b), pts in moves.items():
        lines.append(f"    {ids[a]} --> {ids[b]} : {_plain(points_text(names, pts))}")
    if seq:
        lines.append(f"    {ids[flat[-1]]} --> [*]")
    return "\n".join(lines)


def _sequence_points(groups: dict[tuple, list], seq: list[tuple]) -> list[tuple]:
    """The grid points in execution order (each signature's points are consumed in order)."""
    cursor = {sig: 0 for sig in groups}
    out = []
    for sig in seq:
        out.append(groups[sig][cursor[sig]])
        cursor[sig] += 1
    return out
