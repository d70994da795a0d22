"""`ringc run`: execute a schedule's generated kernel in Pallas TPU interpret mode on CPU
devices and compare it with the `lax` reference (`ringc.reference`).

JAX fixes its CPU device count when its backends start, from
`XLA_FLAGS=--xla_force_host_platform_device_count=N`. Call `ensure_host_devices(n)` before
anything imports jax (the CLI does); `run_schedule` raises a RuntimeError if there are too few.

Known limitation of interpret mode (jax 0.10): when a kernel runs on *every* host device and
passes an operand of more than about 100 KiB per device, interpretation can deadlock (the
callbacks that simulate the TPU copy their operands to CPU device 0 and starve). One spare
host device avoids it, so `ensure_host_devices(n)` asks for n + 1, and `run_schedule` warns
when the spare is missing and an operand is that large.
"""

from __future__ import annotations

import math
import os
import sys
import time
import warnings
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Mapping

from .ir import expr as E
from .ir import schema as S
from .ir.dtypes import itemsize
from .errors import ScheduleError
from .ir.resolve import axis_size_env, resolved
from .reference import reference, summed_terms
from .jaxapi import import_kernel
from .testing import heaviest_sample
from .topology import parse
from .verify.placement import place

_DEVICE_FLAG = "--xla_force_host_platform_device_count"

# Allowed error per summed term, relative to max(1, max |reference|); float32 is absolute.
_TOLERANCE = {
    "float32": 1e-5, "bfloat16": 2.0 ** -8, "float16": 2.0 ** -11,
    "float8_e4m3fn": 2.0 ** -3, "float8_e5m2": 2.0 ** -2,
}


@dataclass(frozen=True)
class RunResult:
    """The outcome of one interpreted run against the lax reference."""
    name: str
    devices: int
    max_abs_err: float
    tolerance: float
    races_found: bool | None  # None: race detection was off
    seconds: float  # the kernel's run, excluding compilation
    ok: bool  # within tolerance and no race found


def host_device_count(n: int) -> int:
    """The CPU device count to start JAX with for runs on up to `n` devices: max(n + 1, 8),
    one spare to avoid the interpret-mode deadlock described in the module docstring."""
    return max(n + 1, 8)


def ensure_host_devices(n: int) -> bool:
    """Set XLA_FLAGS (`host_device_count(n)` CPU devices) and JAX_PLATFORMS=cpu, if jax is
    not imported yet.

    Returns False (and changes nothing) when jax is already imported: its device count may be
    fixed already, and `run_schedule` will report if it is too small."""
    if "jax" in sys.modules:
        return False
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(_DEVICE_FLAG)]
    os.environ["XLA_FLAGS"] = " ".join([*flags, f"{_DEVICE_FLAG}={host_device_count(n)}"])
    os.environ["JAX_PLATFORMS"] = "cpu"
    return True


def load_module(schedule: S.Schedule) -> ModuleType:
    """Emit the schedule's module and import it in memory, unchecked (`ringc.jaxapi.import_kernel`:
    tracebacks show the generated lines). `ringc run` refuses a schedule that would hang itself."""

    return import_kernel(schedule)


def _cpu_devices() -> list:
    import jax

    try:
        return jax.devices("cpu")
    except RuntimeError:
        return []


def mesh_layout(schedule: S.Schedule, shape: tuple[int, ...], along: str | None = None
                ) -> tuple[tuple[str, ...], dict[str, int]]:
    """Mesh axis names for running `schedule` on a mesh of `shape`, and the devices along each
    schedule axis. The schedule's axes go where `along` says (`y`, `x,y`, or indices; by
    default axes named x, y, z go to that position, others to the first positions), the
    other mesh axes are named x, y, z, w, ... whatever the schedule does not use."""

    placement = place(schedule, parse("mesh:" + "x".join(map(str, shape))), along)
    names: list[str | None] = [None] * len(shape)
    for a, k in zip(placement.axes, placement.along):
        names[k] = a
    spare = (a for a in ("x", "y", "z", "w", "v", "u") if a not in schedule.axes)
    return tuple(a if a is not None else next(spare) for a in names), placement.sizes


def _largest_operand_bytes(schedule: S.Schedule, n: int, params: Mapping[str, int],
                           sizes: Mapping[str, int] | None = None) -> int:
    env = {"N": n, **axis_size_env(schedule.axes, sizes or {}), **schedule.params, **params}
    sizes = [0]
    for name, buf in schedule.buffers.items():
        if buf.kind != "vmem_scratch":
            dims = [E.evaluate(resolved(schedule).inline(d), env) for d in buf.full_shape]
            sizes.append(math.prod(dims) * itemsize(schedule.dtype_of(name)))
    return max(sizes)


def tolerance(dtype: str, terms: int, scale: float) -> float:
    """Allowed max abs error for `terms` summed values of `dtype` whose result has magnitude
    up to `scale`: 1e-5 per term for float32; for narrower floats their precision per term,
    relative to max(1, scale); 0 (exact) for integers."""
    if dtype == "float32":
        return 1e-5 * terms
    if dtype in _TOLERANCE:
        return _TOLERANCE[dtype] * terms * max(1.0, scale)
    return 0.0


def run_schedule(schedule: S.Schedule, devices: int, *, params: Mapping[str, int] | None = None,
                 seed: int = 0, detect_races: bool = True, mesh_shape: tuple[int, ...] | None = None,
                 along: str | None = None, dma_execution_mode: str = "on_wait",
                 interpret_seed: int | None = None, data: dict | None = None) -> RunResult:
    """Run `schedule` on `devices` CPU devices in Pallas TPU interpret mode and compare its
    output with the lax reference. `mesh_shape` (e.g. (2, 4), `devices` devices in all) runs
    it on a multi-axis mesh, its axes `along` the given mesh axes (see `mesh_layout`).

    `seed` draws the inputs. `dma_execution_mode` ("on_wait" or "eager") and `interpret_seed`
    go to `pltpu.InterpretParams`; the race detector draws each DMA's vector-clock slot from
    numpy's global generator, which `interpret_seed` also seeds. A schedule with runtime data
    runs on `data` (a `ringc.data.Sample`), by default the heaviest of 8 samples drawn from its
    declared constraints with `seed` (`ringc.testing.draw_samples`; the largest sum of values,
    since hypothesis draws the all-zero sample first and a run that moves nothing shows little)."""
    if schedule.kernels:
        raise ScheduleError(
            f"`{schedule.name}` is a split-phase program of {len(schedule.program)} pallas_calls "
            f"({', '.join(schedule.program)}), which interpret mode cannot run: jax 0.10.2's TPU interpreter gives "
            "every semaphore argument of a pallas_call a fresh semaphore and cannot allocate semaphore-typed "
            "outputs (jax/_src/pallas/mosaic/interpret/interpret_pallas_call.py), so a DMA started in one call "
            "cannot be waited in the next", file=schedule.file, line=schedule.line_of("kernels"),
            fix="`ringc check` verifies the program (and `ringc check` of the emitted module, the same program "
                "as traced); `ringc compile --target v5e:2x2` compiles it for TPU")
    if schedule.cores > 1:
        raise ScheduleError(
            f"`{schedule.name}` runs on every TensorCore (`cores: {schedule.cores}`), which interpret mode cannot "
            "run: jax 0.10.2's TPU interpreter refuses a `device_id` that names a core (NotImplementedError in "
            "jax/_src/pallas/mosaic/interpret/utils.py `device_coords_to_logical_id`), and the kernel's remote "
            "copies name theirs", file=schedule.file, line=schedule.line_of("cores"),
            fix="`ringc check` verifies it on every core; `ringc compile --target v5p:2x2x1` compiles it for TPU")
    import jax
    import numpy as np
    from jax.experimental.pallas import tpu as pltpu

    params = dict(params or {})
    if devices < 1:
        raise ValueError(f"devices must be at least 1, got {devices}")
    if mesh_shape is None and len(schedule.axes) > 1:
        raise ValueError(f"{schedule.name} runs over axes {schedule.axes}: give a mesh_shape")
    shape = tuple(mesh_shape) if mesh_shape is not None else (devices,)
    if math.prod(shape) != devices:
        raise ValueError(f"a mesh of shape {shape} has {math.prod(shape)} devices, not {devices}")
    axis_names, sizes = mesh_layout(schedule, shape, along)
    n = math.prod(sizes.values())
    cpus = _cpu_devices()
    if len(cpus) < devices:
        raise RuntimeError(
            f"running on {devices} devices needs {devices} CPU devices, but JAX has {len(cpus)}. "
            f"The count is fixed when JAX starts: set XLA_FLAGS={_DEVICE_FLAG}="
            f"{host_device_count(devices)} and JAX_PLATFORMS=cpu before importing jax "
            "(ringc.run.ensure_host_devices does this)")
    if len(cpus) == devices and _largest_operand_bytes(schedule, n, params, sizes) > 64 * 1024:
        warnings.warn(
            f"{schedule.name} on all {devices} host devices with operands over 64 KiB may hang in "
            f"interpret mode; start JAX with {host_device_count(devices)} devices "
            "(ringc.run.ensure_host_devices) to leave one spare", RuntimeWarning, stacklevel=2)
    mesh = jax.sharding.Mesh(np.array(cpus[:devices]).reshape(shape), axis_names)
    # Interpret mode (jax 0.10) caches the interpretation of a kernel by its jaxpr; the same
    # kernel on a mesh with the same axis sizes in another order would then address the wrong
    # devices. Start clean for every run.
    jax.clear_caches()
    module = load_module(schedule)
    interpret = pltpu.InterpretParams(detect_races=detect_races, dma_execution_mode=dma_execution_mode,
                                      random_seed=interpret_seed)
    fn = module.build(mesh, interpret=interpret, **params)
    if schedule.data:
        if data is None:
            data = heaviest_sample(schedule, n, seed, sizes)
        inputs = module.make_inputs(mesh, jax.random.key(seed), data=data, **params)
    else:
        inputs = module.make_inputs(mesh, jax.random.key(seed), **params)

    pltpu.reset_tpu_interpret_mode_state()
    if interpret_seed is not None:
        np.random.seed(interpret_seed)
    try:
        compiled = fn.lower(*inputs).compile()
        start = time.perf_counter()
        out = jax.block_until_ready(compiled(*inputs))
        seconds = time.perf_counter() - start
        races_found = _races_found() if detect_races else None
    finally:
        pltpu.reset_tpu_interpret_mode_state()

    return compare(schedule, mesh, inputs, out, params, sizes, races_found, seconds)


def compare(schedule: S.Schedule, mesh: Any, inputs: Any, out: Any, params: Mapping[str, int],
            sizes: Mapping[str, int] | None, races_found: bool | None, seconds: float,
            dtype: str | None = None) -> RunResult:
    """A run's output against the lax reference on the same mesh and inputs, within the
    tolerance of the output's dtype (the schedule's, or `dtype`) for the terms the collective
    sums."""
    import numpy as np
    devices = mesh.devices.size
    n = math.prod(sizes.values()) if sizes else devices
    outputs = schedule.buffers_of("output")
    if len(outputs) > 1:
        out = out[outputs.index(schedule.io_buffer("output"))]
    expected = reference(schedule, mesh, **params)(*inputs)
    got = np.asarray(out).astype(np.float64)
    want = np.asarray(expected).astype(np.float64)
    if got.shape != want.shape:
        raise ValueError(f"{schedule.name}: output has shape {got.shape}, but "
                         f"lax {schedule.collective.kind} gives {want.shape}")
    err = float(np.max(np.abs(got - want))) if got.size else 0.0
    dtype = dtype or schedule.dtype_of(schedule.io_buffer("output"))
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    depth = E.evaluate(resolved(schedule).inline(schedule.buffers[schedule.io_buffer("input")].full_shape[-1]),
                       {"N": n, **axis_size_env(schedule.axes, sizes or {}), **schedule.params, **params})
    tol = tolerance(dtype, summed_terms(schedule.collective.kind, n, dtype, depth), scale)
    ok = not math.isnan(err) and err <= tol and races_found is not True
    return RunResult(name=schedule.name, devices=devices, max_abs_err=err, tolerance=tol,
                     races_found=races_found, seconds=seconds, ok=ok)


def run_schedule_gpu(schedule: S.Schedule, devices: list, *, params: Mapping[str, int] | None = None,
                     seed: int = 0) -> RunResult:
    """Run `schedule`'s Mosaic GPU module (`ringc emit --target mgpu`) on `devices` (Hopper GPUs,
    two or more: its copies need peers) and compare with the lax reference on them."""
    import jax
    import numpy as np
    from .jaxapi import import_kernel
    params = dict(params or {})
    mesh = jax.sharding.Mesh(np.array(devices), (schedule.axis,))
    module = import_kernel(schedule, target="mgpu")
    fn = module.build(mesh, **params)
    inputs = module.make_inputs(mesh, jax.random.key(seed), **params)
    compiled = fn.lower(*inputs).compile()
    start = time.perf_counter()
    out = jax.block_until_ready(compiled(*inputs))
    seconds = time.perf_counter() - start
    # (a module with a matmul runs in bfloat16 unless the schedule fixes a dtype)
    return compare(schedule, mesh, inputs, out, params, {schedule.axis: len(devices)}, None, seconds,
                   dtype=str(np.asarray(out).dtype) if not isinstance(out, (tuple, list)) else None)


def _races_found() -> bool | None:
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc

    return None if ipc.races is None else bool(ipc.races.races_found)
