"""Markdown tables of a schedule: which slot does what at each step, the named
expressions (`let`) and the guards (`when`), all read from the unrolled program."""

from __future__ import annotations

from collections import defaultdict

from ..ir import expr as E
from ..ir import schema as S
from ..ir.resolve import walk_ops
from ..verify.events import COMPUTES, Compute, DmaStart, Program, Region
from ..verify.unroll import point_env
from .ops import direction, point_text, points_text


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|")


def table(head: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(map(_cell, head)) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(map(_cell, r)) + " |" for r in rows]
    return "\n".join(out)


def _slot(sched: S.Schedule, program: Program, r: Region) -> tuple[str, str]:
    """(column, detail): `scratch[1]` and, for part of a slot, the rows it covers."""
    k = len(sched.buffers[r.buffer].slots)
    col = r.buffer + (f"[{', '.join(str(a) for a, _ in r.box[:k])}]" if k else "")
    rest = r.box[k:]
    full = program.shapes[r.buffer][k:]
    detail = f" {rest[0][0]}:{rest[0][1]}" if rest and (rest[0][0], rest[0][1]) != (0, full[0]) else ""
    return col, detail


def slot_table(sched: S.Schedule, program: Program, device: int = 0) -> str:
    """Rows: grid points; columns: slots of `device`; cells: send (a remote DMA reads it),
    recv (a neighbour's DMA writes it), load (a local DMA writes it), read, acc, zero, set."""
    roles: dict[tuple, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    points: list[tuple] = []
    for d, events in enumerate(program.devices):
        for ev in events:
            a = ev.action
            if d == device and ev.point not in points:
                points.append(ev.point)
            mark: list[tuple[Region, str]] = []
            if isinstance(a, DmaStart):
                if d == device:
                    mark.append((a.src, f"send {direction(program, d, a.dst.device)}" if a.remote else "read"))
                    if not a.remote:
                        mark.append((a.dst, "load"))
                elif a.dst.device == device:
                    mark.append((a.dst, f"recv from {direction(program, device, d)}"))
            elif isinstance(a, Compute) and d == device and a.work:
                mark.append((a.dst, COMPUTES[a.kind].mark))
                if a.src is not None:
                    mark.append((a.src, "read"))
            for region, role in mark:
                if region.buffer not in sched.buffers:
                    continue  # a pipeline's VMEM window: the inner pipeline's own business
                col, detail = _slot(sched, program, region)
                cell = roles[ev.point][col]
                if role + detail not in cell:
                    cell.append(role + detail)
    columns: list[str] = []
    for name in sched.buffers:
        seen = sorted({c for pt in roles for c in roles[pt] if c == name or c.startswith(name + "[")},
                      key=lambda c: [int(x) if x.strip().isdigit() else x for x in c[len(name):].strip("[]").split(",")])
        columns += seen
    rows = [[point_text(program.grid_names, pt)] + [", ".join(roles[pt].get(c, [])) for c in columns]
            for pt in points]
    return table(["grid point"] + columns, rows)


def let_table(sched: S.Schedule, program: Program, device: int = 0, limit: int = 12) -> str:
    """Each named expression with its values on `device` along the grid."""
    pts = []
    for ev in program.devices[device]:
        if not pts or pts[-1] != ev.point:
            pts.append(ev.point)
    envs = [point_env(sched, program.axis_sizes, device, pt) for pt in pts]
    rows = []
    for name, e in sched.let.items():
        values = [str(env[name]) for env in envs]
        if len(values) > limit:
            values = values[: limit // 2] + ["..."] + values[-limit // 2:]
        rows.append([f"`{name}`", f"`{E.to_text(e)}`", " ".join(values)])
    return table(["name", "expression", f"values on device {device}, grid point by grid point"], rows)


def condition_table(sched: S.Schedule, program: Program, device: int = 0) -> str:
    """Each `when` guard: where it holds on `device`, and what it runs."""
    at: dict[int, list] = defaultdict(list)
    for ev in program.devices[device]:
        if not at[ev.line] or at[ev.line][-1] != ev.point:
            at[ev.line].append(ev.point)
    rows = []
    for op in walk_ops(sched.all_ops):
        if not isinstance(op, S.When):
            continue
        lines = {o.line for o in walk_ops(op.do)}
        pts = sorted({pt for line in lines for pt in at.get(line, [])})
        where = points_text(program.grid_names, pts) if pts else "never"
        kinds = ", ".join(dict.fromkeys(o.tag for o in op.do))
        rows.append([f"`{E.to_text(op.when)}`", str(op.line), where, kinds])
    return table(["condition", "line", f"grid points where it holds (device {device})", "ops"], rows)
