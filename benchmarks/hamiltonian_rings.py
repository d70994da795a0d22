"""The Hamiltonian multi-ring baseline of benchmarks/synth_vs_anchors.py: k edge-disjoint
Hamiltonian rings of the slice (any product of cycles decomposes so, Stong 2006), each run
as a bidirectional ring all-gather or reduce-scatter (an all-reduce: both) on 1 / (2k) of
the data, so every directed link carries one ring.

Constructed here for a ring (one ring) and a square 2-D torus (two): at chip (i, j) ring A
steps +y when (i + j) mod n == 0 and +x otherwise, ring B the other way round. Every chip of
a diagonal makes the same choice, so each is a permutation; they use different directed
edges of each chip, so they are edge-disjoint; and after n steps from a chip of diagonal 0
ring A is at (i - 1, j + 1), so it passes every chip (`rings` checks all three). Other
slices (3-D, or n x m with n != m) have none here: a rule by diagonal alone gives cycles of
n chips there.

Priced in the same idealised alpha-beta terms as the MILP column (`milp_baseline.py`): a
ring step is one hop latency, one DMA issue and the step's chunk at the link bandwidth;
adds and HBM are free. Not a schedule `ringc check` could prove (a Hamiltonian ring is not
a translation of the torus, so it would lose the symmetry quotient): a reference point."""

from __future__ import annotations

Coord = tuple[int, ...]


def rings(topo) -> list[list[Coord]] | None:
    """The rings as lists of coordinates in ring order, or None where none is constructed."""
    if not all(topo.wrap):
        return None
    if topo.ndim == 1:
        return [[(i,) for i in range(topo.shape[0])]]
    if topo.ndim != 2 or topo.shape[0] != topo.shape[1]:
        return None
    n = topo.shape[0]

    def step(v: Coord, ring: str) -> Coord:
        i, j = v
        up = ((i + j) % n == 0) == (ring == "A")
        return (i, (j + 1) % n) if up else ((i + 1) % n, j)
    out, used = [], set()
    for ring in "AB":
        order, v = [], (0, 0)
        for _ in range(n * n):
            order.append(v)
            w = step(v, ring)
            edge = frozenset((v, w))
            if edge in used:
                raise AssertionError(f"rings of {topo.spec} share the link {sorted(edge)}")
            used.add(edge)
            v = w
        if v != (0, 0) or len(set(order)) != n * n:
            raise AssertionError(f"ring {ring} of {topo.spec} is not Hamiltonian")
        out.append(order)
    return out


def seconds(kind: str, topo, volume: float, chip, hop_latency: float, dma_overhead: float) -> float | None:
    """The multi-ring's time for `kind` moving `volume` bytes per chip (V as in cost/bounds.py),
    or None where no rings are constructed (or for all_to_all, which rings do not serve)."""
    rs = rings(topo)
    if rs is None or kind == "all_to_all":
        return None
    p, k = topo.size, len(rs)
    chunk = volume / (2 * k * p)            # a shard's share of one directed ring
    step = hop_latency + dma_overhead + chunk / chip.link_bandwidth
    return (2 if kind == "psum" else 1) * (p - 1) * step
