"""Short, device-relative names for unrolled events, shared by every picture."""

from __future__ import annotations

from ..verify.events import Compute, DmaStart, Event, Program, SemWait, Signal


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
        if a.boundary:
            return f"kernel {'entry' if a.kind == 'enter' else 'exit'} ({a.dst.buffer})"
        if a.kind == "zero":
            return f"zero {a.dst.buffer}"
        op = "+=" if a.kind == "accumulate" else "="
        src = a.src.buffer if a.src is not None else "?"
        return f"{a.kind} {a.dst.buffer} {op} {src}"
    return type(a).__name__


def point_text(names: tuple[str, ...], point: tuple[int, ...]) -> str:
    return " ".join(f"{k}={v}" for k, v in zip(names, point))
