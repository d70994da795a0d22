"""A factory over the mesh whose closure runs `pl.kernel(out_type=pltpu.HBM(...))` over one
TensorCore under `jax.shard_map`, as remote-DMA benchmarks write it: eagerly the kernel's
HBM output fails in JAX itself (broadcast_in_dim of a float32<hbm> aval), so the closure
runs traced, as its caller's `jax.jit` would. `wait_recv=0` is the broken variant: the
receive is never waited, so the output is read before the bytes surely landed."""

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P


def make_permute(mesh, wait_recv: int = 1):
    tc = pltpu.create_tensorcore_mesh("tc", num_cores=1)

    @jax.shard_map(mesh=mesh, in_specs=P("device"), out_specs=P("device"), check_vma=False)
    def permute(x):
        @pl.kernel(out_type=pltpu.HBM(x.shape, x.dtype), mesh=tc,
                   scratch_types=(pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA))
        def kernel(x_hbm, o_hbm, send_sem, recv_sem):
            me = jax.lax.axis_index("device")
            right = jax.lax.rem(me + 1, jax.lax.axis_size("device"))
            copy = pltpu.make_async_remote_copy(x_hbm, o_hbm, send_sem, recv_sem,
                                                device_id={"device": right, "tc": 0},
                                                device_id_type=pl.DeviceIdType.MESH)
            copy.start()
            copy.wait_send()
            if wait_recv:
                copy.wait_recv()
        return kernel(x)

    return permute
