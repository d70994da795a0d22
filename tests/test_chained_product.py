"""Chained products in the symbolic data flow: a matmul whose left operand is itself a
matmul's result (attention's (q k^T) v), and the ring_attention collective that needs it.

- The meaning of a chained product: blocked over either contraction it adds up to the
  collective's term; a term added twice, one missing, or one built from the wrong KV
  block is a mismatch naming the terms.
- The canonical form of sums of chained terms over runs of devices (fixed q, varying
  k_j and v_j) does not depend on the order or the grouping, and rotates as device 0's.
- `schedules/ring_attention.yaml` and small mutations of it: right for N = 1..8, and
  each bug rejected with `wrong_result`; bad `collective` roles are bad input.
All cheap: no interpret mode, no compile (tests/test_run.py and test_compile.py run the
library).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ringc
from ringc.collectives import COLLECTIVES, KDIM, PRODUCT, Buffers
from ringc.ir import ScheduleError, load_text
from ringc.verify.events import Region
from ringc.verify.symmetric.program import Group
from ringc.verify.symmetric.moves import Rotator
from ringc.verify.semantics import Memory, canonical_value, contraction, mismatches, render_value

REPO = Path(__file__).resolve().parent.parent
RING_ATTENTION = (REPO / "schedules" / "ring_attention.yaml").read_text()
ROLES = Buffers("q", "out", "k", {"q": 4, "k": 4, "v": 4, "out": 4}, values="v")
ATTENTION = COLLECTIVES["ring_attention"]()
M, D, S = 8, 16, 8  # queries, head dim, keys per device
SHAPES = {"q": (M, D), "k": (S, D), "v": (S, D), "out": (M, D), "scores": (M, S), "kv": (2, S, D)}


def _region(name: str, device: int, box) -> Region:
    return Region(name, device, tuple(box), tuple(range(len(box))), 4)


def _memory(n: int) -> Memory:
    mem = Memory(SHAPES)
    for d in range(n):
        for name in ("q", "k", "v"):
            mem.init_input(d, name)
    return mem


def _attend(mem: Memory, me: int, j: int, *, d_blocks: int = 1, t_blocks: int = 1, times: int = 1,
            values_of: int | None = None) -> None:
    """out[me] += (q_me k_j^T) v_j, the scores blocked over d and the second product over t
    (rows of the KV block); `values_of` takes the values from another device (a bug)."""
    scores = _region("scores", me, [(0, M), (0, S)])
    mem.zero(scores)
    bd = D // d_blocks
    for i in range(d_blocks):  # scores += q[:, block] @ k_j[:, block]^T
        mem.matmul(scores, _region("q", me, [(0, M), (i * bd, (i + 1) * bd)]),
                   _region("k", j, [(0, S), (i * bd, (i + 1) * bd)]), True, contract=(1, 1))
    bt = S // t_blocks
    v = j if values_of is None else values_of
    for _ in range(times):
        for i in range(t_blocks):  # out += scores[:, block] @ v_j[block]
            mem.matmul(_region("out", me, [(0, M), (0, D)]), _region("scores", me, [(0, M), (i * bt, (i + 1) * bt)]),
                       _region("v", v, [(i * bt, (i + 1) * bt), (0, D)]), True)


def _ring(n: int, **bug) -> list:
    """Every device attends to every device's block (in ring order), optionally with one
    bug on device 0; returns the mismatches."""
    mem = _memory(n)
    for me in range(n):
        mem.zero(_region("out", me, [(0, M), (0, D)]))
        for s in range(n):
            j = (me - s) % n
            _attend(mem, me, j, **(bug if me == 0 and j == 1 % n else {}))
    return mismatches(ATTENTION, ROLES, mem, range(n), n, SHAPES)


@pytest.mark.parametrize("d_blocks, t_blocks", [(1, 1), (2, 1), (1, 2), (4, 4), (1, S), (D, 1), (D, S)])
def test_blocked_chained_products_add_up_to_the_meaning(d_blocks, t_blocks):
    mem = _memory(3)
    for me in range(3):
        mem.zero(_region("out", me, [(0, M), (0, D)]))
        for j in (2, 0, 1):  # any order of the blocks
            _attend(mem, me, j, d_blocks=d_blocks, t_blocks=t_blocks)
    assert not mismatches(ATTENTION, ROLES, mem, range(3), 3, SHAPES)


def test_the_chained_term_is_a_product_of_a_product():
    mem = _memory(2)
    out = _region("out", 0, [(0, M), (0, D)])
    mem.zero(out)
    _attend(mem, 0, 1, t_blocks=2)
    (piece,) = mem.read(out)
    (term,) = piece.value
    outer, inner = term, term[1]
    assert outer[0] == inner[0] == PRODUCT and contraction(outer) == KDIM - 1 and contraction(inner) == KDIM
    assert outer[3:] == (0, S) and inner[3:] == (0, D)  # the two t blocks merged
    assert render_value(piece.value, piece.box) == \
        "sum(t in 0:8) (sum(k in 0:16) q@0[0:8, k] * k@1[t, k]) * v@1[t, 0:16]"


@pytest.mark.parametrize("bug", [{"times": 2}, {"times": 0}, {"values_of": 0}, {"t_blocks": 2, "times": 2},
                                 {"t_blocks": S, "times": 2}, {"d_blocks": D, "values_of": 0}])
def test_a_term_twice_missing_or_from_the_wrong_block_is_a_mismatch(bug):
    found = _ring(3, **bug)
    assert [m.device for m in found] == [0]
    assert "sum(t in" in found[0].got and "v@1" in found[0].want


# -- canonical form ------------------------------------------------------------------

def _chained(me, lo: int, hi: int, t0: int, t1: int) -> tuple:
    dev = lo if hi == lo + 1 else (lo, hi)
    t = KDIM - 1
    return (PRODUCT, (PRODUCT, ("q", me, ((0, 0), (KDIM, 0))), ("k", dev, ((t, 0), (KDIM, 0))), 0, D),
            ("v", dev, ((t, 0), (1, 0))), t0, t1)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 7), st.lists(st.tuples(st.integers(0, 7), st.integers(0, 3)), min_size=1, max_size=16),
       st.randoms())
def test_sums_of_chained_products_are_canonical(me, cells, rnd):
    """A sum of chained products (q_me k_j^T) v_j over (device j, t block) cells is the
    same value written cell by cell or with neighbouring devices merged into runs, in any
    order; one more cell changes it."""
    box = ((0, M), (0, D))
    one = canonical_value([_chained(me, j, j + 1, 2 * t, 2 * t + 2) for j, t in cells], box)
    rest, terms = sorted(cells), []
    while rest:
        j, t = rest.pop(0)
        if (j + 1, t) in rest and me not in (j, j + 1) and rnd.random() < 0.5:
            rest.remove((j + 1, t))
            terms.append(_chained(me, j, j + 2, 2 * t, 2 * t + 2))
        else:
            terms.append(_chained(me, j, j + 1, 2 * t, 2 * t + 2))
    rnd.shuffle(terms)
    assert canonical_value(terms, box) == one
    j, t = cells[0]
    assert canonical_value(terms + [_chained(me, j, j + 1, 2 * t, 2 * t + 2)], box) != one


def test_the_meaning_is_at_most_three_runs():
    """sum over j of (q_me k_j^T) v_j merges into j < me, j = me, j > me: the quotient check
    at N = 1024 compares three terms, not 1024."""
    (piece,) = ATTENTION.expected(1024, 5, SHAPES, ROLES)
    assert len(canonical_value(piece.value, piece.box)) == 3


@pytest.mark.parametrize("n, delta", [(5, 1), (5, 3), (8, 7)])
def test_rotating_device_0s_chained_sum_is_device_deltas(n, delta):
    rot = Rotator(SimpleNamespace(n=n, axis_sizes={"x": n}, steps={}, shapes=SHAPES, group=Group.TRANSLATION))
    (mine,) = ATTENTION.expected(n, 0, SHAPES, ROLES)
    (theirs,) = ATTENTION.expected(n, delta, SHAPES, ROLES)
    box = mine.box
    (moved,) = rot.pieces("out", [mine._replace(value=canonical_value(mine.value, box))], delta)
    assert canonical_value(moved.value, box) == canonical_value(theirs.value, box)


# -- the library schedule ----------------------------------------------------------------

def _mutate(old: str, new: str) -> str:
    assert RING_ATTENTION.count(old) == 1, old
    return RING_ATTENTION.replace(old, new)


def test_ring_attention_is_right_on_every_ring():
    sched = ringc.load(REPO / "schedules" / "ring_attention.yaml")
    for n in range(1, 9):
        report = ringc.check(sched, n)
        assert report.ok and not report.findings, (n, report.to_text())
        # the verdict says that the softmax is not checked
        assert any(a.startswith("meaning: linear attention") for a in report.assumptions), report.assumptions


@pytest.mark.parametrize("old, new", [
    ('b: "kv[working, 1]"', 'b: "kv[working, 0]"'),               # keys used as values
    ("    accumulate: true\n", "    accumulate: false\n"),          # each step overwrites the sum
    ("      - wait: load_v\n", "      - wait: load_v\n      - matmul: scores\n        a: q\n        b: \"kv[0, 0]\"\n"
     "        contract: [1, 1]\n      - matmul: out\n        a: scores\n        b: \"kv[0, 1]\"\n"
     "        accumulate: true\n"),                                   # the own block twice
    ("grid: {step: N}", "grid: {step: N + 1}"),                    # one block twice
], ids=["keys_as_values", "no_accumulate", "own_block_twice", "grid_one_step_long"])
def test_ring_attention_bugs_are_wrong_results(old, new):
    sched = load_text(_mutate(old, new), "mine.yaml")
    report = ringc.check(sched, 4)
    assert "wrong_result" in report.kinds(), report.to_text()


@pytest.mark.parametrize("old, new, says", [
    ("values: v, ", "", "collective.values is not set"),
    ("values: v, ", "values: k, ", "both name `k`"),
    ("values: v, ", "values: w, ", "collective.values `w`"),
    ("collective: {kind: ring_attention, input: q, rhs: k, values: v, output: out}",
     "collective: {kind: psum, input: q, values: v, output: out}", "applies to ring_attention only"),
])
def test_bad_roles_are_bad_input(old, new, says):
    with pytest.raises(ScheduleError) as info:
        load_text(_mutate(old, new), "mine.yaml")
    err = info.value
    assert says in err.message and err.fix and err.file == "mine.yaml" and err.line == 32, err
