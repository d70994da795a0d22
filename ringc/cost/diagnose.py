"""Why an estimate falls short of its bound, read off the simulated run.

Each finding compares what the run did with what the bound assumed: the bytes moved
against the bytes the collective needs, the links into each device used against those it
has, whether those links were busy at the same time, and how much of the critical path
was latency and per-step work rather than transfer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..collectives import TITLES
from ..units import size_text
from .network import Repeated

if TYPE_CHECKING:  # only for the annotation: `model` imports this module
    from .model import Estimate

__all__ = ["diagnose"]


def _overlap(a: list[list[float]], b: list[list[float]]) -> float:
    """Seconds during which both interval lists are active (each sorted, disjoint). Periods
    timed by their period (`network.Repeated`, the same ones in both lists, since a
    resource idle in them has no entry there) overlap as their pieces do, once per period."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        if isinstance(a[i], Repeated) and isinstance(b[j], Repeated) and a[i] == b[j]:
            total += a[i].count * _overlap([list(p) for p in a[i].pieces], [list(p) for p in b[j].pieces])
            i += 1
            j += 1
            continue
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _length(spans: list[list[float]]) -> float:
    return sum(span.busy if isinstance(span, Repeated) else span[1] - span[0] for span in spans)


def diagnose(e: "Estimate", threshold: float = 0.95) -> list[str]:
    """Reasons the estimate is above the bound; empty when efficiency >= threshold."""
    if e.efficiency >= threshold or e.bound.binding == "none":  # one device: no link to price
        return []
    why: list[str] = []
    pl = e.hw.placement
    p = pl.n
    kind = e.schedule.collective.kind
    summary = e.path_summary()
    overhead = summary["hop_latency"] + summary["signal"] + summary["device"]
    if e.bound.binding == "latency" or overhead > 0.25 * e.seconds:
        steps = sum(1 for st in e.critical_path() if st.kind in ("dma", "signal"))
        why.append(f"latency-bound: {overhead / e.seconds:.0%} of the critical path is hop latency, signals, "
                   f"DMA issue and compute ({steps} dependent transfer{'s' if steps != 1 else ''} in a row; the floor is "
                   f"{e.bound.components['latency'] * 1e6:.3g} us of hops)")
        if e.bound.binding == "latency":
            return why
    # Bytes the links carried against the bytes the collective must move.
    moved = e.machine.link_bytes()
    need = e.bound.components["aggregate"] * sum(e.hw.in_bandwidth(d) for d in range(p))
    if need and moved > 1.05 * need:
        name = TITLES[kind]
        far = max((pl.hops_of(d.links) for d in e.machine.dmas.values()), default=0)
        route = f"; sends to non-neighbours cross up to {far} links each" if far > 1 else ""
        why.append(f"moves {moved / need:.1f}x the data {'an' if name[0] in 'aeiou' else 'a'} {name} needs: "
                   f"the links carry {size_text(moved)} in all, the minimum is {size_text(need)}{route}")
    # Links into each device: used at all, and used at the same time. (On the quotient,
    # device 0 stands for all `alike` devices: the counts scale, the ratios do not.)
    into, alike = e.machine.links_into(), e.machine.alike
    devices = range(p) if alike == 1 else sorted(into)
    unused = [d for d in devices if len(into.get(d, ())) < pl.degree(d)]
    if unused and len(unused) * alike == p:
        used = min(len(into.get(d, ())) for d in devices)
        why.append(f"uses {used} of the {pl.degree(0)} links into each device: the data flows one way round "
                   f"the ring, so the bound's other direction sits idle")
    elif unused and e.bound.binding == "ingress":
        why.append(f"devices {', '.join(map(str, unused[:4]))} receive on fewer links than they have")
    pairs = [(d, into[d]) for d in devices if len(into.get(d, ())) >= 2]
    if pairs:
        shared = sum(_overlap(s[0], s[1]) for _, s in pairs)
        either = sum(max(_length(s[0]), _length(s[1])) for _, s in pairs)
        if either and shared < 0.8 * either:
            why.append(f"the links into a device are busy together only {shared / either:.0%} of the time: "
                       f"the two directions take turns instead of overlapping")
    hbm = [r for r, u in e.machine.utilization().items() if r[0] == "hbm" and u > 0.5]
    if hbm:
        why.append(f"HBM of device {hbm[0][1]} is busy {e.machine.utilization()[hbm[0]]:.0%} of the run")
    if not why and overhead > 0.05 * e.seconds:
        why.append(f"{overhead / e.seconds:.0%} of the critical path is hop latency, signals, DMA issue and "
                   f"compute between the transfers")
    if not why:
        bn = e.bottleneck
        why.append("no single cause: the busiest link is " + (f"busy {bn[1]:.0%} of the run" if bn else "idle"))
    return why
