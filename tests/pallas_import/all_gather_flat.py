"""A ring all-gather written by hand with a flat output, the way `lax.all_gather(x, axis,
tiled=True)` lays it out (and as vLLM tpu-inference's all_gather_matmul returns its
product): `out` is [N * rows, cols], device j's block in rows j * rows .. (j + 1) * rows.
ringc states all_gather's meaning on [N, rows, cols] and checks this kernel's output viewed
that way.

Every step forwards the block that arrived last step to the right neighbour, one receive
semaphore per step. With --param wrong=1 the kernel forwards the block one further along,
(me - step - 1) % N, which has not arrived yet: a wrong result (and a race)."""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec
COLLECTIVE = "all_gather"
AXIS = "x"
IN_SPECS = (P("x", None),)
OUT_SPECS = P("x", None)


def all_gather_kernel(x_ref, out_ref, copy_sem, send_sem, recv_sems, *, n, rows, wrong):
    step = pl.program_id(0)
    me = lax.axis_index("x")
    right = lax.rem(me + 1, n)
    slot = lax.rem(me - step - wrong + 2 * n, n)

    @pl.when(step == 0)
    def _():
        local = pltpu.make_async_copy(x_ref, out_ref.at[pl.ds(me * rows, rows)], copy_sem)
        local.start()
        local.wait()

    block = out_ref.at[pl.ds(slot * rows, rows)]
    copy = pltpu.make_async_remote_copy(src_ref=block, dst_ref=block, send_sem=send_sem,
                                        recv_sem=recv_sems.at[step], device_id=(right,),
                                        device_id_type=pltpu.DeviceIdType.MESH)
    copy.start()
    copy.wait()


def build(mesh, *, interpret=None, rows=8, cols=128, wrong=0):
    n = mesh.shape["x"]
    kernel = pl.pallas_call(
        functools.partial(all_gather_kernel, n=n, rows=rows, wrong=wrong),
        out_shape=jax.ShapeDtypeStruct((n * rows, cols), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=0, grid=(n - 1,),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA((n - 1,))]),
        interpret=pltpu.InterpretParams() if interpret else False,
    )
    return jax.jit(jax.shard_map(kernel, mesh=mesh, in_specs=IN_SPECS, out_specs=OUT_SPECS, check_vma=False))


def make_inputs(mesh, key, *, rows=8, cols=128, wrong=0):
    n = mesh.shape["x"]
    x = jax.random.normal(jax.random.key(key), (n * rows, cols), jnp.float32)
    return (jax.device_put(x, jax.sharding.NamedSharding(mesh, P("x", None))),)
