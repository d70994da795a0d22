"""Every device of a pallas_call evaluated together, as one run of the kernel would go.

Evaluated one by one (`program.Builder.run_call`), a device cannot read what another device
sends it: the sender may not have been evaluated yet. Kernels that steer themselves by such
values (per-expert counts all-reduced by remote copies, then read back from SMEM as slice
sizes) need the values of a run. `CoRun` evaluates each device's body in its own thread,
one thread at a time, and switches only where a device must wait: at a semaphore wait whose
semaphore does not yet hold the amount (DMAs complete as they start: their bytes are added to
their semaphores then, and their values copied, `interpret._dma_values`; signals add their
increment). The next device to run is the first after the blocked one, in device order, that
can go on; the schedule is deterministic, so the same file gives the same values every run.

This is one interleaving, not all of them: the verifier still checks every interleaving for
races and hangs on the events. The values it gives are those of every race-free run (a value
read after its DMA's wait is the DMA's; a read before the wait is a race the verifier reports).
When no device can go on (a hang in this run), the blocked device with the lowest id is let
through, so the evaluation ends and the verifier names the hang.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any, Callable

from ..verify.events import DmaStart, SemWait, Signal


_STACK = 64 << 20  # bytes of stack per device's thread


class _Stopped(BaseException):
    """Another device's evaluation failed: this one unwinds without running further."""


class CoRun:
    """The cooperative schedule of one pallas_call's devices (see the module docstring)."""

    def __init__(self, n: int):
        self.n = n
        self.cond = threading.Condition()
        self.turn: int | None = None
        self.sems: Counter = Counter()
        self.blocked: dict[int, tuple] = {}  # device -> (semaphore, amount) it waits for
        self.done: set[int] = set()
        self.error: BaseException | None = None
        self.released = 0  # waits let through because no device could go on

    # -- the events' effect on semaphores (called by the device that holds the turn) --
    def on_event(self, device: int, action: Any) -> None:
        if isinstance(action, DmaStart):
            self.sems[action.recv_sem] += action.nbytes
            if action.send_sem is not None:
                self.sems[action.send_sem] += action.nbytes
        elif isinstance(action, Signal):
            self.sems[action.sem] += action.inc
        elif isinstance(action, SemWait):
            self._wait(device, action.sem, action.value)

    def _wait(self, device: int, sem: tuple, amount: int) -> None:
        with self.cond:
            if self.sems[sem] < amount:
                self.blocked[device] = (sem, amount)
                self._pass_turn(device)
                while self.turn != device:
                    self.cond.wait()
                if self.error is not None:
                    raise _Stopped()
                self.blocked.pop(device, None)
            self.sems[sem] -= amount

    def _can_go(self, d: int) -> bool:
        if d in self.done:
            return False
        w = self.blocked.get(d)
        return w is None or self.sems[w[0]] >= w[1]

    def _pass_turn(self, device: int) -> None:
        """Give the turn to the first device after `device` that can go on (the caller holds
        the condition)."""
        order = [(device + k) % self.n for k in range(1, self.n + 1)]
        nxt = next((d for d in order if self._can_go(d)), None)
        if nxt is None and self.blocked:  # a hang in this run: let the lowest blocked device through
            nxt = min(self.blocked)
            sem, amount = self.blocked[nxt]
            self.sems[sem] = max(self.sems[sem], amount)
            self.released += 1
        self.turn = nxt
        self.cond.notify_all()

    # -- the threads ---------------------------------------------------------------------
    def run(self, bodies: list[Callable[[], None]]) -> None:
        """Run every device's body; re-raise the first error one raised."""
        old = threading.stack_size(_STACK)  # the interpreter recurses into nested jaxprs
        try:
            threads = [threading.Thread(target=self._main, args=(d, body), daemon=True)
                       for d, body in enumerate(bodies)]
        finally:
            threading.stack_size(old)
        with self.cond:
            self.turn = 0
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self.error is not None:
            raise self.error

    def _main(self, device: int, body: Callable[[], None]) -> None:
        with self.cond:
            while self.turn != device:
                self.cond.wait()
        try:
            if self.error is None:
                body()
        except _Stopped:
            pass
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            if self.error is None:
                self.error = e
        finally:
            with self.cond:
                self.done.add(device)
                self.blocked.pop(device, None)
                if self.error is not None:  # wake every blocked device to unwind
                    live = [d for d in range(self.n) if d not in self.done]
                    self.turn = live[0] if live else None
                    self.cond.notify_all()
                else:
                    self._pass_turn(device)


__all__ = ["CoRun"]
