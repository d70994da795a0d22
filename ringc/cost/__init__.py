"""Pricing schedules: a timed run of the unrolled events on a TPU ICI model, against lower bounds."""

from .chips import CHIPS, Chip
from .model import CostError, Estimate, estimate, estimate_program, hardware

__all__ = ["CHIPS", "Chip", "CostError", "Estimate", "estimate", "estimate_program", "hardware"]
