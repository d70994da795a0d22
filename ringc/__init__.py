"""ringc: write a TPU collective as a ring schedule, prove it safe, emit the Pallas kernel.

    sched = ringc.load("schedules/all_reduce_ring.yaml")
    report = ringc.check(sched, 8)          # hangs, balance, races, semantics
    source = ringc.emit(sched)              # a Pallas TPU kernel module (text)
    module = ringc.kernel(sched)            # checked, emitted, imported: module.kernel(x, axis_name="i")
    result = ringc.compile_for(sched, "v5e:2x2")  # the real TPU compiler, no TPU needed
"""

from .ir import Schedule, ScheduleError, load, load_text
from .verify import Report
from .verify.check import check


def emit(schedule: Schedule, checked=None) -> str:
    """The Pallas TPU kernel module for `schedule`, as Python source text. Nothing is checked
    here: `checked` lists the sizes a check proved (the module's CHECKED; `kernel` checks
    other sizes with ringc before running them); None (the default) emits it unchecked."""
    from .codegen import emit as _emit
    return _emit(schedule, checked)


def kernel(source, *, unchecked: bool = False, devices=None, params=None):
    """The kernel module of a schedule (a path or a loaded Schedule): checked first, then
    emitted and imported in memory, no file written. Its `kernel(*shards, axis_name=...)` is
    the per-shard call for your own shard_map (docs/jax-api.md). Raises ScheduleError with
    the findings when the check fails, unless `unchecked`."""
    from .jaxapi import kernel as _kernel
    return _kernel(source, unchecked=unchecked, devices=devices, params=params)


def compile_for(schedule: Schedule, target: str, **params: int):
    """Compile `schedule`'s emitted kernel for a TPU slice such as "v5e:2x2" with the real TPU
    compiler (libtpu; no TPU needed). Returns a `ringc.compile.CompileResult`."""
    from .compile import compile_for as _compile_for
    return _compile_for(schedule, target, **params)


def check_pallas(fn, args, mesh, collective=None, **kw):
    """Check a function that runs Pallas TPU kernels under `shard_map` over `mesh` (see
    docs/pallas-import.md): hangs, balance, races over every interleaving and, when
    `collective` names one, its meaning. Returns a `Report`."""
    from .pallas import check_pallas as _check_pallas
    return _check_pallas(fn, args, mesh, collective, **kw)


__all__ = ["check_pallas", "load", "load_text", "check", "emit", "kernel", "compile_for", "Schedule", "ScheduleError", "Report"]
__version__ = "0.1.0"
