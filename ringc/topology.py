"""Device topologies as networkx graphs, and the routes sends take over them."""

from __future__ import annotations

import networkx as nx


def ring(n: int) -> nx.Graph:
    """A wrapped ring of n devices (a slice along one axis of a TPU torus)."""
    return nx.cycle_graph(n) if n > 2 else nx.path_graph(n)


def parse(spec: str) -> tuple[str, int | None]:
    """(kind, size) of a `--topology` spelling: `ring` or `ring:N`. Only rings so far."""
    kind, _, size = spec.partition(":")
    if kind != "ring" or (size and not size.isdigit()):
        raise ValueError(f"unknown topology {spec!r}; supported: ring, ring:N")
    return kind, int(size) if size else None


def build(spec: str, n: int) -> nx.Graph:
    """The graph of `n` devices for a `--topology` spelling."""
    _, size = parse(spec)
    if size is not None and size != n:
        raise ValueError(f"topology {spec!r} has {size} devices, but N={n}; use `ring` or `ring:{n}`")
    return ring(n)


def hops(graph: nx.Graph, src: int, dst: int) -> int:
    """Links a send from src to dst crosses on its shortest route."""
    return nx.shortest_path_length(graph, src, dst)
