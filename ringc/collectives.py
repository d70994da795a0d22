"""One class per collective: everything ringc knows about what a collective means.

As in msccl-tools' `msccl/language/collectives.py`, each collective is a class and an
instance carries its parameters (`ppermute`'s shift). A class says, in one place:

- `shape_problem`: whether the buffers' shapes can hold it (None) or the shape it needs;
- `expected`: the symbolic output of one device, as pieces (the verifier's meaning check);
- `meaning_rotates`: whether device d's meaning is device 0's rotated by d (the quotient
  check's fast path, `verify/quotient.py`);
- `lax`: the `lax` reference a generated kernel must agree with (`reference.py`, `ringc run`);
  `summed_terms`: the rounding steps `ringc run` allows for;
- `volume`, `traffic`, `flops`, `far_pairs`, `bisection`: what the lower bound
  (`cost/bounds.py`) needs; `title`: its name in reports;
- `transpose`: the collective whose `lax` call is this one's linear transpose (for JAX
  integration): all_gather <-> psum_scatter, psum <-> psum, ppermute(+k) <-> ppermute(-k),
  all_to_all <-> all_to_all (split and concat axes both 0, as JAX's transpose rule swaps
  them), all_gather_matmul <-> matmul_psum_scatter_t and all_gather_matmul_t <->
  matmul_psum_scatter (with respect to the left operand x: the transpose of
  x -> all_gather(x) @ y is g -> psum_scatter(g @ y^T), the reduce-scatter of the other
  orientation on the same y). Every collective here has one, except ring_attention (its
  cotangents are no single collective).
- `lax_text`, `vjp_text`: the `lax` call and the cotangents of its inputs as Python source, for
  the kernels `ringc emit` writes (self-contained: they cannot import ringc). `vjp_text` is
  the transpose's `lax_text`; a matmul collective adds its right-hand input's cotangent
  (tests/test_jax_api.py checks both against `lax` and `jax.vjp` of it).

The checks take a collective object and the buffers' roles (`Buffers`), not a schedule,
so a front end without a YAML schedule (a Pallas importer) can call them. The registry
`COLLECTIVES` is keyed by kind and raises `MissingRule` on an unknown kind.

The meaning is written in the symbolic terms of the data-flow check (`verify/semantics.py`),
defined here so the meaning needs nothing of the verifier: a term is "input buffer `x` of
device j, read through an affine index map" (`Term`), or a product of two such terms summed
over a contraction range, whose factors may themselves be products (ring_attention's
(q k_j^T) v_j; `verify/semantics.py` says how the contraction indices are named); a
`Piece` is a box of a buffer holding a sum of terms.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import Any, Callable, ClassVar, Iterable, Mapping, NamedTuple

from .ir import schema as S
from .ir.schema import CollectiveKind as K
from .ir.dtypes import itemsize
from .ir.rules import RuleTable

__all__ = ["Box", "IndexMap", "Term", "Value", "Piece", "KDIM", "PRODUCT", "unravel", "Buffers", "Collective",
           "COLLECTIVES", "collective_of", "TITLES", "NAMES", "kind_named", "ragged_all_to_all_lax"]

Box = tuple[tuple[int, int], ...]
# A term's index map: for each input dimension, (buffer dim, offset), (None, constant), or
# (KDIM, offset) for a product's contraction index (KDIM - 1, ... for the indices of products
# whose factors are products: `verify.semantics.contraction`).
IndexMap = tuple[tuple[int | None, int], ...]
Term = tuple[Any, ...]   # (input buffer, device, map); (PRODUCT, a, b, k0, k1) (a, b: terms); ("?buf", device, ())
Value = tuple[Term, ...]                     # a sorted multiset: a sum of terms
PRODUCT = "@"
KDIM = -1


class Piece(NamedTuple):  # a tuple, not a frozen dataclass: made millions of times
    box: Box
    value: Value


def unravel(j: int, dims: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major coordinates of index j in `dims`."""
    out = []
    for d in reversed(dims):
        j, c = divmod(j, d)
        out.append(c)
    return tuple(reversed(out))


@dataclass(frozen=True)
class Buffers:
    """The collective's buffers in one kernel: the input, the output, a matmul's right-hand
    input (ring_attention's keys; `values` its values), each buffer's element size, and how many of its leading dims index devices
    (row-major; a `slots: [N_x, N_y]` buffer over two axes has 2; default 1)."""
    input: str
    output: str
    rhs: str | None = None
    itemsize: Mapping[str, int] = field(default_factory=dict)
    device_dims: Mapping[str, int] = field(default_factory=dict)
    values: str | None = None     # ring_attention's third input (the values; rhs is the keys)

    def dims(self, name: str) -> int:
        return self.device_dims.get(name, 1)

    @classmethod
    def of(cls, sched: S.Schedule) -> "Buffers":
        """The roles a YAML schedule gives its buffers (device dims: its slot dims, at least 1)."""
        roles = COLLECTIVES[sched.collective.kind].inputs
        names = [sched.io_buffer("input"), sched.io_buffer("output")]
        rhs = sched.io_buffer("rhs") if "rhs" in roles else None
        names += [rhs] if rhs else []
        values = sched.io_buffer("values") if "values" in roles else None
        names += [values] if values else []
        return cls(names[0], names[1], rhs, {n: itemsize(sched.dtype_of(n)) for n in names},
                   {n: max(1, len(sched.buffers[n].slots)) for n in names}, values)


class Collective:
    """Base of every collective; see the module docstring for what each method means, and
    the class variables below for its per-kind facts (its kind is spelled once, in
    `schema.CollectiveKind`)."""
    kind: ClassVar[S.CollectiveKind]
    title: ClassVar[str]                 # its name in reports: "all-reduce"
    # The roles of its inputs (`Buffers`): the input, and the matmuls' and ragged_all_to_all's
    # `rhs` (`collective.rhs` in YAML), ring_attention's `values` (`collective.values`).
    inputs: ClassVar[tuple[str, ...]] = ("input",)
    takes_rhs: ClassVar[bool] = False     # a matmul collective: it multiplies by its `rhs` input
    takes_shift: ClassVar[bool] = False   # it has a parameter, `shift` (ppermute): part of its identity
    # Other names for it that `ringc cost --collective` and `ringc synth` accept (`kind_named`).
    aliases: ClassVar[tuple[str, ...]] = ()
    # The runtime data arrays (`data:`, of shape [N]) its meaning reads, named as the
    # arguments of its `lax` call (`resolve` requires them).
    data_arrays: ClassVar[tuple[str, ...]] = ()
    volume_role: ClassVar[str] = "input"  # the buffer whose size is V (`cost/sizing.py`)
    bisection: ClassVar[bool] = False     # the bound counts the bisection (all-to-all)
    assumes: ClassVar[str | None] = None  # what a meaning check of it leaves out (in every verdict)
    # Its meaning is XOR-symmetric: device d's is device 0's with the devices XORed by d (a
    # sum over all devices, a gather or scatter by device slot; `quotient.meaning_rotates`).
    xor_symmetric: ClassVar[bool] = False
    # The `lax` primitives that compute it in a traced program (the lax reference a script
    # computes beside a kernel names its meaning: `pallas.script.lax_reference`).
    lax_primitives: ClassVar[tuple[str, ...]] = ()

    def __init__(self, shift: int = 1):
        self.shift = shift

    def __repr__(self) -> str:
        return f"{type(self).__name__}(shift={self.shift})" if self.takes_shift else type(self).__name__

    def __eq__(self, other: object) -> bool:  # the shift is a parameter of ppermute only
        return type(self) is type(other) and (not self.takes_shift or self.shift == other.shift)  # type: ignore

    def __hash__(self) -> int:
        return hash((self.kind, self.shift if self.takes_shift else 0))

    def label(self) -> str:
        """Its kind, with its parameter where it has one: `ppermute (shift +1)`."""
        return f"{self.kind} (shift {self.shift:+d})" if self.takes_shift else str(self.kind)

    # -- meaning ---------------------------------------------------------------------
    def shape_problem(self, n: int, shapes: Mapping[str, tuple[int, ...]], b: Buffers) -> str | None:
        raise NotImplementedError

    def expected(self, n: int, device: int, shapes: Mapping[str, tuple[int, ...]], b: Buffers) -> list[Piece]:
        raise NotImplementedError

    def meaning_rotates(self, r: Callable[[str, int], tuple[int, ...]], shapes: Mapping[str, tuple[int, ...]],
                        b: Buffers, axes: int = 1) -> bool:
        """Device d's meaning is device 0's with device ids moved by d and each buffer dim
        (buf, i) moved by its step `r(buf, i)`, a vector with one entry per axis of the
        schedule: its device dims (one per axis, row-major, so a translation moves each by
        one block along its own axis) must move by the unit step, and the dims the
        collective maps onto each other by the same step (contraction dims not at all). A
        flat device dim over several axes does not move by a fixed step: that falls back."""
        return self._rotates(_Steps(r, shapes, axes), len(shapes[b.input]), b)

    def _rotates(self, s: "_Steps", rank: int, b: Buffers) -> bool:
        raise NotImplementedError

    # -- lax ---------------------------------------------------------------------------
    @classmethod
    def lax_parameters(cls, params: Mapping[str, Any]) -> dict[str, Any] | None:
        """What a traced call of its `lax` primitive (the equation's `params`) computes, in the
        terms of this class: {} for its layout (ppermute: {"shift": s}); None when the call
        lays the data out otherwise (along another dimension: no meaning ringc states)."""
        return {}

    def lax(self, x: Any, axis: Any, n: int, rhs: Any = None, dtype: Any = None) -> Any:
        """The `lax` call on a per-device array inside shard_map (see `reference.py`)."""
        raise NotImplementedError

    def lax_text(self, x: str, axis: str, n: str, rhs: str | None = None) -> str:
        """`lax(x, axis, n, rhs)` (in x's dtype) as a Python expression over the source names
        given, with `lax`, `jnp` imported as usual."""
        raise NotImplementedError

    def vjp_text(self, x: str, axis: str, n: str, g: str, rhs: str | None = None) -> tuple[str, str | None]:
        """The cotangents of x (and of a matmul's rhs; None otherwise) given the output's
        cotangent `g`, as Python expressions: the transpose collective's `lax_text` on g."""
        t = self.transpose()
        if t is None:
            raise ValueError(f"{self.kind} has no transpose")
        return t.lax_text(g, axis, n), None

    def summed_terms(self, n: int, dtype: str = "float32", depth: int = 1) -> int:
        """How many rounding steps stand between an output element and its exact value, for
        `ringc.run.tolerance`: the values summed (1 for pure data movement)."""
        return 1

    # -- cost --------------------------------------------------------------------------
    def volume(self, n: int, shapes: Mapping[str, tuple[int, ...]], b: Buffers) -> int:
        """V: the collective's size per device in bytes."""
        name = b.output if self.volume_role == "output" else b.input
        return prod(shapes[name]) * b.itemsize[name]

    def traffic(self, p: int, volume: float) -> tuple[float, float]:
        """(bytes a device must receive, bytes it must send) that it cannot avoid."""
        raise NotImplementedError

    def switch_traffic(self, p: int, volume: float) -> tuple[float, float]:
        """`traffic` through a switch that multicasts (one send reaches every device) and
        reduces in the fabric (NVLink SHARP, `cost/bounds.py`). Multicast lowers what a
        sender of an all-gather sends, but not what each device must receive, which binds;
        a reduce-scatter's blocks for other devices must still leave each device: both keep
        their `traffic`, as does data meant for one device (permutations, all-to-all)."""
        return self.traffic(p, volume)

    def flops(self, n: int, shapes: Mapping[str, tuple[int, ...]], b: Buffers) -> float:
        """Arithmetic per device the collective itself prescribes (0: none)."""
        return 0.0

    def cycle_bytes(self, p: int, volume: float) -> float | None:
        """Bytes that some link of a wrapped ring of p chips must carry, when the collective
        has such a bound beyond the per-device ones (`cost/bounds.py`, "ring"); None: none."""
        return None

    def far_pairs(self, p: int) -> Iterable[tuple[int, int]] | None:
        """The device pairs whose data must meet (the latency bound takes the farthest);
        None: every pair (the bound takes the placement's diameter, without p^2 pairs)."""
        return None

    # -- transpose -----------------------------------------------------------------------
    def transpose(self) -> "Collective | None":
        """The collective computing this one's linear transpose (None: it has none)."""
        raise NotImplementedError


@dataclass(frozen=True)
class _Steps:
    """The steps of a translation, for `Collective.meaning_rotates`."""
    r: Callable[[str, int], tuple[int, ...]]
    shapes: Mapping[str, tuple[int, ...]]
    axes: int

    def unit(self, buf: str, i: int) -> tuple[int, ...]:
        """The step of the i-th device dim: one block along axis i."""
        return tuple(int(a == i) % self.shapes[buf][i] for a in range(self.axes))

    def devices(self, buf: str, b: Buffers) -> bool:
        """Its leading dims are one per axis, each moving along its own axis."""
        return b.dims(buf) == self.axes and all(self.r(buf, i) == self.unit(buf, i) for i in range(self.axes))

    def same(self, a: str, c: str, pairs: Iterable[tuple[int, int]]) -> bool:
        """Dim i of `a` moves as dim j of `c`, for each (i, j)."""
        return all(self.r(a, i) == self.r(c, j) for i, j in pairs)

    def zero(self) -> tuple[int, ...]:
        return (0,) * self.axes


def _term(x: str, dev: int, imap: IndexMap) -> Term:
    return (x, dev, imap)


def _devices(shape: tuple[int, ...], k: int, n: int) -> bool:
    """The first k dims multiply to n, with data dims after them."""
    return len(shape) > k and prod(shape[:k]) == n


COLLECTIVES: RuleTable[type[Collective]] = RuleTable("collectives (ringc/collectives.py COLLECTIVES)",
                                                     "collectives")


def _registered(cls: type[Collective]) -> type[Collective]:
    """Register a collective class under its own `kind`."""
    return COLLECTIVES.register(cls.kind)(cls)


class _SameShape(Collective):
    """A collective whose output has the input's shape, element by element."""

    def shape_problem(self, n, shapes, b):
        x, out = tuple(shapes[b.input]), tuple(shapes[b.output])
        return None if out == x else f"shape {list(x)}"

    @staticmethod
    def _full(shapes, b) -> tuple[Box, IndexMap]:
        """The output's whole box, and the identity map onto the input."""
        return tuple((0, s) for s in shapes[b.output]), tuple((d, 0) for d in range(len(shapes[b.input])))

    def _rotates(self, s, rank, b):  # the output moves exactly as the input
        return len(s.shapes[b.output]) == rank and s.same(b.output, b.input, ((i, i) for i in range(rank)))


@_registered
class Ppermute(_SameShape):
    """Device d's x lands on device (d + shift) % N."""
    kind, title = K.PPERMUTE, "permutation"
    lax_primitives, takes_shift, aliases = ("ppermute",), True, ("permute",)

    @classmethod
    def lax_parameters(cls, params):  # one shift for every device: a permutation of all of them
        perm = params["perm"]
        n = len(perm)
        shifts = {(dst - src) % n for src, dst in perm}
        if len(shifts) != 1 or sorted(s for s, _ in perm) != list(range(n)):
            return None
        return {"shift": shifts.pop()}

    def expected(self, n, device, shapes, b):
        full, ident = self._full(shapes, b)
        return [Piece(full, (_term(b.input, (device - self.shift) % n, ident),))]

    def _rotates(self, s, rank, b):  # a flat shift is no translation of a torus
        return s.axes == 1 and super()._rotates(s, rank, b)

    def lax(self, x, axis, n, rhs=None, dtype=None):
        from jax import lax
        return lax.ppermute(x, axis, [(i, (i + self.shift) % n) for i in range(n)])

    def lax_text(self, x, axis, n, rhs=None):
        step = f"+ {self.shift}" if self.shift >= 0 else f"- {-self.shift}"
        return f"lax.ppermute({x}, {axis}, [(i, (i {step}) % {n}) for i in range({n})])"

    def traffic(self, p, volume):
        moved = float(volume if self.shift % p else 0)
        return moved, moved

    def cycle_bytes(self, p, volume):
        """A shift by s on a wrapped ring: the proof is in `cost/bounds.py` ("ring")."""
        s = self.shift % p
        return s * (p - s) / p * volume if s else None

    def far_pairs(self, p):
        shift = self.shift % p
        return [(d, (d + shift) % p) for d in range(p)] if shift else []

    def transpose(self):
        return Ppermute(-self.shift)


@_registered
class Psum(_SameShape):
    """out = sum over devices of x."""
    kind, title, aliases = K.PSUM, "all-reduce", ("all_reduce", "allreduce")
    xor_symmetric, lax_primitives = True, ("psum", "psum_invariant")

    def expected(self, n, device, shapes, b):
        full, ident = self._full(shapes, b)
        return [Piece(full, tuple(_term(b.input, j, ident) for j in range(n)))]

    def lax(self, x, axis, n, rhs=None, dtype=None):
        from jax import lax
        return lax.psum(x, axis)

    def lax_text(self, x, axis, n, rhs=None):
        return f"lax.psum({x}, {axis})"

    def summed_terms(self, n, dtype="float32", depth=1):
        return n

    def traffic(self, p, volume):  # Patarasuk & Yuan, JPDC 2009
        frac = 1 - 1 / p
        return 2 * frac * volume, 2 * frac * volume

    def switch_traffic(self, p, volume):
        # Summed in the switch, a device's V must still leave it once (every element of it
        # reaches the others' sums) and the sum of the others arrive once (V): V each way.
        return (volume, volume) if p > 1 else (0.0, 0.0)

    def transpose(self):
        return Psum()


@_registered
class AllGather(Collective):
    """out[j] = device j's x (a new leading dim N, which may be split over leading slots)."""
    kind, title, volume_role, aliases = K.ALL_GATHER, "all-gather", "output", ("allgather",)
    xor_symmetric, lax_primitives = True, ("all_gather",)

    @classmethod
    def lax_parameters(cls, params):
        return {} if params.get("all_gather_dimension", 0) == 0 else None

    def shape_problem(self, n, shapes, b):
        x, out, k = tuple(shapes[b.input]), tuple(shapes[b.output]), b.dims(b.output)
        ok = _devices(out, k, n) and out[k:] == x
        return None if ok else f"shape [N, *input shape] = {[n, *x]} (N may be split over leading slots)"

    def expected(self, n, device, shapes, b):
        out_shape, rank, k = shapes[b.output], len(shapes[b.input]), b.dims(b.output)
        full = tuple((0, s) for s in out_shape)
        shifted = tuple((d + k, 0) for d in range(rank))
        return [Piece(tuple((i, i + 1) for i in unravel(j, out_shape[:k])) + full[k:],
                      (_term(b.input, j, shifted),)) for j in range(n)]

    def _rotates(self, s, rank, b):
        return s.devices(b.output, b) and s.same(b.output, b.input, ((s.axes + i, i) for i in range(rank)))

    def lax(self, x, axis, n, rhs=None, dtype=None):
        from jax import lax
        return lax.all_gather(x, axis)

    def lax_text(self, x, axis, n, rhs=None):
        return f"lax.all_gather({x}, {axis})"

    def traffic(self, p, volume):
        return (1 - 1 / p) * volume, volume / p

    def transpose(self):
        return PsumScatter()


@_registered
class PsumScatter(Collective):
    """x has leading dim N (or leading slots multiplying to N); out = sum over devices of x[me]."""
    kind, title, aliases = K.PSUM_SCATTER, "reduce-scatter", ("reduce_scatter",)
    xor_symmetric, lax_primitives = True, ("reduce_scatter",)

    @classmethod
    def lax_parameters(cls, params):
        return {} if params.get("scatter_dimension", 0) == 0 else None

    def shape_problem(self, n, shapes, b):
        x, out, k = tuple(shapes[b.input]), tuple(shapes[b.output]), b.dims(b.input)
        ok = _devices(x, k, n) and out == x[k:]
        return None if ok else f"the input's leading N blocks (slots) and output shape {list(x[k:])}"

    def expected(self, n, device, shapes, b):
        x_shape, k = shapes[b.input], b.dims(b.input)
        full = tuple((0, s) for s in shapes[b.output])
        imap = tuple((None, i) for i in unravel(device, x_shape[:k])) + tuple((d, 0) for d in range(len(x_shape) - k))
        return [Piece(full, tuple(_term(b.input, j, imap) for j in range(n)))]

    def _rotates(self, s, rank, b):
        return s.devices(b.input, b) and s.same(b.output, b.input, ((i, s.axes + i) for i in range(rank - s.axes)))

    def lax(self, x, axis, n, rhs=None, dtype=None):
        from jax import lax
        return lax.psum_scatter(x, axis)

    def lax_text(self, x, axis, n, rhs=None):
        return f"lax.psum_scatter({x}, {axis})"

    def summed_terms(self, n, dtype="float32", depth=1):
        return n

    def traffic(self, p, volume):  # partial sums of different blocks cannot be combined
        return volume / p, (1 - 1 / p) * volume

    def transpose(self):
        return AllGather()


@_registered
class AllToAll(Collective):
    """x has leading dim N; out[j] = device j's x[me]."""
    kind, title, bisection, aliases = K.ALL_TO_ALL, "all-to-all", True, ("alltoall",)
    xor_symmetric, lax_primitives = True, ("all_to_all",)

    @classmethod
    def lax_parameters(cls, params):  # split and concatenated along dimension 0
        return {} if (params.get("split_axis", 0), params.get("concat_axis", 0)) == (0, 0) else None

    def shape_problem(self, n, shapes, b):
        x, out, kx, ko = tuple(shapes[b.input]), tuple(shapes[b.output]), b.dims(b.input), b.dims(b.output)
        ok = _devices(x, kx, n) and _devices(out, ko, n) and x[kx:] == out[ko:]
        return None if ok else f"input and output both of N={n} blocks (slots) of the same shape"

    def expected(self, n, device, shapes, b):
        x_shape, out_shape, kx, ko = shapes[b.input], shapes[b.output], b.dims(b.input), b.dims(b.output)
        full = tuple((0, s) for s in out_shape)
        imap = tuple((None, i) for i in unravel(device, x_shape[:kx])) + tuple(
            (ko + d, 0) for d in range(len(x_shape) - kx))
        return [Piece(tuple((i, i + 1) for i in unravel(j, out_shape[:ko])) + full[ko:], (_term(b.input, j, imap),))
                for j in range(n)]

    def _rotates(self, s, rank, b):
        return (s.devices(b.input, b) and s.devices(b.output, b)
                and s.same(b.output, b.input, ((i, i) for i in range(s.axes, rank))))

    def lax(self, x, axis, n, rhs=None, dtype=None):
        from jax import lax
        return lax.all_to_all(x, axis, 0, 0)

    def lax_text(self, x, axis, n, rhs=None):
        return f"lax.all_to_all({x}, {axis}, 0, 0)"

    def traffic(self, p, volume):
        frac = 1 - 1 / p
        return frac * volume, frac * volume

    def transpose(self):
        return AllToAll()


class _Matmul(Collective):
    """A collective fused with a matmul: x @ y with float32 accumulation, rounded once to
    the output's dtype. It moves what its plain counterpart (`moves_like`) moves. With
    `rhs_t` the right operand is stored transposed, y [n, k], and the product is x @ y^T
    (lax.dot_general contracting the last dim of both), as production collective matmuls
    keep their weights."""
    inputs, takes_rhs = ("input", "rhs"), True
    moves_like: ClassVar[type[Collective]]
    gathers: ClassVar[bool]          # all_gather(x) @ y; else psum_scatter(x @ y)
    rhs_t: ClassVar[bool] = False    # y is [n, k]: the product is x @ y^T

    @property
    def _einsum(self) -> str:
        return "jmk,nk->jmn" if self.rhs_t else "jmk,kn->jmn"

    def _y_map(self, out_col: int) -> IndexMap:
        """y's index map in the meaning's product terms: its k dim contracted, its n dim
        the output's column dim `out_col`."""
        return ((out_col, 0), (KDIM, 0)) if self.rhs_t else ((KDIM, 0), (out_col, 0))

    def lax(self, x, axis, n, rhs=None, dtype=None):
        import jax.numpy as jnp
        from jax import lax
        dtype = dtype or x.dtype
        if self.gathers:
            x = lax.all_gather(x, axis)
        product = jnp.einsum(self._einsum, x, rhs, preferred_element_type=jnp.float32)
        if not self.gathers:
            product = lax.psum_scatter(product, axis)
        return product.astype(dtype)

    def lax_text(self, x, axis, n, rhs=None):
        lhs = f"lax.all_gather({x}, {axis})" if self.gathers else x
        product = f'jnp.einsum("{self._einsum}", {lhs}, {rhs}, preferred_element_type=jnp.float32)'
        if not self.gathers:
            product = f"lax.psum_scatter({product}, {axis})"
        return f"{product}.astype({x}.dtype)"

    def vjp_text(self, x, axis, n, g, rhs=None):
        """x's cotangent is the transpose collective on g with the same y (the transpose
        stores y the other way round: x -> all_gather(x) @ y has g -> psum_scatter(g @ y^T));
        y's is the contraction of the gathered x with g (all_gather_matmul: out[j] = x_j @ y,
        so dy = sum_j x_j^T g[j]) or of x with the gathered g (matmul_psum_scatter:
        out = sum_j x_j[me] @ y_j, so device j's dy = sum_d x_j[d]^T g_d); transposed for
        a y stored as [n, k]."""
        dx = self.transpose().lax_text(g, axis, n, rhs=rhs)
        if self.gathers:
            pair = f"lax.all_gather({x}, {axis}), {g}"
        else:
            pair = f"{x}, lax.all_gather({g}, {axis})"
        dy = f'jnp.einsum("jmk,jmn->{"nk" if self.rhs_t else "kn"}", {pair}, preferred_element_type=jnp.float32)'
        return f"{dx.removesuffix(f'.astype({g}.dtype)')}.astype({x}.dtype)", f"{dy}.astype({rhs}.dtype)"

    def traffic(self, p, volume):
        return self.moves_like().traffic(p, volume)

    def shape_problem(self, n, shapes, b):
        x, y, out = tuple(shapes[b.input]), tuple(shapes[b.rhs]), tuple(shapes[b.output])
        lhs = x if self.gathers else x[1:]
        yk, yn = (y[::-1] if self.rhs_t else y) if len(y) == 2 else (None, None)
        if len(lhs) != 2 or yk is None or lhs[1] != yk or (not self.gathers and x[0] != n):
            want = "[m, k] @ " if self.gathers else "[N, m, k] @ "
            return f"inputs {want}{'[n, k]^T' if self.rhs_t else '[k, n]'}, not {list(x)} @ {list(y)}"
        want = (n, lhs[0], yn) if self.gathers else (lhs[0], yn)
        return None if out == want else f"shape {list(want)}"

    def volume(self, n, shapes, b):  # the gathered x, or the N partial products of one output shard
        name = b.input if self.gathers else b.output
        return n * prod(shapes[name]) * b.itemsize[name]

    def flops(self, n, shapes, b):
        """Per device: 2 m n k for each of the output blocks it computes."""
        blocks = 1 if self.gathers else n
        return 2.0 * blocks * prod(shapes[b.output]) * shapes[b.input][-1]

    def _rhs_steps(self, s: "_Steps", y: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """How y's contraction dim and its column dim move under a translation."""
        kdim, ndim = (1, 0) if self.rhs_t else (0, 1)
        return s.r(y, kdim), s.r(y, ndim)


class _AllGatherMatmul(_Matmul):
    """x [m, k], y [k, n] (or [n, k] transposed); out [N, m, n]: out[j] = device j's x @ my y."""
    moves_like, gathers = AllGather, True

    def expected(self, n, device, shapes, b):
        full = tuple((0, s) for s in shapes[b.output])
        k = shapes[b.input][-1]
        rhs = (b.rhs, device, self._y_map(2))
        return [Piece(((j, j + 1),) + full[1:], ((PRODUCT, _term(b.input, j, ((1, 0), (KDIM, 0))), rhs, 0, k),))
                for j in range(n)]

    def _rotates(self, s, rank, b):  # out[j] = x_j @ y_me
        x, y, out, r = b.input, b.rhs, b.output, s.r
        yk, yn = self._rhs_steps(s, y)
        return (s.axes == 1 and s.devices(out, b) and r(x, 1) == s.zero() and yk == s.zero()
                and r(out, 1) == r(x, 0) and r(out, 2) == yn)

    def summed_terms(self, n, dtype="float32", depth=1):
        # float32: `depth` products per output; narrower: one rounding per hop plus the reference's
        return depth if dtype == "float32" else 2


class _MatmulPsumScatter(_Matmul):
    """x [N, m, k], y [k, n] (or [n, k] transposed); out [m, n]: out = sum over j of
    device j's x[me] @ its y."""
    moves_like, gathers = PsumScatter, False

    def expected(self, n, device, shapes, b):
        full = tuple((0, s) for s in shapes[b.output])
        k = shapes[b.input][-1]
        return [Piece(full, tuple((PRODUCT, _term(b.input, j, ((None, device), (0, 0), (KDIM, 0))),
                                   (b.rhs, j, self._y_map(1)), 0, k) for j in range(n)))]

    def _rotates(self, s, rank, b):  # out = sum_j x_j[me] @ y_j
        x, y, out, r = b.input, b.rhs, b.output, s.r
        yk, yn = self._rhs_steps(s, y)
        return (s.axes == 1 and s.devices(x, b) and r(x, 2) == s.zero() and yk == s.zero()
                and r(out, 0) == r(x, 1) and r(out, 1) == yn)

    def summed_terms(self, n, dtype="float32", depth=1):
        return depth * n if dtype == "float32" else n + 1


# The transposes pair a gather with a scatter of the other orientation, with the same y:
# x -> all_gather(x) @ y is g -> psum_scatter(g @ y^T), and x -> psum_scatter(x @ y) is
# g -> all_gather(g) @ y^T. So a y stored once serves the forward and the backward kernel.
@_registered
class AllGatherMatmul(_AllGatherMatmul):
    """x [m, k], y [k, n]; out [N, m, n]: out[j] = device j's x @ my y."""
    kind, title = K.ALL_GATHER_MATMUL, "all-gather matmul"

    def transpose(self):
        return MatmulPsumScatterT()


@_registered
class AllGatherMatmulT(_AllGatherMatmul):
    """x [m, k], y [n, k]; out [N, m, n]: out[j] = device j's x @ my y^T."""
    kind, title, rhs_t = K.ALL_GATHER_MATMUL_T, "all-gather matmul (y transposed)", True

    def transpose(self):
        return MatmulPsumScatter()


@_registered
class MatmulPsumScatter(_MatmulPsumScatter):
    """x [N, m, k], y [k, n]; out [m, n]: out = sum over j of device j's x[me] @ its y."""
    kind, title = K.MATMUL_PSUM_SCATTER, "matmul reduce-scatter"

    def transpose(self):
        return AllGatherMatmulT()


@_registered
class MatmulPsumScatterT(_MatmulPsumScatter):
    """x [N, m, k], y [n, k]; out [m, n]: out = sum over j of device j's x[me] @ its y^T."""
    kind, title, rhs_t = K.MATMUL_PSUM_SCATTER_T, "matmul reduce-scatter (y transposed)", True

    def transpose(self):
        return AllGatherMatmul()


@_registered
class RingAttention(Collective):
    """Ring attention without the softmax: q [m, d] (this device's queries, `input`), k and
    v [s, d] (each device's own key and value blocks, `rhs` and `values`); out [m, d]:

        out = sum over devices j of (q @ k_j^T) @ v_j

    the KV pass of ring attention (each device's queries meet every device's KV block
    once), as *linear* attention: the running max and sum of the softmax (flash
    attention's online normalization) are not modelled. The format has no exp, max or
    division ops, and the meaning check follows sums and products of the inputs only; the
    schedules that compute this are exactly those that, with those elementwise ops added
    between the two products, compute softmax ring attention: every output block gets
    each j's term once, from the right KV block. The meaning is a sum of chained products,
    (q k_j^T) v_j: a product term whose left factor is itself a product
    (`verify/semantics.py`). The reference runs it with lax: all_gather of k and v, then
    the two einsums in float32. No transpose collective: the cotangents of q, k and v are
    no single collective of this module (jax.grad of a kernel raises unless it is given
    its own `transpose`)."""
    kind, title, volume_role = K.RING_ATTENTION, "ring attention (linear, no softmax)", "rhs"
    inputs, takes_rhs = ("input", "rhs", "values"), True  # the queries, the keys, the values
    assumes = ("meaning: linear attention, out = sum_j (q k_j^T) v_j; the softmax (running max and sum, "
               "exp, rescaling) is not modelled, so its elementwise ops are not checked")

    def shape_problem(self, n, shapes, b):
        q, k, out = tuple(shapes[b.input]), tuple(shapes[b.rhs]), tuple(shapes[b.output])
        v = tuple(shapes[b.values]) if b.values else None
        if len(q) != 2 or len(k) != 2 or k != v or q[1] != k[1]:
            return f"inputs q [m, d], k and v [s, d], not {list(q)}, {list(k)}, {list(v or ())}"
        return None if out == q else f"shape {list(q)} (q's)"

    def expected(self, n, device, shapes, b):
        full = tuple((0, s) for s in shapes[b.output])
        d, s = shapes[b.input][1], shapes[b.rhs][0]
        outer = KDIM - 1  # the index of the product whose left factor is the product q k^T
        return [Piece(full, tuple((PRODUCT, (PRODUCT, _term(b.input, device, ((0, 0), (KDIM, 0))),
                                             _term(b.rhs, j, ((outer, 0), (KDIM, 0))), 0, d),
                                   _term(b.values, j, ((outer, 0), (1, 0))), 0, s) for j in range(n)))]

    def _rotates(self, s, rank, b):  # out = sum_j (q_me k_j^T) v_j: no data dim moves with the device
        zero = s.zero()
        return all(s.r(name, i) == zero for name in (b.input, b.rhs, b.values, b.output) for i in range(2))

    _EINSUMS = ("md,jsd->mjs", "mjs,jsd->md")

    def lax(self, x, axis, n, rhs=None, dtype=None, values=None):
        import jax.numpy as jnp
        from jax import lax
        scores = jnp.einsum(self._EINSUMS[0], x, lax.all_gather(rhs, axis), preferred_element_type=jnp.float32)
        out = jnp.einsum(self._EINSUMS[1], scores, lax.all_gather(values, axis).astype(jnp.float32),
                         preferred_element_type=jnp.float32)
        return out.astype(dtype or x.dtype)

    def lax_text(self, x, axis, n, rhs=None, values=None):
        scores = f'jnp.einsum("{self._EINSUMS[0]}", {x}, lax.all_gather({rhs}, {axis}), preferred_element_type=jnp.float32)'
        return (f'jnp.einsum("{self._EINSUMS[1]}", {scores}, lax.all_gather({values}, {axis}).astype(jnp.float32), '
                f"preferred_element_type=jnp.float32).astype({x}.dtype)")

    def summed_terms(self, n, dtype="float32", depth=1):
        # float32: each output element sums n * s products of sums of d products
        return n * depth if dtype == "float32" else n + 1

    def volume(self, n, shapes, b):
        """V: the gathered KV blocks (what every device's queries must meet)."""
        return n * sum(prod(shapes[name]) * b.itemsize[name] for name in (b.rhs, b.values))

    def traffic(self, p, volume):
        """As an all-gather of the KV blocks: softmax attention cannot be reduced to less
        (linear attention could psum the d x d products k_j^T v_j, but this collective
        stands for the softmax kernel's data movement)."""
        return (1 - 1 / p) * volume, volume / p

    def flops(self, n, shapes, b):
        """Per device: 2 m s d for q k_j^T and again for its product with v_j, per block j."""
        m, d = shapes[b.input]
        return 4.0 * n * m * d * shapes[b.rhs][0]

    def transpose(self):
        return None


@_registered
class RaggedAllToAll(Collective):
    """`lax.ragged_all_to_all(x, init, input_offsets, send_sizes, output_offsets, recv_sizes,
    axis_name)` with one slice per peer (the data arrays of shape [N], `data_arrays`):
    device j's rows x[input_offsets[d] : + send_sizes[d]] land on device d at
    out[output_offsets[d] : + send_sizes[d]] (offsets on the receiver); every other row of out
    is init's (lax's `output` argument, here `Buffers.rhs`). Rows are the leading dimension.

    The meaning depends on the runtime data: `with_data(sample)` gives the collective of one
    sample (`ringc.data.Sample`), whose `expected` the data-flow check compares with. The
    transpose sends the cotangent back: out's rows to where they came from (a ragged
    all-to-all with the roles of the offsets swapped, as JAX's transpose rule does), and
    init's cotangent is the cotangent with the received rows zeroed."""
    kind, title, bisection = K.RAGGED_ALL_TO_ALL, "ragged all-to-all", True
    inputs = ("input", "rhs")  # rhs: lax's `output` argument, the values kept where nothing lands
    data_arrays = ("input_offsets", "send_sizes", "output_offsets", "recv_sizes")

    def __init__(self, shift: int = 1, data: Mapping[str, Any] | None = None):
        super().__init__(shift)
        self.data = data

    def with_data(self, data: Mapping[str, Any]) -> "RaggedAllToAll":
        return RaggedAllToAll(self.shift, data)

    def shape_problem(self, n, shapes, b):
        x, out, init = tuple(shapes[b.input]), tuple(shapes[b.output]), tuple(shapes[b.rhs]) if b.rhs else None
        ok = len(x) >= 1 and len(out) == len(x) and out[1:] == x[1:] and init == out
        return None if ok else f"rows of the input's shape {list(x[1:])}, and init's shape (the output's)"

    def received(self, n: int, device: int) -> list[tuple[int, int, int, int]]:
        """(source j, first output row, rows, first input row of j) of every non-empty slice
        that lands on `device`, in output row order."""
        if self.data is None:
            raise ValueError("ragged_all_to_all's meaning depends on its runtime data: use with_data(sample)")
        d = self.data
        out = [(j, d["output_offsets"][j][device], d["send_sizes"][j][device], d["input_offsets"][j][device])
               for j in range(n) if d["send_sizes"][j][device] > 0]
        return sorted(out, key=lambda t: t[1])

    def expected(self, n, device, shapes, b):
        out_shape = shapes[b.output]
        rest = tuple((0, s) for s in out_shape[1:])
        ident = tuple((i, 0) for i in range(1, len(out_shape)))
        pieces, row = [], 0
        for j, start, size, src in self.received(n, device):
            if start > row:
                pieces.append(Piece(((row, start), *rest), (_term(b.rhs, device, ((0, 0), *ident)),)))
            pieces.append(Piece(((start, start + size), *rest), (_term(b.input, j, ((0, src - start), *ident)),)))
            row = max(row, start + size)
        if row < out_shape[0]:
            pieces.append(Piece(((row, out_shape[0]), *rest), (_term(b.rhs, device, ((0, 0), *ident)),)))
        return pieces

    def _rotates(self, s, rank, b):  # data-dependent: never a translation
        return False

    def lax(self, x, axis, n, rhs=None, dtype=None, data=None):
        """The reference: `lax.ragged_all_to_all` where XLA implements it (TPU, GPU); XLA:CPU
        has no ragged-all-to-all (jax 0.10.2: "not supported by XLA:CPU"), so on CPU the
        same meaning in plain lax, as the lax docstring's pseudocode states it (an
        all_to_all of output_offsets, an all_gather of x, one dynamic update per slice)."""
        import jax
        from jax import lax
        io, ss, oo, rs = (data[k] for k in self.data_arrays)
        if jax.default_backend() != "cpu":
            return lax.ragged_all_to_all(x, rhs, io, ss, oo, rs, axis_name=axis)
        return ragged_all_to_all_lax(x, rhs, io, ss, oo, rs, axis, n)

    def lax_text(self, x, axis, n, rhs=None):
        return f"lax.ragged_all_to_all({x}, {rhs}, input_offsets, send_sizes, output_offsets, recv_sizes, axis_name={axis})"

    def vjp_text(self, x, axis, n, g, rhs=None):
        """JAX's transpose rule (jax/_src/lax/parallel.py, `_ragged_all_to_all_transpose`):
        x's cotangent is a ragged all-to-all of g back to where the rows came from (offsets
        on the receivers: the all_to_all of input_offsets; sizes swapped), init's is g with
        the received rows zeroed (they were overwritten)."""
        recv_at = f"lax.all_to_all(output_offsets, {axis}, 0, 0, tiled=True)"
        sent_from = f"lax.all_to_all(input_offsets, {axis}, 0, 0, tiled=True)"
        dx = (f"lax.ragged_all_to_all({g}, jnp.zeros_like({x}), {recv_at}, recv_sizes, {sent_from}, send_sizes, "
              f"axis_name={axis})")
        row = f"jnp.arange({g}.shape[0])[:, None]"
        received = f"(({row} >= {recv_at}[None]) & ({row} < ({recv_at} + recv_sizes)[None])).any(1)"
        dinit = f"jnp.where({received}.reshape((-1,) + (1,) * ({g}.ndim - 1)), 0, {g})"
        return dx, dinit

    def traffic(self, p, volume):  # at most the whole input leaves and the whole output arrives
        return volume, volume

    def transpose(self):
        return RaggedAllToAll()


def ragged_all_to_all_lax(x: Any, init: Any, input_offsets: Any, send_sizes: Any, output_offsets: Any,
                          recv_sizes: Any, axis: Any, n: int) -> Any:
    """`lax.ragged_all_to_all` with one slice per peer, in lax ops XLA:CPU runs: the receiver's
    offsets are `all_to_all(output_offsets)`, and the slice from device j is rows
    [input_offsets_j[me], + recv_sizes[j]) of j's x (all-gathered), written row by row
    where the row lies inside the slice (a mask, since slice sizes are not static)."""
    import jax.numpy as jnp
    from jax import lax
    starts = lax.all_to_all(output_offsets, axis, 0, 0, tiled=True)
    src_starts = lax.all_to_all(input_offsets, axis, 0, 0, tiled=True)
    everyone = lax.all_gather(x, axis)             # [n, rows, ...]
    rows = jnp.arange(init.shape[0])
    out = init
    for j in range(n):
        inside = (rows >= starts[j]) & (rows < starts[j] + recv_sizes[j])
        take = jnp.clip(rows - starts[j] + src_starts[j], 0, x.shape[0] - 1)
        moved = everyone[j][take]
        out = jnp.where(inside.reshape((-1,) + (1,) * (x.ndim - 1)), moved, out)
    return out


TITLES: dict[str, str] = {kind: c.title for kind, c in COLLECTIVES.items()}
# Every name a user may give for a collective (`ringc cost --collective`, `ringc synth`): its
# kind and its class's aliases.
NAMES: dict[str, S.CollectiveKind] = {**{kind: kind for kind in COLLECTIVES},
                                      **{a: kind for kind, c in COLLECTIVES.items() for a in c.aliases}}


def kind_named(name: str) -> S.CollectiveKind | None:
    """The collective kind `name` spells, in any case: a kind or one of its aliases (None: none)."""
    return NAMES.get(name.lower())


def collective_of(sched: S.Schedule) -> Collective:
    """The collective object of a schedule (raises `MissingRule` for an unknown kind)."""
    c = sched.collective
    return COLLECTIVES[c.kind](shift=c.shift)
