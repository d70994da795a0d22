"""The values the kernel interpreter computes with.

A kernel's scalars (grid indices, device ids, loop counters, slot arithmetic, numbers kept
in SMEM) are computed concretely, per device and grid point: they decide which memory a DMA
touches and which device it goes to. Tensor data is not computed: a `Data` value records
only its shape and where it came from (a load, a sum, a product, a cast, a zero), which is
exactly what the verifier's symbolic data flow needs, and the elementwise functions applied
to it ("fn"). Anything else is `opaque` data: it may be stored, and the meaning check then
notes the output block as not followed (its meaning is not checked there).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import math

import numpy as np

from ..verify.events import Region


class Loc(int):
    """A source line that also knows its file: `Event.line` stays an int (the verifier
    compares and prints it as one) while findings can name the user's file."""

    file: str
    via: str  # the access is in a helper: `in _copy(), called from kernel() at line 57` (else "")

    def __new__(cls, line: int, file: str, via: str = "") -> "Loc":
        obj = super().__new__(cls, line)
        obj.file = file
        obj.via = via
        return obj

    def __reduce__(self):  # picklable, like an int
        return (Loc, (int(self), self.file, self.via))


@dataclass
class Buffer:
    """One array of one pallas_call (or one carried between calls) on every device."""
    name: str
    shape: tuple[int, ...]
    dtype: Any
    space: str                 # hbm | vmem | smem | semaphore
    kind: str                  # input | output | scratch | value (a loaded value's register)
    line: int = 0
    # Concrete contents per device, for SMEM and scalar-prefetch arrays (small integers).
    store: dict[int, np.ndarray] = field(default_factory=dict)
    # Why a device's contents stopped being known (a DMA filled them with values ringc
    # does not follow), per device: a scalar read of it is then runtime data.
    unknown: dict[int, str] = field(default_factory=dict)
    # Integers the kernel put in vector memory (VMEM, HBM), per device, as far as ringc knows
    # them: a routing table computed in the kernel, counts received from another device
    # (`Shadow`). Loads of a fully known box are concrete; DMAs carry the values on.
    shadow: dict[int, "Shadow"] = field(default_factory=dict)
    # A DMA may write this SMEM buffer: its scalar reads and writes are then events (a read
    # before the DMA's wait is a race), not only values.
    dma_target: bool = False
    # The elements of `store` a DMA filled with values ringc does not know, per device (the
    # never-written part of a schedule copied whole from HBM), and why: a read of one of them
    # is runtime data; the rest of the store stays known.
    unset: dict[int, tuple[np.ndarray, str]] = field(default_factory=dict)

    def unset_in(self, device: int, sl: tuple) -> str | None:
        """Why an element of the box `sl` of the device's store is not known, or None."""
        got = self.unset.get(device)
        return got[1] if got is not None and np.asarray(got[0][sl]).any() else None

    @property
    def follows_values(self) -> bool:
        """Whether ringc follows the integers this vector buffer holds (`shadow`): integer or
        boolean arrays outside SMEM (whose values `store` keeps whole)."""
        return self.space in ("vmem", "hbm") and self.kind != "value" and integer_or_bool(self.dtype)

    @property
    def itemsize(self) -> int:
        return _itemsize(self.dtype)

    @property
    def memory(self) -> str:  # the word `core.megacore_findings` uses
        return "vmem" if self.space in ("vmem", "smem") else "hbm"


def _itemsize(dtype: Any) -> int:
    """Bytes per element; an extended dtype (a PRNG key `key<pl>`, no numpy dtype) says its own."""
    try:
        return np.dtype(dtype).itemsize
    except TypeError:
        return int(dtype.itemsize)


def integer_or_bool(dtype: Any) -> bool:
    """Whether a dtype holds integers or booleans (values ringc may follow); False for an
    extended dtype (a PRNG key's `key<pl>`), which numpy cannot interpret."""
    return not extended(dtype) and (np.issubdtype(np.dtype(dtype), np.integer) or np.dtype(dtype) == np.bool_)


def extended(dtype: Any) -> bool:
    """A JAX extended dtype (a PRNG key's `key<pl>`), which numpy cannot interpret."""
    try:
        np.dtype(dtype)
    except TypeError:
        return True
    return False


@dataclass
class Shadow:
    """The known elements of one device's vector buffer: `values`, and `known` (where a
    concrete value was stored or copied since the buffer was allocated)."""
    values: np.ndarray
    known: np.ndarray

    @staticmethod
    def empty(shape: tuple[int, ...], dtype: Any) -> "Shadow":
        return Shadow(np.zeros(shape, dtype), np.zeros(shape, bool))

    def get(self, sl: tuple) -> np.ndarray | None:
        """The values of a box when every element is known, else None."""
        return np.array(self.values[sl]) if self.known[sl].all() else None

    def put(self, sl: tuple, value: Any) -> None:
        """Store `value` (None: values ringc does not know) into a box."""
        if value is None:
            self.known[sl] = False
        else:
            self.values[sl] = np.asarray(value).reshape(np.shape(self.values[sl]))
            self.known[sl] = True


@dataclass(frozen=True)
class Ref:
    """A view of a buffer on one device: a box over the buffer's full shape, and the dims
    the view still has (the others are point-indexed). When every device is evaluated at
    once (`interpret.Lanes`), `box` is device 0's and `var` holds, for each dim whose start
    differs between devices, every device's start."""
    buffer: Buffer
    device: int
    box: tuple[tuple[int, int], ...]
    kept: tuple[int, ...]
    var: tuple[tuple[int, np.ndarray], ...] = field(default=(), compare=False)
    # A strided slice (`ref[pl.ds(a, n, stride)]`), kept as the box from its first to its last
    # element: what it is, for the verdict (a load) or the error (a store, a DMA); else "".
    strided: str = field(default="", compare=False)
    # Mosaic GPU's tiled (and swizzled) SMEM seen through its logical view (`interpret._untiled`):
    # the box is the tiles it touches, and the values are not followed element by element.
    layout: str = field(default="", compare=False)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.box[d][1] - self.box[d][0] for d in self.kept)

    @property
    def dtype(self) -> Any:  # the element type the kernel sees (a bitcast view's: `ViewRef`)
        return self.buffer.dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * _itemsize(self.dtype)

    def region(self, device: int | None = None) -> Region:
        # A 0-d buffer (`pltpu.SMEM(())`, a scalar output) is one element: the verifier's
        # regions have at least one dimension, so it is the point 0 of a dimension of size 1.
        return Region(self.buffer.name, self.device if device is None else device, self.box or ((0, 1),),
                      self.kept, self.buffer.itemsize)

    @staticmethod
    def whole(buffer: Buffer, device: int) -> "Ref":
        return Ref(buffer, device, tuple((0, s) for s in buffer.shape), tuple(range(len(buffer.shape))))


@dataclass(frozen=True)
class SemRef:
    """A view of a semaphore array: its name, kind (dma | regular | barrier), full shape,
    the index already fixed for the leading dims, and the remaining shape."""
    name: str
    kind: str
    shape: tuple[int, ...]
    index: tuple[int, ...] = ()

    @property
    def rest(self) -> tuple[int, ...]:
        return self.shape[len(self.index):]


@dataclass(frozen=True)
class Data:
    """Tensor data, not computed: its shape and how it was made.
    how: ("load", Region of a value register) | ("add", Data, Data)
         | ("dot", Data, Data, (lhs contracted dim, rhs contracted dim)) | ("transpose", Data)
         | ("cast", Data) | ("zero",) | ("opaque", why: the primitive and its line)
         | ("fn", names, Data): pointwise functions of the data, innermost first (a name ending
           in "*" scales by a constant; any other is an uninterpreted elementwise function,
           `primitives.ELEMENTWISE`, `semantics.pointwise`)"""
    shape: tuple[int, ...]
    how: tuple


@dataclass(frozen=True)
class Unknown:
    """A scalar the model cannot know statically (a semaphore's value, a value read from
    tensor data): fine to carry. Branching or indexing on a semaphore's value is an error;
    one computed from tensor data (`data`) is runtime data, sampled where it is used
    (`interpret.sample_value`: "Values from tensor data" in docs/pallas-import.md)."""
    why: str
    data: bool = False


class Vec:
    """A value that differs between devices, when every device is evaluated at once
    (`interpret.Lanes`): `a[d]` is device d's value (a scalar, or a small array of
    integers). Never uniform: a value equal on every device is kept as that value
    (`vec`), so control flow and sizes stay plain Python."""
    __slots__ = ("a",)

    def __init__(self, a: np.ndarray):
        self.a = a

    def __repr__(self) -> str:
        return f"Vec({self.a.tolist()})"


def vec(a: Any) -> Any:
    """Every device's values (leading axis: devices) as one value: the plain value when all
    devices agree, else a `Vec`."""
    a = np.asarray(a)
    if (a == a[0]).all():
        first = a[0]
        return first.item() if first.ndim == 0 else first
    return Vec(a)


def is_concrete(v: Any) -> bool:
    return isinstance(v, (int, float, bool, np.ndarray, np.generic))
