"""The cost model on an HGX H100 node (`--topology h100:N`): GPUs all-to-all through NVSwitch.

As in tests/test_cost.py, the expected numbers are derived here from the published figures
(docs/cost-model.md, "NVLink and NVSwitch"), not read back from `ringc.cost`: a GPU's 18
NVLink 4 links carry 900 GB/s both ways together, so its port into the switch fabric
carries P = 450 GB/s each way, and every send is one hop through the switch.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ringc
from ringc.cli import main
from ringc.cost import estimate, hardware
from ringc.errors import ScheduleError
from ringc.topology import parse

REPO = Path(__file__).resolve().parent.parent
LIB = REPO / "schedules"
MiB = 2**20
P = 900e9 / 2          # [DGX] 900 GB/s bidirectional per GPU, one way
NCCL_STEP = 0.6e-6     # [NCCL] hwLat, NVLink, ring, LL protocol


def price(stem: str, topology: str, nbytes: int, **options):
    sched = ringc.load(LIB / f"{stem}.yaml")
    return estimate(sched, hardware(topology, sched, **options), nbytes=nbytes)


# --- the bounds, formula by formula -----------------------------------------------------

@pytest.mark.parametrize("p", [2, 4, 8])
def test_bandwidth_bounds_per_gpu_with_and_without_in_switch_reduction(p):
    ag = price("all_gather_ring", f"h100:{p}", 64 * MiB)
    V = ag.bound.volume
    assert ag.bound.components["ingress"] == pytest.approx((1 - 1 / p) * V / P)  # the gathered shards arrive
    assert ag.bound.components["egress"] == pytest.approx((1 - 1 / p) * V / P / (p - 1))  # own shard, once each
    assert ag.bound.seconds == pytest.approx((1 - 1 / p) * V / P)
    assert ag.bound.in_switch.seconds == pytest.approx(ag.bound.seconds)  # multicast does not lower ingress

    rs = price("reduce_scatter_bidirectional", f"h100:{p}", 64 * MiB)
    V = rs.bound.volume
    assert rs.bound.components["egress"] == pytest.approx((1 - 1 / p) * V / P)
    assert rs.bound.in_switch.seconds == pytest.approx((1 - 1 / p) * V / P)  # other blocks still leave

    ar = price("all_reduce_ring", f"h100:{p}", 64 * MiB)
    V = ar.bound.volume
    assert ar.bound.seconds == pytest.approx(2 * (1 - 1 / p) * V / P)  # Patarasuk & Yuan
    assert ar.bound.binding in ("ingress", "egress", "aggregate")
    # NVLink SHARP: each GPU sends its V once and receives the sum once.
    assert ar.bound.in_switch.seconds == pytest.approx(V / P)
    assert ar.bound.in_switch.seconds < ar.bound.seconds or p == 2


def test_every_pair_is_one_hop_and_no_grid_terms_apply():
    e = price("all_to_all_direct", "h100:8", 16 * MiB)
    assert e.bound.components["latency"] == pytest.approx(NCCL_STEP)  # the default hop: one NVLink step
    assert "bisection" not in e.bound.components and "ring" not in e.bound.components
    assert e.hw.placement.diameter == 1
    assert {e.hw.placement.hops(0, d) for d in range(1, 8)} == {1}
    assert e.bound.in_switch.seconds == pytest.approx(e.bound.seconds)  # distinct data: no multicast gain
    assert price("ppermute_right", "ring:8", 16 * MiB).bound.in_switch is None  # a grid has no switch


# --- the timed run against its bound ---------------------------------------------------

@pytest.mark.parametrize("size", [256 * MiB, 1024 * MiB])
def test_ring_all_gather_prices_within_its_bound_and_above_it(size):
    e = price("all_gather_ring", "h100:8", size)
    assert e.bound.seconds <= e.seconds <= e.bound.seconds / 0.9
    # The closed form: 7 steps of V/8 through one port at P, the own-shard copy (read and
    # write of V/8 in HBM) ahead of them, and per step a hop and a DMA issue.
    V = e.bound.volume
    hbm = 3.35e12  # [H100DS]
    closed = 7 * (V / 8 / P) + 2 * (V / 8) / hbm
    assert e.seconds == pytest.approx(closed, rel=0.02)


def test_both_ways_round_a_ring_buy_nothing_through_one_port():
    # On a wrapped ring of links the bidirectional all-gather is ~2x the ring; through a
    # switch both directions share the GPU's one port, so it is no faster.
    sw = [price(s, "h100:8", 256 * MiB).seconds for s in ("all_gather_ring", "all_gather_bidirectional")]
    assert sw[1] == pytest.approx(sw[0], rel=0.05)
    grid = [price(s, "ring:8", 256 * MiB).seconds for s in ("all_gather_ring", "all_gather_bidirectional")]
    assert grid[0] / grid[1] > 1.8


def test_one_shot_and_ring_side_by_side():
    # Small: the one-shot all-reduce pays one step, the ring 2 (p - 1) dependent steps of a
    # hop and a DMA issue each, at least.
    one, ring = (price(s, "h100:8", 4096) for s in ("all_reduce_one_shot", "all_reduce_ring"))
    assert ring.seconds >= 14 * (NCCL_STEP + 0.5e-6)
    assert one.seconds < ring.seconds / 2
    # Large: every byte of the one-shot's (p - 1) V crosses each GPU's one port in and out,
    # the bound's 2 (1 - 1/p) V four times over; the NVLS bound is lower still.
    big = price("all_reduce_one_shot", "h100:8", 64 * MiB)
    V = big.bound.volume
    assert big.seconds >= 7 * V / P
    assert big.bound.in_switch.seconds < big.bound.seconds < big.seconds


def test_a_broadcast_is_timed_as_one_multicast_beside_a_copy_per_gpu():
    """all_reduce_one_shot's `send` is a broadcast: on the switch it is one multimem store, whose
    bytes leave a GPU's port once (V, not (p - 1) V) and still enter every other GPU's port; the
    same schedule with a copy per GPU is priced beside it. Either way each GPU takes (p - 1) V
    in, so both stay at or above that; a ring has no broadcast, nor does a grid of links."""
    sched = ringc.load(LIB / "all_reduce_one_shot.yaml")
    hw = hardware("h100:8", sched)
    e = estimate(sched, hw, nbytes=64 * MiB, every_device=True)
    assert e.multicast == {"send"} and e.per_gpu is not None and not e.per_gpu.multicast
    V = e.bound.volume
    out_of_0, into_1 = hw.placement.route(0, 1)
    for est, leaving in ((e, V), (e.per_gpu, 7 * V)):
        used = est.machine.net.used
        assert used[("link", *out_of_0)] == pytest.approx(leaving, rel=1e-9)
        assert used[("link", *into_1)] == pytest.approx(7 * V, rel=1e-9)
        assert est.seconds >= 7 * V / P
    assert any("multicast: copy `send`" in a for a in e.assumptions)
    assert "per GPU" in e.to_text() and "multimem=False" in e.to_text()
    assert json.loads(json.dumps(e.to_json()))["multicast"] == ["send"]
    q = estimate(sched, hw, nbytes=64 * MiB)  # the quotient times the multicast as every GPU does
    assert q.seconds == pytest.approx(e.seconds, rel=1e-9)
    small = price("all_reduce_one_shot", "h100:8", 64 * 1024)  # the later starts only signal: no DMA issue
    assert small.seconds <= small.per_gpu.seconds - small.hw.dma_overhead
    assert not price("all_reduce_ring", "h100:8", MiB).multicast
    assert not price("all_reduce_one_shot", "ring:8", MiB).multicast


def test_the_quotient_prices_as_every_gpu():
    for stem in ("all_gather_ring", "all_reduce_one_shot", "all_to_all_direct"):
        sched = ringc.load(LIB / f"{stem}.yaml")
        hw = hardware("h100:8", sched)
        q = estimate(sched, hw, nbytes=MiB)
        full = estimate(sched, hw, nbytes=MiB, every_device=True)
        assert q.seconds == pytest.approx(full.seconds, rel=1e-9)
        assert q.efficiency == pytest.approx(full.efficiency, rel=1e-9)


def test_hop_latency_is_the_chips_unless_given():
    assert price("all_gather_ring", "h100:8", 4096).hw.hop_latency == NCCL_STEP
    assert price("all_gather_ring", "ring:8", 4096).hw.hop_latency == 1e-6
    slow = price("all_gather_ring", "h100:8", 4096, hop_latency=2e-6)
    fast = price("all_gather_ring", "h100:8", 4096)
    assert slow.seconds - fast.seconds == pytest.approx(7 * (2e-6 - NCCL_STEP), rel=0.05)


# --- bad input: one message each -------------------------------------------------------

@pytest.mark.parametrize("spelling, message", [
    ("h100:0", "expected a GPU count from 1 to 8 after the colon, e.g. h100:8"),
    ("h100:x", "expected a GPU count from 1 to 8 after the colon, e.g. h100:8"),
    ("h100", "needs its size, e.g. h100:8"),
    ("h100:16", "at most 8 GPUs"),
    ("h100:2x4", "one axis of at most 8 GPUs"),
])
def test_bad_spellings_are_refused_in_one_line(spelling, message, capsys):
    with pytest.raises(ValueError, match=message):
        parse(spelling)
    rc = main(["cost", str(LIB / "all_gather_ring.yaml"), "--topology", spelling])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert message in err.splitlines()[0]


def test_a_schedule_that_cannot_be_placed_is_refused_with_its_line(capsys):
    sched = ringc.load(LIB / "all_reduce_2d.yaml")
    with pytest.raises(ScheduleError) as info:
        hardware("h100:8", sched)
    assert info.value.line == sched.line_of("axes")
    assert "is one axis" in str(info.value)
    assert main(["cost", str(LIB / "all_reduce_2d.yaml"), "--topology", "h100:8"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{LIB / 'all_reduce_2d.yaml'}:{sched.line_of('axes')}: error:") and "Traceback" not in err


@pytest.mark.parametrize("topology, chip, message", [
    ("ring:8", "h100", "price it on h100:N"),
    ("h100:8", "v5e", "drop --chip"),
])
def test_a_chip_on_the_other_kind_of_network_is_refused(topology, chip, message, capsys):
    rc = main(["cost", str(LIB / "all_gather_ring.yaml"), "--topology", topology, "--chip", chip])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err


def test_cli_prints_the_bound_the_ratio_and_the_nvls_bound(capsys):
    assert main(["cost", str(LIB / "all_reduce_ring.yaml"), "--topology", "h100:8", "--bytes", "64MiB"]) == 0
    out = capsys.readouterr().out
    assert "h100:8 (8 GPUs, all-to-all through NVSwitch)" in out
    for word in ("estimate", "bound", "efficiency", "with NVLS", "link nvswitch->0"):
        assert word in out
    assert main(["cost", str(LIB / "all_reduce_ring.yaml"), "--topology", "h100:8", "--bytes", "64MiB",
                 "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (e,) = [r for r in _walk(doc) if isinstance(r, dict) and "bound_in_switch_s" in r]
    assert e["bound_in_switch_s"] == pytest.approx(e["bytes"] / P)
    assert e["efficiency_in_switch"] == pytest.approx(e["bound_in_switch_s"] / e["estimate_s"])
    assert e["bound"]["in_switch"]["bound_s"] == e["bound_in_switch_s"]


def _walk(x):
    yield x
    if isinstance(x, dict):
        for v in x.values():
            yield from _walk(v)
    elif isinstance(x, list):
        for v in x:
            yield from _walk(v)
