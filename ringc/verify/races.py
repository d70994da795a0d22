"""Race-freedom over every interleaving.

An access is a region of one device's memory read or written over an interval of
events: a DMA reads its source from its start until the wait that guarantees the send
is done, and writes its destination from its start until the wait that guarantees the
bytes landed (`order.dma_ends`); compute reads and writes at its own event. Two accesses
to overlapping memory, at least one a write, race unless one must end before the other
starts (`order.Order.before`). Both relations hold over all interleavings, so this
decides race-freedom for the whole schedule, not for one execution.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Callable, NamedTuple

from . import messages as M
from .events import COMPUTES, Compute, DmaStart, Event, Program, Region, SemWait, Signal, feeders, sem_text
from .findings import Finding
from .order import DmaEnds, Order, link
from .simulate import Machine

__all__ = ["Access", "describe", "event_accesses", "accesses", "racing_pairs", "race", "find_races", "OUT_OF_ORDER"]


class Access(NamedTuple):  # a tuple: one per access of every event, tens of thousands
    region: Region
    write: bool
    start: Event
    end: Event | None      # the event after which it is over; None: never guaranteed
    what: str              # e.g. "DMA `pass` from device 1 writes"

    @property
    def point(self) -> bool:
        return self.end is self.start


def describe(ev: Event) -> str:
    a = ev.action
    if isinstance(a, DmaStart):
        to = f"device {a.dst.device} " if a.remote else ""
        return f"start {'remote' if a.remote else 'local'} copy `{a.copy}`: {a.src.text()} -> {to}{a.dst.text()}"
    if isinstance(a, SemWait):
        what = f"{a.why} `{a.copy}`" if a.copy else a.why
        return f"{what}: wait {sem_text(a.sem)} >= {a.value}" + ("" if a.decrement else " (no decrement)")
    if isinstance(a, Signal):
        return f"signal {sem_text(a.sem)} on device {a.sem[0]} (+{a.inc})"
    if isinstance(a, Compute):
        return COMPUTES[a.kind].describe(a, ev)
    raise TypeError(f"races: no description for action {a!r}")


def event_accesses(events: Iterable[Event], n: int) -> Iterator[tuple[Event, Region, bool, bool]]:
    """The accesses of events, in order, as (event, region, write, copy): a DMA's source then
    destination (`copy`: its interval ends where the DMA's read or write side does,
    `order.dma_ends`; a DMA into no device makes none); a compute's destination, then what
    it reads (the model's own writes read nothing), each at its own event. The one place
    that says which accesses an event makes."""
    for ev in events:
        a = ev.action
        cls = type(a)
        if cls is DmaStart:
            if 0 <= a.dst.device < n:
                yield ev, a.src, False, True
                yield ev, a.dst, True, True
        elif cls is Compute:
            work = a.work  # an unknown kind raises (`events.COMPUTES`)
            yield ev, a.dst, True, False
            if work:
                for r in a.reads:
                    yield ev, r, False, False


def accesses(program: Program, ends: DmaEnds, described: bool = True) -> list[Access]:
    """Every access of every event (`event_accesses`), with its end (`ends`) and its text.
    `described=False`: without their texts (`what` is ""; for a caller that only asks
    whether there is a race)."""
    out: list[Access] = []
    append = out.append
    read_end, write_end = ends.read_end, ends.write_end
    texts: tuple[str, str] = ("", "")
    last: Event | None = None
    for events in program.devices:
        for ev, region, write, copy in event_accesses(events, program.n):
            if copy:
                if described and ev is not last:
                    texts, last = _dma_texts(program, ev), ev
                append(Access(region, write, ev, (write_end if write else read_end).get(ev), texts[write]))
            elif write:
                append(Access(region, True, ev, ev, _write_text(program, ev) if described else ""))
            else:
                text = "a signal adds to it" if ev.action.kind == "signal" else f"`{ev.action.kind}` reads it"
                append(Access(region, False, ev, ev, text if described else ""))
    return out


def _dma_texts(program: Program, ev: Event) -> tuple[str, str]:
    """How a DMA's access to its source and to its destination are described."""
    a = ev.action
    arrow = f" (device {program.label(ev.device)} -> {program.label(a.dst.device)})" if a.remote else ""
    return f"copy `{a.copy}`{arrow} reads it as its source", f"copy `{a.copy}`{arrow} writes it"


def _write_text(program: Program, ev: Event) -> str:
    """How a compute's write of its destination is described."""
    a = ev.action
    if a.kind == "enter":
        return (f"device {program.label(ev.device)} enters the kernel (call {ev.invocation + 1}; before that "
                "the memory belongs to whatever ran before)")
    if a.kind == "exit":
        return (f"device {program.label(ev.device)} exits the kernel (call {ev.invocation + 1}; after that "
                "the memory belongs to whatever runs next)")
    if a.kind == "allocate":   # a pipeline's window, or scratch a kernel's core or scope takes anew
        return "it is allocated afresh (a pipeline window or scratch)"
    if a.kind == "opaque":   # the kernel's own store of a value the model does not follow (`x_ref[0] = 1`)
        return "a store writes it"
    return f"`{a.kind}` {COMPUTES[a.kind].writes} it"


def _ordered(order: Order, first: Access, second: Access) -> bool:
    """`first` is over before `second` begins, in every interleaving."""
    if first.point:
        return order.before(first.start, second.start)
    return first.end is not None and order.before(first.end, second.start)


def _is_entry(acc: Access) -> bool:
    a = acc.start.action
    return isinstance(a, Compute) and a.kind == "enter"


def _is_boundary(acc: Access) -> bool:
    """Kernel entry or exit: the memory changes hands."""
    a = acc.start.action
    return isinstance(a, Compute) and a.boundary


def _executed(m: Machine, ev: Event) -> bool:
    return ev.index < m.pc[ev.device]


def _why(program: Program, order: Order, a: Access, b: Access) -> str:
    if _is_entry(b):
        return _why_before_entry(program, a.start, b.start)
    if a.point:
        return (f"{program.where(b.start)} can run before {program.where(a.start)} finishes, "
                f"and the other way round")
    if a.end is None:
        side = "" if not a.start.action.remote else " its receive side" if a.write else " its send side"
        why = (f"no wait guarantees that copy `{a.start.action.copy}` has finished{side and ' on' + side}, "
               f"so it may still be in flight at any later point")
    else:
        why = (f"{program.where(b.start)} can run before the wait that guarantees the copy is done "
               f"({describe(a.end)}, at {program.where(a.end)}), and nothing makes the copy start after it")
    return why + _shared_semaphore(program, order, a)


def _shared_semaphore(program: Program, order: Order, acc: Access) -> str:
    """If the wait the author meant for this DMA (same descriptor, same grid point) does not
    end it, say why: other DMAs on its semaphore can supply the bytes it counts."""
    a: DmaStart = acc.start.action
    read_side = a.remote and not acc.write
    sem = a.send_sem if read_side else a.recv_sem
    whys = ("wait_send",) if read_side else ("wait_recv", "wait")
    meant = next((w for w in program.devices[sem[0]]
                  if isinstance(w.action, SemWait) and w.action.sem == sem and w.action.copy == a.copy
                  and w.action.why in whys and w.point == acc.start.point
                  and w.invocation == acc.start.invocation), None)
    if meant is None or meant is acc.end:
        return ""
    others: dict[str, Event] = {}
    for ev in feeders(program)[sem]:
        if ev is not acc.start and isinstance(ev.action, DmaStart) and not order.before(meant, ev):
            others.setdefault(ev.action.copy, ev)
    if not others:
        return ""
    names = ", ".join(f"copy `{name}` ({program.where(ev)})" for name, ev in list(others.items())[:3])
    return (f". The wait meant for it, {describe(meant)} at {program.where(meant)}, can complete while "
            f"it is still in flight: {sem_text(sem)} on device {sem[0]} also counts the bytes of {names}")


def _why_before_entry(program: Program, start: Event, entry: Event) -> str:
    """A DMA into a device that may not have entered the kernel: say what let the sender
    through without that device, from a run that holds it just before its entry."""
    limits = [len(ev) for ev in program.devices]
    limits[entry.device] = entry.index
    m = Machine(program, limits, account=True).run()
    head = (f"device {start.device} can start copy `{start.action.copy}` before device {entry.device} has "
            f"entered the kernel (call {entry.invocation + 1})")
    if not _executed(m, start):
        return head
    fed = {c.wait: c.taken for c in m.consumed}
    passed = []
    for w in program.devices[start.device][:start.index]:
        if (w in fed and w.invocation == start.invocation
                and program.sem_kinds.get(w.action.sem[1]) != "dma"):
            sources = " and ".join(_source_text(program, src) for src, _, _ in fed[w])
            passed.append(f"{describe(w)} at {program.where(w)} took {sources}")
    if not passed:
        return head + f": it waits for nothing that needs device {entry.device} to have entered"
    return (head + f": none of the waits it passes first needs device {entry.device} to have entered: "
            + "; ".join(passed[-3:]))


def _source_text(program: Program, src: Event) -> str:
    why = getattr(src.action, "why", "signal")
    kind = "a signal" if why in ("signal", "barrier") else f"a signal ({why})"
    return f"{kind} from {program.where(src)}"


def _witness_run(program: Program, a: Access, b: Access) -> tuple[Machine, list[Access]] | None:
    """A run that ends with both accesses live at once, and the interval ends it holds back."""
    def limits_holding(held: list[Access]) -> list[int]:
        limits = [len(ev) for ev in program.devices]
        for acc in held:
            limits[acc.end.device] = min(limits[acc.end.device], acc.end.index)
        return limits

    def open_ended(accs: tuple[Access, ...]) -> list[Access]:
        return [x for x in accs if not x.point and x.end is not None]

    if b.point and not a.point:
        # The point access must fall inside the interval: hold it until the interval began.
        held = open_ended((a,))
        limits = limits_holding(held)
        d = b.start.device
        limits[d] = min(limits[d], b.start.index)
        m = Machine(program, limits).run()
        if _executed(m, a.start):
            m.release(d, b.start.index + 1)
            if _executed(m, b.start):
                return m, held
    for held in (open_ended((a, b)), open_ended((a,))):
        m = Machine(program, limits_holding(held)).run()
        if _executed(m, a.start) and _executed(m, b.start):
            return m, held
    return None


def _witness(program: Program, a: Access, b: Access) -> list[str]:
    """A concrete interleaving where both accesses are live at once."""
    found = _witness_run(program, a, b)
    if found is None:
        return []
    m, held = found
    first_pos, last = sorted((m.order.index(a.start), m.order.index(b.start)))
    involved = {a.start.device, b.start.device, a.region.device}
    steps = [e for e in m.order[:last + 1] if e.device in involved]
    # Keep both racing events and a little context before the first one.
    start = max(0, steps.index(m.order[first_pos]) - 4)
    steps = steps[start:]
    if len(steps) > 16:
        steps = steps[:6] + [e for e in steps[6:-6] if e in (a.start, b.start)] + steps[-6:]
    lines = [f"{'>' if e in (a.start, b.start) else ' '} {program.where(e)}: {describe(e)}"
             for e in steps]
    for acc in held:
        lines.append(f"  ... {program.where(acc.end)} ({describe(acc.end)}) has not happened yet")
    return lines


def _local(acc: Access) -> bool:
    """Started and finished by the device that owns the memory: ordered by program order."""
    dev = acc.region.device
    return acc.start.device == dev and acc.end is not None and acc.end.device == dev


class _Unordered:
    """The accesses of one memory by when they start and end, to find those not ordered
    with a given access (`_candidate_pairs`). Must-happen-before contains program order, so
    of the accesses starting on one device, those an access `a` must end before are the
    ones starting from a point on (`Order.first_after`), and of those ending on one device,
    the ones that must end before `a` starts are those ending up to a point
    (`Order.count_before`). So the accesses not ordered with `a` are, per (start device,
    end device), a prefix by start with their end past a bound: a max tree over the ends
    finds them in time proportional to their number. A loop's thousands of iterations of
    one copy into one buffer then meet the few iterations they overlap in time, not each
    other (it was quadratic: 6 million pairs for 2,000 iterations)."""

    NEVER = float("inf")  # the end of an access no wait guarantees

    def __init__(self, group: list[Access], order: Order):
        self.order = order
        buckets: dict[tuple[int, int | None], list[Access]] = defaultdict(list)
        for acc in group:
            buckets[(acc.start.device, None if acc.end is None else acc.end.device)].append(acc)
        self.buckets = []
        for (device, end_device), accs in buckets.items():
            accs.sort(key=lambda acc: acc.start.index)
            ends = [self.NEVER if acc.end is None else acc.end.index for acc in accs]
            size = 1 << max(len(ends) - 1, 0).bit_length()
            tree = [-1.0] * size + ends + [-1.0] * (size - len(ends))
            for k in range(size - 1, 0, -1):
                tree[k] = max(tree[2 * k], tree[2 * k + 1])
            self.buckets.append((device, end_device, [acc.start.index for acc in accs], accs, tree, size))
        self._after: dict[tuple[int, int], int] = {}
        self._before: dict[tuple[int, int], int] = {}

    def _first_after(self, ev: Event, q: int) -> int:
        key = (id(ev), q)
        if key not in self._after:
            self._after[key] = self.order.first_after(ev, q)
        return self._after[key]

    def _count_before(self, ev: Event, q: int) -> int:
        key = (id(ev), q)
        if key not in self._before:
            self._before[key] = self.order.count_before(ev, q)
        return self._before[key]

    def of(self, a: Access, cap: int) -> list[Access] | None:
        """The accesses neither over before `a` begins nor begun after `a` is over, with
        `a` itself; None when there are more than `cap`."""
        over = a.start if a.point else a.end
        out: list[Access] = []
        for device, end_device, starts, accs, tree, size in self.buckets:
            upto = len(accs) if over is None else bisect_left(starts, self._first_after(over, device))
            bound = 0 if end_device is None else self._count_before(a.start, end_device)
            stack = [(1, 0, size)]
            while stack:
                node, lo, hi = stack.pop()
                if lo >= upto or tree[node] < bound:
                    continue
                if node >= size:
                    out.append(accs[node - size])
                    if len(out) > cap:
                        return None
                    continue
                mid = (lo + hi) // 2
                stack.append((2 * node + 1, mid, hi))
                stack.append((2 * node, lo, mid))
        return out


def _candidate_pairs(group: list[Access], order: Order | None = None):
    """The pairs of one memory's accesses that may race. Two local accesses race iff their
    program-order intervals overlap, so those are found by a sweep over program order
    (a pipeline's many window accesses never meet pairwise); the few pairs with a remote
    access are enumerated: those overlapping it in space, or, given the `order` and when
    they are fewer, those overlapping it in time (`_Unordered`)."""
    local = sorted((a for a in group if _local(a)), key=lambda a: a.start.index)
    active: list[Access] = []   # local accesses still live at the current program position
    writes: list[Access] = []   # those of them that write (two reads never race)
    for b in local:
        active = [a for a in active if a.end.index >= b.start.index]
        writes = [a for a in writes if a.end.index >= b.start.index]
        yield from ((a, b) for a in (active if b.write else writes))
        if not b.point:
            active.append(b)
            if b.write:
                writes.append(b)
    remote = [a for a in group if not _local(a)]
    if not remote:
        return
    rank = {id(a): i for i, a in enumerate(remote)}
    # A 0-d memory (a scalar ref: `pltpu.SMEM(())`, a `()`-shaped output) has one element.
    lead = lambda acc: acc.region.box[0] if acc.region.box else (0, 1)
    others = sorted(group, key=lambda acc: lead(acc)[0])
    place = {id(b): k for k, b in enumerate(others)}
    # A spatial sweep on the leading dimension: the accesses that overlap a remote one there.
    # Grouped by the bit length of their extent (extents below 2**c), each group sorted by its
    # start, those starting in (start - 2**c + 1, end) are found by bisection (an extent below
    # 2**c reaches past `start` only from there): a MoE scatter's thousands of one-row DMAs
    # into an expert buffer meet only their own row's, not every access before them (it was
    # quadratic in the accesses: 19 million pairs for 16,384 DMAs). Two reads never race: not
    # yielded.
    widths: dict[int, tuple[list[int], list[Access]]] = {}
    for b in others:
        lo, hi = lead(b)
        starts, accs = widths.setdefault(max(hi - lo, 1).bit_length(), ([], []))
        starts.append(lo)
        accs.append(b)
    in_time: _Unordered | None = None   # made when first asked
    for i, a in enumerate(remote):
        lo, hi = lead(a)
        spans = [(accs, bisect_right(starts, lo - (1 << c) + 1), bisect_left(starts, hi))
                 for c, (starts, accs) in widths.items()]
        many = sum(j - k for _, k, j in spans)
        now = None
        if order is not None and many > _FEW:
            in_time = in_time or _Unordered(group, order)
            now = in_time.of(a, many)
        if now is not None:  # fewer overlap it in time than in space: those, on the leading dimension
            near = [b for b in now if lead(b)[0] < hi and lo < lead(b)[1]]
        else:
            near = [b for accs, k, j in spans for b in accs[k:j]]
        near.sort(key=lambda b: place[id(b)])  # the order of the sweep over `others`
        for b in near:
            if (a.write or b.write) and rank.get(id(b), len(remote)) > i:
                yield (a, b)


_FEW = 32  # below this many candidates, the spatial sweep alone


def _ordinal(program: Program, ev: Event) -> str:
    """Which run of its line, at its device, call and grid point, the event is: `2nd`."""
    k = sum(1 for e in program.devices[ev.device][:ev.index + 1]
            if e.line == ev.line and e.point == ev.point and e.invocation == ev.invocation and e.inner == ev.inner)
    return f"{k}{'th' if 10 <= k % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"


def _told_apart(program: Program, first: Access, second: Access, one: str, two: str) -> tuple[str, str]:
    """Two accesses that read the same (one line, one point): two copies of one line's
    `start()`s told apart by their semaphores (`r.start(); l.start()`), else two runs of the
    line (a Python loop unrolled by tracing) by which run each is; two copies of one source
    to one place say they move the same bytes unless the source changes between them."""
    a, b = first.start.action, second.start.action
    if isinstance(a, DmaStart) and isinstance(b, DmaStart) and (a.send_sem, a.recv_sem) != (b.send_sem, b.recv_sem):
        def sems(x: DmaStart) -> str:
            return f"on {sem_text(x.send_sem)}/{sem_text(x.recv_sem)}" if x.send_sem else f"on {sem_text(x.recv_sem)}"
        one, two = f"{one} ({sems(a)})", f"{two} ({sems(b)})"
    else:
        one += f" ({_ordinal(program, first.start)} time the line runs there)"
        two += f" ({_ordinal(program, second.start)} time)"
    if isinstance(a, DmaStart) and isinstance(b, DmaStart) and a.src == b.src and a.dst == b.dst:
        two += (f"; both copy device {program.label(a.src.device)}'s `{a.src.text()}` there: the same bytes unless "
                "the source changes between them")
    return one, two


def _same_copy(a: Access, b: Access) -> bool:
    """Two writes of one place by two copies of one source region to one destination region."""
    x, y = a.start.action, b.start.action
    return (a.write and b.write and isinstance(x, DmaStart) and isinstance(y, DmaStart) and x.src == y.src
            and x.dst == y.dst)


def racing_pairs(group: list[Access], order: Order):
    """The pairs of accesses to one memory that race: overlapping, one a write, unordered."""
    for a, b in _candidate_pairs(group, order):
        if race(a, b, order):
            yield a, b


def race(a: Access, b: Access, order: Order) -> bool:
    """Two accesses race: overlapping memory, one a write, neither over before the other begins."""
    if not (a.write or b.write) or a.start is b.start or not a.region.overlaps(b.region):
        return False
    return not (_ordered(order, a, b) or _ordered(order, b, a))


OUT_OF_ORDER = "out-of-order landing on one link"


def _in_order(acc: Access, fifo: DmaEnds) -> Access:
    """The access with its interval as the in-order model ends it (`order.dma_ends`)."""
    if not isinstance(acc.start.action, DmaStart):
        return acc
    ends = fifo.write_end if acc.write else fifo.read_end
    return acc._replace(end=ends.get(acc.start))


def _out_of_order_text(program: Program, fed: dict, accs: tuple[Access, ...], fifo: DmaEnds) -> str:
    """Which two DMAs of one link the race needs to land out of order: the copy whose
    interval the in-order model ends earlier, and a copy started after it on the same link
    whose bytes its wait may count."""
    for acc in accs:
        if not isinstance(acc.start.action, DmaStart) or _in_order(acc, fifo).end is acc.end:
            continue
        x, a = acc.start, acc.start.action
        key = link(x)
        sem = a.recv_sem if acc.write else a.send_sem
        later = next((ev for ev in fed.get(sem, []) if ev.device == x.device and ev.index > x.index
                      and link(ev) == key and isinstance(ev.action, DmaStart)), None)
        side = "land" if acc.write else "finish being read"
        if later is None or key is None:
            break
        return (f" [relies on {OUT_OF_ORDER}: copy `{later.action.copy}` ({program.where(later)}), started after "
                f"copy `{a.copy}` ({program.where(x)}) on the link from device {program.label(key[0])} to device "
                f"{program.label(key[1])}, must {side} before it does; with --dma-order in-order this race goes away]")
    return f" [relies on {OUT_OF_ORDER}; with --dma-order in-order this race goes away]"


def find_races(program: Program, order: Order, ends: DmaEnds, limit: int = 20,
               devices: set[int] | None = None,
               in_order: "DmaEnds | Callable[[], DmaEnds] | None" = None) -> list[Finding]:
    """Races on the memory of `devices` (default: every device; one suffices when the
    program is `symmetry.memory_symmetric`). One finding per pair of ops (YAML lines).

    With `in_order` (the DMA intervals of the in-order model, computed for the same
    devices), every finding whose pair of ops races under `ends` in no instance under
    `in_order` is labelled as relying on out-of-order landing on one link (`relies_on`):
    exactly the findings that `--dma-order in-order` does not report."""
    by_memory: dict[tuple[int, str], list[Access]] = defaultdict(list)
    for acc in accesses(program, ends):
        if devices is not None and acc.region.device not in devices:
            continue
        by_memory[(acc.region.device, acc.region.buffer)].append(acc)
    findings: list[Finding] = []
    pairs: dict[tuple, tuple[Access, Access]] = {}
    robust: set[tuple] = set()   # pairs of ops that race under the in-order model too
    written: set[tuple[int, str]] | None = None   # (device, buffer) some event writes (`_same_copy`)

    def settled() -> bool:
        return len(findings) >= limit and (in_order is None or len(robust) == len(pairs))

    for group in by_memory.values():
        if settled():
            break
        for a, b in _candidate_pairs(group, order):
            key = tuple(sorted([(a.start.line, a.write), (b.start.line, b.write)]))
            if key in pairs and (in_order is None or key in robust):
                continue  # that pair of ops is found and labelled: another instance says nothing new
            if not race(a, b, order):
                continue
            if callable(in_order):
                in_order = in_order()
            if key not in pairs and len(findings) >= limit:
                if settled():
                    break
                continue  # past the limit: only deciding the labels of the findings made
            if in_order is not None and key not in robust and race(_in_order(a, in_order), _in_order(b, in_order), order):
                robust.add(key)
            if key in pairs:
                continue  # one finding per pair of ops, either way round; the first explains it
            pairs[key] = (a, b)
            first, second = (a, b) if not a.point else (b, a)
            if not second.point and second.end is None and first.end is not None:
                first, second = second, first  # explain the copy that never ends
            mem = f"device {program.label(a.region.device)}'s `{a.region.text()}`"
            if b.region.box != a.region.box:
                mem += f" (overlapping `{b.region.text()}`)"
            one, two = f"{first.what} from {program.where(first.start)}", f"{second.what} at {program.where(second.start)}"
            if first.what == second.what and program.where(first.start) == program.where(second.start):
                one, two = _told_apart(program, first, second, one, two)
            elif _same_copy(first, second):
                if written is None:
                    written = {(r.device, r.buffer) for ev, r, w, _ in event_accesses(
                        (ev for evs in [*program.devices, *program.second_core] for ev in evs), program.n)
                        if w and not (isinstance(ev.action, Compute) and not ev.action.work)}   # (not the model's own)
                src = first.start.action.src
                if (src.device, src.buffer) not in written:
                    two += (f"; both copy device {program.label(src.device)}'s `{src.text()}`, which nothing writes: "
                            "the same bytes land whichever is last, but two unordered writers are a race; let one of "
                            "them write it")
            # A copy live across a device's entry or exit is the copy's fault.
            at, other = (first, second) if _is_boundary(second) else (second, first)
            findings.append(M.RACE.finding(memory=mem, one=one, two=two, why=_why(program, order, first, second),
                                           event=at.start, related=[other.start],
                                           trace=_witness(program, first, second)))
    if in_order is not None and len(robust) < len(pairs):
        fed = feeders(program)
        for f, (key, pair) in zip(findings, pairs.items()):
            if key not in robust:
                f.relies_on = OUT_OF_ORDER
                f.message += _out_of_order_text(program, fed, pair, in_order)
    return findings
