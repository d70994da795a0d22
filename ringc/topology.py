"""Device topologies, and the routes sends take over them (a networkx graph on request).

A topology is a grid of chips: `shape[i]` chips along axis i, each axis wrapped (a ring)
or not (a line). Devices are coordinate tuples, one entry per axis; the flat device id is
the row-major index (the order of `jax.sharding.Mesh(devices.reshape(shape), axes)`).

Spellings (`--topology`):
  ring, ring:N          one wrapped axis (`ring` takes N from `--devices`)
  line:N                one axis, no wraparound
  torus:AxB[xC]         every axis wrapped
  mesh:AxB[xC]          no axis wrapped
  v4:AxBxC, v5p:AxBxC   TPU slices, 3-D, wraparound per the generation's rule (below)
  v5e:AxB, v6e:AxB      TPU slices, 2-D, wraparound per the generation's rule (below)
  h100:N                N GPUs of an HGX H100 node, all-to-all through its NVSwitches (one axis)

A switched topology (`h100:N`) has no links between GPUs: every GPU has one port into the
switch fabric (its NVLinks, one way each) and one out of it, and a send from a to b takes
a's port in and b's port out, one hop (`route`: a -> SWITCH -> b; `hops`: 1).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from . import limits

if TYPE_CHECKING:
    import networkx as nx

KINDS = ("ring", "line", "torus", "mesh")
GENERATIONS = {"v4": 3, "v5p": 3, "v5e": 2, "v6e": 2}  # generation -> axes of its slices
# Switched GPU nodes: generation -> the most GPUs on one NVSwitch fabric. An HGX H100 8-GPU
# board joins its 8 GPUs through 4 third-generation NVSwitch chips (NVIDIA DGX H100 user
# guide, "Hardware overview"; the NVSwitch blog cited in docs/cost-model.md); several nodes
# (the NVLink Switch System) are not modelled.
SWITCHES = {"h100": 8}
SWITCH = (-1,)  # the fabric's node on a switched topology's routes (not a device; ints, so resources sort)
SPELLINGS = ("ring, ring:N, line:N, torus:AxB[xC], mesh:AxB[xC], v4:AxBxC, v5p:AxBxC, v5e:AxB, v6e:AxB, "
             "h100:N (N <= 8)")


def _slice_wrap(generation: str, shape: tuple[int, ...]) -> tuple[bool, ...]:
    """Which axes of a TPU slice have wraparound links."""
    if generation in ("v4", "v5p"):
        # 3-D tori built from 4x4x4 cubes joined by optical switches; the switches provide
        # the wraparound, so only slices of whole cubes wrap, and then on every axis:
        # - Cloud TPU v4 docs, "3D mesh and 3D torus" (https://cloud.google.com/tpu/docs/v4):
        #   slices of one or more full 4x4x4 cubes (every dimension a multiple of 4) have
        #   wraparound links making a 3D torus; smaller slices are a 3D mesh without them.
        # - Cloud TPU v5p docs (https://cloud.google.com/tpu/docs/v5p): "All 4x4x4 and larger
        #   slices (one cube) have full 3D torus connectivity. Slices smaller than a full cube
        #   [...] don't have wrap-around links".
        # - "How to Scale Your Model", part 2 "All About TPUs", section "TPU Networking"
        #   (https://jax-ml.github.io/scaling-book/tpus/): "a 2x2x4 won't have any wraparounds
        #   since they are provided by the optical switches which are only available on a full cube".
        full_cubes = all(s % 4 == 0 for s in shape)
        return tuple(full_cubes for _ in shape)
    # v5e and v6e (Trillium): a pod is a fixed 16x16 2-D torus without optical switches, so
    # an axis wraps exactly when it spans the whole pod (16 chips):
    # - "How to Scale Your Model", part 2, "TPU Networking": "For TPU v5e and Trillium we have
    #   pods which consist of a 16x16 2D torus [...] smaller topologies can be requested without
    #   wraps on dims < 16", and "A TPU v5e 8x16 _will_ have a wraparound on the longer axis";
    #   its worked problem 5: a v5e 4x4 has "no wraparound links for axes with fewer than 16 chips".
    return tuple(s == 16 for s in shape)


# Largest slice per generation: v5e/v6e pods are 16x16 (Cloud TPU v5e/v6e docs, scaling book
# table "Pod size"); v4 superpods are 16x16x16, v5p slices at most 16x16x24 (Cloud TPU v5p docs),
# though a v5p pod spans 16x20x28, so axes up to 28 are accepted there.
_MAX_AXIS = {"v4": 16, "v5p": 28, "v5e": 16, "v6e": 16}


@dataclass(frozen=True)
class Topology:
    spec: str                      # as the user wrote it, e.g. "v5e:4x4"
    kind: str                      # "ring" | "line" | "torus" | "mesh" | "slice" | "switch"
    shape: tuple[int, ...]         # chips per axis
    wrap: tuple[bool, ...]         # wraparound per axis
    generation: str | None         # "v4" | "v5p" | "v5e" | "v6e" for slice names, "h100" for a switch, else None

    @property
    def switched(self) -> bool:
        """All-to-all through a switch fabric (`h100:N`), not a grid of links."""
        return self.kind == "switch"

    @cached_property
    def graph(self) -> "nx.Graph":
        """The chips and links as a networkx graph, nodes coordinate tuples: for analysis
        and the tests' oracle (routes and checks need only the shape and wraparound, and use
        no graph). networkx is not a dependency of ringc: `pip install networkx` (the test
        extra has it). A switched node's graph is complete: every GPU one hop from every other."""
        if self.switched:
            return _grid(self.shape, self.wrap, complete=True)
        return _grid(self.shape, self.wrap)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def wide_axes(self) -> tuple[int, ...]:
        """The axes with more than one chip (v5p:2x1x2: 0 and 2): what a schedule can run along."""
        return tuple(i for i, n in enumerate(self.shape) if n > 1)

    @property
    def devices(self) -> list[tuple[int, ...]]:
        """All device coordinates, in flat-id (row-major) order."""
        return list(itertools.product(*(range(s) for s in self.shape)))

    def flat(self, coord: tuple[int, ...]) -> int:
        """The flat device id of a coordinate (row-major, like a jax Mesh)."""
        i = 0
        for c, s in zip(coord, self.shape):
            i = i * s + c
        return i

    def coord(self, flat: int) -> tuple[int, ...]:
        out = []
        for s in reversed(self.shape):
            flat, c = divmod(flat, s)
            out.append(c)
        return tuple(reversed(out))

    def describe(self) -> str:
        """E.g. `v5e:4x4 (4x4, no wraparound)`."""
        if self.switched:
            return f"{self.spec} ({self.size} GPUs, all-to-all through NVSwitch)"
        dims = "x".join(map(str, self.shape))
        if all(self.wrap):
            w = "wraparound on every axis" if self.ndim > 1 else "wrapped"
        elif not any(self.wrap):
            w = "no wraparound"
        else:
            w = "wraparound on axis " + ", ".join(str(i) for i, x in enumerate(self.wrap) if x) + " only"
        name = self.spec if ":" in self.spec else f"{self.spec}:{dims}"  # `ring` -> `ring:8`
        return f"{name} ({dims}, {w})"

    def __str__(self) -> str:
        return self.spec


def _grid(shape: tuple[int, ...], wrap: tuple[bool, ...], complete: bool = False) -> "nx.Graph":
    try:
        import networkx as nx
    except ImportError:
        raise ImportError("Topology.graph needs networkx, which ringc does not install: pip install networkx "
                          '(or "ringc[test]")') from None
    if complete:  # a switch: every device joined to every other
        return nx.complete_graph(list(itertools.product(*(range(s) for s in shape))))
    # grid_graph takes its dimensions last-axis first; an axis of 1 or 2 chips has no distinct
    # wraparound link (periodic would add a self-loop or a duplicate edge).
    periodic = [w and s > 2 for s, w in zip(shape, wrap)]
    g = nx.grid_graph(dim=list(reversed(shape)), periodic=list(reversed(periodic)))
    if len(shape) == 1:  # 1-D grids label nodes by int; keep coordinates uniform
        g = nx.relabel_nodes(g, lambda i: (i,))
    return g


def _dims(text: str, spec: str, head: str = "") -> tuple[int, ...]:
    parts = text.split("x")
    if not text or not all(p.isascii() and p.isdigit() and len(p) < 19 and int(p) > 0 for p in parts):
        if head in SWITCHES:
            raise ValueError(f"bad topology {spec!r}: expected a GPU count from 1 to {SWITCHES[head]} after the "
                             f"colon, e.g. {head}:{SWITCHES[head]}")
        raise ValueError(f"bad topology {spec!r}: expected sizes like 4 or 4x4 or 4x4x4 after the colon; "
                         f"supported spellings: {SPELLINGS}")
    return tuple(int(p) for p in parts)


DEFAULT = "ring"  # `--topology`'s default: a ring of N, N given by --devices


def sized_by_devices(spec: str) -> bool:
    """Whether a `--topology` spelling takes its size from the device count (`ring` alone),
    rather than naming its own (`ring:8`, `torus:4x4`, `v5e:2x2`)."""
    head, sep, _ = spec.strip().partition(":")
    return head.lower() == DEFAULT and not sep


def parse(spec: str, n: int | None = None) -> Topology:
    """The topology for a `--topology` spelling. `ring` without a size takes `n` devices.

    Raises ValueError, with the fix in the message, for a bad spelling or a size that
    contradicts `n`.
    """
    head, sep, rest = spec.strip().partition(":")
    head = head.lower()
    if sized_by_devices(spec):
        if n is None:
            raise ValueError("topology 'ring' needs a device count: write ring:N or pass --devices N")
        shape = (n,)
    elif head in KINDS or head in GENERATIONS or head in SWITCHES:
        if not sep:
            example = {"line": "line:8", "torus": "torus:4x4", "mesh": "mesh:4x4"}.get(
                head, f"{head}:" + ("8" if head in SWITCHES else "x".join(["4"] * GENERATIONS.get(head, 1))))
            raise ValueError(f"topology {spec!r} needs its size, e.g. {example}")
        shape = _dims(rest, spec, head)
    else:
        raise ValueError(f"unknown topology {spec!r}; supported spellings: {SPELLINGS}")
    if head in ("ring", "line") and len(shape) != 1:
        raise ValueError(f"topology {spec!r}: a {head} has one axis; for several write "
                         f"{'torus' if head == 'ring' else 'mesh'}:{rest}")
    if head in SWITCHES:
        most = SWITCHES[head]
        if len(shape) != 1 or shape[0] > most:
            raise ValueError(f"topology {spec!r}: an {head} node has one axis of at most {most} GPUs on its "
                             f"NVSwitches, e.g. {head}:{most}; for a grid of links write torus:{rest}")
        kind, generation, wrap = "switch", head, (True,)
    elif head in GENERATIONS:
        want = GENERATIONS[head]
        if len(shape) != want:
            example = "x".join(["4"] * want)
            raise ValueError(f"topology {spec!r}: {head} slices have {want} axes, e.g. {head}:{example}")
        too_big = [s for s in shape if s > _MAX_AXIS[head]]
        if too_big:
            raise ValueError(f"topology {spec!r}: a {head} slice has at most {_MAX_AXIS[head]} chips "
                             f"along an axis; use torus:{rest} for a hypothetical larger torus")
        kind, generation, wrap = "slice", head, _slice_wrap(head, shape)
    else:
        kind, generation = head, None
        wrap = tuple(head in ("ring", "torus") for _ in shape)
    if n is not None and math.prod(shape) != n:
        raise ValueError(f"topology {spec!r} has {math.prod(shape)} devices, but N={n}; "
                         f"pass --devices {math.prod(shape)} or a topology of {n} devices")
    if math.prod(shape) > limits.value("devices"):  # refused before the graph is built
        raise ValueError(f"topology {spec.strip()!r} has {math.prod(shape):,} devices, over the limit `devices` of "
                         f"{limits.value('devices'):,}; raise the limit with {limits.LIMITS['devices'].how_to_raise}")
    return Topology(spec=spec.strip(), kind=kind, shape=shape, wrap=wrap, generation=generation)


def _axis_steps(size: int, wrapped: bool, a: int, b: int) -> list[int]:
    """The coordinates visited going from a to b along one axis (a excluded, b included)."""
    if a == b:
        return []
    forward = (b - a) % size
    if not wrapped or size <= 2:
        step = 1 if b > a else -1
        return list(range(a + step, b + step, step))
    # Shortest way round; a tie (exactly half way) goes the positive way.
    step = 1 if forward <= size - forward else -1
    count = forward if step == 1 else size - forward
    return [(a + step * k) % size for k in range(1, count + 1)]


def _check_devices(topo: Topology, *coords: tuple) -> None:
    for c in coords:
        if len(c) != topo.ndim or not all(0 <= x < s for x, s in zip(c, topo.shape)):
            raise ValueError(f"device {c} is not in {topo.describe()}")


def route(topo: Topology, src: tuple, dst: tuple) -> list[tuple]:
    """The physical path of a send, src..dst inclusive: dimension-order routing (axis 0
    first), the shortest way round on wrapped axes; through the fabric (`SWITCH`) on a
    switched topology."""
    _check_devices(topo, src, dst)
    if topo.switched:
        return [tuple(src)] if tuple(src) == tuple(dst) else [tuple(src), SWITCH, tuple(dst)]
    path = [tuple(src)]
    cur = list(src)
    for axis, (size, wrapped) in enumerate(zip(topo.shape, topo.wrap)):
        for x in _axis_steps(size, wrapped, cur[axis], dst[axis]):
            cur[axis] = x
            path.append(tuple(cur))
    return path


def _axis_hops(size: int, wrapped: bool, a: int, b: int) -> int:
    """`len(_axis_steps(size, wrapped, a, b))`, by arithmetic: the short way round a wrapped
    axis of more than 2 chips, straight along any other."""
    if wrapped and size > 2:
        forward = (b - a) % size
        return min(forward, size - forward)
    return abs(b - a)


def hops(topo: Topology, src: tuple, dst: tuple) -> int:
    """Hops a send from src to dst takes on its route (`route`, counted without building it):
    the links it crosses, or one through a switch fabric."""
    _check_devices(topo, src, dst)
    if topo.switched:
        return int(tuple(src) != tuple(dst))
    return sum(_axis_hops(size, wrapped, a, b) for size, wrapped, a, b in zip(topo.shape, topo.wrap, src, dst))


def axis_ring(topo: Topology, axis: int, fixed: tuple) -> list[tuple]:
    """The devices along `axis` in order, the other coordinates taken from `fixed` (its
    entry at `axis` is ignored)."""
    if not 0 <= axis < topo.ndim:
        raise ValueError(f"axis {axis} does not exist in {topo.describe()}")
    return [tuple(i if k == axis else c for k, c in enumerate(fixed)) for i in range(topo.shape[axis])]
