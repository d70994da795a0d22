"""Plumbing shared by the hand-written Pallas kernels in tests/pallas/ (not kernel logic).

Every kernel module in this directory follows the convention `ringc emit` writes:
`build(mesh, *, interpret=None, **params)` returns a jitted function of the global inputs,
`make_inputs(mesh, key, **params)` returns them placed as `IN_SPECS`, and `COLLECTIVE`,
`AXIS`, `IN_SPECS`, `OUT_SPECS` describe the collective. The kernels themselves (and every
planted bug) live in the kernel files; this module holds only what all of them share: the
tutorial's `local_barrier`, `mod`, parameter checking, the interpret switch, input
generation and the numpy meaning of each collective (`expected`), which tests compare with.

Semantics assumed throughout (the Pallas TPU distributed tutorial): a remote DMA
increments the sender's send semaphore and the receiver's recv semaphore as bytes move;
`wait_send`/`wait_recv` block until the descriptor's byte count arrived, then decrement;
REGULAR semaphores count signals; every semaphore must be zero at kernel exit; the
barrier semaphore (`get_barrier_semaphore`, needs `collective_id`) is the only one
another device may signal before it is known to have entered the kernel.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec
AXIS = "x"


def register_cpu_tpu_info(chip="TPU_V5P"):
    """Let `emit_pipeline` trace on CPU (tracing and TPU interpret mode).

    jax 0.10.2's emit_pipeline infers DMA tiling from `tpu_info.get_tpu_info()`, which
    raises "Unsupported TPU device kind: cpu" off TPU. `tpu_info.registry` maps a device
    kind to its TpuInfo; this registers the CPU device kind as `chip` (no effect on a TPU).
    """
    from jax._src.pallas.mosaic import tpu_info
    version = getattr(tpu_info.ChipVersion, chip)
    tpu_info.registry.setdefault(
        "cpu", lambda: tpu_info.get_tpu_info_for_chip(version, 1))


def mod(x, n):
    """`x % n` for a traced x that may be negative (x >= -n)."""
    return lax.rem(x + n, n)


def signal(sem, device):
    """Increment `sem` on the device at mesh index `device` along AXIS."""
    pl.semaphore_signal(sem, inc=1, device_id=(device,), device_id_type=pl.DeviceIdType.MESH)


def local_barrier(left, right, double_barrier=True):
    """The tutorial's barrier with both ring neighbours on the barrier semaphore.

    The second round (a REGULAR semaphore allocated with `run_scoped`) stops a neighbour
    that re-enters the kernel on a later invocation from satisfying this round twice."""
    barrier_sem = pltpu.get_barrier_semaphore()
    for neighbor in (left, right):
        signal(barrier_sem, neighbor)
    pl.semaphore_wait(barrier_sem, 2)
    if double_barrier:
        @functools.partial(pl.run_scoped, second_barrier=pltpu.SemaphoreType.REGULAR)
        def _(second_barrier):
            for neighbor in (left, right):
                signal(second_barrier, neighbor)
            pl.semaphore_wait(second_barrier, 2)


def config(name, mesh, defaults, overrides):
    """N (devices along AXIS) and the parameters: `defaults` updated with `overrides`."""
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise ValueError(f"{name}: unknown parameter {', '.join(unknown)} "
                         f"(parameters: {', '.join(defaults) or 'none'})")
    if AXIS not in mesh.shape:
        raise ValueError(f"{name} runs along mesh axis {AXIS!r}; the mesh has {mesh.axis_names}")
    return mesh.shape[AXIS], {**defaults, **overrides}


def interpret_mode(interpret):
    """pallas_call's `interpret`: None/False compile for TPU; True is TPU interpret mode."""
    if interpret is None or interpret is False:
        return False
    if interpret is True:
        return pltpu.InterpretParams()
    return interpret


def sharded(per_device, mesh, in_specs, out_specs):
    """`per_device` under shard_map over `mesh`, jitted (the tutorial's calling pattern)."""
    return jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=in_specs,
                                 out_specs=out_specs, check_vma=False))


def random_inputs(mesh, key, shapes, specs):
    """Random float32 global arrays: `shapes` are per-device shard shapes, placed as `specs`."""
    if isinstance(key, int):
        key = jax.random.key(key)
    out = []
    for k, shape, spec in zip(jax.random.split(key, len(shapes)), shapes, specs):
        entries = tuple(spec) + (None,) * (len(shape) - len(spec))
        glob = tuple(d * (mesh.shape[a] if a is not None else 1) for d, a in zip(shape, entries))
        value = jax.random.normal(k, glob, jnp.float32)
        out.append(jax.device_put(value, jax.sharding.NamedSharding(mesh, spec)))
    return tuple(out)


def expected(collective, n, *inputs):
    """The collective's meaning on the global inputs, in numpy (float64), as the global
    output `build` returns. Shapes follow the corpus's IN_SPECS/OUT_SPECS:

    ppermute      x (r, n*c) P(None,x)        -> shard d lands on d+1
    all_gather    x (n*r, c) P(x,None)        -> (n*n, r, c): every device holds all shards
    psum          x (r, n*c) P(None,x)        -> every shard is the sum of the shards
    psum_scatter  x (n*r, n*c) P(None,x)      -> (n*r, c): row block b = sum_d x_d[b]
    all_gather_matmul  x (n*m, k) P(x,None), y (k, n*c) P(None,x) -> x @ y
    matmul_psum_scatter x (n*m, n*k) P(None,x), y (n*k, c) P(x,None) -> x @ y, P(x,None)
    """
    xs = [np.asarray(a, np.float64) for a in inputs]
    x = xs[0]
    if collective == "ppermute":
        return np.concatenate(np.roll(np.split(x, n, axis=1), 1, axis=0), axis=1)
    if collective == "all_gather":
        shards = x.reshape(n, -1, x.shape[1])
        return np.concatenate([shards] * n, axis=0)
    if collective == "psum":
        total = sum(np.split(x, n, axis=1))
        return np.concatenate([total] * n, axis=1)
    if collective == "psum_scatter":
        return sum(np.split(x, n, axis=1))
    if collective in ("all_gather_matmul", "matmul_psum_scatter"):
        return x @ xs[1]
    raise ValueError(f"unknown collective {collective!r}")


def tolerance(collective, n):
    """Absolute tolerance for float32 results against `expected` (sums of n normals)."""
    return 1e-4 * max(1, n) * (64 if "matmul" in collective else 1)


__all__ = ["P", "AXIS", "mod", "signal", "local_barrier", "config", "interpret_mode",
           "sharded", "random_inputs", "expected", "tolerance", "math", "pl", "pltpu",
           "jnp", "lax", "jax", "register_cpu_tpu_info"]
