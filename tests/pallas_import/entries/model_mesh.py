"""A global function over a serving mesh with a size-1 data axis, {"data": 1, "model": N}:
`all_gather(x, mesh)` reads the axis sizes from the mesh and runs its own shard_map, with
the kernel addressing devices by both mesh coordinates. The axis names are fixed in the
file ("data", "model"), as in inference servers.

With `wait_recv=0` (--param wait_recv=0) a step forwards its block without waiting for the
block of the step before to arrive."""

import functools

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec
DATA, MODEL = "data", "model"


def _gather_kernel(x_ref, out_ref, copy_sem, send_sem, recv_sems, *, n, rows, wait_recv):
    step = pl.program_id(0)
    me = lax.axis_index(MODEL)
    right = lax.rem(me + 1, n)
    slot = lax.rem(me - step + n, n)

    @pl.when(step == 0)
    def _():
        local = pltpu.make_async_copy(x_ref, out_ref.at[pl.ds(me * rows, rows)], copy_sem)
        local.start()
        local.wait()

    block = out_ref.at[pl.ds(slot * rows, rows)]
    copy = pltpu.make_async_remote_copy(src_ref=block, dst_ref=block, send_sem=send_sem,
                                        recv_sem=recv_sems.at[step], device_id=(0, right),
                                        device_id_type=pltpu.DeviceIdType.MESH)
    copy.start()
    copy.wait_send()
    if wait_recv:
        copy.wait_recv()


def all_gather(x, mesh, wait_recv: int = 1):
    assert mesh.shape[DATA] == 1, "tokens are not split over data parallelism"
    n = mesh.shape[MODEL]
    rows, cols = x.shape[0] // n, x.shape[1]
    kernel = pl.pallas_call(
        functools.partial(_gather_kernel, n=n, rows=rows, wait_recv=wait_recv),
        out_shape=jax.ShapeDtypeStruct((n * rows, cols), x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=0, grid=(n - 1,),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA((n - 1,))]),
    )
    return jax.jit(jax.shard_map(kernel, mesh=mesh, in_specs=P(MODEL, None), out_specs=P(MODEL, None),
                                 check_vma=False))(x)


def make_all_gather(mesh, wait_recv: int = 1):
    """A factory over the mesh: the closure it returns runs the global all_gather."""

    def gather(x):
        return all_gather(x, mesh, wait_recv)

    return gather
