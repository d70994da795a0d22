"""Ring attention in the style of public libraries (cf. erfanzar/ejkernel's
kernels/_pallas/tpu/ring_attention, haoliuhl/ringattention): a single-device flash-attention
`pallas_call` per step, the K/V blocks passed round the ring by `lax.ppermute` between the
steps (a `lax.scan`). Written for ringc's tests, not copied.

The old spellings such libraries carry are here too: a BlockSpec subclass that keeps the
`(index_map, block_shape)` order (jax 0.10 copies specs with `BlockSpec.replace`, which
fails on it), `pltpu.repeat` (removed for `jnp.tile`), and `jax.jit(abstracted_axes=None)`
(the keyword is gone). Like the published kernels, the running max, sum and accumulator
live in outputs with a constant index map that the caller drops: per-core scratch.

    ringc check ring_flash.py --devices 4 --arg "q=float32[256*N,128]@x" \
        --arg "k=float32[256*N,128]@x" --arg "v=float32[256*N,128]@x"

is ok; `--param keep_scratch=true` returns the accumulator output too, which both
TensorCores of a megacore chip write back (core 1's copy wins): FAILED megacore_vmem.
`--param shift=2` passes the blocks two devices on: on 4 devices two cycles of 2, which
the verdict states (each device then sees half the keys).
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

LANES = 128


class OldOrderSpec(pl.BlockSpec):
    def __init__(self, index_map, block_shape):
        super().__init__(block_shape=block_shape, index_map=index_map)


def _flash_block(q_ref, k_ref, v_ref, m_in_ref, l_in_ref, o_in_ref, o_ref, m_ref, l_ref,
                 m_scratch_ref, l_scratch_ref, acc_scratch_ref, *, scale, block_k):
    kv = pl.program_id(1)

    @pl.when(kv == 0)
    def _start():
        m_scratch_ref[...] = m_in_ref[...]
        l_scratch_ref[...] = l_in_ref[...]
        acc_scratch_ref[...] = o_in_ref[...]

    s = lax.dot_general(q_ref[...], k_ref[...], (((1,), (1,)), ((), ())),
                        preferred_element_type=jnp.float32) * scale
    m_prev, l_prev = m_scratch_ref[...], l_scratch_ref[...]
    m_next = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
    p = jnp.exp(s - pltpu.repeat(m_next, block_k // LANES, axis=1))
    alpha = jnp.exp(m_prev - m_next)
    l_next = alpha * l_prev + jnp.sum(p, axis=1, keepdims=True)
    m_scratch_ref[...] = m_next
    l_scratch_ref[...] = l_next
    acc_scratch_ref[...] = acc_scratch_ref[...] * alpha + jnp.dot(p, v_ref[...], preferred_element_type=jnp.float32)

    @pl.when(kv == pl.num_programs(1) - 1)
    def _store():
        o_ref[...] = acc_scratch_ref[...]
        m_ref[...] = m_scratch_ref[...]
        l_ref[...] = l_scratch_ref[...]


def _flash_step(q, k, v, m, l, o, *, block_q, block_k, keep_scratch):
    rows, dim = q.shape
    grid = (rows // block_q, k.shape[0] // block_k)
    row = OldOrderSpec(lambda i, j: (i, 0), (block_q, dim))
    stat = OldOrderSpec(lambda i, j: (i, 0), (block_q, LANES))
    key = OldOrderSpec(lambda i, j: (j, 0), (block_k, dim))
    scratch = [OldOrderSpec(lambda i, j: (0, 0), (block_q, width)) for width in (LANES, LANES, dim)]
    out = pl.pallas_call(
        functools.partial(_flash_block, scale=dim ** -0.5, block_k=block_k),
        grid=grid,
        in_specs=[row, key, key, stat, stat, row],
        out_specs=[row, stat, stat, *scratch],
        out_shape=[jax.ShapeDtypeStruct(q.shape, jnp.float32), jax.ShapeDtypeStruct((rows, LANES), jnp.float32),
                   jax.ShapeDtypeStruct((rows, LANES), jnp.float32),
                   *(jax.ShapeDtypeStruct((block_q, w), jnp.float32) for w in (LANES, LANES, dim))],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(q, k, v, m, l, o)
    o, m, l, _, _, acc = out
    return (o, m, l, acc) if keep_scratch else (o, m, l)


@functools.partial(jax.jit, static_argnames=("axis_name", "block_q", "block_k", "keep_scratch", "shift"),
                   abstracted_axes=None)
def ring_attention(q, k, v, axis_name="x", *, block_q=128, block_k=128, keep_scratch=False, shift=1):
    """Per shard: this device's queries against every device's keys, the K/V blocks passed
    `shift` devices on after each step."""
    n = lax.axis_size(axis_name)
    rows = q.shape[0]
    m = jnp.full((rows, LANES), -jnp.inf, jnp.float32)
    l = jnp.zeros((rows, LANES), jnp.float32)
    o = jnp.zeros(q.shape, jnp.float32)

    def step(carry, _):
        o, m, l, k, v = carry
        got = _flash_step(q, k, v, m, l, o, block_q=block_q, block_k=block_k, keep_scratch=keep_scratch)
        o, m, l = got[:3]
        k, v = (lax.ppermute(a, axis_name, [(i, (i + shift) % n) for i in range(n)]) for a in (k, v))
        return (o, m, l, k, v), (got[3] if keep_scratch else None)

    (o, m, l, _, _), acc = lax.scan(step, (o, m, l, k, v), None, length=n)
    out = o / l[:, :1]
    return (out, acc) if keep_scratch else out
