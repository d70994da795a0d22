"""On one Hopper GPU: the runtime helpers of the Mosaic GPU modules `ringc emit --target mgpu`
writes, run for their values, which the CPU check does not follow through wgmma: `_matmul`
against jnp.dot, and a copy by the copy warpgroup (`_Copy`: semaphore hand-over, bytes counted
on its DMA semaphore) then `_compute` (add) on one block (`ringc.codegen.mgpu_selftest`, what
`ringc run --target mgpu` runs on one GPU).

    python benchmarks/mgpu_helpers_on_gpu.py
"""
import jax

from ringc.codegen import mgpu_runtime
from ringc.codegen.mgpu_selftest import run_parts

if __name__ == "__main__":
    print("jax", jax.__version__, jax.devices()[0].device_kind, flush=True)
    for part in run_parts(mgpu_runtime):
        print(f"{part.name}: {'ok' if part.ok else 'WRONG'}  {part.detail}", flush=True)
