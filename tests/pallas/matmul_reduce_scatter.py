"""Matmul reduce-scatter (`psum_scatter(x @ y)`): each device holds a slice of the
contraction dimension; partial products travel around the ring and are summed on the
way, hand-written in the style of the collective-matmul kernels. Correct.

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
from corpus_common import (AXIS, P, config, interpret_mode, jax, jnp, lax,  # noqa: E402
                           local_barrier, mod, pl, pltpu, random_inputs, sharded)

COLLECTIVE = "matmul_psum_scatter"
IN_SPECS = (P(None, AXIS), P(AXIS, None))
OUT_SPECS = P(AXIS, None)
PARAMS = {"rows": 8, "cols": 128, "depth": 128}


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
        send.start()
        send.wait_send()

    @pl.when(last)
    def _():
        o_ref[...] = acc_vmem[...]


def make_build(kernel_body, compiler_params=pltpu.CompilerParams(collective_id=0)):
    """`build` for this kernel with `kernel_body` as the kernel (the variants pass theirs)."""

    def build(mesh, *, interpret=None, **params):
        """The kernel on `mesh` as a jitted function of the global inputs (IN_SPECS)."""
        n, p = config(__name__, mesh, PARAMS, params)
        rows, cols, depth = p["rows"], p["cols"], p["depth"]
        kernel = pl.pallas_call(
            lambda *refs: kernel_body(*refs, num_devices=n),
            out_shape=(jax.ShapeDtypeStruct((rows, cols), jnp.float32),
                       jax.ShapeDtypeStruct((max(n - 1, 1), rows, cols), jnp.float32)),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=0,
                in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM),
                          pl.BlockSpec(memory_space=pltpu.VMEM)],
                out_specs=[pl.BlockSpec(memory_space=pltpu.VMEM),
                           pl.BlockSpec(memory_space=pl.ANY)],
                grid=(n,),
                scratch_shapes=[pltpu.VMEM((rows, cols), jnp.float32),
                                pltpu.VMEM((rows, cols), jnp.float32),
                                pltpu.SemaphoreType.DMA,
                                pltpu.SemaphoreType.DMA((max(n - 1, 1),)),
                                pltpu.SemaphoreType.DMA],
            ),
            compiler_params=compiler_params,
            interpret=interpret_mode(interpret),
        )
        return sharded(lambda x, y: kernel(x.reshape(n, rows, depth), y)[0],
                       mesh, IN_SPECS, OUT_SPECS)

    return build


build = make_build(matmul_reduce_scatter_kernel)


def make_inputs(mesh, key, **params):
    n, p = config(__name__, mesh, PARAMS, params)
    return random_inputs(mesh, key, [(n * p["rows"], p["depth"]), (p["depth"], p["cols"])],
                         IN_SPECS)
