"""The race analysis' candidate pairs (`races._candidate_pairs`): the accesses of one memory
that may race. The bisected sweep must yield, in the same order, exactly the pairs the plain
sweep it replaced yields that overlap and write (the only ones `races.race` can accept)."""

import random
from types import SimpleNamespace

from ringc.verify.events import Region
from ringc.verify.order import Order
from ringc.verify.races import Access, _candidate_pairs, _local, race


def _plain(group):
    """The sweep as it was: local pairs by program order, then for each remote access every
    access starting before its end on the leading dimension."""
    local = sorted((a for a in group if _local(a)), key=lambda a: a.start.index)
    active = []
    for b in local:
        active = [a for a in active if a.end.index >= b.start.index]
        yield from ((a, b) for a in active)
        if not b.point:
            active.append(b)
    remote = [a for a in group if not _local(a)]
    rank = {id(a): i for i, a in enumerate(remote)}
    lead = lambda acc: acc.region.box[0] if acc.region.box else (0, 1)  # noqa: E731
    others = sorted(group, key=lambda acc: lead(acc)[0])
    for i, a in enumerate(remote):
        for b in others:
            if lead(b)[0] >= lead(a)[1]:
                break
            if rank.get(id(b), len(remote)) > i:
                yield (a, b)


def _group(rng: random.Random, n: int):
    out = []
    for k in range(n):
        lo0 = rng.randrange(64)
        w0 = rng.choice([1, 1, 1, 2, 5, 64])
        lo1 = rng.randrange(8)
        box = ((lo0, min(64, lo0 + w0)), (lo1, lo1 + rng.choice([1, 2, 8])))
        region = Region("buf", 0, box, (0, 1), 4)
        dev = 0 if rng.random() < 0.5 else rng.randrange(1, 4)
        start = SimpleNamespace(device=dev, index=rng.randrange(100))
        end = SimpleNamespace(device=rng.choice([0, dev]), index=start.index + rng.randrange(0, 20))
        if rng.random() < 0.1:
            end = None
        elif rng.random() < 0.1:
            end = start
        out.append(Access(region, rng.random() < 0.5, start, end, f"access {k}"))
    return out


def test_the_bisected_sweep_yields_the_plain_sweeps_racing_candidates_in_order():
    rng = random.Random(7)
    for _ in range(200):
        group = _group(rng, rng.randrange(1, 40))
        keep = lambda p: (p[0].write or p[1].write) and p[0].region.overlaps(p[1].region)  # noqa: E731
        assert [p for p in _candidate_pairs(group) if keep(p)] == [p for p in _plain(group) if keep(p)]


def test_one_row_writes_meet_only_their_own_rows():
    """4,096 one-row DMAs into 64 rows (a MoE scatter's landing buffer): the candidates are the
    pairs on one row, not every pair."""
    group = [Access(Region("recv", 0, ((r % 64, r % 64 + 1), (0, 128)), (0, 1), 4), True,
                    SimpleNamespace(device=1 + r % 3, index=r), None, "dma") for r in range(4096)]
    pairs = sum(1 for _ in _candidate_pairs(group))
    assert pairs == 64 * (64 * 63 // 2)


class _Lag(Order):
    """A must-happen-before of its own (`races._Unordered` needs only `before`): on one
    device program order; across devices, e before f iff f is at least `lag[e][f]` events
    further on than e (a lockstep with a device's delay to another)."""

    def __init__(self, length: int, lag: list[list[int]]):
        devices = [[SimpleNamespace(device=d, index=i) for i in range(length)] for d in range(len(lag))]
        super().__init__(SimpleNamespace(devices=devices), [])
        self.lag = lag

    def before(self, e, f) -> bool:
        if e.device == f.device:
            return e.index < f.index
        return f.index >= e.index + self.lag[e.device][f.device]


def _on(order, acc):
    """The access with its events those of the order's program (same device and index)."""
    ev = lambda e: None if e is None else order.program.devices[e.device][e.index]  # noqa: E731
    return acc._replace(start=ev(acc.start), end=ev(acc.end))


def test_candidates_in_time_keep_every_racing_pair_in_order():
    """With the order, the remote candidates are those overlapping in time where fewer: the
    racing pairs (`race`) are the same, in the same order, as by space alone."""
    rng = random.Random(11)
    for _ in range(150):
        order = _Lag(130, [[0 if p == q else rng.randrange(1, 25) for q in range(4)] for p in range(4)])
        group = [_on(order, a) for a in _group(rng, rng.randrange(1, 120))]
        by_space = [p for p in _candidate_pairs(group) if race(*p, order)]
        assert [p for p in _candidate_pairs(group, order) if race(*p, order)] == by_space


def test_a_loops_copies_into_one_buffer_meet_only_the_iterations_near_them():
    """600 iterations of a remote copy into one buffer, each zeroed first by its owner
    (`looped_race_slow`, TPU-Collectives' benchmark loop): linear in the iterations, where
    by space alone every pair is a candidate (it took 63 s at 4,000 iterations)."""
    iters = 600
    order = _Lag(4 * iters, [[0, 3], [3, 0]])
    ev = order.program.devices
    box = Region("out", 0, ((0, 64), (0, 128)), (0, 1), 4)
    group = []
    for i in range(iters):
        group.append(Access(box, True, ev[0][4 * i], ev[0][4 * i], "zero"))              # the owner zeroes it
        group.append(Access(box, True, ev[1][4 * i + 1], ev[0][4 * i + 2], "copy"))      # the peer's copy lands
    pairs = sum(1 for _ in _candidate_pairs(group, order))
    assert pairs < 10 * iters
    assert sum(1 for _ in _candidate_pairs(group)) > iters * iters
