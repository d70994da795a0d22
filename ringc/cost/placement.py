"""Where a schedule's devices sit on a topology, and the links their sends cross.

A schedule runs along one mesh axis: its device `i` is the i-th chip of that axis, the
other coordinates fixed (`topology.axis_ring`). On `v5e:4x4` a 1-axis schedule therefore
runs on 4 chips; the other rows run their own copies on disjoint links, so one ring is
enough to price the collective.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import networkx as nx

from .. import topology as T

Coord = tuple[int, ...]
Link = tuple[Coord, Coord]  # directed: data flows from the first chip to the second


def coord_text(c: Coord) -> str:
    return str(c[0]) if len(c) == 1 else "(" + ",".join(map(str, c)) + ")"


def link_text(link: Link) -> str:
    return f"{coord_text(link[0])}->{coord_text(link[1])}"


@dataclass(frozen=True)
class Placement:
    topo: T.Topology
    axis: int
    coords: tuple[Coord, ...]  # schedule device index -> chip coordinate

    @property
    def n(self) -> int:
        return len(self.coords)

    def route(self, src: int, dst: int) -> list[Link]:
        """The directed links a send from device src to device dst crosses, in order."""
        path = T.route(self.topo, self.coords[src], self.coords[dst])
        return list(zip(path, path[1:]))

    def hops(self, src: int, dst: int) -> int:
        return T.hops(self.topo, self.coords[src], self.coords[dst])

    @cached_property
    def links(self) -> list[Link]:
        """Every directed link some route between two of our devices can cross."""
        seen: dict[Link, None] = {}
        for s in range(self.n):
            for d in range(self.n):
                if s != d:
                    seen.update(dict.fromkeys(self.route(s, d)))
        return list(seen)

    @cached_property
    def subgraph(self) -> nx.Graph:
        """The chips of this axis and the links between them."""
        return self.topo.graph.subgraph(self.coords)

    def degree(self, device: int) -> int:
        """Links from this device to other devices of the axis (each full duplex)."""
        return self.subgraph.degree(self.coords[device])

    def describe(self) -> str:
        if self.topo.ndim == 1:
            return self.topo.describe()
        fixed = ", ".join(f"axis {k}={c}" for k, c in enumerate(self.coords[0]) if k != self.axis)
        return f"{self.topo.describe()}, along axis {self.axis} ({self.n} chips; {fixed})"


def place(topo: T.Topology, axis: int = 0, fixed: Coord | None = None) -> Placement:
    """Put a 1-axis schedule on `axis` of `topo`, other coordinates from `fixed` (default 0)."""
    if not 0 <= axis < topo.ndim:
        raise ValueError(f"axis {axis} does not exist in {topo.describe()}; use --axis 0..{topo.ndim - 1}")
    fixed = fixed or tuple(0 for _ in topo.shape)
    return Placement(topo, axis, tuple(T.axis_ring(topo, axis, fixed)))


def placement_for(topo: T.Topology, n: int, axis: int | None = None) -> Placement:
    """`n` devices on `topo`: the whole slice in flat (row-major) order when it has `n`
    chips, else the axis of `n` chips (the given one, or the first that fits)."""
    if axis is None and topo.size == n:
        return Placement(topo, 0, tuple(topo.devices))
    axes = [axis] if axis is not None else [k for k, s in enumerate(topo.shape) if s == n]
    if not axes or not 0 <= axes[0] < topo.ndim or topo.shape[axes[0]] != n:
        raise ValueError(f"{topo.describe()} has no axis of {n} devices (and {topo.size} in all); "
                         f"choose a topology with N={n} on an axis, or --devices to match")
    return place(topo, axes[0])
