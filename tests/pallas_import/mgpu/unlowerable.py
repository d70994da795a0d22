"""A Mosaic GPU kernel that `ringc check` can read but Mosaic GPU cannot lower: its body
sorts a tile (`lax.sort`, which Pallas' Mosaic GPU lowering has no rule for). For
tests/test_compile_gpu.py: `ringc compile --target h100` reports it at the sort's line."""

import jax
from jax import lax
from jax.experimental.pallas import mosaic_gpu as plgpu


def sorted_rows(x, *, axis_name):
  """Each GPU's shard with every row sorted (no communication)."""
  del axis_name
  m, n = x.shape

  def kernel(x_ref, y_ref):
    y_ref[...] = lax.sort(x_ref[...], dimension=1)  # the line Mosaic GPU cannot lower

  return plgpu.kernel(
      kernel,
      out_type=jax.ShapeDtypeStruct((m, n), x.dtype),
      grid=(1,),
      grid_names=("blocks",),
      compiler_params=plgpu.CompilerParams(lowering_semantics=plgpu.LoweringSemantics.Warpgroup),
  )(x)
