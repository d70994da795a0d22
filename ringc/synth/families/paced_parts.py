"""The all-gather on a torus of unequal axes, every part at its own pace (issue 36).

`rotated_bidirectional` cuts the shard in 2k parts, one per rotation of the axis order and
direction, and runs them in one grid: at step s every part waits for its step s - 1 and
starts step s. On equal axes the parts' phases line up and every link carries one part at
a time. On v5p:4x4x8 they do not: a part's phase along z (7 steps) meets another's along x
(3 steps), a step's transfers differ by up to 32x between parts, and the grid makes every
part wait for the slowest at every step (63.7% of the bound at 256 MiB). Balancing the
links by the parts' sizes alone does not help while the parts move in lock step.

Here the program is not a grid but the parts' steps in the order they are expected to be
ready, so a part whose transfer is short goes on while a long one is still on its link:

- **Parts.** Every axis order (k! of them), each as a right and a left ring, part of
  order o carrying `m_o` units of `u` = rows / M rows (M = 2 sum m). A part's phase along
  axis a forwards everything it has gathered over the axes before it: N_a - 1 steps of
  (the product of those axes' N) x m_o units, on the link of a and its direction.
- **Sizes** (`weights`): the integer m_o that a fluid model of the links finishes first:
  each step's bytes on its link class (axis, direction; on a torus every chip's are
  alike), a link's bandwidth shared equally by the transfers on it, a part's next step
  starting `overhead` (hop latency and a DMA issue, in units of a piece's link time at
  `REFERENCE_BYTES`) after its last landed. From m_o = 6 for all, one weight at a time
  moves by one while the model's end improves.
- **Order** (`all_gather`): the same model's start times: the program waits for a part's
  step s - 1 and starts its step s where the model starts it. A wait blocks the core, so
  a part whose arrival is late holds up the ones behind it; the cost model, not this
  one, prices the result (v5p:4x4x8 at 256 MiB: 92.8% of the bound, in the fluid model
  94%).

The fluid model is a heuristic of this generator only: it knows no routes, no HBM and no
issue queue. `ringc cost` prices the schedule, and `ringc check` proves it: every part's
ring is `rotated_bidirectional`'s, with a receive semaphore per step, so a neighbour may
run ahead; only the order of the program differs (and it is static: the checked events
are the kernel's). Generated where the axes differ (on equal axes every part's steps line
up, and this is `rotated_bidirectional`'s all-gather)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Iterator

from ...cost import chips
from .base import Candidate, with_vmem_limit
from .rotated_bidirectional import ring_phases
from .templates import AXES, core_lets, own_copy

FAMILY = "paced_parts"
WHAT = "every axis order at once, right and left, sized for unequal axes, each part at its own pace"
REFERENCE_BYTES = 256 * 2**20   # the size whose step overhead sets the weights and the order
START_WEIGHT = 6                # every order's weight before the search (units of u)


def _steps(shape: dict[str, int], order: str, direction: str, weight: float,
           reduce: bool = False, halves: tuple[int, ...] = ()) -> list[tuple[tuple[str, str], float]]:
    """A part's steps: (its link class, its units), phase by phase: an all-gather's phase
    along a forwards the blocks gathered over the axes before a, a reduce-scatter's the
    partial sums still to reduce over the axes after it."""
    out = []
    for i, a in enumerate(order):
        held = 1
        for b in (order[i + 1:] if reduce else order[:i]):
            held *= shape[b]
        if i in halves:   # the phase's steps for one half of the part's rows, then for the other
            out += [((a, direction), held * weight / 2)] * (2 * (shape[a] - 1))
        else:
            out += [((a, direction), held * weight)] * (shape[a] - 1)
    return out


def fluid(shape: dict[str, int], parts: list[tuple[str, str, float]], overhead: float, reduce: bool = False,
          add: float = 0.0, cores: bool = False, halves: tuple[int, ...] = ()) -> tuple[list[tuple[float, int, int]], float]:
    """(start time, part, step) of every step, and the end, when `parts` (order, direction,
    units) share their link classes equally and a part's next step starts `overhead` after
    its last one landed (after its add, `add` per unit landed, where a reduce-scatter adds
    what came: the adds take the core one at a time, in the order their steps landed; with
    `cores`, each direction's its own core; the phases in `halves` go for each half of a
    part's rows in turn, `_reduce_in_vmem`).
    Times in units of one unit's transfer at a link's bandwidth."""
    steps = [_steps(shape, o, d, w, reduce, halves) for o, d, w in parts]
    nxt = [0] * len(parts)          # the part's next step
    left = [None] * len(parts)      # units of its step in flight
    ready = [0.0] * len(parts)
    t, starts, core = 0.0, [], {}
    while True:
        for n in range(len(parts)):
            if left[n] is None and nxt[n] < len(steps[n]) and ready[n] <= t + 1e-12:
                starts.append((t, n, nxt[n]))
                left[n] = steps[n][nxt[n]][1]
        flying = [n for n in range(len(parts)) if left[n] is not None]
        waiting = [ready[n] - t for n in range(len(parts))
                   if left[n] is None and nxt[n] < len(steps[n]) and ready[n] > t]
        if not flying and not waiting:
            return starts, t
        share: dict = {}
        for n in flying:
            share[steps[n][nxt[n]][0]] = share.get(steps[n][nxt[n]][0], 0) + 1
        rate = {n: 1.0 / share[steps[n][nxt[n]][0]] for n in flying}
        dt = min([left[n] / rate[n] for n in flying] + waiting)
        t += dt
        for n in flying:
            left[n] -= rate[n] * dt
            if left[n] <= 1e-9:   # landed: its add waits for the core (one at a time, as landed)
                c = parts[n][1] if cores else 0
                core[c] = max(core.get(c, 0.0), t) + add * steps[n][nxt[n]][1]
                left[n], nxt[n], ready[n] = None, nxt[n] + 1, core[c] + overhead


def orders_of(k: int) -> list[str]:
    """Every order of the first k axes ("xyz", "xzy", ...)."""
    return ["".join(o) for o in itertools.permutations(AXES[:k])]


def _parts(orders: list[str], m: list[int]) -> list[tuple[str, str, int]]:
    return [(o, d, w) for o, w in zip(orders, m) for d in ("right", "left") if w]


def _in_units(orders: list[str], m: list[int]) -> list[tuple[str, str, float]]:
    """The parts with their sizes in the fluid model's unit (a part's when all weigh alike:
    a part of weight w is w / (2 sum m) of the shard)."""
    scale = len(orders) / sum(m)
    return [(o, d, w * scale) for o, d, w in _parts(orders, m)]


def weights(shape: dict[str, int], orders: list[str], overhead: float, reduce: bool = False,
            add: float = 0.0, cores: bool = False, keep_total: bool = False, halves: tuple[int, ...] = ()) -> list[int]:
    """Each order's units (`m_o`): coordinate descent on the fluid model's end, from
    START_WEIGHT each; with `keep_total`, by moving a unit from one order to another (so
    that the rows a shape divides into stay START_WEIGHT x k!'s: an all-reduce's two
    collectives each cut the rows in their own units)."""
    def end(m: list[int]) -> float:
        return fluid(shape, _in_units(orders, m), overhead, reduce, add, cores, halves)[1]
    m = [START_WEIGHT] * len(orders)
    best = end(m)
    better = True
    n = len(orders)
    moves = ([(i, 1, j) for i in range(n) for j in range(n) if i != j] if keep_total else
             [(i, step, None) for i, step in itertools.product(range(n), (1, -1))])
    while better:
        better = False
        for i, step, j in moves:
            trial = m[:]
            trial[i] += step
            if j is not None:
                trial[j] -= 1
            if min(trial) < 0 or sum(trial) == 0:
                continue
            e = end(trial)
            if e < best - 1e-9:
                m, best, better = trial, e, True
    return m


def overhead_units(topo) -> float:
    """A step's turnaround (hop latency and one DMA issue) in units of one part's link time
    at REFERENCE_BYTES, when the shard is cut in 2 k! equal parts."""
    chip = chips.of_topology(topo)
    unit = REFERENCE_BYTES / topo.size / (2 * math.factorial(topo.ndim)) / chip.link_bandwidth
    return (chip.hop_latency + chip.dma_overhead) / unit


def add_units(topo) -> float:
    """A reduce-scatter's add of one unit landed in units of its link time: two reads and a
    write of HBM, at about half the chip's HBM bandwidth (what `ringc cost` finds with the
    links' landings in flight: on v5p an add of 4.7 MB takes 10 us of the core)."""
    chip = chips.of_topology(topo)
    return 2 * 3 * chip.link_bandwidth / chip.hbm_bandwidth


@dataclass
class Pieces:
    """One paced collective's share of a schedule: its parts' buffers, semaphores, lets,
    copies, the program in the fluid model's order, and what a header says of it."""
    buffers: list[str]
    sems: list[str]
    lets: list[str]
    copies: list[str]
    body: list[str]
    M: int                      # units in a shard's (a block's) rows
    unit: str                   # the let naming a unit's rows
    shown: str                  # the orders' units, for the header
    end: float                  # the fluid model's end


def _rows(unit: str, offset: int, w: int) -> str:
    return f"{offset} * {unit}:{w} * {unit}" if offset else f"0:{w} * {unit}"


def _core_parts(parts, starts):
    """On both TensorCores: the right parts, as the core's direction (a part's left twin
    starts as it does in the fluid model, so each core runs the same program), and their
    steps' starts."""
    index = {n: i for i, n in enumerate(n for n, p in enumerate(parts) if p[1] == "right")}
    return ([(t, index[n], s) for t, n, s in starts if n in index],
            [(o, "core", w) for o, d, w in parts if d == "right"])


def _core_rows(rows: str, offset: int, w: int, unit: str, cores: bool) -> str:
    """A part's rows, on both TensorCores those of core c's half (rows c * rows / 2 on)."""
    if not cores:
        return rows
    return f"core * (rows // 2) + {rows}" if offset else f"core * (rows // 2):{w} * {unit}"


def _program(parts, starts, names, wait_ops) -> list[str]:
    """The steps of every part in the fluid model's order: wait for the step before (and
    what `wait_ops` adds after that wait), then start the step."""
    body = []
    for t, n, s in sorted(starts, key=lambda e: (e[0], e[1])):
        order, d, _ = parts[n]
        if s == 1:
            where = "the core's direction" if d == "core" else d
            body.append(f"  # {names[n][0].split('_')[0]} ({where} along {', '.join(order)}) from here; t = {t:.1f}")
        if s > 0:
            body += [f"  - wait: {names[n][s - 1]}", *wait_ops(n, s - 1)]
        body.append(f"  - start: {names[n][s]}")
    return body



def _gather(shape: tuple[int, ...], m: list[int], overhead: float, prefix: str, unit: str, first_src: str,
            cores: bool = False) -> Pieces:
    """An all-gather into `out` (slots per axis) whose step 0 sends `first_src` with the
    part's rows (`{rows}` in it). With `cores` (`cores: 2`), each TensorCore runs one
    direction's parts (the same program: a right part and its left twin start alike in the
    fluid model), over its half of the rows. (Halves of a step, as `rotated_bidirectional`'s
    `split`, priced below this on v5p:4x4x8: 89.9% against 92.1% on one core.)"""
    axes = AXES[:len(shape)]
    size = dict(zip(axes, shape))
    orders = orders_of(len(shape))
    parts = _parts(orders, m)
    starts, end = fluid(size, _in_units(orders, m), overhead)
    if cores:
        starts, parts = _core_parts(parts, starts)
    M = sum(w for _, _, w in _parts(orders, m))
    me = ", ".join(f"me_{a}" for a in axes)
    copies, sems, names, offset = [], [], [], 0
    for n, (order, d, w) in enumerate(parts):
        tag = f"{prefix}{n}"
        rows = _core_rows(_rows(unit, offset, w), offset, w, unit, cores)
        offset += w
        # a receive per step, written with the unit, whose division must be exact in a shape:
        # rows split into M units (other rows are refused by name, not left ungathered)
        sems += [f"  send_{tag}: dma", f"  recv_{tag}: {{kind: dma, shape: [S * (rows // {unit}) // {M}]}}"]
        first = "fwd" if cores else d
        copies.append(f'  {tag}_first: {{src: "{first_src.format(rows=rows)}", dst: "out[{me}, {rows}]", '
                      f'to: {first}_{order[0]}, send_sem: send_{tag}, recv_sem: "recv_{tag}[0]"}}')
        copies += ring_phases(axes, order, 0, "0", tag, d, rows)[0]   # `rotated_bidirectional`'s rings
        step_names, begin = [f"{tag}_first"], 0
        for a in order:
            step_names += [f"{tag}_{a}(s={s})" for s in range(begin, begin + size[a] - 1)]
            begin += size[a] - 1
        names.append(step_names[:1] + step_names[2:])   # step 0 sends from `first_src`, not `_<a>(s=0)`
    body = _program(parts, starts, names, lambda n, s: [])
    body += [f"  - wait: {names[n][-1]}" for n in range(len(parts))]
    return Pieces([], sems, [f"  {unit}: rows // {M}                     # rows of a gathered unit"], copies, body,
                  M, unit, ", ".join(f"{o}: {w}" for o, w in zip(orders, m)), end)


def _reduce(shape: tuple[int, ...], m: list[int], overhead: float, add: float, prefix: str, unit: str,
            final: str, cores: bool = False) -> Pieces:
    """A reduce-scatter of `x` (slots per axis) whose last adds go to `final` (`{rows}`: the
    part's rows). A part's partial sums land in its `acc` along its first axis, and in
    `land<i>` along its later ones (where `acc` still holds its own for that coordinate);
    each arrival is added there, from HBM through VMEM windows, before it is sent on. With
    `cores`, as `_gather`'s: each TensorCore runs one direction's parts over its half of the
    rows, adding on its own (the scratch in HBM is the chip's: a slot per core). (Steps in
    halves, the first half added and sent on while the second lands, priced below this:
    the adds are not what is short but HBM, five bytes per link byte; v5p:4x4x8 at 256 MiB
    63.0% against 73.8% on two cores.)"""
    k = len(shape)
    axes = AXES[:k]
    size = dict(zip(axes, shape))
    orders = orders_of(len(shape))
    parts = _parts(orders, m)
    M = sum(w for _, _, w in parts)
    starts, end = fluid(size, _in_units(orders, m), overhead, True, add, cores)
    if cores:
        starts, parts = _core_parts(parts, starts)
    core = "core, " if cores else ""

    def hop(a: str, d: str, n: str) -> str:   # the chip n steps upstream along a
        return f"(me_{a} + dir * {n}) % N_{a}" if cores else f"(me_{a} {'-' if d == 'right' else '+'} {n}) % N_{a}"
    buffers, sems, copies, names, phases, offsets, offset = [], [], [], [], [], [], 0
    for n, (order, d, w) in enumerate(parts):
        tag = f"{prefix}{n}"
        rows = _core_rows(_rows(unit, offset, w), offset, w, unit, cores)
        offsets.append(offset)
        offset += w
        two = "2, " if cores else ""
        buffers.append(f"  acc_{tag}: {{kind: hbm_scratch, slots: [{two}{', '.join(f'N_{a}' for a in axes)}], "
                       f"shape: [{w} * {unit}, cols]}}   # part {tag}'s partial sums")
        for i in range(1, k):
            slots = ", ".join(f"N_{a}" for a in [order[i]] + [b for b in axes if b in order[i + 1:]])
            buffers.append(f"  land{i}_{tag}: {{kind: hbm_scratch, slots: [{two}{slots}], shape: [{w} * {unit}, cols]}}"
                           f"   # arrivals along {order[i]}")
        sems += [f"  send_{tag}: dma", f"  recv_{tag}: {{kind: dma, shape: [S * (rows // {unit}) // {M}]}}"]

        def region(i: int, idx: str, buf: str, sub: str = "") -> str:
            coords = [f"me_{a}" if a in order[:i] else idx if a == order[i] else ":" for a in axes]
            return f"{buf}[{'' if buf == 'x' else core}{', '.join(coords)}{sub}]"

        # step j of phase i sends the slab (me -/+ (j + 1)) along the phase's axis
        idx = [hop(a, d, "(j + 1)") for a in order]
        first = hop(order[0], d, "1")
        to = (lambda a: f"fwd_{a}") if cores else (lambda a: f"{d}_{a}")
        copies.append(f'  {tag}_first: {{src: "{region(0, first, "x", ", " + rows)}", '
                      f'dst: "{region(0, first, "acc_" + tag)}", to: {to(order[0])}, '
                      f'send_sem: send_{tag}, recv_sem: "recv_{tag}[0]"}}')
        step_names, phase = [f"{tag}_first"], []
        s = 0
        for i, a in enumerate(order):
            dst = region(0, idx[0], "acc_" + tag) if i == 0 else f"land{i}_{tag}[{core}{idx[i]}]"
            copies.append(f'  {tag}_{a}(s, j): {{src: "{region(i, idx[i], "acc_" + tag)}", dst: "{dst}", '
                          f'to: {to(a)}, send_sem: send_{tag}, recv_sem: "recv_{tag}[s]"}}')
            for j in range(size[a] - 1):
                if s:
                    step_names.append(f"{tag}_{a}(s={s}, j={j})")
                phase.append((i, j))
                s += 1
        names.append(step_names)
        phases.append(phase)

    def add_op(n: int, s: int, last: bool = False) -> list[str]:
        """Part n's add of what its step s brought: the slab (me -/+ (j + 2)) along phase i's
        axis (its own coordinate at the phase's last step), onto its own."""
        order, d, w = parts[n]
        i, j = phases[n][s]
        tag, a = f"{prefix}{n}", order[i]
        where = hop(a, d, str(j + 2))
        coords = ", ".join(f"me_{b}" if b in order[:i] else where if b == a else ":" for b in axes)
        rest = [b for b in axes if b in order[i + 1:]]
        rows = _core_rows(_rows(unit, offsets[n], w), offsets[n], w, unit, cores)
        mine = f"x[{coords}, {rows}]" if i == 0 else f"acc_{tag}[{core}{coords}]"
        came = f"acc_{tag}[{core}{coords}]" if i == 0 else f"land{i}_{tag}[{core}{where}]"
        # a window per slab of the first axis left: [1, N_b.., w units, cols] (a pipeline DMA
        # per block would cost the core more than the add)
        block = (["1"] + [f"N_{b}" for b in rest[1:]] if len(rest) > 1 else [f"N_{b}" for b in rest]) + [f"{w} * {unit}", "cols"]
        index = (["r"] + ["0"] * (len(rest) - 1) if len(rest) > 1 else ["0"] * len(rest)) + ["0", "0"]
        count = f"N_{rest[0]}" if len(rest) > 1 else "1"
        out = final.format(rows=rows) if last else f"acc_{tag}[{core}{coords}]"
        oblock = f"[{w} * {unit}, cols]" if last else f"[{', '.join(block)}]"
        oindex = "[0, 0]" if last else f"[{', '.join(index)}]"
        return [f"  - pipeline: {{r: {count}}}",
                "    inputs:",
                f'      mine: {{ref: "{mine}", block: [{", ".join(block)}], index: [{", ".join(index)}]}}',
                f'      came: {{ref: "{came}", block: [{", ".join(block)}], index: [{", ".join(index)}]}}',
                "    outputs:",
                f'      sum: {{ref: "{out}", block: {oblock}, index: {oindex}}}',
                "    do: [{accumulate: sum, src: came, base: mine}]"]

    body = _program(parts, starts, names, add_op)
    body.append("  # The last arrivals, added into place.")
    for n in range(len(parts)):
        body += [f"  - wait: {names[n][-1]}", *add_op(n, len(names[n]) - 1, last=True)]
    lets = [f"  {unit}: rows // {M}                     # rows of a reduced unit"]
    return Pieces(buffers, sems, lets, copies, body, M, unit, ", ".join(f"{o}: {w}" for o, w in zip(orders, m)), end)


# The phases `_reduce_in_vmem` runs in two halves of a part's rows: the first two (their
# slabs take most of the windows). v5p:4x4x8 at 256 MiB on both cores: every phase whole,
# 97.7 MiB of windows, over a core's 64; the first halved, 87.1% of the bound in 60.4 MiB;
# the first two, 88.7% in 51.6 MiB; all three, 82.4% (twice the dependent steps).
HALVED = (0, 1)
# The fluid model's add for `_reduce_in_vmem`, in `add_units`: the arrival is added in VMEM,
# not read and written back in HBM (a quarter: with 1, 1/2 and 1/4 the weights and order it
# gives price 85.6%, 86.9% and 88.7% of the bound there).
VMEM_ADD = 0.25


def _reduce_in_vmem(shape: tuple[int, ...], m: list[int], overhead: float, add: float, prefix: str, unit: str,
                    final: str, cores: bool = False, halves: tuple[int, ...] = HALVED) -> Pieces:
    """`_reduce`'s parts, each arrival landing in a VMEM window of the receiver instead of
    its HBM: the receiver loads its own slab into `own<i>`, adds it into the window and
    sends the window on; a phase's last sum goes to HBM (`acc`, the next phase's source, or
    `final`). One byte of HBM traffic per link byte (the load), where landing in HBM costs
    five. A phase in `halves` runs for one half of the part's rows, then for the other
    (`h`), both through the same two windows (`win<i>`, a half's slab each), so that every
    part's windows fit a core's VMEM at 256 MiB (the first phase's slabs take most), and the
    second half is on the links while the first one's sum goes to HBM. Point
    c = h (N_a - 1) + j of a phase (half h, step j) lands in window c % 2; a sender writes
    it for c >= 2 only after its receiver's `cap<i>` word that arrival c - 2 is released
    (sent on, or its sum copied to HBM): the receiver signals each release but the last
    two. Neighbours write our windows: a barrier with them first."""
    k = len(shape)
    axes = AXES[:k]
    size = dict(zip(axes, shape))
    orders = orders_of(k)
    parts = _parts(orders, m)
    M = sum(w for _, _, w in parts)
    starts, end = fluid(size, _in_units(orders, m), overhead, True, add, cores, halves)
    if cores:
        starts, parts = _core_parts(parts, starts)
    core = "core, " if cores else ""
    H = [2 if i in halves else 1 for i in range(k)]   # the pieces of each phase

    def hop(a: str, d: str, n: str) -> str:   # the chip n steps upstream along a
        return f"(me_{a} + dir * {n}) % N_{a}" if cores else f"(me_{a} {'-' if d == 'right' else '+'} {n}) % N_{a}"
    buffers, sems, copies, names = [], [], [], []
    for n, (order, d, w) in enumerate(parts):
        tag = f"{prefix}{n}"
        offset = sum(p[2] for p in parts[:n])
        first = f"{offset} * {unit}" if offset else "0"
        two = "2, " if cores else ""
        buffers.append(f"  acc_{tag}: {{kind: hbm_scratch, slots: [{two}{', '.join(f'N_{a}' for a in axes)}], "
                       f"shape: [{w} * {unit}, cols]}}   # part {tag}'s sums at each phase's end")
        rests = [[b for b in axes if b in order[i + 1:]] for i in range(k)]
        piece = [f"{w} * {unit} // 2" if H[i] == 2 else f"{w} * {unit}" for i in range(k)]
        for i, rest in enumerate(rests):
            dims = ", ".join(f"N_{b}" for b in rest)
            buffers += [f"  win{i}_{tag}: {{kind: vmem_scratch, slots: [2{', ' + dims if dims else ''}], "
                        f"shape: [{piece[i]}, cols]}}   # its arrivals along {order[i]}",
                        f"  own{i}_{tag}: {{kind: vmem_scratch, {'slots: [' + dims + '], ' if dims else ''}"
                        f"shape: [{piece[i]}, cols]}}   # its own slab for them"]
        steps = sum(H[i] * (size[a] - 1) for i, a in enumerate(order))
        sems += [f"  send_{tag}: dma", f"  recv_{tag}: {{kind: dma, shape: [{steps} * (rows // {unit}) // {M}]}}",
                 f"  load_{tag}: dma", f"  local_{tag}: dma", *(f"  cap{i}_{tag}: regular" for i in range(k))]

        def rows_of(i: int, acc: bool = False) -> str:   # phase i's piece h of the part's rows (in `acc`: of its own)
            base = "0" if acc else first
            start = base if H[i] == 1 else (f"h * ({piece[i]})" if base == "0" else f"{base} + h * ({piece[i]})")
            return (f"core * (rows // 2) + {start}" if cores and not acc else start) + f":{piece[i]}"

        def region(i: int, idx: str, buf: str) -> str:   # phase i's slab at idx, piece h's rows
            coords = [f"me_{a}" if a in order[:i] else idx if a == order[i] else ":" for a in axes]
            if buf == "x":
                return f"x[{', '.join(coords)}, {rows_of(i)}]"
            return f"{buf}[{core}{', '.join(coords)}, {rows_of(i, True)}]"

        def win(i: int, slot: str) -> str:
            return f"win{i}_{tag}[{', '.join([slot] + [':'] * len(rests[i]))}]"
        to = (lambda a: f"fwd_{a}") if cores else (lambda a: f"{d}_{a}")
        step_names, s = [], 0
        copies.append(f"  # Part {tag} ({'the core' if cores else d}'s rings along {', '.join(order)}).")
        for i, a in enumerate(order):
            src = "x" if i == 0 else "acc_" + tag
            # the phase's sum: in `acc` at our coordinates along order[:i + 1] (the last: `final`)
            done = (f"acc_{tag}[{core}{', '.join(f'me_{b}' if b in order[:i + 1] else ':' for b in axes)}, {rows_of(i, True)}]"
                    if i + 1 < k else final.format(rows=rows_of(i)))
            copies += [f'  {tag}_{a}0(s, h): {{src: "{region(i, hop(a, d, "1"), src)}", '
                       f'dst: "{win(i, f"h * (N_{a} - 1) % 2")}", to: {to(a)}, send_sem: send_{tag}, recv_sem: "recv_{tag}[s]"}}',
                       f'  {tag}_{a}(s, c): {{src: "{win(i, "(c - 1) % 2")}", dst: "{win(i, "c % 2")}", to: {to(a)}, '
                       f'send_sem: send_{tag}, recv_sem: "recv_{tag}[s]"}}',
                       f'  {tag}_own{i}(h, j): {{src: "{region(i, hop(a, d, "(j + 2)"), src)}", dst: own{i}_{tag}, '
                       f'sem: load_{tag}}}',
                       f'  {tag}_end{i}(h): {{src: "{win(i, f"(h * (N_{a} - 1) + N_{a} - 2) % 2")}", dst: "{done}", '
                       f'sem: local_{tag}}}']
            for h in range(H[i]):
                for j in range(size[a] - 1):
                    step_names.append(f"{tag}_{a}0(s={s}, h={h})" if j == 0 else
                                      f"{tag}_{a}(s={s}, c={h * (size[a] - 1) + j})")
                    s += 1
        names.append(step_names)
    info = [[(i, h, j) for i, a in enumerate(o) for h in range(H[i]) for j in range(size[a] - 1)] for o, _, _ in parts]

    def upstream(n: int, a: str) -> str:
        return f"back_{a}" if cores else f"{'left' if parts[n][1] == 'right' else 'right'}_{a}"

    def after(n: int, s: int) -> list[str]:
        """Once part n's step s is waited (its send and its arrival): release the arrival
        that send forwarded, add our slab into this one, and load the next slab (or, at a
        piece's end, put its sum in HBM)."""
        order, tag = parts[n][0], f"{prefix}{n}"
        i, h, j = info[n][s]
        a = order[i]
        c, last = h * (size[a] - 1) + j, H[i] * (size[a] - 1) - 1
        cap = [f"  - signal: cap{i}_{tag}", f"    to: {upstream(n, a)}"]
        out = list(cap) if j >= 1 and c - 1 <= last - 2 else []
        out += [f"  - wait: {tag}_own{i}(h={h}, j={j})",
                f'  - accumulate: "win{i}_{tag}[{", ".join([str(c % 2)] + [":"] * (k - i - 1))}]"',
                f"    src: own{i}_{tag}"]
        if j < size[a] - 2:
            out.append(f"  - start: {tag}_own{i}(h={h}, j={j + 1})")
            return out
        out += [f"  - start: {tag}_end{i}(h={h})", f"  - wait: {tag}_end{i}(h={h})", *(cap if c <= last - 2 else [])]
        if h + 1 < H[i]:
            out.append(f"  - start: {tag}_own{i}(h={h + 1}, j=0)")
        elif i + 1 < k:
            out.append(f"  - start: {tag}_own{i + 1}(h=0, j=0)")
        return out

    body = ["  - barrier: [" + ", ".join(f"{side}_{a}" for a in axes for side in ("left", "right")) + "]"]
    loads = [f"  - start: {prefix}{n}_own0(h=0, j=0)" for n in range(len(parts))]
    for t, n, s in sorted(starts, key=lambda e: (e[0], e[1])):
        order, d, _ = parts[n]
        if s == 1:
            if loads:   # every part's first send is on its way: now the loads of their first slabs
                body, loads = body + loads, []
            where = "the core's direction" if d == "core" else d
            body.append(f"  # {prefix}{n} ({where} along {', '.join(order)}) from here; t = {t:.1f}")
        if s > 0:
            body += [f"  - wait: {names[n][s - 1]}", *after(n, s - 1)]
        i, h, j = info[n][s]
        if h * (size[order[i]] - 1) + j >= 2:
            body.append(f"  - sem_wait: cap{i}_{prefix}{n}")
        body.append(f"  - start: {names[n][s]}")
    body.append("  # The last arrivals, added into place.")
    for n in range(len(parts)):
        body += [f"  - wait: {names[n][-1]}", *after(n, len(names[n]) - 1)]
    lets = [f"  {unit}: rows // {M}                     # rows of a reduced unit"]
    return Pieces(buffers, sems, lets, copies, body, M, unit, ", ".join(f"{o}: {w}" for o, w in zip(orders, m)), end)


def _guard(shape: tuple[int, ...]) -> str:
    """The semaphore that refuses another shape: its exact divisions hold on `shape` only."""
    tag = "x".join(str(n) for n in shape)
    guard = " * ".join(f"(N_{a} // {n}) * ({n} // N_{a})" for a, n in zip(AXES, shape))
    return (f"  # The body is unrolled for {tag}: the exact divisions of this shape hold there only, so on\n"
            f"  # another slice `ringc check` refuses the schedule by this name (synthesize one for it).\n"
            f"  only_{tag}: {{kind: regular, shape: [{guard}]}}")


def _schedule(name: str, kind: str, shape: tuple[int, ...], header: str, rows: int, buffers: list[str],
              pieces: list[Pieces], copies: list[str], body: list[str], sems: list[str], cores: bool = False,
              back: bool = False, barrier: bool = False) -> str:
    axes = AXES[:len(shape)]
    lets = [ln for p in pieces for ln in p.lets] + ([f"  {ln}" for ln in core_lets(axes, back=back)] if cores else [])
    return f"""{header}name: {name}
collective: {kind}
axes: [{', '.join(axes)}]{chr(10) + "cores: 2" if cores else ""}
params: {{rows: {rows}, cols: 128}}
buffers:
{chr(10).join(buffers + [b for p in pieces for b in p.buffers])}
semaphores:
{_guard(shape)}
{chr(10).join(sems + [s for p in pieces for s in p.sems])}{chr(10) + "barrier: {collective_id: 0}" if barrier else ""}
let:
{chr(10).join(lets)}
  S: {' + '.join(f'N_{a}' for a in axes)} - {len(shape)}                # steps of every part
copies:
{chr(10).join(copies + [c for p in pieces for c in p.copies])}
body:
{chr(10).join(body)}
"""


PACED = """# On unequal axes the parts' steps differ in length, so there is no grid: the program waits
# for each part's previous step and starts its next in the order a fluid model of the links
# expects them ready (the `t = ` comments, in units of a unit's link time), and a part whose
# steps are short goes on while a long transfer is still on another link. Each receive has
# its own semaphore and every slot is written once, so a neighbour may run ahead.
"""


def _slots(shape: tuple[int, ...]) -> str:
    return ", ".join(f"N_{a}" for a in AXES[:len(shape)])


def all_gather(shape: tuple[int, ...], m: list[int] | None = None, overhead: float = 0.4,
               cores: bool = False) -> str:
    """The all-gather for a torus of `shape` (2 or 3 axes): parts of every axis order with
    units `m` (default: `weights`), its program in the fluid model's order; `cores` as in
    `_gather`."""
    axes = AXES[:len(shape)]
    m = m or weights(dict(zip(axes, shape)), orders_of(len(shape)), overhead)
    g = _gather(shape, m, overhead, "p", "u", "x[{rows}]", cores)
    names = ", ".join(f'"{a}"' for a in axes)
    me = ", ".join(f"me_{a}" for a in axes)
    header = f"""# Paced all-gather over {len(shape)} axes of unequal sizes: lax.all_gather(x, ({names}))
# (tiled=False: out[j] is the shard of the chip with row-major index j).
# Generated by `ringc synth` (ringc/synth/families/paced_parts.py): the shard is cut in
# parts, one per axis order and direction, the part of order o carrying m_o units of
# u = rows / {g.M} rows (m = {{{g.shown}}}); each runs along its axes in turn as a
# ring, forwarding everything it has gathered. The fluid model ends at {g.end:.1f}.
{PACED}{CORES if cores else ""}"""
    first = [ln for ln in g.body if ln.endswith("_first")]
    rest = [ln for ln in g.body if not ln.endswith("_first")]
    body = ["  # Every part's first step sends from `x`; the own shard is copied into `out` under them.",
            *first, "  - start: own", "  - wait: own", *rest]
    own = (f'  own: {{src: "x[core * (rows // 2):rows // 2]", dst: "out[{me}, core * (rows // 2):rows // 2]", '
           "sem: local_sem}" if cores else own_copy(me))
    name = f"all_gather_{len(shape)}d_paced" + ("_2c" if cores else "")
    return _schedule(name, "all_gather", shape, header, g.M,
                     ["  x:   {kind: input,  shape: [rows, cols]}",
                      f"  out: {{kind: output, slots: [{_slots(shape)}], shape: [rows, cols], shard: [N, rows, cols]}}"],
                     [g], [own], body, ["  local_sem: dma"], cores)


CORES = """# On both TensorCores (`cores: 2`, v5p): core 0 runs the right parts and core 1 the left
# ones (a part's left twin starts as it does in the fluid model, so the program is the
# same), each over its half of the rows with its own DMA issue and semaphores; `dir` and
# `fwd_<a>` are the core's direction and next chip along a, and a remote copy goes to the
# same core of that chip. Each core copies its own half of the shard into `out`.
"""


CORES_REDUCE = """# On both TensorCores (`cores: 2`, v5p): core 0 runs the right parts and core 1 the left
# ones over its half of the rows, each with its own DMA issue, semaphores and adds (its
# pipelines' VMEM windows are its own; HBM is the chip's, so each core's partial sums have
# a slot of their own in `acc` and `land`); `dir` and `fwd_<a>` are the core's direction
# and next chip along a, and a remote copy goes to the same core of that chip.
"""


def _paced(vmem: bool) -> str:
    """The header's paragraph on the paced program, and (`vmem`) on the windows: those are
    written again, so the last words of `PACED` do not hold for them."""
    if not vmem:
        return PACED
    return PACED.replace(" Each receive has\n# its own semaphore and every slot is written once, so a neighbour may run ahead.",
                         "\n# Each receive has its own semaphore.") + WINDOWS


CORES_VMEM = """# On both TensorCores (`cores: 2`, v5p): core 0 runs the right parts and core 1 the left
# ones over its half of the rows, each with its own DMA issue, semaphores, adds and VMEM
# windows; HBM is the chip's, so each core's sums have a slot of their own in `acc`;
# `dir`, `fwd_<a>` and `back_<a>` are the core's direction, next chip and chip before along
# a, and a remote copy or signal goes to the same core of that chip.
"""
# Where a reduction's arrival is added (`reduce_scatter`'s and `all_reduce`'s headers).
LANDS_HBM = "from HBM through VMEM windows"
LANDS_VMEM = "in the VMEM window it lands in"
WINDOWS = """# An arrival lands in a VMEM window of the receiver (`win<i>`, two per phase), which adds
# its own slab (loaded into `own<i>`) and sends the window on: one byte of HBM traffic per
# link byte, where landing in HBM costs five. The first two phases go for each half of a
# part's rows in turn through the same windows (so that every part's windows fit a core's VMEM),
# and a sender writes a window from a phase's third point on only after its receiver's
# `cap<i>` word that what it held has gone on. Neighbours write our windows: a barrier first.
"""


def _rows_multiple(M: int, tile: int = 8) -> str:
    """The guard that rows divide by `tile` M: a reduced unit a multiple of `tile` rows (a
    VMEM window's tile; 16 where a unit's rows are halved, `_reduce_in_vmem`)."""
    what = "a VMEM window's tile" if tile == 8 else "half of it a VMEM window's tile"
    return (f"  # a reduced unit is a multiple of {tile} rows ({what}): rows divide by {tile * M}.\n"
            f"  rows_by_{tile * M}: {{kind: regular, shape: [rows // {tile * M} // (rows // {tile * M})]}}")


def reduce_scatter(shape: tuple[int, ...], m: list[int] | None = None, overhead: float = 0.4,
                   add: float = 0.2, cores: bool = False, vmem: bool = False) -> str:
    """The reduce-scatter for a torus of `shape` (2 or 3 axes): parts of every axis order,
    each reducing along its axes in turn as a ring, with units `m` (default: `weights`, on
    the reduce-scatter's steps: a phase carries the partial sums over the axes after it);
    `cores` as in `_reduce`."""
    axes = AXES[:len(shape)]
    if vmem:
        add *= VMEM_ADD
    m = m or weights(dict(zip(axes, shape)), orders_of(len(shape)), overhead, True, add, cores,
                     halves=HALVED if vmem else ())
    r = (_reduce_in_vmem if vmem else _reduce)(shape, m, overhead, add, "p", "u", "out[{rows}]", cores)
    tile = 16 if vmem else 8
    names = ", ".join(f'"{a}"' for a in axes)
    header = f"""# Paced reduce-scatter over {len(shape)} axes of unequal sizes: lax.psum_scatter(x, ({names}))
# (scatter_dimension=0, tiled=False: chip j gets the sum of every chip's block j, row-major).
# Generated by `ringc synth` (ringc/synth/families/paced_parts.py): every block is cut in
# parts of rows, one per axis order and direction, the part of order o carrying m_o units
# of u = rows / {r.M} rows (m = {{{r.shown}}}). Each reduces along its axes in
# turn as a ring: along the first it sends the partial sums of every block with one
# coordinate there, along the next those left with this chip's coordinate, and so on; what
# arrives is added, {LANDS_VMEM if vmem else LANDS_HBM}, to this chip's own (its `x` along the
# first axis, `acc` after) before it is sent on, and the last add goes to `out`. The adds
# take the core one at a time (the fluid model orders them as they land; it ends at {r.end:.1f}).
{_paced(vmem)}{(CORES_VMEM if vmem else CORES_REDUCE) if cores else ""}"""
    return _schedule(f"psum_scatter_{len(shape)}d_paced" + ("_vmem" if vmem else "") + ("_2c" if cores else ""),
                     "psum_scatter", shape, header, tile * r.M,
                     [f"  x:   {{kind: input,  slots: [{_slots(shape)}], shape: [rows, cols], shard: [N * rows, cols]}}",
                      "  out: {kind: output, shape: [rows, cols]}"],
                     [r], [], r.body, [_rows_multiple(r.M, tile)], cores, back=vmem and cores, barrier=vmem)


def all_reduce(shape: tuple[int, ...], m: tuple[list[int], list[int]] | None = None, overhead: float = 0.4,
               add: float = 0.2, cores: bool = False, vmem: bool = False) -> str:
    """The all-reduce for a torus of `shape`: `reduce_scatter` of every chip's blocks (its
    rows cut in N), each chip's reduced block into its `out` slot, then `all_gather` of
    those, each with its own parts and units (`m`: the reduce-scatter's, the all-gather's);
    `cores`: both on both TensorCores, a direction per core."""
    axes = AXES[:len(shape)]
    size, orders = dict(zip(axes, shape)), orders_of(len(shape))
    if vmem:
        add *= VMEM_ADD
    mr, mg = m or (weights(size, orders, overhead, True, add, cores, keep_total=cores, halves=HALVED if vmem else ()),
                   weights(size, orders, overhead))
    me = ", ".join(f"me_{a}" for a in axes)
    r = (_reduce_in_vmem if vmem else _reduce)(shape, mr, overhead, add, "r", "u", f"out[{me}, {{rows}}]", cores)
    tile = 16 if vmem else 8
    g = _gather(shape, mg, overhead, "g", "v", f"out[{me}, {{rows}}]", cores)
    names = ", ".join(f'"{a}"' for a in axes)
    rows = tile * r.M * g.M // math.gcd(tile * r.M, g.M)
    header = f"""# Paced all-reduce over {len(shape)} axes of unequal sizes: lax.psum(x, ({names})).
# Generated by `ringc synth` (ringc/synth/families/paced_parts.py): a paced reduce-scatter
# of the N blocks of x (slots per axis) leaves each chip's sum of its own block in its `out`
# slot, and a paced all-gather of those fills the others. Parts r<n> reduce, one per axis
# order and direction, of order o carrying m_o units of u = rows / {r.M} rows
# (m = {{{r.shown}}}); parts g<n> gather, of v = rows / {g.M} rows
# (m = {{{g.shown}}}). The reduce-scatter's parts add what arrives, {LANDS_VMEM if vmem else LANDS_HBM},
# before sending it on; the all-gather starts once every reduced part is in
# place. Fluid model: the reduce-scatter ends at {r.end:.1f}, the all-gather {g.end:.1f} later.
{_paced(vmem)}{(CORES_VMEM if vmem else CORES_REDUCE) if cores else ""}"""
    body = [*r.body, "  # The all-gather of the reduced blocks.", *g.body]
    return _schedule(f"psum_{len(shape)}d_paced" + ("_vmem" if vmem else "") + ("_2c" if cores else ""), "psum", shape,
                     header, rows,
                     [f"  x:   {{kind: input,  slots: [{_slots(shape)}], shape: [rows, cols], shard: [N * rows, cols]}}",
                      f"  out: {{kind: output, slots: [{_slots(shape)}], shape: [rows, cols], shard: [N * rows, cols]}}"],
                     [r, g], [], body, [_rows_multiple(r.M, tile)], cores, back=vmem and cores, barrier=vmem)


def generate(kind: str, topo) -> Iterator[Candidate]:
    if kind not in ("all_gather", "psum_scatter", "psum") or not 2 <= topo.ndim <= 3:
        return
    if len(set(topo.shape)) == 1 or min(topo.shape) < 2:
        return   # equal axes: every part's steps line up (rotated_bidirectional, per_axis, vmem_windows)
    overhead, add = overhead_units(topo), add_units(topo)
    size = dict(zip(AXES, topo.shape))
    orders = orders_of(topo.ndim)
    gather = weights(size, orders, overhead) if kind != "psum_scatter" else None
    reduce = weights(size, orders, overhead, True, add) if kind != "all_gather" else None
    units = lambda m: "/".join(str(w) for w in m)
    if kind == "all_gather":
        text, params = all_gather(topo.shape, gather, overhead), {"units": units(gather)}
    elif kind == "psum_scatter":
        text, params = reduce_scatter(topo.shape, reduce, overhead, add), {"units": units(reduce)}
    else:
        text = all_reduce(topo.shape, (reduce, gather), overhead, add)
        params = {"units": f"{units(reduce)} + {units(gather)}"}
    yield Candidate(FAMILY, f"{kind}_{topo.ndim}d_paced", text, WHAT, params)
    if chips.of_topology(topo).tensor_cores < 2:
        return
    # a direction per TensorCore: v5p:4x4x8 at 256 MiB the all-gather 92.9% of the bound
    # against 92.1%; the reductions add on both cores at once (their units weighed so)
    if kind == "all_gather":
        text = all_gather(topo.shape, gather, overhead, True)
    else:
        reduce = weights(size, orders, overhead, True, add, True, keep_total=kind == "psum")
        if kind == "psum_scatter":
            text, params = reduce_scatter(topo.shape, reduce, overhead, add, True), {"units": units(reduce)}
        else:
            text = all_reduce(topo.shape, (reduce, gather), overhead, add, True)
            params = {"units": f"{units(reduce)} + {units(gather)}"}
    yield Candidate(FAMILY, f"{kind}_{topo.ndim}d_paced_2c", text, WHAT + ", a direction per TensorCore", params)
    if kind == "all_gather":
        return
    # The reductions landing in VMEM windows (`_reduce_in_vmem`), on both cores: v5p:4x4x8
    # at 256 MiB psum_scatter 73.8% -> 88.7% of the bound. Not on one core: its twelve parts'
    # windows there take twice a core's, over its VMEM at 256 MiB.
    vadd = add * VMEM_ADD
    reduce = weights(size, orders, overhead, True, vadd, True, keep_total=kind == "psum", halves=HALVED)
    if kind == "psum_scatter":
        text, params = reduce_scatter(topo.shape, reduce, overhead, add, True, vmem=True), {"units": units(reduce)}
    else:
        text = all_reduce(topo.shape, (reduce, gather), overhead, add, True, vmem=True)
        params = {"units": f"{units(reduce)} + {units(gather)}"}
    yield Candidate(FAMILY, f"{kind}_{topo.ndim}d_paced_vmem_2c",
                    with_vmem_limit(text, chips.of_topology(topo), "the windows"),
                    WHAT + ", landing in VMEM windows, a direction per TensorCore", params)
