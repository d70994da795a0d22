"""The runtime helpers of every emitted kernel module, as real, importable, tested Python.

`ringc.codegen.pallas` copies the helpers a module uses into it by source (read with `ast`
from this file, so emitting needs no jax import), in the order they appear here, so the
emitted module stays self-contained. Each helper works on Python ints (giving Python
values, computed at trace time) and on traced int32/bool scalars.

The helpers read the emitted module's own constants `NAME`, `AXIS` and `PARAMS`; the values
below stand in for them so this module can be imported and tested on its own (tests set
them). `_device_axes` is the variant of `_device` for a schedule over several mesh axes: it
is emitted under the name `_device`.
"""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec

# Stand-ins for the emitted module's constants (see the module docstring).
NAME = "runtime"
AXIS = "x"
PARAMS: dict = {}
DATA: tuple = ()
CHECKED: list | None = None
SOURCE = "runtime.yaml"
SCHEDULE = None


def _mod(a, b):
    """`a % b` with the sign of `b` (so `(me - 1) % N` is a device index)."""
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    return lax.rem(lax.rem(a, b) + b, b)


def _floordiv(a, b):
    """`a // b` rounded towards minus infinity."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    return lax.div(a - _mod(a, b), b)


def _and(a, b):
    """Logical and; Python bools stay Python bools, so `pl.when` can decide statically."""
    if isinstance(a, int) and isinstance(b, int):
        return bool(a) and bool(b)
    return jnp.logical_and(a, b)


def _or(a, b):
    """Logical or; Python bools stay Python bools, so `pl.when` can decide statically."""
    if isinstance(a, int) and isinstance(b, int):
        return bool(a) or bool(b)
    return jnp.logical_or(a, b)


def _not(a):
    """Logical not; a Python bool stays a Python bool."""
    if isinstance(a, int):
        return not a
    return jnp.logical_not(a)


def _min(*args):
    """Minimum; of Python ints, a Python int."""
    if all(isinstance(a, int) for a in args):
        return min(args)
    return functools.reduce(jnp.minimum, args)


def _max(*args):
    """Maximum; of Python ints, a Python int."""
    if all(isinstance(a, int) for a in args):
        return max(args)
    return functools.reduce(jnp.maximum, args)


def _select(cond, a, b):
    """`a if cond else b`: on a Python bool, a Python choice (a Python value stays one);
    on a traced condition, `jnp.where`. Both branches are evaluated (they are arguments)."""
    if isinstance(cond, int):
        return a if cond else b
    return jnp.where(cond, a, b)


def _log2(a):
    """`log2(a)` of a power of two, exactly (a round count such as `log2(N)`)."""
    if isinstance(a, int):
        if a <= 0 or a & (a - 1):
            raise ValueError(f"{NAME}: log2({a}): {a} is not a power of two")
        return a.bit_length() - 1
    return 31 - lax.clz(a)


def _device(coord, axis, mesh_axes):
    """MESH device id of the device at `coord` along the kernel's mesh axis `axis`; on every
    other mesh axis, our own position (so the schedule runs along one axis of a larger mesh)."""
    return tuple(coord if name == axis else lax.axis_index(name) for name in mesh_axes)


def _device_axes(index, axis, mesh_axes):
    """MESH device id of the device whose row-major index over the kernel's mesh axes `axis`
    (a tuple) is `index` (as `lax.axis_index(axis)` numbers them); on every other mesh axis,
    our own position."""
    coord = {}
    for name in reversed(axis):
        coord[name] = _mod(index, lax.axis_size(name))
        index = _floordiv(index, lax.axis_size(name))
    return tuple(coord[name] if name in coord else lax.axis_index(name) for name in mesh_axes)


def _device_core(coord, axis, mesh_axes):
    """`_device` for a kernel on every TensorCore (`cores: 2`, `pl.kernel` over the core
    mesh): the same core of that device, as the dict of mesh coordinates and `core` that a
    TensorCoreMesh kernel's `device_id` takes."""
    ids = {name: coord if name == axis else lax.axis_index(name) for name in mesh_axes}
    return {**ids, "core": lax.axis_index("core")}


def _device_axes_core(index, axis, mesh_axes):
    """`_device_axes` for a kernel on every TensorCore (`_device_core`)."""
    coord = {}
    for name in reversed(axis):
        coord[name] = _mod(index, lax.axis_size(name))
        index = _floordiv(index, lax.axis_size(name))
    ids = {name: coord[name] if name in coord else lax.axis_index(name) for name in mesh_axes}
    return {**ids, "core": lax.axis_index("core")}


def _barrier(neighbours, axis, mesh_axes, double=True):
    """Barrier with `neighbours` on the global barrier semaphore (the seed's `local_barrier`).

    Signals each neighbour once, then waits for as many signals. `double` adds a second round
    on a kernel-scoped REGULAR semaphore: a neighbour that re-enters the kernel on its next
    invocation could otherwise signal the barrier semaphore again and release us early.
    """
    barrier_sem = pltpu.get_barrier_semaphore()
    for neighbour in neighbours:
        pl.semaphore_signal(
            barrier_sem, 1, device_id=_device(neighbour, axis, mesh_axes),
            device_id_type=pl.DeviceIdType.MESH,
        )
    pl.semaphore_wait(barrier_sem, len(neighbours))
    if double:
        @functools.partial(pl.run_scoped, second_barrier=pltpu.SemaphoreType.REGULAR)
        def _(second_barrier):
            for neighbour in neighbours:
                pl.semaphore_signal(
                    second_barrier, 1, device_id=_device(neighbour, axis, mesh_axes),
                    device_id_type=pl.DeviceIdType.MESH,
                )
            pl.semaphore_wait(second_barrier, len(neighbours))


def _tpu_info_on_cpu(interpret):
    """emit_pipeline picks its DMA tiling from the TPU generation, which CPU devices lack: in
    interpret mode on CPU, describe them as a TPU v5e (through jax 0.10's registry of device
    kinds, `jax._src.pallas.mosaic.tpu_info.registry`, a private API)."""
    if interpret is None or interpret is False:
        return
    from jax._src.pallas.mosaic import tpu_info

    tpu_info.registry.setdefault(
        "cpu", lambda: tpu_info.get_tpu_info_for_chip(tpu_info.ChipVersion.TPU_V5E, 1))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class _ArrivingRef(pltpu.BufferedRef):
    """A pipeline input whose blocks land by DMA from another device: before the pipeline
    fetches a block into VMEM, `copy_in` (the buffered ref's method hand-written kernels
    override) waits for that block's arrival, `arrival(*grid_indices)` at the inner grid
    point whose block it fetches. `arrival` is static: the pipeline's loop carries the ref."""
    arrival: object = dataclasses.field(default=None, metadata=dict(static=True))

    def copy_in(self, src_ref, grid_indices):
        self.arrival(*grid_indices)
        super().copy_in(src_ref, grid_indices)


def _emit_pipeline_fed(body, *, grid, in_specs, out_specs, arrivals):
    """`pltpu.emit_pipeline(body, grid=..., in_specs=..., out_specs=...)` whose input i
    (`arrivals[i]` not None) waits for each block's arrival before fetching it: its buffered
    ref is an `_ArrivingRef`, passed to the pipeline as its `allocations` (scoped here, as
    emit_pipeline scopes its own). A block that is the whole region at every point is copied
    once, synchronously, before the pipeline's loop, not through `copy_in`: its arrival at
    the first point is waited for first."""
    pipeline, make_allocations = pltpu.emit_pipeline_with_allocations(
        body, grid=grid, in_specs=in_specs, out_specs=out_specs)

    def run(*refs):
        brefs = list(make_allocations(*refs))
        for k, arrival in enumerate(arrivals):
            if arrival is None:
                continue
            if brefs[k].is_trivial_windowing:
                arrival(*(0,) * len(grid))
                continue
            fields = {f.name: getattr(brefs[k], f.name) for f in dataclasses.fields(brefs[k])}
            brefs[k] = _ArrivingRef(**fields, arrival=arrival)
        pl.run_scoped(lambda allocations: pipeline(*refs, allocations=allocations), tuple(brefs))

    return run


def _given(params):
    """The parameters the caller set (`params`), refusing names PARAMS does not have."""
    unknown = sorted(set(params) - set(PARAMS))
    if unknown:
        known = ", ".join(PARAMS) or "none"
        raise ValueError(f"{NAME}: unknown parameter {', '.join(unknown)} (parameters: {known})")
    return dict(params)


def _config(mesh, overrides):
    """N (devices along the mesh axis AXIS, or over its tuple of axes) and PARAMS updated with
    `overrides`, checked."""
    overrides = _given(overrides)
    axes = (AXIS,) if isinstance(AXIS, str) else AXIS
    if any(axis not in mesh.shape for axis in axes):
        raise ValueError(f"{NAME} runs along mesh axis {AXIS!r}; the mesh has {mesh.axis_names}")
    return math.prod(mesh.shape[axis] for axis in axes), {**PARAMS, **overrides}


def _axis_sizes(axis_name):
    """The size of each mesh axis of `axis_name` (one name, or a tuple of as many names as
    AXIS has), read inside `jax.shard_map`; a clear error outside it."""
    names = (axis_name,) if isinstance(axis_name, str) else tuple(axis_name)
    want = 1 if isinstance(AXIS, str) else len(AXIS)
    if len(names) != want or not all(isinstance(name, str) for name in names):
        raise ValueError(f"{NAME} runs over {want} mesh axis name(s) like AXIS = {AXIS!r}, "
                         f"not axis_name={axis_name!r}")
    try:
        return tuple(lax.axis_size(name) for name in names)
    except NameError:
        raise ValueError(f"{NAME}: kernel(...) runs on one device's shards inside jax.shard_map "
                         f"over mesh axis {axis_name!r}, which is not bound here; for global "
                         "arrays use build(mesh)") from None


def _infer(params, name, buffer, shape, dim, scale, offset, text):
    """Parameter `name`: as given in `params`, else solved from dimension `dim` of input
    `buffer`'s per-device `shape`, which the schedule writes as `text` = scale * name + offset
    (scale and offset already evaluated). Refuses a size that this does not divide."""
    if name in params:
        return params[name]
    if dim >= len(shape):
        raise ValueError(f"{NAME}: input `{buffer}` has per-device shape {tuple(shape)}, but "
                         f"the kernel needs {dim + 1} or more dimensions ({dim} is {text})")
    size = shape[dim] - offset
    if scale <= 0 or size <= 0 or size % scale:
        form = f"{scale} * {name}" + (f" + {offset}" if offset else "")
        raise ValueError(f"{NAME}: cannot infer `{name}` from input `{buffer}` of per-device "
                         f"shape {tuple(shape)}: dimension {dim} is {text} = {form}, and "
                         f"{shape[dim]} is not of that form for a positive integer {name}; "
                         f"pass {name}= or give `{buffer}` a shape that fits")
    return size // scale


def _checked(sizes, broadcasts=()):
    """Run only at sizes `ringc check` proved. CHECKED lists the sizes proved before emitting
    (None: emitted with --unchecked, so any sizes run). Other sizes (N, or parameters solved
    from your shapes) are checked now by ringc against SCHEDULE, once: ringc keeps the verdict
    in memory and on disk. A failing check, an inexact division at these sizes, or no ringc
    installed raises ValueError before the kernel runs, naming the sizes and the command
    that checks them. `broadcasts`: copies the kernel sends by one multicast, which ringc also
    finds to be broadcasts at the new sizes (None: a module's broadcasts sent per GPU on this
    call; the sizes are not recorded, so that a multicast call checks them)."""
    if CHECKED is None or sizes in CHECKED:
        return
    try:
        from ringc.jaxapi import check_sizes
    except ImportError:
        flags = " ".join(f"--param {k}={v}" for k, v in sizes.items() if k in PARAMS)
        command = f"ringc check {SOURCE} --devices {sizes['N']} {flags}"
        raise ValueError(f"{NAME}: not checked at {sizes} (checked: {CHECKED}); install ringc "
                         f"to check them on this call, or run `{command}` and emit again") from None
    check_sizes(SCHEDULE, SOURCE, sizes, **({"broadcasts": broadcasts} if broadcasts else {}))
    if broadcasts is not None:
        CHECKED.append(dict(sizes))


def _not_inferred(params, name, buffer, shape, text):
    """Parameter `name`, which the shapes do not determine (it appears in input `buffer`'s
    shape only as `text`, with other unknowns or not linearly): the caller must give it."""
    if name in params:
        return params[name]
    raise ValueError(f"{NAME}: cannot infer `{name}` from input `{buffer}` of per-device shape "
                     f"{tuple(shape)} ({text}): the shapes do not determine it; pass {name}=")


def _check_divides(a, b, what):
    """Shapes use exact division: a floor would silently drop elements."""
    if b == 0 or a % b:
        raise ValueError(f"{NAME}: {what}: {a} // {b} does not divide exactly")


def _check_shard(name, x, shape, dtype):
    """Refuse, before the kernel runs, a device's block of input `name` whose shape or dtype
    is not the kernel's: a wrong shape would read past the data, a wrong dtype could hang."""
    if tuple(x.shape) != tuple(shape) or x.dtype != jnp.dtype(dtype):
        raise ValueError(f"{NAME}: input `{name}` has per-device shape {tuple(x.shape)} and dtype "
                         f"{x.dtype}, but the kernel needs shape {tuple(shape)} and dtype "
                         f"{jnp.dtype(dtype)}")


def _interpret_mode(interpret):
    """pallas_call's `interpret`: True means TPU interpret mode with default InterpretParams."""
    if interpret is None or interpret is False:
        return False
    if interpret is True:
        return pltpu.InterpretParams()
    return interpret


def _random_input(key, shard_shape, dtype, mesh, spec):
    """A random global array whose shards have `shard_shape`, placed on `mesh` as `spec`."""
    spec = tuple(spec) + (None,) * (len(shard_shape) - len(spec))
    # A spec entry is None, one mesh axis, or a tuple of them (sharded over their product).
    axes = [() if a is None else (a,) if isinstance(a, str) else a for a in spec]
    shape = tuple(d * math.prod(mesh.shape[b] for b in a) for d, a in zip(shard_shape, axes))
    if jnp.issubdtype(dtype, jnp.integer):
        low = 0 if jnp.issubdtype(dtype, jnp.unsignedinteger) else -8
        value = jax.random.randint(key, shape, low, low + 16, dtype)
    else:
        value = jax.random.normal(key, shape, jnp.float32).astype(dtype)
    return jax.device_put(value, jax.sharding.NamedSharding(mesh, P(*spec)))


def _data_input(data, name, n, mesh):
    """Runtime data array `name` as a global int32 array: each device's N values, placed
    along AXIS (scalar prefetch reads them from SMEM)."""
    if data is None or name not in data:
        raise ValueError(f"{NAME} reads runtime data {DATA}: pass make_inputs(..., data={{name: one list "
                         "of N integers per device}}), e.g. a sample of ringc.testing.draw_samples")
    rows = [list(map(int, r)) for r in data[name]]
    if len(rows) != n or any(len(r) != n for r in rows):
        raise ValueError(f"{NAME}: data `{name}` needs {n} devices x {n} values, got {[len(r) for r in rows]}")
    value = jnp.asarray([v for r in rows for v in r], jnp.int32)
    return jax.device_put(value, jax.sharding.NamedSharding(mesh, P(AXIS)))
