"""Code generation: schedules to Pallas TPU modules, and to Pallas Mosaic GPU modules."""

from .mgpu import emit_mgpu
from .pallas import emit

__all__ = ["emit", "emit_mgpu"]
