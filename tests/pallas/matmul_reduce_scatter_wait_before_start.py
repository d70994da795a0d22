"""Matmul reduce-scatter (`psum_scatter(x @ y)`): each device holds a slice of the
contraction dimension; partial products travel around the ring and are summed on the
way, hand-written in the style of the collective-matmul kernels.

BROKEN: wait_send is issued before start: the send semaphore can only be
incremented by the DMA this device has not started yet, so every device blocks at
step 0 (hang).

Grid (N,): at step s device d computes x_d[b] @ y_d for block b = (d - s - 1) % N, adds
the partial sum its left neighbour sent at step s - 1 (landed in HBM scratch slot
s - 1), and sends the sum to its right neighbour's slot s. At the last step b = d: the
sum is complete and stays. N - 1 scratch slots and receive semaphores, one per step, so
no slot is ever written twice; the VMEM accumulator is the DMA source, so the send is
waited before the next step overwrites it.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus_common import (AXIS, jnp, lax, local_barrier, mod, pl, pltpu)  # noqa: E402
from matmul_reduce_scatter import (COLLECTIVE, IN_SPECS, OUT_SPECS, PARAMS,  # noqa: E402,F401
                                   make_build, make_inputs)


def matmul_reduce_scatter_kernel(x_ref, y_ref, o_ref, scratch, acc_vmem, recv_vmem,
                                 send_sem, recv_sems, local_sem, *, num_devices):
    step = pl.program_id(0)
    my_id = lax.axis_index(AXIS)
    right_neighbor = mod(my_id + 1, num_devices)
    left_neighbor = mod(my_id - 1, num_devices)
    block = mod(my_id - step - 1, num_devices)
    last = step == num_devices - 1

    @pl.when(step == 0)
    def _():
        local_barrier(left_neighbor, right_neighbor, double_barrier=False)

    acc_vmem[...] = jnp.dot(x_ref[block], y_ref[...], preferred_element_type=jnp.float32)

    @pl.when(step > 0)
    def _():
        incoming = pltpu.make_async_remote_copy(
            src_ref=scratch.at[step - 1], dst_ref=scratch.at[step - 1],
            send_sem=send_sem, recv_sem=recv_sems.at[step - 1],
            device_id=(right_neighbor,), device_id_type=pl.DeviceIdType.MESH)
        incoming.wait_recv()
        local = pltpu.make_async_copy(scratch.at[step - 1], recv_vmem, local_sem)
        local.start()
        local.wait()
        acc_vmem[...] += recv_vmem[...]

    @pl.when(~last)
    def _():
        send = pltpu.make_async_remote_copy(
            src_ref=acc_vmem, dst_ref=scratch.at[step],
            send_sem=send_sem, recv_sem=recv_sems.at[step],
            device_id=(right_neighbor,), device_id_type=pl.DeviceIdType.MESH)
        send.wait_send()  # BUG: waits for a send that has not been started
        send.start()

    @pl.when(last)
    def _():
        o_ref[...] = acc_vmem[...]


build = make_build(matmul_reduce_scatter_kernel)
