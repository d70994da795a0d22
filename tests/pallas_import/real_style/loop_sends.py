"""A script in the style of the Pallas distributed tutorial's cells (jax-ml/jax
docs/pallas/tpu/distributed.md): a mesh over `jax.devices()`, a kernel run at top level
through a helper, next to its lax reference. Written for ringc's tests, not copied.

The kernel sends its two halves to the right neighbour from one line of a Python loop,
both into the same output rows (the planted bug: the destination does not move with `i`),
so the two DMAs race with each other (write-write, the same device, line and grid point:
the finding says which run of the line each is). The DMAs start in a shared helper,
`_start`, as tpu-inference's kernels start theirs in `_start_or_wait_copy`: the finding
names the helper's line and the kernel line that called it.
"""

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec
num_devices = jax.local_device_count()
mesh = jax.make_mesh((num_devices,), ("x",))


def _start(copy):
    copy.start()
    return copy


def send_halves_kernel(x_ref, o_ref, send_sem, recv_sem):
    right = lax.rem(lax.axis_index("x") + 1, num_devices)
    copies = []
    for i in range(2):
        copies.append(_start(pltpu.make_async_remote_copy(
            x_ref.at[pl.ds(4 * i, 4)], o_ref.at[pl.ds(0, 4)], send_sem, recv_sem,
            device_id=(right,), device_id_type=pl.DeviceIdType.MESH)))
    for c in copies:
        c.wait()


def launch(x):
    call = pl.pallas_call(send_halves_kernel, out_shape=jax.ShapeDtypeStruct((8, 128), x.dtype),
                          in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec(memory_space=pl.ANY),
                          scratch_shapes=[pltpu.SemaphoreType.DMA] * 2)
    return jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))(x)


x = jax.device_put(jnp.arange(8 * num_devices * 128.0).reshape(8 * num_devices, 128),
                   jax.sharding.NamedSharding(mesh, P("x")))
result = launch(x)
print("result", result.shape)
