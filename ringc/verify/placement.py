"""A schedule placed on a topology: which topology axes it runs along, the physical route
of every send, and the findings about routes (hops, missing wraparound, v5e offsets).

A schedule over axes A sees only its coordinates along A (`me`, `me_a`, `N_a`): on a mesh
with more axes, every line (or plane) along A, the other coordinates fixed, runs the same
program, and the emitted kernel addresses devices with those other coordinates kept
(`pl.DeviceIdType.MESH`). So the verifier unrolls one instance, whose devices are numbered
row-major over A, and this module maps it onto every instance of the mesh for the routes.
On a grid every instance has the same axis sizes and wraparound, so its routes have the
same hop counts; `sends` lists all of them, per instance, for the cost model.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Iterator

from .. import topology as T
from ..errors import ScheduleError
from .events import DmaStart, Event, Program, sem_text
from . import messages as M
from .findings import Finding
from .spec import Spec

__all__ = ["AXIS_NAMES", "Coord", "Link", "coord_text", "link_text", "axis_names", "Placement", "place",
           "Send", "sends", "route_summary", "rotated_route_summary", "xor_routes_symmetric", "xor_route_summary",
           "v5e_offset_ok", "route_findings", "labels", "fits", "chip_of", "place_devices"]

AXIS_NAMES = ("x", "y", "z")
Coord = tuple[int, ...]
Link = tuple[Coord, Coord]  # directed: data flows from the first chip to the second


def coord_text(c: Coord) -> str:
    if c == T.SWITCH:
        return "nvswitch"
    return str(c[0]) if len(c) == 1 else "(" + ",".join(map(str, c)) + ")"


def link_text(link: Link) -> str:
    return f"{coord_text(link[0])}->{coord_text(link[1])}"


def axis_names(topo: T.Topology) -> tuple[str, ...]:
    """How `--along` and findings name the topology's axes: x, y, z by position."""
    return AXIS_NAMES[:topo.ndim] if topo.ndim <= len(AXIS_NAMES) else tuple(map(str, range(topo.ndim)))


@dataclass(frozen=True)
class Placement:
    """The schedule's axes bound to the topology's (`place`), and the instance the cost model
    prices: one instance per line (or plane) along the schedule's axes; instances use
    disjoint links, so the first one (`coords`: schedule device index -> chip) prices the
    collective."""
    topo: T.Topology
    axes: tuple[str, ...]       # the schedule's axes
    along: tuple[int, ...]      # the topology axis each schedule axis runs along
    # A kernel whose mesh is its own (a script's: `place_devices`): the chip of each device
    # (row-major over `axes`, sized `shape`), in the order the mesh lists them; one instance,
    # `along` the topology axes its chips span. None: the schedule's axes bind to `along`.
    chips: tuple[Coord, ...] | None = None
    shape: tuple[int, ...] | None = None

    @property
    def sizes(self) -> dict[str, int]:
        """Devices along each schedule axis (N_a)."""
        if self.chips is not None:
            return dict(zip(self.axes, self.shape or (len(self.chips),)))
        return {a: self.topo.shape[k] for a, k in zip(self.axes, self.along)}

    @property
    def others(self) -> tuple[int, ...]:
        """Topology axes the schedule does not run along."""
        return tuple(k for k in range(self.topo.ndim) if k not in self.along)

    def local_coords(self, device: int) -> tuple[int, ...]:
        """The schedule coordinates (me_a, row-major) of instance-local device `device`."""
        out = []
        for a in reversed(self.axes):
            device, c = divmod(device, self.sizes[a])
            out.append(c)
        return tuple(reversed(out))

    def coord(self, base: tuple[int, ...], device: int) -> tuple[int, ...]:
        """The topology coordinate of local device `device` in the instance whose other
        coordinates are `base` (one entry per topology axis; entries on `along` ignored)."""
        if self.chips is not None:
            return self.chips[device]
        c = list(base)
        for k, x in zip(self.along, self.local_coords(device)):
            c[k] = x
        return tuple(c)

    def bases(self) -> Iterator[tuple[int, ...]]:
        """One coordinate per instance: every combination of the other axes, zeros on `along`."""
        ranges = [range(self.topo.shape[k]) if k in self.others else range(1) for k in range(self.topo.ndim)]
        return itertools.product(*ranges)

    @property
    def instances(self) -> int:
        if self.chips is not None:
            return 1
        return self.topo.size // max(1, _prod(self.sizes.values()))

    def label(self, device: int) -> str:
        """`3` on a 1-axis topology; `(1, 2)` on more axes, `*` on axes the schedule does not
        run along (the finding holds in every instance)."""
        if self.topo.ndim == 1:
            return str(device)
        if self.chips is not None:
            return "(" + ", ".join(map(str, self.chips[device])) + ")"
        c = self.coord(tuple(0 for _ in self.topo.shape), device)
        return "(" + ", ".join(str(x) if k in self.along else "*" for k, x in enumerate(c)) + ")"

    def describe(self, per_instance: bool = False) -> str:
        """E.g. `torus:4x4 (4x4, wraparound on every axis) along y (the schedule's x), 4 instances`;
        `per_instance` adds the chips of one instance, as the cost model prices one."""
        names = axis_names(self.topo)
        along = ", ".join(names[k] for k in self.along)
        if self.chips is not None:
            mesh = ", ".join(f"{a}={s}" for a, s in self.sizes.items())
            whole = "the whole slice" if len(set(self.chips)) == self.topo.size else f"{len(self.chips)} of its chips"
            return (f"{self.topo.describe()}, the mesh's {mesh} over {whole} in its devices' order: "
                    + " ".join(coord_text(c) for c in self.chips[:16]) + (" ..." if len(self.chips) > 16 else ""))
        if tuple(names[k] for k in self.along) != self.axes:
            along += f" (the schedule's {', '.join(self.axes)})"
        count = f", {self.instances} instances" if self.instances > 1 else ""
        text = f"{self.topo.describe()}" + (f" along {along}" if along.strip() else "") + count  # (one chip: none)
        if per_instance and self.instances > 1:
            text += f" ({self.n} chips per instance, {self.instances} instances on disjoint links)"
        return text

    # -- one instance (the cost model's view) -------------------------------------------
    @property
    def n(self) -> int:
        """Devices in one instance."""
        if self.chips is not None:
            return len(self.chips)
        return _prod(self.sizes.values())

    @cached_property
    def coords(self) -> tuple[Coord, ...]:
        """The first instance: schedule device index -> chip coordinate."""
        base = next(self.bases())
        return tuple(self.coord(base, d) for d in range(self.n))

    def route(self, src: int, dst: int) -> list[Link]:
        """The directed links a send from device src to device dst crosses, in order."""
        path = T.route(self.topo, self.coords[src], self.coords[dst])
        return list(zip(path, path[1:]))

    def hops(self, src: int, dst: int) -> int:
        """Hops on the route from src to dst, by arithmetic (`topology.hops`), no route list."""
        return T.hops(self.topo, self.coords[src], self.coords[dst])

    @staticmethod
    def hops_of(links: list[Link]) -> int:
        """Hops a route of these links takes: the links that arrive at a chip (every link of
        a grid; through a switch, a -> SWITCH -> b is one hop)."""
        return sum(1 for _, b in links if b != T.SWITCH)

    def _wraps(self, k: int) -> bool:
        """Routes along topology axis k go round the end (a wrapped axis of more than 2 chips)."""
        return self.topo.wrap[k] and self.topo.shape[k] > 2

    @property
    def diameter(self) -> int:
        """The most hops between two devices of the instance: per axis, half way round a
        wrapped axis (`size // 2`, the short way round), end to end of a line (`size - 1`);
        dimension-order routes add the axes' hops, and the farthest pair is far on each.
        Through a switch every pair is one hop apart."""
        if self.topo.switched:
            return int(self.n > 1)
        if self.chips is not None:
            return max((T.hops(self.topo, a, b) for a in self.chips for b in self.chips), default=0)
        return sum(self.topo.shape[k] // 2 if self._wraps(k) else self.topo.shape[k] - 1 for k in self.along)

    @property
    def symmetric(self) -> bool:
        """Routes between devices of the instance are translation invariant: every axis of the
        instance wraps (or has at most 2 chips, where a line and a ring route alike), so the
        route from a + t to b + t is the route from a to b moved by t (dimension-order
        routing depends only on the offset b - a per axis: `topology._axis_steps`)."""
        return all(self.topo.wrap[k] or self.topo.shape[k] <= 2 for k in self.along)

    @cached_property
    def links(self) -> list[Link]:
        """Every directed link some route between two of our devices crosses: the unit steps
        along the instance's axes, from every device of the instance to its neighbour one
        chip up and one chip down each schedule axis (round the end where the axis wraps).

        Proof that these are exactly the links dimension-order routes use. (Routes use
        only unit steps.) A route changes only coordinates where source and destination
        differ, all on `along`, one axis at a time, one chip per link, never round the end
        of an axis that does not wrap (`topology._axis_steps`); so every link it crosses
        joins two devices of the instance one chip apart on one axis. (Every unit step is
        used.) The step from u to its neighbour v along axis k is itself the route from u
        to v: on a line, or an axis of 2 chips, the route walks straight to v; on a wrapped
        axis of s > 2 chips the offset is 1 one way and s - 1 > 1 the other, so the short
        way is the one link. O(devices x axes), where following every route was O(n^2 x hops).
        On a switched topology: each device's port into the fabric and out of it."""
        if self.topo.switched:
            return [link for c in self.coords for link in ((c, T.SWITCH), (T.SWITCH, c))]
        shape = self.topo.shape
        seen: dict[Link, None] = {}
        for c in self.coords:
            for k in self.along:
                for step in (1, -1):
                    x = c[k] + step
                    if not 0 <= x < shape[k]:
                        if not self._wraps(k):
                            continue
                        x %= shape[k]
                    seen[(c, c[:k] + (x,) + c[k + 1:])] = None
        return list(seen)

    def direction(self, link: Link) -> Coord:
        """A link's class under translation: its step per topology axis, modulo the axis
        size. On a symmetric instance a translation maps a link to one of the same class,
        and every class holds exactly one link leaving each device (translations act
        freely), so a class is n links carrying the same load. On a switched topology the
        classes are the ports into the fabric and out of it (a translation moves a's port to
        a + t's): `(1,)` and `(-1,)`."""
        if self.topo.switched:
            return (1,) if link[1] == T.SWITCH else (-1,)
        (a, b), shape = link, self.topo.shape
        return tuple((y - x) % s for x, y, s in zip(a, b, shape))

    def representative(self, link: Link) -> Link:
        """The link of `link`'s class that leaves device 0's chip (on a switched topology,
        device 0's port of that direction)."""
        origin, shape = self.coords[0], self.topo.shape
        if self.topo.switched:
            return (origin, T.SWITCH) if link[1] == T.SWITCH else (T.SWITCH, origin)
        return origin, tuple((o + e) % s for o, e, s in zip(origin, self.direction(link), shape))

    def degree(self, device: int) -> int:
        """Links from this device to other devices of its instance (each full duplex): per
        axis two on a wrapped axis of more than 2 chips, one on an axis of 2, and on a line
        one at either end, two between. On a switched topology: one, its port to the fabric
        (whose bandwidth is all of the GPU's NVLinks: `cost.timeline.Hardware.link_capacity`)."""
        if self.topo.switched:
            return int(self.n > 1)
        c, shape = self.coords[device], self.topo.shape
        return sum(2 if self._wraps(k) else (c[k] > 0) + (c[k] < shape[k] - 1) for k in self.along)

    def is_cycle(self) -> bool:
        """The instance's chips and links form one cycle of at least 3 chips (a wrapped ring):
        one axis of 3 or more chips that wraps, or two axes of 2 (a square); any other
        instance has an end (degree 1) or a chip of degree 3 or more. A switch is no cycle."""
        if self.topo.switched:
            return False
        axes = [self.topo.shape[k] for k in self.along if self.topo.shape[k] > 1]
        wraps = [self._wraps(k) for k in self.along if self.topo.shape[k] > 1]
        return (len(axes) == 1 and axes[0] >= 3 and wraps[0]) or axes == [2, 2]


def _prod(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def _axis_index(text: str, topo: T.Topology) -> int | None:
    names = axis_names(topo)
    if text in names:
        return names.index(text)
    if text.isdigit() and int(text) < topo.ndim:
        return int(text)
    return None


def place(sched: Spec, topo: T.Topology, along: str | None = None) -> Placement:
    """Bind the schedule's axes to the topology's. `along` is `y` or `x,y` (axis names x, y, z
    or indices); by default axes named like topology axes bind to them, else the first ones,
    unless one of those has a single chip and exactly k axes have more (then those: a
    2-axis schedule on v5p:2x1x2 runs along x and z)."""
    names = axis_names(topo)
    k = len(sched.axes)
    if k > topo.ndim and topo.switched:
        raise ScheduleError(
            f"`{sched.name}` runs over {k} axes ({', '.join(sched.axes)}), but {topo.describe()} is one axis: "
            f"every GPU reaches every other through the switch, so it has no second axis to place `{sched.axes[1]}` on",
            file=sched.file, line=sched.line_of("axes"),
            fix=f"price a 1-axis schedule of the same collective on {topo.spec}, or this one on a grid "
                f"(`--topology torus:{'x'.join(['4'] * k)}`)")
    if k > topo.ndim:
        raise ScheduleError(
            f"`{sched.name}` runs over {k} axes ({', '.join(sched.axes)}), but {topo.describe()} has "
            f"{topo.ndim} {'axes' if topo.ndim > 1 else 'axis'}",
            file=sched.file, line=sched.line_of("axes"),
            fix=f"use {k} axes or more: `check --topology torus:{'x'.join(['4'] * k)}`, "
                f"`run --mesh {'x'.join(['2'] * k)}`")
    if along is not None:
        parts = [p.strip() for p in along.split(",") if p.strip()]
        idx = [_axis_index(p, topo) for p in parts]
        if len(parts) != k or None in idx or len(set(idx)) != k:
            raise ScheduleError(
                f"--along {along!r} must name {k} distinct axes of {topo.spec} (one per schedule axis: "
                f"{', '.join(sched.axes)})", file=sched.file,
                fix=f"use axis names {', '.join(names)} or indices 0..{topo.ndim - 1}, e.g. --along "
                    f"{','.join(names[:k])}")
        return Placement(topo, tuple(sched.axes), tuple(idx))
    if all(a in names for a in sched.axes):
        idx = tuple(names.index(a) for a in sched.axes)
    else:
        idx = tuple(range(k))
    if len(topo.wide_axes) == k and any(topo.shape[i] == 1 for i in idx):
        # an axis of one chip has nothing to run along: on v5p:2x1x2 a 2-axis schedule runs
        # along x and z, the axes that have chips (as `--along x,z` says)
        idx = topo.wide_axes
    return Placement(topo, tuple(sched.axes), idx)


def fits(placement: Placement, sizes: dict[str, int]) -> bool:
    """Whether a kernel whose mesh has these axis sizes runs as `placement` binds it: each axis
    as long as the topology axis it runs along (a schedule takes its sizes from the placement;
    a script's kernel brings its own)."""
    return list(placement.sizes.items()) == list(sizes.items())


def chip_of(topo: T.Topology, device_id: int) -> Coord:
    """Where JAX device `device_id` sits on `topo`: x fastest, as libtpu numbers a slice's
    chips and as ringc's CPU devices answer `coords` while a script runs (`pallas.tpu`)."""
    out = []
    for s in topo.shape:
        device_id, c = divmod(device_id, s)
        out.append(c)
    return tuple(out)


def place_devices(spec: Spec, topo: T.Topology, sizes: dict[str, int], ids: "list[int] | None") -> Placement:
    """A kernel's own mesh (`sizes`, its devices' JAX ids `ids` in row-major mesh order) on
    `topo`, when its axes do not bind to the topology's (`fits`): a mesh of 4 along one axis
    on v5e:2x2 runs over the whole slice, device i on the chip of the mesh's i-th device, as
    on the hardware. Refused when the ids are unknown (an abstract mesh) or not on `topo`."""
    n = _prod(sizes.values())
    shown = ", ".join(f"{a}={s}" for a, s in sizes.items())
    if topo.switched or ids is None or len(ids) != n or not all(0 <= i < topo.size for i in ids):
        why = ("its devices are not known (an abstract mesh)" if ids is None or len(ids) != n else
               f"it has {n} devices and {topo.spec} {topo.size}")
        raise ScheduleError(
            f"the kernel's mesh ({shown}) does not fit {topo.describe()}: {why}", file=spec.file,
            fix=f"pass a topology of the mesh's shape: --topology {'ring:' + str(n) if len(sizes) == 1 else 'torus:' + 'x'.join(map(str, sizes.values()))}")
    chips = tuple(chip_of(topo, i) for i in ids)
    along = tuple(k for k in range(topo.ndim) if len({c[k] for c in chips}) > 1) or (0,)
    return Placement(topo, tuple(sizes), along, chips=chips, shape=tuple(sizes.values()))


# ------------------------------------------------------------------------- routes


@dataclass(frozen=True)
class Send:
    """One remote action of one instance, with its physical route (src..dst inclusive)."""
    event: Event
    src: tuple[int, ...]
    dst: tuple[int, ...]
    route: list[tuple[int, ...]]

    @property
    def hops(self) -> int:
        return Placement.hops_of(list(zip(self.route, self.route[1:])))


def sends(program: Program, placement: Placement, instance: tuple[int, ...] | None = None) -> list[Send]:
    """Every remote action (copy start, signal, barrier) between distinct, existing devices,
    with its route: in one instance (`instance` = its base coordinate) or in all of them."""
    out = []
    bases = [instance] if instance is not None else list(placement.bases())
    for base in bases:
        for ev, target in program.targets:
            source = program.place(ev.device)  # a second core sends from its chip
            if target == source or not 0 <= target < program.device_count:
                continue
            src, dst = placement.coord(base, source), placement.coord(base, target)
            out.append(Send(ev, src, dst, T.route(placement.topo, src, dst)))
    return out


def route_summary(program: Program, placement: Placement) -> dict:
    """Sends of one instance and how they load the links: the number of sends, the longest
    and mean route, and the busiest directed link (the sends crossing it over the kernel)."""
    routes = sends(program, placement, next(placement.bases()))
    load: dict[tuple, int] = {}
    for r in routes:
        for link in zip(r.route, r.route[1:]):
            load[link] = load.get(link, 0) + 1
    busiest = max(load.items(), key=lambda kv: kv[1], default=(None, 0))
    return {"sends": len(routes), "max_hops": max((r.hops for r in routes), default=0),
            "mean_hops": round(sum(r.hops for r in routes) / len(routes), 3) if routes else 0.0,
            "busiest_link": [list(busiest[0][0]), list(busiest[0][1])] if busiest[0] else None,
            "busiest_link_sends": busiest[1]}


def rotated_route_summary(program: Program, placement: Placement) -> dict:
    """`route_summary` of device 0's program (`SymmetricProgram.representatives`) when every
    device runs its events translated, on wrapped axes: device d's routes are device 0's moved by d
    (dimension-order routing depends only on the offset), so each directed link carries
    its direction's total of device 0's hops. Sends to the same device share one route,
    counted once and weighed by how many there are (an all-to-all sends N - 1 copies to
    each device, over up to N / 2 hops)."""
    base = next(placement.bases())
    count = Counter((ev.device, target) for ev, target in program.targets
                    if target != ev.device and 0 <= target < program.n)
    paths: dict[tuple[int, int], tuple[list, list]] = {}  # (src, dst) -> (links, their directions)
    per_direction: Counter = Counter()
    for (src, dst), c in count.items():
        path = T.route(placement.topo, placement.coord(base, src), placement.coord(base, dst))
        links = list(zip(path, path[1:]))
        directions = [placement.direction(link) for link in links]
        paths[(src, dst)] = (links, directions)
        for d in directions:
            per_direction[d] += c
    top = max(per_direction.values(), default=0)
    busiest = next((link for ev, target in program.targets if (ev.device, target) in paths
                    for link, d in zip(*paths[(ev.device, target)]) if per_direction[d] == top), None)
    sent = sum(count.values())
    total = sum(Placement.hops_of(paths[key][0]) * c for key, c in count.items())
    return {"sends": program.n * sent, "max_hops": max((Placement.hops_of(links) for links, _ in paths.values()),
                                                       default=0),
            "mean_hops": round(total / sent, 3) if sent else 0.0,
            "busiest_link": [list(busiest[0]), list(busiest[1])] if busiest else None,
            "busiest_link_sends": top}


def _xor_offsets(program: Program) -> list[int]:
    """Device 0's send offsets, in order, for a program device d runs with ids XORed by d
    (`SymmetricProgram.group is Group.XOR`; `program` is its representatives): device d's sends go to d ^ t. (`sends` skips a send to the
    sender itself, and device 0's targets are inside the ring by construction.)"""
    return [t for ev, t in program.targets if t != ev.device and 0 <= t < program.n]


def xor_routes_symmetric(program: Program, placement: Placement, budget: int = 1 << 18) -> bool:
    """On a ring, whether every device's send to d ^ t crosses as many links as device 0's
    to t, for each of device 0's offsets t: then `route_findings` on device 0's events are
    every device's (each op line's first finding is device 0's, with the same text), as
    for a translation. False past `budget` checks (the full analysis decides)."""
    topo = placement.topo
    if topo.kind != "ring" or placement.coords != tuple((d,) for d in range(program.n)):
        return False
    offsets = set(_xor_offsets(program))
    if len(offsets) * program.n > budget:
        return False
    return all(len({T.hops(topo, (d,), (d ^ t,)) for d in range(program.n)}) == 1 for t in offsets)


def xor_route_summary(program: Program, placement: Placement, brute: int = 4096) -> dict:
    """`route_summary` of every device of a program that device d runs with ids XORed by d,
    on a ring (`xor_routes_symmetric`), from device 0's offsets: exactly the full
    analysis's figures. Up to `brute` sends it enumerates them as `route_summary` does; past
    that it counts each directed link's load with difference arrays (a send from d goes
    the short way round, a tie the positive way, as `topology.route`), then finds the busiest
    link `route_summary` names, the first of the top load in the order the sends' routes
    visit links."""
    import numpy as np
    n, topo, offsets = program.n, placement.topo, _xor_offsets(program)
    pairs = ((d, d ^ t) for d in range(n) for t in offsets)
    if n * len(offsets) <= brute or n <= 2:
        load: dict[tuple, int] = {}
        hops = []
        for a, b in pairs:
            path = T.route(topo, (a,), (b,))
            hops.append(len(path) - 1)
            for link in zip(path, path[1:]):
                load[link] = load.get(link, 0) + 1
        busiest = max(load.items(), key=lambda kv: kv[1], default=(None, 0))
        link, top = busiest
    else:
        d = np.arange(n)
        right, left = np.zeros(n + 1, dtype=np.int64), np.zeros(n + 1, dtype=np.int64)
        total = longest = 0
        count = Counter(offsets)
        for t, c in count.items():
            forward = ((d ^ t) - d) % n
            positive = forward <= n - forward
            h = np.where(positive, forward, n - forward)
            total += c * int(h.sum())
            longest = max(longest, int(h.max()))
            # right links x -> x + 1 for x in [d, d + h); left links x -> x - 1 for x in (d - h, d]
            for diff, lo in ((right, d[positive]), (left, (d - h + 1)[~positive] % n)):
                hh = h[positive] if diff is right else h[~positive]
                hi = lo + hh
                np.add.at(diff, lo, c)
                np.add.at(diff, np.minimum(hi, n), -c)
                wrap = hi > n
                np.add.at(diff, np.zeros(int(wrap.sum()), dtype=np.int64), c)
                np.add.at(diff, hi[wrap] - n, -c)
        loads = (np.cumsum(right)[:n], np.cumsum(left)[:n])
        top = int(max(loads[0].max(), loads[1].max()))
        link = None
        for a, b in pairs:  # the first link of the top load, in the order the sends visit them
            path = T.route(topo, (a,), (b,))
            for x, y in zip(path, path[1:]):
                if loads[0 if (y[0] - x[0]) % n == 1 else 1][x[0]] == top:
                    link = (x, y)
                    break
            if link is not None:
                break
        hops = None
    sends_count = n * len(offsets)
    if hops is not None:
        total, longest = sum(hops), max(hops, default=0)
    return {"sends": sends_count, "max_hops": longest,
            "mean_hops": round(total / sends_count, 3) if sends_count else 0.0,
            "busiest_link": [list(link[0]), list(link[1])] if link else None,
            "busiest_link_sends": top}


def _is_power_of_2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def v5e_offset_ok(topo: T.Topology, src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    """Seed 000, "Routing": on TPU v5e "devices can only route to a power of 2 offset from
    themselves". Read per axis: on every axis where the coordinates differ, the offset (either
    way round the axis) is a power of 2, so a ring's wrap-around send (offset N - 1 one way, 1
    the other) is routable, while `(me + 3) % 8` is not."""
    for a, b, size in zip(src, dst, topo.shape):
        if a != b and not (_is_power_of_2((b - a) % size) or _is_power_of_2((a - b) % size)):
            return False
    return True


def _wraps_around(topo: T.Topology, src: tuple[int, ...], dst: tuple[int, ...]) -> int | None:
    """The axis a send crosses from one end to the other, where wraparound would make it one hop."""
    diff = [k for k, (a, b) in enumerate(zip(src, dst)) if a != b]
    if len(diff) == 1:
        k = diff[0]
        if not topo.wrap[k] and topo.shape[k] > 2 and {src[k], dst[k]} == {0, topo.shape[k] - 1}:
            return k
    return None


def _what(ev: Event) -> str:
    a = ev.action
    return f"copy `{a.copy}`" if isinstance(a, DmaStart) else f"{a.why} on {sem_text(a.sem)}"


def _path_text(placement: Placement, route: list[tuple[int, ...]]) -> str:
    if placement.topo.ndim == 1:
        return " -> ".join(coord_text(c) for c in route)
    return " -> ".join("(" + ", ".join(map(str, c)) + ")" for c in route)


def _wrap_reason(topo: T.Topology) -> str:
    if topo.generation in ("v4", "v5p"):
        return f"{topo.generation} slices only wrap when they are whole 4x4x4 cubes"
    if topo.generation in ("v5e", "v6e"):
        return f"a {topo.generation} axis only wraps when it spans the 16-chip pod"
    return f"a {topo.kind} has no wraparound links"


def route_findings(program: Program, placement: Placement) -> list[Finding]:
    """Targets that do not exist, sends to oneself, sends v5e cannot route, and sends that
    cross several links (a missing wraparound, or a far target): one finding per op line."""
    topo = placement.topo
    names = axis_names(topo)
    findings, seen = [], set()

    def once(kind: str, ev: Event) -> bool:
        if (kind, ev.line) in seen:
            return False
        seen.add((kind, ev.line))
        return True

    base = next(placement.bases())  # every instance has the same hop counts (module docstring)
    routes: dict[tuple, list] = {}
    for ev, target in program.targets:
        what, at = _what(ev), program.where(ev)
        if not 0 <= target < program.n:
            if once("bad", ev):
                # (a Pallas MESH id out of range carries the coordinates asked: `interpret.BadTarget`)
                findings.append(M.BAD_TARGET.finding(what=what, at=at, target=getattr(target, "shown", target),
                                                     n=program.n, event=ev))
            continue
        source = program.place(ev.device)  # a chip's second core sends from its chip
        if target == source:
            # to another TensorCore of the same chip (its semaphore that core's): not the sender itself
            other_core = program.cores > 1 and (ev.action.recv_sem if isinstance(ev.action, DmaStart)
                                                else getattr(ev.action, "sem", (ev.device,)))[0] != ev.device
            if isinstance(ev.action, DmaStart) and not ev.action.explicit_self and not other_core and once("self", ev):
                findings.append(M.SELF_TARGET.finding(what=what, at=at, event=ev, front=program.front))
            continue
        src, dst = placement.coord(base, source), placement.coord(base, target)
        route = routes.get((src, dst))
        if route is None:  # many sends share a route (an all-to-all's N - 1 copies to each device)
            route = routes[(src, dst)] = T.route(topo, src, dst)
        hops = Placement.hops_of(list(zip(route, route[1:])))
        to = f"device {program.label(target)}"
        if topo.generation == "v5e" and not v5e_offset_ok(topo, src, dst) and once("v5e", ev):
            offsets = ", ".join(f"{names[k]} {b - a:+d}" for k, (a, b) in enumerate(zip(src, dst)) if a != b)
            findings.append(M.UNROUTABLE.finding(what=what, at=at, to=to, offsets=offsets, event=ev))
            continue
        if hops <= 1:
            continue
        axis = _wraps_around(topo, src, dst)
        if axis is not None and once("wrap", ev):
            findings.append(M.NO_WRAPAROUND.finding(
                what=what, at=at, to=to, axis=names[axis], topology=topo.describe(), reason=_wrap_reason(topo),
                hops=hops, path=_path_text(placement, route), event=ev))
        elif axis is None and once("far", ev):
            findings.append(M.NOT_NEIGHBOUR.finding(what=what, at=at, to=to, hops=hops, topology=topo.describe(),
                                                    path=_path_text(placement, route), event=ev))
    return findings


def labels(program: Program, placement: Placement) -> list[str]:
    """How findings name each process: its chip's coordinates, and with `cores: 2` a second
    core's index (process d stands for chip d's core 0 and its HBM: the chip's label)."""
    if program.cores > 1:
        n = program.device_count
        return [placement.label(p) if p < n else f"{placement.label(program.place(p))} core {p // n}"
                for p in range(program.n)]
    return [placement.label(d) for d in range(program.n)]
