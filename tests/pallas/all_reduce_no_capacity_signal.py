"""All-reduce sum (`lax.psum`) over a ring with a double-buffered HBM scratch and a
capacity handshake, hand-written after the Pallas TPU distributed tutorial.

BROKEN: nobody ever signals the capacity semaphore, so every device blocks in
pl.semaphore_wait(capacity_sem, 1) at step 0 (hang).

Grid (N,). Step 0 barriers with both neighbours, zeroes the accumulator and pushes x into
the right neighbour's working slot. Every step: tell the left neighbour we are ready
(capacity signal), copy our working slot to VMEM, wait until the right neighbour is
ready, forward the working slot into its receiving slot, accumulate, wait. Without the
capacity handshake a left neighbour one step ahead could write our working slot while
we read it.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus_common import (AXIS, jnp, lax, local_barrier, pl, pltpu, signal)  # noqa: E402
from all_reduce import (COLLECTIVE, IN_SPECS, OUT_SPECS, PARAMS,  # noqa: E402,F401
                        make_build, make_inputs)


def all_reduce_kernel(x_ref, o_ref, hbm_scratch, copy_sem, remote_recv_sem,
                      remote_send_sem, capacity_sem, receive_scratch, *, num_devices):
    outer_step = pl.program_id(0)
    working_slot = lax.rem(outer_step, 2)
    receiving_slot = 1 - working_slot

    my_id = lax.axis_index(AXIS)
    right_neighbor = lax.rem(my_id + 1, num_devices)
    left_neighbor = lax.rem(my_id - 1 + num_devices, num_devices)

    @pl.when(outer_step == 0)
    def _():
        local_barrier(left_neighbor, right_neighbor)
        o_ref[...] = jnp.zeros_like(o_ref)
        receive_scratch[...] = jnp.zeros_like(receive_scratch)
        initial_copy = pltpu.make_async_remote_copy(
            src_ref=x_ref,
            dst_ref=hbm_scratch.at[working_slot],
            send_sem=remote_send_sem,
            recv_sem=remote_recv_sem,
            device_id=(right_neighbor,),
            device_id_type=pl.DeviceIdType.MESH,
        )
        initial_copy.start()
        initial_copy.wait()

    # Tell the left neighbour it may write our receiving slot.
    # BUG: the capacity signal to the left neighbour is missing

    local_copy = pltpu.make_async_copy(
        src_ref=hbm_scratch.at[working_slot],
        dst_ref=receive_scratch,
        sem=copy_sem,
    )
    local_copy.start()

    # Block until the right neighbour is ready to receive.
    pl.semaphore_wait(capacity_sem, 1)
    remote_copy = pltpu.make_async_remote_copy(
        src_ref=hbm_scratch.at[working_slot],
        dst_ref=hbm_scratch.at[receiving_slot],
        send_sem=remote_send_sem,
        recv_sem=remote_recv_sem,
        device_id=(right_neighbor,),
        device_id_type=pl.DeviceIdType.MESH,
    )
    remote_copy.start()
    local_copy.wait()
    o_ref[...] += receive_scratch[...]
    remote_copy.wait()


build = make_build(all_reduce_kernel)
