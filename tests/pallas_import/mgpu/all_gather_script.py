"""A script as a user writes one: JAX's shipped Mosaic GPU all-gather on every GPU, then the
`lax` collective it replaces, to compare (which names the meaning ringc checks)."""

import functools

import jax
from jax import lax
from jax.experimental.pallas.ops.gpu import all_gather_mgpu
import jax.numpy as jnp

P = jax.sharding.PartitionSpec

mesh = jax.make_mesh((jax.device_count(),), ("x",))
x = jax.device_put(jnp.ones((jax.device_count() * 256, 128), jnp.float32), jax.NamedSharding(mesh, P("x")))

gather = jax.jit(jax.shard_map(functools.partial(all_gather_mgpu.all_gather, axis_name="x"), mesh=mesh,
                               in_specs=P("x"), out_specs=P("x"), check_vma=False))
reference = jax.jit(jax.shard_map(lambda v: lax.all_gather(v, "x", axis=0, tiled=True), mesh=mesh,
                                  in_specs=P("x"), out_specs=P("x"), check_vma=False))
y = gather(x)
print(bool(jnp.allclose(y, reference(x))))
