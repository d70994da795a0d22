"""A per-token expert scatter benchmark in the style of multi-host TPU microbenchmarks.

Like such scripts it initializes JAX's distributed runtime at import (unless told it runs on
one host), reads its sizes from environment variables, lays its mesh out from the devices'
coords, and runs `main()` only under `if __name__ == "__main__"`. The kernel sends every
(token, top-k) assignment to its expert's device by its own remote DMA, from a `fori_loop`,
after an all-to-all barrier; each device then waits for the rows it receives and drains its
sends. SCATTER_WRONG=1 skips the receive wait (the rows are read by the caller while other
devices' DMAs may still be landing: `dma_not_waited`).
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

if os.environ.get("SCATTER_SINGLE_HOST", "0") != "1":
    jax.distributed.initialize()

TOKENS = int(os.environ.get("SCATTER_TOKENS", "8"))
TOP_K = int(os.environ.get("SCATTER_TOP_K", "2"))
EXPERTS = int(os.environ.get("SCATTER_EXPERTS", "8"))
WRONG = os.environ.get("SCATTER_WRONG", "0") == "1"
ASSIGNMENTS = TOKENS * TOP_K

NDEV = jax.device_count()
LOCAL_EXPERTS = EXPERTS // NDEV
PER_SOURCE = ASSIGNMENTS // EXPERTS           # rows one device sends each expert
ROWS = PER_SOURCE * NDEV                      # rows each expert receives

devices = sorted(jax.devices(), key=lambda d: tuple(getattr(d, "coords", (d.id,)))[::-1])
mesh = jax.sharding.Mesh(np.array(devices).reshape(1, NDEV), ("data", "expert"))


def scatter_kernel(x_ref, recv_ref, send_sems, recv_sems, barrier_sem):
    n = lax.axis_size("expert")
    me = lax.axis_index("expert")
    for d in range(NDEV):
        pltpu.semaphore_signal(barrier_sem, device_id=(0, d), device_id_type=pltpu.DeviceIdType.MESH)
    pltpu.semaphore_wait(barrier_sem, n)

    def send(a, carry):
        expert = (a * 3) % EXPERTS
        dest, local = expert // LOCAL_EXPERTS, expert % LOCAL_EXPERTS
        slot = me * PER_SOURCE + a // EXPERTS
        pltpu.make_async_remote_copy(
            src_ref=x_ref.at[pl.ds(a // TOP_K, 1)],
            dst_ref=recv_ref.at[local, pl.ds(slot, 1)],
            send_sem=send_sems.at[local], recv_sem=recv_sems.at[local],
            device_id=(0, dest), device_id_type=pltpu.DeviceIdType.MESH,
        ).start()
        return carry

    lax.fori_loop(0, ASSIGNMENTS, send, 0)
    for local in range(LOCAL_EXPERTS):
        rows = recv_ref.at[local, pl.ds(0, ROWS)]
        if not WRONG:
            pltpu.make_async_copy(rows, rows, recv_sems.at[local]).wait()
        pltpu.make_async_copy(x_ref.at[pl.ds(0, ROWS)], x_ref.at[pl.ds(0, ROWS)], send_sems.at[local]).wait()


def scatter(x):
    return pl.pallas_call(
        scatter_kernel,
        out_shape=jax.ShapeDtypeStruct((LOCAL_EXPERTS, ROWS, 128), x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.MemorySpace.HBM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.MemorySpace.HBM),
        scratch_shapes=[pltpu.SemaphoreType.DMA((LOCAL_EXPERTS,)), pltpu.SemaphoreType.DMA((LOCAL_EXPERTS,)),
                        pltpu.SemaphoreType.BARRIER],
        compiler_params=pltpu.CompilerParams(collective_id=7, has_side_effects=True),
        name="scatter_per_token",
    )(x)


def main():
    spec = jax.sharding.PartitionSpec(("data", "expert"))
    run = jax.jit(jax.shard_map(scatter, mesh=mesh, in_specs=(spec,), out_specs=spec, check_vma=False))
    x = jax.device_put(jnp.ones((NDEV * TOKENS, 128), jnp.float32), jax.sharding.NamedSharding(mesh, spec))
    for _ in range(3):  # warm-up and timed runs: one kernel, checked once
        jax.block_until_ready(run(x))
    print(f"process {jax.process_index()} of {jax.process_count()}: done")


if __name__ == "__main__":
    main()
