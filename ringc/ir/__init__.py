"""The schedule IR: expressions, pydantic models, YAML loading and name resolution."""

from ..errors import ScheduleError
from .loader import load, load_text
from .schema import Schedule

__all__ = ["ScheduleError", "Schedule", "load", "load_text"]
