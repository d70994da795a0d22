"""Recursive halving and doubling with each axis cut into two digits, the low one taken by
translation: the reduce-scatter, the all-gather, and an all-reduce that halves along the
low digits, doubles along the high ones and gathers back, for small sizes on axes of 2 to
16 chips (powers of 2).

Along an axis of N_a chips the coordinate is h * L + l: a high digit h of radix
H = min(4, N_a) and a low digit l of radix L = N_a / H (1: none; at most 4). A digit's
round exchanges with the chips 2 u, -u and u away round the axis (radix 4; radix 2: u),
u = L for the high digit and 1 for the low one: translations, so every offset is a power
of 2 (v5e routes them) and a round's longest route is 2 u. On an axis of 16 the two rounds
take 8 + 2 hops; `recursive_halving`'s digits of the row-major index (me ^ (t * w)) take
8 + 2 + 1 in three rounds (a low digit of radix 4 by XOR sends 3 chips away, which v5e
cannot route). Elsewhere the two families take the same routes.

The buffers' N blocks are split over one slot dimension per digit, [H_x, L_x, H_y, L_y,
..] (row-major, so block j is still chip j's), and what a chip holds is the blocks whose
digits done so far are free and whose other digits are its own: a rectangle (a strided
region), whatever the order of the digits. A translation along a carries from the low
digit into the high one, so the high digit must be free or the chip's own on both sides
when a round moves the low digit: the all-gather takes the high digits first (the long
routes while it holds one block: 8 hops with 1 and 4 blocks on v5e:16x16), the
reduce-scatter the low digits first (the large ranges over the short routes), and the
all-reduce halves along the low digits, sums the S = prod(H_a) blocks left by doubling
along the high ones, and gathers along the low digits.

A round's q - 1 arrivals come on one semaphore per round, each waited (`wait`: the send
half too). The reduce-scatter keeps its partial sums in `acc` (x copied in first: a VMEM
copy, no DMA), each round's arrivals in its own `recv_<round>` slots. No handshake for a
caller that runs calls back to back without Pallas' device barrier (`ringc check` puts it
between calls, docs/verification.md): `recursive_halving` has one."""

from __future__ import annotations

from typing import Iterator

from .base import Candidate
from . import recursive_halving
from .recursive_halving import yaml_loop, yaml_op, yaml_when
from .templates import AXES, head

FAMILY = "shifted_halving"
WHAT = ("each axis a high digit (radix 4) and a low one (radix N_a / 4), each round a translation "
        "by 2u, -u, u round the axis: halving what is held (reduce-scatter) or doubling it (all-gather)")

MAX_AXIS = 16          # H <= 4 and L <= 4


class _Digit:
    """One digit of one axis: its slot dimension, radix, unit of translation and the chip's own value."""

    def __init__(self, axes: str, i: int, high: bool):
        self.a = a = axes[i]
        self.high = high
        self.radix = f"H_{a}" if high else f"L_{a}"
        self.unit = f"L_{a}" if high else "1"
        self.own = f"h_{a}" if high else f"l_{a}"
        self.name = f"{a}_{'hi' if high else 'lo'}"
        self.n = f"N_{a}" if len(axes) > 1 else "N"
        self.me = f"me_{a}" if len(axes) > 1 else "me"
        self.stride = " * ".join(f"N_{b}" for b in axes[i + 1:]) or "1"

    def coordinate(self, t: str) -> str:
        """The coordinate along the axis of partner t: 2 u, -u, u ahead (t = 0, 1, 2)."""
        u = "" if self.unit == "1" else f"{self.unit} * "
        return f"({self.me} + {self.n} + {u}({self.radix} // 2 if {t} == 0 else -1 if {t} == 1 else 1)) % {self.n}"

    def target(self, t: str) -> str:
        s = "" if self.stride == "1" else f" * {self.stride}"
        return f"me + ({self.coordinate(t)} - {self.me}){s}"

    def partner_value(self, t: str) -> str:
        c = self.coordinate(t)
        return f"({c}) // L_{self.a}" if self.high else f"({c}) % L_{self.a}"


def _digits(k: int) -> list[_Digit]:
    axes = AXES[:k]
    return [d for i in range(k) for d in (_Digit(axes, i, True), _Digit(axes, i, False))]


def _region(buf: str, digits: list[_Digit], fixed: dict[str, str]) -> str:
    """`buf` over the digit slots: a digit in `fixed` at that value, the others whole."""
    return f'"{buf}[' + ", ".join(fixed.get(d.name, ":") for d in digits) + ']"'


def _sizes(digits: list[_Digit], free: list[str]) -> str:
    return ", ".join(d.radix for d in digits if d.name in free)


def _lets(k: int) -> str:
    lines = []
    for a in AXES[:k]:
        n, me = (f"N_{a}", f"me_{a}") if k > 1 else ("N", "me")
        lines += [f"H_{a}: min(4, {n})".ljust(22) + f"# the radix of {a}'s high digit",
                  f"L_{a}: {n} // H_{a}".ljust(22) + f"# the radix of {a}'s low digit (1: none)",
                  f"h_{a}: {me} // L_{a}".ljust(22) + f"# my high digit along {a}",
                  f"l_{a}: {me} % L_{a}".ljust(22) + f"# my low digit along {a}"]
    return "\n".join(f"  {ln}" for ln in lines)


def _sends(copy: str, d: _Digit, comment: str) -> list[list[str]]:
    """A round's starts, the longest route first, and its q - 1 waits."""
    return [[f"# {comment}"],
            yaml_op(f"start: {copy}(t=0)   # 2 u ahead (radix 4; u ahead for radix 2): the longest route first"),
            yaml_loop("t", _less(d, 2), [yaml_op(f"start: {copy}(t=t + 1)")], "-u, then +u"),
            yaml_loop("t", _less(d, 1), [yaml_op(f"wait: {copy}(t=t)")])]


def _less(d: _Digit, m: int) -> str:
    """The radix less m, as a loop size: a low digit's radix may be 1 (its round not run,
    but its loops' sizes are still evaluated)."""
    return f"{d.radix} - {m}" if d.high else f'"max({d.radix} - {m}, 0)"'


def _skip_none(d: _Digit, ops: list[list[str]]) -> list[list[str]]:
    """A low digit of radix 1 (an axis of 4 or fewer) has no round."""
    return ops if d.high else [yaml_loop("once", f"\"min({d.radix} - 1, 1)\"", ops, f"{d.a} has a low digit")]


class _LowDigits:
    """Every axis' low digit in one round (`combined`: axes of 8 chips or fewer, where a low
    digit has radix 1 or 2): partner c = 1 .. 2^k - 1 is one hop along each axis a whose
    bit e_a(c) is set (+1, which is -1 when the radix is 2), so the 2^k - 1 partners of the
    low digits' 2 x .. x 2 cube get their blocks at once, the farthest (k hops) first,
    instead of in k rounds of one hop each (one hop, a DMA issue and an add apiece: on
    v5p:8x8x8 at 64 KiB the all-reduce's 6 rounds of one hop take 9 of its 24.9 us)."""

    def __init__(self, digits: list[_Digit]):
        self.low = [d for d in digits if not d.high]
        self.k = len(self.low)
        self.count = 2 ** self.k - 1

    def bit(self, d: _Digit, c: str) -> str:
        return f"(({c}) >> {self.k - 1 - self.low.index(d)}) % 2"

    def target(self, c: str) -> str:
        parts = []
        for d in self.low:
            s = "" if d.stride == "1" else f" * {d.stride}"
            parts.append(f"(({d.me} + {self.bit(d, c)}) % {d.n} - {d.me}){s}")
        return "me + " + " + ".join(parts)

    def value(self, d: _Digit, c: str) -> str:
        """Partner c's low digit along d's axis."""
        return f"(({d.me} + {self.bit(d, c)}) % {d.n}) % L_{d.a}"

    def valid(self, c: str) -> str:
        """Partner c moves only along axes that have a low digit (radix 2, not 1)."""
        return " and ".join(f"({self.bit(d, c)} == 0 or L_{d.a} == 2)" for d in self.low)

    def guard(self) -> str:
        """A shape whose exact divisions hold only where every low digit's radix is 1 or 2."""
        return " * ".join(f"(2 // L_{d.a})" for d in self.low)

    def sends(self, copy: str, comment: str) -> list[list[str]]:
        c = f"{self.count} - t"   # the farthest partner (every bit set) first
        return [[f"# {comment}"],
                yaml_loop("t", str(self.count), [yaml_when(self.valid(c), [yaml_op(f"start: {copy}(c={c})")])],
                          "partners 2^k - 1 .. 1: the farthest first"),
                yaml_loop("t", str(self.count), [yaml_when(self.valid(c), [yaml_op(f"wait: {copy}(c={c})")])])]


class _Low:
    """The combined low digits' round, as `_text` lists the rounds."""
    name = "lo (every axis at once)"


_LOW = _Low()


def _combined_reduce(low: _LowDigits, digits: list[_Digit], sem: int, buffers: list[str], copies: list[str],
                     body: list[list[str]]) -> None:
    """The low digits' reduce-scatter in one round on `acc`: partner c gets the partial sums
    of the blocks it keeps (its low digits, every high one), into its `recv_lo` slot c - 1."""
    src = _region("acc", digits, {d.name: low.value(d, "c") for d in low.low})
    free = [e.name for e in digits if e.high]
    buffers.append(f"  recv_lo: {{kind: vmem_scratch, slots: [{low.count}, {_sizes(digits, free)}], shape: [rows, cols]}}"
                   "   # the low digits' arrivals")
    copies.append(f"  reduce_lo(c): {{src: {src}, dst: \"recv_lo[c - 1]\", to: {low.target('c')},\n"
                  f"    send_sem: send_sem, recv_sem: \"sems[{sem}]\"}}")
    mine = _region("acc", digits, {d.name: d.own for d in low.low})
    body += low.sends("reduce_lo", "Every low digit at once: send each partner of the low digits' cube the blocks "
                      "it keeps, add the ranges that arrive into mine.")
    c = f"{low.count} - t"
    body.append(yaml_loop("t", str(low.count), [yaml_when(low.valid(c), [yaml_op(f"accumulate: {mine}",
                                                                              f'src: "recv_lo[{c} - 1]"')])]))


def _combined_gather(low: _LowDigits, digits: list[_Digit], sem: int, copies: list[str], body: list[list[str]]) -> None:
    """The low digits' all-gather in one round on `out` (every high digit done): partner c
    gets what I hold, into the same blocks there."""
    region = _region("out", digits, {d.name: d.own for d in low.low})
    copies.append(f"  gather_lo(c): {{src: {region}, dst: {region}, to: {low.target('c')},\n"
                  f"    send_sem: send_sem, recv_sem: \"sems[{sem}]\"}}")
    body += low.sends("gather_lo", "Every low digit at once: send what I hold to each partner of the low digits' cube.")


def _gather_rounds(order: list[_Digit], digits: list[_Digit], sem0: int, done: list[str],
                   copies: list[str], body: list[list[str]], src: str = "out") -> None:
    """All-gather rounds over `order` on `out`; `done`: digits already free."""
    done = list(done)
    for i, d in enumerate(order):
        held = {e.name: e.own for e in digits if e.name not in done}
        region = _region(src, digits, held)
        name = f"gather_{d.name}"
        copies.append(f"  {name}(t): {{src: {region}, dst: {region}, to: {d.target('t')},\n"
                      f"    send_sem: send_sem, recv_sem: \"sems[{sem0 + i}]\"}}")
        body += _skip_none(d, _sends(name, d, f"Along {d.a}, its {'high' if d.high else 'low'} digit: "
                                     f"send what I hold to each partner, into the same blocks there."))
        done.append(d.name)


def all_gather(k: int, combined: bool = False) -> str:
    digits = _digits(k)
    order = [d for d in digits if d.high] + [d for d in digits if not d.high]
    copies, body = [], []
    own = _region("out", digits, {d.name: d.own for d in digits})
    body.append(yaml_op(f"assign: {own}     # my own shard", "src: x"))
    if combined:
        high = [d for d in digits if d.high]
        _gather_rounds(high, digits, 0, [], copies, body)
        _combined_gather(_LowDigits(digits), digits, len(high), copies, body)
        order = high + [_LOW]
    else:
        _gather_rounds(order, digits, 0, [], copies, body)
    return _text("all_gather", k, digits, order, f"""
buffers:
  x:   {{kind: input,  shape: [rows, cols], space: vmem}}
  out: {{kind: output, slots: [{_sizes(digits, [d.name for d in digits])}], shape: [rows, cols], shard: [N, rows, cols], space: vmem}}
semaphores:
  send_sem: dma
  sems: {{kind: dma, shape: [{len(order)}]}}""", copies, body,
        f"""# Recursive-doubling all-gather: lax.all_gather(x, {_names(k)}) (tiled=False: out[j] is the
# shard of the chip with row-major index j). The high digits first (their long routes
# while little is held), then the low ones; each round sends the blocks held (digits done
# free, the others mine) to the round's partners, into the same blocks there.""")


def _reduce_rounds(order: list[_Digit], digits: list[_Digit], sem0: int, last: str | None,
                   buffers: list[str], copies: list[str], body: list[list[str]],
                   fixed: dict[str, str] | None = None) -> list[str]:
    """Reduce-scatter rounds over `order` on `acc` (partial sums): each sends a partner the
    blocks it keeps, into its `recv_<digit>` slot t, and adds the q - 1 that arrive. The
    last round adds into `last` (one block) if given; `fixed`: digits already mine. Returns
    the digits then fixed."""
    fixed = dict(fixed or {})
    for i, d in enumerate(order):
        src = _region("acc", digits, {**fixed, d.name: d.partner_value("t")})
        free = [e.name for e in digits if e.name not in fixed and e.name != d.name]
        recv = f"recv_{d.name}"
        buffers.append(f"  {recv}: {{kind: vmem_scratch, slots: [\"max({d.radix} - 1, 1)\"{', ' if free else ''}"
                       f"{_sizes(digits, free)}], shape: [rows, cols]}}   # round {d.name}'s arrivals")
        name = f"reduce_{d.name}"
        copies.append(f"  {name}(t): {{src: {src}, dst: \"{recv}[t]\", to: {d.target('t')},\n"
                      f"    send_sem: send_sem, recv_sem: \"sems[{sem0 + i}]\"}}")
        fixed[d.name] = d.own
        mine = _region("acc", digits, fixed)
        ops = _sends(name, d, f"Along {d.a}, its {'high' if d.high else 'low'} digit: send each partner "
                     "the blocks it keeps, add the ranges that arrive into mine.")
        if last is not None and i == len(order) - 1:
            ops += [yaml_op(f"accumulate: {last}", f'src: "{recv}[0]"', f"base: {mine}"),
                    yaml_loop("t", _less(d, 2), [yaml_op(f"accumulate: {last}", f'src: "{recv}[t + 1]"')])]
        else:
            ops.append(yaml_loop("t", _less(d, 1), [yaml_op(f"accumulate: {mine}", f'src: "{recv}[t]"')]))
        body += _skip_none(d, ops)
    return list(fixed)


def psum_scatter(k: int, combined: bool = False) -> str:
    digits = _digits(k)
    order = [d for d in digits if not d.high] + [d for d in digits if d.high]
    buffers, copies, body = [], [], [yaml_op("assign: acc", "src: x   # the partial sums start as mine (a VMEM copy)")]
    if combined:
        low = _LowDigits(digits)
        _combined_reduce(low, digits, 0, buffers, copies, body)
        high = [d for d in digits if d.high]
        _reduce_rounds(high, digits, 1, "out", buffers, copies, body, {d.name: d.own for d in low.low})
        order = [_LOW] + high
    else:
        _reduce_rounds(order, digits, 0, "out", buffers, copies, body)
    slots = _sizes(digits, [d.name for d in digits])
    return _text("psum_scatter", k, digits, order, f"""
buffers:
  x:   {{kind: input,  slots: [{slots}], shape: [rows, cols], shard: [N * rows, cols], space: vmem}}
  out: {{kind: output, shape: [rows, cols], space: vmem}}
  acc: {{kind: vmem_scratch, slots: [{slots}], shape: [rows, cols]}}   # the partial sums of the blocks held
""" + "\n".join(buffers) + f"""
semaphores:
  send_sem: dma
  sems: {{kind: dma, shape: [{len(order)}]}}""", copies, body,
        f"""# Recursive-halving reduce-scatter: lax.psum_scatter(x, {_names(k)}) (tiled=False: chip j
# gets the sum of every chip's block j, j row-major). The low digits first (the large
# ranges over the short routes), then the high ones; each round sends each partner the
# partial sums of the blocks it keeps (digits done mine, this one its), into its
# `recv_<digit>` slots, and adds the ranges that arrive into mine (`acc`; the last round
# into `out`).""")


def psum(k: int, combined: bool = False) -> str:
    digits = _digits(k)
    low = [d for d in digits if not d.high]
    high = [d for d in digits if d.high]
    buffers, copies = [], []
    body = [yaml_op("assign: acc", "src: x   # the partial sums start as mine (a VMEM copy)")]
    body.append(["# The reduce-scatter along the low digits."])
    if combined:
        _combined_reduce(_LowDigits(digits), digits, 0, buffers, copies, body)
        fixed, rounds = [d.name for d in low], 1
    else:
        fixed, rounds = _reduce_rounds(low, digits, 0, None, buffers, copies, body), len(low)
    held = _region("acc", digits, {d.name: d.own for d in low})
    S = ", ".join(d.radix for d in high)
    body.append(["# The all-reduce of the S blocks held (every high digit free) by doubling along the high digits."])
    for i, d in enumerate(high):
        mix = f"mix_{d.name}"
        buffers.append(f"  {mix}: {{kind: vmem_scratch, slots: [{d.radix} - 1, {S}], shape: [rows, cols]}}"
                       f"   # round {d.name}'s arrivals")
        name = f"double_{d.name}"
        copies.append(f"  {name}(t): {{src: {held}, dst: \"{mix}[t]\", to: {d.target('t')},\n"
                      f"    send_sem: send_sem, recv_sem: \"sems[{rounds + i}]\"}}")
        body += _sends(name, d, f"Along {d.a}, its high digit: send the S blocks to each partner, add what arrives.")
        body.append(yaml_loop("t", f"{d.radix} - 1", [yaml_op(f"accumulate: {held}", f'src: "{mix}[t]"')]))
    out_held = _region("out", digits, {d.name: d.own for d in low})
    body.append(yaml_op(f"assign: {out_held}", f"src: {held}"))
    body.append(["# The all-gather along the low digits, the last first."])
    if combined:
        _combined_gather(_LowDigits(digits), digits, rounds + len(high), copies, body)
        order = [_LOW] + high + [_LOW]
    else:
        _gather_rounds(list(reversed(low)), digits, rounds + len(high), [d.name for d in high], copies, body)
        order = low + high + list(reversed(low))
    assert fixed == [d.name for d in low]
    slots = _sizes(digits, [d.name for d in digits])
    return _text("psum", k, digits, order, f"""
buffers:
  x:   {{kind: input,  slots: [{slots}], shape: [rows, cols], shard: [N * rows, cols], space: vmem}}
  out: {{kind: output, slots: [{slots}], shape: [rows, cols], shard: [N * rows, cols], space: vmem}}
  acc: {{kind: vmem_scratch, slots: [{slots}], shape: [rows, cols]}}   # the partial sums of the blocks held
""" + "\n".join(buffers) + f"""
semaphores:
  send_sem: dma
  sems: {{kind: dma, shape: [{len(order)}]}}""", copies, body,
        f"""# All-reduce: lax.psum(x, {_names(k)}). Halving along the low digits (the large ranges over
# the short routes: each round sends each partner the partial sums of the blocks it
# keeps), then the S = prod(H_a) blocks left, small by then, summed whole by doubling
# along the high digits (their long routes), then gathered back along the low digits.""")


def _names(k: int) -> str:
    axes = AXES[:k]
    return f'"{axes}"' if k == 1 else "(" + ", ".join(f'"{a}"' for a in axes) + ")"


def _text(kind: str, k: int, digits: list[_Digit], order: list[_Digit], buffers: str, copies: list[str],
          body: list[list[str]], what: str) -> str:
    name = f"{kind}_shifted_halving_{k}d"
    rounds = ", ".join(d.name for d in order)
    if _LOW in order:   # every low digit in one round: radix 1 or 2 only (axes of 8 or fewer)
        name += "_low1"
        what += ("\n# The low digits (radix 2 on an axis of 8) go in one round: each chip sends to the 2^k - 1"
                 "\n# chips of its low digits' cube at once, the farthest first (`_low1`), instead of one"
                 "\n# round of one hop per axis.")
        guard = _LowDigits(digits).guard()
        buffers = buffers.replace("\nsemaphores:\n", "\nsemaphores:\n  # every low digit's radix is 1 or 2 (an axis of 16 would need one of 4): exact only there\n"
                                  f"  low_radix_2: {{kind: regular, shape: [{guard}]}}\n", 1)
    return f"""{what}
# Generated by `ringc synth` (ringc/synth/families/shifted_halving.py).
# Along each axis the coordinate is h * L + l: a high digit of radix H = min(4, N_a) and a
# low digit of radix L = N_a / H (1: no round). The block index is split over one slot
# dimension per digit, so what a chip holds is a rectangle of them. A digit's round sends
# to the chips 2 u, -u and u away round the axis (radix 2: u), u = L for the high digit
# and 1 for the low one: translations by powers of 2, the longest route first (half way
# round, which goes the positive way, then -u, which shares no link with it). Rounds:
# {rounds}; each round's arrivals on its own semaphore (`sems`), each waited.
{head(name, kind, AXES[:k])}{buffers}
let:
{_lets(k)}
copies:
{chr(10).join(copies)}
body:
""" + "\n".join(f"  {ln}" for op in body for ln in op) + "\n"


GENERATORS = {"psum_scatter": psum_scatter, "all_gather": all_gather, "psum": psum}
WHAT_LOW1 = WHAT + "; the low digits (radix 2) in one round over their cube, the farthest first"


def generate(kind: str, topo) -> Iterator[Candidate]:
    """Where some axis has a low digit of radix 4 (16 chips), or where `recursive_halving`
    is not generated (past its `MAX_CHIPS`: v5p:8x8x8): elsewhere, on axes of 8 or fewer,
    the rounds are `recursive_halving`'s (a top digit of radix 4, a binary one below)."""
    if (kind not in GENERATORS or topo.ndim > 3
            or any(s < 2 or s > MAX_AXIS or s & (s - 1) for s in topo.shape)
            or (max(topo.shape) < MAX_AXIS and topo.size <= recursive_halving.MAX_CHIPS)):
        return
    yield Candidate(FAMILY, f"{kind}_shifted_halving_{topo.ndim}d", GENERATORS[kind](topo.ndim), WHAT, {})
    if topo.ndim > 1 and max(topo.shape) == 8:   # a low digit of radix 2 on some axis, none of 4
        yield Candidate(FAMILY, f"{kind}_shifted_halving_{topo.ndim}d_low1", GENERATORS[kind](topo.ndim, True),
                        WHAT_LOW1, {})
