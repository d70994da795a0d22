"""Expert routing from the router's logits inside the kernel, in the style of serving stacks'
fused expert-parallel MoE kernels (the shape of the problem follows
vllm-project/tpu-inference, tpu_inference/kernels/fused_moe/v1/kernel.py, whose kernel takes
the top-k of the gating output in VMEM and moves tokens by the expert ids it found; no code
is taken from it).

Per shard: every device sends its tokens around the "ep" ring (a ring all-gather into
`gathered`), then copies each gathered token into the row of the local expert it is routed
to: the expert is the argmax of the token's logits, a value that exists only at run time.
ringc samples it (reproducibly, in the argmax's range [0, E)) and says so in the verdict.

With `wrong=1` (--param wrong=1) the kernel indexes its local expert rows with the global
expert id (it forgets to subtract the first expert of the device): for tokens routed to a
later device's experts the index is past the rows, an `out_of_bounds` finding."""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _route_kernel(x_ref, logits_ref, out_ref, gathered, copy_sem, send_sem, recv_sems, *,
                  axis, n, rows, local_experts, wrong):
    me = lax.axis_index(axis)
    right = lax.rem(me + 1, n)
    local = pltpu.make_async_copy(x_ref, gathered.at[pl.ds(me * rows, rows)], copy_sem)
    local.start()
    local.wait()
    for step in range(n - 1):
        slot = lax.rem(me - step + n, n)
        block = gathered.at[pl.ds(slot * rows, rows)]
        copy = pltpu.make_async_remote_copy(src_ref=block, dst_ref=block, send_sem=send_sem,
                                            recv_sem=recv_sems.at[step], device_id={axis: right},
                                            device_id_type=pltpu.DeviceIdType.MESH)
        copy.start()
        copy.wait()
    first = me * local_experts
    for t in range(n * rows):
        expert = jnp.argmax(logits_ref[t, :])  # the router's choice: known only at run time

        @pl.when(jnp.logical_and(expert >= first, expert < first + local_experts))
        def _():
            row = expert - first * (1 - wrong)
            move = pltpu.make_async_copy(gathered.at[pl.ds(t, 1)], out_ref.at[row, pl.ds(t, 1)], copy_sem)
            move.start()
            move.wait()


def route_tokens(tokens: jax.Array, logits: jax.Array, *, ep_axis_name: str = "ep",
                 wrong: int = 0) -> jax.Array:
    """tokens: this device's [rows, hidden]; logits: every token's router logits
    [n * rows, experts] (replicated); returns [local experts, n * rows, hidden]."""
    n = lax.axis_size(ep_axis_name)
    rows, hidden = tokens.shape
    experts = logits.shape[1]
    return pl.pallas_call(
        functools.partial(_route_kernel, axis=ep_axis_name, n=n, rows=rows,
                          local_experts=experts // n, wrong=wrong),
        out_shape=jax.ShapeDtypeStruct((experts // n, n * rows, hidden), tokens.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((n * rows, hidden), tokens.dtype), pltpu.SemaphoreType.DMA,
                        pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA((n - 1,))],
    )(tokens, logits)
