"""On one Hopper GPU (needs one; no ringc install: it imports ringc/codegen/mgpu_runtime.py by
path): the runtime helpers of the Mosaic GPU modules `ringc emit --target mgpu` writes, run for
their values, which the CPU check does not follow through wgmma: `_matmul` against jnp.dot, and
a copy by the copy warpgroup (`_Copy`: semaphore hand-over, bytes counted on its DMA
semaphore) then `_compute` (add) on one block.

    python benchmarks/mgpu_helpers_on_gpu.py
"""
import functools
import sys

import numpy as np
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "ringc" / "codegen"))
import mgpu_runtime as R

print("jax", jax.__version__, jax.devices()[0].device_kind, flush=True)


def matmul(a, b, tile_n=256):
    m, k = a.shape; _, n = b.shape
    tile_k, swizzled = R._matmul_smem(a.dtype)
    def kernel(a_ref, b_ref, o_ref, out_stage, a_smem, b_smem, loaded):
        R._matmul(a_ref, b_ref, o_ref, out_stage, a_smem, b_smem, loaded)
    return plgpu.kernel(kernel, out_type=jax.ShapeDtypeStruct((m, n), a.dtype), grid=(1,), grid_names=("blocks",),
                        scratch_types=[plgpu.SMEM((64, tile_n), a.dtype),
                                       plgpu.SMEM((2, 64, tile_k), a.dtype, transforms=swizzled),
                                       plgpu.SMEM((2, tile_k, tile_n), a.dtype, transforms=swizzled),
                                       plgpu.Barrier(num_arrivals=2, num_barriers=2)])(a, b)


def copy_then_add(x):
    rows, cols = x.shape
    def kernel(x_ref, o_ref, stage_a, stage_b, loaded, issued, done, copy_stage, copy_loaded):
        def run(copier):
            c = R._Copy(src=x_ref, dst=o_ref, stage=copy_stage, barrier=copy_loaded, issued=issued.at[0],
                        sem=done.at[0], copier=copier)
            c.start()
            c.wait()
            if not copier:
                R._compute(jax.lax.add, o_ref, [o_ref, x_ref], [stage_a, stage_b], loaded)
        wg = jax.lax.axis_index("wg")
        pl.when(wg == 0)(lambda: run(False))
        pl.when(wg == 1)(lambda: run(True))
    chunk = R._chunk_rows(rows, cols, x.dtype)
    return plgpu.kernel(kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(1,), grid_names=("blocks",),
                        num_threads=2, thread_name="wg",
                        scratch_types=[plgpu.SMEM((chunk, cols), x.dtype), plgpu.SMEM((chunk, cols), x.dtype),
                                       plgpu.Barrier(), plgpu.SemaphoreType.REGULAR((1,)),
                                       plgpu.SemaphoreType.REGULAR((1,)), plgpu.SMEM((chunk, cols), x.dtype),
                                       plgpu.Barrier()])(x)


if __name__ == "__main__":
    key = jax.random.key(0)
    for (m, k, n) in [(128, 256, 256), (64, 512, 512)]:
        a = jax.random.normal(key, (m, k), jnp.float32).astype(jnp.bfloat16)
        b = jax.random.normal(jax.random.key(1), (k, n), jnp.float32).astype(jnp.bfloat16)
        try:
            got = np.asarray(jax.jit(functools.partial(matmul, tile_n=R._matmul_tile_n(n)))(a, b), np.float32)
            want = np.asarray(jnp.dot(a, b, preferred_element_type=jnp.float32).astype(jnp.bfloat16), np.float32)
            err = np.max(np.abs(got - want)) / np.max(np.abs(want))
            print(f"_matmul {m}x{k} @ {k}x{n} bf16: max |got - jnp.dot| / max|jnp.dot| = {err:.2e}", flush=True)
        except Exception as e:
            print(f"_matmul {m}x{k}x{n}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
    for shape in [(64, 128), (512, 256)]:
        x = jax.random.normal(key, shape, jnp.float32)
        try:
            got = np.asarray(jax.jit(copy_then_add)(x))
            err = np.max(np.abs(got - 2 * np.asarray(x)))
            print(f"_Copy by the copy warpgroup, then _compute add, {shape} f32: max |got - 2x| = {err:.2e}", flush=True)
        except Exception as e:
            print(f"copy_then_add {shape}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
