"""Schedule → Pallas Mosaic GPU module (`ringc emit --target mgpu`).

The module has the TPU target's interface (`kernel` per shard with its gradient, `build`,
`make_inputs`, the constants) and its layout (`pallas.py`'s module docstring); the kernel is
a `plgpu.kernel` over a grid of thread blocks instead of a `pallas_call`. How a schedule runs
on a GPU is the `mgpu_runtime` module docstring: every block runs the schedule's steps in
order on its own columns of every buffer, a second warpgroup per block is its copy engine
(copies through SMEM with TMA, into a peer's memory through `plgpu.remote_ref`), and block b
of one GPU signals block b of another.

One emit rule per op class (`MGPU_EMIT`, in the coverage test). An op or schedule feature
the GPU target does not express yet is refused before anything is written, in one message
naming the line (`MgpuEmitError`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from ..errors import ScheduleError
from ..ir import expr as E
from ..ir import schema as S
from ..ir.resolve import walk_ops
from ..ir.rules import RuleTable
from .pallas import EMIT, MAX_LINE, CodeWriter, Emitter, runtime_helpers, wrap_words

__all__ = ["MGPU_EMIT", "MgpuEmitError", "emit_mgpu", "refuse_early"]


_GPU_HELPERS = runtime_helpers("mgpu_runtime.py")
# The shared helpers (runtime.py) first, in their order, then the GPU ones; a GPU helper of
# the same name (`_device`, `_barrier`) replaces the TPU one where the TPU one stood.
_HELPERS_MGPU = {**{h: _GPU_HELPERS.get(h, src) for h, src in Emitter.HELPERS.items()},
                 **{h: src for h, src in _GPU_HELPERS.items() if h not in Emitter.HELPERS}}
_HELPER_DEPS_MGPU = {**Emitter.HELPER_DEPS, "_barrier": ("_device",),
                     "_blocks": ("_MAX_CHUNK_ROWS",), "_chunk_rows": ("_MAX_CHUNK_ROWS", "_MAX_STAGE_BYTES"),
                     "_Copy": ("_each_chunk", "_load", "_store"), "_compute": ("_each_chunk", "_load", "_store")}
_HELPER_IMPORTS_MGPU = {**Emitter.HELPER_IMPORTS, "_Copy": "dataclasses", "_each_chunk": "itertools"}


class MgpuEmitError(ScheduleError):
    """A schedule the Mosaic GPU target cannot express (yet)."""


class _MgpuEmitter(Emitter):
    IMPORTS = ("import jax", "import jax.numpy as jnp", "from jax import lax", "from jax.experimental import pallas as pl",
               "from jax.experimental.pallas import mosaic_gpu as plgpu")
    HELPERS = _HELPERS_MGPU
    HELPER_DEPS = _HELPER_DEPS_MGPU
    HELPER_IMPORTS = _HELPER_IMPORTS_MGPU
    KEYWORDS = (("blocks", "None"),)
    API_HELPERS = (Emitter.API_HELPERS - {"_interpret_mode"}) | {"_no_interpret"}

    def __init__(self, schedule: S.Schedule, checked: Iterable[Mapping[str, int]] | None = None):
        super().__init__(schedule, checked)
        self.refuse_unsupported()
        self.columns = self.column_dim()
        self.helpers |= {"_blocks", "_chunk_rows", "_columns"}
        self.barrier_sem = self._fresh("_barrier_sem")
        self.stages = (self._fresh("_stage_a"), self._fresh("_stage_b"))
        self.loaded = self._fresh("_loaded")
        # The copy warpgroup's: its SMEM buffer, its TMA barrier, and per copy descriptor the
        # semaphores the two warpgroups hand copies over with.
        self.copy_stage, self.copy_loaded = self._fresh("_copy_stage"), self._fresh("_copy_loaded")
        self.issued, self.done = self._fresh("_issued"), self._fresh("_done")

    def _fresh(self, name: str) -> str:
        taken = set(self.rename.values())
        while name in taken:
            name += "_"
        return name

    # -- what the target takes ------------------------------------------------------------
    def refuse(self, what: str, line: int | None = None, fix: str = "") -> None:
        raise MgpuEmitError(f"ringc emit --target mgpu: {what}", file=self.s.file, line=line,
                            fix=fix or "emit it for TPU (the default target), or write this part with "
                                       "Mosaic GPU by hand and check it with `ringc check FILE.py`")

    def refuse_unsupported(self) -> None:
        s = self.s
        if s.kernels:
            self.refuse("a split-phase program (`kernels:`, several pallas_calls) is not emitted for Mosaic GPU yet",
                        s.line_of("kernels", next(iter(s.kernels))))
        if len(s.axes) > 1:
            self.refuse(f"the schedule runs over {len(s.axes)} mesh axes; the Mosaic GPU target takes one axis "
                        "(a ring of GPUs) so far")
        if s.data:
            self.refuse("runtime data (`data:`, scalar prefetch) is not emitted for Mosaic GPU yet")
        if s.megacore:
            self.refuse("`megacore` is a TPU layout (two TensorCores per chip); a GPU has no such axis")
        dtypes = {s.dtype_of(n) for n in s.buffers}
        if len(dtypes) > 1:
            self.refuse(f"buffers of several dtypes ({', '.join(sorted(dtypes))}): the GPU target stages every "
                        "buffer through SMEM of one dtype so far", fix="give every buffer the schedule's dtype")
        for op in walk_ops(s.all_ops):
            rule = MGPU_EMIT.of(op)
            if rule.refusal:
                self.refuse(f"line {op.line}: {rule.refusal}", op.line)

    def column_dim(self) -> E.Expr:
        """The last dimension every buffer shares: blocks split it into tiles. Refuses a
        schedule whose buffers differ there, or a region that indexes or slices it."""
        s = self.s
        lasts = {n: self.resolved.inline(b.full_shape[-1]) for n, b in s.buffers.items() if b.full_shape}
        if len(s.buffers) != len(lasts) or any(len(b.full_shape) < 2 for b in s.buffers.values()):
            (n,) = [n for n, b in s.buffers.items() if len(b.full_shape) < 2][:1] or [next(iter(s.buffers))]
            self.refuse(f"buffer `{n}` has fewer than two dimensions; the GPU target splits the last one "
                        "(columns) into blocks' tiles and copies rows", s.line_of("buffers", n))
        first = next(iter(lasts))
        for n, d in lasts.items():
            if d != lasts[first]:
                self.refuse(f"buffers `{first}` and `{n}` differ in their last dimension "
                            f"({E.to_text(lasts[first])} vs {E.to_text(d)}); the GPU target splits that "
                            "dimension into one tile per thread block, so every buffer must share it",
                            s.line_of("buffers", n))
        for ref, line in self.regions():
            dims = len(s.buffers[ref.name].full_shape)
            if len(ref.indices) == dims and not (isinstance(ref.indices[-1], E.Slice)
                                                 and ref.indices[-1].start is None and ref.indices[-1].size is None):
                self.refuse(f"line {line}: region {ref.text()} indexes the last dimension of `{ref.name}`; the "
                            "GPU target gives each thread block a tile of that dimension", line)
        return lasts[first]

    def computed_regions(self) -> list[E.Ref]:
        """The regions ops compute into (zero, accumulate, assign, cast): their chunks go
        through a warpgroup's registers."""
        return [ref for op in walk_ops(self.s.all_ops) for field in ("zero", "accumulate", "assign", "cast")
                if isinstance(ref := getattr(op, field, None), E.Ref)]

    @staticmethod
    def tuple_or_empty(items: list[str]) -> str:
        return "()" if not items else f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"

    def regions(self) -> Iterator[tuple[E.Ref, int | None]]:
        s = self.s
        for n, c in s.copies.items():
            for ref in (c.src, c.dst):
                yield ref, c.line
        for op in walk_ops(s.all_ops):
            for field in ("zero", "accumulate", "src", "base", "assign", "cast"):
                ref = getattr(op, field, None)
                if isinstance(ref, E.Ref) and ref.name in s.buffers:
                    yield ref, op.line

    # -- module ---------------------------------------------------------------------------
    def module_docstring(self, w: CodeWriter) -> None:
        base = Path(self.s.file).name
        parts = [wrap_words(f"Generated by ringc from {base} for Pallas Mosaic GPU (Hopper). Do not edit; "
                             "regenerate with `ringc emit --target mgpu`.", MAX_LINE - 3)]
        if self.s.header:
            parts.append(self.s.header)
        ins = ", ".join(self.name(n) for n in self.s.buffers_of("input"))
        from ..collectives import collective_of
        parts.append(wrap_words(
            "On a GPU: each GPU runs the schedule's steps in order in every thread block (`blocks`, by default "
            "the GPU's SM count); block b owns tile b of the last dimension of every buffer and moves and "
            "computes only that tile. Each block's warpgroup 0 runs the schedule's ops and warpgroup 1 is its "
            "copy engine: a copy's `start` hands it over; the copier moves it through SMEM by TMA (into a peer "
            "GPU's memory through `plgpu.remote_ref`), in the order started, and signals the receiving block "
            "(block b of the peer) by the bytes moved; `wait` waits for the copier and for those bytes, as on a "
            "TPU.", MAX_LINE))
        parts.append(wrap_words(
            f"Use: `kernel({ins}, axis_name=...)` on one GPU's shards inside your own jax.shard_map over a "
            f"one-axis mesh of GPUs, or `build(mesh)` for global arrays. Gradient: "
            f"{self.backward_text(collective_of(self.s))}.", MAX_LINE))
        w.docstring("\n\n".join(parts), wrap=False)

    def interpret_doc(self) -> str:
        return ("`interpret` must be None or False: Mosaic GPU interpret mode runs no collective. `blocks`: thread "
                "blocks per GPU (None: the GPU's SM count).")

    def extra_outputs(self) -> list[str]:
        return self.s.buffers_of("hbm_scratch", "vmem_scratch")

    def call_prelude(self, w: CodeWriter) -> None:
        w.line("_no_interpret(interpret)")

    # -- kernel ----------------------------------------------------------------------------
    def kernel_refs(self) -> list[tuple[str, str]]:
        s = self.s
        refs = [(n, "input") for n in s.buffers_of("input")]
        refs += [(n, "output") for n in s.buffers_of("output")]
        refs += [(n, "GMEM scratch") for n in self.extra_outputs()]
        refs += [(n, "semaphore") for n in s.semaphores]
        return refs

    def gpu_refs(self) -> list[str]:
        """The kernel's own refs after the schedule's: the barrier semaphore (if any barrier),
        the SMEM staging buffers and the TMA barrier."""
        barrier = [self.barrier_sem] if self.has_barrier() else []
        copies = [self.issued, self.done, self.copy_stage, self.copy_loaded] if self.s.copies else []
        return [*barrier, *self.stages, self.loaded, *copies]

    def has_barrier(self) -> bool:
        return any(isinstance(op, S.Barrier) for op in walk_ops(self.s.all_ops))

    def kernel(self) -> CodeWriter:
        s = self.s
        refs = [self.name(n) for n, _ in self.kernel_refs()] + self.gpu_refs()
        doc = (f"The whole of `{s.name}` on one thread block of one GPU: "
               + (f"the grid ({', '.join(s.grid)}) in order" if s.grid else "its ops")
               + ", on the block's tile of columns of every buffer, in two warpgroups: the schedule's "
                 "ops in warpgroup 0, its copies in warpgroup 1 (the block's copy engine).\n\n"
               + self.kernel_ref_doc()
               + f" Then the block's own: {', '.join(f'`{r}`' for r in self.gpu_refs())} (see `_call`).")
        w = CodeWriter()
        statics = ["N", *(self.name(p) for p in s.params), "tile", "axis", "mesh_axes"]
        w.call("def _kernel", refs + ["*"] + statics, ":")
        w.level = 1
        w.docstring(doc)
        w.line("me = lax.axis_index(axis)")
        w.line('block = lax.axis_index("blocks")')
        w.line("# This block's tile of the last dimension of every buffer.")
        for n in [*s.buffers_of("input", "output"), *self.extra_outputs()]:
            w.line(f"{self.name(n)} = _columns({self.name(n)}, block, tile)")
        loops = list(s.grid.items())
        point = CodeWriter()
        point.level = 2 + len(loops)
        self.loop_names |= set(s.grid)  # Python ints: conditions on them are decided when traced
        for n in s.copies:
            point.blank()
            self.copy_descriptor(point, n, s.copies[n])
        point.blank()
        self.ops(point, s.body, top=True)
        derived = []
        for b, e in reversed(self.resolved.builtins.items()):
            if b in self.names_used:
                derived.insert(0, f"{b} = {self.py(e)}")
        w.lines.extend(INDENT + line for line in derived)
        w.blank()
        with w.block("def _run(copier):"):
            w.docstring("The schedule on this block: its ops (copier False, warpgroup 0), or only its copies, "
                        "started in the same order (copier True, warpgroup 1).")
            base = w.level
            if loops:
                w.line("# The grid, in order, unrolled when traced: device ids stay functions of `me` alone,")
                w.line("# as Mosaic GPU needs for a TMA copy into a peer's memory.")
            for name, size in loops:
                w.line(f"for {self.name(name)} in range({self.static(size)}):")
                w.level += 1
            w.lines.extend(INDENT * w.level + f"{self.name(n)} = {self.py(e)}" for n, e in s.let.items())
            w.blank()
            w.lines.extend(point.lines)
            w.level = base
        w.blank()
        w.line('wg = lax.axis_index("wg")')
        w.line("pl.when(wg == 0)(lambda: _run(copier=False))")
        w.line("pl.when(wg == 1)(lambda: _run(copier=True))")
        w.level = 0
        return w

    def kernel_ref_doc(self) -> str:
        groups: dict[str, list[str]] = {}
        for n, role in self.kernel_refs():
            groups.setdefault(role, []).append(f"`{self.name(n)}`")
        parts = [f"{role}{'s' if len(refs) > 1 and role in ('input', 'output', 'semaphore') else ''} "
                 f"{', '.join(refs)}{' (allocated as extra outputs)' if role == 'GMEM scratch' else ''}"
                 for role, refs in groups.items()]
        return ("Refs, in plgpu.kernel order: " + "; ".join(parts) + ". Semaphores are the block's own: a signal "
                "reaches the block of the same index on the target GPU.")

    def copy_descriptor(self, w: CodeWriter, name: str, c: S.Copy) -> None:
        where = f" (line {c.line})" if c.line else ""
        i = list(self.s.copies).index(name)
        staging = [f"stage={self.copy_stage}", f"barrier={self.copy_loaded}", f"issued={self.issued}.at[{i}]",
                   f"done={self.done}.at[{i}]", "copier=copier"]
        with w.block(f"def {self.copy_fn(name)}({', '.join(self.name(a) for a in c.args)}):"):
            if c.remote:
                w.docstring(f"Remote copy `{name}`{where}: {c.src.text()} -> {c.dst.text()} "
                            f"on device {E.to_text(c.to)}.")
                w.call("return _Copy", [
                    f"src={self.dma_ref(c.src)}",
                    f"dst={self.dma_ref(c.dst)}",
                    *staging,
                    f"recv_sem={self.dma_ref(c.recv_sem)}",
                    f"device={self.device(c.to)}",
                ], explode=True)
            else:
                w.docstring(f"Local copy `{name}`{where}: {c.src.text()} -> {c.dst.text()}.")
                w.call("return _Copy", [f"src={self.dma_ref(c.src)}", f"dst={self.dma_ref(c.dst)}", *staging],
                       explode=True)
        self.helpers.add("_Copy")

    def ops(self, w: CodeWriter, ops: list[S.Op], top: bool = False) -> None:
        """The ops, as `pallas.py` writes them, with each run of ops that start or wait for no
        copy under `if not copier:` (the copy warpgroup runs only the copies)."""
        run: list[S.Op] = []

        def flush() -> None:
            if run:
                with w.block("if not copier:"):
                    self.each_op(w, run, top)
                run.clear()

        for op in ops:
            if any(isinstance(o, (S.Start, S.Wait, S.WaitSend, S.WaitRecv)) for o in walk_ops([op])):
                flush()
                self.each_op(w, [op], top)
            else:
                run.append(op)
        flush()

    def each_op(self, w: CodeWriter, ops: list[S.Op], top: bool) -> None:
        for op in ops:
            is_block = isinstance(op, (S.When, S.Loop))
            if top and is_block:
                w.blank()
            where = f"line {op.line}: " if op.line else ""
            rule = MGPU_EMIT.of(op)
            w.line(f"# {where}{rule.summary(op)}")
            rule.emit(self, w, op)
            if top and is_block:
                w.blank()

    # -- ops --------------------------------------------------------------------------------
    def op_signal(self, w: CodeWriter, op: S.Signal) -> None:
        sem, inc = self.dma_ref(op.signal), self.py(op.inc)
        for target in op.to:
            if target == E.Var("me"):
                w.call("pl.semaphore_signal", [sem, inc])
            else:
                w.call("pl.semaphore_signal", [sem, inc, f"device_id={self.device(target)}"])

    def op_barrier(self, w: CodeWriter, op: S.Barrier) -> None:
        self.helpers.add("_barrier")
        w.call("_barrier", [f"[{', '.join(self.py(t) for t in op.barrier)}]", self.barrier_sem, "axis",
                            "mesh_axes"])

    def compute(self, w: CodeWriter, fn: str, dst: E.Ref, srcs: list[E.Ref]) -> None:
        self.helpers.add("_compute")
        stages = list(self.stages[:max(1, len(srcs))])
        w.call("_compute", [fn, self.dma_ref(dst), f"[{', '.join(self.dma_ref(r) for r in srcs)}]",
                            f"[{', '.join(stages)}]", self.loaded])

    def op_zero(self, w: CodeWriter, op: S.Zero) -> None:
        self.helpers.add("_compute")
        w.call("_compute", ["jnp.zeros_like", self.dma_ref(op.zero), f"[{self.dma_ref(op.zero)}]",
                            f"[{self.stages[0]}]", self.loaded])

    def op_accumulate(self, w: CodeWriter, op: S.Accumulate) -> None:
        base = op.base if op.base is not None else op.accumulate
        self.compute(w, "lax.add", op.accumulate, [base, op.src])

    def op_assign(self, w: CodeWriter, op: S.Assign) -> None:
        self.compute(w, "lambda value: value", op.assign, [op.src])

    def op_cast(self, w: CodeWriter, op: S.Cast) -> None:
        self.compute(w, "lambda value: value", op.cast, [op.src])

    # -- the call ----------------------------------------------------------------------------
    def statics(self) -> list[str]:
        return ["N=N", *(f"{self.name(p)}={self.name(p)}" for p in self.s.params), "tile=tile",
                "axis=axis_name", "mesh_axes=mesh_axes"]

    def pallas_call(self, w: CodeWriter) -> None:
        s = self.s
        outs = [*s.buffers_of("output"), *self.extra_outputs()]
        src = self.name(s.io_buffer("input"))
        dtype = self.dtype_text(s.io_buffer("input"))
        rows = s.buffers[s.io_buffer("input")].full_shape[-2]
        rows_computed = sorted({self.static(self.region_shape(r)[-2]) for r in self.computed_regions()})
        w.line(f"blocks = _blocks({self.static(self.columns)}, {dtype}, blocks, rows={self.tuple_or_empty(rows_computed)})")
        w.line(f"tile = {self.static(self.columns)} // blocks  # each block's columns")
        w.line(f"chunk = _chunk_rows({self.static(rows)}, tile, {dtype})  # rows per SMEM staging buffer")
        del src
        with w.block("call = plgpu.kernel("):
            w.call("functools.partial", ["_kernel", *self.statics()], ",")
            with w.block("out_type=("):
                for n in outs:
                    note = " (scratch)" if n in self.extra_outputs() else ""
                    w.line(f"{self.shape_dtype(n)},  # {n}{note}")
            w.line("),")
            w.line("grid=(blocks,),")
            w.line('grid_names=("blocks",),')
            w.line('num_threads=2,  # warpgroup 0 runs the schedule\'s ops, warpgroup 1 its copies')
            w.line('thread_name="wg",')
            w.line("kernel_name=NAME,")
            with w.block("scratch_types=["):
                for n, sem in s.semaphores.items():
                    shape = self.static_tuple(list(sem.shape))
                    text = f"plgpu.SemaphoreType.REGULAR({shape})" if sem.shape else "plgpu.SemaphoreType.REGULAR"
                    w.line(f"{text},  # {n}{' (a DMA semaphore: it counts bytes)' if sem.kind == 'dma' else ''}")
                if self.has_barrier():
                    w.line(f"plgpu.SemaphoreType.REGULAR,  # {self.barrier_sem}: the barrier's")
                for stage in self.stages:
                    w.line(f"plgpu.SMEM((chunk, tile), {dtype}),  # {stage}: the schedule's ops' staging")
                w.line(f"plgpu.Barrier(),  # {self.loaded}: their TMA loads land here")
                if s.copies:
                    count = len(s.copies)
                    w.line(f"plgpu.SemaphoreType.REGULAR(({count},)),  # {self.issued}: copies handed over, "
                           "per descriptor")
                    w.line(f"plgpu.SemaphoreType.REGULAR(({count},)),  # {self.done}: copies done, per descriptor")
                    w.line(f"plgpu.SMEM((chunk, tile), {dtype}),  # {self.copy_stage}: the copy warpgroup's staging")
                    w.line(f"plgpu.Barrier(),  # {self.copy_loaded}: its TMA loads land here")
            w.line("],")
        w.line(")")


INDENT = "    "


class _GpuRule:
    """An emit rule of the GPU target: the TPU rule's summary (both targets comment an op
    alike), this target's `_MgpuEmitter` method, and, for an op the target does not express
    yet, why (`refusal`, said before anything is written)."""
    __slots__ = ("summary", "emit", "refusal")

    def __init__(self, summary: Any, emit: Any, refusal: str = ""):
        self.summary, self.emit, self.refusal = summary, emit, refusal


def _refused(_: Any, __: Any, op: Any) -> None:  # never called: refused at construction
    raise AssertionError(op)


# `MGPU_EMIT[op class]`: one rule per op class (`schema.OPS`); the summary line is the TPU
# target's (`EMIT`), so both targets comment an op alike.
MGPU_EMIT: RuleTable[_GpuRule] = RuleTable("codegen for Mosaic GPU (ringc/codegen/mgpu.py MGPU_EMIT)", "ops")
for _op, _method in ((S.When, Emitter.op_when), (S.Loop, Emitter.op_loop), (S.Start, Emitter.op_copy),
                     (S.Wait, Emitter.op_copy), (S.WaitSend, Emitter.op_copy), (S.WaitRecv, Emitter.op_copy),
                     (S.Signal, _MgpuEmitter.op_signal), (S.SemWait, Emitter.op_semwait),
                     (S.Barrier, _MgpuEmitter.op_barrier), (S.Zero, _MgpuEmitter.op_zero),
                     (S.Accumulate, _MgpuEmitter.op_accumulate), (S.Assign, _MgpuEmitter.op_assign),
                     (S.Cast, _MgpuEmitter.op_cast)):
    MGPU_EMIT.register(_op)(_GpuRule(EMIT[_op].summary, _method))
MGPU_EMIT.register(S.Matmul)(_GpuRule(EMIT[S.Matmul].summary, _refused,
                                      "`matmul` is not emitted for Mosaic GPU yet (it needs wgmma on swizzled "
                                      "SMEM tiles)"))
MGPU_EMIT.register(S.Pipeline)(_GpuRule(EMIT[S.Pipeline].summary, _refused,
                                        "`pipeline` is not emitted for Mosaic GPU yet (plgpu.emit_pipeline with "
                                        "TMA blocks)"))


def refuse_early(schedule: S.Schedule) -> None:
    """Raise `MgpuEmitError` for what the GPU target does not express, before a check."""
    _MgpuEmitter(schedule)


def emit_mgpu(schedule: S.Schedule, checked: Iterable[Mapping[str, int]] | None = None) -> str:
    """The Pallas Mosaic GPU module for `schedule`, as Python source text (deterministic);
    `checked` as for `pallas.emit`. Raises `MgpuEmitError` (a ScheduleError: file, line,
    fix) for what the GPU target does not express yet."""
    text = _MgpuEmitter(schedule, checked).emit()
    try:
        compile(text, f"<ringc emit --target mgpu of {schedule.file}>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise RuntimeError(f"ringc emitted Python that does not compile ({type(e).__name__}: {e}); "
                           "this is a bug in ringc") from None
    return text
