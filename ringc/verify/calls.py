"""A program of several pallas_calls: what changes hands at each call's entry and exit.

One rule for both front ends: the YAML unroller's split-phase programs (`kernels:` and
`program:`, `verify/unroll.py`) and the Pallas importer's traced programs
(`pallas/program.py`). The verifier's `Event.invocation` counts calls, so the calls of
a program are what `--invocations` already models for one kernel called back to back
(`--invocations K` repeats the whole program K times).

- An array a later call of the program uses again stays with the kernels: no exit at
  the end of this call and no entry in the later one, so a DMA may be in flight across
  the boundary (started in a `start` call, waited in a `done` call). Anything that
  touches it in between is an access the DMA's interval can meet: a race, decided like
  any other.
- Every other array goes back to the caller at exit (an `exit` write: a DMA still
  reading or writing it races with whatever runs next), and a call that owns its
  synchronisation (a `collective_id` barrier) takes the arrays it writes over at entry
  (an `enter` write), unless an earlier call handed them on.
- A call that owns its synchronisation may meet another kernel with the same barrier
  semaphore between calls (`interloper`); one that does not gets Pallas' device barrier
  at entry when a call came before it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["Handover", "EntrySync", "entry_sync"]


@dataclass(frozen=True)
class EntrySync:
    """What precedes a call: another kernel's barrier round on the shared barrier semaphore
    (`interloper`), entry writes of the arrays it writes (`enter`), Pallas' device barrier."""
    interloper: bool
    enter: bool
    device_barrier: bool


def entry_sync(owns_sync: bool, collective: bool, earlier_calls: int) -> EntrySync:
    """`owns_sync`: the kernel has a `collective_id` (or skips Mosaic's device barrier);
    `collective`: it has a barrier semaphore; `earlier_calls`: calls before it in the
    whole checked run (repeats included). Mosaic's device barrier before the first call
    orders nothing the model sees, so it is modelled from the second call on."""
    return EntrySync(interloper=collective and earlier_calls > 0, enter=owns_sync,
                     device_barrier=not owns_sync and earlier_calls > 0)


@dataclass
class Handover:
    """The arrays handed from one call to a later one, across a whole run: feed it the calls
    in order (`call`), it says which arrays each enters and exits."""
    carried: set[str] = field(default_factory=set)  # handed on by an earlier call, not exited since

    def call(self, buffers: Iterable[str], written: Iterable[str], inputs: Iterable[str],
             later: Iterable[str]) -> tuple[list[str], list[str]]:
        """(enter, exit) of one call that binds `buffers` and writes `written` (its scratch
        included); `inputs` are its operands (never entered: the caller's data); `later` the
        arrays the program's later calls use. Order follows the arguments."""
        buffers, later, inputs = list(dict.fromkeys(buffers)), set(later), set(inputs)
        kept = {b for b in buffers if b in later}
        enter = [b for b in dict.fromkeys(written) if b not in self.carried and b not in inputs]
        exit_ = [b for b in buffers if b not in kept]
        self.carried = (self.carried | kept) - set(exit_)
        return enter, exit_
