"""How long the Mosaic GPU front end takes on JAX's shipped collective kernels (read from the
installed jax, unmodified) and the seed's all-gather matmul (tests/pallas_import/mgpu), with the
real H100 SM count: a table of CPU seconds per check, with its verdict.

    python benchmarks/mgpu_scale.py [N ...]      # default 2 4 8 GPUs

The issue's target is under 10 s per check at N = 8 with 132 blocks (a speed target: here, not
in a timed test). The matmuls use 64 x 64 x 64 tiles and a 64-row LHS shard per GPU."""

from __future__ import annotations

import os
import sys

NS = [int(a) for a in sys.argv[1:]] or [2, 4, 8]
os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={max(NS) + 1}")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import functools  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.experimental.pallas.ops.gpu import all_gather_mgpu, reduce_scatter_mgpu  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

from ringc.pallas.importer import check_pallas  # noqa: E402
from ringc.pallas.tpu import GPUS, answering  # noqa: E402

SMS = 132
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "pallas_import", "mgpu"))


def matmul(kind: str, n: int) -> tuple[str, float, int, int]:
    from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hm
    if kind == "collective_matmul":
        from jax.experimental.pallas.ops.gpu import collective_matmul_mgpu as module
    else:
        import seed_collective_matmul as module
    mesh = jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])
    cfg = hm.TuningConfig(tile_m=64, tile_n=64, tile_k=64, max_concurrent_steps=2,
                          grid_minor_dim=hm.MatmulDimension.M, grid_tile_width=1, wg_dimension=hm.MatmulDimension.N)
    fn = functools.partial(module.all_gather_lhs_matmul, axis_name="x", config=cfg, dtype=jnp.float16)
    f = jax.shard_map(fn, mesh=mesh, in_specs=(P("x", None), P(None, "x")), out_specs=P(None, "x"), check_vma=False)
    a = jax.ShapeDtypeStruct((n * 64, 128), jnp.float16, sharding=NamedSharding(mesh, P("x", None)))
    b = jax.ShapeDtypeStruct((128, n * 128), jnp.float16, sharding=NamedSharding(mesh, P(None, "x")))
    saved = jax.device_count, jax.process_count
    jax.device_count = jax.process_count = lambda: n
    try:
        t0 = time.process_time()
        with answering(GPUS["h100"], n, module.__file__):
            r = check_pallas(f, (a, b), mesh, None)
        secs = time.process_time() - t0
    finally:
        jax.device_count, jax.process_count = saved
    verdict = "ok" if r.ok else "FAILED:" + ",".join(sorted(r.kinds()))
    return verdict, secs, r.program.n, r.program.event_count


def one(kind: str, n: int) -> tuple[str, float, int, int]:
    if kind in ("collective_matmul", "seed_matmul"):
        return matmul(kind, n)
    mesh = jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])
    if kind == "all_gather":
        fn, rows, coll = functools.partial(all_gather_mgpu.all_gather, axis_name="x", num_blocks=SMS), 256, kind
    else:
        dim = 0 if kind == "reduce_scatter" else None
        fn = functools.partial(reduce_scatter_mgpu.reduce_scatter, axis_name="x", num_blocks=SMS,
                               scatter_dimension=dim)
        rows, coll = n * 128, "psum_scatter" if dim == 0 else "psum"
    f = jax.shard_map(fn, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    x = jax.ShapeDtypeStruct((n * rows, 128), jnp.float32, sharding=NamedSharding(mesh, P("x")))
    t0 = time.process_time()
    r = check_pallas(f, (x,), mesh, coll)
    return ("ok" if r.ok else "FAILED"), time.process_time() - t0, r.program.n, r.program.event_count


print(f"{'kernel':<18}{'N':>3}{'processes':>11}{'events':>9}{'verdict':>14}{'CPU s':>8}")
for kind in ("all_gather", "reduce_scatter", "all_reduce", "collective_matmul", "seed_matmul"):
    for n in NS:
        verdict, secs, procs, events = one(kind, n)
        print(f"{kind:<18}{n:>3}{procs:>11,}{events:>9,}{verdict:>14}{secs:>8.2f}")
