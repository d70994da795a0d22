"""Right permute (`lax.ppermute` with perm (d, d+1)), hand-written after the Pallas TPU
distributed tutorial. Correct.

Each device pushes its shard into a VMEM landing buffer on its right neighbour, waits for
its own landing buffer to fill (`wait_recv`), copies it to the output, and only then
waits for its own send to drain (`wait_send`): the split waits are how people overlap.
A barrier first: the landing buffer is scratch, so the neighbour must be inside the
kernel before bytes arrive.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus_common import (AXIS, P, config, interpret_mode, jax, jnp, lax, pl,  # noqa: E402
                           pltpu, random_inputs, sharded)

COLLECTIVE = "ppermute"
IN_SPECS = (P(None, AXIS),)
OUT_SPECS = P(None, AXIS)
PARAMS = {"rows": 8, "cols": 128}


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
    copy.wait_send()


def make_build(kernel_body, compiler_params=pltpu.CompilerParams(collective_id=0)):
    """`build` for this kernel with `kernel_body` as the kernel (the variants pass theirs)."""

    def build(mesh, *, interpret=None, **params):
        """The kernel on `mesh` as a jitted function of the global inputs (IN_SPECS)."""
        n, p = config(__name__, mesh, PARAMS, params)
        shape = (p["rows"], p["cols"])
        kernel = pl.pallas_call(
            lambda *refs: kernel_body(*refs, num_devices=n),
            out_shape=jax.ShapeDtypeStruct(shape, jnp.float32),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[pltpu.VMEM(shape, jnp.float32),
                            pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
            compiler_params=compiler_params,
            interpret=interpret_mode(interpret),
        )
        return sharded(kernel, mesh, IN_SPECS, OUT_SPECS)

    return build


build = make_build(right_permute_kernel)


def make_inputs(mesh, key, **params):
    _, p = config(__name__, mesh, PARAMS, params)
    return random_inputs(mesh, key, [(p["rows"], p["cols"])], IN_SPECS)
