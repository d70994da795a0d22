"""A Mosaic GPU kernel module whose entry takes a tuning config with no default (as JAX's
collective_matmul_mgpu takes a TuningConfig): `ringc check` builds it from --param
config.FIELD=V."""

import dataclasses
import enum
import functools

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu


class Order(enum.Enum):
  FORWARD = enum.auto()
  BACKWARD = enum.auto()


@dataclasses.dataclass(frozen=True)
class Config:
  num_blocks: int
  order: Order = Order.FORWARD


def ring_copy(x, *, axis_name="x", config: Config):
  """Each GPU sends its shard to the next (or previous) one, one row block per block."""
  num_devices = lax.axis_size(axis_name)
  m, n = x.shape
  rows = m // config.num_blocks
  step = 1 if config.order == Order.FORWARD else num_devices - 1

  def kernel(x_ref, y_ref, smem, sem):
    dev = lax.axis_index(axis_name)
    block = lax.axis_index("blocks")
    peer = lax.rem(dev + step, num_devices)
    mine = pl.ds(block * rows, rows)
    smem[...] = x_ref[mine]
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(smem, plgpu.remote_ref(y_ref.at[mine], peer))
    plgpu.wait_smem_to_gmem(0)
    pl.semaphore_signal(sem, device_id=peer)
    pl.semaphore_wait(sem, 1)

  return plgpu.kernel(
      kernel,
      out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
      grid=(config.num_blocks,),
      grid_names=("blocks",),
      scratch_types=[plgpu.SMEM((rows, n), x.dtype), plgpu.SemaphoreType.REGULAR],
  )(x)
