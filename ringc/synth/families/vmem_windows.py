"""Rotated-axis bidirectional reduce-scatter (and all-reduce: the reduce-scatter, then two
all-gathers) on a 2-D torus whose partial sums land in VMEM windows (issue 36): the structure of `per_axis`'s reduce-scatter (half A reduces over x then
y, half B over y then x, each as a right and a left ring, so all four links of a chip carry
data), but a partial sum arrives in a VMEM window of the receiver, is added to the
receiver's own block there (loaded from HBM into a second window) and is sent on from the
window. The `per_axis` family lands the partial sums in HBM, and each link byte costs five
bytes of HBM traffic (the landing write, two reads and a write of the add, the sender's
read): with four links busy that is more than a v5e chip's HBM bandwidth, the limit of that
family at large sizes in the cost model. Here a link byte costs one HBM read (the
receiver's own block).

The windows are few and small: every block is cut into pieces of `q` rows (at most
`wrows`), and the pieces go round the rings `lanes` at a time (a round: every step of both
reduce-scatters for `lanes` pieces, which pipeline: while one lane's arrival is added, the
next lane's is on the links). A window is written by the upstream neighbour and freed when
its content has been sent on (or, at a phase's last step, copied out to HBM), so a sender
may only write a window once its receiver said it is free: the `cap*` semaphores carry that
handshake, 2 x `lanes` windows per stream and phase, the first 2 x `lanes` sends needing no
word and the last ones drained at the end. The receiver's own blocks are loaded lane by
lane, with the lane's transfer, or (`step_loads`, the `_step` candidates) a step's, the rows
of all its lanes, by one DMA once the step before is added: at 256 MiB on v5e:16x16 a step
of the second phase moves one block per lane (128 KiB a link), and with a load per lane the
four streams' DMA issues (two per point and stream) take longer than the transfers (94.1%
of the bound; with one load per step 97.0%, and the all-reduce 96.5% -> 98.0%). On
torus:4x4 the load per lane stays ahead (96.5% against 95.3%).

The `_halfway` 2-D candidates (`reduce_scatter_2d(halfway=True)`, `HALFWAY_2D`) make each
reduce-scatter's right and left rings carry whole blocks and meet half way, as the
all-gathers of `bidirectional_ring.HALFWAY` and `rotated_bidirectional.all_gather_halfway`
do: N // 2 dependent steps, not N - 1, for the same link bytes. On v5e:16x16 at 64 MiB a
step of the second phase (one block per lane) costs the four streams' DMA issues, adds and
a capacity word (7 us) for 1.5 us of bytes: the reduce-scatter goes from 79.0% of the bound
to 88.8% (470 -> 418 us), the all-reduce from 82.9% to 88.1%. With the first phase's column
held in its window for the second (`held`, `HELD_2D`: no copy to HBM and back, no loads of
the second phase's own blocks) 91.9% and 89.6%, and with 4 windows a lane for the second
phase (`cwin`: 2 x lanes paced its senders by the capacity word's round trip, as the 3-D
held column's were) 94.1% and 90.6%, and with the all-reduce's two all-gathers meeting half
way too 94.3% for the all-reduce; on torus:4x4 97.0% and 99.1% (from 94.1% and 97.5%). Only
the held ones are searched (`_halfway_held`).

On a 3-D torus (`reduce_scatter_3d`): three parts (A over x, y, z; B over y, z, x; C over
z, x, y), six streams, each part's reduce-scatter in three phases (a plane of blocks, a
column, a block), the same windows, handshake and loads of a step's own blocks per stream
and phase; but the phases run one after another over all the rows, each with pieces of its
own (`wrows`, `crows`, `brows` rows): with six streams a point issues a DMA per stream, and
a column's or a block's step of `wrows` rows would pay those issues for a fraction of a
plane's bytes (docs/cost-model.md, "Synthesis").

The `_direct` 3-D candidates (`reduce_scatter_3d(direct=True)`, `_direct_block`) replace
the third phase's ring by one round of direct sends along the part's third axis: each
chip's block goes straight into a VMEM `stage` slot of its owner, farthest first, and the
owner adds the arrivals; the all-reduce's first all-gather (a block) is direct too
(`_direct_gather`). The ring's block phase is N_c - 1 dependent steps, each six streams'
DMA issues for little data (at 256 MiB on v5p:8x8x8 one block is 32 KiB a lane); direct,
it is N_c - 1 DMA issues per part, for about N_c / 4 times the ring's link bytes on
1 / (N_a N_b) of the data: 75.1% -> 84.3% of the bound on v5p:8x8x8 (all-reduce 81.4% ->
89.1%), 59.9% -> 67.2% on v5p:16x16x16 (68.4% -> 74.6%; lanes 1, the compiled winners);
on v5p:4x4x4 (3 ring steps, and a stage of 16 MiB at 256 MiB that shrinks the windows)
the ring stays ahead. The `_held_direct` candidates (`reduce_scatter_3d(held=True)`) keep
the first phase's result in its windows for the second (one round of the plane, so the
windows grow with V), and the direct phase relays the half-way block's direction 1 the
negative way (axes of 4 to 8): v5p:8x8x8 at 256 MiB 92.4% -> 95.0% (psum 94.1% -> 95.5%)."""

from __future__ import annotations

import itertools
from typing import Iterator

from .base import Candidate, vmem_limit_mib, with_vmem_limit
from .templates import accumulate, core_lets, far_first, row_major, when

FAMILY = "vmem_windows"
# `ringc check` proves it on the symmetry quotient, which orders a window's reuse after the
# receiver's capacity word (`verify/symmetric/order.py`: a signal lands when it runs, so the
# n-th wait for the word comes after the sender's n-th signal): 0.09 s on torus:8x8, 0.4 s on
# torus:16x16 (on every chip: 5 s and over 10 minutes). Generated up to 4,096 chips.
MAX_CHIPS = 4096
WHAT = "rotated-axis bidirectional reduce-scatter whose partial sums land in VMEM windows, with a capacity handshake"

HEADER = """# Bidirectional 2-D reduce-scatter landing in VMEM: lax.psum_scatter(x, ("x", "y"))
# (scatter_dimension=0, tiled=False: chip d = (d_x, d_y) gets the sum of every chip's block
# d, the rows x[d_x, d_y, :, :] of the [N_x, N_y, 2, 2] block layout: half, direction).
# Generated by `ringc synth` (ringc/synth/families/vmem_windows.py). Half A reduces over x,
# then y; half B over y, then x, at once; each as a right (direction 0) and a left ring, so
# all four links of a chip carry data. A partial sum lands in a VMEM window of the
# receiver (`w0_*` on a half's first axis: a column of blocks; `w1_*` on its second: one
# block), the receiver's own block is loaded from HBM into `xw*` and added into the window,
# and the window is sent on from VMEM: one byte of HBM traffic per link byte (the load),
# where landing in HBM costs five. The first reduce-scatter's result (the column of blocks
# the chip owns along the half's first axis) goes to `first_*` in HBM, the second's to `out`.
#
# Pieces: a block is cut into pieces of q rows (at most `wrows`); the grid runs `rounds` of
# every step of both reduce-scatters for `lanes` pieces at a time, flat: point k is lane
# k % lanes of step (k // lanes) % S of round k // (lanes * S). Point k starts lane k's
# transfers and finishes point j = k - (lanes - 1): waits for its transfers and its load,
# adds, and frees a window. Windows: 2 x lanes per stream and phase, used in turn (phase
# index n, window n % (2 lanes)); a sender waits for its receiver's `cap` word before it
# writes window n >= 2 lanes, which the receiver signals when window n - lanes is free (its
# content sent on by the send of n, waited when n finishes); the last lanes windows of a
# phase are freed when they finish, and every chip drains the words it was not waited for at
# the end. All four neighbours write our windows: a barrier with them at entry.
"""

# The loads of the own blocks: one per lane (with the lane's transfer), or (`step_loads`)
# one per step.
LANE_LOADS = """# transfers and finishes point j = k - (lanes - 1): waits for its transfers and its load,
# adds, and frees a window. Windows:"""
STEP_LOADS = """# transfers and finishes point j = k - (lanes - 1): waits for its transfers, adds, and frees
# a window. The own blocks of a step, all its lanes' rows, are loaded into `xw*` by one DMA
# once the step before is added (its last lane finished; the first step's at entry), and
# waited by the step's first lane: one load per step, not per lane, so that a step of the
# second phase (one block per lane) is not bound by the DMA issues.
# Windows:"""

# The rings meeting half way (the `_halfway` schedules: `reduce_scatter_2d(halfway=True)`).
HALFWAY_2D = """#
# The rings meet half way (this `_halfway` schedule): in a reduce-scatter along an axis of N
# chips, the right ring and the left one both carry whole blocks (both directions' rows:
# a window is [2, q, cols] of a block), and block D is summed by a right ring that starts
# H = N // 2 chips to its left and a left ring that starts H chips to its right: H steps,
# where a ring of halves takes N - 1. At step t a chip sends right the partial sum of block
# me + H - t and left that of me - H + t. On an even axis both rings start at the chip
# half way round, so there the right ring's first step sends direction 0's rows and the
# left ring's direction 1's: every link carries (N - 1) / 2 blocks a direction, as in the
# rings of halves. The receiver of a first step adds its own block into those rows and
# copies its own into the rest (`assign`). The right ring adds the own block at every step;
# at the last step the left ring adds its arrival into the right ring's window, which
# then holds the sum and goes to HBM. The same bytes in about half the dependent steps: a
# step of the second phase (one block per lane) costs the four streams' DMA issues, adds
# and a capacity word, not the bytes (`H_x`, `H_y`: the steps along each axis). In the
# all-reduce the two all-gathers meet half way too: each ring forwards whole blocks for H
# steps, the last step a ring's rows only (`*_gh*`: on an even axis direction 0's to the
# right, direction 1's to the left, so the chip half way round gets each once).
"""

# The first reduce-scatter's result held in VMEM (the `_held` schedules: `held=True`).
HELD_2D = """#
# The first phase's result held (this `_held` schedule): its sum, the column of blocks of
# the lane's rows, stays in the right ring's window of its last step (`hw*`), and the second
# phase sends its first block from there and adds each arrival onto its own block there:
# no copy of the column to HBM and back between the phases, and no load of the second
# phase's own blocks (a step of it then costs the four streams' sends, no loads). The
# window is written again only by the next round's phase 0, after the word that frees it
# (signalled when the next round's first step finishes, after this round's second phase).
# The second phase has `cw` = cwin x lanes windows a stream (`w1_*`, `recv1_*`), not 2 x
# lanes: a sender writes window n once its receiver freed window n - cw, cwin - 1 steps
# before, so its small steps are not paced by that word's round trip to the neighbour.
"""

AXES = ("x", "y")

AR_FROM = """# Bidirectional 2-D reduce-scatter landing in VMEM: lax.psum_scatter(x, ("x", "y"))
# (scatter_dimension=0, tiled=False: chip d = (d_x, d_y) gets the sum of every chip's block
# d, the rows x[d_x, d_y, :, :] of the [N_x, N_y, 2, 2] block layout: half, direction)."""
AR_TO = """# Bidirectional 2-D all-reduce whose reduce-scatters land in VMEM: lax.psum(x, ("x", "y")):
# x and out are [N_x, N_y, 2, 2] blocks (along x, along y, half, direction); the two
# reduce-scatters below leave chip d with block d of each half and direction summed, and
# two all-gathers (over the half's second axis, then its first; HBM to HBM into the
# neighbours' `out`, as all_reduce_2d_bidirectional.yaml) bring every block to every chip."""


def _stream_lets(h: str, order: tuple[str, ...], sfx: str, var: str, phases: int, halfway: bool = False,
                 second: str = "2 * lanes") -> list[str]:
    """Half (part) h's phase, step within the phase and phase index at point `var` (k or j):
    phases over the axes of `order` in turn (the reduce-scatters) and (an all-reduce) over
    them again in reverse (the all-gathers), N_a // 2 steps each with `halfway`, else N_a - 1;
    the window, of 2 x lanes (`second`: of the second phase)."""
    lens = [f"H_{a}" if halfway else f"(N_{a} - 1)" for a in order + order[::-1]][:phases]
    starts = ["0"]
    for ln in lens[:-1]:
        starts.append(f"{starts[-1]} + {ln}" if starts[-1] != "0" else ln)
    ph = " else ".join(f"{i} if s{sfx} < {starts[i + 1]}" for i in range(phases - 1)) + f" else {phases - 1}"
    start = " else ".join(f"{starts[i]} if p{h}{sfx} == {i}" for i in range(phases - 1)) + f" else {starts[-1]}"
    length = " else ".join(f"{lens[i]} if p{h}{sfx} == {i}" for i in range(phases - 1)) + f" else {lens[-1]}"
    return [f"p{h}{sfx}: {ph}",
            f"t{h}{sfx}: s{sfx} - ({start})",
            f"n{h}{sfx}: (rd{sfx} * ({length}) + t{h}{sfx}) * lanes + i{sfx}",
            f"w{h}{sfx}: n{h}{sfx} % " + ("(2 * lanes)" if second == "2 * lanes" else
                                          f"({second} if p{h}{sfx} == 1 else 2 * lanes)")]


def _windows_freed(finishing: str, h: str, p: int, st: str, nt: str, upstream: str) -> list[str]:
    """Stream `st`'s capacity words for phase p when a point finishes (`finishing`, part or
    half h): window n - lanes is free once point n is added (its content sent on), and at
    the phase's end window n too; both to the upstream neighbour."""
    return [f"  - when: {finishing} and p{h}j == {p} and n{h}j >= lanes   # window n - lanes is free",
            "    do:",
            f"      - signal: cap{p}_{st}",
            f"        to: {upstream}",
            f"  - when: {finishing} and p{h}j == {p} and n{h}j >= {nt} - lanes   # and, at the end, window n",
            "    do:",
            f"      - signal: cap{p}_{st}",
            f"        to: {upstream}"]


def _drain(p: int, st: str, nt: str, windows: str = "2 * lanes") -> list[str]:
    """The wait at the end for the capacity words of stream `st`'s phase p nobody waited for
    (`windows`: the phase's window count)."""
    return [f"      - sem_wait: cap{p}_{st}", f"        value: min({windows}, {nt})"]


def _sections(name: str, kind: str, axes: str, pieces: str, bufs: list[str], sems: list[str], grid: str,
              let: str, copies: list[str], cores: bool = False) -> str:
    """A schedule's YAML from `name:` to its first body entry (the barrier with every
    neighbour at the first point), the 2-D and 3-D families alike; `pieces` are the piece
    params after rows, cols and lanes; `cores`: on both TensorCores (`cores: 2`)."""
    near = ", ".join(f"{side}_{a}" for a in axes for side in ("left", "right"))
    return f"""name: {name}
collective: {kind}
axes: [{', '.join(axes)}]{chr(10) + "cores: 2" if cores else ""}
params: {{rows: 16, cols: 128, lanes: 2{", " + pieces if pieces else ""}}}
buffers:
{chr(10).join(bufs)}
semaphores:
{chr(10).join(sems)}
barrier: {{collective_id: 0}}
grid: {{k: {grid}}}
let:
{let}
copies:
{chr(10).join(copies)}
body:
  - when: k == 0
    do:
      - barrier: [{near}]"""


def reduce_scatter_2d(all_reduce: bool = False, step_loads: bool = False, halfway: bool = False,
                      held: bool = False) -> str:
    """The reduce-scatter; with `all_reduce`, the all-reduce: each half then all-gathers its
    block back, over its second axis and its first (HBM to HBM into the neighbours' `out`,
    as the library's all_reduce_2d_bidirectional does, lane by lane). With `step_loads`, a
    step's own blocks are loaded by one DMA for all its lanes (`STEP_LOADS`), else by one
    per lane, with the lane's transfer. With `halfway`, each reduce-scatter's two rings
    carry whole blocks and meet half way (`HALFWAY_2D`): N_a // 2 steps, not N_a - 1; with
    `held` too, the first reduce-scatter's result stays in its last windows for the second
    (`HELD_2D`)."""
    assert halfway or not held, "the held column is the half-way schedule's"
    phases = 4 if all_reduce else 2
    win1 = "cw" if held else "2 * lanes"   # the second phase's windows per stream
    if halfway:
        # (N_a - N_a % 2) // 2: an exact division, as a grid's expressions must be
        lets = [*[f"H_{a}: (N_{a} - N_{a} % 2) // 2" + ("   # steps of a reduce-scatter along each axis: N_x // 2"
                                                       if a == "x" else "") for a in AXES],
                ("S: 2 * (H_x + H_y)                 # steps of a round: two reduce-scatters, two all-gathers, half way"
                 if all_reduce else "S: H_x + H_y                       # steps of a round: both reduce-scatters, half way")]
    else:
        lets = [("S: 2 * (N_x + N_y) - 4           # steps of a round: two reduce-scatters, two all-gathers"
                 if all_reduce else "S: N_x + N_y - 2                  # steps of a round: both reduce-scatters")]
    lets += [
             "q: min(wrows, rows // lanes)      # rows of a piece",
             "rounds: rows // (lanes * q)",
             "total: rounds * S * lanes        # points that send",
             "L: lanes - 1                     # point k finishes point k - L"] + (
            ["cw: cwin * lanes                 # the second phase's windows (a sender runs up to cwin - 1 steps ahead)"]
            if held else [])
    for var, sfx in (("k", ""), ("j", "j")):
        if var == "j":
            lets += ["j: k - L", "finishing: j >= 0 and j < total"]
        else:
            lets += ["sending: k < total"]
        lets += [f"c{sfx}: {var} // lanes", f"i{sfx}: {var} % lanes", f"rd{sfx}: c{sfx} // S", f"s{sfx}: c{sfx} % S",
                 f"r{sfx}: (rd{sfx} * lanes + i{sfx}) * q   # first row of the piece"]
        lets += (_stream_lets("a", ("x", "y"), sfx, var, phases, halfway, win1)
                 + _stream_lets("b", ("y", "x"), sfx, var, phases, halfway, win1))
    if step_loads:
        lets += ["r0j: rdj * lanes * q             # first row of j's step (lane 0's piece)",
                 "cn: cj + 1                       # the step after j's (its own blocks are loaded once j's step is added)",
                 "rdn: cn // S", "sn: cn % S", "rn: rdn * lanes * q"]
        lets += (_stream_lets("a", ("x", "y"), "n", "cn", phases, halfway)[:2]
                 + _stream_lets("b", ("y", "x"), "n", "cn", phases, halfway)[:2])
    if held:
        lets += [f"hw{h}{sfx}: ((rd{sfx} + 1) * H_{ax} * lanes - lanes + i{sfx}) % (2 * lanes)"
                 + ("   # the window holding the lane's first result (half A's, B's: hwb)" if h == "a" and not sfx else "")
                 for sfx in ("", "j") for h, ax in (("a", "x"), ("b", "y"))]
    lets += ["ua: (na - lanes) % (2 * lanes)   # the window sent on now (half A's, B's: ub)",
             "ub: (nb - lanes) % (2 * lanes)"] if not held else [
             "ua: (na - lanes) % (cw if pa == 1 else 2 * lanes)   # the window sent on now (half A's, B's: ub)",
             "ub: (nb - lanes) % (cw if pb == 1 else 2 * lanes)"]
    lets += [
             f"n0a: rounds * {'H_x' if halfway else '(N_x - 1)'} * lanes   # phase indices of each phase (half A's; B's: n0b, n1b)",
             f"n1a: rounds * {'H_y' if halfway else '(N_y - 1)'} * lanes",
             "n0b: n1a", "n1b: n0a"]
    if all_reduce:
        bufs = ["  x:     {kind: input,  slots: [N_x, N_y, 2, 2], shape: [rows, cols], shard: [4 * N * rows, cols],",
                "          spec: [null, [x, y]]}",
                "  out:   {kind: output, slots: [N_x, N_y, 2, 2], shape: [rows, cols], shard: [4 * N * rows, cols],",
                "          spec: [null, [x, y]]}"]
    else:
        bufs = ["  x:     {kind: input,  slots: [N_x, N_y], shape: [2, 2, rows, cols], shard: [4 * N * rows, cols],",
                "          spec: [null, [x, y]]}",
                "  out:   {kind: output, shape: [2, 2, rows, cols], shard: [4 * rows, cols]}"]
    mine = "me_x, me_y, " if all_reduce else ""
    bufs += [] if held else [
            "  first_a: {kind: hbm_scratch, slots: [N_y, 2], shape: [rows, cols]}   # half A's column (me_x, :)",
            "  first_b: {kind: hbm_scratch, slots: [N_x, 2], shape: [rows, cols]}   # half B's row (:, me_y)"]
    sems, copies, send, finish, drain, first = [], [], [], [], [], []
    later: list[str] = []   # halfway: the loads of the next steps, after both streams' adds
    for h, (ax0, ax1) in (("a", ("x", "y")), ("b", ("y", "x"))):
        hi = 0 if h == "a" else 1
        fin: dict[tuple[int, int], list[str]] = {}   # halfway: (phase, direction) -> its finishing entries
        freed: dict[tuple[int, int], list[str]] = {}
        for d, (dword, back) in enumerate((("right", "left"), ("left", "right"))):
            st = f"{h}{'rl'[d]}"
            sgn = "-" if d == 0 else "+"
            for p, ax in ((0, ax0), (1, ax1)):
                if halfway:   # the right ring's block for chip me + H - t, the left's for me - H + t
                    far = f"+ H_{ax} -" if d == 0 else f"- H_{ax} +"
                    near = "- 1" if d == 0 else "+ 1"
                    lets += [f"sb{p}_{st}: (me_{ax} {far} t{h}) % N_{ax}   # the block sent now",
                             f"rb{p}_{st}: (me_{ax} {near} {far} t{h}) % N_{ax}   # the block arriving now",
                             f"jb{p}_{st}: (me_{ax} {near} {far} t{h}j) % N_{ax}   # the block that arrived at j"]
                    lets += [f"nb{p}_{st}: (me_{ax} {near} {far} t{h}n) % N_{ax}   # the block arriving after j's step"] \
                        if step_loads else []
                    continue
                lets += [f"sb{p}_{st}: (me_{ax} {sgn} t{h} {sgn} 1) % N_{ax}   # the block sent now",
                         f"rb{p}_{st}: (me_{ax} {sgn} t{h} {sgn} 2) % N_{ax}   # the block arriving now",
                         f"jb{p}_{st}: (me_{ax} {sgn} t{h}j {sgn} 2) % N_{ax}   # the block that arrived at j"]
                lets += [f"nb{p}_{st}: (me_{ax} {sgn} t{h}n {sgn} 2) % N_{ax}   # the block arriving after j's step"] \
                    if step_loads else []
            other = "N_y" if h == "a" else "N_x"
            # halfway: a window holds a whole block (both directions' rows: `two`), and `dd`
            # indexes them all; `lo` / `sub` are the rows a ring's first step sends (its own
            # direction's on an even axis, both on an odd one), `oth` the rest.
            two, dd = ("2, ", ":") if halfway else ("", str(d))
            bufs += [f"  w0_{st}:  {{kind: vmem_scratch, slots: [2 * lanes, {other}], shape: [{two}q, cols]}}",
                     (f"  xw0_{st}: {{kind: vmem_scratch, slots: [{other}], shape: [{two}lanes * q, cols]}}" if step_loads else
                      f"  xw0_{st}: {{kind: vmem_scratch, slots: [lanes, {other}], shape: [{two}q, cols]}}"),
                     f"  w1_{st}:  {{kind: vmem_scratch, slots: [{win1}], shape: [{two}q, cols]}}"]
            bufs += [] if held else [
                     (f"  xw1_{st}: {{kind: vmem_scratch, shape: [{two}lanes * q, cols]}}" if step_loads else
                      f"  xw1_{st}: {{kind: vmem_scratch, slots: [lanes], shape: [{two}q, cols]}}")]
            sems += [f"  send_{st}: {{kind: dma, shape: [lanes]}}",
                     f"  load_{st}: dma" if step_loads else f"  load_{st}: {{kind: dma, shape: [lanes]}}",
                     f"  recv0_{st}: {{kind: dma, shape: [2 * lanes]}}",
                     f"  recv1_{st}: {{kind: dma, shape: [{win1}]}}",
                     f"  out_{st}: dma",
                     f"  cap0_{st}: regular",
                     f"  cap1_{st}: regular"]

            def col(b: str, rows: str, dirs: str = dd) -> str:   # a column of blocks of x on the half's first axis
                return f"x[{b}, :, {hi}, {dirs}, {rows}]" if h == "a" else f"x[:, {b}, {hi}, {dirs}, {rows}]"

            def sub(p: int) -> str:   # the rows (directions) of a ring's first step along phase p's axis
                n_ax = f"N_{ax0 if p == 0 else ax1}"
                return f"0:1 + {n_ax} % 2" if d == 0 else f"1 - {n_ax} % 2:1 + {n_ax} % 2"
            lead = ":, " if halfway else ""   # xw's direction dim (halfway: whole blocks)

            def xw(p: int, rows: str) -> str:   # a step's own blocks in `xw{p}`, rows `rows` of each
                return f"xw0_{st}[:, {lead}{rows}]" if p == 0 else f"xw1_{st}[{lead}{rows}]"
            to0, to1 = f"{dword}_{ax0}", f"{dword}_{ax1}"
            if step_loads:   # the own blocks of a step (all its lanes), and of point j's step
                own = {"l0": (col(f"rb0_{st}", "0:lanes * q"), xw(0, "0:lanes * q")),
                       "n0": (col(f"nb0_{st}", "rn:lanes * q"), xw(0, "0:lanes * q")),
                       "n1": (f"first_{h}[nb1_{st}, {dd}, rn:lanes * q]", xw(1, "0:lanes * q")),
                       "jl0": (col(f"jb0_{st}", "r0j:lanes * q"), xw(0, "0:lanes * q")),
                       "jl1": (f"first_{h}[jb1_{st}, {dd}, r0j:lanes * q]", xw(1, "0:lanes * q"))}
                sem = {k: f"load_{st}" for k in own}
            else:   # of a lane, and of point j's lane
                own = {"l0": (col(f"rb0_{st}", "r:q"), f"xw0_{st}[i, :]"),
                       "l1": (f"first_{h}[rb1_{st}, {dd}, r:q]", f"xw1_{st}[i]"),
                       "jl0": (col(f"jb0_{st}", "rj:q"), f"xw0_{st}[ij, :]"),
                       "jl1": (f"first_{h}[jb1_{st}, {dd}, rj:q]", f"xw1_{st}[ij]")}
                sem = {k: f'"load_{st}[{"ij" if k.startswith("j") else "i"}]"' for k in own}
            if held:   # the second phase's own blocks are in the held windows
                own = {k: v for k, v in own.items() if not k.endswith("1")}
            loads = {k: f'  {st}_{k}: {{src: "{src}", dst: "{dst}", sem: {sem[k]}}}' for k, (src, dst) in own.items()}
            held_col = f"w0_{h}r[hw{h}, sb1_{st}, {sub(1)}]"   # held: the block sent first along the second axis
            w0s, w1s = (f", {sub(0)}", f", {sub(1)}") if halfway else ("", "")
            copies += [
                f"  # Stream {st}: half {h.upper()} {dword}, over {ax0} then {ax1}.",
                f'  {st}_s0: {{src: "{col(f"sb0_{st}", "r:q", sub(0) if halfway else dd)}", dst: "w0_{st}[w{h}, :{w0s}]", to: {to0},',
                f'           send_sem: "send_{st}[i]", recv_sem: "recv0_{st}[w{h}]"}}',
                f'  {st}_f0: {{src: "w0_{st}[u{h}, :]", dst: "w0_{st}[w{h}, :]", to: {to0},',
                f'           send_sem: "send_{st}[i]", recv_sem: "recv0_{st}[w{h}]"}}',
                *(loads[k] for k in ("l0", "n0") if k in loads),
                f'  {st}_s1: {{src: "{held_col if held else f"first_{h}[sb1_{st}, {sub(1) if halfway else dd}, r:q]"}", dst: "w1_{st}[w{h}{w1s}]", to: {to1},',
                f'           send_sem: "send_{st}[i]", recv_sem: "recv1_{st}[w{h}]"}}',
                f'  {st}_f1: {{src: "w1_{st}[u{h}]", dst: "w1_{st}[w{h}]", to: {to1},',
                f'           send_sem: "send_{st}[i]", recv_sem: "recv1_{st}[w{h}]"}}',
                *([] if held else [loads["n1" if step_loads else "l1"]]),
                "  # ... and point j's, as seen when finishing it (a wait needs the semaphores and the size).",
                f'  {st}_j0: {{src: "w0_{st}[w{h}j, :]", dst: "w0_{st}[w{h}j, :]", to: {to0},',
                f'           send_sem: "send_{st}[ij]", recv_sem: "recv0_{st}[w{h}j]"}}',
                loads["jl0"]]
            if halfway:   # a ring's first step: its rows only
                copies += [
                    f'  {st}_h0: {{src: "w0_{st}[w{h}j, :{w0s}]", dst: "w0_{st}[w{h}j, :{w0s}]", to: {to0},',
                    f'           send_sem: "send_{st}[ij]", recv_sem: "recv0_{st}[w{h}j]"}}',
                    f'  {st}_h1: {{src: "w1_{st}[w{h}j{w1s}]", dst: "w1_{st}[w{h}j{w1s}]", to: {to1},',
                    f'           send_sem: "send_{st}[ij]", recv_sem: "recv1_{st}[w{h}j]"}}']
            if (d == 0 or not halfway) and not held:   # halfway: the right ring's window has the sum
                copies += [f'  {st}_o0: {{src: "w0_{st}[w{h}j, :]", dst: "first_{h}[:, {dd}, rj:q]", sem: out_{st}}}']
            copies += [
                f'  {st}_j1: {{src: "w1_{st}[w{h}j]", dst: "w1_{st}[w{h}j]", to: {to1},',
                f'           send_sem: "send_{st}[ij]", recv_sem: "recv1_{st}[w{h}j]"}}',
                *([] if held else [loads["jl1"]])]
            if d == 0 or not halfway:
                copies += [f'  {st}_o1: {{src: "w1_{st}[w{h}j]", dst: "out[{mine}{hi}, {dd}, rj:q]", sem: out_{st}}}']
            if all_reduce:   # the all-gathers: over the half's second axis (phase 2), then its first (3)
                sems += [f"  recv2_{st}: {{kind: dma, shape: [2 * lanes]}}", f"  recv3_{st}: {{kind: dma, shape: [2 * lanes]}}"]
                for p, ax in ((2, ax1), (3, ax0)):
                    # halfway: whole blocks both ways, the last step (`_h`) a ring's rows only
                    # (`sub`: on an even axis direction 0's right, direction 1's left)
                    rows = [(dd, "")] + ([(sub(1 if p == 2 else 0), "h")] if halfway else [])
                    for nm, tt, rr, ii in (("g", f"t{h}", "r", "i"), ("jg", f"t{h}j", "rj", "ij")):
                        b = f"(me_{ax} {sgn} {tt}) % N_{ax}"
                        for dirs, last in rows:
                            if p == 2:
                                reg = (f"out[me_x, {b}, 0, {dirs}, {rr}:q]" if h == "a" else
                                       f"out[{b}, me_y, 1, {dirs}, {rr}:q]")
                            else:
                                reg = f"out[{b}, :, 0, {dirs}, {rr}:q]" if h == "a" else f"out[:, {b}, 1, {dirs}, {rr}:q]"
                            copies += [f'  {st}_{nm}{last}{p}: {{src: "{reg}", dst: "{reg}", to: {dword}_{ax},',
                                       f'           send_sem: "send_{st}[{ii}]", recv_sem: "recv{p}_{st}[w{h}{"j" if nm == "jg" else ""}]"}}']
                    if halfway:
                        H = f"H_{ax}"
                        send += [f"  - when: sending and p{h} == {p} and t{h} < {H} - 1", f"    do: [{{start: {st}_g{p}}}]",
                                 f"  - when: sending and p{h} == {p} and t{h} == {H} - 1   # the last step: the ring's rows",
                                 f"    do: [{{start: {st}_gh{p}}}]"]
                        finish += [f"  - when: finishing and p{h}j == {p} and t{h}j < {H} - 1",
                                   f"    do: [{{wait: {st}_jg{p}}}]",
                                   f"  - when: finishing and p{h}j == {p} and t{h}j == {H} - 1",
                                   f"    do: [{{wait: {st}_jgh{p}}}]"]
                        continue
                    send += [f"  - when: sending and p{h} == {p}", f"    do: [{{start: {st}_g{p}}}]"]
                    finish += [f"  - when: finishing and p{h}j == {p}", f"    do: [{{wait: {st}_jg{p}}}]"]
            for p, n_ax in ((0, f"N_{ax0}"), (1, f"N_{ax1}")):
                load = "" if step_loads or (held and p == 1) else f", {{start: {st}_l{p}}}"
                send += [f"  - when: sending and p{h} == {p} and n{h} >= {win1 if p == 1 else '2 * lanes'}",
                         f"    do: [{{sem_wait: cap{p}_{st}}}]",
                         f"  - when: sending and p{h} == {p} and t{h} == 0",
                         f"    do: [{{start: {st}_s{p}}}{load}]",
                         f"  - when: sending and p{h} == {p} and t{h} > 0",
                         f"    do: [{{start: {st}_f{p}}}{load}]"]
                win = f"w{p}_{st}[w{h}j, :]" if p == 0 else f"w{p}_{st}[w{h}j]"
                if step_loads:   # the step's own blocks, waited by its first lane
                    xwin = xw(p, "ij * q:q")
                    wait_own = [f"  - when: finishing and p{h}j == {p} and ij == 0   # the step's own blocks",
                                f"    do: [{{wait: {st}_jl{p}}}]", f"  - when: finishing and p{h}j == {p}", "    do:"]
                else:
                    xwin = f"xw{p}_{st}[ij, :]" if p == 0 else f"xw{p}_{st}[ij]"
                    wait_own = [f"      - wait: {st}_jl{p}"]
                nt = f"n{p}{h}"
                if not halfway:
                    finish += [f"  - when: finishing and p{h}j == {p}",
                               "    do:",
                               f"      - wait: {st}_j{p}",
                               *wait_own,
                               f'      - accumulate: "{win}"',
                               f'        src: "{xwin}"',
                               f"  - when: finishing and p{h}j == {p} and t{h}j == {n_ax} - 2   # the phase's last step: out to HBM",
                               f"    do: [{{start: {st}_o{p}}}, {{wait: {st}_o{p}}}]",
                               *_windows_freed("finishing", h, p, st, nt, f"{back}_{ax0 if p == 0 else ax1}")]
                    drain += _drain(p, st, nt)
                    continue
                # Halfway: the arrival of a ring's first step is its rows (`sub`) only: on an
                # even axis the own block is added to them and copied into the rest. The right
                # ring adds the own block at every step; the left one, at its last step, adds
                # its arrival into the right ring's window instead, which then holds the sum.
                H = f"H_{ax0 if p == 0 else ax1}"

                def at(sel: str) -> tuple[str, str]:   # (window, own block) of j's lane, rows `sel`
                    if p == 0:
                        return (f"w0_{st}[w{h}j, :, {sel}]",
                                f"xw0_{st}[:, {sel}, ij * q:q]" if step_loads else f"xw0_{st}[ij, :, {sel}]")
                    if held:   # the own block: in the window that holds the first phase's result
                        return f"w1_{st}[w{h}j, {sel}]", f"w0_{h}r[hw{h}j, jb1_{st}, {sel}]"
                    return f"w1_{st}[w{h}j, {sel}]", f"xw1_{st}[{sel}, ij * q:q]" if step_loads else f"xw1_{st}[ij, {sel}]"
                if held and p == 1:
                    xwin = f"w0_{h}r[hw{h}j, jb1_{st}]"
                (wsub, xsub), (wrest, xrest) = at(f"{d}:1"), at(f"{1 - d}:1")
                adds = f" and t{h}j < {H} - 1" if d == 1 else ""   # the left ring adds no own block at its last step
                entries = [f"  - when: finishing and p{h}j == {p} and t{h}j == 0   # a first step: its rows",
                           f"    do: [{{wait: {st}_h{p}}}]",
                           f"  - when: finishing and p{h}j == {p} and t{h}j > 0",
                           f"    do: [{{wait: {st}_j{p}}}]",
                           *([] if held and p == 1 else [
                               f"  - when: finishing and p{h}j == {p}" + (" and ij == 0   # the step's own blocks" if step_loads else ""),
                               f"    do: [{{wait: {st}_jl{p}}}]"]),
                           f"  - when: finishing and p{h}j == {p} and t{h}j == 0 and {n_ax} % 2 == 0{adds}",
                           "    do:",
                           f'      - accumulate: "{wsub}"',
                           f'        src: "{xsub}"',
                           f'      - assign: "{wrest}"',
                           f'        src: "{xrest}"',
                           f"  - when: finishing and p{h}j == {p} and (t{h}j > 0 or {n_ax} % 2 == 1){adds}",
                           "    do:",
                           f'      - accumulate: "{win}"',
                           f'        src: "{xwin}"']
                if d == 1:   # into the right ring's window: what arrived (a first step: its rows)
                    last = f"finishing and p{h}j == {p} and t{h}j == {H} - 1"
                    for cond, (w, _) in ((f"{last} and t{h}j == 0", at(sub(p))), (f"{last} and t{h}j > 0", (win, ""))):
                        entries += [f"  - when: {cond}", "    do:",
                                    f'      - accumulate: "{w.replace(f"_{st}[", f"_{h}r[", 1)}"', f'        src: "{w}"']
                    if not (held and p == 0):   # held: the first phase's sum stays in its window
                        entries += [f"  - when: {last}   # the last step: the sum, out to HBM",
                                    f"    do: [{{start: {h}r_o{p}}}, {{wait: {h}r_o{p}}}]"]
                fin[p, d] = entries
                freed[p, d] = _windows_freed("finishing", h, p, st, nt, f"{back}_{ax0 if p == 0 else ax1}")
                drain += _drain(p, st, nt, win1 if p == 1 else "2 * lanes")
            if not step_loads:
                continue
            first.append(f"      - start: {st}_l0")
            for p in (0,) if held else (0, 1):   # the step added (and its result out in HBM): load the next one's
                (later if halfway else finish).extend(
                    [f"  - when: finishing and ij == L and cn < rounds * S and p{h}n == {p}"
                     + ("   # the step added: load the next one's" if p == 0 else ""),
                     f"    do: [{{start: {st}_n{p}}}]"])
        for p in (0, 1) if halfway else ():
            finish += fin[p, 0] + fin[p, 1] + freed[p, 0] + freed[p, 1]
    finish += later
    let = "\n".join(f"  {ln}" for ln in lets)
    name, kind = ("psum_vmem_windows_2d", "psum") if all_reduce else ("psum_scatter_vmem_windows_2d", "psum_scatter")
    header = (HEADER.replace(AR_FROM, AR_TO) if all_reduce else HEADER) + (HALFWAY_2D if halfway else "") \
        + (HELD_2D if held else "")
    if step_loads:
        header = header.replace(LANE_LOADS, STEP_LOADS)
        first = ["      # The first step's own blocks (each step's are loaded once the step before is added).", *first,
                 "  # Start point k's transfers (once the receiver has a window free)."]
        finishing = """  # Finish point j: wait for its transfers and (its step's first lane) its own blocks, add,
  # send the phase's result to HBM, tell the upstream neighbour a window is free and (its
  # step's last lane) load the next step's own blocks."""
    else:
        first = ["  # Start point k's transfers (once the receiver has a window free) and the loads of the",
                 "  # blocks they will be added to."]
        finishing = """  # Finish point j: wait for its transfers and loads, add, send the phase's result to HBM,
  # and tell the upstream neighbour a window is free."""
    return f"""{header}{_sections(name, kind, "xy", "wrows: 256" + (", cwin: 4" if held else ""), bufs, sems,
                                  "total + L", let, copies)}
{chr(10).join(first + send)}
{finishing}
{chr(10).join(finish)}
  # Drain the capacity words nobody waited for.
  - when: k == total + L - 1
    do:
{chr(10).join(drain)}
"""



# -- 3-D: three parts (rotations of the axis order), six streams, three phases each ----------

HEADER_3D = """# Bidirectional 3-D reduce-scatter landing in VMEM: lax.psum_scatter(x, ("x", "y", "z"))
# (scatter_dimension=0, tiled=False: chip d = (d_x, d_y, d_z) gets the sum of every chip's
# block d, the rows x[d_x, d_y, d_z, :, :] of the [N_x, N_y, N_z, 3, 2] block layout: part,
# direction). Generated by `ringc synth` (ringc/synth/families/vmem_windows.py), the 2-D
# schedule with a third axis. Part A reduces over x, then y, then z; part B over y, z, x;
# part C over z, x, y, at once; each as a right (direction 0) and a left ring, so all six
# links of a chip carry data. A part's first phase moves planes of blocks (every block with
# one coordinate on the part's first axis), its second a column of blocks, its third one
# block. A partial sum lands in a VMEM window of the receiver (`w0_*`: a plane, `w1_*`: a
# column, `w2_*`: a block), the receiver's own blocks are loaded from HBM into `xw*` and
# added into the window, and the window is sent on from VMEM: one byte of HBM traffic per
# link byte (the load), where landing in HBM costs five. The first phase's result (the
# plane of blocks the chip owns along the part's first axis) goes to `first_*` in HBM, the
# second's (a column) to `second_*`, the third's to `out`.
#
# Phase by phase: unlike the 2-D schedule, whose rounds run every step of both phases, each
# part runs its first phase over all the rows, then its second, then its third, so each
# phase has its own pieces: `wrows` rows of a plane, `crows` of a column, `brows` of a block
# (a DMA of a column or a block of `wrows` rows would cost its issue for little data; the
# windows of the three phases are about the same size). In a phase, point k (from the
# phase's first, e_p) is lane k % lanes of step (k // lanes) % (N_a - 1) of round
# k // (lanes (N_a - 1)); point k starts lane k's transfer and finishes point j = k - (lanes
# - 1): waits for its transfer, adds, and frees a window; L = lanes - 1 idle points end a
# phase, so that its last results are in HBM before the next phase reads them. The own
# blocks of a step, all its lanes' rows, are loaded by one DMA once the step before is added.
# A round's result (its last step) goes from the windows to HBM by a DMA per lane that is
# waited lanes points later, before its window is freed (the phase's last at once, before
# the next phase reads it): the core goes on to the next round's sends meanwhile (waited at
# once, the six streams' copies out held the links idle at every round's end).
# Windows: 2 x lanes per stream and phase, used in turn (phase index n, window n % (2
# lanes)); a sender waits for its receiver's `cap` word before it writes window n >= 2
# lanes, which the receiver signals when window n - lanes is free (its content sent on by
# the send of n, waited when n finishes); the last lanes windows of a phase are freed when
# they finish, and every chip drains the words it was not waited for at the end. All six
# neighbours write our windows: a barrier with them at entry.
"""

AR3_FROM = """# Bidirectional 3-D reduce-scatter landing in VMEM: lax.psum_scatter(x, ("x", "y", "z"))
# (scatter_dimension=0, tiled=False: chip d = (d_x, d_y, d_z) gets the sum of every chip's
# block d, the rows x[d_x, d_y, d_z, :, :] of the [N_x, N_y, N_z, 3, 2] block layout: part,
# direction)."""
AR3_TO = """# Bidirectional 3-D all-reduce whose reduce-scatters land in VMEM: lax.psum(x, ("x", "y", "z")):
# x and out are [N_x, N_y, N_z, 3, 2] blocks (along x, y, z, part, direction); the three
# reduce-scatters below leave chip d with block d of each part and direction summed, and
# three all-gathers (over the part's third axis, its second, then its first: a block, a
# column, a plane; HBM to HBM into the neighbours' `out`, as all_reduce_3d_bidirectional.yaml)
# bring every block to every chip. In those a stream waits for the piece it forwards (point
# n - lanes) just before it starts point n, so a step costs it one DMA issue, not the six
# streams' waits and starts; each point has its own receive semaphore (the upstream
# neighbour is not held back by our waits), and `lanes` points after each all-gather wait
# for its last pieces."""

DIRECT_3D = """#
# The third phase sent directly (this `_direct` schedule): no ring and no `w2_*` windows for
# the block. A part sends, at once, each chip along its third axis c that chip's block of
# our column (`second_*`, both directions, every row) straight into its VMEM `stage_*` slot
# of ours (the farthest first, so the long routes are on their way while the short ones
# are issued), then waits for the N_c - 1 arrivals in the same order, adds each into our
# own block's slot and copies the sum to `out`: N_c - 1 DMA issues per part, where the ring
# took N_c - 1 dependent steps of a DMA per stream and lane (a step of little data: the
# phase moves 1 / (N_a N_b) of the bytes), for more link bytes (each block goes its
# distance, not one hop). The stage holds whole blocks, so its VMEM grows with V. The
# block of the chip half way round (an axis of 4 to 8) would go the positive way, which
# then carries more than the negative one: direction 1's rows of it go one hop back into
# the `relay_*` buffer of the chip before, which forwards them the negative way (`rl*`:
# where this holds; `fw*`: the owner, N / 2 + 1 on from the relay).
"""

HELD_3D = """#
# The plane held in VMEM (this `_held_direct` schedule): the first phase is one round, pieces of
# rows / lanes rows (so its windows grow with V: sized for the size in the header), and its
# result, the plane this chip owns along the part's first axis, stays in the windows of its
# last step (`f*`: window f + i holds lane i's rows). The second phase sends its first
# column from there and adds each arriving column onto the plane's own column there: no
# copy of the plane to HBM and back between the phases (six streams' copies at once, HBM
# bound, with the links idle), no load of the column's own blocks, and the second phase
# starts as the first's last lanes are added (no L idle points between them). Nothing
# writes the plane's windows again in the call: the first phase has no later point. The
# column has `cw` = cwin x lanes windows (`w1_*`), not 2 x lanes: a sender writes window n
# once its receiver freed window n - cw, cwin - 1 steps before, so with cwin > 2 the
# column's small steps are not paced by that word's round trip to the neighbour.
"""

DIRECT_AR_3D = """#
# The first all-gather is direct too: each part sends its summed block (both directions,
# every row) straight into the `out` of every chip along its third axis (HBM to HBM, the
# farthest first), then waits for their N_c - 1 blocks, before the column's all-gather.
"""

CORES_3D = """#
# On both TensorCores (`cores: 2`, v5p): core 0 runs the three right rings (direction 0)
# and core 1 the three left ones, each with its own VMEM (64 MiB: the windows of three
# streams, so each twice the size), its own DMA issue and its own semaphores; the chip's
# HBM (x, out, first_*, second_*) is shared, each core's rows its own direction's. `dir`,
# `fwd_a` and `back_a` are the core's direction, next chip and chip before along axis a;
# every remote copy and signal goes to the same core of that chip. One core issuing the
# six streams' DMAs was the bound on one core (the issue time, not the links).
"""
PARTS_3D = (("a", ("x", "y", "z")), ("b", ("y", "z", "x")), ("c", ("z", "x", "y")))
WHAT_3D = "rotated-axis bidirectional 3-D reduce-scatter whose partial sums land in VMEM windows, with a capacity handshake"
LANES_3D = (1, 2, 4)   # the 3-D candidates' lanes (their pieces: `window_rows`)
# The direct candidates' lanes: with four, the windows leave plane pieces of 16 rows and
# the DMA issues bind (at 256 MiB: 74.7% of the bound on v5p:8x8x8 against 84.3% with two,
# 61.8% on v5p:16x16x16), so they are not priced (the search's time on 16x16x16).
DIRECT_LANES_3D = (1, 2)
# The pieces of the second and third phases, (c, b): c w rows of a column and b w of a block
# for planes' pieces of w rows. With the first, a column's windows are half a plane's on 4x4x4;
# with the second, at the same VMEM, the column and block phases issue half the DMAs (at
# 256 MiB on v5p:4x4x4: 88.4% of the bound against 87.5% for the reduce-scatter).
PIECES_3D = ((2, 4), (4, 8))
HELD_LANES_3D = (2,)   # the `_held_direct` candidates' lanes (the schedule takes 1 or 2)
# Their column's windows per lane (`cwin`): with two, a sender writes a window its receiver
# freed one grid point before, and on v5p:16x16x16 at 256 MiB the column's steps went at the
# pace of that handshake round the ring (a signal and a point's run a hop: 2.5 us a point,
# 91 us for the phase's 2 x 15 points): with four, at the pace of the transfers and adds
# (psum_scatter 87.4% -> 90.4% of the bound, psum 89.9% -> 91.4%). On v5p:8x8x8 two stay
# ahead at 256 MiB (95.0% against 94.2%), and four win at 4 and 64 MiB (77.6 us against
# 87.6, 155 us against 162; v5p:4x4x4 at 4 MiB 38.2 us against 40.2): both are priced.
HELD_CWIN_3D = (2, 4)


def _region(buf: str, index: dict[str, str], axes: tuple[str, ...], tail: str) -> str:
    """`buf[...]` indexed along `axes` (in that order) by `index` (an axis not in it: `:`),
    then `tail` (the part, the direction, the rows)."""
    return f"{buf}[{', '.join(index.get(a, ':') for a in axes)}, {tail}]"


def reduce_scatter_3d(all_reduce: bool = False, direct: bool = False, cores: bool = False,
                      held: bool = False) -> str:
    """The 3-D reduce-scatter (the 2-D one's streams and handshake, `reduce_scatter_2d`, with
    a third part and a third phase per part, run phase by phase with pieces of their own);
    with `all_reduce`, the all-reduce: each part then all-gathers its block back over its
    third axis, its second and its first (HBM to HBM into the neighbours' `out`, lane by
    lane, in pieces of rows / lanes). With `direct`, each part's third phase (one block) is
    not a ring but one round of direct sends along the axis (`_direct_block`). With `cores`
    (`cores: 2`, v5p), each TensorCore runs one direction's three streams (core 0 the right
    rings, core 1 the left) with its own VMEM, DMA issue and semaphores: the same text per
    stream, its direction the core's (`dir`, `fwd_a`, `back_a`). With `held`, the plane's
    phase is one round (pieces of rows / lanes) and its result stays in its last windows:
    the column's phase sends from them and adds onto them, with no copy to HBM between the
    phases and no load of the column's own blocks (`HELD_3D`)."""
    phases = 6 if all_reduce else 3
    rings = (0, 1) if direct else (0, 1, 2)   # the phases reduced round a ring
    lets = (["q0: rows // lanes                          # rows of a piece: of a plane (phase 0: one round), a column, a block",
             "q1: q0"] if held else
            ["q0: min(wrows, rows // lanes)              # rows of a piece: of a plane (phase 0), a column, a block",
             "q1: min(crows, rows // lanes)"]) + [
            ("q2: rows                                   # the direct phase: whole blocks" if direct else
             "q2: min(brows, rows // lanes)")]
    if all_reduce:
        lets += ["q3: rows // lanes                          # the all-gathers (HBM to HBM): one round",
                 "q4: q3", "q5: q3"]
    lets += ["L: lanes - 1                               # point k finishes point k - L"]
    if held:
        lets += ["cw: cwin * lanes                           # the column's windows (a sender runs up to cwin - 1 steps ahead)"]
    if cores:
        lets += core_lets("xyz")

    def windows(p: int) -> str:   # phase p's window count: the held column's `cw`, else 2 x lanes
        return "cw" if held and p == 1 else "2 * lanes"
    for h, order in PARTS_3D:
        axes = (order + order[::-1])[:phases]
        for p, ax in enumerate(axes):
            lets.append((f"n{p}{h}: 2 * (N_{ax} - 1)" + (f"                             # {'the direct phase: sends, then adds' if p == 2 else 'the direct all-gather: sends, then waits'}"
                                                          if h == "a" else "")) if p in (2, 3) and direct else
                        f"n{p}{h}: rows // (lanes * q{p}) * (N_{ax} - 1) * lanes"
                        + ("   # points of each phase (part A's; B's: n0b .., C's)" if h == "a" and p == 0 else ""))
        lets.append(f"e0{h}: 0" + ("                                   # where each phase starts (L points apart; lanes after an all-gather)" if h == "a" else ""))
        for p in range(1, phases):   # an all-gather phase (3 ..) waits for its last sends in `lanes` points after it
            lets.append(f"e{p}{h}: e{p - 1}{h} + n{p - 1}{h}" + ("" if held and p == 1 else f" + {'lanes' if p - 1 >= 3 else 'L'}"))
        if held:
            lets.append(f"f{h}: (N_{order[0]} - 2) % 2 * lanes" + ("                  # the window of the plane's last step, lane 0"
                                                                 if h == "a" else ""))
        lets.append(f"total{h}: e{phases - 1}{h} + n{phases - 1}{h} + {'lanes' if all_reduce else 'L'}")
    lets.append("T: max(totala, max(totalb, totalc))")
    lets.append("j: k - L")
    for var, sfx in (("k", ""), ("j", "j")):
        for h, order in PARTS_3D:
            axes = (order + order[::-1])[:phases]
            ph = " else ".join(f"{p} if {var} < e{p + 1}{h}" for p in range(phases - 1)) + f" else {phases - 1}"
            pick = lambda fmt: " else ".join(f"{fmt(p)} if p{h}{sfx} == {p}" for p in range(phases - 1)) + f" else {fmt(phases - 1)}"
            lets += [f"p{h}{sfx}: {ph}",
                     f"n{h}{sfx}: {var} - ({pick(lambda p: f'e{p}{h}')})   # the phase index",
                     f"{'sending' if var == 'k' else 'finishing'}{h}: {var} >= 0 and n{h}{sfx} < ({pick(lambda p: f'n{p}{h}')})",
                     f"len{h}{sfx}: ({pick(lambda p: f'N_{axes[p]}')}) - 1",
                     f"i{h}{sfx}: n{h}{sfx} % lanes",
                     f"t{h}{sfx}: n{h}{sfx} // lanes % len{h}{sfx}",
                     f"q{h}{sfx}: {pick(lambda p: f'q{p}')}",
                     f"r0{h}{sfx}: n{h}{sfx} // lanes // len{h}{sfx} * lanes * q{h}{sfx}   # first row of the step's lane 0",
                     f"r{h}{sfx}: r0{h}{sfx} + i{h}{sfx} * q{h}{sfx}   # first row of the piece",
                     f"w{h}{sfx}: n{h}{sfx} % " + (f"(cw if p{h}{sfx} == 1 else 2 * lanes)" if held else "(2 * lanes)")]
    for h, _ in PARTS_3D:   # the step after j's (its blocks are loaded once j's step is added)
        lets += [f"tn{h}: (n{h}j + 1) // lanes % len{h}j", f"rn{h}: (n{h}j + 1) // lanes // len{h}j * lanes * q{h}j"]
    lets += [f"u{h}: (n{h} - lanes) % " + (f"(cw if p{h} == 1 else 2 * lanes)" if held else "(2 * lanes)")
             + ("   # the window sent on now (part A's; B's: ub, C's: uc)" if h == "a" else "") for h, _ in PARTS_3D]
    xyz = ("x", "y", "z")
    if all_reduce:
        bufs = ["  x:     {kind: input,  slots: [N_x, N_y, N_z, 3, 2], shape: [rows, cols], shard: [6 * N * rows, cols],",
                "          spec: [null, [x, y, z]]}",
                "  out:   {kind: output, slots: [N_x, N_y, N_z, 3, 2], shape: [rows, cols], shard: [6 * N * rows, cols],",
                "          spec: [null, [x, y, z]]}"]
    else:
        bufs = ["  x:     {kind: input,  slots: [N_x, N_y, N_z], shape: [3, 2, rows, cols], shard: [6 * N * rows, cols],",
                "          spec: [null, [x, y, z]]}",
                "  out:   {kind: output, shape: [3, 2, rows, cols], shard: [6 * rows, cols]}"]
    mine = "me_x, me_y, me_z, " if all_reduce else ""
    for h, order in PARTS_3D:
        plane = tuple(a for a in xyz if a != order[0])
        own = ", ".join(f"me_{a}" if a == order[0] else ":" for a in xyz)
        if not held:   # (held: the plane stays in its windows, `w0_*`)
            bufs.append(f"  first_{h}: {{kind: hbm_scratch, slots: [{', '.join(f'N_{a}' for a in plane)}, 2], "
                        f"shape: [rows, cols]}}   # part {h.upper()}'s plane ({own})")
        bufs.append(f"  second_{h}: {{kind: hbm_scratch, slots: [N_{order[2]}, 2], shape: [rows, cols]}}"
                    f"   # its column ({', '.join(':' if a == order[2] else f'me_{a}' for a in xyz)})")
    sems, copies, send, finish, drain = [], [], [], [], []
    if held:   # the direct phase waits for the column's last copies of lanes 1 or 2 (below)
        sems += ["  # one lane or two: any other count does not divide exactly here, and is refused by this name",
                 "  lanes_1_or_2: {kind: regular, shape: [2 // lanes]}"]
    for hi, (h, order) in enumerate(PARTS_3D):
        plane = tuple(a for a in xyz if a != order[0])
        # The buffers each phase reads from and writes to, the axes they are indexed by, and
        # the slots of its windows beyond the window index (a plane, a column, one block).
        src_of = [("x", xyz), (f"first_{h}", plane), (f"second_{h}", (order[2],))]
        dst_of = [f"first_{h}[:, :, DIR, ROWS]", f"second_{h}[:, DIR, ROWS]", f"out[{mine}{hi}, DIR, ROWS]"]
        extra = [[f"N_{a}" for a in plane], [f"N_{order[2]}"], []]
        # (direction index, the next chip's word, the one before's); with `cores`, the core's
        directions = [("core", "fwd", "back")] if cores else [(0, "right", "left"), (1, "left", "right")]
        for d, dword, back in directions:
            st = h if cores else f"{h}{'rl'[d]}"
            sgn = "-" if d == 0 else "+"

            def moved(ax: str, steps: str) -> str:   # the block `steps` along this stream's ring
                return (f"(me_{ax} + dir * ({steps})) % N_{ax}" if cores else
                        f"(me_{ax} {sgn} {steps.replace(' + ', f' {sgn} ')}) % N_{ax}")
            for p, ax in ((p, order[p]) for p in rings):
                lets += [f"sb{p}_{st}: {moved(ax, f't{h} + 1')}   # the block sent now",
                         f"rb{p}_{st}: {moved(ax, f't{h} + 2')}   # the block arriving now",
                         f"jb{p}_{st}: {moved(ax, f't{h}j + 2')}   # the block that arrived at j",
                         f"nb{p}_{st}: {moved(ax, f'tn{h} + 2')}   # the block arriving after j's step"]
            for p in rings:
                slots = ", ".join([windows(p)] + extra[p])
                xslots = f"slots: [{', '.join(extra[p])}], " if extra[p] else ""
                bufs.append(f"  w{p}_{st}:  {{kind: vmem_scratch, slots: [{slots}], shape: [q{p}, cols]}}")
                if not (held and p == 1):
                    bufs.append(f"  xw{p}_{st}: {{kind: vmem_scratch, {xslots}shape: [lanes * q{p}, cols]}}")
            sems += [f"  send_{st}: {{kind: dma, shape: [lanes]}}",
                     f"  load_{st}: dma",
                     *(f"  recv{p}_{st}: {{kind: dma, shape: [{windows(p)}]}}" for p in rings),
                     f"  out_{st}: {{kind: dma, shape: [lanes]}}",
                     *(f"  cap{p}_{st}: regular" for p in rings)]

            def win(p: int, w: str) -> str:   # window w of phase p, all its blocks
                return f"w{p}_{st}[{', '.join([w] + [':'] * len(extra[p]))}]"

            def xwin(p: int, rows: str) -> str:   # the step's own blocks (all lanes), or rows of them
                return f"xw{p}_{st}[{', '.join([':'] * len(extra[p]) + [rows])}]"

            def held_win(b: str, lane: str) -> str:   # lane `lane`'s column b of the plane's last windows
                return f"w0_{st}[f{h} + {lane}, {', '.join(b if a == order[1] else ':' for a in plane)}]"

            def src(p: int, b: str, rows: str) -> str:   # the blocks of phase p's step with block b on its axis
                buf, axes = src_of[p]
                tail = f"{hi}, {d}, {rows}" if p == 0 else f"{d}, {rows}"
                return _region(buf, {order[p]: b}, axes, tail)

            copies += [f"  # Stream {st}: part {h.upper()} {dword}, over {', '.join(order[:2])} then {order[2]}."]
            for p, ax in ((p, order[p]) for p in rings):
                to = f"{dword}_{ax}"
                first = held_win(f"sb{p}_{st}", f"i{h}") if held and p == 1 else src(p, f"sb{p}_{st}", f"r{h}:q{p}")
                copies += [
                    f'  {st}_s{p}: {{src: "{first}", dst: "{win(p, f"w{h}")}", to: {to},',
                    f'           send_sem: "send_{st}[i{h}]", recv_sem: "recv{p}_{st}[w{h}]"}}',
                    f'  {st}_f{p}: {{src: "{win(p, f"u{h}")}", dst: "{win(p, f"w{h}")}", to: {to},',
                    f'           send_sem: "send_{st}[i{h}]", recv_sem: "recv{p}_{st}[w{h}]"}}']
                if not (held and p == 1):   # held: the own blocks are the plane's windows, not loaded
                    copies += [
                        f'  {st}_l{p}: {{src: "{src(p, f"rb{p}_{st}", f"0:lanes * q{p}")}", dst: "{xwin(p, f"0:lanes * q{p}")}", sem: load_{st}}}',
                        f'  {st}_n{p}: {{src: "{src(p, f"nb{p}_{st}", f"rn{h}:lanes * q{p}")}", dst: "{xwin(p, f"0:lanes * q{p}")}", sem: load_{st}}}']
            copies += ["  # ... and point j's, as seen when finishing it (a wait needs the semaphores and the size)."]
            for p, ax in ((p, order[p]) for p in rings):
                to = f"{dword}_{ax}"
                # the result of phase index n (a round's last step) to HBM: its rows, as r{h}j's
                dst = dst_of[p].replace("DIR", str(d)).replace("ROWS", f"(n // lanes // len{h}j * lanes + n % lanes) * q{p}:q{p}")
                copies += [
                    f'  {st}_j{p}: {{src: "{win(p, f"w{h}j")}", dst: "{win(p, f"w{h}j")}", to: {to},',
                    f'           send_sem: "send_{st}[i{h}j]", recv_sem: "recv{p}_{st}[w{h}j]"}}']
                if not (held and p == 1):
                    copies.append(f'  {st}_jl{p}: {{src: "{src(p, f"jb{p}_{st}", f"r0{h}j:lanes * q{p}")}", '
                                  f'dst: "{xwin(p, f"0:lanes * q{p}")}", sem: load_{st}}}')
                if not (held and p == 0):   # held: the plane's result stays in its windows
                    copies.append(f'  {st}_o{p}(n): {{src: "{win(p, f"n % ({windows(p)})")}", dst: "{dst}", sem: "out_{st}[n % lanes]"}}')
                if held and p == 1:   # the column's last copy of lane i (one round), as the direct phase waits for it
                    last = dst_of[p].replace("DIR", str(d)).replace("ROWS", "i * q1:q1")
                    copies.append(f'  {st}_ol1(i): {{src: "{win(p, f"(n1{h} - lanes + i) % cw")}", dst: "{last}", '
                                  f'sem: "out_{st}[i]"}}')
            if all_reduce:   # the all-gathers: over the part's third axis (phase 3), its second (4), its first (5)
                # a receive semaphore per point (one round: q3 = rows / lanes): the upstream
                # neighbour is not held back by our waits, so it may run steps ahead
                gathers = ((4, 1), (5, 0)) if direct else ((3, 2), (4, 1), (5, 0))   # direct: phase 3 is `_direct_gather`
                sems += [f"  recv{p}_{st}: {{kind: dma, shape: [(N_{order[m]} - 1) * lanes]}}" for p, m in gathers]
                for p, m in gathers:
                    # Point n of the phase (its step, lane and rows, as t, i and r at n); the
                    # stream waits for n - lanes (what it forwards now) just before it starts
                    # n, so its chain is one DMA issue a step, not the six streams' waits and starts.
                    ax = order[m]
                    index = {a: f"me_{a}" for a in order[:m]}   # axes not yet gathered: ours; gathered: all
                    index[ax] = moved(ax, f"n // lanes % len{h}")
                    reg = _region("out", index, xyz, f"{hi}, {d}, (n // lanes // len{h} * lanes + n % lanes) * q{p}:q{p}")
                    copies += [f'  {st}_g{p}(n): {{src: "{reg}", dst: "{reg}", to: {dword}_{ax},',
                               f'           send_sem: "send_{st}[n % lanes]", recv_sem: "recv{p}_{st}[n]"}}']
                    send += [f"  - when: p{h} == {p} and n{h} >= lanes and n{h} < n{p}{h} + lanes"
                             "   # the piece forwarded now (or, after the phase, its last ones) arrived",
                             f"    do: [{{wait: {st}_g{p}(n=n{h} - lanes)}}]",
                             f"  - when: sending{h} and p{h} == {p}", f"    do: [{{start: {st}_g{p}(n=n{h})}}]"]
            for p, ax in ((p, order[p]) for p in rings):
                send += [f"  - when: sending{h} and p{h} == {p} and n{h} >= {windows(p)}",
                         f"    do: [{{sem_wait: cap{p}_{st}}}]",
                         f"  - when: sending{h} and p{h} == {p} and t{h} == 0",
                         f"    do: [{{start: {st}_s{p}}}]",
                         f"  - when: sending{h} and p{h} == {p} and t{h} > 0",
                         f"    do: [{{start: {st}_f{p}}}]"]
                loads, outs = not (held and p == 1), not (held and p == 0)
                if loads:
                    send += [f"  - when: sending{h} and p{h} == {p} and n{h} == 0   # the phase's first own blocks",
                             f"    do: [{{start: {st}_l{p}}}]"]
                nt = f"n{p}{h}"
                own = xwin(p, f"i{h}j * q{p}:q{p}") if loads else held_win(f"jb{p}_{st}", f"i{h}j")
                finish += [f"  - when: finishing{h} and p{h}j == {p}",
                           "    do:",
                           f"      - wait: {st}_j{p}"]
                if loads:
                    finish += [f"  - when: finishing{h} and p{h}j == {p} and i{h}j == 0   # the step's own blocks",
                               f"    do: [{{wait: {st}_jl{p}}}]"]
                finish += [f"  - when: finishing{h} and p{h}j == {p}",
                           "    do:",
                           f'      - accumulate: "{win(p, f"w{h}j")}"',
                           f'        src: "{own}"']
                if loads:
                    finish += [f"  - when: finishing{h} and p{h}j == {p} and i{h}j == L and n{h}j + 1 < n{p}{h}"
                               "   # the step added: load the next one's",
                               f"    do: [{{start: {st}_n{p}}}]"]
                if outs:
                    finish += [f"  - when: finishing{h} and p{h}j == {p} and t{h}j == 0 and n{h}j >= lanes"
                               "   # the round before's result in HBM before its window is freed",
                               f"    do: [{{wait: {st}_o{p}(n=n{h}j - lanes)}}]",
                               f"  - when: finishing{h} and p{h}j == {p} and t{h}j == N_{ax} - 2   # a round's last step: out to HBM",
                               f"    do: [{{start: {st}_o{p}(n=n{h}j)}}]",
                               *([] if held and p == 1 else   # held: the column's last, by the direct phase
                                 [f"  - when: finishing{h} and p{h}j == {p} and t{h}j == N_{ax} - 2 and n{h}j >= {nt} - lanes"
                                  "   # the phase's last: waited now",
                                  f"    do: [{{wait: {st}_o{p}(n=n{h}j)}}]"])]
                if held and p == 1:   # all streams' last copies in flight at once, waited before the first send
                    send += [f"  - when: sending{h} and p{h} == 2 and n{h} == 0"
                             "   # the column's last copies to HBM (lanes 1 or 2), read by the direct sends",
                             f"    do: [{{wait: {st}_ol1(i=0)}}]",
                             f"  - when: sending{h} and p{h} == 2 and n{h} == 0 and L == 1",
                             f"    do: [{{wait: {st}_ol1(i=L)}}]"]
                finish += _windows_freed(f"finishing{h}", h, p, st, nt, f"{back}_{ax}")
                drain += _drain(p, st, nt, windows(p))
        if direct:
            more = _direct_block(h, hi, order, mine, cores)
            if all_reduce:
                more = [a + b for a, b in zip(more, _direct_gather(h, hi, order, cores))]
            for part, extra_lines in zip((lets, bufs, sems, copies, send, finish), more):
                part += extra_lines
    let = "\n".join(f"  {ln}" for ln in lets)
    name, kind = ("psum_vmem_windows_3d", "psum") if all_reduce else ("psum_scatter_vmem_windows_3d", "psum_scatter")
    header = HEADER_3D.replace(AR3_FROM, AR3_TO) if all_reduce else HEADER_3D
    if held:
        header += HELD_3D
    if direct:
        header += DIRECT_3D + (DIRECT_AR_3D if all_reduce else "")
    if cores:
        header += CORES_3D
    pieces = ", ".join((["cwin: 2"] if held else ["wrows: 64", "crows: 128"]) + ([] if direct else ["brows: 256"]))
    return f"""{header}{_sections(name, kind, "xyz", pieces, bufs, sems, "T", let, copies, cores)}
  # Start point k's transfers (once the receiver has a window free) and the loads of the
  # blocks they will be added to.
{chr(10).join(send)}
  # Finish point j: wait for its transfers and loads, add, send the phase's result to HBM,
  # and tell the upstream neighbour a window is free.
{chr(10).join(finish)}
  # Drain the capacity words nobody waited for.
  - when: k == T - 1
    do:
{chr(10).join(drain)}
"""

def _direct_block(h: str, hi: int, order: tuple[str, ...], mine: str, cores: bool = False) -> tuple[list[str], ...]:
    """Part h's third phase as one round of direct sends (`reduce_scatter_3d(direct=True)`):
    the lets, buffers, semaphores, copies, and the body entries of the sending point k and
    of the finishing point j. Its column (`second_h`, both directions, all rows) holds a
    block for each chip along the part's third axis c. The phase has 2 (N_c - 1) points:
    point n < N_c - 1 sends the block of the chip at offset o(n) (`templates.far_first`:
    the farthest first) straight into that chip's VMEM `stage_h` slot of ours; point
    N_c - 1 + m waits for the block that arrived from offset -o(m) (sent at its point m, as
    ours) and adds it into our own slot (loaded at the phase's first point); the last copies
    the sum to `out`. Every send is issued before the first wait, so the transfers overlap:
    one DMA issue per peer and part, instead of N_c - 1 dependent ring steps of a DMA per
    stream and lane each, for about N_c / 4 times the link bytes of the ring (the sum of the
    distances), on a phase that moves 1 / (N_a N_b) of the data. With `cores`, each core
    sends and adds its own direction's rows (`stage_h` holds a block per chip, one direction).

    The half-way chip (offset N_c / 2, N_c even, 4 to 8) is reached both ways round,
    and a DMA there is routed the positive way: the positive links would carry N_c^2 / 8 +
    N_c / 4 block-hops of each chip's column and the negative ones N_c^2 / 8 - N_c / 4. So
    direction 1's rows of that block (core 1's, on both cores) go the other way: one hop
    back into the `relay_h` buffer of the chip before us, which forwards them at its point
    `RELAY_POINT` to their owner, N_c / 2 - 1 hops on the negative way (`rl`, `fw`): both
    ways then carry N_c^2 / 8 (on v5p:8x8x8 the busiest link's direct phase 20 -> 16
    half-blocks; psum_scatter at 256 MiB 94.3% -> 94.9% of the bound). Not on an axis of 16:
    there the forward's 7 hops land after the direct blocks and the phase waits for them
    (v5p:16x16x16 87.3% -> 87.2%)."""
    c = order[2]
    d, s = (", core", "") if cores else (", :", ", :")   # the direction of `second`/`out`, of `stage`
    target = row_major("xyz", lambda a: f"(me_{a} + o{h}) % N_{a}" if a == c else f"me_{a}")
    ahead = row_major("xyz", lambda a: f"(me_{a} + N_{a} // 2 + 1) % N_{a}" if a == c else f"me_{a}")
    lets = [f"o{h}: {far_first(f'n{h}', f'N_{c}')}   # the direct phase's offset along {c} at k (farthest first)"
            + ("; part B's: ob, .." if h == "a" else ""),
            f"m{h}: n{h}j - (N_{c} - 1)   # the peer whose block j adds (j's offset: -o{h}j)",
            f"o{h}j: {far_first(f'm{h}', f'N_{c}')}",
            f"to{h}: {target}   # the chip at offset o{h} along {c}",
            f"rl{h}: N_{c} % 2 == 0 and N_{c} >= 4 and N_{c} <= 8" + (" and core == 1" if cores else "")
            + "   # direction 1's block for the half-way chip relayed the negative way",
            f"fw{h}: {ahead}   # where the relay forwards: offset N_{c} / 2 + 1 along {c}"]
    own = f"me_{c}"
    one = "" if cores else ", 1"   # direction 1's rows (on both cores, core 1's: all it has)
    bufs = [f"  stage_{h}: {{kind: vmem_scratch, slots: [N_{c}{'' if cores else ', 2'}], shape: [rows, cols]}}"
            f"   # part {h.upper()}'s block of each chip along {c} (ours: the sum)",
            f"  relay_{h}: {{kind: vmem_scratch, shape: [rows, cols]}}"
            f"   # direction 1's rows of the next chip's half-way block, forwarded"]
    sems = [f"  dsend_{h}: dma", f"  drecv_{h}: {{kind: dma, shape: [N_{c} - 1]}}", f"  dlocal_{h}: dma",
            f"  rrecv_{h}: dma", f"  fsend_{h}: dma", f"  frecv_{h}: dma"]
    out = f"out[{mine}{hi}{d}]" if mine else f"out[{hi}{d}]"
    copies = [f"  # Part {h.upper()}'s direct phase along {c}: our block of the chip at offset o, into its slot of ours.",
              f'  {h}_d: {{src: "second_{h}[(me_{c} + o{h}) % N_{c}{d}]", dst: "stage_{h}[{own}{s}]", to: to{h},',
              f'         send_sem: dsend_{h}, recv_sem: "drecv_{h}[n{h}]"}}',
              f'  {h}_dj: {{src: "stage_{h}[{own}{s}]", dst: "stage_{h}[{own}{s}]", to: to{h},   # point j\'s, to wait',
              f'          send_sem: dsend_{h}, recv_sem: "drecv_{h}[m{h}]"}}']
    if not cores:   # direction 0's rows of the half-way block, sent directly
        copies += [f'  {h}_dh: {{src: "second_{h}[(me_{c} + o{h}) % N_{c}, 0]", dst: "stage_{h}[{own}, 0]", to: to{h},',
                   f'          send_sem: dsend_{h}, recv_sem: "drecv_{h}[n{h}]"}}',
                   f'  {h}_dhj: {{src: "stage_{h}[{own}, 0]", dst: "stage_{h}[{own}, 0]", to: to{h},',
                   f'           send_sem: dsend_{h}, recv_sem: "drecv_{h}[m{h}]"}}']
    copies += [f'  {h}_r: {{src: "second_{h}[(me_{c} + o{h}) % N_{c}, 1]", dst: "relay_{h}", to: left_{c},'
               f'   # ... direction 1\'s, to the relay',
               f'         send_sem: dsend_{h}, recv_sem: rrecv_{h}}}',
               f'  {h}_rf: {{src: "relay_{h}", dst: "stage_{h}[(me_{c} + 1) % N_{c}{one}]", to: fw{h},'
               f'   # the relay: the next chip\'s rows to their owner',
               f'          send_sem: fsend_{h}, recv_sem: frecv_{h}}}',
               f'  {h}_fj: {{src: "relay_{h}", dst: "stage_{h}[(me_{c} + N_{c} // 2) % N_{c}{one}]", to: fw{h},'
               f'   # ... as its owner waits for them',
               f'          send_sem: fsend_{h}, recv_sem: frecv_{h}}}',
               f'  {h}_own: {{src: "second_{h}[{own}{d}]", dst: "stage_{h}[{own}{s}]", sem: dlocal_{h}}}',
               f'  {h}_out: {{src: "stage_{h}[{own}{s}]", dst: "{out}", sem: dlocal_{h}}}']
    send = [when(f"sending{h} and p{h} == 2 and n{h} == 0   # the direct phase: our own block, then every peer's",
                 f"start: {h}_own"),
            when(f"sending{h} and p{h} == 2 and n{h} < N_{c} - 1 and not (n{h} == 0 and rl{h})", f"start: {h}_d"),
            when(f"sending{h} and p{h} == 2 and n{h} == 0 and rl{h}   # the half-way block: a relay for direction 1",
                 *([] if cores else [f"start: {h}_dh"]), f"start: {h}_r"),
            when(f"sending{h} and p{h} == 2 and n{h} == {RELAY_POINT} and rl{h}"
                 "   # the next chip's relayed rows (sent at its point 0), on to their owner",
                 f"wait_recv: {h}_r", f"start: {h}_rf")]
    add = accumulate(f'"stage_{h}[{own}{s}]"', f'"stage_{h}[(me_{c} - o{h}j) % N_{c}{s}]"')
    finish = [when(f"finishing{h} and p{h}j == 2 and m{h} == 0", f"wait: {h}_own"),
              when(f"finishing{h} and p{h}j == 2 and m{h} >= 0 and not (m{h} == 0 and rl{h})"
                   "   # the block from offset -o (sent at its point m, as ours)", f"wait: {h}_dj", add),
              when(f"finishing{h} and p{h}j == 2 and m{h} == 0 and rl{h}   # the half-way block, in its parts",
                   *([] if cores else [f"wait: {h}_dhj"]), f"wait_send: {h}_r", f"wait_recv: {h}_fj", add),
              when(f"finishing{h} and p{h}j == 2 and m{h} == N_{c} - 2 and rl{h}", f"wait_send: {h}_rf"),
              when(f"finishing{h} and p{h}j == 2 and m{h} == N_{c} - 2   # the sum to HBM",
                   f"start: {h}_out", f"wait: {h}_out")]
    return lets, bufs, sems, copies, send, finish


# The direct phase's point at which a relay forwards the rows it got at its neighbour's
# point 0 (one hop and a block later: two points of three parts' sends).
RELAY_POINT = 1


# The direct candidates' `stage` slots hold whole blocks (every row), so their VMEM grows
# with V: their windows leave room for the stage at this size (at a larger V they do not
# fit, and the search does not take them there).
DIRECT_SIZED = 256 * 2**20


def _direct_gather(h: str, hi: int, order: tuple[str, ...], cores: bool = False) -> tuple[list[str], ...]:
    """The all-reduce's first all-gather (phase 3, over part h's third axis c) as one round
    of direct sends, as `_direct_block` (its lets, buffers, semaphores, copies, send and
    finish entries): point n < N_c - 1 of the phase sends our block (both directions, every
    row) straight into the `out` of the chip at offset o(n) (HBM to HBM, the farthest first),
    and point N_c - 1 + m waits for the block from offset -o(m) (and our send of m), so the
    next all-gather forwards whole columns. With `cores`, each core its own direction's rows."""
    c = order[2]
    block = f"out[me_x, me_y, me_z, {hi}, {'core' if cores else ':'}]"
    sems = [f"  gsend_{h}: dma", f"  grecv_{h}: {{kind: dma, shape: [N_{c} - 1]}}"]
    copies = [f"  # Part {h.upper()}'s first all-gather, direct along {c}: our block into the `out` of the chip at offset o.",
              f'  {h}_g: {{src: "{block}", dst: "{block}", to: to{h}, send_sem: gsend_{h}, recv_sem: "grecv_{h}[n{h}]"}}',
              f'  {h}_gw: {{src: "{block}", dst: "{block}", to: to{h}, send_sem: gsend_{h},   # point n\'s, to wait',
              f'         recv_sem: "grecv_{h}[n{h} - (N_{c} - 1)]"}}']
    send = [when(f"sending{h} and p{h} == 3 and n{h} < N_{c} - 1   # the direct all-gather: every peer's send, then the waits",
                 f"start: {h}_g"),
            when(f"sending{h} and p{h} == 3 and n{h} >= N_{c} - 1", f"wait: {h}_gw")]
    return [], [], sems, copies, send, []


def window_rows(topo, lanes: int, limit_mib: int, cols: int = 128, itemsize: int = 4, direct: bool = False,
                pieces: tuple[int, int] = PIECES_3D[0], directions: int = 2) -> int:
    """The most rows `w` of a plane's piece (a multiple of 16) whose windows on the 3-D torus
    `topo` fit in `limit_mib` with pieces of c w rows of a column and b w of a block
    (`pieces` = (c, b)): per
    stream and phase 3 x `lanes` pieces (2 x `lanes` landing, `lanes` own blocks), in six
    streams (three with `directions` = 1: a core's, `cores: 2`). With `direct` (the third phase sent directly, `_direct_block`), no block
    windows, and the `stage` slots (N_c blocks of each part, both directions, every row)
    fit too, at the rows that size V to `DIRECT_SIZED` (the multiple of a column round's
    lanes x c w rows nearest it)."""
    n = dict(zip("xyz", topo.shape))
    c, b = pieces
    rows_per_w = sum(n[o[1]] * n[o[2]] + c * n[o[2]] + (0 if direct else b) for _, o in PARTS_3D) * directions * 3 * lanes
    budget = limit_mib * 2**20 // (cols * itemsize)   # in rows
    w = max(16, budget // rows_per_w // 16 * 16)
    if not direct:
        return w
    ideal = DIRECT_SIZED / (6 * topo.size * cols * itemsize)
    stage_per_row = sum(n[o[2]] for _, o in PARTS_3D) * directions
    while w > 16:
        m = c * lanes * w
        if rows_per_w * w + stage_per_row * max(m, round(ideal / m) * m) <= budget:
            break
        w -= 16
    return w


def generate(kind: str, topo) -> Iterator[Candidate]:
    if kind not in ("psum", "psum_scatter") or topo.ndim not in (2, 3):
        return
    if topo.size > MAX_CHIPS:
        return  # see MAX_CHIPS
    from ...cost.chips import of_topology
    chip = of_topology(topo)   # the cost model's chip for the slice
    if topo.ndim == 3:
        # On a chip of two TensorCores only the two-core schedules: each is a one-core one's
        # twin with a core per direction, twice the pieces and twice the DMA issue, and the
        # best of them priced faster than the best one-core one at every v5p size measured
        # (docs/cost-model.md).
        yield from _generate_3d(kind, topo, chip, two_cores=chip.tensor_cores >= 2)
        return
    what = WHAT if kind == "psum_scatter" else \
        "rotated-axis bidirectional all-reduce whose reduce-scatters land in VMEM windows, with a capacity handshake"
    # A load per lane or per step: at 256 MiB, per step wins on v5e:16x16 (a second-phase step
    # of one block per lane is DMA-issue bound there: 97.0% of the bound against 94.1%), per
    # lane on torus:4x4 (a whole step's load, at once on the four streams, is waited by the
    # step's first lane: 95.3% against 96.5%).
    # Each also meeting half way with the first phase's column held in VMEM (`_halfway_held`,
    # cwin 4): ahead of the rings at every size and slice measured, e.g. v5e:16x16 at 64 MiB
    # psum_scatter 79.0% -> 94.1% of the bound (half way alone, `halfway=True, held=False`:
    # 88.8%), torus:4x4 94.1% -> 97.0%.
    for halfway, step_loads in itertools.product((False, True), (False, True)):
        text = with_vmem_limit(reduce_scatter_2d(kind == "psum", step_loads, halfway, held=halfway), chip,
                               "the windows")
        for lanes, wrows in ((2, 512), (2, 1024), (4, 512)):
            name = (f"{kind}_vmem_windows_2d" + ("_halfway_held" if halfway else "") + f"_l{lanes}_w{wrows}"
                    + ("_step" if step_loads else ""))
            params = ({"meet": "halfway", "column": "held"} if halfway else {}) | {"lanes": lanes, "wrows": wrows} \
                | ({"loads": "step"} if step_loads else {})
            yield Candidate(FAMILY, name, text.replace(f"name: {kind}_vmem_windows_2d", f"name: {name}")
                            .replace("lanes: 2, wrows: 256", f"lanes: {lanes}, wrows: {wrows}"),
                            what + (", each reduce-scatter's rings meeting half way, the first one's column held "
                                    "in VMEM" if halfway else "")
                            + (", a step's own blocks loaded by one DMA" if step_loads else ""), params)


def _generate_3d(kind: str, topo, chip, two_cores: bool = False) -> Iterator[Candidate]:
    """The 3-D schedules, one per `lanes` in `LANES_3D` with a ring for the third phase and
    one per `lanes` in `DIRECT_LANES_3D` with direct sends (`_direct_block`), each for every
    ratio of `PIECES_3D` with the largest pieces whose windows fit the VMEM limit
    (`window_rows`: the planes of the first phase take most), and one per `lanes` in
    `HELD_LANES_3D` with the plane held in VMEM (`_held_direct`, `HELD_3D`); with
    `two_cores`, each on both TensorCores (`_2c`), a direction per core."""
    what = WHAT_3D if kind == "psum_scatter" else \
        "rotated-axis bidirectional 3-D all-reduce whose reduce-scatters land in VMEM windows, with a capacity handshake"
    for direct, cores in ((False, two_cores), (True, two_cores)):   # a ring or a direct last phase
        text = with_vmem_limit(reduce_scatter_3d(kind == "psum", direct, cores), chip, "the windows")
        for lanes in DIRECT_LANES_3D if direct else LANES_3D:
            for c, b in PIECES_3D:
                w = window_rows(topo, lanes, vmem_limit_mib(chip), direct=direct, pieces=(c, b),
                                directions=1 if cores else 2)
                name = (f"{kind}_vmem_windows_3d_l{lanes}_w{w}" + ("" if (c, b) == PIECES_3D[0] else f"_c{c}")
                        + ("_direct" if direct else "") + ("_2c" if cores else ""))
                params = {"lanes": lanes, "wrows": w, "crows": c * w} | ({"last": "direct"} if direct else {"brows": b * w})
                yield Candidate(FAMILY, name, text.replace(f"name: {kind}_vmem_windows_3d", f"name: {name}")
                                .replace("lanes: 2, wrows: 64, crows: 128" + ("" if direct else ", brows: 256"),
                                         ", ".join(f"{k}: {v}" for k, v in params.items() if k != "last")),
                                what + (", its last phase (a block) sent directly to every chip along its axis"
                                        if direct else "") + (", a direction per TensorCore" if cores else ""),
                                params)
    # The plane held in VMEM (`HELD_3D`), with the direct last phase: one round of the plane,
    # so its windows grow with V (where they do not fit a core, the search does not take it).
    # v5p:8x8x8 at 256 MiB: psum_scatter 92.4% -> 94.3%, psum 94.1% -> 95.1% of the bound.
    # Two lanes only: one lane won only at 4 MiB, by 0.5-1.4 points of about 20%, and took
    # the search on v5p:4x4x4 (64 chips) past 10 s.
    text = with_vmem_limit(reduce_scatter_3d(kind == "psum", True, two_cores, held=True), chip, "the windows")
    for lanes, cwin in itertools.product(HELD_LANES_3D, HELD_CWIN_3D):
        name = (f"{kind}_vmem_windows_3d_l{lanes}_held_direct" + ("" if cwin == 2 else f"_cw{cwin}")
                + ("_2c" if two_cores else ""))
        yield Candidate(FAMILY, name, text.replace(f"name: {kind}_vmem_windows_3d", f"name: {name}")
                        .replace("lanes: 2, cwin: 2}", f"lanes: {lanes}, cwin: {cwin}}}"),
                        what + ", its plane held in VMEM between the first two phases, its last phase sent directly"
                        + (", a direction per TensorCore" if two_cores else ""),
                        {"lanes": lanes, "plane": "held", "last": "direct"} | ({} if cwin == 2 else {"cwin": cwin}))
