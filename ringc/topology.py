"""Device topologies as networkx graphs, and the routes sends take over them."""

from __future__ import annotations

import networkx as nx


def ring(n: int) -> nx.Graph:
    """A wrapped ring of n devices (a slice along one axis of a TPU torus)."""
    return nx.cycle_graph(n) if n > 2 else nx.path_graph(n)


def build(spec: str, n: int) -> nx.Graph:
    """The graph for a `--topology` spelling. Only `ring` is supported so far."""
    if spec == "ring":
        return ring(n)
    if spec.startswith("ring:"):
        size = spec.removeprefix("ring:")
        if size.isdigit() and int(size) == n:
            return ring(n)
        raise ValueError(f"topology {spec!r} does not match --devices {n}; use `ring` or `ring:{n}`")
    raise ValueError(f"unknown topology {spec!r}; supported: ring, ring:N")


def hops(graph: nx.Graph, src: int, dst: int) -> int:
    """Links a send from src to dst crosses on its shortest route."""
    return nx.shortest_path_length(graph, src, dst)
