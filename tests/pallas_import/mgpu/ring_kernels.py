"""Mosaic GPU collective kernels written for ringc's tests, in the style of JAX's shipped ones
(`jax/experimental/pallas/ops/gpu/`): a multimem all-gather with an exit barrier, and a ring
all-gather whose blocks send their tile to the next GPU with a TMA store into `remote_ref`,
then signal it. `bug` plants one defect each (tests/pallas_import/mgpu/manifest.yaml says
which finding each must give, and at which line)."""

import functools
import math

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
import jax.numpy as jnp


def multimem_all_gather(x, *, axis_name, num_blocks, exit_barrier=True):
  """All-gather along the first dim: every block stores its tiles into every GPU's output
  with `multimem_store`, then (exit_barrier) the GPUs wait for each other before returning."""
  num_devices = lax.axis_size(axis_name)
  m, n = x.shape
  tile = 32

  def kernel(x_ref, y_ref, done):
    dev = lax.axis_index(axis_name)
    mine = y_ref.at[pl.ds(dev * m, m)]

    @plgpu.nd_loop((m // tile,), collective_axes="blocks")
    def _tiles(info):
      (t,) = info.index
      rows = pl.ds(t * tile, tile)
      value = plgpu.layout_cast(x_ref[rows], plgpu.Layout.WG_STRIDED((tile, n), vec_size=4))
      plgpu.multimem_store(value, mine.at[rows], axis_name)

    if exit_barrier:
      plgpu.semaphore_signal_multicast(done, collective_axes=axis_name)
      pl.semaphore_wait(done, num_devices, decrement=False)

  return plgpu.kernel(
      kernel,
      out_type=jax.ShapeDtypeStruct((num_devices * m, n), x.dtype),
      grid=(num_blocks,),
      grid_names=("blocks",),
      scratch_types=[plgpu.SemaphoreType.REGULAR],
      compiler_params=plgpu.CompilerParams(lowering_semantics=plgpu.LoweringSemantics.Warpgroup),
  )(x)


def ring_all_gather(x, *, axis_name, num_blocks, bug=None):
  """All-gather along the first dim over a ring: in step k every block forwards its rows of
  the shard that came from k GPUs back to the next GPU (SMEM staging, a TMA store into the
  peer's output, `wait_smem_to_gmem`, a signal), then waits for the same rows from the
  previous GPU. Each block signals its own counterpart (a block-local semaphore), so a fast
  block cannot stand in for a slow one.

  bug: "drop_signal" (the last step's signal is missing), "wait_k" (waits for k signals
  instead of k + 1), "no_tma_wait" (signals before the TMA store completes), "wrong_neighbour"
  (sends to the GPU two ahead), "read_before_wait" (stages the next rows before the wait),
  "shared_count" (one semaphore per GPU, counted by every block: a fast block's signal can
  stand in for a slow block's), "stray_signal" (one more signal at the end, which no wait
  needs: it may land after the next GPU's launch has ended), "no_commit_smem" (the TMA store
  reads SMEM the warpgroup wrote with no commit_smem fence between)."""
  num_devices = lax.axis_size(axis_name)
  m, n = x.shape
  rows_per_block = m // num_blocks

  def kernel(x_ref, y_ref, smem, block_sem):
    dev = lax.axis_index(axis_name)
    block = lax.axis_index("blocks")
    ahead = 2 if bug == "wrong_neighbour" else 1
    nxt = lax.rem(dev + ahead, num_devices)
    sem = pl.get_global(plgpu.SemaphoreType.REGULAR) if bug == "shared_count" else block_sem
    per_step = num_blocks if bug == "shared_count" else 1
    rows = pl.ds(block * rows_per_block, rows_per_block)
    y_ref.at[pl.ds(dev * m, m)][rows] = x_ref[rows]

    def stage(k):
      origin = lax.rem(dev - k + num_devices, num_devices)
      smem[...] = y_ref.at[pl.ds(origin * m, m)][rows]
      if bug != "no_commit_smem":
        plgpu.commit_smem()
      return origin

    for k in range(num_devices - 1):
      origin = lax.rem(dev - k + num_devices, num_devices)
      if bug != "read_before_wait" or k == 0:
        stage(k)
      plgpu.copy_smem_to_gmem(smem, plgpu.remote_ref(y_ref.at[pl.ds(origin * m, m)].at[rows], nxt))
      if bug != "no_tma_wait":
        plgpu.wait_smem_to_gmem(0, wait_read_only=False)
      if not (bug == "drop_signal" and k == num_devices - 2):
        pl.semaphore_signal(sem, device_id=nxt)
      if bug == "read_before_wait" and k + 1 < num_devices - 1:
        plgpu.wait_smem_to_gmem(0, wait_read_only=True)
        stage(k + 1)
      arrived = k if bug == "wait_k" else k + 1
      pl.semaphore_wait(sem, arrived * per_step, decrement=False)
    plgpu.wait_smem_to_gmem(0, wait_read_only=True)
    if bug == "stray_signal":
      pl.semaphore_signal(sem, device_id=nxt)

  return plgpu.kernel(
      kernel,
      out_type=jax.ShapeDtypeStruct((num_devices * m, n), x.dtype),
      grid=(num_blocks,),
      grid_names=("blocks",),
      scratch_types=[plgpu.SMEM((rows_per_block, n), x.dtype), plgpu.SemaphoreType.REGULAR],
      compiler_params=plgpu.CompilerParams(lowering_semantics=plgpu.LoweringSemantics.Warpgroup),
  )(x)
