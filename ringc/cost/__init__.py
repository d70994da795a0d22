"""Pricing schedules: a timed run of the unrolled events on a TPU ICI model, against lower bounds.

The names below load on first use (PEP 562), so `ringc check`, whose parser reads the
chip table for `ringc cost --help`, does not pay for the model."""

from __future__ import annotations

from typing import Any

from .chips import CHIPS, Chip

__all__ = ["CHIPS", "Chip", "CostError", "Estimate", "estimate", "estimate_program", "hardware"]


def __getattr__(name: str) -> Any:
    if name in ("CostError", "Estimate", "estimate", "estimate_program", "hardware"):
        from . import model
        return getattr(model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
