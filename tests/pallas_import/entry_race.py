"""An entry race: the kernel owns its synchronisation (`collective_id`), signals the barrier
semaphore to one neighbour, waits for one signal, then sends its block to its right neighbour.
Device d learns only that the device that signalled it has entered the kernel:

- --param right=0 (signal left): d hears from d + 1, the device it sends to: safe.
- --param right=1 (signal right): d hears from d - 1; d + 1 may not have entered the kernel
  yet (its output still belongs to whatever ran before): a race at the DMA, at N >= 3.
- --param double=1 adds the emitted kernels' second round on a scoped REGULAR semaphore. With
  right=1 that still races at N >= 4; at N = 3 the chain d + 1's entry -> its barrier signal
  to d + 2 = d - 1 -> d - 1's second-round signal to d orders it (no race, correctly).
- --param gridspec=1 passes the specs through `pltpu.PrefetchScalarGridSpec`, as JAX's tests do.
- sync="device" (no barrier, no collective_id): Mosaic's device barrier precedes the kernel, safe;
  sync="skip" (`skip_device_barrier=True`, no barrier of its own): a race. The two kernels trace
  to the same jaxpr and differ only in their compiler params.

Written twice: `build()` here, and the same kernel in a unittest module
(entry_race_unittest.py); both must find the same races."""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec
COLLECTIVE = "ppermute"
SHIFT = 1
AXIS = "x"
IN_SPECS = (P("x", None),)
OUT_SPECS = P("x", None)


def permute(x, mesh, *, signal_right, interpret=None, double=False, gridspec=False, sync="barrier"):
    """The kernel and its call, shared by build() and the unittest module."""
    n = mesh.shape["x"]

    def kernel(x_ref, o_ref, send_sem, recv_sem):
        me = lax.axis_index("x")
        left, right = lax.rem(me + n - 1, n), lax.rem(me + 1, n)
        if sync == "barrier":
            barrier = pltpu.get_barrier_semaphore()
            pl.semaphore_signal(barrier, 1, device_id=(right if signal_right else left,),
                                device_id_type=pl.DeviceIdType.MESH)
            pl.semaphore_wait(barrier, 1)
        if double:
            @functools.partial(pl.run_scoped, second=pltpu.SemaphoreType.REGULAR)
            def _(second):
                pl.semaphore_signal(second, 1, device_id=(right if signal_right else left,),
                                    device_id_type=pl.DeviceIdType.MESH)
                pl.semaphore_wait(second, 1)
        copy = pltpu.make_async_remote_copy(src_ref=x_ref, dst_ref=o_ref, send_sem=send_sem, recv_sem=recv_sem,
                                            device_id=(right,), device_id_type=pl.DeviceIdType.MESH)
        copy.start()
        copy.wait_recv()
        copy.wait_send()

    rows = x.shape[0] // n
    specs = dict(in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec(memory_space=pl.ANY),
                 scratch_shapes=[pltpu.SemaphoreType.DMA] * 2)
    call = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((rows, x.shape[1]), x.dtype),
        **({"grid_spec": pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=0, **specs)} if gridspec else specs),
        compiler_params=(pltpu.CompilerParams(collective_id=0) if sync == "barrier" else
                         pltpu.CompilerParams(skip_device_barrier=sync == "skip")),
        interpret=interpret)
    return jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))(x)


def build(mesh, *, interpret=None, rows=8, cols=128, right=1, double=0, gridspec=0, sync="barrier"):
    return jax.jit(lambda x: permute(x, mesh, signal_right=bool(right), interpret=interpret, double=bool(double),
                                     gridspec=bool(gridspec), sync=sync))


def make_inputs(mesh, key, *, rows=8, cols=128, **params):
    n = mesh.shape["x"]
    x = jax.random.normal(jax.random.key(key), (n * rows, cols), jnp.float32)
    return (jax.device_put(x, jax.sharding.NamedSharding(mesh, P("x", None))),)
