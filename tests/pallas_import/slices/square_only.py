"""A script written for one slice, as tpucoll's `collectives.py` is: `main()` asserts a 2x2
mesh before it runs its kernel, so on 2, 3 or 5 devices it stops there and only N = 4 has a
kernel call to check. Over `--devices 2..5` each size gets its own line."""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec


def _kernel(x_ref, o_ref, send_sem, recv_sem):
    right = lax.rem(lax.axis_index("i") + 1, 4)
    copy = pltpu.make_async_remote_copy(src_ref=x_ref, dst_ref=o_ref, send_sem=send_sem, recv_sem=recv_sem,
                                        device_id=(right,), device_id_type=pltpu.DeviceIdType.MESH)
    copy.start()
    copy.wait()


def main():
    devices = np.array(jax.devices())
    assert devices.size == 4, "expected a 2x2 device mesh"
    mesh = jax.sharding.Mesh(devices, ("i",))
    permute = pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                             in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                             out_specs=pl.BlockSpec(memory_space=pl.ANY),
                             scratch_shapes=[pltpu.SemaphoreType.DMA] * 2)
    f = jax.jit(jax.shard_map(permute, mesh=mesh, in_specs=P("i"), out_specs=P("i"), check_vma=False))
    return f(jnp.zeros((32, 128), jnp.float32))


if __name__ == "__main__":
    main()
