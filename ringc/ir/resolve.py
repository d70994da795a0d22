"""Static checks that need the whole schedule: names, kinds, ranks and memory spaces.

Everything here holds for every N. Checks that depend on N (exact divisions, indices in
range) happen when the schedule is unrolled (`ringc.verify.unroll`).
"""

from __future__ import annotations

import difflib
import functools
import keyword
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Iterable, Iterator, Mapping

from .. import limits
from ..collectives import COLLECTIVES
from ..errors import ScheduleError
from . import expr as E
from . import schema as S
from .dtypes import ITEMSIZE
from .rules import RuleTable

__all__ = ["BUILTINS", "BUILTIN_EXPRS", "axis_builtins", "axis_size_env", "axis_builtin_exprs",
           "builtin_exprs", "Resolved", "resolved", "walk_ops", "copy_ops",
           "pipeline_windows", "call_buffers",
           "RESOLVE", "resolve"]

# Names every expression may use, besides params, grid indices and lets.
BUILTINS = {
    "me": "this device's index along the schedule axis",
    "N": "the number of devices along the schedule axis",
    "left": "(me - 1) % N",
    "right": "(me + 1) % N",
}
BUILTIN_EXPRS = {"left": E.parse("(me - 1) % N"), "right": E.parse("(me + 1) % N")}


def axis_builtins(axes: list[str]) -> dict[str, str]:
    """The per-axis names of a schedule over `axes`, with their meaning. For axis `a`:
    `me_a` and `N_a` (coordinate and size along a), `left_a` and `right_a` (the neighbour
    along a, other coordinates kept, as a device index over all the schedule's axes).
    `me` and `N` are then the row-major index and count over all the axes, as
    `lax.axis_index(axes)` and the size of a `lax` collective over the axis tuple.
    A schedule over one axis has just `me`, `N`, `left` and `right`."""
    out: dict[str, str] = {}
    if len(axes) < 2:
        return out
    for a in axes:
        out[f"me_{a}"] = f"this device's coordinate along axis {a}"
        out[f"N_{a}"] = f"the number of devices along axis {a}"
        out[f"left_{a}"] = f"the neighbour at me_{a} - 1 (mod N_{a}), other coordinates kept"
        out[f"right_{a}"] = f"the neighbour at me_{a} + 1 (mod N_{a}), other coordinates kept"
    return out


def axis_size_env(axes: list[str], sizes: Mapping[str, int]) -> dict[str, int]:
    """The values of `N_a` for a schedule over several axes (none for one axis)."""
    return {f"N_{a}": sizes[a] for a in axes} if len(axes) > 1 else {}


def axis_builtin_exprs(axes: list[str]) -> dict[str, E.Expr]:
    """`left_a` / `right_a` as expressions over `me`, `me_a` and the sizes (row-major strides)."""
    return dict(_axis_builtin_exprs(tuple(axes)))


@functools.lru_cache(maxsize=256)
def _axis_builtin_exprs(axes: tuple[str, ...]) -> dict[str, E.Expr]:
    out: dict[str, E.Expr] = {}
    if len(axes) < 2:
        return out
    for i, a in enumerate(axes):
        stride = " * ".join(f"N_{b}" for b in axes[i + 1:])
        for name, step in (("left", "- 1"), ("right", "+ 1")):
            moved = f"((me_{a} {step}) % N_{a} - me_{a})"
            out[f"{name}_{a}"] = E.parse(f"me + {moved} * {stride}" if stride else f"me + {moved}")
    return out


def builtin_exprs(axes: list[str]) -> dict[str, E.Expr]:
    """Every derived builtin name of a schedule over `axes`, in dependency order."""
    return {**BUILTIN_EXPRS, **axis_builtin_exprs(axes)}


@dataclass(frozen=True)
class Resolved:
    """A schedule as `resolve` found it, with what the later stages derive from it, derived
    once: the unroller, the code generator, the reference, runtime data and `ringc run`
    read these and derive none again.

    - `static_lets`: the lets that depend only on `N`, the per-axis sizes `N_a`, the params
      and earlier such lets, each written out over N, N_a and params alone (earlier ones
      inlined). They are known before the kernel runs, so they may appear wherever a param
      may: shapes, grid sizes, pipeline grids and block shapes (`mbs: rows // M`,
      `rounds: log2(N)`). Where a shape uses one, it is evaluated inlined (`inline`), so its
      divisions are exact there as a shape's own are.
    - `builtins`: every derived builtin name over the schedule's axes, as expressions, in
      dependency order (`builtin_exprs`).
    - `static_names`: N, N_a and the params: what a name must reduce to to be static.

    `key` is what it was derived from (the axes, the params and the lets, compared by
    identity first): a copy of the schedule (`model_copy`) with any of them changed
    derives its own (`resolved`)."""
    schedule: S.Schedule = field(compare=False, repr=False)  # a schedule compares its resolved view
    key: tuple
    static_lets: Mapping[str, E.Expr]
    builtins: Mapping[str, E.Expr]
    static_names: frozenset[str]

    @classmethod
    def of(cls, sched: S.Schedule) -> "Resolved":
        static = frozenset({"N", *(f"N_{a}" for a in sched.axes if len(sched.axes) > 1), *sched.params})
        return cls(sched, (sched.axes, sched.params, sched.let), _static_lets(sched.let, static),
                   MappingProxyType(builtin_exprs(sched.axes)), static)

    def current(self, sched: S.Schedule) -> bool:
        """Whether this was derived from `sched` as it is now."""
        return self.schedule is sched and self.key == (sched.axes, sched.params, sched.let)

    def inline(self, e: E.Expr) -> E.Expr:
        """`e` with the static lets it names written out."""
        lets = self.static_lets
        return E.substitute(e, lets) if lets and not E.names(e).isdisjoint(lets) else e

    def is_static(self, e: E.Expr, loop_indices: Iterable[str] = ()) -> bool:
        """Whether `e` depends only on N, the per-axis sizes and params (through static lets
        too), and the indices of the `loop`s around it: a `when:` guard of that kind is
        decided when the kernel is traced (N and params once per N, a loop index once per
        iteration of the unrolled loop) and emitted as a Python `if`."""
        return E.names(self.inline(e)) <= self.static_names | set(loop_indices)

    def split_guard(self, e: E.Expr, loop_indices: Iterable[str] = ()) -> tuple[list[E.Expr], list[E.Expr]]:
        """A `when:` guard's `and` terms that are static (`is_static`: decided when the kernel
        is traced, a Python `if` around the rest) and the others (its `pl.when`): the branch
        is traced where the static ones hold, whether or not a device runs it."""
        static: list[E.Expr] = []
        traced: list[E.Expr] = []
        for term in E.conjuncts(e):
            (static if self.is_static(term, loop_indices) else traced).append(term)
        return static, traced


# The static lets depend on the let expressions and on which names are static, not on the
# params' values: the copies a search makes of one schedule with other params (`fit_volume`
# tries dozens) share its `let` mapping, so they share the derivation too. Keyed by that
# mapping's identity (held in the entry, so the id is not reused) and the static names.
_STATIC_LETS: dict[tuple[int, frozenset[str]], tuple[Mapping, Mapping[str, E.Expr]]] = {}
_STATIC_LETS_MAX = 256


def _static_lets(let: Mapping[str, E.Expr], static: frozenset[str]) -> Mapping[str, E.Expr]:
    """The lets that reduce to `static` names, in dependency order, each with the earlier
    ones inlined. Passes repeat until none is added: a let that names one written below it
    (refused at its own line by the let check) must not make a size that uses it look
    dynamic first, with nothing to name as the cause."""
    key = (id(let), static)
    hit = _STATIC_LETS.get(key)
    if hit is not None and hit[0] is let:
        return hit[1]
    lets: dict[str, E.Expr] = {}
    pending = {name: (e, E.names(e)) for name, e in let.items()}  # names once per let
    known = set(static)
    while True:
        ready = [name for name, (_, used) in pending.items() if used <= known]
        if not ready:
            break
        for name in ready:
            e, _ = pending.pop(name)
            lets[name] = E.substitute(e, lets) if lets else e
            known.add(name)
    out = MappingProxyType(lets)
    if len(_STATIC_LETS) >= _STATIC_LETS_MAX:
        _STATIC_LETS.clear()
    _STATIC_LETS[key] = (let, out)
    return out


def resolved(sched: S.Schedule) -> Resolved:
    """`sched`'s `Resolved`: the one `resolve` returned when the schedule was loaded, kept on
    it, while it is current; else (a schedule built in code, or a copy with other params)
    derived now and kept (without the checks: those are `resolve`'s)."""
    hit = sched._resolved
    if hit is None or not hit.current(sched):
        hit = sched._resolved = Resolved.of(sched)
    return hit


def walk_ops(ops: Iterable[S.Op]) -> Iterator[S.Op]:
    """Every op, depth first, including those inside `when` blocks and pipeline bodies."""
    for op in ops:
        yield op
        if isinstance(op, (S.When, S.Loop, S.Pipeline)):  # the ops with a body
            yield from walk_ops(op.do)


def copy_ops(ops: Iterable[S.Op]) -> Iterator[S.Op]:
    """Every op that starts or waits for a copy, depth first: the copy ops, and the wait
    before each fetch of a pipeline input block that `arrives` by a remote copy."""
    for op in walk_ops(ops):
        if op.copy_halves:
            yield op
        if isinstance(op, S.Pipeline):
            yield from (arrival.wait for arrival in op.arrivals.values())


def call_buffers(sched: S.Schedule, body: list[S.Op]) -> list[str]:
    """The schedule buffers one call's body names (through the copies it starts or waits for
    too, and its pipelines' blocks and the copies they arrive by), in declaration order: the
    arrays that pallas_call binds."""
    named: set[str] = set()
    for op in walk_ops(body):
        for role in ("reads", "writes"):
            named |= {r.name for r in sched.operands(op, role)}
        if isinstance(op, S.Pipeline):
            named |= {spec.ref.name for spec in op.specs.values()}
    for op in copy_ops(body):  # a wait too: its descriptor names both ends
        c = sched.copies[op.copy_name]
        named |= {c.src.name, c.dst.name}
    return [b for b in sched.buffers if b in named]


def pipeline_windows(sched: S.Schedule, op: S.Pipeline) -> dict[str, S.Buffer]:
    """The VMEM blocks a pipeline body sees, as buffers: each has its spec's block shape and
    the dtype of the HBM buffer it streams."""
    return {name: S.Buffer(kind="vmem_scratch", shape=spec.block, dtype=sched.dtype_of(spec.ref.name),
                           line=spec.line)
            for name, spec in op.specs.items()}


@dataclass(frozen=True)
class _Scope:
    """What ops may name: expression names, and inside a pipeline body its VMEM blocks."""
    names: set[str]
    windows: dict[str, S.Buffer] = field(default_factory=dict)
    readonly: set[str] = field(default_factory=set)   # input blocks
    pipeline: S.Pipeline | None = None


class _Resolver:
    def __init__(self, sched: S.Schedule):
        self.s = sched
        self.file = sched.file
        self.builtins = {**BUILTINS, **axis_builtins(sched.axes)}
        if sched.megacore:
            self.builtins["core"] = "the TensorCore running this grid point (megacore: 0 or 1)"
        elif sched.cores > 1:
            self.builtins["core"] = f"the TensorCore running the body (`cores: {sched.cores}`: 0..{sched.cores - 1})"
        self.outer = _Scope(self.step_names())
        self.window_lines = {name: op.line for op in walk_ops(sched.all_ops) if isinstance(op, S.Pipeline)
                             for name in op.specs}  # for a helpful error when one is used outside
        self.loop_lines = {name: op.line for op in walk_ops(sched.all_ops) if isinstance(op, S.Loop)
                           for name in op.loop}

    def fail(self, line: int, msg: str, fix: str | None = None, known: Iterable[str] = (),
             name: str | None = None) -> None:
        if fix is None and known:
            word = name if name is not None else (msg.split("`")[1] if "`" in msg else "")
            close = difflib.get_close_matches(word, list(known), n=1)
            fix = f"did you mean `{close[0]}`?" if close else f"known: {', '.join(sorted(known)) or 'none'}"
        raise ScheduleError(msg, file=self.file, line=line, fix=fix)

    # -- names ---------------------------------------------------------------
    def check_namespaces(self) -> None:
        s = self.s
        seen: dict[str, str] = {}
        # (kind, names, line of each name)
        groups: list[tuple[str, Iterable[str], Callable[[str], int]]] = [
            (kind, getattr(s, table), lambda n, t=table: s.line_of(t, n))
            for kind, table in (("param", "params"), ("grid index", "grid"), ("let", "let"),
                                ("buffer", "buffers"), ("data array", "data"), ("semaphore", "semaphores"),
                                ("copy", "copies"))]
        self.check_names(groups, seen)
        # A pipeline's grid indices and blocks are local to it: unique within it and never
        # shadowing a schedule name, but two pipelines may use the same ones.
        for op in walk_ops(s.all_ops):
            if isinstance(op, S.Loop):
                self.check_names([("loop index", op.loop, lambda n, line=op.line: line)], dict(seen))
            if isinstance(op, S.Pipeline):
                self.check_names([("pipeline grid index", op.pipeline, lambda n, line=op.line: line),
                                  ("pipeline block", op.specs, lambda n, specs=op.specs: specs[n].line)],
                                 dict(seen))

    def check_names(self, groups: list[tuple[str, Iterable[str], Callable[[str], int]]],
                    seen: dict[str, str]) -> None:
        for kind, table, line_of in groups:
            for name in table:
                line = line_of(name)
                # Copies are only named by op keys; every other name appears in expressions,
                # which Python's parser reads, so it must be a non-keyword identifier.
                # ASCII only: Python reads `ｒｏｗｓ` (full-width) as `rows` (NFKC), so two
                # names distinct here could be one name in the emitted module.
                if not isinstance(name, str) or not name.isascii() or not name.isidentifier() or (
                        kind != "copy" and keyword.iskeyword(name)):
                    self.fail(line, f"`{name}` is not a valid name for a {kind}",
                              fix="use ASCII letters, digits and _, not starting with a digit, and not a Python "
                                  "keyword")
                if name in self.builtins or name in ("min", "max", "barrier"):
                    self.fail(line, f"`{name}` is reserved and cannot name a {kind}",
                              fix="choose another name")
                if name in seen:
                    self.fail(line, f"`{name}` names both a {seen[name]} and a {kind}",
                              fix="every name in a schedule must be unique (a pipeline's names only "
                                  "within it)")
                seen[name] = kind

    def check_expr(self, e: E.Expr, allowed: set[str], line: int, what: str) -> None:
        for n in sorted(E.names(e) - allowed):
            self.loop_index_hint(n, line, what)
            if n in self.s.let and "N" in allowed and "me" not in allowed:  # a shape or size: static only
                uses = sorted(E.names(resolved(self.s).inline(self.s.let[n])) - self.static_names())
                self.fail(line, f"let `{n}` in {what} `{E.to_text(e)}` depends on {', '.join(f'`{u}`' for u in uses)}, "
                                "so it is not known before the kernel runs",
                          fix=f"{what} may use N, params and lets of those only: compute `{n}` from them, "
                              "or write the size out")
            if n in self.s.let and what.startswith("let "):  # a let written below this one
                self.fail(line, f"{what} uses let `{n}`, which is written below it (line "
                                f"{self.s.line_of('let', n)}): a let may use only the lets above it",
                          fix=f"move `{n}` above line {line}")
            self.fail(line, f"unknown name `{n}` in {what} `{E.to_text(e)}`", known=allowed)

    def loop_index_hint(self, n: str, line: int, what: str) -> None:
        """A loop index named where it is not in scope (a copy, a let, a size)."""
        loop = self.loop_lines.get(n)
        if loop is None:
            return
        fix = ("make it a template parameter: `name(k):` in `copies`, used as `start: name(k=" + n + ")`"
               if what.startswith("copy") else f"use `{n}` inside the loop's `do:`")
        self.fail(line, f"`{n}` in {what} is the index of the loop at line {loop}, which exists only inside "
                        "that loop's body", fix=fix)

    def static_names(self) -> set[str]:
        """N, N_a, params and the lets of them only (`Resolved.static_lets`): usable in shapes."""
        r = resolved(self.s)
        return {*r.static_names, *r.static_lets}

    def step_names(self) -> set[str]:
        return {*self.builtins, *self.s.params, *self.s.grid, *self.s.let, *self.s.data}

    def check_data(self) -> None:
        """Runtime data arrays: static shapes and bounds, an existing source of the same shape
        for a derived array, no cycle of derivations, and the arrays ragged_all_to_all reads."""
        s = self.s
        static = self.static_names()
        for name, d in s.data.items():
            line = s.line_of("data", name)
            for e, what in ((d.shape[0], "shape"), *((b, "range") for b in d.range or ()),
                            *(((d.sum_at_most, "sum_at_most"),) if d.sum_at_most is not None else ())):
                self.check_expr(e, static, line, f"{what} of data array `{name}`")
            src = d.source
            if src is not None:
                if src not in s.data:
                    self.fail(line, f"data array `{name}` is derived from `{src}`, which is no data array",
                              known=[n for n in s.data if n != name], name=src)
                if s.data[src].shape != d.shape:
                    self.fail(line, f"data array `{name}` has shape [{E.to_text(d.shape[0])}] but `{src}`, "
                                    f"which it is derived from, has [{E.to_text(s.data[src].shape[0])}]",
                              fix="give both the same shape")
                seen = [name]
                while src is not None:
                    if src in seen:
                        self.fail(line, f"data arrays derive from each other in a cycle: "
                                        f"{' <- '.join(seen + [src])}",
                                  fix="make one of them free, with `range: [lo, hi]`")
                    seen.append(src)
                    src = s.data[src].source if src in s.data else None
        needs = COLLECTIVES[s.collective.kind].data_arrays
        if needs:
            kind = s.collective.kind
            missing = [n for n in needs if n not in s.data]
            if missing:
                self.fail(s.collective.line, f"{kind} reads the data arrays {', '.join(needs)} "
                                             f"(the arguments of lax.{kind}), but "
                                             f"{', '.join(f'`{n}`' for n in missing)} "
                                             f"{'is' if len(missing) == 1 else 'are'} not declared",
                          fix="declare them under `data:` with shape [N]")
            for n in needs:
                if E.to_text(s.data[n].shape[0]) != "N":
                    self.fail(s.line_of("data", n), f"{kind}'s `{n}` has shape "
                                                    f"[{E.to_text(s.data[n].shape[0])}]: ringc sends one slice per "
                                                    "peer, so it is [N] (lax allows any multiple of N)",
                              fix="declare it with `shape: [N]`")

    def check_axes(self) -> None:
        s = self.s
        line = s.line_of("axes")
        for a in s.axes:
            if not isinstance(a, str) or not a.isascii() or not a.isidentifier() or keyword.iskeyword(a):
                self.fail(line, f"axis name `{a}` is not an identifier",
                          fix="name mesh axes with letters, digits and _, e.g. x, y, data")
        if len(set(s.axes)) != len(s.axes):
            self.fail(line, f"axes {s.axes} name an axis twice", fix="list each mesh axis once")

    # -- declarations ----------------------------------------------------------
    def check_cores(self) -> None:
        """`cores: 2`: both TensorCores run the whole body (Pallas `pl.kernel` over a
        TensorCoreMesh), which takes HBM operands only."""
        s = self.s
        if s.cores == 1:
            return
        line = s.line_of("cores")
        if s.megacore:
            self.fail(line, "`cores: 2` and `megacore: true` are two ways to use a chip's TensorCores: choose one",
                      fix="`cores: 2` runs the whole body on each core with its own VMEM and semaphores; "
                          "`megacore` splits a parallel grid axis and issues DMAs from core 0 only")
        for what, used in (("a split-phase program (`kernels`)", bool(s.kernels)),
                           ("runtime `data`", bool(s.data))):
            if used:
                self.fail(line, f"`cores: {s.cores}` cannot be used with {what} yet",
                          fix="write the collective as one `body` of copies, signals and computes, or drop `cores`")
        for name, buf in s.buffers.items():
            if buf.kind in ("input", "output") and buf.memory != "hbm":
                self.fail(s.line_of("buffers", name), f"`{name}` is an {buf.kind} in VMEM: with `cores: "
                          f"{s.cores}` the kernel's operands are in HBM, shared by the cores (a TensorCoreMesh "
                          "kernel takes no VMEM operands)", fix=f"drop `space: vmem` from `{name}`")

    def check_declarations(self) -> None:
        s = self.s
        static = self.static_names()
        if s.dtype not in ITEMSIZE:
            self.fail(s.line_of("dtype"), f"unknown dtype `{s.dtype}`", known=ITEMSIZE)
        for name, size in s.grid.items():
            self.check_expr(size, static, s.line_of("grid", name), "grid size")
        for name in s.dimension_semantics:
            if name not in s.grid:
                self.fail(s.line_of("dimension_semantics", name),
                          f"dimension_semantics names `{name}`, which is not a grid axis"
                          + (" (megacore's `core` axis is always parallel)" if name == "core" and s.megacore else ""),
                          known=s.grid, name=name)
        defined = {*self.builtins, *s.params, *s.grid, *s.data}
        for name, value in s.let.items():
            self.check_expr(value, defined, s.line_of("let", name), f"let `{name}`")
            defined.add(name)
        for name, buf in s.buffers.items():
            for dim in buf.full_shape:
                self.check_expr(dim, static, buf.line, f"shape of `{name}`")
            if buf.dtype is not None and buf.dtype not in ITEMSIZE:
                self.fail(buf.line, f"unknown dtype `{buf.dtype}` for buffer `{name}`", known=ITEMSIZE)
            if buf.shard is not None:
                for dim in buf.shard:
                    self.check_expr(dim, static, buf.line, f"shard shape of `{name}`")
            if buf.spec is not None:
                named = [a for entry in buf.spec if entry is not None
                         for a in ([entry] if isinstance(entry, str) else entry)]
                bad = [a for a in named if a not in s.axes]
                if bad:
                    self.fail(buf.line, f"spec of `{name}` names axis `{bad[0]}`, not among the schedule axes",
                              fix=f"use {s.axes} or null")
                rank = len(buf.shard) if buf.shard is not None else len(buf.full_shape)
                if len(buf.spec) != rank:
                    self.fail(buf.line, f"spec of `{name}` has {len(buf.spec)} entries but its per-device array "
                                        f"has rank {rank}", fix="give one entry (axis name or null) per dimension")
        for name, sem in s.semaphores.items():
            for dim in sem.shape:
                self.check_expr(dim, static, sem.line, f"shape of semaphore `{name}`")
        for kind in ("input", "output"):
            if not any(b.kind == kind for b in s.buffers.values()):
                self.fail(s.line, f"the schedule declares no {kind} buffer",
                          fix=f"add a buffer with `kind: {kind}`")
        coll = s.collective
        for kind, name in (("input", coll.input), ("output", coll.output)):
            if name is None:
                candidates = [n for n, b in s.buffers.items() if b.kind == kind]
                if len(candidates) > 1:
                    self.fail(coll.line, f"the schedule has several {kind}s ({', '.join(candidates)}); "
                                         f"say which one the collective is about", fix=f"set collective.{kind}")
            elif name not in s.buffers or s.buffers[name].kind != kind:
                self.fail(coll.line, f"collective.{kind} `{name}` is not an {kind} buffer",
                          known=[n for n, b in s.buffers.items() if b.kind == kind])
        inputs = [n for n, b in s.buffers.items() if b.kind == "input"]
        cls = COLLECTIVES[coll.kind]
        if "values" in cls.inputs:  # ring_attention: queries, keys, values
            others = [n for n in inputs if n != s.io_buffer("input")]
            for role, name in (("rhs", coll.rhs), ("values", coll.values)):
                if name is None:
                    self.fail(coll.line, f"{coll.kind} takes three inputs, the queries `{s.io_buffer('input')}` "
                                         f"(collective.input), the keys (collective.rhs) and the values "
                                         f"(collective.values); collective.{role} is not set",
                              fix=f"name the {'keys' if role == 'rhs' else 'values'} input in collective.{role} "
                                  f"(inputs: {', '.join(others) or 'none'})")
                if name not in others:
                    self.fail(coll.line, f"collective.{role} `{name}` is not an input buffer other than "
                                         f"collective.input", known=others, name=name)
            if coll.rhs == coll.values:
                self.fail(coll.line, f"collective.rhs and collective.values both name `{coll.rhs}`",
                          fix="the keys and the values are two input buffers")
        elif "rhs" in cls.inputs:
            others = [n for n in inputs if n != s.io_buffer("input")]
            what = ("multiplies two inputs, `{}` by a right-hand side" if cls.takes_rhs
                    else "takes two inputs, `{}` and the values kept where nothing lands (lax's `output`)")
            if coll.rhs is None and len(others) != 1:
                self.fail(coll.line, f"{coll.kind} {what.format(s.io_buffer('input'))}, but the other inputs "
                                     f"are {others or 'none'}",
                          fix="declare the right-hand input and name it in collective.rhs")
            if coll.rhs is not None and coll.rhs not in others:
                self.fail(coll.line, f"collective.rhs `{coll.rhs}` is not an input buffer other than "
                                     f"collective.input", known=others, name=coll.rhs)
        elif coll.rhs is not None:
            self.fail(coll.line, f"collective.rhs applies to matmul collectives and ragged_all_to_all, not to "
                                 f"{coll.kind}",
                      fix="remove `rhs`")
        if coll.values is not None and "values" not in cls.inputs:
            self.fail(coll.line, f"collective.values applies to ring_attention only, not to {coll.kind}",
                      fix="remove `values`")

    # -- references ------------------------------------------------------------
    def check_buffer_ref(self, ref: E.Ref, line: int, role: str, scope: "_Scope | None" = None) -> S.Buffer:
        scope = scope or self.outer
        buf = scope.windows.get(ref.name) or self.s.buffers.get(ref.name)
        if buf is None:
            if ref.name in self.window_lines:
                self.fail(line, f"`{ref.name}` in {role} is a block of the pipeline at line "
                                f"{self.window_lines[ref.name]} and exists only inside its body",
                          fix="use it inside that pipeline's `do:`, or name an HBM region here")
            self.fail(line, f"unknown buffer `{ref.name}` in {role}", known=[*self.s.buffers, *scope.windows],
                      name=ref.name)
        rank = len(buf.full_shape)
        if len(ref.indices) > rank:
            self.fail(line, f"`{ref.text()}` has {len(ref.indices)} indices but `{ref.name}` has rank {rank}",
                      fix=f"index at most {rank} dimensions (slots first, then shape)")
        for n in sorted(E.ref_names(ref) - scope.names):
            self.loop_index_hint(n, line, role)
            self.fail(line, f"unknown name `{n}` in `{ref.text()}`", known=scope.names)
        return buf

    def check_sem_ref(self, ref: E.Ref, line: int, kinds: tuple[str, ...], role: str,
                      names: set[str] | None = None) -> S.Semaphore:
        sem = self.s.semaphores.get(ref.name)
        if sem is None:
            self.fail(line, f"unknown semaphore `{ref.name}` in {role}", known=self.s.semaphores)
        if sem.kind not in kinds:
            self.fail(line, f"{role} needs a {' or '.join(kinds)} semaphore, but `{ref.name}` is {sem.kind}",
                      fix=f"declare `{ref.name}` as {kinds[0]} or use another semaphore")
        if len(ref.indices) != len(sem.shape) or any(isinstance(i, E.Slice) for i in ref.indices):
            want = f"`{ref.name}[i{', j' if len(sem.shape) > 1 else ''}]`" if sem.shape else f"`{ref.name}`"
            self.fail(line, f"`{ref.text()}` must select one semaphore of shape {[E.to_text(d) for d in sem.shape]}",
                      fix=f"write {want}")
        names = self.step_names() if names is None else names
        for n in sorted(E.ref_names(ref) - names):
            self.loop_index_hint(n, line, role)
            self.fail(line, f"unknown name `{n}` in `{ref.text()}`", known=names)
        return sem

    def check_writable(self, buf: S.Buffer, ref: E.Ref, line: int, scope: "_Scope | None" = None) -> None:
        if scope is not None and ref.name in scope.readonly:
            self.fail(line, f"`{ref.name}` is an input block of the pipeline at line {scope.pipeline.line} "
                            "and cannot be written", fix=f"declare `{ref.name}` under `outputs` to write it back")
        if buf.kind == "input":
            self.fail(line, f"`{ref.name}` is an input and cannot be written",
                      fix="copy it into a scratch or output buffer first")

    def check_vmem(self, buf: S.Buffer, ref: E.Ref, line: int, role: str) -> None:
        if buf.memory != "vmem":
            self.fail(line, f"{role} computes on VMEM, but `{ref.name}` lives in HBM",
                      fix=f"copy it to a vmem_scratch buffer with a local copy, or declare `{ref.name}` with "
                          "`space: vmem`")

    def check_copies(self) -> None:
        for name, c in self.s.copies.items():
            taken = self.step_names() | set(self.s.buffers) | set(self.s.semaphores) | set(self.s.copies)
            for a in c.args:
                if not isinstance(a, str) or not a.isascii() or not a.isidentifier() or keyword.iskeyword(a):
                    self.fail(c.line, f"`{a}` is not a valid name for a parameter of copy `{name}`",
                              fix="use ASCII letters, digits and _, not starting with a digit, and not a Python "
                                  "keyword")
                if a in taken or a in ("min", "max", "barrier"):
                    self.fail(c.line, f"parameter `{a}` of copy `{name}` shadows the schedule name `{a}`",
                              fix="choose another parameter name: a template sees the schedule's names too")
            if len(set(c.args)) != len(c.args):
                self.fail(c.line, f"copy `{name}` lists a parameter twice: {', '.join(c.args)}",
                          fix="give each template parameter once")
            names = self.step_names() | set(c.args)
            scope = _Scope(names)
            self.check_buffer_ref(c.src, c.line, f"copy `{name}` src", scope)
            dst = self.check_buffer_ref(c.dst, c.line, f"copy `{name}` dst", scope)
            self.check_writable(dst, c.dst, c.line)
            if c.remote:
                self.check_expr(c.to, names, c.line, f"copy `{name}` target")
                self.check_sem_ref(c.send_sem, c.line, ("dma",), f"copy `{name}` send_sem", names)
                self.check_sem_ref(c.recv_sem, c.line, ("dma",), f"copy `{name}` recv_sem", names)
            else:
                self.check_sem_ref(c.sem, c.line, ("dma",), f"copy `{name}` sem", names)

    def check_ops(self) -> None:
        bodies = [k.body for k in self.s.kernels.values()] if self.s.kernels else [self.s.body]
        for body in bodies:
            self.check_body(body, self.outer)

    def check_program(self) -> None:
        """A split-phase program: every name in `program` is a kernel, every kernel runs, and
        every semaphore handed on (`returns`) is taken by a later call (`takes`) that an earlier
        call returned it to; `returns` and `takes` name semaphores (buffers need no handing
        on: they are the program's arrays)."""
        s = self.s
        if not s.kernels:
            return
        line = s.line_of("program")
        if s.megacore:
            self.fail(s.line_of("megacore"), "a split-phase program (`kernels`) cannot use `megacore: true` yet",
                      fix="drop `megacore`, or write the collective as one kernel (`body`)")
        for k in s.program:
            if k not in s.kernels:
                self.fail(line, f"`program` calls `{k}`, which is not a kernel", known=s.kernels, name=k)
        for name, kernel in s.kernels.items():
            if name not in s.program:
                self.fail(s.line_of("kernels", name), f"kernel `{name}` is never called",
                          fix=f"add it to `program` (line {line}) or remove it")
            for key in ("returns", "takes"):
                for sem in getattr(kernel, key):
                    if sem in s.buffers:
                        self.fail(s.line_of("kernels", name, key), f"kernel `{name}` {key} buffer `{sem}`: `{key}` lists semaphores",
                                  fix="drop it: buffers are the program's arrays, and every call that names "
                                      "one gets it (in flight or not)")
                    if sem not in s.semaphores:
                        self.fail(s.line_of("kernels", name, key), f"kernel `{name}` {key} `{sem}`, which is not a semaphore",
                                  known=s.semaphores, name=sem)
        open_: dict[str, str] = {}  # semaphore -> the call that returned it, not yet taken
        for k in s.program:
            kernel = s.kernels[k]
            for sem in kernel.takes:
                if sem not in open_:
                    self.fail(s.line_of("kernels", k, "takes"), f"kernel `{k}` takes `{sem}`, but no earlier call of `program` "
                                           "returns it (its semaphores would be fresh ones, at zero)",
                              fix=f"add `{sem}` to the `returns` of the kernel that starts the DMAs on it")
                del open_[sem]
            for sem in kernel.returns:
                if sem in open_:
                    self.fail(s.line_of("kernels", k, "returns"), f"kernel `{k}` returns `{sem}`, but the one `{open_[sem]}` returned "
                                           "is not taken yet", fix=f"take `{sem}` in a call between them")
                open_[sem] = k
        for sem, k in open_.items():
            self.fail(s.line_of("kernels", k, "returns"), f"kernel `{k}` returns semaphore `{sem}`, but no later call of "
                                         "`program` takes it: the DMAs counted on it are never waited",
                      fix=f"add `takes: [{sem}]` to the kernel that waits for them, after `{k}` in `program`")

    depth = 1  # the nesting depth of the body being checked (`when` and `pipeline` blocks)

    def check_body(self, ops: list[S.Op], scope: "_Scope", depth: int = 1) -> None:
        outer, self.depth = self.depth, depth
        try:
            for op in ops:
                line, tag = op.line, op.tag
                if isinstance(op, (S.When, S.Loop, S.Pipeline)):
                    limits.check("op_depth", depth, "the nesting depth of `when`, `loop` and `pipeline` blocks",
                                 file=self.file, line=line, fix="combine nested guards with `and`")
                if isinstance(op, S.When) and not op.do:
                    self.fail(line, "`when` has an empty `do:`", fix="give it at least one operation, or remove it")
                if scope.pipeline is not None and not op.compute:
                    self.fail(line, f"`{tag}` cannot appear in a pipeline body: the inner kernel only "
                                    "computes on its blocks",
                              fix=f"move it before or after the pipeline at line {scope.pipeline.line}; "
                                  f"a body may use {', '.join(S.COMPUTE_OP_KEYS)}")
                RESOLVE[type(op)](self, op, scope)
        finally:
            self.depth = outer

    def check_compute(self, op: S.Op, scope: "_Scope") -> None:
        """zero, accumulate, assign, cast, matmul: VMEM operands, a writable destination."""
        line, key = op.line, op.tag
        dst_ref = getattr(op, key)
        sources = tuple(f for f in type(op).reads if getattr(op, f) is not None)  # its roles
        dst = self.check_buffer_ref(dst_ref, line, key, scope)
        self.check_writable(dst, dst_ref, line, scope)
        self.check_vmem(dst, dst_ref, line, key)
        for name in sources:
            ref = getattr(op, name)
            self.check_vmem(self.check_buffer_ref(ref, line, f"{key} {name}", scope), ref, line, key)
        if key == "assign" and self.dtype(dst_ref, scope) != self.dtype(op.src, scope):
            self.fail(line, f"assign copies `{op.src.name}` ({self.dtype(op.src, scope)}) into "
                            f"`{dst_ref.name}` ({self.dtype(dst_ref, scope)}): the element types differ",
                      fix=f"use `cast: {dst_ref.text()}` to convert")

    def dtype(self, ref: E.Ref, scope: "_Scope") -> str:
        buf = scope.windows.get(ref.name) or self.s.buffers[ref.name]
        return buf.dtype or self.s.dtype

    def check_pipeline(self, op: S.Pipeline, depth: int = 1) -> None:
        line = op.line
        for name, size in op.pipeline.items():
            self.check_expr(size, self.static_names(), line, f"pipeline grid size `{name}`")
        if not op.specs:
            self.fail(line, "a pipeline needs at least one input or output block",
                      fix="add `inputs:` and `outputs:` entries {name: {ref, block, index}}")
        both = sorted(set(op.inputs) & set(op.outputs))
        if both:
            self.fail(line, f"`{both[0]}` is both an input and an output block of the pipeline",
                      fix="to update a region in place, read it as one block and write it as another "
                          "(e.g. `acc_in` and `acc_out` with the same ref and index)")
        inner = self.outer.names | set(op.pipeline)
        for name, spec in op.specs.items():
            role = f"pipeline block `{name}`"
            buf = self.check_buffer_ref(spec.ref, spec.line, role)
            if buf.memory != "hbm":
                self.fail(spec.line, f"{role} streams `{spec.ref.name}`, which lives in VMEM; pipelines "
                                     "stream HBM regions through VMEM blocks",
                          fix=f"use `{spec.ref.name}` directly in the body, or keep it in HBM")
            if name in op.outputs:
                self.check_writable(buf, spec.ref, spec.line)
            kept = len(buf.full_shape) - sum(1 for ix in spec.ref.indices if not isinstance(ix, E.Slice))
            if len(spec.block) != kept:
                self.fail(spec.line, f"{role}: block {[E.to_text(d) for d in spec.block]} has {len(spec.block)} "
                                     f"dimensions but `{spec.ref.text()}` has {kept}",
                          fix="give one block size per dimension left after indexing")
            if len(spec.index) != len(spec.block):
                self.fail(spec.line, f"{role}: index has {len(spec.index)} entries but the block has "
                                     f"{len(spec.block)} dimensions", fix="give one block index per dimension")
            for d in spec.block:
                self.check_expr(d, self.static_names(), spec.line, f"block shape of `{name}`")
            for ix in spec.index:
                self.check_expr(ix, inner, spec.line, f"block index of `{name}`")
            if spec.arrives is not None and name in op.outputs:
                self.fail(spec.arrives.line, f"output block `{name}` has `arrives: {spec.arrives.copy_use}`: only "
                                             "an input block arrives (the pipeline waits for it before fetching it)",
                          fix=f"move `{name}` to `inputs:`, or drop `arrives` and wait for the copy after the "
                              f"pipeline at line {line}")
            if spec.arrives is not None:
                arrival = spec.arrives
                self.check_copy_use("arrives", arrival.copy_use, arrival.wait.copy_halves, arrival.line, _Scope(inner))
                if arrival.when is not None:
                    self.check_expr(arrival.when, inner, arrival.line, f"`arrives` guard of `{name}`")
        body = _Scope(inner, pipeline_windows(self.s, op), set(op.inputs), op)
        self.check_body(op.do, body, depth + 1)

    def check_copy_use(self, key: str, use: S.CopyUse, halves: tuple[str, ...], line: int,
                       scope: "_Scope") -> None:
        """A use of a copy, `key: use` (a copy op, or a pipeline block's `arrives`): an existing
        copy, every template parameter bound once by an expression of `scope`, and a remote copy
        where only one half (`halves`) is waited for."""
        cname = use.name
        copy = self.s.copies.get(cname)
        if copy is None:
            self.fail(line, f"`{key}: {cname}` names no copy", known=self.s.copies, name=cname)
        given = [a for a, _ in use.args]
        if len(set(given)) != len(given):
            self.fail(line, f"`{key}: {use}` binds an argument twice", fix="give each template argument once")
        unknown = [a for a in given if a not in copy.args]
        missing = [a for a in copy.args if a not in given]
        signature = f"{cname}({', '.join(copy.args)})" if copy.args else cname
        if unknown:
            self.fail(line, f"`{key}: {use}` binds `{unknown[0]}`, which is no parameter of copy `{signature}`",
                      fix=f"write `{key}: {cname}`" if not copy.args else
                      f"bind its parameters: `{key}: {cname}({', '.join(f'{a}=...' for a in copy.args)})`")
        if missing:
            self.fail(line, f"`{key}: {use}` leaves parameter `{missing[0]}` of the copy template "
                            f"`{signature}` unbound",
                      fix=f"bind every parameter: `{key}: {cname}({', '.join(f'{a}=...' for a in copy.args)})`")
        for a, e in use.args:
            self.check_expr(e, scope.names, line, f"argument `{a}` of `{key}: {cname}`")
        if "send" not in halves or "recv" not in halves:  # one half: remote copies only
            if not copy.remote:
                self.fail(line, f"`{key}` applies to remote copies; `{cname}` is local",
                          fix=f"use `wait: {cname}`" if key != "arrives" else
                          f"wait for the local copy before the pipeline (`wait: {cname}`) and drop `arrives`")

    def run(self) -> None:
        self.check_axes()
        self.check_namespaces()
        self.check_declarations()
        self.check_cores()
        self.check_data()
        self.check_copies()
        self.check_program()
        self.check_ops()


# `RESOLVE[op class](resolver, op, scope)`: the static checks of one op (names, kinds, ranks).
RESOLVE: RuleTable[Callable[..., None]] = RuleTable("resolve (ringc/ir/resolve.py RESOLVE)", "ops")


@RESOLVE.register(S.When)
def _resolve_when(r: _Resolver, op: S.When, scope: _Scope) -> None:
    r.check_expr(op.when, scope.names, op.line, "guard")
    r.check_body(op.do, scope, r.depth + 1)


@RESOLVE.register(S.Loop)
def _resolve_loop(r: _Resolver, op: S.Loop, scope: _Scope) -> None:
    for name, size in op.loop.items():
        for n in sorted(E.names(size) - r.static_names() - set(r.s.let)):
            r.loop_index_hint(n, op.line, f"loop size `{name}`")
            r.fail(op.line, f"unknown name `{n}` in loop size `{name}` `{E.to_text(size)}`: a Python loop's "
                            "count is fixed when the kernel is traced",
                   fix="use N, params and lets of those only (for a count known only at run time, guard the "
                       "body with `when:`)")
        r.check_expr(size, r.static_names(), op.line, f"loop size `{name}`")
        if name in scope.names:
            r.fail(op.line, f"loop index `{name}` shadows the index of an enclosing loop",
                   fix="give the inner loop its own index name")
    inner = _Scope(scope.names | set(op.loop), scope.windows, scope.readonly, scope.pipeline)
    r.check_body(op.do, inner, r.depth + 1)


@RESOLVE.register(S.Pipeline)
def _resolve_pipeline(r: _Resolver, op: S.Pipeline, scope: _Scope) -> None:
    r.check_pipeline(op, r.depth)


@RESOLVE.register(S.Start, S.Wait, S.WaitSend, S.WaitRecv)
def _resolve_copy_op(r: _Resolver, op: S.Op, scope: _Scope) -> None:
    r.check_copy_use(op.tag, op.copy_use, op.copy_halves, op.line, scope)


@RESOLVE.register(S.Signal)
def _resolve_signal(r: _Resolver, op: S.Signal, scope: _Scope) -> None:
    r.check_sem_ref(op.signal, op.line, ("regular",), "signal", scope.names)
    for t in op.to:
        r.check_expr(t, scope.names, op.line, "signal target")
    r.check_expr(op.inc, scope.names, op.line, "signal increment")


@RESOLVE.register(S.SemWait)
def _resolve_sem_wait(r: _Resolver, op: S.SemWait, scope: _Scope) -> None:
    r.check_sem_ref(op.sem_wait, op.line, ("regular",), "sem_wait", scope.names)
    r.check_expr(op.value, scope.names, op.line, "wait value")


@RESOLVE.register(S.Barrier)
def _resolve_barrier(r: _Resolver, op: S.Barrier, scope: _Scope) -> None:
    if r.s.barrier is None:
        r.fail(op.line, "a barrier needs the barrier semaphore", fix="add `barrier: {collective_id: 0}` at the top level")
    for t in op.barrier:
        r.check_expr(t, scope.names, op.line, "barrier neighbour")


RESOLVE.register(S.Zero, S.Accumulate, S.Assign, S.Cast, S.Matmul)(_Resolver.check_compute)


def resolve(sched: S.Schedule) -> Resolved:
    """Raise `ScheduleError` (with file and line) if any name, kind or rank is wrong; else the
    schedule `Resolved`, kept on it for the later stages (`resolved`)."""
    _Resolver(sched).run()
    return resolved(sched)
