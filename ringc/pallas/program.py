"""From a traced JAX program to the verifier's `Program`: every pallas_call, every device.

The outer program (`jit` / `shard_map` around the kernels) is walked once; each array it
passes around is a `Handle`. An array a kernel receives is the buffer the kernel reads; an
output is a new buffer, or the input's under `input_output_aliases`; arrays passed
unchanged (or reshaped) from one pallas_call to the next are the same buffer, so data and
semaphores flow between calls. Each pallas_call is then evaluated for every device and
every grid point (`interpret.py`), in grid order, as one *call*: the verifier's
invocation index counts calls (and `--invocations` repeats the whole sequence).

Around each call, as in the YAML model (`ringc/verify/unroll.py`):
- a kernel with `collective_id` owns its synchronisation: on entry every buffer it writes
  changes hands (an `enter` write); on a repeated call, another kernel with the same
  barrier semaphore may run in between (one barrier round with the same neighbours);
- a kernel without one gets Mosaic's device barrier at entry when another call came
  before it (the first call's entry barrier orders nothing the model sees);
- on exit every buffer goes back to the caller (an `exit` write): a DMA still in flight
  then races with whatever runs next.
Blocked `BlockSpec`s are Pallas' automatic pipeline: the block is copied into a VMEM
window before the first grid point that uses it and back out after the last (as Compute
copies: the pipeline waits for its own DMAs around the body).
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import re
import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import limits
from ..verify.rotation import Torus
from ..verify.events import BARRIER, DEVICE_BARRIER, Compute, Event, Program, SemWait, Signal
from ..verify.symmetric.program import SymmetricProgram
from ..verify.calls import Handover, entry_sync
from .corun import CoRun
from .jaxprs import kernel_jaxpr, kernel_name
from .interpret import Diverge, FromMemory, Interpreter, KernelError, Lanes, Sink, internal_frame, user_location
from .values import Buffer, Data, Loc, Ref, SemRef, Shadow, is_concrete


@dataclass(frozen=True)
class VmemUse:
    """What one pallas_call keeps in VMEM, at least: each block window, twice where its block
    moves with the grid (the pipeline fetches the next block while the kernel works on this
    one; a block whose index stays put is fetched once, into one buffer), each operand it
    takes whole in VMEM, each VMEM scratch (`run_scoped` allocations come on top: not
    counted, so a kernel this says is over its limit is over it; libtpu's compiler on CPU
    agrees at the bounds, `importer.vmem_findings`). `limit`: its `vmem_limit_bytes`, if any."""
    call: str
    line: Any
    nbytes: int
    parts: tuple[tuple[str, int], ...]
    limit: int | None
    doubled: frozenset[str] = frozenset()

    @staticmethod
    def of(call: str, line: Any, refs: list, windows: list, scratch: list, limit: Any) -> "VmemUse":
        moved = {id(target) for target, _, _, _ in windows}
        held = _unique([b for b in refs if isinstance(b, Buffer) and b.space == "vmem" and id(b) not in moved
                        and b.kind != "prefetch"] + [w for _, w, _, _ in windows]
                       + [b for b in scratch if isinstance(b, Buffer) and b.space == "vmem"])
        parts = tuple((b.name, math.prod(b.shape) * b.itemsize) for b in held)
        return VmemUse(call, line, sum(k for _, k in parts), parts, int(limit) if limit else None)

    def moving(self, names: set[str]) -> "VmemUse":
        """With the windows `names` double buffered (their blocks move with the grid)."""
        doubled = self.doubled | frozenset(names)
        parts = tuple((n, k * 2 if n in doubled and n not in self.doubled else k) for n, k in self.parts)
        return dataclasses.replace(self, parts=parts, nbytes=sum(k for _, k in parts), doubled=doubled)


@dataclass
class Handle:
    """An array of the outer program: the buffer it is (once a kernel binds it), or a
    semaphore array; concrete per-device values when known (scalar-prefetch operands)."""
    aval: Any
    buffer: Buffer | None = None
    sem: SemRef | None = None
    values: list | None = None          # per device, when concrete
    origin: str = "computed"            # input | kernel | computed
    role: int | None = None             # index among the shard_map's inputs
    link: "Handle | None" = None        # the same array under another name (shard_map, reshape)
    gathered: "Handle | None" = None    # it is `lax.all_gather(h, tiled=True)` of this kernel output h
    name: str | None = None             # a ref the program made: the name the code assigns it (`y_ref = ...`)
    # a ref the program reads or writes itself between kernel calls: the number of calls
    # recorded before each such access (`Builder.taken_later`)
    outer_reads: set[int] = field(default_factory=set)

    def root(self) -> "Handle":
        h = self
        while h.link is not None:
            h = h.link
        return h


def where(line: Any, file: str) -> str:
    """`line 746` in the checked `file`, `_pallas_impl_fwd.py:746` in another one."""
    at = getattr(line, "file", None)
    if not at or os.path.abspath(at) == os.path.abspath(file):
        return f"line {int(line)}"
    return f"{os.path.basename(at)}:{int(line)}"


def literal_values(values: list) -> bool:
    """Handle values of a jaxpr literal: ("literal", value), not one per device."""
    return isinstance(values[0], str) and values[0] == "literal"


@dataclass
class Call:
    """One pallas_call as the outer program makes it."""
    eqn: Any
    operands: list[Handle]
    outputs: list[Handle]
    name: str
    # Outputs the program never reads (a DropVar, or a result no later equation or return uses):
    # the kernel's scratch in all but name (a flash kernel's `m_scratch` output), noted in the verdict.
    dropped: frozenset[int] = frozenset()
    gpu: bool = False  # a Mosaic GPU kernel (`mpmd_map`): its blocks run as processes (`mgpu.run_launch`)
    cores: bool = False  # a kernel over the TensorCore mesh (`mpmd_map`): a process per core (`cores.run_cores`)
    # Output j is operand i's buffer, written in place ({i: j}): `input_output_aliases`, or a
    # `core_map`'s run_state refs (every one); None: the call's own params say.
    aliases: dict[int, int] | None = None


def _space(aval: Any) -> str:
    ms = str(getattr(aval, "memory_space", "any")).lower()
    if "sem" in ms or "sem" in str(getattr(aval, "dtype", "")):
        return "semaphore"
    for s in ("vmem", "smem", "hbm"):
        if s in ms:
            return s
    if "default" in ms:  # a BlockSpec without a memory space: on a TPU its blocks go to VMEM
        return "vmem"
    return "hbm"  # ANY: left where the caller has it (HBM)


def _sem_kind(aval: Any) -> str:
    d = str(getattr(aval, "dtype", ""))
    if "barrier" in d:
        return "barrier"
    return "dma" if "dma" in d else "regular"


def _is_sem(aval: Any) -> bool:
    return "sem" in str(getattr(aval, "dtype", "")) or _space(aval) == "semaphore"


class Builder(Sink):
    """Collects events, buffers and semaphores of a whole traced program."""

    def __init__(self, file: str, mesh_axes: dict[str, int]):
        self.file = file
        self.axis_sizes = dict(mesh_axes)
        self.n = math.prod(mesh_axes.values())
        self.torus = Torus(mesh_axes.values())
        self.devices: list[list[Event]] = [[] for _ in range(self.n)]
        self.events, self.most_events = 0, limits.value("events")   # (`emit`: the limit `events`)
        self.targets: list[tuple[Event, int]] = []
        self.buffers: dict[str, Buffer] = {}
        self.sem_kinds: dict[str, str] = {BARRIER: "barrier"}
        self.registers: dict[tuple, Buffer] = {}
        self.scoped_allocs: dict[tuple, Any] = {}
        self.invocation = 0
        self.call_names: list[str] = []
        self.first_barrier_round: dict[int, dict[int, list[tuple[int, Loc]]]] = {}
        self.aliases_used: list[str] = []
        self.notes: list[str] = []
        # Accesses out of their ref's range (`interpret.out_of_range`): (device, grid point, line, message).
        self.faults: list[tuple[int, tuple, Any, str]] = []
        # What each pallas_call keeps in VMEM at least (`VmemUse`), for `importer.vmem_findings`.
        self.vmem: list[VmemUse] = []
        self._current_call: int | None = None
        # Megacore (TPU v4, v5p): a `parallel` grid dim is split over the chip's two
        # TensorCores; core 1's events go here (as in the YAML model's `megacore: true`).
        self.second_core: list[list[Event]] = [[] for _ in range(self.n)]
        self.calls: list[Call] = []         # the program's pallas_calls, in order (one repeat)
        self.handover = Handover()          # buffers a previous call handed on to a later one
        self.core = 0
        self.megacore = False
        # Set to evaluate every device at once, as device 0 (`interpret.Lanes`): only device
        # 0's events are recorded, proved to be every device's translated.
        self.lanes: Lanes | None = None
        self.parallel: tuple[int, ...] = ()
        # Set to evaluate each call's devices together (`corun.CoRun`), so that values a device
        # sends another (counts all-reduced by remote copies) reach it; `cross_values` is set
        # when a remote copy carried values ringc knows while the devices ran one by one.
        self.cosim = False
        self.cross_values = False
        self.corun: CoRun | None = None
        # Mosaic GPU: the devices are GPUs, each block's warpgroup a process of its own after
        # the GPUs' launch processes 0..n-1 (`mgpu.py`): (gpu, block, warpgroup) -> process.
        self.n_gpus = self.n
        self.processes: dict[tuple[int, int, int], int] = {}
        self.labels: list[str] = [str(d) for d in range(self.n)]
        self.block_sems: set[str] = set()  # semaphores whose first index is a block (`Program.block_sems`)
        # TPU kernels over the TensorCore mesh (`cores.run_cores`): chip d's core c is process
        # c * n + d, its scratch and semaphores its own (`Program.cores`).
        self.core_count = 1
        # Mosaic GPU: SMEM read by the TMA or wgmma without a commit_smem after the stores
        # (`mgpu.GpuInterpreter.fenced`): (process, point, line, finding)
        self.unfenced: list[tuple] = []

    # -- naming --------------------------------------------------------------------
    def where(self, line: Any) -> str:
        return where(line, self.file)

    def unique(self, name: str) -> str:
        base, k = name, 2
        while name in self.buffers or name in self.sem_kinds:
            name = f"{base}#{k}"
            k += 1
        return name

    def new_buffer(self, name: str, aval: Any, kind: str, line: int = 0, shape: tuple | None = None) -> Buffer:
        buf = Buffer(self.unique(name), tuple(shape if shape is not None else aval.shape), aval.dtype,
                     _space(aval), kind, line)
        self.buffers[buf.name] = buf
        return buf

    def new_sem(self, name: str, aval: Any) -> SemRef:
        s = SemRef(self.unique(name), _sem_kind(aval), tuple(aval.shape))
        self.sem_kinds[s.name] = s.kind
        return s

    # -- Sink ----------------------------------------------------------------------
    def emit(self, device: int, point: tuple, line: Loc, action: Any, target: int | None,
             loops: tuple = ()) -> None:
        out = self.second_core[device] if self.core else self.devices[device]
        ev = Event(device, len(out), point, line, action, self.invocation, loops=loops)
        out.append(ev)
        self.events += 1
        if self.events > self.most_events:   # counted as they come: a kernel's are known only by running it
            limits.check("events", self.events, "the events of this check so far", file=self.file,
                         line=int(line) or None, fix="check it at a smaller size (fewer devices, a smaller grid, "
                                                     "smaller arrays)")
        if self.corun is not None:
            self.corun.on_event(device, action)  # a wait may hand the turn to another device
        if self.core:
            return  # core 1 may only compute on its own VMEM: `core.megacore_findings`
        if target is not None:
            self.targets.append((ev, target))
        if self._current_call is not None and isinstance(action, (Signal, SemWait)) and action.why == "barrier":
            rounds = self.first_barrier_round.setdefault(self._current_call, {})
            mine = rounds.setdefault(device, [])
            if isinstance(action, Signal) and not any(isinstance(m, str) for m in mine):
                mine.append((action.sem[0], line))
            elif isinstance(action, SemWait) and not any(isinstance(m, str) for m in mine):
                mine.append("closed")

    def discard_load(self, device: int, register: str) -> None:
        """The last load into `register` on `device`, whose value the kernel throws away (a
        `jnp.where(j != 0, acc_ref[...], 0)` whose condition is known to take the other
        case): it reads nothing that matters, so it is the register's fresh garbage
        (`allocate`): no read, so no race and no dependency on what was there."""
        out = self.second_core[device] if self.core else self.devices[device]
        for k in range(len(out) - 1, -1, -1):
            a = out[k].action
            if isinstance(a, Compute) and a.kind == "load" and a.dst.buffer == register:
                out[k] = dataclasses.replace(out[k], action=Compute("allocate", a.dst))
                return

    def register(self, eqn: Any, line: Loc, shape: tuple[int, ...], dtype: Any) -> Buffer:
        """The value register of one load site (one equation): private to the device."""
        key = (id(eqn), shape, str(dtype))
        buf = self.registers.get(key)
        if buf is None:
            name = self.unique(f"value@{int(line)}")
            buf = Buffer(name, tuple(shape), dtype, "vmem", "value", int(line))
            self.registers[key] = buf
            self.buffers[name] = buf
        return buf

    def bind_mesh_call(self, call: Call, call_index: int, kernel: Any, line: Any,
                       space: str) -> tuple[list[Buffer | SemRef], list[str], list[str]]:
        """The buffers a kernel call over a mesh (`mpmd_map`: Mosaic GPU's blocks, the TPU's
        TensorCores) binds, its operands then its results (`input_output_aliases` kept), made
        in memory `space` where the program has none yet; and the names it enters and exits
        (`calls.Handover`: the caller's operands are never entered, and arrays a later call
        takes unchanged stay with the kernels, as for a pallas_call)."""
        names = arg_names(kernel)
        refs = kernel.constvars if call.eqn.primitive.name == "core_map" else kernel.invars  # it closes over its refs
        bufs: list[Any] = []
        for k, h in enumerate(call.operands):
            h = h.root()
            aval = refs[k].aval
            name = _arg_name(names, k, h)
            if space == "hbm" and _is_sem(aval):
                # a semaphore the program allocated (`pl.empty_ref_like(SemaphoreType.DMA(()))`)
                # and hands to several kernels: one semaphore for them all (a copy started in
                # one kernel and waited in the next), each core's its own, as a scratch one
                if h.sem is None:
                    h.sem = self.new_sem(name, aval)
                bufs.append(h.sem)
                continue
            if h.buffer is None:
                h.buffer = self.new_buffer(name, aval,
                                           "input" if h.origin == "input" else "computed", int(line),
                                           shape=tuple(aval.shape))
                # a TPU ref the program allocated in SMEM or VMEM (`pl.empty_ref_like(pltpu.SMEM(...))`)
                # stays there, each core's its own (`cores._operand`); the rest is in HBM
                h.buffer.space = _space(aval) if space == "hbm" and _space(aval) in ("smem", "vmem") else space
            if space == "hbm":  # (a TPU kernel's; Mosaic GPU kernels follow no values)
                self.known_input(h.buffer, call.operands[k].values)
            bufs.append(h.buffer)
        aliases = call.aliases if call.aliases is not None else dict(call.eqn.params.get("input_output_aliases") or ())
        for j, h in enumerate(call.outputs):
            h = h.root()
            k = len(call.operands) + j
            src = next((i for i, o in aliases.items() if o == j), None)
            if src is not None and isinstance(bufs[src], SemRef):
                h.sem = bufs[src]
                bufs.append(h.sem)
                continue
            if src is not None:
                h.buffer = call.operands[src].root().buffer
            else:
                aval = refs[k].aval
                h.buffer = self.new_buffer(names[k] if k < len(names) else f"out{j}", aval, "output", int(line),
                                           shape=tuple(aval.shape))
                h.buffer.space = space
            h.origin = "kernel"
            bufs.append(h.buffer)
        arrays = [buf for buf in bufs if isinstance(buf, Buffer)]
        touched = list({buf.name: buf for buf in arrays}.values())
        later = self.taken_later(call_index)
        inputs = [buf.name for buf in bufs[:len(call.operands)] if isinstance(buf, Buffer)]
        outputs = [buf.name for buf in bufs[len(call.operands):] if isinstance(buf, Buffer)]
        enter, exit_ = self.handover.call([buf.name for buf in touched], outputs, inputs, later)
        return bufs, enter, exit_

    def taken_later(self, call_index: int) -> set[str]:
        """The arrays a later kernel call takes unchanged, which stay with the kernels after
        call `call_index` (no exit, no entry in the later call: a DMA may be in flight
        across the boundary), unless the program reads the ref in between (`y = y_ref[...]`
        between two core_maps: then the array exits here, and a copy still writing it races)."""
        taken: set[str] = set()
        for j, c in enumerate(self.calls[call_index + 1:], call_index + 1):
            for h in c.operands:
                h = h.root()
                if h.buffer is not None and not any(call_index < r <= j for r in h.outer_reads):
                    taken.add(h.buffer.name)
        return taken

    def known_input(self, buf: Buffer, local: list | None) -> None:
        """A kernel input whose values the caller passed and ringc knows (`local`, one per device):
        in SMEM the kernel reads them (a routing table); integers in vector memory or HBM are
        followed, so a DMA into SMEM carries them (expert ids, an offset: `interpret._dma_values`)."""
        if local is None or len(local) != self.n:
            return
        if buf.space == "smem" and not buf.store:
            for d in range(self.n):
                buf.store[d] = np.asarray(local[d]).reshape(buf.shape)
                buf.unset.pop(d, None)
        elif buf.follows_values and not buf.shadow:
            for d in range(self.n):
                vals = np.asarray(local[d])
                if vals.size == math.prod(buf.shape):
                    buf.shadow[d] = Shadow(vals.reshape(buf.shape).astype(buf.dtype), np.ones(buf.shape, bool))

    def scratch(self, key: tuple, name: str, aval: Any, line: int) -> "Buffer | SemRef":
        """A kernel's scratch argument (`scratch_shapes`, `scratch_types`): a semaphore or a
        buffer, one per call site and position (`key`), the same on every device and call."""
        got = self.scoped_allocs.get(key)
        if got is None:
            got = self.new_sem(name, aval) if _is_sem(aval) else self.new_buffer(name, aval, "scratch", line)
            self.scoped_allocs[key] = got
        return got

    def scoped(self, it: Interpreter, eqn: Any, k: int, aval: Any) -> Any:
        key = (id(eqn), k)
        got = self.scoped_allocs.get(key)
        line = user_location(eqn)
        if got is None:
            if _is_sem(aval):
                got = self.new_sem(f"scoped_sem@{int(line)}", aval)
            else:
                got = self.new_buffer(f"scoped@{int(line)}", aval, "scratch", int(line))
            self.scoped_allocs[key] = got
        if isinstance(got, SemRef):
            return got
        if got.space == "smem":
            for d in (range(self.n) if self.lanes is not None else (it.device,)):
                if d not in got.store:
                    try:
                        got.store[d] = np.zeros(got.shape, got.dtype)
                        got.unset.pop(d, None)
                        got.unknown.pop(d, None)
                    except TypeError:   # an extended dtype (a PRNG key, `key<pl>`): no integers in it
                        got.unknown[d] = f"holds {got.dtype} values, which ringc does not follow"
        return Ref.whole(got, it.device)

    def process(self, gpu: int, block: int, wg: int, threads: int, engine: bool = False) -> int:
        """The process of warpgroup `wg` of `block` on `gpu` (created on first use); `engine`: the
        copy engine of warpgroup `wg - threads` (`mgpu._tma_engine`), numbered after them."""
        key = (gpu, block, wg)
        p = self.processes.get(key)
        if p is None:
            p = self.processes[key] = len(self.devices)
            self.devices.append([])
            self.second_core.append([])
            tma = " TMA" + (f" of wg {wg - threads}" if threads > 1 else "")
            self.labels.append(f"{self.labels[gpu]} block {block}"
                               + (tma if engine else f" wg {wg}" if threads > 1 else ""))
        return p

    def use_cores(self, cores: int) -> None:
        """A process for every TensorCore of every device, chip d's core c at c * n + d (core 0
        is the device's own process), for a kernel over the TensorCore mesh."""
        if self.core_count == cores:
            return
        if self.core_count > 1 or self.processes:
            raise KernelError(f"kernels over {self.core_count} and {cores} TensorCores in one program", file=self.file,
                              fix="check one kind of kernel call at a time")
        self.core_count = cores
        for _ in range(self.n * (cores - 1)):
            self.devices.append([])
            self.second_core.append([])

    def block_process(self, gpu: int, block: int) -> int:
        """The process whose index names a block's shared memory (SMEM): its first warpgroup's."""
        return self.processes[(gpu, block, 0)]

    # -- calls ---------------------------------------------------------------------
    def run_call(self, call: Call, call_index: int) -> None:
        """Evaluate one pallas_call on every device."""
        eqn = call.eqn
        p = eqn.params
        gm = p["grid_mapping"]
        kernel = p["jaxpr"]
        names = arg_names(kernel)
        cp = tpu_params(eqn)
        collective_id = getattr(cp, "collective_id", None)
        skip_barrier = bool(getattr(cp, "skip_device_barrier", False))
        semantics = tuple(getattr(cp, "dimension_semantics", None) or ())
        grid, grids, operands = self._grid(call, gm, kernel, eqn)
        where = kernel_location(eqn)   # each grid point runs the kernel's body: bounded before it runs
        limits.check("grid_points", max(math.prod(g) for g in grids), f"the grid points per device of pallas_call "
                     f"`{call.name}` (grid {grid})", file=where.file, line=int(where) or None,
                     fix="check it at a smaller size (the shapes or values its grid comes from)")
        if all(0 in g for g in grids):
            if any(not isinstance(g, int) for g in gm.grid):
                # sized at run time and empty for the values given (megablox's gmm on a shard whose
                # groups have no rows): correct code that runs nothing for them, said so
                note = (f"pallas_call `{call.name}` has a grid sized at run time that is empty for the values it "
                        f"was given, {grid}: its kernel's body never runs for them, so nothing of it is checked "
                        "(other values give other grids)")
                if note not in self.notes:
                    self.notes.append(note)
                return
            # static shapes that give no grid point: an `ok` would say nothing (the body never runs)
            raise KernelError(f"pallas_call `{call.name}` has an empty grid {grid}: its kernel never runs, so there is "
                              "nothing to check", file=where.file, line=int(where) or None,
                              fix="where ringc made the arrays (--entry), give those the kernel is sized for "
                                  "(--arg, --mesh, --devices): its grid comes from their shapes; where the file's own "
                                  "code sized them (a test's block larger than its array: 512 // 8192 is 0 steps), "
                                  "the kernel never runs and never writes its outputs there: fix the sizes in the code")
        n_pref, n_in, n_out = gm.num_index_operands, gm.num_inputs, gm.num_outputs
        split = next((k for k, sem in enumerate(semantics) if "parallel" in str(sem).lower()
                      and "core" not in str(sem).lower() and k < len(grid) and grid[k] >= 2), None)
        if split is not None:
            self.megacore = True
            if self.lanes is not None:
                raise Diverge("megacore: a core's events are not every device's")
        # The parallel grid dims of the program (`check.parallel_findings`): one call's, or none
        # when the calls declare different ones (their points are not comparable).
        parallel = tuple(k for k, sem in enumerate(semantics) if "parallel" in str(sem).lower() and k < len(grid))
        self.parallel = parallel if not self.call_names or self.parallel == parallel else ()
        line = kernel_location(eqn)
        # Bind operands and outputs to buffers.
        aliases = dict(p.get("input_output_aliases") or ())
        in_handles = operands
        kernel_vars = kernel.invars
        refs_of: list[Any] = []  # per kernel invar: Buffer | SemRef (whole), in order
        written: list[Buffer] = []
        read_only: list[Buffer] = []
        windows: list[tuple[Buffer, Buffer, Any, bool]] = []  # (array buffer, window, block mapping, is_output)
        for k, h in enumerate(in_handles):
            h = h.root()
            v = kernel_vars[k]
            name = _arg_name(names, k, h)
            if _is_sem(v.aval):
                if h.sem is None:
                    h.sem = self.new_sem(name, v.aval)
                refs_of.append(h.sem)
                continue
            if k < n_pref:
                buf = self.new_buffer(name, v.aval, "prefetch", int(line))
                buf.space = "smem"
                # The values the kernel sees: the local (per-device) handle's, not its root's
                # (an input passed through shard_map links to the global array).
                values = in_handles[k].values if in_handles[k].values is not None else h.values
                if values is None:  # computed at run time from tensor data: runtime data in the kernel
                    for d in range(self.n):
                        buf.unknown[d] = (f"holds the scalar-prefetch operand `{name}`, computed before the kernel "
                                          "from values ringc does not know (tensor data)")
                    refs_of.append(buf)
                    continue
                if len(values) != self.n or literal_values(values):
                    raise KernelError(
                        f"scalar-prefetch operand `{name}` of pallas_call `{call.name}` is not known before the run",
                        file=line.file, line=int(line),
                        fix="compute it from make_inputs' values (ringc runs make_inputs on CPU devices) or from "
                            "constants")
                for d in range(self.n):
                    buf.store[d] = np.asarray(values[d]).reshape(buf.shape)
                    buf.unset.pop(d, None)
                refs_of.append(buf)
                continue
            buf = self.bind(h, name, v.aval, gm.block_mappings[k - n_pref], int(line))
            self.known_input(buf, in_handles[k].values)  # per device, as the shard_map hands them to the kernel
            refs_of.append(buf)
        dropped: list[str] = []
        for j, h in enumerate(call.outputs):
            h = h.root()
            v = kernel_vars[n_pref + n_in + j]
            name = names[n_pref + n_in + j] if n_pref + n_in + j < len(names) else f"out{j}"
            if _is_sem(v.aval):
                src = next((i for i, o in aliases.items() if o == j), None)
                h.sem = in_handles[src].root().sem if src is not None else self.new_sem(name, v.aval)
                refs_of.append(h.sem)
                continue
            src = next((i for i, o in aliases.items() if o == j), None)
            if src is not None:
                h.buffer = in_handles[src].root().buffer
                h.origin = "kernel"
            else:
                bm = gm.block_mappings[n_in + j]
                h.buffer = self.new_buffer(name, bm.array_aval, "scratch" if j in call.dropped else "output",
                                           line)   # with its file: a finding on the output names it
                if j in call.dropped:
                    dropped.append(name)
                h.buffer.space = _space(bm.transformed_block_aval) if _whole(bm, None) else "hbm"
                h.origin = "kernel"
                # a new SMEM output is fresh memory, as SMEM scratch (`fresh_scratch`): what the
                # kernel stores there is followed, so a later kernel reading it as an index
                # table (an SMEM input) knows its values
                self.fresh_scratch([h.buffer], *range(self.n))
            refs_of.append(h.buffer)
        if dropped:
            self.notes.append(f"the program never reads output{'s' if len(dropped) > 1 else ''} "
                              f"{', '.join(f'`{n}`' for n in dropped)} of the pallas_call at {self.where(line)}: "
                              "checked as the kernel's scratch (what ends there is no result)")
        # Windows (blocked specs) and whole-array refs.
        kernel_refs: list[Any] = []
        for k, (v, target) in enumerate(zip(kernel_vars[:n_pref + n_in + n_out], refs_of)):
            if isinstance(target, SemRef) or k < n_pref:
                kernel_refs.append(target)
                continue
            bm = gm.block_mappings[k - n_pref]
            is_out = k >= n_pref + n_in
            if _whole(bm, target):
                kernel_refs.append(target)
                (written if is_out else read_only).append(target)
            else:
                win = self.new_buffer(f"{target.name}.block", v.aval, "scratch", int(line),
                                      shape=tuple(v.aval.shape))
                win.space = "vmem"
                windows.append((target, win, bm, is_out))
                kernel_refs.append(win)
                written.append(win)
                (written if is_out else read_only).append(target)
        scratch: list[Any] = []
        for k, v in enumerate(kernel_vars[n_pref + n_in + n_out:]):
            name = names[n_pref + n_in + n_out + k] if n_pref + n_in + n_out + k < len(names) else f"scratch{k}"
            got = self.scratch((id(eqn), "scratch", k), name, v.aval, int(line))
            scratch.append(got)
            if isinstance(got, Buffer):
                written.append(got)
        barrier = SemRef(BARRIER if not collective_id else f"{BARRIER}@{collective_id}", "barrier", ())
        self.sem_kinds[barrier.name] = "barrier"
        self.sem_kinds[f"{DEVICE_BARRIER}{self.invocation}"] = "barrier"   # Mosaic's entry barrier (`call_entry`)
        all_bufs = _unique([b for b in refs_of if isinstance(b, Buffer)] + [w for _, w, _, _ in windows] +
                           [s for s in scratch if isinstance(s, Buffer)])
        self.vmem.append(VmemUse.of(kernel_name(eqn, call.name), line, refs_of, windows, scratch,
                                    getattr(cp, "vmem_limit_bytes", None)))
        # Arrays a later pallas_call takes unchanged stay with the kernels: no exit here,
        # and no entry in the later call (a DMA may be in flight across the boundary).
        # (A later call's operand is this call's output or input handle itself, bound by now.)
        later = self.taken_later(call_index)
        inputs = {b.name for b in refs_of[:n_pref + n_in] if isinstance(b, Buffer)}  # aliased outputs included
        enter_names, exit_names = self.handover.call(
            [b.name for b in all_bufs],
            [b.name for b in written if b.kind != "prefetch"] + [s.name for s in scratch if isinstance(s, Buffer)],
            inputs, later)
        enter_bufs = [self.buffers[b] for b in enter_names]
        exit_bufs = [self.buffers[b] for b in exit_names]
        sync = entry_sync(collective_id is not None or skip_barrier, collective_id is not None, self.invocation)
        self._current_call = call_index
        cosim = self.cosim and self.lanes is None and split is None
        if cosim:  # every device's fresh scratch before any device runs (a remote copy may reach it first)
            for d in range(self.n):
                self.fresh_scratch(scratch, d)

        def device(d: int) -> None:
            it = Interpreter(self, d, self.lanes.coords if self.lanes is not None else self._coords(d),
                             self.axis_sizes)
            it.lanes = self.lanes
            it.grid = grid = grids[d]
            it.point = tuple(0 for _ in grid)
            mapped = tuple(getattr(gm, "vmapped_dims", ()) or ())
            it.user_axes = tuple(k for k in range(len(grid)) if k not in mapped)
            it.grid_names = tuple(gm.grid_names or ())
            it.barrier = barrier if collective_id is not None else None
            if sync.enter and sync.interloper:
                self.interloper(d, call_index, barrier, line, it.point)
            self.call_entry(d, it.point, line, sync, enter_bufs)
            if not cosim:
                for e in (range(self.n) if self.lanes is not None else (d,)):
                    self.fresh_scratch(scratch, e)
            args = []
            for r in [*kernel_refs, *scratch]:
                args.append(r if isinstance(r, SemRef) else Ref.whole(r, d))
            points = list(itertools.product(*(range(g) for g in grid)))
            it.eqn = eqn   # (a block index from tensor data is sampled at the pallas_call's line)
            blocks = [[self.block_index(it, bm, pt, args[:n_pref]) for pt in points] for _, _, bm, _ in windows]
            self.vmem[-1] = self.vmem[-1].moving({win.name for (_, win, _, _), idx in zip(windows, blocks)
                                                  if len(set(idx)) > 1})
            # Core 1 of a split grid starts from the call's entry state, not from core 0's: its
            # own SMEM copy of the scalar prefetch (which a kernel may write: paged attention's
            # first-block flag) and its own fresh scratch.
            entry = ({id(r.buffer): (r.buffer, r.buffer.store[d].copy()) for r in args[:n_pref]
                      if isinstance(r, Ref) and d in r.buffer.store} if split is not None else {})
            for i, pt in enumerate(points):
                it.point = pt
                core = int(split is not None and pt[split] >= grid[split] // 2)
                if core and not self.core:
                    for buf, stored in entry.values():
                        buf.store[d] = stored.copy()
                    self.fresh_scratch(scratch, d)
                self.core = core
                # A block is fetched (an output's: a fresh window) where its index changes, and
                # where an index of a parallel axis does: those iterations may run in any order
                # or on the other TensorCore, and the pipeline fetches what the iteration before
                # it on its core did not (a matmul's lhs block `(i, 0)` kept across a parallel
                # `j` is no dependency between the `j`s). Likewise an output block is written
                # back before a parallel index changes, so that two parallel iterations writing
                # one block meet (`core.parallel_findings`).
                moved = i > 0 and any(pt[k] != points[i - 1][k] for k in parallel)
                leaving = i < len(points) - 1 and any(pt[k] != points[i + 1][k] for k in parallel)
                for (arr, win, bm, is_out), idx in zip(windows, blocks):
                    if i == 0 or idx[i] != idx[i - 1] or moved:
                        if is_out:   # a new output block: its VMEM buffer holds what it held last (garbage)
                            self.emit(d, pt, line, Compute("allocate", Ref.whole(win, d).region()), None)
                            continue
                        src = self.block_ref(arr, d, bm, idx[i], pt, line)
                        self.emit(d, pt, line, Compute("assign", Ref.whole(win, d).region(), it.region(src)), None)
                it.run(kernel, [], args)
                for (arr, win, bm, is_out), idx in zip(windows, blocks):
                    if is_out and (i == len(points) - 1 or idx[i + 1] != idx[i] or leaving):
                        dst = self.block_ref(arr, d, bm, idx[i], pt, line)
                        self.emit(d, pt, line, Compute("assign", it.region(dst), Ref.whole(win, d).region()), None)
            self.core = 0
            for b in exit_bufs:
                self.emit(d, it.point, line, Compute("exit", Ref.whole(b, d).region()), None)

        devices = [0] if self.lanes is not None else range(self.n)
        if cosim:
            self.corun = CoRun(self.n)
            try:
                self.corun.run([functools.partial(device, d) for d in devices])
                if self.corun.released:
                    self.notes.append(
                        f"values sent between devices in pallas_call `{call.name}`: evaluated together, the devices "
                        f"stopped where none could go on (a hang); {self.corun.released} wait(s) were let through to "
                        "finish the evaluation, and values after them may not be a run's")
            finally:
                self.corun = None
        else:
            for d in devices:
                device(d)
        self._current_call = None
        self.call_names.append(call.name)

    def _grid(self, call: Call, gm: Any, kernel: Any, eqn: Any) -> tuple[tuple, list[tuple], list[Handle]]:
        """The call's grid, each device's, and its operands without the grid's sizes. A grid
        dimension sized at run time (megablox's gmm: tiles counted from `group_sizes` under
        jit) is a leading operand of the call (after closed-over refs), each device's value
        followed as the program computed it; `grid` has each dynamic dimension's largest
        size (for the megacore split). One not known (tensor data) is refused at the call."""
        grid = tuple(gm.grid)
        dynamic = [k for k, g in enumerate(grid) if not isinstance(g, int)]
        if not dynamic:
            return grid, [grid] * self.n, list(call.operands)
        refs = next((k for k, h in enumerate(call.operands) if not hasattr(h.aval, "inner_aval")), 0)
        sizes = call.operands[refs:refs + len(dynamic)]
        where = kernel_location(eqn)
        shown = tuple(g if isinstance(g, int) else "dynamic" for g in grid)
        grids = [list(grid) for _ in range(self.n)]
        for k, h in zip(dynamic, sizes):
            values = h.values
            if values is None or len(values) != self.n and not literal_values(values):
                raise KernelError(f"pallas_call `{call.name}` has a grid sized at run time {shown}, from values ringc "
                                  "does not know (tensor data)", file=where.file, line=int(where) or None,
                                  fix="give the arrays its size is computed from with their values (--arg "
                                      "NAME=int32[...]@=np.array([...])), or size the grid with a Python int")
            for d in range(self.n):
                v = values[1] if literal_values(values) else values[d]
                grids[d][k] = int(np.asarray(v).reshape(-1)[0])
        if self.lanes is not None and len({tuple(g) for g in grids}) > 1:
            raise Diverge("a grid sized at run time differs between devices")
        note = (f"pallas_call `{call.name}` has a grid sized at run time {shown}: checked with the sizes the program "
                "computes from the values it was given, " + ", ".join(sorted({str(tuple(g)) for g in grids}))
                + " (other values give other grids, not checked)")
        if note not in self.notes:
            self.notes.append(note)
        grid = tuple(max(g[k] for g in grids) if k in dynamic else grid[k] for k in range(len(grid)))
        return grid, [tuple(g) for g in grids], list(call.operands[:refs]) + list(call.operands[refs + len(dynamic):])

    def call_entry(self, d: int, point: tuple, line: Any, sync: Any, enter: list[Buffer]) -> None:
        """A kernel call's entry on device d (`calls.entry_sync`): with a collective_id, the
        arrays it writes entered; without one, from the run's second call on, Mosaic's device
        barrier with every other device, in the order of their offsets from d."""
        if sync.enter:
            for buf in enter:
                self.emit(d, point, line, Compute("enter", Ref.whole(buf, d).region()), None)
        elif sync.device_barrier:
            entry_sem = f"{DEVICE_BARRIER}{self.invocation}"
            self.sem_kinds[entry_sem] = "barrier"
            for k in range(1, self.n):
                t = self.torus.adder(k)[d]
                self.emit(d, point, line, Signal((t, entry_sem, ()), 1, "Pallas' entry barrier"), None)
            self.emit(d, point, line, SemWait((d, entry_sem, ()), self.n - 1, "Pallas' entry barrier"), None)

    def fresh_scratch(self, scratch: list, *devices: int) -> None:
        """A call's scratch on each of `devices` as the kernel finds it: SMEM zeros (the values
        ringc reads), no integers known in vector memory."""
        for d in devices:
            for b in scratch:
                if isinstance(b, Buffer) and b.space == "smem":
                    b.store[d] = np.zeros(b.shape, b.dtype)
                    b.unknown.pop(d, None)
                    b.unset.pop(d, None)
                elif isinstance(b, Buffer):
                    b.shadow.pop(d, None)

    def interloper(self, d: int, call_index: int, barrier: SemRef, line: Loc, point: tuple) -> None:
        """Another kernel with the same collective_id, between two calls: one barrier round
        with the neighbours this call's first barrier signals went to."""
        rounds = self.first_barrier_round.get(call_index, {})
        targets = [t for t in rounds.get(d, []) if not isinstance(t, str)]
        for t, at in targets:
            self.emit(d, point, at, Signal((t, barrier.name, ()), 1, "another kernel's barrier"), t)
        if targets:
            self.emit(d, point, targets[0][1], SemWait((d, barrier.name, ()), len(targets),
                                                       "another kernel's barrier"), None)

    def bind(self, h: Handle, name: str, aval: Any, bm: Any, line: int) -> Buffer:
        """The buffer an operand is: the handle's, or a new one (an input of the program, or
        an array computed outside the kernels)."""
        shape = tuple(bm.array_aval.shape)
        if h.buffer is None:
            kind = "input" if h.origin == "input" else "computed"
            h.buffer = self.new_buffer(name, bm.array_aval, kind, line, shape=shape)
            h.buffer.space = _space(bm.transformed_block_aval) if _whole(bm, None) else "hbm"
        elif h.buffer.shape != shape:
            if math.prod(h.buffer.shape) != math.prod(shape):
                raise KernelError(f"`{h.buffer.name}` reaches a pallas_call as {list(shape)} but is "
                                  f"{list(h.buffer.shape)}", file=self.file, line=line,
                                  fix="pass arrays between pallas_calls unchanged")
            raise KernelError(f"`{h.buffer.name}` is reshaped between pallas_calls ({list(h.buffer.shape)} -> "
                              f"{list(shape)})", file=self.file, line=line,
                              fix="ringc follows arrays passed unchanged between pallas_calls")
        return h.buffer

    def block_index(self, it: Interpreter, bm: Any, point: tuple, prefetch: list) -> tuple[int, ...]:
        out = it.run_closed(bm.index_map_jaxpr, [*point, *prefetch])
        # (an index read from SMEM keeps where it was read, for an out_of_bounds finding)
        spans = []  # the blocks each dimension has: where a runtime block index is sampled
        for (kind, size), extent in zip(_block_dims(bm), bm.array_aval.shape):
            spans.append((0, -(-extent // size) if kind == "Blocked" and size else extent))
        return tuple(o if isinstance(o, FromMemory) else it.scalar(o, "a BlockSpec index", span)
                     for o, span in zip(out, [*spans, *[None] * len(out)]))

    def block_ref(self, buf: Buffer, device: int, bm: Any, idx: tuple[int, ...], point: tuple, line: Any) -> Ref:
        """The block of `buf` a BlockSpec's index selects (`_block_ref`); a block outside the
        array is an `out_of_bounds` finding at the kernel's line (`Builder.faults`), and
        the pipeline copies the block clamped into the array."""
        ref = _block_ref(buf, device, bm, idx)
        box = []
        for dim, ((a, b), extent, i, (kind, size)) in enumerate(zip(ref.box, buf.shape, idx, _block_dims(bm))):
            if 0 <= a and b <= extent and a < b:
                box.append((a, b))
                continue
            b = a + (size if kind == "Blocked" else 1 if kind == "Squeezed" or size is None else size)
            origin = getattr(i, "origin", None)
            self.faults.append((device, point, _index_map_line(bm, line), f"block index {int(i)} of `{buf.name}` dimension {dim} selects "
                                                     f"{a}:{b}, outside [0, {extent})"
                                                     + (f"; the index is {origin}" if origin else "")))
            size = min(max(b - a, 1), extent)
            start = min(max(a, 0), extent - size)
            box.append((start, start + size))
        return Ref(buf, device, tuple(box), ref.kept)

    def _coords(self, d: int) -> dict[str, int]:
        return row_major(d, self.axis_sizes)

    def program(self, name: str) -> "Program | SymmetricProgram":
        """Every device's events, or device 0's as a `SymmetricProgram` when every device was
        evaluated at once (`interpret.Lanes` proved device d runs them translated by d)."""
        # A 0-d buffer is one element (its regions' box is ((0, 1),): `values.Ref.region`).
        shapes = {b.name: b.shape or (1,) for b in self.buffers.values()}
        # a grid point as the kernel reads it (`pl.program_id(0)`): a name of ringc's own
        # (`i`) could be one the kernel's own loops use
        grid_names = tuple(f"program_id({k})" for k in range(6))
        if self.lanes is not None:
            return SymmetricProgram(
                Program(name, self.file, self.n, grid_names, self.devices[:1], dict(self.sem_kinds), shapes,
                        self.targets, axis_sizes=dict(self.axis_sizes),
                        dtypes={b.name: str(b.dtype) for b in self.buffers.values()}, parallel=self.parallel,
                        front="pallas"),
                dict(self.lanes.steps))
        if self.core_count > 1:  # as the YAML model's `cores: 2` (`Unroller.run`)
            return Program(name, self.file, len(self.devices), grid_names, self.devices, dict(self.sem_kinds), shapes,
                           self.targets, axis_sizes=dict(self.axis_sizes),
                           second_core=self.second_core if self.megacore else [],
                           dtypes={b.name: str(b.dtype) for b in self.buffers.values()}, parallel=self.parallel,
                           memories=self.n, places=tuple(range(self.n)) * self.core_count, cores=self.core_count,
                           front="pallas")
        gpu = bool(self.processes)
        places = tuple(range(self.n)) + tuple(g for (g, _, _), _ in sorted(self.processes.items(), key=lambda kv: kv[1]))
        return Program(name, self.file, len(self.devices), grid_names, self.devices, dict(self.sem_kinds), shapes,
                       self.targets, axis_sizes=dict(self.axis_sizes),
                       device_labels=list(self.labels) if gpu else None,
                       second_core=self.second_core if self.megacore else [],
                       dtypes={b.name: str(b.dtype) for b in self.buffers.values()}, parallel=self.parallel,
                       memories=self.n if gpu else 0, places=places if gpu else (),
                       blocks=(tuple([-1] * self.n) + tuple(blk for (_, blk, _), _ in sorted(self.processes.items(),
                                                                                       key=lambda kv: kv[1])))
                       if gpu else (), block_sems=frozenset(self.block_sems), front="pallas")


def row_major(index: int, sizes: dict[str, int]) -> dict[str, int]:
    """The coordinates of `index` over axes of `sizes`, the last axis fastest (a device on the
    mesh, a block on a Mosaic GPU grid)."""
    coords, rest = {}, index
    for a in reversed(list(sizes)):
        coords[a] = rest % sizes[a]
        rest //= sizes[a]
    return dict(reversed(list(coords.items())))


def tpu_params(eqn: Any) -> Any:
    """A kernel call's Mosaic TPU compiler params (`pltpu.CompilerParams`, or the
    `{"mosaic_tpu": ...}` of older spellings), None without."""
    cp = eqn.params.get("compiler_params")
    return cp.get("mosaic_tpu", cp) if isinstance(cp, dict) else cp


def kernel_location(eqn: Any) -> Loc:
    """Where a pallas_call's kernel is: the call's user frame if tracing saw one, else the
    kernel function's definition (tracing under jit/shard_map rarely has the user's frame)."""
    loc = user_location(eqn)
    if int(loc):
        return loc
    kernel = kernel_jaxpr(eqn)
    # `plgpu.kernel` wraps the user's kernel in its own function: the first scope inside is the user's
    inner = [e.params["jaxpr"] for e in getattr(kernel, "eqns", ())[:1] if e.primitive.name == "run_scoped"]
    for jaxpr in (kernel, *inner):
        info = getattr(jaxpr, "debug_info", None)
        src = getattr(info, "func_src_info", None) or ""
        if " at " in src and ":" in src:
            file, _, line = src.rpartition(" at ")[2].rpartition(":")
            if line.isdigit() and not internal_frame(file):
                return Loc(int(line), file)
    return loc


def _unique(bufs: list[Buffer]) -> list[Buffer]:
    seen, out = set(), []
    for b in bufs:
        if b.name not in seen:
            seen.add(b.name)
            out.append(b)
    return out


def _arg_name(names: list[str], k: int, h: Handle) -> str:
    """Kernel argument k's name: the kernel's own, else (JAX left it unnamed: a `core_map`'s
    refs, a discharged run_state's kernel) the name the program gave the array (`Handle.name`)."""
    given = names[k] if k < len(names) else f"arg{k}"
    return h.name if h.name and given == f"arg{k}" else given


def arg_names(kernel: Any) -> list[str]:
    info = getattr(kernel, "debug_info", None)
    names = list(getattr(info, "arg_names", None) or [])
    out = []
    for k, n in enumerate(names):
        n = (n or f"arg{k}").split("'")[1] if "'" in (n or "") else (n or f"arg{k}")
        out.append(n.replace("[", "").replace("]", "") if n.startswith("args[") else n)
    return out


def _block_dims(bm: Any) -> list[tuple[str, int | None]]:
    out = []
    for b in bm.block_shape:
        kind = type(b).__name__
        size = getattr(b, "block_size", None)
        out.append((kind, size))
    return out


def _whole(bm: Any, buf: Buffer | None) -> bool:
    """The kernel sees the whole array in place: memory space ANY/HBM, or a block as big
    as the array whose index map is constant zero."""
    space = _space(bm.transformed_block_aval)
    if space == "hbm":
        return True
    dims = _block_dims(bm)
    full = all(k == "Blocked" and s == a for (k, s), a in zip(dims, bm.array_aval.shape))
    if not full:
        return False
    jaxpr = bm.index_map_jaxpr.jaxpr
    return not jaxpr.eqns and all(type(o).__name__ == "Literal" and int(np.asarray(o.val)) == 0
                                  for o in jaxpr.outvars)


def _block_ref(buf: Buffer, device: int, bm: Any, idx: tuple[int, ...]) -> Ref:
    box, kept = [], []
    for d, ((kind, size), i, extent) in enumerate(zip(_block_dims(bm), idx, buf.shape)):
        if kind == "Blocked":
            box.append((i * size, min(extent, (i + 1) * size)))
            kept.append(d)
        elif kind == "Squeezed" or size is None:
            box.append((i, i + 1))
        else:  # Element: the index is the start
            box.append((i, i + (size or 1)))
            kept.append(d)
    return Ref(buf, device, tuple(box), tuple(kept))


__all__ = ["Builder", "Handle", "Call", "Data", "is_concrete"]


def _index_map_line(bm: Any, line: Any) -> Any:
    """Where a BlockSpec's index map is defined (its lambda's line, which JAX's debug info
    keeps: `<lambda> at ring_kernel.py:164`), for a block index outside the array: the fix
    goes there. Else `line`, the kernel's."""
    info = getattr(getattr(bm.index_map_jaxpr, "jaxpr", None), "debug_info", None)
    m = re.fullmatch(r".* at (.+):(\d+)", getattr(info, "func_src_info", None) or "")
    if m is None or not os.path.isfile(m.group(1)):
        return line
    file = m.group(1)
    kernel = getattr(line, "file", None)
    if kernel and os.path.abspath(kernel) == os.path.abspath(file):
        file = kernel   # spelled as the kernel's own line spells it
    return Loc(int(m.group(2)), file)
