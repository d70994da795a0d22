"""Evaluate a Pallas TPU kernel's jaxpr on one device at one grid point, recording events.

Its rules are registered in the one primitive table, `primitives.PRIMITIVES`, keyed by the
jax primitive's name, like Pallas' own Mosaic lowering and TPU interpret mode. Each rule reads the equation's inputs (concrete scalars,
`Ref`s, `SemRef`s, `Data`) and returns its outputs, emitting the verifier's events
(`ringc/verify/events.py`) as it goes:

- `dma_start` -> DmaStart (regions as boxes, the target device, both semaphores);
  `dma_wait` -> SemWait for the bytes of the waited side (a descriptor's `wait()` is
  `wait_send()` then `wait_recv()`, two equations);
- `semaphore_signal` / `semaphore_wait` -> Signal / SemWait, on the barrier semaphore too;
- `get` / `swap` / `addupdate` on VMEM or HBM -> Compute: a load copies the region into a
  *value register* (a buffer private to the device, one per load site), so the read happens
  when the kernel reads, and a store writes what the value is made of (a copy, a sum, a
  product, zero, or opaque data);
- control flow (`cond`, `scan`, `while`, `jit`, `run_scoped`, ...) runs with concrete
  predicates and trip counts: loops are unrolled, the branch taken is the one evaluated.

A primitive that has effects, touches a ref, or holds a sub-jaxpr and has no rule here is
an error naming it and the user's line: skipping a DMA would make a racy kernel look
clean. Effect-free primitives on values are pure (`pure_rule`, from the flags of their
registration): computed with numpy (or JAX itself) when their inputs are concrete, opaque
`Data` when they are tensor data.
"""

from __future__ import annotations

import contextlib
from collections import Counter
import math
import functools
import os
import weakref
import sysconfig
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, NamedTuple

import jax
import numpy as np

from .. import limits
from ..ir import dtypes

from ..errors import ScheduleError
from ..verify.events import BARRIER, Compute, DmaStart, Region, SemWait, Signal
from .primitives import ELEMENTWISE, KEEPS_VALUES, PRIMITIVES, Does, scan_loop, while_loop
from .values import (Buffer, Data, Loc, Ref, SemRef, Shadow, Unknown, Vec, extended, integer_or_bool, is_concrete,
                     vec)

Rule = Callable[["Interpreter", Any, list], list]

_STDLIB = sysconfig.get_path("stdlib")
_HERE = os.path.dirname(os.path.dirname(__file__)) + os.sep


@functools.lru_cache(maxsize=None)
def _jax_src() -> str:
    import jax
    return os.path.join(os.path.dirname(jax.__file__), "_src") + os.sep


def internal_frame(filename: str) -> bool:
    """A frame of JAX's internals, the standard library or ringc: not the user's code."""
    return (filename.startswith(_jax_src()) or filename.startswith(_HERE)
            or filename.startswith(_STDLIB) and "site-packages" not in filename)


@dataclass
class Locating:
    """One check's view of where equations come from: the checked module's path (its frames
    win over helper modules'), and the locations found so far, by equation (a `JaxprEqn`
    hashes by identity; the cache lives as long as the check)."""
    preferred: str | None = None
    found: dict = field(default_factory=dict)


LOCATING: list[Locating] = []  # the checks under way, innermost last (`locating`)


@contextlib.contextmanager
def locating(preferred: str | None = None) -> Iterator[None]:
    """While inside, `user_location` prefers frames of `preferred` (else the enclosing
    check's) and remembers what it found."""
    LOCATING.append(Locating(preferred or (LOCATING[-1].preferred if LOCATING else None)))
    try:
        yield
    finally:
        LOCATING.pop()


def user_location(eqn: Any) -> Loc:
    """Where an equation comes from: the innermost frame of its traceback in the checked
    module (so a helper's DMA points at the kernel line that calls the helper), else the
    innermost frame outside JAX's internals, the standard library and ringc (for JAX's own
    ops, the op's file)."""
    scope = LOCATING[-1] if LOCATING else Locating()
    hit = scope.found.get(eqn)
    if hit is not None:
        return hit
    preferred = scope.preferred
    from jax._src import source_info_util as siu
    tb = eqn.source_info.traceback
    loc = None
    if tb is not None:
        codes, lastis = tb.raw_frames()
        for code, lasti in zip(codes, lastis):
            name = code.co_filename
            if internal_frame(name):
                continue
            f = siu.raw_frame_to_frame(code, lasti)
            here = _loc(f.start_line, name)
            if loc is None:
                loc = here
                loc.via = _callers(codes, lastis, code, os.path.abspath(name))
            if preferred is not None and os.path.abspath(name) == preferred:
                loc = here
                loc.via = _callers(codes, lastis, code, preferred)
                break
    loc = loc or Loc(0, "<unknown>")
    scope.found[eqn] = loc
    return loc


def _callers(codes: list, lastis: list, code: Any, file: str) -> str:
    """When the frame of `code` (an access in the user's file) is a helper of the kernel, the
    chain of its callers in the same file, innermost first: `in _copy(), called from
    kernel() at line 57`; "" when the access is in the function JAX traced itself."""
    from jax._src import source_info_util as siu
    i = codes.index(code)
    chain = []
    for c, lasti in zip(codes[i + 1:], lastis[i + 1:]):
        if os.path.abspath(c.co_filename) != file:
            break
        chain.append(f"{c.co_name}() at line {siu.raw_frame_to_frame(c, lasti).start_line}")
    if not chain:
        return ""
    return f"in {code.co_name}(), called from " + ", from ".join(chain)


def _loc(line: int, name: str) -> Loc:
    rel = os.path.relpath(name)
    return Loc(line, name if rel.startswith("..") else rel)


class KernelError(ScheduleError):
    """Bad or unsupported input found while evaluating a kernel."""


class Interpreter:
    """Evaluates kernel jaxprs for one device; `sink` receives the events. `slot` is the
    rule each primitive's entry gives it (`Primitive.kernel`; the Mosaic GPU interpreter's
    `Primitive.gpu`)."""

    slot = "kernel"

    def __init__(self, sink: "Sink", device: int, coords: dict[str, int], axis_sizes: dict[str, int]):
        self.sink = sink
        self.device = device
        self.coords = coords
        self.axis_sizes = axis_sizes
        self.own_vecs: list = []  # `axis_index` results as read, evaluating every device at once
        self.point: tuple[int, ...] = ()
        self.grid: tuple[int, ...] = ()
        # The grid dims the kernel's own `program_id(k)` counts (a vmapped pallas_call's batch
        # dims are not among them), and the names of those dims (`grid=(("i", 4), ..)`).
        self.user_axes: tuple[int, ...] | None = None
        self.grid_names: tuple = ()
        self.barrier: SemRef | None = None
        self.eqn: Any = None
        self.enclosing: list[Any] = []  # the equations whose sub-jaxprs are being evaluated
        self.lanes: Lanes | None = None  # set when every device is evaluated at once (as device 0)
        # Tensor data known to hold -inf at some positions (`jnp.where(mask, -inf, x)`), by id with
        # the value kept (so an id is never another value's): where a later argmax never lands.
        self.masked: dict[int, tuple[Data, np.ndarray]] = {}
        self.loops: tuple[tuple[Loc, int, bool], ...] = ()  # the loops being run, their iterations (`Event.loops`)
        # The jaxprs being run, each with the equation that called it (`only_use`: where a value came from)
        self.frames: list[tuple[Any, Any]] = []

    # -- errors and locations --------------------------------------------------
    def where(self, eqn: Any = None) -> Loc:
        """The user's line of the equation; for equations traced with no user frame (the
        insides of `emit_pipeline`), the line of the innermost enclosing one that has it."""
        loc = user_location(eqn if eqn is not None else self.eqn)
        if not int(loc):
            for outer in reversed(self.enclosing):
                loc = user_location(outer)
                if int(loc):
                    break
        return loc

    def fail(self, message: str, fix: str, eqn: Any = None) -> KernelError:
        loc = self.where(eqn)
        return KernelError(f"{message} (device {self.device}, grid point {self.point})", file=loc.file,
                           line=int(loc) or None, fix=fix)

    def scalar(self, v: Any, what: str, span: tuple[int, int] | None = None) -> int:
        """A concrete integer, or an error saying why it must be one. A value computed from
        tensor data whose own range is not known is runtime data: with `span`, the range
        its use allows ([lo, hi): an index into its dimension, a branch), it is sampled
        there (`sample_value`)."""
        if type(v) is int:
            return v
        if type(v) is Vec:
            raise Diverge(f"{what} differs between devices")
        if isinstance(v, (Data, Unknown)):
            from_data = isinstance(v, Data) or v.data
            if from_data and span is not None and (isinstance(v, Unknown) or math.prod(v.shape) == 1):
                cache = self.__dict__.setdefault("_sampled_at_use", {})
                hit = cache.get(id(v))
                if hit is not None and hit[0] is v:  # the same value used again: the same sample
                    return hit[1]
                why = v.why if isinstance(v, Unknown) else "it is read from tensor data"
                value = int(sample_value(self, span[0], span[1], f"{what} ({why})", own=False))
                cache[id(v)] = (v, value)
                return value
            why = v.why if isinstance(v, Unknown) else "it is computed from tensor data"
            raise self.fail(f"{what} is not known before the kernel runs: {why}",
                            "ringc follows control flow, indices and targets computed from grid indices, "
                            "device ids, loop counters, SMEM and scalar-prefetch values; a value from "
                            "tensor data is sampled where it indexes or branches, not where it sets "
                            "a size, a semaphore amount or a DMA's shape")
        a = np.asarray(v)
        if a.size != 1:
            raise self.fail(f"{what} is an array of shape {a.shape}, not a scalar", "index with scalars")
        return int(a.reshape(()))

    def lane_int(self, v: Any, what: str, span: tuple[int, int] | None = None) -> Any:
        """`scalar`, except that every device's own integer is allowed (as an int64 array)
        when every device is evaluated at once: an index or a device id."""
        if type(v) is Vec:
            if not np.issubdtype(v.a.dtype, np.integer) or v.a.ndim != 1:
                raise Diverge(f"{what} is not one integer per device")
            return v.a.astype(np.int64)
        return self.scalar(v, what, span)

    def region(self, ref: Ref, device: int | None = None) -> Any:
        """The ref's region (device 0's when every device is evaluated at once, after
        `Lanes.place` proves every device's box is it moved by a fixed step)."""
        if self.lanes is not None:
            self.lanes.place(ref)
        return ref.region(device)

    def mesh_device_id(self, dev: Any, kind: str) -> Any:
        """A remote `device_id` of type `kind` as this kernel names a target with it (a
        device's kernel: as it is; `cores.CoreInterpreter`: a dict of coordinates), or
        refused."""
        return dev

    def owner(self, ref: Ref, device: int) -> int:
        """Whose copy of `ref`'s buffer a process at `device` reaches: its own (a device's
        memory is its own; `cores.CoreInterpreter`: HBM is the chip's)."""
        return device

    def target(self, t: Any) -> int:
        """A remote target (device 0's when every device is evaluated at once, after
        `Lanes.target` proves device d targets d + t)."""
        return self.lanes.target(t) if self.lanes is not None else t

    def core_target(self, target: int, core: Any) -> int:
        """The process of TensorCore `core` of `target`'s chip (`pl.semaphore_signal(...,
        core_index=)`): only a kernel over the TensorCore mesh has one per core
        (`cores.CoreInterpreter`)."""
        raise self.fail("a signal to a TensorCore (`core_index`) outside a kernel over the TensorCore mesh",
                        "signal the core from a pl.kernel or pl.core_map over pltpu.create_tensorcore_mesh, "
                        "or drop core_index")

    # -- evaluation ------------------------------------------------------------
    def run(self, jaxpr: Any, consts: list, args: list) -> list:
        outer_used, outer_eqn = getattr(self, "used", Counter()), self.eqn
        self.used = _uses(jaxpr)
        self.frames.append((jaxpr, outer_eqn))
        if outer_eqn is not None:
            self.enclosing.append(outer_eqn)
        try:
            return self._run(jaxpr, consts, args)
        finally:
            self.used = outer_used
            self.frames.pop()
            if outer_eqn is not None:
                self.enclosing.pop()
            self.eqn = outer_eqn

    def _run(self, jaxpr: Any, consts: list, args: list) -> list:
        env: dict[Any, Any] = dict(zip(jaxpr.constvars, consts))
        env.update(zip(jaxpr.invars, args))
        steps, outs_plan = self._plan(jaxpr)
        for eqn, fn, ins, outvars in steps:
            self.eqn = eqn
            outs = fn(self, eqn, [lit if a is _LIT else env[a] for a, lit in ins])
            self.eqn = eqn
            for v, x in zip(outvars, outs):
                env[v] = x
        return [lit if a is _LIT else env[a] for a, lit in outs_plan]

    def _plan(self, jaxpr: Any) -> tuple[list, list]:
        """Per jaxpr, once: each equation with its rule, its inputs as (var, None) or
        (None, literal value), and its outputs."""
        plans = _PLANS[self.slot]
        hit = plans.get(jaxpr)
        if hit is not None:
            return hit

        def atom(a: Any) -> tuple:
            return (_LIT, _py(a.val)) if type(a).__name__ == "Literal" else (a, None)

        steps = []
        for eqn in jaxpr.eqns:
            self.eqn = eqn
            entry = PRIMITIVES.get(eqn.primitive.name)
            rule = getattr(entry, self.slot) if entry is not None else None
            fn = rule if rule is not None else self.generic(eqn, entry)
            steps.append((eqn, fn, [atom(a) for a in eqn.invars], eqn.outvars))
        plan = (steps, [atom(a) for a in jaxpr.outvars])
        plans[jaxpr] = plan
        return plan

    def run_closed(self, closed: Any, args: list) -> list:
        return self.run(closed.jaxpr, [_py(c) for c in closed.consts], args)

    def truth(self, c: Any, eqn: Any) -> bool:
        """A loop condition (`primitives.while_loop`)."""
        return bool(self.scalar(c, "a loop condition", (0, 2)))

    def too_many(self, eqn: Any, most: int) -> Exception:
        return self.fail(f"a while loop ran {most:,} iterations, the limit `loop_iterations`",
                         f"bound the loop, or raise the limit with {limits.LIMITS['loop_iterations'].how_to_raise}")

    def generic(self, eqn: Any, entry: Any = None) -> Rule:
        """A primitive with no kernel rule (registered pure, or not registered): pure when
        it has no effects, no refs and no sub-jaxprs, else an error naming it."""
        from jax._src import core
        touches_refs = any(isinstance(getattr(v, "aval", None), _ref_types()) for v in (*eqn.invars, *eqn.outvars))
        has_sub = any(isinstance(p, (core.Jaxpr, core.ClosedJaxpr)) or
                      (isinstance(p, (tuple, list)) and any(isinstance(q, (core.Jaxpr, core.ClosedJaxpr)) for q in p))
                      for p in eqn.params.values())
        refused = entry is not None and Does.UNSUPPORTED in entry.does
        if refused or eqn.effects or touches_refs or has_sub:
            raise self.fail(f"ringc does not know the primitive `{eqn.primitive.name}`",
                            "see docs/pallas-import.md for the supported primitives; a primitive with effects "
                            "cannot be skipped (a skipped DMA would make a racy kernel look clean)", eqn)
        return pure_rule

    def remote(self, ref: Any, peer: Any) -> Any:
        """`plgpu.remote_ref` (a Mosaic GPU kernel's, `mgpu.GpuInterpreter.remote`)."""
        raise self.fail("plgpu.remote_ref in a Pallas TPU kernel", "address a peer with a remote DMA (device_id=...)")

    # -- events ----------------------------------------------------------------
    def emit(self, action: Any, target: int | None = None) -> None:
        self.sink.emit(self.device, self.point, self.where(), action, target, self.loops)

    @contextlib.contextmanager
    def iteration(self, eqn: Any, i: int) -> Iterator[None]:
        saved = self.loops
        # a loop with no line of its own (inside `emit_pipeline`) is named by the call around it
        self.loops = (*saved, (self.where(eqn), i, not int(user_location(eqn))))
        try:
            yield
        finally:
            self.loops = saved


# Per jaxpr, while it lives (a `Jaxpr` hashes by identity): how many times it reads each
# variable, and its equations' rules and inputs (`Interpreter._plan`).
_USES: "weakref.WeakKeyDictionary[Any, Counter]" = weakref.WeakKeyDictionary()
_PLANS: "dict[str, weakref.WeakKeyDictionary[Any, tuple]]" = {
    "kernel": weakref.WeakKeyDictionary(), "gpu": weakref.WeakKeyDictionary()}
_LIT = object()  # marks a literal input in a plan


def _uses(jaxpr: Any) -> Counter:
    """How many times a jaxpr reads each variable (its equations' inputs and its outputs): a
    swap's old value is loaded only when read (`in`), a where's case dropped only where this
    is its one read (`only_use`)."""
    hit = _USES.get(jaxpr)
    if hit is None:
        hit = Counter(v for eqn in jaxpr.eqns for v in eqn.invars if type(v).__name__ != "Literal")
        hit.update(v for v in jaxpr.outvars if type(v).__name__ != "Literal")
        _USES[jaxpr] = hit
    return hit


def only_use(it: Any, var: Any) -> bool:
    """Whether the equation running now is the only reader of `var`'s value: the one use in
    its jaxpr, and, where `var` is an input of a called jaxpr (`jnp.where` is a jitted call),
    the one use of the caller's variable too, up to where it was made."""
    frames = it.frames
    for k in range(len(frames) - 1, -1, -1):
        jaxpr, caller = frames[k]
        if _uses(jaxpr)[var] != 1:
            return False
        if var not in jaxpr.invars:
            return True    # made in this jaxpr
        inner = caller.params.get("jaxpr") if caller is not None and k > 0 else None
        inner = getattr(inner, "jaxpr", inner)
        if inner is not jaxpr or len(caller.invars) != len(jaxpr.invars):
            return False   # a loop's or a kernel's input: read again, or from outside
        var = caller.invars[jaxpr.invars.index(var)]
    return False


def _ref_types() -> tuple:
    from jax._src.state.types import AbstractRef
    return (AbstractRef,)


def _py(v: Any) -> Any:
    """Concrete values as Python scalars (0-d) or numpy arrays."""
    if isinstance(v, (int, float, bool)):
        return v
    if isinstance(v, (np.ndarray, np.generic)):
        a = np.asarray(v)
        return a.item() if a.ndim == 0 else a
    try:
        a = np.asarray(v)
    except Exception:
        return v
    if a.dtype == object:
        return v
    return a.item() if a.ndim == 0 else a


# -- pure values ------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _out_kind(dtype: Any) -> Any:
    """bool, 2**(bits-1) for an integer output dtype, or None (floats: numpy computes them;
    an extended dtype, a PRNG key, is no number)."""
    if not integer_or_bool(dtype):
        return None
    dt = np.dtype(dtype)
    return bool if dt == np.bool_ else (1 << (np.iinfo(dt).bits - 1)) if np.issubdtype(dt, np.integer) else None


def _concrete(eqn: Any, invals: list, entry: Any) -> list:
    """A pure primitive on concrete inputs: the table's numpy rule, else JAX's own evaluation
    (raising what they raise); an output of an extended dtype (a PRNG key) stays JAX's."""
    args = [v if (d := getattr(var.aval, "dtype", None)) is None or extended(d) or np.dtype(d) == np.dtype("O")
            else np.asarray(v, dtype=d) for v, var in zip(invals, eqn.invars)]
    if entry is not None and entry.numpy is not None:
        with np.errstate(all="ignore"):  # XLA's integer division by zero is defined; numpy's warns
            r = entry.numpy(eqn.params, *args)
    else:
        with jax.ensure_compile_time_eval():
            r = eqn.primitive.bind(*args, **eqn.params)
    r = r if eqn.primitive.multiple_results else [r]
    return [x if extended(o.aval.dtype) else _py(np.asarray(x).astype(o.aval.dtype)) for x, o in zip(r, eqn.outvars)]


def pure_rule(it: Interpreter, eqn: Any, invals: list) -> list:
    """Effect-free: numpy/JAX on concrete inputs, opaque data otherwise."""
    name = eqn.primitive.name
    outs = eqn.outvars
    if it.lanes is not None and any(type(v) is Vec for v in invals):
        return it.lanes.pure(it, eqn, invals)
    entry = PRIMITIVES.get(name)
    fast = entry.scalar if entry is not None else None
    if fast is not None and all(type(v) is int or type(v) is bool or type(v) is FromMemory or type(v) is Sampled
                                for v in invals):
        r = fast(*invals)
        kind = _out_kind(outs[0].aval.dtype)
        if r is None:
            pass  # division by zero: numpy below says what XLA would
        elif kind is bool:
            return [bool(r)]
        elif kind is not None and -kind <= r < kind:
            src = next((v for v in invals if type(v) is Sampled), None)
            return [Sampled(int(r), src.source) if src is not None else int(r)]
    if all(is_concrete(v) for v in invals):
        try:
            return _concrete(eqn, invals, entry)
        except KernelError:
            raise
        except NotImplementedError:
            # A Mosaic-only primitive JAX cannot evaluate off TPU (`pltpu.bitcast`, `pack_elementwise`)
            # on values ringc knows: its result is not followed, as on tensor data.
            why = f"`{name}` at line {int(it.where())}, which JAX cannot evaluate on the CPU"
            return [Unknown(why, data=True) if not getattr(o.aval, "shape", ()) else
                    Data(tuple(o.aval.shape), ("opaque", why)) for o in outs]
        except Exception as e:  # pragma: no cover - a primitive JAX itself cannot evaluate here
            raise it.fail(f"cannot evaluate `{name}` on concrete values: {type(e).__name__}: {e}",
                          "report it: ringc evaluates scalar arithmetic with numpy and JAX") from None
    data = [v for v in invals if isinstance(v, Data)]
    shapes = [tuple(getattr(o.aval, "shape", ())) for o in outs]
    sampled = _sampled_from_data(it, eqn, name, invals, data, shapes)
    if sampled is not None:
        return sampled
    if any(isinstance(v, Unknown) for v in invals):
        u = next(v for v in invals if isinstance(v, Unknown))
        if u.data:  # computed from a runtime value: not sampled apart from it
            u = Unknown(f"{u.why}, and `{name}` at line {int(it.where())} computes from it")
        return [u for _ in outs]
    if name == "select_n" and len(outs) == 1 and is_concrete(invals[0]):
        # `jnp.where(j != 0, acc_ref[...], 0)` at a grid point where the condition is known and
        # the same everywhere: the chosen case itself (the other one's value goes nowhere)
        which = np.asarray(invals[0])
        k = int(which.flat[0]) if which.size and (which == which.flat[0]).all() else None
        chosen = invals[1 + k] if k is not None else None
        if isinstance(chosen, Data) and chosen.shape == shapes[0]:
            for j, (var, x) in enumerate(zip(eqn.invars[1:], invals[1:])):
                # a case loaded only for this where, not taken: the load's value goes nowhere
                if j != k and isinstance(x, Data) and x.how[0] == "load" and x.how[1] is not None and only_use(it, var):
                    it.sink.discard_load(it.device, x.how[1].buffer)
            return [chosen]
    tensors = [v for v in data if v.how[0] != "const"]  # a broadcast constant (`jnp.full`) is a constant
    if len(tensors) == 1 and len(outs) == 1 and tensors[0].shape == shapes[0] and name in ELEMENTWISE:
        followed = _elementwise(eqn, [v.how[1] if isinstance(v, Data) and v.how[0] == "const" else v
                                      for v in invals], tensors[0])
        if followed is not None:
            return [followed]
    if name == "add" and len(data) == 2 and data[0].shape == data[1].shape == shapes[0]:
        return [Data(shapes[0], ("add", data[0], data[1]))]
    if name == "sub" and len(data) == 2 and data[0].shape == data[1].shape == shapes[0]:
        return [Data(shapes[0], ("add", data[0], apply_fn(data[1], _scale(-1.0))))]
    if name == "convert_element_type" and data and data[0].shape == shapes[0]:
        return [Data(shapes[0], ("cast", data[0]))]
    if name == "transpose" and data and len(data[0].shape) == 2 and tuple(eqn.params["permutation"]) == (1, 0):
        return [Data(shapes[0], ("transpose", data[0]))]
    if name == "dot_general" and len(data) == 2:
        (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
        if len(data[0].shape) == len(data[1].shape) == 2 and len(lc) == len(rc) == 1 and not lb:
            # One contracted dim each, no batch dims: `x @ y`, `x @ y.T` (contract (1, 1)), ...
            # A 2-D `transpose` feeding the dot is folded into which dim it contracts.
            operands, contract = [], []
            for var, x, c in zip(eqn.invars, data, (lc[0], rc[0])):
                if x.how[0] == "transpose":
                    x, c = x.how[1], 1 - c
                operands.append(_stored_product(it, var, x))
                contract.append(c)
            return [Data(shapes[0], ("dot", *operands, tuple(contract)))]
    if all(not s and integer_or_bool(o.aval.dtype)
           for s, o in zip(shapes, outs)):  # a scalar computed from data: known only at run time
        source = _tensor_source(eqn, invals)
        return [Unknown(f"`{name}` at line {int(it.where())} computes it from "
                        + ("tensor data" if source else "a value read from memory at run time"), data=source)
                for _ in outs]
    line = int(it.where())
    what = (f"`{name}` of {len(data)} tensors" if len(data) > 1 and name in ELEMENTWISE else f"`{name}`")
    outs_data = [Data(s, ("opaque", f"{what} at line {line}")) for s in shapes]
    if name == "select_n":
        _note_masked(it, invals, outs_data[0])
    elif name == "slice" and len(data) == 1 and it.masked:  # `x[:, :num_experts]`
        hit = it.masked.get(id(data[0]))
        if hit is not None and hit[0] is data[0]:
            sl = tuple(slice(a, b, st) for a, b, st in zip(eqn.params["start_indices"], eqn.params["limit_indices"],
                                                            eqn.params["strides"] or (1,) * len(shapes[0])))
            it.masked[id(outs_data[0])] = (outs_data[0], hit[1][sl])
    return outs_data


# -- values from tensor data ------------------------------------------------------
# A value computed from tensor data (the router's argmax, a comparison of a loaded value, a
# count read back from SMEM) exists only at run time. Where it steers the kernel (an index,
# a branch, a target), ringc samples it, reproducibly: at its source when its range is
# known there (argmax/argmin/top_k indices: [0, K); a boolean: false or true), so every use
# sees the same value and an index out of the ref is an `out_of_bounds` finding; else where
# it is used, in the range that use allows (it can then make no `out_of_bounds` finding).
# The verdict lists every sampled source (docs/pallas-import.md "Values from tensor data").
SAMPLE_SEED = 0


def sample_value(it: Interpreter, lo: int, hi: int, what: str, own: bool, shape: tuple = (),
                 shown: str | None = None) -> Any:
    """Draw a value (or an array of `shape`) in [lo, hi), the same on every run: the draw is
    keyed by the device, the invocation, the grid point, the line and how many draws that
    line made there. Noted on the sink for the verdict."""
    if it.lanes is not None:
        raise Diverge("a value sampled from tensor data")
    line = int(it.where())
    counts = it.__dict__.setdefault("_draws", {})
    key = (it.device, getattr(it.sink, "invocation", 0), it.point, line)
    k = counts.get(key, 0)
    counts[key] = k + 1
    seed = zlib.crc32(repr((SAMPLE_SEED, *key, k)).encode())
    rng = np.random.default_rng(seed)
    rng_text = shown or ("false or true" if (lo, hi) == (0, 2) else f"[{lo}, {hi})")
    note(it, f"values from tensor data: {what} at line {line} is runtime data; ringc sampled it "
             + (f"in its range {rng_text}" if own else
                f"in the range its use allows, {rng_text} (its own range is not known, so it makes no "
                f"out_of_bounds finding)")
             + f", reproducibly (seed {SAMPLE_SEED}); the verdict covers the sampled values, not every value")
    if shape:
        return rng.integers(lo, hi, size=shape)
    return Sampled(int(rng.integers(lo, hi)), (what, line))


def _note_masked(it: Interpreter, invals: list, out: Data) -> None:
    """`jnp.where(mask, -inf, x)` with a concrete mask (a top-k loop masking the experts it
    already chose): remember where the result is -inf, so that an `argmax` of it samples
    only among the other positions, as the run's argmax does (`Interpreter.masked`)."""
    pred, cases = invals[0], invals[1:]
    if len(cases) != 2 or not is_concrete(pred) or np.shape(pred) != out.shape:
        return
    masked = it.masked
    lows = []
    for c in cases:
        if isinstance(c, Data) and c.how[0] == "const":  # a broadcast constant (`jnp.full`, `-jnp.inf`)
            c = np.asarray(c.how[1])
        if isinstance(c, Data):
            hit = masked.get(id(c))
            lows.append(hit[1] if hit is not None and hit[0] is c else np.zeros(out.shape, bool))
        elif is_concrete(c) and np.issubdtype(np.asarray(c).dtype, np.floating):
            lows.append(np.broadcast_to(np.isneginf(np.asarray(c)), out.shape))
        else:
            return
    which = np.asarray(pred).astype(np.int64)
    low = np.where(which == 1, lows[1], lows[0])
    if low.any():
        masked[id(out)] = (out, low)


def _sampled_from_data(it: Interpreter, eqn: Any, name: str, invals: list, data: list, shapes: list) -> list | None:
    """The outputs of a primitive on tensor data whose range is known, sampled at the source
    (`sample_value`); None when this primitive is not such a source."""
    outs = eqn.outvars
    if name in ("argmax", "argmin") and len(data) == 1:
        axis = eqn.params["axes"][0]
        k = data[0].shape[axis]
        hit = it.masked.get(id(data[0]))
        if name == "argmax" and hit is not None and hit[0] is data[0] and shapes[0]:
            # never a position masked with -inf (unless the whole row is): uniform among the others
            allowed = ~np.moveaxis(hit[1], axis, -1)
            allowed[~allowed.any(-1)] = True
            keys = sample_value(it, 0, 1 << 30, "`argmax`", own=True, shape=allowed.shape,
                                shown=f"[0, {k}), never a position the kernel masked with -inf before it")
            v = np.where(allowed, keys, -1).argmax(-1)
            return [np.asarray(v, dtype=outs[0].aval.dtype).reshape(shapes[0])]
        v = sample_value(it, 0, k, f"`{name}`", own=True, shape=shapes[0])
        return [v if not shapes[0] else np.asarray(v, dtype=outs[0].aval.dtype)]
    if name == "top_k" and len(data) == 1:
        k_in, k = data[0].shape[-1], eqn.params["k"]
        lead = shapes[1][:-1]
        rows = [sample_value(it, 0, 1 << 30, "`top_k`", own=True, shape=(k_in,)) for _ in range(math.prod(lead))]
        idx = np.asarray([np.argsort(r, kind="stable")[:k] for r in rows], dtype=outs[1].aval.dtype)
        return [Data(shapes[0], ("opaque", f"`top_k` at line {int(it.where())}")), idx.reshape(shapes[1])]
    if (data and not any(isinstance(v, Unknown) for v in invals) and _tensor_source(eqn, invals)
            and all(not s and o.aval.dtype == np.bool_ for s, o in zip(shapes, outs))):
        return [bool(sample_value(it, 0, 2, f"`{name}`", own=True)) for _ in outs]
    return None


def _tensor_source(eqn: Any, invals: list) -> bool:
    """Whether a primitive's tensor-data operands are tensors or floats: its scalar result is
    then a new runtime value (a count, a flag) that may be sampled. A scalar integer read
    from memory at run time (an expert id read back from SMEM) is no such source: a value
    computed from it is not sampled apart from it (the two samples would disagree)."""
    for v, var in zip(invals, eqn.invars):
        if isinstance(v, Data) and not v.shape and jax.dtypes.issubdtype(var.aval.dtype, np.integer):
            return False
    return True


# Elementwise primitives (registered `elementwise`, `primitives.ELEMENTWISE`): applied to one
# tensor (the other operands constants), followed as a pointwise function (`_elementwise`).


KNOWN = "="  # an opaque Compute's `fn` that starts so holds a known constant: compared, not a note


def _scale(c: float) -> str:
    return f"{float(c)!r}*"


def apply_fn(x: Data, f: str) -> Data:
    """`x` with the pointwise function `f` applied (a name ending in "*" scales: linear)."""
    if f.endswith("*"):
        c = float(f[:-1])
        if c == 1.0:
            return x
        if x.how[0] == "zero":
            return x
        if x.how[0] == "add":  # linear: c * (a + b) = c * a + c * b
            return Data(x.shape, ("add", apply_fn(x.how[1], f), apply_fn(x.how[2], f)))
        if x.how[0] == "fn" and x.how[1][-1].endswith("*"):
            return apply_fn(Data(x.shape, ("fn", x.how[1][:-1], x.how[2])) if len(x.how[1]) > 1 else x.how[2],
                            _scale(c * float(x.how[1][-1][:-1])))
    if x.how[0] == "fn":
        return Data(x.shape, ("fn", x.how[1] + (f,), x.how[2]))
    return Data(x.shape, ("fn", (f,), x))


def _constant_of(v: Any) -> Any:
    """A concrete operand as one number when every element is the same, else None."""
    a = np.asarray(v)
    if a.size == 0 or not (a == a.flat[0]).all():
        return None
    x = a.flat[0].item()
    return x


def _elementwise(eqn: Any, invals: list, x: Data) -> Data | None:
    """An elementwise primitive on one tensor `x` and constants, or None (not followed)."""
    name = eqn.primitive.name
    consts = [None if isinstance(v, Data) else _constant_of(v) for v in invals]
    if any(c is None for c, v in zip(consts, invals) if not isinstance(v, Data)):
        return None  # a constant array that differs between elements: not one pointwise function
    pos = next(i for i, v in enumerate(invals) if isinstance(v, Data))
    other = consts[1 - pos] if len(invals) == 2 else None
    if name == "neg":
        return apply_fn(x, _scale(-1.0))
    if name == "mul":
        return apply_fn(x, _scale(other))
    if name == "div" and pos == 0 and other != 0 and jax.dtypes.issubdtype(eqn.outvars[0].aval.dtype, np.inexact):
        return apply_fn(x, _scale(1.0 / other))  # (an integer division rounds: an uninterpreted function)
    if name == "add" and other == 0:
        return x
    if name == "sub" and other == 0:
        return x if pos == 0 else apply_fn(x, _scale(-1.0))
    if name == "sub" and pos == 1:  # c - x = add(c)(-x)
        return apply_fn(apply_fn(x, _scale(-1.0)), f"add({other!r})")
    if name == "sub":
        return apply_fn(x, f"add({-other!r})")
    if name == "add":
        return apply_fn(x, f"add({other!r})")
    if name == "integer_pow" and eqn.params.get("y") == 1:
        return x
    params = [f"{k}={v}" for k, v in sorted(eqn.params.items()) if isinstance(v, (int, float, str, bool))]
    args = ["_" if isinstance(v, Data) else repr(c) for v, c in zip(invals, consts)]
    spelled = ", ".join(args + params) if (len(args) > 1 or params) else ""
    return apply_fn(x, f"{name}[{spelled}]" if spelled else name)


_UNKNOWN = object()


def _calls(e: Any) -> bool:
    """An eqn that calls a nested jaxpr (`shard_map`, `pjit`): `walk_eqns` gives its eqns next."""
    from jax._src import core
    return any(isinstance(sub, (core.ClosedJaxpr, core.Jaxpr))
               for p in e.params.values() for sub in (p if isinstance(p, (tuple, list)) else [p]))


def reference_pointwise(eqns: list, collective: Any) -> tuple[str, ...] | None:
    """The elementwise functions a `lax` reference applies around its one collective
    `collective` (`jnp.tanh(lax.ppermute(x))`, `lax.psum(2 * x)`), named as the kernel
    interpreter names them (`_elementwise`), in program order: () when there are none. Data
    movement (ppermute, all_gather, all_to_all) commutes with every elementwise function; a
    reduction only with scaling after it. None (a meaning ringc cannot state) also where the
    reference does more than that: indexes or slices the data before or after the
    collective (`all_gather(x)[:, axis_index]` is an all-to-all), or combines it with
    another array (`psum(x * mask)`)."""
    import jax
    fns: list[str] = []
    moves = collective.primitive.name in ("ppermute", "all_gather", "all_to_all")
    after = False
    known: dict = {}  # constants (a scalar `pvary`d into the shard_map, as `2.0 * x` traces)

    def value(v: Any) -> Any:
        return v.val if type(v).__name__ == "Literal" else known.get(v, _UNKNOWN)

    for e in eqns:
        if e is collective:
            after = True
            continue
        name = e.primitive.name
        vals = [value(v) for v in e.invars]
        if vals and all(v is not _UNKNOWN for v in vals) and not e.effects:
            try:
                if name == "pvary":
                    outs = vals
                else:
                    with jax.ensure_compile_time_eval():
                        outs = e.primitive.bind(*vals, **e.params)
                    outs = outs if e.primitive.multiple_results else [outs]
                known.update(zip(e.outvars, outs))
            except Exception:  # noqa: BLE001 - not a constant after all
                pass
            continue
        if name not in ELEMENTWISE or len(e.outvars) != 1:
            if name in KEEPS_VALUES or not e.invars or _calls(e):
                continue   # layout, a nested call (its eqns come next), or made from nothing (`axis_index`)
            return None    # `all_gather(x)[:, i]`, `psum(x[:4])`: not the collective's meaning
        tensors = [v for v, c in zip(e.invars, vals) if c is _UNKNOWN]
        shape = tuple(getattr(e.outvars[0].aval, "shape", ()))
        if not shape:
            continue   # a scalar's arithmetic (an index, a count), not the data's
        if len(tensors) != 1 or tuple(getattr(tensors[0].aval, "shape", ())) != shape:
            return None    # `psum(x * mask)`, `psum(x) + x`: more than one function of the data
        x = Data(shape, ("load", None))
        invals = [x if c is _UNKNOWN else c for c in vals]
        y = _elementwise(e, invals, x)
        if y is None:
            return None
        new = y.how[1] if y.how[0] == "fn" else ()
        if after and not moves and any(not f.endswith("*") for f in new):
            return None  # f(psum(x)) is no sum of f's
        fns += new
    return tuple(fns)


def _stored_product(it: "Interpreter", var: Any, x: Data) -> Data:
    """A dot operand that is itself a dot's value, never stored by the kernel (attention's
    `jnp.dot(lax.dot_general(q, k, ...), v)`: the scores stay in vregs): the model stores it
    first in a value register of its own (one per operand variable, private to the device),
    with the inner matmul's Compute, and the outer dot reads that register. So the outer
    product's left factor is the inner product, the chained product term of the meaning
    check (`verify/semantics.py`), and the inner dot's reads happen where Mosaic does them.
    Any other operand is returned as it is."""
    inner = x
    while inner.how[0] == "cast":
        inner = inner.how[1]
    if inner.how[0] != "dot":
        return x
    reg = it.sink.register(var, it.where(), x.shape, var.aval.dtype)
    dst = Ref.whole(reg, it.device).region()
    for action in store_actions(dst, x):
        it.emit(action)
    return Data(x.shape, ("load", dst))


# -- grid and devices ---------------------------------------------------------------
@PRIMITIVES.kernel("program_id", does=Does.PLACE, doc="the grid index of the point being evaluated")
def _program_id(it: Interpreter, eqn: Any, invals: list) -> list:
    return [it.point[_user_axis(it, eqn.params["axis"])]]


@PRIMITIVES.kernel("num_programs", does=Does.PLACE, doc="the grid size")
def _num_programs(it: Interpreter, eqn: Any, invals: list) -> list:
    return [it.grid[_user_axis(it, eqn.params["axis"])]]


def _user_axis(it: Interpreter, axis: int) -> int:
    """The grid dim of the kernel's axis `axis`: as Mosaic lowers `program_id`, the dims a
    vmap of the pallas_call added (`GridMapping.vmapped_dims`) are not counted."""
    return it.user_axes[axis] if it.user_axes is not None else axis


@PRIMITIVES.kernel("axis_index", does=Does.PLACE, doc="this device's coordinate along a mesh axis (or a tuple of axes, row-major); of a named grid dim, its grid index")
def _axis_index(it: Interpreter, eqn: Any, invals: list) -> list:
    names = eqn.params["axis_name"]
    names = names if isinstance(names, tuple) else (names,)
    if len(names) == 1 and names[0] in it.grid_names and names[0] not in it.coords:
        # A named grid dim (`grid=(("i", 4), ..)`): its index, as Mosaic lowers it.
        return [it.point[_user_axis(it, it.grid_names.index(names[0]))]]
    idx = 0
    for a in names:
        if a not in it.coords:
            raise it.fail(f"axis_index of `{a}`, which is not a mesh axis ({', '.join(it.coords)})",
                          "use the mesh's axis names")
        c = it.coords[a]
        idx = idx * it.axis_sizes[a] + (c.a if type(c) is Vec else c)
    if isinstance(idx, np.ndarray):  # every device at once: remember this value as the own index
        own = vec(np.asarray(idx, np.int32))
        it.own_vecs.append(own)
        return [own]
    return [OwnIndex(idx)]


class OwnIndex(int):
    """`lax.axis_index` as read: a DMA whose device id is made of these alone targets its
    own device on purpose (`device_id=my_id`), an explicit self-copy (no `self_target`
    warning). Arithmetic on it gives a plain int, so a computed target stays implicit.
    (Evaluating every device at once, the index is a `Vec`: the interpreter keeps those
    objects in `own_vecs`, and arithmetic on them makes new ones.)"""


@PRIMITIVES.kernel("psum", does=Does.COLLECTIVE, doc="only as `lax.psum(1, axis)` (the axis size) on concrete values")
def _psum(it: Interpreter, eqn: Any, invals: list) -> list:
    names = eqn.params["axes"]
    size = math.prod(it.axis_sizes[a] for a in names if isinstance(a, str))
    if not all(is_concrete(v) or type(v) is Vec for v in invals):
        raise it.fail("a collective (`psum`) on tensor data inside a kernel", "collectives run outside pallas_call")
    return [Vec(v.a * size) if type(v) is Vec else _py(np.asarray(v) * size) for v in invals]


class BadTarget(int):
    """A target device that does not exist (negative, as `bad_target` findings expect), with
    the mesh coordinates the code asked for (`shown`), which the finding names."""

    def __new__(cls, value: int, shown: str) -> "BadTarget":
        out = super().__new__(cls, value)
        out.shown = shown
        return out


def device_of(it: Interpreter, dev: Any, id_type: Any) -> int:
    """A DMA's or signal's target as a logical device index (row-major over the mesh; in a
    kernel over the TensorCores, `cores.CoreInterpreter`, over the mesh and the core axis,
    which `Interpreter.mesh_device_id` has the id name)."""
    kind = getattr(id_type, "name", str(id_type))
    axes = list(it.axis_sizes)
    dev = it.mesh_device_id(dev, kind)
    if kind == "MESH":
        if isinstance(dev, dict):
            coords = {a: c.a if type(c) is Vec else c for a, c in it.coords.items()}
            for k, v in dev.items():
                ks = k if isinstance(k, tuple) else (k,)
                val = it.lane_int(v, "the target device id", (0, math.prod(it.axis_sizes[a] for a in ks)))
                for a in reversed(ks):  # a tuple of axes: row-major over them
                    coords[a] = val % it.axis_sizes[a]
                    val //= it.axis_sizes[a]
        else:
            parts = dev if isinstance(dev, (tuple, list)) else (dev,)
            if len(parts) != len(axes):
                raise it.fail(f"a MESH device id with {len(parts)} coordinates on a mesh of {len(axes)} axes "
                              f"({', '.join(axes)})", "give one coordinate per mesh axis, or use "
                              "DeviceIdType.LOGICAL")
            coords = {a: it.lane_int(p, "the target device id", (0, it.axis_sizes[a])) for a, p in zip(axes, parts)}
        out = 0
        for a in axes:
            c = coords[a]
            if isinstance(c, np.ndarray):
                if ((c < 0) | (c >= it.axis_sizes[a])).any():
                    raise Diverge("a target that does not exist on some device")
            elif not 0 <= c < it.axis_sizes[a]:
                # a device that does not exist: a `bad_target` finding, which names the coordinate asked
                return BadTarget(-1 - abs(c), ", ".join(f"{b}={coords[b]}" for b in axes))
            out = out * it.axis_sizes[a] + c
        return out
    if isinstance(dev, (tuple, list)):
        if len(dev) != 1:
            raise it.fail("a LOGICAL device id must be one integer", "pass one integer")
        dev = dev[0]
    n = math.prod(it.axis_sizes.values())
    d = it.lane_int(dev, "the target device id", (0, n))
    if isinstance(d, np.ndarray):
        if ((d < 0) | (d >= n)).any():
            raise Diverge("a target that does not exist on some device")
        return d
    return d if 0 <= d < n else (-1 - abs(d) if d < 0 else d)


# -- refs -----------------------------------------------------------------------------
def apply_transforms(it: Interpreter, ref: Any, transforms: Any, bounds: bool = True) -> Any:
    """A Ref or SemRef indexed by `transforms` (NDIndexers from `.at[...]` or `ref[...]`,
    reshapes, bitcasts, `pl.select_ref`). `bounds=False` for a ref used only for its size
    (the descriptor of a DMA wait). A reshape or bitcast is a view: the indices after it
    are in the view's shape, over a stand-in buffer of that shape, and the access is mapped
    back through every view to the underlying buffer at the end (`_unview`)."""
    views: list[tuple[Any, Ref, Ref]] = []  # (the transform, the ref it views, a ref over its stand-in)
    for t in transforms or ():
        if isinstance(ref, _TRef):   # a selected ref still carrying its own transforms (nested `pl.select_ref`)
            ref = apply_transforms(it, ref.ref, ref.transforms, bounds)
        if isinstance(t, _Unswizzle):  # a permutation inside each swizzle atom: see `_untiled`
            continue
        if isinstance(t, Peer):  # Mosaic GPU's `plgpu.remote_ref`: the same ref on a peer
            ref = it.remote(ref, t)
            continue
        if isinstance(t, Multicast):  # Mosaic GPU's `plgpu.multicast_ref`: the peers come with the copy
            ref = it.remote(ref, t)
            continue
        if isinstance(t, _Untile):
            if not isinstance(ref, Ref) or ref.var:
                raise it.fail("an untiled view of something that is not one SMEM ref", "index the SMEM ref")
            n = len(t.tiling)
            lead, blocks = ref.shape[:-2 * n], ref.shape[-2 * n:-n]
            shape = (*lead, *(b * k for b, k in zip(blocks, t.tiling)))
            stand = Buffer(ref.buffer.name, tuple(shape), ref.buffer.dtype, ref.buffer.space, ref.buffer.kind)
            views.append((t, ref, Ref.whole(stand, ref.device)))
            ref = views[-1][2]
            continue
        if isinstance(t, _Reshape) and isinstance(ref, Ref) and tuple(t.shape) == tuple(ref.shape):
            continue   # a reshape to the shape it has (JAX's `test_select_ref_nested`): the same ref
        if isinstance(t, (_Reshape, _Bitcast)):
            name = getattr(ref, 'name', getattr(getattr(ref, 'buffer', None), 'name', '?'))
            if not isinstance(ref, Ref):
                raise it.fail(f"a {'reshape' if isinstance(t, _Reshape) else 'bitcast'} of `{name}`, which is not "
                              "a ref", "reshape or bitcast refs")
            if ref.var:  # every device's own start (`Lanes`): evaluate each device on its own
                raise Diverge("a view of a slice that differs between devices")
            if ref.strided:
                raise it.fail(f"a {'reshape' if isinstance(t, _Reshape) else 'bitcast'} of {ref.strided}",
                              "reshape or bitcast the ref first, then take the strided slice")
            if isinstance(t, _Reshape):
                if math.prod(ref.shape) != math.prod(t.shape):
                    raise it.fail(f"a reshape of `{name}` to {list(t.shape)}",
                                  "reshape a whole ref, or a contiguous slice of one")
                if _flat_range(ref.buffer.shape, ref.box) is None:
                    raise it.fail(f"a reshape of a slice of `{ref.buffer.name}` that is not contiguous in memory",
                                  "reshape a whole ref, or a slice of its leading dimension")
                shape, dtype = t.shape, ref.buffer.dtype
            else:
                shape, dtype = _bitcast_shape(it, ref, t.dtype), t.dtype
            stand = Buffer(ref.buffer.name, tuple(shape), dtype, ref.buffer.space, ref.buffer.kind)
            views.append((t, ref, Ref.whole(stand, ref.device)))
            ref = views[-1][2]
            continue
        if isinstance(t, _Select):  # `pl.select_ref(i, a, b, ...)`: the i-th of the refs
            if not isinstance(ref, (tuple, list)):
                raise it.fail("`pl.select_ref` of something that is not a list of refs", "pass refs to select_ref")
            i = it.scalar(t.idx, "the index of `pl.select_ref`")
            if not 0 <= i < len(ref):
                # Mosaic lowers it as `idx == 0 ? refs[0] : select(idx - 1, refs[1:])`, the last
                # ref in the last else: any index outside the range takes the last ref (JAX's own
                # `test_select_ref` loops 4 indices over 2 semaphores), and the verdict says so
                note(it, f"a `pl.select_ref` of {len(ref)} refs used at line {int(it.where())} gets index {i}: "
                         "Mosaic's lowering takes the last ref for an index outside the range, and ringc does too")
                i = len(ref) - 1
            ref = ref[i]
            if isinstance(ref, _TRef):
                ref = apply_transforms(it, ref.ref, ref.transforms, bounds)
            continue
        if not isinstance(t, _Indexer):
            what = t[1] if isinstance(t, tuple) and t and t[0] == "?" else type(t).__name__
            raise it.fail(f"the ref transform `{what}` is not supported",
                          "index refs with slices and integers (`ref.at[i, pl.ds(a, n)]`), or reshape them")
        if getattr(t, "int_indexer_shape", ()):
            raise it.fail("indexing a ref with an integer array (a gather or scatter in memory, as Triton kernels "
                          "load): Mosaic TPU loads and stores refs by slices and scalars, and ringc checks TPU "
                          "kernels so: not checked",
                          "in a TPU kernel, load the block by slices and gather from the value "
                          "(jnp.take_along_axis), or index with scalars in a loop")
        ref = index(it, ref, t.indices, bounds)
    for t, base, _ in reversed(views):
        ref = _unview(it, t, base, ref, bounds)
    return ref


def _bitcast_shape(it: Interpreter, ref: Ref, dtype: Any) -> tuple:
    """The shape of `ref.bitcast(dtype)`: on a TPU the second-minor dimension packs or unpacks
    (a [16, 128] bfloat16 ref is an [8, 128] uint32 one: row r holds rows 2r and 2r + 1)."""
    old, new = np.dtype(ref.buffer.dtype).itemsize * 8, np.dtype(dtype).itemsize * 8
    shape = list(ref.shape)
    if old == new:
        return tuple(shape)
    if len(shape) < 2 or shape[-2] * old % new:
        raise it.fail(f"a bitcast of `{ref.buffer.name}` {list(ref.shape)} from {np.dtype(ref.buffer.dtype).name} "
                      f"to {np.dtype(dtype).name}", "bitcast a ref of rank 2 or more whose second-minor dimension "
                      "times the bit width ratio is whole, as Mosaic requires")
    shape[-2] = shape[-2] * old // new
    return tuple(shape)


def _flat_range(shape: tuple, box: tuple) -> tuple[int, int] | None:
    """The row-major element range [a, b) a box covers, or None when it is not contiguous."""
    ext = [hi - lo for lo, hi in box]
    k = next((d for d, e in enumerate(ext) if e != 1), len(ext))
    if any(ext[d] != shape[d] for d in range(k + 1, len(shape))):
        return None
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    a = sum(lo * s for (lo, _), s in zip(box, strides))
    return a, a + math.prod(ext)


def _box_of(shape: tuple, a: int, b: int) -> tuple | None:
    """The box of `shape` covering exactly the row-major elements [a, b), or None. An empty
    range is the empty box at its start (a copy of 0 rows)."""
    if b == a:  # an empty range (a copy of 0 rows): the empty box at its start
        d = next(d for d in range(len(shape)) if a % math.prod(shape[d + 1:]) == 0)
        at = [a // math.prod(shape[j + 1:]) for j in range(d + 1)]
        at = [i % shape[j] for j, i in enumerate(at[:d])] + [at[d] - (at[d - 1] * shape[d] if d else 0)]
        return tuple((i, i + 1) for i in at[:d]) + ((at[d], at[d]),) + tuple((0, n) for n in shape[d + 1:])
    if b < a:
        return None
    for d in range(len(shape)):
        stride = math.prod(shape[d + 1:])
        if a % stride or b % stride or a // (stride * shape[d]) != (b - 1) // (stride * shape[d]):
            continue
        box = [((a // math.prod(shape[j + 1:])) % shape[j],) * 2 for j in range(d)]
        box = [(lo, lo + 1) for lo, _ in box]
        box.append(((a // stride) % shape[d], ((b - 1) // stride) % shape[d] + 1))
        box += [(0, shape[j]) for j in range(d + 1, len(shape))]
        return tuple(box)
    return None


@dataclass(frozen=True)
class ViewRef(Ref):
    """A slice of `ref.reshape(shape)` or `ref.bitcast(dtype)`: the same bytes as its box of
    the buffer, with the shape the kernel sees (`view`), which a DMA's shapes are compared in."""
    view: tuple = ()
    view_dtype: Any = None  # after a bitcast, the element type the kernel sees

    @property
    def shape(self) -> tuple[int, ...]:
        return self.view

    @property
    def dtype(self) -> Any:
        return self.buffer.dtype if self.view_dtype is None else self.view_dtype


def _unview(it: Interpreter, t: Any, base: Ref, v: Ref, bounds: bool = True) -> Ref:
    """The ref `v` (a ref over the stand-in of the view `t` of `base`) is, in `base`'s buffer
    (keeping `v`'s shape as the one the kernel sees); an error when its elements are not one
    box of the buffer, except for a ref used only for its size (`bounds=False`: a DMA wait's
    descriptor)."""
    if v.var:
        raise Diverge("a view sliced differently on each device")
    strided = getattr(v, "strided", "")
    if isinstance(t, _Untile):
        return _untiled(t, base, v)
    if isinstance(t, _Bitcast):
        box = _bitcast_box(base, v)
    else:
        inner = _flat_range(v.buffer.shape, v.box)
        start = _flat_range(base.buffer.shape, base.box)
        box = None if inner is None or start is None else _box_of(base.buffer.shape, start[0] + inner[0],
                                                                   start[0] + inner[1])
        if box is None and start is not None:
            box = _elements_box(base.buffer.shape, start[0], v.buffer.shape, v.box, strided)
    if box is None and not bounds:
        return ViewRef(base.buffer, base.device, base.box, base.kept, strided=strided, view=v.shape,
                       view_dtype=v.dtype)
    if box is None:
        raise it.fail(f"a slice of `{base.buffer.name}` reshaped to {list(v.buffer.shape)} that is not one box of "
                      f"its shape {list(base.buffer.shape)}",
                      "slice the reshaped ref along its leading dimension by whole rows of the original")
    kept = tuple(base.kept[k] for k in v.kept) if isinstance(t, _Bitcast) else tuple(range(len(box)))
    return ViewRef(base.buffer, base.device, box, kept, strided=strided, view=v.shape, view_dtype=v.dtype)


def _untiled(t: _Untile, base: Ref, v: Ref) -> Ref:
    """A box of an untiled view of tiled SMEM (Mosaic GPU: physical [..., B1, B2, t1, t2], seen
    as [..., B1 * t1, B2 * t2]) in the physical buffer: the leading dims as they are, each tiled
    dim as the tiles it touches, whole (a bounding box: exact for tile-aligned accesses, which
    TMA and wgmma make). Swizzling permutes elements inside a swizzle atom, so whole tiles are
    the same bytes either way. The data is not followed through the layout (`Ref.layout`)."""
    n = len(t.tiling)
    phys_lead = len(base.buffer.shape) - 2 * n
    box, kept = [], []
    for d in range(phys_lead):
        a0, b0 = base.box[d]
        if d in base.kept:  # a dim the view still has: sliced by the view's indices
            j = base.kept.index(d)
            a, b = v.box[j]
            box.append((a0 + a, a0 + b))
            if j in v.kept:
                kept.append(d)
        else:
            box.append((a0, b0))
    lead = len(v.buffer.shape) - n
    tiles, inner = [], []
    for k, size in enumerate(t.tiling):
        a, b = v.box[lead + k]
        t0 = base.box[phys_lead + k][0]
        tiles.append((t0 + a // size, t0 + -(-b // size)))
        one = a // size == (b - 1) // size
        inner.append((a % size, (b - 1) % size + 1) if one else (0, size))
    box += tiles + inner
    kept += range(phys_lead, len(box))
    return ViewRef(base.buffer, base.device, tuple(box), tuple(kept), view=v.shape, view_dtype=v.dtype,
                   layout=f"SMEM tiled {list(t.tiling)}")


def _bitcast_box(base: Ref, v: Ref) -> tuple:
    """The box of `base`'s buffer holding the bytes of `v`, a box of `base.bitcast(dtype)`:
    the same ranges in every dim but the second-minor one of the view, which scales by the
    bit width ratio (a partial element of a wider type is the whole element)."""
    old, new = base.buffer.itemsize * 8, v.buffer.itemsize * 8
    box = list(base.box)
    minor2 = len(base.kept) - 2
    for k, dim in enumerate(base.kept):
        lo, hi = v.box[k]
        if k == minor2 and old != new:
            lo, hi = (lo * new // old, hi * new // old) if new > old else (lo * new // old, -(-hi * new // old))
        box[dim] = (base.box[dim][0] + lo, base.box[dim][0] + hi)
    return tuple(box)


_ELEMENTS = 1 << 22  # the most elements of a reshaped slice mapped one by one (`_elements_box`)


def _elements_box(shape: tuple, start: int, view: tuple, box: tuple, bounding: bool) -> tuple | None:
    """The box of `shape` that the elements of `box`, a box of the reshape to `view` of the
    elements from `start` on, are (a [256, 5, 1, 1, 128] view's [0:256, 0:2] is the [0:256,
    0:2] of the [256, 5, 1, 128] ref it reshapes): mapped element by element; None when they
    are not one box, unless `bounding` (a strided slice: its bounding box is what it is read as)."""
    ext = [hi - lo for lo, hi in box]
    if 0 in ext or math.prod(ext) > _ELEMENTS:
        return None
    flat = start + np.ravel_multi_index(tuple(np.ix_(*(np.arange(lo, hi) for lo, hi in box))), view).ravel()
    if flat.max() >= math.prod(shape):
        return None
    at = np.unravel_index(flat, shape)
    out = tuple((int(a.min()), int(a.max()) + 1) for a in at)
    if bounding or math.prod(hi - lo for lo, hi in out) == flat.size:
        return out
    return None


def index(it: Interpreter, ref: Any, indices: tuple, bounds: bool = True) -> Any:
    if isinstance(ref, SemRef):
        fixed = list(ref.index)
        for k, ix in enumerate(indices):
            if isinstance(ix, _Slice):
                start, size = it.scalar(ix.start, "a semaphore index"), it.scalar(ix.size, "a semaphore index")
                if start != 0 or size != ref.rest[k]:
                    raise it.fail("a slice of a semaphore array", "index semaphores with integers")
                if any(not isinstance(j, _Slice) for j in indices[k:]):
                    raise it.fail("a semaphore index after a full slice", "index semaphores with integers")
                break
            dim = ref.shape[len(fixed)]
            i = it.scalar(ix, "a semaphore index", (0, dim))
            if not 0 <= i < dim:   # a finding, and the check goes on with the index clamped (as for a ref)
                out_of_range(it, f"semaphore `{ref.name}` index {i} is out of range [0, {dim})", ix,
                             "index within the semaphore array (or give it more semaphores)")
                i = min(max(i, 0), dim - 1)
            fixed.append(i)
        return SemRef(ref.name, ref.kind, ref.shape, tuple(fixed))
    if not isinstance(ref, Ref):
        raise it.fail(f"indexing something that is not a ref ({type(ref).__name__})", "index refs")
    box = list(ref.box)
    var = dict(ref.var)
    kept = []
    strided: list[tuple[int, int, int]] = []  # (position in the view, size, stride)
    if ref.strided:
        raise it.fail(f"indexing a strided slice of `{ref.buffer.name}` again", "index the ref once")
    if len(indices) > len(ref.kept):
        raise it.fail(f"{len(indices)} indices for a ref of rank {len(ref.kept)}", "index each dimension once")
    for k, dim in enumerate(ref.kept):
        lo, hi = ref.box[dim]
        ix = indices[k] if k < len(indices) else None
        if ix is None:
            kept.append(dim)
            continue
        if isinstance(ix, _Slice):
            size = it.scalar(ix.size, "a slice size")
            start = it.lane_int(ix.start, "a slice start", (0, max(hi - lo - size, 0) + 1))
            stride = it.scalar(ix.stride, "a slice stride")
            if stride != 1:  # its box runs from the first to the last element; its shape is `size`
                strided.append((len(kept), size, stride))
                size = (size - 1) * stride + 1 if size else 0
            if type(start) is not int:  # every device's own start (`Lanes`)
                if bounds and size and ((start < 0) | (start + size > hi - lo)).any():
                    raise Diverge("a slice out of range on some device")
                starts = var.get(dim, lo) + start
                var[dim] = starts
                box[dim] = (int(starts[0]), int(starts[0]) + size)
                kept.append(dim)
                continue
            if not size:   # an empty slice (a row masked off: `pl.ds(start, n)` with n = 0) touches nothing
                start = min(max(start, 0), hi - lo)
            elif bounds and (start < 0 or start + size > hi - lo) and not _in_tile_padding(it, ref, dim, start, size):
                out_of_range(it, f"slice {start}:{start + size} of `{ref.buffer.name}` dimension {dim} is out of "
                                 f"range [0, {hi - lo})", ix.start, "keep slices inside the ref")
                size = min(size, hi - lo)
                start = min(max(start, 0), hi - lo - size)
            box[dim] = (lo + start, lo + start + size)
            if dim in var:
                var[dim] = var[dim] + start
            kept.append(dim)
        else:
            i = it.lane_int(ix, "an index", (0, hi - lo))
            if type(i) is not int:  # every device's own index (`Lanes`)
                if bounds and ((i < 0) | (i >= hi - lo)).any():
                    raise Diverge("an index out of range on some device")
                starts = var.get(dim, lo) + i
                var[dim] = starts
                box[dim] = (int(starts[0]), int(starts[0]) + 1)
                continue
            if bounds and not 0 <= i < hi - lo:
                out_of_range(it, f"index {i} of `{ref.buffer.name}` dimension {dim} is out of range [0, {hi - lo})",
                             ix, "keep indices inside the ref")
                i = min(max(i, 0), hi - lo - 1)
            box[dim] = (lo + i, lo + i + 1)
            if dim in var:
                var[dim] = var[dim] + i
    if strided:
        shape = [box[d][1] - box[d][0] for d in kept]
        for k, size, _ in strided:
            shape[k] = size
        what = f"a strided slice (stride {', '.join(str(s) for _, _, s in strided)}) of `{ref.buffer.name}`"
        return ViewRef(ref.buffer, ref.device, tuple(box), tuple(kept), tuple(var.items()), what, view=tuple(shape),
                       view_dtype=ref.dtype)
    return Ref(ref.buffer, ref.device, tuple(box), tuple(kept), tuple(var.items()))


class FromMemory(int):
    """An integer read from SMEM or a scalar-prefetch operand, knowing where it was read
    (`origin`, text made only when asked): an index out of range made of it names the read.
    Arithmetic on it gives a plain int."""

    read: tuple  # (buffer name, box, line)

    def __new__(cls, value: int, read: tuple) -> "FromMemory":
        obj = super().__new__(cls, value)
        obj.read = read
        return obj

    @property
    def origin(self) -> str:
        name, box, line = self.read
        at = ", ".join(str(a) if b - a == 1 else f"{a}:{b}" for a, b in box)
        return f"{int(self)}, read from `{name}[{at}]` at line {line}"


class Sampled(FromMemory):
    """An integer ringc sampled from tensor data (`sample_value`), or computed from one:
    an index out of range made of it says so."""

    @property
    def source(self) -> tuple:
        return self.read

    @property
    def origin(self) -> str:
        what, line = self.read
        return (f"{int(self)}, computed from {what} at line {line}, runtime data that ringc sampled "
                "(see the verdict's `values from tensor data`)")


def _in_tile_padding(it: Interpreter, ref: Ref, dim: int, start: int, size: int) -> bool:
    """Whether slice start:start + size of `ref`'s dimension `dim`, past the array's end,
    stays inside the tile padding of an HBM array (`dtypes.tiled_shape`: the last dim to
    whole 128 lanes, the one before to whole 8-row tiles of 32 bits): a TPU lays HBM arrays
    out in those tiles, and JAX's `emit_pipeline` rounds a last, partial block up to them
    (`pipeline._create_blocked_slice`: rows 256:328 of a 321-row array), masking what the
    padding holds. Such a DMA reads or writes memory of the array; its box runs into the
    padding (no race with the block before it), and the values there are not followed."""
    buf = ref.buffer
    lo, hi = ref.box[dim]
    if buf.space != "hbm" or hi != buf.shape[dim] or not 0 <= start < hi - lo:
        return False
    size_of = buf.itemsize
    tiled = dtypes.tiled_shape(buf.shape, size_of)
    if len(buf.shape) == 1:   # JAX's 1-D tiling packs sub-32-bit elements: 128 x 4 // size a tile
        tiled = (-(-buf.shape[0] // (128 * max(1, 4 // size_of))) * 128 * max(1, 4 // size_of),)
    if lo + start + size > tiled[dim]:
        return False
    note(it, f"HBM tile padding: `{buf.name}` ({'x'.join(map(str, buf.shape))} {np.dtype(buf.dtype).name}) is "
             f"read or written past its end, inside the tiles a TPU stores it in ({'x'.join(map(str, tiled))}): "
             "accepted as memory of the array (JAX's emit_pipeline rounds a partial last block up to whole "
             "tiles so); the values there are no data of the array (the kernel must mask them), and ringc does "
             "not follow them")
    return True


def out_of_range(it: Interpreter, message: str, raw: Any, fix: str) -> None:
    """An access out of its ref's range: an `out_of_bounds` finding at its line, recorded
    on the sink (`Builder.faults`), and the evaluation goes on with the access clamped
    into the ref; an error where nothing collects findings."""
    origin = getattr(raw, "origin", None)
    if origin:
        message += f"; the index is {origin}"
    faults = getattr(it.sink, "faults", None)
    if faults is None:
        raise it.fail(message, fix)
    faults.append((it.device, it.point, it.where(), message))


class _Hole:
    """A placeholder leaf: the position of an equation input in a params pytree."""
    __slots__ = ("k",)
    shape: tuple = ()
    ndim = 0
    dtype = np.dtype("int32")

    def __init__(self, k: int):
        self.k = k


class _TRef(NamedTuple):
    ref: Any
    transforms: tuple


class _Indexer(NamedTuple):
    indices: tuple
    int_indexer_shape: tuple


class _Reshape(NamedTuple):
    shape: tuple


class _Bitcast(NamedTuple):
    dtype: Any


class _Select(NamedTuple):
    idx: Any


class Peer(NamedTuple):
    """`plgpu.remote_ref`'s transform: the same ref on another GPU (`mgpu.gpu_ref`)."""
    device_id: Any
    device_id_type: Any


class Multicast(NamedTuple):
    """`plgpu.multicast_ref`'s transform: the same ref on every GPU of the axes."""
    axes: tuple


class _Untile(NamedTuple):
    tiling: tuple[int, ...]


class _Unswizzle(NamedTuple):
    swizzle: int


class _Slice(NamedTuple):
    start: Any
    size: Any
    stride: Any


def _template(it: Interpreter, eqn: Any, key: str, n: int) -> Any:
    """The params pytree `key` of `eqn`, built once per check (`Sink.templates`) with
    `_Hole`s for the inputs and turned into plain tuples (`_TRef`, `_Indexer`, `_Slice`):
    filling it per evaluation is much cheaper than JAX's own unflatten, which validates
    every indexer again."""
    templates = it.sink.templates
    hit = templates.get((eqn, key))
    if hit is not None:
        return hit
    import jax
    tree = jax.tree.unflatten(eqn.params[key], [_Hole(i) for i in range(n)])

    def plain(x: Any) -> Any:
        name = type(x).__name__
        if name == "TransformedRef":
            return _TRef(plain(x.ref), tuple(plain(t) for t in x.transforms))
        if name == "ReshapeTransform":
            return _Reshape(tuple(int(d) for d in x.shape))
        if name == "BitcastTransform":
            return _Bitcast(np.dtype(x.dtype))
        if name == "NDIndexer":
            return _Indexer(tuple(plain(i) for i in x.indices), tuple(x.int_indexer_shape))
        if name == "SelectTransform":
            return _Select(plain(x.idx))
        if name == "PeerMemRef":  # Mosaic GPU's `plgpu.remote_ref` (`mgpu.gpu_ref`)
            return Peer(plain(x.device_id), x.device_id_type)
        if name == "MulticastRef":  # Mosaic GPU's `plgpu.multicast_ref`: the ref on every GPU of the axes
            return Multicast(tuple(x.collective_axes))
        if name == "UntilingTransform":  # Mosaic GPU's tiled SMEM, seen untiled
            return _Untile(tuple(int(t) for t in x.tiling))
        if name == "UnswizzleRef":  # Mosaic GPU's swizzled SMEM, seen unswizzled
            return _Unswizzle(int(x.swizzle))
        if name == "Slice":
            return _Slice(plain(x.start), plain(x.size), plain(getattr(x, "stride", 1)))
        if isinstance(x, tuple):
            return tuple(plain(i) for i in x)
        if isinstance(x, list):
            return [plain(i) for i in x]
        if isinstance(x, dict):
            return {a: plain(b) for a, b in x.items()}
        if isinstance(x, (_Hole, int, float, bool, str)) or x is None:
            return x
        return ("?", type(x).__name__)  # a transform ringc does not model

    fill = _compile(plain(tree))
    templates[(eqn, key)] = fill
    return fill


def _compile(t: Any) -> Callable[[list], Any]:
    """A function that fills the template's holes from the inputs; parts without holes are
    shared constants."""
    if isinstance(t, _Hole):
        k = t.k
        return lambda vals: vals[k]
    if isinstance(t, (tuple, list)):
        parts = [_compile(i) for i in t]
        if all(getattr(p, "constant", False) for p in parts):
            return _constant(t)
        make = tuple if type(t) is tuple else list if type(t) is list else (lambda xs, c=type(t): c(*xs))
        return lambda vals: make([p(vals) for p in parts])
    if isinstance(t, dict):
        items = [(a, _compile(b)) for a, b in t.items()]
        return lambda vals: {a: p(vals) for a, p in items}
    return _constant(t)


def _constant(t: Any) -> Callable[[list], Any]:
    def get(vals: list) -> Any:
        return t
    get.constant = True
    return get


def unflatten(it: Interpreter, eqn: Any, invals: list, key: str = "tree") -> Any:
    if eqn.params.get(key) is None:  # no transforms (Mosaic GPU passes None for an untransformed ref)
        return ()
    return _template(it, eqn, key, len(invals))(invals)


def _split(it: Interpreter, x: Any, bounds: bool = True) -> tuple[Any, Any]:
    if x is None:
        return None, ()
    if isinstance(x, _TRef):
        return apply_transforms(it, x.ref, x.transforms, bounds), None
    return x, None


def sem_id(it: Interpreter, s: Any, device: int, what: str) -> tuple:
    if not isinstance(s, SemRef):
        raise it.fail(f"{what} is not a semaphore", "pass a semaphore ref")
    if s.rest:
        raise it.fail(f"{what}: semaphore `{s.name}` of shape {list(s.shape)} is used without an index for its last "
                      f"{len(s.rest)} dims", "index it down to one semaphore, e.g. sems.at[i]")
    return (device, s.name, s.index)


# -- DMAs and semaphores -----------------------------------------------------------------
@PRIMITIVES.kernel("dma_start", does=Does.MEMORY | Does.SEMAPHORE, doc="an async copy, local or remote: DmaStart")
def _dma_start(it: Interpreter, eqn: Any, invals: list) -> list:
    src, dst, dst_sem, src_sem, dev = unflatten(it, eqn, invals)
    src, dst = _split(it, src)[0], _split(it, dst)[0]
    dst_sem, src_sem = _split(it, dst_sem)[0], _split(it, src_sem)[0]
    if eqn.params.get("add"):
        raise it.fail("an accumulating DMA (`add=True`)", "ringc models plain copies")
    for r, what in ((src, "source"), (dst, "destination")):
        if not isinstance(r, Ref):
            raise it.fail(f"the DMA {what} is not a ref", "copy between refs")
        _no_stride(it, r, f"a DMA {what}")
    if src.shape != dst.shape:
        raise it.fail(f"DMA from `{src.region().text()}` {list(src.shape)} to `{dst.region().text()}` "
                      f"{list(dst.shape)}: the shapes differ", "copy equal shapes")
    viewed = any(getattr(r, "view_dtype", None) is not None for r in (src, dst))
    if viewed and np.dtype(src.dtype).itemsize != np.dtype(dst.dtype).itemsize:
        # Through a bitcast view the bytes are the view's; between plain refs of different
        # types the copy is checked, and the verifier's dtype check reports it (`dtype`).
        raise it.fail(f"DMA from `{src.region().text()}` of {np.dtype(src.dtype).name} to `{dst.region().text()}` of "
                      f"{np.dtype(dst.dtype).name}: the element sizes differ", "copy equal types, or bitcast one "
                      "side (`ref.bitcast(dtype)`)")
    name = f"{src.buffer.name}->{dst.buffer.name}"
    seen = (str(np.dtype(src.dtype)), str(np.dtype(dst.dtype))) if viewed else None   # the types the copy moves
    if dev is None:
        _dma_values(it, src, dst, it.device)
        it.emit(DmaStart(name, it.region(src), it.region(dst), None,
                         sem_id(it, dst_sem, it.device, "the DMA semaphore"), viewed=seen))
        return []
    target = it.target(device_of(it, dev, eqn.params["device_id_type"]))
    if 0 <= target < math.prod(it.axis_sizes.values()):
        _dma_values(it, src, dst, target)
    _dma_values(it, src, dst, None)  # after the send read its source, which may be the destination
    parts = list(dev.values()) if isinstance(dev, dict) else dev if isinstance(dev, (tuple, list)) else [dev]
    explicit = all(isinstance(p, OwnIndex) or any(p is o for o in it.own_vecs) for p in parts)
    it.emit(DmaStart(name, it.region(src), it.region(dst, target), sem_id(it, src_sem, it.device, "the send semaphore"),
                     sem_id(it, dst_sem, target, "the receive semaphore"), explicit_self=explicit, viewed=seen), target)
    return []


def _dma_values(it: Interpreter, src: Ref, dst: Ref, target: int | None) -> None:
    """The values a DMA carries into memory whose values ringc knows (SMEM, scalar prefetch:
    `store`) or follows (integers in VMEM or HBM: `shadow`). Known source values are copied
    (a routing table computed in the kernel, staged in VMEM, copied into SMEM): a read after
    the DMA's wait sees them, and a read before it is a race, found as such. A copy to another
    device carries them only when the devices are evaluated together (`Sink.corun`: the run
    the sender and the receiver make together); evaluated one by one, the sink is told
    (`cross_values`) and evaluates again so. Any other DMA makes the destination's values
    unknown on its device, so later reads are runtime data (`Unknown`), never the values it
    held before the DMA. `target` None: the sender's own copy of a remote DMA's destination,
    which another device's send fills (unknown unless the devices are evaluated together)."""
    buf, d = dst.buffer, it.owner(dst, it.device if target is None else target)
    follows = buf.follows_values
    if not buf.store and not follows:  # most DMAs: into memory whose values are data
        return
    buf.dma_target = buf.dma_target or not follows
    if it.lanes is not None:
        if follows and not buf.shadow:
            return  # every device at once follows no vector values (`_write` diverges on them)
        raise Diverge("a DMA into memory whose values ringc knows")
    cosim = getattr(it.sink, "corun", None) is not None
    if target is None and cosim:
        return  # the sender's own copy of a remote DMA's destination: the receivers' copies change
    vals = (_known_values(it.owner(src, it.device), src)
            if target is not None and not _past_end(dst) and not _viewed(src) and not _viewed(dst) else None)
    if vals is not None and target != it.device and not cosim:
        it.sink.cross_values = True  # a remote copy of known values: evaluate the devices together
        vals = None
    if vals is not None:
        note(it, f"values routed through DMAs: `{src.buffer.name}` -> `{buf.name}` at line {int(it.where())} "
                 + ("copies integers ringc knows to another device; the devices were evaluated together (each DMA "
                    "complete as it starts, a device runs until it waits for what another has not yet sent): the "
                    "values of every race-free run" if target != it.device else
                    "copies integers ringc knows (computed in the kernel, passed in, or received), which "
                    "later reads see"))
    if follows:
        if vals is None and d not in buf.shadow:
            return
        sh = buf.shadow.setdefault(d, Shadow.empty(buf.shape, buf.dtype))
        sh.put(_box_slices(dst), vals)
        return
    if d not in buf.store:
        return
    sl_d = _box_slices(dst)
    if vals is not None and vals.size == math.prod(dst.shape):
        buf.store[d] = buf.store[d].copy()
        buf.store[d][sl_d] = vals.reshape(buf.store[d][sl_d].shape)
        if d in buf.unset:
            buf.unset[d][0][sl_d] = False
        return
    partly = _partly_known(it, src, target)
    if partly is not None and partly[0].size == math.prod(dst.shape):
        # some of the source is known (a schedule built window by window, copied whole): those
        # elements are, the others are runtime data where they are read
        values, known = partly
        buf.store[d] = buf.store[d].copy()
        buf.store[d][sl_d] = np.where(known, values, 0).reshape(buf.store[d][sl_d].shape)
        mask = buf.unset[d][0] if d in buf.unset else np.zeros(buf.shape, bool)
        mask[sl_d] = ~known.reshape(mask[sl_d].shape)
        buf.unset[d] = (mask, f"a DMA at line {int(it.where())} filled from `{src.buffer.name}`, where nothing "
                              "wrote those elements with values ringc knows")
        return
    buf.store.pop(d)
    buf.unset.pop(d, None)
    buf.unknown[d] = (f"a DMA at line {int(it.where())} filled from `{src.buffer.name}`, whose values ringc "
                      "does not follow")


def _partly_known(it: Interpreter, src: Ref, target: int | None) -> tuple[np.ndarray, np.ndarray] | None:
    """A DMA source's values and which of them ringc knows, where it follows some of them
    (a vector buffer's shadow) on the sending device; None otherwise."""
    if target is None or target != it.device or _past_end(src) or _viewed(src):
        return None
    sh = src.buffer.shadow.get(it.owner(src, it.device))
    if sh is None:
        return None
    sl = _box_slices(src)
    return np.array(sh.values[sl]), np.array(sh.known[sl])


def _box_slices(ref: Ref) -> tuple:
    return tuple(slice(a, b) for a, b in ref.box)


def _viewed(ref: Ref) -> bool:
    """Whether the ref is a bitcast view (`ref.bitcast(jnp.int16)`): its elements are not the
    buffer's, so the values ringc follows in the buffer do not carry through it."""
    return getattr(ref, "view_dtype", None) is not None


def _past_end(ref: Ref) -> bool:
    """Whether the ref's box runs into its HBM array's tile padding (`_in_tile_padding`),
    whose values ringc does not follow."""
    return any(b > n for (_, b), n in zip(ref.box, ref.buffer.shape))


def _known_values(device: int, ref: Ref) -> np.ndarray | None:
    """The values of a ref's box on its device, when ringc knows every one (an SMEM store or a
    vector buffer's shadow), else None."""
    buf = ref.buffer
    if _past_end(ref):
        return None
    known = buf.store.get(device)
    if known is not None:
        return None if buf.unset_in(device, _box_slices(ref)) else np.array(known[_box_slices(ref)])
    sh = buf.shadow.get(device)
    return sh.get(_box_slices(ref)) if sh is not None else None


@PRIMITIVES.kernel("dma_wait", does=Does.MEMORY | Does.SEMAPHORE, doc="`.wait()`, `.wait_send()`, `.wait_recv()`: SemWait for the bytes of the waited side")
def _dma_wait(it: Interpreter, eqn: Any, invals: list) -> list:
    src, dst, dst_sem, src_sem, dev = unflatten(it, eqn, invals)
    # A wait reads only its descriptor's size: kernels size a wait-only descriptor to the total
    # of several DMAs (`x_ref.at[pl.ds(0, 8 * count)]`), which may reach past the ref.
    src, dst = _split(it, src, bounds=False)[0], _split(it, dst, bounds=False)[0]
    sem = _split(it, dst_sem)[0]
    remote = src_sem is not None
    why = "wait_send" if eqn.params.get("insert_dummy_device") else "wait_recv" if remote else "wait"
    # wait_send swaps source and destination: the waited ref is then the copy's source.
    waited = dst if isinstance(dst, Ref) else src
    copy = f"{dst.buffer.name}->{src.buffer.name}" if why == "wait_send" else f"{src.buffer.name}->{dst.buffer.name}"
    nbytes = waited.nbytes
    it.emit(SemWait(sem_id(it, sem, it.device, "the waited semaphore"), nbytes, why, copy))
    return []


@PRIMITIVES.kernel("semaphore_signal", does=Does.SEMAPHORE, doc="`pl.semaphore_signal`, local or on another device: Signal")
def _signal(it: Interpreter, eqn: Any, invals: list) -> list:
    sem, transforms, inc, dev, core = unflatten(it, eqn, invals, "args_tree")
    sem = apply_transforms(it, sem, transforms)
    amount = it.scalar(inc, "the signal increment")
    target = it.device if dev is None else it.target(device_of(it, dev, eqn.params["device_id_type"]))
    if core is not None:   # that TensorCore of the target (or of this) chip
        target = it.core_target(target, it.scalar(core, "the signalled core"))
    why = "barrier" if isinstance(sem, SemRef) and sem.kind == "barrier" else "signal"
    it.emit(Signal(sem_id(it, sem, target, "the signalled semaphore"), amount, why),
            target if dev is not None else None)
    return []


@PRIMITIVES.kernel("semaphore_wait", does=Does.SEMAPHORE, doc="`pl.semaphore_wait` (decrementing): SemWait")
def _sem_wait(it: Interpreter, eqn: Any, invals: list) -> list:
    sem, transforms, value, decrement = unflatten(it, eqn, invals, "args_tree")
    sem = apply_transforms(it, sem, transforms)
    if not decrement:
        raise it.fail("a non-decrementing semaphore wait", "ringc models `semaphore_wait(sem, value)`, which decrements")
    amount = it.scalar(value, "the wait value")
    why = "barrier" if isinstance(sem, SemRef) and sem.kind == "barrier" else "sem_wait"
    it.emit(SemWait(sem_id(it, sem, it.device, "the waited semaphore"), amount, why))
    return []


@PRIMITIVES.kernel("semaphore_read", does=Does.SEMAPHORE, doc="a semaphore's value: unknown before the run (an error if it steers control flow)")
def _sem_read(it: Interpreter, eqn: Any, invals: list) -> list:
    return [Unknown(f"it is read from a semaphore (line {int(it.where())}), whose value depends on timing")]


@PRIMITIVES.kernel("get_barrier_semaphore", does=Does.SEMAPHORE, doc="the barrier semaphore of the kernel's `collective_id`")
def _barrier(it: Interpreter, eqn: Any, invals: list) -> list:
    if it.barrier is None:
        raise it.fail("get_barrier_semaphore in a kernel without `collective_id`",
                      "set pltpu.CompilerParams(collective_id=...)")
    return [it.barrier]


# -- memory ------------------------------------------------------------------------------
def _read(it: Interpreter, ref: Ref) -> Any:
    """A load: concrete from SMEM/prefetch stores; otherwise copied into the load site's value
    register (so the read happens now) and returned as data made of that register."""
    buf = ref.buffer
    if ref.device in buf.store:
        if it.lanes is not None:
            return _origin(it, ref, it.lanes.read(ref))
        if buf.dma_target:  # a scalar a DMA may still be writing: the read is an event (races)
            reg = it.sink.register(it.eqn, it.where(), ref.shape, buf.dtype)
            it.emit(Compute("load", Ref.whole(reg, it.device).region(), it.region(ref)))
        arr = buf.store[ref.device]
        sl = tuple(slice(a, b) if d in ref.kept else a for d, (a, b) in enumerate(ref.box))
        why = buf.unset_in(ref.device, sl)
        if why is not None:
            return Unknown(f"it is read from `{buf.name}` at line {int(it.where())}, which {why}", data=True)
        return _origin(it, ref, _py(arr[sl]))
    _vector_memory(it, ref, "load")
    if ref.layout:  # tiled SMEM (Mosaic GPU): read as the tiles it touches; its values not followed
        reg = it.sink.register(it.eqn, it.where(), tuple(ref.box[d][1] - ref.box[d][0] for d in ref.kept), buf.dtype)
        it.emit(Compute("load", Ref.whole(reg, it.device).region(), it.region(ref)))
        note(it, f"values through {ref.layout} SMEM are not followed (the meaning check does not cover what "
                 "passes through it); its accesses are the tiles they touch")
        return Data(ref.shape, ("opaque", f"{ref.layout} SMEM at line {int(it.where())}"))
    if ref.strided:  # read as the box from its first to its last element; its values not followed
        box = tuple(ref.box[d][1] - ref.box[d][0] for d in ref.kept)
        reg = it.sink.register(it.eqn, it.where(), box, buf.dtype)
        it.emit(Compute("load", Ref.whole(reg, it.device).region(), it.region(ref)))
        note(it, f"{ref.strided} loaded at line {int(it.where())}: modelled as a read of the box from its first "
                 "to its last element (a race on a row it skips would be reported), its values not followed")
        return Data(ref.shape, ("opaque", f"{ref.strided} at line {int(it.where())}"))
    reg = it.sink.register(it.eqn, it.where(), ref.shape, ref.dtype)
    dst = Ref.whole(reg, it.device).region()
    it.emit(Compute("load", *squeezed(dst, it.region(ref))))
    sh = buf.shadow.get(ref.device) if it.lanes is None else None
    if sh is not None:  # integers the kernel stored or a DMA copied here: the load's values
        vals = sh.get(_box_slices(ref))
        # (through a bitcast view of another element type, `ref.bitcast(jnp.int16)`, the
        # values are not followed: the view packs them otherwise)
        if vals is not None and vals.size == math.prod(ref.shape) and np.dtype(vals.dtype) == np.dtype(ref.dtype):
            return _origin(it, ref, _py(vals.reshape(ref.shape)))
    why = buf.unknown.get(ref.device)
    if why is not None and math.prod(ref.shape) == 1:
        return Unknown(f"it is read from `{buf.name}` at line {int(it.where())}, which {why}", data=True)
    return Data(ref.shape, ("load", dst))


def squeezed(dst: Region, src: Region) -> tuple[Region, Region]:
    """Two regions of one size whose shapes differ only in dims of 1 (a [1, 32, 128] tile of a
    reshaped view, read from rows of a [1024, 128] buffer): both as their dims other than 1,
    so the data flow maps them element by element. Others as they are."""
    if dst.shape == src.shape:
        return dst, src
    ones = lambda r: Region(r.buffer, r.device, r.box, tuple(d for d in r.kept if r.box[d][1] - r.box[d][0] != 1),
                            r.itemsize)
    a, b = ones(dst), ones(src)
    return (a, b) if a.shape == b.shape else (dst, src)


def read_ref(it: Interpreter, ref: Ref) -> Any:
    """A load of a whole ref (`_read`), for rules outside this module."""
    return _read(it, ref)


def _origin(it: Interpreter, ref: Ref, v: Any) -> Any:
    """A scalar read from SMEM, remembering where it was read (`FromMemory`)."""
    if type(v) is not int:
        return v
    return FromMemory(v, (ref.buffer.name, ref.box, int(it.where())))


def _write(it: Interpreter, ref: Ref, value: Any) -> None:
    _no_stride(it, ref, "a store's destination")
    buf = ref.buffer
    if ref.device in buf.store and it.lanes is not None:
        it.lanes.write(ref, value)
        return
    if ref.device in buf.store:
        if not is_concrete(value):
            buf.store.pop(ref.device)  # no longer known: later reads are data
            buf.unset.pop(ref.device, None)
        else:
            sl = tuple(slice(a, b) if d in ref.kept else a for d, (a, b) in enumerate(ref.box))
            buf.store[ref.device] = buf.store[ref.device].copy()
            buf.store[ref.device][sl] = value
            if ref.device in buf.unset:
                buf.unset[ref.device][0][sl] = False
            if buf.dma_target:  # a scalar a DMA may still be writing: the write is an event (races)
                c = _constant_of(value)
                it.emit(Compute("opaque", it.region(ref), fn=(f"{KNOWN}{c!r}" if c is not None
                                                              else f"{KNOWN}a constant array",)))
            return
    _vector_memory(it, ref, "store")
    dst = it.region(ref)
    if ref.layout:  # tiled SMEM (Mosaic GPU): the tiles it touches, values not followed
        it.emit(Compute("opaque", dst, fn=(f"a value stored into {ref.layout} SMEM at line {int(it.where())}",)))
        return
    if buf.follows_values:
        _shadow_write(it, ref, value)
    if type(value) is Vec:  # every device's own constant: zero on some devices only is not a translation
        zeros = {not np.any(x) for x in value.a}
        if len(zeros) > 1:
            raise Diverge("a constant that is zero on some devices only")
        value = value.a[0]
    if is_concrete(value):
        if not np.any(np.asarray(value)):
            it.emit(Compute("zero", dst))
        else:
            c = _constant_of(value)
            it.emit(Compute("opaque", dst, fn=(f"{KNOWN}{c!r}" if c is not None else f"{KNOWN}a constant array",)))
        return
    if isinstance(value, Unknown):
        it.emit(Compute("opaque", dst, fn=(f"a value stored at line {int(it.where())}: {value.why}",)))
        return
    for action in store_actions(dst, value):
        it.emit(action)


def _shadow_write(it: Interpreter, ref: Ref, value: Any) -> None:
    """A store into a vector buffer whose integers ringc follows: concrete values are kept
    (`Buffer.shadow`), anything else makes the box unknown. Evaluating every device at once
    keeps none: a concrete store diverges (the devices are evaluated one by one)."""
    concrete = is_concrete(value) or type(value) is Vec
    if it.lanes is not None:
        if concrete:
            raise Diverge("integers stored into vector memory")
        return
    sh = ref.buffer.shadow.get(ref.device)
    if sh is None:
        if not concrete:
            return
        sh = ref.buffer.shadow[ref.device] = Shadow.empty(ref.buffer.shape, ref.buffer.dtype)
    sl = _box_slices(ref)
    sh.put(sl, np.broadcast_to(np.asarray(value), ref.shape) if concrete and not _past_end(ref) else None)


def note(it: Interpreter, text: str) -> None:
    """A note for the verdict's assumptions, once."""
    notes = getattr(it.sink, "notes", None)
    if notes is not None and text not in notes:
        notes.append(text)


def _no_stride(it: Interpreter, ref: Any, what: str) -> None:
    if isinstance(ref, Ref) and ref.strided:
        raise it.fail(f"{ref.strided} as {what}", "ringc models strided slices in loads only: store or copy "
                      "contiguous boxes")


def _vector_memory(it: Interpreter, ref: Ref, what: str) -> None:
    """A load or store of a ref in HBM (memory space ANY/HBM: `o_ref[...] = x` into an ANY
    output, as JAX's interpret-mode tests write) is a direct read or write of HBM, as TPU
    interpret mode runs it: modelled so, and the verdict says so (Mosaic on a TPU may want a
    DMA instead)."""
    if ref.buffer.space == "hbm":
        note(it, f"a {what} of `{ref.buffer.name}` in HBM (memory space ANY) at line {int(it.where())}: modelled "
                 f"as a direct {'write to' if what == 'store' else 'read of'} HBM, as interpret mode runs it")


def store_actions(dst: Any, v: Data) -> list:
    """The Compute events that make `dst` hold `v`: a copy, a cast, a sum, a product, zero,
    or opaque data when the model does not follow the value."""
    shape = dst.shape

    def load(x: Data):
        return x.how[1] if x.how[0] == "load" and x.shape == shape else None

    def plain(x: Data) -> Data:
        while x.how[0] == "cast":
            x = x.how[1]
        return x

    def loadf(x: Data):  # (region, pointwise functions) of a load, or of functions of a load
        x = plain(x)
        if x.how[0] == "fn" and load(plain(x.how[2])) is not None:
            return load(plain(x.how[2])), x.how[1]
        r = load(x)
        return None if r is None else (r, ())

    def opaque(x: Data) -> list:
        x = plain(x)
        why = (x.how[1] if x.how[0] == "opaque" else
               f"pointwise `{x.how[1][-1]}` of a value that is not one load" if x.how[0] == "fn" else
               f"a value made by `{x.how[0]}` that ringc stores only from loads")
        return [Compute("opaque", dst, fn=(why,))]

    how = v.how[0]
    if how == "const":  # a known value, never a collective's: a term that compares (a wrong_result)
        return [Compute("opaque", dst, fn=(f"{KNOWN}{v.how[1]!r}",))]
    if v.shape != shape:
        return [Compute("opaque", dst, fn=(f"a value of shape {list(v.shape)} stored into a box of {list(shape)}",))]
    if how == "load":
        return [Compute("assign", dst, load(v))]
    if how == "zero":
        return [Compute("zero", dst)]
    if how == "cast" and load(plain(v)) is not None:
        return [Compute("cast", dst, load(plain(v)))]
    if how == "cast":
        return store_actions(dst, plain(v))
    if how == "fn" and loadf(v) is not None:
        src, fn = loadf(v)
        return [Compute("assign", dst, src, fn=fn)]
    if how == "dot":
        a, b = plain(v.how[1]), plain(v.how[2])
        if a.how[0] == "load" and b.how[0] == "load":
            return [Compute("matmul", dst, a.how[1], b.how[1], False, contract=v.how[3])]
    if how == "add":
        a, b = plain(v.how[1]), plain(v.how[2])
        for x, y in ((a, b), (b, a)):
            if y.how[0] == "dot" and plain(y.how[1]).how[0] == "load" and plain(y.how[2]).how[0] == "load":
                return store_actions(dst, x) + [Compute("matmul", dst, plain(y.how[1]).how[1],
                                                        plain(y.how[2]).how[1], True, contract=y.how[3])]
        la, lb = loadf(a), loadf(b)
        if la is not None and lb is not None and (not la[1] or not lb[1]):
            (base, _), (src, fn) = (la, lb) if not la[1] else (lb, la)
            return [Compute("accumulate", dst, src, base=base, fn=fn)]
        for x, y in ((a, b), (b, a)):
            if loadf(y) is not None:
                return store_actions(dst, x) + [Compute("accumulate", dst, loadf(y)[0], fn=loadf(y)[1])]
    return opaque(v)


def _indexed(it: Interpreter, eqn: Any, ref: Any, flat: list, key: str = "tree") -> Any:
    transforms = unflatten(it, eqn, flat, key) if key in eqn.params else ()
    return apply_transforms(it, ref, transforms)


@PRIMITIVES.kernel("get", does=Does.MEMORY, doc="`x = ref[idx]`: a load (a Compute into the load site's value register)")
def _get(it: Interpreter, eqn: Any, invals: list) -> list:
    ref = _indexed(it, eqn, invals[0], invals[1:])
    if isinstance(ref, SemRef):
        return [Unknown("it is a semaphore's value")]
    return [_read(it, ref)]


@PRIMITIVES.kernel("swap", does=Does.MEMORY, doc="`ref[idx] = x`: a store (Compute: copy, cast, sum, product, zero, or opaque)")
def _swap(it: Interpreter, eqn: Any, invals: list) -> list:
    ref = _indexed(it, eqn, invals[0], invals[2:])
    old = _read(it, ref) if eqn.outvars[0] in it.used else None
    _write(it, ref, invals[1])
    return [old]


@PRIMITIVES.kernel("addupdate", does=Does.MEMORY, doc="`ref[idx] += x`: an accumulate")
def _addupdate(it: Interpreter, eqn: Any, invals: list) -> list:
    ref = _indexed(it, eqn, invals[0], invals[2:])
    value = invals[1]
    if ref.device in ref.buffer.store and (is_concrete(value) or type(value) is Vec):
        old = _read(it, ref)
        _write(it, ref, vec(np.asarray(old.a if type(old) is Vec else old) + (value.a if type(value) is Vec
                                                                             else value))
               if it.lanes is not None and (type(old) is Vec or type(value) is Vec)
               else np.asarray(old) + value)
        return []
    old = _read(it, ref)
    if is_concrete(old) and is_concrete(value):  # integers ringc follows in vector memory
        _write(it, ref, np.asarray(old) + value)
        return []
    _write(it, ref, Data(ref.shape, ("add", old, value)) if isinstance(value, Data) else
           Data(ref.shape, ("opaque", "addupdate")))
    return []


MASKED_NOTE = ("a masked load or store (`pltpu.store(..., mask=)`, `pl.load(..., mask=)`) is checked as an access "
               "of its whole box (a store reads the box and writes it back with the masked lanes replaced): races "
               "with the lanes the mask leaves are reported as if they were touched")


def _masked_note(it: Interpreter) -> None:
    notes = getattr(it.sink, "notes", None)
    if notes is not None and MASKED_NOTE not in notes:
        notes.append(MASKED_NOTE)


@PRIMITIVES.kernel("masked_load", does=Does.MEMORY,
                   doc="`pl.load`: a load; with a mask, a load of the whole box, `other` where the mask is off")
def _masked_load(it: Interpreter, eqn: Any, invals: list) -> list:
    args = unflatten(it, eqn, invals, "args_tree")
    ref, transforms, mask = args[0], args[1], args[2]
    value = _read(it, apply_transforms(it, ref, transforms))
    if mask is None:
        return [value]
    _masked_note(it)
    other = args[3] if len(args) > 3 else None
    if is_concrete(value) and is_concrete(mask) and (other is None or is_concrete(other)):
        return [np.where(np.asarray(mask), np.asarray(value), np.asarray(0 if other is None else other))]
    return [Data(tuple(eqn.outvars[0].aval.shape), ("opaque", f"a masked load at line {int(it.where())}"))]


@PRIMITIVES.kernel("masked_swap", does=Does.MEMORY,
                   doc="`pl.store`: a store; with a mask, the whole box read and written back, the masked lanes new")
def _masked_swap(it: Interpreter, eqn: Any, invals: list) -> list:
    args = unflatten(it, eqn, invals, "args_tree")
    ref, transforms, val, mask = args[0], args[1], args[2], args[3]
    ref = apply_transforms(it, ref, transforms)
    if mask is not None:  # `where(mask, val, old)`: the lanes the mask leaves keep what was there
        _masked_note(it)
        old = _read(it, ref)
        if is_concrete(old) and is_concrete(val) and is_concrete(mask):
            val = np.where(np.asarray(mask), np.asarray(val), np.asarray(old))
        else:
            val = Data(ref.shape, ("opaque", f"a masked store at line {int(it.where())}"))
    _write(it, ref, val)
    return [None for _ in eqn.outvars]


_INT_ARRAY = 1 << 16  # integer arrays up to this size made from a constant stay concrete (a routing table)


@PRIMITIVES.kernel("broadcast_in_dim", does=Does.PURE, doc="a broadcast: zero when it broadcasts a concrete 0 into tensor data")
def _broadcast(it: Interpreter, eqn: Any, invals: list) -> list:
    shape = tuple(eqn.params["shape"])
    x = invals[0]
    if type(x) is Vec and x.a.ndim == 1 and not eqn.params["broadcast_dimensions"]:  # each device's scalar
        return [Vec(np.broadcast_to(x.a.reshape(-1, *(1,) * len(shape)), (len(x.a), *shape))
                    .astype(eqn.outvars[0].aval.dtype))]
    integers = integer_or_bool(eqn.outvars[0].aval.dtype)
    if is_concrete(x) and np.asarray(x).ndim == 0 and math.prod(shape) > (_INT_ARRAY if integers else 64):
        return [Data(shape, ("zero",)) if not x else Data(shape, ("const", _py(np.asarray(x))))]
    return pure_rule(it, eqn, invals)


# -- control flow ----------------------------------------------------------------------
@PRIMITIVES.kernel("cond", does=Does.CONTROL, doc="`lax.cond` / `pl.when`: the branch the concrete predicate selects")
def _cond(it: Interpreter, eqn: Any, invals: list) -> list:
    branches = eqn.params["branches"]
    i = it.scalar(invals[0], "a branch predicate (pl.when / lax.cond)", (0, len(branches)))
    i = min(max(i, 0), len(branches) - 1)
    return it.run_closed(branches[i], invals[1:])


@PRIMITIVES.kernel("scan", does=Does.CONTROL, doc="`lax.scan` / `fori_loop` with a static trip count: unrolled")
def _scan(it: Interpreter, eqn: Any, invals: list) -> list:
    carry, ys = scan_loop(it, eqn, invals, _scan_slice)
    stacked = []
    for k, o in enumerate(eqn.outvars[eqn.params["num_carry"]:]):
        col = [y[k] for y in ys]
        if it.lanes is not None and any(type(c) is Vec for c in col):
            if not all(is_concrete(c) or type(c) is Vec for c in col):
                raise Diverge("a scan output made of device values and data")
            n = it.lanes.n
            stacked.append(vec(np.stack([c.a if type(c) is Vec else np.broadcast_to(np.asarray(c), (n, *np.shape(c)))
                                         for c in col], axis=1)))
            continue
        stacked.append(np.stack([np.asarray(c) for c in col]) if col and all(is_concrete(c) for c in col)
                       else Data(tuple(o.aval.shape), ("opaque", "scan")))
    return [*carry, *stacked]


def _scan_slice(xs: list, i: int) -> list:
    """The i-th slice of a scan's scanned inputs."""
    return [_py(x[i] if isinstance(x, np.ndarray) else Data(x.shape[1:], ("opaque", "scan")) if isinstance(x, Data)
                else vec(x.a[:, i]) if type(x) is Vec else x) for x in xs]


@PRIMITIVES.kernel("while", does=Does.CONTROL, doc="`lax.while_loop` / `fori_loop` with concrete bounds: unrolled")
def _while(it: Interpreter, eqn: Any, invals: list) -> list:
    return while_loop(it, eqn, invals)


@PRIMITIVES.kernel("pjit", "jit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr",
      "checkpoint", "remat", "custom_lin", does=Does.CALL, doc="a nested function: evaluated inline")
def _call(it: Interpreter, eqn: Any, invals: list) -> list:
    from jax._src import core
    p = eqn.params
    sub = p.get("jaxpr") or p.get("call_jaxpr") or p.get("fun_jaxpr")
    if isinstance(sub, core.ClosedJaxpr):
        return it.run_closed(sub, invals)
    return it.run(sub, [], invals)


@PRIMITIVES.kernel("run_scoped", does=Does.CONTROL | Does.MEMORY | Does.SEMAPHORE, doc="`pl.run_scoped`: fresh scratch (VMEM holds garbage) and semaphores for the scope")
def _run_scoped(it: Interpreter, eqn: Any, invals: list) -> list:
    if eqn.params.get("collective_axes"):
        raise it.fail("run_scoped with collective axes", "allocate per core")
    body = eqn.params["jaxpr"]
    allocs = []
    for k, v in enumerate(body.invars):
        allocs.append(it.sink.scoped(it, eqn, k, v.aval))
    for a in allocs:
        if isinstance(a, Ref) and not a.buffer.store:
            a.buffer.shadow.pop(it.device, None)  # fresh memory: no integers known
            it.emit(Compute("allocate", it.region(a)))
    return it.run(body, invals, allocs)  # the scope's closed-over values are its constvars


@PRIMITIVES.kernel("empty_ref", does=Does.MEMORY, doc="`jax.empty_ref(aval, memory_space=...)` in a kernel: fresh scratch (VMEM holds garbage), as a `run_scoped` allocation")
def _empty_ref(it: Interpreter, eqn: Any, invals: list) -> list:
    a = it.sink.scoped(it, eqn, 0, eqn.outvars[0].aval)
    if isinstance(a, Ref) and not a.buffer.store:
        a.buffer.shadow.pop(it.device, None)  # fresh memory: no integers known
        it.emit(Compute("allocate", it.region(a)))
    return [a]


@PRIMITIVES.kernel("multiple_of", "pallas_multiple_of", does=Does.HINT, doc="an alignment hint: the value itself")
def _multiple_of(it: Interpreter, eqn: Any, invals: list) -> list:
    return [invals[0]]


@PRIMITIVES.kernel("delay", "trace_value", "add_dependency", does=Does.HINT, doc="no effect on memory or semaphores")
def _nothing(it: Interpreter, eqn: Any, invals: list) -> list:
    return [invals[0] if invals else None for _ in eqn.outvars]


@PRIMITIVES.kernel("debug_callback", "debug_print", does=Does.HINT, doc="printing: ignored (no memory or semaphore effect)")
def _print(it: Interpreter, eqn: Any, invals: list) -> list:
    return [None for _ in eqn.outvars]


@PRIMITIVES.kernel("prng_seed", does=Does.HINT,
                   doc="seeds the TensorCore's own PRNG (`pltpu.prng_seed`): no effect on memory or semaphores")
def _prng_seed(it: Interpreter, eqn: Any, invals: list) -> list:
    return [None for _ in eqn.outvars]


@PRIMITIVES.kernel("random_bits", "random_fold_in", "random_seed", "random_split", "random_unwrap", "random_wrap",
                   "prng_join", "prng_split", does=Does.PURE,
                   doc="`jax.random` on keys: JAX's value on concrete keys of an implementation JAX evaluates, else tensor data of unknown value")
def _random(it: Interpreter, eqn: Any, invals: list) -> list:
    if all(is_concrete(v) for v in invals):
        try:
            return _concrete(eqn, invals, None)
        except Exception:  # noqa: BLE001 - a Pallas key implementation (`pltpu.to_pallas_key`, the stateful
            pass           # samplers' seeds) has no evaluation outside a kernel: its bits are unknown data
        return [Data(tuple(o.aval.shape), ("opaque", f"`{eqn.primitive.name}` at line {int(it.where())}"))
                for o in eqn.outvars]
    return pure_rule(it, eqn, invals)


@PRIMITIVES.kernel("prng_random_bits", does=Does.PURE,
                   doc="the core's PRNG bits (`pltpu.prng_random_bits`): tensor data of unknown value, as any tensor data")
def _prng_random_bits(it: Interpreter, eqn: Any, invals: list) -> list:
    return [Data(tuple(o.aval.shape), ("opaque", f"random bits at line {int(it.where())}")) for o in eqn.outvars]


class Diverge(Exception):
    """Evaluating every device at once cannot go on: the devices take different branches, a
    value the model needs as one number differs between them, or one device's events are not
    device 0's translated. The caller then evaluates device by device."""


class Lanes:
    """Every device of the mesh evaluated at once, as device 0.

    The kernel runs once; a value that differs between devices is a `Vec` (one entry per
    device: `axis_index`, and what is computed from it), every other value is the plain
    value all devices share. Control flow, sizes, semaphore indices and increments must be
    shared (`Interpreter.scalar` raises `Diverge` on a `Vec`). Device-dependent values may
    reach the events only as
    - a remote target: it must be a translation, device d targeting d + t on the torus of
      the mesh axes (`target`);
    - a box start: every device's box must be device 0's moved by r . d (mod the dimension)
      for one step r per buffer dimension over the whole program (`place`; a box that does
      not move records r = 0), inside the dimension on every device (`index` checks).
    Then device d's events are exactly device 0's translated by d: the events are made from
    the same equations in the same order, and every field that differs between devices was
    checked to move that way. That is what a `SymmetricProgram` states (`steps` is its
    `steps`), the hypothesis of the quotient (`verify/symmetric/`), proved as
    `verify/rotation.py` proves it for YAML, here on every device's concrete values. So
    only device 0's events are recorded. Anything else raises `Diverge`, and the caller
    evaluates device by device (`program.Builder`), never assuming the symmetry."""

    def __init__(self, axis_sizes: dict[str, int]):
        from ..verify.rotation import Torus
        self.torus = Torus(axis_sizes.values())
        self.n = self.torus.n
        self.matrix = np.array([self.torus.unflat(d) for d in range(self.n)], dtype=np.int64).reshape(self.n, -1)
        self.coords = {a: vec(self.matrix[:, i]) for i, a in enumerate(axis_sizes)}
        self.steps: dict[tuple[str, int], tuple[int, ...]] = {}
        self._adders: dict[int, np.ndarray] = {}

    def target(self, t: Any) -> int:
        """Device 0's target t, after checking that every device d targets d + t."""
        t0 = int(t[0]) if isinstance(t, np.ndarray) else int(t)
        if not 0 <= t0 < self.n:
            raise Diverge("a target off the mesh")
        want = self._adders.get(t0)
        if want is None:
            want = self._adders[t0] = np.asarray(self.torus.adder(t0))
        if not np.array_equal(t, want):
            raise Diverge("a target that is not a translation of the device")
        return t0

    def place(self, ref: Ref) -> None:
        """Check that every device's box of `ref` is device 0's moved by the buffer
        dimension's step, recording the step (zero for a box that does not move)."""
        var = dict(ref.var)
        name, shape = ref.buffer.name, ref.buffer.shape
        for dim, (lo, hi) in enumerate(ref.box):
            extent = shape[dim]
            if hi - lo == extent:
                continue  # the whole dimension: any rotation keeps it
            starts = var.get(dim)
            if starts is None:
                r = (0,) * len(self.torus.shape)
            else:
                r = tuple(int(starts[s] - lo) % extent if size > 1 else 0  # a size-1 axis moves nothing
                          for s, size in zip(self.torus.strides, self.torus.shape))
                if not np.array_equal(starts, (lo + self.matrix @ np.asarray(r, dtype=np.int64)) % extent):
                    raise Diverge(f"`{name}` dimension {dim}: the boxes do not move by a fixed step per device")
            if self.steps.setdefault((name, dim), r) != r:
                raise Diverge(f"`{name}` dimension {dim} moves by {self.steps[(name, dim)]} and by {r}")

    def _boxes(self, ref: Ref) -> list[tuple]:
        var = dict(ref.var)
        out = []
        for d in range(self.n):
            out.append(tuple(slice(int(var[k][d]) if k in var else a, (int(var[k][d]) if k in var else a) + b - a)
                             if k in ref.kept else (int(var[k][d]) if k in var else a)
                             for k, (a, b) in enumerate(ref.box)))
        return out

    def read(self, ref: Ref) -> Any:
        """A read of a concrete store (SMEM, scalar prefetch): every device's own values."""
        buf = ref.buffer
        if any(d not in buf.store for d in range(self.n)) or buf.unset:
            raise Diverge(f"`{buf.name}` is known on some devices only")
        vals = [buf.store[d][sl] for d, sl in enumerate(self._boxes(ref))]
        return _py(vec(np.stack(vals)))

    def write(self, ref: Ref, value: Any) -> None:
        """A write to a concrete store, on every device (a value not known stops its store)."""
        buf = ref.buffer
        if any(d not in buf.store for d in range(self.n)):
            raise Diverge(f"`{buf.name}` is known on some devices only")
        if not (is_concrete(value) or type(value) is Vec):
            for d in range(self.n):
                buf.store.pop(d)
                buf.unset.pop(d, None)
            return
        for d, sl in enumerate(self._boxes(ref)):
            buf.store[d] = buf.store[d].copy()
            buf.store[d][sl] = value.a[d] if type(value) is Vec else value

    def pure(self, it: Interpreter, eqn: Any, invals: list) -> list:
        """An effect-free primitive on device values: elementwise numpy on every device's
        values at once, else the primitive per device (the results must then be values, or
        the same data on every device)."""
        name = eqn.primitive.name
        entry = PRIMITIVES.get(name)
        if entry is not None and entry.lanewise and all(type(v) is Vec or is_concrete(v) for v in invals):
            dt = [getattr(v.aval, "dtype", None) for v in eqn.invars]
            args = [v.a if type(v) is Vec else np.asarray(v, dtype=d) if d is not None else v
                    for v, d in zip(invals, dt)]
            rank = len(eqn.outvars[0].aval.shape)
            # Every device's lane first: a device's scalar broadcasts against an array operand.
            args = [a.reshape(a.shape[0], *(1,) * (rank + 1 - a.ndim), *a.shape[1:]) if type(v) is Vec
                    else a.reshape(1, *(1,) * (rank - a.ndim), *a.shape) if isinstance(a, np.ndarray) else a
                    for a, v in zip(args, invals)]
            with np.errstate(all="ignore"):
                r = entry.numpy(eqn.params, *args)
            return [vec(np.broadcast_to(np.asarray(r).astype(eqn.outvars[0].aval.dtype),
                                        (self.n, *eqn.outvars[0].aval.shape)))]
        per = [pure_rule(it, eqn, [v.a[d] if type(v) is Vec else v for v in invals]) for d in range(self.n)]
        outs = []
        for k in range(len(eqn.outvars)):
            col = [p[k] for p in per]
            if all(is_concrete(c) for c in col):
                outs.append(vec(np.stack([np.asarray(c) for c in col])))
            elif all(c == col[0] for c in col[1:]):
                outs.append(col[0])
            else:
                raise Diverge(f"`{name}` makes different data on different devices")
        return outs


class Sink:
    """Where an interpreter's events go, and how scratch and value registers are named; it
    lives as long as one check, and so do the caches it owns."""

    @functools.cached_property
    def templates(self) -> dict:
        """Each equation's params pytrees as fill-in templates (`_template`), by (equation, key)."""
        return {}

    def emit(self, device: int, point: tuple, line: Loc, action: Any, target: int | None,
             loops: tuple = ()) -> None:
        raise NotImplementedError

    def register(self, eqn: Any, line: Loc, shape: tuple[int, ...], dtype: Any) -> Buffer:
        raise NotImplementedError

    def discard_load(self, device: int, register: str) -> None:
        """The last load into `register` on `device` turned out to be thrown away (a where
        taking its other case): by default it stays a read."""

    def scoped(self, it: Interpreter, eqn: Any, k: int, aval: Any) -> Any:
        raise NotImplementedError


__all__ = ["internal_frame", "Interpreter", "Sink", "KernelError", "Lanes", "Diverge", "OwnIndex", "user_location", "store_actions", "pure_rule",
           "BARRIER", "FromMemory", "out_of_range", "apply_fn", "reference_pointwise"]


def rule_table_markdown() -> str:
    """The supported primitives as a markdown table (docs/pallas-import.md embeds it;
    tests/test_pallas_import.py checks the doc matches)."""
    groups: dict[str, list[str]] = {}
    for name in sorted(PRIMITIVES):
        if PRIMITIVES[name].kernel is not None:
            groups.setdefault(PRIMITIVES[name].doc, []).append(f"`{name}`")
    lines = ["| primitive | what ringc does with it |", "|---|---|"]
    for doc, names in sorted(groups.items(), key=lambda kv: kv[1][0]):
        lines.append(f"| {', '.join(names)} | {doc} |")
    lines.append("| any other primitive with no effects, refs or sub-jaxprs | pure: numpy/JAX on concrete "
                 "scalars; on tensors, followed by the meaning check: `add`, `sub`, `convert_element_type`, "
                 "`dot_general`, scaling by a constant (`mul`, `div`, `neg`), and any other elementwise "
                 "function of one tensor as an uninterpreted pointwise function; anything else is a value "
                 "not followed (a note) |")
    refused = [f"`{name}`" for name in sorted(PRIMITIVES) if Does.UNSUPPORTED in PRIMITIVES[name].does]
    lines.append(f"| {', '.join(refused)} | refused: effects or refs ringc does not model (an error naming it and "
                 "the line) |")
    lines.append("| any other primitive | an error naming it and the line |")
    return "\n".join(lines)
