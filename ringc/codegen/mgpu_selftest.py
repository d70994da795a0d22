"""The block-local parts of an emitted Mosaic GPU module, run for their values on one Hopper
GPU: what one GPU can run of a collective kernel (`ringc run --target mgpu`,
`benchmarks/mgpu_helpers_on_gpu.py`). The CPU check follows every copy and semaphore of the
whole kernel but not the values wgmma computes; here the module's own `_matmul` is compared
with `jnp.dot`, and its copy warpgroup (`_Copy`) and, if it computes, `_compute` with numpy.

`module` is anything with the helpers as attributes: an emitted module, or
`ringc.codegen.mgpu_runtime` itself.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

__all__ = ["PartResult", "run_parts"]


@dataclass(frozen=True)
class PartResult:
    """One part run on the GPU: what ran, whether its values were right, and how far off."""
    name: str
    ok: bool
    detail: str


def _matmul_kernel(R: Any, a: Any, b: Any) -> Any:
    import jax
    from jax.experimental.pallas import mosaic_gpu as plgpu
    (m, _), (_, n) = a.shape, b.shape
    tile_n = R._matmul_tile_n(n)
    tile_k, swizzled = R._matmul_smem(a.dtype)

    def kernel(a_ref, b_ref, o_ref, out_stage, a_smem, b_smem, loaded):
        R._matmul(a_ref, b_ref, o_ref, out_stage, a_smem, b_smem, loaded)

    return plgpu.kernel(kernel, out_type=jax.ShapeDtypeStruct((m, n), a.dtype), grid=(1,), grid_names=("blocks",),
                        scratch_types=[plgpu.SMEM((64, tile_n), a.dtype),
                                       plgpu.SMEM((2, 64, tile_k), a.dtype, transforms=swizzled),
                                       plgpu.SMEM((2, tile_k, tile_n), a.dtype, transforms=swizzled),
                                       plgpu.Barrier(num_arrivals=2, num_barriers=2)])(a, b)


def _copy_kernel(R: Any, x: Any, add: bool) -> Any:
    """x copied by the copy warpgroup into the output, then (add) the output += x."""
    import jax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu
    rows, cols = x.shape

    def kernel(x_ref, o_ref, stage_a, stage_b, loaded, issued, sem, copy_stage, copy_loaded):
        def run(copier):
            c = R._Copy(src=x_ref, dst=o_ref, stage=copy_stage, barrier=copy_loaded, issued=issued.at[0],
                        sem=sem.at[0], copier=copier)
            c.start()
            c.wait()
            if add and not copier:
                R._compute(jax.lax.add, o_ref, [o_ref, x_ref], [stage_a, stage_b], loaded)

        wg = jax.lax.axis_index("wg")
        pl.when(wg == 0)(lambda: run(False))
        pl.when(wg == 1)(lambda: run(True))

    width = R._chunk_cols(cols)
    chunk = R._chunk_rows(rows, width, x.dtype)
    smem = functools.partial(plgpu.SMEM, (chunk, width), x.dtype)
    return plgpu.kernel(kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(1,), grid_names=("blocks",),
                        num_threads=2, thread_name="wg",
                        scratch_types=[smem(), smem(), plgpu.Barrier(), plgpu.SemaphoreType.REGULAR((1,)),
                                       plgpu.SemaphoreType.REGULAR((1,)), smem(), plgpu.Barrier()])(x)


def run_parts(module: Any) -> list[PartResult]:
    """Run the module's block-local parts on the default (Hopper) GPU and compare their values:
    `_matmul` (bfloat16, two shapes) against `jnp.dot` within bfloat16 rounding of the output,
    and a copy by the copy warpgroup, then an add if the module computes, exactly."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    out = []
    key = jax.random.key(0)
    if hasattr(module, "_matmul"):
        for m, k, n in ((128, 256, 256), (64, 512, 512)):
            name = f"_matmul {m}x{k} @ {k}x{n} bfloat16"
            a = jax.random.normal(key, (m, k), jnp.float32).astype(jnp.bfloat16)
            b = jax.random.normal(jax.random.key(1), (k, n), jnp.float32).astype(jnp.bfloat16)
            try:
                got = np.asarray(jax.jit(functools.partial(_matmul_kernel, module))(a, b), np.float32)
            except Exception as e:  # a compile or launch error: reported, not raised
                out.append(PartResult(name, False, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"))
                continue
            want = np.asarray(jnp.dot(a, b, preferred_element_type=jnp.float32).astype(jnp.bfloat16), np.float32)
            err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
            out.append(PartResult(name, err <= 2 ** -7, f"max |got - jnp.dot| / max |jnp.dot| = {err:.2e} "
                                                        "(bfloat16 output: at most 2^-7)"))
    if hasattr(module, "_Copy"):
        add = hasattr(module, "_compute")
        for shape in ((64, 128), (512, 256)):
            name = f"copy warpgroup{' then add' if add else ''} {shape[0]}x{shape[1]} float32"
            x = jax.random.normal(key, shape, jnp.float32)
            try:
                got = np.asarray(jax.jit(functools.partial(_copy_kernel, module, add=add))(x))
            except Exception as e:
                out.append(PartResult(name, False, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"))
                continue
            err = float(np.max(np.abs(got - (2 if add else 1) * np.asarray(x))))
            out.append(PartResult(name, err == 0.0, f"max |got - {'2x' if add else 'x'}| = {err:.2e}"))
    return out
