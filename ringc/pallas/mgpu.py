"""The Pallas Mosaic GPU front end: multi-GPU kernels (`plgpu.kernel`) as processes.

A Mosaic GPU kernel traced under `jax.shard_map` is `shard_map -> custom_vmap_call ->
mpmd_map`: one kernel jaxpr run by every block of a grid, and in each block by every
warpgroup of `num_threads` (Warpgroup lowering semantics). Unlike a TPU core, which runs its
grid points one after another, the blocks of a GPU run at once. So the model's processes are
not devices: every (GPU, block, warpgroup) is a process of its own, with its own program
order, and the verifier sees them all (`Program.memories`, `Program.places`):

- processes 0..G-1 are the GPUs' launch processes. Each stands for what the host and the
  stream do around a launch: the kernel takes over its operands (`enter`), the blocks start
  (one `Signal` on the launch count, which every block waits for without decrementing), the
  launch ends when every block has signalled the join count, and the caller takes the
  memory back (`exit`). A GPU's memory and semaphores are those of its launch process, so
  `Region.device` and a semaphore's device are GPU indices, as on a TPU;
- processes G.. are the blocks' warpgroups, created on first use and reused by every later
  launch (block b of launch 2 starts after the launch process has seen launch 1 end: the
  stream's order).

What each primitive does is one rule here (`PRIMITIVES.gpu`), beside the TPU interpreter's
(`interpret.py`); the rules the two share (loads and stores, control flow, pure arithmetic)
are listed once (`SHARED`). The model, and where each part of it comes from in JAX's and
Mosaic GPU's sources, is docs/verification.md ("Mosaic GPU").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import limits

from ..verify.events import Compute, DmaStart, Region, SemWait, Signal
from ..verify.messages import UNFENCED_SMEM
from .interpret import (Interpreter, KernelError, Multicast, apply_transforms, device_of, sem_id, squeezed,
                        unflatten, user_location)
from .program import kernel_location, row_major
from .primitives import PRIMITIVES, Does
from .values import Buffer, Data, Loc, Ref, SemRef

__all__ = ["GpuInterpreter", "run_launch", "mosaic_gpu_primitives", "rule_table_markdown", "SHARED", "LAUNCH", "JOIN"]

LAUNCH = "mgpu-launch#"  # + invocation: the count every block of a launch waits for before it starts
JOIN = "mgpu-join#"      # + invocation: every block adds 1 when it ends; the launch process waits for all
BARRIER = "mgpu-barrier#"  # + invocation: the GPUs' barrier before a launch
ENGINE = "tma-engine"     # a block's copy engine's queue count (`_tma_engine`)
BLOCK_BARRIER = "block-barrier"  # a barrier of a block's warpgroups (`run_scoped(collective_axes=wg)`)

# The TPU interpreter's rules that mean the same on a GPU: loads and stores of a ref (a
# Compute each), control flow, nested calls, hints. Everything else a GPU kernel runs has a
# rule of its own below, or is pure (`interpret.pure_rule`), or is refused by name.
SHARED = ("get", "swap", "addupdate", "cond", "while", "scan", "pjit", "jit", "closed_call", "core_call",
          "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr", "checkpoint", "remat", "custom_lin",
          "broadcast_in_dim", "multiple_of", "debug_print", "debug_callback", "axis_index", "delay")


def mosaic_gpu_primitives() -> list[str]:
    """Every primitive Pallas' Mosaic GPU lowering has a rule for (a private table of jax
    0.10, `jax._src.pallas.mosaic_gpu.lowering.mosaic_lowering_rules`): the GPU rules' domain."""
    import jax.experimental.pallas.mosaic_gpu  # noqa: F401 - registers the primitives' rules
    from jax._src.pallas.mosaic_gpu import lowering
    return sorted({p.name for rules in lowering.mosaic_lowering_rules.values() for p in rules})


# -- one launch -------------------------------------------------------------------------------
@dataclass
class Launch:
    """One `mpmd_map` call on every GPU: its grid, its warpgroups, and the allocations its
    blocks share."""
    builder: Any
    name: str
    invocation: int
    gpus: int
    grid: dict[str, int]            # the block axes, in order (grid names, then cluster names)
    threads: int                    # warpgroups per block
    thread_name: str | None
    # (eqn id, k, gpu, block) -> the block's scoped allocation (shared by its warpgroups)
    scoped: dict[tuple, Any] = field(default_factory=dict)
    globals_: dict[tuple, SemRef] = field(default_factory=dict)  # get_global: (eqn id, k) -> semaphore
    registers: dict[tuple, Buffer] = field(default_factory=dict)
    arrivals: dict[str, int] = field(default_factory=dict)  # an SMEM barrier's num_arrivals
    sem_words: dict[str, Buffer] = field(default_factory=dict)  # a signalled semaphore's memory (`_signalled`)
    smem: set[str] = field(default_factory=set)  # the SMEM buffers (`_fenced`)
    program_ids: tuple[str, ...] | None = None  # a pallas_call's grid axes, in `pl.program_id` order

    @property
    def blocks(self) -> int:
        return math.prod(self.grid.values())

    def block_coords(self, block: int) -> dict[str, int]:
        return row_major(block, self.grid)

    def sem_name(self, base: str) -> str:
        """A semaphore of this launch: zeroed before every launch (Mosaic GPU's GMEM scratch is
        zero-initialised, docs/verification.md), so each launch's are its own."""
        return base if self.invocation == 0 else f"{base}@call{self.invocation + 1}"


@dataclass(frozen=True)
class MulticastTarget(Ref):
    """`plgpu.multicast_ref(ref, axes)`: `ref` on every GPU of `peers` (a TMA store's destination)."""
    peers: tuple = ()


class GpuInterpreter(Interpreter):
    """Evaluates a Mosaic GPU kernel jaxpr for one warpgroup of one block of one GPU.
    `device` is the process (events go to it; its registers are its own memory); `gpu` is the
    device whose memory and semaphores it reaches without naming a peer."""

    slot = "gpu"

    def __init__(self, launch: Launch, gpu: int, block: int, wg: int, process: int):
        b = launch.builder
        coords = {**b._coords(gpu), **launch.block_coords(block)}
        sizes = {**b.axis_sizes, **launch.grid}
        if launch.thread_name is not None:
            coords[launch.thread_name] = wg
            sizes[launch.thread_name] = launch.threads
        super().__init__(b, process, coords, sizes)
        self.launch, self.gpu, self.block, self.wg = launch, gpu, block, wg
        self.mesh_sizes = dict(b.axis_sizes)
        self.groups: list[_Group] = []  # TMA bulk groups (copy_smem_to_gmem), oldest first
        self.copies = 0
        self.rounds = 0                # block barriers met
        self.waited: dict[tuple, int] = {}  # barrier instance -> waits made (the phase the next one waits for)
        self.mma: list[tuple[DmaStart, DmaStart, Any, Any, Any]] = []  # wgmmas in flight, oldest first
        self.unfenced: list[tuple[Region, int]] = []  # SMEM this warpgroup stored to since its last commit_smem

    def emit(self, action: Any, target: int | None = None) -> None:
        if (type(action) is Compute and action.dst.buffer in self.launch.smem
                and action.kind not in ("allocate", "zero")):
            self.unfenced.append((action.dst, int(self.where())))
        super().emit(action, target)

    def fenced(self, region: Region, reader: str) -> None:
        """The TMA or wgmma reads `region` of SMEM: the warpgroup's stores there must have been
        fenced (`plgpu.commit_smem`), or it may read what was there before (docs/verification.md)."""
        for wrote, at in self.unfenced:
            if wrote.overlaps(region):
                self.sink.unfenced.append((self.device, self.point, self.where(), UNFENCED_SMEM.finding(
                    label=self.sink.labels[self.device], reader=reader, line=int(self.where()), region=region.text(),
                    wrote=at)))
                return

    def fail(self, message: str, fix: str, eqn: Any = None) -> KernelError:
        loc = self.where(eqn)
        return KernelError(f"{message} (GPU {self.gpu}, block {self.block}"
                           + (f", warpgroup {self.wg}" if self.launch.threads > 1 else "") + ")",
                           file=loc.file, line=int(loc) or None, fix=fix)

    def generic(self, eqn: Any, entry: Any = None) -> Any:
        if entry is not None and entry.kernel is not None and Does.PURE not in entry.does:
            raise self.fail(f"ringc has no Mosaic GPU rule for the primitive `{eqn.primitive.name}`",
                            "see docs/pallas-import.md (Mosaic GPU) for the supported primitives", eqn)
        return super().generic(eqn, entry)

    def register(self, key: Any, shape: tuple, dtype: Any) -> Ref:
        """A value register of this process for one load site (`key`)."""
        regs = self.launch.registers
        buf = regs.get(key)
        if buf is None:
            line = self.where()
            buf = regs[key] = Buffer(self.sink.unique(f"value@{int(line)}"), tuple(shape), dtype, "vmem", "value",
                                     int(line))
            self.sink.buffers[buf.name] = buf
        return Ref.whole(buf, self.device)

    def remote(self, ref: Any, peer: Any) -> Any:
        """`plgpu.remote_ref(ref, device_id)`: the same buffer on the peer GPU (the peer's copy of
        the kernel operand, at the same offset)."""
        if isinstance(peer, Multicast):
            if not isinstance(ref, Ref):
                raise self.fail("multicast_ref of something that is not a GMEM ref", "pass a kernel operand or output")
            return MulticastTarget(ref.buffer, ref.device, ref.box, ref.kept, peers=tuple(self.peers(peer.axes)))
        gpu = _gpu_of(self, peer.device_id, peer.device_id_type)
        if not isinstance(ref, Ref):
            raise self.fail("remote_ref of something that is not a GMEM ref", "pass a kernel operand or output")
        if not 0 <= gpu < self.launch.gpus:
            raise self.fail(f"remote_ref to GPU {gpu}, which does not exist ({self.launch.gpus} GPUs)",
                            "compute the peer from lax.axis_index and the axis size")
        return Ref(ref.buffer, gpu, ref.box, ref.kept)

    def private_sem(self, prefix: str, kind: str, new: bool = True) -> tuple:
        """A semaphore of this warpgroup's own (a copy's completion): `prefix#k` for its k-th copy
        (`new`: the next one), at (block, warpgroup), so that blocks that copy alike name theirs
        alike (`Program.block_sems`)."""
        if new:
            self.copies += 1
        name = f"{prefix}#{self.copies}"
        self.sink.sem_kinds[name] = kind
        self.sink.block_sems.add(name)
        return (self.gpu, name, (self.block, self.wg))

    def peers(self, axes: Any) -> list[int]:
        """The GPUs that differ from this one only along `axes` (a multicast's group), in order."""
        names = axes if isinstance(axes, (tuple, list)) else (axes,)
        for a in names:
            if a not in self.mesh_sizes:
                raise self.fail(f"collective_axes `{a}` is not a mesh axis ({', '.join(self.mesh_sizes)})",
                                "name the shard_map's mesh axes")
        mine = self.sink._coords(self.gpu)
        gpus = self.launch.gpus
        # from this GPU on (the order a multicast's events are listed in: the same on every GPU,
        # moved by its own index, as `order.BlockOrder`'s rotation asks)
        return [g for g in sorted(range(gpus), key=lambda g: (g - self.gpu) % gpus)
                if all(c == mine[a] for a, c in self.sink._coords(g).items() if a not in names)]


@dataclass
class _Group:
    """One TMA bulk async-group of a process (`copy_smem_to_gmem`): its copy's read side is
    done at `read`'s wait, its write side at `write`'s (None: not waited yet)."""
    starts: tuple[DmaStart, ...]
    read_waited: bool = False
    write_waited: bool = False


def run_launch(b: Any, call: Any, call_index: int) -> None:
    """Evaluate one Mosaic GPU kernel call on every GPU, block and warpgroup."""
    eqn = call.eqn
    p = eqn.params
    if eqn.primitive.name == "pallas_call":
        return _run_pallas_call(b, call, call_index)
    if len(p["jaxprs"]) != 1:
        raise KernelError(f"an mpmd_map of {len(p['jaxprs'])} programs", file=b.file,
                          line=int(user_location(eqn)) or None, fix="ringc checks one kernel program per call")
    (kernel,) = p["jaxprs"]
    (mesh,) = p["meshes"]
    line = kernel_location(eqn)
    cluster = dict(zip(mesh.cluster_names, mesh.cluster))
    if math.prod(cluster.values()) > 1:
        raise KernelError(f"a kernel over clusters of {math.prod(cluster.values())} blocks", file=line.file,
                          line=int(line) or None, fix="ringc models clusters of one block (cluster=(1,))")
    grid = dict(zip(mesh.grid_names, mesh.grid))
    grid.update(cluster)
    launch = Launch(b, call.name, b.invocation, b.n_gpus, grid, mesh.num_threads or 1, mesh.thread_name)
    _launch(b, call, call_index, launch, kernel, line)


def _run_pallas_call(b: Any, call: Any, call_index: int) -> None:
    """A Mosaic GPU `pallas_call` (JAX's 0.8-0.9 distributed GPU tests): its grid's points are
    the blocks, one warpgroup each (`pl.program_id` is the block's index along a grid axis),
    its operands whole arrays in GMEM, and its scratch (`scratch_shapes`: semaphores, SMEM)
    each block's own, as `pl.run_scoped` in a `plgpu.kernel` makes them. A BlockSpec that
    pipelines blocks through SMEM is refused at the call."""
    eqn = call.eqn
    gm = eqn.params["grid_mapping"]
    line = kernel_location(eqn)
    for bm in gm.block_mappings:
        space = str(getattr(bm.transformed_block_aval, "memory_space", "")).lower()
        if "smem" in space and tuple(bm.block_aval.shape) == tuple(bm.array_aval.shape):
            note = (f"a Mosaic GPU pallas_call's whole-array SMEM operand or result (line {int(line)}) is checked as "
                    "the array in GMEM: Mosaic GPU copies it into SMEM before the body and out after it")
            if note not in b.notes:
                b.notes.append(note)
            continue
        if tuple(bm.block_aval.shape) != tuple(bm.array_aval.shape) or not any(m in space for m in ("gmem", "any")):
            raise KernelError("a Mosaic GPU pallas_call that pipelines blocks through SMEM (a BlockSpec with a "
                              "block shape) is not modelled", file=line.file, line=int(line) or None,
                              fix="give its operands whole in GMEM (pl.BlockSpec(memory_space=plgpu.GMEM)) and "
                                  "copy tiles in the kernel, or launch it with plgpu.kernel")
    names = tuple(gm.grid_names) if gm.grid_names else tuple(f"program_id({k})" for k in range(len(gm.grid)))
    launch = Launch(b, call.name, b.invocation, b.n_gpus, dict(zip(names, gm.grid)), 1, None)
    launch.program_ids = names
    _launch(b, call, call_index, launch, eqn.params["jaxpr"], line)


def _launch(b: Any, call: Any, call_index: int, launch: "Launch", kernel: Any, line: Loc) -> None:
    """One launch of `kernel` on every GPU and block (`run_launch`): entry, the barrier jaxlib
    queues, every block's warpgroups as processes, join and exit."""
    _check_size(b, launch, line)
    bufs, enter_names, exit_names = b.bind_mesh_call(call, call_index, kernel, line, "gmem")
    scratch = kernel.invars[len(bufs):]   # a pallas_call's scratch_shapes (a plgpu.kernel scopes its own)
    launch_sem, join_sem = f"{LAUNCH}{b.invocation}", f"{JOIN}{b.invocation}"
    barrier_sem = f"{BARRIER}{b.invocation}"
    b.sem_kinds[launch_sem] = b.sem_kinds[join_sem] = b.sem_kinds[barrier_sem] = "launch"
    point = ()
    procs = launch.blocks * launch.threads
    for g in range(launch.gpus):
        for name in enter_names:
            b.emit(g, point, line, Compute("enter", Ref.whole(b.buffers[name], g).region()), None)
        # The multi-GPU barrier jaxlib queues on the stream before every Mosaic GPU kernel that
        # uses collective metadata (docs/verification.md): no block starts before every GPU got here.
        for k in range(1, launch.gpus):
            b.emit(g, point, line, Signal(((g + k) % launch.gpus, barrier_sem, ()), 1, "launch barrier"), None)
        if launch.gpus > 1:
            b.emit(g, point, line, SemWait((g, barrier_sem, ()), launch.gpus - 1, "launch barrier"), None)
        b.emit(g, point, line, Signal((g, launch_sem, ()), 1, "launch"), None)
    events = start = sum(len(d) for d in b.devices)
    for g in range(launch.gpus):
        for block in range(launch.blocks):
            for wg in range(launch.threads):
                proc = b.process(g, block, wg, launch.threads)
                it = GpuInterpreter(launch, g, block, wg, proc)
                it.point = point
                b.emit(proc, point, line, SemWait((g, launch_sem, ()), 1, "launch", decrement=False), None)
                it.eqn = call.eqn   # (scratch is allocated at the call's line)
                allocs = _scoped(it, call.eqn, scratch, line) if scratch else []
                it.run(kernel, [], [Ref.whole(buf, g) for buf in bufs] + allocs)
                _end_of_kernel(it, line)
                b.emit(proc, point, line, Signal((g, join_sem, ()), 1, "join"), None)
                events += len(b.devices[proc])
            if g == 0 and block == 0:  # one block's events, times every block of every GPU: refuse early
                limits.check("gpu_events", (events - start) * launch.blocks * launch.gpus,
                             f"the events of this kernel call, estimated from its first block "
                             f"({events - start:,} events) x {launch.blocks} blocks x {launch.gpus} GPUs",
                             file=line.file, line=int(line) or None,
                             fix="check smaller shapes (fewer tiles and steps per block) or fewer GPUs")
            limits.check("gpu_events", events - start, f"the events of this kernel call so far ({g + 1} of "
                         f"{launch.gpus} GPUs' blocks)", file=line.file, line=int(line) or None,
                         fix="check smaller shapes (fewer tiles and steps per block) or fewer GPUs")
    for g in range(launch.gpus):
        b.emit(g, point, line, SemWait((g, join_sem, ()), procs, "join", decrement=False), None)
        for name in exit_names:
            b.emit(g, point, line, Compute("exit", Ref.whole(b.buffers[name], g).region()), None)
        # the kernel's semaphores go back with the launch: a signal that lands later would count in
        # whatever the memory holds next (the next launch zeroes it again)
        for buf in launch.sem_words.values():
            b.emit(g, point, line, Compute("exit", Ref.whole(buf, g).region()), None)
    b.call_names.append(call.name)


def assumptions(b: Any) -> list[str]:
    """What every Mosaic GPU verdict assumes (docs/verification.md, "Mosaic GPU")."""
    blocks = sorted({blk for (_, blk, _) in b.processes})
    wgs = sorted({wg for (_, _, wg) in b.processes})
    return [
        f"Mosaic GPU: every block of each GPU is a process of its own ({len(blocks)} blocks x {len(wgs)} "
        f"warpgroup{'s' if len(wgs) > 1 else ''} per GPU, {len(b.processes):,} processes), running at once in "
        "any interleaving; a block's warpgroup runs its ops in program order",
        "memory model: system-scope release/acquire: a signal (red.release.sys, after the warpgroup's barrier) "
        "publishes the warpgroup's earlier stores, multimem stores and TMA stores it waited for; a wait "
        "(fence.acquire.sys) sees them; nothing orders other warpgroups' or blocks' stores",
        "launches: every semaphore of a kernel is zero-initialised before each launch, and jaxlib queues a "
        "barrier across the GPUs before each launch (none after it); the blocks start after it and the launch "
        "ends when every block has; a count left by non-decrementing waits is dropped with the launch",
        "TMA: copy_smem_to_gmem is a copy in flight until a wait_smem_to_gmem covers its bulk group (its SMEM "
        "source with wait_read_only, its GMEM destination without); every group completes by the kernel's end",
    ]


def _end_of_kernel(it: GpuInterpreter, line: Loc) -> None:
    """A block ends with its TMA stores complete: Mosaic GPU waits for every bulk group at
    the kernel's end (docs/verification.md)."""
    _wait_groups(it, 0, read_only=False, why="the kernel's end", line=line)


def _check_size(b: Any, launch: Launch, line: Loc) -> None:
    procs = launch.gpus * launch.blocks * launch.threads
    limits.check("gpu_processes", procs, f"{launch.gpus} GPUs x {launch.blocks} blocks x {launch.threads} "
                 "warpgroups", file=line.file, line=int(line) or None,
                 fix="check with fewer blocks (num_blocks, the grid) or fewer GPUs (--devices)")


# -- the rules ----------------------------------------------------------------------------------
def _gpu_of(it: GpuInterpreter, dev: Any, id_type: Any) -> int:
    """A signal's or remote ref's target GPU (`DeviceIdType.MESH` coordinates, or logical)."""
    saved_coords, saved_sizes = it.coords, it.axis_sizes
    it.coords = {a: c for a, c in it.coords.items() if a in it.mesh_sizes}
    it.axis_sizes = it.mesh_sizes
    try:
        return device_of(it, dev, id_type)
    finally:
        it.coords, it.axis_sizes = saved_coords, saved_sizes


def _sem(it: GpuInterpreter, s: Any, gpu: int, what: str) -> tuple:
    """`interpret.sem_id` on `gpu`, which must exist."""
    if not 0 <= gpu < it.launch.gpus:
        raise it.fail(f"{what} is on GPU {gpu}, which does not exist ({it.launch.gpus} GPUs)",
                      "compute the target from lax.axis_index and the axis size")
    return sem_id(it, s, gpu, what)


def gpu_ref(it: GpuInterpreter, ref: Any, transforms: Any) -> Any:
    """A ref with its transforms applied (`interpret.apply_transforms`, `plgpu.remote_ref`'s
    `Peer` among them: `GpuInterpreter.remote`)."""
    return apply_transforms(it, ref, transforms)


@PRIMITIVES.gpu("run_scoped", does=Does.CONTROL | Does.MEMORY | Does.SEMAPHORE,
                doc="`pl.run_scoped`: SMEM and barriers per block (shared by its warpgroups with "
                    "collective_axes=wg), semaphores per block, accumulators per warpgroup")
def _run_scoped(it: GpuInterpreter, eqn: Any, invals: list) -> list:
    body = eqn.params["jaxpr"]
    launch = it.launch
    allocs = _scoped(it, eqn, body.invars, it.where(eqn))
    if launch.threads > 1 and tuple(eqn.params.get("collective_axes") or ()) == (launch.thread_name,):
        _block_barrier(it)  # `gpu.barrier()`: every warpgroup of the block meets before the scope
    return it.run(body, invals, allocs)


def _scoped(it: GpuInterpreter, eqn: Any, invars: list, line: Loc) -> list:
    """The refs of a scope's allocations (`pl.run_scoped`'s, or a pallas_call's scratch):
    semaphores and SMEM per block, accumulators per warpgroup."""
    launch = it.launch
    allocs = []
    for k, v in enumerate(invars):
        aval = v.aval
        kind = type(aval).__name__
        dtype = str(getattr(aval, "dtype", ""))
        space = str(getattr(aval, "memory_space", "")).lower()
        barrier = "barrier" in dtype.lower()
        if "sem" in dtype or barrier:
            key = (id(eqn), k)
            name = launch.scoped.get(key)
            if name is None:
                name = launch.scoped[key] = it.sink.unique(launch.sem_name(f"{'barrier' if barrier else 'sem'}@"
                                                                           f"{int(line)}"))
                it.sink.sem_kinds[name] = "gpu"
                it.sink.block_sems.add(name)
                if barrier:
                    launch.arrivals[name] = int(getattr(aval.dtype, "num_arrivals", 1))
            # one per block: block b's semaphores (GMEM scratch) and barriers (SMEM) are its own
            allocs.append(SemRef(name, "gpu", (launch.blocks, *aval.shape), (it.block,)))
            continue
        shared = "wgmma" not in kind.lower()
        owner = it.sink.block_process(it.gpu, it.block) if shared else it.device
        key = (id(eqn), k)  # one buffer for every block (or warpgroup): the region's device tells them apart
        buf = launch.scoped.get(key)
        if buf is None:
            shape = tuple(getattr(aval, "shape", ()))
            base = "smem" if "smem" in space or shared else "acc"
            buf = launch.scoped[key] = it.sink.new_buffer(f"{base}@{int(line)}", aval, "scratch", int(line),
                                                          shape=shape)
            buf.space = "vmem"
            if shared:
                launch.smem.add(buf.name)
        ref = Ref.whole(buf, owner)
        allocs.append(ref)
        # a WGMMA accumulator starts as zeros (`WGMMAAccumulator.zero`); SMEM holds garbage, fresh for
        # the block's first warpgroup, which the others meet at the barrier below before they use it
        if not shared:
            it.emit(Compute("zero", ref.region()))
        elif launch.threads == 1:
            it.emit(Compute("allocate", ref.region()))
        # (a scope shared by several warpgroups reuses its SMEM from the last time the scope ran: the
        # barrier below orders every warpgroup's accesses there before any here; no one write can)
    return allocs


def _block_barrier(it: GpuInterpreter) -> None:
    """A barrier of every warpgroup of the block (`bar.sync` over the block): each adds one to
    the block's count and waits until every warpgroup has, round after round."""
    launch = it.launch
    name = launch.sem_name(BLOCK_BARRIER)
    it.sink.sem_kinds[name] = "gpu"
    it.sink.block_sems.add(name)
    sem = (it.gpu, name, (it.block,))
    it.rounds += 1
    it.emit(Signal(sem, 1, "block barrier"))
    it.emit(SemWait(sem, it.rounds * launch.threads, "block barrier", decrement=False))


@PRIMITIVES.gpu("get_global", does=Does.SEMAPHORE | Does.MEMORY,
                doc="`pl.get_global(SemaphoreType.REGULAR)`: one semaphore per GPU, shared by every block")
def _get_global(it: GpuInterpreter, eqn: Any, invals: list) -> list:
    what = eqn.params["what"]
    if "sem" not in str(getattr(what, "dtype", "")):
        raise it.fail("get_global of a non-semaphore", "Mosaic GPU allocates only semaphores with pl.get_global")
    key = (id(eqn),)
    s = it.launch.globals_.get(key)
    if s is None:
        name = it.sink.unique(it.launch.sem_name(f"global_sem@{int(it.where())}"))
        it.sink.sem_kinds[name] = "gpu"
        s = it.launch.globals_[key] = SemRef(name, "gpu", tuple(what.shape))
    return [s]


@PRIMITIVES.gpu("semaphore_signal", does=Does.SEMAPHORE,
                doc="`pl.semaphore_signal(sem, inc, device_id=...)`: adds `inc` to the semaphore on that GPU "
                    "(`red.release.sys`)")
def _signal(it: GpuInterpreter, eqn: Any, invals: list) -> list:
    sem, transforms, inc, dev, core = unflatten(it, eqn, invals, "args_tree")
    sem = apply_transforms(it, sem, transforms)
    amount = it.scalar(inc, "the signal increment")
    target = it.gpu if dev is None else _gpu_of(it, dev, eqn.params["device_id_type"])
    sem_id = _sem(it, sem, target, "the signalled semaphore")
    _signalled(it, sem, sem_id)
    it.emit(Signal(sem_id, amount, "signal"))
    return []


def _signalled(it: GpuInterpreter, sem: SemRef, sem_id: tuple) -> None:
    """A signal's atomic add, as an access of the semaphore's word on its GPU (a read: adds
    commute with each other). Its GPU's launch ends with an exit of every signalled semaphore's
    memory, so a signal that nothing orders before that end (no wait there needs it) races
    with it: it may land after the launch, in memory the next launch zeroes and counts again."""
    launch = it.launch
    buf = launch.sem_words.get(sem.name)
    if buf is None:
        buf = launch.sem_words[sem.name] = Buffer(it.sink.unique(f"semaphore {sem.name}"), tuple(sem.shape) or (1,),
                                                  np.int32, "gmem", "scratch")
        it.sink.buffers[buf.name] = buf
    box = tuple((i, i + 1) for i in sem_id[2]) or ((0, 1),)
    word = Region(buf.name, sem_id[0], box, (), 4)
    reg = it.register(("signal", sem.name), (1,), np.int32)
    it.emit(Compute("signal", reg.region(), word))


@PRIMITIVES.gpu("semaphore_signal_multicast", does=Does.SEMAPHORE,
                doc="`plgpu.semaphore_signal_multicast(sem, collective_axes=...)`: adds `inc` to the semaphore on "
                    "every GPU of the axes, this one included")
def _signal_multicast(it: GpuInterpreter, eqn: Any, invals: list) -> list:
    sem, transforms, inc = unflatten(it, eqn, invals, "args_tree")
    sem = apply_transforms(it, sem, transforms)
    amount = it.scalar(inc, "the signal increment")
    for g in it.peers(eqn.params["collective_axes"]):
        sem_id = _sem(it, sem, g, "the signalled semaphore")
        _signalled(it, sem, sem_id)
        it.emit(Signal(sem_id, amount, "multicast signal"))
    return []


@PRIMITIVES.gpu("semaphore_wait", does=Does.SEMAPHORE,
                doc="`pl.semaphore_wait(sem, value, decrement=...)`: decrementing, or a threshold test "
                    "(`decrement=False`) that leaves the count")
def _sem_wait(it: GpuInterpreter, eqn: Any, invals: list) -> list:
    sem, transforms, value, decrement = unflatten(it, eqn, invals, "args_tree")
    sem = apply_transforms(it, sem, transforms)
    amount = it.scalar(value, "the wait value")
    it.emit(SemWait(_sem(it, sem, it.gpu, "the waited semaphore"), amount, "sem_wait", decrement=bool(decrement)))
    return []


@PRIMITIVES.gpu("layout_cast", does=Does.HINT, doc="a register layout: the value itself")
def _layout_cast(it: GpuInterpreter, eqn: Any, invals: list) -> list:
    return [invals[0]]


@PRIMITIVES.gpu("set_max_registers_p", "print_layout", "optimization_barrier", does=Does.HINT,
                doc="register allocation and printing: no effect on memory or semaphores")
def _hint(it: GpuInterpreter, eqn: Any, invals: list) -> list:
    return list(invals[:len(eqn.outvars)]) + [None] * max(0, len(eqn.outvars) - len(invals))


def _region(it: GpuInterpreter, ref: Any, gpu: int) -> Any:
    """The region of `ref` (a view of a GMEM buffer) on `gpu`."""
    if not isinstance(ref, Ref):
        raise it.fail("a multimem access of something that is not a GMEM ref", "pass a GMEM ref")
    return Ref(ref.buffer, gpu, ref.box, ref.kept).region()


@PRIMITIVES.gpu("multimem_store", does=Does.MEMORY,
                doc="`plgpu.multimem_store(x, ref, axes)`: stores x into ref on every GPU of the axes "
                    "(`multimem.st`), one write event per GPU")
def _multimem_store(it: GpuInterpreter, eqn: Any, invals: list) -> list:
    from .interpret import store_actions
    value, ref, *flat = invals
    ref = gpu_ref(it, ref, unflatten(it, eqn, flat, "transforms_tree"))
    for g in it.peers(eqn.params["collective_axes"]):
        dst = _region(it, ref, g)
        if isinstance(value, Data):
            dst, value = _squeezed(dst, value)
            for action in store_actions(dst, value):
                it.emit(action)
        else:
            it.emit(Compute("opaque", dst, fn=(f"a value stored by multimem_store at line {int(it.where())}",)))
    return []


def _squeezed(dst: Any, value: Data) -> tuple[Any, Data]:
    """A store through a reshaped view: the value (a load of a register) and the destination
    as their dims other than 1 when that makes them agree (`interpret.squeezed`)."""
    if value.shape == dst.shape or value.how[0] != "load":
        return dst, value
    dst2, reg = squeezed(dst, value.how[1])
    if dst2.shape != reg.shape:
        return dst, value
    return dst2, Data(reg.shape, ("load", reg))


@PRIMITIVES.gpu("multimem_load_reduce", does=Does.MEMORY,
                doc="`plgpu.multimem_load_reduce(ref, axes, op)`: reads ref on every GPU of the axes "
                    "(`multimem.ld_reduce`): a sum of loads (other reductions: data not followed)")
def _multimem_load_reduce(it: GpuInterpreter, eqn: Any, invals: list) -> list:
    ref, *flat = invals
    ref = gpu_ref(it, ref, unflatten(it, eqn, flat, "tree"))
    op = str(eqn.params.get("reduction_op", "add"))
    total = None
    for g in it.peers(eqn.params["collective_axes"]):
        src = _region(it, ref, g)
        reg = it.register((id(eqn), g), src.shape, ref.buffer.dtype)
        it.emit(Compute("load", reg.region(), src))
        x = Data(src.shape, ("load", reg.region()))
        total = x if total is None else Data(src.shape, ("add", total, x))
    if op != "add":
        return [Data(ref.shape, ("opaque", f"multimem_load_reduce `{op}` at line {int(it.where())}"))]
    return [total]


# The primitives a GPU kernel may run that mean what the TPU interpreter's rule says.
PRIMITIVES.gpu_shares(*SHARED, "semaphore_read")
PRIMITIVES.pure("_copysign", "reduce_prod", elementwise=False)


def _refusing(why: str, fix: str) -> Any:
    def refuse(it: GpuInterpreter, eqn: Any, invals: list) -> list:
        raise it.fail(f"`{eqn.primitive.name}`: {why}", fix, eqn)
    return refuse


# What Mosaic GPU lowers that this model does not follow yet: refused by name at the user's line
# (a skipped barrier or copy would make a racy kernel look clean). docs/pallas-import.md lists them.
_NOT_YET = {
    ("barrier_test", "async_load", "async_prefetch"): (
        Does.MEMORY | Does.SEMAPHORE, "not modelled (a barrier's phase tested without waiting; async loads)",
        "wait on the barrier with plgpu.barrier_wait; load with plgpu.copy_gmem_to_smem"),
    ("wgmma_accumulator_store_p",): (
        Does.MEMORY, "not modelled", "read the accumulator with acc_ref[...]"),
    ("tcgen05_mma", "tcgen05_commit_arrive", "async_copy_scales_to_tmem", "async_copy_smem_to_tmem",
     "async_copy_sparse_metadata_to_tmem", "async_store_tmem", "commit_tmem", "wait_load_tmem"): (
        Does.MEMORY, "Blackwell (sm_100) tensor memory and tcgen05 are not modelled", "check a Hopper kernel"),
    ("try_cluster_cancel", "query_cluster_cancel"): (
        Does.SEMAPHORE, "cluster launch control is not modelled", "use a fixed grid"),
    ("griddepcontrol_launch_dependents", "griddepcontrol_wait"): (
        Does.SEMAPHORE, "programmatic dependent launch is not modelled", "launch kernels one after another"),
    ("semaphore_signal_parallel",): (
        Does.SEMAPHORE, "its release fences follow the signals they should precede (jax 0.10.2 and HEAD), so what "
        "it publishes is not what its docstring says", "signal with pl.semaphore_signal"),
    ("mgpu_atomic_store", "async_store_smem", "inline_mgpu_p", "jaxpr_call", "run_state", "load"): (
        Does.MEMORY, "not modelled", "write the kernel with ref loads and stores, TMA stores and semaphores"),
}
for _names, (_does, _why, _fix) in _NOT_YET.items():
    for _name in _names:
        _entry = PRIMITIVES.get(_name)
        PRIMITIVES.gpu(_name, does=_entry.does if _entry is not None else _does,
                       doc=f"refused: {_why}")(_refusing(_why, _fix))
@PRIMITIVES.gpu("core_map", does=Does.KERNEL | Does.CONTROL,
                doc="refused: warp-level code (a core_map over plgpu.WarpMesh), or a core mesh inside a kernel")
def _core_map(it: GpuInterpreter, eqn: Any, invals: list) -> list:
    if type(eqn.params.get("mesh")).__name__ == "WarpMesh":   # warp specialisation, not a nested kernel
        raise it.fail("`core_map` over plgpu.WarpMesh: warp-level code is not modelled (ringc's unit is the "
                      "warpgroup, each one a program running its ops in order)",
                      "none within ringc yet: check the kernel's warpgroup-level parts on their own, or write the "
                      "per-warp work at warpgroup level", eqn)
    raise it.fail("`core_map`: a core mesh inside a Mosaic GPU kernel is not modelled",
                  "launch the kernel with plgpu.kernel", eqn)
@PRIMITIVES.gpu("program_id", does=Does.PLACE,
                doc="a Mosaic GPU pallas_call's block index along a grid axis; refused in plgpu.kernel (its grid "
                    "axes are named: `lax.axis_index`)")
def _program_id(it: GpuInterpreter, eqn: Any, invals: list) -> list:
    names = it.launch.program_ids
    if names is None:
        raise it.fail("`pl.program_id` in a Mosaic GPU kernel, which names its grid axes",
                      "use lax.axis_index(grid_name)", eqn)
    return [it.launch.block_coords(it.block)[names[eqn.params["axis"]]]]


@PRIMITIVES.gpu("num_programs", does=Does.PLACE, doc="a Mosaic GPU pallas_call's grid size along an axis")
def _num_programs(it: GpuInterpreter, eqn: Any, invals: list) -> list:
    names = it.launch.program_ids
    if names is None:
        raise it.fail("`pl.num_programs` in a Mosaic GPU kernel, which names its grid axes",
                      "use the grid's sizes (lax.axis_size(grid_name))", eqn)
    return [it.launch.grid[names[eqn.params["axis"]]]]


# -- TMA: SMEM -> GMEM copies and their bulk groups -------------------------------------------
def _wait_groups(it: GpuInterpreter, keep: int, read_only: bool, why: str, line: Loc | None = None) -> None:
    """Wait until at most `keep` of this process's most recent bulk groups are pending
    (`cp.async.bulk.wait_group[.read] keep`): every older group's read side (`read_only`), or
    both sides. Each group has semaphores of its own, so a wait names exactly its copies."""
    older = it.groups[:max(0, len(it.groups) - keep)]
    at = line if line is not None else it.where()
    for g in older:
        if not g.read_waited:
            for a in g.starts:
                it.sink.emit(it.device, it.point, at, SemWait(a.send_sem, a.nbytes, f"{why} (read)", a.copy), None, it.loops)
            g.read_waited = True
        if not read_only and not g.write_waited:
            for a in g.starts:
                it.sink.emit(it.device, it.point, at, SemWait(a.recv_sem, a.nbytes, why, a.copy), None, it.loops)
            g.write_waited = True
    it.groups = [g for g in it.groups if not (g.read_waited and g.write_waited)]


@PRIMITIVES.gpu("copy_smem_to_gmem", does=Does.MEMORY | Does.SEMAPHORE,
                doc="`plgpu.copy_smem_to_gmem(src, dst)`: a TMA store (`cp.async.bulk`), to a peer's GMEM "
                    "through `remote_ref`; its own bulk group (`commit_group=True`)")
def _copy_smem_to_gmem(it: GpuInterpreter, eqn: Any, invals: list) -> list:
    p = eqn.params
    src, dst = invals[0], invals[1]
    n_src, n_dst = p["src_transforms_treedef"].num_leaves, p["dst_transforms_treedef"].num_leaves
    rest = invals[2:]
    src = gpu_ref(it, src, unflatten(it, eqn, rest[:n_src], "src_transforms_treedef"))
    dst = gpu_ref(it, dst, unflatten(it, eqn, rest[n_src:n_src + n_dst], "dst_transforms_treedef"))
    if p.get("has_user_predicate"):
        if not it.truth(rest[n_src + n_dst], eqn):
            return []
    if p.get("reduction_op") is not None:
        raise it.fail(f"a TMA store with reduction `{p['reduction_op']}`", "ringc models plain TMA stores")
    if not p.get("commit_group", True):
        raise it.fail("copy_smem_to_gmem(commit_group=False)", "ringc models one bulk group per copy "
                      "(the default commit_group=True)")
    copy = f"tma@{int(it.where())}"
    it.fenced(it.region(src), "the TMA store (copy_smem_to_gmem)")
    # a multicast store is one copy to every GPU of the axes, in one bulk group
    dsts = [Ref(dst.buffer, g, dst.box, dst.kept) for g in dst.peers] if isinstance(dst, MulticastTarget) else [dst]
    starts = []
    for k, d in enumerate(dsts):
        read, write = it.private_sem("tma-read", "dma"), it.private_sem("tma-write", "dma", new=False)
        starts.append(DmaStart(copy, it.region(src), it.region(d), read, write))
        it.emit(starts[-1])
    it.groups.append(_Group(tuple(starts)))
    return []


@PRIMITIVES.gpu("wait_smem_to_gmem", does=Does.MEMORY | Does.SEMAPHORE,
                doc="`plgpu.wait_smem_to_gmem(n, wait_read_only)`: waits for every bulk group but the newest "
                    "n: their SMEM reads (`wait_read_only=True`) or their GMEM writes as well")
def _wait_smem_to_gmem(it: GpuInterpreter, eqn: Any, invals: list) -> list:
    keep = it.scalar(invals[0], "the number of bulk groups left in flight")
    _wait_groups(it, keep, bool(eqn.params.get("wait_read_only")), "wait_smem_to_gmem")
    return []


@PRIMITIVES.gpu("commit_group", does=Does.MEMORY,
                doc="`plgpu.commit_group`: every copy is its own group already (commit_group=True)")
def _commit_group(it: GpuInterpreter, eqn: Any, invals: list) -> list:
    return []


@PRIMITIVES.gpu("commit_smem", does=Does.MEMORY,
                doc="`plgpu.commit_smem()`: the fence between the warpgroup's SMEM stores and TMA or wgmma "
                    "reads of them (`fence.proxy.async.shared::cta`); a read without it is a finding")
def _commit_smem(it: GpuInterpreter, eqn: Any, invals: list) -> list:
    it.unfenced.clear()
    return []



# -- SMEM barriers, TMA loads, wgmma ------------------------------------------------------------
def _barrier_sem(it: GpuInterpreter, ref: Any, flat: list, key: str, eqn: Any) -> tuple:
    bar = apply_transforms(it, ref, unflatten(it, eqn, flat, key))
    if isinstance(bar, SemRef) and bar.rest == (1,):  # `plgpu.Barrier()`: one barrier, used without an index
        bar = SemRef(bar.name, bar.kind, bar.shape, (*bar.index, 0))
    return _sem(it, bar, it.gpu, "the barrier")


@PRIMITIVES.gpu("barrier_arrive", does=Does.SEMAPHORE,
                doc="`plgpu.barrier_arrive(bar)`: one arrival of the warpgroup (`mbarrier.arrive`)")
def _barrier_arrive(it: GpuInterpreter, eqn: Any, invals: list) -> list:
    sem = _barrier_sem(it, invals[0], invals[1:], "transforms_treedef", eqn)
    it.emit(Signal(sem, 1, "barrier_arrive"))
    return []


@PRIMITIVES.gpu("barrier_wait", does=Does.SEMAPHORE,
                doc="`plgpu.barrier_wait(bar)`: the warpgroup's k-th wait on it waits for phase k: (k + 1) x "
                    "num_arrivals arrivals (a TMA load arrives when its bytes have landed)")
def _barrier_wait(it: GpuInterpreter, eqn: Any, invals: list) -> list:
    sem = _barrier_sem(it, invals[0], invals[1:], "transforms_treedef", eqn)
    k = it.waited.get(sem, 0)
    it.waited[sem] = k + 1
    arrivals = it.launch.arrivals.get(sem[1], 1)
    it.emit(SemWait(sem, (k + 1) * arrivals, "barrier_wait", decrement=False))
    return []


@PRIMITIVES.gpu("copy_gmem_to_smem", does=Does.MEMORY | Does.SEMAPHORE,
                doc="`plgpu.copy_gmem_to_smem(src, dst, barrier)`: a TMA load, handed to the block's copy engine, "
                    "which arrives on the barrier when its bytes have landed")
def _copy_gmem_to_smem(it: GpuInterpreter, eqn: Any, invals: list) -> list:
    p = eqn.params
    if p.get("collective_axes"):
        raise it.fail("a TMA load multicast over a cluster (collective_axes)", "ringc models clusters of one block")
    src, dst, bar = invals[0], invals[1], invals[2]
    n_src, n_dst = p["src_transforms_treedef"].num_leaves, p["dst_transforms_treedef"].num_leaves
    rest = invals[3:]
    src = gpu_ref(it, src, unflatten(it, eqn, rest[:n_src], "src_transforms_treedef"))
    dst = gpu_ref(it, dst, unflatten(it, eqn, rest[n_src:n_src + n_dst], "dst_transforms_treedef"))
    sem = _barrier_sem(it, bar, rest[n_src + n_dst:], "barrier_transforms_treedef", eqn)
    _tma_engine(it, f"tma_load@{int(it.where())}", it.region(src), it.region(dst), (Signal(sem, 1, "TMA load landed"),))
    return []


def _tma_engine(it: GpuInterpreter, name: str, src: Any, dst: Any, then: tuple) -> None:
    """Hand a copy to the warpgroup's copy engine (a process of its own): the issuing warpgroup
    adds one to the engine's queue count; the engine, in issue order, takes it, starts the
    copy, waits until its bytes have landed, and then does `then` (a TMA load's arrival on its
    barrier). A barrier's waiters are then ordered after the copy by the arrival alone."""
    b, launch = it.sink, it.launch
    # One engine per warpgroup: copies complete in the order one warpgroup issues them, and
    # nothing orders one warpgroup's copies after another's.
    engine = b.process(it.gpu, it.block, launch.threads + it.wg, launch.threads, engine=True)
    queue = (it.gpu, launch.sem_name(ENGINE), (it.block, it.wg))
    b.sem_kinds[queue[1]] = "gpu"
    b.block_sems.add(queue[1])
    landed = it.private_sem("tma-landed", "dma")
    copy = DmaStart(name, src, dst, None, landed)
    it.emit(Signal(queue, 1, "TMA issue"))
    line = it.where()
    for action in (SemWait(queue, 1, "TMA queue"), copy, SemWait(landed, copy.nbytes, "TMA landed", copy.copy),
                   *then):
        b.emit(engine, it.point, line, action, None)


@PRIMITIVES.gpu("wgmma", "wgmma_ref", does=Does.MEMORY,
                doc="`plgpu.wgmma(acc, a, b)`: reads a and b from SMEM until a wgmma_wait covers it; "
                    "acc += a @ b there")
def _wgmma(it: GpuInterpreter, eqn: Any, invals: list) -> list:
    p = eqn.params
    acc, a, b = invals[0], invals[1], invals[2]
    trees = ("acc_transforms_tree", "a_transforms_tree", "b_transforms_tree")
    sizes = [p[t].num_leaves if p.get(t) is not None else 0 for t in trees]
    rest, parts = invals[3:], []
    for t, n in zip(trees, sizes):
        parts.append(unflatten(it, eqn, rest[:n], t) if p.get(t) is not None else ())
        rest = rest[n:]
    acc = apply_transforms(it, acc, parts[0])
    a, b = gpu_ref(it, a, parts[1]), gpu_ref(it, b, parts[2])
    it.copies += 1
    reads = []
    for name, ref in (("a", a), ("b", b)):
        src = it.region(ref)
        it.fenced(src, "wgmma")
        reg = it.register((id(eqn), name), tuple(hi - lo for lo, hi in src.box), ref.buffer.dtype)
        done = it.private_sem(f"wgmma-{name}", "dma", new=False)
        start = DmaStart(f"wgmma@{int(it.where())}", src, Region(reg.buffer.name, it.device, src.box, src.kept,
                                                               src.itemsize), None, done)
        it.emit(start)
        reads.append(start)
    it.mma.append((reads[0], reads[1], acc, a, b))
    return []


def _wait_mma(it: GpuInterpreter, keep: int) -> None:
    older, it.mma = it.mma[:max(0, len(it.mma) - keep)], it.mma[max(0, len(it.mma) - keep):]
    for ra, rb, acc, a, b in older:
        for r in (ra, rb):
            it.emit(SemWait(r.recv_sem, r.nbytes, "wgmma_wait", r.copy))
        it.emit(Compute("opaque", it.region(acc), fn=(f"wgmma at line {int(it.where())} (acc += a @ b through "
                                                        "tiled SMEM: not followed)",)))


@PRIMITIVES.gpu("wgmma_wait", does=Does.MEMORY,
                doc="`plgpu.wgmma_wait(n)`: every wgmma but the newest n has read its operands and updated acc")
def _wgmma_wait(it: GpuInterpreter, eqn: Any, invals: list) -> list:
    _wait_mma(it, it.scalar(invals[0], "the number of wgmmas left in flight"))
    return []


@PRIMITIVES.gpu("wgmma_accumulator_deref_p", does=Does.MEMORY,
                doc="`acc_ref[...]`: waits for the wgmmas (wait_n) and reads the accumulator")
def _wgmma_deref(it: GpuInterpreter, eqn: Any, invals: list) -> list:
    from .interpret import read_ref
    _wait_mma(it, int(eqn.params.get("wait_n", 0)))
    return [read_ref(it, invals[0])]


def rule_table_markdown() -> str:
    """The primitives a Mosaic GPU kernel may run, as a markdown table (docs/pallas-import.md,
    "Mosaic GPU kernels", embeds it; tests/test_mgpu.py checks the doc matches)."""
    groups: dict[str, list[str]] = {}
    for name in sorted(PRIMITIVES):
        p = PRIMITIVES[name]
        if p.gpu is not None:
            groups.setdefault(p.gpu_doc, []).append(f"`{name}`")
    lines = ["| primitive | what ringc does with it in a Mosaic GPU kernel |", "|---|---|"]
    for doc, names in sorted(groups.items(), key=lambda kv: kv[1][0]):
        lines.append(f"| {', '.join(names)} | {doc} |")
    lines.append("| any other pure primitive | as in a Pallas TPU kernel (the table above) |")
    lines.append("| any other primitive | an error naming it and the line |")
    return "\n".join(lines)
