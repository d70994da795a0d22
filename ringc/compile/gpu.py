"""`ringc compile FILE.py --target h100`: a Pallas Mosaic GPU kernel file compiled ahead of
time for Hopper (sm_90a) on a machine without a GPU.

The file is run as `ringc check` runs it (`pallas.script.run_script`: its top-level kernel
calls, else its entry functions called the way `pallas/entries.py` calls them), on N CPU
devices that answer as H100s (`pallas.tpu.GPUS`: 132 SMs, compute capability 9.0), and each
captured kernel call (a jitted program whose `plgpu.kernel`s run under `jax.shard_map`) is
then:

1. **lowered** for CUDA: `jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",))`. This
   needs no GPU and no plugin: it gives StableHLO with one `mosaic_gpu_v2` custom call per
   kernel, whose payload is the Mosaic GPU module. Its `gpu.launch` says how much dynamic
   shared memory each block asks for (`launch_smem`);
2. **compiled** (with `pip install "ringc[gpu]"`: the CUDA PJRT plugin and ptxas) for N
   compile-only H100 devices, `jax.experimental.topologies.get_topology_desc(platform="cuda",
   target_config=H100, topology="1x1xN")`, the mesh moved onto them (`_on_devices`). Mosaic
   GPU compiles each kernel's PTX with ptxas while XLA compiles the program; with
   `MOSAIC_GPU_DUMP_PTXAS` set it writes ptxas' `-v` report, which gives the registers per
   thread, the spill stores and loads, the stack frame and static shared memory
   (`ptxas_report`).

A failure is reported at the user's line: a lowering error at the line of the kernel's
statement that JAX names, else at the kernel's definition; the compiler's own text stays in
`GpuCompileResult.raw_error`. docs/compile.md ("H100") has the measured table.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ..errors import ScheduleError
from . import error_lines

__all__ = ["GPU_TARGETS", "GPU_MISSING", "GPU_FIX", "GpuCompileResult", "KernelFigures", "gpu_available",
           "compile_file", "compile_pallas", "lower_for_cuda", "ptxas_report", "quiet_plugin", "target_config"]

GPU_MISSING = ("compiling for H100 needs JAX's CUDA plugin and ptxas, which are not installed (only "
               "`ringc compile --target h100` uses them)")
GPU_FIX = ('pip install "ringc[gpu]" (from a checkout: pip install -e ".[gpu]"; it brings jax-cuda12-plugin, '
           'jax-cuda12-pjrt and nvidia-cuda-nvcc-cu12 for ptxas; no GPU is needed)')
DEFAULT_DEVICES = 8  # an HGX H100 board's GPUs, all on one NVSwitch

# What XLA's compiler needs to know of the GPU it compiles for, without one attached (a
# `stream_executor.GpuTargetConfigProto`): the figures CUDA's `cudaGetDeviceProperties`
# reports for an H100 SXM5 80 GB (NVIDIA's H100 datasheet and the CUDA C++ Programming
# Guide's table for compute capability 9.0). The SM count, name and capability are
# `pallas.tpu.GPUS`' (the devices `ringc check` answers as).
_H100_FACTS = {
    "threads_per_block_limit": 1024, "threads_per_warp": 32,
    "shared_memory_per_block": 48 * 1024, "shared_memory_per_core": 228 * 1024,
    "shared_memory_per_block_optin": 227 * 1024,
    "threads_per_core_limit": 2048, "fpus_per_core": 128,
    "block_dim_limit_x": 2**31 - 1, "block_dim_limit_y": 65535, "block_dim_limit_z": 65535,
    "memory_bandwidth": 3_352_320_000_000, "l2_cache_size": 50 * 1024 * 1024, "clock_rate_ghz": 1.98,
    "device_memory_size": 84_978_434_048, "registers_per_core_limit": 65536, "registers_per_block_limit": 65536,
}
GPU_TARGETS = {"h100": _H100_FACTS}


def target_config(target: str) -> str:
    """The `GpuTargetConfigProto` text XLA compiles `target` ("h100") for."""
    from ..pallas.tpu import GPUS
    gen = GPUS[target]
    major, minor = gen.capability.split(".")
    facts = " ".join(f"{k}: {v}" for k, v in GPU_TARGETS[target].items())
    return (f"gpu_device_info {{ {facts} core_count: {gen.sms} "
            f"cuda_compute_capability {{ major: {major} minor: {minor} }} }} "
            f'platform_name: "CUDA" device_description_str: "{gen.device_kind}"')


def _ptxas() -> str | None:
    """The ptxas Mosaic GPU and XLA will use: JAX's CUDA path (`CUDA_ROOT`, else the
    `nvidia-cuda-nvcc` package), else the PATH."""
    try:
        from jax._src import lib
        root = getattr(lib, "cuda_path", None)
    except ImportError:
        root = None
    if root and os.path.isfile(os.path.join(root, "bin", "ptxas")):
        return os.path.join(root, "bin", "ptxas")
    return shutil.which("ptxas")


def hopper_gpus() -> list:
    """The Hopper GPUs (compute capability 9.x) this machine's JAX sees: none without the CUDA
    plugin or a GPU."""
    try:
        import jax
        devices = jax.devices("gpu")
    except Exception:  # no plugin, no driver, or no GPU: none
        return []
    return [d for d in devices if str(getattr(d, "compute_capability", "")).startswith("9")]


def gpu_available() -> bool:
    """Whether JAX's CUDA plugin (`jax-cuda12-plugin`, `jax-cuda12-pjrt`) and a ptxas are
    installed (`pip install "ringc[gpu]"`)."""
    return (importlib.util.find_spec("jax_plugins") is not None
            and importlib.util.find_spec("jax_plugins.xla_cuda12") is not None
            and importlib.util.find_spec("jax_cuda12_plugin") is not None and _ptxas() is not None)


# ------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class KernelFigures:
    """One Mosaic GPU kernel of a compiled program, per block (a CUDA thread block)."""
    name: str
    file: str | None
    line: int
    launch_smem: int                  # dynamic shared memory the kernel's gpu.launch asks for, bytes
    registers: int | None = None      # per thread, ptxas -v
    spill_stores: int | None = None   # bytes, ptxas -v
    spill_loads: int | None = None
    stack_frame: int | None = None
    static_smem: int | None = None    # `.shared` the PTX declares, ptxas -v
    barriers: int | None = None       # named barriers, ptxas -v
    arch: str | None = None           # what ptxas compiled for (sm_90a)

    @property
    def smem(self) -> int:
        """Shared memory per block: the launch's dynamic part plus the static part."""
        return self.launch_smem + (self.static_smem or 0)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "file": self.file, "line": self.line, "arch": self.arch,
                "registers": self.registers, "spill_stores": self.spill_stores, "spill_loads": self.spill_loads,
                "stack_frame": self.stack_frame, "smem_per_block": self.smem, "launch_smem": self.launch_smem,
                "static_smem": self.static_smem, "barriers": self.barriers}

    def text(self, compiled: bool = True) -> str:
        where = f"{os.path.basename(self.file)}:{self.line}" if self.file else "?"
        smem = f"smem {self.smem} B/block"
        if self.registers is None:
            why = ("no ptxas report: the CUDA plugin compiled this kernel earlier in the process, from its cache"
                   if compiled else "registers and spills: not compiled (lowered only)")
            return f"{self.name} ({where}): {smem} ({why})"
        return (f"{self.name} ({where}) {self.arch}: {self.registers} registers, spills {self.spill_stores} B "
                f"stores / {self.spill_loads} B loads, {smem}, stack {self.stack_frame} B, "
                f"{self.barriers} barriers")


@dataclass
class GpuCompileResult:
    """One captured kernel call of a file, lowered (and compiled) for N GPUs of `target`."""
    file: str
    line: int                   # the file's line that made the call
    name: str
    target: str
    devices: int
    ok: bool
    compiled: bool              # False: lowered to StableHLO only (no plugin, or lower_only)
    lower_seconds: float
    compile_seconds: float = 0.0
    kernels: list[KernelFigures] = field(default_factory=list)
    stablehlo_calls: int = 0    # mosaic_gpu_v2 custom calls in the lowered program
    error: ScheduleError | None = None
    raw_error: str | None = None
    assumes: list[str] = field(default_factory=list)
    device_kind: str = ""

    def to_json(self, verbose: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "file": self.file, "line": self.line, "name": self.name, "target": self.target,
            "device_kind": self.device_kind, "devices": self.devices, "ok": self.ok, "compiled": self.compiled,
            "lower_seconds": round(self.lower_seconds, 4), "compile_seconds": round(self.compile_seconds, 4),
            "mosaic_gpu_calls": self.stablehlo_calls, "kernels": [k.to_json() for k in self.kernels],
            "assumes": list(self.assumes)}
        if self.error is not None:
            e = self.error
            out["error"] = {"kind": getattr(e, "kind", "compiler_error"), "message": e.message, "file": e.file,
                            "line": e.line, "fix": e.fix}
            if verbose:
                out["raw_error"] = self.raw_error
        return out

    def to_text(self, verbose: bool = False) -> str:
        what = "compile" if self.compiled else "lowered only"
        head = (f"{self.file}:{self.line} {self.name} {self.target} ({self.devices} x {self.device_kind}, "
                f"N={self.devices}): {'ok' if self.ok else 'FAILED'}  {what} "
                f"{self.lower_seconds + self.compile_seconds:.2f}s")
        if not self.ok:
            return "\n".join([head, *error_lines(self.error, self.raw_error, verbose)])
        return "\n".join([head] + ["  " + k.text(self.compiled) for k in self.kernels])


# ------------------------------------------------------------------------------- ptxas


_PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?")


def ptxas_report(text: str) -> dict[str, dict[str, Any]]:
    """ptxas -v's report, per entry function: `arch`, `registers`, `barriers`, `static_smem`,
    `stack_frame`, `spill_stores`, `spill_loads` (bytes)."""
    out: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        if m := _PTXAS_ENTRY.search(line):
            current = out.setdefault(m.group(1), {"arch": m.group(2)})
        elif current is not None and (m := _PTXAS_FRAME.search(line)):
            current.update(stack_frame=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        elif current is not None and (m := _PTXAS_USED.search(line)):
            current.update(registers=int(m.group(1)), barriers=int(m.group(2) or 0),
                           static_smem=int(m.group(3) or 0))
    return out


# ------------------------------------------------------------------------------- lowering


def _mosaic_calls(lowered: Any) -> list[tuple[str, int, bytes]]:
    """(module name, dynamic shared memory of its launch, the payload's SHA-256) of every
    `mosaic_gpu_v2` custom call in a program lowered for CUDA, in program order. The payload
    is Mosaic GPU's serialized module (`jax.experimental.mosaic.gpu.core`); read back, its
    `gpu.launch` holds the bytes."""
    import hashlib
    from jax._src.interpreters import mlir as jmlir
    from jax._src.lib.mlir import ir
    from jax.experimental.mosaic.gpu import core as mgpu_core, dialect

    payloads: list[bytes] = []

    def walk(op: Any) -> None:
        for region in op.regions:
            for block in region.blocks:
                for o in block.operations:
                    o = o.operation
                    if (o.name == "stablehlo.custom_call"
                            and ir.StringAttr(o.attributes["call_target_name"]).value == "mosaic_gpu_v2"):
                        config = ir.DictAttr(o.attributes["mhlo.backend_config"])
                        payloads.append(ir.StringAttr(config["module"]).value_bytes)
                    walk(o)

    walk(lowered.compiler_ir("stablehlo").operation)
    out = []
    ctx = jmlir.make_ir_context()
    dialect.register_dialect(ctx)
    ctx.allow_unregistered_dialects = True
    with ctx, ir.Location.unknown():
        for blob in payloads:
            module = mgpu_core._run_serde_pass(ir.Module.parse(blob), serialize=False)
            name = ir.StringAttr(module.operation.attributes["sym_name"]).value \
                if "sym_name" in module.operation.attributes else "kernel"
            smem = [0]

            def launches(op: Any) -> None:
                for region in op.regions:
                    for block in region.blocks:
                        for o in block.operations:
                            o = o.operation
                            if o.name == "gpu.launch":
                                size = o.operands[len(o.operands) - 1].owner
                                smem[0] = max(smem[0], ir.IntegerAttr(size.attributes["value"]).value)
                            launches(o)

            launches(module.operation)
            out.append((name, smem[0], hashlib.sha256(blob).digest()))
    return out


def lower_for_cuda(fn: Any, args: list[Any]) -> Any:
    """`fn` (a jittable function over CPU devices) lowered to StableHLO for CUDA; no plugin needed."""
    import jax
    return jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",))


# ------------------------------------------------------------------------------- compiling


@contextlib.contextmanager
def _stderr_to(path: str) -> Iterator[None]:
    """The process's stderr (file descriptor 2: XLA's and the plugin's C++ logging) goes to
    `path` while inside: their start-up notes (no CUDA driver) are not ringc's output, and a
    failure's are kept for --verbose."""
    import sys
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


@contextlib.contextmanager
def quiet_plugin() -> Iterator[None]:
    """Around `import jax` where the CUDA plugin is installed: its start-up log lines on a
    machine without a CUDA driver ("Could not find cuda drivers ...") go nowhere."""
    with tempfile.TemporaryDirectory(prefix="ringc-mgpu-") as tmp, _stderr_to(os.path.join(tmp, "log")):
        yield


# ptxas' report of every kernel compiled in this process, by the SHA-256 of its Mosaic GPU
# module: the CUDA plugin compiles a kernel it has compiled before from its own cache, without
# running ptxas again (so without a report).
_PTXAS_SEEN: dict[bytes, dict[str, Any]] = {}

_TOPOLOGIES: dict[tuple[str, int], tuple] = {}


def gpu_devices(target: str, n: int, log: str) -> tuple:
    """n compile-only GPUs of `target` on one host (topology 1x1xN), in id order."""
    key = (target, n)
    if key not in _TOPOLOGIES:
        from jax.experimental import topologies
        with _stderr_to(log):
            topo = topologies.get_topology_desc(platform="cuda", target_config=target_config(target),
                                                topology=f"1x1x{n}")
        _TOPOLOGIES[key] = tuple(sorted(topo.devices, key=lambda d: d.id))
    return _TOPOLOGIES[key]


def _on_devices(closed: Any, args: list[Any], devices: tuple) -> tuple[Any, list[Any]]:
    """The captured program and its argument shapes with every mesh of CPU devices replaced by
    the same mesh over `devices` (the mesh's CPU devices in id order become devices 0, 1, ...):
    what `shard_map` and the arguments' shardings name."""
    import jax
    import numpy as np
    from jax._src import core
    from jax.sharding import Mesh, NamedSharding

    def mesh(m: Mesh) -> Mesh:
        if not all(d is not None and getattr(d, "platform", None) == "cpu" for d in m.devices.flat):
            return m
        rank = {i: k for k, i in enumerate(sorted(d.id for d in m.devices.flat))}
        grid = np.array([devices[rank[d.id]] for d in m.devices.flat], dtype=object).reshape(m.devices.shape)
        return Mesh(grid, m.axis_names, axis_types=m.axis_types)

    def value(v: Any) -> Any:
        if isinstance(v, Mesh):
            return mesh(v)
        if isinstance(v, NamedSharding):
            return NamedSharding(mesh(v.mesh), v.spec, memory_kind=v.memory_kind)
        if isinstance(v, core.ClosedJaxpr):
            return core.ClosedJaxpr(jaxpr(v.jaxpr), v.consts)
        if isinstance(v, core.Jaxpr):
            return jaxpr(v)
        if isinstance(v, tuple):
            return tuple(value(x) for x in v)
        return v

    def jaxpr(j: Any) -> Any:
        return j.replace(eqns=[e.replace(params={k: value(p) for k, p in e.params.items()}) for e in j.eqns])

    shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=value(getattr(a, "sharding", None)))
              for a in args]
    return core.ClosedJaxpr(jaxpr(closed.jaxpr), closed.consts), shapes


def _devices_of(closed: Any, args: list[Any]) -> int:
    """How many devices the captured program runs on: its largest mesh (a `shard_map`'s, or
    an argument's sharding's)."""
    from jax.sharding import Mesh
    from ..pallas.jaxprs import walk_eqns
    sizes = [p.devices.size for e in walk_eqns(closed.jaxpr) for p in e.params.values() if isinstance(p, Mesh)]
    sizes += [len(getattr(getattr(a, "sharding", None), "device_set", ())) for a in args]
    return max(sizes, default=1) or 1


def _kernel_places(closed: Any, path: str | None) -> list[tuple[str, str | None, int]]:
    """(name, file, line) of each kernel call in the program, in program order: where the
    kernel is defined (`program.kernel_location`)."""
    from ..pallas.jaxprs import KERNEL_CALLS, walk_eqns
    from ..pallas.program import kernel_location
    out = []
    for e in walk_eqns(closed.jaxpr):
        if e.primitive.name in KERNEL_CALLS:
            loc = kernel_location(e)
            name = str(e.params.get("name") or getattr(e.params.get("name_and_src_info"), "name", "") or "kernel")
            out.append((name, loc.file or path, int(loc)))
    return out


def _smem_scratch(closed: Any) -> list[tuple[str, int]]:
    """(`dtype[shape]`, bytes) of every SMEM scratch buffer of the program's kernels, largest
    first: the refs `plgpu.kernel` allocates for the kernel body (its `scratch_types`)."""
    import math
    import numpy as np
    from ..pallas.jaxprs import KERNEL_CALLS, kernel_jaxpr, walk_eqns
    out = []
    for e in walk_eqns(closed.jaxpr):
        if e.primitive.name not in KERNEL_CALLS:
            continue
        for inner in getattr(kernel_jaxpr(e), "eqns", ())[:1]:
            if inner.primitive.name != "run_scoped":
                continue
            for v in inner.params["jaxpr"].invars:
                aval = v.aval
                shaped = getattr(aval, "inner_aval", None)
                if "smem" not in str(getattr(aval, "memory_space", "")).lower() or shaped is None:
                    continue
                try:
                    size = math.prod(shaped.shape) * np.dtype(shaped.dtype).itemsize
                except TypeError:  # not an array dtype (a barrier)
                    continue
                out.append((f"{shaped.dtype}[{','.join(map(str, shaped.shape))}]", size))
    return sorted(out, key=lambda b: -b[1])


def _user_line(e: BaseException, files: set[str]) -> tuple[str, int] | None:
    """The user's file and line a lowering error names: the last frame in one of `files` of
    its traceback or of a traceback it was raised from (JAX chains the user's stack of the
    equation it was lowering, `JaxStackTraceBeforeTransformation`), else a `file.py:LINE` in
    its message."""
    import traceback
    seen, chain = set(), []
    ex: BaseException | None = e
    while ex is not None and id(ex) not in seen:
        seen.add(id(ex))
        chain.append(ex)
        ex = ex.__cause__ or ex.__context__
    for ex in chain:
        frames = [f for f in traceback.extract_tb(ex.__traceback__) if os.path.abspath(f.filename) in files]
        if frames:
            return frames[-1].filename, frames[-1].lineno or 0
    for m in re.finditer(r"([^\s:\"'()]+\.py):(\d+)", str(e)):
        if m.group(1) in files or os.path.abspath(m.group(1)) in files:
            return m.group(1), int(m.group(2))
    return None


_KNOWN_ERRORS = (  # (kind of `errors.KINDS`, the compiler's words, what ringc says and the fix)
    ("smem_overflow", re.compile(r"exceeds available shared memory: smem_bytes=(\d+) > max_smem_bytes=(\d+)"),
     lambda m: (f"the kernel's shared memory ({int(m.group(1))} bytes per block) exceeds the H100's "
                f"{int(m.group(2))} bytes per block",
                "shrink the SMEM scratch (plgpu.SMEM shapes, fewer pipeline stages, smaller tiles)")),
    ("unsupported", re.compile(r"Unimplemented primitive in Pallas Mosaic GPU lowering: (\w+) for lowering semantics "
                r"(?:LoweringSemantics\.)?(\w+)"),
     lambda m: (f"Mosaic GPU cannot lower `{m.group(1)}` in a kernel ({m.group(2)} lowering semantics)",
                f"compute the {m.group(1)} outside the kernel, or write it with operations Mosaic GPU lowers")),
    ("compiler_error", re.compile(r"ptxas[^\n]*error[^\n]*", re.I),
     lambda m: (f"ptxas rejected the kernel: {m.group(0).strip()}", "see --verbose for ptxas' full output")),
)


def _explain(e: BaseException, raw: str, places: list[tuple[str, str | None, int]], path: str,
             capture_line: int, closed: Any = None) -> ScheduleError:
    """A lowering or compile failure at the user's line, in one message with a fix."""
    from .errors import CompileError
    files = {os.path.abspath(f) for _, f, _ in places if f} | {os.path.abspath(path)}
    where = _user_line(e, files)
    if where is None and places and places[0][1]:
        where = (places[0][1], places[0][2])
    file, line = where if where else (path, capture_line)
    first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
    for kind, pattern, say in _KNOWN_ERRORS:
        m = pattern.search(raw) or pattern.search(str(e))
        if m:
            message, fix = say(m)
            if kind == "smem_overflow" and closed is not None and (scratch := _smem_scratch(closed)):
                from ..units import size_text
                message += "; its SMEM scratch: " + ", ".join(f"{t} ({size_text(b, decimals=1)})" for t, b in scratch)
            return CompileError(kind, message + _schedule_site(e, path), file=file, line=line, fix=fix)
    return CompileError("compiler_error", f"{type(e).__name__}: {first[:400]}{_schedule_site(e, path)}", file=file,
                        line=line, fix="see the compiler's message (--verbose); ringc check FILE checks the kernel's logic")


def _schedule_site(e: BaseException, path: str) -> str:
    """For a module `ringc emit --target mgpu` wrote: where in its schedule the failing code
    comes from (`errors.schedule_line`), as the TPU target says it; else nothing."""
    from .errors import schedule_line
    if not _is_emitted_module(path) or (found := schedule_line(e, path)) is None:
        return ""
    source = re.search(r'^SOURCE = "([^"]*)"', _read(path), re.M)
    line, copy = found
    return (f" (from {source.group(1) if source else 'the schedule'} line {line}"
            + (f", copy `{copy}`" if copy else "") + ")")


def compile_closed(closed: Any, args: list[Any], *, target: str = "h100", path: str, line: int = 0,
                   name: str = "kernel", compile: bool | None = None,
                   assumes: list[str] | None = None) -> GpuCompileResult:
    """One captured program (a ClosedJaxpr over a mesh of CPU devices, and its arguments):
    lowered for CUDA, then, when the plugin is installed (`compile` None) or asked for
    (`compile` True), compiled for the mesh's size of `target` GPUs."""
    from jax._src import core
    from ..pallas.tpu import GPUS
    if compile is None:
        compile = gpu_available()
    elif compile and not gpu_available():
        raise ScheduleError(GPU_MISSING, file=path, fix=GPU_FIX)
    n = _devices_of(closed, args)
    places = _kernel_places(closed, path)
    result = GpuCompileResult(path, line, name, target, n, False, compile, 0.0, assumes=list(assumes or []),
                              device_kind=GPUS[target].device_kind)
    with tempfile.TemporaryDirectory(prefix="ringc-mgpu-") as tmp:
        log = os.path.join(tmp, "stderr.log")
        start = time.perf_counter()
        try:
            lowered = lower_for_cuda(core.jaxpr_as_fun(closed), args)
            calls = _mosaic_calls(lowered)
        except Exception as e:  # Pallas and Mosaic GPU lowering raise many exception types
            result.lower_seconds = time.perf_counter() - start
            result.error, result.raw_error = _explain(e, "", places, path, line, closed), _raw(e)
            return result
        result.lower_seconds = time.perf_counter() - start
        result.stablehlo_calls = len(calls)
        figures: dict[str, dict[str, Any]] = {}
        if compile:
            dump = os.path.join(tmp, "dump")
            os.mkdir(dump)
            try:
                devices = gpu_devices(target, n, log)
            except Exception as e:  # the plugin failed to start: an install problem, not the kernel's
                first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
                raise ScheduleError(f"JAX's CUDA plugin cannot describe {n} compile-only {target.upper()}s: {first}",
                                    file=path, fix=f"{GPU_FIX}; the plugin's version must be jax's") from None
            start = time.perf_counter()
            try:
                moved, shapes = _on_devices(closed, args, devices)
                import jax
                with _dumping_ptxas(dump), _stderr_to(log):
                    jax.jit(core.jaxpr_as_fun(moved)).trace(*shapes).lower().compile()
            except Exception as e:  # XLA, Mosaic GPU and ptxas report through many exception types
                result.compile_seconds = time.perf_counter() - start
                raw = _read(log)
                result.error = _explain(e, raw, places, path, line, closed)
                result.raw_error = _raw(e) + ("\n" + raw if raw else "")
                return result
            result.compile_seconds = time.perf_counter() - start
            for report in sorted(glob.glob(os.path.join(dump, "*.ptxas"))):
                figures.update(ptxas_report(_read(report)))
    kernels = []
    for i, (module, smem, key) in enumerate(calls):
        kname, kfile, kline = places[i] if i < len(places) else (module, path, line)
        found = figures.get(f"{module}_mosaic_gpu_kernel") or (list(figures.values())[i]
                                                                if len(figures) == len(calls) else {})
        if found:
            _PTXAS_SEEN[key] = found
        elif compile:  # compiled before in this process: the plugin's kernel cache skipped ptxas
            found = _PTXAS_SEEN.get(key, {})
        kernels.append(KernelFigures(kname, kfile, kline, smem, **found))
    result.kernels, result.ok = kernels, True
    return result


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _raw(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


@contextlib.contextmanager
def _dumping_ptxas(directory: str) -> Iterator[None]:
    """Mosaic GPU writes ptxas -v's report of each kernel it compiles into `directory`
    (`MOSAIC_GPU_DUMP_PTXAS`, `MOSAIC_GPU_DUMP_TO`: read when a kernel is compiled)."""
    keys = ("MOSAIC_GPU_DUMP_PTXAS", "MOSAIC_GPU_DUMP_TO")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ["MOSAIC_GPU_DUMP_PTXAS"], os.environ["MOSAIC_GPU_DUMP_TO"] = "1", directory
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ------------------------------------------------------------------------------- front doors


def compile_file(path: str, n: int = DEFAULT_DEVICES, *, target: str = "h100", compile: bool | None = None,
                 entry: str | None = None, args: list | None = None, params: dict | None = None,
                 axis: str | None = None, mesh: tuple | None = None,
                 stubs: tuple[str, ...] = ()) -> list[GpuCompileResult]:
    """`ringc compile FILE.py --target h100 --devices N`: every kernel call the file makes (as
    `ringc check` runs it, on N CPU devices answering as `target`), lowered and compiled."""
    from ..pallas.compat import AliasLog
    from ..pallas.jaxprs import walk_eqns
    from ..pallas.script import run_script
    if target not in GPU_TARGETS:
        raise ScheduleError(f"unknown GPU target {target!r}", file=path, fix=f"use {', '.join(GPU_TARGETS)}")
    if not (entry or args or axis or mesh) and _is_emitted_module(path):
        return [_compile_module(path, n, target=target, compile=compile, params=params or {})]
    script = run_script(path, n, AliasLog(), entry=entry, args=args, params=params, tpu=target, axis=axis,
                        mesh=mesh, stubs=stubs)
    captures = [c for c in script.captures
                if any(e.primitive.name == "mpmd_map" for e in walk_eqns(c.jaxpr.jaxpr))]
    if not captures:
        notes = "; ".join(script.notes[:3])
        raise ScheduleError("the file ran no Mosaic GPU kernel (plgpu.kernel under jit) that ringc could compile"
                            + (f" ({notes})" if notes else ""), file=path,
                            fix="name the function to call and its arrays: --entry NAME --arg x=float32[8*N,128]@x; "
                                "or call ringc.compile.gpu.compile_pallas(fn, args, mesh) from Python")
    return [compile_closed(c.jaxpr, c.args, target=target, path=path, line=c.line, name=c.name, compile=compile,
                           assumes=c.assumes) for c in captures]


def _is_emitted_module(path: str) -> bool:
    """Whether the file follows `ringc emit`'s convention (`build(mesh)`, `make_inputs`), as
    `ringc emit --target mgpu` writes it: compiled through `build` rather than run."""
    from ..pallas.script import is_script, script_source
    source = script_source(path)
    return (not is_script(source) and re.search(r"^def build\(mesh\b", source, re.M) is not None
            and re.search(r"^def make_inputs\(mesh\b", source, re.M) is not None)


def _compile_module(path: str, n: int, *, target: str, compile: bool | None,
                    params: dict) -> GpuCompileResult:
    """A module with `build(mesh)`: `build(mesh, **params)` on n CPU devices answering as
    `target`, traced on `make_inputs`' shapes placed as IN_SPECS, lowered and compiled."""
    import jax
    from ..pallas.compat import AliasLog
    from ..pallas.importer import load_module, placed_inputs
    from ..pallas.tpu import GPUS, answering
    from ..pallas.usererrors import describe_exception, script_line
    module = load_module(path, AliasLog())
    if len(jax.devices()) < n:
        raise ScheduleError(f"{n} devices asked for, {len(jax.devices())} CPU devices here", file=path,
                            fix="run ringc compile in a fresh process (it sets the CPU device count)")
    mesh = jax.make_mesh((n,), (module.AXIS,), devices=jax.devices()[:n])
    try:
        with answering(GPUS[target], n, path):
            fn = module.build(mesh, **params)
            shapes = placed_inputs(module, mesh, jax.eval_shape(lambda: module.make_inputs(mesh, 0, **params)))
            closed = jax.make_jaxpr(fn)(*shapes)
    except ScheduleError:
        raise
    except Exception as e:
        raise ScheduleError(f"build/make_inputs failed: {describe_exception(e, path)}", file=path,
                            line=script_line(e, path), fix="check --param values and N") from None
    line = next((i for i, text in enumerate(_read(path).splitlines(), 1) if text.startswith("def build(")), 0)
    return compile_closed(closed, shapes, target=target, path=path, line=line,
                          name=getattr(module, "NAME", Path(path).stem), compile=compile)


def compile_pallas(fn: Any, args: tuple, *, target: str = "h100", compile: bool | None = None,
                   path: str | None = None) -> GpuCompileResult:
    """`fn` (a function over a mesh of CPU devices: `jax.shard_map` of a Mosaic GPU kernel, as
    `ringc.check_pallas` takes it) with argument shapes `args`, compiled for `target`. It is
    traced on CPU devices that answer the code of `path` (the kernel's file) as `target`
    (`pallas.tpu.answering`: `core_count` 132 on an H100)."""
    import jax
    from ..pallas.tpu import GPUS, answering
    file = path or getattr(getattr(fn, "__code__", None), "co_filename", None) or "<python>"
    n = max((len(getattr(getattr(a, "sharding", None), "device_set", ())) for a in args), default=1)
    with answering(GPUS[target], n, file):
        closed = jax.make_jaxpr(fn)(*args)
    return compile_closed(closed, list(args), target=target, path=file, name=getattr(fn, "__name__", "kernel"),
                          compile=compile)
