"""Unroll a schedule for a concrete N: every device, every grid point, every op.

This is where N-dependent bad input is caught: shapes that do not divide, indices out of
range, regions whose shapes do not match. Those raise `ScheduleError` with the line and
the device/step where it first happens. Bugs of the schedule itself (a wrong target, a
hang, a race) are not errors here: they are findings of the later checks.
"""

from __future__ import annotations

import itertools
from math import prod
from typing import Any

from ..ir import expr as E
from ..ir import schema as S
from ..ir.dtypes import itemsize
from ..ir.errors import ScheduleError
from ..ir.resolve import builtin_exprs, walk_ops
from .events import (BARRIER, DEVICE_BARRIER, SECOND_BARRIER, Action, Compute, DmaStart, Event, Program, Region,
                     SemId, SemWait, Signal)


class _Context:
    """Static facts for one N: evaluated shapes, sizes and the grid."""

    def __init__(self, sched: S.Schedule, n: int, sizes: dict[str, int]):
        self.s = sched
        self.n = n
        self.sizes = sizes
        per_axis = {f"N_{a}": size for a, size in sizes.items()} if len(sizes) > 1 else {}
        self.static: dict[str, int] = {"N": n, **per_axis, **sched.params}
        self.shapes = {name: self._shape(buf.full_shape, f"shape of buffer `{name}`", buf.line)
                       for name, buf in sched.buffers.items()}
        self.sem_shapes = {name: self._shape(sem.shape, f"shape of semaphore `{name}`", sem.line)
                           for name, sem in sched.semaphores.items()}
        self.grid = self._shape(list(sched.grid.values()), "grid", sched.line_of("grid"))
        for name, buf in sched.buffers.items():
            if buf.shard is not None:
                shard = self._shape(buf.shard, f"shard shape of `{name}`", buf.line)
                if prod(shard) != prod(self.shapes[name]):
                    raise ScheduleError(
                        f"buffer `{name}`: shard shape {list(shard)} has {prod(shard)} elements but "
                        f"slots + shape {list(self.shapes[name])} has {prod(self.shapes[name])} (N={n})",
                        file=sched.file, line=buf.line, fix="make both describe the same per-device array")

    def _shape(self, dims: list[E.Expr], what: str, line: int) -> tuple[int, ...]:
        out = []
        for d in dims:
            try:
                v = E.evaluate(d, self.static, exact_division=True)
            except E.ExprError as e:
                params = ", ".join(f"{k}={v}" for k, v in self.static.items())
                raise ScheduleError(f"{what}: {e} (with {params})", file=self.s.file, line=line,
                                    fix="choose parameters (--param k=v) or N so that the shape divides exactly"
                                    ) from None
            if v <= 0:
                raise ScheduleError(f"{what}: `{E.to_text(d)}` = {v} is not positive (N={self.n})",
                                    file=self.s.file, line=line, fix="sizes must be at least 1")
            out.append(int(v))
        return tuple(out)


class _Unroller:
    def __init__(self, sched: S.Schedule, n: int, sizes: dict[str, int]):
        self.s = sched
        self.ctx = _Context(sched, n, sizes)
        self.n = n
        self.builtins = builtin_exprs(sched.axes)
        # Row-major strides of the schedule's axes: device d has me_a = d // stride % N_a.
        self.strides = {a: prod(list(sizes.values())[i + 1:]) for i, a in enumerate(sizes)}
        self.env: dict[str, Any] = {}
        self.device = 0
        self.point: tuple[int, ...] = ()
        self.targets: list[tuple[Event, int]] = []
        self.core = 0
        # Megacore: the leading `core` grid axis (parallel: core c runs the points (c, ...)).
        self.grid_names = ("core", *sched.grid) if sched.megacore else tuple(sched.grid)

    # -- evaluation ---------------------------------------------------------
    def fail(self, line: int, msg: str, fix: str) -> None:
        pt = " ".join(f"{k}={v}" for k, v in zip(self.grid_names, self.point))
        raise ScheduleError(f"{msg} on device {self.device} at {pt} (N={self.n})",
                            file=self.s.file, line=line, fix=fix)

    def ev(self, e: E.Expr, line: int) -> int:
        try:
            return E.evaluate(e, self.env)
        except E.ExprError as err:
            self.fail(line, str(err), "guard the op with `when:` or fix the expression")

    def region(self, ref: E.Ref, line: int) -> Region:
        shape = self.ctx.shapes[ref.name]
        box, kept = [], []
        for dim, size in enumerate(shape):
            ix = ref.indices[dim] if dim < len(ref.indices) else E.Slice(None, None)
            if isinstance(ix, E.Slice):
                start = self.ev(ix.start, line) if ix.start is not None else 0
                length = self.ev(ix.size, line) if ix.size is not None else size - start
                if start < 0 or length <= 0 or start + length > size:
                    self.fail(line, f"`{ref.text()}`: slice {start}:{length} (start:size) leaves dimension "
                                    f"{dim} of `{ref.name}` (size {size})",
                              "a slice is `start:size` and must stay within the dimension")
                box.append((start, start + length))
                kept.append(dim)
            else:
                i = self.ev(ix, line)
                if not 0 <= i < size:
                    self.fail(line, f"`{ref.text()}`: index {E.to_text(ix)} = {i} is out of range for "
                                    f"dimension {dim} of `{ref.name}` (size {size})",
                              f"keep the index in 0..{size - 1}, e.g. with `% {size}`, or guard the op with `when:`")
                box.append((i, i + 1))
        return Region(ref.name, self.device, tuple(box), tuple(kept), itemsize(self.s.dtype_of(ref.name)))

    def sem(self, ref: E.Ref, device: int, line: int) -> SemId:
        shape = self.ctx.sem_shapes[ref.name]
        idx = tuple(self.ev(i, line) for i in ref.indices)
        for d, (i, size) in enumerate(zip(idx, shape)):
            if not 0 <= i < size:
                self.fail(line, f"`{ref.text()}`: index {i} is out of range for semaphore array "
                                f"`{ref.name}` of shape {list(shape)}",
                          f"keep the index in 0..{size - 1}")
        return (device, ref.name, idx)

    def same_shape(self, a: Region, b: Region, line: int, what: str) -> None:
        if a.shape != b.shape:
            self.fail(line, f"{what}: `{a.text()}` has shape {list(a.shape)} but `{b.text()}` has "
                            f"shape {list(b.shape)}", "both sides must have the same shape")

    # -- ops ----------------------------------------------------------------
    def copy_parts(self, name: str, line: int) -> tuple[S.Copy, Region, Region]:
        c = self.s.copies[name]
        src, dst = self.region(c.src, line), self.region(c.dst, line)
        self.same_shape(src, dst, line, f"copy `{name}`")
        return c, src, dst

    def actions(self, op: S.Op) -> list[tuple[Action, int | None]]:
        """The concrete actions of one op; the int is a remote target to check, if any."""
        line = op.line
        if isinstance(op, S.Start):
            c, src, dst = self.copy_parts(op.start, line)
            if c.remote:
                target = self.ev(c.to, line)
                dst_on_target = Region(dst.buffer, target, dst.box, dst.kept, dst.itemsize)
                return [(DmaStart(op.start, src, dst_on_target, self.sem(c.send_sem, self.device, line),
                                  self.sem(c.recv_sem, target, line)), target)]
            return [(DmaStart(op.start, src, dst, None, self.sem(c.sem, self.device, line)), None)]
        if isinstance(op, (S.Wait, S.WaitSend, S.WaitRecv)):
            key = "wait" if isinstance(op, S.Wait) else "wait_send" if isinstance(op, S.WaitSend) else "wait_recv"
            name = getattr(op, key)
            c, src, dst = self.copy_parts(name, line)
            if not c.remote:
                return [(SemWait(self.sem(c.sem, self.device, line), dst.nbytes, "wait", name), None)]
            out: list[tuple[Action, int | None]] = []
            # Pallas' descriptor.wait() is wait_send() then wait_recv().
            if key in ("wait", "wait_send"):
                out.append((SemWait(self.sem(c.send_sem, self.device, line), src.nbytes, "wait_send", name), None))
            if key in ("wait", "wait_recv"):
                out.append((SemWait(self.sem(c.recv_sem, self.device, line), dst.nbytes, "wait_recv", name), None))
            return out
        if isinstance(op, S.Signal):
            inc = self.ev(op.inc, line)
            if inc <= 0:
                self.fail(line, f"signal increment {inc} is not positive", "signals only add: use inc >= 1")
            out = []
            for t in op.to:
                target = self.ev(t, line)
                out.append((Signal(self.sem(op.signal, target, line), inc), target))
            return out
        if isinstance(op, S.SemWait):
            value = self.ev(op.value, line)
            if value <= 0:
                self.fail(line, f"wait value {value} is not positive", "wait for at least 1")
            return [(SemWait(self.sem(op.sem_wait, self.device, line), value, "sem_wait"), None)]
        if isinstance(op, S.Barrier):
            targets = [self.ev(t, line) for t in op.barrier]
            out = [(Signal((t, BARRIER, ()), 1, "barrier"), t) for t in targets]
            out.append((SemWait((self.device, BARRIER, ()), len(targets), "barrier"), None))
            if op.double:
                out += [(Signal((t, SECOND_BARRIER, ()), 1, "barrier"), t) for t in targets]
                out.append((SemWait((self.device, SECOND_BARRIER, ()), len(targets), "barrier"), None))
            return out
        if isinstance(op, S.Zero):
            return [(Compute("zero", self.region(op.zero, line)), None)]
        if isinstance(op, (S.Accumulate, S.Assign)):
            kind = "accumulate" if isinstance(op, S.Accumulate) else "assign"
            dst, src = self.region(getattr(op, kind), line), self.region(op.src, line)
            self.same_shape(dst, src, line, kind)
            return [(Compute(kind, dst, src), None)]
        raise AssertionError(f"unhandled op {op!r}")

    def walk(self, ops: list[S.Op], out: list[Event], invocation: int) -> None:
        for op in ops:
            if isinstance(op, S.When):
                if self.ev(op.when, op.line):
                    self.walk(op.do, out, invocation)
                continue
            for action, target in self.actions(op):
                self.emit(out, action, op.line, invocation, target)

    def set_point(self, point: tuple[int, ...]) -> None:
        self.point = (self.core, *point) if self.s.megacore else point
        env: dict[str, Any] = {**self.ctx.static, "me": self.device, **dict(zip(self.s.grid, point))}
        if self.s.megacore:
            env["core"] = self.core
        if len(self.ctx.sizes) > 1:
            for a, size in self.ctx.sizes.items():
                env[f"me_{a}"] = self.device // self.strides[a] % size
        for name, e in self.builtins.items():
            env[name] = E.evaluate(e, env)
        self.env = env
        for name, e in self.s.let.items():
            env[name] = self.ev(e, self.s.line_of("let", name))

    def emit(self, out: list[Event], action: Action, line: int, invocation: int, target: int | None = None) -> None:
        event = Event(self.device, len(out), self.point, line, action, invocation)
        out.append(event)
        if target is not None and self.core == 0:
            self.targets.append((event, target))

    def boundary(self, out: list[Event], kind: str, line: int, invocation: int, inputs: bool) -> None:
        """Kernel entry or exit: the whole of each buffer changes hands, modelled as a write."""
        for name, shape in self.ctx.shapes.items():
            if inputs or self.s.buffers[name].kind != "input":
                box = tuple((0, dim) for dim in shape)
                region = Region(name, self.device, box, tuple(range(len(shape))), itemsize(self.s.dtype_of(name)))
                self.emit(out, Compute(kind, region), line, invocation)

    def entry(self, out: list[Event], invocation: int) -> None:
        """With its own barrier, a schedule is responsible for not writing into a device
        before that device has entered the kernel: until then its memory belongs to
        whatever ran before. Model entry as a write of every non-input buffer.
        (Without `barrier:`, Pallas inserts a device barrier at kernel start.)"""
        self.boundary(out, "enter", self.s.barrier.line, invocation, inputs=False)

    def exit(self, out: list[Event], invocation: int) -> None:
        """When the kernel returns, the caller reads its outputs and reuses all its memory:
        a DMA still reading or writing any buffer then races with whatever comes next.
        Model exit as a write of every buffer (Pallas adds no barrier at exit)."""
        self.boundary(out, "exit", self.s.line_of("body"), invocation, inputs=True)

    def interloper(self, out: list[Event], invocation: int) -> None:
        """Between two calls, another kernel with the same collective_id may run: model it
        as a single barrier with the same neighbours on the shared barrier semaphore."""
        first = next((op for op in walk_ops(self.s.body) if isinstance(op, S.Barrier)), None)
        if first is None:
            return
        self.set_point(tuple(0 for _ in self.ctx.grid))
        targets = [self.ev(t, first.line) for t in first.barrier]
        for t in targets:
            self.emit(out, Signal((t, BARRIER, ()), 1, "another kernel's barrier"), first.line, invocation, t)
        self.emit(out, SemWait((self.device, BARRIER, ()), len(targets), "another kernel's barrier"),
                  first.line, invocation)

    def device_barrier(self, out: list[Event], invocation: int) -> None:
        """Without `barrier:`, Mosaic starts the kernel with its own barrier over all
        devices. It only matters between back-to-back calls; each call gets its own
        semaphore, because that barrier is the compiler's to get right, not the schedule's."""
        sem = f"{DEVICE_BARRIER}{invocation}"
        for t in range(self.n):
            if t != self.device:
                self.emit(out, Signal((t, sem, ()), 1, "Pallas' entry barrier"), self.s.line, invocation)
        self.emit(out, SemWait((self.device, sem, ()), self.n - 1, "Pallas' entry barrier"), self.s.line, invocation)

    def run(self, invocations: int) -> Program:
        s, n = self.s, self.n
        devices: list[list[Event]] = []
        second_core: list[list[Event]] = []
        for d in range(n):
            self.device = d
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
                for core, out in enumerate([events, second][:2 if s.megacore else 1]):
                    self.core = core
                    for point in itertools.product(*(range(g) for g in self.ctx.grid)):
                        self.set_point(point)
                        self.walk(s.body, out, inv)
                self.core = 0
                self.exit(events, inv)
            devices.append(events)
            if s.megacore:
                second_core.append(second)
        kinds = {name: sem.kind for name, sem in s.semaphores.items()}
        kinds[BARRIER] = kinds[SECOND_BARRIER] = "barrier"
        kinds.update({f"{DEVICE_BARRIER}{i}": "barrier" for i in range(invocations)})
        return Program(s.name, s.file, n, self.grid_names, devices, kinds, dict(self.ctx.shapes), self.targets,
                       axis_sizes=dict(self.ctx.sizes), second_core=second_core)


def unroll(sched: S.Schedule, n: int | None = None, *, invocations: int = 1,
           sizes: dict[str, int] | None = None) -> Program:
    """The event lists of all devices of one instance of the schedule: `n` devices along its
    axis, or `sizes` (axis -> devices) for a schedule over several axes, `n` their product.
    Raises `ScheduleError` for N-dependent bad input."""
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
    return _Unroller(sched, n, sizes).run(invocations)



def point_env(sched: S.Schedule, sizes: dict[str, int], device: int, point: tuple[int, ...]) -> dict[str, Any]:
    """The names an expression sees on `device` at grid `point`: me, N, params, grid
    indices, left/right and the lets (for tools that display them, like `ringc show`)."""
    u = _Unroller(sched, prod(sizes.values()), sizes)
    u.device = device
    u.set_point(point)
    return dict(u.env)


def buffer_shapes(sched: S.Schedule, sizes: dict[str, int]) -> dict[str, tuple[int, ...]]:
    """Every buffer's full shape for these axis sizes, without unrolling. Raises
    `ScheduleError` when a shape does not divide (e.g. for `ringc cost --bytes`)."""
    return dict(_Context(sched, prod(sizes.values()), sizes).shapes)
