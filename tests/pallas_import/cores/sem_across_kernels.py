"""Refs the program allocates and hands to several `pl.core_map` kernels on both TensorCores
(JAX's memory-space tests write one so): an SMEM table, each core's own, that kernel 1
fills and kernel 2 bumps; a DMA semaphore, each core's own, on which kernel 3 starts a copy
of the table into the core's row of an HBM array and kernel 4 waits for it.

SEM_CASE picks a variant: `ok` (as above), `nowait` (kernel 4 waits for nothing: the copy
is never waited), `same_row` (both cores copy into row 0: a race in HBM, which the chip's
cores share), `read_between` (the program reads `out` between the start and the wait, while
the copy may still be writing it: a race)."""

import os

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CASE = os.environ.get("SEM_CASE", "ok")
N = 128
on_cores = pl.core_map(mesh=pltpu.create_tensorcore_mesh("core", num_cores=2))


@jax.jit
def table_copy():
    table = pl.empty_ref_like(pltpu.SMEM((1, N), jnp.int32))
    out = pl.empty_ref_like(pltpu.HBM((2, 1, N), jnp.int32))
    sem = pl.empty_ref_like(pltpu.SemaphoreType.DMA(()))

    @on_cores
    def _():
        core = jax.lax.axis_index("core")
        for i in range(N):
            table[0, i] = i + core * N

    @on_cores
    def _():
        for i in range(N):
            table[0, i] = table[0, i] + 1

    def copy():
        row = 0 if CASE == "same_row" else jax.lax.axis_index("core")
        return pltpu.make_async_copy(table, out.at[row], sem)

    @on_cores
    def _():
        copy().start()

    peek = out[...] if CASE == "read_between" else 0

    @on_cores
    def _():
        if CASE != "nowait":
            copy().wait()

    return out[...] + peek


result = table_copy()
