"""A benchmark harness in the style of small public collective repositories (cf.
beshrislambouli/TPU-Collectives collectives.py): the user's kernel runs inside a generic
`kernel_wrapper` that zeroes the output and loops over it with `lax.fori_loop`, with a
handshake between iterations; the script calls it from a `run_scenario` helper per input
size. Written for ringc's tests, not copied.

The kernel sends its block to the right neighbour's output with no handshake of its own,
while the wrapper zeroes the output at the top of each iteration: the neighbour's DMA can
land before the zeroing (a race; JAX's interpret-mode detector reports it too). The
verdicts are titled `shift_kernel in kernel_wrapper`, the call site the script's line.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, PartitionSpec

AXIS = "i"
N = jax.device_count()


def shift_kernel(x_ref, out_ref, sems):
    right = lax.rem(lax.axis_index(AXIS) + 1, N)
    copy = pltpu.make_async_remote_copy(x_ref, out_ref, sems[0], sems[1], device_id=right,
                                        device_id_type=pl.DeviceIdType.LOGICAL)
    copy.start()
    copy.wait()


def launch_kernel_looped(kernel, x, iters):
    def kernel_wrapper(x_ref, iters_ref, out_ref, loop_sem, send_sem, recv_sem):
        def loop_body(_, carry):
            out_ref[...] = jnp.zeros(out_ref.shape, out_ref.dtype)
            kernel(x_ref, out_ref, (send_sem, recv_sem))
            for k in range(1, N):
                pl.semaphore_signal(loop_sem, device_id=lax.rem(lax.axis_index(AXIS) + k, N),
                                    device_id_type=pl.DeviceIdType.LOGICAL)
            pl.semaphore_wait(loop_sem, N - 1)
            return carry

        lax.fori_loop(0, iters_ref[0], loop_body, None)

    return pl.pallas_call(
        kernel_wrapper, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pltpu.SMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.SemaphoreType.REGULAR, pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
    )(x, iters)


def run_scenario(mesh, rows):
    f = jax.jit(jax.shard_map(lambda x, it: launch_kernel_looped(shift_kernel, x, it), mesh=mesh,
                              in_specs=(PartitionSpec(AXIS), PartitionSpec()), out_specs=PartitionSpec(AXIS),
                              check_vma=False))
    x = jax.random.normal(jax.random.key(0), (rows * N, 128))
    return f(x, jnp.array([2], jnp.int32))


def main():
    mesh = Mesh(np.array(jax.devices()), (AXIS,))
    for rows in (8, 16):
        print(run_scenario(mesh, rows).shape)


if __name__ == "__main__":
    main()
