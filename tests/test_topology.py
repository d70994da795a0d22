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


def test_describe_names_the_wraparound():
    assert "no wraparound" in T.parse("v5e:4x4").describe()
    assert "axis 1 only" in T.parse("v5e:8x16").describe()
