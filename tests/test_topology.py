"""Topology spellings, wraparound rules per TPU generation, routes and hop counts."""

import networkx as nx
import pytest

from ringc import topology as T


@pytest.mark.parametrize("spec, n, kind, shape, wrap, gen", [
    ("ring", 5, "ring", (5,), (True,), None),
    ("ring:8", None, "ring", (8,), (True,), None),
    ("line:4", None, "line", (4,), (False,), None),
    ("torus:4x4", None, "torus", (4, 4), (True, True), None),
    ("torus:2x4x8", None, "torus", (2, 4, 8), (True, True, True), None),
    ("mesh:2x4", None, "mesh", (2, 4), (False, False), None),
    # v4/v5p: only whole 4x4x4 cubes wrap, and then on every axis
    ("v4:2x2x2", None, "slice", (2, 2, 2), (False,) * 3, "v4"),
    ("v4:4x4x8", None, "slice", (4, 4, 8), (True,) * 3, "v4"),
    ("v5p:2x4x4", None, "slice", (2, 4, 4), (False,) * 3, "v5p"),
    ("v5p:4x4x4", None, "slice", (4, 4, 4), (True,) * 3, "v5p"),
    # v5e/v6e: an axis wraps only when it spans the 16-chip pod
    ("v5e:4x4", None, "slice", (4, 4), (False, False), "v5e"),
    ("v5e:8x16", None, "slice", (8, 16), (False, True), "v5e"),
    ("v6e:8x8", None, "slice", (8, 8), (False, False), "v6e"),
    ("v6e:16x16", None, "slice", (16, 16), (True, True), "v6e"),
    # an HGX H100 node: GPUs all-to-all through NVSwitch
    ("h100:8", None, "switch", (8,), (True,), "h100"),
])
def test_parse(spec, n, kind, shape, wrap, gen):
    t = T.parse(spec, n)
    assert (t.spec, t.kind, t.shape, t.wrap, t.generation) == (spec, kind, shape, wrap, gen)
    assert sorted(t.graph.nodes) == t.devices and t.size == len(t.devices)
    assert nx.number_of_selfloops(t.graph) == 0


@pytest.mark.parametrize("spec, n, fix", [
    ("ring", None, "ring:N"),
    ("torus", None, "torus:4x4"),
    ("torus:4xa", None, "4x4"),
    ("hypercube:4", None, "supported spellings"),
    ("v5e:4x4x4", None, "v5e:4x4"),
    ("v4:4x4", None, "v4:4x4x4"),
    ("v5e:32x32", None, "torus:32x32"),
    ("ring:4", 8, "--devices 4"),
    ("line:2x2", None, "mesh:2x2"),
])
def test_parse_rejects_with_the_fix(spec, n, fix):
    with pytest.raises(ValueError, match=fix):
        T.parse(spec, n)


def test_graph_degrees():
    assert {d for _, d in T.parse("torus:4x4x4").graph.degree} == {6}
    assert dict(T.parse("mesh:3x3").graph.degree)[(1, 1)] == 4
    assert dict(T.parse("mesh:3x3").graph.degree)[(0, 0)] == 2
    assert T.parse("ring:2").graph.number_of_edges() == 1


def test_route_is_a_path_in_the_graph_and_shortest():
    for spec in ("torus:4x4", "mesh:2x4", "v5e:8x16", "torus:3x5", "v4:2x2x4", "ring:7"):
        t = T.parse(spec)
        for src in t.devices:
            for dst in t.devices:
                path = T.route(t, src, dst)
                assert path[0] == src and path[-1] == dst
                assert all(t.graph.has_edge(a, b) for a, b in zip(path, path[1:]))
                assert T.hops(t, src, dst) == nx.shortest_path_length(t.graph, src, dst)


def test_route_is_dimension_ordered_and_wraps_the_short_way():
    t = T.parse("torus:4x4")
    assert T.route(t, (0, 0), (3, 1)) == [(0, 0), (3, 0), (3, 1)]  # x first, 1 hop back round
    m = T.parse("mesh:4x4")
    assert T.route(m, (0, 0), (3, 1)) == [(0, 0), (1, 0), (2, 0), (3, 0), (3, 1)]
    assert T.hops(T.parse("line:8"), (7,), (0,)) == 7
    assert T.hops(T.parse("ring:8"), (7,), (0,)) == 1


def test_axis_ring_and_flat_ids():
    t = T.parse("torus:2x4")
    assert T.axis_ring(t, 1, (1, 0)) == [(1, 0), (1, 1), (1, 2), (1, 3)]
    assert T.axis_ring(t, 0, (0, 3)) == [(0, 3), (1, 3)]
    assert [t.flat(c) for c in t.devices] == list(range(8))
    assert all(t.coord(t.flat(c)) == c for c in t.devices)


def test_topologies_compare_by_spelling_and_shape():
    assert T.parse("torus:4x4") == T.parse("torus:4x4") != T.parse("mesh:4x4")
    assert len({T.parse("v5e:4x4"), T.parse("v5e:4x4")}) == 1


def test_describe_names_the_wraparound():
    assert "no wraparound" in T.parse("v5e:4x4").describe()
    assert "axis 1 only" in T.parse("v5e:8x16").describe()


# ------------------------------------------------------------------ schedules on topologies

from pathlib import Path  # noqa: E402

import ringc  # noqa: E402
from ringc.verify.placement import place, sends, v5e_offset_ok  # noqa: E402
from ringc.verify.unroll import unroll  # noqa: E402

LIB = Path(__file__).resolve().parent.parent / "schedules"
ONE_AXIS = ["all_gather_ring", "all_reduce_ring", "ppermute_right", "reduce_scatter_bidirectional",
            "all_gather_bidirectional", "all_to_all_ring", "all_gather_megacore"]
TWO_AXES = ["all_gather_2d", "all_reduce_2d"]


def _lib(stem):
    return ringc.load(LIB / f"{stem}.yaml")


@pytest.mark.parametrize("topology, along", [("torus:16x16", "y"), ("torus:8x8x8", "z"), ("v4:4x4x8", "x")])
@pytest.mark.parametrize("stem", ONE_AXIS)
def test_one_axis_library_checks_clean_along_an_axis_of_a_torus(stem, topology, along):
    report = ringc.check(_lib(stem), topology=topology, along=along, strict=True)
    assert report.ok and not report.findings, report.to_text()
    topo = parse(topology)
    assert report.program.n == topo.shape["xyz".index(along)]
    if along == "y":
        assert "along y (the schedule's x)" in report.to_text()


@pytest.mark.parametrize("topology", ["torus:4x4", "torus:4x4x4", "v5p:4x4x4", "torus:2x8"])
@pytest.mark.parametrize("stem", TWO_AXES)
def test_two_axis_library_checks_clean(stem, topology):
    report = ringc.check(_lib(stem), topology=topology, strict=True)
    assert report.ok and not report.findings, report.to_text()


@pytest.mark.slow
@pytest.mark.parametrize("topology", ["torus:16x16", "torus:8x8x8"])
@pytest.mark.parametrize("stem", TWO_AXES)
def test_two_axis_library_checks_clean_on_big_tori(stem, topology):
    report = ringc.check(_lib(stem), topology=topology, strict=True)
    assert report.ok and not report.findings, report.to_text()
    assert report.program.n == (256 if topology == "torus:16x16" else 64)


def parse(spec):
    return T.parse(spec)


def test_every_send_of_every_instance_gets_a_route():
    sched = _lib("all_gather_ring")
    placement = place(sched, T.parse("torus:4x4"), "y")
    program = unroll(sched, sizes=placement.sizes)  # every device (a clean check keeps device 0's events only)
    every = sends(program, placement)
    one = sends(program, placement, instance=(2, 0))
    assert placement.instances == 4 and len(every) == 4 * len(one) > 0
    assert {s.src[0] for s in one} == {2}            # instance 2: the row x = 2
    assert all(s.hops == 1 for s in every)           # a ring on a wrapped axis: neighbours only
    mesh = sends(program, place(sched, T.parse("mesh:4x4"), "y"))
    assert sorted({s.hops for s in mesh}) == [1, 3]  # the wrap-around send of each row


def test_findings_name_devices_by_coordinates():
    text = ringc.check(_lib("all_gather_ring"), topology="v5e:2x4", along="y").to_text()
    assert "device (*, 3)" in text and "device (*, 0)" in text   # every row: x is `*`
    text = ringc.check(_lib("all_gather_2d"), topology="mesh:2x4").to_text()
    assert "device (0, 3)" in text and "(0, 3) -> (0, 2) -> (0, 1) -> (0, 0)" in text


def test_missing_wraparound_on_v4_below_a_cube():
    report = ringc.check(_lib("all_gather_ring"), topology="v4:2x2x4", along="z")
    assert [(f.kind, f.severity) for f in report.findings] == [("no_wraparound", "warning")]
    assert "v4 slices only wrap when they are whole 4x4x4 cubes" in report.findings[0].message
    strict = ringc.check(_lib("all_gather_ring"), topology="v4:2x2x4", along="z", strict=True)
    assert not strict.ok and strict.findings[0].severity == "error"


def test_v5e_power_of_2_offsets():
    t = T.parse("v5e:8x16")
    assert v5e_offset_ok(t, (0, 0), (0, 1)) and v5e_offset_ok(t, (0, 15), (0, 0))   # +1, wrap -15 = +1
    assert v5e_offset_ok(t, (0, 0), (0, 4)) and v5e_offset_ok(t, (0, 0), (4, 8))
    assert not v5e_offset_ok(t, (0, 0), (0, 3)) and not v5e_offset_ok(t, (1, 0), (4, 0))
    assert v5e_offset_ok(T.parse("v5e:4x4"), (0, 3), (0, 0))  # a ring's wrap-around: 1 the other way


def test_place_binds_axes_by_name_or_position():
    ring, two = _lib("all_gather_ring"), _lib("all_gather_2d")
    t3 = T.parse("torus:2x4x8")
    assert place(ring, t3).along == (0,) and place(ring, t3, "z").along == (2,)
    assert place(ring, t3, "1").along == (1,)
    assert place(two, t3).along == (0, 1) and place(two, t3, "z,x").along == (2, 0)
    assert place(two, t3, "z,x").sizes == {"x": 8, "y": 2}
    with pytest.raises(ringc.ScheduleError, match="distinct axes"):
        place(two, t3, "x,x")
    with pytest.raises(ringc.ScheduleError, match="has 1 axis"):
        place(two, T.parse("ring:8"))


def test_route_summary_shows_the_detour_of_a_missing_wraparound():
    sched = _lib("all_gather_ring")
    wrapped = ringc.check(sched, topology="torus:4x4").routes
    line = ringc.check(sched, topology="v5e:4x4").routes
    assert wrapped["sends"] == line["sends"] == 12           # 3 steps x 4 devices, one instance
    assert (wrapped["max_hops"], wrapped["mean_hops"]) == (1, 1.0)
    assert (line["max_hops"], line["mean_hops"]) == (3, 1.5)  # 3 of the 12 sends go 3 hops back


def test_a_switched_node_routes_every_send_through_the_fabric_in_one_hop():
    from ringc.verify.placement import Placement, link_text
    t = T.parse("h100:8")
    assert T.route(t, (2,), (5,)) == [(2,), T.SWITCH, (5,)] and T.hops(t, (2,), (5,)) == 1
    assert T.route(t, (3,), (3,)) == [(3,)] and T.hops(t, (3,), (3,)) == 0
    assert t.graph.number_of_edges() == 8 * 7 // 2
    pl = Placement(t, ("x",), (0,))
    assert len(pl.links) == 16 and {pl.degree(d) for d in range(8)} == {1}
    assert pl.diameter == 1 and pl.symmetric and not pl.is_cycle()
    assert pl.hops_of(pl.route(0, 7)) == 1 and link_text(pl.route(0, 7)[0]) == "0->nvswitch"
    assert pl.representative(((6,), T.SWITCH)) == ((0,), T.SWITCH)
    assert pl.representative((T.SWITCH, (6,))) == (T.SWITCH, (0,))


@pytest.mark.parametrize("stem", ["all_gather_ring", "all_reduce_one_shot", "all_to_all_direct"])
def test_one_axis_library_checks_clean_on_an_h100_node(stem):
    # Every send is one hop through the switch: no route warnings, even under --strict
    # (a ring's wrap-around send and a one-shot's far sends cross no extra links).
    report = ringc.check(_lib(stem), topology="h100:8", strict=True)
    assert report.ok and not report.findings, report.to_text()
