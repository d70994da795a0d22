"""Prove a schedule rotation-symmetric for one N while unrolling device 0 only.

`symmetry.py` decides rotation symmetry by comparing every device's concrete events,
which needs all N of them: O(N^2) events for a ring schedule. Here the device id is
unrolled as a symbol instead. `me` evaluates to a `Rot`, the function of the device id

    v(d) = k + ((c + a*d) mod m)       (or c + a*d without a modulus)

and the arithmetic of index expressions (+, -, *, //, %) keeps that form where it is
exact. Anything else that depends on the device id (a comparison, a guard, `min`, a
semaphore index, a product of two such values) raises `NotRotational`. When device 0
unrolls without that, every device's events are device 0's with

- every remote action sent the same offset around the ring: `to` is `(me + t) % N`;
- semaphore indices, increments, guards and sizes the same on every device;
- every box moved along each buffer dimension by a fixed step per device: a start of
  the form `(c + a*me) mod size` with the box inside the dimension for every d.

That is exactly what `symmetry.semaphore_symmetric` and `symmetry.memory_symmetric`
check on concrete events, proven for all devices at once; the tests compare both.
The proof is conservative: whatever it cannot show falls back to the full unrolling.
"""

from __future__ import annotations

from math import gcd
from typing import Any

from ..ir import expr as E
from ..ir import schema as S
from ..ir.errors import ScheduleError
from .events import Program
from .unroll import Unroller


class NotRotational(Exception):
    """Some value depends on the device id in a way the rotation cannot express."""


def _rot(k: int, c: int, a: int, m: int | None) -> "int | Rot":
    if m is None:
        return k + c if a == 0 else Rot(0, k + c, a, None)
    a, c = a % m, c % m
    return k + c if a == 0 else Rot(k, c, a, m)


class Rot:
    """A device-dependent value v(d) = k + ((c + a*d) mod m), or c + a*d when m is None."""

    __slots__ = ("k", "c", "a", "m")

    def __init__(self, k: int, c: int, a: int, m: int | None):
        self.k, self.c, self.a, self.m = k, c, a, m

    def __repr__(self) -> str:
        inner = f"{self.c} + {self.a}*d"
        return f"Rot({inner})" if self.m is None else f"Rot({self.k} + ({inner}) % {self.m})"

    def at(self, d: int) -> int:
        return self.c + self.a * d if self.m is None else self.k + (self.c + self.a * d) % self.m

    def __add__(self, other: Any) -> "int | Rot":
        if isinstance(other, Rot):
            if self.m is None and other.m is None:
                return _rot(0, self.c + other.c, self.a + other.a, None)
            raise NotRotational("a sum of two device-dependent values under `%`")
        if self.m is None:
            return _rot(0, self.c + other, self.a, None)
        return _rot(self.k + other, self.c, self.a, self.m)

    __radd__ = __add__

    def __neg__(self) -> "int | Rot":
        if self.m is None:
            return _rot(0, -self.c, -self.a, None)
        raise NotRotational("the negation of a value under `%` (a reflection, not a rotation)")

    def __sub__(self, other: Any) -> "int | Rot":
        return self + (-other)

    def __rsub__(self, other: Any) -> "int | Rot":
        return (-self) + other

    def __mul__(self, other: Any) -> "int | Rot":
        if isinstance(other, Rot):
            raise NotRotational("a product of two device-dependent values")
        if other == 0:
            return 0
        if self.m is None:
            return _rot(0, self.c * other, self.a * other, None)
        if other > 0:
            return _rot(self.k * other, self.c * other, self.a * other, self.m * other)
        raise NotRotational("a value under `%` times a negative number")

    __rmul__ = __mul__

    def __mod__(self, p: Any) -> "int | Rot":
        if isinstance(p, Rot) or p <= 0:
            raise NotRotational("a modulus that depends on the device id or is not positive")
        if self.m is None:
            return _rot(0, self.c, self.a, p)
        if self.m % p == 0:  # (x mod m) mod p = x mod p when p divides m
            return _rot(0, self.k + self.c, self.a, p)
        raise NotRotational(f"`% {p}` of a value already taken modulo {self.m}")

    def __floordiv__(self, p: Any) -> "int | Rot":
        if isinstance(p, Rot) or p <= 0:
            raise NotRotational("a divisor that depends on the device id or is not positive")
        if self.m is None and self.a % p == 0:
            return _rot(0, self.c // p, self.a // p, None)
        if self.m is not None and self.m % p == 0 and self.k % p == 0 and self.a % p == 0:
            # (x mod m) // p = (x // p) mod (m / p) when p divides m; x // p is affine when p divides a
            return _rot(self.k // p, self.c // p, self.a // p, self.m // p)
        raise NotRotational(f"`// {p}` of a device-dependent value is not a rotation")

    def _compare(self, other: Any) -> bool:
        raise NotRotational("a comparison or condition on the device id")

    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _compare
    __hash__ = None  # type: ignore[assignment]

    def __bool__(self) -> bool:
        raise NotRotational("a condition on the device id")

    def __rmod__(self, other: Any) -> Any:
        raise NotRotational("a modulus that depends on the device id")

    __rfloordiv__ = __rmod__


def at0(v: "int | Rot") -> int:
    return v.at(0) if isinstance(v, Rot) else v


def device_offset(v: "int | Rot", n: int) -> int:
    """t such that v(d) = (d + t) mod N on every device, or NotRotational."""
    if isinstance(v, Rot) and v.k == 0 and v.m == n and v.a == 1:
        return v.c
    raise NotRotational(f"a target that is not `(me + t) % N`: {v!r}")


def box_step(v: "int | Rot", size: int, length: int, n: int) -> int:
    """r such that the box [v(d), v(d) + length) = [v(0) + r*d mod size, ...) stays inside
    a dimension of `size` on every device, or NotRotational."""
    if not isinstance(v, Rot):
        return 0
    if v.m is None:  # c + a*d, no wrap: inside the dimension at d = 0 and d = N - 1?
        ends = (v.c, v.at(n - 1))
        if min(ends) < 0 or max(ends) + length > size:
            raise NotRotational(f"a box of {length} from {v!r} leaves its dimension of size {size}")
        return v.a % size
    if v.m != size or v.k != 0:
        raise NotRotational(f"a start {v!r} that does not wrap around its dimension of size {size}")
    g = gcd(v.a, v.m)
    if v.c % g + length > g:  # the largest start, m - g + (c mod g), leaves room for the box
        raise NotRotational(f"a box of {length} from {v!r} would cross the end of its dimension")
    return v.a


class RotationUnroller(Unroller):
    """Unrolls device 0 with `me` symbolic; `steps[(buffer, dim)]` is each box's move per device."""

    def __init__(self, sched: S.Schedule, n: int):
        super().__init__(sched, n, {sched.axes[0]: n})
        self.steps: dict[tuple[str, int], int] = {}

    def me(self) -> Any:
        return Rot(0, 0, 1, self.n)

    def key(self, value: Any) -> Any:
        return (Rot, value.k, value.c, value.a, value.m) if isinstance(value, Rot) else super().key(value)

    def target(self, e: E.Expr, line: int) -> int:
        return device_offset(self.ev(e, line), self.n)

    def _step(self, buffer: str, dim: int, r: int) -> None:
        if self.steps.setdefault((buffer, dim), r) != r:
            raise NotRotational(f"`{buffer}` dimension {dim} moves by {self.steps[(buffer, dim)]} and {r} per device")

    def place(self, buffer: str, dim: int, size: int, start: Any, length: Any) -> tuple[int, int]:
        """Device 0's start, after proving every device's box is it moved by a fixed step."""
        if isinstance(length, Rot):
            raise NotRotational("a slice whose size depends on the device id")
        if length != size:
            self._step(buffer, dim, box_step(start, size, length, self.n))
        return at0(start), length


def rotation_unroll(sched: S.Schedule, n: int, invocations: int = 1) -> Program | None:
    """Device 0's events of a one-axis schedule, with `Program.rotation` set, when every
    device provably runs them rotated; None when that cannot be shown (then unroll all)."""
    if len(sched.axes) != 1 or n < 2:
        return None
    u = RotationUnroller(sched, n)
    u.ctx.work(1, invocations)  # past a limit for one device: past it for all, refused here
    try:
        events, second = u.device_events(0, invocations)
    except (NotRotational, ScheduleError):
        return None  # the full unrolling decides, and raises the error with its device
    return u.program([events], [second] if sched.megacore else [], invocations, rotation=dict(u.steps))
