"""Right permute (`lax.ppermute` with perm (d, d+1)), hand-written after the Pallas TPU
distributed tutorial.

BROKEN: wait_send dropped: the DMA's send semaphore is still incremented when the
kernel exits (Pallas crashes on a non-zero semaphore) and x_ref may be released while
the DMA still reads it.

Each device pushes its shard into a VMEM landing buffer on its right neighbour, waits for
its own landing buffer to fill (`wait_recv`), copies it to the output, and only then
waits for its own send to drain (`wait_send`): the split waits are how people overlap.
A barrier first: the landing buffer is scratch, so the neighbour must be inside the
kernel before bytes arrive.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus_common import AXIS, lax, pl, pltpu  # noqa: E402
from right_permute import (COLLECTIVE, IN_SPECS, OUT_SPECS, PARAMS,  # noqa: E402,F401
                           make_build, make_inputs)


def right_permute_kernel(x_ref, o_ref, landing, send_sem, recv_sem, *, num_devices):
    my_id = lax.axis_index(AXIS)
    right_neighbor = lax.rem(my_id + 1, num_devices)
    left_neighbor = lax.rem(my_id + num_devices - 1, num_devices)

    barrier_sem = pltpu.get_barrier_semaphore()
    for neighbor in (left_neighbor, right_neighbor):
        pl.semaphore_signal(barrier_sem, device_id=(neighbor,),
                            device_id_type=pl.DeviceIdType.MESH)
    pl.semaphore_wait(barrier_sem, 2)

    copy = pltpu.make_async_remote_copy(
        src_ref=x_ref,
        dst_ref=landing,
        send_sem=send_sem,
        recv_sem=recv_sem,
        device_id=(right_neighbor,),
        device_id_type=pl.DeviceIdType.MESH,
    )
    copy.start()
    copy.wait_recv()
    o_ref[...] = landing[...]
    # BUG: no copy.wait_send(): the send semaphore is non-zero at exit


build = make_build(right_permute_kernel)
