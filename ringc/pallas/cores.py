"""Pallas TPU kernels over a chip's TensorCores: `pl.kernel` over
`pltpu.create_tensorcore_mesh`, as `ringc emit` writes a `cores: 2` schedule, which jax 0.10
traces to an `mpmd_map` over a `TensorCoreMesh` (Mosaic GPU's `plgpu.kernel` is the same
primitive over a GPU mesh: `mgpu.run_launch`); or `pl.core_map` over that mesh inside
`pl.run_state`, whose refs the kernel closes over (each is read and written in place).

The model is the YAML one (`verify/unroll.Unroller.core_events`; docs/verification.md, "Two
cores"): every TensorCore of every device is a process, chip d's core c being process
c * N + d. The call's operands and results are the chip's HBM, shared by its cores; the
kernel's scratch (VMEM, SMEM) and semaphores are each core's own. A remote copy or signal
goes to the core its `device_id` names (a dict of mesh coordinates and the core axis; an
axis it leaves out is the sender's own, so the same core by default). Core 0's process
stands for the chip's call: it makes the call's entry (with a `collective_id`, the written
arrays entered and each core's own barrier semaphore; without, Mosaic's device barrier from
the second call on, as for a `pallas_call`), starts the other cores (`CORE_LAUNCH`, which they
wait for without taking), and after its own run waits for them to end (`CORE_JOIN`) before
the caller takes the memory back. Each core evaluates the kernel with the TPU rules
(`interpret.Interpreter`), the core axis's `lax.axis_index` its own index."""

from __future__ import annotations

from typing import Any

from ..verify.calls import entry_sync
from ..verify.events import BARRIER, Compute, Signal, SemWait
from ..verify.unroll import CORE_JOIN, CORE_LAUNCH
from .interpret import Interpreter, KernelError
from .jaxprs import kernel_jaxpr
from .program import Builder, Call, arg_names, kernel_location, literal_values, tpu_params
from .values import Buffer, Ref, SemRef, Unknown


ASSUMES = ("TensorCores: a kernel over the TensorCore mesh runs on each of a chip's {cores} cores as a process of "
           "its own, in any interleaving, started by the chip's call and all ended before it returns; HBM (the call's "
           "operands) is the chip's and shared, scratch and semaphores are each core's; a remote copy or signal lands "
           "on the core its device_id names (the sender's own when it names none); device d is chip d and its core 0")


def mesh_of(eqn: Any) -> tuple[str, int] | None:
    """(core axis name, cores) of a kernel call over a TPU TensorCore mesh with one axis (an
    `mpmd_map`'s `meshes`, a `core_map`'s `mesh`), else None (a GPU mesh; a SparseCore mesh,
    refused by `tpu.core_mesh`)."""
    meshes = eqn.params.get("meshes") or ((eqn.params["mesh"],) if "mesh" in eqn.params else ())
    if len(meshes) != 1 or type(meshes[0]).__name__ != "TensorCoreMesh" or len(meshes[0].axis_names) != 1:
        return None
    mesh = meshes[0]
    return mesh.axis_names[0], int(mesh.devices.size)


class CoreInterpreter(Interpreter):
    """The TPU rules for one TensorCore of one chip. `device` is the core's process (events,
    scratch and semaphores are its own); HBM regions are the chip's (`region`). The core
    axis is the last of the coordinates, so `interpret.device_of` gives a `device_id` dict's
    target as chip x cores + core, which `target` makes a process."""

    def __init__(self, b: Builder, chip: int, core: int, axis: str, cores: int):
        super().__init__(b, core * b.n + chip, {**b._coords(chip), axis: core}, {**b.axis_sizes, axis: cores})
        self.chip, self.core_axis, self.cores, self.chips = chip, axis, cores, b.n

    def target(self, t: Any) -> int:
        if t < 0:
            return t  # a device that does not exist: a `bad_target` finding
        chip, core = divmod(t, self.cores)
        return core * self.chips + chip

    def core_target(self, target: int, core: Any) -> int:
        if target < 0:
            return target
        core = int(core)
        if not 0 <= core < self.cores:
            return -1   # a core the chip does not have: a `bad_target` finding
        return core * self.chips + target % self.chips

    def mesh_device_id(self, dev: Any, kind: str) -> Any:
        chip_axes = [a for a in self.axis_sizes if a != self.core_axis]
        parts = dev if isinstance(dev, (tuple, list)) else (dev,)
        if kind == "MESH" and not isinstance(dev, dict) and len(parts) == len(chip_axes):
            # the device's coordinates only: the copy or signal reaches the same core of the target
            # (JAX's interpret mode: "Same core on destination device as on source"), as a dict
            # without the core axis does
            dev = dict(zip(chip_axes, parts))
        if kind != "MESH" or not isinstance(dev, dict):
            raise self.fail("a device id that is neither a dict of mesh coordinates nor one coordinate per mesh "
                            f"axis ({', '.join(chip_axes)}) in a kernel over the TensorCores (which core receives "
                            "it is not stated)", "name the target's coordinates and core: "
                            f"device_id={{axis: target, {self.core_axis!r}: core}} with DeviceIdType.MESH")
        if self.cores == 1 and self.core_axis in dev:   # another core of the chip, on a chip of one
            from .interpret import note
            note(self, f"device_id names the TensorCore axis {self.core_axis!r} on a chip "
                        "of one TensorCore, as the devices answer (--tpu): the copy or signal goes to the sending "
                        "core itself (a self_target); on a chip of two it reaches the other: check it so with "
                        "--tpu v5p")
        return dev

    def owner(self, ref: Ref, device: int) -> int:
        # the chip's memory, whichever core reaches it; scratch is the core's own
        return device % self.chips if ref.buffer.space == "hbm" and device >= 0 else device

    def region(self, ref: Ref, device: int | None = None) -> Any:
        return ref.region(self.owner(ref, ref.device if device is None else device))

    def emit(self, action: Any, target: int | None = None) -> None:
        # a remote action's target chip (the links it crosses); its regions name the process
        super().emit(action, None if target is None or target < 0 else target % self.chips)

    def fail(self, message: str, fix: str, eqn: Any = None) -> KernelError:
        loc = self.where(eqn)
        return KernelError(f"{message} (device {self.chip}, core {self.device // self.chips})", file=loc.file,
                           line=int(loc) or None, fix=fix)


def run_cores(b: Builder, call: Call, call_index: int) -> None:
    """Evaluate one kernel call over the TensorCore mesh on every core of every device."""
    eqn = call.eqn
    axis, cores = mesh_of(eqn)
    kernel = kernel_jaxpr(eqn)
    line = kernel_location(eqn)
    b.use_cores(cores)
    collective_id = getattr(tpu_params(eqn), "collective_id", None)
    sync = entry_sync(collective_id is not None, collective_id is not None, b.invocation)
    if sync.interloper:
        raise KernelError("a kernel over the TensorCores with a collective_id after another kernel call is not "
                          "modelled yet (its barrier semaphore's rounds between the calls)", file=line.file,
                          line=int(line) or None, fix="check the kernel on its own (one call)")
    # each core's barrier semaphore (`get_barrier_semaphore`); the written arrays are entered
    # when there is one, as for a pallas_call with a collective_id
    barrier = SemRef(f"{BARRIER}@{collective_id}", "barrier", ()) if collective_id is not None else None
    if barrier is not None:
        b.sem_kinds[barrier.name] = "barrier"
    bufs, enter_names, exit_names = b.bind_mesh_call(call, call_index, kernel, line, "hbm")
    refs = kernel.constvars if eqn.primitive.name == "core_map" else kernel.invars
    # `scratch_types`: the kernel's further arguments, each core's own
    names = arg_names(kernel)
    over_refs = eqn.primitive.name == "core_map"  # the run_state's or new_ref's refs, closed over: no scratch args
    scratch = [] if over_refs else [
        b.scratch((id(eqn), "scratch", k), names[k] if k < len(names) else f"scratch{k}", kernel.invars[k].aval,
                  int(line)) for k in range(len(bufs), len(kernel.invars))]
    launch, join = f"{CORE_LAUNCH}{b.invocation}", f"{CORE_JOIN}{b.invocation}"
    b.sem_kinds[launch] = b.sem_kinds[join] = "launch"
    b._current_call = call_index
    point = ()
    for d in range(b.n):
        for c in range(cores):
            it = CoreInterpreter(b, d, c, axis, cores)
            p = it.device
            it.barrier = barrier
            if c == 0:  # the chip's call (core 0 is process d): its entry, then its other cores start
                b.call_entry(d, point, line, sync, [b.buffers[name] for name in enter_names])
                if cores > 1:
                    b.emit(p, point, line, Signal((d, launch, ()), cores - 1, "launch"), None)
            else:
                b.emit(p, point, line, SemWait((d, launch, ()), 1, "launch", decrement=False), None)
            own = [Ref.whole(r, p) for r in scratch if isinstance(r, Buffer)]
            for ref in own:  # fresh memory: no integers known in it, SMEM zeros
                b.fresh_scratch([ref.buffer], p)
                b.emit(p, point, line, Compute("allocate", ref.region()), None)
            args = [_operand(call, k, d, p, buf, refs) for k, buf in enumerate(bufs)] + [
                Ref.whole(r, p) if isinstance(r, Buffer) else r for r in scratch]
            it.point = point
            if over_refs:  # `core_map`: its outputs are those refs
                it.run(kernel, args[:len(call.operands)], [])
            else:
                it.run(kernel, [], args)
            for ref in own:
                b.emit(p, point, line, Compute("exit", ref.region()), None)
            if c:
                b.emit(p, point, line, Signal((d, join, ()), 1, "join"), None)
        if cores > 1:
            b.emit(d, point, line, SemWait((d, join, ()), cores - 1, "join", decrement=False), None)
        for name in exit_names:
            b.emit(d, point, line, Compute("exit", Ref.whole(b.buffers[name], d).region()), None)
    b._current_call = None
    b.call_names.append(call.name)


def _operand(call: Call, k: int, d: int, p: int, buf: Buffer | SemRef, refs: list) -> Any:
    """What the kernel's k-th argument is on chip d's core process p: its array in HBM (the
    chip's), a ref in SMEM or VMEM or a semaphore (the core's own), or (a scalar the body
    closes over, `pl.kernel` passes it by value: a jit argument, the caller's `axis_index`)
    the caller's value where it is known, else a value ringc does not know."""
    from jax._src.state.types import AbstractRef
    if isinstance(buf, SemRef):  # a semaphore the program allocated (`Builder.bind_mesh_call`)
        return buf
    if k >= len(call.operands) or isinstance(refs[k].aval, AbstractRef):
        return Ref.whole(buf, p if buf.space in ("smem", "vmem") else d)
    h = call.operands[k]
    values = h.values if h.values is not None else h.root().values
    if values is not None and literal_values(values):
        return values[1]
    if values is not None and len(values) > d:
        return values[d]
    return Unknown(f"`{buf.name}` is a value the caller computes outside the kernel from data ringc does not follow")
