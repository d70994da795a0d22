"""`ringc compile`: compile a schedule's emitted kernel with the real TPU toolchain (Pallas →
Mosaic → XLA, through libtpu) ahead of time, on a machine without a TPU.

`jax.experimental.topologies.get_topology_desc("v5e:2x2", platform="tpu")` describes a TPU
slice as compile-only devices. The kernel runs on a one-axis mesh over all of them, in
device-id order (the ring's order does not change what the compiler accepts). How many
devices a target has is libtpu's answer: one per chip for v5e, v5p and v6e (v5p's two
TensorCores form one megacore device), one per TensorCore for v4 (`v4:2x2x1` has 8).

A failure is translated back to the schedule by `ringc.compile.errors`; the compiler's own
text stays available as `CompileResult.raw_error`.
"""

from __future__ import annotations

import functools
import glob
import os
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

from ..ir import schema as S
from ..errors import ScheduleError
from ..units import size_text

# Targets used in examples and fixes; any `generation:topology` libtpu knows works.
EXAMPLE_TARGETS = ("v5e:2x2", "v5p:2x2x1", "v4:2x2x1", "v6e:2x2")

# Settings for libtpu on a machine with no TPU. Without them it asks the (absent) cloud
# metadata server for the host's accelerator type and worker list and prints warnings and
# an INVALID_ARGUMENT error to stderr; compile-only topologies need neither.
_NO_TPU_ENV = {
    "TPU_SKIP_MDS_QUERY": "1",
    "TPU_WORKER_HOSTNAMES": "localhost",
    "TPU_HOST_BOUNDS": "1,1,1",
    # libtpu logs compiler errors to stderr as well as raising them (ringc reports them
    # itself), and logs to files in /tmp/tpu_logs: fatal messages only.
    "TPU_STDERR_LOG_LEVEL": "3",
    "TPU_MIN_LOG_LEVEL": "3",
    "GRPC_VERBOSITY": "ERROR",
    # libtpu takes /tmp/libtpu_lockfile to own the local TPU; without a TPU there is nothing
    # to own, and two compiles (or a compile next to a test run) must not exclude each other.
    "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
}

TARGET_SYNTAX = re.compile(r"^(?P<gen>[a-z0-9_ ]+)[:=_](?P<shape>\d+(x\d+)*)(_twisted|_untwisted)?$", re.I)


@dataclass(frozen=True)
class CompileResult:
    """One schedule compiled for one target."""
    name: str
    file: str
    target: str
    device_kind: str
    devices: int                   # N: the ring runs over every device of the target
    ok: bool
    lower_seconds: float           # jax tracing and Pallas → Mosaic lowering
    compile_seconds: float         # XLA and Mosaic in libtpu
    # Per device, in bytes, from `compiled.memory_analysis()` (HBM) and the compiled HLO (VMEM).
    memory: dict[str, int] = field(default_factory=dict)
    error: ScheduleError | None = None   # the failure in schedule terms
    raw_error: str | None = None         # the compiler's own text

    @property
    def seconds(self) -> float:
        return self.lower_seconds + self.compile_seconds

    def to_json(self, verbose: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "file": self.file, "schedule": self.name, "target": self.target,
            "device_kind": self.device_kind, "devices": self.devices, "ok": self.ok,
            "lower_seconds": round(self.lower_seconds, 4),
            "compile_seconds": round(self.compile_seconds, 4), "memory": dict(self.memory),
        }
        if self.error is not None:
            e = self.error
            out["error"] = {"kind": getattr(e, "kind", "compiler_error"), "message": e.message,
                            "file": e.file, "line": e.line, "fix": e.fix}
            if verbose:
                out["raw_error"] = self.raw_error
        return out

    def to_text(self, verbose: bool = False) -> str:
        head = (f"{self.file} {self.target} ({self.devices} x {self.device_kind}, N={self.devices}): "
                f"{'ok' if self.ok else 'FAILED'}  compile {self.seconds:.2f}s")
        if self.ok:
            return head + "\n  " + memory_text(self.memory)
        return "\n".join([head, *error_lines(self.error, self.raw_error, verbose)])


# memory key -> label in text output, in display order
_MEMORY_LABELS = {
    "vmem_scoped": "VMEM scoped", "hbm_argument": "HBM arguments", "hbm_output": "outputs",
    "hbm_temp": "temp", "hbm_alias": "aliased", "hbm_peak": "peak", "generated_code": "code",
}


def memory_text(memory: dict[str, int]) -> str:
    """`VMEM scoped 36.0 KiB  HBM arguments 32.0 KiB, outputs 8.0 KiB, ...`"""
    vmem = [f"{_MEMORY_LABELS[k]} {size_text(v, decimals=1)}" for k, v in memory.items() if k == "vmem_scoped"]
    hbm = [f"{_MEMORY_LABELS[k]} {size_text(v, decimals=1)}" for k, v in memory.items()
           if k != "vmem_scoped" and k in _MEMORY_LABELS and (v or k != "hbm_alias")]
    return "  ".join(filter(None, [", ".join(vmem), ", ".join(hbm)])) + " (per device)"


# ------------------------------------------------------------------------------- libtpu


def _machine_has_tpu() -> bool:
    try:
        from jax._src import hardware_utils
        return hardware_utils.num_available_tpu_chips_and_device_id()[0] > 0
    except Exception:  # private API moved: fall back to the device nodes
        return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def quiet_libtpu() -> None:
    """Keep libtpu's start-up noise off stderr on a machine without a TPU (explicit settings
    in the environment win). On a TPU host nothing changes: there these settings matter."""
    if _machine_has_tpu():
        return
    for key, value in _NO_TPU_ENV.items():
        os.environ.setdefault(key, value)


LIBTPU_MISSING = "compiling for TPU needs libtpu, which is not installed (only `ringc compile` and `ringc tune` use it)"
LIBTPU_FIX = 'pip install "ringc[tpu]" (from a checkout: pip install -e ".[tpu]"; jax[tpu] brings the libtpu that matches jax)'


def libtpu_available() -> bool:
    """Whether libtpu is installed (`pip install "ringc[tpu]"`)."""
    import importlib.util
    return importlib.util.find_spec("libtpu") is not None


@functools.lru_cache(maxsize=None)
def target_devices(target: str) -> tuple:
    """The compile-only TPU devices of `target` (e.g. "v5e:2x2"), in device-id order.

    Raises ScheduleError for a target libtpu does not know."""
    if not TARGET_SYNTAX.match(target):
        raise ScheduleError(f"bad target {target!r}", fix=_target_fix())
    if not libtpu_available():
        raise ScheduleError(LIBTPU_MISSING, fix=LIBTPU_FIX)
    quiet_libtpu()
    from jax.experimental import topologies
    try:
        topo = topologies.get_topology_desc(target, platform="tpu")
    except Exception as e:  # JaxRuntimeError
        msg = str(e).split("\n")[0]
        if not msg.startswith("INVALID_ARGUMENT: "):  # libtpu itself failed to start
            raise ScheduleError(f"libtpu cannot describe {target!r}: {msg}",
                                fix="see the message; `ringc compile` needs no TPU, only libtpu") from None
        msg = msg.removeprefix("INVALID_ARGUMENT: ")
        topo = _small_slice(target, msg)
        if topo is None:
            raise ScheduleError(f"target {target!r}: {msg}", fix=_target_fix()) from None
    return tuple(sorted(topo.devices, key=lambda d: d.id))


def _small_slice(target: str, msg: str):
    """A slice smaller than one host's block of chips (`v5e:1x1`, whose hosts hold 2x2) is
    described with host bounds of its own size; None if that is not the problem."""
    from jax.experimental import topologies
    host = re.search(r'chips_per_host_bounds "(\d+)x(\d+)x(\d+)"', msg)
    dims = [int(d) for d in TARGET_SYNTAX.match(target)["shape"].split("x")]
    dims = (dims + [1, 1])[:3]
    if host is None or any(d > int(h) for d, h in zip(dims, host.groups())):
        return None
    try:
        return topologies.get_topology_desc(target, platform="tpu", chips_per_host_bounds=dims)
    except Exception:
        return None


def _target_fix() -> str:
    return ("a target is a TPU generation and a chip topology, e.g. "
            + ", ".join(EXAMPLE_TARGETS))


# ------------------------------------------------------------------------------- compile


def _mesh(schedule: S.Schedule, target: str, devices: tuple):
    """A 1-axis schedule runs over every device of the target in id order; a multi-axis one
    over the chip grid, devices placed by their physical coordinates."""
    import jax
    import numpy as np

    if len(schedule.axes) == 1:
        return jax.sharding.Mesh(np.array(devices), (schedule.axis,))
    from ..run import mesh_layout

    dims = [int(d) for d in TARGET_SYNTAX.match(target)["shape"].split("x")]
    if math.prod(dims) != len(devices):
        raise ScheduleError(f"target {target!r} has {len(devices)} devices on {math.prod(dims)} chips, so "
                            f"`{schedule.name}`'s {len(schedule.axes)} axes cannot follow the chip grid",
                            file=schedule.file, fix="use a target with one device per chip (v5e, v5p, v6e)")
    grid = np.empty(dims, dtype=object)
    for dev in devices:
        grid[tuple(dev.coords[:len(dims)])] = dev
    names, _ = mesh_layout(schedule, tuple(dims))
    return jax.sharding.Mesh(grid, names)


def compile_for(schedule: S.Schedule, target: str, **params: int) -> CompileResult:
    """Compile `schedule`'s emitted kernel for every device of `target` with the TPU compiler.

    A compiler rejection is a result (`ok=False`, `error` in schedule terms); bad input (an
    unknown target, parameters that do not fit) raises ScheduleError."""
    try:
        devices = target_devices(target)
    except ScheduleError as e:
        raise ScheduleError(e.message, file=schedule.file, fix=e.fix) from None
    if schedule.cores > 1:  # libtpu compiles a 2-core mesh for a 1-core chip too: refuse it here
        from ..cost.chips import too_few_cores
        refusal = too_few_cores(schedule.name, schedule.cores, target.split(":")[0])
        if refusal:
            raise ScheduleError(refusal, file=schedule.file, line=schedule.line_of("cores"),
                                fix="compile it for v5p or v4 (e.g. --target v5p:2x2x1)")
    import jax

    from . import errors as compile_errors
    from ..run import load_module

    schedule = with_params(schedule, params)
    n = len(devices)
    mesh = _mesh(schedule, target, devices)
    # Shapes that do not divide, or past the `buffer_bytes` limit, are refused at their line
    # before anything is emitted or traced (the verifier's own evaluation of them).
    from ..verify.unroll import buffer_shapes
    sizes = {a: mesh.shape[a] for a in schedule.axes}
    buffer_shapes(schedule, sizes)
    module = load_module(schedule)
    try:
        fn = module.build(mesh, interpret=False)
        extra = {}
        if schedule.data:  # runtime data: only its shape (int32 [N] per device) reaches the compiler
            from ..testing import draw_samples
            extra["data"] = draw_samples(schedule, n, 1, 0, sizes)[0]
        shapes = jax.eval_shape(lambda: module.make_inputs(mesh, 0, **extra))
    except ValueError as e:  # the module's own checks: a shape that does not divide for this N
        raise compile_errors.bad_parameters(schedule, n, e) from None
    args = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=jax.sharding.NamedSharding(mesh, spec))
            for x, spec in zip(shapes, module.IN_SPECS)]

    kind = devices[0].device_kind
    lower_s = compile_s = 0.0
    start = time.perf_counter()
    try:
        lowered = fn.lower(*args)
        lower_s = time.perf_counter() - start
        start = time.perf_counter()
        compiled = lowered.compile()
        compile_s = time.perf_counter() - start
    except Exception as e:  # Mosaic and XLA report through many exception types
        elapsed = time.perf_counter() - start
        if lower_s:
            compile_s = elapsed
        else:
            lower_s = elapsed
        error = compile_errors.explain(e, schedule, n, target, module, sizes)
        return CompileResult(schedule.name, schedule.file, target, kind, n, False, lower_s, compile_s,
                             error=error, raw_error=compile_errors.raw_text(e))
    return CompileResult(schedule.name, schedule.file, target, kind, n, True, lower_s, compile_s,
                         memory=memory_figures(compiled))


def with_params(schedule: S.Schedule, params: dict[str, int]) -> S.Schedule:
    """`schedule` with some parameters overridden (as `ringc.load(path, params)` does)."""
    if not params:
        return schedule
    unknown = sorted(set(params) - set(schedule.params))
    if unknown:
        raise ScheduleError(f"unknown parameter {', '.join(map(repr, unknown))}", file=schedule.file,
                            line=schedule.line_of("params"),
                            fix=f"parameters of {schedule.name}: {', '.join(schedule.params) or 'none'}")
    return schedule.model_copy(update={"params": {**schedule.params, **params}})


_SCOPED = re.compile(r'"used_scoped_memory_configs":\[(.*?)\]')
_SCOPED_ENTRY = re.compile(r'\{"memory_space":"(\d+)","offset":"\d+","size":"(\d+)"\}')
_VMEM_SPACE = "1"
_INSTRUCTION = re.compile(r"\n\s+(?=(?:ROOT )?%)")


def memory_figures(compiled) -> dict[str, int]:
    """Per-device bytes: HBM from `memory_analysis()`; VMEM as the largest scoped VMEM
    allocation of any Pallas kernel in the compiled HLO (its scratch and VMEM operands)."""
    out: dict[str, int] = {}
    vmem = 0
    # One chunk per HLO instruction (an instruction's attributes may span lines).
    for chunk in _INSTRUCTION.split(compiled.as_text()):
        if 'custom_call_target="tpu_custom_call"' in chunk:
            for entries in _SCOPED.findall(chunk):
                for space, size in _SCOPED_ENTRY.findall(entries):
                    if space == _VMEM_SPACE:
                        vmem = max(vmem, int(size))
    out["vmem_scoped"] = vmem
    stats = compiled.memory_analysis()
    if stats is not None:
        for key, attr in (("hbm_argument", "argument_size_in_bytes"), ("hbm_output", "output_size_in_bytes"),
                          ("hbm_temp", "temp_size_in_bytes"), ("hbm_alias", "alias_size_in_bytes"),
                          ("hbm_peak", "peak_memory_in_bytes"),
                          ("generated_code", "generated_code_size_in_bytes")):
            value = getattr(stats, attr, None)
            if value is not None:
                out[key] = int(value)
    return out


def error_lines(error: Any, raw_error: str, verbose: bool) -> list[str]:
    """A failed compile's lines under its head: the error, and the compiler's own message
    (with --verbose) or where to see it."""
    lines = ["  " + ln for ln in str(error).splitlines()]
    if verbose and raw_error:
        lines += ["  compiler output:"] + ["    " + ln for ln in raw_error.splitlines()]
    elif raw_error:
        lines.append("  (--verbose shows the compiler's own message)")
    return lines
