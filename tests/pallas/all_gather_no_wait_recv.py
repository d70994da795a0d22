"""Ring all-gather (`lax.all_gather`), hand-written after the Pallas TPU distributed
tutorial.

BROKEN: waits only for its own send: the next step forwards a slot whose
bytes may not have landed, and the receive semaphores are non-zero at exit.

The grid is the loop: N - 1 steps. At step 0 each device copies its shard into its own
slot of the output (a local DMA); at every step it forwards slot (me - step) % N to its
right neighbour, into the same slot there, and waits for both directions (`.wait()`).
The slot it forwards at step s arrived from the left at step s - 1. One receive
semaphore per step (`recv_sems.at[step]`), so a neighbour that runs ahead never lets
one DMA's bytes satisfy another's wait; the send semaphore is reused every step.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus_common import AXIS, lax, pl, pltpu  # noqa: E402
from all_gather import (COLLECTIVE, IN_SPECS, OUT_SPECS, PARAMS,  # noqa: E402,F401
                        make_build, make_inputs)


def all_gather_kernel(input_ref, output_ref, local_copy_sem, send_sem, recv_sems, *,
                      num_devices):
    outer_step = pl.program_id(0)
    my_id = lax.axis_index(AXIS)
    right_neighbor = lax.rem(my_id + 1, num_devices)
    copy_slot = my_id - outer_step
    copy_slot = lax.rem(copy_slot + num_devices, num_devices)

    @pl.when(outer_step == 0)
    def _():
        local_copy_op = pltpu.make_async_copy(
            src_ref=input_ref,
            dst_ref=output_ref.at[my_id],
            sem=local_copy_sem,
        )
        local_copy_op.start()
        local_copy_op.wait()

    remote_copy_op = pltpu.make_async_remote_copy(
        src_ref=output_ref.at[copy_slot],
        dst_ref=output_ref.at[copy_slot],
        send_sem=send_sem,
        recv_sem=recv_sems.at[outer_step],
        device_id=(right_neighbor,),
        device_id_type=pl.DeviceIdType.MESH,
    )
    remote_copy_op.start()
    remote_copy_op.wait_send()  # BUG: never waits for the incoming slot


build = make_build(all_gather_kernel)
