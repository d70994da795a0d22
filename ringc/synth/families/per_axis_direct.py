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
  round's buffer (`part_x`, `part_y`, then `out`). Not on v5e (offsets of 3 and more).

Offsets along an axis are translations, so `ringc check` and `ringc cost` time chip 0 on
the symmetry quotient."""

from __future__ import annotations

from typing import Iterator

from .base import V5E_OFFSETS, Candidate
from .templates import AXES, accumulate, add_arrivals, far_first, head, keep_own, own_copy, row_major, when

FAMILY = "per_axis_direct"
WHAT = "one-shot along each axis in turn: k rounds of direct sends, sum(N_a - 1) DMAs per chip"
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
    bufs = ["x", *[f"mid_{i}" for i in range(1, k)], "out"]   # what round i reads is bufs[i]
    slots = "[" + ", ".join(f"N_{a}" for a in axes) + "]"
    lets, copies, body, sems = ["  q: rows // " + str(k) + "   # rows of every block per part"], [], [], []
    for a in axes:
        lets += [_offset(a), f"  to_{a}: {_flat(axes, a, '+')}", f"  t_{a}: (me_{a} + o_{a}) % N_{a}",
                 f"  split_{a}: N_{a} % 2 == 0 and N_{a} > 2 and o_{a} == N_{a} // 2   # half way round {a}",
                 f"  via_{a}: " + row_major(axes, lambda b: f"(me_{b} - 1) % N_{b}" if b == a else f"me_{b}")
                 + f"   # the relay of my half-way block along {a}",
                 f"  final_{a}: " + row_major(axes, lambda b: f"(me_{b} + 1 + N_{b} // 2) % N_{b}" if b == a else f"me_{b}")
                 + f"   # where the half I relay along {a} goes"]
    scratch = [f"  {b}: {{kind: hbm_scratch, slots: {slots}, shape: [rows, cols]}}   # after {i} round{'s' * (i > 1)} "
               "of each part" for i, b in enumerate(bufs[1:-1], 1)]
    sems += ["  relay_sem: dma", "  forward_sem: dma"]
    for r in range(k):
        order = axes[r:] + axes[:r]
        start, length = (f"{r} * q", "q") if r < k - 1 else (f"{r} * q", f"(rows - {r} * q)")
        rows = "0:q" if not r else f"{r} * q:q" if r < k - 1 else f"{r} * q:rows - {r} * q"
        top = f"{start}:{length} // 2"
        bottom = f"{start} + {length} // 2:{length} - {length} // 2"
        for i, a in enumerate(order):
            src, dst = bufs[i], bufs[i + 1]
            tag = f"p{r}_{a}"
            sems += [f"  recv_{tag}: {{kind: dma, shape: [N_{a} - 1]}}", f"  keep_{tag}_sem: dma",
                     f"  relay_recv_{tag}: dma", f"  forward_recv_{tag}: dma"]
            others = [f"N_{b}" for b in axes if b != a]
            scratch.append(f"  relay_{tag}: {{kind: hbm_scratch, slots: [{', '.join(others)}], "
                           f"shape: [{length} - {length} // 2, cols]}}   # part {r}'s bottom half in transit along {a}")
            there = ", ".join(f"t_{a}" if b == a else ":" for b in axes)
            mine = ", ".join(f"me_{a}" if b == a else ":" for b in axes)
            origin = ", ".join(f"(me_{a} + 1) % N_{a}" if b == a else ":" for b in axes)
            copies += [f'  keep_{tag}: {{src: "{src}[{mine}, {rows}]", dst: "{dst}[{mine}, {rows}]", '
                       f'sem: keep_{tag}_sem}}',
                       f'  send_{tag}: {{src: "{src}[{there}, {rows}]", dst: "{dst}[{mine}, {rows}]", to: to_{a}, '
                       f'send_sem: send_sem, recv_sem: "recv_{tag}[step]"}}',
                       f'  top_{tag}: {{src: "{src}[{there}, {top}]", dst: "{dst}[{mine}, {top}]", to: to_{a}, '
                       f'send_sem: send_sem, recv_sem: "recv_{tag}[step]"}}',
                       f'  to_relay_{tag}: {{src: "{src}[{there}, {bottom}]", dst: relay_{tag}, to: via_{a}, '
                       f'send_sem: relay_sem, recv_sem: relay_recv_{tag}}}',
                       f'  forward_{tag}: {{src: relay_{tag}, dst: "{dst}[{origin}, {bottom}]", to: final_{a}, '
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
    if kind in ("all_to_all", "psum_scatter") and 2 <= topo.ndim <= 3 and topo.generation == "v5e" \
            and max(topo.shape) > 3:
        return V5E_OFFSETS
    return None


def generate(kind: str, topo) -> Iterator[Candidate]:
    if kind not in GENERATORS or not 2 <= topo.ndim <= 3 or unavailable(kind, topo):
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
