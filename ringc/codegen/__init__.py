"""Code generation: schedules to Pallas TPU modules."""

from .pallas import emit

__all__ = ["emit"]
