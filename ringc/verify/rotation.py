"""Prove a schedule translation-symmetric for one size while unrolling device 0 only.

The devices of a schedule over axes a_0..a_{k-1} (sizes N_0..N_{k-1}) are the torus
Z_{N_0} x ... x Z_{N_{k-1}}, numbered row-major (`Torus`). A ring is the 1-axis case.
`symmetry.py` decides rotation symmetry of a ring by comparing every device's concrete
events, which needs all of them. Here the device is unrolled as a symbol instead: `me`
and `me_a` evaluate to `Rot`s, functions of the device coordinates d = (d_0, ...),

    v(d) = k + sum_j coef_j * ((c_j + a_j . d) mod m_j)

where every atom is *periodic*: a_ji * N_i = 0 mod m_j, so each atom is a function on the
torus and translating the device by t moves it by a_j . t mod m_j. `me_a` is the atom
(d_a mod N_a) and `me` = sum_a stride_a * me_a. The index arithmetic (+, -, *, //, %)
keeps that form only where it is exact (see each operator); anything else that depends
on the device (a comparison, a guard, `min`, a semaphore index, a product of two such
values) raises `NotRotational`. When device 0 unrolls without that, every device d runs
device 0's events translated by d:

- every remote action goes to the same offset: its target is, as a function,
  flat((d + t) mod N) for the fixed vector t = its target on device 0 (`device_offset`);
- semaphore indices, increments, guards and sizes are the same on every device (they
  could not depend on the symbol without raising);
- every box moves along each buffer dimension by a fixed step per unit of each axis: a
  start v with v(d + t) = v(d) + r . t (mod size) and the box inside the dimension on
  every device (`box_step`), so device d's box is device 0's moved by r . d mod size.

That is `symmetry.semaphore_symmetric` and `symmetry.memory_symmetric` on concrete
events, generalized to the torus and proved for all devices at once; the tests compare
both. The proof is conservative: whatever it cannot show falls back to the full
unrolling. Only the *program* is proved symmetric here; whether the *topology* is (its
axes wrap, so routes are translation invariant) is `check.quotient_report`'s business.
"""

from __future__ import annotations

from math import gcd, prod
from typing import Any, Iterable

from ..ir import expr as E
from ..ir import schema as S
from ..errors import ScheduleError
from .events import Event
from .symmetric.program import SymmetricProgram
from .unroll import Unroller


class NotRotational(Exception):
    """Some value depends on the device in a way a translation cannot express."""


class Torus:
    """The translation group of the schedule's axes: devices are flat row-major ids over
    `shape`, and translating by t (itself a device id, i.e. a vector) moves coordinate i
    to (c_i + t_i) mod shape[i]."""

    def __init__(self, shape: Iterable[int]):
        self.shape = tuple(shape)
        self.n = prod(self.shape)
        self.strides = tuple(prod(self.shape[i + 1:]) for i in range(len(self.shape)))
        self.ring = len(self.shape) == 1  # the common case, with shortcuts below
        self._coords: list[tuple[int, ...]] | None = None
        self._adders: dict[int, list[int]] = {}

    def coord(self, j: int) -> tuple[int, ...]:
        if self._coords is None:  # asked per translated term: one table of N tuples
            self._coords = [self.unflat(i) for i in range(self.n)]
        return self._coords[j % self.n]

    def unflat(self, j: int) -> tuple[int, ...]:
        """`coord`, computed (for one-off questions: `coord` builds a table first)."""
        return tuple(j // s % size for s, size in zip(self.strides, self.shape))

    def flat(self, c: Iterable[int]) -> int:
        return sum((x % size) * s for x, s, size in zip(c, self.strides, self.shape))

    def add(self, a: int, b: int) -> int:
        if self.ring:
            return (a + b) % self.n
        return self.flat(x + y for x, y in zip(self.coord(a), self.coord(b)))

    def adder(self, t: int) -> list[int]:
        """The translation by t as a table: `adder(t)[j] == add(j, t)` (one list of N per
        translation asked for; the quotient asks for a device's few neighbours)."""
        table = self._adders.get(t)
        if table is None and self.ring:
            table = self._adders[t] = [(j + t) % self.n for j in range(self.n)]
        elif table is None:
            c = self.coord(t)
            table = self._adders[t] = [self.flat(x + y for x, y in zip(self.coord(j), c)) for j in range(self.n)]
        return table

    def neg(self, a: int) -> int:
        return -a % self.n if self.ring else self.flat(-x for x in self.coord(a))

    def sub(self, a: int, b: int) -> int:
        if self.ring:
            return (a - b) % self.n
        return self.flat(x - y for x, y in zip(self.coord(a), self.coord(b)))

    def step(self, r: tuple[int, ...], t: int) -> int:
        """How far a box whose step per axis is r moves under translation t: r . t."""
        return r[0] * t if self.ring else sum(x * y for x, y in zip(r, self.coord(t)))

    def cuts(self, lo: int, hi: int, t: int) -> list[int]:
        """The ids j in (lo, hi) where translating by t stops mapping j - 1, j to
        consecutive ids: some coordinate wraps in the source (reaches 0) or the image
        (reaches N_i - t_i). Between cuts, j maps to j + const."""
        out: set[int] = set()
        for ti, s, size in zip(self.coord(t), self.strides, self.shape):
            if not ti:
                continue
            for wrap in (0, size - ti):  # the coordinate value where the offset changes
                first = lo // s + 1  # the next block (of s ids) after lo's
                b = first + (wrap - first) % size
                while b * s < hi:
                    out.add(b * s)
                    b += size
        return sorted(out)

    def image(self, lo: int, hi: int, t: int) -> list[tuple[int, int]]:
        """The ids [lo, hi) translated by t, as maximal runs [y0, y1) in increasing order.
        Row-major, [lo, hi) is at most 2k - 1 aligned blocks (k axes): outer coordinates
        fixed, one coordinate c_i in an interval, the inner ones whole. A translation
        moves the fixed coordinates, the interval (cut in two where it wraps) and keeps
        the whole ones whole, so each block's image is one or two runs: O(k) work, where
        `runs` cuts at every wrap of an inner axis (N / N_k pieces for a whole torus)."""
        if self.ring:
            y0 = (lo + t) % self.n
            y1 = y0 + hi - lo
            if y1 <= self.n or hi - lo == self.n:
                return [(y0, y1)] if y1 <= self.n else [(0, self.n)]
            return [(0, y1 - self.n), (y0, self.n)]
        shape, strides, tc = self.shape, self.strides, self.coord(t)
        out: list[tuple[int, int]] = []
        cur = lo
        while cur < hi:
            for i, s in enumerate(strides):  # the outermost axis whose blocks start at cur
                if cur % s:
                    continue
                c = cur // s % shape[i]
                m = min((hi - cur) // s, shape[i] - c)
                if m:
                    break
            base = sum(((cur // strides[j] % shape[j]) + tc[j]) % shape[j] * strides[j] for j in range(i))
            a = (c + tc[i]) % shape[i]
            first = min(m, shape[i] - a)
            out.append((base + a * s, base + (a + first) * s))
            if first < m:
                out.append((base, base + (m - first) * s))
            cur += m * s
        return merge_runs(out)

    def runs(self, lo: int, hi: int, t: int, extra: Iterable[int] = ()) -> list[tuple[int, int, int]]:
        """[lo, hi) translated by t, as (x0, x1, image of x0): sub-runs whose image is the
        consecutive run [image, image + x1 - x0); cut also at `extra` points."""
        points = sorted({lo, hi, *self.cuts(lo, hi, t), *(x for x in extra if lo < x < hi)})
        return [(x0, x1, self.add(x0, t)) for x0, x1 in zip(points, points[1:])]


def merge_runs(runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Disjoint runs [y0, y1) of ids, sorted and joined where one ends as the next begins."""
    runs = sorted(runs)
    merged = [runs[0]]
    for y0, y1 in runs[1:]:
        if y0 == merged[-1][1]:
            merged[-1] = (merged[-1][0], y1)
        else:
            merged.append((y0, y1))
    return merged


Atom = tuple[int, tuple[int, ...], int]  # (c, a, m): the function (c + a . d) mod m


def _atom_range(atom: Atom) -> tuple[int, int]:
    """The least and greatest value of an atom over the torus: a . d mod m takes exactly
    the multiples of g = gcd(a, m), since each d_i runs over a whole period."""
    c, a, m = atom
    g = gcd(*a, m)
    return c % g, m - g + c % g


def _make(k: int, terms: Iterable[tuple[Atom, int]], shape: tuple[int, ...]) -> "int | Rot":
    """The canonical value: atoms reduced (a, c mod m, divided by gcd(c, a, m), which
    moves to the coefficient), constant atoms folded into k, equal atoms merged."""
    if len(terms) == 1:  # the common case (`%` and `//` make one atom), without the dictionary
        ((c, a, m), coef), = terms
        a = tuple([x % m for x in a])
        c %= m
        if not any(a):
            return k + coef * c
        g = gcd(c, *a, m)
        if g > 1:
            c, a, m, coef = c // g, tuple([x // g for x in a]), m // g, coef * g
        return Rot(k, (((c, a, m), coef),), shape) if coef else k
    merged: dict[Atom, int] = {}
    for (c, a, m), coef in terms:
        a = tuple(x % m for x in a)
        c %= m
        if not any(a):
            k += coef * c
            continue
        g = gcd(c, *a, m)
        if g > 1:
            c, a, m, coef = c // g, tuple(x // g for x in a), m // g, coef * g
        merged[(c, a, m)] = merged.get((c, a, m), 0) + coef
    kept = tuple(sorted((atom, coef) for atom, coef in merged.items() if coef))
    return Rot(k, kept, shape) if kept else k


class Rot:
    """A device-dependent value k + sum coef * ((c + a . d) mod m) (module docstring)."""

    __slots__ = ("k", "terms", "shape", "key")

    def __init__(self, k: int, terms: tuple[tuple[Atom, int], ...], shape: tuple[int, ...]):
        self.k, self.terms, self.shape = k, terms, shape
        self.key = (Rot, k, terms)  # for memo keys (`RotationUnroller.keyed`)

    @staticmethod
    def coordinate(axis: int, shape: tuple[int, ...]) -> "int | Rot":
        """`me_a`: the device's coordinate along axis `axis`."""
        unit = tuple(int(i == axis) for i in range(len(shape)))
        return _make(0, [((0, unit, shape[axis]), 1)], shape)

    @staticmethod
    def translate(t: int, shape: tuple[int, ...], torus: "Torus | None" = None) -> "int | Rot":
        """The flat id of d + t: sum_i stride_i * ((d_i + t_i) mod N_i); `me` is t = 0.
        (`torus`: `Torus(shape)`, if the caller has it.)"""
        torus = torus or Torus(shape)
        return _make(0, [((ti, tuple(int(i == j) for j in range(len(shape))), size), s)
                         for i, (ti, s, size) in enumerate(zip(torus.unflat(t), torus.strides, shape))], shape)

    def __repr__(self) -> str:
        parts = [f"{coef}*(({c} + {list(a)}.d) % {m})" for (c, a, m), coef in self.terms]
        return f"Rot({self.k} + {' + '.join(parts)})"

    def at(self, d: "int | tuple[int, ...]") -> int:
        """The value on device d (a flat id or a coordinate tuple)."""
        coord = Torus(self.shape).unflat(d) if isinstance(d, int) else d
        return self.k + sum(coef * ((c + sum(x * y for x, y in zip(a, coord))) % m)
                            for (c, a, m), coef in self.terms)

    def bounds(self) -> tuple[int, int]:
        """A lower and an upper bound over all devices (exact for one atom)."""
        lo = hi = self.k
        for atom, coef in self.terms:
            a, b = _atom_range(atom)
            lo, hi = (lo + coef * a, hi + coef * b) if coef > 0 else (lo + coef * b, hi + coef * a)
        return lo, hi

    def same(self, other: Any) -> bool:
        """Structural equality of canonical forms (`==` would be a condition on the device)."""
        return isinstance(other, Rot) and (self.k, self.terms) == (other.k, other.terms)

    def __add__(self, other: Any) -> "int | Rot":
        if isinstance(other, Rot):
            if other.shape != self.shape:
                raise NotRotational("values over different tori")
            return _make(self.k + other.k, self.terms + other.terms, self.shape)
        if isinstance(other, int):
            return Rot(self.k + other, self.terms, self.shape)
        return NotImplemented

    __radd__ = __add__

    def __neg__(self) -> "int | Rot":
        return Rot(-self.k, tuple((atom, -coef) for atom, coef in self.terms), self.shape)

    def __sub__(self, other: Any) -> "int | Rot":
        return self + (-other)

    def __rsub__(self, other: Any) -> "int | Rot":
        return (-self) + other

    def __mul__(self, other: Any) -> "int | Rot":
        if isinstance(other, Rot):
            raise NotRotational("a product of two device-dependent values")
        if not isinstance(other, int):
            return NotImplemented
        if other == 0:
            return 0
        return Rot(self.k * other, tuple((atom, coef * other) for atom, coef in self.terms), self.shape)

    __rmul__ = __mul__

    def __mod__(self, p: Any) -> "int | Rot":
        """Exact in two cases: p divides every coef * m, so v = k + sum coef * (c + a . d)
        (mod p), one periodic atom; or v stays within one multiple of p on every device."""
        if not isinstance(p, int) or p <= 0:
            raise NotRotational("a modulus that depends on the device id or is not positive")
        terms = self.terms
        if len(terms) == 1:  # the common case, as below without the loops
            ((c, a, m), coef), = terms
            if (coef * m) % p == 0:
                return _make(0, (((self.k + coef * c, tuple([coef * x for x in a]), p), 1),), self.shape)
        elif all((coef * m) % p == 0 for (_, _, m), coef in terms):
            c = self.k + sum(coef * c for (c, _, _), coef in terms)
            a = [sum(coef * atom[1][i] for atom, coef in terms) for i in range(len(self.shape))]
            return _make(0, [((c, tuple(a), p), 1)], self.shape)
        lo, hi = self.bounds()
        if lo // p == hi // p:
            return self - p * (lo // p)
        raise NotRotational(f"`% {p}` of {self!r}")

    def __floordiv__(self, p: Any) -> "int | Rot":
        """Terms whose coefficient p divides divide exactly; of the rest, one atom
        (c + a . d) mod m with coefficient 1, p dividing m, a and k, gives
        ((c // p) + (a / p) . d) mod (m / p); otherwise the rest must stay within one
        multiple of p on every device."""
        if not isinstance(p, int) or p <= 0:
            raise NotRotational("a divisor that depends on the device id or is not positive")
        exact = [(atom, coef // p) for atom, coef in self.terms if coef % p == 0]
        rest = [(atom, coef) for atom, coef in self.terms if coef % p]
        if not rest:
            return _make(self.k // p, exact, self.shape)
        if len(rest) == 1:
            (c, a, m), coef = rest[0]
            if coef == 1 and self.k % p == 0 and m % p == 0 and all(x % p == 0 for x in a):
                return _make(self.k // p, exact + [((c // p, tuple(x // p for x in a), m // p), 1)], self.shape)
        lo, hi = Rot(self.k, tuple(rest), self.shape).bounds()
        if lo // p == hi // p:
            return _make(lo // p, exact, self.shape)
        raise NotRotational(f"`// {p}` of {self!r}")

    def _compare(self, other: Any) -> bool:
        raise NotRotational("a comparison or condition on the device id")

    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _compare
    __hash__ = None  # type: ignore[assignment]

    def __bool__(self) -> bool:
        raise NotRotational("a condition on the device id")

    def __rmod__(self, other: Any) -> Any:
        raise NotRotational("a modulus that depends on the device id")

    __rfloordiv__ = __rmod__

    def _bitwise(self, *other: Any) -> Any:
        # `me ^ (1 << k)` (a hypercube partner) is a reflection, not a translation
        raise NotRotational("a bitwise operation on the device id")

    __xor__ = __rxor__ = __and__ = __rand__ = __or__ = __ror__ = _bitwise
    __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = __invert__ = _bitwise


class Unknown:
    """A `let:` or builtin value the symbol cannot express (in 2-D, `left` = `(me - 1) % N`
    wraps rows): harmless until something uses it, and then `NotRotational`."""

    __slots__ = ("why",)

    def __init__(self, why: str):
        self.why = why

    def _use(self, *args: Any) -> Any:
        raise NotRotational(self.why)

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __mod__ = __rmod__ = _use
    __floordiv__ = __rfloordiv__ = __neg__ = __bool__ = __index__ = __int__ = _use
    __xor__ = __rxor__ = __and__ = __rand__ = __or__ = __ror__ = _use
    __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = __invert__ = _use
    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _use
    __hash__ = object.__hash__


def at0(v: "int | Rot") -> int:
    """The value on device 0 (every coordinate 0; atoms keep c reduced mod m)."""
    if not isinstance(v, Rot):
        return v
    if len(v.terms) == 1:  # the common case, without the list
        ((c, _, _), coef), = v.terms
        return v.k + coef * c
    return v.k + sum([coef * c for (c, _, _), coef in v.terms])


def device_offset(v: "int | Rot", torus: Torus) -> int:
    """t such that v(d) = d + t (as a translation) on every device, or NotRotational."""
    t = at0(v)
    want = Rot.translate(t % torus.n, torus.shape, torus) if 0 <= t < torus.n else None
    if isinstance(v, Rot) and v.same(want):
        return t
    raise NotRotational(f"a target that is not a translation of the device: {v!r}")


def box_step(v: "int | Rot", size: int, length: int) -> tuple[int, ...] | None:
    """r (per axis) such that the box [v(d), v(d) + length) is device 0's moved by r . d
    mod size, and inside the dimension on every device; None for a box that does not
    move; NotRotational otherwise. Translating by t moves atom j by a_j . t mod m_j, so
    by coef_j * a_j . t mod coef_j * m_j: when size divides every coef_j * m_j, v moves
    by r . t mod size with r = sum coef_j * a_j; a start within [0, size) is then
    exactly (v(0) + r . d) mod size."""
    if not isinstance(v, Rot):
        return None
    if any((coef * m) % size for (_, _, m), coef in v.terms):
        raise NotRotational(f"a start {v!r} that does not move along its dimension of size {size}")
    lo, hi = v.bounds()
    if lo < 0 or hi + length > size:
        raise NotRotational(f"a box of {length} from {v!r} may leave its dimension of size {size}")
    return tuple(sum(coef * a[i] for (_, a, _), coef in v.terms) % size for i in range(len(v.shape)))


class RotationUnroller(Unroller):
    """Unrolls device 0 with `me` symbolic; `steps[(buffer, dim)]` is each box's move per
    unit of each axis."""

    def __init__(self, sched: S.Schedule, sizes: dict[str, int]):
        super().__init__(sched, prod(sizes.values()), sizes)
        self.torus = Torus(sizes.values())
        self.steps: dict[tuple[str, int], tuple[int, ...]] = {}
        self.box_steps: dict[tuple, tuple[int, ...] | None] = {}  # `box_step`'s answers
        self.zero_step = tuple(0 for _ in self.torus.shape)
        self.offsets: dict[tuple, int] = {}  # `device_offset`'s answers
        # `place`'s boxes placed (for `place_code`): (buffer, dim, start's key, size, length) ->
        # device 0's start; and the dims (buffer, dim) whose zero step a box of plain start recorded.
        self.placed: dict[tuple, int] = {}
        self.unmoved: set[tuple[str, int]] = set()
        shape = self.torus.shape
        self.symbols = [Rot.translate(0, shape), *(Rot.coordinate(i, shape) for i in range(len(shape)))]
        self.symbolic = ("me", *(f"me_{a}" for a in sizes))

    def me(self) -> Any:
        return self.symbols[0]

    def me_axis(self, i: int, axis: str) -> Any:
        return self.symbols[1 + i]

    keyed = {**Unroller.keyed, Rot: lambda v: v.key}

    def target(self, e: E.Expr, line: int) -> int:
        v = self.ev(e, line)
        if not isinstance(v, Rot):
            return device_offset(v, self.torus)  # raises: a constant target is no translation
        t = self.offsets.get(v.key)
        if t is None:
            t = self.offsets[v.key] = device_offset(v, self.torus)
        return t

    def value(self, e: E.Expr, line: int) -> Any:
        """A guard or a `let:` value; one the symbol cannot express stays `Unknown`."""
        try:
            return Unroller.value(self, e, line)
        except NotRotational as why:
            return Unknown(str(why))

    def _step(self, buffer: str, dim: int, r: tuple[int, ...]) -> None:
        if self.steps.setdefault((buffer, dim), r) != r:
            raise NotRotational(f"`{buffer}` dimension {dim} moves by {self.steps[(buffer, dim)]} and {r} per device")

    def place_code(self, code: E.Emitter, name: str, dim: int, size: str) -> list[str]:
        """`place` with what it recorded looked up inline: a box of symbolic start it placed
        before (`placed`), or of plain start and length in a dimension whose zero step it
        recorded (`unmoved`) or that the box fills (`length == size`), is placed as `place`
        would place it again (a step once recorded never changes: `_step`); any other box
        by `place` itself. (A subclass with its own `place`, e.g. XOR's, calls it.)"""
        if type(self).place is not RotationUnroller.place:
            return super().place_code(code, name, dim, size)
        placed, unmoved, rot = code.const(self.placed), code.const(self.unmoved), code.const(Rot)
        call = f"_s, _l = place({name}, {dim}, {size}, _s, _l)"
        return [f"if type(_l) is int and _l != {size} and type(_s) is {rot}:",
                f"    _p = {placed}.get(({name}, {dim}, _s.key, {size}, _l))",
                "    if _p is None:",
                f"        {call}",
                "    else:",
                "        _s = _p",
                f"elif type(_s) is not int or type(_l) is not int or (_l != {size} and ({name}, {dim}) not in {unmoved}):",
                f"    {call}"]

    def place(self, buffer: str, dim: int, size: int, start: Any, length: Any) -> tuple[int, int]:
        """Device 0's start, after proving every device's box is it moved by a fixed step.
        Each box placed so is recorded (`placed`, `unmoved`), for `place_code`."""
        if type(length) is Rot:  # (Rot has no subclasses: `type` is `isinstance`, faster)
            raise NotRotational("a slice whose size depends on the device id")
        if length != size:
            if type(start) is Rot:  # a value recurs in several regions: proved once
                key = (start.key, size, length)
                r = self.box_steps.get(key, ())
                if r == ():
                    r = self.box_steps[key] = box_step(start, size, length)
                self._step(buffer, dim, r if r is not None else self.zero_step)
                at = self.placed[(buffer, dim, start.key, size, length)] = at0(start)
                return at, length
            self._step(buffer, dim, self.zero_step)
            self.unmoved.add((buffer, dim))
        return start, length  # `at0` of a plain value is itself


def rotation_unroll(sched: S.Schedule, sizes: "int | dict[str, int]", invocations: int = 1, *,
                    fold: bool = False) -> SymmetricProgram | None:
    """Device 0's events as a `SymmetricProgram` (translations) when every device provably runs them
    translated; None when that cannot be shown (then unroll all). `sizes`: devices per
    schedule axis, or one count for a one-axis schedule. `fold` (the cost model's, never
    the verifier's): long pipelines are spelled in a few rows, `Program.folds` saying which
    repeat (`Unroller.fold_pipelines`)."""
    if isinstance(sizes, int):
        if len(sched.axes) != 1:
            return None
        sizes = {sched.axes[0]: sizes}
    if list(sizes) != list(sched.axes) or prod(sizes.values()) < 2 or sched.data:
        return None  # runtime data differs per device: no translation symmetry to prove
    u = RotationUnroller(sched, sizes)
    if "parallel" in sched.dimension_semantics.values():
        # A parallel grid axis: its split over two cores and its dependencies through other
        # devices' DMAs (`check.parallel_findings`) are decided on the full unrolling.
        return None
    if fold:
        u.fold_pipelines()
    u.ctx.work(1, invocations)  # past a limit for one device: past it for all, refused here
    if sched.cores > 1:
        return _cores_unroll(u, invocations)
    try:
        events, second = u.device_events(0, invocations)
    except (NotRotational, ScheduleError):
        return None  # the full unrolling decides, and raises the error with its device
    folds = tuple(fold[1:] for fold in u.folds if fold[0] is events)
    return SymmetricProgram(u.program([events], [second] if sched.megacore else [], invocations, folds=folds),
                            dict(u.steps))


def _cores_unroll(u: RotationUnroller, invocations: int) -> SymmetricProgram | None:
    """`cores: 2`: chip 0's cores, each proved to run on every chip translated (`me` is
    symbolic in each core's walk, `core` a constant). The program holds process c * N
    for each core c (chip 0's), the other processes empty: every chip's core c runs core c's
    events of chip 0 translated by the chip. The cost model's quotient reads it; `check`
    unrolls every process."""
    n, cores = u.n, u.s.cores
    devices: list[list[Event]] = [[] for _ in range((cores - 1) * n + 1)]
    try:
        for c in range(cores):
            devices[c * n] = u.core_events(0, c, invocations)
    except (NotRotational, ScheduleError):
        return None
    u.core = 0
    return SymmetricProgram(u.program(devices, [], invocations, memories=n, places=tuple(range(n)) * cores,
                                      cores=cores), dict(u.steps))

