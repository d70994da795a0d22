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
- latency: the farthest pair whose data must meet, hops x hop latency (when every pair
  must meet, the placement's diameter).

Through a switch (`h100:N`) a device's links are its one port into the fabric and one out
of it, each with all its NVLinks' bandwidth P (`Hardware.in_bandwidth`): ingress and egress
are `in_bytes / P` and `out_bytes / P`, the aggregate the same, every pair one hop apart;
there is no cycle and no cut narrower than the ports (so no `ring` or `bisection` term).
A switch that multicasts and reduces in the fabric (NVLink SHARP on third-generation
NVSwitch) lowers what a device must move for some collectives (`Collective.switch_traffic`:
an all-reduce sends its V once and receives the sum once, V each way, against 2 (1 - 1/p) V);
that bound is `Bound.in_switch`, printed beside the one the schedule language can reach
(its schedules move data by unicast copies).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..collectives import Buffers, collective_of
from ..ir import schema as S
from ..verify.events import Program
from .timeline import Hardware

__all__ = ["volume_buffer", "volume", "Bound", "lower_bound", "bisection"]


def volume_buffer(sched: S.Schedule) -> str:
    """The buffer whose size is the collective's size V: the output of an all-gather (the
    gathered array), the input otherwise (`Collective.volume_role`)."""
    return sched.io_buffer(collective_of(sched).volume_role)


def volume(sched: S.Schedule, program: Program) -> int:
    return collective_of(sched).volume(program.device_count, program.shapes, Buffers.of(sched))


@dataclass(frozen=True)
class Bound:
    seconds: float
    binding: str                  # the component that gives the bound
    components: dict[str, float]  # component -> seconds
    volume: int                   # V in bytes
    # Through a switch that multicasts and reduces in the fabric: the bound with that (None
    # on a grid of links).
    in_switch: "Bound | None" = None

    def to_json(self) -> dict:
        out = {"bound_s": self.seconds, "binding": self.binding, "volume_bytes": self.volume,
               "components_s": dict(self.components)}
        if self.in_switch is not None:
            out["in_switch"] = self.in_switch.to_json()
        return out


def lower_bound(sched: S.Schedule, program: Program, hw: Hardware) -> Bound:
    """The bound of `program` (its devices and buffer shapes): `bound_of`."""
    return bound_of(sched, program.device_count, program.shapes, hw)


def bound_of(sched: S.Schedule, p: int, shapes: dict[str, tuple[int, ...]], hw: Hardware) -> Bound:
    """The maximum of the components in the module docstring for `p` devices whose buffers
    have `shapes`; what the collective must move, compute and connect comes from its class
    (`ringc.collectives`)."""
    c, buffers = collective_of(sched), Buffers.of(sched)
    pl = hw.placement
    B = hw.chip.link_bandwidth
    V = c.volume(p, shapes, buffers)
    in_bytes, out_bytes = c.traffic(p, V)
    if p == 1:
        return Bound(0.0, "none", {}, V)
    comps: dict[str, float] = {}
    ports = [hw.in_bandwidth(d) for d in range(p)]  # links are full duplex: as much out as in
    if min(ports) == 0:
        raise ValueError(f"a device of {pl.describe(per_instance=True)} has no link to the others")
    comps["ingress"] = max(in_bytes / k for k in ports)
    comps["egress"] = max(out_bytes / k for k in ports)
    # Every device's bytes must cross at least one link into a device; the axis has sum(ports) of them.
    comps["aggregate"] = p * max(in_bytes, out_bytes) / sum(ports)
    if c.bisection and not pl.topo.switched:
        comps["bisection"] = bisection(pl, V, B)
    ring = c.cycle_bytes(p, V)
    if ring is not None and pl.is_cycle():
        comps["ring"] = ring / B
    if c.takes_rhs:
        comps["compute"] = c.flops(p, shapes, buffers) / hw.chip.bf16_flops
    pairs = c.far_pairs(p)
    farthest = pl.diameter if pairs is None else max((pl.hops(a, b) for a, b in pairs), default=0)
    comps["latency"] = farthest * hw.hop_latency
    binding = max(comps, key=lambda k: comps[k])
    in_switch = None
    if pl.topo.switched:  # multicast and in-fabric reduction (NVLink SHARP)
        in_sw, out_sw = c.switch_traffic(p, V)
        nvls = {**comps, "ingress": max(in_sw / k for k in ports), "egress": max(out_sw / k for k in ports),
                "aggregate": p * max(in_sw, out_sw) / sum(ports)}
        top = max(nvls, key=lambda k: nvls[k])
        in_switch = Bound(nvls[top], top, nvls, V)
    return Bound(comps[binding], binding, comps, V, in_switch)


def bisection(pl, V: float, B: float) -> float:
    """All-to-all: each device sends V/p to every other. For each contiguous half S of the
    devices (the window W_s of p // 2 devices from s, cyclically, in the row-major order of
    each order of the axes: on v5p:4x4x8 the tightest cut halves z, the last axis, which no
    window of the plain row-major order is) and the rest T, |S| |T| V/p bytes must cross
    from S to T over the links between them."""
    axes = range(len(pl.coords[0])) if pl.coords else range(0)
    best = 0.0
    for perm in itertools.permutations(axes):
        order = sorted(range(pl.n), key=lambda d: tuple(pl.coords[d][i] for i in perm))
        best = max(best, _window_cuts(pl, [pl.coords[d] for d in order], V, B))
    return best


def _window_cuts(pl, coords: list, V: float, B: float) -> float:
    """The bound of `bisection` over the windows of `coords` (the devices in one order).

    The cut of every window, in O(p + links) rather than O(p x links): an edge is cut
    when exactly one end is in W_s, so cut(s) = (sum of degrees in W_s) - 2 (edges with
    both ends in W_s). The first term is a difference of prefix sums. For the second,
    write an edge as (x, x + delta mod p): both ends are in W_s when x is at offset
    o = (x - s) mod p < half - delta from the window's start (the arc from x forward to
    x + delta stays inside), i.e. for the half - delta starts s ending at x, or with the
    ends swapped (delta -> p - delta); both cannot hold, since half <= p / 2. Each edge
    adds one or two arcs of starts to a difference array."""
    p, half = pl.n, pl.n // 2
    index = {c: d for d, c in enumerate(coords)}
    edges = {(min(index[a], index[b]), max(index[a], index[b])) for a, b in pl.links}
    degree = [0] * p
    inside = [0] * (p + 1)  # difference array over window starts s

    def starts_ending_at(x: int, length: int) -> None:  # +1 for s in (x - length, x], cyclically
        lo = (x - length + 1) % p
        inside[lo] += 1
        inside[x + 1] -= 1
        if lo > x:  # the arc wraps past p - 1
            inside[0] += 1
            inside[p] -= 1

    for a, b in edges:
        degree[a] += 1
        degree[b] += 1
        for x, y in ((a, b), (b, a)):
            length = half - (y - x) % p
            if length > 0:
                starts_ending_at(x, length)
    prefix = [0]
    for d in degree + degree:
        prefix.append(prefix[-1] + d)
    best, both = 0.0, 0
    for s in range(p):
        both += inside[s]
        cut = prefix[s + half] - prefix[s] - 2 * both
        if cut:
            best = max(best, half * (p - half) * V / p / (B * cut))
    return best
