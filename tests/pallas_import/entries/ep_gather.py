"""An expert-parallel token all-gather, per shard, in the style of MoE dispatch kernels: the
launcher takes the local tokens and the mesh axis names as keywords with defaults
(`ep_axis_name="ep"`, `dp_axis_name="dp"`), and the kernel addresses devices by a dict of
mesh coordinates. Every step forwards the block that arrived last step to the right
neighbour along "ep".

With `wrong=1` (--param wrong=1) the kernel forwards the block one further along, which has
not arrived yet: a race."""

import functools

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _gather_kernel(x_ref, out_ref, copy_sem, send_sem, recv_sems, *, axis, n, rows, wrong):
    step = pl.program_id(0)
    me = lax.axis_index(axis)
    right = lax.rem(me + 1, n)
    slot = lax.rem(me - step - wrong + 2 * n, n)

    @pl.when(step == 0)
    def _():
        local = pltpu.make_async_copy(x_ref, out_ref.at[pl.ds(me * rows, rows)], copy_sem)
        local.start()
        local.wait()

    block = out_ref.at[pl.ds(slot * rows, rows)]
    copy = pltpu.make_async_remote_copy(src_ref=block, dst_ref=block, send_sem=send_sem,
                                        recv_sem=recv_sems.at[step], device_id={axis: right},
                                        device_id_type=pltpu.DeviceIdType.MESH)
    copy.start()
    copy.wait()


def gather_tokens(tokens: jax.Array, *, ep_axis_name: str = "ep", dp_axis_name: str = "dp",
                  wrong: int = 0) -> jax.Array:
    del dp_axis_name  # tokens are replicated over data parallelism here
    n = lax.axis_size(ep_axis_name)
    rows, cols = tokens.shape
    return pl.pallas_call(
        functools.partial(_gather_kernel, axis=ep_axis_name, n=n, rows=rows, wrong=wrong),
        out_shape=jax.ShapeDtypeStruct((n * rows, cols), tokens.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=0, grid=(n - 1,),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA((n - 1,))]),
    )(tokens)
