"""A factory of a split-phase permute, the way inference servers overlap communication with
compute: `make_async_permute()` returns `(start, wait)`. `start(x)` launches one pallas_call
that starts the remote copy and returns a handle (the source, which the copy still reads,
the in-flight destination and both DMA semaphores); `wait(handle)` launches a second one
that waits on them. Both run per shard,
inside the caller's shard_map.

With `wait_recv=False` (--param wait_recv=0) the wait forgets the receive side."""

import functools

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

ANY = pl.BlockSpec(memory_space=pl.ANY)
SEM = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)


def _copy(src, dst, send_sem, recv_sem, axis_name):
    right = lax.rem(lax.axis_index(axis_name) + 1, lax.axis_size(axis_name))
    return pltpu.make_async_remote_copy(src, dst, send_sem, recv_sem, device_id=(right,),
                                        device_id_type=pl.DeviceIdType.MESH)


def _start_kernel(x_ref, out_ref, send_sem, recv_sem, *, axis_name):
    _copy(x_ref, out_ref, send_sem, recv_sem, axis_name).start()


def _wait_kernel(x_ref, out_ref, send_sem, recv_sem, out2_ref, send2, recv2, *, axis_name, wait_recv):
    del out2_ref, send2, recv2  # aliased to the inputs
    copy = _copy(x_ref, out_ref, send_sem, recv_sem, axis_name)
    copy.wait_send()
    if wait_recv:
        copy.wait_recv()


def make_async_permute(axis_name: str = "x", *, wait_recv: bool = True):
    sem = pltpu.SemaphoreType.DMA(())

    def start(x):
        shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
        out, send, recv = pl.pallas_call(functools.partial(_start_kernel, axis_name=axis_name),
                                         out_shape=(shape, sem, sem), in_specs=[ANY], out_specs=(ANY, SEM, SEM),
                                         compiler_params=pltpu.CompilerParams(has_side_effects=True))(x)
        return x, out, send, recv

    def wait(handle):
        x, out, send, recv = handle
        shape = jax.ShapeDtypeStruct(out.shape, out.dtype)
        out, _, _ = pl.pallas_call(functools.partial(_wait_kernel, axis_name=axis_name, wait_recv=wait_recv),
                                   out_shape=(shape, sem, sem), in_specs=[ANY, ANY, SEM, SEM],
                                   out_specs=(ANY, SEM, SEM), input_output_aliases={1: 0, 2: 1, 3: 2},
                                   compiler_params=pltpu.CompilerParams(has_side_effects=True))(x, out, send, recv)
        return out

    return start, wait
