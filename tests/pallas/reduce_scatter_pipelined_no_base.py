"""Bidirectional reduce-scatter with large HBM blocks and a nested `emit_pipeline`
(`lax.psum_scatter`), hand-written after the Pallas TPU distributed tutorial.

BROKEN: the inner kernel overwrites the accumulator with the local block
instead of adding it to the partial sum received from the neighbour.

Everything lives in HBM; the accumulation is an inner HBM->VMEM pipeline over
(bm, bn) blocks, `accum_out = accum_in + input` (jax 0.10's emit_pipeline has no
should_accumulate_out, so the accumulator is passed as an input too, as JAX's own
interpret test of this tutorial kernel does). The ring protocol is the one below.

Grid (N, 2): outer step and phase. Each device's block is split in halves: the top half's
partial sum travels left, the bottom half's right. In phase LEFT a device starts the
right-going DMA of what it computed in the previous phase and accumulates its left-going
half (and vice versa), so one direction's DMA overlaps the other's compute. Double
buffered HBM scratch, one capacity semaphore per direction (the receiver says "slot
free"), drained on the last step so every semaphore ends at zero.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus_common import (AXIS, jnp, lax, local_barrier, mod, pl, pltpu,  # noqa: E402
                           register_cpu_tpu_info, signal)
from reduce_scatter_pipelined import (COLLECTIVE, IN_SPECS, OUT_SPECS, PARAMS,  # noqa: E402,F401
                                      make_build, make_inputs)

register_cpu_tpu_info()  # emit_pipeline asks for the TPU generation even when traced on CPU

LEFT = 0
RIGHT = 1


def reduce_scatter_pipelined_kernel(x_ref, o_ref, hbm_scratch, local_copy_sem, left_recv_sem,
                          left_send_sem, right_recv_sem, right_send_sem,
                          left_capacity_sem, right_capacity_sem, *,
                          num_devices, rows, cols, bm, bn):
    outer_step = pl.program_id(0)
    phase = pl.program_id(1)
    is_start = jnp.logical_and(outer_step == 0, phase == 0)
    last_iteration = outer_step == pl.num_programs(0) - 1

    working_slot = lax.rem(outer_step, 2)
    receiving_slot = 1 - working_slot
    my_id = lax.axis_index(AXIS)
    right_neighbor = mod(my_id + 1, num_devices)
    left_neighbor = mod(my_id - 1, num_devices)

    left_copy_device = mod(my_id + outer_step + 1, num_devices)
    right_copy_device = mod(my_id - outer_step - 1, num_devices)
    half = rows // 2
    left_copy_slice = pl.ds(0, half)
    right_copy_slice = pl.ds(half, half)
    current_phase_slice = pl.ds(phase * half, half)

    initial_left_copy = pltpu.make_async_remote_copy(
        src_ref=x_ref.at[my_id, left_copy_slice],
        dst_ref=hbm_scratch.at[working_slot, left_copy_slice],
        send_sem=left_send_sem, recv_sem=left_recv_sem,
        device_id=(left_neighbor,), device_id_type=pl.DeviceIdType.MESH)
    initial_right_copy = pltpu.make_async_remote_copy(
        src_ref=x_ref.at[my_id, right_copy_slice],
        dst_ref=hbm_scratch.at[working_slot, right_copy_slice],
        send_sem=right_send_sem, recv_sem=right_recv_sem,
        device_id=(right_neighbor,), device_id_type=pl.DeviceIdType.MESH)
    left_copy = pltpu.make_async_remote_copy(
        src_ref=hbm_scratch.at[working_slot, left_copy_slice],
        dst_ref=hbm_scratch.at[receiving_slot, left_copy_slice],
        send_sem=left_send_sem, recv_sem=left_recv_sem,
        device_id=(left_neighbor,), device_id_type=pl.DeviceIdType.MESH)
    right_copy = pltpu.make_async_remote_copy(
        # The right copy is flipped: it carries the previous step's result forward.
        src_ref=hbm_scratch.at[receiving_slot, right_copy_slice],
        dst_ref=hbm_scratch.at[working_slot, right_copy_slice],
        send_sem=right_send_sem, recv_sem=right_recv_sem,
        device_id=(right_neighbor,), device_id_type=pl.DeviceIdType.MESH)

    # --- Prologue ---
    @pl.when(is_start)
    def _():
        local_barrier(left_neighbor, right_neighbor)
        initial_left_copy.start()
        initial_left_copy.wait()
        initial_right_copy.start()
        # Tell each neighbour it may send towards us.
        signal(right_capacity_sem, left_neighbor)
        signal(left_capacity_sem, right_neighbor)

    # --- Body ---
    @pl.when(~is_start)
    def _():
        @pl.when(phase == LEFT)
        def _():
            pl.semaphore_wait(right_capacity_sem, 1)
            right_copy.start()

        @pl.when(phase == RIGHT)
        def _():
            pl.semaphore_wait(left_capacity_sem, 1)
            left_copy.start()

    def inner_kernel(input_ref, accum_in_ref, accum_out_ref):
        accum_out_ref[...] = input_ref[...]  # BUG: drops the received partial sum

    inner_block = pl.BlockSpec((bm, bn), lambda i, j: (i, j))
    accum_pipeline = pltpu.emit_pipeline(
        inner_kernel,
        in_specs=[inner_block, inner_block],
        out_specs=inner_block,
        grid=(half // bm, cols // bn),
    )

    @pl.when(~last_iteration)
    def _():
        @pl.when(phase == LEFT)
        def _():
            accum_pipeline(x_ref.at[left_copy_device, left_copy_slice],
                           hbm_scratch.at[working_slot, left_copy_slice],
                           hbm_scratch.at[working_slot, left_copy_slice])

        @pl.when(phase == RIGHT)
        def _():
            accum_pipeline(x_ref.at[right_copy_device, right_copy_slice],
                           hbm_scratch.at[working_slot, right_copy_slice],
                           hbm_scratch.at[working_slot, right_copy_slice])

    @pl.when(is_start)
    def _():
        initial_right_copy.wait()

    @pl.when(~is_start)
    def _():
        @pl.when(phase == LEFT)
        def _():
            right_copy.wait()
            signal(right_capacity_sem, left_neighbor)

        @pl.when(phase == RIGHT)
        def _():
            left_copy.wait()
            signal(left_capacity_sem, right_neighbor)

    # --- Epilogue: store the result and drain the capacity semaphores ---
    @pl.when(last_iteration)
    def _():
        output_copy = pltpu.make_async_copy(
            src_ref=hbm_scratch.at[working_slot, current_phase_slice],
            dst_ref=o_ref.at[current_phase_slice], sem=local_copy_sem)
        output_copy.start()
        output_copy.wait()

        @pl.when(phase == LEFT)
        def _():
            pl.semaphore_wait(right_capacity_sem, 1)

        @pl.when(phase == RIGHT)
        def _():
            pl.semaphore_wait(left_capacity_sem, 1)


build = make_build(reduce_scatter_pipelined_kernel)
