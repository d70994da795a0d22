"""Lower bounds on a collective's time on a placement, whatever the schedule.

V is the collective's size per device (`volume`); p the devices; B the one-way link
bandwidth; a device's links are those to other devices of its axis (full duplex, so
each counts once in and once out). Every component is a valid lower bound, so the bound
is their maximum:

- ingress: a device must receive `in_bytes` of data it cannot get any other way, over at
  most `links(d)` incoming links: max_d in_bytes / (B * links(d)). Egress likewise.
  (1 - 1/p) V for all-gather (in), reduce-scatter (out; partial sums of different blocks
  cannot be combined), all-to-all (both); 2 (1 - 1/p) V for all-reduce (Patarasuk & Yuan,
  "Bandwidth optimal all-reduce algorithms for clusters of workstations", JPDC 2009);
  V for a permutation.
- aggregate: all the bytes that must cross some link, over all the axis' directed links.
- bisection (all-to-all): the bytes that must cross between two halves of the axis, over
  the links between them, for the tightest contiguous split.
- ring (a permutation on a wrapped ring of p >= 3): a send by s positions goes either s
  links one way or p - s links the other. If a fraction f of the bytes goes the long way,
  the p links of one direction carry (1 - f) p V s bytes and those of the other f p V (p - s),
  so some link carries max((1 - f) s, f (p - s)) V >= s (p - s) / p x V (equal at
  f = s / p): the bound is s (p - s) / p x V / B. (The ingress bound, V / 2B, assumes both
  incoming links could be used fully, which a shift cannot profit from.)
- latency: the farthest pair whose data must meet, hops x hop latency.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

import networkx as nx

from ..ir import schema as S
from ..ir.dtypes import itemsize
from ..verify.events import Program
from .timeline import Hardware

KIND_NAMES = {"ppermute": "permutation", "all_gather": "all-gather", "psum": "all-reduce",
              "psum_scatter": "reduce-scatter", "all_to_all": "all-to-all",
              "all_gather_matmul": "all-gather matmul", "matmul_psum_scatter": "matmul reduce-scatter"}
# A fused collective moves what its plain counterpart moves: the gathered left operand, or
# the partial products that are reduce-scattered.
_MOVES_LIKE = {"all_gather_matmul": "all_gather", "matmul_psum_scatter": "psum_scatter"}


def volume_buffer(sched: S.Schedule) -> str:
    """The buffer whose size is the collective's size V: the output of an all-gather (the
    gathered array), the input otherwise."""
    return sched.io_buffer("output" if sched.collective.kind == "all_gather" else "input")


def volume(sched: S.Schedule, program: Program) -> int:
    kind = sched.collective.kind
    if kind in _MOVES_LIKE:  # the gathered x, or the N partial products of one output shard
        name = sched.io_buffer("input" if kind == "all_gather_matmul" else "output")
        return program.n * prod(program.shapes[name]) * itemsize(sched.dtype_of(name))
    name = volume_buffer(sched)
    return prod(program.shapes[name]) * itemsize(sched.dtype_of(name))


def matmul_flops(sched: S.Schedule, program: Program) -> float:
    """Per device: 2 m n k for each of the N output blocks it computes."""
    out, x = program.shapes[sched.io_buffer("output")], program.shapes[sched.io_buffer("input")]
    blocks = 1 if sched.collective.kind == "all_gather_matmul" else program.n
    return 2.0 * blocks * prod(out) * x[-1]


@dataclass(frozen=True)
class Bound:
    seconds: float
    binding: str                  # the component that gives the bound
    components: dict[str, float]  # component -> seconds
    volume: int                   # V in bytes

    def to_json(self) -> dict:
        return {"bound_s": self.seconds, "binding": self.binding, "volume_bytes": self.volume,
                "components_s": dict(self.components)}


def lower_bound(sched: S.Schedule, program: Program, hw: Hardware) -> Bound:
    fused = sched.collective.kind
    kind = _MOVES_LIKE.get(fused, fused)
    pl = hw.placement
    p, V, B = program.n, volume(sched, program), hw.chip.link_bandwidth
    shift = sched.collective.shift % p if kind == "ppermute" else None
    frac = 1 - 1 / p
    in_bytes, out_bytes = {
        "all_gather": (frac * V, V / p),
        "psum_scatter": (V / p, frac * V),
        "psum": (2 * frac * V, 2 * frac * V),
        "all_to_all": (frac * V, frac * V),
        "ppermute": (float(V if shift else 0), float(V if shift else 0)),
    }[kind]
    if p == 1:
        return Bound(0.0, "none", {}, V)
    comps: dict[str, float] = {}
    degrees = [pl.degree(d) for d in range(p)]
    if min(degrees) == 0:
        raise ValueError(f"a device of {pl.describe()} has no link to the others")
    comps["ingress"] = max(in_bytes / (B * k) for k in degrees)
    comps["egress"] = max(out_bytes / (B * k) for k in degrees)
    # Every device's bytes must cross at least one link; the axis has sum(degrees) directed links.
    comps["aggregate"] = p * max(in_bytes, out_bytes) / (B * sum(degrees))
    if kind == "all_to_all":
        comps["bisection"] = _bisection(pl, V, B)
    if kind == "ppermute" and shift and _is_cycle(pl):
        comps["ring"] = shift * (p - shift) / p * V / B
    if fused in _MOVES_LIKE:
        comps["compute"] = matmul_flops(sched, program) / hw.chip.bf16_flops
    if kind == "ppermute":
        far = max(pl.hops(d, (d + shift) % p) for d in range(p)) if shift else 0
    else:
        far = max(pl.hops(a, b) for a in range(p) for b in range(p))
    comps["latency"] = far * hw.hop_latency
    binding = max(comps, key=lambda k: comps[k])
    return Bound(comps[binding], binding, comps, V)


def _is_cycle(pl) -> bool:
    """The instance's chips and links form one cycle of at least 3 chips (a wrapped ring)."""
    g = pl.subgraph
    return pl.n >= 3 and all(d == 2 for _, d in g.degree) and nx.is_connected(g)


def _bisection(pl, V: float, B: float) -> float:
    """All-to-all: each device sends V/p to every other. For each contiguous half S of the
    axis, |S| |T| V/p bytes must cross from S to T over the links between them."""
    p = pl.n
    g = pl.subgraph
    best = 0.0
    half = p // 2
    for start in range(p):
        side = {pl.coords[(start + i) % p] for i in range(half)}
        cut = sum(1 for a, b in g.edges if (a in side) != (b in side))
        if cut:
            best = max(best, half * (p - half) * V / p / (B * cut))
    return best
