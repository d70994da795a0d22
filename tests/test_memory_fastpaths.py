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

from ringc.collectives import KDIM, Piece
from ringc.verify import semantics
from ringc.verify.events import Region, matmul_dims
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


# --- Sums, matmuls and accumulates: the shortcuts against the general paths. ---

def test_sum_shortcuts_cover_the_cases_they_claim():
    """The cases `semantics._sum` answers without `_sum_general`, each against it: one
    term, different keys, adjacent k ranges, adjacent device runs."""
    a = ("@", ("x", (0, 3), ((0, 0), (-1, 0))), ("y", (1, 4), ((-1, 0), (1, 0))), 0, 4)
    cases = [(a,), (a, a[:3] + (4, 6)), (a, ("@", ("x", (3, 5), a[1][2]), ("y", (4, 6), a[2][2]), 0, 4)),
             (a, ("@", ("x", 5, a[1][2]), ("y", 6, a[2][2]), 0, 4)), (a, ("@", ("z", 0, a[1][2]), a[2], 0, 4))]
    for terms in cases:
        assert semantics._sum(terms) == semantics._sum_general(terms)
    assert len(semantics._sum(cases[1])) == len(semantics._sum(cases[2])) == 1


flat_products = st.builds(
    lambda an, bn, lo, n, off, am, bm, k0, k: ("@", (an, lo if n == 1 else (lo, lo + n), am),
                                             (bn, lo + off if n == 1 else (lo + off, lo + off + n), bm), k0, k0 + k),
    st.sampled_from(["x", "y"]), st.sampled_from(["x", "y"]), st.integers(0, 5), st.integers(1, 3),
    st.integers(0, 1), st.sampled_from([((0, 0), (-1, 0)), ((None, 1), (-1, 0))]),
    st.sampled_from([((-1, 0), (1, 0)), ((-1, 2), (1, 0))]), st.integers(0, 4), st.integers(0, 3))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(flat_products, products(), plain_terms), min_size=1, max_size=4))
def test_sum_is_the_general_sum(terms):
    """`_sum`'s shortcuts (one, two, or more flat products whose devices are runs as
    `device_run` writes them) give what the general path gives, for any terms (runs
    written otherwise, empty k ranges, plain terms take the general path)."""
    assert semantics._sum(terms) == semantics._sum_general(terms)


@settings(max_examples=300, deadline=None)
@given(flat_products, st.lists(st.tuples(st.integers(0, 8), st.integers(1, 3)), min_size=2, max_size=5),
       st.integers(0, 4), st.integers(0, 5))
def test_sum_of_one_key_over_device_runs(t, spans, other, what):
    """Many products of one key and one k range (a psum of partial products: the runs a
    ring's partial sums gather), one of them perhaps different in one respect (its k range,
    a factor's name or map, its devices' offset): `_sum` is the general sum."""
    (an, _, am), (bn, _, bm), k0, k1 = t[1:]

    def product(lo, n, an=an, am=am, bn=bn, bm=bm, off=1, k1=k1):
        return ("@", (an, lo if n == 1 else (lo, lo + n), am), (bn, lo + off if n == 1 else (lo + off, lo + off + n), bm), k0, k1)
    terms = [product(lo, n) for lo, n in spans]
    if other < len(terms):
        lo, n = spans[other]
        terms[other] = product(lo, n, **[{"k1": k1 + 1}, {"an": "z"}, {"am": ((0, 2),)}, {"bn": "z"},
                                          {"bm": ((1, 2),)}, {"off": 2}][what])
    assert semantics._sum(terms) == semantics._sum_general(terms)


BOXES = [((0, 4), (2, 3)), ((0, 4), (0, 3)), ((1, 2), (0, 3))]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(plain_terms, products()), min_size=1, max_size=3),
       st.lists(st.one_of(plain_terms, products()), min_size=0, max_size=3), st.sampled_from(BOXES))
def test_canonical_values_add_as_their_sum(u, v, box):
    """What `_sum` relies on: `_canonical` leaves every term of a canonical value as it is,
    so the canonical value of two canonical values' terms is their `_sum`."""
    cu, cv = canonical_value(u, box), canonical_value(v, box)
    single = semantics._single_dims(box)
    assert all(semantics._canonical(t, box, single) == t for t in cu + cv)
    assert semantics._sum(cu + cv) == canonical_value(cu + cv, box) == canonical_value(list(u) + list(v), box)


MM = (4, 4)
MM_NAMES = ("p", "q", "r", "s")


def generic_write(mem: Memory, r: Region, new: list) -> None:
    """`Memory.write` the generic way: every piece `r` meets removed, what lies outside
    `r` added back (restricted), then the new pieces, each made canonical."""
    index = mem._pieces((r.device, r.buffer))
    for p in index.remove(index.meeting(r.box)):
        if not semantics.box_inside(p.box, r.box):
            for b in semantics._subtract(p.box, r.box):
                index.add(Piece(b, semantics.restrict_value(p.value, p.box, b)))
    for p in new:
        index.add(Piece(p.box, canonical_value(p.value, p.box)))


def generic_accumulate(mem: Memory, src: Region, dst: Region) -> None:
    incoming = mem.translate(mem.read(src), src, dst)
    generic_write(mem, dst, [Piece(ix, a.value + b.value) for a in mem.read(dst) for b in incoming
                             if (ix := semantics._intersect(a.box, b.box)) is not None])


def generic_matmul(mem: Memory, dst: Region, a: Region, b: Region, accumulate: bool, contract) -> None:
    """dst (+)= a @ b as the definition reads: every pair of pieces sharing k indices adds
    its raw product terms to the overlapping pieces, and the sums are made canonical at
    the end (no sum made canonical on the way, no term made canonical where it is made)."""
    ka, ra, kb, cb = matmul_dims(a, b, contract)
    rd, cd = dst.kept
    result = mem.read(dst) if accumulate else [Piece(dst.box, ())]
    for pa in mem.read(a):
        for pb in mem.read(b):
            k0 = max(pa.box[ka][0] - a.box[ka][0], pb.box[kb][0] - b.box[kb][0])
            k1 = min(pa.box[ka][1] - a.box[ka][0], pb.box[kb][1] - b.box[kb][0])
            if k0 >= k1:
                continue
            box = list(dst.box)
            box[rd] = tuple(x - a.box[ra][0] + dst.box[rd][0] for x in pa.box[ra])
            box[cd] = tuple(x - b.box[cb][0] + dst.box[cd][0] for x in pb.box[cb])
            terms = []
            for ta in (u for t in pa.value for u in semantics._single(t)):
                for tb in (u for t in pb.value for u in semantics._single(t)):
                    odd = next((t for t in (ta, tb) if t[0][:1] in (semantics.UNINIT, semantics.OPAQUE)), None)
                    depth = max(semantics._depth(ta), semantics._depth(tb))
                    if odd is not None or depth >= semantics.MAX_DEPTH:
                        terms.append(odd or (semantics.OPAQUE + dst.buffer, dst.device, ()))
                        continue
                    m = KDIM - depth
                    terms.append(("@", semantics._remap(ta, semantics._factor(pa, a, ka, ra, dst, rd, m)),
                                  semantics._remap(tb, semantics._factor(pb, b, kb, cb, dst, cd, m)), k0, k1))
            extra, added = tuple(box), []
            for p in result:
                ix = semantics._intersect(p.box, extra)
                if ix is None:
                    added.append(p)
                    continue
                added += [Piece(bx, p.value) for bx in semantics._subtract(p.box, ix)]
                added.append(Piece(ix, p.value + tuple(terms)))
            result = added
    generic_write(mem, dst, result)


@st.composite
def mm_region(draw, rows: int | None = None, cols: int | None = None):
    """A 2-D region of one of the 4 x 4 buffers, of the given lengths (else any)."""
    box = []
    for size, n in zip(MM, (rows, cols)):
        n = draw(st.integers(1, size)) if n is None else n
        lo = draw(st.integers(0, size - n))
        box.append((lo, lo + n))
    return Region(draw(st.sampled_from(MM_NAMES)), draw(st.integers(0, 1)), tuple(box), (0, 1), 4)


@st.composite
def mm_steps(draw):
    """Copies, accumulates, zeros and forgets (which cut the buffers into pieces of sums,
    of garbage), then matmuls: of either operand transposed, accumulating or not, whose
    operands may hold products themselves (chained terms) or garbage."""
    steps = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["copy", "accumulate", "zero", "forget", "matmul", "matmul"]))
        if kind == "matmul":
            m, n, k = (draw(st.integers(1, 4)) for _ in range(3))
            contract = draw(st.sampled_from([(1, 0), (1, 1), (0, 0), (0, 1)]))
            a = draw(mm_region(*((m, k) if contract[0] == 1 else (k, m))))
            b = draw(mm_region(*((k, n) if contract[1] == 0 else (n, k))))
            steps.append(("matmul", draw(mm_region(m, n)), a, b, draw(st.booleans()), contract))
            continue
        src = draw(mm_region())
        dst = draw(mm_region(src.box[0][1] - src.box[0][0], src.box[1][1] - src.box[1][0]))
        steps.append((kind, src, dst))
    return steps


def run_mm(steps, matmul, accumulate) -> list:
    mem = Memory({name: MM for name in MM_NAMES})
    for d in (0, 1):
        for name in ("p", "q"):
            mem.init_input(d, name)
    out = []
    for kind, *args in steps:
        if kind == "matmul":
            matmul(mem, *args)
        elif kind == "accumulate":
            accumulate(mem, *args)
        elif kind == "copy":
            mem.copy(*args)
        elif kind == "zero":
            mem.zero(args[1])
        else:
            mem.forget(args[1])
        out.append(snapshot(mem))
    return out


@settings(max_examples=200, deadline=None)
@given(mm_steps())
def test_matmul_and_accumulate_are_the_generic_ones(steps):
    """`Memory.matmul` (products made canonical where they are made, sums of canonical
    values as their `_sum`, pieces written over the stored ones they fill by swapping) and
    `Memory.accumulate` hold exactly what the generic ones hold, pieces in the same order."""
    assert run_mm(steps, Memory.matmul, Memory.accumulate) == run_mm(steps, generic_matmul, generic_accumulate)


nested_terms = st.builds(lambda a, b, k0: ("@", a, b, k0, k0 + 2), products(), plain_terms, st.integers(0, 2))
odd_terms = st.builds(lambda c, d: (c + "x", d, ()), st.sampled_from(["?", "!"]), st.integers(0, 12))
any_terms = st.one_of(plain_terms, products(), flat_products, nested_terms, odd_terms)


@settings(max_examples=300, deadline=None)
@given(st.lists(any_terms, max_size=5))
def test_sorted_terms_is_repr_order(terms):
    """`sorted_terms` (by the heads' texts when they tell the terms apart) is the order
    by repr, for any terms: plain, products, chained, garbage, devices ints or runs."""
    assert semantics.sorted_terms(terms) == tuple(sorted(terms, key=repr))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(plain_terms, products(), nested_terms), min_size=2, max_size=4),
       st.lists(st.tuples(st.sampled_from([None, 0, 1]), st.integers(-3, 12)), min_size=2, max_size=2))
def test_terms_whose_heads_differ_keep_their_order_when_maps_move(terms, table):
    """`_Shift.moved` keeps the order of a sum whose terms' heads differ (`_heads_apart`)
    while every map moves by one table: the order by repr is decided before the maps."""
    value = semantics.sorted_terms(terms)
    moved = tuple(semantics._remap(t, table) for t in value)
    if semantics._heads_apart(value):
        assert moved == tuple(sorted(moved, key=repr))


@settings(max_examples=300, deadline=None)
@given(programs())
def test_accumulate_is_the_generic_one(steps):
    """`Memory.accumulate` over pieces cut alike (each sum its twin's, `_sum`) or not (every
    overlap summed), regions with point indices: what the generic one holds."""
    fast, slow = [], []
    for out, acc in ((fast, Memory.accumulate), (slow, generic_accumulate)):
        mem = Memory({name: SHAPE for name in NAMES})
        for d in (0, 1):
            mem.init_input(d, "x")
        for kind, src, dst in steps:
            if kind == "copy":
                mem.copy(src, dst)
            elif kind == "accumulate":
                acc(mem, src, dst)
            elif kind == "zero":
                mem.zero(dst)
            else:
                mem.forget(dst)
            out.append(snapshot(mem))
    assert fast == slow


def test_accumulate_over_pieces_cut_alike_but_one():
    """Both sides in three pieces, the first alike and the others not (nor garbage alike):
    every overlap summed, as the generic accumulate sums them."""
    def cut(mem: Memory) -> None:
        for name, cols in (("y", 3), ("z", 2)):
            mem.copy(Region("x", 0, ((1, 2), (2, 4), (0, cols)), (1, 2), 4), Region(name, 0, ((0, 1), (2, 4), (0, cols)), (1, 2), 4))
            mem.zero(Region(name, 0, ((0, 1), (0, 2), (0, 4)), (1, 2), 4))  # read first (the last written)
    dst, src = (Region(name, 0, ((0, 1), (0, 4), (0, 4)), (1, 2), 4) for name in ("y", "z"))
    held = []
    for acc in (Memory.accumulate, generic_accumulate):
        mem = Memory({name: SHAPE for name in NAMES})
        mem.init_input(0, "x")
        cut(mem)
        assert len(mem.read(src)) == len(mem.read(dst)) == 3
        acc(mem, src, dst)
        held.append(snapshot(mem))
    assert held[0] == held[1]
