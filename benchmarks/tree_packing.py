"""The tree-packing (ForestColl-style) baseline of benchmarks/synth_vs_anchors.py: every
chip broadcasts its shard down spanning out-trees of the slice's directed links (both ways
of every link of `Topology.graph`: 2k per chip on a k-D torus with wraparound, one each way
on an axis of 2), the shard split among its trees; the reduce-scatter is the time reversal
(in-trees, reducing on the way: the same links in the other direction, the same time); the
all-reduce is both; the all-to-all has no tree packing (`-`).

The trees are shortest-path (BFS) trees built dimension by dimension: from the root along
the first axis of an axis order, then from every chip reached along the second, and so on,
each axis both ways round to the nearest chips (on an even wrapped axis the chip half way
round is reached the positive way in one tie-break and the negative way in the other; the
two are weighted equally). One tree per axis order and tie-break per root, so k! 2^e trees
(e the even wrapped axes of more than 2 chips), each of depth the diameter. The axis orders
load the axes differently on an unequal slice (x first on 4x4x8: 3 links along x, 3 x 4
along y, 7 x 16 along z), so the orders' shares are chosen by a small LP (scipy's HiGHS:
the least busiest-link load over the mixtures); on an equal torus the LP spreads them evenly.

The load per directed link is counted exactly, in shards: summed over every root's trees
(`loads(..., explicit=True)`), or, where the slice is a translation group (every axis
wrapped, or of at most 2 chips), from the root-0 trees' edges per link class (axis, step),
since every link of a class then carries its class' count (the tests check that the two
agree). Priced in the idealised alpha-beta terms of the Hamiltonian and MILP columns
(`hamiltonian_rings.py`, `milp_baseline.py`), with the same chip's hop latency, DMA issue and
link bandwidth (`ringc/cost/chips.py`): the trees are pipelined, so

    time = depth x (hop latency + DMA issue) + (bytes over the busiest directed link) / B

(one DMA issue per level of the trees, not one per tree and child: optimistic, as are the
free adds, HBM and the absence of contention). Not a schedule `ringc check` could prove: a
reference point."""

from __future__ import annotations

import functools
import itertools
from collections import defaultdict

import numpy as np
from scipy.optimize import linprog

Coord = tuple[int, ...]
Link = tuple[Coord, Coord]


def _steps(size: int, wrap: bool, c: int, tie: int) -> list[list[int]]:
    """The chains of coordinates along one axis from coordinate `c` to the other chips of
    the axis by shortest routes: each chain a walk of unit steps, the positive way first."""
    if size == 1:
        return []
    if size == 2:
        return [[1 - c]]
    if not wrap:
        return [list(range(c + 1, size)), list(range(c - 1, -1, -1))]
    half = (size - 1) // 2
    plus = half + (1 if size % 2 == 0 and tie > 0 else 0)
    minus = half + (1 if size % 2 == 0 and tie < 0 else 0)
    return [[(c + d) % size for d in range(1, plus + 1)], [(c - d) % size for d in range(1, minus + 1)]]


def tree(topo, root: Coord, order: tuple[int, ...], ties: tuple[int, ...]) -> tuple[list[Link], int]:
    """The dimension-ordered shortest-path out-tree from `root`: its edges (parent, child),
    each a directed link of the slice, and its depth. `ties[a]` (+1 or -1) says which way an
    even wrapped axis reaches the chip half way round."""
    edges: list[Link] = []
    depth = {root: 0}
    reached = [root]
    for a in order:
        grown = []
        for u in reached:
            for chain in _steps(topo.shape[a], topo.wrap[a], u[a], ties[a]):
                prev = u
                for x in chain:
                    v = prev[:a] + (x,) + prev[a + 1:]
                    edges.append((prev, v))
                    depth[v] = depth[prev] + 1
                    grown.append(v)
                    prev = v
        reached += grown
    if len(depth) != topo.size or len(edges) != topo.size - 1:
        raise AssertionError(f"the tree of {topo.spec} from {root} spans {len(depth)} of {topo.size} chips")
    return edges, max(depth.values())


def _tie_choices(topo) -> list[tuple[int, ...]]:
    even = [a for a in range(topo.ndim) if topo.wrap[a] and topo.shape[a] > 2 and topo.shape[a] % 2 == 0]
    out = []
    for signs in itertools.product((1, -1), repeat=len(even)):
        t = [1] * topo.ndim
        for a, s in zip(even, signs):
            t[a] = s
        out.append(tuple(t))
    return out


def symmetric(topo) -> bool:
    """Whether every chip is a translation of every other (each axis wrapped or of <= 2 chips)."""
    return all(w or s <= 2 for s, w in zip(topo.shape, topo.wrap))


def link_class(topo, link: Link) -> tuple[int, int]:
    """(axis, step mod its size) of a directed link: on a translation group every link of a
    class carries the same load."""
    u, v = link
    a = next(i for i in range(topo.ndim) if u[i] != v[i])
    return a, (v[a] - u[a]) % topo.shape[a]


def loads(topo, order: tuple[int, ...], explicit: bool = False) -> dict:
    """Shards over each directed link when every chip sends its shard down its trees of axis
    order `order`, the tie-breaks sharing it equally. Explicit: summed over every root, keyed
    by link (u, v). Otherwise (only on a translation group): root 0's trees counted per link
    class (axis, step), each class' count being what every link of the class carries."""
    ties = _tie_choices(topo)
    out: dict = defaultdict(float)
    if explicit:
        roots = topo.devices
    elif symmetric(topo):
        roots = [tuple(0 for _ in topo.shape)]
    else:
        raise ValueError(f"{topo.spec} is not a translation group: count the loads explicitly")
    for root in roots:
        for t in ties:
            edges, _ = tree(topo, root, order, t)
            for e in edges:
                out[e if explicit else link_class(topo, e)] += 1.0 / len(ties)
    return dict(out)


@functools.lru_cache(maxsize=None)
def _packing(spec: str) -> tuple[dict, float, int]:
    from ringc import topology as T
    topo = T.parse(spec)
    orders = list(itertools.permutations(range(topo.ndim)))
    explicit = not symmetric(topo)
    per = [loads(topo, o, explicit) for o in orders]
    keys = sorted({k for L in per for k in L})
    zero = tuple(0 for _ in topo.shape)
    depth = tree(topo, zero, orders[0], _tie_choices(topo)[0])[1]
    if explicit:
        depth = max(tree(topo, r, orders[0], _tie_choices(topo)[0])[1] for r in topo.devices)
    if len(orders) == 1:
        return {orders[0]: 1.0}, max(per[0].values()), depth
    n = len(orders)                          # variables: w_order..., t; minimise t
    A_ub = np.array([[L.get(k, 0.0) for L in per] + [-1.0] for k in keys])
    res = linprog(np.r_[np.zeros(n), 1.0], A_ub=A_ub, b_ub=np.zeros(len(keys)),
                  A_eq=np.array([[1.0] * n + [0.0]]), b_eq=[1.0], bounds=(0, None), method="highs")
    if res.status != 0:
        raise AssertionError(f"the tree-packing LP on {spec} did not solve: {res.message}")
    w = {o: float(x) for o, x in zip(orders, res.x[:n]) if x > 1e-9}
    busiest = max(sum(w[o] * L.get(k, 0.0) for o, L in zip(orders, per) if o in w) for k in keys)
    return w, busiest, depth


def packing(topo) -> tuple[dict, float, int]:
    """The share of each root's shard per axis order (the tie-breaks of an order share it
    equally), the busiest directed link's load in shards, and the trees' depth."""
    return _packing(topo.spec)


def trees_per_root(topo) -> int:
    return len(packing(topo)[0]) * len(_tie_choices(topo))


def seconds(kind: str, topo, volume: float, chip, hop_latency: float, dma_overhead: float) -> float | None:
    """The packing's time for `kind` moving `volume` bytes per chip (V as in cost/bounds.py:
    the shard is V / p), or None for all_to_all (trees do not apply) and a switched node."""
    if kind == "all_to_all" or topo.switched or topo.size < 2:
        return None
    _, busiest, depth = packing(topo)
    shard = volume / topo.size
    one = depth * (hop_latency + dma_overhead) + busiest * shard / chip.link_bandwidth
    return (2 if kind == "psum" else 1) * one
