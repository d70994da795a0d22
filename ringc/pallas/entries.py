"""The entry functions of a module of functions: which ringc calls, with what, and how.

A module that makes no kernel call at top level (JAX's `ops/tpu/all_gather.py`, a serving
framework's collective kernels) is checked by calling its *entry functions* under capture
(`script.py` records the kernels they run). `--entry NAME` names one; by default ringc calls
every public function that takes an axis name (a parameter `axis`, or one whose name ends in
`axis_name`: `ep_axis_name`, `mesh_axis_name`) and is not a kernel body (no `*_ref`,
`*_sem` parameters); when none does, every public function that takes a `mesh` (a factory
`make_exchange_call(mesh, *, capacity=128)` whose kernel names its axis itself). Real files
expose three shapes:

- **A global function** takes a `mesh`: it is called with ringc's mesh and global arrays
  sharded along the axis; it runs its own `jax.shard_map`.
- **A per-shard launcher** takes no `mesh` (only arrays, or an axis name too): it calls
  `pl.pallas_call` on one device's shards and must run inside `jax.shard_map`. ringc wraps
  it in `jax.jit(jax.shard_map(..., check_vma=False))` over its mesh, the arrays sharded by
  their specs. A global function that fails with JAX's "unbound axis name" (it reads the
  mesh for sizes but launches per shard) is run so too, and so is a function taking no
  arrays that fails so (it makes its own inputs), in a `shard_map` with no inputs.
- **A factory** returns a callable, or a tuple or list of callables (a `(start, wait)` pair).
  ringc calls the closures in order, the first on the arrays, each next one on the previous
  one's result (unpacked when it is a tuple of as many values as the closure takes), all in
  one jitted program, so a DMA started by one and waited by the next is one split-phase
  program. The closures are global when the factory took the mesh, else per-shard. A closure
  that `pl.pallas_call` returned takes the kernel's inputs (`pallas_call_inputs`): its
  arrays are named by the kernel's parameters without `_ref` (`--arg payload=...`).

**The mesh.** Its ring axis is `--axis NAME`, else the default of the function's first axis
parameter, else ringc's `x` (passed to that parameter when its default is `None`); every
other axis parameter with a default names a mesh axis of size 1 (`dp_axis_name="dp"` beside `ep_axis_name="ep"`), and `--mesh data=1,model=N` gives
the axes outright. When the call fails naming an axis the mesh lacks (`mesh.shape["tp"]`,
an unbound `lax.axis_index("tp")`, a `PartitionSpec("data", ...)`), ringc renames its own
`x` to it, or adds it with size 1 when the ring axis is set or the name means data or
pipeline parallelism (`data`, `dp`, `batch`, ...), and calls again (at most four times).

**The other arguments.** A parameter annotated with a dataclass and no default (a tuning config:
JAX's collective matmul takes `config: TuningConfig`) is built from `--param NAME.FIELD=V`, its
fields with defaults kept, an Enum field by a member's name (`_config`).
`--param k=v` gives integer keywords (or a word: `mode=one_shot`,
`true`/`false` booleans); a parameter with a default keeps it; `num_devices`, `world_size` and the like get N; one annotated `int` or `bool`
without a default needs `--param` (a clear error naming it); every other one is an array,
from `--arg NAME=DTYPE[DIMS]@SPEC` or `float32[8*N, 128]` sharded along the ring axis on
its first dimension. Every argument ringc made up is stated in the verdict
(`Capture.assumes`).
"""

from __future__ import annotations

import inspect
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..errors import ScheduleError
from .imports import MissingImport, missing_import
from .jaxprs import concrete_errors
from .tpu import nested_codes, unsupported_use
from .usererrors import describe_exception, script_line, user_failure

if TYPE_CHECKING:
    from .imports import Imports
    from .script import Script

__all__ = ["ArgSpec", "call_entries", "parse_arg", "parse_mesh", "axis_parameters"]

# Parameters that mean the device count along the axis: ringc passes N.
AXIS_SIZE_NAMES = ("num_devices", "n_devices", "num_shards", "world_size", "axis_size", "tp_size", "ep_size")
_KERNEL_BODY = ("_ref", "_refs", "_sem", "_sems")
_INT_HINTS = ("int", "bool")
# Annotations of values, not arrays (`flows: list[Flow]`): --param takes them as Python literals.
_LITERAL_HINTS = {"list": "[...]", "tuple": "(...)", "dict": "{...}", "sequence": "[...]", "set": "{...}"}
_RETRIES = 4  # calls again on a failure naming an axis, or run per shard
# Axis names that mean data or pipeline parallelism: a failure naming one adds it with size 1.
_DATA_AXES = ("data", "dp", "batch", "replica", "fsdp", "dcn", "pp", "stage")


@dataclass(frozen=True)
class ArgSpec:
    """`--arg x=bfloat16[8*N,128]@x,`: an array argument of an entry function, global shape
    (expressions in N), dtype and PartitionSpec entries (axis name or "" for unsharded)."""
    name: str
    dtype: str
    dims: tuple[str, ...]
    spec: tuple[str, ...]
    value: str | None = None  # `=EXPR` (numpy in N) or `=FILE.npy`: the global array's values; else zeros

    def text(self) -> str:
        value = "" if self.value is None else f"={self.value}"
        return f"{self.name}={self.dtype}[{','.join(self.dims)}]@{','.join(self.spec)}{value}"

    @property
    def made_up(self) -> bool:
        """An integer array ringc fills with zeros: what the kernel reads from it is made up."""
        return self.value is None and self.dtype != "bfloat16" and np.issubdtype(np.dtype(self.dtype), np.integer)


_DEFAULT_ARG = ("float32", ("8*N", "128"), None)  # one (8, 128) f32 tile per device, sharded on dim 0


def parse_arg(text: str) -> ArgSpec:
    """Parse `NAME=DTYPE[D0,D1,...]@A,B` with an optional `=VALUE` (a numpy expression in N, or
    a .npy file); raises ValueError naming what is wrong."""
    m = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*=\s*([A-Za-z0-9_]+)\s*\[([^\]]*)\]\s*(?:@([^=]*))?(?:=(.*))?", text)
    if not m:
        raise ValueError(f"--arg {text!r} is not NAME=DTYPE[DIMS]@SPEC or NAME=DTYPE[DIMS]@SPEC=VALUE, e.g. "
                         "x=float32[8*N,128]@x or 'sizes=int32[2*N]@=np.full(2*N, 8)'")
    name, dtype, dims, spec, value = m.group(1), m.group(2), m.group(3), m.group(4), m.group(5)
    if value is not None and not value.strip():
        raise ValueError(f"--arg {name}: nothing after `=`: give a numpy expression in N (np.arange(2*N)) or a "
                         ".npy file")
    value = None if value is None else value.strip()
    spec = None if spec is None else spec.strip()
    try:
        np.dtype(dtype) if dtype != "bfloat16" else None
    except TypeError:
        raise ValueError(f"--arg {name}: unknown dtype {dtype!r} (float32, bfloat16, int32, ...)") from None
    dims_t = tuple(d.strip() for d in dims.split(",") if d.strip())
    spec_t = tuple(a.strip() for a in spec.split(",")) if spec is not None else ()
    if not dims_t and spec_t == ("",):   # `length=int32[]@=32`: a 0-d array, nothing to shard
        spec_t = ()
    if len(spec_t) > len(dims_t):
        raise ValueError(f"--arg {name}: {len(spec_t)} sharding entries for {len(dims_t)} dimensions")
    return ArgSpec(name, dtype, dims_t, spec_t, value)


def axis_parameters(params: dict[str, inspect.Parameter]) -> list[inspect.Parameter]:
    """The parameters that take a mesh axis name: `axis`, a name ending in `axis_name`, or one
    ending in `_axis` whose default is a string (sglang-jax's `kv_partition_axis="tensor"`; an
    `_axis` defaulting to an int is an array dimension, and so is an `axis` annotated or
    defaulting to an int: recurrentgemma's `pad_array_to_divisible(x, divisor, axis: int)`)."""
    def dimension(p: inspect.Parameter) -> bool:
        return p.annotation in (int, "int") or (isinstance(p.default, int) and not isinstance(p.default, bool))
    return [p for p in params.values() if (p.name == "axis" and not dimension(p)) or p.name.endswith("axis_name")
            or (p.name.endswith("_axis") and isinstance(p.default, str))]


def parse_mesh(text: str) -> tuple[tuple[str, str], ...]:
    """`--mesh data=1,model=N`: the mesh's axes in order, each size an expression in N;
    raises ValueError naming what is wrong."""
    axes = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*=\s*([^=]+?)\s*", part)
        if not m:
            raise ValueError(f"--mesh {text!r}: {part.strip()!r} is not NAME=SIZE, e.g. data=1,model=N")
        if m.group(1) in [a for a, _ in axes]:
            raise ValueError(f"--mesh {text!r}: axis {m.group(1)!r} is named twice")
        axes.append((m.group(1), m.group(2)))
    return tuple(axes)


class _UnknownAxis(Exception):
    def __init__(self, axis: str):
        super().__init__(axis)
        self.axis = axis


def _named_axis(e: BaseException, axes: dict[str, int]) -> str | None:
    """The mesh axis a failure names that the mesh lacks (None if it names none)."""
    text = str(e)
    m = (re.search(r"unbound axis name: (\w+)", text) or re.search(r"refers to '(\w+)'", text)
         or re.search(r"Resource axis: (\w+) ", text))
    if (m is None and isinstance(e, KeyError) and len(e.args) == 1 and isinstance(e.args[0], str)
            and e.args[0].isidentifier()):
        return e.args[0] if e.args[0] not in axes else None
    return m.group(1) if m and m.group(1) not in axes else None


@dataclass
class _Layout:
    """The mesh ringc builds for one entry and why."""
    axes: dict[str, int]      # name -> size, in mesh order
    ring: str                 # the axis the collective runs along
    why: str                  # how the ring axis was chosen
    fixed: bool               # the axes came from --mesh or --axis (not renamed on a retry)
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        sizes = ", ".join(f"{k!r}: {v}" for k, v in self.axes.items())
        return f"mesh {{{sizes}}}, axis {self.ring!r} ({self.why})"


def _layout(n: int, params: dict[str, inspect.Parameter], axis: str | None,
            mesh: tuple[tuple[str, str], ...] | None, path: str, args: list[ArgSpec] = ()) -> _Layout:
    from ..ir import expr as E
    named = axis_parameters(params)
    defaults = [p.default[0] if isinstance(p.default, (tuple, list)) and p.default else p.default for p in named]
    defaults = [d if isinstance(d, str) else None for d in defaults]
    sharded = list(dict.fromkeys(a for spec in args for a in spec.spec if a))  # the --arg arrays' axes
    if axis is not None:
        ring, why, fixed = axis, "--axis", True
    elif defaults and defaults[0]:
        ring, why, fixed = defaults[0], f"the default of {named[0].name}", True
    elif len(sharded) == 1 and mesh is None:
        ring, why, fixed = sharded[0], "the axis the --arg arrays are sharded along", True
    else:
        ring, why, fixed = "x", "ringc's; set with --axis", False
    if mesh is not None:
        try:
            axes = {a: E.evaluate(E.parse(s), {"N": n}, exact_division=True) for a, s in mesh}
        except (E.ExprError, ZeroDivisionError) as e:
            raise ScheduleError(f"--mesh: {e}", file=path,
                                fix="sizes are integer expressions in N, e.g. data=1,model=N") from None
        total = math.prod(axes.values())
        if total != n:
            raise ScheduleError(f"--mesh {','.join(f'{a}={s}' for a, s in mesh)} has {total} devices, but --devices "
                                f"gives {n}", file=path, fix="make the sizes multiply to N, e.g. data=1,model=N")
        if axis is None and ring not in axes:
            ring = next((a for a, v in axes.items() if v == n), next(iter(axes)))
            why = "the --mesh axis of size N"
        if ring not in axes:
            raise ScheduleError(f"--axis {ring}: the --mesh has no such axis", file=path,
                                fix=f"name one of {', '.join(axes)}")
        return _Layout(axes, ring, why + ", --mesh", True)
    extra = {d: 1 for d in defaults[1:] if d and d != ring}
    return _Layout({**extra, ring: n}, ring, why, fixed,
                   [f"mesh axis {d!r} of size 1: the default of {p.name}" for p, d in zip(named[1:], defaults[1:])
                    if d and d != ring])


def _hint(p: inspect.Parameter) -> str:
    a = p.annotation
    if a is inspect.Parameter.empty:
        return ""
    text = a if isinstance(a, str) else getattr(a, "__name__", repr(a))
    return text.rsplit(".", 1)[-1].strip().lower()


def _config_class(p: inspect.Parameter) -> Any:
    """The dataclass a parameter is annotated with (a tuning config: `config: TuningConfig`), or None."""
    import dataclasses
    a = p.annotation
    return a if isinstance(a, type) and dataclasses.is_dataclass(a) else None


def _config(p: inspect.Parameter, keywords: dict[str, Any], where: tuple[str, int, str]) -> Any:
    """A dataclass argument from `--param NAME.FIELD=V` for each of its fields (a field with a
    default keeps it; an Enum field takes a member's name or value)."""
    import dataclasses
    import enum
    cls = _config_class(p)
    given = {k.split(".", 1)[1]: v for k, v in keywords.items() if k.startswith(f"{p.name}.")}
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(given) - set(fields))
    if unknown:
        raise ScheduleError(f"--param {p.name}.{unknown[0]}: {cls.__name__} has no field `{unknown[0]}`",
                            file=where[0], line=where[1], fix=f"its fields: {', '.join(fields)}")
    missing = [f.name for f in fields.values() if f.name not in given and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ScheduleError(f"{where[2]}: parameter `{p.name}` is a {cls.__name__}, and ringc cannot make one up",
                            file=where[0], line=where[1],
                            fix="pass its fields: " + " ".join(f"--param {p.name}.{m}=V" for m in missing))
    values = {}
    for name, v in given.items():
        kind = fields[name].type
        kind = kind if isinstance(kind, type) else None
        if kind is not None and issubclass(kind, enum.Enum) and not isinstance(v, kind):
            try:
                v = kind[v] if isinstance(v, str) and v in kind.__members__ else kind(v)
            except ValueError:
                raise ScheduleError(f"--param {p.name}.{name}={v}: not an {kind.__name__} member", file=where[0],
                                    line=where[1], fix=f"one of {', '.join(kind.__members__)}") from None
        values[name] = v
    try:
        return cls(**values)
    except (TypeError, ValueError) as e:
        raise ScheduleError(f"--param {p.name}.*: {cls.__name__} refuses them: {e}", file=where[0], line=where[1],
                            fix=f"give {cls.__name__}'s fields as its definition wants them") from None


@dataclass
class _Binding:
    """The arguments of one call: keywords, array parameters (with their specs) and what was made up."""
    call: dict[str, Any]
    arrays: dict[str, ArgSpec]
    made: list[str]
    positional_only: list[str]


def _bind(params: dict[str, inspect.Parameter], layout: _Layout, n: int, given: dict[str, ArgSpec],
          keywords: dict[str, int], axis_given: bool, where: tuple[str, int, str], mesh: Any) -> _Binding:
    """Each parameter's argument (module docstring); `where` is the function's (file, line, name)."""
    call: dict[str, Any] = {}
    arrays: dict[str, ArgSpec] = {}
    made: list[str] = []
    unmade: list = []   # the int, str and float parameters without a default (no --param)
    named = axis_parameters(params)
    for p in params.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name in keywords:
            call[p.name] = keywords[p.name]
            made.append(f"{p.name}={keywords[p.name]}")
        elif _config_class(p) is not None and (p.default is p.empty or any(k.startswith(f"{p.name}.")
                                                                             for k in keywords)):
            call[p.name] = _config(p, keywords, where)
            made.append(f"{p.name}={call[p.name]!r}")
        elif p.name == "mesh":
            call[p.name] = mesh
        elif p in named:  # the first one gets the ring axis unless its default names one; others keep defaults
            if p.default is p.empty or (p is named[0] and (axis_given or not isinstance(p.default, (str, tuple)))):
                call[p.name] = layout.ring  # stated with the mesh (`_Layout.text`)
        elif p.name in given:
            arrays[p.name] = given[p.name]
            made.append(given[p.name].text())
        elif p.default is not p.empty:
            continue  # kept as it is
        elif p.name in AXIS_SIZE_NAMES:
            call[p.name] = n
            made.append(f"{p.name}={n} (N)")
        elif _hint(p) in _INT_HINTS or _hint(p) in ("str", "float") or _hint(p) in _LITERAL_HINTS:
            unmade.append(p)   # said at once, every one of them, below
        else:
            arrays[p.name] = ArgSpec(p.name, _DEFAULT_ARG[0], _DEFAULT_ARG[1], (layout.ring,))
            made.append(arrays[p.name].text() + " (default; set with --arg)")
    if unmade:   # one message for them all, so a user passes every --param in one run
        # (--param takes an integer, a word, a float or a Python literal: every one of them)
        shown = {"str": "WORD", "float": "1.0"}
        fix = " ".join(f"--param {p.name}={_LITERAL_HINTS.get(_hint(p)) or shown.get(_hint(p), 'V')}" for p in unmade)
        listed = ", ".join(f"`{p.name}` ({_hint(p)})" for p in unmade)
        raise ScheduleError(f"{where[2]}: parameter{'s' if len(unmade) > 1 else ''} {listed} "
                            f"{'have' if len(unmade) > 1 else 'has'} no default, and ringc cannot make "
                            f"{'them' if len(unmade) > 1 else 'one'} up", file=where[0], line=where[1],
                            fix=f"pass {fix}")
    positional_only = [p.name for p in params.values() if p.kind == p.POSITIONAL_ONLY]
    return _Binding(call, arrays, made, positional_only)


def _global_array(a: ArgSpec, mesh: Any, n: int, path: str) -> Any:
    import jax
    from ..ir import expr as E
    try:
        shape = tuple(E.evaluate(E.parse(d), {"N": n}, exact_division=True) for d in a.dims)
    except (E.ExprError, ZeroDivisionError) as e:
        raise ScheduleError(f"--arg {a.text()}: {e}", file=path,
                            fix="dimensions are integer expressions in N, e.g. 8*N") from None
    missing = [s for s in a.spec if s and s not in mesh.shape]
    if missing:
        raise ScheduleError(f"--arg {a.text()}: the mesh has no axis {missing[0]!r} (its axes: "
                            f"{', '.join(mesh.shape)})", file=path, fix=f"shard along one of {', '.join(mesh.shape)}")
    for dim, (size, axis) in enumerate(zip(shape, a.spec)):
        if axis and size % mesh.shape[axis]:
            raise ScheduleError(f"--arg {a.text()}: dimension {dim} ({size} at N = {n}) does not split over the "
                                f"{mesh.shape[axis]} devices along {axis!r}", file=path,
                                fix="make it a multiple of the axis size, e.g. 8*N")
    dtype = jax.numpy.dtype(a.dtype)
    values = jax.numpy.zeros(shape, dtype) if a.value is None else arg_value(a, shape, dtype, n, path)
    return jax.device_put(values, jax.sharding.NamedSharding(mesh, _spec(a)))


def arg_value(a: ArgSpec, shape: tuple[int, ...], dtype: Any, n: int, path: str) -> np.ndarray:
    """The global values `--arg NAME=...=VALUE` gives: a .npy file, or a numpy expression in N
    (`np`, `N` and `math` are its names); a scalar fills the array. An error names what is
    wrong: the expression's own exception, a shape or values that the declared array cannot
    hold."""
    dims = a.dims[0] if len(a.dims) == 1 else f"({', '.join(a.dims)})"
    fix = (f"give a numpy expression in N of shape {list(shape)} (at N = {n}), e.g. "
           f"--arg '{a.name}={a.dtype}[{','.join(a.dims)}]@{','.join(a.spec)}=np.full({dims}, 1)', or a .npy file")
    if a.value.endswith(".npy"):
        try:
            got = np.load(a.value, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise ScheduleError(f"--arg {a.name}: cannot read {a.value}: {e}", file=path, fix=fix) from None
    else:
        import math
        try:
            got = eval(a.value, {"__builtins__": {}, "np": np, "numpy": np, "math": math, "N": n})  # noqa: S307
        except Exception as e:  # noqa: BLE001 - the user's expression: its error, said once
            raise ScheduleError(f"--arg {a.name}: the value `{a.value}` failed at N = {n}: "
                                f"{type(e).__name__}: {e}", file=path, fix=fix) from None
    try:
        got = np.asarray(got)
    except Exception as e:  # noqa: BLE001
        raise ScheduleError(f"--arg {a.name}: the value `{a.value}` is no array ({type(e).__name__}: {e})",
                            file=path, fix=fix) from None
    if got.ndim == 0:
        got = np.full(shape, got)
    if got.shape != shape:
        raise ScheduleError(f"--arg {a.name}: the value `{a.value}` has shape {list(got.shape)} at N = {n}, the "
                            f"declared [{', '.join(a.dims)}] is {list(shape)}", file=path, fix=fix)
    if got.dtype.kind not in "biuf":
        raise ScheduleError(f"--arg {a.name}: the value `{a.value}` holds {got.dtype}, not numbers", file=path,
                            fix=fix)
    cast = got.astype(dtype)
    if got.dtype.kind in "biu" or dtype.kind in "biu":
        bad = np.flatnonzero(cast.astype(np.float64) != got.astype(np.float64))
        if bad.size:
            at = np.unravel_index(bad[0], shape)
            raise ScheduleError(f"--arg {a.name}: the value `{a.value}` holds {got[at].item()!r} at "
                                f"{list(int(i) for i in at)}, which {a.dtype} cannot hold", file=path, fix=fix)
    return cast


def _spec(a: ArgSpec) -> Any:
    import jax
    return jax.sharding.PartitionSpec(*[s or None for s in a.spec])


def pallas_call_inputs(fn: Callable) -> list[str] | None:
    """The inputs of a function `pl.pallas_call(kernel, ...)` returned (a factory's closure):
    the kernel's first parameters, as many as it has inputs (its parameters less its outputs
    and scratch), named without `_ref` (`payload_ref` -> `payload`); None for any other
    callable. Its own signature is `(*args)`, which says neither."""
    wrapped = getattr(fn, "__wrapped__", None)
    if getattr(wrapped, "__qualname__", "") != "_pallas_call.<locals>.wrapped":
        return None
    try:
        import jax
        found = inspect.getclosurevars(wrapped).nonlocals
        kernel, outs, grid_spec = found["kernel"], found["flat_out_shapes"], found["grid_spec"]
        params = list(inspect.signature(kernel).parameters)
        scratch = len(jax.tree.leaves(getattr(grid_spec, "scratch_shapes", ()) or ()))
        k = len(params) - len(outs) - scratch
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in inspect.signature(kernel).parameters.values()):
        return None  # `def kernel(*refs)`: the count is not in the signature
    if not 0 <= k <= len(params):
        return None
    return [p[:-len("_ref")] if p.endswith("_ref") and len(p) > 4 else p for p in params[:k]]


def _closure_name(fn: Callable) -> str:
    """How the verdict names a factory's closure: its name, or `pl.pallas_call(kernel)`."""
    wrapped = getattr(fn, "__wrapped__", None)
    if pallas_call_inputs(fn) is not None:
        kernel = inspect.getclosurevars(wrapped).nonlocals["kernel"]
        return f"pl.pallas_call({getattr(kernel, '__name__', 'kernel')})"
    return getattr(fn, "__name__", "closure")


def _required(fn: Callable) -> int | None:
    """How many positional arguments `fn` needs (None when its signature cannot be read)."""
    inputs = pallas_call_inputs(fn)
    if inputs is not None:
        return len(inputs)
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    required = sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty)
    if not required and any(p.kind == p.VAR_POSITIONAL for p in params):
        return None  # `(*args)`: a jitted function (`jax.jit(jax.shard_map(...))`) says nothing
    return required


def _chain(closures: list[Callable], values: tuple) -> Any:
    """Call the closures in order: the first on `values`, each next one on the previous result."""
    out = closures[0](*values)
    for c in closures[1:]:
        out = c(*out) if isinstance(out, (tuple, list)) and _required(c) == len(out) and len(out) > 1 else c(out)
    return out


def _closures(result: Any) -> list[Callable] | None:
    """A factory's closures: a callable, or a tuple or list of callables (None otherwise)."""
    if callable(result) and not hasattr(result, "shape"):
        return [result]
    if isinstance(result, (tuple, list)) and result and all(callable(r) and not hasattr(r, "shape") for r in result):
        return list(result)
    return None


def _per_shard(body: Callable, mesh: Any, specs: list[Any], ring: str, arrays: list[Any]) -> Any:
    """Run `body` on the arrays' shards under one jitted `jax.shard_map` (check_vma=False);
    every output of rank 1 or more is sharded along the ring axis on its first dimension."""
    import jax
    P = jax.sharding.PartitionSpec
    # (a script's `jax.set_mesh(...)` before, a global context mesh, would not match ringc's)
    with jax.set_mesh(mesh):
        probe = jax.shard_map(body, mesh=mesh, in_specs=tuple(specs), out_specs=P(), check_vma=False)
        shapes = jax.eval_shape(probe, *arrays)
        out_specs = jax.tree.map(lambda s: P(ring) if getattr(s, "ndim", 0) else P(), shapes)
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=tuple(specs), out_specs=out_specs,
                                     check_vma=False))(*arrays)


def _run(fn: Callable, b: _Binding, mesh: Any, layout: _Layout, n: int, path: str, per_shard: bool,
         given: dict[str, ArgSpec], notes: list[str], enclose: bool = False) -> list[ArgSpec]:
    """One call of the entry, the way its shape asks (module docstring); `notes` gets the
    statements about how it was called; returns the arrays it was called on. `enclose`: a
    function taking no arrays that launches per shard (it makes its own inputs) runs inside
    `shard_map` too. The mesh is the ambient one (`jax.set_mesh`), as its callers set it: a
    function whose `jax.shard_map` names no mesh (sglang-jax's kv-cache update) uses it."""
    import jax
    with jax.set_mesh(mesh):
        return _run_on(fn, b, mesh, layout, n, path, per_shard, given, notes, enclose)


def _run_on(fn: Callable, b: _Binding, mesh: Any, layout: _Layout, n: int, path: str, per_shard: bool,
            given: dict[str, ArgSpec], notes: list[str], enclose: bool) -> list[ArgSpec]:
    names = list(b.arrays)
    values = [_global_array(b.arrays[k], mesh, n, path) for k in names]
    specs = [_spec(b.arrays[k]) for k in names]

    def call(arrays: list[Any]) -> Any:
        kw = {**b.call, **dict(zip(names, arrays))}
        return fn(*[kw.pop(k) for k in b.positional_only if k in kw], **kw)

    if names and not per_shard:
        call(values)
        return list(b.arrays.values())
    if names:
        def body(*shards):
            return call(list(shards))
        notes.append("per shard: ringc ran it under jax.shard_map over the mesh (check_vma=False), its arrays "
                      "sharded by their specs")
        _per_shard(body, mesh, specs, layout.ring, values)
        return list(b.arrays.values())
    if enclose:
        notes.append("per shard, with no arrays: ringc ran it under jax.shard_map over the mesh (check_vma=False)")
        _per_shard(lambda: call([]), mesh, [], layout.ring, [])
        return []
    result = call([])
    closures = _closures(result)
    if closures is None:
        return []
    first = closures[0]
    k = _required(first)
    if k is None and given and pallas_call_inputs(first) is None:
        args = list(given.values())  # a closure of unknown arity (`(*args)`): the --arg arrays, in order
    else:
        k = 1 if k is None else k
        try:
            pnames = pallas_call_inputs(first) or [p for p in inspect.signature(first).parameters][:k]
        except (TypeError, ValueError):
            pnames = [f"arg{i}" for i in range(k)]
        if pnames == ["args"]:  # `(*args)` without --arg: one array, named as the default
            pnames = ["x"]
        args = [given.get(p) or ArgSpec(p, _DEFAULT_ARG[0], _DEFAULT_ARG[1], (layout.ring,)) for p in pnames]
    values = [_global_array(a, mesh, n, path) for a in args]
    names_text = ", ".join(_closure_name(c) for c in closures)
    made = ", ".join(a.text() + ("" if a.name in given else " (default; set with --arg)") for a in args)
    order = "in order, each on the previous one's result, in one jitted program" if len(closures) > 1 else ""
    if "mesh" in b.call and not per_shard:
        notes.append(f"a factory: it returned {names_text}; ringc called {'them ' + order if order else 'it'} on "
                     f"{made}")
        import jax
        try:  # traced, as the caller's jit would (eagerly, `pl.kernel(out_type=pltpu.HBM(...))` fails)
            jax.jit(lambda *a: _chain(closures, a))(*values)
        except concrete_errors():  # a closure that needs concrete values (`int(n)`): run as it is
            _chain(closures, values)
        return args
    notes.append(f"a factory: it returned {names_text}; ringc called {'them ' + order if order else 'it'} per "
                 f"shard under jax.shard_map over the mesh (check_vma=False), on {made}")
    _per_shard(lambda *a: _chain(closures, a), mesh, [_spec(a) for a in args], layout.ring, values)
    return args


def _refuse_kernel_body(env: dict, entry: str, fn: Any, path: str) -> None:
    """`--entry` naming a kernel body (`*_ref`, `*_sem` parameters: refs and semaphores, which
    only `pl.pallas_call` or `pl.kernel` make): one message naming the module's functions that
    launch it, or saying that none does (ringc cannot make semaphores up as arrays)."""
    target = inspect.unwrap(fn)
    try:
        params = list(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return
    body = [p for p in params if p.endswith(_KERNEL_BODY)]
    if not body:
        return
    launchers = sorted(k for k, v in env.items() if k != entry and inspect.isfunction(inspect.unwrap(v))
                       and entry in _names_used(inspect.unwrap(v).__code__))
    try:
        line = inspect.getsourcelines(target)[1]
    except (OSError, TypeError):
        line = None
    fix = (f"name the function that launches it: --entry {launchers[0]}" + (f" (or {', '.join(launchers[1:4])})"
                                                                            if launchers[1:] else "")
           if launchers else
           "the file only defines the kernel: check the code that launches it (its own file), or launch it "
           "from Python with ringc.check_pallas(fn, args, mesh)")
    raise ScheduleError(f"--entry {entry}: `{entry}` is a kernel body (its parameters {', '.join(body[:4])} are refs "
                        "and semaphores, which pl.pallas_call or pl.kernel makes), not a function ringc can call "
                        "with arrays", file=path, line=line, fix=fix)


def _names_used(code: Any) -> set[str]:
    """The global names a function's code (and the functions defined in it) reads."""
    return {name for c in nested_codes(code) for name in c.co_names}


def _entries(env: dict, entry: str | None, path: str) -> list[tuple[str, Any]]:
    """The functions ringc calls (module docstring)."""
    if entry is not None:
        fn = env.get(entry)
        if not callable(fn):
            names = sorted(_module_functions(env))
            raise ScheduleError(f"--entry {entry}: the module has no function of that name", file=path,
                                fix=f"name one of: {', '.join(names[:12]) or '(none)'}")
        _refuse_kernel_body(env, entry, fn, path)
        return [(entry, fn)]
    out, of_mesh = [], []
    for name, fn in env.items():
        target = inspect.unwrap(fn) if callable(fn) else None
        if name.startswith("_") or not inspect.isfunction(target) or target.__module__ != env["__name__"]:
            continue
        params = inspect.signature(target).parameters
        if any(p.endswith(_KERNEL_BODY) for p in params):
            continue
        if axis_parameters(params):
            out.append((name, fn))
        elif "mesh" in params:
            of_mesh.append((name, fn))
    # With no function taking an axis name, the functions taking a mesh (factories such as
    # `make_exchange_call(mesh, *, capacity=128)`, whose kernels name their axis themselves).
    return out or of_mesh


def _module_functions(env: dict) -> list[str]:
    """The names `--entry` takes, for the messages that list them: the functions the module
    itself defines that run a kernel (`_launchers`; private ones too: levanter's only
    launcher is `_forward_core`), then its other public functions, each in definition order;
    not kernel bodies (they take refs), not ringc's stand-ins (its `print`), not imports."""
    own = {k: inspect.unwrap(v) for k, v in env.items() if callable(v) and inspect.isfunction(inspect.unwrap(v))
           and inspect.unwrap(v).__module__ == env["__name__"]}
    own = {k: f for k, f in own.items() if not any(p.endswith(_KERNEL_BODY) for p in inspect.signature(f).parameters)}
    launchers = _launchers(own)
    return [k for k in own if k in launchers] + [k for k in own if k not in launchers and not k.startswith("_")]


def _launchers(functions: dict[str, Callable]) -> set[str]:
    """The functions that run a kernel: those naming `pallas_call`, `core_map` or `pl.kernel`
    in their code (nested functions included), and those calling one of them."""
    names = {k: {n for c in nested_codes(f.__code__) for n in c.co_names} for k, f in functions.items()}
    found = {k for k, ns in names.items() if ns & {"pallas_call", "core_map"} or {"pl", "kernel"} <= ns}
    while True:
        more = {k for k, ns in names.items() if k not in found and ns & found}
        if not more:
            return found
        found |= more


def call_entries(script: Script, env: dict, entry: str | None, args: list[ArgSpec],
                 keywords: dict[str, int] | None = None, *, axis: str | None = None,
                 mesh: tuple[tuple[str, str], ...] | None = None, imports: "Imports | None" = None) -> None:
    """Call the module's entry functions under capture (the kernels they run are recorded in
    `script.captures`, each with `assumes`: how ringc called it). A required argument ringc
    cannot make up is an error when nothing else ran a kernel."""
    tried: list[str] = []
    problems: list[ScheduleError] = []
    before_all = len(script.captures)
    if entry is not None and not callable(env.get(entry)) and script.missing is not None:
        raise script.missing   # the import that failed is why the module defines no such function
    entries = _entries(env, entry, script.path)
    _check_keywords(entries, keywords or {}, script.path)
    for name, fn in entries:
        refused = unsupported_use(fn)
        if refused is not None and script.answers is not None:  # SparseCore, Mosaic GPU: not called
            script.answers.unsupported.append(refused)
            tried.append(f"{name} was not called ({refused.what})")
            continue
        try:
            tried.append(_call_entry(script, name, fn, args, dict(keywords or {}), axis, mesh, imports))
        except ScheduleError as e:
            problems.append(e)
            tried.append(f"{name} was not called ({e.message})")
    if problems and len(script.captures) == before_all:
        # a package not installed first: another entry's refusal (a parameter without a default) may follow from it
        # (the module's own top-level import that failed first: flows.py's `import tpu_init` came
        # after `--param repeats`, one more run for the user)
        missing = script.missing if isinstance(script.missing, MissingImport) else next(
            (p for p in problems if isinstance(p, MissingImport)), None)
        if missing is not None or entry is not None:
            raise missing or problems[0]
        # ringc chose the functions: say which, and the others it could have called
        chosen = [name for name, _ in entries]
        others = [k for k in _module_functions(env) if k not in chosen]
        takes = "an axis name" if any(axis_parameters(inspect.signature(inspect.unwrap(fn)).parameters)
                                      for _, fn in entries) else "a mesh"
        first = problems[0]
        raise ScheduleError(first.message, file=first.file, line=first.line,
                            fix=f"{first.fix}; or name the function that runs the kernel with --entry NAME (ringc "
                                f"called {', '.join(chosen)}, which take{'s' if len(chosen) == 1 else ''} {takes}"
                                f"{'; the module also has ' + ', '.join(others[:8]) if others else ''})")
    if tried:
        script.notes.append("entry functions ringc called: " + "; ".join(tried))
    elif entry is None:
        public = _module_functions(env)
        script.notes.append("no entry function: none takes an axis name (name one with --entry"
                            + (f": the module's functions are {', '.join(public[:8])}, those that run a "
                               "kernel first)" if public else ")"))
    script.entry_line = 0
    script.test = None


def _check_keywords(entries: list[tuple[str, Any]], keywords: dict[str, int], path: str) -> None:
    """Every `--param` names a parameter of an entry function (one taking `**kwargs` takes any)."""
    takes: set[str] = set()
    for _, fn in entries:
        params = inspect.signature(inspect.unwrap(fn)).parameters
        if any(p.kind == p.VAR_KEYWORD for p in params.values()):
            return
        takes |= set(params)
    unknown = [k for k in keywords if k not in takes and k.split(".", 1)[0] not in takes]
    if entries and unknown:
        names = ", ".join(name for name, _ in entries[:4])
        raise ScheduleError(f"--param {unknown[0]}: no entry function takes it ({names})", file=path,
                            fix=f"name one of their parameters: {', '.join(sorted(takes)[:12])}")


def _forget(script: Script, before: int) -> None:
    """Drop the captures of a failed attempt (a retry records its own)."""
    dropped = {id(c) for c in script.captures[before:]}
    del script.captures[before:]
    for key in [k for k, c in script.seen.items() if id(c) in dropped]:
        del script.seen[key]


def _call_entry(script: Script, name: str, fn: Callable, args: list[ArgSpec], keywords: dict[str, int],
                axis: str | None, mesh_axes: tuple[tuple[str, str], ...] | None, imports: "Imports | None") -> str:
    """Call one entry function (retrying with the axes its failures name); the note saying what it ran."""
    import jax
    n = script.n
    target = inspect.unwrap(fn)
    params = dict(inspect.signature(target).parameters)
    try:
        line = inspect.getsourcelines(target)[1]
    except (OSError, TypeError):
        line = 0
    layout = _layout(n, params, axis, mesh_axes, script.path, args)
    # A function that takes the mesh, or runs its own `shard_map` (on the ambient mesh, as
    # sglang-jax's kv-cache update: under ringc's shard_map it would split each shard again),
    # is called on the global arrays; else per shard.
    code = getattr(target, "__code__", None)
    per_shard = "mesh" not in params and not (code is not None and "shard_map" in _names_used(code))
    # One chip's function (levanter's `_forward_core(x, W, ...)` with `--arg x=float32[2,256,128]@`):
    # no axis name to take, none given, its arrays not sharded: called as its callers do, outside
    # shard_map (N = 1). A kernel naming an axis then fails unbound, and runs per shard (below).
    if per_shard and args and not axis_parameters(params) and axis is None and mesh_axes is None \
            and not any(a for spec in args for a in spec.spec):
        per_shard = False
        layout.notes.append("one chip's call: the function takes no axis name and its --arg arrays are not "
                            "sharded, so ringc called it outside shard_map")
    enclose = False
    given = {a.name: a for a in args}
    failed = ""
    guessed = None  # ringc's guessed ring axis, once a failure renamed it
    for _ in range(_RETRIES + 1):
        mesh = jax.make_mesh(tuple(layout.axes.values()), tuple(layout.axes),
                             axis_types=(jax.sharding.AxisType.Auto,) * len(layout.axes),
                             devices=jax.devices()[:n])
        b = _bind(params, layout, n, given, keywords, axis is not None, (script.path, line, name), mesh)
        notes: list[str] = []
        script.test = f"{name}({', '.join(b.made)})"
        script.entry_line = line
        before = len(script.captures)
        stub_calls = len(imports.calls) if imports else 0
        try:
            used = _run(fn, b, mesh, layout, n, script.path, per_shard, given, notes, enclose)
            failed = ""
        except ScheduleError:
            raise
        except Exception as e:  # noqa: BLE001 - the user's function failed: say so, or retry on the axis it names
            _forget(script, before)
            missing = missing_import(e, script.path, imports)
            if missing is not None:  # an import inside the function
                raise missing from None
            user_failure(e, script.path)  # a question the stand-in TPU devices cannot answer stops the check
            text = str(e)
            blame = imports.blame(text, stub_calls, type(e).__name__) if imports else ""
            at = script_line(e, script.path)   # where in the file (a helper called with the wrong arity)
            failed = (describe_exception(e, script.path) + blame
                      + (f" (at line {at})" if at is not None and str(e).strip() else ""))
            unknown = _named_axis(e, layout.axes)
            if unknown is None and "unbound axis name" in text and not (per_shard and (b.arrays or enclose)):
                if per_shard:
                    enclose = True  # no arrays: it makes its inputs, and launches per shard
                else:
                    per_shard = True  # it takes the mesh for its sizes, but launches per shard
                    layout.notes.append("it failed outside shard_map (unbound axis name): ringc ran it per shard")
                continue
            if unknown is None:
                break
            if not layout.fixed and unknown not in _DATA_AXES:  # ringc's `x` was a guess: take the function's name
                guessed = layout.ring
                layout = _Layout({unknown if k == layout.ring else k: v for k, v in layout.axes.items()}, unknown,
                                 "the name the function uses; set with --axis", True, layout.notes)
            elif unknown == guessed and layout.axes.get(layout.ring) == n:
                # the guess was one of the function's axes after all: the ring is it (the first one
                # its failures named is the other), which takes the N devices; the other is size 1
                other, layout.ring = layout.ring, unknown
                layout.axes = {unknown: n, other: 1}
                layout.why = "the first axis the function uses, of the two it names; set with --axis or --mesh"
                layout.notes.append(f"mesh axis {other!r} of size 1: the function uses it (set with --mesh)")
            else:
                layout.axes = {unknown: 1, **layout.axes}
                layout.notes.append(f"mesh axis {unknown!r} of size 1: the function uses it (set with --mesh)")
            continue
        for cap in script.captures[before:]:
            cap.assumes = [f"ringc called {cap.test} with {layout.text()}", *layout.notes, *notes]
            cap.made_up = [a for a in used if a.made_up]
            cap.shaped = [a for a in used if a.name not in given]
        break
    ran = len(script.captures) - before
    if ran:
        return f"{name} ran {ran} kernel call{'s' if ran != 1 else ''}"
    # A switch with a default may pick the lax path (`mode="auto"`): name the keywords that
    # could pick the kernel instead.
    # (words first: `mode='auto'` picks a path more often than a flag like `tiled=True` does)
    kept = sorted((p for p in params.values()
                   if isinstance(p.default, (str, bool)) and p.name not in keywords
                   and not p.name.endswith("axis_name") and p.name != "axis"),
                  key=lambda p: not isinstance(p.default, str))
    switches = [f"{p.name}={p.default!r}" for p in kept]
    hint = (f"; it kept its defaults {', '.join(switches)}: if one of them chooses the kernel, pass it, e.g. "
            f"--param {kept[0].name}=VALUE") if switches and not failed else ""
    if switches and not failed:
        script.entry_switches += [f"--param {p.name}=VALUE (its default {p.default!r})" for p in kept]
    # Arrays ringc made with its default shape (one (8, 128) tile per device) may be smaller
    # than the kernel's blocks (a grid of 0 steps, a shape assert): say which, and how to size them.
    made = [a for a in b.arrays.values() if a.name not in given]
    if failed:
        # (the arrays ringc made up for parameters it had no value for: a flag or a dict taken
        # for an array fails far from its cause, as a custom_vjp's nondiff_argnums in ring attention)
        script.entry_errors.append((name, failed, f"ringc passed arrays it made for {', '.join(f'`{a.name}`' for a in made)}"
                                                  " (pass those that are not arrays with --param NAME=VALUE)"
                                    if made else ""))
    if failed and made:
        hint += (f"; ringc made {', '.join(a.text() for a in made)} (its default, one (8, 128) tile per device): "
                 f"if the kernel's blocks need more, size them: --entry {name} "
                 + " ".join(f"--arg {a.name}=float32[ROWS,COLS]@{','.join(a.spec)}" for a in made))
    elif made and not failed:   # `build(mesh, shift, repeats)`: numbers ringc took for arrays
        script.entry_numbers += [f"--param {a.name}=V" for a in made]
        hint += (f"; ringc made arrays for {', '.join(f'`{a.name}`' for a in made)} (no default, no annotation): "
                 f"if they are numbers or words, pass them: " + " ".join(f"--param {a.name}=V" for a in made))
    return f"{name} ran no kernel ({failed or 'no pallas_call under jit'}{hint})"
