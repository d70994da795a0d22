"""Bidirectional reduce-scatter (`lax.psum_scatter`), hand-written after the Pallas TPU
distributed tutorial. Correct.

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
from corpus_common import (AXIS, P, config, interpret_mode, jax, jnp, lax,  # noqa: E402
                           local_barrier, mod, pl, pltpu, random_inputs, sharded, signal)

COLLECTIVE = "psum_scatter"
IN_SPECS = (P(None, AXIS),)
OUT_SPECS = P(AXIS, None)
PARAMS = {"rows": 16, "cols": 128}
LEFT = 0
RIGHT = 1


def reduce_scatter_kernel(x_ref, o_ref, hbm_scratch, local_copy_sem, left_recv_sem,
                          left_send_sem, right_recv_sem, right_send_sem,
                          left_capacity_sem, right_capacity_sem, accum_scratch, *,
                          num_devices, rows):
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
        o_ref[...] = jnp.zeros_like(o_ref[...])
        accum_scratch[...] = jnp.zeros_like(accum_scratch[...])
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

    local_copy = pltpu.make_async_copy(
        src_ref=hbm_scratch.at[working_slot, current_phase_slice],
        dst_ref=accum_scratch, sem=local_copy_sem)
    local_copy.start()
    local_copy.wait()

    @pl.when(~last_iteration)
    def _():
        @pl.when(phase == LEFT)
        def _():
            accum_scratch[...] += x_ref[left_copy_device, left_copy_slice]

        @pl.when(phase == RIGHT)
        def _():
            accum_scratch[...] += x_ref[right_copy_device, right_copy_slice]

    local_copy = pltpu.make_async_copy(
        src_ref=accum_scratch,
        dst_ref=hbm_scratch.at[working_slot, current_phase_slice], sem=local_copy_sem)
    local_copy.start()
    local_copy.wait()

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
        @pl.when(phase == LEFT)
        def _():
            o_ref[left_copy_slice, ...] = accum_scratch[...]
            pl.semaphore_wait(right_capacity_sem, 1)

        @pl.when(phase == RIGHT)
        def _():
            o_ref[right_copy_slice, ...] = accum_scratch[...]
            pl.semaphore_wait(left_capacity_sem, 1)


def make_build(kernel_body, compiler_params=pltpu.CompilerParams(collective_id=0)):
    """`build` for this kernel with `kernel_body` as the kernel (the variants pass theirs)."""

    def build(mesh, *, interpret=None, **params):
        """The kernel on `mesh` as a jitted function of the global inputs (IN_SPECS)."""
        n, p = config(__name__, mesh, PARAMS, params)
        rows, cols = p["rows"], p["cols"]
        kernel = pl.pallas_call(
            lambda *refs: kernel_body(*refs, num_devices=n, rows=rows),
            out_shape=(jax.ShapeDtypeStruct((rows, cols), jnp.float32),
                       jax.ShapeDtypeStruct((2, rows, cols), jnp.float32)),  # hbm_scratch
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=0,
                in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
                out_specs=[pl.BlockSpec(memory_space=pltpu.VMEM),
                           pl.BlockSpec(memory_space=pl.ANY)],
                grid=(n, 2),
                scratch_shapes=([pltpu.SemaphoreType.DMA] * 5
                                + [pltpu.SemaphoreType.REGULAR] * 2
                                + [pltpu.VMEM((rows // 2, cols), jnp.float32)]),
            ),
            compiler_params=compiler_params,
            interpret=interpret_mode(interpret),
        )
        return sharded(lambda x: kernel(x.reshape(n, rows, cols))[0], mesh, IN_SPECS, OUT_SPECS)

    return build


build = make_build(reduce_scatter_kernel)


def make_inputs(mesh, key, **params):
    n, p = config(__name__, mesh, PARAMS, params)
    return random_inputs(mesh, key, [(n * p["rows"], p["cols"])], IN_SPECS)
