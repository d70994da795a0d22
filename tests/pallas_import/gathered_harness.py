"""The harness of MIT 6.S894's TPU collectives lab (as its students' solutions run it):
the kernel's result and the `lax` reference are each gathered with
`lax.all_gather(tiled=True)` inside the same jit, and the reference (`expected`) is computed
first. SHIFT is the reference's shift; the kernel sends to the next device."""
import functools

import jax
from jax import lax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec
N = jax.device_count()
SHIFT = 1
mesh = jax.make_mesh((N,), ("i",))


def kernel(x_ref, o_ref, send_sem, recv_sem):
    right = lax.rem(lax.axis_index("i") + 1, N)
    c = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=right,
                                     device_id_type=pltpu.DeviceIdType.LOGICAL)
    c.start()
    c.wait_send()
    c.wait_recv()


def launch(x):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
                          out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                          scratch_shapes=[pltpu.SemaphoreType.DMA] * 2)(x)


def reference(x):
    return lax.ppermute(x, "i", [(j, (j + SHIFT) % N) for j in range(N)])


def gathered(fn):
    @jax.jit
    @functools.partial(jax.shard_map, mesh=mesh, in_specs=P("i"), out_specs=P("i"), check_vma=False)
    def run(x):
        return lax.all_gather(fn(x), axis_name="i", tiled=True)
    return run


x = jnp.zeros((8 * N, 128), jnp.float32)
expected = gathered(reference)(x)
actual = gathered(launch)(x)
