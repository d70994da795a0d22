"""JAX's shipped all-gather matmul for Hopper (jax.experimental.pallas.ops.gpu.collective_matmul_mgpu)
called the way a script on an 8-GPU H100 host calls it: a mesh over every GPU, the lhs rows
and the rhs columns sharded, one jitted call.

    ringc compile examples/mgpu_collective_matmul.py --target h100 --devices 8
    ringc check examples/mgpu_collective_matmul.py --devices 2 --gpu h100

No GPU: ringc runs the script on CPU devices that answer as H100s (132 SMs), captures the
call, and lowers and compiles it for sm_90a (`ringc compile`, docs/compile.md "H100"), or
checks it (`ringc check`, docs/pallas-import.md "Mosaic GPU kernels")."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.gpu import collective_matmul_mgpu, hopper_matmul_mgpu as hm
from jax.sharding import NamedSharding, PartitionSpec as P

n = jax.device_count()
mesh = jax.make_mesh((n,), ("x",))
m_shard, k, n_shard = 1024, 4096, 1024  # per GPU: lhs rows, contraction, rhs columns
config = hm.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=4,
                         grid_minor_dim=hm.MatmulDimension.M, grid_tile_width=1,
                         wg_dimension=hm.MatmulDimension.N)

matmul = jax.jit(jax.shard_map(
    functools.partial(collective_matmul_mgpu.all_gather_lhs_matmul, axis_name="x", config=config,
                      dtype=jnp.float16),
    mesh=mesh, in_specs=(P("x", None), P(None, "x")), out_specs=P(None, "x"), check_vma=False))

lhs = jax.device_put(jnp.zeros((n * m_shard, k), jnp.float16), NamedSharding(mesh, P("x", None)))
rhs = jax.device_put(jnp.zeros((k, n * n_shard), jnp.float16), NamedSharding(mesh, P(None, "x")))
out = matmul(lhs, rhs)  # (n * m_shard, n * n_shard): every GPU's rows times its own columns
