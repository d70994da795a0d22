"""The links a placed schedule's sends cross: the cost model's view of
`verify.placement.Placement` (which binds the schedule's axes to the topology's).

A schedule over axes A runs as one instance per line (or plane) along A; the instances
use disjoint links, so one of them prices the collective. Its device `i` sits at
`coords[i]`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from math import prod

import networkx as nx

from .. import topology as T
from ..ir import schema as S
from ..verify import placement as VP

Coord = tuple[int, ...]
Link = tuple[Coord, Coord]  # directed: data flows from the first chip to the second


def coord_text(c: Coord) -> str:
    return str(c[0]) if len(c) == 1 else "(" + ",".join(map(str, c)) + ")"


def link_text(link: Link) -> str:
    return f"{coord_text(link[0])}->{coord_text(link[1])}"


@dataclass(frozen=True)
class Placement:
    mapping: VP.Placement       # the schedule's axes on the topology's
    coords: tuple[Coord, ...]   # one instance: schedule device index -> chip coordinate

    @property
    def topo(self) -> T.Topology:
        return self.mapping.topo

    @property
    def sizes(self) -> dict[str, int]:
        return self.mapping.sizes

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
        """The chips of one instance and the links between them."""
        return self.topo.graph.subgraph(self.coords)

    def degree(self, device: int) -> int:
        """Links from this device to other devices of its instance (each full duplex)."""
        return self.subgraph.degree(self.coords[device])

    def describe(self) -> str:
        text = self.mapping.describe()
        if self.mapping.instances > 1:
            text += f" ({self.n} chips per instance, {self.mapping.instances} instances on disjoint links)"
        return text


def place(sched: S.Schedule, topo: T.Topology, along: str | None = None) -> Placement:
    """The schedule on `topo`, its axes along `along` (`x`, `y,z`, ...; default as `check`)."""
    mapping = VP.place(sched, topo, along)
    base = next(mapping.bases())
    n = prod(mapping.sizes.values())
    return Placement(mapping, tuple(mapping.coord(base, d) for d in range(n)))
