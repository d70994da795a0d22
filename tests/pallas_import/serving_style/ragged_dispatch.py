"""A split-phase ragged all-to-all as a script, in the style of MoE libraries' token
dispatch (the shape of the problem follows jax-ml/jax's
jax/experimental/pallas/ops/tpu/ragged_all_to_all.py and MaxText-style expert-parallel
dispatch: sizes per destination, offsets computed by jitted code before the kernel, a start
kernel and a done kernel with the DMA semaphores passed between the two pallas_calls; no
code is taken from them).

Device d sends `sizes[d, g]` rows of its tokens, from `offsets[d, g]`, to device g, into
row block d of g's output. The routing table is data the script builds; the offsets are
computed from it by jitted code before the kernel (`cumsum`), and each device picks its own
row with `lax.axis_index` inside the shard_map. The done kernel waits for every row it sent
and every row it receives, each with one descriptor sized to the total (a reshaped view of
the output).

With WRONG = 1 the done kernel waits for as many received rows as it sent, which is not what
arrives on every device: a hang (a wait that can never be satisfied) on some devices."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec
WRONG = 0
ROWS, HIDDEN = 8, 128
ANY = pl.BlockSpec(memory_space=pl.ANY)
SMEM = pl.BlockSpec(memory_space=pltpu.SMEM)
SEM = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)


def start_kernel(sizes_ref, offsets_ref, x_ref, out_ref, send_sem, recv_sem, *, n):
    me = lax.axis_index("x")
    for g in range(n):
        size = sizes_ref[g]

        @pl.when(size > 0)
        def _():
            pltpu.make_async_remote_copy(x_ref.at[pl.ds(offsets_ref[g], size)],
                                         out_ref.at[me, pl.ds(0, size)], send_sem, recv_sem,
                                         device_id=(g,), device_id_type=pl.DeviceIdType.MESH).start()


def done_kernel(sent_ref, received_ref, x_ref, out_ref, send_sem, recv_sem, out2, send2, recv2, *, n):
    del out2, send2, recv2  # aliased to the inputs
    flat = out_ref.reshape(n * ROWS, HIDDEN)
    sent, received = sent_ref[0], received_ref[0]
    pltpu.make_async_copy(x_ref.at[pl.ds(0, sent)], flat.at[pl.ds(0, sent)], send_sem).wait()
    waited = sent if WRONG else received
    pltpu.make_async_copy(flat.at[pl.ds(0, waited)], flat.at[pl.ds(0, waited)], recv_sem).wait()


def dispatch(x, sizes, offsets, sent, received):
    n = lax.axis_size("x")
    me = lax.axis_index("x")
    sem = pltpu.SemaphoreType.DMA(())
    out_shape = jax.ShapeDtypeStruct((n, ROWS, HIDDEN), x.dtype)
    start = pl.pallas_call(functools.partial(start_kernel, n=n), out_shape=(out_shape, sem, sem),
                           in_specs=[SMEM, SMEM, ANY], out_specs=(ANY, SEM, SEM),
                           compiler_params=pltpu.CompilerParams(has_side_effects=True))
    done = pl.pallas_call(functools.partial(done_kernel, n=n), out_shape=(out_shape, sem, sem),
                          in_specs=[SMEM, SMEM, ANY, ANY, SEM, SEM], out_specs=(ANY, SEM, SEM),
                          input_output_aliases={3: 0, 4: 1, 5: 2},
                          compiler_params=pltpu.CompilerParams(has_side_effects=True))
    my_sizes, my_offsets = sizes[me], offsets[me]
    out, s, r = start(my_sizes, my_offsets, x)
    out, _, _ = done(sent[me][None], received[me][None], x, out, s, r)
    return out


@functools.partial(jax.jit, static_argnums=0)
def ragged_dispatch(mesh, x, sizes):
    offsets = jnp.cumsum(sizes, axis=1) - sizes  # where each destination's rows start
    sent, received = sizes.sum(axis=1), sizes.sum(axis=0)
    return jax.shard_map(dispatch, mesh=mesh, in_specs=(P("x"), P(), P(), P(), P()), out_specs=P("x"),
                         check_vma=False)(x, sizes, offsets, sent, received)


n = jax.device_count()
mesh = jax.make_mesh((n,), ("x",))
rng = np.random.default_rng(0)
# Each device routes its ROWS tokens: a ragged split over the n destinations.
cuts = np.sort(rng.integers(0, ROWS + 1, size=(n, n - 1)), axis=1)
table = np.diff(np.concatenate([np.zeros((n, 1), int), cuts, np.full((n, 1), ROWS)], axis=1), axis=1)
sizes = jnp.asarray(table, jnp.int32)
x = jax.device_put(jnp.ones((n * ROWS, HIDDEN), jnp.float32), jax.sharding.NamedSharding(mesh, P("x")))
out = ragged_dispatch(mesh, x, sizes)
