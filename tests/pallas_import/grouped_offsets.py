"""A script whose scalar-prefetch operand is computed by the jitted code before the kernel,
as grouped (MoE) kernels do: `sizes = jnp.bincount(ids, length=G)`, `starts = cumsum - sizes`
inside the jitted function, then the kernel gathers the first row of every group (a local
DMA from `x_ref.at[pl.ds(starts[g], 1)]`) and sends the gathered block to its right
neighbour. ringc computes the prefetch values from the ids the script passed.

GROUPED_OVERFLOW=1 in the environment (the test sets it) shifts every start so that the last
group's start is the row count: past the rows, an out_of_bounds finding."""

import os

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec
G, ROWS, COLS = 8, 64, 128
OVERFLOW = os.environ.get("GROUPED_OVERFLOW") == "1"


def kernel(starts_ref, x_ref, o_ref, rows, sem, send_sem, recv_sem):
    for g in range(G):
        copy = pltpu.make_async_copy(x_ref.at[pl.ds(starts_ref[g], 1)], rows.at[pl.ds(g, 1)], sem)
        copy.start()
        copy.wait()
    right = lax.rem(lax.axis_index("x") + 1, lax.psum(1, "x"))
    send = pltpu.make_async_remote_copy(src_ref=rows, dst_ref=o_ref, send_sem=send_sem, recv_sem=recv_sem,
                                        device_id=(right,), device_id_type=pl.DeviceIdType.MESH)
    send.start()
    send.wait_recv()
    send.wait_send()


call = pl.pallas_call(
    kernel, out_shape=jax.ShapeDtypeStruct((G, COLS), jnp.float32),
    grid_spec=pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(1,),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((G, COLS), jnp.float32)] + [pltpu.SemaphoreType.DMA] * 3))

mesh = jax.make_mesh((jax.device_count(),), ("x",))
n = jax.device_count()
ids = jnp.sort(jax.random.randint(jax.random.key(0), (ROWS,), 0, G))  # every device's rows, grouped
ids = jnp.where(jnp.arange(ROWS) < G, jnp.arange(ROWS) % G, ids).sort()  # every group non-empty


@jax.jit
def grouped(ids, x):
    sizes = jnp.bincount(ids, length=G)
    starts = jnp.cumsum(sizes) - sizes
    if OVERFLOW:
        starts = starts + ROWS - starts[-1]  # the last group's start is ROWS: past the rows
    return jax.shard_map(call, mesh=mesh, in_specs=(P(), P("x", None)), out_specs=P("x", None),
                         check_vma=False)(starts.astype(jnp.int32), x)


x = jax.device_put(jnp.zeros((n * ROWS, COLS), jnp.float32), jax.sharding.NamedSharding(mesh, P("x", None)))
out = grouped(ids, x)
