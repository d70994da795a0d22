"""Kernels in a pytest-style test module: plain `def test_...` functions, a parametrized one,
a fixture. Each test runs a right permute in Pallas' TPU interpret mode on CPU devices and
compares it with numpy; `pytest --ringc` checks the kernels they run, and `ringc check
FILE --devices 4` runs the tests itself and checks them too.

- test_right_permute[0], [1]: the clean kernel (the same kernel twice: checked once),
  compared with `lax.ppermute`, which names the meaning ringc checks it against.
- test_right_permute_reuses_send_buffer: the planted race. The kernel stages its block in
  `send_buf`, starts the DMA and zeroes `send_buf` again before `wait_send`: on a TPU the DMA
  may still be reading it. Interpret mode with `dma_execution_mode="eager"` copies at
  `start()`, so the test passes there; ringc finds the race.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec


def right_permute_kernel(x_ref, out_ref, send_buf, recv_buf, send_sem, recv_sem, *, reuse_early):
    my_id = lax.axis_index("x")
    right = lax.rem(my_id + 1, lax.psum(1, "x"))
    send_buf[...] = x_ref[...]
    copy = pltpu.make_async_remote_copy(src_ref=send_buf, dst_ref=recv_buf, send_sem=send_sem, recv_sem=recv_sem,
                                        device_id=(right,), device_id_type=pl.DeviceIdType.MESH)
    copy.start()
    if reuse_early:
        send_buf[...] = jnp.zeros_like(send_buf)  # before wait_send: the DMA may still read it
    copy.wait_recv()
    out_ref[...] = recv_buf[...]
    copy.wait_send()
    if not reuse_early:
        send_buf[...] = jnp.zeros_like(send_buf)


def right_permute(x, mesh, *, reuse_early=False):
    rows, cols = x.shape[0] // mesh.shape["x"], x.shape[1]
    kernel = pl.pallas_call(
        functools.partial(right_permute_kernel, reuse_early=reuse_early),
        out_shape=jax.ShapeDtypeStruct((rows, cols), x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((rows, cols), x.dtype)] * 2 + [pltpu.SemaphoreType.DMA] * 2,
        interpret=pltpu.InterpretParams(dma_execution_mode="eager"),
    )
    return jax.jit(jax.shard_map(kernel, mesh=mesh, in_specs=P("x", None), out_specs=P("x", None),
                                 check_vma=False))(x)


@pytest.fixture
def mesh():
    n = min(jax.device_count(), 4)
    return jax.make_mesh((n,), ("x",), axis_types=(jax.sharding.AxisType.Auto,), devices=jax.devices()[:n])


def inputs(mesh, seed):
    n = mesh.shape["x"]
    x = jax.random.normal(jax.random.key(seed), (8 * n, 128), jnp.float32)
    return jax.device_put(x, jax.sharding.NamedSharding(mesh, P("x", None)))


def reference(x, mesh):
    n = mesh.shape["x"]
    perm = [(i, (i + 1) % n) for i in range(n)]
    return jax.jit(jax.shard_map(lambda b: lax.ppermute(b, "x", perm), mesh=mesh, in_specs=P("x", None),
                                 out_specs=P("x", None)))(x)


@pytest.mark.parametrize("seed", [0, 1])
def test_right_permute(mesh, seed):
    x = inputs(mesh, seed)
    np.testing.assert_array_equal(right_permute(x, mesh), reference(x, mesh))


def test_right_permute_reuses_send_buffer(mesh, tmp_path):
    x = inputs(mesh, 2)
    out = right_permute(x, mesh, reuse_early=True)
    np.save(tmp_path / "out.npy", np.asarray(out))
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), np.roll(np.asarray(x), 8, axis=0))
