"""A tensor-parallel MLP layer on ringc's collective matmuls, with gradients.

The sequence-parallel MLP of Megatron-style tensor parallelism, over mesh axis "model":

    h = all_gather(x) @ w1       all_gather_matmul: x's rows (the sequence) sharded, w1's
                                 columns (the hidden dim) sharded; the x shards travel the
                                 ring while each is multiplied (schedules/all_gather_matmul.yaml)
    a = gelu(h)
    y = psum_scatter(a @ w2)     matmul_psum_scatter: the hidden dim sharded, the partial
                                 products summed and scattered back by rows
                                 (schedules/matmul_reduce_scatter.yaml)

`jax.grad` goes through both kernels. Each carries a `jax.custom_vjp` whose backward pass
is its transpose collective (ringc.collectives): all_gather_matmul's is matmul_psum_scatter
on the cotangent with w1 transposed (and a local matmul with the gathered x for w1's
cotangent), and the other way round; those backward passes run `lax` (the modules say so
in their docstrings). The same layer with `lax.all_gather` / `lax.psum_scatter` is the
reference: `compare` returns the largest differences of the loss and of every gradient.

    python examples/collective_matmul_layer.py 2   # 2 CPU devices, Pallas TPU interpret mode
"""

from __future__ import annotations

import sys
from pathlib import Path

import ringc
from ringc.run import ensure_host_devices

REPO = Path(__file__).resolve().parent.parent
if __name__ == "__main__":  # before jax starts: N CPU devices and a spare (ringc/run.py)
    N = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    ensure_host_devices(N)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

P = jax.sharding.PartitionSpec
gather_matmul = ringc.kernel(REPO / "schedules" / "all_gather_matmul.yaml")
matmul_scatter = ringc.kernel(REPO / "schedules" / "matmul_reduce_scatter.yaml")


def ringc_ops():
    """The two collective matmuls as ringc per-shard calls (interpret mode on CPU)."""
    def up(x, w1):      # [rows, d] @ [d, hidden / N] -> [N * rows, hidden / N]
        return gather_matmul.kernel(x, w1, axis_name="model", interpret=True)

    def down(a, w2):    # [N * rows, hidden / N] @ [hidden / N, d] -> [rows, d], summed over devices
        return matmul_scatter.kernel(a, w2, axis_name="model", interpret=True)
    return up, down


def lax_ops():
    """The same with lax: what the kernels compute (their docstrings state it)."""
    def up(x, w1):
        return lax.all_gather(x, "model", tiled=True) @ w1

    def down(a, w2):
        return lax.psum_scatter(a @ w2, "model", scatter_dimension=0, tiled=True)
    return up, down


def make_step(ops):
    """The jitted (loss, grads) of the layer for a mesh; `ops` = (up, down)."""
    up, down = ops

    def loss_per_device(x, w1, w2, target):
        h = up(x, w1)
        a = jax.nn.gelu(h)
        y = down(a, w2)
        return jnp.sum((y - target) ** 2)[None]

    def loss_fn(x, w1, w2, target, mesh):
        per_device = jax.shard_map(
            loss_per_device, mesh=mesh,
            in_specs=(P("model", None), P(None, "model"), P("model", None), P("model", None)),
            out_specs=P("model"), check_vma=False)
        return jnp.sum(per_device(x, w1, w2, target))

    def step(x, w1, w2, target, mesh):
        return jax.value_and_grad(loss_fn, argnums=(0, 1, 2))(x, w1, w2, target, mesh)

    return jax.jit(step, static_argnums=4)


def compare(n: int = 2, rows: int = 8, d: int = 128, hidden: int = 128, seed: int = 0):
    """(|loss difference|, [max |grad difference| for x, w1, w2], [max |grad| for each]) on n
    devices; `rows` per device, `hidden` per device (the kernels' block sizes need multiples
    of 8 rows and 128 columns)."""
    from jax.experimental.pallas import tpu as pltpu

    mesh = jax.sharding.Mesh(np.array(jax.devices()[:n]), ("model",))
    k = jax.random.split(jax.random.key(seed), 4)
    x = jax.random.normal(k[0], (n * rows, d))
    w1 = jax.random.normal(k[1], (d, n * hidden)) / np.sqrt(d)
    w2 = jax.random.normal(k[2], (n * hidden, d)) / np.sqrt(n * hidden)
    target = jax.random.normal(k[3], (n * rows, d))
    pltpu.reset_tpu_interpret_mode_state()
    try:
        loss, grads = jax.block_until_ready(make_step(ringc_ops())(x, w1, w2, target, mesh))
    finally:
        pltpu.reset_tpu_interpret_mode_state()
    ref_loss, ref_grads = make_step(lax_ops())(x, w1, w2, target, mesh)
    errs = [float(jnp.max(jnp.abs(g - r))) for g, r in zip(grads, ref_grads)]
    scales = [float(jnp.max(jnp.abs(r))) for r in ref_grads]
    return abs(float(loss) - float(ref_loss)), errs, scales, float(ref_loss)


if __name__ == "__main__":
    loss_err, errs, scales, loss = compare(N)
    print(f"N={N}: loss {loss:.4f}, |ringc - lax| = {loss_err:.2e}; max |grad ringc - grad lax| "
          + ", ".join(f"{name} {e:.2e} (of {s:.2e})" for name, e, s in zip(("x", "w1", "w2"), errs, scales)))
