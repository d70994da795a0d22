"""Prove a one-axis schedule symmetric under XOR while unrolling device 0 only.

A hypercube schedule pairs device d with `d ^ (1 << k)`: no translation maps that onto
itself (`rotation.py` refuses bitwise operations on the device id), but the group
(Z/2)^m of the N = 2^m device ids acting by d -> d ^ t does. Device 0 is unrolled with
`me` a symbol, `Xor(c, mask)`, the function

    v(d) = c ^ (d & mask)      (c >= 0; `me` is Xor(0, N - 1))

which `^` with an integer or another such value keeps (`(d & a) ^ (d & b) = d & (a ^ b)`),
`&` with an integer keeps (`(c ^ (d & m)) & x = (c & x) ^ (d & (m & x))`), and `% p`
for a power of two p keeps (it is `& (p - 1)` on non-negative values). Anything else
that depends on the device (arithmetic, a shift, a comparison, a guard, a semaphore
index) raises `NotRotational`, and the full analysis decides. When device 0 unrolls
without that, every device t runs device 0's events with every device id XORed by t:

- every remote action of device 0 goes to a value v with mask N - 1, so device d's goes
  to c ^ d = (its target on device 0) ^ d (`XorUnroller.target`);
- semaphore indices, increments, guards and sizes are the same on every device (they
  could not depend on the symbol without raising);
- a box start that depends on the device is c ^ d along a dimension of length 1, with
  c | (N - 1) inside the dimension, so device d's index is device 0's XORed by d; the
  program records the dimension's step as (1,) (`SymmetricProgram.steps`, with
  `SymmetricProgram.group is Group.XOR`), and every other start is the same on every device.

That is the XOR analogue of `symmetry.semaphore_symmetric` and `memory_symmetric`,
proved for all devices at once (the tests compare it with every device's concrete
events at small N). `verify/symmetric/` then decides from device 0's events, with the group
`XorCube` in place of `rotation.Torus`.
"""

from __future__ import annotations

from typing import Any

from ..ir import schema as S
from ..errors import ScheduleError
from .symmetric.program import Group, SymmetricProgram
from .rotation import NotRotational, RotationUnroller, Torus, merge_runs

__all__ = ["XorCube", "Xor", "XorUnroller", "xor_unroll", "group_of"]


class XorCube:
    """The group (Z/2)^m on device ids 0..N-1 (N = 2^m), acting by d -> d ^ t, with the
    operations of `rotation.Torus` the quotient uses: every element is its own inverse."""

    def __init__(self, n: int):
        if n < 2 or n & (n - 1):
            raise NotRotational(f"XOR symmetry needs a power of two devices, not {n}")
        self.n = n
        self.shape = (n,)
        self.ring = False
        self._adders: dict[int, list[int]] = {}

    def add(self, a: int, b: int) -> int:
        return a ^ b

    sub = add

    def neg(self, a: int) -> int:
        return a

    def adder(self, t: int) -> list[int]:
        table = self._adders.get(t)
        if table is None:
            table = self._adders[t] = [j ^ t for j in range(self.n)]
        return table

    def coord(self, j: int) -> tuple[int, ...]:
        return (j,)

    def image(self, lo: int, hi: int, t: int) -> list[tuple[int, int]]:
        """{j ^ t : lo <= j < hi} as maximal runs, increasing: [lo, hi) is a few aligned
        blocks of 2^b ids, and XOR maps an aligned block onto an aligned block (its ids
        permuted, which a sum over them does not see)."""
        out = []
        while lo < hi:
            size = lo & -lo if lo else self.n
            while lo + size > hi:
                size >>= 1
            start = (lo ^ t) & ~(size - 1)
            out.append((start, start + size))
            lo += size
        return merge_runs(out)


class Xor:
    """A device-dependent value c ^ (d & mask) (module docstring)."""

    __slots__ = ("c", "mask", "key")

    def __init__(self, c: int, mask: int):
        if c < 0:
            raise NotRotational("a negative value XORed with the device id")
        self.c, self.mask = c, mask
        self.key = (Xor, c, mask)

    def __repr__(self) -> str:
        return f"Xor({self.c} ^ (d & {self.mask}))"

    def at(self, d: int) -> int:
        return self.c ^ (d & self.mask)

    @staticmethod
    def _make(c: int, mask: int) -> "int | Xor":
        return Xor(c, mask) if mask else c

    def __xor__(self, other: Any) -> "int | Xor":
        if isinstance(other, Xor):
            return Xor._make(self.c ^ other.c, self.mask ^ other.mask)
        if isinstance(other, int) and not isinstance(other, bool):
            if other < 0:
                raise NotRotational("a negative value XORed with the device id")
            return Xor(self.c ^ other, self.mask)
        return NotImplemented

    __rxor__ = __xor__

    def __and__(self, other: Any) -> "int | Xor":
        if isinstance(other, int) and not isinstance(other, bool) and other >= 0:
            return Xor._make(self.c & other, self.mask & other)
        raise NotRotational("`&` of the device id with a value that is not a non-negative constant")

    __rand__ = __and__

    def __mod__(self, p: Any) -> "int | Xor":
        if isinstance(p, int) and p > 0 and not p & (p - 1):
            return self & (p - 1)
        raise NotRotational(f"`% {p}` of a value XORed with the device id (only powers of two keep it)")

    def _refuse(self, *other: Any) -> Any:
        raise NotRotational("arithmetic, a shift or a condition on a value XORed with the device id")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __neg__ = _refuse
    __floordiv__ = __rfloordiv__ = __rmod__ = __or__ = __ror__ = _refuse
    __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = __invert__ = _refuse
    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = __bool__ = __index__ = __int__ = _refuse
    __hash__ = None  # type: ignore[assignment]


class XorUnroller(RotationUnroller):
    """Unrolls device 0 with `me` = Xor(0, N - 1); a box dimension that moves has step (1,)."""

    def __init__(self, sched: S.Schedule, sizes: dict[str, int]):
        super().__init__(sched, sizes)
        self.cube = XorCube(self.n)
        self.symbols = [Xor(0, self.n - 1), Xor(0, self.n - 1)]

    keyed = {**RotationUnroller.keyed, Xor: lambda v: v.key}

    def target(self, e: Any, line: int) -> int:
        v = self.ev(e, line)
        if isinstance(v, Xor) and v.mask == self.n - 1 and v.c < self.n:
            return v.c
        raise NotRotational(f"a target that is not the device id XORed with a constant: {v!r}")

    def place(self, buffer: str, dim: int, size: int, start: Any, length: Any) -> tuple[int, int]:
        if isinstance(length, Xor):
            raise NotRotational("a slice whose size depends on the device id")
        if length != size:
            if isinstance(start, Xor):
                if start.mask != self.n - 1 or length != 1 or (start.c | (self.n - 1)) >= size:
                    raise NotRotational(f"a box {start!r}:{length} that XOR does not move within its dimension")
                r = (1,)
            else:
                r = self.zero_step
            self._step(buffer, dim, r)
        return (start.c if isinstance(start, Xor) else start), length


def xor_unroll(sched: S.Schedule, n: int, invocations: int = 1) -> SymmetricProgram | None:
    """Device 0's events as a `SymmetricProgram` over `Group.XOR` when every
    device provably runs them with device ids XORed by its own (module docstring); None when
    that cannot be shown (one axis, N a power of two, no runtime data or parallel axis)."""
    if len(sched.axes) != 1 or n < 2 or n & (n - 1) or sched.data or sched.megacore or sched.kernels:
        return None
    if invocations > 1 and sched.barrier is None:
        return None  # Pallas' entry barrier signals d + 1, d + 2, ... in turn: an order XOR does not keep
    if "parallel" in sched.dimension_semantics.values():
        return None
    u = XorUnroller(sched, {sched.axes[0]: n})
    u.ctx.work(1, invocations)  # past a limit for one device: past it for all, refused here
    try:
        events, _ = u.device_events(0, invocations)
    except (NotRotational, ScheduleError):
        return None
    return SymmetricProgram(u.program([events], [], invocations), dict(u.steps), Group.XOR)


def group_of(program: SymmetricProgram) -> "Torus | XorCube":
    """The symmetry group of a symmetric program, as device arithmetic."""
    if program.group is Group.XOR:
        return XorCube(program.n)
    return Torus(program.axis_sizes.values())
