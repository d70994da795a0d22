"""Expert-parallel token dispatch with in-kernel routing and a count all-gather by remote
DMAs, in the style of serving stacks' fused MoE kernels (the shape of the problem follows
vllm-project/tpu-inference, tpu_inference/kernels/fused_moe/v1/kernel.py: top-k in VMEM, a
routing table staged into SMEM by a DMA, per-expert counts exchanged between devices by remote
copies and read back from SMEM as slice starts and sizes; no code is taken from it).

Per shard, on a ring of n devices with E = 2n experts (two per device):
1. each token's expert is the argmax of its router logits (runtime data: ringc samples it);
   the table goes to VMEM, then to SMEM by a DMA; the device's per-expert counts go to row
   `me` of `counts_vmem`;
2. the count rows go around the ring by remote DMAs (one receive semaphore per step), then
   to SMEM by a DMA: every device knows how many tokens each device sends each expert;
3. each token is copied to its expert's device (a local copy when that is this device), at
   the row after the tokens of lower devices and this device's earlier tokens for that expert;
4. each device waits for the rows its experts receive (the all-gathered counts) and for its
   remote sends.

ringc follows the table through the VMEM -> SMEM DMA and the counts through the remote DMAs
(the devices evaluated together), so every index, size and target is the run's.

`--param wrong=1`: the routing table is read from SMEM before the staging DMA's wait (a race
at the read, line 72). `--param wrong=2`: a device waits for its experts' rows counting its
own tokens twice (a hang at the wait, line 106, whenever it routed a token to itself)."""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

LANES = 128  # the routing table is lane-padded, as the public kernels keep it


def _moe_kernel(x_ref, logits_ref, out_ref, table_vmem, table_smem, counts_vmem, counts_smem, offs_smem,
                stage_sem, counts_sem, send_sem, recv_sems, tok_send, tok_recv, *, axis, n, rows, local, wrong):
    me = lax.axis_index(axis)
    right = lax.rem(me + 1, n)
    left = lax.rem(me + n - 1, n)
    experts = n * local
    # 1. routing in the kernel: the table to VMEM, then to SMEM; this device's counts to its row.
    expert = jnp.argmax(logits_ref[...], axis=1).astype(jnp.int32)  # [rows]
    table_vmem[...] = jnp.broadcast_to(expert[:, None], (rows, LANES))
    stage = pltpu.make_async_copy(table_vmem, table_smem, stage_sem)
    stage.start()
    hits = lax.broadcasted_iota(jnp.int32, (rows, LANES), 1) == expert[:, None]
    counts_vmem[...] = jnp.zeros_like(counts_vmem)
    counts_vmem[pl.ds(me, 1)] = jnp.sum(hits.astype(jnp.int32), axis=0, keepdims=True)
    # Tell the left neighbour my counts buffer is ready; wait until the right one's is.
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, device_id={axis: left}, device_id_type=pl.DeviceIdType.MESH)
    pl.semaphore_wait(barrier, 1)
    # 2. all-gather the count rows around the ring.
    for step in range(n - 1):
        row = counts_vmem.at[pl.ds(lax.rem(me - step + n, n), 1)]
        copy = pltpu.make_async_remote_copy(src_ref=row, dst_ref=row, send_sem=send_sem,
                                            recv_sem=recv_sems.at[step], device_id={axis: right},
                                            device_id_type=pl.DeviceIdType.MESH)
        copy.start()
        copy.wait()
    counts = pltpu.make_async_copy(counts_vmem, counts_smem, counts_sem)
    counts.start()
    counts.wait()
    if not wrong == 1:
        stage.wait()
    # 3. each token to its expert's device, after the rows of the devices before this one.
    for e in range(experts):
        offs_smem[e] = 0
    sent = 0
    for t in range(rows):
        e = table_smem[t, 0]
        owner = e // local
        start = 0
        for d in range(n):
            start += lax.select(d < me, counts_smem[d, e], 0)
        row = start + offs_smem[e]
        offs_smem[e] = offs_smem[e] + 1
        dst = out_ref.at[e % local, pl.ds(row, 1)]

        @pl.when(owner == me)
        def _():
            pltpu.make_async_copy(x_ref.at[pl.ds(t, 1)], dst, tok_recv).start()

        @pl.when(owner != me)
        def _():
            pltpu.make_async_remote_copy(src_ref=x_ref.at[pl.ds(t, 1)], dst_ref=dst, send_sem=tok_send,
                                         recv_sem=tok_recv, device_id={axis: owner},
                                         device_id_type=pl.DeviceIdType.MESH).start()

        sent += lax.select(owner != me, 1, 0)
    if wrong == 1:
        stage.wait()
    # 4. the rows this device's experts receive, and this device's remote sends.
    for j in range(local):
        e = me * local + j
        total = 0
        for d in range(n):
            total += counts_smem[d, e]
        if wrong == 2:
            total += counts_smem[me, e]

        @pl.when(total > 0)
        def _():
            block = out_ref.at[j, pl.ds(0, total)]
            pltpu.make_async_copy(block, block, tok_recv).wait()

    @pl.when(sent > 0)
    def _():
        block = x_ref.at[pl.ds(0, sent)]
        pltpu.make_async_copy(block, block, tok_send).wait()


def dispatch(tokens: jax.Array, logits: jax.Array, *, ep_axis_name: str = "ep", wrong: int = 0) -> jax.Array:
    """tokens: this device's [rows, hidden]; logits: its tokens' router logits [rows, 2n];
    returns [2, n * rows, hidden]: the tokens routed to this device's two experts, by expert,
    in device order (rows past an expert's count are not written)."""
    n = lax.axis_size(ep_axis_name)
    rows, hidden = tokens.shape
    local = logits.shape[1] // n
    return pl.pallas_call(
        functools.partial(_moe_kernel, axis=ep_axis_name, n=n, rows=rows, local=local, wrong=wrong),
        out_shape=jax.ShapeDtypeStruct((local, n * rows, hidden), tokens.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((rows, LANES), jnp.int32), pltpu.SMEM((rows, LANES), jnp.int32),
                        pltpu.VMEM((n, LANES), jnp.int32), pltpu.SMEM((n, LANES), jnp.int32),
                        pltpu.SMEM((LANES,), jnp.int32),
                        pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA,
                        pltpu.SemaphoreType.DMA((n - 1,)), pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        compiler_params=pltpu.CompilerParams(collective_id=0, has_side_effects=True),
    )(tokens, logits)
