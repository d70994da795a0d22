"""Exhaustive interleaving explorer: operational ground truth for small N (N <= 4).

This module re-implements the execution model of `docs/verification.md` directly, as a
transition system, and searches its reachable states. It deliberately shares nothing
with `simulate.py`, `order.py` or `races.py` beyond the event graph itself
(`events.Program`, `Region.overlaps`), so that it can be used to test them.

The model
---------
A state is: each device's program counter, every semaphore's value, and the DMAs in
flight with how far each has got. Scheduler transitions are

- a device executes its next event:
  * `Compute` (zero / accumulate / assign / cast / matmul): an instantaneous access;
  * `Signal`: adds `inc` to the target semaphore at once;
  * `SemWait`: enabled when the value is >= `v`, then subtracts `v` (a threshold wait,
    `decrement=False`, subtracts nothing);
  * `DmaStart`: the DMA becomes in flight; nothing is deposited yet;
- a *side* of an in-flight DMA advances. Bytes arrive in two separate transitions: all
  but the last byte, then the last byte, each adding its share to the side's semaphore.
  This split is what lets a wait for D bytes complete while another DMA on the same
  semaphore still has its last byte in flight.

How the sides of a DMA are modelled is `dma_model`:

- ``"independent"`` (default, the model of `docs/verification.md`, which assumes no
  hardware ordering beyond the semaphore counts): a remote DMA has a *receive side*
  (deposits on the receiver's receive semaphore; its destination write is live until
  that side's last byte) and a *send side* (deposits on the sender's send semaphore; its
  source read is live until that side's last byte), advancing independently.
- ``"causal"``: as independent, but the receive side never gets ahead of the send side
  (a byte lands only after it was read).
- ``"coupled"``: one side that deposits on both semaphores in the same two stages; the
  source read and the destination write end together at the last byte.

A local copy always has one side: its one semaphore, both accesses live until its last
byte.

Semaphores count bytes from whatever DMA deposits them, and a wait of v takes v: one wait
may take the total of several DMAs, or part of one. What has landed when a wait passes is
whatever the explored arrivals say; nothing here reasons about it by counting.

The order of DMAs on one link is `dma_order`:

- ``"any"`` (default): DMA sides advance in any order;
- ``"in-order"``: the remote DMAs from one device to another (the starting device and the
  destination device) are FIFO per side: a side of such a DMA deposits nothing until the
  same side of every DMA started before it on that link has deposited its last byte (with
  ``"coupled"``, its one side). Local copies, and DMAs of different links, stay free. Deposits to a device that does not exist are dropped, and accesses to its memory
are ignored. The behaviours of the three models are nested, coupled < causal <
independent, so a race found under a smaller model is found under a larger one.

What is reported
----------------
- race: in some reachable state two conflicting accesses (overlapping regions, at least
  one a write, of different events) are possible at once: two live DMA accesses, a live
  DMA access and a device's next compute / DMA start, or the next compute / DMA starts
  of two different devices. Every such pair of events is reported.
- hang: a reachable terminal state (nothing enabled) where some device is unfinished.
- nonzero_exit: a reachable terminal state with some semaphore non-zero.

Partial-order reduction
-----------------------
The state graph is acyclic (every transition advances a pc or a DMA side) and
*monotone*: only the owner subtracts from a semaphore, everything else adds, and a DMA
side only moves forward, so an enabled transition stays enabled whatever the other
devices and DMAs do. Call an access *active* when it is live (a DMA side in flight) or
pending (the device's next compute or DMA start): a race is two conflicting active
accesses. In a state `s` a single transition `t` is explored instead of all enabled ones
when `t` is *safe*:

1. a `Signal`, an enabled `SemWait`, the first (all-but-last-byte) arrival of a DMA
   side, or a `DmaStart`: none of them makes an access inactive (a started DMA's
   accesses go from pending to live);
2. a `Compute` of device `d`, or the last-byte arrival of a DMA side, such that every
   access conflicting with its own either (a) is over (its event ran and, for a DMA side,
   is no longer in flight), (b) is active in `s` (that race pair is recorded at `s`), or
   (c) with `reduction="withhold"` only: belongs to an event that no run from `s`
   withholding `t` ever reaches. For a compute only accesses that could ever be
   concurrent with it count: other devices', and `d`'s own earlier DMAs'.

(c) is decided by one maximal run from `s` that never executes `t` (`held_run`): by
monotonicity, every device gets at least as far in it as in any run that withholds `t`.
With ``dma_order="in-order"`` monotonicity still holds (a DMA side enabled because the one
before it on its link has landed stays enabled), and withholding a side's last byte also
withholds every side queued behind it on its link, which `held_run` does.
This is the same principle as the analysis's withholding runs (`order.py`), implemented
separately; `reduction="local"` drops (c) and `reduction="none"` explores everything,
and the tests check that all three find the same racing pairs, hangs and exit values.

Soundness, by induction on the number of transitions left (which strictly decreases
along every transition): let `w` be a path from `s` to a state `r` in which the pair
`(a, b)` races. If `t` occurs in `w = u t v`, then `t` commutes with every transition
of `u` (none belongs to `t`'s device or DMA side; an addition, a forward step of a DMA
side, or an already enabled wait on the device's own semaphore never disables anything
and ends in the same state in either order), so `t u v` also reaches `r`. If `t` does
not occur in `w`, then `t w` is executable and reaches `r` plus `t`'s effect. In case 1
the active accesses of `r` are still active there, so `(a, b)` still races. In case 2,
if `t` ends neither `a` nor `b` the same holds; otherwise, say `t` ends `a`, then `b`
conflicts with `a` and is active at `r`, which a `t`-free path reached, so by (a)-(c)
`b` was already active in `s`, where `(a, b)` was recorded. Either way the pair is
found from `s` or from `s.t`. Every terminal state stays reachable (a safe transition
stays enabled, so it occurs in every maximal path). The reduced search thus finds
exactly the racing pairs, hangs and exit values of the full one. The choice of `t`
depends only on the state, so combining it with a visited-state set is safe.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

from .events import ZEROED_KINDS, Compute, DmaStart, Event, Program, Region, SemId, SemWait, Signal

DEFAULT_MAX_STATES = 2_000_000
DMA_MODELS = ("independent", "causal", "coupled")
REDUCTIONS = ("withhold", "local", "none")
DMA_ORDERS = ("any", "in-order")


@dataclass
class ExploreResult:
    races: list[tuple[Event, Event]]   # each racing pair of events once, ordered by (device, index)
    hang: bool                         # some terminal state has an unfinished device
    nonzero_exit: bool                 # some terminal state has a non-zero semaphore
    states: int                        # distinct states visited
    complete: bool                     # False: stopped at max_states, verdicts are partial
    stuck: list[Event] = field(default_factory=list)       # where devices stop (first hang found)
    final: dict[SemId, int] = field(default_factory=dict)  # non-zero values (first such exit)
    terminals: int = 0                 # distinct terminal states reached
    seconds: float = 0.0

    @property
    def race(self) -> bool:
        return bool(self.races)

    def summary(self) -> str:
        verdict = [k for k, v in (("race", self.race), ("hang", self.hang),
                                  ("nonzero_exit", self.nonzero_exit)) if v] or ["ok"]
        done = "complete" if self.complete else "INCOMPLETE"
        return f"{'+'.join(verdict)} ({self.states} states, {done}, {self.seconds:.2f}s)"


Access = tuple[Region, bool]  # (region, is_write)


def _conflicting(xs: list[Access], ys: list[Access]) -> bool:
    return any((wx or wy) and rx.overlaps(ry) for rx, wx in xs for ry, wy in ys)


def explore(program: Program, max_states: int = DEFAULT_MAX_STATES, *,
            dma_model: str = "independent", reduction: str = "withhold", dma_order: str = "any") -> ExploreResult:
    """Search every interleaving of `program` for races, hangs and non-zero exits.

    `dma_model`: "independent" (default), "causal" or "coupled" (see the module doc).
    `dma_order`: "any" (default) or "in-order" (FIFO per link and side, see the module doc).
    `reduction`: "withhold" (default), "local" or "none" (no partial-order reduction).
    At most `max_states` distinct states are visited; if the budget runs out the result
    has `complete=False` and its verdicts cover only what was seen (a race found is real;
    "no race" and "no hang" are then unproven).
    """
    if dma_model not in DMA_MODELS:
        raise ValueError(f"dma_model must be one of {DMA_MODELS}, not {dma_model!r}")
    if dma_order not in DMA_ORDERS:
        raise ValueError(f"dma_order must be one of {DMA_ORDERS}, not {dma_order!r}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, not {reduction!r}")
    reduce = reduction != "none"
    withhold = reduction == "withhold"
    t0 = time.perf_counter()
    n = program.n
    events: list[Event] = [ev for dev in program.devices for ev in dev]
    gid = {id(ev): g for g, ev in enumerate(events)}
    dev_gids = [[gid[id(ev)] for ev in dev] for dev in program.devices]
    lens = [len(dev) for dev in program.devices]
    dev_of = [ev.device for ev in events]
    idx_of = [ev.index for ev in events]

    sem_index: dict[SemId, int] = {}
    # Semaphores whose count at exit is dropped: zeroed before every launch (`events.ZEROED_KINDS`).
    zeroed = {name for name, k in program.sem_kinds.items() if k in ZEROED_KINDS}

    def sem_of(sem: SemId | None) -> int:
        """The semaphore's slot in the state, or -1: none / on a non-existent device."""
        if sem is None or not 0 <= sem[0] < n:
            return -1
        if sem not in sem_index:
            sem_index[sem] = len(sem_index)
        return sem_index[sem]

    def live(region: Region, write: bool) -> list[Access]:
        return [(region, write)] if 0 <= region.device < n else []

    # Events: kind 0 compute, 1 signal, 2 wait, 3 DMA start; `sem_op`/`amount` for 1, 2.
    # Access units: a compute (one point unit) or one side of a DMA (an interval unit,
    # live while in flight), with the accesses and the semaphores its bytes feed.
    kind: list[int] = []
    keep: set[int] = set()  # the waits that decrement nothing (threshold waits)
    sem_op: list[int] = []
    amount: list[int] = []
    event_units: list[tuple[int, ...]] = []
    unit_event: list[int] = []
    unit_acc: list[list[Access]] = []
    unit_sems: list[tuple[int, ...]] = []
    unit_bytes: list[int] = []
    unit_after: list[int] = []   # causal model: the send side this receive side trails
    unit_fifo: list[int] = []    # in-order: the same side of the previous DMA on its link, or -1
    fifo_chain: dict[int, list[int]] = {}  # in-order: unit -> the units after it on its link and side
    fifo_last: dict[tuple, int] = {}

    def new_unit(g: int, acc: list[Access], sems: tuple[int, ...] = (), nbytes: int = 0) -> int:
        unit_event.append(g)
        unit_acc.append(acc)
        unit_sems.append(tuple(s for s in sems if s >= 0))
        unit_bytes.append(nbytes)
        unit_after.append(-1)
        unit_fifo.append(-1)
        return len(unit_event) - 1

    def queue(u: int, side: str, ev: Event) -> None:
        """In order: `u` lands after the previous unit of its (link, side)."""
        key = (side, ev.device, ev.action.dst.device)
        prev = fifo_last.get(key, -1)
        unit_fifo[u] = prev
        fifo_last[key] = u
        while prev >= 0:
            fifo_chain.setdefault(prev, []).append(u)
            prev = unit_fifo[prev]

    for g, ev in enumerate(events):
        a = ev.action
        if isinstance(a, Compute):
            kind.append(0); sem_op.append(-1); amount.append(0)
            acc = live(a.dst, True) + [x for r in a.reads for x in live(r, False)]
            event_units.append((new_unit(g, acc),))
        elif isinstance(a, Signal):
            kind.append(1); sem_op.append(sem_of(a.sem)); amount.append(a.inc)
            event_units.append(())
        elif isinstance(a, SemWait):
            kind.append(2); sem_op.append(sem_of(a.sem)); amount.append(a.value)
            event_units.append(())
            if not a.decrement:
                keep.add(g)
        elif isinstance(a, DmaStart):
            kind.append(3); sem_op.append(-1); amount.append(0)
            src, dst, nb = live(a.src, False), live(a.dst, True), a.nbytes
            fifo = dma_order == "in-order" and a.send_sem is not None
            if a.send_sem is None or dma_model == "coupled":
                sems = (sem_of(a.recv_sem), sem_of(a.send_sem))
                u = new_unit(g, dst + src, sems, nb)
                if fifo:
                    queue(u, "both", ev)
                event_units.append((u,))
            else:
                recv = new_unit(g, dst, (sem_of(a.recv_sem),), nb)
                send = new_unit(g, src, (sem_of(a.send_sem),), nb)
                if dma_model == "causal":
                    unit_after[recv] = send
                if fifo:
                    queue(recv, "recv", ev)
                    queue(send, "send", ev)
                event_units.append((recv, send))
        else:  # pragma: no cover - the IR has no other actions
            raise TypeError(f"unknown action {a!r}")
    ns = len(sem_index)
    sems_list = sorted(sem_index, key=sem_index.get)
    nu = len(unit_event)

    # Conflicting units (of different events), grouped by memory to avoid all pairs.
    by_mem: dict[tuple[int, str], set[int]] = defaultdict(set)
    for u, acc in enumerate(unit_acc):
        for r, _ in acc:
            by_mem[(r.device, r.buffer)].add(u)
    conflicts: list[set[int]] = [set() for _ in range(nu)]
    for group in by_mem.values():
        members = sorted(group)
        for i, u in enumerate(members):
            for v in members[i + 1:]:
                if (unit_event[u] != unit_event[v] and v not in conflicts[u]
                        and _conflicting(unit_acc[u], unit_acc[v])):
                    conflicts[u].add(v)
                    conflicts[v].add(u)
    # Case 2 of the reduction: for each compute, the conflicting units that could ever
    # be concurrent with it (other devices', and its own device's earlier DMAs').
    start_conf: list[tuple[int, ...]] = []
    for g, ev in enumerate(events):
        cs: set[int] = set()
        for u in event_units[g]:
            for v in conflicts[u]:
                h = unit_event[v]
                if dev_of[h] != ev.device or (idx_of[h] < ev.index and kind[h] == 3):
                    cs.add(v)
        start_conf.append(tuple(sorted(cs)))
    unit_conf = [tuple(sorted(c)) for c in conflicts]

    def held_run(pcs, sems, stage: dict[int, int], hold_dev: int, hold_unit: int) -> list[int]:
        """How far every device gets from this state if device `hold_dev` never runs its
        next event, or the last byte of DMA side `hold_unit` never arrives (and everything
        else runs). By monotonicity this one maximal run reaches, on every device, the
        furthest position of any run that withholds that transition."""
        pc = list(pcs)
        val = list(sems)

        behind = set(fifo_chain.get(hold_unit, ())) if hold_unit >= 0 else set()

        def deliver(u: int, st: int) -> None:
            if u in behind:
                return  # in order: queued behind the withheld last byte, nothing arrives
            nb = unit_bytes[u]
            cap = nb - 1 if hold_unit >= 0 and hold_unit in (u, unit_after[u]) else nb
            add = cap - (nb - 1 if st else 0)
            if add > 0:
                for si in unit_sems[u]:
                    val[si] += add

        for u, st in stage.items():
            deliver(u, st)
        progress = True
        while progress:
            progress = False
            for d in range(n):
                if d == hold_dev:
                    continue
                gl, i, end = dev_gids[d], pc[d], lens[d]
                while i < end:
                    g = gl[i]
                    k = kind[g]
                    if k == 2:
                        si = sem_op[g]
                        if si < 0 or val[si] < amount[g]:
                            break
                        if g not in keep:
                            val[si] -= amount[g]
                    elif k == 1:
                        if sem_op[g] >= 0:
                            val[sem_op[g]] += amount[g]
                    elif k == 3:
                        for u in event_units[g]:
                            deliver(u, 0)
                    i += 1
                if i != pc[d]:
                    pc[d] = i
                    progress = True
        return pc

    races: set[tuple[int, int]] = set()
    hang = False
    nonzero = False
    stuck: list[Event] = []
    final: dict[SemId, int] = {}
    terminals = 0

    # A state: pcs (n) + semaphore values (ns) + in-flight DMA sides as sorted codes
    # 2 * unit + stage (stage 0: nothing arrived; 1: all but the last byte arrived).
    nn = n + ns
    init = tuple([0] * nn)
    visited = {init}
    stack = [init]
    complete = True

    while stack:
        s = stack.pop()
        pcs = s[:n]
        sems = s[n:nn]
        codes = s[nn:]
        stage = {c >> 1: c & 1 for c in codes}

        def over(v: int) -> bool:
            """Unit v's access is over: its event ran and it is not in flight."""
            h = unit_event[v]
            return pcs[dev_of[h]] > idx_of[h] and v not in stage

        # -- races: live DMA sides and every device's next compute / DMA start
        active = list(stage)
        nexts = []
        for d in range(n):
            if pcs[d] < lens[d]:
                g = dev_gids[d][pcs[d]]
                nexts.append(g)
                active.extend(event_units[g])
        for i, u in enumerate(active):
            cu = conflicts[u]
            if cu:
                for v in active[i + 1:]:
                    if v in cu:
                        a_, b_ = unit_event[u], unit_event[v]
                        races.add((a_, b_) if a_ < b_ else (b_, a_))

        # -- enabled transitions: (0, event) device step, (1, code) DMA side advance
        chosen: tuple[int, int] | None = None
        enabled: list[tuple[int, int]] = []
        for g in nexts:
            k = kind[g]
            if k == 2 and (sem_op[g] < 0 or sems[sem_op[g]] < amount[g]):
                continue
            enabled.append((0, g))
            if chosen is None and k != 0:
                chosen = (0, g)
        for c in codes:
            u, st = c >> 1, c & 1
            lead = unit_after[u]
            if lead >= 0 and lead in stage and stage[lead] <= st:
                continue  # causal: the receive side may not overtake the send side
            if unit_fifo[u] >= 0 and unit_fifo[u] in stage:
                continue  # in order: the previous DMA on this link and side is still arriving
            enabled.append((1, c))
            if chosen is None and st == 0:
                chosen = (1, c)
        if not enabled:
            terminals += 1
            if any(pcs[d] < lens[d] for d in range(n)):
                if not hang:
                    stuck = [events[dev_gids[d][pcs[d]]] for d in range(n) if pcs[d] < lens[d]]
                hang = True
            left = {sems_list[i]: v for i, v in enumerate(sems) if v and sems_list[i][1] not in zeroed}
            if left:
                if not nonzero:
                    final = left
                nonzero = True
            continue
        if chosen is None and reduce:
            active_set = set(active)
            for tk, x in enabled:
                conf = start_conf[x] if tk == 0 else unit_conf[x >> 1]
                rest = [v for v in conf if v not in active_set and not over(v)]
                if rest:
                    if not withhold:
                        continue
                    # Could one of them become active while `x` is withheld?
                    if tk == 0:
                        reach = held_run(pcs, sems, stage, dev_of[x], -1)
                    else:
                        reach = held_run(pcs, sems, stage, -1, x >> 1)
                    if any(reach[dev_of[unit_event[v]]] >= idx_of[unit_event[v]] for v in rest):
                        continue
                chosen = (tk, x)
                break
        todo = [chosen] if reduce and chosen is not None else enabled

        for tk, x in todo:
            p = list(s[:nn])
            cs = list(codes)
            if tk == 0:
                p[dev_of[x]] += 1
                k = kind[x]
                if k == 1:
                    if sem_op[x] >= 0:
                        p[n + sem_op[x]] += amount[x]
                elif k == 2 and x not in keep:
                    p[n + sem_op[x]] -= amount[x]
                elif k == 3:
                    cs.extend(2 * u for u in event_units[x])
                    cs.sort()
            else:
                u, st = x >> 1, x & 1
                add = 1 if st else unit_bytes[u] - 1
                for si in unit_sems[u]:
                    p[n + si] += add
                cs.remove(x)
                if not st:
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

    return ExploreResult(
        races=[(events[a], events[b]) for a, b in sorted(races)], hang=hang,
        nonzero_exit=nonzero, states=len(visited), complete=complete, stuck=stuck,
        final=final, terminals=terminals, seconds=time.perf_counter() - t0)
