"""The two TensorCores of each chip swap halves of the shard through VMEM, with a barrier on
the kernel's barrier semaphore (`collective_id`) before the copy between the cores, as JAX's
core_map guide does it. `--param barrier=0` drops the barrier: a core may write the other's
VMEM before that core has allocated it (a race)."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P


def _kernel(x_hbm, o_hbm, mine, theirs, sem, send_sem, recv_sem, *, barrier):
    core = jax.lax.axis_index("core")
    other = 1 - core
    cols = x_hbm.shape[1] // 2
    pltpu.async_copy(x_hbm.at[:, pl.ds(core * cols, cols)], mine, sem).wait()
    if barrier:
        sem0 = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(sem0, 1, device_id={"core": other})
        pl.semaphore_wait(sem0, 1)
    copy = pltpu.make_async_remote_copy(mine, theirs, send_sem, recv_sem, device_id={"core": other})
    copy.start()
    copy.wait()
    pltpu.async_copy(theirs, o_hbm.at[:, pl.ds(core * cols, cols)], sem).wait()


def swap(x, axis_name: str = "x", barrier: int = 1):
    """Per shard: the halves of the columns swapped between the chip's cores."""
    half = (x.shape[0], x.shape[1] // 2)
    return pl.kernel(functools.partial(_kernel, barrier=barrier), out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                     mesh=pltpu.create_tensorcore_mesh("core", num_cores=2),
                     scratch_types=[pltpu.VMEM(half, x.dtype)] * 2 + [pltpu.SemaphoreType.DMA] * 3,
                     compiler_params=pltpu.CompilerParams(collective_id=0))(x)
