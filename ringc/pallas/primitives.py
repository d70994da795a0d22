"""The JAX primitives the Pallas importer knows: one table, keyed by the primitive's name.

In the style of Pallas' own Mosaic lowering (`jax/_src/pallas/mosaic/lowering.py`: one
table keyed by the primitive, flags on the registration, one rule signature), every
primitive the importer meets is registered once, with what it does (`Does`):

    @PRIMITIVES.kernel("dma_start", does=Does.MEMORY | Does.SEMAPHORE, doc="...")
    def _dma_start(it, eqn, invals) -> list: ...          # ringc/pallas/interpret.py

    @PRIMITIVES.outer("scan")
    def _scan(walker, eqn, ins) -> list: ...              # ringc/pallas/importer.py

    PRIMITIVES.pure("add", numpy=np.add, scalar=..., lanewise=True, elementwise=True)

An entry holds up to two rules of one signature, `(evaluator, eqn, inputs) -> outputs`: the
kernel interpreter's (`interpret.Interpreter`, on values inside a `pallas_call`) and the
outer walker's (`importer._Outer`, on handles outside the kernels). A pure primitive needs
neither: it is evaluated by `interpret.pure_rule` (with every device at once,
`interpret.Lanes.pure`) from its flags: `numpy` (evaluation on concrete arrays), `scalar`
(on Python ints, with XLA's integer semantics), `lanewise` (numpy on every device's values
at once), `elementwise` (followed on tensor data as a pointwise function,
`semantics.pointwise`). Control flow is written once for both (`while_loop`, `scan_loop`).

The table's domain is every primitive Pallas' Mosaic TPU lowering has a rule for
(`tests/test_coverage.py` names one that is missing here, so a JAX upgrade that adds a
primitive fails there until it is registered). A primitive with no entry, or a pure one,
is evaluated as pure only when its equation has no effects, no refs and no sub-jaxprs;
otherwise it is an error naming the primitive and the user's line (`Interpreter.generic`):
a skipped DMA would make a racy kernel look clean.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Protocol

import numpy as np

from .. import limits
from ..ir.rules import RuleTable

__all__ = ["Does", "Primitive", "PrimitiveTable", "PRIMITIVES", "ELEMENTWISE", "Evaluator", "while_loop",
           "scan_loop", "int_div", "mosaic_tpu_primitives"]

Rule = Callable[[Any, Any, list], list]


class Does(enum.Flag):
    """What a primitive does, as the verifier sees it (flags on its registration)."""
    PURE = enum.auto()         # a function of its inputs: no effects, no refs
    CONTROL = enum.auto()      # control flow: evaluates sub-jaxprs (cond, scan, while)
    CALL = enum.auto()         # a nested function evaluated inline (jit, custom_jvp_call, ...)
    MEMORY = enum.auto()       # reads or writes a ref (get, swap, a DMA), or allocates scratch
    SEMAPHORE = enum.auto()    # signals, waits on or reads a semaphore
    PLACE = enum.auto()        # where the kernel runs: a grid index, a device index
    HINT = enum.auto()         # no effect on memory or semaphores (alignment hints, printing)
    COLLECTIVE = enum.auto()   # a lax collective on arrays (outside the kernels)
    KERNEL = enum.auto()       # holds kernels (`pallas_call`, `shard_map`): the outer walker's
    UNSUPPORTED = enum.auto()  # known, and refused: an error naming it and the line


@dataclass
class Primitive:
    """One primitive's registration."""
    name: str
    does: Does
    doc: str = ""
    kernel: Rule | None = None   # inside a kernel (`interpret.Interpreter`); None: `pure_rule`
    gpu: Rule | None = None      # inside a Mosaic GPU kernel (`mgpu.GpuInterpreter`); None: pure or refused
    outer: Rule | None = None    # outside the kernels (`importer._Outer`); None: computed
    numpy: Callable[..., Any] | None = None   # pure: `numpy(params, *arrays)` on concrete arrays
    scalar: Callable[..., Any] | None = None  # pure: on Python ints (None: numpy decides)
    lanewise: bool = False       # pure: `numpy` on every device's values at once (`Lanes.pure`)
    elementwise: bool = False    # pure: a pointwise function of one tensor (`interpret._elementwise`)
    # A lax collective XLA runs between the kernels (outside every pallas_call): its words for
    # the verdict, from its params and the mesh's axis sizes (`importer._Outer.other`).
    words: Callable[[dict, dict[str, int]], str] | None = None
    gpu_doc: str = ""            # the GPU rule's row in docs/pallas-import.md (Mosaic GPU)


class PrimitiveTable(RuleTable):
    """Primitive name -> `Primitive`. Registering a name twice for the same rule is an error."""

    def _entry(self, name: str, does: Does | None, doc: str) -> Primitive:
        p = self.get(name)
        if p is None:
            if does is None:
                raise ValueError(f"{self.stage}: `{name}` needs its flags (does=...) when first registered")
            p = Primitive(name, does, doc)
            dict.__setitem__(self, name, p)
        elif does is not None and does != p.does:
            raise ValueError(f"{self.stage}: `{name}` registered as {p.does} and as {does}")
        if doc:
            p.doc = doc
        return p

    def kernel(self, *names: str, does: Does, doc: str = "") -> Callable[[Rule], Rule]:
        """Register the interpreter's rule for `names` (inside a kernel). `doc` (else the
        rule's first docstring line) is its row in docs/pallas-import.md."""
        return self._rule("kernel", names, does, doc)

    def gpu(self, *names: str, does: Does, doc: str = "") -> Callable[[Rule], Rule]:
        """Register the Mosaic GPU interpreter's rule for `names` (`mgpu.GpuInterpreter`); `doc`
        is its row in docs/pallas-import.md's Mosaic GPU table (`mgpu.rule_table_markdown`)."""
        return self._rule("gpu", names, does, doc)

    def _rule(self, slot: str, names: tuple[str, ...], does: Does, doc: str) -> Callable[[Rule], Rule]:
        def add(rule: Rule) -> Rule:
            text = doc or (rule.__doc__ or "").strip().splitlines()[0]
            for name in names:
                p = self._entry(name, does, text if slot == "kernel" else "")
                if getattr(p, slot) is not None:
                    raise ValueError(f"{self.stage}: two {slot} rules for `{name}`")
                setattr(p, slot, rule)
                if slot == "gpu":
                    p.gpu_doc = text
            return rule
        return add

    def gpu_shares(self, *names: str) -> None:
        """The GPU interpreter uses the TPU interpreter's rule for `names` (loads, stores,
        control flow: they mean the same on both)."""
        for name in names:
            p = self.get(name)
            if p is None or p.kernel is None:
                raise ValueError(f"{self.stage}: `{name}` has no kernel rule to share")
            if p.gpu is not None:
                raise ValueError(f"{self.stage}: two gpu rules for `{name}`")
            p.gpu = p.kernel
            p.gpu_doc = "as on TPU"

    def outer(self, *names: str, does: Does | None = None) -> Callable[[Rule], Rule]:
        """Register the outer walker's rule for `names` (outside the kernels)."""
        def add(rule: Rule) -> Rule:
            for name in names:
                p = self._entry(name, does, "")
                if p.outer is not None:
                    raise ValueError(f"{self.stage}: two outer rules for `{name}`")
                p.outer = rule
            return rule
        return add

    def pure(self, *names: str, numpy: Callable[..., Any] | None = None, params: bool = False,
             scalar: Callable[..., Any] | None = None, lanewise: bool = False, elementwise: bool = False) -> None:
        """Register pure primitives (evaluated by `interpret.pure_rule`). `numpy` takes the
        arrays, or with `params` the equation's params first; without it JAX evaluates."""
        fn = numpy if numpy is None or params else (lambda p, *a, _f=numpy: _f(*a))
        for name in names:
            p = self._entry(name, Does.PURE, "")
            p.numpy, p.scalar, p.lanewise, p.elementwise = fn, scalar, lanewise, elementwise

    def between(self, name: str, words: Callable[[dict, dict[str, int]], str]) -> None:
        """A lax collective on arrays between the kernels, with its words for the verdict."""
        p = self._entry(name, Does.COLLECTIVE, "")
        if p.words is not None:
            raise ValueError(f"{self.stage}: two texts for `{name}`")
        p.words = words

    def unsupported(self, *names: str, does: Does) -> None:
        """Primitives ringc refuses wherever they appear (an error naming them and the line)."""
        for name in names:
            self._entry(name, does | Does.UNSUPPORTED, "")


PRIMITIVES = PrimitiveTable("the Pallas importer (ringc/pallas/primitives.py PRIMITIVES)", "pallas_tpu")


def mosaic_tpu_primitives() -> list[str]:
    """The table's domain: every primitive Pallas' Mosaic TPU lowering has a rule for (a
    private table of jax 0.10, `jax._src.pallas.mosaic.lowering.lowering_rules`)."""
    import jax.experimental.pallas.tpu  # noqa: F401 - registers the pipeline's and einshape's rules too
    from jax._src.pallas.mosaic import lowering
    return sorted({p.name for rules in lowering.lowering_rules.values() for p in rules})


# -- control flow, once for the kernel interpreter and the outer walker ---------------------
class Evaluator(Protocol):
    """What a loop needs of the evaluator it runs in (`Interpreter`, `importer._Outer`)."""

    def run_closed(self, closed: Any, args: list) -> list: ...

    def truth(self, c: Any, eqn: Any) -> bool:
        """A loop condition's value (an error when it is not known before the run)."""

    def too_many(self, eqn: Any, most: int) -> Exception:
        """The error for a loop past the limit `loop_iterations`."""

    def iteration(self, eqn: Any, i: int) -> ContextManager[None]:
        """While the body of loop `eqn` runs its iteration i (a kernel's events name it)."""


def while_loop(ev: Evaluator, eqn: Any, invals: list) -> list:
    """`lax.while_loop` (a `fori_loop`): unrolled while its condition is known, at most
    `loop_iterations` times."""
    p = eqn.params
    cn, bn = p["cond_nconsts"], p["body_nconsts"]
    cconsts, bconsts, val = invals[:cn], invals[cn:cn + bn], invals[cn + bn:]
    most = limits.value("loop_iterations")
    for k in range(most):
        (c,) = ev.run_closed(p["cond_jaxpr"], [*cconsts, *val])
        if not ev.truth(c, eqn):
            return val
        with ev.iteration(eqn, k):
            val = ev.run_closed(p["body_jaxpr"], [*bconsts, *val])
    raise ev.too_many(eqn, most)


def scan_loop(ev: Evaluator, eqn: Any, invals: list, x_at: Callable[[list, int], list]) -> tuple[list, list]:
    """`lax.scan` (a `fori_loop` with a static trip count): unrolled; `x_at(xs, i)` is the
    i-th slice of the scanned inputs. The final carry and each iteration's outputs, in
    iteration-index order."""
    p = eqn.params
    nc, nk = p["num_consts"], p["num_carry"]
    consts, carry, xs = invals[:nc], invals[nc:nc + nk], invals[nc + nk:]
    ys: list[list] = []
    order = range(p["length"] - 1, -1, -1) if p.get("reverse") else range(p["length"])
    for i in order:
        with ev.iteration(eqn, i):
            out = ev.run_closed(p["jaxpr"], [*consts, *carry, *x_at(xs, i)])
        carry = out[:nk]
        ys.append(out[nk:])
    if p.get("reverse"):
        ys.reverse()
    return carry, ys


# -- pure primitives ------------------------------------------------------------------------
def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return -q if (a < 0) != (b < 0) else q


def _c_rem(a: int, b: int) -> int:
    return a - b * _c_div(a, b)


def int_div(a: Any, b: Any) -> Any:
    """Integer division with XLA's semantics (rounding toward zero), on arrays."""
    q = np.abs(a) // np.abs(b)
    return np.where(np.sign(a) * np.sign(b) < 0, -q, q)


def _div(params: dict, a: Any, b: Any) -> Any:
    return int_div(a, b) if np.issubdtype(np.asarray(a).dtype, np.integer) else np.divide(a, b)


def _select_n(params: dict, which: Any, *cases: Any) -> Any:
    cases = np.broadcast_arrays(*cases, np.asarray(which))[:-1]
    return np.choose(np.asarray(which).astype(np.int32), cases)


_BINARY = {  # name: (numpy, the same on Python ints)
    "add": (np.add, lambda a, b: a + b), "sub": (np.subtract, lambda a, b: a - b),
    "mul": (np.multiply, lambda a, b: a * b), "max": (np.maximum, max), "min": (np.minimum, min),
    "eq": (np.equal, lambda a, b: a == b), "ne": (np.not_equal, lambda a, b: a != b),
    "lt": (np.less, lambda a, b: a < b), "le": (np.less_equal, lambda a, b: a <= b),
    "gt": (np.greater, lambda a, b: a > b), "ge": (np.greater_equal, lambda a, b: a >= b),
    "and": (np.bitwise_and, lambda a, b: a and b if type(a) is bool else a & b),
    "or": (np.bitwise_or, lambda a, b: a or b if type(a) is bool else a | b),
    "xor": (np.bitwise_xor, None), "shift_left": (np.left_shift, None),
    "shift_right_arithmetic": (np.right_shift, None),
    "neg": (np.negative, lambda a: -a), "abs": (np.abs, abs), "sign": (np.sign, lambda a: (a > 0) - (a < 0)),
    "not": (np.invert, lambda a: (not a) if type(a) is bool else ~a),
}
# Followed on tensor data as a pointwise function (`Data` how "fn", `semantics.pointwise`):
# scaling by a constant exactly (`x * 1.0`, `x + 0`, `x / 1` are x; `-x`, `x * c`, `x / c`
# scale it), any other one as an uninterpreted function named by the primitive and its constants.
_POINTWISE = {
    "add", "sub", "mul", "div", "neg", "max", "min", "pow", "integer_pow", "square", "rem", "atan2", "nextafter",
    "exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
    "cosh", "asinh", "acosh", "atanh", "abs", "sign", "floor", "ceil", "round", "sqrt", "rsqrt", "cbrt", "erf",
    "erfc", "erf_inv", "lgamma", "digamma", "is_finite", "not", "clamp", "reduce_precision", "real", "imag",
}
for _name, (_np, _int) in _BINARY.items():
    PRIMITIVES.pure(_name, numpy=_np, scalar=_int, lanewise=True, elementwise=_name in _POINTWISE)
PRIMITIVES.pure("div", numpy=_div, params=True, scalar=lambda a, b: _c_div(a, b) if b else None, lanewise=True,
                elementwise=True)
PRIMITIVES.pure("rem", numpy=np.fmod, scalar=lambda a, b: _c_rem(a, b) if b else None, lanewise=True,
                elementwise=True)
PRIMITIVES.pure("select_n", numpy=_select_n, params=True, scalar=lambda p, *cases: cases[int(p)], lanewise=True)
PRIMITIVES.pure("convert_element_type", numpy=lambda p, a: np.asarray(a).astype(p["new_dtype"]), params=True,
                scalar=lambda a: a, lanewise=True)
def _roll(p: dict, x: Any, shift: Any) -> Any:
    """`pltpu.roll` as Mosaic lowers it: `jnp.roll` along `axis`; with `stride`, slice i along
    `stride_axis` rolled by shift + i * stride."""
    x, shift, axis = np.asarray(x), int(shift), p["axis"]
    if p.get("stride") is None:
        return np.roll(x, shift, axis)
    k = p["stride_axis"]
    return np.concatenate([np.roll(xs, shift + i * p["stride"], axis)
                           for i, xs in enumerate(np.split(x, x.shape[k], k))], k)


PRIMITIVES.pure("roll", numpy=_roll, params=True)
PRIMITIVES.pure("integer_pow", numpy=lambda p, a: np.power(a, p["y"]), params=True, lanewise=True,
                elementwise=True)
PRIMITIVES.pure(*sorted(_POINTWISE - set(PRIMITIVES)), elementwise=True)
# The rest of what Mosaic TPU lowers that is a function of its inputs: JAX evaluates it on
# concrete inputs; on tensor data it is followed where `interpret.pure_rule` says (a sum, a
# cast, a transpose, a matmul), else a value not followed (a note).
PRIMITIVES.pure(
    "add_any", "argmax", "argmin", "bitcast_convert_type", "broadcast_to", "clz", "concatenate",
    "dim_as_value", "dot_general", "gather", "iota", "iota_2x32_shape", "pack_elementwise", "pad",
    "platform_index", "population_count", "reciprocal", "reduce_and", "reduce_max", "reduce_min", "reduce_or",
    "reduce_sum", "reshard", "shift_right_logical", "slice", "split", "stack", "stochastic_round",
    "stop_gradient", "threefry2x32", "tile", "transpose", "unpack_elementwise", "unstack", "bitcast",
    "reshape", "squeeze", "expand_dims", "copy", "stage", "einshape_lo")
# Known, always with effects or refs ringc does not model: refused wherever they appear.
PRIMITIVES.unsupported("check", does=Does.HINT)             # checkify: an error effect
# `emit_pipeline` as one primitive (its body a sub-jaxpr): ringc follows a pipeline traced inline.
PRIMITIVES.unsupported("emit_pipeline", "pipeline_body", does=Does.CONTROL | Does.MEMORY)
PRIMITIVES.unsupported("matmul_acc_lhs", "matmul_pop", "matmul_push_rhs", does=Does.MEMORY)  # the MXU's own buffers

ELEMENTWISE = frozenset(name for name, p in PRIMITIVES.items() if p.elementwise)
# Ops of a `lax` reference that keep its values as they are (a dtype, a shape of the same
# elements in the same order, a varying-ness): its meaning is read through them.
KEEPS_VALUES = frozenset({"convert_element_type", "reshape", "squeeze", "expand_dims", "copy", "copy_p", "pvary"})
