"""Right permute (`lax.ppermute` with perm (d, d+1)), hand-written after the Pallas TPU
distributed tutorial.

BROKEN: the barrier is gone: the DMA writes the right neighbour's VMEM scratch,
which only exists once that device has entered the kernel (it may still be running
the previous kernel that owns that VMEM). `skip_device_barrier=True` removes the barrier
Mosaic would otherwise insert at entry (with `collective_id` set and no custom barrier
Mosaic rejects the kernel, so that spelling would not be a silent bug).

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

    # BUG: no barrier: the landing buffer is scratch of a kernel the neighbour may not have entered

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
    copy.wait_send()


build = make_build(  # BUG (2): and no default barrier either
    right_permute_kernel, compiler_params=pltpu.CompilerParams(skip_device_barrier=True))
