"""Symbolic data flow: prove the outputs equal the collective's meaning.

Like MSCCLang's chunk checker, but over regions instead of fixed chunks. Memory is a
set of boxes per (device, buffer), each holding a symbolic sum of *terms*. A term is
"input buffer `x` of device j, read through an affine index map", so a copy or an
accumulate just translates boxes and merges sums; nothing depends on the data's size.
A matmul makes *product* terms: "sum over k in [k0, k1) of A[.., k] * B[k, ..]", whose
two factors are input terms with the contraction index `k` in their maps. Products
over adjacent k ranges of the same factors merge, so a matmul blocked over k adds up
to the same term as the unblocked one. A factor may itself be a product (a matmul of a
matmul's result: attention's (q k^T) v): the chained term "sum over t of (sum over k of
q[r, k] k[t, k]) * v[t, c]". Each product binds its own contraction index, named in the
maps by a marker below zero: `KDIM` (-1) for a product of plain factors, `KDIM - 1` for
one whose deepest factor is such a product, and so on (`contraction`), so an inner
product's maps can mention the outer index (k's rows are the outer t). At the end
every output box is compared with what the collective prescribes: which device's
block (ppermute, all_gather, all_to_all), which sum of blocks (psum, psum_scatter),
which sum of products (all_gather_matmul, matmul_psum_scatter) or of chained products
(ring_attention).

Effects are applied in the order of the maximal run, a DMA's at its start. That is
sound for the outcome because the race analysis separately proves no access overlaps
an in-flight DMA; a racy schedule is reported as such and its data flow is moot.
Values are exact: a cast changes no term (rounding is `ringc run`'s business).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from ..collectives import KDIM, PRODUCT, Box, Buffers, Collective, IndexMap, Piece, Term, Value, unravel
from .events import COMPUTES, Compute, DmaStart, Event, Program, Region, matmul_dims

__all__ = ["unwritten_outputs", "unwritten_reads", "UNINIT", "OPAQUE", "NOT_FOLLOWED", "APPLIED", "base_name", "PointwiseMeaning", "GroupedMeaning", "MAX_DEPTH", "pointwise", "contraction", "term_leaves", "with_leaves", "box_meets", "box_inside",
           "restrict_value", "device_span", "device_run", "canonical_value", "sorted_terms", "Memory", "render_value", "box_text", "Mismatch", "check_semantics", "apply", "mismatches"]

# Terms, index maps, pieces: the vocabulary a collective's meaning is written in (`ringc.collectives`).
UNINIT = "?"          # prefix: uninitialized memory of a buffer
OPAQUE = "!"          # prefix: a value the model does not follow (arithmetic it does not model)
MAX_DEPTH = 4         # products nested deeper than this are not followed (OPAQUE): no blow-up


def _is_product(term: Term) -> bool:
    return term[0] == PRODUCT


def _depth(term: Term) -> int:
    """0 for a plain term, 1 for a product of plain factors, 1 + its deepest factor's else."""
    if term[0] != PRODUCT:
        return 0
    a, b = term[1], term[2]
    if a[0] != PRODUCT and b[0] != PRODUCT:
        return 1
    return 1 + max(_depth(a), _depth(b))


def contraction(term: Term) -> int:
    """The marker of a product's own contraction index in its factors' maps: KDIM for a
    product of plain factors, one below the deepest marker its factors bind otherwise (so
    a nested product's index never captures an inner one's)."""
    return KDIM - _depth(term) + 1


def _is_index(d: int | None) -> bool:
    """A map entry's target is a contraction index (a marker below zero), not a buffer dim."""
    return d is not None and d < 0


def term_leaves(term: Term) -> list[Term]:
    """A term's plain factors, left to right (itself if it is plain)."""
    if term[0] != PRODUCT:
        return [term]
    return term_leaves(term[1]) + term_leaves(term[2])


def with_leaves(term: Term, leaves: Iterable[Term]) -> Term:
    """`term` with its plain factors replaced, left to right, by `leaves`."""
    it = iter(leaves)

    def build(t: Term) -> Term:
        if t[0] != PRODUCT:
            return next(it)
        return (PRODUCT, build(t[1]), build(t[2]), t[3], t[4])
    return build(term)


def _remap(term: Term, table: list[tuple[int | None, int]]) -> Term:
    """The term with its maps (a product's factors included) moved by a table per buffer
    dim: the entry (d, off) becomes (table[d][0], off + table[d][1]); constant and
    contraction entries stay."""
    if term[0] == PRODUCT:
        a, b = term[1], term[2]
        if a[0] == PRODUCT or b[0] == PRODUCT:
            return (PRODUCT, _remap(a, table), _remap(b, table), term[3], term[4])
        # a product of plain factors (the common one): both maps moved here
        return (PRODUCT, (a[0], a[1], tuple([e if e[0] is None or e[0] < 0 else (table[e[0]][0], e[1] + table[e[0]][1])
                                             for e in a[2]])),
                (b[0], b[1], tuple([e if e[0] is None or e[0] < 0 else (table[e[0]][0], e[1] + table[e[0]][1])
                                    for e in b[2]])), term[3], term[4])
    name, dev, imap = term
    return (name, dev, tuple([e if e[0] is None or e[0] < 0 else (table[e[0]][0], e[1] + table[e[0]][1])
                              for e in imap]))


def _shift_index(term: Term, marker: int, by: int) -> Term:
    """The term with every map entry on contraction index `marker` moved by `by`."""
    if term[0] == PRODUCT:
        return (PRODUCT, _shift_index(term[1], marker, by), _shift_index(term[2], marker, by), term[3], term[4])
    name, dev, imap = term
    return (name, dev, tuple((d, off + by) if d == marker else (d, off) for d, off in imap))


def _intersect(a: Box, b: Box) -> Box | None:
    if a == b:  # reading back a stored piece: the common case
        return a
    out = []
    for (a0, a1), (b0, b1) in zip(a, b):
        lo = a0 if a0 > b0 else b0  # not max()/min(): this runs millions of times
        hi = a1 if a1 < b1 else b1
        if lo >= hi:
            return None
        out.append((lo, hi))
    return tuple(out)


def box_meets(a: Box, b: Box) -> bool:
    for (a0, a1), (b0, b1) in zip(a, b):
        if a1 <= b0 or b1 <= a0:
            return False
    return True


def box_inside(a: Box, b: Box) -> bool:
    for (a0, a1), (b0, b1) in zip(a, b):
        if a0 < b0 or b1 < a1:
            return False
    return True


def _volume(box: Box) -> int:
    v = 1
    for lo, hi in box:
        v *= hi - lo
    return v


def _subtract(a: Box, b: Box) -> list[Box]:
    """a minus b, as disjoint boxes."""
    if not box_meets(a, b):
        return [a]
    out, rest = [], a
    for d, ((a0, a1), (b0, b1)) in enumerate(zip(a, b)):
        if a0 < b0:
            out.append(rest[:d] + ((a0, b0),) + rest[d + 1:])
        if b1 < a1:
            out.append(rest[:d] + ((b1, a1),) + rest[d + 1:])
        if a0 < b0 or b1 < a1:
            rest = rest[:d] + ((a0 if a0 > b0 else b0, a1 if a1 < b1 else b1),) + rest[d + 1:]
    return out


def _canonical(term: Term, box: Box, single: frozenset[int]) -> Term:
    """Fix map entries over dims where the box is a single index (`single`), so equal data
    compares equal; a product's contraction index is renumbered so its left factor reads k
    itself. Terms that need neither come back as they are."""
    product = term[0] == PRODUCT
    if single and any([e[0] in single for f in ((term[1:3] if term[1][0] != PRODUCT and term[2][0] != PRODUCT
                                                 else term_leaves(term)) if product else (term,)) for e in f[2]]):
        term = _remap(term, [(None, lo) if d in single else (d, 0) for d, (lo, _) in enumerate(box)])
    if not product:
        return term
    _, a, b, k0, k1 = term
    if a[0] == PRODUCT or b[0] == PRODUCT:
        return _renumber(term)
    shift = next((off for d, off in a[2] if d == KDIM), 0)
    if not shift:
        return term

    def renumber(t: Term) -> Term:
        return (t[0], t[1], tuple((d, off - shift) if d == KDIM else (d, off) for d, off in t[2]))
    return (PRODUCT, renumber(a), renumber(b), k0 + shift, k1 + shift)


def _renumber(term: Term) -> Term:
    """A nested product with every level's contraction index renumbered (innermost first)
    so that its first factor reading the index reads it at offset 0."""
    if term[0] != PRODUCT:
        return term
    _, a, b, k0, k1 = term
    a, b = _renumber(a), _renumber(b)
    m = contraction(term)
    shift = next((off for leaf in term_leaves(a) + term_leaves(b) for d, off in leaf[2] if d == m), 0)
    if shift:
        a, b, k0, k1 = _shift_index(a, m, -shift), _shift_index(b, m, -shift), k0 + shift, k1 + shift
    return (PRODUCT, a, b, k0, k1)


# `_single_dims` of the boxes met so far (a few hundred distinct ones in a run), forgotten
# all at once past `_SINGLES_LIMIT`.
_SINGLES: dict[Box, frozenset[int]] = {}
_SINGLES_LIMIT = 1 << 14


def _single_dims(box: Box) -> frozenset[int]:
    """The dims along which `box` is a single index."""
    single = _SINGLES.get(box)
    if single is None:
        if len(_SINGLES) >= _SINGLES_LIMIT:
            _SINGLES.clear()
        single = _SINGLES[box] = frozenset(d for d, (lo, hi) in enumerate(box) if hi - lo == 1)
    return single


def restrict_value(value: Value, box: Box, inner: Box) -> Value:
    """A value canonical for `box`, made canonical for `inner` inside it: the same value
    unless `inner` is a single index along a dim where `box` is not."""
    if len(value) == 1 and value[0][2] == ():
        return value  # one plain term without a map (garbage, opaque data): canonical for any box
    for (a0, a1), (b0, b1) in zip(box, inner):
        if b1 - b0 == 1 and a1 - a0 != 1:
            return canonical_value(value, inner)
    return value


def device_span(dev: Any) -> tuple[int, int]:
    """A term's devices as [lo, hi): one device j, or a run (lo, hi) of consecutive ones."""
    return (dev, dev + 1) if isinstance(dev, int) else dev


def device_run(lo: int, hi: int) -> Any:
    return lo if hi == lo + 1 else (lo, hi)


def _runs(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The canonical form of a multiset of integer intervals: maximal runs of equal
    multiplicity, each listed as often as it counts."""
    if len(spans) == 1:
        return spans
    if len(spans) == 2:  # the common merge (a block added to a run): the same runs, found directly
        (a0, a1), (b0, b1) = spans
        if a0 > b0 or a0 == b0 and a1 > b1:
            (a0, a1), (b0, b1) = (b0, b1), (a0, a1)
        if a0 < a1 == b0 < b1:
            return [(a0, b1)]  # adjacent: one run of multiplicity one
        if a0 < a1 < b0 < b1:
            return [(a0, a1), (b0, b1)]  # apart: each its own run
    edges: dict[int, int] = defaultdict(int)
    for lo, hi in spans:
        edges[lo] += 1
        edges[hi] -= 1
    out: list[tuple[int, int]] = []
    count, start = 0, 0
    for x in sorted(x for x, e in edges.items() if e):
        out += [(start, x)] * count
        count, start = count + edges[x], x
    return out


def _rectangles(rects: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
    """The canonical form of a multiset of (device run) x (k range) rectangles: maximal
    device runs over which the k ranges (as `_runs`) are the same."""
    if len(rects) == 1:
        return rects
    (x0, x1, k0, k1) = rects[0]
    if all(r[2] == k0 and r[3] == k1 for r in rects):  # one k range: the device runs decide
        return [(a, b, k0, k1) for a, b in _runs([r[:2] for r in rects])]
    if all(r[0] == x0 and r[1] == x1 for r in rects):  # one device run: the k ranges decide
        return [(x0, x1, a, b) for a, b in _runs([r[2:] for r in rects])]
    xs = sorted({x for r in rects for x in r[:2]})
    cols: list[tuple[int, int, list]] = []
    for x0, x1 in zip(xs, xs[1:]):
        ks = _runs([(k0, k1) for a0, a1, k0, k1 in rects if a0 <= x0 and x1 <= a1])
        if not ks:
            continue
        if cols and cols[-1][1] == x0 and cols[-1][2] == ks:
            cols[-1] = (cols[-1][0], x1, ks)
        else:
            cols.append((x0, x1, ks))
    return [(x0, x1, k0, k1) for x0, x1, ks in cols for k0, k1 in ks]


def canonical_value(terms: Iterable[Term], box: Box) -> Value:
    """The canonical sum. Terms that differ only in the device, over consecutive devices,
    merge into one run (a psum of N blocks is one term, not N); products merge over
    adjacent k ranges and over runs of devices whose factors keep the same offset."""
    single = _single_dims(box)
    if isinstance(terms, tuple) and len(terms) == 1:  # the common case: nothing to merge
        t = _canonical(terms[0], box, single)
        # Devices as runs (`device_run`): a device j or a run of two or more stays as it is.
        if _is_product(t):
            a, b = t[1], t[2]
            if a[0] == PRODUCT or b[0] == PRODUCT:
                return (with_leaves(t, [(n, device_run(*device_span(d)), m) for n, d, m in term_leaves(t)]),)
            ad, bd = a[1], b[1]
            if (isinstance(ad, int) or ad[1] != ad[0] + 1) and (isinstance(bd, int) or bd[1] != bd[0] + 1):
                return (t,)
            (an, ad, am), (bn, bd, bm), k0, k1 = t[1:]
            return ((PRODUCT, (an, device_run(*device_span(ad)), am), (bn, device_run(*device_span(bd)), bm), k0, k1),)
        d = t[1]
        if t[0][:1] in (UNINIT, OPAQUE) or isinstance(d, int) or d[1] != d[0] + 1:
            return (t,)
        return ((t[0], device_run(*device_span(d)), t[2]),)
    return _sum([_canonical(t, box, single) for t in terms])


def _sum(terms: Iterable[Term]) -> Value:
    """The canonical sum of terms that `_canonical` leaves as they are for the box (the
    terms of values canonical for it: `_canonical` of a canonical value's term is the term,
    tests/test_memory_fastpaths.py), in any order: `canonical_value` without `_canonical`.
    So the sum of values canonical for one box is `_sum(u + v)`.

    Shortcuts for one or two products of plain factors whose devices are already runs
    (`device_run`, b's as long as a's: as every canonical value holds them), which
    `_sum_general` would rebuild as they are: one such term is its own sum; two terms
    with different merge keys are each their own group (sorted); two with the same key
    merge into one if they cover adjacent k ranges over the same devices, or the same k
    range over adjacent devices (`_rectangles`); more terms of one key and one k range
    merge as their device runs do (`_runs`). Anything else takes the general path."""
    if len(terms) == 1:
        t = terms[0]
        if t[0] == PRODUCT and _flat_run(t):
            return (t,)
    elif len(terms) > 2:
        t = terms[0]
        if t[0] == PRODUCT and _flat_run(t):  # all of one key and one k range: the device runs decide
            (an, ad, am), (bn, bd, bm), k0, k1 = t[1:]
            lo = ad if isinstance(ad, int) else ad[0]
            off = (bd if isinstance(bd, int) else bd[0]) - lo
            spans = []
            for u in terms:
                if u[0] != PRODUCT or u[3] != k0 or u[4] != k1 or not _flat_run(u):
                    break
                (cn, cd, cm), (dn, dd, dm) = u[1], u[2]
                lo, hi = (cd, cd + 1) if isinstance(cd, int) else cd
                if cn != an or cm != am or dn != bn or dm != bm or (dd if isinstance(dd, int) else dd[0]) - lo != off:
                    break
                spans.append((lo, hi))
            else:
                return sorted_terms([(PRODUCT, (an, device_run(x0, x1), am), (bn, device_run(x0 + off, x1 + off), bm),
                                      k0, k1) for x0, x1 in _runs(spans)])
    elif len(terms) == 2:
        t, u = terms
        if t[0] == PRODUCT == u[0] and _flat_run(t) and _flat_run(u):
            (an, ad, am), (bn, bd, bm), k0, k1 = t[1:]
            (cn, cd, cm), (dn, dd, dm), j0, j1 = u[1:]
            lo, hi = (ad, ad + 1) if isinstance(ad, int) else ad
            lo2, hi2 = (cd, cd + 1) if isinstance(cd, int) else cd
            off = (bd if isinstance(bd, int) else bd[0]) - lo
            if (an, am, bn, bm, off) != (cn, cm, dn, dm, (dd if isinstance(dd, int) else dd[0]) - lo2):
                return sorted_terms(terms)
            if k0 >= k1 or j0 >= j1:
                return _sum_general(terms)
            if lo == lo2 and hi == hi2 and (k1 == j0 or j1 == k0):  # one device run, adjacent k ranges
                return ((PRODUCT, t[1], t[2], min(k0, j0), max(k1, j1)),)
            if k0 == j0 and k1 == j1 and (hi == lo2 or hi2 == lo):  # one k range, adjacent device runs
                x0, x1 = min(lo, lo2), max(hi, hi2)
                return ((PRODUCT, (an, (x0, x1), am), (bn, (x0 + off, x1 + off), bm), k0, k1),)
    return _sum_general(terms)


def _flat_run(t: Term) -> bool:
    """A product of plain factors whose devices are as
    `device_run` writes them (one device an int, a run of two or more a pair) and b's run
    as long as a's: the form `_sum_general` rebuilds a lone term of its key in."""
    a, b = t[1], t[2]
    if a[0] == PRODUCT or b[0] == PRODUCT:
        return False
    ad, bd = a[1], b[1]
    if isinstance(ad, int):
        return isinstance(bd, int)
    return not isinstance(bd, int) and ad[1] - ad[0] > 1 and bd[1] - bd[0] == ad[1] - ad[0]


def _sum_general(terms: Iterable[Term]) -> Value:
    """`_sum`, every case."""
    odd, plain, products, nested = [], defaultdict(list), defaultdict(list), defaultdict(list)
    for t in terms:
        if _is_product(t):
            if t[1][0] == PRODUCT or t[2][0] == PRODUCT:
                _group_nested(t, nested)
                continue
            (an, ad, am), (bn, bd, bm), k0, k1 = t[1:]
            lo, hi = (ad, ad + 1) if isinstance(ad, int) else ad  # `device_span`, inline
            products[(an, am, bn, bm, (bd if isinstance(bd, int) else bd[0]) - lo)].append((lo, hi, k0, k1))
        elif t[0][:1] in (UNINIT, OPAQUE):
            odd.append(t)
        else:
            d = t[1]
            plain[(t[0], t[2])].append((d, d + 1) if isinstance(d, int) else d)
    out = odd + [(name, device_run(lo, hi), imap) for (name, imap), spans in plain.items() for lo, hi in _runs(spans)]
    for (an, am, bn, bm, off), rects in products.items():
        out += [(PRODUCT, (an, device_run(x0, x1), am), (bn, device_run(x0 + off, x1 + off), bm), k0, k1)
                for x0, x1, k0, k1 in _rectangles(rects)]
    for (skeleton, fixed), rects in nested.items():
        out += [_from_skeleton(skeleton, fixed, x0, x1, k0, k1) for x0, x1, k0, k1 in _rectangles(rects)]
    return tuple(out) if len(out) < 2 else sorted_terms(out)


def _group_nested(t: Term, groups: defaultdict) -> None:
    """File a nested product under its merge key. Its devices vary together over a run of
    j: the factors whose device is the last factor's (attention's k_j and v_j) are the
    ones that vary; the others (q of the output's own device) are fixed. So the terms of
    sum_j (q_me k_j^T) v_j fall into at most three groups (j < me, j = me, j > me), and a
    run merges as in `_rectangles` over (j run) x (outer contraction range). The key is a
    function of each single term, so the form is canonical. A run that would include a
    j equal to a fixed device (made by no rule here) is split into single terms first."""
    leaves = term_leaves(t)
    spans = [device_span(leaf[1]) for leaf in leaves]
    lo, hi = spans[-1]
    fixed = tuple(None if sp == (lo, hi) else sp[0] for sp in spans)
    if hi - lo > 1 and any(f is not None and lo <= f < hi for f in fixed):
        for u in _single(t):
            _group_nested(u, groups)
        return
    skeleton = with_leaves(t, [(n, None, m) for n, _, m in leaves])
    groups[((PRODUCT, skeleton[1], skeleton[2]), fixed)].append((lo, hi, t[3], t[4]))


def _from_skeleton(skeleton: Term, fixed: tuple, x0: int, x1: int, k0: int, k1: int) -> Term:
    run = device_run(x0, x1)
    t = (PRODUCT, skeleton[1], skeleton[2], k0, k1)
    return with_leaves(t, [(n, run if f is None else f, m) for (n, _, m), f in zip(term_leaves(t), fixed)])


def _singles(value: Value) -> list[Term]:
    """A value's terms, one device each (`_single`)."""
    if len(value) == 1:
        t = value[0]
        if t[0] != PRODUCT and isinstance(t[1], int):  # the common case: one plain term of one device
            return [t]
    return [u for t in value for u in _single(t)]


def _single(t: Term) -> list[Term]:
    """A term with a run of devices as one term per device (a product's factors whose
    devices are runs advance together; the others stay)."""
    if _is_product(t):
        if t[1][0] == PRODUCT or t[2][0] == PRODUCT:
            leaves = term_leaves(t)
            spans = [device_span(leaf[1]) for leaf in leaves]
            runs = [sp for sp in spans if sp[1] - sp[0] > 1]
            if not runs:
                return [with_leaves(t, [(n, lo, m) for (n, _, m), (lo, _) in zip(leaves, spans)])]
            return [with_leaves(t, [(n, lo + j if hi - lo > 1 else lo, m) for (n, _, m), (lo, hi) in zip(leaves, spans)])
                    for j in range(runs[0][1] - runs[0][0])]
        _, (an, ad, am), (bn, bd, bm), k0, k1 = t
        (lo, hi), off = device_span(ad), device_span(bd)[0] - device_span(ad)[0]
        return [(PRODUCT, (an, j, am), (bn, j + off, bm), k0, k1) for j in range(lo, hi)]
    if t[0][:1] in (UNINIT, OPAQUE):
        return [t]
    lo, hi = device_span(t[1])
    return [(t[0], j, t[2]) for j in range(lo, hi)]


def _unit_products(value: Value) -> Counter:
    """The sum with every product split into one term per k, the contraction index made a
    constant. Slower, but independent of how k was blocked: a block of one k index stored
    in VMEM has already lost its link to k (its dimension is a single index, so its map
    entry is a constant), and only this form still compares it with the whole product."""
    out: Counter = Counter()
    for t in (u for v in value for u in _single(v)):
        for unit in _units(t):
            out[unit] += 1
    return out


def _canonical_decides(*values: Value) -> bool:
    """Whether differing canonical values are different sums without expanding them into
    unit products: they hold nested products (chained terms), and no product with a
    contraction range of one index (a block of one k index, whose link to k may be
    lost: only unit products compare it) nor a product of plain factors (whose check
    stays as it was). Nested products with wider ranges are canonical as they are
    (`_group_nested`, `_renumber`); expanding the chained terms of attention into their
    d x s units would cost seconds and decide nothing more."""
    def unit(t: Term) -> bool:
        return t[0] == PRODUCT and (t[4] - t[3] == 1 or unit(t[1]) or unit(t[2]))
    products = [t for v in values for t in v if t[0] == PRODUCT]
    return bool(products) and all(_depth(t) > 1 and not unit(t) for t in products)


def _units(t: Term) -> list[Term]:
    """A single-device term as products of one index per contraction (every level of a
    nested product: its index made a constant in its factors' maps)."""
    if not _is_product(t):
        return [t]
    _, a, b, k0, k1 = t
    m = contraction(t)

    def fix(f: Term, k: int) -> Term:
        if f[0] == PRODUCT:
            return (PRODUCT, fix(f[1], k), fix(f[2], k), f[3], f[4])
        return (f[0], f[1], tuple((None, k + off) if d == m else (d, off) for d, off in f[2]))
    return [(PRODUCT, ua, ub, 0, 1) for k in range(k0, k1) for ua in _units(fix(a, k)) for ub in _units(fix(b, k))]



def _unit_count(value: Value) -> int:
    """How many terms `_unit_products` splits the sum into, without splitting it: two sums
    with different counts differ (a cheap test before the slow one)."""
    count = 0
    for t in value:
        if _is_product(t):
            lo, hi = device_span(t[1][1])
            count += (hi - lo) * (t[4] - t[3])
        elif t[0][:1] in (UNINIT, OPAQUE):
            count += 1
        else:
            lo, hi = device_span(t[1])
            count += hi - lo
    return count


def _counts_differ(a: Value, b: Value) -> bool:
    """Two flat sums (no chained product) with different `_unit_count`s differ. Chained
    products are left to `_canonical_decides` and `_unit_products`: `_unit_count` counts
    one contraction level only."""
    flat = all(_depth(t) <= 1 for v in (a, b) for t in v if t[0] == PRODUCT)
    return flat and _unit_count(a) != _unit_count(b)


def _add(pieces: list[tuple[Piece, bool]], extra: Piece, value: Value | None) -> list[tuple[Piece, bool]]:
    """`pieces` with `extra`'s terms added where the boxes overlap. Each piece comes with
    whether its value is canonical for its box, and so does each piece made. `value`, if
    given, is `extra`'s terms' canonical value: where a canonical piece holds all of
    `extra`, the sum over its box is the `_sum` of the two values (the piece's restricted
    to it, `restrict_value`) and the rest of the piece keeps its value, restricted; any
    other sum is left for `canonical_value`, as the terms are."""
    out = []
    for p, ok in pieces:
        box = p.box
        ix = _intersect(box, extra.box)
        if ix is None:
            out.append((p, ok))
            continue
        if ok and value is not None and ix == extra.box:
            if ix == box:  # the common case: a block added to the same block
                out.append((Piece(box, _sum(p.value + value)), True))
                continue
            out += [(Piece(b, restrict_value(p.value, box, b)), True) for b in _subtract(box, ix)]
            out.append((Piece(ix, _sum(restrict_value(p.value, box, ix) + value)), True))
            continue
        out += [(Piece(b, p.value), False) for b in _subtract(box, ix)]
        out.append((Piece(ix, p.value + extra.value), False))
    return out


class _Index:
    """One buffer's pieces, in classes by their length along the leading dim (class c
    holds lengths up to 2^c), each kept sorted by where its pieces start. A region
    [lo, hi) meets a piece of class c only if it starts in [lo - 2^c + 1, hi), found by
    bisection: a few long pieces (a buffer not yet written, the remainder around a write)
    no longer widen the search for the many short ones.

    `exact` maps each stored piece's box to the piece. The pieces are disjoint (`Memory`'s
    invariant), so a region whose box is a stored piece's meets that piece only: most
    reads and rewrites (a slot read back, a block written again) are one dict lookup.

    `version` counts the changes (`add`, `swap`, `remove`): while it stays, so do the
    pieces, and every read of the buffer (`Memory.copy`)."""

    __slots__ = ("classes", "exact", "version")

    def __init__(self) -> None:
        self.classes: dict[int, tuple[list[int], list[Piece]]] = {}  # class -> (starts, pieces)
        self.exact: dict[Box, Piece] = {}
        self.version = 0

    def meeting(self, box: Box) -> list[tuple[int, int]]:
        """Positions (class, index) of the pieces that overlap `box`. (A class of a few
        pieces is scanned whole: the ones bisection would skip do not meet `box` anyway.)"""
        lo, hi = box[0]
        out = []
        for c, (starts, pieces) in self.classes.items():
            if len(starts) <= 4:
                span = range(len(starts))
            else:
                span = range(bisect_left(starts, lo - (1 << c) + 1), bisect_left(starts, hi))
            for i in span:
                pbox = pieces[i].box
                if pbox[0][1] > lo and starts[i] < hi and box_meets(pbox, box):
                    out.append((c, i))
        return out

    def overlapping(self, box: Box) -> list[tuple[Piece, Box]]:
        """The pieces that overlap `box`, each with the overlap (`meeting`, in one pass)."""
        lo, hi = box[0]
        out = []
        for c, (starts, pieces) in self.classes.items():
            for i in range(bisect_left(starts, lo - (1 << c) + 1), bisect_left(starts, hi)):
                p = pieces[i]
                if p.box[0][1] > lo:
                    ix = _intersect(p.box, box)
                    if ix is not None:
                        out.append((p, ix))
        return out

    def add(self, piece: Piece) -> None:
        lo, hi = piece.box[0]
        c = (hi - lo - 1).bit_length()
        group = self.classes.get(c)
        if group is None:
            group = self.classes[c] = ([], [])
        starts, pieces = group
        i = bisect_left(starts, lo)
        starts.insert(i, lo)
        pieces.insert(i, piece)
        self.exact[piece.box] = piece
        self.version += 1

    def swap(self, piece: Piece) -> None:
        """Put `piece` in place of the stored piece of the same box, where removing that
        one and adding `piece` would put it: first of the pieces of its class that start
        where it does."""
        box = piece.box
        lo, hi = box[0]
        starts, pieces = self.classes[(hi - lo - 1).bit_length()]
        first = i = bisect_left(starts, lo)
        while pieces[i].box != box:
            i += 1
        if i != first:
            del pieces[i]
            pieces.insert(first, piece)
        else:
            pieces[i] = piece
        self.exact[box] = piece
        self.version += 1

    def remove(self, positions: list[tuple[int, int]]) -> list[Piece]:
        gone = []
        exact = self.exact
        self.version += 1
        for c, i in reversed(positions):  # per class, positions are increasing
            starts, pieces = self.classes[c]
            p = pieces[i]
            gone.append(p)
            del pieces[i], starts[i], exact[p.box]
        gone.reverse()
        return gone


# How many pairs of regions `Memory` remembers (`Memory._pair`) before it forgets them all;
# and after how many new pairs it stops remembering them if fewer than 1 in 8 lookups found
# one (a schedule whose copies never repeat a pair: remembering costs more than it saves).
_PAIRS_LIMIT = 1 << 15
_PAIRS_TRIAL = 1 << 10


def _between_layouts(src: Region, dst: Region) -> str:
    """Why a copy between regions of different ranks is not followed: a Mosaic GPU TMA
    between tiled SMEM (physical [..., tiles, tile]) and GMEM moves the same elements in
    another order, which no dim-by-dim map says (pairing the tiled dims with the array's
    would put a tile's values on a sliver of the destination). The destination holds data
    the model does not follow; what reads it through the tiles is not followed either."""
    return (f"a copy between layouts: `{src.buffer}` {list(src.shape)} to `{dst.buffer}` {list(dst.shape)} "
            f"(tiled SMEM)")


class _Shift:
    """How pieces read from one region move to another (`Memory.translate`): per source
    dim, the entry (d, off) becomes (table[d][0], off + table[d][1]): a kept dim moves to
    its destination dim (`kept`: the same entry for every piece), a point-indexed one
    becomes a constant coordinate (the piece's own)."""

    __slots__ = ("sb", "db", "kept", "table", "same", "whole")

    def __init__(self, src: Region, dst: Region):
        sb, db = self.sb, self.db = src.box, dst.box
        kept: list[tuple[int, int] | None] = [None] * len(sb)
        for s, d in zip(src.kept, dst.kept):
            kept[s] = (d, sb[s][0] - db[d][0])
        self.kept = kept
        self.table = kept if None not in kept else None  # every dim kept: one table for every piece
        self.same = all(k is not None and k[0] == s and not k[1] for s, k in enumerate(kept))
        # A piece that is the whole source (an exact read) lands on the whole destination
        # when the kept dims have the same lengths (the region's own tuple: the index
        # compares it by identity first).
        self.whole = all(sb[s][1] - sb[s][0] == db[d][1] - db[d][0] for s, d in zip(src.kept, dst.kept))

    def piece(self, p: Piece) -> Piece:
        """`p` at the matching coordinates of the destination, its terms' maps moved."""
        pb, db = p.box, self.db
        if self.whole and pb == self.sb:
            box = db
        else:
            box = list(db)
            for s, k in enumerate(self.kept):
                if k is not None:
                    d, back = k
                    box[d] = (pb[s][0] - back, pb[s][1] - back)
            box = tuple(box)
            if box == db:
                box = db
        if self.same:  # every entry (d, off) stays (d, off): the terms as they are
            return Piece(box, p.value)
        table = self.table or [k if k is not None else (None, pb[s][0]) for s, k in enumerate(self.kept)]
        return Piece(box, tuple([_remap(t, table) for t in p.value]))

    def moved(self, p: Piece) -> Piece:
        """`piece` of a canonical `p`, canonical: moving changes every term's map by the
        same one-to-one shift into dims of the same size, so nothing merges or splits;
        only the terms' order may change (not when no map changed, nor when their heads
        tell them apart: `_heads_apart`)."""
        q = self.piece(p)
        if self.same or len(q.value) < 2 or _heads_apart(q.value):
            return q
        return Piece(q.box, sorted_terms(q.value))


def sorted_terms(terms: Iterable[Term]) -> Value:
    """The terms in a canonical value's order, by repr. When no two have the same head
    (`_head_text`), their heads' texts order them as their reprs do: each head's text is a
    prefix of its term's repr, and two reprs first differ inside both heads' texts
    (`_heads_apart`: different structure down to the first plain factor, names, or devices,
    the comma after a device included). Only terms with a common head are compared whole."""
    terms = tuple(terms)
    if len(terms) < 2:
        return terms
    heads = [_head_text(t) for t in terms]
    if len(set(heads)) == len(heads):
        return tuple([t for _, t in sorted(zip(heads, terms), key=lambda e: e[0])])
    return tuple(sorted(terms, key=repr))


def _head_text(t: Term) -> str:
    """The start of repr(t) up to its first plain factor's device and the comma after it."""
    start = ""
    while t[0] == PRODUCT:
        start += "('@', "
        t = t[1]
    return f"{start}({t[0]!r}, {t[1]!r},"


def _heads_apart(value: Value) -> bool:
    """Whether no two terms of `value` have the same head: the name and device of their
    first plain factor (a plain term's own). Then a map change keeps the terms' order (by
    repr): two reprs first differ before either's first map. Down to the first plain
    factor both are products ("('@', ..."), or one is a product and the other is not
    (their names differ: '@' and a buffer's), or both are plain, where the names differ
    (quoted, neither's repr a prefix of the other's) or the devices do (an int or a pair,
    followed by the same ", ": the first difference lies in it or at that comma)."""
    heads = set()
    for t in value:
        while t[0] == PRODUCT:
            t = t[1]
        heads.add((t[0], t[1]))
    return len(heads) == len(value)


class Memory:
    """Symbolic contents of every (device, buffer)."""

    def __init__(self, shapes: dict[str, tuple[int, ...]]):
        self.shapes = shapes
        self.index: dict[tuple[int, str], _Index] = {}
        self.pairs: dict[tuple[int, int], list] | None = {}  # `_pair`; None: not kept
        self.pair_hits = self.pair_misses = 0

    def _pieces(self, key: tuple[int, str]) -> _Index:
        index = self.index.get(key)
        if index is None:
            index = self.index[key] = _Index()
        return index

    def init_input(self, device: int, name: str) -> None:
        box = tuple((0, s) for s in self.shapes[name])
        ident = tuple((d, 0) for d in range(len(box)))
        self._pieces((device, name)).add(Piece(box, canonical_value(((name, device, ident),), box)))

    # Invariant: every stored piece's value is canonical for its box.
    def read(self, r: Region) -> list[Piece]:
        index = self._pieces((r.device, r.buffer))
        p = index.exact.get(r.box)
        if p is not None:
            return [p]  # the only piece that meets it (`_Index`)
        out, covered = [], []
        for p, ix in index.overlapping(r.box):
            out.append(p if ix == p.box else Piece(ix, restrict_value(p.value, p.box, ix)))
            covered.append(ix)
        gaps = [r.box]
        if covered == gaps or sum(map(_volume, covered)) == _volume(r.box):
            gaps = []  # stored pieces are disjoint, so these cover the region
        else:
            for c in covered:
                gaps = [g for gap in gaps for g in _subtract(gap, c)]
        out += [Piece(g, ((UNINIT + r.buffer, r.device, ()),)) for g in gaps]
        return out

    def write(self, r: Region, new: list[Piece], canonical: bool = False) -> None:
        """Replace `r` with the `new` pieces (already canonical if `canonical`)."""
        index = self._pieces((r.device, r.buffer))
        box, exact = r.box, index.exact
        if len(new) == 1 and new[0].box == box and box in exact:
            # One piece replaces the one piece it meets (`_Index`): where removing and adding would put it.
            index.swap(new[0] if canonical else Piece(box, canonical_value(new[0].value, box)))
            return
        if (len(new) > 1 and all(p.box in exact and box_inside(p.box, box) for p in new)
                and len({p.box for p in new}) == len(new) and sum(_volume(p.box) for p in new) == _volume(box)):
            # New pieces in the boxes of stored ones (which are disjoint) that fill `r`: these
            # are all the pieces `r` meets, so removing them and adding the new ones in order
            # is swapping each in turn (`_Index.swap`: where removing and adding puts it).
            for p in new:
                index.swap(p if canonical else Piece(p.box, canonical_value(p.value, p.box)))
            return
        add = index.add
        for p in index.remove(index.meeting(box)):
            if not box_inside(p.box, box):
                for b in _subtract(p.box, box):
                    add(Piece(b, restrict_value(p.value, p.box, b)))
        for p in new:
            add(p if canonical else Piece(p.box, canonical_value(p.value, p.box)))

    def translate(self, pieces: list[Piece], src: Region, dst: Region) -> list[Piece]:
        """Move pieces read from `src` to the matching coordinates of `dst`."""
        shift = self._pair(src, dst)[2]
        return [shift.piece(p) for p in pieces]

    def _pair(self, src: Region, dst: Region) -> list:
        """What this memory keeps for a pair of regions (the unroller shares one Region
        object between the events that access it, and a Region is immutable): [src, dst,
        their `_Shift`, then what `copy` last moved from src to dst: the index of src's
        buffer, its `_Index.version` then, the pieces moved]. Kept per pair of objects
        (the entry holds them, so their ids stay their own), forgotten all at once when
        there are too many, and no longer kept at all when the first `_PAIRS_TRIAL` new
        pairs came with fewer than 1 hit in 8 (a fresh entry is what an unkept pair gets,
        so `copy` then reads and moves every time)."""
        pairs, key = self.pairs, (id(src), id(dst))
        if pairs is not None:
            pair = pairs.get(key)
            if pair is not None:
                self.pair_hits += 1
                return pair
            self.pair_misses += 1
            if self.pair_misses == _PAIRS_TRIAL and self.pair_hits * 8 < self.pair_misses:
                self.pairs = pairs = None
        pair = [src, dst, _Shift(src, dst), None, -1, None]
        if pairs is not None:
            if len(pairs) >= _PAIRS_LIMIT:
                pairs.clear()
            pairs[key] = pair
        return pair

    def copy(self, src: Region, dst: Region) -> None:
        """`move(read(src), src, dst)`, the pieces moved kept for the pair of regions: what
        moves is a function of the regions and of the pieces stored in src's buffer, which
        change only with its index's version (`_Index.version`). So a block copied again
        from a buffer nobody wrote since (an input's block loaded at every step) is the
        very list of pieces moved the last time."""
        if len(src.kept) != len(dst.kept):
            self.opaque(dst, _between_layouts(src, dst))
            return
        pair = self._pair(src, dst)
        index = self._pieces((src.device, src.buffer))
        if pair[3] is not index or pair[4] != index.version:
            shift = pair[2]
            pair[3], pair[4] = index, index.version
            pair[5] = [shift.moved(q) for q in self.read(src)]
        self.write(dst, pair[5], canonical=True)

    def copy_fn(self, src: Region, dst: Region, fn: tuple[str, ...]) -> None:
        """dst = fn(src): a copy with pointwise functions applied on the way (`pointwise`)."""
        if not fn:
            self.copy(src, dst)
            return
        shift = self._pair(src, dst)[2]
        self.write(dst, pointwise([shift.moved(q) for q in self.read(src)], fn, dst), canonical=True)

    def move(self, pieces: list[Piece], src: Region, dst: Region) -> None:
        """Write canonical `pieces` of `src` into `dst` (`_Shift.moved`)."""
        if len(src.kept) != len(dst.kept):
            self.opaque(dst, _between_layouts(src, dst))
            return
        shift = self._pair(src, dst)[2]
        self.write(dst, [shift.moved(p) for p in pieces], canonical=True)

    def accumulate(self, src: Region, dst: Region, base: Region | None = None, fn: tuple[str, ...] = ()) -> None:
        """dst = (base or dst) + fn(src) (`pointwise`; src itself without `fn`), where the
        boxes overlap. Pieces read and translated are canonical for their boxes (but for the
        terms' order, `_Shift.moved`), so the sum over a box both pieces fill is their `_sum`."""
        incoming = self.translate(self.read(src), src, dst)
        if fn:
            incoming = pointwise(incoming, fn, dst)
        current = self.translate(self.read(base), base, dst) if base is not None else self.read(dst)
        if len(current) == len(incoming):
            # The common case: both cut into the same boxes (pieces are disjoint: each meets
            # its twin only), so the sums are the twins', in `current`'s order as below.
            twins = {b.box: b for b in incoming}
            if all(a.box in twins for a in current):
                self.write(dst, [Piece(a.box, _sum(a.value + twins[a.box].value)) for a in current], canonical=True)
                return
        result = []
        for a in current:
            for b in incoming:
                ix = _intersect(a.box, b.box)
                if ix is not None:
                    value = a.value + b.value
                    result.append(Piece(ix, _sum(value) if ix == a.box == b.box else canonical_value(value, ix)))
        self.write(dst, result, canonical=True)

    def matmul(self, dst: Region, a: Region, b: Region, accumulate: bool,
               contract: tuple[int, int] = (1, 0)) -> None:
        """dst (+)= a @ b: every pair of pieces of `a` and `b` that share k indices adds
        their products to the dst box of the `a` piece's rows and the `b` piece's columns.
        `contract` (lax.dot_general's contracting dims) says which kept dim of each operand
        is k: the other is its free dim, the destination's rows for `a`, columns for `b`
        (so `a @ b.T` is the same product term with b's map reading k from its columns).
        A factor that is itself a product (`a` holds a matmul's result) makes a chained
        term, whose contraction index is a fresh marker below those the factors bind;
        beyond `MAX_DEPTH` the result is OPAQUE."""
        ka, ra, kb, cb = matmul_dims(a, b, contract)
        rd, cd = dst.kept
        # The sum so far, piece by piece, each with whether its value is canonical (`_add`).
        result = [(p, True) for p in self.read(dst)] if accumulate else [(Piece(dst.box, ()), True)]
        a0, b0 = a.box[ka][0], b.box[kb][0]
        rows_by, cols_by = dst.box[rd][0] - a.box[ra][0], dst.box[cd][0] - b.box[cb][0]
        # Each piece of `b` with its k range, its columns in dst, its terms one device each
        # and its table for the plain products' index (`_factor`), made once for every piece of `a`.
        rights = []
        for pb in self.read(b):
            (k0, k1), (c0, c1) = pb.box[kb], pb.box[cb]
            rights.append((pb, k0 - b0, k1 - b0, (c0 + cols_by, c1 + cols_by), _singles(pb.value),
                           _factor(pb, b, kb, cb, dst, cd, KDIM)))
        for pa in self.read(a):
            lefts = _singles(pa.value)
            (ak0, ak1), (r0, r1) = pa.box[ka], pa.box[ra]
            ak0, ak1, rows = ak0 - a0, ak1 - a0, (r0 + rows_by, r1 + rows_by)
            fa = _factor(pa, a, ka, ra, dst, rd, KDIM)
            for pb, bk0, bk1, cols, singles, fb in rights:
                k0 = ak0 if ak0 > bk0 else bk0
                k1 = ak1 if ak1 < bk1 else bk1
                if k0 >= k1:
                    continue
                box = list(dst.box)
                box[rd], box[cd] = rows, cols
                box = tuple(box)
                single = _single_dims(box)
                tables: dict[int, tuple] = {}  # per deeper contraction marker: the two factors' tables
                terms = []
                flat = True  # every term a product of plain factors, made canonical here
                for ta in lefts:
                    for tb in singles:
                        if (ta[0] != PRODUCT and tb[0] != PRODUCT and ta[0][:1] not in (UNINIT, OPAQUE)
                                and tb[0][:1] not in (UNINIT, OPAQUE)):  # the common case, as below (m = KDIM)
                            terms.append(_canonical((PRODUCT, _remap(ta, fa), _remap(tb, fb), k0, k1), box, single))
                            continue
                        flat = False
                        odd = next((t for t in (ta, tb) if t[0][:1] in (UNINIT, OPAQUE)), None)
                        if odd is not None:
                            terms.append(odd)
                            continue
                        depth = max(_depth(ta), _depth(tb))
                        if depth >= MAX_DEPTH:
                            terms.append((OPAQUE + dst.buffer, dst.device, ()))
                            continue
                        m = KDIM - depth  # a fresh index: below every one the factors bind
                        if m not in tables:
                            tables[m] = (_factor(pa, a, ka, ra, dst, rd, m), _factor(pb, b, kb, cb, dst, cd, m))
                        ma, mb = tables[m]
                        terms.append((PRODUCT, _remap(ta, ma), _remap(tb, mb), k0, k1))
                # Flat products of single devices, each canonical for the box: so is their `_sum`.
                result = _add(result, Piece(box, tuple(terms)), _sum(terms) if flat else None)
        self.write(dst, [p if ok else Piece(p.box, canonical_value(p.value, p.box)) for p, ok in result],
                   canonical=True)

    # A value of one UNINIT or OPAQUE term (its map is empty), or of none, is canonical for
    # any box (`canonical_value` returns it as it is): written without canonicalizing.
    def forget(self, dst: Region) -> None:
        """Whatever ran before the kernel left garbage here. A box no piece covers reads as
        this very garbage (`read`'s gaps), so forgetting erases the box's pieces: every
        point reads the same value as if a garbage piece were written, and a later write
        into the box (a fresh receive slot, a pipeline's window) meets nothing to split."""
        self.write(dst, [], canonical=True)

    def zero(self, dst: Region) -> None:
        self.write(dst, [Piece(dst.box, ())], canonical=True)

    def opaque(self, dst: Region, why: str | None = None) -> None:
        """Data the model does not follow (an imported kernel's own arithmetic); `why` names
        what was not followed (the primitive and its line), kept in the term's name after
        `NOT_FOLLOWED`, so a mismatch on it can say so (`Mismatch.unfollowed`)."""
        name = OPAQUE + dst.buffer + (NOT_FOLLOWED + why if why else "")
        self.write(dst, [Piece(dst.box, ((name, dst.device, ()),))], canonical=True)


# -- pointwise functions (imported Pallas kernels' own elementwise arithmetic) ---------------
# A function's name ends in "*" when it scales by a constant (`2.0*`, `-1.0*`): linear, so it
# distributes over a sum and scales one factor of a product. Any other name is an uninterpreted
# elementwise function (`tanh`, `add(3.0)`): applied to a value of one plain term, it wraps the
# term's name (`tanh(x)@2[...]` is tanh of x's block of device 2, exactly: an elementwise f
# commutes with moving data, so f applied before a copy or after it is the same term); applied
# to anything else (a sum, a product, zero, whose f is unknown) it is OPAQUE. A wrapped name is
# `f∘...∘buffer` (outermost first): the data still moves as `buffer`'s (`base_name`).
NOT_FOLLOWED = "|"    # in an OPAQUE term's name: what follows is what was not followed
KNOWN = "="           # ... unless it starts so: a known constant (compared like any value, a finding)
APPLIED = "\u2218"     # in a term's name: `f∘x` is the pointwise function f of input x


def _wrap(name: str, f: str) -> str:
    return f"{f}{APPLIED}{name}"


def base_name(name: str) -> str:
    """The input buffer a term's name reads, its pointwise functions taken off."""
    return name.rpartition(APPLIED)[2] if APPLIED in name else name


def function_text(name: str) -> str:
    """A term's name as text: `tanh∘2.0*∘x` is `tanh(2.0*x)`."""
    if APPLIED not in name:
        return name
    f, _, rest = name.partition(APPLIED)
    inner = function_text(rest)
    return f"{f}{inner}" if f.endswith("*") else f"{f}({inner})"


def _pointwise_value(value: Value, f: str, dst: Region) -> Value:
    if any(t[0] != PRODUCT and t[0][:1] in (UNINIT, OPAQUE) for t in value):
        return value if len(value) == 1 else ((OPAQUE + dst.buffer + NOT_FOLLOWED + f"`{f}` of a partly unknown value",
                                               dst.device, ()),)
    if f.endswith("*"):  # linear: every term scaled (a product: its first plain factor)
        out = []
        for t in value:
            leaves = term_leaves(t)
            first = leaves[0]
            out.append(with_leaves(t, [(_wrap(first[0], f), first[1], first[2])] + leaves[1:]))
        return tuple(out)
    if len(value) == 1 and value[0][0] != PRODUCT:
        t = value[0]
        return ((_wrap(t[0], f), t[1], t[2]),)
    what = "zero" if not value else "a sum" if len(value) > 1 else "a product"
    return ((OPAQUE + dst.buffer + NOT_FOLLOWED + f"`{f}` of {what} (an elementwise function ringc does not interpret)",
             dst.device, ()),)


class PointwiseMeaning:
    """A collective's meaning with elementwise functions applied to its input's terms
    (`fns`, innermost first): `tanh(ppermute(x))` is ppermute of tanh(x), term by term, for
    data movement; for a reduction, f of every summed term (f before the sum, or scaling
    after it). Every other attribute is the collective's own."""

    def __init__(self, collective: Collective, fns: tuple[str, ...]):
        self.collective, self.fns = collective, tuple(fns)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.collective, name)

    def expected(self, n: int, d: int, shapes: Any, buffers: Buffers) -> list[Piece]:
        def wrap(t: Term) -> Term:
            if t[0] == PRODUCT or t[0] != buffers.input:
                return t
            name = t[0]
            for f in self.fns:
                name = _wrap(name, f)
            return (name, t[1], t[2])
        return [Piece(w.box, tuple(wrap(t) for t in w.value)) for w in self.collective.expected(n, d, shapes, buffers)]


class GroupedMeaning:
    """A collective along some axes of the kernel's mesh: `lax.all_gather(x, "x")` in a
    shard_map over a (x, y) mesh is one all-gather per value of y, over the x axis's devices
    (JAX's axis groups). Devices are numbered row-major over the mesh's axes (`sizes`);
    `along` are the group's axes by position, in the order the collective names them (its
    rank order: `("y", "x")` ranks y first). Device d's meaning is the collective's for its
    rank in its group, of size `group_size`, each term's device mapped back from a rank to
    the device of that rank in d's group. The meaning does not rotate with every device
    (`meaning_rotates` is False): the quotient is not asked to stand for it. Every other
    attribute is the collective's own."""

    def __init__(self, collective: Collective, sizes: tuple[int, ...], along: tuple[int, ...], names: tuple[str, ...]):
        self.collective, self.sizes, self.along, self.names = collective, tuple(sizes), tuple(along), tuple(names)
        self.group_size = 1
        for a in self.along:
            self.group_size *= self.sizes[a]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.collective, name)

    def rank(self, d: int) -> int:
        """Device d's rank in its group."""
        coords, r = unravel(d, self.sizes), 0
        for a in self.along:
            r = r * self.sizes[a] + coords[a]
        return r

    def member(self, d: int, rank: int) -> int:
        """The device of rank `rank` in device d's group."""
        coords = list(unravel(d, self.sizes))
        for a, c in zip(self.along, unravel(rank, tuple(self.sizes[a] for a in self.along))):
            coords[a] = c
        out = 0
        for c, size in zip(coords, self.sizes):
            out = out * size + c
        return out

    def shape_problem(self, n: int, shapes: Any, buffers: Buffers) -> str | None:
        return self.collective.shape_problem(self.group_size, shapes, buffers)

    def expected(self, n: int, d: int, shapes: Any, buffers: Buffers) -> list[Piece]:
        def moved(t: Term) -> Term:
            return with_leaves(t, [leaf if leaf[0][:1] in (UNINIT, OPAQUE) else (leaf[0], self.member(d, leaf[1]), *leaf[2:])
                                   for leaf in term_leaves(t)])
        return [Piece(w.box, tuple(moved(t) for t in w.value))
                for w in self.collective.expected(self.group_size, self.rank(d), shapes, buffers)]

    def meaning_rotates(self, *args: Any, **kw: Any) -> bool:
        return False

    def summed_terms(self, n: int, dtype: str = "float32", depth: int = 1) -> int:
        return self.collective.summed_terms(self.group_size, dtype, depth)


def pointwise(pieces: list[Piece], fn: tuple[str, ...], dst: Region) -> list[Piece]:
    """The pieces with the pointwise functions `fn` applied, innermost first, canonical."""
    out = []
    for p in pieces:
        value = p.value
        for f in fn:
            value = _pointwise_value(value, f, dst)
        out.append(Piece(p.box, canonical_value(value, p.box)))
    return out


def _factor(piece: Piece, reg: Region, kdim: int, free: int, dst: Region, to: int,
            marker: int) -> list[tuple[int | None, int]]:
    """A matmul factor's map (`Memory.matmul`), as a `_remap` table: its free dim goes to
    the destination's, its contraction dim becomes the index `marker`, the others constants."""
    return [(to, reg.box[free][0] - dst.box[to][0]) if d == free else
            (marker, reg.box[kdim][0]) if d == kdim else (None, lo)
            for d, (lo, _) in enumerate(piece.box)]


def _index_name(marker: int) -> str:
    """A contraction index in messages: k for a product of plain factors, t for the outer
    index of a product of a product (attention's (q k^T) v), then u, k4, k5, ..."""
    return {KDIM: "k", KDIM - 1: "t", KDIM - 2: "u"}.get(marker, f"k{KDIM + 1 - marker}")


def _map_text(name: str, dev: int, imap: IndexMap, box: Box) -> str:
    idx = []
    for d, off in imap:
        if _is_index(d):
            k = _index_name(d)
            idx.append(k if off == 0 else f"{k}{off:+d}")
        else:
            idx.append(str(off) if d is None else f"{box[d][0] + off}:{box[d][1] + off}")
    return f"{function_text(name)}@{dev}[{', '.join(idx)}]"


def render_value(value: Value, box: Box) -> str:
    if not value:
        return "0"
    parts = []
    for run in value:
        terms = _single(run)
        if len(terms) > 4:  # a long run of devices, as one sum
            first, last = terms[0], terms[-1]
            parts.append(f"{_term_text(first, box)} + ... + {_term_text(last, box)}")
            continue
        parts += [_term_text(t, box) for t in terms]
    return " + ".join(parts)


def _term_text(t: Term, box: Box) -> str:
    if _is_product(t):
        _, a, b, k0, k1 = t
        fa, fb = (f"({_term_text(f, box)})" if _is_product(f) else _term_text(f, box) for f in (a, b))
        return f"sum({_index_name(contraction(t))} in {k0}:{k1}) {fa} * {fb}"
    if t[0].startswith(UNINIT):
        return f"uninitialized `{t[0][1:]}` of device {t[1]}"
    if t[0].startswith(OPAQUE) and NOT_FOLLOWED in t[0]:
        buf, why = t[0][1:].split(NOT_FOLLOWED, 1)
        if why.startswith(KNOWN):
            return f"the constant {why[1:]} stored in `{buf}` of device {t[1]}"
        return f"a value ringc does not follow ({why}) in `{buf}` of device {t[1]}"
    if t[0].startswith(OPAQUE):
        return (f"a value ringc does not follow (arithmetic it does not model, or products nested deeper than "
                f"{MAX_DEPTH}) in `{t[0][1:]}` of device {t[1]}")
    return _map_text(*t, box)


def box_text(name: str, box: Box) -> str:
    return f"{name}[{', '.join(f'{a}:{b}' if b - a > 1 else str(a) for a, b in box)}]"


@dataclass(frozen=True)
class Mismatch:
    device: int
    where: str
    got: str
    want: str
    buffer: str = ""  # the output box that differs (for the line of its last write)
    box: tuple = ()
    unfollowed: str = ""  # what the model did not follow, when `got` holds such a value: not a finding


def check_semantics(collective: Collective, buffers: Buffers, inputs: Iterable[str], program: Program,
                    order: list[Event], shapes: dict[str, tuple[int, ...]], *, limit: int | None = None,
                    symmetric: bool = False) -> list[Mismatch]:
    """Replay the run symbolically (every buffer in `inputs` starts as each device's own
    data) and compare every output box with what `collective` means on `buffers`: the
    mismatches of device 0, then device 1, ..., the first `limit` of them (all if None).

    Only what the reported devices' outputs depend on is replayed (`_slice`): device 0's
    first; then, if device 0 is wrong but gives fewer than `limit` mismatches, devices
    1..7, then the rest; if device 0 is right, all the others.
    A slice replays exactly the events whose effects reach those outputs, in the run's
    order, so their values are the full replay's; the list is the full replay's too (box
    boundaries aside: an overwritten write that is skipped no longer cuts the pieces
    around it, so a mismatch may be reported as one box where the full replay split it).

    `symmetric` (the caller proved it): device d's events and accesses are device 0's
    translated by d, the run has no race, and the collective's meaning translates the same
    way (`core.full_report`: `symmetry.memory_steps`, `Collective.meaning_rotates`).
    Without a race the outcome is the same in every interleaving, among them the one that
    runs event i on every device at once, whose memory is symmetric: device d's output is
    device 0's translated, so it is wrong iff device 0's is. Then a clean device 0 ends
    the check, and a wrong one means every device is wrong, so devices 0..7 give the list."""
    n = program.device_count  # the devices that hold memory (Mosaic GPU: the GPUs, not every block)
    inputs = list(inputs)
    found: list[Mismatch] = []
    done = 0
    while done < n:
        # Device 0; then devices 1..7 if device 0 was wrong (the list may need them only),
        # else all the others at once (each may be the first wrong one).
        end = 1 if done == 0 else min(n, 8) if done == 1 and found else n
        batch, done = list(range(done, end)), end
        mem = Memory(shapes)
        for d in range(n):
            for name in inputs:
                mem.init_input(d, name)
        wanted = {(d, buffers.output): [tuple((0, s) for s in shapes[buffers.output])] for d in batch}
        # Copies may land in any process's memory (Mosaic GPU: a block's SMEM is its process's).
        for ev in _slice(order, program.n, wanted):
            apply(mem, ev, program.n)
        found += mismatches(collective, buffers, mem, batch, n, shapes)
        if limit is not None and len(found) >= limit or (symmetric and not found):
            break
    return found if limit is None else found[:limit]


def _slice(order: list[Event], n: int, wanted: dict[tuple[int, str], list[Box]]) -> list[Event]:
    """The events of `order` whose effects reach the regions `wanted` ((device, buffer) ->
    boxes) at the end, in order: a backward pass keeps an event when what it writes meets a
    region still wanted at that point, then stops wanting what it overwrites (a DMA, or a
    compute that overwrites, `Compute.overwrites`) and starts wanting all it reads. By
    induction from the end, every kept event
    reads exactly what it reads in the full replay (every write into a region it reads,
    after the last overwrite of that region, is kept), so it writes the same value, and the
    wanted regions end as in the full replay. Events that move no data (waits, signals)
    are never kept."""
    want: dict[tuple[int, str], list[Box]] = {k: list(v) for k, v in wanted.items()}
    kept: list[Event] = []
    for ev in reversed(order):
        a = ev.action
        if isinstance(a, DmaStart):
            if not 0 <= a.dst.device < n:
                continue
            reads, whole = (a.src,), True
        elif isinstance(a, Compute):
            reads, whole = a.reads, a.overwrites
        else:
            continue
        dst = a.dst
        key = (dst.device, dst.buffer)
        boxes = want.get(key)
        if not boxes or not any(box_meets(b, dst.box) for b in boxes):
            continue
        kept.append(ev)
        if whole:
            want[key] = [part for b in boxes for part in _subtract(b, dst.box)]
        elif not any(box_inside(dst.box, b) for b in boxes):
            boxes.append(dst.box)
        for r in reads:
            have = want.setdefault((r.device, r.buffer), [])
            if not any(box_inside(r.box, b) for b in have):
                have.append(r.box)
    kept.reverse()
    return kept


def apply(mem: Memory, ev: Event, n: int, remote_copy: Callable[[Event], None] | None = None) -> None:
    """One event's effect on the symbolic memory; `remote_copy` overrides how a remote DMA lands.
    Signals and waits change no memory."""
    a = ev.action
    if isinstance(a, DmaStart):
        if a.remote and remote_copy is not None:
            remote_copy(ev)
        elif 0 <= a.dst.device < n:
            mem.copy(a.src, a.dst)
    elif isinstance(a, Compute):
        COMPUTES[a.kind].effect(mem, a)  # its effect on the symbolic memory


def mismatches(collective: Collective, buffers: Buffers, mem: Memory, devices: Iterable[int], n: int,
               shapes: Mapping[str, tuple[int, ...]]) -> list[Mismatch]:
    """Every output box of `devices` that differs from what `collective` prescribes, its
    buffers in the roles `buffers` gives them (no schedule needed: a front end without YAML
    can call it)."""
    x, out = buffers.input, buffers.output
    want_shape = collective.shape_problem(n, shapes, buffers)
    if want_shape is not None:
        return [Mismatch(-1, out, f"shape {list(shapes[out])}",
                         f"{want_shape} for {collective.kind} of `{x}` {list(shapes[x])}")]
    found = []
    for d in devices:
        full = tuple((0, s) for s in shapes[out])
        got = sorted(mem.read(Region(out, d, full, tuple(range(len(full))), 1)), key=lambda p: p.box)
        starts = [g.box[0][0] for g in got]
        longest = max((g.box[0][1] - g.box[0][0] for g in got), default=0)
        for w in collective.expected(n, d, shapes, buffers):
            lo, hi = w.box[0]
            # Canonical once for the whole box, then restricted to each overlap (a psum's
            # meaning lists N terms, which merge into one run: not once per output block).
            want = canonical_value(w.value, w.box)
            for g in got[bisect_left(starts, lo - longest + 1):bisect_left(starts, hi)]:
                ix = _intersect(g.box, w.box)
                if ix is None:
                    continue
                gv, wv = canonical_value(g.value, ix), restrict_value(want, w.box, ix)
                if gv != wv and (_canonical_decides(gv, wv) or _counts_differ(gv, wv)
                                 or _unit_products(gv) != _unit_products(wv)):
                    why = next((t[0].split(NOT_FOLLOWED, 1)[1] for t in gv
                                if t[0] != PRODUCT and t[0][:1] == OPAQUE and NOT_FOLLOWED in t[0]
                                and not t[0].split(NOT_FOLLOWED, 1)[1].startswith(KNOWN)), "")
                    found.append(Mismatch(d, box_text(out, ix), render_value(gv, ix), render_value(wv, ix), out, ix,
                                          why))
    return found


# The buffers that hold data when a kernel starts: its inputs, arrays the program computed
# before it, its scalar prefetch. Outputs, scratch and value registers start as garbage.
FILLED_KINDS = ("input", "computed", "prefetch")


Key = tuple[int, str]   # (device, buffer name); device -1: a quotient's, by name alone


def _fills(buffers: Any, events: Iterable[Event], devices: Iterable[int] | None
           ) -> tuple[set[Key], dict[Key, set[Key]], dict[Key, Event]]:
    """What the kernel fills, over-approximated (`unwritten_outputs`): the (device, buffer)
    keys some copy or store carries a value into from a filled buffer (`FILLED_KINDS`) or
    one the kernel makes, directly or through other buffers, in any order; with the graph
    of what feeds what and the first event that reads each key."""
    key = (lambda r: (r.device, r.buffer)) if devices is not None else (lambda r: (-1, r.buffer))
    feeds: dict[Key, set[Key]] = defaultdict(set)
    first_read: dict[Key, Event] = {}
    made: set[Key] = set()   # written with a value the kernel makes (nothing read)
    for ev in events:
        a = ev.action
        if isinstance(a, DmaStart):
            feeds[key(a.src)].add(key(a.dst))
            first_read.setdefault(key(a.src), ev)
        elif isinstance(a, Compute) and a.work:
            reads = a.reads
            if not reads:
                made.add(key(a.dst))
            for r in reads:
                feeds[key(r)].add(key(a.dst))
                first_read.setdefault(key(r), ev)
    kinds = {name: facts.kind for name, facts in buffers.items()}
    # (an SMEM buffer's scalar stores are values ringc follows, not events: what fills it is not
    # asked, so it counts as filled; a serving stack's metadata, stored there and copied to HBM)
    todo = [k for k in feeds if kinds.get(k[1]) in FILLED_KINDS or not _asked(buffers.get(k[1]))] + list(made)
    filled = set(todo)
    while todo:
        for nxt in feeds.get(todo.pop(), ()):
            if nxt not in filled:
                filled.add(nxt)
                todo.append(nxt)
    return filled, feeds, first_read


def _asked(facts: Any) -> bool:
    """Whether a buffer's writes are events ringc sees: an SMEM buffer's scalar stores are
    values ringc follows instead, so what fills it is not asked."""
    return getattr(facts, "space", "") != "smem"


def unwritten_outputs(buffers: Any, events: Iterable[Event], devices: Iterable[int] | None) -> list[tuple[int, str]]:
    """The outputs (device, name) that nothing fills: no copy or store into them carries a
    value from a filled buffer (`FILLED_KINDS`) or one the kernel makes itself (a constant,
    a store with nothing read), directly or through other buffers, in any order. A kernel
    not yet written (a course's TODO body), a store under a condition that never holds, a
    copy from scratch nothing fills. SMEM outputs are not asked: their scalar stores are
    values ringc follows, not events. Over-approximates what is filled (a partial write, a
    write the run orders before its source is filled, count as filled), so an output it
    names is garbage in every run. `devices=None`: buffers by name alone (a quotient's
    device 0 stands for every device; device -1 in the result)."""
    filled, _, _ = _fills(buffers, events, devices)
    outputs = [name for name, facts in buffers.items() if facts.kind == "output" and _asked(facts)]
    return [(d, name) for name in outputs for d in (sorted(devices) if devices is not None else [-1])
            if (d, name) not in filled]


def unwritten_reads(buffers: Any, events: Iterable[Event], devices: Iterable[int] | None
                    ) -> list[tuple[int, str, Event, str]]:
    """Scratch that nothing fills (as `unwritten_outputs` counts filling: no copy or store
    ever carries a value into it), read by the kernel into what reaches an output that is
    filled otherwise: that output holds garbage where the read lands, in every run (a
    receive buffer the remote copy never targets, added to the local data). (device,
    scratch, the first event that reads it, the output it reaches); outputs nothing fills
    are `unwritten_outputs`' own. `devices=None` as there."""
    events = list(events)
    filled, feeds, first_read = _fills(buffers, events, devices)
    found = []
    for k, ev in first_read.items():
        facts = buffers.get(k[1])
        if k in filled or facts is None or facts.kind != "scratch" or not _asked(facts):
            continue
        seen, todo = {k}, [k]
        reached = None
        while todo and reached is None:
            for nxt in sorted(feeds.get(todo.pop(), ())):
                out = buffers.get(nxt[1])
                if out is not None and out.kind == "output" and nxt in filled and _asked(out):
                    reached = nxt[1]
                    break
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        if reached is not None:
            found.append((k[0], k[1], ev, reached))
    return found
