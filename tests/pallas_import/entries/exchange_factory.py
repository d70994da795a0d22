"""A variable-count exchange in the style of research collective libraries: a factory taking
the mesh returns the `pl.pallas_call` itself (no wrapper, no axis parameter: the kernel names
its axis, "core"), whose first input is scalar-prefetched control.

Epoch e sends this device's block e to the device e + 1 to its right, after that device said
its landing slot is free (a `ready` signal to its left), and only when the scalar-prefetched
count for the epoch is nonzero; the receiver stages the count it was sent the same way and
waits for the payload when that count is nonzero. `wrong=True` skips the ready handshake: a
device may send into a slot its neighbour has not finished copying out (a race).
"""

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def make_exchange_call(mesh, *, wrong=False):
    ranks = mesh.size
    epochs = ranks - 1

    def kernel(control_ref, payload_ref, counts_ref, out_ref, counts_out, send_sems, recv_sems,
               count_sems, local_sem, ready_sems, count_vmem):
        epoch = pl.program_id(0)
        slot = epoch % 2
        me = lax.axis_index("core")
        right = lax.rem(me + epoch + 1, ranks)
        left = lax.rem(me - epoch - 1 + ranks, ranks)
        if not wrong:
            pl.semaphore_signal(ready_sems.at[slot], 1, device_id=(left,), device_id_type=pl.DeviceIdType.MESH)
            pl.semaphore_wait(ready_sems.at[slot], 1)
        count = pltpu.make_async_remote_copy(counts_ref.at[epoch], counts_out.at[epoch], count_sems.at[0],
                                             count_sems.at[1], device_id=(right,),
                                             device_id_type=pl.DeviceIdType.MESH)
        count.start()
        count.wait()
        stage = pltpu.make_async_copy(counts_out.at[epoch], count_vmem.at[slot], local_sem)
        stage.start()
        stage.wait()
        payload = pltpu.make_async_remote_copy(payload_ref.at[epoch], out_ref.at[slot], send_sems.at[slot],
                                               recv_sems.at[slot], device_id=(right,),
                                               device_id_type=pl.DeviceIdType.MESH)

        @pl.when(control_ref[epoch, 0] != 0)
        def _():
            payload.start()
            payload.wait_send()

        @pl.when(count_vmem[slot, 0] != 0)
        def _():
            payload.wait_recv()
            keep = pltpu.make_async_copy(out_ref.at[slot], out_ref.at[2 + epoch], local_sem)
            keep.start()
            keep.wait()

    return pl.pallas_call(
        kernel,
        out_shape=(jax.ShapeDtypeStruct((epochs + 2, 8, 128), jnp.int32),
                   jax.ShapeDtypeStruct((epochs, 128), jnp.int32)),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)] * 2,
            out_specs=(pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)),
            scratch_shapes=(pltpu.SemaphoreType.DMA((2,)), pltpu.SemaphoreType.DMA((2,)),
                            pltpu.SemaphoreType.DMA((2,)), pltpu.SemaphoreType.DMA,
                            pltpu.SemaphoreType.REGULAR((2,)), pltpu.VMEM((2, 128), jnp.int32)),
            grid=(epochs,),
        ),
        compiler_params=pltpu.CompilerParams(collective_id=5),
    )
