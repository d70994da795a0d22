"""Check JAX's own Pallas all-gather (jax.experimental.pallas.ops.tpu.all_gather) as it is.

    python examples/check_jax_all_gather.py [N]

No TPU: the kernel is traced over N CPU devices and its events are checked for every
interleaving (see docs/pallas-import.md)."""

import os
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 4
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={n}")

import functools  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.experimental.pallas.ops.tpu import all_gather  # noqa: E402

import ringc  # noqa: E402

mesh = jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])
x = jax.ShapeDtypeStruct((8 * n, 128), jnp.float32, sharding=jax.sharding.NamedSharding(mesh, jax.P("x")))
report = ringc.check_pallas(functools.partial(all_gather.all_gather, mesh=mesh, axis_name="x"), (x,), mesh,
                            collective="all_gather")
print(report.to_text(explain="--explain" in sys.argv))
sys.exit(0 if report.ok else 1)
