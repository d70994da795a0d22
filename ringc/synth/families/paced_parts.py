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
from typing import Iterator

from ...cost import chips
from .base import Candidate
from .templates import AXES, own_copy

FAMILY = "paced_parts"
WHAT = "every axis order at once, right and left, sized for unequal axes, each part at its own pace"
REFERENCE_BYTES = 256 * 2**20   # the size whose step overhead sets the weights and the order
START_WEIGHT = 6                # every order's weight before the search (units of u)


def _steps(shape: dict[str, int], order: str, direction: str, weight: float) -> list[tuple[tuple[str, str], float]]:
    """A part's steps: (its link class, its units), phase by phase."""
    out, held = [], 1
    for a in order:
        out += [((a, direction), held * weight)] * (shape[a] - 1)
        held *= shape[a]
    return out


def fluid(shape: dict[str, int], parts: list[tuple[str, str, float]], overhead: float) -> tuple[list[tuple[float, int, int]], float]:
    """(start time, part, step) of every step, and the end, when `parts` (order, direction,
    units) share their link classes equally and a part's next step starts `overhead` after
    its last one landed. Times in units of one unit's transfer at a link's bandwidth."""
    steps = [_steps(shape, o, d, w) for o, d, w in parts]
    nxt = [0] * len(parts)          # the part's next step
    left = [None] * len(parts)      # units of its step in flight
    ready = [0.0] * len(parts)
    t, starts = 0.0, []
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
            if left[n] <= 1e-9:
                left[n], nxt[n], ready[n] = None, nxt[n] + 1, t + overhead


def _parts(orders: list[str], m: list[int]) -> list[tuple[str, str, int]]:
    return [(o, d, w) for o, w in zip(orders, m) for d in ("right", "left") if w]


def weights(shape: dict[str, int], orders: list[str], overhead: float) -> list[int]:
    """Each order's units (`m_o`): coordinate descent on the fluid model's end, from
    START_WEIGHT each (a part of weight w is w / (2 sum m) of the shard, so the units
    are rescaled to the shard before each run)."""
    def end(m: list[int]) -> float:
        scale = 2 * len(orders) / (2 * sum(m))    # in units of a part when all weigh alike
        return fluid(shape, [(o, d, w * scale) for o, d, w in _parts(orders, m)], overhead)[1]
    m = [START_WEIGHT] * len(orders)
    best = end(m)
    better = True
    while better:
        better = False
        for i, step in itertools.product(range(len(orders)), (1, -1)):
            trial = m[:]
            trial[i] += step
            if trial[i] < 0 or sum(trial) == 0:
                continue
            e = end(trial)
            if e < best - 1e-9:
                m, best, better = trial, e, True
    return m


def overhead_units(topo) -> float:
    """A step's turnaround (hop latency and one DMA issue) in units of one part's link time
    at REFERENCE_BYTES, when the shard is cut in 2 k! equal parts."""
    chip = chips.chip(topo.generation or chips.DEFAULT_CHIP)
    p = 1
    for n in topo.shape:
        p *= n
    orders = len(list(itertools.permutations(range(topo.ndim))))
    unit = REFERENCE_BYTES / p / (2 * orders) / chip.link_bandwidth
    return ((chip.hop_latency or chips.HOP_LATENCY) + chips.DMA_ISSUE_OVERHEAD) / unit


def all_gather(shape: tuple[int, ...], m: list[int] | None = None, overhead: float = 0.4) -> str:
    """The schedule for a torus of `shape` (2 or 3 axes): parts of every axis order with
    units `m` (default: `weights`), its program in the fluid model's order."""
    k = len(shape)
    axes = AXES[:k]
    size = dict(zip(axes, shape))
    orders = ["".join(o) for o in itertools.permutations(axes)]
    m = m or weights(size, orders, overhead)
    parts = _parts(orders, m)
    M = sum(w for _, _, w in parts)
    me = ", ".join(f"me_{a}" for a in axes)
    copies, sems, names, offset = [], [], [], 0
    for n, (order, d, w) in enumerate(parts):
        tag = f"p{n}"
        rows = f"{offset} * u:{w} * u" if offset else f"0:{w} * u"
        offset += w
        sign = "-" if d == "right" else "+"
        # a receive per step, written with u, whose division must be exact in a shape: rows
        # split into M units (other rows are refused by name, not left ungathered)
        sems += [f"  send_{tag}: dma", f"  recv_{tag}: {{kind: dma, shape: [S * (rows // u) // {M}]}}"]
        copies.append(f'  {tag}_first: {{src: "x[{rows}]", dst: "out[{me}, {rows}]", to: {d}_{order[0]}, '
                      f'send_sem: send_{tag}, recv_sem: "recv_{tag}[0]"}}')
        step_names, begin = [f"{tag}_first"], 0
        for i, a in enumerate(order):
            moving = f"(me_{a} {sign} (s - {begin})) % N_{a}" if begin else f"(me_{a} {sign} s) % N_{a}"
            region = ", ".join(":" if b in order[:i] else (moving if b == a else f"me_{b}") for b in axes)
            copies.append(f'  {tag}_{a}(s): {{src: "out[{region}, {rows}]", dst: "out[{region}, {rows}]", '
                          f'to: {d}_{a}, send_sem: send_{tag}, recv_sem: "recv_{tag}[s]"}}')
            step_names += [f"{tag}_{a}(s={s})" for s in range(begin, begin + size[a] - 1)]
            begin += size[a] - 1
        names.append(step_names[:1] + step_names[2:])   # step 0 sends from `x`: `_first`, not `_<a>(s=0)`
    scale = 2 * len(orders) / M
    starts, end = fluid(size, [(o, d, w * scale) for o, d, w in parts], overhead)
    body = []
    for t, n, s in sorted(starts, key=lambda e: (e[0], e[1])):
        order, d, _ = parts[n]
        if s == 0:
            body.append(f"  - start: {names[n][0]}")
            continue
        if s == 1:
            body.append(f"  # p{n} ({d} along {', '.join(order)}) from here; t = {t:.1f}")
        body += [f"  - wait: {names[n][s - 1]}", f"  - start: {names[n][s]}"]
    first = [ln for ln in body if ln.endswith("_first")]
    rest = [ln for ln in body if not ln.endswith("_first")]
    last = [f"  - wait: {names[n][-1]}" for n in range(len(parts))]
    tag = "x".join(str(n) for n in shape)
    guard = " * ".join(f"(N_{a} // {n}) * ({n} // N_{a})" for a, n in zip(axes, shape))
    weights_shown = ", ".join(f"{o}: {w}" for o, w in zip(orders, m))
    names_q = ", ".join(f'"{a}"' for a in axes)
    return f"""# Paced rotated-axis all-gather over {k} axes of unequal sizes: lax.all_gather(x, ({names_q}))
# (tiled=False: out[j] is the shard of the chip with row-major index j).
# Generated by `ringc synth` (ringc/synth/families/paced_parts.py): the shard is cut in
# {len(parts)} parts, one per axis order and direction, part p<n> of order o carrying m_o units of
# u = rows / {M} rows (m = {{{weights_shown}}}); part p<n> runs along its axes in
# turn as a ring, forwarding everything it has gathered. On unequal axes the parts' steps
# differ in length, so there is no grid: the program waits for each part's previous step
# and starts its next in the order a fluid model of the links expects them ready (the
# `t = ` comments, in units of a unit's link time; its end {end:.1f}), and a part whose steps
# are short goes on while a long transfer is still on another link. Each receive has its
# own semaphore (a neighbour may run ahead), and every block is written once.
name: all_gather_{k}d_paced
collective: all_gather
axes: [{', '.join(axes)}]
params: {{rows: {M}, cols: 128}}
buffers:
  x:   {{kind: input,  shape: [rows, cols]}}
  out: {{kind: output, slots: [{', '.join(f'N_{a}' for a in axes)}], shape: [rows, cols], shard: [N, rows, cols]}}
semaphores:
  # The body is unrolled for {tag}: the exact divisions of this shape hold there only, so on
  # another slice `ringc check` refuses the schedule by this name (synthesize one for it).
  only_{tag}: {{kind: regular, shape: [{guard}]}}
  local_sem: dma
{chr(10).join(sems)}
let:
  u: rows // {M}                     # rows of a unit
  S: {' + '.join(f'N_{a}' for a in axes)} - {k}                # steps of every part
copies:
{own_copy(me)}
{chr(10).join(copies)}
body:
  # Every part's first step sends from `x`; the own shard is copied into `out` under them.
{chr(10).join(first)}
  - start: own
  - wait: own
{chr(10).join(rest)}
  # The last steps' transfers.
{chr(10).join(last)}
"""


def generate(kind: str, topo) -> Iterator[Candidate]:
    if kind != "all_gather" or not 2 <= topo.ndim <= 3 or not all(topo.wrap):
        return
    if len(set(topo.shape)) == 1 or min(topo.shape) < 2:
        return   # equal axes: every part's steps line up (rotated_bidirectional's all-gather)
    overhead = overhead_units(topo)
    size = dict(zip(AXES, topo.shape))
    orders = ["".join(o) for o in itertools.permutations(AXES[:topo.ndim])]
    m = weights(size, orders, overhead)
    yield Candidate(FAMILY, f"all_gather_{topo.ndim}d_paced", all_gather(topo.shape, m, overhead), WHAT,
                    {"units": "/".join(str(w) for w in m)})
