"""A jitted training step that uses a ringc all-reduce inside its own shard_map.

The model is one layer split over the devices of mesh axis "model" (tensor parallel, the
contraction dimension sharded): each device multiplies its slice of the activations by
its slice of the weights, the partial products are summed over the devices (an
all-reduce), then a nonlinearity and a squared-error loss. `jax.grad` takes the gradient
through the all-reduce; ringc's kernel carries a `jax.custom_vjp` whose backward pass is
psum's transpose, psum, so the backward all-reduce runs the same verified kernel.

The same step written with `lax.psum` is the reference: `compare` returns both losses and
the largest difference of the weight gradients.

    python examples/training_step.py      # 4 CPU devices, Pallas TPU interpret mode
"""

from __future__ import annotations

import sys
from pathlib import Path

import ringc
from ringc.run import ensure_host_devices

REPO = Path(__file__).resolve().parent.parent
if __name__ == "__main__":  # before jax starts: N CPU devices and a spare (ringc/run.py)
    N = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    ensure_host_devices(N)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

P = jax.sharding.PartitionSpec
# Checked (rings of 2, 3 and 4), emitted and imported in memory: no file is written.
all_reduce = ringc.kernel(REPO / "schedules" / "all_reduce_ring.yaml")


def make_step(reduce):
    """The jitted step for a mesh: (w, x, target) -> (loss, dloss/dw). `reduce(h)` sums the
    per-device partial products over the mesh axis "model"."""

    def loss_per_device(w, x, target):
        # x [batch, d_in / N], w [d_in / N, d_out]: this device's slices of the contraction.
        partial = x @ w
        h = reduce(partial)                    # the all-reduce: [batch, d_out], same on every device
        y = jnp.tanh(h)
        loss = jnp.mean((y - target) ** 2)
        return loss[None]                      # one value per device (all equal)

    def loss_fn(w, x, target, mesh):
        per_device = jax.shard_map(
            loss_per_device, mesh=mesh, in_specs=(P("model", None), P(None, "model"), P()),
            out_specs=P("model"), check_vma=False)
        return jnp.mean(per_device(w, x, target))

    def step(w, x, target, mesh):
        return jax.value_and_grad(loss_fn)(w, x, target, mesh)

    return jax.jit(step, static_argnums=3)


def ringc_reduce(h):
    # The per-shard call, where lax.psum(h, "model") would be: shapes and dtype come from h.
    return all_reduce.kernel(h, axis_name="model", interpret=True)


def lax_reduce(h):
    return lax.psum(h, "model")


def compare(n: int = 4, batch: int = 8, d_shard: int = 16, d_out: int = 128, seed: int = 0):
    """(ringc loss, lax loss, max |ringc grad - lax grad|, max |lax grad|) on n devices, the
    contraction dimension d_in = n * d_shard."""
    from jax.experimental.pallas import tpu as pltpu

    mesh = jax.sharding.Mesh(np.array(jax.devices()[:n]), ("model",))
    k = jax.random.split(jax.random.key(seed), 3)
    d_in = n * d_shard
    w = jax.random.normal(k[0], (d_in, d_out)) / np.sqrt(d_in)
    x = jax.random.normal(k[1], (batch, d_in))
    target = jax.random.normal(k[2], (batch, d_out))
    pltpu.reset_tpu_interpret_mode_state()
    try:
        loss, grad = make_step(ringc_reduce)(w, x, target, mesh)
        loss, grad = jax.block_until_ready((loss, grad))
    finally:
        pltpu.reset_tpu_interpret_mode_state()
    ref_loss, ref_grad = make_step(lax_reduce)(w, x, target, mesh)
    return (float(loss), float(ref_loss), float(jnp.max(jnp.abs(grad - ref_grad))),
            float(jnp.max(jnp.abs(ref_grad))))


if __name__ == "__main__":
    loss, ref_loss, err, scale = compare(N)
    print(f"N={N}: loss ringc {loss:.6f}  lax {ref_loss:.6f}; max |grad ringc - grad lax| = {err:.2e} "
          f"(max |grad| {scale:.2e})")
