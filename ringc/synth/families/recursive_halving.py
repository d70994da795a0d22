"""Recursive halving and doubling on a slice of 2^m chips, for small sizes: the
reduce-scatter, the all-gather, and the all-reduce made of the two (Rabenseifner), with
the top digit of each axis taken at radix 4 (or the whole axis at once) where that is
shorter.

The chips' row-major index `me` has m bits, the first axis' bits highest (every axis a
power of 2, so changing bits of `me` within one axis' digit moves along that axis only).
A round takes one digit of `me` (`rounds`): its weight w and radix q. In the
reduce-scatter the digits go top first: a chip holds the partial sums of the aligned
range of q x w blocks that contains its own, sends each of its q - 1 partners
`me ^ (t * w)`, t = 1 .. q - 1, the w blocks that partner keeps (its aligned range,
`(me ^ (t * w)) & (N - w)`) straight into the partner's VMEM, and adds the q - 1 ranges
that arrive into its own. A binary digit (q = 2) is a round of classic recursive halving
(the volume halves as the offset halves); a radix-4 digit at the top of an axis of 4 s
chips sends to offsets s, 2 s and 3 s = -s round the axis at once (powers of 2 either way
round, which v5e routes), so an axis of 16 takes 8 + 2 + 1 hops in 3 rounds instead of
8 + 4 + 2 + 1 in 4. The all-gather runs the digits bottom first, each round sending the
aligned range of w blocks a chip holds to its q - 1 partners, into the same blocks there;
the all-reduce is the reduce-scatter (into `acc`, its last round into out[me]) followed
by that all-gather on `out`. `radix` caps the top digit of each axis: 4, or the axis (one
round per axis, every offset at once, the one-shot per axis; not routable on v5e, so not
generated there). In a round of radix 4 or more the send half way round the axis
(t = q / 2, the longest route) is started first.

One text serves every N (the schedules are checked at small N in CI): each axis' digits
are static lets (`q_x`, `w_x`, `b_x`, `r_x`: radix, weight and binary digits below the
top one, first round), the top digit's round is written once per axis and its binary
digits are a `loop` (a Python `for`, unrolled when traced), so every add has a static
width (the TPU compiler takes no dynamic add size). Slots: round r's arrivals land in
`recv` slots w .. q w - 1 (the rounds' ranges are disjoint); a round's q - 1 arrivals are
waited once for their total. A back-to-back call must not write a slot still being read:
every receiver signals `free[r]` to its round-r senders when the call starts (r > 0) and
a sender waits for it before round r, which the earlier rounds hide; round 0's receivers
signal `done` after their adds, waited at the end. `ringc check` models back-to-back calls
with Pallas' device barrier between them (docs/verification.md), so its verdict does not
rest on this handshake (a schedule without it checks too); it is there for a caller that
runs the kernel without that barrier, and costs nothing on the critical path (29.8 us on
v5e:16x16 at 64 KiB with it or without).

Every chip runs chip 0's program with ids XORed by its own, but the ranges are w > 1
blocks long, which the XOR quotient does not follow (`ringc/verify/xor.py`: one axis, and
a device-dependent start only along a dimension of length 1), so `ringc check` and `ringc
cost` run every chip: on v5e:16x16 the all-reduce checks in 8.4 s, and the family is not
generated past 256 chips (`MAX_CHIPS`)."""

from __future__ import annotations

from math import prod
from typing import Iterator

from .base import Candidate
from .templates import AXES, head

FAMILY = "recursive_halving"
WHAT = ("one round per digit of the row-major index (radix 4 at the top of an axis, 2 below): "
        "exchange with me ^ (t * w), halving what is held (reduce-scatter) or doubling it (all-gather)")

Plan = list[tuple[str, int, int]]   # (axis, weight w, radix q) per round, top digit first


def rounds(shape: tuple[int, ...], radix: int) -> Plan:
    """The digits of the row-major index over `shape`, top first: (axis, weight w, radix q).
    Each axis' top digit has radix min(radix, N_a); its other bits are binary digits."""
    out: Plan = []
    stride = prod(shape)
    for a, n in zip(AXES, shape):
        stride //= n
        q = min(radix, n)
        held = n
        while held > 1:
            held //= q
            out.append((a, held * stride, q))
            q = 2
    return out


def _names(k: int) -> str:
    axes = AXES[:k]
    return f'"{axes}"' if k == 1 else "(" + ", ".join(f'"{a}"' for a in axes) + ")"


# -- the YAML: each axis' rounds written with its static lets, so one text serves every N -------

def yaml_op(*lines: str) -> list[str]:
    """One body entry: its first line after `- `, the others indented under it."""
    return [f"- {lines[0]}", *(f"  {ln}" for ln in lines[1:])]


def _nest(head: list[str], ops: list[list[str]]) -> list[str]:
    """A `loop` or `when` entry (its head lines) whose `do:` holds `ops`."""
    out = [f"- {head[0]}", *(f"  {ln}" for ln in head[1:]), "  do:"]
    for op in ops:
        out += [f"    {ln}" for ln in op]
    return out


def yaml_loop(var: str, count: str, ops: list[list[str]], comment: str = "") -> list[str]:
    return _nest([f"loop: {{{var}: {count}}}" + (f"  # {comment}" if comment else "")], ops)


def yaml_when(cond: str, ops: list[list[str]]) -> list[str]:
    return _nest([f"when: {cond}"], ops)


class _Axis:
    """The static names of one axis' digits: its size, the radix q and weight w of its top
    digit, its b binary digits (weights w / 2, w / 4, .. its stride), its rounds' first index."""

    def __init__(self, axes: str, i: int):
        self.a = a = axes[i]
        self.first, self.last = i == 0, i == len(axes) - 1
        self.n = "N" if len(axes) == 1 else f"N_{a}"
        self.q, self.b, self.w, self.r = f"q_{a}", f"b_{a}", f"w_{a}", f"r_{a}"
        below = " * ".join(f"N_{c}" for c in axes[i + 1:])
        self.stride = below or "1"
        prev = axes[i - 1] if i else None
        self.lets = [f"{self.q}: min(RADIX, {self.n})".ljust(24) + f"# the radix of {a}'s top digit",
                     f"{self.b}: log2({self.n} // {self.q})".ljust(24) + f"# {a}'s binary digits below it",
                     (f"{self.w}: N // {self.q}" if self.first else f"{self.w}: {self.n} // {self.q} * {below}"
                      if below else f"{self.w}: {self.n} // {self.q}").ljust(24)
                     + f"# the weight of {a}'s top digit in the row-major index",
                     (f"{self.r}: 0" if prev is None else f"{self.r}: r_{prev} + 1 + b_{prev}").ljust(24)
                     + f"# the round of {a}'s top digit; its binary digits follow"]

    def binary_w(self, i: str) -> str:            # the reduce-scatter's i-th binary digit, top first
        return f"{self.w} >> ({i} + 1)"

    def gather_w(self, i: str) -> str:            # the all-gather's i-th binary digit, bottom first
        return f"{self.w} >> ({self.b} - {i})"


def _adds(dst: str, base: str | None, w: str, q: str) -> list[list[str]]:
    """Add round (w, q)'s q - 1 arrivals (recv slots t * w) into `dst`, the first onto `base`."""
    ops = [yaml_op(f'accumulate: "{dst}"', f'src: "recv[{w}:{w}]"', *([f'base: "{base}"'] if base else []))]
    if q != "2":
        ops.append(yaml_loop("t", f"{q} - 2", [yaml_op(f'accumulate: "{dst}"', f'src: "recv[(t + 2) * {w}:{w}]"')]))
    return ops


def _adds_last(dst: str, base: str, q: str) -> list[list[str]]:
    """The last round's adds (w = 1: one block each, indexed): its arrivals onto `base` (one
    block, indexed) into `dst`."""
    ops = [yaml_op(f'accumulate: "{dst}"', 'src: "recv[1]"', f'base: "{base}"')]
    if q != "2":
        ops.append(yaml_loop("t", f"{q} - 2", [yaml_op(f'accumulate: "{dst}"', 'src: "recv[t + 2]"')]))
    return ops


def _later(q: str, w: str) -> str:
    """The partner `t` of a round's (t + 1)-th send after the first (t = q / 2, half way
    round, the longest route): radix 4, the partner one step back round the axis (-w), then
    one step on (+w); a tie half way goes the positive way (`topology.route`), so the send
    back shares no link with the first and the one on starts when the first has left. (The
    digit is (me // w) % 4, its partner digit d ^ t: d - 1 is d ^ 3 for d even, d ^ 1 for
    d odd.) A larger radix: 1 .. q - 1 in order, skipping q / 2."""
    return (f"(3 - 2 * ((me // ({w})) % 2) if t == 0 else 1 + 2 * ((me // ({w})) % 2)) if {q} == 4 "
            f"else t + 1 if t + 1 < {q} // 2 else t + 2")


_LATER = "radix 4: one step back round the axis (its links are free), then one on"


def _round(send: str, r: str, w: str, q: str, adds: list[list[str]], wait_free: bool, signal_done: bool) -> list[list[str]]:
    """One reduce-scatter round: wait until the receivers' slots are free, start the q - 1
    sends (half way round first), wait for the round's total, add."""
    ops = []
    if wait_free:
        ops.append(yaml_op(f'sem_wait: "free[{r}]"', "value: 1" if q == "2" else f"value: {q} - 1"))
    if q == "2":
        ops.append(yaml_op(f"start: {send}(r={r}, w={w}, t=1)"))
    else:
        ops.append(yaml_op(f"start: {send}(r={r}, w={w}, t={q} // 2)   # half way round: the longest route first"))
        ops.append(yaml_loop("t", f"{q} - 2", [yaml_op(f"start: {send}(r={r}, w={w}, t={_later(q, w)})")], _LATER))
    ops.append(yaml_op(f"wait: arrivals(r={r}, w={w}, q={q})"))
    ops += adds
    if signal_done:
        ops.append(yaml_loop("t", f"{q} - 1", [yaml_op("signal: done", f"to: me ^ ((t + 1) * {w})")],
                         "round 0's slots are read"))
    return ops


def _free_signals(axes: list[_Axis]) -> list[list[str]]:
    """At the call's start, every receiver of a round after the first (round 0 is the first
    axis' top digit) says its slots are free."""
    ops: list[list[str]] = [["# When the call starts: the slots of every round after the first are free."]]
    for ax in axes:
        if not ax.first:
            ops.append(yaml_loop("t", f"{ax.q} - 1", [yaml_op(f'signal: "free[{ax.r}]"', f"to: me ^ ((t + 1) * {ax.w})")],
                             f"{ax.a}'s top digit"))
        ops.append(yaml_loop("i", ax.b, [yaml_op(f'signal: "free[{ax.r} + 1 + i]"', f"to: me ^ ({ax.binary_w('i')})")],
                         f"{ax.a}'s binary digits"))
    return ops


def _reduce_scatter_ops(axes: list[_Axis], acc: str, last: str | None, signals: bool = True,
                        wait_done: bool = True) -> list[list[str]]:
    """The reduce-scatter, top digit first: x -> `acc` (the partial sums of the blocks still
    held), the last round (w = 1) into `last`, a region of one block (None: the last round
    adds into `acc` too, and the all-reduce's doubling rounds follow)."""
    ops: list[list[str]] = _free_signals(axes) if signals else []
    for ax in axes:
        final = ax.last and last is not None
        w, mine = ax.w, f"{acc}[me & (N - {ax.w}):{ax.w}]"
        base = f"x[me & (N - {w}):{w}]" if ax.first else None
        top = f"Along {ax.a}: the top digit, radix {ax.q}, weight {w} (offsets {w}, 2 {w}, .. round the axis)"
        if final:   # the top digit is the last round where there is no binary digit below it
            adds = [yaml_when(f"{ax.b} > 0", _adds(mine, base, w, ax.q)),
                    yaml_when(f"{ax.b} == 0", _adds_last(  # w = 1 here
                        last, "x[me]" if ax.first else f"{acc}[me]", ax.q))]
        else:
            adds = _adds(mine, base, w, ax.q)
        ops.append([f"# {top}."])
        ops += _round("send_x" if ax.first else "send", ax.r, w, ax.q, adds, not ax.first, ax.first)
        bw, r = ax.binary_w("i"), f"{ax.r} + 1 + i"
        mine = f"{acc}[me & (N - ({bw})):{bw}]"
        if final:
            adds = [yaml_when(f"i < {ax.b} - 1", _adds(mine, None, bw, "2")),
                    yaml_when(f"i == {ax.b} - 1", _adds_last(last, f"{acc}[me]", "2"))]   # (w = 1)
        else:
            adds = _adds(mine, None, bw, "2")
        ops.append([f"# Along {ax.a}: the binary digits, weights {w} / 2 .. {ax.stride}."])
        ops.append(yaml_loop("i", ax.b, _round("send", r, bw, "2", adds, True, False)))
    if wait_done:
        ops.append(_done_wait(axes[0]))
    return ops


def _done_wait(first: _Axis) -> list[str]:
    """Wait for round 0's receivers to have read their slots (at the end: off the critical path)."""
    return yaml_op("sem_wait: done", f"value: {first.q} - 1")


def _doubling_ops(axes: list[_Axis]) -> list[list[str]]:
    """The all-reduce of the S blocks still held (`acc[me & (N - S):S]`) over the digits of
    `axes` (trailing ones, never the first: round 0 is a halving round) by recursive
    doubling: each round sends all S to each partner me ^ (t * w), into its
    `mix[r, t - 1]`, and adds the q - 1 that arrive."""
    ops: list[list[str]] = []
    held = '"acc[me & (N - S):S]"'
    for ax in axes:
        for what, r, w, q in ((f"the top digit, radix {ax.q}, weight {ax.w}", ax.r, ax.w, ax.q),
                              (f"the binary digits, weights {ax.w} / 2 .. {ax.stride}", f"{ax.r} + 1 + i",
                               ax.binary_w("i"), "2")):
            body = [yaml_op(f'sem_wait: "free[{r}]"', "value: 1" if q == "2" else f"value: {q} - 1")]
            if q == "2":
                body.append(yaml_op(f"start: double(r={r}, w={w}, t=1)"))
            else:
                body += [yaml_op(f"start: double(r={r}, w={w}, t={q} // 2)   # half way round: the longest route first"),
                         yaml_loop("t", f"{q} - 2", [yaml_op(f"start: double(r={r}, w={w}, t={_later(q, w)})")], _LATER)]
            body.append(yaml_op(f"wait: doubled(r={r}, w={w}, q={q})"))
            body.append(yaml_loop("t", f"{q} - 1", [yaml_op(f"accumulate: {held}", f'src: "mix[{r}, t]"')]))
            ops.append([f"# Along {ax.a}, doubling: {what}."])
            ops += body if q != "2" else [yaml_loop("i", ax.b, body)]
    return ops


def _all_gather_ops(axes: list[_Axis]) -> list[list[str]]:
    """The all-gather on `out` (out[me] already held), bottom digit first: send the aligned
    range of w blocks held to each partner, into the same blocks there."""
    ops: list[list[str]] = []
    for ax in reversed(axes):
        gw, r = ax.gather_w("i"), f"{ax.r} + {ax.b} - i"
        ops.append([f"# Along {ax.a}: the binary digits, weights {ax.stride} .. {ax.w} / 2."])
        ops.append(yaml_loop("i", ax.b, [yaml_op(f"start: gather(r={r}, w={gw}, t=1)"),
                                    yaml_op(f"wait: gathered(r={r}, w={gw}, q=2)")]))
        ops.append([f"# Along {ax.a}: the top digit, radix {ax.q}, weight {ax.w}."])
        ops.append(yaml_op(f"start: gather(r={ax.r}, w={ax.w}, t={ax.q} // 2)   # half way round: the longest route first"))
        ops.append(yaml_loop("t", f"{ax.q} - 2",
                         [yaml_op(f"start: gather(r={ax.r}, w={ax.w}, t={_later(ax.q, ax.w)})")], _LATER))
        ops.append(yaml_op(f"wait: gathered(r={ax.r}, w={ax.w}, q={ax.q})"))
    return ops


def _lets(axes: list[_Axis], radix: int) -> str:
    lines = [f"RADIX: {radix}".ljust(24) + "# the largest radix of a top digit"]
    for ax in axes:
        lines += ax.lets
    last = axes[-1]
    lines.append(f"rounds: {last.r} + 1 + {last.b}")
    return "\n".join(f"  {ln}" for ln in lines)


def _body(ops: list[list[str]]) -> str:
    return "\n".join(f"  {ln}" for op in ops for ln in op)


_RS_SEMS = """  recv_sems: {kind: dma, shape: [rounds]}
  free: {kind: regular, shape: [rounds]}     # round r's receiver has its slots free
  done: regular                              # round 0's receiver has read its slots"""

_RS_COPIES = """  # The w blocks partner me ^ (t * w) keeps, from x (round 0) or {acc}, into its slots t * w.
  send_x(r, w, t): {{src: "x[(me ^ (t * w)) & (N - w):w]", dst: "recv[t * w:w]", to: me ^ (t * w), send_sem: send_sem,
                    recv_sem: "recv_sems[r]"}}
  send(r, w, t):   {{src: "{acc}[(me ^ (t * w)) & (N - w):w]", dst: "recv[t * w:w]", to: me ^ (t * w),
                    send_sem: send_sem, recv_sem: "recv_sems[r]"}}
  # Round r's q - 1 sends and arrivals, waited once for their total (never started).
  arrivals(r, w, q): {{src: "recv[w:(q - 1) * w]", dst: "recv[w:(q - 1) * w]", to: me ^ w, send_sem: send_sem,
                      recv_sem: "recv_sems[r]"}}"""

_AG_COPIES = """  # The {held} I hold, into the same blocks of partner me ^ (t * w).
  gather(r, w, t):   {{src: "out[me & (N - w):w]", dst: "out[me & (N - w):w]", to: me ^ (t * w), send_sem: send_sem,
                      recv_sem: "gather_sems[r]"}}
  # Round r's q - 1 sends and arrivals, waited once for their total (never started).
  gathered(r, w, q): {{src: "out[0:(q - 1) * w]", dst: "out[0:(q - 1) * w]", to: me ^ w, send_sem: send_sem,
                      recv_sem: "gather_sems[r]"}}"""

_DIGITS = """# The chips' row-major index has one digit per round: along each axis a top digit of radix
# q_a = min(RADIX, N_a) (offsets of N_a / q_a chips and their multiples round the axis), then
# binary digits; {order}."""

_HANDSHAKE = """# So that a back-to-back call writes no slot still being read, a chip signals `free[r]` to
# its round-r senders when the call starts (r > 0), and they wait for it before round r, off
# the critical path (the earlier rounds take longer than the signal); round 0's receivers
# signal `done` once they have added, waited at the end. (`ringc check` puts Pallas' device
# barrier between calls, so its verdict does not rest on this handshake; a caller without
# that barrier does.)"""


def _head(kind: str, k: int, radix: int) -> tuple[list[_Axis], str, str]:
    axes = [_Axis(AXES[:k], i) for i in range(k)]
    name = f"{kind}_recursive_halving_{k}d_r{radix}"
    return axes, head(name, kind, AXES[:k]), _lets(axes, radix)


def psum_scatter(k: int, radix: int) -> str:
    """The reduce-scatter over k power-of-2 axes, top digits of radix at most `radix`."""
    axes, top, lets = _head("psum_scatter", k, radix)
    return f"""# Recursive-halving reduce-scatter over {k} power-of-2 ax{'is' if k == 1 else 'es'}: lax.psum_scatter(x, {_names(k)})
# (tiled=False: chip j gets the sum of every chip's block j, j row-major).
# Generated by `ringc synth` (ringc/synth/families/recursive_halving.py).
{_DIGITS.format(order="top first")}
# In the round of a digit of weight w and radix q, a chip holds the partial sums of the
# aligned range of q w blocks containing its own, sends each partner me ^ (t * w),
# t = 1 .. q - 1, the w blocks that partner keeps (the longest route first) straight into
# its `recv` (slots t w .. (t + 1) w - 1: each round its own), and adds the q - 1 ranges
# that arrive into its own (in `acc`; into `out` in the last round, w = 1). A round's
# arrivals come on one semaphore, waited once for their total (`arrivals`). Each loop is
# a Python `for`, so every add has its static width.
{_HANDSHAKE}
{top}
buffers:
  x:    {{kind: input,  slots: N, shape: [rows, cols], shard: [N * rows, cols], space: vmem}}
  out:  {{kind: output, shape: [rows, cols], space: vmem}}
  acc:  {{kind: vmem_scratch, slots: N, shape: [rows, cols]}}   # the partial sums of the blocks still held
  recv: {{kind: vmem_scratch, slots: N, shape: [rows, cols]}}   # a round's arrivals: slots w .. q w - 1
semaphores:
  send_sem: dma
{_RS_SEMS}
let:
{lets}
copies:
{_RS_COPIES.format(acc="acc")}
body:
{_body(_reduce_scatter_ops(axes, "acc", "out"))}
"""


def all_gather(k: int, radix: int) -> str:
    """The all-gather over k power-of-2 axes: the digits bottom first."""
    axes, top, lets = _head("all_gather", k, radix)
    return f"""# Recursive-doubling all-gather over {k} power-of-2 ax{'is' if k == 1 else 'es'}: lax.all_gather(x, {_names(k)})
# (tiled=False: out[j] is the shard of the chip with row-major index j).
# Generated by `ringc synth` (ringc/synth/families/recursive_halving.py).
{_DIGITS.format(order="bottom first")}
# In the round of a digit of weight w and radix q, a chip holds the aligned range of w
# blocks containing its own and sends it to each partner me ^ (t * w), t = 1 .. q - 1
# (the longest route first), in one DMA each, into the same blocks there, so that it then
# holds q w. A round's arrivals come on one semaphore, waited once for their total
# (`gathered`).
{top}
buffers:
  x:   {{kind: input,  shape: [rows, cols], space: vmem}}
  out: {{kind: output, slots: N, shape: [rows, cols], shard: [N, rows, cols], space: vmem}}
semaphores:
  send_sem: dma
  gather_sems: {{kind: dma, shape: [rounds]}}
let:
{lets}
copies:
{_AG_COPIES.format(held="w blocks")}
body:
  - assign: "out[me]"     # my own shard
    src: x
{_body(_all_gather_ops(axes))}
"""


def psum(k: int, radix: int, fused: int = 0) -> str:
    """The all-reduce over k power-of-2 axes: the reduce-scatter into out[me], then the
    all-gather of `out` (Rabenseifner); with `fused` > 0 the last `fused` axes are summed by
    recursive doubling instead (S = their chips' count of blocks sent whole each round:
    small once the first axes' halving has cut V by N / S), between the two."""
    axes, top, lets = _head("psum", k, radix)
    name = f"psum_recursive_halving_{k}d_r{radix}" + (f"_f{fused}" if fused else "")
    top = top.replace(f"name: psum_recursive_halving_{k}d_r{radix}", f"name: {name}")
    if not 0 <= fused < k:
        raise ValueError(f"fused is 0 .. {k - 1}: the first axis is halved (doubling V whole is recursive_doubling's)")
    halve, double = axes[:k - fused], axes[k - fused:]
    if not fused:
        ops = ([["# The reduce-scatter: the partial sums of the blocks still held are kept in `acc`."]]
               + _reduce_scatter_ops(axes, "acc", "out[me]", wait_done=False)
               + [["# The all-gather: out[me] is the sum of block me; each round doubles the range held."]]
               + _all_gather_ops(axes))
    else:
        ops = (_free_signals(axes)
               + [["# The reduce-scatter along " + ", ".join(a.a for a in halve) + ": the partial sums of "
                   "the blocks still held are kept in `acc`."]]
               + _reduce_scatter_ops(halve, "acc", None, signals=False, wait_done=False)
               + [[f"# The all-reduce along {', '.join(a.a for a in double)} of the S blocks held, by doubling."]]
               + _doubling_ops(double)
               + [yaml_op('assign: "out[me & (N - S):S]"', 'src: "acc[me & (N - S):S]"')]
               + [["# The all-gather: out holds the sums of the S blocks of my range; each round doubles it."]]
               + _all_gather_ops(halve))
    ops.append(_done_wait(axes[0]))
    S = " * ".join(a.n for a in double) if fused else "1"
    lets += f"\n  S: {S}".ljust(26) + "# the blocks summed by doubling" if fused else ""
    what = ("Rabenseifner" if not fused else
            "halving and doubling along " + ", ".join(a.a for a in halve) + ", doubling along "
            + ", ".join(a.a for a in double))
    doubling_text = "" if not fused else f"""
# {"The last axis" if fused == 1 else f"The last {fused} axes"} ({', '.join(a.a for a in double)}) {"is" if fused == 1 else "are"} summed by recursive doubling instead, between
# the two: each of their digits' rounds sends the whole S = {S} blocks held to each partner
# me ^ (t * w), into its `mix` slots, and adds what arrives; the reduce-scatter has cut
# V by N / S by then, so the whole range is small, and one round replaces two."""
    mix_buffer = ("\n  mix:  {kind: vmem_scratch, slots: [rounds, RADIX - 1, S], shape: [rows, cols]}"
                  "   # a doubling round's arrivals") if fused else ""
    return f"""# Recursive halving and doubling all-reduce ({what}) over {k} power-of-2 ax{'is' if k == 1 else 'es'}: lax.psum(x, {_names(k)}).
# Generated by `ringc synth` (ringc/synth/families/recursive_halving.py). x is N blocks,
# j row-major.
{_DIGITS.format(order="top first in the reduce-scatter, bottom first in the all-gather")}
# In the reduce-scatter's round of a digit of weight w and radix q, a chip holds the
# partial sums of the aligned range of q w blocks containing its own, sends each partner
# me ^ (t * w), t = 1 .. q - 1, the w blocks that partner keeps (the longest route first)
# straight into its `recv` (slots t w .. (t + 1) w - 1: each round its own), and adds the
# q - 1 ranges that arrive into its own, in `acc`, until out[me] is the sum of block me.
# In the all-gather's, a chip sends the aligned range of w blocks it holds to each
# partner, into the same blocks of its `out` (which the reduce-scatter's sends, from `acc`,
# do not read). A round's arrivals come on one semaphore, waited once for their total.{doubling_text}
{_HANDSHAKE}
{top}
buffers:
  x:    {{kind: input,  slots: N, shape: [rows, cols], shard: [N * rows, cols], space: vmem}}
  out:  {{kind: output, slots: N, shape: [rows, cols], shard: [N * rows, cols], space: vmem}}
  acc:  {{kind: vmem_scratch, slots: N, shape: [rows, cols]}}   # the partial sums of the blocks still held
  recv: {{kind: vmem_scratch, slots: N, shape: [rows, cols]}}   # a round's arrivals: slots w .. q w - 1{mix_buffer}
semaphores:
  send_sem: dma
{_RS_SEMS}
  gather_sems: {{kind: dma, shape: [rounds]}}
let:
{lets}
copies:
{_RS_COPIES.format(acc="acc")}
{_AG_COPIES.format(held="sums of the w blocks")}{_MIX_COPIES if fused else ""}
body:
{_body(ops)}
"""


_MIX_COPIES = """
  # The S blocks I hold, into slot t - 1 of round r's `mix` of partner me ^ (t * w).
  double(r, w, t):   {src: "acc[me & (N - S):S]", dst: "mix[r, t - 1]", to: me ^ (t * w), send_sem: send_sem,
                      recv_sem: "recv_sems[r]"}
  # Round r's q - 1 sends and arrivals, waited once for their total (never started).
  doubled(r, w, q):  {src: "mix[r, 0:q - 1]", dst: "mix[r, 0:q - 1]", to: me ^ w, send_sem: send_sem,
                      recv_sem: "recv_sems[r]"}"""


GENERATORS = {"psum_scatter": psum_scatter, "all_gather": all_gather, "psum": psum}


# Checked and priced on every chip (no quotient follows these ranges): on v5e:16x16 (256
# chips) the all-reduce's check takes 8-10 s; on v5p:8x8x8 (512) the reduce-scatter's took
# 25 s and the search 56 s against 1.5 s without the family, so larger slices are left out.
MAX_CHIPS = 256


def generate(kind: str, topo) -> Iterator[Candidate]:
    n = topo.size
    if (kind not in GENERATORS or n < 2 or n > MAX_CHIPS or any(s & (s - 1) for s in topo.shape)
            or topo.ndim > 3):
        return
    # Radix 4 at the top of each axis (binary below), and the whole axis at once. Binary
    # throughout is not generated: a radix-4 digit sends the same 3 w blocks over the same
    # longest route in one round instead of two (on v5e:16x16 it prices 30-37% faster from
    # 64 KiB to 32 MiB for all three collectives).
    radices = sorted({4, max(topo.shape)})
    if topo.generation == "v5e":   # a digit of radix 8 or more sends to 3 w: not a power of 2
        radices = [r for r in radices if r <= 4]
    seen = set()
    for radix in radices:
        plan = tuple(rounds(topo.shape, radix))
        if plan in seen:
            continue
        seen.add(plan)
        # The all-reduce also with its last `fused` axes summed by doubling (0: Rabenseifner;
        # not all of them: doubling all of V every round is the recursive_doubling family's).
        for fused in range(topo.ndim) if kind == "psum" else (0,):
            params = {"radix": radix, **({"fused": fused} if kind == "psum" else {})}
            text = psum(topo.ndim, radix, fused) if kind == "psum" else GENERATORS[kind](topo.ndim, radix)
            name = f"{kind}_recursive_halving_{topo.ndim}d_r{radix}" + (f"_f{fused}" if fused else "")
            yield Candidate(FAMILY, name, text, WHAT, params)
