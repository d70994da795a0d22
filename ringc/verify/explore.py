"""Exhaustive interleaving explorer: operational ground truth for small N (N <= 4).

This module re-implements the execution model of `docs/verification.md` directly, as a
transition system, and searches its reachable states. It deliberately shares nothing
with `simulate.py`, `order.py` or `races.py` beyond the event graph itself
(`events.Program`, `Region.overlaps`), so that it can be used to test them.

The model
---------
A state is: each device's program counter, every semaphore's value, and the set of
DMAs in flight with how far each has got. Scheduler transitions are

- a device executes its next event:
  * `Compute` (zero / accumulate / assign): an instantaneous access;
  * `Signal`: adds `inc` to the target semaphore at once;
  * `SemWait`: enabled when the value is >= `v`, then subtracts `v`;
  * `DmaStart`: the DMA becomes in flight; nothing is deposited yet;
- an in-flight DMA advances. Its bytes arrive in two separate transitions: all but the
  last byte, then the last byte. Each adds its share to the receiver's receive
  semaphore and to the sender's send semaphore (a local copy has one semaphore). After
  the last byte the DMA is no longer in flight.

A DMA's destination write and its source read are live from its start until its last
byte has arrived. Deposits to a device that does not exist are dropped, and regions on
such a device are ignored.

What is reported
----------------
- race: in some reachable state two conflicting accesses (overlapping regions, at least
  one a write, not the same event) are possible at once: two live DMA accesses, a live
  DMA access and a device's next compute / DMA start, or the next events of two
  different devices.
- hang: a reachable terminal state (nothing enabled) where some device is unfinished.
- nonzero_exit: a reachable terminal state with some semaphore non-zero.

Partial-order reduction
-----------------------
The state graph is acyclic (every transition advances a pc or a DMA) and *monotone*:
only the owner subtracts from a semaphore, everything else adds, so a transition that is
enabled stays enabled whatever other devices or DMAs do. In a state `s` we explore a
single transition `t` instead of all of them when `t` is *safe*:

1. a `Signal`, an enabled `SemWait`, or the first (all-but-last-byte) arrival of a DMA:
   these access no memory and do not change which accesses are live or pending;
2. a `Compute` or `DmaStart` of device `d` all of whose conflicting events are over
   (executed and, for a DMA, no longer in flight), where "conflicting events" means
   those of other devices and `d`'s own earlier DMAs (its later events can never be
   concurrent with it);
3. the last-byte arrival of DMA `x` when every event conflicting with `x` is over.

Soundness (by induction on the number of transitions left, which strictly decreases):
let `w` be any path from `s` to a state `r` in which the pair `(a, b)` races. If `t`
occurs in `w = u t v`, then `t` commutes with every transition of `u` (none of them is
of `t`'s device, or `t`'s DMA, and by monotonicity moving an addition earlier or a
subtraction of an enabled wait never disables anything), so `t u v` also reaches `r`.
If `t` does not occur in `w`, then `t w` is executable and reaches `r` plus `t`'s
effect, in which `(a, b)` still races: in case 1 `t` changes neither the live DMAs
nor any pending access of another device; in cases 2 and 3 `t`'s accesses conflict with
nothing that can be pending or live, so `t` is not `a` or `b`. Either way, from `s.t`
some path reaches a state where `(a, b)` races. The same argument shows every terminal
state stays reachable (a safe transition stays enabled, so it occurs in every maximal
path). Hence the reduced search finds exactly the racing pairs, hangs and exit values
of the full one. The choice of `t` depends only on the state, so a visited-state set is
safe to combine with it.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

from .events import Compute, DmaStart, Event, Program, Region, SemId, SemWait, Signal

DEFAULT_MAX_STATES = 2_000_000


@dataclass
class ExploreResult:
    races: list[tuple[Event, Event]]   # each pair once, ordered by (device, index)
    hang: bool                         # some terminal state has an unfinished device
    nonzero_exit: bool                 # some terminal state has a non-zero semaphore
    states: int                        # distinct states visited
    complete: bool                     # False: stopped at max_states, verdicts partial
    stuck: list[Event] = field(default_factory=list)         # where devices stop, if hang
    final: dict[SemId, int] = field(default_factory=dict)    # non-zero values at exit
    terminals: int = 0                 # distinct terminal states reached
    seconds: float = 0.0

    @property
    def race(self) -> bool:
        return bool(self.races)


def _accesses(ev: Event, n: int) -> list[tuple[Region, bool]]:
    """(region, is_write) of one event; regions on non-existent devices are dropped."""
    a = ev.action
    if isinstance(a, DmaStart):
        acc = [(a.src, False), (a.dst, True)]
    elif isinstance(a, Compute):
        acc = [(a.dst, True)] + ([(a.src, False)] if a.src is not None else [])
    else:
        return []
    return [(r, w) for r, w in acc if 0 <= r.device < n]


def _conflicting(xs: list[tuple[Region, bool]], ys: list[tuple[Region, bool]]) -> bool:
    return any((wx or wy) and rx.overlaps(ry) for rx, wx in xs for ry, wy in ys)


def explore(program: Program, max_states: int = DEFAULT_MAX_STATES, *,
            reduce: bool = True) -> ExploreResult:
    """Search every interleaving of `program` (with partial-order reduction unless
    `reduce=False`), for at most `max_states` distinct states."""
    t0 = time.perf_counter()
    n = program.n
    events: list[Event] = [ev for dev in program.devices for ev in dev]
    gid = {id(ev): g for g, ev in enumerate(events)}
    dev_gids = [[gid[id(ev)] for ev in dev] for dev in program.devices]
    lens = [len(dev) for dev in program.devices]

    # Semaphores, numbered; those on non-existent devices get index -1 (deposits dropped).
    sem_index: dict[SemId, int] = {}

    def sem_of(sem: SemId | None) -> int:
        if sem is None or not 0 <= sem[0] < n:
            return -1
        if sem not in sem_index:
            sem_index[sem] = len(sem_index)
        return sem_index[sem]

    # Per event: kind code and operands.
    #   0 compute, 1 signal (sem, inc), 2 wait (sem, v), 3 dma start (recv, send, bytes)
    kind: list[int] = []
    op1: list[int] = []
    op2: list[int] = []
    op3: list[int] = []
    for ev in events:
        a = ev.action
        if isinstance(a, Compute):
            kind.append(0); op1.append(-1); op2.append(-1); op3.append(0)
        elif isinstance(a, Signal):
            kind.append(1); op1.append(sem_of(a.sem)); op2.append(-1); op3.append(a.inc)
        elif isinstance(a, SemWait):
            kind.append(2); op1.append(sem_of(a.sem)); op2.append(-1); op3.append(a.value)
        elif isinstance(a, DmaStart):
            kind.append(3); op1.append(sem_of(a.recv_sem)); op2.append(sem_of(a.send_sem))
            op3.append(a.nbytes)
        else:  # pragma: no cover - the IR has no other actions
            raise TypeError(f"unknown action {a!r}")
    ns = len(sem_index)
    sems_list = sorted(sem_index, key=sem_index.get)

    # Conflicts between events, grouped by memory to avoid the all-pairs product.
    acc = [_accesses(ev, n) for ev in events]
    by_mem: dict[tuple[int, str], set[int]] = defaultdict(set)
    for g, xs in enumerate(acc):
        for r, _ in xs:
            by_mem[(r.device, r.buffer)].add(g)
    conflicts: list[set[int]] = [set() for _ in events]
    for group in by_mem.values():
        members = sorted(group)
        for i, g in enumerate(members):
            for h in members[i + 1:]:
                if h not in conflicts[g] and _conflicting(acc[g], acc[h]):
                    conflicts[g].add(h)
                    conflicts[h].add(g)
    # For a compute / DMA start: the conflicting events that could be concurrent with it
    # (other devices' events, and the same device's earlier DMAs).
    conc: list[tuple[int, ...]] = []
    for g, ev in enumerate(events):
        conc.append(tuple(sorted(
            h for h in conflicts[g]
            if events[h].device != ev.device
            or (events[h].index < ev.index and kind[h] == 3))))
    all_conf = [tuple(sorted(c)) for c in conflicts]
    dev_of = [ev.device for ev in events]
    idx_of = [ev.index for ev in events]

    races: set[tuple[int, int]] = set()
    hang = False
    nonzero = False
    stuck: list[Event] = []
    final: dict[SemId, int] = {}
    terminals = 0

    # A state: pcs (n) + semaphore values (ns) + in-flight DMAs (sorted codes 2*gid+stage).
    init = tuple([0] * n + [0] * ns)
    visited = {init}
    stack = [init]
    complete = True
    nn = n + ns

    def done(h: int, pcs, infl: set[int]) -> bool:
        return pcs[dev_of[h]] > idx_of[h] and h not in infl

    while stack:
        s = stack.pop()
        pcs = s[:n]
        sems = s[n:nn]
        codes = s[nn:]
        infl_g = {c >> 1 for c in codes}

        # -- race check: live DMAs and every device's next access
        active = [c >> 1 for c in codes]
        nexts = []
        for d in range(n):
            pc = pcs[d]
            if pc < lens[d]:
                g = dev_gids[d][pc]
                nexts.append(g)
                if kind[g] in (0, 3) and acc[g]:
                    active.append(g)
        for i in range(len(active)):
            cg = conflicts[active[i]]
            if not cg:
                continue
            for j in range(i + 1, len(active)):
                h = active[j]
                if h in cg:
                    a_, b_ = active[i], h
                    races.add((a_, b_) if a_ < b_ else (b_, a_))

        # -- choose transitions: ('d', g) device step, ('x', code) DMA advance
        chosen: list[tuple[int, int]] | None = None
        enabled: list[tuple[int, int]] = []
        for g in nexts:
            k = kind[g]
            if k == 2:
                si = op1[g]
                if si < 0 or sems[si] < op3[g]:
                    continue
            enabled.append((0, g))
            if reduce and chosen is None and k in (1, 2):
                chosen = [(0, g)]
        for c in codes:
            enabled.append((1, c))
            if reduce and chosen is None and not c & 1:
                chosen = [(1, c)]
        if not enabled:
            terminals += 1
            if any(pcs[d] < lens[d] for d in range(n)):
                if not hang:
                    stuck = [events[dev_gids[d][pcs[d]]] for d in range(n) if pcs[d] < lens[d]]
                hang = True
            if any(sems):
                if not nonzero:
                    final = {sems_list[i]: v for i, v in enumerate(sems) if v}
                nonzero = True
            continue
        if reduce and chosen is None:
            for tk, x in enabled:
                if tk == 0:
                    if all(done(h, pcs, infl_g) for h in conc[x]):
                        chosen = [(tk, x)]
                        break
                else:
                    g = x >> 1
                    if all(done(h, pcs, infl_g) for h in all_conf[g] if h != g):
                        chosen = [(tk, x)]
                        break
        todo = chosen if chosen is not None else enabled

        for tk, x in todo:
            p = list(s[:nn])
            cs = list(codes)
            if tk == 0:
                g = x
                d = dev_of[g]
                p[d] += 1
                k = kind[g]
                if k == 1:
                    if op1[g] >= 0:
                        p[n + op1[g]] += op3[g]
                elif k == 2:
                    p[n + op1[g]] -= op3[g]
                elif k == 3:
                    cs.append(2 * g)
                    cs.sort()
            else:
                g = x >> 1
                stage = x & 1
                nb = op3[g]
                amount = 1 if stage else nb - 1
                for si in (op1[g], op2[g]):
                    if si >= 0:
                        p[n + si] += amount
                cs.remove(x)
                if not stage:
                    cs.append(x | 1)
                    cs.sort()
            t = tuple(p + cs)
            if t not in visited:
                if len(visited) >= max_states:
                    complete = False
                    stack.clear()
                    break
                visited.add(t)
                stack.append(t)

    pairs = sorted(races)
    return ExploreResult(
        races=[(events[a], events[b]) for a, b in pairs], hang=hang, nonzero_exit=nonzero,
        states=len(visited), complete=complete, stuck=stuck, final=final,
        terminals=terminals, seconds=time.perf_counter() - t0)
