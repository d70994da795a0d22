"""Unroll a schedule for a concrete N: every device, every grid point, every op.

This is where N-dependent bad input is caught: shapes that do not divide, indices out of
range, regions whose shapes do not match. Those raise `ScheduleError` with the line and
the device/step where it first happens. Bugs of the schedule itself (a wrong target, a
hang, a race) are not errors here: they are findings of the later checks.
"""

from __future__ import annotations

import itertools
from functools import cached_property
from math import prod
from typing import Any, Callable

from ..ir import expr as E
from ..ir import schema as S
from ..ir.dtypes import itemsize
from .. import limits
from ..errors import ScheduleError
from ..ir.rules import RuleTable
from ..ir.resolve import axis_size_env, call_buffers, pipeline_windows, resolved, walk_ops
from .calls import Handover, entry_sync
from .events import (BARRIER, DEVICE_BARRIER, SECOND_BARRIER, Action, Compute, DmaStart, Event, Program, Region,
                     SemId, SemWait, Signal, remapped)

__all__ = ["node_inputs", "window_id", "DataFault", "Unroller", "unroll", "point_env", "buffer_shapes", "UNROLL",
           "actions_rule", "data_dependent", "program_semaphores"]


class DataFault(ScheduleError):
    """Runtime data (`--data`) that makes a region leave its buffer, e.g. a ragged size that
    overflows the receive buffer: a finding of that sample (`out_of_bounds`), not bad
    input. `device`, `point` and `line` say where it first happens."""

    def __init__(self, message: str, *, file: str, line: int, fix: str, device: int, point: tuple[int, ...]):
        super().__init__(message, file=file, line=line, fix=fix)
        self.device = device
        self.point = point


def data_dependent(sched: S.Schedule) -> set[str]:
    """The data arrays and the lets that read them, directly or through other lets."""
    out = set(sched.data)
    for name, e in sched.let.items():  # lets are in dependency order
        if E.names(e) & out:
            out.add(name)
    return out


_MISSING = object()
# `cores: 2` (`Unroller.core_events`) + invocation: core 0 starts the chip's other cores, which
# wait for it without taking it, and waits for every one of them to end.
CORE_LAUNCH = "core-launch#"
CORE_JOIN = "core-join#"


def on_core(action: Action, offset: int, per_core: set[str]) -> Action:
    """`action` as made on a chip, moved to one of its TensorCores (`Unroller.core_events`):
    each region of a per-core buffer (VMEM) and every semaphore but the launch and join
    counts onto the device `offset` on (the core's process, on every chip a remote action
    names: it goes to the same core there); HBM stays the chip's."""
    def region(r: Region) -> Region:
        return Region(r.buffer, r.device + offset, r.box, r.kept, r.itemsize) if r.buffer in per_core else r

    def sem(x: SemId) -> SemId:
        return x if x[1].startswith((CORE_LAUNCH, CORE_JOIN)) else (x[0] + offset, x[1], x[2])
    return remapped(action, region, sem)


_WHOLE = object()  # a dimension a ref does not index (`Unroller.region_plan`)


def node_inputs(sched: S.Schedule, node: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The names an expression, a ref or an op reads (an op: with the copy it starts or
    waits for), and the buffers it refers to, which may be pipeline blocks."""
    if isinstance(node, (E.Ref, *E.EXPR_TYPES)):
        nodes = [node]
    else:
        nodes = [getattr(node, f) for f in type(node).model_fields if f != "line"]
        if getattr(node, "copy_halves", ()):  # a copy op: its copy's fields and template arguments too
            c = sched.copies[node.copy_name]
            nodes += [getattr(c, f) for f in type(c).model_fields if f != "line"]
            nodes += [e for _, e in node.copy_use.args]
    names: set[str] = set()
    refs: set[str] = set()
    for part in nodes:
        for x in part if isinstance(part, list) else [part]:
            if isinstance(x, E.Ref):
                names |= E.ref_names(x)
                refs.add(x.name)
            elif isinstance(x, E.EXPR_TYPES):
                names |= E.names(x)
    return tuple(sorted(names)), tuple(sorted(refs))


def foldable(sched: S.Schedule, op: S.Pipeline) -> bool:
    """Whether a pipeline's rows repeat (`Unroller.fold_pipelines`): its outer index is
    read only as a whole block index, and no block arrives by a remote copy."""
    outer = next(iter(op.pipeline))
    if op.arrivals:
        return False
    for spec in op.specs.values():
        if any(outer in E.names(e) and not (isinstance(e, E.Var) and e.name == outer) for e in spec.index):
            return False
    return all(outer not in node_inputs(sched, inner)[0] for inner in walk_ops(op.do))


def window_id(op: S.Pipeline, block: str) -> str:
    """The buffer holding a pipeline block's two VMEM windows. Block names are local to their
    pipeline, so the buffer is named after the pipeline's line too: `a@40`."""
    return f"{block}@{op.line}"


class _Context:
    """Static facts for one N: evaluated shapes, sizes and the grid."""

    def __init__(self, sched: S.Schedule, n: int, sizes: dict[str, int]):
        self.s = sched
        self.resolved = resolved(sched)
        self.n = n
        self.sizes = sizes
        self.static: dict[str, int] = {"N": n, **axis_size_env(sched.axes, sizes), **sched.params}
        self.shapes = {name: self._shape(buf.full_shape, f"shape of buffer `{name}`", buf.line)
                       for name, buf in sched.buffers.items()}
        self.sem_shapes = {name: self._shape(sem.shape, f"shape of semaphore `{name}`", sem.line)
                           for name, sem in sched.semaphores.items()}
        self.grid = self._shape(list(sched.grid.values()), "grid", sched.line_of("grid"))
        self.itemsize = {name: itemsize(sched.dtype_of(name)) for name in sched.buffers}
        # Nested pipelines: their grids, and their VMEM blocks as double-buffered windows.
        self.pipeline_grids: dict[int, tuple[int, ...]] = {}
        self.loop_sizes: dict[int, tuple[int, ...]] = {}  # a `loop`'s extents
        for op in walk_ops(sched.all_ops):
            if isinstance(op, S.Loop):
                self.loop_sizes[id(op)] = self._shape(list(op.loop.values()), "loop size", op.line, minimum=0)
            if isinstance(op, S.Pipeline):
                self.pipeline_grids[id(op)] = tuple(self._grid_size(op, name, size) for name, size in op.pipeline.items())
                for name, window in pipeline_windows(sched, op).items():
                    block = self._shape(window.shape, f"block shape of `{name}`", window.line)
                    self.shapes[window_id(op, name)] = (2, *block)
                    self.itemsize[window_id(op, name)] = itemsize(window.dtype)
        for name, buf in sched.buffers.items():
            limits.check("buffer_bytes", prod(self.shapes[name]) * self.itemsize[name],
                         f"buffer `{name}` {list(self.shapes[name])} {sched.dtype_of(name)} in bytes (N={n})",
                         file=sched.file, line=buf.line, fix="choose smaller parameters (--param k=v) or N")
            if buf.shard is not None:
                shard = self._shape(buf.shard, f"shard shape of `{name}`", buf.line)
                if prod(shard) != prod(self.shapes[name]):
                    raise ScheduleError(
                        f"buffer `{name}`: shard shape {list(shard)} has {prod(shard)} elements but "
                        f"slots + shape {list(self.shapes[name])} has {prod(self.shapes[name])} (N={n})",
                        file=sched.file, line=buf.line, fix="make both describe the same per-device array")

    def work(self, devices: int, invocations: int) -> int:
        """Refuse, before unrolling, an unrolling past the `grid_points` or `events` limit;
        else return the count of events (for the cost model's own bound, `cost/model.py`).
        Events are counted from above: every op at every grid point (a `when` may skip
        some), a pipeline's blocks as four DMA events each per inner point, and the
        barriers' signals to every device."""
        s = self.s
        outer = prod(self.grid) * (2 if s.megacore else 1)
        repeats = self.repeats()  # how often each op runs per grid point (loops multiply)
        called = [op for _, body in s.calls for op in body]  # each call's ops (a split-phase program's)
        pipelines = [op for op in walk_ops(called) if isinstance(op, S.Pipeline)]
        inner = sum(repeats[id(op)] * prod(self.pipeline_grids[id(op)]) for op in pipelines)
        limits.check("grid_points", outer * (1 + inner), f"the grid points per device (N={self.n})",
                     file=s.file, line=s.line_of("grid"), fix="choose smaller parameters (--param k=v) or N")
        nested = {id(o) for op in pipelines for o in walk_ops(op.do)}

        def weight(op: S.Op) -> int:  # events per op, from above (a remote wait is two)
            if isinstance(op, S.Barrier):
                return 4 * (len(op.barrier) + 1)
            return max(len(op.to), 1) if isinstance(op, S.Signal) else 2

        per_point = sum(repeats[id(op)] * weight(op) for op in walk_ops(called) if id(op) not in nested
                        and not isinstance(op, S.Pipeline))
        per_point += sum(repeats[id(op)] * prod(self.pipeline_grids[id(op)])
                         * (4 * len(op.specs) + len(op.arrivals) + 2 * len(list(walk_ops(op.do))))
                         for op in pipelines)
        # entry and exit write every buffer; without `barrier:`, back-to-back calls add
        # Pallas' device barrier, a signal to every device
        barrier = self.n if (invocations > 1 and s.barrier is None) or s.kernels else 0
        calls = len(s.calls) * (2 * len(s.buffers) + 8 + barrier)
        events = devices * invocations * (outer * per_point + calls)
        limits.check("events", events, f"the events to unroll ({devices} device{'s' * (devices > 1)} x "
                     f"{invocations} invocation{'s' * (invocations > 1)} x {outer} grid points x "
                     f"{per_point} per point, N={self.n}), counted from above,", file=s.file,
                     line=s.line_of("body"), fix="check fewer devices or invocations, or choose smaller parameters")
        return events

    def repeats(self) -> dict[int, int]:
        """For each op (by id), how many times it runs per grid point: the product of the
        sizes of the loops around it (1 outside loops)."""
        out: dict[int, int] = {}

        def visit(ops: list[S.Op], times: int) -> None:
            for op in ops:
                out[id(op)] = times
                if isinstance(op, S.Loop):
                    visit(op.do, times * prod(self.loop_sizes[id(op)]))
                elif isinstance(op, (S.When, S.Pipeline)):
                    visit(op.do, times)
        visit(self.s.all_ops, 1)
        return out

    def _grid_size(self, op: S.Pipeline, name: str, size: E.Expr) -> int:
        """A pipeline grid size, usually `extent // block`: when the block does not divide the
        extent, say so in those terms, with the blocks that use it."""
        if isinstance(size, E.BinOp) and size.op == "//":
            extent, block = (E.evaluate(self.resolved.inline(e), self.static) for e in (size.left, size.right))
            if block > 0 and extent % block:
                users = [f"`{n}` [{', '.join(E.to_text(d) for d in spec.block)}]" for n, spec in op.specs.items()
                         if any(size.right == d for d in spec.block)]
                used = f" (the block size of {', '.join(users)})" if users else ""
                bigger = -(-extent // block) * block
                raise ScheduleError(
                    f"pipeline grid `{name}: {E.to_text(size)}`: the extent `{E.to_text(size.left)}` = {extent} "
                    f"does not split into blocks of `{E.to_text(size.right)}` = {block}{used} (N={self.n})",
                    file=self.s.file, line=op.line,
                    fix=f"make `{E.to_text(size.left)}` a multiple of `{E.to_text(size.right)}` (e.g. {bigger}) or "
                        f"choose a block size that divides {extent}, with --param k=v")
        return self._shape([size], f"pipeline grid `{name}`", op.line)[0]

    def _shape(self, dims: list[E.Expr], what: str, line: int,
               fix: str = "choose parameters (--param k=v) or N so that the shape divides exactly",
               minimum: int = 1) -> tuple[int, ...]:
        """Evaluate sizes for this N; each at least `minimum` (a loop may run 0 times, as
        `range(0)` does)."""
        out = []
        for d in dims:
            try:  # a static let in a shape is inlined: its divisions are exact too
                v = E.evaluate(self.resolved.inline(d), self.static, exact_division=True)
            except E.ExprError as e:
                params = ", ".join(f"{k}={v}" for k, v in self.static.items())
                if not E.names(self.resolved.inline(d)) & set(self.s.params):
                    # no parameter could make it divide: the schedule is written for other axis sizes
                    fix = ("this shape depends on the axis sizes alone, so the schedule is written for others "
                           "(its comments say which; a `ringc synth` schedule unrolled for one slice: "
                           "synthesize one for this slice)")
                raise ScheduleError(f"{what}: {e} (with {params})", file=self.s.file, line=line,
                                    fix=getattr(e, "fix", None) or fix) from None
            if v < minimum:
                raise ScheduleError(f"{what}: `{E.to_text(d)}` = {v} is {'negative' if minimum == 0 else 'not positive'} "
                                    f"(N={self.n})", file=self.s.file, line=line,
                                    fix=f"sizes must be at least {minimum}")
            out.append(int(v))
        return tuple(out)


class Unroller:
    """Evaluates a schedule's ops on each device and grid point into events; `UNROLL` (at
    the end of this module) holds the rule of each op class."""
    def __init__(self, sched: S.Schedule, n: int, sizes: dict[str, int], data: dict | None = None):
        self.s = sched
        self.ctx = _Context(sched, n, sizes)
        # Runtime data (`ringc.data.Sample`): each array's values on each device, read as
        # `name[i]`; a region that leaves its buffer because of them is a `DataFault`.
        self.data = data or {}
        self.data_names = data_dependent(sched) if self.data else set()
        self.n = n
        self.builtins = self.ctx.resolved.builtins
        # Row-major strides of the schedule's axes: device d has me_a = d // stride % N_a.
        self.strides = {a: prod(list(sizes.values())[i + 1:]) for i, a in enumerate(sizes)}
        self.env: dict[str, Any] = {}
        self.device = 0
        self.point: tuple[int, ...] = ()
        self.targets: list[tuple[Event, int]] = []
        self.core = 0
        # Megacore: the leading `core` grid axis (parallel: core c runs the points (c, ...)).
        self.grid_names = ("core", *sched.grid) if sched.megacore else tuple(sched.grid)
        self.inner: tuple[tuple[str, int], ...] = ()  # inside a pipeline: its grid point
        self.window_slot: dict[str, tuple[str, int]] = {}  # inside a pipeline: block -> (buffer, slot)
        # The builtins and lets in dependency order, each with whether it varies from grid
        # point to grid point on one device: it reads a grid index or the core, maybe
        # through an earlier let. The others read only the device's own values (me, the
        # sizes, params, its runtime data), so `set_point` computes them once per device.
        derived = [(name, e, sched.line) for name, e in self.builtins.items()]
        derived += [(name, e, sched.line_of("let", name)) for name, e in sched.let.items()]
        varying = {*sched.grid, "core"}
        for name, e, _ in derived:
            if not E.names(e).isdisjoint(varying):
                varying.add(name)
        self.derived = [(name, e, line, name in varying) for name, e, line in derived]
        self.fixed: tuple[int, dict[str, Any]] | None = None  # (device, its values of the others)
        self.later_lets: Callable[..., None] | None = None  # `compile_later_lets`, made once
        # An op's actions, a region, a guard or a `let:` value depends only on the values
        # of the names it reads (and the window slots of the blocks it uses), and most grid
        # points repeat earlier ones: see `memoized`.
        # Per node: [its key function, calls memoized, hits] (`memoized`).
        self.inputs: dict[int, list[Any]] = {}
        self.memo: dict[tuple, Any] = {}
        self.cheap: dict[int, bool] = {}  # per expression (by id): not worth memoizing (`value`)
        self.windows: dict[tuple[str, int | None, int], Region] = {}
        self.region_plans: dict[int, list[tuple[int, int, Any, Any, Any]]] = {}  # per ref (`region_plan`)
        self.copy_functions: dict[int, Callable[..., Any] | None] = {}  # per copy op (`copy_function`)
        self.walkers: dict[int, tuple[list[S.Op], Callable[..., None]]] = {}  # per op list (`walk`)
        self.sem_plans: dict[int, tuple[tuple[int, ...], list[Callable[[Any], Any]]]] = {}  # per ref (`sem`)
        self.pipelines: dict[int, tuple[dict[str, S.BlockSpec], dict[str, str], list[tuple[int, ...]]]] = {}
        self.pipeline_reads: dict[int, tuple[str, ...]] = {}  # per pipeline op (`pipeline_key`)
        self.spec_regions: dict[int, Callable[..., Any]] = {}  # per pipeline op (`spec_regions_function`)
        self.pipeline_trials: dict[int, list[int]] = {}  # per pipeline op: [keyed, templates used] (`pipeline`)
        # A block's ref as the window slot it stands for (`evaluate_region`), with the block's
        # own ref, which keeps the id in the key its own.
        self.window_refs: dict[tuple[int, str, int], tuple[E.Ref, E.Ref]] = {}
        # A split-phase program: the semaphore each name stands for in the current call (`sem_ids`), per call.
        self.sem_ids: dict[str, str] = {}
        self.call_sems = program_semaphores(sched)
        # Pricing only (`fold_pipelines`): per folded pipeline op, (its rows, rows spelled,
        # repetitions of the folded two rows); the folds made, as (event list, then
        # `Program.folds`' fields).
        self.folding: dict[int, tuple[int, int, int]] = {}
        self.folds: list[tuple[Any, ...]] = []

    # -- evaluation ---------------------------------------------------------
    def fail(self, line: int, msg: str, fix: str) -> None:
        pt = " ".join(f"{k}={v}" for k, v in zip(self.grid_names, self.point))
        raise ScheduleError(f"{msg} on device {self.device} at {pt} (N={self.n})",
                            file=self.s.file, line=line, fix=fix)

    def ev(self, e: E.Expr, line: int) -> int:
        try:
            return E.evaluator(e)(self.env)
        except E.ExprError as err:
            self.expr_failed(err, line)

    def expr_failed(self, err: E.ExprError, line: int) -> None:
        """Raise an expression's error at `line`, where the unroller is (`ev`)."""
        self.fail(line, str(err), getattr(err, "fix", None) or "guard the op with `when:` or fix the expression")

    # How a value of each type stands in a dictionary key (see `rotation.py` for symbolic
    # values); other values stand for themselves. True is kept apart from 1: it would
    # compute the same, but print as `True`.
    keyed: dict[type, Callable[[Any], Any]] = {bool: lambda v: (bool, v)}

    # Calls before a node whose values rarely repeat stops being memoized (below 1 hit in 8).
    MEMO_TRIAL = 128

    def memoized(self, node: Any, compute: Callable[..., Any], *args: Any) -> Any:
        """`compute(*args)`, memoized on the values of the names `node` reads and the window
        slots of the blocks it names. Errors are raised the first time, never memoized.
        (The key is flat: a node always reads the same names, so its parts cannot shift.)
        A node whose key has come back in fewer than 1 of 8 of its first `MEMO_TRIAL`
        calls (a region indexed by the step on a one-dimensional grid never repeats) is
        computed directly from then on: `compute` is a function of those values, so
        this changes nothing but the time the key would cost. The names whose value is
        the same at every point of a device (`device_constants`) stay out of the key: the
        memo is the device's own (`device_events` starts a new one)."""
        entry = self.inputs.get(id(node))
        if entry is None:
            entry = self.inputs[id(node)] = [self.key_function(node), 0, 0]
        key_of, calls, hits = entry
        if calls >= self.MEMO_TRIAL and hits * 8 < calls:
            return compute(*args)
        entry[1] = calls + 1
        key = key_of(self.env, self.window_slot)
        value = self.memo.get(key, _MISSING)
        if value is _MISSING:
            value = self.memo[key] = compute(*args)
        else:
            entry[2] = hits + 1
        return value

    def key_function(self, node: Any) -> Callable[[dict[str, Any], dict[str, tuple[str, int]]], tuple]:
        """`memoized`'s key of `node`, as one generated function of the names' values and the
        window slots: (id of node, each name's value, then, inside a pipeline, each named
        block's slot). A value of a type in `keyed` stands in the key as `keyed` says, any
        other as itself; a name not bound stands as `_MISSING`."""
        names, blocks = node_inputs(self.s, node)
        names = tuple([n for n in names if n not in self.device_constants])
        lines = ["def key(env, slots):"]
        for i, n in enumerate(names):
            lines += [f"    v{i} = env.get({n!r}, missing)", f"    if type(v{i}) is not int:",
                      f"        f = keyed.get(type(v{i}))", "        if f is not None:", f"            v{i} = f(v{i})"]
        values = "".join(f", v{i}" for i in range(len(names)))
        if blocks:
            slots = "".join(f", slots.get({b!r})" for b in blocks)
            lines.append(f"    if slots:\n        return (node{values}{slots})")
        lines.append(f"    return (node{values},)")
        namespace = {"missing": _MISSING, "keyed": self.keyed, "node": id(node)}
        return E.compiled("\n".join(lines), namespace)

    def value(self, e: E.Expr, line: int) -> Any:
        """A guard's or a let's value: memoized (`memoized`) when it may read a value that
        is costly to compute (`costly`); else evaluated, which costs less than a memo key.
        Either way the same value: `ev` is a function of the values of the names read."""
        cheap = self.cheap.get(id(e))
        if cheap is None:
            cheap = self.cheap[id(e)] = E.names(e).isdisjoint(self.costly)
        return self.ev(e, line) if cheap else self.memoized(e, self.ev, e, line)

    @cached_property
    def costly(self) -> set[str]:
        """The names whose values may be costly to compute with (a symbolic device id, runtime
        data), and the lets that read them, directly or through other lets."""
        out = {*self.symbolic, *self.data_names}
        for name, e, _, _ in self.derived:  # in dependency order
            if not E.names(e).isdisjoint(out):
                out.add(name)
        return out

    @cached_property
    def device_constants(self) -> frozenset[str]:
        """The names whose value is the same wherever they are read on one device (in one
        call of a split-phase program): N, the params and axis sizes, `me`, the runtime data
        and the builtins and lets that do not vary (`derived`), minus any name a loop, a
        pipeline grid or a copy template binds (there the name is another value)."""
        bound: set[str] = set()
        for op in walk_ops(self.s.all_ops):
            if isinstance(op, (S.Loop, S.Pipeline)):
                bound |= set(op.loop if isinstance(op, S.Loop) else op.pipeline)
        for c in self.s.copies.values():
            bound |= set(c.args)
        out = {*self.ctx.static, "me", *(f"me_{a}" for a in self.ctx.sizes), *self.data}
        out |= {name for name, _, _, varies in self.derived if not varies}
        varies = {name for name, _, _, v in self.derived if v}
        return frozenset(out - varies - bound - {"core", *self.s.grid})

    @cached_property
    def cheap_lets(self) -> dict[str, Callable[[Any], Any]]:
        """The builtins and lets not `costly`, each with its evaluator: `value` evaluates
        them plainly (`ev`), and so may `set_point`. (A plain value never raises
        `NotRotational`, which only symbolic values raise, so no subclass's `value` would
        have caught anything from them.)"""
        return {name: E.evaluator(e) for name, e, _, _ in self.derived if name not in self.costly}

    # The names an unroller gives symbolic values (`rotation.py`): none here.
    symbolic: tuple[str, ...] = ()

    def me(self) -> Any:
        return self.device

    def me_axis(self, i: int, axis: str) -> Any:
        """`me_a`: the device's coordinate along the schedule's axis `axis` (the i-th)."""
        return self.device // self.strides[axis] % self.ctx.sizes[axis]

    def target(self, e: E.Expr, line: int) -> int:
        """The device a remote action goes to."""
        return self.ev(e, line)

    def place(self, buffer: str, dim: int, size: int, start: Any, length: Any) -> tuple[int, int]:
        """A box's start and length along one dimension, as evaluated (see `rotation.py`)."""
        return start, length

    def place_code(self, code: E.Emitter, name: str, dim: int, size: str) -> list[str]:
        """Statements of generated code (`region_code`) doing `_s, _l = place(name, dim, size,
        _s, _l)` (names of constants of `code`): none for this class's `place`, which gives
        back its arguments; a subclass may inline what its own does."""
        if type(self).place is Unroller.place:
            return []  # it gives back its arguments
        return [f"_s, _l = place({name}, {dim}, {size}, _s, _l)"]

    def region(self, ref: E.Ref, line: int) -> Region:
        """The box `ref` selects (memoized: a wait meets the regions its start computed)."""
        return self.memoized(ref, self.evaluate_region, ref, line)

    def evaluate_region(self, ref: E.Ref, line: int) -> Region:
        if ref.name in self.window_slot:  # a pipeline block: the window slot in use
            buffer, slot = self.window_slot[ref.name]
            key = (id(ref), buffer, slot)  # made once: a fresh Ref would be compiled anew (`E.evaluator`)
            window = self.window_refs.get(key)
            if window is None:
                window = self.window_refs[key] = (ref, E.Ref(buffer, (E.Const(slot), *ref.indices)))
            ref = window[1]
        entry = self.region_plans.get(id(ref))
        if entry is None:
            plan = self.region_plan(ref)
            entry = self.region_plans[id(ref)] = (plan, self.region_function(ref, plan))
        plan, fast = entry
        if fast is not None:
            try:
                return fast(self.env, self.place, self.device)
            except Exception:  # noqa: BLE001 -- the loop below raises the error where and as it should
                pass
        env, place, name = self.env, self.place, ref.name
        box, kept = [], []
        for dim, size, start_of, size_of, index in plan:
            if index is not None:  # a point index
                try:
                    v = index[1](env)
                except E.ExprError as err:
                    self.expr_failed(err, line)
                i = int(place(name, dim, size, v, 1)[0])
                if not 0 <= i < size:
                    self.fail(line, f"`{ref.text()}`: index {E.to_text(index[0])} = {i} is out of range for "
                                    f"dimension {dim} of `{name}` (size {size})",
                              f"keep the index in 0..{size - 1}, e.g. with `% {size}`, or guard the op with `when:`")
                box.append((i, i + 1))
                continue
            if start_of is _WHOLE:  # not indexed
                box.append((0, size))
                kept.append(dim)
                continue
            try:
                start = start_of[1](env) if start_of is not None else 0
                length = size_of[1](env) if size_of is not None else size - start
            except E.ExprError as err:
                self.expr_failed(err, line)
            start, length = place(name, dim, size, start, length)
            start, length = int(start), int(length)  # True is 1
            if start < 0 or length <= 0 or start + length > size:
                self.data_fault(ref, line, f"`{ref.text()}` is rows {start}:{length} (start:size) of dimension "
                                           f"{dim} of `{name}`, which has {size}")
                self.fail(line, f"`{ref.text()}`: slice {start}:{length} (start:size) leaves dimension "
                                f"{dim} of `{name}` (size {size})",
                          "a slice is `start:size` and must stay within the dimension")
            box.append((start, start + length))
            kept.append(dim)
        return Region(name, self.device, tuple(box), tuple(kept), self.ctx.itemsize[name])

    def region_function(self, ref: E.Ref, plan: list[tuple[int, int, Any, Any, Any]]) -> Callable[..., Region] | None:
        """`evaluate_region`'s loop over `plan` for `ref`, as one generated function of
        (env, place, device) with the expressions inlined (`region_code`): the same steps
        in the same order, the same region. Wherever the loop would raise (a bad index or
        slice, an expression's error) or anything else raises, it raises, and
        `evaluate_region` runs the loop, which raises what it should. (`place` may record
        a box's step twice then: the same step, recorded once.)"""
        code = E.Emitter()
        code.consts["_Region"] = Region
        body: list[str] = []
        self.region_code(ref, plan, code, body, "_r")
        return code.function("region(env, place, device)", [*body, "return _r"])

    def region_code(self, ref: E.Ref, plan: list[tuple[int, int, Any, Any, Any]], code: E.Emitter,
                    body: list[str], var: str, sized: bool = False) -> None:
        """Append to `body` the statements of `evaluate_region`'s loop over `plan` for `ref`
        (`E.Emitter` code: names `env`, `place`, `device`, `_Region` and `_Fallback`; `place`
        as `place_code` says), which set `var` to the region and `var`_shape to its shape
        (`Region.shape`), or, `sized`, only the shape and `var`_nbytes, its size in bytes
        (`Region.nbytes`), and raise wherever the loop would raise (and maybe elsewhere):
        the same steps in the same order, the same region."""
        name = code.const(ref.name)
        box, kept = [], []
        for dim, size, start_of, size_of, index in plan:
            b = f"_b{dim}"
            n = code.const(size)  # a name, not the number: the same text for every N (`E.compiled`)
            if index is not None:
                body += [f"_s, _l = {code.emit(index[0], body)}, 1", *self.place_code(code, name, dim, n),
                         "_i = int(_s)", f"if not 0 <= _i < {n}: raise _Fallback", f"{b} = (_i, _i + 1)"]
            elif start_of is _WHOLE:
                body.append(f"{b} = (0, {n})")
                kept.append(dim)
            else:
                start = code.emit(start_of[0], body) if start_of is not None else "0"
                body.append(f"_s = {start}")
                length = code.emit(size_of[0], body) if size_of is not None else f"{n} - _s"
                body += [f"_l = {length}", *self.place_code(code, name, dim, n), "_s, _l = int(_s), int(_l)",
                         f"if _s < 0 or _l <= 0 or _s + _l > {n}: raise _Fallback", f"{b} = (_s, _s + _l)"]
                kept.append(dim)
            box.append(b)
        itemsize = code.const(self.ctx.itemsize[ref.name])
        body.append(f"{var}_shape = ({''.join(f'_b{d}[1] - _b{d}[0], ' for d in kept)})")
        if sized:
            body.append(f"{var}_nbytes = {''.join(f'(_b{d}[1] - _b{d}[0]) * ' for d in range(len(box)))}{itemsize}")
        else:
            body.append(f"{var} = _Region({name}, device, ({''.join(b + ', ' for b in box)}), {tuple(kept)!r}, "
                        f"{itemsize})")

    def copy_actions(self, op: S.Op, plain: Callable[..., list[tuple[Action, int | None]]]
                     ) -> list[tuple[Action, int | None]]:
        """A copy op's actions, `plain(self, op)`, by its generated function (`copy_function`)
        where there is one and it runs through; else (outside it: in a pipeline, where
        window slots stand for blocks) by `plain`, which also raises any error."""
        fast = self.copy_functions.get(id(op), _MISSING)
        if fast is _MISSING:
            fast = self.copy_functions[id(op)] = self.copy_function(op)
        if fast is not None and not self.window_slot:
            try:
                return fast(self.env, self, self.place, self.device, self.sem_ids)
            except Exception:  # noqa: BLE001 -- `plain` raises the error where and as it should
                pass
        return plain(self, op)

    def copy_function(self, op: S.Op) -> Callable[..., Any] | None:
        """`_start`'s or `_wait`'s evaluation of a copy op without template arguments as one
        generated function of (env, unroller, place, device, sem_ids), with its regions
        (`region_code`), semaphore indices and checks inlined: the same values in the
        same order, the same actions; wherever the plain rule would raise (a bad region,
        index or target, regions of different shapes), it raises (`copy_actions` then runs
        the plain rule). None for another op, or one whose code cannot be made here (the
        plain rule says what is wrong)."""
        use = op.copy_use
        if use.args or not isinstance(op, (S.Start, S.Wait, S.WaitSend, S.WaitRecv)):
            return None
        c = self.s.copies[use.name]
        code = E.Emitter()
        code.consts.update(_Region=Region, _DmaStart=DmaStart, _SemWait=SemWait)
        body: list[str] = []

        def sem(ref: E.Ref, device: str) -> str:  # `sem`: its indices, each checked
            idx = [code.emit(i, body) for i in ref.indices]
            for v, size in zip(idx, self.ctx.sem_shapes[ref.name]):
                body.append(f"if not 0 <= {v} < {code.const(size)}: raise _Fallback")
            name = code.const(ref.name)
            return f"({device}, sem_ids.get({name}, {name}), ({''.join(v + ', ' for v in idx)}))"

        try:
            for ref, var in ((c.src, "_src"), (c.dst, "_dst")):
                self.region_code(ref, self.region_plan(ref), code, body, var, sized=not isinstance(op, S.Start))
            body.append("if _src_shape != _dst_shape: raise _Fallback")
            name = code.const(use.name)
            if isinstance(op, S.Start):
                if c.remote:
                    body.append(f"_t = u.target({code.const(c.to)}, {op.line})")
                    send, recv = sem(c.send_sem, "device"), sem(c.recv_sem, "_t")
                    body.append(f"return [(_DmaStart({name}, _src, _Region(_dst.buffer, _t, _dst.box, _dst.kept, "
                                f"_dst.itemsize), {send}, {recv}, explicit_self={c.explicit_self}), _t)]")
                else:
                    body.append(f"return [(_DmaStart({name}, _src, _dst, None, {sem(c.sem, 'device')}), None)]")
            elif not c.remote:
                body.append(f"return [(_SemWait({sem(c.sem, 'device')}, _dst_nbytes, 'wait', {name}), None)]")
            else:  # Pallas' descriptor.wait() is wait_send() then wait_recv()
                waits = []
                if "send" in op.copy_halves:
                    waits.append(f"(_SemWait({sem(c.send_sem, 'device')}, _src_nbytes, 'wait_send', {name}), None)")
                if "recv" in op.copy_halves:
                    waits.append(f"(_SemWait({sem(c.recv_sem, 'device')}, _dst_nbytes, 'wait_recv', {name}), None)")
                body.append(f"return [{', '.join(waits)}]")
            return code.function("copy(env, u, place, device, sem_ids)", body)
        except Exception:  # noqa: BLE001 -- e.g. a ref to an unknown buffer: the plain rule says so
            return None

    def region_plan(self, ref: E.Ref) -> list[tuple[int, int, Any, Any, Any]]:
        """How `evaluate_region` reads `ref`, made once per ref: per dimension of its buffer,
        (dim, size, start, size, index), each an (expression, `E.evaluator`) pair or None:
        a slice has start and size (each None where left out), a point index has index, a
        dimension not indexed has start `_WHOLE`. (The evaluator raises what `ev` would,
        unwrapped.)"""
        plan = []
        for dim, size in enumerate(self.ctx.shapes[ref.name]):
            ix = ref.indices[dim] if dim < len(ref.indices) else None
            if isinstance(ix, E.Slice):
                plan.append((dim, size, *((e, E.evaluator(e)) if e is not None else None for e in (ix.start, ix.size)),
                             None))
            elif ix is None:
                plan.append((dim, size, _WHOLE, None, None))
            else:
                plan.append((dim, size, None, None, (ix, E.evaluator(ix))))
        return plan

    def data_fault(self, ref: E.Ref, line: int, what: str) -> None:
        """Raise `DataFault` if the region `ref` reads runtime data: the data, not the
        schedule's text, put it outside its buffer."""
        if self.data_names & E.ref_names(ref):
            pt = " ".join(f"{k}={v}" for k, v in zip(self.grid_names, self.point))
            raise DataFault(f"on device {self.device} at {pt} (N={self.n}), {what}: the runtime data put it "
                            "outside the buffer", file=self.s.file, line=line, device=self.device, point=self.point,
                            fix="declare a constraint that keeps it inside (e.g. `sum_at_most:` the buffer's "
                                "rows on the sizes that land there), or make the buffer larger")

    def sem(self, ref: E.Ref, device: int, line: int) -> SemId:
        plan = self.sem_plans.get(id(ref))
        if plan is None:
            plan = self.sem_plans[id(ref)] = (self.ctx.sem_shapes[ref.name], [E.evaluator(i) for i in ref.indices])
        shape, indices = plan
        env = self.env
        try:  # `ev` of each index
            idx = tuple([index(env) for index in indices])
        except E.ExprError as err:
            self.expr_failed(err, line)
        for i, size in zip(idx, shape):
            if not 0 <= i < size:
                self.fail(line, f"`{ref.text()}`: index {i} is out of range for semaphore array "
                                f"`{ref.name}` of shape {list(shape)}",
                          f"keep the index in 0..{size - 1}")
        return (device, self.sem_ids.get(ref.name, ref.name), idx)

    def same_shape(self, a: Region, b: Region, line: int, what: str) -> None:
        if a.shape != b.shape:
            self.fail(line, f"{what}: `{a.text()}` has shape {list(a.shape)} but `{b.text()}` has "
                            f"shape {list(b.shape)}", "both sides must have the same shape")

    # -- ops ----------------------------------------------------------------
    def copy_parts(self, name: str, line: int) -> tuple[S.Copy, Region, Region]:
        c = self.s.copies[name]
        try:
            src, dst = self.region(c.src, line), self.region(c.dst, line)
        except ScheduleError as e:
            raise self.in_copy(e, name, c, line) from None
        self.same_shape(src, dst, line, f"copy `{name}`")
        return c, src, dst

    def in_copy(self, e: ScheduleError, name: str, c: S.Copy, line: int) -> ScheduleError:
        """An error in a copy's region, at the line where the copy writes the region (its
        entry under `copies:`), naming the op that used it: the index is fixed there. A
        template's (`push(k)`) values come from the use's arguments: its error stays at the use."""
        written = copy_line(self.s, name)
        if c.args or isinstance(e, DataFault) or not written or written == line or e.line != line:
            return e  # (runtime data: the `out_of_bounds` finding stays at the op that moves the data)
        e.line = written
        e.message += f", used by the op at line {line}"
        return e

    def bind(self, use: S.CopyUse, line: int) -> dict[str, Any]:
        """The names a copy's fields see where `use` names it: the current ones, with the
        template's parameters bound to the use's arguments (evaluated here)."""
        if not use.args:
            return self.env
        return {**self.env, **{a: self.value(e, line) for a, e in use.args}}

    def loop(self, op: S.Loop, out: list[Event], inv: int) -> None:
        """A Python loop of the kernel, unrolled: `do` at every point of its indices in
        row-major order, the indices bound (and shown in messages) like grid indices."""
        outer_env, outer_inner = self.env, self.inner
        shown = [f"{op.phase} {n}" if op.phase and not k else n for k, n in enumerate(op.loop)]  # `drain i`
        try:
            for pt in itertools.product(*(range(g) for g in self.ctx.loop_sizes[id(op)])):
                self.env = {**outer_env, **dict(zip(op.loop, pt))}
                self.inner = (*outer_inner, *zip(shown, pt))
                self.walk(op.do, out, inv)
        finally:
            self.env, self.inner = outer_env, outer_inner

    def walk(self, ops: list[S.Op], out: list[Event], invocation: int) -> None:
        """Each op's rule (`UNROLL`), in order: by the list's generated function (`walker`),
        kept with the list (a list made for the call would leave its id to another)."""
        entry = self.walkers.get(id(ops))
        if entry is None or entry[0] is not ops:
            entry = self.walkers[id(ops)] = (ops, self.walker(ops))
        entry[1](self, out, invocation)

    def walk_plain(self, ops: list[S.Op], out: list[Event], invocation: int) -> None:
        """`walk` as the rules themselves do it (what `walker` compiles)."""
        for op in ops:
            UNROLL[type(op)](self, op, out, invocation)

    def walker(self, ops: list[S.Op]) -> Callable[..., None]:
        """`walk_plain(ops, ...)` as one generated function of (unroller, out, invocation):
        a `when`'s guard is `value`'s, its code inlined (`E.Emitter`, as `E.evaluator`
        runs it) when `value` would evaluate it plainly (not `costly`), else `value`
        itself, and where the code raises, `value` (which gives the value, an `Unknown`,
        or raises the error); its body is walked by its own generated function; a plain
        op's actions (`actions_rule`, `memoized` inlined: the memo of the device, or of
        the call, is the same throughout a walk) are made into events as `emit` makes them, with the
        device, grid point, loop indices and core of the unroller when the walk starts
        (a rule that changes them puts them back before it returns); any other op runs
        its rule. The same rules in the same order: the same events, targets and errors."""
        code = E.Emitter()
        code.consts.update(_Event=Event, _missing=_MISSING)
        body = ["env, device, point, inner = u.env, u.device, u.point, u.inner",
                "targets = u.targets if u.core == 0 or u.s.cores > 1 else None",
                "inputs, memo = u.inputs, u.memo"]
        for op in ops:
            o, line, rule = code.const(op), code.const(op.line), UNROLL[type(op)]
            if isinstance(op, S.When):
                guard = f"_g = u.value({o}.when, {line})"
                if E.names(op.when).isdisjoint(self.costly):
                    steps: list[str] = []
                    value = code.emit(op.when, steps)
                    body += ["try:", *("    " + s for s in steps), f"    _g = {value}", "except Exception:",
                             "    " + guard]
                else:
                    body.append(guard)
                body += ["if _g:", f"    {code.const(self.walker(op.do))}(u, out, inv)"]
            elif hasattr(rule, "evaluate"):  # `memoized(op, evaluate, u, op)`, inlined
                evaluate = code.const(rule.evaluate)
                body += [f"_m = inputs.get({code.const(id(op))})",
                         "if _m is None:",
                         f"    _acts = u.memoized({o}, {evaluate}, u, {o})",
                         f"elif _m[1] >= {self.MEMO_TRIAL} and _m[2] * 8 < _m[1]:",
                         f"    _acts = {evaluate}(u, {o})",
                         "else:",
                         "    _m[1] += 1",
                         "    _k = _m[0](env, u.window_slot)",
                         "    _acts = memo.get(_k, _missing)",
                         "    if _acts is _missing:",
                         f"        _acts = memo[_k] = {evaluate}(u, {o})",
                         "    else:",
                         "        _m[2] += 1",
                         "for _a, _t in _acts:",
                         f"    _e = _Event(device, len(out), point, {line}, _a, inv, inner)",
                         "    out.append(_e)",
                         "    if _t is not None and targets is not None:",
                         "        targets.append((_e, _t))"]
            else:
                body.append(f"{code.const(rule)}(u, {o}, out, inv)")
        return code.function("walk(u, out, inv)", body)

    # -- nested pipelines ----------------------------------------------------
    def blocks(self, op: S.Pipeline, points: list[tuple[int, ...]],
               envs: list[dict[str, Any]]) -> dict[str, list[Region]]:
        """For each block spec, the HBM block every inner grid point uses (`envs`: the
        names each point sees)."""
        out: dict[str, list[Region]] = {}
        outer_env = self.env
        specs, ids, _ = self.pipeline_parts(op)
        for name, spec in specs.items():
            region = self.region(spec.ref, spec.line)
            block = self.ctx.shapes[ids[name]][1:]
            shape = region.shape
            for size, b in zip(shape, block):
                if size % b:
                    self.fail(spec.line, f"pipeline block `{name}`: `{spec.ref.text()}` has shape {list(region.shape)}, "
                                         f"which blocks of {list(block)} do not tile ({size} is not a multiple of {b})",
                              "choose block sizes that divide the region (e.g. rows a multiple of the row "
                              "block), or parameters (--param k=v) that make them divide")
            counts = [size // b for size, b in zip(shape, block)]
            whole = all(c == 1 for c in counts)  # one block: at index 0 (else `fail`), the region itself
            out[name] = []
            for pt, env in zip(points, envs):
                self.env = env
                idx = [self.ev(e, spec.line) for e in spec.index]
                self.env = outer_env
                if any(not 0 <= i < c for i, c in zip(idx, counts)):
                    self.fail(spec.line, f"pipeline block `{name}`: block index {idx} at inner point "
                                         f"{' '.join(f'{k}={v}' for k, v in zip(op.pipeline, pt))} is outside "
                                         f"the {counts} blocks of "
                                         f"`{spec.ref.text()}`", "keep each block index below the block count")
                if whole:  # shared, not an equal copy: later stages cache by the object
                    out[name].append(region)
                    continue
                box = list(region.box)
                for d, i, b in zip(region.kept, idx, block):
                    box[d] = (region.box[d][0] + i * b, region.box[d][0] + (i + 1) * b)
                out[name].append(Region(region.buffer, region.device, tuple(box), region.kept, region.itemsize))
        return out

    def pipeline_parts(self, op: S.Pipeline) -> tuple[dict[str, S.BlockSpec], dict[str, str], list[tuple[int, ...]]]:
        """A pipeline's block specs (`op.specs` builds a new dict at each call), their window
        buffers and its inner grid points, made once per op."""
        parts = self.pipelines.get(id(op))
        if parts is None:
            specs = op.specs
            parts = self.pipelines[id(op)] = (
                specs, {name: window_id(op, name) for name in specs},
                list(itertools.product(*(range(g) for g in self.ctx.pipeline_grids[id(op)]))))
        return parts

    def window(self, buffer: str, slot: int) -> Region:
        """Window `slot` of a pipeline block's buffer, or (slot None) the whole buffer. The
        same region at every point, so made once per device: an equal Region, shared
        (later stages cache by the object)."""
        key = (buffer, slot, self.device)
        region = self.windows.get(key)
        if region is None:
            shape = self.ctx.shapes[buffer]
            if slot is None:
                box, kept = tuple((0, d) for d in shape), tuple(range(len(shape)))
            else:
                box, kept = ((slot, slot + 1), *((0, d) for d in shape[1:])), tuple(range(1, len(shape)))
            region = self.windows[key] = Region(buffer, self.device, box, kept, self.ctx.itemsize[buffer])
        return region

    def whole(self, buffer: str) -> Region:
        """All of `buffer` on this device (`window`)."""
        return self.window(buffer, None)

    def pipeline(self, op: S.Pipeline, out: list[Event], inv: int) -> None:
        """A nested pipeline's events (`spell_pipeline`), from its template when an earlier
        grid point of this device had the same one (`pipeline_key`, `PipelineTemplate`).
        A pipeline whose key has come back in fewer than 1 of 8 of its first `MEMO_TRIAL`
        times (`memoized`) is spelled out directly from then on."""
        if id(op) in self.folding:  # pricing only: a handful of rows, spelled (`fold_pipelines`)
            self.spell_pipeline(op, out, inv, [])
            return
        trial = self.pipeline_trials.setdefault(id(op), [0, 0])
        key = None
        if trial[0] < self.MEMO_TRIAL or trial[1] * 8 >= trial[0]:
            trial[0] += 1
            key, regions = self.pipeline_key(op)
            template = self.memo.get(key) if key is not None else None
            if template is not None:
                trial[1] += 1
                template.instantiate(self, op, regions, out, inv)
                return
        start, targets = len(out), len(self.targets)
        marks: list[tuple] = []
        blocks = self.spell_pipeline(op, out, inv, marks)
        # (a pipeline makes no remote actions, and an arrival's wait at least one event)
        if key is not None and len(self.targets) == targets and all(m[1] < m[2] for m in marks if m[0] == "arrival"):
            self.memo[key] = PipelineTemplate(out[start:], start, blocks, regions, marks)

    def pipeline_key(self, op: S.Pipeline) -> tuple[tuple | None, tuple[Region, ...]]:
        """What a pipeline's events depend on, besides the grid point, the device and the
        arrivals' waits (`PipelineTemplate` evaluates those again): the regions of its
        block specs up to position (each one's shape and kept dims), and the values of the
        names everything else in it reads (the block indices, the arrivals' `when`, the
        body's ops, minus its own grid indices: `pipeline_reads`). Proof: `spell_pipeline`
        reads the regions only through `blocks`, which cuts each into blocks by indices and
        shapes alone, and compares blocks only by their boxes, whose equality does not
        depend on where the region starts; what else it computes, but the arrivals' waits,
        is a function of those names' values and of the window slots, which the same
        control flow sets the same way; and an arrival's wait adds its events without
        changing anything the pipeline computes after it. None when a region cannot be
        evaluated here (`spell_pipeline` then raises the error where it does) or inside
        another pipeline (window slots in use). Also returns the regions."""
        if self.window_slot:
            return None, ()
        reads = self.pipeline_reads.get(id(op))
        if reads is None:
            reads = self.pipeline_reads[id(op)] = self._pipeline_reads(op)
        env, keyed = self.env, self.keyed
        try:
            specs = self.pipeline_parts(op)[0]
            fast = self.spec_regions.get(id(op), _MISSING)
            if fast is _MISSING:
                fast = self.spec_regions[id(op)] = self.spec_regions_function(specs)
            try:
                regions, shapes = fast(env, self.place, self.device)
            except Exception:  # noqa: BLE001 -- the plain way gives them, or raises (None: no function)
                regions = tuple([self.region(spec.ref, spec.line) for spec in specs.values()])
                shapes = [(r.shape, r.kept) for r in regions]
            key = ("pipeline", id(op), self.core, self.inner, *shapes,
                   *[v if type(v) is int or (f := keyed.get(type(v))) is None else f(v)
                     for v in map(env.get, reads, itertools.repeat(_MISSING))])
            hash(key)  # (a value that cannot stand in a key: no template)
        except Exception:  # noqa: BLE001 -- whatever it is, `spell_pipeline` raises it in its place
            return None, ()
        return key, regions

    def spec_regions_function(self, specs: dict[str, S.BlockSpec]) -> Callable[..., Any]:
        """`pipeline_key`'s regions of a pipeline's block specs, `region(spec.ref)` of each in
        order, and each one's (shape, kept dims), as one generated function of (env,
        place, device) (`region_code`); where it raises, `pipeline_key` computes them
        the plain way."""
        code = E.Emitter()
        code.consts["_Region"] = Region
        body: list[str] = []
        for i, spec in enumerate(specs.values()):
            self.region_code(spec.ref, self.region_plan(spec.ref), code, body, f"_r{i}")
        regions = "".join(f"_r{i}, " for i in range(len(specs)))
        shapes = "".join(f"(_r{i}_shape, _r{i}.kept), " for i in range(len(specs)))
        return code.function("regions(env, place, device)", [*body, f"return ({regions}), ({shapes})"])

    def _pipeline_reads(self, op: S.Pipeline) -> tuple[str, ...]:
        """The names a pipeline reads besides its block specs' regions and its grid indices."""
        names: set[str] = set()
        for spec in op.specs.values():
            for e in spec.index:
                names |= E.names(e)
        for arrival in op.arrivals.values():  # (its wait is evaluated anew: `PipelineTemplate`)
            if arrival.when is not None:
                names |= E.names(arrival.when)
        for inner in walk_ops(op.do):
            names |= set(node_inputs(self.s, inner)[0])
        return tuple(sorted(names - set(op.pipeline)))

    def spell_pipeline(self, op: S.Pipeline, out: list[Event], inv: int, marks: list[tuple]) -> dict[str, list[Region]]:
        """`emit_pipeline` as the local DMAs and waits Pallas' pipeline scheduler issues
        (jax/_src/pallas/mosaic/pipeline.py, two buffers per block): the first input
        blocks are fetched before the loop; at step t, inputs whose block changes next are
        prefetched into the other window, the current ones waited for, the body run,
        outputs whose block changes next written back, and the previous write-back waited
        for. Each window slot has its own DMA semaphore, as in Pallas.

        An input block that `arrives` by a remote copy is waited for (that copy's `wait_recv`,
        evaluated at the inner point whose block is fetched) right before each of its
        fetches where the arrival's `when` holds, where the emitted kernel's `copy_in`
        override waits: so a fetch never reads bytes still landing unless a wait is missing
        or waits for other bytes, which the later checks then report.

        Returns the blocks (`blocks`), and lists in `marks` each DMA of a block ("dma", its
        event's position in `out`, the block, the side, the inner point) and each arrival's
        wait ("arrival", the positions of its events, the block, the inner point fetched,
        the inner indices it was evaluated at), for `PipelineTemplate`."""
        specs, ids, points = self.pipeline_parts(op)
        outer_env = self.env
        envs = [{**outer_env, **dict(zip(op.pipeline, pt))} for pt in points]
        blocks = self.blocks(op, points, envs)
        last = len(points) - 1
        slots = {name: {"copy": 0, "wait": 0} for name in specs}

        def changes(name: str, t: int, u: int) -> bool:
            return not 0 <= u <= last or blocks[name][t].box != blocks[name][u].box

        def dma(name: str, side: str, t: int) -> None:
            spec, slot = specs[name], slots[name]["copy"]
            sem = (self.device, f"{ids[name]}#{side}", (slot,))
            src, dst = ((blocks[name][t], self.window(ids[name], slot)) if side == "in" else
                        (self.window(ids[name], slot), blocks[name][t]))
            marks.append(("dma", len(out), name, side, t))
            self.emit(out, DmaStart(ids[name], src, dst, None, sem), spec.line, inv)
            slots[name]["copy"] ^= 1

        def fetch(name: str, t: int) -> None:
            arrival = op.inputs[name].arrives
            if arrival is not None:  # the block lands by a remote copy: wait for it first
                outer, self.env = self.env, envs[t]
                try:
                    if arrival.when is None or self.value(arrival.when, arrival.line):
                        first = len(out)
                        UNROLL[S.WaitRecv](self, arrival.wait, out, inv)
                        marks.append(("arrival", first, len(out), name, t, self.inner))
                finally:
                    self.env = outer
            dma(name, "in", t)

        def wait(name: str, side: str) -> None:
            spec, slot = specs[name], slots[name]["wait"]
            nbytes = self.window(ids[name], slot).nbytes
            self.emit(out, SemWait((self.device, f"{ids[name]}#{side}", (slot,)), nbytes, "wait", ids[name]),
                      spec.line, inv)

        around = self.inner  # the indices of loops around the pipeline
        self.inner = (*around, *zip(op.pipeline, points[0]))
        for name in specs:  # fresh VMEM windows hold garbage
            self.emit(out, Compute("allocate", self.whole(ids[name])), op.line, inv)
        for name in op.inputs:
            fetch(name, 0)
        fold = self.folding.get(id(op))
        row = len(points) // fold[1] if fold else 0  # inner points per row of the outer index
        folded: list[int] = []
        for t, pt in enumerate(points):
            if fold and t in (row, 3 * row):  # rows 1 and 2 stand for `fold[2]` repetitions
                folded.append(len(out))
            self.inner = (*around, *zip(op.pipeline, pt))
            for name in op.inputs:
                if t < last and changes(name, t, t + 1):
                    fetch(name, t + 1)
            for name in op.inputs:
                if t == 0 or changes(name, t, t - 1):
                    wait(name, "in")
            self.window_slot = {name: (ids[name], slots[name]["wait" if name in op.inputs else "copy"])
                                for name in specs}
            self.env = envs[t]
            self.walk(op.do, out, inv)
            self.env, self.window_slot = outer_env, {}
            for name in op.outputs:
                if changes(name, t, t + 1):
                    dma(name, "out", t)
            for name in op.outputs:
                if t > 0 and changes(name, t, t - 1):
                    wait(name, "out")
                    slots[name]["wait"] ^= 1
            for name in op.inputs:
                if changes(name, t, t + 1):
                    slots[name]["wait"] ^= 1
        for name in op.outputs:
            wait(name, "out")
        self.inner = around
        if fold:
            self.folds.append((out, folded[0], folded[1], fold[2], len(around), len(out)))
        return blocks

    FOLD_ROWS = 8  # the least outer extent a pipeline is folded at (`fold_pipelines`)

    def fold_pipelines(self) -> None:
        """For pricing only (`cost/steady.py`; the verifier never folds): spell each
        pipeline whose rows (the points of one value of its outer index) all make the same
        events but for their HBM blocks with four rows, or five for an odd count, and
        record that rows 1 and 2 repeat: `folds` gets the event list and the fold
        (`Program.folds`). Why the rows repeat: the outer index is read
        only as a whole block index (`i`, never `i // 2` or in a `when`) and no block
        arrives by a remote copy (`foldable`), so where a block changes from point to point
        (`spell_pipeline`'s `changes`) and what the body does are the same in every row
        but the first and the last; the window slots flip the same number of times in each
        row, so two rows make a period; and a block's bytes do not depend on where it is.
        A folded program's events stand for more than they are: only `cost` reads it."""
        if self.s.megacore or self.s.kernels:
            return
        for op in walk_ops(self.s.all_ops):
            if isinstance(op, S.Pipeline) and foldable(self.s, op):
                grid = self.ctx.pipeline_grids[id(op)]
                if grid[0] >= self.FOLD_ROWS:
                    spelled = 4 + grid[0] % 2
                    self.folding[id(op)] = (grid[0], spelled, (grid[0] - spelled) // 2 + 1)
                    self.ctx.pipeline_grids[id(op)] = (spelled, *grid[1:])

    def set_point(self, point: tuple[int, ...]) -> None:
        self.point = (self.core, *point) if self.s.megacore else point
        env: dict[str, Any] = {**self.ctx.static, "me": self.me(), **dict(zip(self.s.grid, point))}
        for name, values in self.data.items():
            env[name] = values[self.device]
        if self.s.megacore or self.s.cores > 1:
            env["core"] = self.core
        if len(self.ctx.sizes) > 1:
            for i, a in enumerate(self.ctx.sizes):
                env[f"me_{a}"] = self.me_axis(i, a)
        self.env = env
        # A let that does not vary is the value it had at this device's first point: the
        # same function (`value`) of the same values. That first point evaluates every let
        # in order, so an error is raised where and as it was without the shortcut.
        if self.fixed is not None and self.fixed[0] == self.device:
            if self.later_lets is None:
                self.later_lets = self.compile_later_lets()
            self.later_lets(env, self.fixed[1], self.derive, self.memo)
            return
        for i in range(len(self.derived)):
            env[self.derived[i][0]] = self.derive(i)
        self.fixed = (self.device, {name: env[name] for name, _, _, varies in self.derived if not varies})

    def derive(self, i: int) -> Any:
        """The value of builtin or let number i (`derived`) where `env` holds the earlier ones."""
        name, e, line, _ = self.derived[i]
        cheap = self.cheap_lets.get(name)
        if cheap is None:
            return self.value(e, line)
        try:  # `value`'s plain evaluation, without its frames
            return cheap(self.env)
        except E.ExprError as err:
            self.expr_failed(err, line)

    def compile_later_lets(self) -> Callable[..., None]:
        """`set_point`'s work after a device's first point, as one function (`E.block_evaluator`):
        each builtin and let that does not vary is the value it had at the first point, the
        same function (`value`) of the same values; the others are what `derive` gives, which
        computes each one the generated code cannot (and raises its error, where and as the
        loop over `derive` would); each `costly` one is memoized (symbolic arithmetic costs
        more than a memo key), on the names it reads that are not `device_constants`."""
        steps = []
        for name, e, _, varies in self.derived:
            key = None
            if name in self.costly:  # as `value` memoizes it (in `memo`, the device's own)
                key = tuple(sorted(n for n in E.names(e) if n not in self.device_constants))
            steps.append((name, e if varies else None, key))
        return E.block_evaluator(steps, self.keyed)

    def emit(self, out: list[Event], action: Action, line: int, invocation: int, target: int | None = None) -> None:
        event = Event(self.device, len(out), self.point, line, action, invocation, self.inner)
        out.append(event)
        if target is not None and (self.core == 0 or self.s.cores > 1):  # megacore: core 1 sends nothing
            self.targets.append((event, target))

    def boundary(self, out: list[Event], kind: str, line: int, invocation: int, names: list[str]) -> None:
        """Kernel entry or exit: the whole of each named buffer changes hands, modelled as a write."""
        for name in names:  # not pipeline windows: a pipeline drains its own
            self.emit(out, Compute(kind, self.whole(name)), line, invocation)

    def entry(self, out: list[Event], invocation: int) -> None:
        """With its own barrier, a schedule is responsible for not writing into a device
        before that device has entered the kernel: until then its memory belongs to
        whatever ran before. Model entry as a write of every non-input buffer.
        (Without `barrier:`, Pallas inserts a device barrier at kernel start.)"""
        self.boundary(out, "enter", self.s.barrier.line, invocation, [n for n, b in self.s.buffers.items()
                                                                      if b.kind != "input"])

    def exit(self, out: list[Event], invocation: int) -> None:
        """When the kernel returns, the caller reads its outputs and reuses all its memory:
        a DMA still reading or writing any buffer then races with whatever comes next.
        Model exit as a write of every buffer (Pallas adds no barrier at exit)."""
        self.boundary(out, "exit", self.s.line_of("body"), invocation, list(self.s.buffers))

    def interloper(self, out: list[Event], invocation: int, body: list[S.Op] | None = None) -> None:
        """Between two calls, another kernel with the same collective_id may run: model it
        as a single barrier with the same neighbours on the shared barrier semaphore (those
        of the first barrier in `body`, by default the schedule's)."""
        first = next((op for op in walk_ops(self.s.body if body is None else body) if isinstance(op, S.Barrier)),
                     None)
        if first is None:
            return
        self.set_point(tuple(0 for _ in self.ctx.grid))
        targets = [self.target(t, first.line) for t in first.barrier]
        for t in targets:
            self.emit(out, Signal((t, BARRIER, ()), 1, "another kernel's barrier"), first.line, invocation, t)
        self.emit(out, SemWait((self.device, BARRIER, ()), len(targets), "another kernel's barrier"),
                  first.line, invocation)

    def device_barrier(self, out: list[Event], invocation: int) -> None:
        """Without `barrier:`, Mosaic starts the kernel with its own barrier over all
        devices. It only matters between back-to-back calls; each call gets its own
        semaphore, because that barrier is the compiler's to get right, not the schedule's."""
        sem = f"{DEVICE_BARRIER}{invocation}"
        for k in range(1, self.n):  # to the next device first, as every device does (the same program, translated)
            t = (self.device + k) % self.n
            self.emit(out, Signal((t, sem, ()), 1, "Pallas' entry barrier"), self.s.line, invocation)
        self.emit(out, SemWait((self.device, sem, ()), self.n - 1, "Pallas' entry barrier"), self.s.line, invocation)

    def program_events(self, d: int, invocations: int) -> list[Event]:
        """Device d's events for a split-phase program: its calls in order, `invocations` times,
        each call one invocation of the verifier (`Event.invocation` counts calls), with the
        memory and semaphores handed from call to call as `verify/calls.py` says and
        `program_semaphores` names them."""
        s = self.s
        calls = s.calls
        uses = [call_buffers(s, body) for _, body in calls]
        inputs = set(s.buffers_of("input"))
        handover = Handover()
        events: list[Event] = []
        for rep in range(invocations):
            for c, (name, body) in enumerate(calls):
                inv = rep * len(calls) + c
                self.sem_ids, self.memo = self.call_sems[c], {}  # a call's semaphores are its own
                self.core, self.point = 0, tuple(0 for _ in self.grid_names)
                # VMEM scratch is the call's own: never handed on (it goes back at every exit)
                later = {b for used in uses[c + 1:] for b in used if s.buffers[b].kind != "vmem_scratch"}
                enter, exit_ = handover.call(uses[c], [b for b in uses[c] if b not in inputs], inputs, later)
                owns = any(isinstance(op, S.Barrier) for op in walk_ops(body))  # emitted with collective_id
                sync = entry_sync(owns, owns, inv)
                if sync.enter:
                    if sync.interloper:
                        self.interloper(events, inv, body)
                    self.boundary(events, "enter", s.line_of("kernels", name), inv, enter)
                elif sync.device_barrier:
                    self.device_barrier(events, inv)
                for point in itertools.product(*(range(g) for g in self.ctx.grid)):
                    self.set_point(point)
                    self.walk(body, events, inv)
                self.core = 0
                self.boundary(events, "exit", s.line_of("kernels", name), inv, exit_)
        self.sem_ids = {}
        return events

    def device_events(self, d: int, invocations: int) -> tuple[list[Event], list[Event]]:
        """Device d's events (core 0's) and, with megacore, its second core's."""
        s = self.s
        self.device = d
        self.memo = {}
        if s.kernels:
            return self.program_events(d, invocations), []
        events: list[Event] = []
        second: list[Event] = []
        for inv in range(invocations):
            self.core = 0
            self.point = tuple(0 for _ in self.grid_names)
            if s.barrier is not None:
                if inv:
                    self.interloper(events, inv)
                self.entry(events, inv)
            elif invocations > 1:
                self.device_barrier(events, inv)
            split = self.split
            for core, out in enumerate([events, second][:2 if s.megacore else 1]):
                self.core = core
                for point in itertools.product(*(range(g) for g in self.ctx.grid)):
                    if split is not None:  # a parallel axis over two TensorCores: core 1 runs its second half
                        self.core = int(point[split] >= self.ctx.grid[split] // 2)
                        out = second if self.core else events
                    self.set_point(point)
                    self.walk(s.body, out, inv)
            self.core = 0
            self.exit(events, inv)
        return events, second

    @property
    def split(self) -> int | None:
        """The grid axis (its position in `s.grid`) a megacore chip splits over its two
        TensorCores, besides megacore's own `core` axis: the first `parallel` one of at
        least 2 indices, as Mosaic and the Pallas importer (`pallas/program.py`) take it;
        core 1 runs the second half of its indices. None without one."""
        if self.s.megacore:
            return None
        return next((i for i, g in enumerate(self.s.grid)
                     if self.s.dimension_semantics.get(g) == "parallel" and self.ctx.grid[i] >= 2), None)

    def core_events(self, d: int, core: int, invocations: int) -> list[Event]:
        """With `cores: 2`, TensorCore `core` of chip d: a process of its own, running the
        whole body with `core` set, as `pl.kernel` over a TensorCoreMesh runs it. Core 0's
        process stands for the chip's kernel call as well: it enters the chip's buffers,
        then starts the other cores (`CORE_LAUNCH`, which they wait for without taking),
        and after its body waits for them to end (`CORE_JOIN`) before the caller takes the
        memory back. Another core enters and leaves only its own VMEM scratch. The events
        are made on chip d (`self.device`), then moved to the core's process and its own
        VMEM and semaphores (`on_core`)."""
        s = self.s
        self.device, self.memo, self.core = d, {}, core
        own = [name for name, b in s.buffers.items() if b.memory != "hbm"]
        events: list[Event] = []
        for inv in range(invocations):
            launch, join = (d, f"{CORE_LAUNCH}{inv}", ()), (d, f"{CORE_JOIN}{inv}", ())
            self.point = tuple(0 for _ in self.grid_names)
            if core:
                self.emit(events, SemWait(launch, 1, "launch", decrement=False), s.line, inv)
            if s.barrier is not None:
                if inv:
                    self.interloper(events, inv)
                self.boundary(events, "enter", s.barrier.line, inv, [n for n, b in s.buffers.items()
                                                                     if b.kind != "input" and (not core or n in own)])
            elif invocations > 1:
                self.device_barrier(events, inv)
            if not core:
                self.emit(events, Signal(launch, s.cores - 1, "launch"), s.line, inv)
            for point in itertools.product(*(range(g) for g in self.ctx.grid)):
                self.set_point(point)
                self.walk(s.body, events, inv)
            self.point = tuple(0 for _ in self.grid_names)
            if core:
                self.boundary(events, "exit", s.line_of("body"), inv, own)
                self.emit(events, Signal(join, 1, "join"), s.line, inv)
            else:
                self.emit(events, SemWait(join, s.cores - 1, "join", decrement=False), s.line, inv)
                self.exit(events, inv)
        if core:
            per_core = {name for name, b in s.buffers.items() if b.memory != "hbm"}
            per_core |= {window_id(op, name) for op in walk_ops(s.all_ops) if isinstance(op, S.Pipeline)
                         for name in op.specs}   # a pipeline's VMEM windows are the core's
            for ev in events:
                ev.device = core * self.n + d
                ev.action = on_core(ev.action, core * self.n, per_core)
        return events

    def program(self, devices: list[list[Event]], second_core: list[list[Event]], invocations: int,
                **extra: Any) -> Program:
        s = self.s
        kinds = {name: sem.kind for name, sem in s.semaphores.items()}
        kinds.update({sid: s.semaphores[name].kind for ids in self.call_sems for name, sid in ids.items()})
        windows = set()
        for op in walk_ops(s.all_ops):  # the DMA semaphores of each pipeline window slot
            if isinstance(op, S.Pipeline):
                kinds.update({f"{window_id(op, name)}#{side}": "dma" for name in op.specs for side in ("in", "out")})
                windows.update(window_id(op, name) for name in op.specs)
        kinds[BARRIER] = kinds[SECOND_BARRIER] = "barrier"
        if s.cores > 1:  # the chip's call starting and ending its cores (`core_events`)
            kinds.update({f"{name}{i}": "launch" for name in (CORE_LAUNCH, CORE_JOIN) for i in range(invocations)})
        kinds.update({f"{DEVICE_BARRIER}{i}": "barrier" for i in range(invocations * len(s.calls))})
        if s.kernels:  # a split-phase program: findings name each call's kernel
            extra.setdefault("call_names", [k for _ in range(invocations) for k in s.program])
        return Program(s.name, s.file, self.n * s.cores, self.grid_names, devices, kinds, dict(self.ctx.shapes), self.targets,
                       axis_sizes=dict(self.ctx.sizes), second_core=second_core,
                       dtypes={name: s.dtype_of(name) for name in s.buffers},
                       parallel=tuple(i for i, sem in enumerate(s.semantics) if sem == "parallel"),
                       windows=frozenset(windows), **extra)

    def run(self, invocations: int) -> Program:
        self.ctx.work(self.n, invocations)
        devices: list[list[Event]] = []
        second_core: list[list[Event]] = []
        if self.s.cores > 1:  # a process per TensorCore: chip d's core c is process c * N + d
            devices = [self.core_events(d, c, invocations) for c in range(self.s.cores) for d in range(self.n)]
            self.core = 0
            return self.program(devices, [], invocations, memories=self.n,
                                places=tuple(range(self.n)) * self.s.cores, cores=self.s.cores)
        for d in range(self.n):
            events, second = self.device_events(d, invocations)
            devices.append(events)
            if self.s.megacore or self.split is not None:
                second_core.append(second)
        return self.program(devices, second_core, invocations)


class PipelineTemplate:
    """A nested pipeline's events at one grid point, as `Unroller.spell_pipeline` made
    them, to make again where its `Unroller.pipeline_key` recurs: every action is shared
    as it is except the DMAs of HBM blocks, whose block is cut from the new regions, and
    the arrivals' waits, evaluated again where they were (their copy may read names the
    key leaves out). Each event keeps its line and inner indices; device, position, grid
    point and invocation are the new ones."""

    __slots__ = ("steps",)

    def __init__(self, events: list[Event], start: int, blocks: dict[str, list[Region]],
                 regions: tuple[Region, ...], marks: list[tuple]):
        names = list(blocks)  # the specs, in the order of `regions`
        # A DMA's block as (spec position, None) for a whole region (the region itself),
        # else (spec position, [(dim, start offset, stop offset)]): `blocks`' cut of region
        # r, moved by r's start.
        cut: dict[int, tuple[int, str, Any]] = {}
        arrivals: dict[int, tuple[int, str, int, tuple]] = {}  # first event -> (end, block, point, inner)
        for mark in marks:
            if mark[0] == "arrival":
                _, first, end, name, t, inner = mark
                arrivals[first - start] = (end - start, name, t, inner)
                continue
            _, at, name, side, t = mark
            i = names.index(name)
            block, region = blocks[name][t], regions[i]
            if block is region:
                moves = None
            else:
                moves = [(d, block.box[d][0] - region.box[d][0], block.box[d][1] - region.box[d][0])
                         for d in range(len(block.box)) if block.box[d] != region.box[d]]
            cut[at - start] = (i, side, moves)
        # Steps: (line, action, inner, cut) for an event; (None, block, inner point fetched,
        # inner indices) for an arrival's wait, in place of the events it made.
        self.steps: list[tuple] = []
        k = 0
        while k < len(events):
            if k in arrivals:
                end, name, t, inner = arrivals[k]
                self.steps.append((None, name, t, inner))
                k = end
                continue
            ev = events[k]
            self.steps.append((ev.line, ev.action, ev.inner, cut.get(k)))
            k += 1

    def instantiate(self, u: "Unroller", op: S.Pipeline, regions: tuple[Region, ...], out: list[Event],
                    inv: int) -> None:
        device, point = u.device, u.point
        for line, action, inner, cut in self.steps:
            if line is None:  # an arrival's wait: `spell_pipeline`'s `fetch`, at the same point
                name, t, inner = action, inner, cut
                outer_env, outer_inner = u.env, u.inner
                u.env = {**outer_env, **dict(zip(op.pipeline, u.pipeline_parts(op)[2][t]))}
                u.inner = inner
                try:
                    UNROLL[S.WaitRecv](u, op.inputs[name].arrives.wait, out, inv)
                finally:
                    u.env, u.inner = outer_env, outer_inner
                continue
            if cut is not None:
                i, side, moves = cut
                block = region = regions[i]
                if moves is not None:
                    box = list(region.box)
                    for d, lo, hi in moves:
                        box[d] = (region.box[d][0] + lo, region.box[d][0] + hi)
                    block = Region(region.buffer, region.device, tuple(box), region.kept, region.itemsize)
                action = (DmaStart(action.copy, block, action.dst, None, action.recv_sem) if side == "in"
                          else DmaStart(action.copy, action.src, block, None, action.recv_sem))
            out.append(Event(device, len(out), point, line, action, inv, inner))


def unroll(sched: S.Schedule, n: int | None = None, *, invocations: int = 1,
           sizes: dict[str, int] | None = None, data: dict | None = None) -> Program:
    """The event lists of all devices of one instance of the schedule: `n` devices along its
    axis, or `sizes` (axis -> devices) for a schedule over several axes, `n` their product.
    `data`: one sample of the runtime data (`ringc.data`), needed when the schedule has `data:`.
    Raises `ScheduleError` for N-dependent bad input, `DataFault` for a region the data puts
    outside its buffer."""
    if sched.data and data is None:
        raise ScheduleError(f"`{sched.name}` reads runtime data ({', '.join(sched.data)}), so it is checked for "
                            "samples of it", file=sched.file, line=sched.line_of("data"),
                            fix="ringc check: pass --data random:K (K samples drawn from the declared "
                                "constraints) or --data FILE.json; ringc run draws its own sample (--seed); "
                                "cost, show and tune do not take runtime data yet")
    if sizes is None:
        if len(sched.axes) > 1:
            raise ScheduleError(
                f"`{sched.name}` runs over {len(sched.axes)} axes ({', '.join(sched.axes)}), so one device count "
                "does not say how many devices lie along each", file=sched.file, line=sched.line_of("axes"),
                fix=f"give a topology with {len(sched.axes)} axes, e.g. --topology torus:2x4")
        if n is None:
            raise ScheduleError("no device count given", file=sched.file, fix="pass --devices N")
        sizes = {sched.axes[0]: n}
    if list(sizes) != list(sched.axes):
        raise ValueError(f"sizes {sizes} must list the schedule's axes {sched.axes} in order")
    if n is None:
        n = prod(sizes.values())
    if n < 1 or any(v < 1 for v in sizes.values()) or n != prod(sizes.values()):
        raise ScheduleError(f"N must be at least 1 and the product of the axis sizes, got {n} for {sizes}",
                            file=sched.file)
    return Unroller(sched, n, sizes, data).run(invocations)



def program_semaphores(sched: S.Schedule) -> list[dict[str, str]]:
    """For each call of a split-phase program, the semaphore each declared name stands for.
    A call's semaphores are its own, fresh and at zero (`name@kernel`, `#2` on the kernel's
    second call), except those it `takes`: the ones the call that `returns` them had. Empty
    for a plain schedule (names stand for themselves)."""
    if not sched.kernels:
        return [{}]
    out: list[dict[str, str]] = []
    handed: dict[str, str] = {}
    seen: dict[str, int] = {}
    for k in sched.program:
        kernel = sched.kernels[k]
        seen[k] = seen.get(k, 0) + 1
        suffix = f"@{k}" + (f"#{seen[k]}" if seen[k] > 1 else "")
        ids = {name: handed.pop(name) if name in kernel.takes and name in handed else name + suffix
               for name in sched.semaphores}
        handed.update({name: ids[name] for name in kernel.returns})
        out.append(ids)
    return out


def point_env(sched: S.Schedule, sizes: dict[str, int], device: int, point: tuple[int, ...]) -> dict[str, Any]:
    """The names an expression sees on `device` at grid `point`: me, N, params, grid
    indices, left/right and the lets (for tools that display them, like `ringc show`)."""
    u = Unroller(sched, prod(sizes.values()), sizes)
    u.device = device
    u.set_point(point)
    return dict(u.env)


def buffer_shapes(sched: S.Schedule, sizes: dict[str, int]) -> dict[str, tuple[int, ...]]:
    """Every buffer's full shape for these axis sizes, without unrolling. Raises
    `ScheduleError` when a shape does not divide (e.g. for `ringc cost --bytes`)."""
    return dict(_Context(sched, prod(sizes.values()), sizes).shapes)


# ------------------------------------------------------------------ the rules, one per op class
#
# `UNROLL[op class](unroller, op, out, invocation)` appends the op's events to `out`.
# A plain op's rule is `actions_rule(evaluate)`: `evaluate(unroller, op)` gives its concrete
# actions, each with the remote target to check (or None), memoized on the values it reads.

UNROLL: RuleTable[Callable[..., None]] = RuleTable("unroll (ringc/verify/unroll.py UNROLL)", "ops")


def actions_rule(evaluate: Callable[..., list[tuple[Action, int | None]]]) -> Callable[..., None]:
    """The UNROLL rule of a plain op whose actions `evaluate` computes."""
    def rule(u: Unroller, op: S.Op, out: list[Event], invocation: int) -> None:
        for action, target in u.memoized(op, evaluate, u, op):
            u.emit(out, action, op.line, invocation, target)
    rule.evaluate = evaluate  # type: ignore[attr-defined]
    return rule


@UNROLL.register(S.When)
def _unroll_when(u: Unroller, op: S.When, out: list[Event], invocation: int) -> None:
    if u.value(op.when, op.line):
        u.walk(op.do, out, invocation)


@UNROLL.register(S.Loop)
def _unroll_loop(u: Unroller, op: S.Loop, out: list[Event], invocation: int) -> None:
    u.loop(op, out, invocation)


@UNROLL.register(S.Pipeline)
def _unroll_pipeline(u: Unroller, op: S.Pipeline, out: list[Event], invocation: int) -> None:
    u.pipeline(op, out, invocation)


@UNROLL.register(S.Start)
@actions_rule
def _start(u: Unroller, op: S.Start) -> list[tuple[Action, int | None]]:
    return u.copy_actions(op, _start_plain)


def _start_plain(u: Unroller, op: S.Start) -> list[tuple[Action, int | None]]:
    line, name = op.line, op.copy_name
    outer, u.env = u.env, u.bind(op.start, line)
    try:
        c, src, dst = u.copy_parts(name, line)
        if c.remote:
            target = u.target(c.to, line)
            dst_on_target = Region(dst.buffer, target, dst.box, dst.kept, dst.itemsize)
            return [(DmaStart(name, src, dst_on_target, u.sem(c.send_sem, u.device, line),
                              u.sem(c.recv_sem, target, line), explicit_self=c.explicit_self), target)]
        return [(DmaStart(name, src, dst, None, u.sem(c.sem, u.device, line)), None)]
    finally:
        u.env = outer


@UNROLL.register(S.Wait, S.WaitSend, S.WaitRecv)
@actions_rule
def _wait(u: Unroller, op: S.Op) -> list[tuple[Action, int | None]]:
    return u.copy_actions(op, _wait_plain)


def _wait_plain(u: Unroller, op: S.Op) -> list[tuple[Action, int | None]]:
    line, name = op.line, op.copy_name
    outer, u.env = u.env, u.bind(op.copy_use, line)
    try:
        c, src, dst = u.copy_parts(name, line)
        if not c.remote:
            return [(SemWait(u.sem(c.sem, u.device, line), dst.nbytes, "wait", name), None)]
        out: list[tuple[Action, int | None]] = []
        # Pallas' descriptor.wait() is wait_send() then wait_recv().
        if "send" in op.copy_halves:
            out.append((SemWait(u.sem(c.send_sem, u.device, line), src.nbytes, "wait_send", name), None))
        if "recv" in op.copy_halves:
            out.append((SemWait(u.sem(c.recv_sem, u.device, line), dst.nbytes, "wait_recv", name), None))
        return out
    finally:
        u.env = outer


@UNROLL.register(S.Signal)
@actions_rule
def _signal(u: Unroller, op: S.Signal) -> list[tuple[Action, int | None]]:
    line = op.line
    inc = u.ev(op.inc, line)
    if inc <= 0:
        u.fail(line, f"signal increment {inc} is not positive", "signals only add: use inc >= 1")
    out: list[tuple[Action, int | None]] = []
    for t in op.to:
        target = u.target(t, line)
        out.append((Signal(u.sem(op.signal, target, line), inc), target))
    return out


@UNROLL.register(S.SemWait)
@actions_rule
def _sem_wait(u: Unroller, op: S.SemWait) -> list[tuple[Action, int | None]]:
    value = u.ev(op.value, op.line)
    if value <= 0:
        u.fail(op.line, f"wait value {value} is not positive", "wait for at least 1")
    return [(SemWait(u.sem(op.sem_wait, u.device, op.line), value, "sem_wait"), None)]


@UNROLL.register(S.Barrier)
@actions_rule
def _barrier(u: Unroller, op: S.Barrier) -> list[tuple[Action, int | None]]:
    targets = [u.target(t, op.line) for t in op.barrier]
    out: list[tuple[Action, int | None]] = [(Signal((t, BARRIER, ()), 1, "barrier"), t) for t in targets]
    out.append((SemWait((u.device, BARRIER, ()), len(targets), "barrier"), None))
    if op.double:
        out += [(Signal((t, SECOND_BARRIER, ()), 1, "barrier"), t) for t in targets]
        out.append((SemWait((u.device, SECOND_BARRIER, ()), len(targets), "barrier"), None))
    return out


@UNROLL.register(S.Zero)
@actions_rule
def _zero(u: Unroller, op: S.Zero) -> list[tuple[Action, int | None]]:
    return [(Compute("zero", u.region(op.zero, op.line)), None)]


@UNROLL.register(S.Accumulate, S.Assign, S.Cast)
@actions_rule
def _elementwise(u: Unroller, op: S.Op) -> list[tuple[Action, int | None]]:
    line, kind = op.line, op.tag
    dst, src = u.region(getattr(op, kind), line), u.region(op.src, line)
    u.same_shape(dst, src, line, kind)
    base = None
    if getattr(op, "base", None) is not None:
        base = u.region(op.base, line)
        u.same_shape(dst, base, line, f"{kind} base")
    return [(Compute(kind, dst, src, base=base), None)]


@UNROLL.register(S.Matmul)
@actions_rule
def _matmul(u: Unroller, op: S.Matmul) -> list[tuple[Action, int | None]]:
    line = op.line
    dst, a, b = (u.region(r, line) for r in (op.matmul, op.a, op.b))
    for r in (dst, a, b):
        if len(r.shape) != 2:
            u.fail(line, f"matmul works on 2-D blocks, but `{r.text()}` has shape {list(r.shape)}",
                   "index the leading dimensions away, e.g. `buf[slot]`")
    ca, cb = op.contract
    side = ("rows", "columns")
    if a.shape[ca] != b.shape[cb]:
        u.fail(line, f"matmul: `{a.text()}` is {list(a.shape)} and `{b.text()}` is {list(b.shape)}: "
                     f"a's {side[ca]} ({a.shape[ca]}) must equal b's {side[cb]} ({b.shape[cb]}), "
                     f"the dims `contract: [{ca}, {cb}]` multiplies together",
               "slice both operands to the same k block")
    want = (a.shape[1 - ca], b.shape[1 - cb])
    if dst.shape != want:
        u.fail(line, f"matmul: `{dst.text()}` has shape {list(dst.shape)} but the product is {list(want)}",
               f"make the destination a's {side[1 - ca]} by b's {side[1 - cb]}")
    return [(Compute("matmul", dst, a, b, op.accumulate, contract=(ca, cb)), None)]


def copy_line(sched: S.Schedule, name: str) -> int | None:
    """The line of copy `name`'s entry under `copies:`, where its regions are written."""
    return sched.copies[name].line or sched.line_of("copies", name)


def traced_indices(sched: S.Schedule, sizes: dict[str, int]) -> None:
    """Raise `ScheduleError` for a copy the emitted kernel traces with a static slice past its
    buffer: a `start:size` of N, the axis sizes, the params, the static lets and the copy's
    arguments of that kind only, so Python ints when the kernel is traced, where JAX
    refuses a slice that leaves its dimension ("Out of bound slice"; a point index is not
    checked there). The emitted kernel traces every op whose guards' static terms hold
    (`codegen.pallas`, `op_when`: those are a Python `if` around the `pl.when` of the rest),
    whether or not a device ever runs it; the unroller, which follows the runs, never
    evaluates a branch that no device takes (an op every device runs is its to check).
    Ops inside a `loop` or a pipeline are left to the unroller (their indices are the
    loop's)."""
    if sched.kernels:
        return
    r = resolved(sched)
    n = prod(sizes.values())
    ctx = _Context(sched, n, sizes)

    def value(e: E.Expr, env: dict[str, Any] = ctx.static) -> Any:   # of a static expression
        return E.evaluate(r.inline(e), env)

    def walk(ops: list[S.Op], guarded: bool) -> None:   # guarded: under a `pl.when` (a traced term)
        for op in ops:
            if isinstance(op, S.When):
                static, traced = r.split_guard(op.when)
                try:
                    if all(value(t) for t in static):   # the branch is traced
                        walk(op.do, guarded or bool(traced))
                except E.ExprError:
                    continue   # (the unroller's to report, where a device evaluates it)
            elif guarded and op.copy_halves and op.copy_use is not None:   # (unguarded: every device runs it)
                copy(op.copy_use, op.line)

    def copy(use: S.CopyUse, line: int) -> None:
        c = sched.copies.get(use.name)
        if c is None:
            return
        try:
            env = {**ctx.static, **{a: value(e) for a, e in use.args if r.is_static(e)}}
        except E.ExprError:
            return
        for ref in (c.src, c.dst):
            shape = ctx.shapes.get(ref.name) if ref is not None else None
            for dim, index in enumerate(ref.indices if shape else ()):
                if not (isinstance(index, E.Slice) and index.start is not None and index.size is not None
                        and r.is_static(index.start, env) and r.is_static(index.size, env)):
                    continue
                try:
                    start, size = value(index.start, env), value(index.size, env)
                except E.ExprError:
                    continue
                if start < 0 or size <= 0 or start + size > shape[dim]:
                    written = line if c.args else (copy_line(sched, use.name) or line)
                    raise ScheduleError(
                        f"`{ref.text()}`: slice {start}:{size} (start:size) leaves dimension {dim} of `{ref.name}` "
                        f"(size {shape[dim]}) (N={n}), where copy `{use.name}` is used at line {line}: its start "
                        "and size do not vary, and the emitted kernel traces the op wherever its guard's terms of N "
                        "and params hold, also where no device runs it: a static slice past the buffer fails that "
                        "trace (\"Out of bound slice\")", file=sched.file, line=written,
                        fix="keep the slice in range for the N and params the op is traced with, or rule the "
                            "branch out by a term of N and params in its `when:` (emitted as a Python `if`, not traced)")

    walk(sched.body, False)

