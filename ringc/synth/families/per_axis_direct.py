"""Direct sends one axis after another ("one-shot per axis"), for small sizes on a k-D torus:
a one-shot collective along x, then along y carrying what x gathered, then along z. A
flat one-shot (`direct.py`) issues N - 1 DMAs from every chip and routes them over up to
the diameter; this issues sum(N_a - 1) (9 instead of 63 on a 4x4x4) in k rounds of
neighbours-along-one-axis, which wins where DMA issue costs and per-round latency
decide (the sizes where latency dominates).

- all-gather: round a sends the blocks gathered so far (my x-line, then my xy-plane) to
  the other chips along axis a, straight into their `out`; every block lands once.
- all-reduce: round a sends the partial sum (x, then the line sum in `out`) to the other
  chips along a, each straight into its own slot of the receiver's per-axis VMEM
  `stage_a` (one DMA issue per peer, no load from HBM), and adds what arrived: after
  round a every chip holds the sum over the axes done so far. A `done` signal per peer (waited at the end) keeps a back-to-back call from
  overwriting a slot its receiver still reads, as in `all_reduce_one_shot`.
- all-to-all: round a sends, to each chip along axis a, every block bound for that chip's
  coordinate along a (a strided region), into the slot of my coordinate in the next
  round's buffer (`part_x`, `part_y`, then `out`). On v5e, which routes only power-of-2
  offsets, the rotated one sends in power-of-2 hops (`all_to_all_pow2`).

Offsets along an axis are translations, so `ringc check` and `ringc cost` time chip 0 on
the symmetry quotient."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from .base import V5E_OFFSETS, Candidate
from .templates import AXES, accumulate, add_arrivals, far_first, head, keep_own, own_copy, row_major, when

FAMILY = "per_axis_direct"
WHAT = "one-shot along each axis in turn: k rounds of direct sends, sum(N_a - 1) DMAs per chip"
WHAT_POW2 = ("all-to-all in k rotated parts, each send the shorter way round its axis in power-of-2 hops "
             "(v5e routes no other offset): all 2k links busy")
WHAT_POW2_FLAT = "one-shot along each axis in turn, each send the shorter way in power-of-2 hops (v5e routes no other offset)"
WHAT_ROTATED = "all-to-all in k parts, one per rotation of the axis order, one-shot along each axis in turn: all 2k links busy"


def _flat(axes: str, moved: str, sign: str) -> str:
    """Row-major index of the chip at `me` with the coordinate along `moved` shifted by
    sign o_moved (`_offset`)."""
    return row_major(axes, lambda a: f"(me_{a} {sign} o_{a}) % N_{a}" if a == moved else f"me_{a}")


def _offset(a: str) -> str:
    """The let of step's offset along axis a: every other chip along a once (steps 0 ..
    N_a - 2), the farthest first (`far_first`: the long routes leave first)."""
    return f"  o_{a}: {far_first('step', f'N_{a}')}   # this step's offset along {a}, farthest first"


LANDINGS = ("vmem", "hbm")   # where a reduction round's sends land (`_arrivals`)
_LANDED = {"vmem": "straight into the receiver's VMEM `stage_a` slot",
           "hbm": "into the receiver's HBM `gathered_a` slot, then loaded into its VMEM `stage_a`"}
_SUFFIX = {"vmem": "", "hbm": "_hbm"}


def _arrivals(a: str, i: int, live: str, slots: str, src: str, mine: str, theirs: str,
              landing: str) -> tuple[list[str], list[str], list[str], list[str]]:
    """The buffers, semaphores, copies and body entries of round i (along axis a, phases
    3i .. 3i + 2) of a reduction: send `src` to the other chips along a, into their slot
    `mine` of the staging array, and wait; phase 3i + 2 adds what arrived in `stage_a[theirs]`
    (after the round's last send has read its source). `landing` "vmem": straight into the
    receiver's VMEM `stage_a` (one DMA issue per peer); "hbm": into its HBM `gathered_a`,
    then loaded into `stage_a` (two, but no remote write into VMEM: libtpu refuses the VMEM
    landing of the 3-D reduce-scatter on v5p:16x16x16, vmem_overflow, and takes this)."""
    stage = f"  stage_{a}: {{kind: vmem_scratch, slots: {slots}, shape: [rows, cols]}}"
    send = (f'  send_{a}: {{src: {src}, dst: "{"stage" if landing == "vmem" else "gathered"}_{a}[{mine}]", '
            f'to: to_{a}, send_sem: send_sem, recv_sem: "recv_{a}[step]"}}')
    sems = [f"  recv_{a}: {{kind: dma, shape: [N_{a} - 1]}}"]
    body = [when(f"phase == {3 * i} and {live}", f"start: send_{a}")]
    if landing == "vmem":
        return [stage], sems, [send], body + [when(f"phase == {3 * i + 1} and {live}", f"wait: send_{a}")]
    return ([f"  gathered_{a}: {{kind: hbm_scratch, slots: {slots}, shape: [rows, cols]}}", stage],
            sems + [f"  load_{a}: {{kind: dma, shape: [N_{a} - 1]}}"],
            [send, f'  fetch_{a}: {{src: "gathered_{a}[{theirs}]", dst: "stage_{a}[{theirs}]", sem: "load_{a}[step]"}}'],
            body + [when(f"phase == {3 * i + 1} and {live}", f"wait: send_{a}", f"start: fetch_{a}"),
                    when(f"phase == {3 * i + 2} and {live}", f"wait: fetch_{a}")])


def _grid(axes: str) -> str:
    return '"max(' + ", ".join(f"N_{a}" for a in axes) + ') - 1"' if len(axes) > 1 else "N - 1"


def _rounds(axes: str, phases: int, sems: list[str], lets: list[str], copies: list[str], body: list[str]) -> str:
    """A schedule's sections after `buffers:`, for one round of `phases` phases per axis:
    the shared send semaphore and `sems`, the grid (steps enough for the longest axis), the
    `lets`, `copies` and `body` lines."""
    return f"""semaphores:
  send_sem: dma
{chr(10).join(sems)}
grid: {{phase: {phases * len(axes)}, step: {_grid(axes)}}}
let:
{chr(10).join(lets)}
copies:
{chr(10).join(copies)}
body:
{chr(10).join(body)}
"""


def all_gather(k: int) -> str:
    axes = AXES[:k]
    me = ", ".join(f"me_{a}" for a in axes)
    lets, copies, body = [], [], []
    for i, a in enumerate(axes):
        lets += [_offset(a), f"  to_{a}: {_flat(axes, a, '+')}"]
        # Round i sends the region gathered so far: all of axes < i, my coordinate on the rest.
        region = ", ".join(":" if j < i else f"me_{b}" for j, b in enumerate(axes))
        copies.append(f'  send_{a}: {{src: "out[{region}]", dst: "out[{region}]", to: to_{a}, '
                      f'send_sem: send_sem, recv_sem: "recv_{a}[step]"}}')
        body += [when(f"phase == {2 * i} and step < N_{a} - 1", f"start: send_{a}"),
                 when(f"phase == {2 * i + 1} and step < N_{a} - 1", f"wait: send_{a}")]
    sems = "\n".join(f"  recv_{a}: {{kind: dma, shape: [N_{a} - 1]}}" for a in axes)
    return f"""# One-shot per axis all-gather over {k} axes: lax.all_gather(x, ({', '.join(repr(a) for a in axes).replace("'", '"')},))
# (tiled=False: out[j] is the shard of the chip with row-major index j).
# Generated by `ringc synth` (ringc/synth/families/per_axis_direct.py): round a sends what
# the earlier rounds gathered to every other chip along axis a at once, straight into
# their `out`; k rounds, sum(N_a - 1) DMAs per chip.
{head(f"all_gather_per_axis_direct_{k}d", "all_gather", axes)}
buffers:
  x:   {{kind: input,  shape: [rows, cols]}}
  out: {{kind: output, slots: [{', '.join(f'N_{a}' for a in axes)}], shape: [rows, cols], shard: [N, rows, cols]}}
semaphores:
  local_sem: dma
  send_sem: dma
{sems}
grid: {{phase: {2 * k}, step: {_grid(axes)}}}
let:
{chr(10).join(lets)}
copies:
{own_copy(me)}
{chr(10).join(copies)}
body:
{keep_own("phase == 0 and step == 0")}
{chr(10).join(body)}
"""


def psum(k: int, landing: str = "vmem") -> str:
    axes = AXES[:k]
    lets, bufs, sems, copies, body = [], [], [], [], []
    for i, a in enumerate(axes):
        lets += [_offset(a), f"  to_{a}: {_flat(axes, a, '+')}", f"  from_{a}: {_flat(axes, a, '-')}",
                 f"  src_{a}: (me_{a} - o_{a}) % N_{a}"]
        live = f"step < N_{a} - 1"
        b, m, c, o = _arrivals(a, i, live, f"N_{a}", "x" if i == 0 else "out", f"me_{a}", f"src_{a}", landing)
        bufs, sems, copies, body = bufs + b, sems + m, copies + c, body + o
        arrival = f'"stage_{a}[src_{a}]"'
        if i == 0:
            body.append(add_arrivals("phase == 2 and step == 0", f"phase == 2 and step > 0 and {live}",
                                     "out", arrival, "x"))
        else:
            body.append(when(f"phase == {3 * i + 2} and {live}", accumulate("out", arrival)))
        body.append(when(f"phase == {3 * i + 2} and {live}", f"signal: done\nto: from_{a}"))
    total = " + ".join(f"N_{a}" for a in axes) + f" - {k}"
    # The last grid point (after every round's signals to us could have been sent).
    last = "max(" + ", ".join(f"N_{a}" for a in axes) + ") - 2"
    body.append(when(f"phase == {3 * k - 1} and step == {last}", f"sem_wait: done\nvalue: {total}"))
    return f"""# One-shot per axis all-reduce over {k} axes: lax.psum(x, axes).
# Generated by `ringc synth` (ringc/synth/families/per_axis_direct.py): round a sends the
# partial sum (x, then `out`) to every other chip along axis a at once (the farthest
# first), {_LANDED[landing]}, and adds the arrivals, so after round a every chip holds the sum
# over the axes done so far. k rounds, sum(N_a - 1) DMAs.
{head(f"psum_per_axis_direct{_SUFFIX[landing]}_{k}d", "psum", axes)}
buffers:
  x:   {{kind: input,  shape: [rows, cols], space: vmem}}
  out: {{kind: output, shape: [rows, cols], space: vmem}}
{chr(10).join(bufs)}
{_rounds(axes, 3, [*sems, "  done: regular"], lets, copies, body)}"""


def all_to_all(k: int) -> str:
    """Round a (x, then y, then z) moves every block one axis nearer its destination: the
    blocks in flight are indexed by (source coordinates on the axes done, destination
    coordinates on the rest); round a sends, to the chip at coordinate t along a, the
    blocks whose destination coordinate along a is t, into its slot of my coordinate."""
    axes = AXES[:k]
    bufs = ["x", *[f"part_{a}" for a in axes[:-1]], "out"]   # what round i reads is bufs[i]
    slots = "[" + ", ".join(f"N_{a}" for a in axes) + "]"
    lets, copies, body, sems, scratch = [], [], [], [], []
    for i, a in enumerate(axes):
        lets += [_offset(a), f"  to_{a}: {_flat(axes, a, '+')}", f"  t_{a}: (me_{a} + o_{a}) % N_{a}"]
        src, dst = bufs[i], bufs[i + 1]
        if dst != "out":
            scratch.append(f"  {dst}: {{kind: hbm_scratch, slots: {slots}, shape: [rows, cols]}}"
                           f"   # after round {a}: (sources on {axes[:i + 1]}, destinations on the rest)")
        sems += [f"  recv_{a}: {{kind: dma, shape: [N_{a} - 1]}}", f"  keep_sem_{a}: dma"]
        send_src = ", ".join(f"t_{a}" if b == a else ":" for b in axes)
        send_dst = ", ".join(f"me_{a}" if b == a else ":" for b in axes)
        keep = ", ".join(f"me_{a}" if b == a else ":" for b in axes)
        copies += [f'  keep_{a}: {{src: "{src}[{keep}]", dst: "{dst}[{keep}]", sem: keep_sem_{a}}}',
                   f'  send_{a}: {{src: "{src}[{send_src}]", dst: "{dst}[{send_dst}]", to: to_{a}, '
                   f'send_sem: send_sem, recv_sem: "recv_{a}[step]"}}']
        live = f"step < N_{a} - 1"
        body += [f"  # Round {a}: the blocks bound for coordinate t_{a} along {a} go there at once.",
                 when(f"phase == {2 * i} and step == 0", f"start: keep_{a}"),
                 when(f"phase == {2 * i} and {live}", f"start: send_{a}"),
                 when(f"phase == {2 * i + 1} and step == 0", f"wait: keep_{a}"),
                 when(f"phase == {2 * i + 1} and {live}", f"wait: send_{a}")]
    names = ", ".join(f'"{a}"' for a in axes)
    return f"""# One-shot per axis all-to-all over {k} axes: lax.all_to_all(x, ({names}), 0, 0) (tiled=False:
# out[j] is block x[me] of the chip with row-major index j).
# Generated by `ringc synth` (ringc/synth/families/per_axis_direct.py): round a sends, to
# each other chip along axis a at once, every block whose destination lies on that chip's
# coordinate along a (a strided region: all coordinates of the other axes), into the slot
# of my coordinate; after the last round every block is at its destination. k rounds,
# sum(N_a - 1) DMAs per chip (the flat direct all-to-all issues N - 1 and relays), for
# small sizes; a round waits for the previous one's arrivals before it forwards them.
{head(f"all_to_all_per_axis_direct_{k}d", "all_to_all", axes)}
buffers:
  x:   {{kind: input,  slots: {slots}, shape: [rows, cols], shard: [N, rows, cols]}}
  out: {{kind: output, slots: {slots}, shape: [rows, cols], shard: [N, rows, cols]}}
{chr(10).join(scratch)}
{_rounds(axes, 2, sems, lets, copies, body)}"""


def _part_rows(r: int, parts: int) -> tuple[str, str, str, str]:
    """Part r of `parts` (rows r q .. (r + 1) q of every block, the last part the rest): its
    length, its rows, and its top and bottom halves, as region text."""
    start, length = (f"{r} * q", "q") if r < parts - 1 else (f"{r} * q", f"(rows - {r} * q)")
    rows = "0:q" if not r else f"{r} * q:q" if r < parts - 1 else f"{r} * q:rows - {r} * q"
    return length, rows, f"{start}:{length} // 2", f"{start} + {length} // 2:{length} - {length} // 2"


@dataclass(frozen=True)
class _Leg:
    """Round i of part r (rows `rows` of every block, `length` of them, cut in `top` and
    `bottom` halves where it is split) along axis a, from buffer `src` into `dst`; `there`,
    `mine`: the slot regions of the coordinate sent to and of my own; `others`: the other
    axes' sizes."""
    r: int
    a: str
    tag: str
    src: str
    dst: str
    length: str
    rows: str
    top: str
    bottom: str
    others: list
    there: str
    mine: str


def _legs(axes: str, parts: int) -> tuple[list[str], list[_Leg]]:
    """The `mid` scratch lines of a rotated all-to-all (what round i reads: `x`, `mid_1`, ..,
    `out`), and every part's round along every axis of its rotated order."""
    bufs = ["x", *[f"mid_{i}" for i in range(1, len(axes))], "out"]   # what round i reads is bufs[i]
    slots = "[" + ", ".join(f"N_{a}" for a in axes) + "]"
    scratch = [f"  {b}: {{kind: hbm_scratch, slots: {slots}, shape: [rows, cols]}}   # after {i} round{'s' * (i > 1)} "
               "of each part" for i, b in enumerate(bufs[1:-1], 1)]
    legs = []
    for r in range(parts):
        length, rows, top, bottom = _part_rows(r, parts)
        for i, a in enumerate(axes[r:] + axes[:r]):
            legs.append(_Leg(r, a, f"p{r}_{a}", bufs[i], bufs[i + 1], length, rows, top, bottom,
                             [f"N_{b}" for b in axes if b != a],
                             ", ".join(f"t_{a}" if b == a else ":" for b in axes),
                             ", ".join(f"me_{a}" if b == a else ":" for b in axes)))
    return scratch, legs


def all_to_all_rotated(k: int) -> str:
    """`all_to_all` in k parts at once, one per rotation of the axis order: part r takes
    rows r q .. (r + 1) q of every block (q = rows // k, the last part the rest) and runs
    its rounds along axes[r:] + axes[:r], so in every round the k parts use k different
    axes. One axis after another leaves the other axes' links idle: on v5p:16x16x16 each
    round moves V along one axis, three times the bisection bound's time. The buffers in
    flight mean the same for every part (a slot's coordinate along an axis is the source's
    where that axis is done, the destination's elsewhere): the parts share them, each in
    its own rows.

    A round's send half way round an even axis (offset N_a / 2, its first: the farthest)
    has two shortest routes, and routing sends it the positive way: on an axis of 16 the
    positive links carry 36 blocks' worth to the negative ones' 28 (89% of the bound). As
    in `all_to_all_direct`, its top half goes directly and its bottom half to the relay
    one hop the negative way, which forwards it N_a / 2 - 1 hops on the negative way
    (phase 3i + 1): 32 each way."""
    axes = AXES[:k]
    slots = "[" + ", ".join(f"N_{a}" for a in axes) + "]"
    lets, copies, body, sems = ["  q: rows // " + str(k) + "   # rows of every block per part"], [], [], []
    for a in axes:
        lets += [_offset(a), f"  to_{a}: {_flat(axes, a, '+')}", f"  t_{a}: (me_{a} + o_{a}) % N_{a}",
                 f"  split_{a}: N_{a} % 2 == 0 and N_{a} > 2 and o_{a} == N_{a} // 2   # half way round {a}",
                 f"  via_{a}: " + row_major(axes, lambda b: f"(me_{b} - 1) % N_{b}" if b == a else f"me_{b}")
                 + f"   # the relay of my half-way block along {a}",
                 f"  final_{a}: " + row_major(axes, lambda b: f"(me_{b} + 1 + N_{b} // 2) % N_{b}" if b == a else f"me_{b}")
                 + f"   # where the half I relay along {a} goes"]
    sems += ["  relay_sem: dma", "  forward_sem: dma"]
    scratch, legs = _legs(axes, k)
    for g in legs:
        a, tag = g.a, g.tag
        sems += [f"  recv_{tag}: {{kind: dma, shape: [N_{a} - 1]}}", f"  keep_{tag}_sem: dma",
                 f"  relay_recv_{tag}: dma", f"  forward_recv_{tag}: dma"]
        scratch.append(f"  relay_{tag}: {{kind: hbm_scratch, slots: [{', '.join(g.others)}], "
                       f"shape: [{g.length} - {g.length} // 2, cols]}}   # part {g.r}'s bottom half in transit along {a}")
        origin = ", ".join(f"(me_{a} + 1) % N_{a}" if b == a else ":" for b in axes)
        copies += [f'  keep_{tag}: {{src: "{g.src}[{g.mine}, {g.rows}]", dst: "{g.dst}[{g.mine}, {g.rows}]", '
                   f'sem: keep_{tag}_sem}}',
                   f'  send_{tag}: {{src: "{g.src}[{g.there}, {g.rows}]", dst: "{g.dst}[{g.mine}, {g.rows}]", '
                   f'to: to_{a}, send_sem: send_sem, recv_sem: "recv_{tag}[step]"}}',
                   f'  top_{tag}: {{src: "{g.src}[{g.there}, {g.top}]", dst: "{g.dst}[{g.mine}, {g.top}]", '
                   f'to: to_{a}, send_sem: send_sem, recv_sem: "recv_{tag}[step]"}}',
                   f'  to_relay_{tag}: {{src: "{g.src}[{g.there}, {g.bottom}]", dst: relay_{tag}, to: via_{a}, '
                   f'send_sem: relay_sem, recv_sem: relay_recv_{tag}}}',
                   f'  forward_{tag}: {{src: relay_{tag}, dst: "{g.dst}[{origin}, {g.bottom}]", to: final_{a}, '
                   f'send_sem: forward_sem, recv_sem: forward_recv_{tag}}}']
    for i in range(k):
        # round i: part r along axis i of its order, its copies tagged p<r>_<axis>
        round_parts = [(a, f"p{r}_{a}", f"step < N_{a} - 1") for r in range(k) for a in [(axes[r:] + axes[:r])[i]]]
        body.append(f"  # Round {i}: part r along axis {i + 1} of its order (" +
                    "; ".join(f"{tag.split('_')[0]}: {a}" for a, tag, _ in round_parts) + "), all at once.")
        for a, tag, live in round_parts:
            body += [when(f"phase == {3 * i} and step == 0", f"start: keep_{tag}"),
                     when(f"phase == {3 * i} and {live} and not split_{a}", f"start: send_{tag}"),
                     when(f"phase == {3 * i} and {live} and split_{a}", f"start: top_{tag}", f"start: to_relay_{tag}")]
        body.append("  # The halves this chip relays go on as they arrive.")
        body += [when(f"phase == {3 * i + 1} and {live} and split_{a}", f"wait_recv: to_relay_{tag}",
                      f"start: forward_{tag}") for a, tag, live in round_parts]
        for a, tag, live in round_parts:
            body += [when(f"phase == {3 * i + 2} and step == 0", f"wait: keep_{tag}"),
                     when(f"phase == {3 * i + 2} and {live} and not split_{a}", f"wait: send_{tag}"),
                     when(f"phase == {3 * i + 2} and {live} and split_{a}", f"wait: top_{tag}",
                          f"wait_send: to_relay_{tag}", f"wait: forward_{tag}")]
    names = ", ".join(f'"{a}"' for a in axes)
    return f"""# Rotated one-shot per axis all-to-all over {k} axes: lax.all_to_all(x, ({names}), 0, 0)
# (tiled=False: out[j] is block x[me] of the chip with row-major index j).
# Generated by `ringc synth` (ringc/synth/families/per_axis_direct.py): every block is cut
# in {k} parts of rows, part r going through the axes in the order rotated by r; a round of
# a part sends, to each other chip along its axis at once (the farthest first), the rows
# of every block whose destination lies on that chip's coordinate there, into the slot of
# my coordinate. In every round the {k} parts are on {k} different axes, so all {2 * k} links of
# a chip carry data (one axis at a time leaves {2 * k - 2} of them idle). The send half way
# round an even axis is split: its top half goes directly (the positive way, as routing
# sends it), its bottom half to the relay one hop the negative way, which forwards it on
# the negative way, so both directions of the axis carry the same bytes.
{head(f"all_to_all_per_axis_direct_rotated_{k}d", "all_to_all", axes, rows=8 * k)}
buffers:
  x:   {{kind: input,  slots: {slots}, shape: [rows, cols], shard: [N, rows, cols]}}
  out: {{kind: output, slots: {slots}, shape: [rows, cols], shard: [N, rows, cols]}}
{chr(10).join(scratch)}
{_rounds(axes, 3, sems, lets, copies, body)}"""


def _bits(n: int) -> int:
    return bin(n).count("1")


def pow2_legs(shape: tuple[int, ...]) -> int:
    """The hops of the longest power-of-2 route along any axis of `shape` (`all_to_all_pow2`):
    the most binary digits set in an offset 1 .. N_a / 2 - 1 (3 on an axis of 16: 7 = 4 + 2 + 1)."""
    return max([1] + [_bits(m) for n in shape for m in range(1, (n + 1) // 2)])


def all_to_all_pow2(k: int, legs: int, rotated: bool = True) -> str:
    """`all_to_all_rotated` for v5e, which routes a DMA only to a power-of-2 offset along an
    axis (`ringc check`'s `unroutable`): every offset takes its shortest way round the axis
    in hops of powers of 2, one per binary digit of its length, the highest first (7 = 4 +
    2 + 1: three DMAs, seven links, as many as one direct send; the later hops are the
    short ones, so less is left to forward once the first hops land). A hop before the last lands
    in the next chip's HBM `landed<j>` slot of the step and goes on as soon as it arrives
    (phases 1 .. legs of the round), so the route's links carry each block once, as the
    direct send's do.
    The send half way round (offset N_a / 2, the first: farthest first) is split as in
    `all_to_all_rotated`: its top half N_a / 2 the positive way (a power of 2 on v5e), its
    bottom half N_a / 4 and then N_a / 2 - N_a / 4 the negative way, so both directions of
    an axis carry the same bytes. `legs` hops per route cover axes up to 2^(legs + 1): a
    guard semaphore, exact only on axes that divide it, refuses longer ones by name.
    `rotated` False: one part through the axes in order (half the DMAs: for small sizes)."""
    axes = AXES[:k]
    parts = k if rotated else 1
    slots = "[" + ", ".join(f"N_{a}" for a in axes) + "]"
    span = 2 ** (legs + 1)
    lets, copies, body = ["  q: rows // " + str(parts) + "   # rows of every block per part"], [], []
    sems = [f"  # {legs} hop{'s' * (legs > 1)} cover an offset up to {span // 2 - 1}: exact on axes dividing {span} only",
            f"  axes_to_{span}: {{kind: regular, shape: [{' * '.join(f'({span} // N_{a})' for a in axes)}]}}",
            "  hop_sem: dma", "  relay_sem: dma", "  forward_sem: dma"]
    for a in axes:
        shift = lambda c, a=a: row_major(axes, lambda b: f"(me_{b} {c}) % N_{b}" if b == a else f"me_{b}")  # noqa: E731
        lets += [_offset(a), f"  t_{a}: (me_{a} + o_{a}) % N_{a}",
                 f"  split_{a}: N_{a} % 2 == 0 and N_{a} > 2 and o_{a} == N_{a} // 2   # half way round {a}",
                 f"  s_{a}: -1 if 2 * o_{a} > N_{a} else 1   # the shorter way round {a}",
                 f"  r0_{a}: N_{a} - o_{a} if 2 * o_{a} > N_{a} else o_{a}   # the hops still to go along {a}"]
        for j in range(1, legs + 1):
            top = " else ".join(f"{2 ** b} if r{j - 1}_{a} >= {2 ** b}" for b in range(legs, -1, -1)) + " else 0"
            lets += [f"  u{j}_{a}: {top}   # hop {j}: the highest binary digit left",
                     f"  r{j}_{a}: r{j - 1}_{a} - u{j}_{a}",
                     f"  to{j}_{a}: {shift(f'+ s_{a} * u{j}_{a}')}"]
        lets += [f"  to_{a}: {shift(f'+ o_{a}')}",
                 f"  via_{a}: {shift(f'- N_{a} // 4')}   # the relay of my half-way block's bottom half",
                 f"  final_{a}: {shift(f'- (N_{a} // 2 - N_{a} // 4)')}   # where that relay sends it"]
    scratch, part_legs = _legs(axes, parts)
    for g in part_legs:
        a, tag, src, dst, there, mine, rows = g.a, g.tag, g.src, g.dst, g.there, g.mine, g.rows
        sems += [f"  recv_{tag}: {{kind: dma, shape: [N_{a} - 1]}}", f"  keep_{tag}_sem: dma",
                 f"  bottom_recv_{tag}: dma", f"  forward_recv_{tag}: dma"]
        sems += [f"  hop{j}_recv_{tag}: {{kind: dma, shape: [N_{a} - 1]}}" for j in range(1, legs)]
        scratch += [f"  landed{j}_{tag}: {{kind: hbm_scratch, slots: [N_{a} - 1, {', '.join(g.others)}], "
                    f"shape: [{g.length}, cols]}}   # part {g.r} after hop {j} along {a}" for j in range(1, legs)]
        scratch.append(f"  half_{tag}: {{kind: hbm_scratch, slots: [{', '.join(g.others)}], "
                       f"shape: [{g.length} - {g.length} // 2, cols]}}   # part {g.r}'s bottom half in transit along {a}")
        relayed = ", ".join(f"(me_{a} + N_{a} // 4) % N_{a}" if b == a else ":" for b in axes)
        copies += [f'  keep_{tag}: {{src: "{src}[{mine}, {rows}]", dst: "{dst}[{mine}, {rows}]", sem: keep_{tag}_sem}}',
                   f'  top_{tag}: {{src: "{src}[{there}, {g.top}]", dst: "{dst}[{mine}, {g.top}]", to: to_{a}, '
                   f'send_sem: send_sem, recv_sem: "recv_{tag}[step]"}}',
                   f'  bottom_{tag}: {{src: "{src}[{there}, {g.bottom}]", dst: half_{tag}, to: via_{a}, '
                   f'send_sem: relay_sem, recv_sem: bottom_recv_{tag}}}',
                   f'  forward_{tag}: {{src: half_{tag}, dst: "{dst}[{relayed}, {g.bottom}]", '
                   f'to: final_{a}, send_sem: forward_sem, recv_sem: forward_recv_{tag}}}']
        for j in range(1, legs + 1):
            # hop j: from the source's block (j = 1) or the arrival of hop j - 1; into the
            # destination's slot of the source (which is u1 + .. + u(j-1) hops back) if no
            # digit is left after it, else into the next chip's landed<j> slot of the step
            here = f'"{src}[{there}, {rows}]"' if j == 1 else f'"landed{j - 1}_{tag}[step]"'
            back = f" - s_{a} * (" + " + ".join(f"u{i}_{a}" for i in range(1, j)) + ")" if j > 1 else ""
            origin = mine if j == 1 else ", ".join(f"(me_{a}{back}) % N_{a}" if b == a else ":" for b in axes)
            sem = "send_sem" if j == 1 else "hop_sem"
            copies.append(f'  last{j}_{tag}: {{src: {here}, dst: "{dst}[{origin}, {rows}]", to: to{j}_{a}, '
                          f'send_sem: {sem}, recv_sem: "recv_{tag}[step]"}}')
            if j < legs:
                copies.append(f'  hop{j}_{tag}: {{src: {here}, dst: "landed{j}_{tag}[step]", to: to{j}_{a}, '
                              f'send_sem: {sem}, recv_sem: "hop{j}_recv_{tag}[step]"}}')
    # A round takes legs + 2 phases: P0 the first hops of the routes of two hops or more
    # (they have the links to themselves, so they land early); P1 the forwards of those
    # arrivals and the one-hop sends (which, farthest first, come after every longer route's
    # step); P(j) for j = 2 .. legs - 1 the forwards of hop j; the last phase the waits.
    phases = legs + 2
    for i in range(k):
        # round i: part r along axis i of its order, its copies tagged p<r>_<axis>
        round_parts = [(a, f"p{r}_{a}", f"step < N_{a} - 1") for r in range(parts)
                       for a in [(axes[r:] + axes[:r])[i]]]
        p0, end = phases * i, phases * (i + 1) - 1
        body.append(f"  # Round {i}: part r along axis {i + 1} of its order (" +
                    "; ".join(f"{tag.split('_')[0]}: {a}" for a, tag, _ in round_parts) + "), all at once.")
        for a, tag, live in round_parts:
            body += [when(f"phase == {p0} and step == 0", f"start: keep_{tag}"),
                     *[when(f"phase == {p0} and {live} and not split_{a} and r1_{a} != 0", f"start: hop1_{tag}")
                       for _ in range(legs > 1)],
                     when(f"phase == {p0} and {live} and split_{a}", f"start: bottom_{tag}")]
        body.append("  # What this chip relays goes on as it arrives, hop by hop; the one-hop sends start.")
        for j in range(1, legs + 1):
            for a, tag, live in round_parts:
                if j == 1:
                    body += [when(f"phase == {p0 + 1} and {live} and split_{a}", f"start: top_{tag}",
                                  f"wait_recv: bottom_{tag}", f"start: forward_{tag}"),
                             when(f"phase == {p0 + 1} and {live} and not split_{a} and r1_{a} == 0", f"start: last1_{tag}")]
                    continue
                arrived = f"phase == {p0 + j - 1} and {live} and not split_{a} and r{j - 1}_{a} != 0"
                body.append(when(f"{arrived} and r{j}_{a} == 0", f"wait_recv: hop{j - 1}_{tag}", f"start: last{j}_{tag}"))
                if j < legs:
                    body.append(when(f"{arrived} and r{j}_{a} != 0", f"wait_recv: hop{j - 1}_{tag}",
                                     f"start: hop{j}_{tag}"))
        for a, tag, live in round_parts:
            body += [when(f"phase == {end} and step == 0", f"wait: keep_{tag}"),
                     when(f"phase == {end} and {live} and split_{a}", f"wait: top_{tag}",
                          f"wait_send: bottom_{tag}", f"wait: forward_{tag}")]
            for j in range(1, legs + 1):
                went = f"phase == {end} and {live} and not split_{a}" + (f" and r{j - 1}_{a} != 0" if j > 1 else "")
                body.append(when(f"{went} and r{j}_{a} == 0", f"wait: last{j}_{tag}"))
                if j < legs:
                    body.append(when(f"{went} and r{j}_{a} != 0", f"wait_send: hop{j}_{tag}"))
    names = ", ".join(f'"{a}"' for a in axes)
    if rotated:
        what = (f"every block is cut\n# in {k} parts of rows, part r going through the axes in the order rotated by r; a round of\n"
                f"# a part sends, to each other chip along its axis (the farthest first), the rows of every\n"
                f"# block whose destination lies on that chip's coordinate there, into the slot of my\n"
                f"# coordinate, so in every round all {2 * k} links of a chip carry data.")
    else:
        what = ("round a sends, to\n# each other chip along axis a (the farthest first), every block whose destination lies\n"
                "# on that chip's coordinate there, into the slot of my coordinate: one axis at a time,\n"
                "# half the DMAs of the rotated parts, for small sizes.")
    name = f"all_to_all_per_axis_pow2{'_rotated' * rotated}_{k}d"
    return f"""# {'Rotated p' if rotated else 'P'}er-axis all-to-all in power-of-2 hops over {k} axes: lax.all_to_all(x, ({names}), 0, 0)
# (tiled=False: out[j] is block x[me] of the chip with row-major index j), for v5e, whose
# chips route a DMA only to a power-of-2 offset along an axis.
# Generated by `ringc synth` (ringc/synth/families/per_axis_direct.py): {what}
# A send goes the shorter way round the axis in one hop per binary digit of its length,
# the highest first (7 = 4 + 2 + 1: three DMAs over seven links, as many links as one
# direct send); a hop before the last lands in the next chip's HBM `landed<j>` slot and
# goes on as it arrives.
# The first hops of the longer routes go alone at the start of a round, so they land
# early and their forwards overlap the one-hop sends (all at once, the last forwards
# were left to the end of each round: 94% of the bound on v5e:16x16 at 256 MiB, not 99.9%).
# The send half way round is split: its top half goes the positive way at once, its
# bottom half N_a / 4 and then N_a / 2 - N_a / 4 hops the negative way, so both directions of
# an axis carry the same bytes.
{head(name, "all_to_all", axes, rows=8 * parts)}
buffers:
  x:   {{kind: input,  slots: {slots}, shape: [rows, cols], shard: [N, rows, cols]}}
  out: {{kind: output, slots: {slots}, shape: [rows, cols], shard: [N, rows, cols]}}
{chr(10).join(scratch)}
{_rounds(axes, phases, sems, lets, copies, body)}"""


def psum_scatter(k: int, landing: str = "vmem") -> str:
    """Round a (x, then y, then z) is a one-shot reduce-scatter along axis a of what the
    earlier rounds left: chip me sends, to the chip at coordinate t along a, the partial
    sums of the blocks bound for coordinate t (the blocks of every coordinate on the axes
    not done yet), straight into its VMEM `stage_a` slot of me; the arrivals are added to
    my own part, so after round a every chip holds the sum over the axes done of
    the blocks bound for its coordinates on them."""
    axes = AXES[:k]
    n_all = ", ".join(f"N_{a}" for a in axes)
    lets, bufs, sems, copies, body = [], [], [], [], []
    for i, a in enumerate(axes):
        rest = axes[i + 1:]
        slots = ", ".join([f"N_{a}"] + [f"N_{b}" for b in rest])
        free = "".join(", :" for _ in rest)
        lets += [_offset(a), f"  to_{a}: {_flat(axes, a, '+')}", f"  t_{a}: (me_{a} + o_{a}) % N_{a}",
                 f"  src_{a}: (me_{a} - o_{a}) % N_{a}"]
        last = i == k - 1
        if not last:
            bufs.append(f"  acc_{a}:      {{kind: vmem_scratch, slots: [{', '.join(f'N_{b}' for b in rest)}], "
                        f"shape: [rows, cols]}}   # after round {a}: summed over {axes[:i + 1]}")
        dst = "out" if last else f"acc_{a}"
        if i == 0:
            prev = lambda c: f"x[{c}{free}]"  # noqa: E731
        else:
            prev = lambda c, p=axes[i - 1]: f"acc_{p}[{c}{free}]"  # noqa: E731
        live = f"step < N_{a} - 1"
        b, m, c, o = _arrivals(a, i, live, f"[{slots}]", f'"{prev(f"t_{a}")}"', f"me_{a}{free}", f"src_{a}{free}",
                               landing)
        bufs, sems, copies = bufs + b, sems + m, copies + c
        body += [f"  # Round {a}.", *o,
                 add_arrivals(f"phase == {3 * i + 2} and step == 0", f"phase == {3 * i + 2} and step > 0 and {live}",
                              dst, f'"stage_{a}[src_{a}{free}]"', f'"{prev(f"me_{a}")}"')]
    names = ", ".join(f'"{a}"' for a in axes)
    return f"""# One-shot per axis reduce-scatter over {k} axes: lax.psum_scatter(x, ({names})) (tiled=False:
# chip j gets the sum of every chip's block j, row-major).
# Generated by `ringc synth` (ringc/synth/families/per_axis_direct.py): round a sends, to
# each other chip along axis a at once, the partial sums of the blocks bound for its
# coordinate along a (the farthest first), {_LANDED[landing]} of mine; the arrivals are
# added to my own, so the blocks shrink by N_a each round and the last round adds into
# `out`. k rounds, sum(N_a - 1) DMAs, for small sizes (every array is in VMEM).
{head(f"psum_scatter_per_axis_direct{_SUFFIX[landing]}_{k}d", "psum_scatter", axes)}
buffers:
  x:   {{kind: input,  slots: [{n_all}], shape: [rows, cols], shard: [N * rows, cols], space: vmem}}
  out: {{kind: output, shape: [rows, cols], space: vmem}}
{chr(10).join(bufs)}
{_rounds(axes, 3, sems, lets, copies, body)}"""


GENERATORS = {"all_gather": all_gather, "psum": psum, "all_to_all": all_to_all, "psum_scatter": psum_scatter}


def unavailable(kind: str, topo) -> str | None:
    """Why the family does not generate `kind` on `topo` where it would otherwise apply:
    every offset 1 .. N_a - 1 along an axis, which v5e does not route past 2."""
    if kind == "psum_scatter" and 2 <= topo.ndim <= 3 and topo.generation == "v5e" and max(topo.shape) > 3:
        return V5E_OFFSETS
    return None


def generate(kind: str, topo) -> Iterator[Candidate]:
    if kind not in GENERATORS or not 2 <= topo.ndim <= 3 or unavailable(kind, topo):
        return
    if kind == "all_to_all" and topo.generation == "v5e":   # power-of-2 hops only
        legs = pow2_legs(topo.shape)
        for rotated in (False, True):
            yield Candidate(FAMILY, f"all_to_all_per_axis_pow2{'_rotated' * rotated}_{topo.ndim}d",
                            all_to_all_pow2(topo.ndim, legs, rotated), WHAT_POW2 if rotated else WHAT_POW2_FLAT,
                            {"legs": legs})
        return
    if kind in ("psum", "psum_scatter"):   # the landing in VMEM first; in HBM where libtpu refuses that
        for landing in LANDINGS:
            yield Candidate(FAMILY, f"{kind}_per_axis_direct{_SUFFIX[landing]}_{topo.ndim}d",
                            GENERATORS[kind](topo.ndim, landing), WHAT, {})
        return
    yield Candidate(FAMILY, f"{kind}_per_axis_direct_{topo.ndim}d", GENERATORS[kind](topo.ndim), WHAT, {})
    if kind == "all_to_all":
        yield Candidate(FAMILY, f"all_to_all_per_axis_direct_rotated_{topo.ndim}d", all_to_all_rotated(topo.ndim),
                        WHAT_ROTATED, {})
