"""The semaphore machine: run the unrolled program as far as it can go.

Why one run decides hang-freedom and exit balance for every interleaving
-------------------------------------------------------------------------
Assumptions (all true of the IR): control flow never depends on data or on semaphore
values (guards see only me, N, grid indices and params); a semaphore is decremented only
by one process, the one that owns it, by a wait; signals and DMA deposits only add. A wait
that does not decrement (`SemWait.decrement`, a threshold test) may be made by any number
of processes (the blocks of a GPU on one `pl.get_global` semaphore): it takes nothing, so it
disables no one. The Mosaic GPU front end refuses a semaphore decremented by two processes
(`pallas/mgpu.py`): which of them passes would depend on timing.

Then an enabled event stays enabled whatever other devices do: another device can only
add to my semaphores, never take from them. The system is persistent (conflict-free),
so all maximal runs execute the same set of events and end in the same semaphore state
(a diamond argument: two enabled events of different devices commute). Hence a single
maximal run, in any order, decides:
- a hang: some device stops at a wait it can never pass, in every interleaving;
- the exit balance: the final semaphore values are the same in every interleaving.

DMAs are modelled as depositing all their bytes when they start. Byte-level arrival
order cannot change which waits can complete (a wait needs the full count), so this is
exact for hangs and balance; the race analysis treats in-flight bytes separately.

The same machine, stopped at chosen points (`limits`), gives the must-happen-before
relation (see `order.py`); with a clock (`ringc.cost.timeline`), the cost model.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field

from .events import DmaStart, Event, Program, SemId, SemWait, Signal


@dataclass
class Deposit:
    """Bytes or signal units added to a semaphore by one event, not yet consumed."""
    event: Event
    amount: int
    remaining: int


@dataclass
class Consumption:
    """What one wait took from its semaphore: (deposit event, units) pairs."""
    wait: Event
    taken: list[tuple[Event, int, int]] = field(default_factory=list)  # (source, units, deposit size)


class Machine:
    """Executes devices' event lists under semaphore semantics.

    `limits[d]` caps how many events device d may execute; raising a limit and calling
    `run()` again continues incrementally (used by the ordering analysis).
    """

    def __init__(self, program: Program, limits: list[int] | None = None, *, account: bool = False):
        self.program = program
        self.n = program.n
        self.devices = program.devices
        self.pc = [0] * self.n
        self.limits = list(limits) if limits is not None else [len(ev) for ev in self.devices]
        self.value: dict[SemId, int] = defaultdict(int)
        self.blocked_on: dict[SemId, list[int]] = {}  # the processes blocked at a wait on it
        self.ready: deque[int] = deque(range(self.n))
        self.order: list[Event] = []
        self.account = account
        self.deposits: dict[SemId, deque[Deposit]] = defaultdict(deque)
        self.consumed: list[Consumption] = []

    def _deposit(self, sem: SemId, amount: int, source: Event) -> None:
        if not 0 <= sem[0] < self.n:
            return  # a send to a device that does not exist; reported by the target check
        self.value[sem] += amount
        if self.account:
            self.deposits[sem].append(Deposit(source, amount, amount))
        waiters = self.blocked_on.pop(sem, None)
        if waiters is not None:
            self.ready.extend(waiters)

    def _consume(self, ev: Event, sem: SemId, amount: int) -> None:
        self.value[sem] -= amount
        if not self.account:
            return
        record = Consumption(ev)
        queue = self.deposits[sem]
        while amount > 0 and queue:
            dep = queue[0]
            take = min(amount, dep.remaining)
            record.taken.append((dep.event, take, dep.amount))
            dep.remaining -= take
            amount -= take
            if dep.remaining == 0:
                queue.popleft()
        self.consumed.append(record)

    def execute(self, ev: Event) -> bool:
        """Run one event under semaphore semantics; False if it must block (a wait)."""
        a = ev.action
        if isinstance(a, SemWait):
            if self.value[a.sem] < a.value:
                self.blocked_on.setdefault(a.sem, []).append(ev.device)
                return False
            if a.decrement:
                self._consume(ev, a.sem, a.value)
        elif isinstance(a, Signal):
            self._signal(ev, a)
        elif isinstance(a, DmaStart):
            self._start_dma(ev, a)
        return True

    # The two effects that take time on real hardware. Here they are instantaneous;
    # the cost model (`ringc.cost.timeline`) overrides them to deliver deposits later.
    def _signal(self, ev: Event, a: Signal) -> None:
        self._deposit(a.sem, a.inc, ev)

    def _start_dma(self, ev: Event, a: DmaStart) -> None:
        self._deposit(a.recv_sem, a.nbytes, ev)
        if a.send_sem is not None:
            self._deposit(a.send_sem, a.nbytes, ev)

    def _step_device(self, d: int) -> None:
        events = self.devices[d]
        while self.pc[d] < self.limits[d]:
            ev = events[self.pc[d]]
            if not self.execute(ev):
                return
            self.order.append(ev)
            self.pc[d] += 1

    def run(self) -> "Machine":
        while self.ready:
            self._step_device(self.ready.popleft())
        return self

    def release(self, d: int, limit: int) -> None:
        """Let device d run up to (not including) event `limit`, then continue."""
        self.limits[d] = limit
        self.ready.append(d)
        self.run()

    # -- results ------------------------------------------------------------
    def stuck(self) -> list[Event]:
        """The wait each unfinished device is blocked at (within its limit)."""
        return [self.devices[d][self.pc[d]] for d in range(self.n)
                if self.pc[d] < self.limits[d]]

    def finished(self) -> bool:
        return all(self.pc[d] >= len(self.devices[d]) for d in range(self.n))


def maximal_run(program: Program) -> Machine:
    """One maximal run with deposit accounting, for the hang/balance/byte findings."""
    return Machine(program, account=True).run()
