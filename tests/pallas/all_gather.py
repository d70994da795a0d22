"""Ring all-gather (`lax.all_gather`), hand-written after the Pallas TPU distributed
tutorial. Correct.

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
from corpus_common import (AXIS, P, config, interpret_mode, jax, jnp, lax, pl,  # noqa: E402
                           pltpu, random_inputs, sharded)

COLLECTIVE = "all_gather"
IN_SPECS = (P(AXIS, None),)
OUT_SPECS = P(AXIS, None, None)
PARAMS = {"rows": 8, "cols": 128}


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
    remote_copy_op.wait()


def make_build(kernel_body, compiler_params=None):
    """`build` for this kernel with `kernel_body` as the kernel (the variants pass theirs)."""

    def build(mesh, *, interpret=None, **params):
        """The kernel on `mesh` as a jitted function of the global inputs (IN_SPECS)."""
        n, p = config(__name__, mesh, PARAMS, params)
        kernel = pl.pallas_call(
            lambda *refs: kernel_body(*refs, num_devices=n),
            out_shape=jax.ShapeDtypeStruct((n, p["rows"], p["cols"]), jnp.float32),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=0,
                in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                out_specs=pl.BlockSpec(memory_space=pl.ANY),
                scratch_shapes=([pltpu.SemaphoreType.DMA] * 2
                                + [pltpu.SemaphoreType.DMA((n - 1,))]),
                grid=(n - 1,),
            ),
            compiler_params=compiler_params,
            interpret=interpret_mode(interpret),
        )
        return sharded(kernel, mesh, IN_SPECS, OUT_SPECS)

    return build


build = make_build(all_gather_kernel)


def make_inputs(mesh, key, **params):
    _, p = config(__name__, mesh, PARAMS, params)
    return random_inputs(mesh, key, [(p["rows"], p["cols"])], IN_SPECS)
