"""Warp-level code inside a Mosaic GPU kernel (the style of JAX's
test_semaphore_signal_multicast_collective_axes_warp_level): a `pl.core_map` over
`plgpu.WarpMesh` in a kernel launched with `plgpu.kernel`. ringc models warpgroups, not
warps, so it refuses this at the `core_map`, saying so (it once said to launch the kernel
with plgpu.kernel, which it is)."""
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.sharding import PartitionSpec as P


def kernel(y_ref, sem):
    dev = jax.lax.axis_index("x")

    @pl.core_map(plgpu.WarpMesh(axis_name="warp"))
    def _per_warp():
        @pl.when(jax.lax.axis_index("warp") == dev)
        def _():
            plgpu.semaphore_signal_multicast(sem.at[jax.lax.axis_index("warp")], collective_axes="x")

    pl.semaphore_wait(sem.at[0], 1)
    pl.semaphore_wait(sem.at[1], 1)
    y_ref[0, 0] = 1.0


call = plgpu.kernel(kernel, out_type=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                    scratch_types=[plgpu.SemaphoreType.REGULAR((2,))])
mesh = jax.sharding.Mesh(jax.devices()[:2], ["x"])
y = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(), out_specs=P(None), check_vma=False))()
