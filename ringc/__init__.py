"""ringc: write a TPU collective as a ring schedule, prove it safe, emit the Pallas kernel.

    sched = ringc.load("schedules/all_reduce_ring.yaml")
    report = ringc.check(sched, 8)          # hangs, balance, races, semantics
    source = ringc.emit(sched)              # a Pallas TPU kernel module
"""

from .ir import Schedule, ScheduleError, load, load_text
from .verify import Report, check


def emit(schedule: Schedule) -> str:
    """The Pallas TPU kernel module for `schedule`, as Python source text."""
    from .codegen import emit as _emit
    return _emit(schedule)


__all__ = ["load", "load_text", "check", "emit", "Schedule", "ScheduleError", "Report"]
__version__ = "0.1.0"
