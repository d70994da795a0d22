"""pallas_calls on the refs of `pl.run_state` (JAX's stateful kernels: the kernel closes over
the refs, `out_shape=[]` or a semaphore): a start kernel returns the DMA semaphore of a copy
it starts, a done kernel takes it and waits. Two copies of x, into y and y2, which start as
one array (`y = y2 = jnp.zeros_like(x)`: two refs, two buffers).

STATE_CASE picks a variant: `ok`; `nowait` (the second copy is never waited); `same_dst`
(both copies write y while both are in flight: a race)."""

import os

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CASE = os.environ.get("STATE_CASE", "ok")
SEM = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)


def copy_start(x_ref, o_ref):
    def kernel(sem):
        pltpu.make_async_copy(x_ref, o_ref, sem).start()

    return pl.pallas_call(kernel, out_shape=pltpu.SemaphoreType.DMA(()), out_specs=SEM)()


def copy_done(x_ref, o_ref, sem):
    def kernel(sem):
        pltpu.make_async_copy(x_ref, o_ref, sem).wait()

    pl.pallas_call(kernel, out_shape=(), in_specs=[SEM])(sem)


@jax.jit
def two_copies(x):
    y = y2 = jnp.zeros_like(x)

    def body(refs):
        x_ref, y_ref, y2_ref = refs
        second = y_ref if CASE == "same_dst" else y2_ref
        first_sem = copy_start(x_ref, y_ref)
        second_sem = copy_start(x_ref, second)
        copy_done(x_ref, y_ref, first_sem)
        if CASE != "nowait":
            copy_done(x_ref, second, second_sem)

    _, y, y2 = pl.run_state(body)((x, y, y2))
    return y, y2


result = two_copies(jnp.ones((8, 128), jnp.float32))
