"""The cost model: the textbook formulas must come *out* of the simulator.

Nothing below is written into `ringc.cost`: each test derives the expected time from the
chip table and the collective's algebra, then compares it with the timed run of the
unrolled schedule.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from conftest import without_runtime_data

import ringc
from ringc.cli import main
from ringc.cost import CostError, estimate, hardware
from ringc.cost.chips import CHIPS
from ringc.cost.network import Flow, FluidNetwork
from ringc.cost.quotient import QuotientMachine
from ringc.cost.timeline import TimedMachine
from ringc.cost.sizing import fit_volume, parse_size, parse_sweep
from ringc.errors import ScheduleError
from ringc.ir.loader import load_text
from ringc.verify.rotation import Torus

REPO = Path(__file__).resolve().parent.parent
LIB = REPO / "schedules"
FIXTURES = REPO / "tests" / "cost"
MiB = 2**20


def load(path: Path):
    return ringc.load(path)


def price(path: Path, topology: str, nbytes: int | None = None):
    sched = load(path)
    return estimate(sched, hardware(topology, sched), nbytes=nbytes)


AG_RING = LIB / "all_gather_ring.yaml"


def B(topology: str) -> float:
    return hardware(topology, load(AG_RING)).chip.link_bandwidth


# --- validation against the closed forms -------------------------------------------------

@pytest.mark.parametrize("n", [8, 16])
def test_ring_all_gather_tends_to_n_minus_1_over_n_v_over_b(n):
    topo = f"ring:{n}"
    for size in (256 * MiB, 1024 * MiB):
        sched = load(AG_RING)
        e = estimate(sched, hardware(topo, sched), nbytes=size)
        V = e.bound.volume
        formula = (n - 1) / n * V / B(topo)
        assert 1.0 <= e.seconds / formula < 1.02, (size, e.seconds, formula)


@pytest.mark.parametrize("path", [FIXTURES / "all_gather_bidirectional.yaml", LIB / "all_gather_bidirectional.yaml"],
                         ids=["fixture", "library"])
def test_bidirectional_all_gather_is_about_twice_as_fast(path):
    if not path.exists():
        pytest.skip(f"{path.name} is not in this checkout")
    uni = price(AG_RING, "ring:16", 256 * MiB)
    bi = price(path, "ring:16", 256 * MiB)
    assert uni.bound.volume == bi.bound.volume
    assert 1.9 < uni.seconds / bi.seconds < 2.05
    # ... and it reaches the bound the unidirectional ring cannot: both links into a device.
    assert bi.efficiency > 0.95 > 0.55 > uni.efficiency


def test_all_reduce_is_about_twice_all_gather():
    ag = price(AG_RING, "ring:16", 256 * MiB)
    ar = price(FIXTURES / "all_reduce_rs_ag.yaml", "ring:16", 256 * MiB)
    assert ag.bound.volume == ar.bound.volume
    assert 1.9 < ar.seconds / ag.seconds < 2.1


def _ppermute(shift: int):
    text = (LIB / "ppermute_right.yaml").read_text()
    text = text.replace("shift: 1", f"shift: {shift}").replace("to: right", f"to: (me + {shift}) % N")
    return load_text(text, f"ppermute_shift{shift}.yaml")


@pytest.mark.parametrize("alpha", [1e-6, 3e-6])
def test_small_messages_are_latency_bound_hops_times_alpha(alpha):
    hw = hardware("ring:16", _ppermute(1), hop_latency=alpha)
    V, B = 4096, hw.chip.link_bandwidth
    times = {k: estimate(_ppermute(k), hw, nbytes=V).seconds for k in (1, 2, 4, 8)}
    for k, t in times.items():
        # k hops of latency; and every link now carries k of the N sends, so the (small)
        # transfer takes k times as long.
        assert t - times[1] == pytest.approx((k - 1) * (alpha + V / B), rel=0.01)
        assert k * alpha / t > 0.6  # latency dominates
    assert times[8] == pytest.approx(8 * alpha + hw.dma_overhead + 8 * V / B, rel=0.01)


def test_small_ring_all_gather_pays_one_hop_latency_per_step():
    sched = load(AG_RING)
    t1 = estimate(sched, hardware("ring:16", sched, hop_latency=1e-6), nbytes=4096).seconds
    t2 = estimate(sched, hardware("ring:16", sched, hop_latency=2e-6), nbytes=4096).seconds
    assert (t2 - t1) / 1e-6 == pytest.approx(15, rel=0.02)  # N - 1 steps, one hop each


def test_large_messages_are_not_latency_bound():
    sched = load(AG_RING)
    t1 = estimate(sched, hardware("ring:16", sched, hop_latency=1e-6), nbytes=1024 * MiB).seconds
    t2 = estimate(sched, hardware("ring:16", sched, hop_latency=2e-6), nbytes=1024 * MiB).seconds
    assert (t2 - t1) / t1 < 0.002


def test_the_diagnosis_of_the_bidirectional_reduce_scatter_is_right():
    """`why` says the tutorial's two directions take turns; the overlapped variant, which
    only moves the waits, is indeed much faster and keeps both links into a device busy."""
    turns = price(LIB / "reduce_scatter_bidirectional.yaml", "ring:16", 256 * MiB)
    both = price(LIB / "reduce_scatter_bidirectional_overlapped.yaml", "ring:16", 256 * MiB)
    assert any("take turns" in w and "only 0%" in w for w in turns.why())
    assert turns.seconds / both.seconds > 1.5
    assert both.efficiency > 0.7 > 0.5 > turns.efficiency


# --- topology: routes, contention ------------------------------------------------------------

def test_ring_schedule_on_a_line_routes_the_wraparound_over_three_hops():
    e = price(AG_RING, "v5e:4x4", 64 * MiB)
    wrap = [d for d in e.machine.dmas.values() if d.event.action.remote and d.event.device == 3]
    assert wrap and all(len(d.links) == 3 for d in wrap)
    assert [l[1] for l in wrap[0].links] == [(2, 0), (1, 0), (0, 0)]
    # On a torus axis of 4 the same send is one hop.
    e = price(AG_RING, "torus:4x4", 64 * MiB)
    wrap = [d for d in e.machine.dmas.values() if d.event.action.remote and d.event.device == 3]
    assert all(len(d.links) == 1 for d in wrap)


def test_bidirectional_all_gather_on_a_line_shares_links_with_the_wraparound():
    """v5e:4x4 has no wraparound: the left-moving ring's wrap send (0 -> 3) crosses the
    right-moving ring's links, so going both ways buys nothing there."""
    uni = price(AG_RING, "v5e:4x4", 256 * MiB)
    bi = price(FIXTURES / "all_gather_bidirectional.yaml", "v5e:4x4", 256 * MiB)
    hw = bi.hw
    assert bi.seconds == pytest.approx(uni.seconds, rel=0.05)
    assert bi.seconds > 0.95 * bi.bound.seconds / 1.0  # both near the line's bound (one link at the ends)
    assert bi.bound.seconds == pytest.approx(3 / 4 * bi.bound.volume / hw.chip.link_bandwidth, rel=1e-9)


def test_max_min_fair_sharing():
    net = FluidNetwork({"a": 10.0, "b": 4.0})
    f1 = Flow(1, {"a": 1.0}, 100.0)
    f2 = Flow(2, {"a": 1.0, "b": 1.0}, 100.0)
    net.add(f1)
    assert f1.rate == pytest.approx(10.0)
    net.add(f2)
    # f2 is held to 4 by b; f1 gets the rest of a, not an equal split.
    assert f2.rate == pytest.approx(4.0) and f1.rate == pytest.approx(6.0)
    assert f2.bottleneck == "b" and f1.bottleneck == "a"
    f3 = Flow(3, {"a": 1.0}, 100.0)
    net.add(f3)
    # Now a's fair share (10 / 3) is below b's limit: all three are held by a.
    assert (f1.rate, f2.rate, f3.rate) == pytest.approx((10 / 3,) * 3)
    assert f2.bottleneck == "a"
    # A copy that reads and writes the same memory uses it twice per byte.
    net = FluidNetwork({"hbm": 10.0})
    f = Flow(4, {"hbm": 2.0}, 10.0)
    net.add(f)
    assert f.rate == pytest.approx(5.0)
    net.advance(net.next_completion())
    assert net.finished() == [f]


def test_a_flow_too_small_to_move_the_clock_finishes():
    """A few residual bytes at a fast rate late in a run take less time than a float at
    `now` can resolve: `next_completion` is `now` again and nothing moves. The flow must
    finish then, or the run never ends (it did: the 3-D all-reduce on v5p:8x8x8 at 4 KiB,
    4.1e-8 B left at 2.8e12 B/s at 244 us, looped for ever)."""
    net = FluidNetwork({"hbm": 2.8e12})
    net.now = 2.442205995959617e-4
    f = Flow(1, {"hbm": 1.0}, 4.112951756951588e-08, size=32.0)
    net.add(f)
    t = net.next_completion()
    assert t == net.now  # the residue is below the clock's resolution
    net.advance(t)
    assert net.finished() == [f]
    # A residue the clock can resolve is still moved, not dropped.
    g = Flow(2, {"hbm": 1.0}, 1.0, size=32.0)
    net.add(g)
    assert net.finished() == [] and net.next_completion() > net.now


@settings(max_examples=200, deadline=None)
@given(start=st.floats(0.0, 1.0), caps=st.lists(st.sampled_from([4.5e10, 9e10, 8.1e11, 2.8e12, 6.16e13]),
                                                min_size=1, max_size=3),
       flows=st.lists(st.tuples(st.floats(1e-9, 1e9), st.lists(st.integers(0, 2), min_size=1, max_size=3)),
                      min_size=1, max_size=6))
def test_fluid_network_always_drains(start, caps, flows):
    """Any set of flows, started at any time of a run, drains in a bounded number of
    completion steps (at most two per flow: one that leaves a residue under the clock's
    resolution, one that finishes it), each resource's bytes adding up to what the flows
    carried. With the residue rule removed this loops for ever on tiny flows late in a run."""
    net = FluidNetwork({r: c for r, c in enumerate(caps)})
    net.now = start
    want: dict[int, float] = {}
    for i, (size, uses) in enumerate(flows):
        coef = {r % len(caps): 1.0 for r in uses}
        for r, c in coef.items():
            want[r] = want.get(r, 0.0) + size * c
        net.add(Flow(i, coef, size))
    steps = 0
    while net.flows:
        steps += 1
        assert steps <= 2 * len(flows)
        t = net.next_completion()
        assert t is not None and t >= net.now
        net.advance(t)
        net.finished()
    for r, total in want.items():
        assert net.used[r] == pytest.approx(total, rel=1e-6, abs=1e-6)


def test_3d_all_reduce_on_8x8x8_finishes():
    """The timed run above end to end (it looped before): the 3-D all-reduce on v5p:8x8x8
    at the 4 KiB latency probe, on the quotient, in well under a second of timing."""
    sched = load_text((LIB / "all_reduce_3d_bidirectional.yaml").read_text(), "all_reduce_3d_bidirectional.yaml")
    est = estimate(sched, hardware("v5p:8x8x8", sched), nbytes=4096)
    assert isinstance(est.machine, QuotientMachine)
    assert est.seconds > est.bound.seconds and 0.02 < est.efficiency < 0.2


def test_timed_flows_limit_stops_a_run_with_too_many_transfers_in_flight():
    """Every start or end of a transfer re-rates all those in flight, so a one-shot to every
    chip of a large slice costs the square of its sends (16 million re-ratings on
    v5p:16x16x16, minutes): the timed run counts them against `timed_flows` as it goes and
    stops with the limit's message. The one-shot all-gather on v5p:4x4x4 at 256 MiB
    re-rates a few thousand; under a limit of 1,000 it is refused, under the default priced."""
    from ringc import limits
    from ringc.synth.families import direct
    sched = load_text(direct.all_gather(3), "all_gather_direct_3d.yaml")
    hw = hardware("v5p:4x4x4", sched)
    est = estimate(sched, hw, nbytes=256 << 20)
    assert 1_000 < est.machine.rerated < limits.value("timed_flows")
    with limits.overridden({"timed_flows": 1_000}), pytest.raises(ScheduleError) as err:
        estimate(sched, hw, nbytes=256 << 20)
    assert "`timed_flows` of 1,000" in err.value.message and "in flight at" in err.value.message
    assert "price it at a smaller size" in str(err.value.fix)


def test_two_dmas_on_one_link_take_twice_as_long():
    """Two copies started together over the same directed link: the max-min model gives
    each half the bandwidth, so both land at 2 x bytes / B (not one after the other)."""
    text = (LIB / "ppermute_right.yaml").read_text()
    text = text.replace("  push: {src: x, dst: out,", "  push: {src: \"x[0:half]\", dst: \"out[0:half]\",")
    text = text.replace("copies:", "let: {half: rows // 2}\ncopies:\n  push2: {src: \"x[half:half]\", "
                        "dst: \"out[half:half]\", to: right, send_sem: send_sem, recv_sem: recv_sem}")
    text = text.replace("  - start: push\n  - wait: push",
                        "  - start: push\n  - start: push2\n  - wait: push\n  - wait: push2")
    sched = load_text(text, "two_on_one_link.yaml")
    hw = hardware("ring:4", sched, dma_overhead=0.0)
    e = estimate(sched, hw, nbytes=64 * MiB)
    ends = sorted(d.sent for d in e.machine.dmas.values() if d.event.device == 0)
    assert ends[0] == pytest.approx(ends[1], rel=1e-6)
    assert ends[0] == pytest.approx(e.bound.volume / hw.chip.link_bandwidth, rel=1e-3)


# --- the symmetric quotient: device 0's events stand for every device's ----------------------

# Every library schedule on rings (odd and even), a torus (a 1-axis schedule runs along x,
# a 2-axis one over the plane), and a 2x2x2 slice (axes of 2 chips, no wraparound links).
QUOTIENT_TOPOLOGIES = ["ring:5", "torus:4x4", "v5p:2x2x2"]
MORE_TOPOLOGIES = ["ring:8", "torus:3x4", "torus:2x2x4"]  # the slow test's
# Device d sends to d XOR 2^k: not a translation of device 0's sends, so timed on every device.
NOT_TRANSLATION_SYMMETRIC = {"all_gather_hypercube"}


def _fits(sched, topology: str):
    try:
        return hardware(topology, sched)
    except (ValueError, ScheduleError):
        return None


def _quotient_matches_every_device(path: Path, max_events: int | None, topologies: list[str]) -> int:
    """The quotient run (`cost/quotient.py`) gives the full run's estimate, bound, efficiency,
    bottleneck (its class and utilization) and diagnosis, for the defaults and 1 MiB (where
    transfers outlast the hops), on every topology of QUOTIENT_TOPOLOGIES the schedule fits.
    Runs whose device 0 has more than `max_events` events are not timed on every device."""
    sched = load(path)
    timed = 0
    for topology in topologies:
        hw = _fits(sched, topology)
        if hw is None:
            continue
        for nbytes in (None, MiB):
            try:
                q = estimate(sched, hw, nbytes=nbytes)
            except ScheduleError:  # e.g. a hypercube on a ring of 5
                continue
            if max_events is not None and len(q.machine.devices[0]) > max_events:  # (unfolded: `steady.py`)
                continue
            full = estimate(sched, hw, nbytes=nbytes, every_device=True)
            if path.stem in NOT_TRANSLATION_SYMMETRIC:
                assert type(q.machine) is TimedMachine and not q.assumptions, (topology, "timed on the quotient")
            else:
                assert isinstance(q.machine, QuotientMachine) and q.assumptions, (topology, "not timed on the quotient")
            assert type(full.machine) is TimedMachine and not full.assumptions
            where = (path.stem, topology, nbytes)
            assert q.seconds == pytest.approx(full.seconds, rel=1e-9), where
            assert q.bound == full.bound, where
            assert q.efficiency == pytest.approx(full.efficiency, rel=1e-9), where
            (rq, uq), (rf, uf) = q.bottleneck, full.bottleneck
            pl = hw.placement
            assert uq == pytest.approx(uf, rel=1e-9), where
            if path.stem not in NOT_TRANSLATION_SYMMETRIC:  # timed on every device: no link classes
                # the full run's bottleneck is a link of a class as busy as the quotient's busiest
                busiest = q.machine.utilization()[("link", *pl.representative(rf[1:]))]
                assert busiest == pytest.approx(uq, rel=1e-9), where
            assert q.why() == full.why(), where
            assert q.machine.link_bytes() == pytest.approx(full.machine.link_bytes(), rel=1e-9), where
            timed += 1
    return timed


@pytest.mark.parametrize("path", without_runtime_data(sorted(LIB.glob("*.yaml"))), ids=lambda p: p.stem)
def test_the_quotient_times_like_every_device(path):
    # the big nested pipelines (matmuls at 1 MiB: thousands of events per device) in the slow test
    assert _quotient_matches_every_device(path, 1500, QUOTIENT_TOPOLOGIES), f"{path.stem}: nothing compared"


@pytest.mark.slow
@pytest.mark.parametrize("path", without_runtime_data(sorted(LIB.glob("*.yaml"))), ids=lambda p: p.stem)
def test_the_quotient_times_like_every_device_at_every_size(path):
    assert _quotient_matches_every_device(path, None, QUOTIENT_TOPOLOGIES + MORE_TOPOLOGIES)


def test_the_quotient_critical_path_names_the_devices_it_stands_for():
    sched = load(LIB / "all_reduce_2d_bidirectional.yaml")
    e = estimate(sched, hardware("torus:4x4", sched), nbytes=MiB)
    assert isinstance(e.machine, QuotientMachine)
    path = e.critical_path()
    assert path[0].start == 0.0 and path[-1].end == pytest.approx(e.seconds)
    for a, b in zip(path, path[1:]):
        assert b.start == pytest.approx(a.end, abs=1e-12)
    assert sum(e.path_summary().values()) == pytest.approx(e.seconds)
    # it ends on device 0, and each transfer arrives on the device the next step runs on
    assert path[-1].device == 0 or path[-1].kind != "run"
    devices = {st.device for st in path}
    assert len(devices) > 1 and all(0 <= d < 16 for d in devices)
    for a, b in zip(path, path[1:]):
        if a.kind in ("dma", "signal"):
            src, dst = (int(x) for x in re.search(r"d(\d+)->d(\d+)", a.detail).groups())
            assert src == a.device and dst == b.device, (a, b)
    doc = e.to_json()
    assert doc["assumptions"] == e.assumptions and "symmetric quotient" in e.to_text()
    assert all(step["device"] == st.device for step, st in zip(doc["critical_path"], path))


@pytest.mark.parametrize("path, topology", [
    (REPO / "tests" / "torus" / "all_gather_2d_corner_copies_twice.yaml", "torus:4x4"),  # device (0, 0) differs
    (AG_RING, "v5e:4x4"),  # an axis of 4 without wraparound: the end chips' routes differ
])
def test_what_is_not_proved_symmetric_is_timed_on_every_device(path, topology):
    sched = load(path)
    e = estimate(sched, hardware(topology, sched), nbytes=MiB)
    assert type(e.machine) is TimedMachine and e.assumptions == []
    assert len(e.machine.devices) == e.program.n


def test_a_hang_on_the_quotient_is_every_devices_hang():
    sched = load(REPO / "tests" / "broken" / "all_reduce_over_wait.yaml")
    with pytest.raises(CostError, match=r"hangs \(4 device\(s\) never finish"):
        estimate(sched, hardware("ring:4", sched))


# --- placement arithmetic against the routes ---------------------------------------------------

PLACEMENTS = [("ring:2", None), ("ring:5", None), ("line:5", None), ("torus:2x2", None), ("mesh:3x2", None),
              ("torus:3x4", "y"), ("torus:3x4", None), ("v5e:4x4", None), ("v5e:4x4", "y"), ("v5p:2x2x2", None),
              ("torus:4x3x2", None), ("torus:2x4x3", "z,x"), ("mesh:2x3x2", "y,z")]


def _schedule_over(axes: list[str]):
    """A placeholder schedule over `axes` (placement reads only its axes)."""
    sched = load(LIB / "ppermute_right.yaml")
    return sched.model_copy(update={"axes": axes})


@pytest.mark.parametrize("topology, along", PLACEMENTS)
def test_links_hops_and_degrees_are_the_routes(topology, along):
    """`Placement.links`, `hops`, `diameter`, `degree` and `is_cycle` by arithmetic, against
    the n^2 routes and the topology's graph they replace."""
    from ringc import topology as T
    from ringc.verify.placement import place
    topo = T.parse(topology)
    pl = place(_schedule_over(["x", "y", "z"][:len(along.split(",")) if along else topo.ndim]), topo, along)
    p = pl.n
    routed = {link for s in range(p) for d in range(p) if s != d for link in pl.route(s, d)}
    assert set(pl.links) == routed and len(pl.links) == len(routed)
    assert all(pl.hops(s, d) == len(pl.route(s, d)) for s in range(p) for d in range(p))
    assert pl.diameter == max(pl.hops(s, d) for s in range(p) for d in range(p))
    graph = topo.graph.subgraph(pl.coords)
    assert [pl.degree(d) for d in range(p)] == [graph.degree(c) for c in pl.coords]
    import networkx as nx
    assert pl.is_cycle() == (p >= 3 and all(k == 2 for _, k in graph.degree) and nx.is_connected(graph))
    if pl.symmetric:  # a translation maps a route to the route of the moved pair, link by link
        torus = Torus(pl.sizes.values())
        for s in range(p):
            for d in range(p):
                for k in range(p):
                    moved = pl.route(torus.add(s, k), torus.add(d, k))
                    assert [pl.direction(x) for x in moved] == [pl.direction(x) for x in pl.route(s, d)]
                    assert [x[0] for x in moved] == [tuple((c + t) % n for c, t, n in zip(x[0], pl.coords[k], topo.shape))
                                                     for x in pl.route(s, d)]
        per_class = {}
        for link in pl.links:
            per_class.setdefault(pl.direction(link), []).append(link)
        assert all(len(links) == p for links in per_class.values())


@pytest.mark.parametrize("topology, along", PLACEMENTS)
def test_the_bisection_cut_in_closed_form(topology, along):
    from ringc import topology as T
    from ringc.cost.bounds import bisection
    from ringc.verify.placement import place
    topo = T.parse(topology)
    pl = place(_schedule_over(["x", "y", "z"][:len(along.split(",")) if along else topo.ndim]), topo, along)
    p, half, V, B = pl.n, pl.n // 2, 2.0**20, 1e10
    graph = topo.graph.subgraph(pl.coords)
    best = 0.0  # the O(p x edges) count it replaces, over the windows of every axis order
    for perm in itertools.permutations(range(len(pl.coords[0]))):
        coords = sorted(pl.coords, key=lambda c: tuple(c[i] for i in perm))
        for start in range(p):
            side = {coords[(start + i) % p] for i in range(half)}
            cut = sum(1 for a, b in graph.edges if (a in side) != (b in side))
            if cut:
                best = max(best, half * (p - half) * V / p / (B * cut))
    assert bisection(pl, V, B) == pytest.approx(best, rel=1e-12)


def test_the_bisection_halves_the_longest_axis_wherever_it_is():
    """On v5p:4x4x8 the narrowest cut halves z, the last axis: 2 x 16 links carry the
    64 x 64 x V / 128 bytes from one half to the other, V / B. Row-major windows alone
    halve x (64 links): half that, a bound the direct all-to-all seemed to miss by 2x."""
    from ringc import topology as T
    from ringc.cost.bounds import bisection
    from ringc.verify.placement import place
    V, B = 2.0**20, 1e10
    for spec, expected in (("v5p:4x4x8", V / B), ("v5p:8x4x4", V / B), ("v5p:4x4x4", V / 2 / B)):
        pl = place(_schedule_over(["x", "y", "z"]), T.parse(spec), None)
        assert bisection(pl, V, B) == pytest.approx(expected, rel=1e-12), spec


# --- bounds, sizing, output -----------------------------------------------------------------

def test_bounds_follow_the_links_per_device():
    for topo, links in (("ring:16", 2), ("v5e:4x4", 1)):  # a line's end chip has one link
        e = price(AG_RING, topo, 64 * MiB)
        hw, b = e.hw, e.bound
        p = hw.placement.n
        assert b.seconds == pytest.approx((1 - 1 / p) * b.volume / (hw.chip.link_bandwidth * links))
        assert b.binding == "ingress"


def test_bound_latency_floor_is_the_diameter():
    e = price(AG_RING, "ring:16", 4096)
    assert e.bound.components["latency"] == pytest.approx(8 * e.hw.hop_latency)


def test_fit_volume_hits_the_requested_size():
    for name in ("all_gather_ring", "all_reduce_ring", "ppermute_right", "reduce_scatter_bidirectional"):
        sched = load(LIB / f"{name}.yaml")
        for target in (4096, MiB, 256 * MiB):
            fitted = fit_volume(sched, {"x": 16}, target)
            e = estimate(fitted, hardware("ring:16", fitted))
            assert abs(e.bound.volume - target) / target < 0.01, (name, target, fitted.params)


def test_sizes_and_sweeps_parse():
    assert parse_size("64MiB") == 64 * MiB and parse_size("4KiB") == 4096 and parse_size("1.5KB") == 1500
    assert parse_sweep("4KiB..64KiB") == [4096, 8192, 16384, 32768, 65536]
    for bad in ("64 parsecs", "", "0B"):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_bytes_needs_a_sized_shape():
    text = (LIB / "ppermute_right.yaml").read_text().replace("shape: [rows, cols], spec", "shape: [8, 128], spec")
    sched = load_text(text, "fixed.yaml")
    with pytest.raises(ScheduleError, match="uses no parameter"):
        fit_volume(sched, {"x": 4}, MiB)


def test_a_hanging_schedule_cannot_be_priced():
    sched = load(REPO / "tests" / "broken" / "all_reduce_over_wait.yaml")
    with pytest.raises(CostError, match="hangs"):
        estimate(sched, hardware("ring:4", sched))


def test_critical_path_tiles_the_run():
    e = price(LIB / "reduce_scatter_bidirectional.yaml", "ring:8", 16 * MiB)
    path = e.critical_path()
    assert path[0].start == 0.0 and path[-1].end == pytest.approx(e.seconds)
    for a, b in zip(path, path[1:]):
        assert b.start == pytest.approx(a.end, abs=1e-12)
    assert sum(e.path_summary().values()) == pytest.approx(e.seconds)


def test_chip_table_is_complete():
    for name in ("v4", "v5e", "v5p", "v6e"):
        c = CHIPS[name]
        assert c.bf16_flops > 1e14 and c.hbm_bandwidth > 5e11 and c.link_bandwidth > 1e10
        assert c.ici_links in (4, 6) and c.vmem_bytes >= 16 * MiB
    sched = load(AG_RING)
    assert hardware("v5p:4x4x4", sched).chip.name == "v5p" and hardware("ring:8", sched).chip.name == "v5e"


def test_cli_cost_json(capsys):
    rc = main(["cost", str(LIB / "all_gather_ring.yaml"), "--topology", "v5e:4x4", "--bytes", "64MiB",
               "--format", "json"])
    assert rc == 0
    run = json.loads(capsys.readouterr().out)  # one versioned document, an estimate per size
    assert run["version"] == 1 and run["command"] == "cost" and run["errors"] == []
    (doc,) = run["reports"]
    assert {"estimate_s", "bound_s", "efficiency", "bottleneck", "critical_path"} <= set(doc)
    assert doc["N"] == 4 and doc["bytes"] == 64 * MiB
    assert doc["efficiency"] == pytest.approx(doc["bound_s"] / doc["estimate_s"])


def test_cli_cost_text_sweep_and_plot(tmp_path, capsys):
    out = tmp_path / "sweep.png"
    rc = main(["cost", str(LIB / "ppermute_right.yaml"), "--topology", "ring:8", "--sweep", "4KiB..64KiB",
               "--plot", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert text.count("KiB") >= 5 and "efficiency" in text
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args, code, message", [
    (["--topology", "ring"], 2, "sized topology"),
    (["--topology", "v5e:4x4", "--along", "z"], 2, "--along 'z' must name"),
    (["--topology", "ring:4", "--bytes", "lots"], 2, "expected a size"),
    (["--topology", "ring:4", "--plot", "/nonexistent/x.png"], 2, "does not exist"),
])
def test_cli_cost_bad_input(args, code, message, capsys):
    with pytest.raises(SystemExit) if "lots" in args else _nullcontext():
        rc = main(["cost", str(LIB / "ppermute_right.yaml"), *args])
        assert rc == code
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_cli_cost_of_a_hang_exits_1(capsys):
    rc = main(["cost", str(REPO / "tests" / "broken" / "all_reduce_over_wait.yaml"), "--topology", "ring:4"])
    assert rc == 1
    assert "hangs" in capsys.readouterr().err


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ---------------------------------------------------------------------------- issue 16: the library at the bound

def test_ring_bound_for_a_shift():
    """A shift by s on a wrapped ring of p moves s (p - s) / p x V per link at least (the
    `ring` component); on a line (no wraparound) there is no such component."""
    V = 256 * 2**20
    for s in (1, 3):
        text = (LIB / "ppermute_right.yaml").read_text().replace("shift: 1", f"shift: {s}")
        sched = load_text(text, "shift.yaml")
        hw = hardware("ring:8", sched)
        e = estimate(sched, hw, nbytes=V)
        assert e.bound.binding == "ring"
        assert e.bound.components["ring"] == pytest.approx(s * (8 - s) / 8 * V / CHIPS["v5e"].link_bandwidth, rel=1e-3)
    line = estimate(ringc.load(LIB / "ppermute_right.yaml"), hardware("v5e:4x4", ringc.load(LIB / "ppermute_right.yaml")),
                    nbytes=V)
    assert "ring" not in line.bound.components


@pytest.mark.parametrize("stem, topology, floor", [
    ("all_reduce_bidirectional", "ring:16", 0.95), ("reduce_scatter_chunked", "ring:16", 0.95),
    ("all_to_all_direct", "ring:16", 0.90), ("ppermute_bidirectional", "ring:16", 0.95),
    ("all_reduce_2d_bidirectional", "torus:4x4", 0.90)])
def test_library_reaches_its_target_at_256MiB(stem, topology, floor):
    sched = ringc.load(LIB / f"{stem}.yaml")
    e = estimate(sched, hardware(topology, sched), nbytes=256 * 2**20)
    assert e.efficiency >= floor, e.to_text()


def test_bidirectional_permute_beats_the_right_permute_on_a_ring_only():
    V = 64 * 2**20
    times = {}
    for topo in ("ring:8", "v5e:4x4"):
        for stem in ("ppermute_right", "ppermute_bidirectional"):
            sched = ringc.load(LIB / f"{stem}.yaml")
            times[topo, stem] = estimate(sched, hardware(topo, sched), nbytes=V).seconds
    # 1/8 of the shard goes the long way: 7/8 of the time on a ring of 8; on a line, a detour.
    assert times["ring:8", "ppermute_bidirectional"] == pytest.approx(7 / 8 * times["ring:8", "ppermute_right"], rel=0.02)
    assert times["v5e:4x4", "ppermute_bidirectional"] > times["v5e:4x4", "ppermute_right"]


def test_one_shot_wins_small_and_loses_large():
    """The latency-bound one-shot all-reduce against the bandwidth-optimal ring on ring:8."""
    from ringc.cost.rank import rank
    r = rank("all_reduce", "ring:8", [4096, 64 * 2**20])
    assert [r.winner(0), r.winner(1)] == ["all_reduce_one_shot", "all_reduce_bidirectional"]
    assert {"all_reduce_2d", "all_reduce_2d_bidirectional", "all_reduce_3d_bidirectional"} <= {n for n, _ in r.skipped}
    assert "* marks the fastest" in r.to_text() and r.to_json()["winners"] == [r.winner(0), r.winner(1)]
    with pytest.raises(ValueError, match="unknown collective"):
        rank("all_reduce_twice", "ring:8", [4096])


def test_rank_only_spans_the_whole_topology():
    from ringc.cost.rank import rank
    r = rank("psum", "v5e:4x4", [2**20])
    assert set(r.table) == {"all_reduce_2d", "all_reduce_2d_bidirectional"}
    assert any("4 of the 16 chips" in why for _, why in r.skipped)


def test_tune_ranges():
    from ringc.cost.tune import parse_range
    assert parse_range("chunks=1..4") == ("chunks", [1, 2, 3, 4])
    assert parse_range("chunks=1,2,8") == ("chunks", [1, 2, 8])
    for bad in ("chunks", "chunks=a..b", "chunks=4..1", "=3"):
        with pytest.raises(ValueError):
            parse_range(bad)


def test_tune_picks_the_fastest_choice_that_verifies():
    """Four receive semaphores per direction are what makes the pipelined all-reduce safe; with
    two, `check` finds a race whenever chunks >= 2 (on rings of 3 or more). The tuner must skip
    those choices however fast they are priced, and take the fastest one that verifies."""
    from ringc.cost.tune import tune
    from ringc.verify.check import check
    text = (LIB / "all_reduce_bidirectional.yaml").read_text()
    racy = load_text(text.replace("shape: [4]}", "shape: [2]}").replace(" % 4]", " % 2]"), "racy.yaml")
    hw = hardware("ring:4", racy)
    res = tune(racy, hw, 2**20, {"chunks": [1, 2, 4]}, compile=False)
    by = {c.params["chunks"]: c for c in res.choices}
    assert by[2].seconds < by[1].seconds < by[4].seconds  # fastest first: 2 is tried, refused
    assert by[2].problem == "REFUSED by ringc check: race" and by[4].problem == ""
    assert res.best is by[1] and res.verified.startswith("verified")
    assert check(racy.model_copy(update={"params": {**racy.params, "chunks": 1}}), 4).ok
    good = ringc.load(LIB / "all_reduce_bidirectional.yaml")
    res = tune(good, hardware("ring:4", good), 2**20, {"chunks": [1, 2, 4]}, compile=False)
    assert res.best.seconds == min(c.seconds for c in res.choices)
    assert "best" in res.to_text() and res.to_json()["best"] == res.best.params
    with pytest.raises(ringc.ScheduleError, match="no parameter `depth`"):
        tune(good, hw, 2**20, {"depth": [1]}, compile=False)


@pytest.mark.slow
def test_tune_drops_what_the_compiler_rejects():
    """The seed's all-reduce keeps `x`, `out` and `receive` in VMEM. At 16 MiB on 4 chips
    they fit a v5e core's 128 MiB but not the compiler's 16 MiB scoped limit: the compiler
    refuses, and tune says so; at 64 MiB they do not fit the core at all, which tune knows
    without compiling; at 1 MiB it compiles."""
    from ringc.cost.tune import tune
    sched = ringc.load(LIB / "all_reduce_ring.yaml")
    hw = hardware("ring:4", sched)
    mid = tune(sched, hw, 16 * 2**20, {"cols": [128]})
    assert mid.target == "v5e:2x2" and mid.best is None
    assert mid.choices[0].problem == "rejected by the compiler: vmem_overflow"
    big = tune(sched, hw, 64 * 2**20, {"cols": [128]})
    assert big.best is None and big.choices[0].compiled is None
    assert big.choices[0].problem == "VMEM: needs 192 MiB, a core has 128 MiB"
    small = tune(sched, hw, 2**20, {"cols": [128, 256]})
    assert small.best is not None and all(c.compiled and c.vmem for c in small.choices)


def test_vmem_is_counted_in_whole_tiles():
    """A VMEM array's last dim takes whole 128 lanes and the one before whole tiles of 8 rows
    of 32 bits (16 of bf16), or the power of 2 that holds fewer rows; on a GPU (shared
    memory) its plain bytes. The 2-lane 3-D windows at 256 MiB on v5p:16x16x16 (pieces of
    11 rows) are 53.6 MiB of elements, 71.25 MiB in tiles (and the relay buffers of its
    direct phase): over the core's 64 MiB, as libtpu says, so they do not fit."""
    from ringc import topology as T
    from ringc.cost.model import tiled_bytes
    from ringc.synth.families import vmem_windows
    assert tiled_bytes((4, 16, 16, 11, 128), "float32") == 4 * 16 * 16 * 16 * 128 * 4
    assert tiled_bytes((10, 4, 1), "float32") == 10 * 4 * 128 * 4
    assert tiled_bytes((3, 128), "float32") == 4 * 128 * 4 and tiled_bytes((9, 128), "float32") == 16 * 128 * 4
    assert tiled_bytes((20, 128), "bfloat16") == 32 * 128 * 2 and tiled_bytes((20, 200), "int8") == 32 * 256
    assert tiled_bytes((11, 100), "float32", tiled=False) == 11 * 100 * 4 and tiled_bytes((200,), "float32") == 256 * 4
    from ringc.cost.chips import chip
    cand = next(c for c in vmem_windows._generate_3d("psum", T.parse("v5p:16x16x16"), chip("v5p"))   # one core's
                if c.params == {"lanes": 2, "wrows": 16, "crows": 32, "last": "direct"})
    sched = load_text(cand.text, cand.name)
    e = estimate(sched, hardware("v5p:16x16x16", sched), nbytes=256 * MiB)
    relays = 3 * 24 * 128 * 4   # the direct phase's relay buffers, a block of each part (22 rows: 24 in tiles)
    assert e.schedule.params["rows"] == 22 and e.vmem == 71.25 * MiB + relays and not e.fits
    assert "DOES NOT FIT in the 64 MiB" in e.to_text()


@pytest.mark.slow  # prices 256 MiB schedules (80 s)
def test_vmem_need_counts_vmem_buffers_and_the_largest_pipeline():
    """`ringc cost` says what VMEM the kernel's buffers take and whether a core holds them:
    the all-reduce that streams HBM arrays through pipeline blocks needs three double-
    buffered (bm, cols) blocks at any size; all_reduce_2d keeps its input in VMEM."""
    from math import prod
    from ringc.cost.model import vmem_need
    from ringc.cost.rank import rank
    from ringc.units import time_text
    ar = ringc.load(LIB / "all_reduce_bidirectional.yaml")
    e = estimate(ar, hardware("ring:16", ar), nbytes=256 * MiB)
    assert e.schedule.params["rows"] // (2 * e.schedule.params["chunks"]) >= 512
    assert e.vmem == 3 * 2 * 512 * 128 * 4 and e.fits  # bm = min(q, block) = 512 rows
    assert e.to_json()["fits_vmem"] and "1.50 MiB of 128 MiB per core (v5e)" in e.to_text()
    small = estimate(ar, hardware("ring:4", ar))  # defaults: q = 8 rows, bm = 8
    assert small.vmem == 3 * 2 * 8 * 128 * 4
    # all_reduce_2d keeps its input and three scratch blocks in VMEM: 256 MiB does not fit
    vm = ringc.load(LIB / "all_reduce_2d.yaml")
    e2 = estimate(vm, hardware("v5e:4x4", vm), nbytes=256 * MiB)
    shapes = e2.program.shapes
    assert e2.vmem == vmem_need(vm, shapes) == sum(4 * prod(shapes[n]) for n in ("x", "acc", "tmp", "red"))
    assert not e2.fits and "DOES NOT FIT in the 128 MiB of a v5e core" in e2.to_text()
    # the 2-D bidirectional one streams: its largest pipeline, 6 windows of 512 KiB, twice
    ar2 = ringc.load(LIB / "all_reduce_2d_bidirectional.yaml")
    e3 = estimate(ar2, hardware("v5e:4x4", ar2), nbytes=256 * MiB)
    assert e3.vmem == 6 * 2 * 512 * 1024 and e3.fits
    ranking = rank("psum", "v5e:4x4", [256 * MiB])
    assert ranking.winner(0) == "all_reduce_2d_bidirectional"
    assert "!" + time_text(e2.seconds) in ranking.to_text()


def test_tune_and_rank_on_the_command_line(capsys):
    ar = str(LIB / "all_reduce_bidirectional.yaml")
    assert main(["tune", ar, "--topology", "ring:4", "--bytes", "64KiB", "--param-range", "chunks=1,2",
                 "--no-compile"]) == 0
    out = capsys.readouterr().out
    assert "chunks  estimate  efficiency  VMEM  verdict" in out and "best: chunks=" in out
    assert main(["tune", ar, "--topology", "ring:4", "--bytes", "64KiB"]) == 2  # nothing to tune
    assert "fix: add --param-range" in capsys.readouterr().err
    assert main(["tune", ar, "--topology", "ring:4", "--bytes", "64KiB", "--param-range", "chunks=x"]) == 2
    assert main(["cost", "--collective", "psum", "--topology", "ring:4", "--sweep", "4KiB..8KiB"]) == 0
    assert "all_reduce_one_shot" in capsys.readouterr().out
    assert main(["cost", ar, "--collective", "psum", "--topology", "ring:4", "--sweep", "4KiB..8KiB"]) == 2
    assert main(["cost", "--topology", "ring:4", "--bytes", "4KiB"]) == 2
    assert "or --collective KIND" in capsys.readouterr().err


def test_sizing_uses_the_collectives_volume_and_block_params():
    """--bytes sizes a collective matmul by its V (the gathered x, N x the input), not by the
    input buffer; with --param bm=512 the default 8 rows hold no block, so rows are sized in
    multiples of 512."""
    sched = ringc.load(LIB / "all_gather_matmul.yaml")
    sizes = {"x": 16}
    fitted = fit_volume(sched, sizes, 256 * MiB)
    rows, depth = fitted.params["rows"], fitted.params["depth"]
    assert 16 * rows * depth * 4 == 256 * MiB
    blocked = fit_volume(sched.model_copy(update={"params": {**sched.params, "bm": 512}}), sizes, 256 * MiB)
    assert blocked.params["rows"] % 512 == 0 and 16 * blocked.params["rows"] * blocked.params["depth"] * 4 == 256 * MiB


def test_timed_events_limit_refuses_before_unrolling():
    """Default 8-row matmul blocks at 256 MiB on ring:16, streamed row by row (a remote copy
    per row, outside the pipelines, which then do not fold: `cost/steady.py`), would take
    the timeline many minutes: refused at once, naming the limit and the block params that
    fix it."""
    sched = ringc.load(LIB / "all_gather_matmul_streamed.yaml")
    with pytest.raises(ScheduleError, match="over the limit `timed_events`") as err:
        estimate(sched, hardware("ring:16", sched), nbytes=256 * MiB)
    assert "--param bm=..." in err.value.fix and "--limit timed_events=" in err.value.fix


def test_a_schedule_s_vmem_limit_is_the_capacity_it_fits_or_not():
    """`vmem_limit_mib` is the scoped VMEM the compiler gives the kernel: a schedule whose
    buffers need more than its own limit does not fit, though the core holds them (the
    search took such windows on v5p:16x16x16, 53.6 MiB against a limit of 48, and libtpu
    refused them). The text names the limit and the fix."""
    from ringc.ir.loader import load_text
    text = (LIB / "all_reduce_2d.yaml").read_text()
    sched = ringc.load(LIB / "all_reduce_2d.yaml")
    e = estimate(sched, hardware("torus:4x4", sched), nbytes=4 * MiB)
    assert e.fits and e.vmem > 2 * MiB and e.vmem_capacity == 128 * MiB
    limited = load_text(text.replace("\nparams:", "\nvmem_limit_mib: 2\nparams:", 1), "limited")
    e2 = estimate(limited, hardware("torus:4x4", limited), nbytes=4 * MiB)
    assert e2.vmem == e.vmem and e2.vmem_capacity == 2 * MiB and not e2.fits
    assert "DOES NOT FIT in the 2 MiB its vmem_limit_mib allows per core (v5e: 128 MiB)" in e2.to_text()
    assert e2.to_json()["vmem_capacity_bytes"] == 2 * MiB and not e2.to_json()["fits_vmem"]
    roomy = load_text(text.replace("\nparams:", "\nvmem_limit_mib: 96\nparams:", 1), "roomy")
    e3 = estimate(roomy, hardware("torus:4x4", roomy), nbytes=4 * MiB)
    assert e3.fits and "of the 96 MiB its vmem_limit_mib allows per core" in e3.to_text()
