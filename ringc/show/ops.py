"""Short, device-relative names for unrolled events, shared by every picture."""

from __future__ import annotations

from ..verify.events import Compute, DmaStart, Event, SemWait, Signal


def direction(src: int, dst: int, n: int) -> str:
    """`right`, `left` or `+k` from the sender's point of view."""
    if dst == (src + 1) % n:
        return "right"
    if dst == (src - 1) % n:
        return "left"
    return f"+{(dst - src) % n}"


def op_text(ev: Event, n: int) -> str:
    """E.g. `start forward -> right`, `wait_recv forward`, `accumulate out += receive`."""
    a = ev.action
    if isinstance(a, DmaStart):
        if a.remote:
            return f"start {a.copy} -> {direction(ev.device, a.dst.device, n)}"
        return f"start {a.copy} (local)"
    if isinstance(a, SemWait):
        if a.why in ("wait_send", "wait_recv", "wait"):
            return f"{a.why} {a.copy}"
        if a.why == "sem_wait":
            return f"sem_wait {a.sem[1]}"
        return f"{a.why} wait"
    if isinstance(a, Signal):
        who = "me" if a.sem[0] == ev.device else direction(ev.device, a.sem[0], n)
        name = "barrier signal" if a.why != "signal" else f"signal {a.sem[1]}"
        return f"{name} -> {who}"
    if isinstance(a, Compute):
        if a.kind == "enter":
            return f"kernel entry ({a.dst.buffer})"
        if a.kind == "zero":
            return f"zero {a.dst.buffer}"
        op = "+=" if a.kind == "accumulate" else "="
        src = a.src.buffer if a.src is not None else "?"
        return f"{a.kind} {a.dst.buffer} {op} {src}"
    return type(a).__name__


def point_text(names: tuple[str, ...], point: tuple[int, ...]) -> str:
    return " ".join(f"{k}={v}" for k, v in zip(names, point))
