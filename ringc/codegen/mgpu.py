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
from typing import Any, Iterable, Mapping

from ..errors import ScheduleError
from ..ir import expr as E
from ..ir import schema as S
from ..ir.resolve import walk_ops
from ..ir.rules import RuleTable
from .pallas import EMIT, MAX_LINE, CodeWriter, Emitter, compiled_source, runtime_helpers, wrap_words

__all__ = ["MGPU_EMIT", "MgpuEmitError", "emit_mgpu", "refuse_early"]


_GPU_HELPERS = runtime_helpers("mgpu_runtime.py")
# The shared helpers (runtime.py) first, in their order, then the GPU ones; a GPU helper of
# the same name (`_device`, `_barrier`) replaces the TPU one where the TPU one stood.
_HELPERS_MGPU = {**{h: _GPU_HELPERS.get(h, src) for h, src in Emitter.HELPERS.items()},
                 **{h: src for h, src in _GPU_HELPERS.items() if h not in Emitter.HELPERS}}
_HELPER_DEPS_MGPU = {**Emitter.HELPER_DEPS, "_barrier": ("_device",), "_row_blocks": (),
                     "_matmul": ("_matmul_tile_n", "_matmul_smem", "_store"), "_chunk_cols": ("_MAX_BOX",),
                     "_blocks": ("_MAX_BOX",), "_chunk_rows": ("_MAX_BOX", "_MAX_STAGE_BYTES"),
                     "_Copy": ("_each_chunk", "_load", "_store"), "_Multicast": (), "_compute": ("_each_chunk", "_load", "_store")}
_HELPER_IMPORTS_MGPU = {**Emitter.HELPER_IMPORTS, "_Copy": "dataclasses", "_Multicast": "dataclasses", "_each_chunk": "itertools"}


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
        schedule = _without_elementwise_pipelines(schedule)
        if "dtype" not in schedule.model_fields_set and _has_matmul(schedule):
            # wgmma multiplies 16-bit operands from row-major tiles: bfloat16 unless the schedule says.
            schedule = schedule.model_copy(update={"dtype": "bfloat16"})
        super().__init__(schedule, checked)
        self.matmuls = self.find_matmuls()
        # Accumulators the matmul pattern owns: `_matmul` keeps them in registers.
        self.hidden = {op.matmul.name for p in self.matmuls.values() for op in walk_ops(p.do)
                       if isinstance(op, S.Matmul)}
        self.refuse_unsupported()
        self.broadcasts = self.find_broadcasts()
        if self.broadcasts:
            self.KEYWORDS = (*self.KEYWORDS, ("multimem", "True"))
            self.helpers.add("_Multicast")
        self.uses = self.region_uses()
        self.tile_dims = self.choose_tiles()
        self.columns = self.width_dim()
        self.helpers |= {"_chunk_rows", "_chunk_cols", "_tile", "_row_blocks" if self.matmuls else "_blocks"}
        self.barrier_sem = self._fresh("_barrier_sem")
        self.stages = (self._fresh("_stage_a"), self._fresh("_stage_b"))
        self.loaded = self._fresh("_loaded")
        # The copy warpgroup's: its SMEM buffer, its TMA barrier, and per copy descriptor the
        # semaphores the two warpgroups hand copies over with.
        self.copy_stage, self.copy_loaded = self._fresh("_copy_stage"), self._fresh("_copy_loaded")
        self.issued = self._fresh("_issued")
        self.mm_stage = self._fresh("_matmul_out")  # a matmul's output tile on its way to GMEM
        self.mm_a, self.mm_b = self._fresh("_matmul_a"), self._fresh("_matmul_b")  # its operand tiles
        self.mm_loaded = self._fresh("_matmul_loaded")
        self.thread_block = self._fresh("thread_block")  # the block's index in the grid
        self.schedule_only = False  # while writing ops under `if not copier:`

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
        if s.megacore or s.cores > 1:
            self.refuse(f"`{'megacore' if s.megacore else 'cores'}` is a TPU layout (two TensorCores per chip); "
                        "a GPU has no such axis")
        def check(ops: list[S.Op]) -> None:
            for op in ops:
                if id(op) in self.matmuls:
                    continue
                if isinstance(op, S.Pipeline):
                    self.refuse(f"line {op.line}: only a pipeline that is a blocked matmul (zero the accumulator at "
                                "the first k block, matmul, cast it out at the last), or elementwise ops on whole "
                                "blocks that read input blocks only, is emitted for Mosaic GPU so far", op.line)
                rule = MGPU_EMIT.of(op)
                if rule.refusal:
                    self.refuse(f"line {op.line}: {rule.refusal}", op.line)
                if isinstance(op, (S.When, S.Loop)):
                    check(op.do)
                if self.matmuls and isinstance(op, (S.Zero, S.Accumulate, S.Assign, S.Cast, S.Matmul)):
                    self.refuse(f"line {op.line}: a schedule with a matmul tiles rows across thread blocks; "
                                "other compute ops beside it are not emitted for Mosaic GPU yet", op.line)

        check(s.body)
        dtypes = {s.dtype_of(n) for n in s.buffers if n not in self.hidden}
        if len(dtypes) > 1:
            self.refuse(f"buffers of several dtypes ({', '.join(sorted(dtypes))}): the GPU target stages every "
                        "buffer through SMEM of one dtype so far", fix="give every buffer the schedule's dtype")

    def find_matmuls(self) -> dict[int, S.Pipeline]:
        """The pipelines that are a blocked matmul, by id: inputs a (block [bm, bk] at [i, k]) and b
        ([bk, bn] at [k, j]), output o ([bm, bn] at [i, j]), and a body that zeroes an accumulator
        when k is 0, multiplies a @ b into it and casts it into o at the last k. `_matmul` does
        that whole pipeline on a GPU (its own tiles)."""
        found = {}
        for op in walk_ops(self.s.all_ops):
            if not isinstance(op, S.Pipeline) or len(op.pipeline) != 3 or op.arrivals:
                continue
            if len(op.inputs) != 2 or len(op.outputs) != 1:
                continue
            i, j, k = (E.Var(n) for n in op.pipeline)
            (a, sa), (b, sb) = op.inputs.items()
            ((o, so),) = op.outputs.items()
            if (sa.index, sb.index, so.index) != ([i, k], [k, j], [i, j]):
                continue
            body = op.do
            if len(body) != 3 or not (isinstance(body[0], S.When) and isinstance(body[1], S.Matmul)
                                      and isinstance(body[2], S.When)):
                continue
            zero, mm, cast = body[0].do, body[1], body[2].do
            acc = mm.matmul
            if not (len(zero) == 1 and isinstance(zero[0], S.Zero) and zero[0].zero == acc
                    and len(cast) == 1 and isinstance(cast[0], S.Cast) and cast[0].src == acc
                    and cast[0].cast == E.Ref(o, ()) and mm.accumulate and not mm.transposed
                    and mm.a == E.Ref(a, ()) and mm.b == E.Ref(b, ())
                    and getattr(self.s.buffers.get(acc.name), "kind", None) == "vmem_scratch"):
                continue
            found[id(op)] = op
        return found

    # N (with the schedule's params) at which an --unchecked module's broadcasts are found.
    BROADCAST_SIZES = (2, 3, 4, 5, 8)

    def find_broadcasts(self) -> list[str]:
        """The remote copies sent by one multimem store (`verify/broadcast.py`): broadcasts at
        every size the module is checked at (CHECKED; N = 2, 3, 4, 5 and 8 when unchecked),
        whose starts are all decided when traced (under `when`s of grid and loop indices,
        outside pipelines), since the kernel stores the data at the first start it traces."""
        from ..verify.broadcast import broadcast_copies
        from ..verify.unroll import unroll
        s = self.s
        names = {n for n, c in s.copies.items() if c.remote}

        def traced(ops: list[S.Op], indices: set[str], static: bool) -> None:
            for op in ops:
                if isinstance(op, S.Start) and not static:
                    names.discard(op.copy_use.name)
                elif isinstance(op, S.When):
                    traced(op.do, indices, static and self.resolved.is_static(op.when, indices))
                elif isinstance(op, S.Loop):
                    traced(op.do, indices | set(op.loop), static)
                elif isinstance(op, S.Pipeline):
                    traced(op.do, indices, False)

        traced(s.body, set(s.grid), True)
        if not names:
            return []
        sizes = self.checked if self.checked is not None else [{"N": n} for n in self.BROADCAST_SIZES]
        for size in sizes:
            params = {p: size[p] for p in s.params if p in size}
            at = s.model_copy(update={"params": {**s.params, **params}}) if params else s
            try:
                program = unroll(at, size["N"])
            except ScheduleError:  # a size the schedule does not take: no multicast decided there
                return []
            names &= broadcast_copies(at, program, names)
        return sorted(names, key=list(s.copies).index)

    def choose_tiles(self) -> dict[str, int | None]:
        """The dimension of each buffer that thread blocks split into tiles (None: every block
        sees all of it): the last (columns) in general; the first after the slots (rows) in a
        schedule with a matmul, whose right operand, read whole, is not split."""
        s = self.s
        if not self.matmuls:
            return {n: len(b.full_shape) - 1 for n, b in s.buffers.items()}
        rhs = {spec.ref.name for p in self.matmuls.values() for spec in list(p.inputs.values())[1:]}
        elsewhere = {ref.name for ref in self.moved()}
        for p in self.matmuls.values():
            elsewhere |= {list(p.inputs.values())[0].ref.name, list(p.outputs.values())[0].ref.name}
        return {n: None if n in self.hidden or (n in rhs and n not in elsewhere) else len(b.slots)
                for n, b in s.buffers.items()}

    def width_dim(self) -> E.Expr:
        """The last dimension of what blocks copy and compute (their SMEM chunks' width): every
        such buffer shares it. Refuses a schedule whose buffers differ there, or a region that
        indexes or slices a buffer's tiled dimension."""
        s = self.s
        tiled = [n for n, d in self.tile_dims.items() if d is not None]
        short = [n for n in tiled if len(s.buffers[n].full_shape) < 2]
        if short:
            self.refuse(f"buffer `{short[0]}` has fewer than two dimensions; the GPU target splits one dimension "
                        "into blocks' tiles and copies rows", s.line_of("buffers", short[0]))
        moved = [n for n in tiled if n in {ref.name for ref in self.moved()}] or tiled
        for what, dim, names in (("last", -1, moved), ("tiled", None, tiled)):
            sizes = {n: self.resolved.inline(s.buffers[n].full_shape[self.tile_dims[n] if dim is None else dim])
                     for n in names}
            first = names[0]
            for n, d in sizes.items():
                if d != sizes[first]:
                    self.refuse(f"buffers `{first}` and `{n}` differ in their {what} dimension "
                                f"({E.to_text(sizes[first])} vs {E.to_text(d)}); the GPU target splits every "
                                "buffer alike into one tile per thread block", s.line_of("buffers", n))
        for ref, line, _ in self.uses:
            dim = self.tile_dims.get(ref.name)
            if dim is None or dim >= len(ref.indices):
                continue
            ix = ref.indices[dim]
            if not (isinstance(ix, E.Slice) and ix.start is None and ix.size is None):
                self.refuse(f"line {line}: region {ref.text()} indexes dimension {dim} of `{ref.name}`; the GPU "
                            "target gives each thread block a tile of that dimension", line)
        return self.resolved.inline(s.buffers[moved[0]].full_shape[-1])

    def region_uses(self) -> list[tuple[E.Ref, int | None, str]]:
        """Every region the kernel names, with its line and how: "copy" (a copy's source or
        destination), "read" or "write" (an op's, by the op class's `reads` and `writes`,
        outside matmul pipelines), "matmul" (a matmul pipeline's operand)."""
        s = self.s
        uses = [(ref, c.line, "copy") for c in s.copies.values() for ref in (c.src, c.dst)]
        inside = {id(o) for p in self.matmuls.values() for o in walk_ops(p.do)}
        for op in walk_ops(s.all_ops):
            if id(op) in self.matmuls:
                uses += [(spec.ref, op.line, "matmul") for spec in op.specs.values()]
            elif id(op) not in inside:
                uses += [(ref, op.line, how) for how, fields in (("read", op.reads), ("write", op.writes))
                         for f in fields if isinstance(ref := getattr(op, f, None), E.Ref) and ref.name in s.buffers]
        return uses

    def moved(self) -> list[E.Ref]:
        """The regions copies and compute ops (outside matmul pipelines) move through SMEM."""
        return [ref for ref, _, how in self.uses if how != "matmul"]

    def tiled_size(self) -> E.Expr:
        """The size of the dimension blocks split (the same in every tiled buffer)."""
        n = next(n for n, d in self.tile_dims.items() if d is not None)
        return self.resolved.inline(self.s.buffers[n].full_shape[self.tile_dims[n]])

    def computed_regions(self) -> list[E.Ref]:
        """The regions whose chunks go through a warpgroup's registers: what ops compute into,
        and what a broadcast copy stores by multimem."""
        return ([ref for ref, _, how in self.uses if how == "write"]
                + [self.s.copies[n].src for n in self.broadcasts])

    @staticmethod
    def tuple_or_empty(items: list[str]) -> str:
        return "()" if not items else f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"

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
        doc = ("`interpret` must be None or False: Mosaic GPU interpret mode runs no collective. `blocks`: thread "
               "blocks per GPU (None: the GPU's SM count).")
        if self.broadcasts:
            doc += (" `multimem`: send each broadcast copy (BROADCASTS) to every GPU with one multimem store "
                    "through the NVSwitch (True), or by a TMA copy per GPU (False: GPUs without NVLink multicast).")
        return doc

    def extra_outputs(self) -> list[str]:
        return [n for n in self.s.buffers_of("hbm_scratch", "vmem_scratch") if n not in self.hidden]

    RESULTS_IN_TUPLE = True

    def checked_call(self) -> str:
        if not self.broadcasts:
            return super().checked_call()
        return "_checked(sizes, broadcasts=BROADCASTS if multimem else None)"

    def checked_constant(self, w: CodeWriter) -> None:
        super().checked_constant(w)
        if self.broadcasts:
            w.line("# The copies that go out as one multimem store (multimem=True): each sends one region to every")
            w.line("# other GPU, one start after another, at every size checked (ringc checks new sizes for it).")
            w.line(f"BROADCASTS = ({''.join(f'{n!r}, ' for n in self.broadcasts).rstrip()})")

    def call_prelude(self, w: CodeWriter) -> None:
        w.line("_no_interpret(interpret)")

    # -- kernel ----------------------------------------------------------------------------
    def kernel_refs(self) -> list[tuple[str, str]]:
        s = self.s
        refs = [(n, "input") for n in s.buffers_of("input")]
        refs += [(n, "output") for n in s.buffers_of("output")]
        refs += [(n, self.SCRATCH_OUTPUTS) for n in self.extra_outputs()]
        refs += [(n, "semaphore") for n in s.semaphores]
        return refs

    def gpu_refs(self) -> list[str]:
        """The kernel's own refs after the schedule's: the barrier semaphore (if any barrier),
        the SMEM staging buffers and the TMA barrier."""
        barrier = [self.barrier_sem] if self.has_barrier() else []
        copies = [self.issued, self.copy_stage, self.copy_loaded] if self.s.copies else []
        matmul = [self.mm_stage, self.mm_a, self.mm_b, self.mm_loaded] if self.matmuls else []
        return [*barrier, *self.stages, self.loaded, *copies, *matmul]

    def has_barrier(self) -> bool:
        return any(isinstance(op, S.Barrier) for op in walk_ops(self.s.all_ops))

    def kernel(self) -> CodeWriter:
        s = self.s
        refs = [self.name(n) for n, _ in self.kernel_refs()] + self.gpu_refs()
        doc = (f"The whole of `{s.name}` on one thread block of one GPU: "
               + (f"the grid ({', '.join(s.grid)}) in order" if s.grid else "its ops")
               + f", on the block's tile of {'rows' if self.matmuls else 'columns'} of every buffer, in two "
                 "warpgroups: the schedule's "
                 "ops in warpgroup 0, its copies in warpgroup 1 (the block's copy engine).\n\n"
               + self.kernel_ref_doc()
               + f" Then the block's own: {', '.join(f'`{r}`' for r in self.gpu_refs())} (see `_call`).")
        w = CodeWriter()
        statics = ["N", *(self.name(p) for p in s.params), "tile", "axis", "mesh_axes",
                   *(["multimem"] if self.broadcasts else [])]
        w.call("def _kernel", refs + ["*"] + statics, ":")
        w.level = 1
        w.docstring(doc)
        w.line("me = lax.axis_index(axis)")
        w.line(f'{self.thread_block} = lax.axis_index("blocks")')
        if self.matmuls:
            w.line("# This block's tile of the rows of every buffer but the matmul's right operand.")
        else:
            w.line("# This block's tile of the last dimension of every buffer.")
        for n in [*s.buffers_of("input", "output"), *self.extra_outputs()]:
            if self.tile_dims[n] is not None:
                w.line(f"{self.name(n)} = _tile({self.name(n)}, {self.tile_dims[n]}, {self.thread_block}, tile)")
        loops = list(s.grid.items())
        point = CodeWriter()
        point.level = 2 + len(loops)
        self.loop_names |= set(s.grid)  # Python ints: conditions on them are decided when traced
        for n in s.copies:
            point.blank()
            self.copy_descriptor(point, n, s.copies[n])
        point.blank()
        self.ops(point, s.body, top=True)
        w.lines.extend(INDENT + line for line in self.derived_lines())
        w.blank()
        with w.block("def _run(copier):"):
            w.docstring("The schedule on this block: its ops (copier False, warpgroup 0), or only its copies, "
                        "started in the same order (copier True, warpgroup 1).")
            base = w.level
            if self.broadcasts:
                w.line("# The broadcast copies stored by multimem so far: decided when traced (the grid is unrolled).")
                w.line("multicast = _Multicast(axis) if multimem else None")
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

    CALL = "plgpu.kernel"
    SCRATCH_OUTPUTS = "GMEM scratch"

    def refs_note(self) -> str:
        return "Semaphores are the block's own: a signal reaches the block of the same index on the target GPU."

    def copy_call(self, name: str, c: S.Copy) -> tuple[str, list[str]]:
        self.helpers.add("_Copy")
        i = list(self.s.copies).index(name)
        args = [f"src={self.dma_ref(c.src)}", f"dst={self.dma_ref(c.dst)}", f"stage={self.copy_stage}",
                f"barrier={self.copy_loaded}", f"issued={self.issued}.at[{i}]",
                f"sem={self.dma_ref(c.send_sem if c.remote else c.sem)}", "copier=copier"]
        if c.remote:
            args += [f"recv_sem={self.dma_ref(c.recv_sem)}", f"device={self.device(c.to)}"]
        if name in self.broadcasts:
            args += [f"broadcast={name!r}", "multicast=multicast"]
        return "_Copy", args

    def copy_doc(self, name: str, c: S.Copy) -> str:
        doc = super().copy_doc(name, c)
        if name in self.broadcasts:
            doc += (" A broadcast (every start sends it to the next GPU, until all others have it): with "
                    "`multimem`, the first start stores it on every GPU at once, and each start signals.")
        return doc

    def ops(self, w: CodeWriter, ops: list[S.Op], top: bool = False) -> None:
        """The ops, as `pallas.py` writes them, with each run of ops that start or wait for no
        copy under `if not copier:` (the copy warpgroup runs only the copies)."""
        run: list[S.Op] = []

        def flush() -> None:
            if run and self.schedule_only:  # already under `if not copier:`
                super(_MgpuEmitter, self).ops(w, run, top)
            elif run:
                self.schedule_only = True
                with w.block("if not copier:"):
                    super(_MgpuEmitter, self).ops(w, run, top)
                self.schedule_only = False
            run.clear()

        for op in ops:
            if any(isinstance(o, (S.Start, S.Wait, S.WaitSend, S.WaitRecv)) for o in walk_ops([op])):
                flush()
                super().ops(w, [op], top)
            else:
                run.append(op)
        flush()

    # -- ops --------------------------------------------------------------------------------
    DEVICE_ID_TYPE = ()  # Mosaic GPU's device ids are indices along the mesh axis

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

    def op_pipeline(self, w: CodeWriter, op: S.Pipeline) -> None:
        """A blocked matmul pipeline (`find_matmuls`): `_matmul` on the whole regions, this
        block's rows of the left operand and the output, all of the right operand."""
        self.helpers.add("_matmul")
        (a, b), (o,) = op.inputs.values(), op.outputs.values()
        w.call("_matmul", [self.dma_ref(a.ref), self.dma_ref(b.ref), self.dma_ref(o.ref), self.mm_stage, self.mm_a,
                           self.mm_b, self.mm_loaded])

    # -- the call ----------------------------------------------------------------------------
    def statics(self) -> list[str]:
        return ["N=N", *(f"{self.name(p)}={self.name(p)}" for p in self.s.params), "tile=tile",
                "axis=axis_name", "mesh_axes=mesh_axes", *(["multimem=multimem"] if self.broadcasts else [])]

    def pallas_call(self, w: CodeWriter) -> None:
        s = self.s
        outs = [*s.buffers_of("output"), *self.extra_outputs()]
        src = self.name(s.io_buffer("input"))
        dtype = self.dtype_text(s.io_buffer("input"))
        del src
        size = self.static(self.tiled_size())
        if self.matmuls:
            w.line(f"blocks = _row_blocks({size}, blocks)")
            w.line(f"tile = {size} // blocks  # each block's rows")
            w.line(f"width = _chunk_cols({self.static(self.columns)})  # columns per SMEM staging buffer")
            w.line(f"chunk = _chunk_rows(tile, width, {dtype})  # rows per SMEM staging buffer")
            (o,) = next(iter(self.matmuls.values())).outputs.values()
            cols = self.static(self.resolved.inline(s.buffers[o.ref.name].full_shape[-1]))
            w.line(f"tile_n = _matmul_tile_n({cols})  # columns of a matmul output tile")
            w.line(f"tile_k, swizzled = _matmul_smem({dtype})  # depth of its operand tiles, their layout")
        else:
            rows = s.buffers[s.io_buffer("input")].full_shape[-2]
            rows_computed = sorted({self.static(self.region_shape(r)[-2]) for r in self.computed_regions()})
            w.call("blocks = _blocks", [size, dtype, "blocks", f"rows={self.tuple_or_empty(rows_computed)}"])
            w.line(f"tile = {size} // blocks  # each block's columns")
            w.line("width = _chunk_cols(tile)  # columns per SMEM staging buffer")
            w.line(f"chunk = _chunk_rows({self.static(rows)}, width, {dtype})  # rows per SMEM staging buffer")
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
                    w.line(f"{text},  # {n}{' (DMA: counts bytes)' if sem.kind == 'dma' else ''}")
                if self.has_barrier():
                    w.line(f"plgpu.SemaphoreType.REGULAR,  # {self.barrier_sem}: the barrier's")
                for stage in self.stages:
                    w.line(f"plgpu.SMEM((chunk, width), {dtype}),  # {stage}: the schedule's ops' staging")
                w.line(f"plgpu.Barrier(),  # {self.loaded}: their TMA loads land here")
                if s.copies:
                    count = len(s.copies)
                    w.line(f"plgpu.SemaphoreType.REGULAR(({count},)),  # {self.issued}: copies handed over, "
                           "per descriptor")
                    w.line(f"plgpu.SMEM((chunk, width), {dtype}),  # {self.copy_stage}: the copy warpgroup's staging")
                    w.line(f"plgpu.Barrier(),  # {self.copy_loaded}: its TMA loads land here")
                if self.matmuls:
                    a, _ = next(iter(self.matmuls.values())).inputs.values()
                    w.line(f"plgpu.SMEM((64, tile_n), {dtype}),  # {self.mm_stage}: a matmul output tile")
                    w.line(f"plgpu.SMEM((2, 64, tile_k), {dtype}, transforms=swizzled),  # {self.mm_a}: left "
                           "tiles, two slots")
                    w.line(f"plgpu.SMEM((2, tile_k, tile_n), {dtype}, transforms=swizzled),  # {self.mm_b}: right "
                           "tiles, two slots")
                    w.line(f"plgpu.Barrier(num_arrivals=2, num_barriers=2),  # {self.mm_loaded}: a slot's tiles "
                           "land here")
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
                     (S.Signal, Emitter.op_signal), (S.SemWait, Emitter.op_semwait),
                     (S.Barrier, _MgpuEmitter.op_barrier), (S.Zero, _MgpuEmitter.op_zero),
                     (S.Accumulate, _MgpuEmitter.op_accumulate), (S.Assign, _MgpuEmitter.op_assign),
                     (S.Cast, _MgpuEmitter.op_cast)):
    MGPU_EMIT.register(_op)(_GpuRule(EMIT[_op].summary, _method))
_MgpuEmitter.RULES = MGPU_EMIT
MGPU_EMIT.register(S.Matmul)(_GpuRule(EMIT[S.Matmul].summary, _refused,
                                      "a `matmul` outside a blocked matmul pipeline is not emitted for Mosaic GPU "
                                      "(wgmma works on pipelined SMEM tiles)"))
# A pipeline is emitted when it is a blocked matmul (`find_matmuls`); any other is refused there.
MGPU_EMIT.register(S.Pipeline)(_GpuRule(EMIT[S.Pipeline].summary, _MgpuEmitter.op_pipeline))


_ELEMENTWISE = (S.Zero, S.Accumulate, S.Assign, S.Cast)


def _elementwise_ops(op: S.Pipeline) -> list[S.Op] | None:
    """A pipeline whose body is elementwise ops on its whole blocks, every operand cut alike
    (the same block shape, each grid index on its own dimension in order, the other blocks
    whole): the same ops on the whole regions, which is what the blocks add up to. None for
    any other pipeline."""
    specs = list(op.specs.values())
    if op.arrivals or not specs or not all(isinstance(o, _ELEMENTWISE) for o in op.do):
        return None
    first = specs[0]
    grid = [E.Var(n) for n in op.pipeline]
    if any(sp.block != first.block or sp.index != first.index for sp in specs):
        return None
    if [ix for ix in first.index if ix != E.Const(0)] != grid:
        return None
    windows = {n: sp.ref for n, sp in op.specs.items()}
    out = []
    for o in op.do:
        # An output block starts unloaded: reading it is not reading its region.
        reads = [*o.reads, *(o.writes if isinstance(o, S.Accumulate) and o.base is None else ())]
        if any(isinstance(r := getattr(o, f), E.Ref) and r.name in op.outputs for f in reads):
            return None
        refs = {f: r for f in (*o.reads, *o.writes) if isinstance(r := getattr(o, f), E.Ref)}
        if any(r.name not in windows or r.indices for r in refs.values()):
            return None  # a block indexed inside, or a VMEM buffer of the body's own
        out.append(o.model_copy(update={f: windows[r.name] for f, r in refs.items()}))
    return out


def _without_elementwise_pipelines(schedule: S.Schedule) -> S.Schedule:
    """`schedule` with each elementwise pipeline (`_elementwise_ops`) replaced by its ops on
    the whole regions: on a GPU, blocks chunk every region through SMEM anyway."""
    changed = False

    def lower(ops: list[S.Op]) -> list[S.Op]:
        nonlocal changed
        out: list[S.Op] = []
        for op in ops:
            flat = _elementwise_ops(op) if isinstance(op, S.Pipeline) else None
            if flat is not None:
                out += flat
                changed = True
            elif isinstance(op, (S.When, S.Loop)):
                out.append(op.model_copy(update={"do": lower(op.do)}))
            else:
                out.append(op)
        return out

    body = lower(schedule.body)
    return schedule.model_copy(update={"body": body}) if changed and not schedule.kernels else schedule


def _has_matmul(schedule: S.Schedule) -> bool:
    return any(isinstance(op, S.Matmul) for op in walk_ops(schedule.all_ops))


def refuse_early(schedule: S.Schedule) -> None:
    """Raise `MgpuEmitError` for what the GPU target does not express, before a check."""
    _MgpuEmitter(schedule)


def emit_mgpu(schedule: S.Schedule, checked: Iterable[Mapping[str, int]] | None = None) -> str:
    """The Pallas Mosaic GPU module for `schedule`, as Python source text (deterministic);
    `checked` as for `pallas.emit`. Raises `MgpuEmitError` (a ScheduleError: file, line,
    fix) for what the GPU target does not express yet."""
    return compiled_source(_MgpuEmitter(schedule, checked).emit(), f"<ringc emit --target mgpu of {schedule.file}>")
