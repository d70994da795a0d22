"""Short, device-relative names for unrolled events, shared by every picture."""

from __future__ import annotations

from ..verify.events import COMPUTES, Compute, DmaStart, Event, Program, SemWait, Signal

__all__ = ["direction", "op_text", "point_text", "points_text"]


def direction(program: Program, src: int, dst: int) -> str:
    """Where dst is from src: `right`, `left` or `+k` on one axis; `+x`, `-y`, `+2x,-y` on several."""
    n = program.n
    sizes = program.axis_sizes or {"x": n}
    if len(sizes) == 1:
        if dst == (src + 1) % n:
            return "right"
        if dst == (src - 1) % n:
            return "left"
        return f"+{(dst - src) % n}"
    parts = []
    for (axis, size), a, b in zip(sizes.items(), _coords(src, sizes), _coords(dst, sizes)):
        d = (b - a) % size
        if d:
            parts.append(f"+{axis}" if d == 1 else f"-{axis}" if d == size - 1 else f"+{d}{axis}")
    return ",".join(parts) or "me"


def _coords(device: int, sizes: dict[str, int]) -> list[int]:
    """Row-major coordinates over the schedule's axes (as the unroller numbers devices)."""
    out = []
    for size in reversed(list(sizes.values())):
        device, c = divmod(device, size)
        out.append(c)
    return out[::-1]


def op_text(ev: Event, program: Program) -> str:
    """E.g. `start forward -> right`, `wait_recv forward`, `accumulate out += receive`."""
    a = ev.action
    if isinstance(a, DmaStart):
        if a.remote:
            return f"start {a.copy} -> {direction(program, ev.device, a.dst.device)}"
        return f"start {a.copy} (local)"
    if isinstance(a, SemWait):
        if a.why in ("wait_send", "wait_recv", "wait"):
            return f"{a.why} {a.copy}"
        if a.why == "sem_wait":
            return f"sem_wait {a.sem[1]}"
        return f"{a.why} wait"
    if isinstance(a, Signal):
        who = "me" if a.sem[0] == ev.device else direction(program, ev.device, a.sem[0])
        name = "barrier signal" if a.why != "signal" else f"signal {a.sem[1]}"
        return f"{name} -> {who}"
    if isinstance(a, Compute):
        return COMPUTES[a.kind].show(a)
    raise TypeError(f"show: no text for action {a!r}")


def point_text(names: tuple[str, ...], point: tuple[int, ...]) -> str:
    return " ".join(f"{k}={v}" for k, v in zip(names, point))


def _range_text(values: list[int]) -> str:
    values = sorted(set(values))
    if len(values) == 1:
        return str(values[0])
    if values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]}..{values[-1]}"
    return ",".join(map(str, values))


def points_text(names: tuple[str, ...], points: list[tuple[int, ...]], limit: int = 4) -> str:
    """`step=1..6` when the points are a full box of ranges, else the points themselves."""
    pts = sorted(set(points))
    per_dim = [sorted({p[i] for p in pts}) for i in range(len(names))]
    box = 1
    for vals in per_dim:
        box *= len(vals)
    if box == len(pts):
        return " ".join(f"{k}={_range_text(v)}" for k, v in zip(names, per_dim))
    shown = ", ".join(point_text(names, p) for p in pts[:limit])
    return shown + (f", ... ({len(pts)} points)" if len(pts) > limit else "")
