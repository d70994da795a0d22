"""The symbolic memory's fast paths against the generic ones they stand for: after any
sequence of copies, accumulates, zeros and forgets, a memory that copies through
`Memory.copy` (what a pair of regions moved kept while the source's buffer is unchanged)
holds exactly what one holds that copies the generic way (read, translate, sort the
terms of what moved, write), pieces in the same order; and `canonical_value`'s shortcuts
are its general path."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from ringc.collectives import Piece
from ringc.verify.events import Region
from ringc.verify.semantics import Memory, canonical_value

SHAPE = (3, 4, 4)
NAMES = ("x", "y", "z")


@st.composite
def regions(draw, like: Region | None = None):
    """A region of one of the buffers: kept dims where it is not a point index. With
    `like`, one whose kept dims have `like`'s lengths (a copy's destination)."""
    name = draw(st.sampled_from(NAMES))
    box, kept = [], []
    for d, size in enumerate(SHAPE):
        if like is not None and d in like.kept:
            n = like.box[d][1] - like.box[d][0]
            lo = draw(st.integers(0, size - n))
            box.append((lo, lo + n))
            kept.append(d)
            continue
        if like is not None:
            lo = draw(st.integers(0, size - 1))
            box.append((lo, lo + 1))
            continue
        lo = draw(st.integers(0, size - 1))
        hi = draw(st.integers(lo + 1, size))
        box.append((lo, hi))
        if hi - lo > 1 or draw(st.booleans()):
            kept.append(d)
    return Region(name, draw(st.integers(0, 1)), tuple(box), tuple(kept), 4)


@st.composite
def programs(draw):
    """Steps over a few pairs of regions, each pair one pair of objects (as the unroller
    shares them between events), so a copy meets its pair again."""
    pairs = []
    for _ in range(draw(st.integers(1, 4))):
        src = draw(regions())
        pairs.append((src, draw(regions(like=src))))
    kinds = st.sampled_from(["copy", "copy", "copy", "accumulate", "zero", "forget"])
    return draw(st.lists(st.tuples(kinds, st.sampled_from(pairs)).map(lambda t: (t[0], *t[1])),
                         min_size=1, max_size=30))


def snapshot(mem: Memory) -> list:
    """Every stored piece, in the index's own order (classes as `_Index.overlapping` meets them)."""
    return [(key, [p for _, pieces in index.classes.values() for p in pieces])
            for key, index in sorted(mem.index.items())]


def generic_copy(mem: Memory, src: Region, dst: Region) -> None:
    """A copy the generic way: read, translate, sort the terms when a map moved, write."""
    moved = mem.translate(mem.read(src), src, dst)
    if any(s != d for s, d in zip(src.kept, dst.kept)) or any(src.box[s][0] != dst.box[d][0]
                                                             for s, d in zip(src.kept, dst.kept)) \
            or len(src.kept) < len(src.box):
        moved = [p if len(p.value) < 2 else Piece(p.box, tuple(sorted(p.value, key=repr))) for p in moved]
    mem.write(dst, moved, canonical=True)


def run(steps, copy) -> list:
    mem = Memory({name: SHAPE for name in NAMES})
    for d in (0, 1):
        mem.init_input(d, "x")
    out = []
    for kind, src, dst in steps:
        if kind == "copy":
            copy(mem, src, dst)
        elif kind == "accumulate":
            mem.accumulate(src, dst)
        elif kind == "zero":
            mem.zero(dst)
        else:
            mem.forget(dst)
        out.append(snapshot(mem))
    return out


@settings(max_examples=300, deadline=None)
@given(programs())
def test_copy_is_the_generic_copy(steps):
    """Repeated copies of the same pair of regions (what was moved is kept), copies after
    the source's buffer was written again (a kept entry must not answer), point-indexed
    sources (restricted values), sums of several terms (sorted after the move)."""
    assert run(steps, Memory.copy) == run(steps, generic_copy)


@settings(max_examples=100, deadline=None)
@given(programs(), st.integers(1, 3))
def test_copy_after_pairs_are_no_longer_kept(steps, trial):
    """A memory whose first `_PAIRS_TRIAL` new pairs found too few hits stops keeping
    pairs (here after 1 to 3 of them, so mid-program): its copies stay the generic ones."""
    from ringc.verify import semantics
    kept = semantics._PAIRS_TRIAL
    semantics._PAIRS_TRIAL = trial
    try:
        assert run(steps, Memory.copy) == run(steps, generic_copy)
    finally:
        semantics._PAIRS_TRIAL = kept


devices = st.one_of(st.integers(0, 6), st.tuples(st.integers(0, 6), st.integers(1, 4)).map(lambda t: (t[0], t[0] + t[1])))
imaps = st.lists(st.tuples(st.sampled_from([None, 0, 1, -1]), st.integers(0, 2)), min_size=2, max_size=2).map(tuple)
plain_terms = st.tuples(st.sampled_from(["x", "y"]), devices, imaps)



@st.composite
def products(draw):
    """A product of plain factors whose devices advance together (b's are a's plus an offset)."""
    (an, ad, am), (bn, _, bm) = draw(plain_terms), draw(plain_terms)
    off = draw(st.integers(0, 2))
    bd = ad + off if isinstance(ad, int) else (ad[0] + off, ad[1] + off)
    return ("@", (an, ad, am), (bn, bd, bm), draw(st.integers(0, 3)), draw(st.integers(4, 6)))
BOX = ((0, 4), (2, 3))


@settings(max_examples=300, deadline=None)
@given(st.one_of(plain_terms, products()))
def test_one_term_is_canonical_as_in_a_sum(term):
    """`canonical_value` of one term (returned as it is when its devices are already runs)
    is what the general path (a list, not a tuple, takes it) makes of it."""
    assert canonical_value((term,), BOX) == canonical_value([term], BOX)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 8), st.integers(1, 4)), min_size=1, max_size=3))
def test_runs_of_devices_against_their_multiplicities(spans):
    """A sum of one block over runs of devices: maximal runs of equal multiplicity, each
    as often as it counts, against the multiplicity of every single device."""
    terms = [("x", (lo, lo + n) if n > 1 else lo, ((0, 0), (1, 0))) for lo, n in spans]
    count = Counter(j for lo, n in spans for j in range(lo, lo + n))
    want, j = [], 0
    while j <= max(count):
        end = j
        while end + 1 <= max(count) and count[end + 1] == count[j]:
            end += 1
        want += [("x", j if end == j else (j, end + 1), ((0, 0), (1, 0)))] * count[j]
        j = end + 1
    assert canonical_value(terms, ((0, 4), (0, 3))) == tuple(sorted(want, key=repr))
