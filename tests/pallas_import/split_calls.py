"""A remote copy started in one pallas_call and waited in the next, the way JAX's
tpu_pallas_async_test.py writes futures: the first call returns the in-flight
destination and both DMA semaphores as outputs, the second takes them as inputs
(aliased) and waits. With --param wait=0 the second call forgets the receive wait."""
# COLLECTIVE is a permute by one: with --param rounds=K (K rounds of the pair in a
# fori_loop) the result is a permute by K, which the meaning check tells apart.

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec
COLLECTIVE = "ppermute"
AXIS = "x"
IN_SPECS = (P("x", None),)
OUT_SPECS = P("x", None)
ANY = pl.BlockSpec(memory_space=pl.ANY)
SEM = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)


def start_kernel(x_ref, out_ref, send_sem, recv_sem):
    right = lax.rem(lax.axis_index("x") + 1, lax.axis_size("x"))
    pltpu.make_async_remote_copy(x_ref, out_ref, send_sem, recv_sem, device_id=(right,),
                                 device_id_type=pl.DeviceIdType.MESH).start()


def wait_kernel(x_ref, out_ref, send_sem, recv_sem, out2_ref, send2, recv2, *, wait):
    del out2_ref, send2, recv2  # aliased to the inputs
    right = lax.rem(lax.axis_index("x") + 1, lax.axis_size("x"))
    copy = pltpu.make_async_remote_copy(x_ref, out_ref, send_sem, recv_sem, device_id=(right,),
                                        device_id_type=pl.DeviceIdType.MESH)
    copy.wait_send()
    if wait:
        copy.wait_recv()


def build(mesh, *, interpret=None, rows=8, cols=128, wait=1, rounds=1):
    shape = jax.ShapeDtypeStruct((rows, cols), jnp.float32)
    sem = pltpu.SemaphoreType.DMA(())
    start = pl.pallas_call(start_kernel, out_shape=(shape, sem, sem), in_specs=[ANY],
                           out_specs=(ANY, SEM, SEM),
                           compiler_params=pltpu.CompilerParams(has_side_effects=True))
    finish = pl.pallas_call(functools.partial(wait_kernel, wait=wait), out_shape=(shape, sem, sem),
                            in_specs=[ANY, ANY, SEM, SEM], out_specs=(ANY, SEM, SEM),
                            input_output_aliases={1: 0, 2: 1, 3: 2},
                            compiler_params=pltpu.CompilerParams(has_side_effects=True))

    def one_round(x):
        out, send, recv = start(x)
        out, _, _ = finish(x, out, send, recv)
        return out

    def per_device(x):  # --param rounds=K: K rounds in a fori_loop (a permute by K)
        return one_round(x) if rounds == 1 else lax.fori_loop(0, rounds, lambda i, y: one_round(y), x)

    return jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=IN_SPECS, out_specs=OUT_SPECS, check_vma=False))


def make_inputs(mesh, key, *, rows=8, cols=128, wait=1, rounds=1):
    x = jax.random.normal(jax.random.key(key), (mesh.shape["x"] * rows, cols), jnp.float32)
    return (jax.device_put(x, jax.sharding.NamedSharding(mesh, P("x", None))),)
