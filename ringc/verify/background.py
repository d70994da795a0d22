"""An answer computed in a second process while this one goes on.

The quotient's checks (`symmetric.certify.clean`) are two independent halves on the same events:
the run, the order and the races on one side, the symbolic data flow on the other, each
about half the time at N = 1024. On a machine with a spare core, `Background` forks a
child that computes one half's answer (a bool) while the parent computes the other.

- **Same answer.** The child runs the same function on the same objects (a fork copies
  the parent's memory as it is), and the function is deterministic. It sends back its
  answer pickled (a bool for the checks; `ringc synth` prices candidates in the
  child and gets their estimates back), or "failed" (it raised). On "failed", or if the
  child dies without an answer, `result` returns None and the caller computes the answer
  itself, so any exception is raised in the parent, where and as it would be without the
  child.
- **Nothing left behind.** `close` kills a child whose answer is no longer needed and
  always reaps it; the child leaves with `os._exit`, running no cleanup of the parent's
  (atexit handlers, buffered output, pytest's teardown).
- **When.** Only where `os.fork` exists, with `jobs` > 1 (`default_jobs`: 2 when the
  process may run on two cores or more and has not loaded jax, whose native threads make
  forking unsafe in general; `ringc check --jobs 1` or `check(..., jobs=1)` turns it off), and
  for work big enough to repay the fork (the caller decides: `symmetric.flow.FORK_EVENTS`).
- **Cost.** The fork copies page tables, not pages; pages either process then writes are
  copied on the first write. Python's cyclic collector is paused during a check
  (`core.collector_paused`), so the child does not touch every object as a collection
  would. Peak memory is up to twice a serial check's: each process holds what it makes.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from typing import Any, Callable

__all__ = ["default_jobs", "Background"]

def default_jobs() -> int:
    """Processes a check may use: 2 on a machine (or CPU set) of two cores or more, 1 when
    jax is loaded (see the module docstring) or fork is missing."""
    if not hasattr(os, "fork") or "jax" in sys.modules:
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return 2 if cores >= 2 else 1


class Background:
    """`compute()`'s answer (picklable, not None), computed in a forked child (`result`), or
    nothing if forking is not possible here: then `result` is None and the caller computes
    it."""

    def __init__(self, compute: Callable[[], Any]):
        self.pid: int | None = None
        self.read_end: int | None = None
        if not hasattr(os, "fork"):
            return
        read_end, write_end = os.pipe()
        try:
            pid = os.fork()
        except OSError:  # no memory or process slot for a child: compute in the parent
            os.close(read_end)
            os.close(write_end)
            return
        if pid == 0:  # the child: answer, then leave without running the parent's cleanup
            code = b"E"
            try:
                os.close(read_end)
                code = b"V" + pickle.dumps(compute())
            except BaseException:  # noqa: BLE001 -- the parent computes it again and raises it
                code = b"E"
            finally:
                try:
                    view = memoryview(code)
                    while view:   # a pipe takes a large answer in parts
                        view = view[os.write(write_end, view):]
                finally:
                    os._exit(0)
        os.close(write_end)
        self.pid, self.read_end = pid, read_end

    def result(self) -> Any:
        """The child's answer (waiting for it), or None: no child, or it failed."""
        if self.read_end is None:
            return None
        parts = []
        try:
            while part := os.read(self.read_end, 1 << 16):
                parts.append(part)
        except OSError:
            parts = []
        self.close()
        code = b"".join(parts)
        return pickle.loads(code[1:]) if code[:1] == b"V" else None

    def close(self) -> None:
        """Kill the child if it is still working, and reap it."""
        if self.read_end is not None:
            os.close(self.read_end)
            self.read_end = None
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(self.pid, 0)
            self.pid = None
