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


def _device(coord, mesh_axes):
    """MESH device id of the device at `coord` along AXIS; on every other mesh axis, our own
    position (so the schedule runs along one axis of a larger mesh)."""
    return tuple(coord if axis == AXIS else lax.axis_index(axis) for axis in mesh_axes)


def _device_axes(index, mesh_axes):
    """MESH device id of the device whose row-major index over the axes AXIS is `index` (as
    `lax.axis_index(AXIS)` numbers them); on every other mesh axis, our own position."""
    coord = {}
    for axis in reversed(AXIS):
        coord[axis] = _mod(index, lax.axis_size(axis))
        index = _floordiv(index, lax.axis_size(axis))
    return tuple(coord[axis] if axis in coord else lax.axis_index(axis) for axis in mesh_axes)


def _barrier(neighbours, mesh_axes, double=True):
    """Barrier with `neighbours` on the global barrier semaphore (the seed's `local_barrier`).

    Signals each neighbour once, then waits for as many signals. `double` adds a second round
    on a kernel-scoped REGULAR semaphore: a neighbour that re-enters the kernel on its next
    invocation could otherwise signal the barrier semaphore again and release us early.
    """
    barrier_sem = pltpu.get_barrier_semaphore()
    for neighbour in neighbours:
        pl.semaphore_signal(
            barrier_sem, 1, device_id=_device(neighbour, mesh_axes),
            device_id_type=pl.DeviceIdType.MESH,
        )
    pl.semaphore_wait(barrier_sem, len(neighbours))
    if double:
        @functools.partial(pl.run_scoped, second_barrier=pltpu.SemaphoreType.REGULAR)
        def _(second_barrier):
            for neighbour in neighbours:
                pl.semaphore_signal(
                    second_barrier, 1, device_id=_device(neighbour, mesh_axes),
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


def _config(mesh, overrides):
    """N (devices along the mesh axis AXIS, or over its tuple of axes) and PARAMS updated with
    `overrides`, checked."""
    unknown = sorted(set(overrides) - set(PARAMS))
    if unknown:
        known = ", ".join(PARAMS) or "none"
        raise ValueError(f"{NAME}: unknown parameter {', '.join(unknown)} (parameters: {known})")
    axes = (AXIS,) if isinstance(AXIS, str) else AXIS
    if any(axis not in mesh.shape for axis in axes):
        raise ValueError(f"{NAME} runs along mesh axis {AXIS!r}; the mesh has {mesh.axis_names}")
    return math.prod(mesh.shape[axis] for axis in axes), {**PARAMS, **overrides}


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
