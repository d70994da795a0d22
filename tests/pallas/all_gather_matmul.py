"""All-gather matmul (`all_gather(x) @ y`): a ring all-gather of the left operand fused
with the matmul, hand-written in the style of the collective-matmul kernels. Correct.

Grid (N,): at step s a device multiplies the x shard it holds, which came from device
(me - s) % N, into output block (me - s) % N, while the same shard travels on to the
right neighbour. Received shards land in an HBM scratch with N - 1 slots (one per step,
so no capacity handshake is needed), each with its own receive semaphore; the send
semaphore is reused and waited before the next step reuses it.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus_common import (AXIS, P, config, interpret_mode, jax, jnp, lax,  # noqa: E402
                           local_barrier, mod, pl, pltpu, random_inputs, sharded)

COLLECTIVE = "all_gather_matmul"
IN_SPECS = (P(AXIS, None), P(None, AXIS))
OUT_SPECS = P(None, AXIS)
PARAMS = {"rows": 8, "cols": 128, "depth": 128}


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
        dma.wait_recv()


def make_build(kernel_body, compiler_params=pltpu.CompilerParams(collective_id=0)):
    """`build` for this kernel with `kernel_body` as the kernel (the variants pass theirs)."""

    def build(mesh, *, interpret=None, **params):
        """The kernel on `mesh` as a jitted function of the global inputs (IN_SPECS)."""
        n, p = config(__name__, mesh, PARAMS, params)
        rows, cols, depth = p["rows"], p["cols"], p["depth"]
        kernel = pl.pallas_call(
            lambda *refs: kernel_body(*refs, num_devices=n),
            out_shape=(jax.ShapeDtypeStruct((n, rows, cols), jnp.float32),
                       jax.ShapeDtypeStruct((max(n - 1, 1), rows, depth), jnp.float32)),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=0,
                in_specs=[pl.BlockSpec(memory_space=pl.ANY),
                          pl.BlockSpec(memory_space=pltpu.VMEM)],
                out_specs=[pl.BlockSpec(memory_space=pltpu.VMEM),
                           pl.BlockSpec(memory_space=pl.ANY)],
                grid=(n,),
                scratch_shapes=[pltpu.VMEM((rows, depth), jnp.float32),
                                pltpu.SemaphoreType.DMA,
                                pltpu.SemaphoreType.DMA((max(n - 1, 1),)),
                                pltpu.SemaphoreType.DMA],
            ),
            compiler_params=compiler_params,
            interpret=interpret_mode(interpret),
        )
        return sharded(lambda x, y: kernel(x, y)[0].reshape(n * rows, cols),
                       mesh, IN_SPECS, OUT_SPECS)

    return build


build = make_build(all_gather_matmul_kernel)


def make_inputs(mesh, key, **params):
    _, p = config(__name__, mesh, PARAMS, params)
    return random_inputs(mesh, key, [(p["rows"], p["depth"]), (p["depth"], p["cols"])],
                         IN_SPECS)
