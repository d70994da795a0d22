"""The TPU that ringc's CPU devices answer as while it runs a user's code (`ringc check --tpu`).

Published kernels' setup code asks the devices TPU questions: `device.coords` to lay a mesh
out (`sorted(jax.devices(), key=lambda d: d.coords)`), `device_kind` or
`pltpu.get_tpu_info()` to pick block sizes per generation, `platform == "tpu"`. ringc runs
that code on CPU devices (`script.py`), so while it runs they answer as the TPU generation
the check assumes (`--tpu`, default v5e), from one table, `GENERATIONS`:

- `platform` "tpu", `device_kind` the string JAX reports for the generation (libtpu's own
  devices say "TPU v5 lite", "TPU v5", "TPU v4", "TPU v6 lite": `ringc compile` targets),
  `coords` the device's place in a slice of N chips of that generation (`Generation.shape`,
  x fastest, as libtpu numbers them), `core_on_chip` 0, `num_cores` the TensorCores of one
  JAX device (2 where a chip runs as one megacore device: v4, v5p), `slice_index` 0;
- `pltpu.get_tpu_info()` JAX's own table for that chip (`tpu_info.get_tpu_info_for_chip`),
  `pltpu.is_tpu_device()` True, `jax.default_backend()` "tpu";
- `jax.distributed.initialize()` (a multi-host launch: a pod slice's script calls it before
  anything else) a single host: it returns at once, and the one process owns every device
  (`process_index()` 0 of `process_count()` 1), which is the same mesh of N devices a
  multi-host run builds; the verdict says so.

Only the user's code is answered: the answers are properties of jaxlib's `Device` class,
installed for the run and removed after it, and a question asked from JAX's internals or
ringc's (`Askers`) gets the CPU device's own answer, so sharding, `jax.make_mesh`,
`mesh_utils.create_device_mesh` (its CPU path) and the CPU computations of the script run
as before. (A proxy object in place of the devices cannot work: `jax.device_put` and
`NamedSharding` take jaxlib's `Device` only.) JAX's test helpers (`jax/_src/test_util.py`)
count as the user's side: `jtu.is_device_tpu(5, "e")` reads the stand-in's `device_kind`.

A device attribute ringc does not answer raises `Unanswered` (an AttributeError, so
`hasattr` and `getattr(d, name, default)` probes still work, JAX's own included), which
`script.py` reports, when it escapes the user's code, as an input error naming the attribute
and the line that asked. Hardware ringc does not model at all (Mosaic GPU,
Triton, SparseCore, TensorCore meshes) is refused in one line (`Unsupported`,
`unsupported_in`).
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Iterator

from ..topology import GENERATIONS as _AXES


@dataclass(frozen=True)
class Generation:
    """What a JAX device of one TPU generation answers."""
    name: str          # the --tpu spelling (and `tpu_info.ChipVersion`'s value)
    device_kind: str   # `device.device_kind`, as libtpu's devices of the generation report it
    cores: int         # `device.num_cores`: TensorCores per JAX device (2: one megacore device per chip)
    # A GPU the devices answer as instead (`--gpu`, or a file that imports Mosaic GPU): its
    # platform, `device.core_count` (SMs) and `device.compute_capability`.
    platform: str = "tpu"
    sms: int = 0
    capability: str = ""
    # TPU7x: two JAX devices per chip, one per TensorCore (`core_on_chip` 0 and 1, the same
    # `coords`), its `tpu_info.ChipVersion` spelled "7x", its slices 3-D tori of chips.
    per_chip: int = 1
    chip: str = ""
    slice_axes: int = 0
    # The VMEM a kernel may use when it sets no `vmem_limit_bytes` (the scoped limit), in MiB,
    # as libtpu's compiler held to it on CPU (`get_topology_desc`): whole-array blocks of 8 + 8
    # MiB compile on v5e, v5p and v4, 8 + 8.01 do not (CompileTimeScopedVmemOom); 16 + 16 on
    # v6e, not 16.01 + 16.01; on TPU7x 22 + 22 compile, 23 + 23 do not (the compiler keeps some
    # for itself), taken as 48. `importer.vmem_findings`.
    scoped_vmem_mib: int = 16

    @property
    def gpu(self) -> bool:
        return self.platform == "gpu"

    @property
    def axes(self) -> int:
        """Axes of the generation's slices (2: v5e, v6e; 3: v4, v5p; a GPU's NVSwitch: 1): `ringc.topology`."""
        return 1 if self.gpu else self.slice_axes or _AXES[self.name]

    def shape(self, n: int) -> tuple[int, ...]:
        """The slice of n chips: for a power of two the generation's own slice shapes (v5e
        1x1, 2x2, 2x4, 4x4, 4x8, ...; v5p 2x2x1, 2x2x2, 2x2x4, 2x4x4, 4x4x4, ...: each doubles
        its smallest axis, the last of equal ones), else a line of n chips along x."""
        dims = [1] * self.axes
        if n & (n - 1) or self.gpu:
            dims[0] = n
            return tuple(dims)
        while math.prod(dims) < n:
            if self.axes == 3 and math.prod(dims) < 4:  # 3-D slices start 2x1x1, 2x2x1
                i = 0 if dims[0] == 1 else 1
            else:
                i = max(k for k, d in enumerate(dims) if d == min(dims))
            dims[i] *= 2
        return tuple(dims)

    def chips(self, n: int) -> tuple[int, ...]:
        """The slice of chips that n devices of the generation lay out (`shape`: one device
        per chip, two on TPU7x)."""
        return self.shape(-(-n // self.per_chip))

    def coords(self, index: int, n: int) -> list[int]:
        """Device `index`'s chip coordinates [x, y, z] in `chips(n)`, x fastest (z = 0 on 2-D
        slices), as libtpu lists them: a list, like a TPU device's `coords`."""
        out, index = [], index // self.per_chip
        for d in self.chips(n):
            out.append(index % d)
            index //= d
        return out + [0] * (3 - len(out))

    def tpu_info(self) -> Any:
        """JAX's `TpuInfo` for the generation (VMEM, cores, lanes, ...)."""
        from jax._src.pallas.mosaic import tpu_info
        return tpu_info.get_tpu_info_for_chip(tpu_info.ChipVersion(self.chip or self.name), self.cores)


# One row per generation `--tpu` accepts; device_kind strings as libtpu's compile-only devices
# report them (`jax.experimental.topologies.get_topology_desc("v5e:2x2", platform="tpu")`, the
# devices of `ringc compile`; `tests/test_tpu_answers.py` compares), and as JAX's own tables
# spell them (`tpu_info.chip_version_from_device_kind`, `mesh_utils._TPU_V5_LITE`). v4 and v5p
# chips run as one megacore device of 2 TensorCores, as JAX uses them by default.
GENERATIONS: dict[str, Generation] = {g.name: g for g in (
    Generation("v5e", "TPU v5 lite", 1),
    Generation("v5p", "TPU v5", 2),
    Generation("v4", "TPU v4", 2),
    Generation("v6e", "TPU v6 lite", 1, scoped_vmem_mib=32),
    Generation("v7x", "TPU7x", 1, per_chip=2, chip="7x", slice_axes=3, scoped_vmem_mib=48),
)}
# The GPUs `--gpu` accepts: what JAX's CUDA devices report (H100 SXM: 132 SMs, sm_90; the shipped
# Mosaic GPU kernels read `core_count` for their grid, JAX's tests `compute_capability` to skip).
GPUS: dict[str, Generation] = {g.name: g for g in (
    Generation("h100", "NVIDIA H100 80GB HBM3", 1, platform="gpu", sms=132, capability="9.0"),
)}
GPU_DEFAULT = "h100"
DEFAULT = "v5e"

# The device attributes the stand-ins answer, and every question the verdict lists, in order.
ANSWERED = ("platform", "device_kind", "coords", "core_on_chip", "num_cores", "slice_index")
GPU_ANSWERED = ("platform", "device_kind", "core_count", "compute_capability")
QUESTIONS = (*ANSWERED, "get_tpu_info", *GPU_ANSWERED[2:])


def generation(name: str | None) -> Generation:
    """The row for `--tpu NAME`; ValueError naming the choices for any other name."""
    name = DEFAULT if name is None else name
    if name in GPUS:
        return GPUS[name]
    if name not in GENERATIONS:
        raise ValueError(f"unknown TPU generation {name!r}: choose one of {', '.join(GENERATIONS)} "
                         f"(default {DEFAULT})")
    return GENERATIONS[name]


class Unanswered(AttributeError):
    """A device attribute the stand-ins do not answer, asked at `where`: by the user's code,
    or by JAX's (`by_user` False), which sees the CPU device's own attributes."""

    def __init__(self, name: str, gen: Generation, where: tuple[str, int], by_user: bool):
        super().__init__(f"ringc's stand-in TPU {gen.name} devices do not answer `{name}`"
                         + ("" if by_user else " to JAX's own code"))
        self.name, self.generation, self.where, self.by_user = name, gen, where, by_user


class Unsupported(Exception):
    """The user's code touched hardware ringc does not model (`what` says which)."""

    def __init__(self, what: str, where: tuple[str, int]):
        super().__init__(what)
        self.what, self.where = what, where


@dataclass
class Answers:
    """What the user's code asked while it ran, and what it touched that ringc refuses."""
    generation: Generation
    shape: tuple[int, ...]                     # the slice the devices' coords lay out
    asked: set[str] = field(default_factory=set)
    unsupported: list[Unsupported] = field(default_factory=list)
    distributed: tuple[str, int] | None = None  # where the code called jax.distributed.initialize()
    imported: list[str] = field(default_factory=list)  # names imported from a refused module (`_RefusingModule`)

    def assumptions(self) -> list[str]:
        """The verdict's `assumes:` lines: what the devices answered, if the code asked
        anything, and the single host a multi-host initialization was answered as."""
        out = [] if self.distributed is None else [
            f"a single host: jax.distributed.initialize() (line {self.distributed[1]}) returned at once, one process "
            f"owning all {math.prod(self.shape)} devices (process 0 of 1); a multi-host run's devices form the same "
            "mesh, so its kernels run the same events"]
        if "process_count" in self.asked:
            n = math.prod(self.shape)
            out.append(f"one process per GPU, as a multi-GPU job launches: jax.process_count() answered {n} (the "
                       f"{n} devices), jax.local_device_count() 1, jax.process_index() 0 (the process ringc runs "
                       "every device in)")
        if self.imported:
            out.append(f"the code imports {', '.join(dict.fromkeys(self.imported))}, which ringc does not model; "
                       "a use of it would be refused where it is made (none was, in what ran)")
        asked = self.assumption()
        return out + ([asked] if asked else [])

    def assumption(self) -> str | None:
        """The verdict's `assumes:` line on the devices' answers, if the code asked anything."""
        questions = ", ".join(q for q in QUESTIONS if q in self.asked)
        if not questions:
            return None
        g = self.generation
        if g.gpu:
            return (f"devices answer as {g.device_kind} GPUs (--gpu {g.name}): {g.sms} SMs (core_count), compute "
                    f"capability {g.capability}; the code asked {questions}")
        chips = (f" of chips, {g.per_chip} devices per chip (core_on_chip 0..{g.per_chip - 1}, one per TensorCore; "
                 "ringc checks each device as its own chip: the chip's two TensorCores and the link between them "
                 "are not modelled)" if g.per_chip > 1 else "")
        return (f"devices answer as TPU {g.name} (--tpu): device_kind {g.device_kind!r}, coords of a "
                f"{'x'.join(map(str, self.shape))} slice{chips}, {g.cores} TensorCore{'s' if g.cores > 1 else ''} "
                f"per device; the code asked {questions}")


def _internal_dirs() -> tuple[str, ...]:
    import jax
    import jaxlib
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # ringc/
    return (os.path.join(os.path.dirname(jax.__file__), "_src") + os.sep,
            os.path.dirname(jaxlib.__file__) + os.sep, here + os.sep)


_TEST_HELPERS = os.sep + os.path.join("jax", "_src", "test_util.py")


class Askers:
    """Whether a frame is the user's code (answered) or JAX's or ringc's own (not): code in
    `jax/_src`, jaxlib or ringc is not the user's, except the script itself and JAX's test
    helpers; everything else is (the script's helper modules, the published kernels under
    `jax/experimental/pallas/ops`)."""

    def __init__(self, script: str):
        self.internal = _internal_dirs()
        self.script = os.path.abspath(script)
        self.memo: dict[str, bool] = {}

    def user(self, frame: Any) -> bool:
        name = frame.f_code.co_filename
        known = self.memo.get(name)
        if known is None:
            path = os.path.abspath(name) if not name.startswith("<") else name
            known = self.memo[name] = (path == self.script or path.endswith(_TEST_HELPERS)
                                       or not path.startswith(self.internal))
        return known


# Hardware ringc does not model. A module is replaced, while the user's code runs, by a
# stand-in whose every attribute refuses.
_MODULES = {
    "jax.experimental.pallas.mosaic_gpu": ("Mosaic GPU kernels (jax.experimental.pallas.mosaic_gpu) with devices "
                                           "answering as a TPU: check them with --gpu h100"),
    "jax.experimental.pallas.triton": "Pallas Triton GPU kernels (jax.experimental.pallas.triton) are not supported yet",
    "jax.experimental.pallas.tpu_sc": "SparseCore kernels (jax.experimental.pallas.tpu_sc) are not supported",
}

REFUSAL_TAIL = (": ringc checks Pallas TPU kernels (pallas_call, or pl.kernel over the TensorCore mesh, on one "
                "chip or under shard_map) and multi-GPU Mosaic GPU kernels (plgpu.kernel under shard_map)")


def _caller(depth: int) -> tuple[str, int]:
    frame = sys._getframe(depth + 1)
    return frame.f_code.co_filename, frame.f_lineno


class _RefusingModule(types.ModuleType):
    def __init__(self, name: str, what: str, answers: Answers):
        super().__init__(name)
        self._what, self._answers = what, answers

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        if _importing_a_name(sys._getframe(1)):
            # `from jax.experimental.pallas.triton import CompilerParams` at a module's top (a
            # test module of TPU kernels importing a GPU helper, axlearn's paged KV cache test;
            # sweep 18): the name is a class refused where it is used, not at the import, so
            # the module's TPU kernels still run and are checked
            what, answers = self._what, self._answers
            answers.imported.append(f"`{attr}` from {self.__name__}")

            def refused(cls: Any, *args: Any, **kwargs: Any) -> Any:
                e = Unsupported(what, _caller(1))
                answers.unsupported.append(e)
                raise e
            return type(attr, (), {"__new__": refused, "__module__": self.__name__})
        e = Unsupported(self._what, _caller(1))
        self._answers.unsupported.append(e)
        raise e


def _importing_a_name(frame: Any) -> bool:
    """Whether `frame` is executing `from MODULE import NAME` (the import asks the module for
    the name with getattr)."""
    import dis
    return any(ins.offset == frame.f_lasti and ins.opname == "IMPORT_FROM" for ins in dis.get_instructions(frame.f_code))


def unsupported_use(fn: Any) -> Unsupported | None:
    """Whether the function `fn` (an entry function, before ringc calls it) reads a module
    ringc refuses (`plsc`, `plgpu`: a stand-in while the user's code runs), in its own code or
    a function nested in it: the refusal at the first line that reads it, or None. An entry
    that launches a SparseCore kernel needs arguments ringc cannot make up (`bt`, `top_k`) and
    fails on made-up ones before it reaches the kernel; the refusal is the answer."""
    import dis
    import inspect
    target = inspect.unwrap(fn)
    code, env = getattr(target, "__code__", None), getattr(target, "__globals__", {})
    if code is None:
        return None
    for c in nested_codes(code):
        for ins in dis.get_instructions(c):
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(env.get(ins.argval), _RefusingModule):
                line = ins.positions.lineno if ins.positions and ins.positions.lineno else c.co_firstlineno
                return Unsupported(env[ins.argval]._what, (c.co_filename, line))
    return None


def nested_codes(code: Any) -> Iterator[Any]:
    """A function's code object, then those of the functions defined in it, outer first."""
    import inspect
    todo = [code]
    while todo:
        c = todo.pop(0)
        yield c
        todo.extend(k for k in c.co_consts if inspect.iscode(k))


def core_mesh(eqn: Any) -> str | None:
    """What refuses a kernel call over a TPU core mesh that ringc does not model (in jax 0.10
    an `mpmd_map`, the primitive of Mosaic GPU's `plgpu.kernel` too): a SparseCore mesh, or a
    TensorCore mesh of more than one axis; None for a GPU mesh or a one-axis TensorCore mesh
    (`cores.run_cores`)."""
    from .cores import mesh_of
    if mesh_of(eqn) is not None:
        return None
    for mesh in eqn.params.get("meshes") or ():
        # a TPU mesh's class is in jax._src.pallas.mosaic (Mosaic GPU's `plgpu.Mesh`: .mosaic_gpu)
        if ".pallas.mosaic." in type(mesh).__module__ + ".":
            return f"kernels over a {type(mesh).__name__} (pl.kernel on TPU cores) are not supported yet"
    return None


def mosaic_gpu_call(eqn: Any) -> bool:
    """A `pallas_call` for Mosaic GPU: its compiler params are `plgpu.CompilerParams`, or its
    operands and scratch live in Mosaic GPU's memory spaces (`plgpu.GMEM`, `plgpu.SMEM`, a
    `plgpu.SemaphoreType`): JAX's 0.8-0.9 distributed GPU tests write them without params."""
    if eqn.primitive.name != "pallas_call":
        return False
    params = eqn.params.get("compiler_params")
    if params is not None and ".mosaic_gpu." in type(params).__module__:
        return True
    kernel = eqn.params["jaxpr"]
    return any(".mosaic_gpu." in type(getattr(v.aval, "memory_space", None)).__module__
               or ".mosaic_gpu." in type(getattr(v.aval, "dtype", None)).__module__ for v in kernel.invars)


def unsupported_in(jaxpr: Any) -> str | None:
    """What a captured call runs that ringc does not model: a TensorCore or SparseCore mesh
    (`core_map`, a `pallas_call` over a mesh), a GPU backend's compiler params, SparseCore
    grid semantics; None for a Pallas TPU kernel."""
    from .jaxprs import walk_eqns
    for e in walk_eqns(jaxpr):
        name = e.primitive.name
        if name in ("mpmd_map", "core_map") and core_mesh(e):
            return core_mesh(e)
        if name != "pallas_call":
            continue
        params = e.params.get("compiler_params")
        backend = type(params).__module__ if params is not None else ""  # jax._src.pallas.<backend>.core
        if mosaic_gpu_call(e):   # checked as a Mosaic GPU launch of its grid's blocks (`mgpu.run_launch`)
            continue
        if ".triton." in backend:
            return "Pallas Triton GPU kernels are not supported yet"
        if e.params.get("mesh") is not None:
            return f"kernels over a {type(e.params['mesh']).__name__} (pl.kernel, pl.core_map) are not supported"
        if any("SUBCORE" in str(s) for s in getattr(params, "dimension_semantics", None) or ()):
            return "SparseCore grids (SUBCORE_PARALLEL) are not supported"
    return None


@contextlib.contextmanager
def answering(gen: Generation, n: int, script: str, shape: tuple[int, ...] | None = None) -> Iterator[Answers]:
    """While the block runs, CPU devices 0..n-1 answer the user's code as `gen` (module
    docstring), and out-of-scope hardware refuses; everything is put back after. `shape`:
    the slice their `coords` lay out (`--topology v5e:4x2`), x fastest; default `gen.shape(n)`."""
    import jax
    from jax._src.pallas.mosaic import tpu_info
    from jax.experimental.pallas import tpu as pltpu
    answers = Answers(gen, tuple(shape) if shape and math.prod(shape) == n else gen.chips(n))
    askers = Askers(script)
    device = type(jax.devices()[0])
    names = GPU_ANSWERED if gen.gpu else ANSWERED
    own = {name: device.__dict__.get(name, _MISSING) for name in (*names, "__getattr__")}
    own_getattr = own["__getattr__"] if own["__getattr__"] is not _MISSING else _no_attribute

    def original(d: Any, name: str) -> Any:
        return own_getattr(d, name) if own[name] is _MISSING else own[name].__get__(d)

    def stand_in(d: Any) -> bool:
        return original(d, "platform") == "cpu" and d.id < n

    def answered(name: str) -> property:
        def get(d: Any) -> Any:
            if not (stand_in(d) and askers.user(sys._getframe(1))):
                return original(d, name)  # (an AttributeError goes on to `unanswered`)
            answers.asked.add(name)
            if gen.gpu:
                return {"platform": "gpu", "device_kind": gen.device_kind, "core_count": gen.sms,
                        "compute_capability": gen.capability}[name]
            return {"platform": "tpu", "device_kind": gen.device_kind,
                    "coords": _coords(d.id // gen.per_chip, answers.shape), "core_on_chip": d.id % gen.per_chip,
                    "num_cores": gen.cores, "slice_index": 0}[name]
        return property(get)

    def unanswered(d: Any, name: str) -> Any:
        try:
            return own_getattr(d, name)
        except AttributeError:
            frame = sys._getframe(1)  # (also where a getter of `answered` raised: the code that asked)
            if (not name.startswith("_") and not stand_in(d) and askers.user(frame)
                    and original(d, "platform") == "cpu"):  # a CPU device past the n the code runs on
                raise AttributeError(f"device {d.id} is not one of the {n} devices ringc runs the code on "
                                     f"(--devices {n}), so it does not answer `{name}` as a TPU {gen.name} "
                                     "device") from None
            if name.startswith("_") or not stand_in(d):
                raise
            raise Unanswered(name, gen, (frame.f_code.co_filename, frame.f_lineno), askers.user(frame)) from None

    def get_tpu_info() -> Any:
        answers.asked.add("get_tpu_info")
        return gen.tpu_info()

    def is_tpu_device() -> bool:
        answers.asked.add("platform")
        return not gen.gpu

    default_backend = jax.default_backend

    def initialize(*args: Any, **kwargs: Any) -> None:
        answers.distributed = answers.distributed or _caller(1)

    def backend() -> str:
        if not askers.user(sys._getframe(1)):
            return default_backend()
        answers.asked.add("platform")
        return gen.platform

    from jax.extend import backend as jex_backend
    get_backend = jex_backend.get_backend

    class Backend:
        """The backend as the user's code sees it (`jax.extend.backend.get_backend()`, the old
        `jax.lib.xla_bridge.get_backend()`): its platform the generation's, the rest its own."""

        def __init__(self, real: Any):
            self._real = real

        def __getattr__(self, name: str) -> Any:
            return getattr(self._real, name)

        @property
        def platform(self) -> str:
            answers.asked.add("platform")
            return gen.platform

    def user_backend(*args: Any, **kwargs: Any) -> Any:
        real = get_backend(*args, **kwargs)
        return Backend(real) if askers.user(sys._getframe(1)) else real

    make_cores = pltpu.create_tensorcore_mesh

    def tensorcore_mesh(axis_name: str, devices: Any = None, num_cores: int | None = None) -> Any:
        # JAX asks a device (a CPU one, or the abstract mesh's) for `num_cores`: the TPU's answer
        if num_cores is None and devices is None:
            answers.asked.add("num_cores")
            num_cores = gen.cores
        return make_cores(axis_name, devices, num_cores)

    def per_gpu_process(original: Any, value: int) -> Any:
        """`original` (jax.process_count, local_device_count) answered `value` when the
        user's code asks: Mosaic GPU code assumes one process per GPU (JAX's collective
        matmul at 0.7-0.8: "The kernel only supports one device per process"; its tests
        skip on one process)."""
        def answer(*args: Any, **kwargs: Any) -> int:
            if not askers.user(sys._getframe(1)):
                return original(*args, **kwargs)
            answers.asked.add("process_count")
            return value
        return answer

    patches: list[tuple[Any, str, Any]] = [
        *((device, name, answered(name)) for name in names), (device, "__getattr__", unanswered),
        (pltpu, "get_tpu_info", get_tpu_info), (pltpu, "is_tpu_device", is_tpu_device),
        (pltpu, "create_tensorcore_mesh", tensorcore_mesh),
        (jax, "default_backend", backend), (jex_backend, "get_backend", user_backend),
        (jax.distributed, "initialize", initialize)]
    refused = {k: v for k, v in _MODULES.items() if not (gen.gpu and k == "jax.experimental.pallas.mosaic_gpu")}
    modules = {name: sys.modules.get(name) for name in refused}
    for name, what in refused.items():
        parent, leaf = name.rsplit(".", 1)
        stand = sys.modules[name] = _RefusingModule(name, what, answers)  # `import ... as plgpu` finds it
        patches.append((sys.modules[parent], leaf, stand))
    if gen.gpu:
        patches += [(jax, "process_count", per_gpu_process(jax.process_count, n)),
                    (jax, "local_device_count", per_gpu_process(jax.local_device_count, 1))]
    if gen.gpu:  # JAX's tests ask CUDA whether the GPUs support multicast (`cuda_versions` is None on CPU)
        import jax._src.lib as jaxlib_lib
        if getattr(jaxlib_lib, "cuda_versions", None) is None:
            patches.append((jaxlib_lib, "cuda_versions", types.SimpleNamespace(
                cuda_supports_multicast=lambda *_: True, cuda_runtime_get_version=lambda: 12080,
                cuda_driver_get_version=lambda: 12080)))
    saved = [(obj, attr, obj.__dict__.get(attr, _MISSING)) for obj, attr, _ in patches]
    registry = tpu_info.registry.get("cpu", _MISSING)
    try:
        for obj, attr, value in patches:
            setattr(obj, attr, value)
        if not gen.gpu:
            tpu_info.registry["cpu"] = gen.tpu_info  # JAX's own tracing asks `tpu_info.get_tpu_info()`
        tpu_info.get_tpu_info.cache_clear()
        yield answers
    finally:
        for obj, attr, value in reversed(saved):
            if value is _MISSING:
                delattr(obj, attr)
            else:
                setattr(obj, attr, value)
        for name, module in modules.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
        if registry is _MISSING:
            tpu_info.registry.pop("cpu", None)
        else:
            tpu_info.registry["cpu"] = registry
        tpu_info.get_tpu_info.cache_clear()


def _coords(index: int, shape: tuple[int, ...]) -> list[int]:
    """Device `index`'s chip coordinates [x, y, z] in a slice of `shape`, x fastest (z = 0 on
    2-D slices): `Generation.coords` on the slice checked on."""
    out = []
    for d in shape:
        out.append(index % d)
        index //= d
    return out + [0] * (3 - len(out))


def _no_attribute(d: Any, name: str) -> Any:
    raise AttributeError(f"'{type(d).__name__}' object has no attribute '{name}'")


_MISSING = object()


def abstract_device(gen: Generation) -> Any:
    """JAX's abstract device for `gen`, for meshes ringc traces on without devices."""
    from jax._src.mesh import AbstractDevice
    return AbstractDevice(gen.device_kind, gen.cores, "tpu")
