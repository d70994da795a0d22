"""All-gather matmul (`all_gather(x) @ y`): a ring all-gather of the left operand fused
with the matmul, hand-written in the style of the collective-matmul kernels.

BROKEN: the end of a step waits only for the send: the next step copies and
forwards the scratch slot the left neighbour may still be writing, and the receive
semaphores are non-zero at exit.

Grid (N,): at step s a device multiplies the x shard it holds, which came from device
(me - s) % N, into output block (me - s) % N, while the same shard travels on to the
right neighbour. Received shards land in an HBM scratch with N - 1 slots (one per step,
so no capacity handshake is needed), each with its own receive semaphore; the send
semaphore is reused and waited before the next step reuses it.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus_common import (AXIS, jnp, lax, local_barrier, mod, pl, pltpu)  # noqa: E402
from all_gather_matmul import (COLLECTIVE, IN_SPECS, OUT_SPECS, PARAMS,  # noqa: E402,F401
                               make_build, make_inputs)


def all_gather_matmul_kernel(x_ref, y_ref, o_ref, x_scratch, x_vmem, send_sem, recv_sems,
                             local_sem, *, num_devices):
    step = pl.program_id(0)
    my_id = lax.axis_index(AXIS)
    right_neighbor = mod(my_id + 1, num_devices)
    left_neighbor = mod(my_id - 1, num_devices)
    block = mod(my_id - step, num_devices)  # whose x shard we hold this step

    @pl.when(step == 0)
    def _():
        local_barrier(left_neighbor, right_neighbor, double_barrier=False)

    # The shard we hold: our own at step 0, else the one received at step - 1.
    src = jnp.where(step == 0, 0, step - 1)

    @pl.when(step < num_devices - 1)
    def _():
        @pl.when(step == 0)
        def _():
            pltpu.make_async_remote_copy(
                src_ref=x_ref, dst_ref=x_scratch.at[0], send_sem=send_sem,
                recv_sem=recv_sems.at[0], device_id=(right_neighbor,),
                device_id_type=pl.DeviceIdType.MESH).start()

        @pl.when(step > 0)
        def _():
            pltpu.make_async_remote_copy(
                src_ref=x_scratch.at[src], dst_ref=x_scratch.at[step], send_sem=send_sem,
                recv_sem=recv_sems.at[step], device_id=(right_neighbor,),
                device_id_type=pl.DeviceIdType.MESH).start()

    @pl.when(step == 0)
    def _():
        local = pltpu.make_async_copy(x_ref, x_vmem, local_sem)
        local.start()
        local.wait()

    @pl.when(step > 0)
    def _():
        local = pltpu.make_async_copy(x_scratch.at[src], x_vmem, local_sem)
        local.start()
        local.wait()

    o_ref[block] = jnp.dot(x_vmem[...], y_ref[...], preferred_element_type=jnp.float32)

    @pl.when(step < num_devices - 1)
    def _():
        # Our send of this step is done, and the shard for the next step has landed.
        dma = pltpu.make_async_remote_copy(
            src_ref=x_scratch.at[step], dst_ref=x_scratch.at[step], send_sem=send_sem,
            recv_sem=recv_sems.at[step], device_id=(right_neighbor,),
            device_id_type=pl.DeviceIdType.MESH)
        dma.wait_send()
        # BUG: no dma.wait_recv(): next step reads a shard that may not have landed


build = make_build(all_gather_matmul_kernel)
