"""A one-shot (direct exchange) reduce-scatter behind a `mode` switch, in the style of
collective libraries such as erfanzar/ejkernel's reduce-scatter (a per-shard
`reduce_scatter(x, axis_name, mode="auto")` whose default takes `lax.psum_scatter` and whose
`mode="one_shot"` runs the Pallas kernel). Written for ringc's tests, not copied.

`ringc check FILE --devices 4 --entry reduce_scatter --param mode=one_shot` runs the kernel
(with the default mode nothing runs a kernel). Every device barriers with all peers, sends
each peer its rows into the peer's receive slot for that offset, waits, and sums.
`--param wait_sends=false` drops the send waits: the kernel exits with DMAs in flight.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _barrier_all(me, n):
    sem = pltpu.get_barrier_semaphore()
    for k in range(1, n):
        pl.semaphore_signal(sem, 1, device_id=(lax.rem(me + k, n),), device_id_type=pl.DeviceIdType.MESH)
    pl.semaphore_wait(sem, n - 1)


def _kernel(x_ref, o_ref, slots_ref, send_sems, recv_sems, *, axis_name, n, wait_sends):
    me = lax.axis_index(axis_name)
    rows = o_ref.shape[0]
    _barrier_all(me, n)

    def exchange(k):
        peer = lax.rem(me + k, n)
        return pltpu.make_async_remote_copy(x_ref.at[pl.ds(peer * rows, rows)], slots_ref.at[k - 1],
                                            send_sems.at[k - 1], recv_sems.at[k - 1], device_id=(peer,),
                                            device_id_type=pl.DeviceIdType.MESH)

    for k in range(1, n):
        exchange(k).start()
    for k in range(1, n):
        if wait_sends:
            exchange(k).wait()
        else:
            exchange(k).wait_recv()
    total = x_ref[pl.ds(me * rows, rows), :]
    for k in range(n - 1):
        total = total + slots_ref[k]
    o_ref[...] = total


def reduce_scatter(x, axis_name: str, mode: str = "auto", wait_sends: bool = True, collective_id: int = 0):
    n = lax.axis_size(axis_name)
    if mode != "one_shot":
        return lax.psum_scatter(x, axis_name, scatter_dimension=0, tiled=True)
    rows = x.shape[0] // n
    return pl.pallas_call(
        functools.partial(_kernel, axis_name=axis_name, n=n, wait_sends=wait_sends),
        out_shape=[jax.ShapeDtypeStruct((rows, x.shape[1]), x.dtype),
                   jax.ShapeDtypeStruct((n - 1, rows, x.shape[1]), x.dtype)],
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=[pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pltpu.VMEM)],
        scratch_shapes=[pltpu.SemaphoreType.DMA((n - 1,)), pltpu.SemaphoreType.DMA((n - 1,))],
        compiler_params=pltpu.CompilerParams(collective_id=collective_id),
    )(x)[0]
