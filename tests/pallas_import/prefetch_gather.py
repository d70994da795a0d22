"""A row gather driven by scalar prefetch, the way MoE and paged-attention kernels write it:
`idx = ids_ref[i]` read from SMEM picks the row each DMA copies; a negative id means "no row"
and is masked with `pl.when(idx >= 0)`. Every device then sends its gathered rows to its
right neighbour (a ppermute of the gathered block, COLLECTIVE = None: hangs, races, bounds).

--param bad=1 puts an id equal to the row count into the table: the DMA reads out of range
(an `out_of_bounds` finding at the copy's line, naming the SMEM read it came from).
--param neg=0 leaves the negative ids out (every row gathered).
--param nowait=1 also forgets the receive wait: the check goes on past the access out of range
and finds that too."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec
COLLECTIVE = None
AXIS = "x"
IN_SPECS = (P(), P("x", None))
OUT_SPECS = P("x", None)
ROWS = 8


def kernel(ids_ref, x_ref, o_ref, rows, sem, send_sem, recv_sem, *, nowait):
    def gather(i, carry):
        idx = ids_ref[i]

        @pl.when(idx >= 0)
        def _():
            copy = pltpu.make_async_copy(x_ref.at[pl.ds(idx, 1)], rows.at[pl.ds(i, 1)], sem)
            copy.start()
            copy.wait()
        return carry

    lax.fori_loop(0, ROWS, gather, 0)
    right = lax.rem(lax.axis_index("x") + 1, lax.psum(1, "x"))
    send = pltpu.make_async_remote_copy(src_ref=rows, dst_ref=o_ref, send_sem=send_sem, recv_sem=recv_sem,
                                        device_id=(right,), device_id_type=pl.DeviceIdType.MESH)
    send.start()
    if not nowait:
        send.wait_recv()
    send.wait_send()


def build(mesh, *, interpret=None, cols=128, bad=0, neg=1, nowait=0):
    call = pl.pallas_call(
        functools.partial(kernel, nowait=bool(nowait)),
        out_shape=jax.ShapeDtypeStruct((ROWS, cols), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(1,),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.VMEM((ROWS, cols), jnp.float32)] + [pltpu.SemaphoreType.DMA] * 3),
        interpret=pltpu.InterpretParams() if interpret else False,
    )
    return jax.jit(jax.shard_map(call, mesh=mesh, in_specs=IN_SPECS, out_specs=OUT_SPECS, check_vma=False))


def make_inputs(mesh, key, *, cols=128, bad=0, neg=1, nowait=0):
    n = mesh.shape["x"]
    ids = np.arange(ROWS, dtype=np.int32)[::-1].copy()
    if neg:
        ids[1::3] = -1
    if bad:
        ids[2] = ROWS
    x = jax.random.normal(jax.random.key(key), (n * ROWS, cols), jnp.float32)
    return (jnp.asarray(ids), jax.device_put(x, jax.sharding.NamedSharding(mesh, P("x", None))))
