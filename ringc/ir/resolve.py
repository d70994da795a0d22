"""Static checks that need the whole schedule: names, kinds, ranks and memory spaces.

Everything here holds for every N. Checks that depend on N (exact divisions, indices in
range) happen when the schedule is unrolled (`ringc.verify.unroll`).
"""

from __future__ import annotations

import difflib
import keyword
from typing import Iterable, Iterator

from . import expr as E
from . import schema as S
from .dtypes import ITEMSIZE
from .errors import ScheduleError

# Names every expression may use, besides params, grid indices and lets.
BUILTINS = {
    "me": "this device's index along the schedule axis",
    "N": "the number of devices along the schedule axis",
    "left": "(me - 1) % N",
    "right": "(me + 1) % N",
}
BUILTIN_EXPRS = {"left": E.parse("(me - 1) % N"), "right": E.parse("(me + 1) % N")}
MAX_AXES = 3


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


def axis_builtin_exprs(axes: list[str]) -> dict[str, E.Expr]:
    """`left_a` / `right_a` as expressions over `me`, `me_a` and the sizes (row-major strides)."""
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


def walk_ops(ops: Iterable[S.Op]) -> Iterator[S.Op]:
    """Every op, depth first, including those inside `when` blocks."""
    for op in ops:
        yield op
        if isinstance(op, S.When):
            yield from walk_ops(op.do)


class _Resolver:
    def __init__(self, sched: S.Schedule):
        self.s = sched
        self.file = sched.file
        self.builtins = {**BUILTINS, **axis_builtins(sched.axes)}
        if sched.megacore:
            self.builtins["core"] = "the TensorCore running this grid point (megacore: 0 or 1)"

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
        groups = [("param", s.params), ("grid index", s.grid), ("let", s.let), ("buffer", s.buffers),
                  ("semaphore", s.semaphores), ("copy", s.copies)]
        tables = {"param": "params", "grid index": "grid", "let": "let", "buffer": "buffers",
                  "semaphore": "semaphores", "copy": "copies"}
        for kind, table in groups:
            for name in table:
                line = s.line_of(tables[kind], name)
                # Copies are only named by op keys; every other name appears in expressions,
                # which Python's parser reads, so it must be a non-keyword identifier.
                if not isinstance(name, str) or not name.isidentifier() or (
                        kind != "copy" and keyword.iskeyword(name)):
                    self.fail(line, f"`{name}` is not a valid name for a {kind}",
                              fix="use letters, digits and _, not starting with a digit")
                if name in self.builtins or name in ("min", "max", "barrier"):
                    self.fail(line, f"`{name}` is reserved and cannot name a {kind}",
                              fix="choose another name")
                if name in seen:
                    self.fail(line, f"`{name}` names both a {seen[name]} and a {kind}",
                              fix="every name in a schedule must be unique")
                seen[name] = kind

    def check_expr(self, e: E.Expr, allowed: set[str], line: int, what: str) -> None:
        for n in sorted(E.names(e) - allowed):
            self.fail(line, f"unknown name `{n}` in {what} `{E.to_text(e)}`", known=allowed)

    def static_names(self) -> set[str]:
        return {"N", *(n for n in self.builtins if n.startswith("N_")), *self.s.params}

    def step_names(self) -> set[str]:
        return {*self.builtins, *self.s.params, *self.s.grid, *self.s.let}

    def check_axes(self) -> None:
        s = self.s
        line = s.line_of("axes")
        for a in s.axes:
            if not isinstance(a, str) or not a.isidentifier() or keyword.iskeyword(a):
                self.fail(line, f"axis name `{a}` is not an identifier",
                          fix="name mesh axes with letters, digits and _, e.g. x, y, data")
        if len(set(s.axes)) != len(s.axes):
            self.fail(line, f"axes {s.axes} name an axis twice", fix="list each mesh axis once")

    # -- declarations ----------------------------------------------------------
    def check_declarations(self) -> None:
        s = self.s
        static = self.static_names()
        if s.dtype not in ITEMSIZE:
            self.fail(s.line_of("dtype"), f"unknown dtype `{s.dtype}`", known=ITEMSIZE)
        for name, size in s.grid.items():
            self.check_expr(size, static, s.line_of("grid", name), "grid size")
        defined = {*self.builtins, *s.params, *s.grid}
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

    # -- references ------------------------------------------------------------
    def check_buffer_ref(self, ref: E.Ref, line: int, role: str) -> S.Buffer:
        buf = self.s.buffers.get(ref.name)
        if buf is None:
            self.fail(line, f"unknown buffer `{ref.name}` in {role}", known=self.s.buffers)
        rank = len(buf.full_shape)
        if len(ref.indices) > rank:
            self.fail(line, f"`{ref.text()}` has {len(ref.indices)} indices but `{ref.name}` has rank {rank}",
                      fix=f"index at most {rank} dimensions (slots first, then shape)")
        for n in sorted(E.ref_names(ref) - self.step_names()):
            self.fail(line, f"unknown name `{n}` in `{ref.text()}`", known=self.step_names())
        return buf

    def check_sem_ref(self, ref: E.Ref, line: int, kinds: tuple[str, ...], role: str) -> S.Semaphore:
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
        for n in sorted(E.ref_names(ref) - self.step_names()):
            self.fail(line, f"unknown name `{n}` in `{ref.text()}`", known=self.step_names())
        return sem

    def check_writable(self, buf: S.Buffer, ref: E.Ref, line: int) -> None:
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
            self.check_buffer_ref(c.src, c.line, f"copy `{name}` src")
            dst = self.check_buffer_ref(c.dst, c.line, f"copy `{name}` dst")
            self.check_writable(dst, c.dst, c.line)
            if c.remote:
                self.check_expr(c.to, self.step_names(), c.line, f"copy `{name}` target")
                self.check_sem_ref(c.send_sem, c.line, ("dma",), f"copy `{name}` send_sem")
                self.check_sem_ref(c.recv_sem, c.line, ("dma",), f"copy `{name}` recv_sem")
            else:
                self.check_sem_ref(c.sem, c.line, ("dma",), f"copy `{name}` sem")

    def check_ops(self) -> None:
        names = self.step_names()
        for op in walk_ops(self.s.body):
            line = op.line
            if isinstance(op, S.When):
                self.check_expr(op.when, names, line, "guard")
            elif isinstance(op, (S.Start, S.Wait, S.WaitSend, S.WaitRecv)):
                key = next(k for k in ("start", "wait", "wait_send", "wait_recv") if hasattr(op, k))
                cname = getattr(op, key)
                copy = self.s.copies.get(cname)
                if copy is None:
                    self.fail(line, f"`{key}: {cname}` names no copy", known=self.s.copies, name=cname)
                if key in ("wait_send", "wait_recv") and not copy.remote:
                    self.fail(line, f"`{key}` applies to remote copies; `{cname}` is local",
                              fix=f"use `wait: {cname}`")
            elif isinstance(op, S.Signal):
                self.check_sem_ref(op.signal, line, ("regular",), "signal")
                for t in op.to:
                    self.check_expr(t, names, line, "signal target")
                self.check_expr(op.inc, names, line, "signal increment")
            elif isinstance(op, S.SemWait):
                self.check_sem_ref(op.sem_wait, line, ("regular",), "sem_wait")
                self.check_expr(op.value, names, line, "wait value")
            elif isinstance(op, S.Barrier):
                if self.s.barrier is None:
                    self.fail(line, "a barrier needs the barrier semaphore",
                              fix="add `barrier: {collective_id: 0}` at the top level")
                for t in op.barrier:
                    self.check_expr(t, names, line, "barrier neighbour")
            elif isinstance(op, S.Zero):
                buf = self.check_buffer_ref(op.zero, line, "zero")
                self.check_writable(buf, op.zero, line)
                self.check_vmem(buf, op.zero, line, "zero")
            elif isinstance(op, (S.Accumulate, S.Assign)):
                key = "accumulate" if isinstance(op, S.Accumulate) else "assign"
                dst_ref = getattr(op, key)
                dst = self.check_buffer_ref(dst_ref, line, key)
                src = self.check_buffer_ref(op.src, line, f"{key} src")
                self.check_writable(dst, dst_ref, line)
                self.check_vmem(dst, dst_ref, line, key)
                self.check_vmem(src, op.src, line, key)

    def run(self) -> None:
        self.check_axes()
        self.check_namespaces()
        self.check_declarations()
        self.check_copies()
        self.check_ops()


def resolve(sched: S.Schedule) -> None:
    """Raise `ScheduleError` (with file and line) if any name, kind or rank is wrong."""
    _Resolver(sched).run()
