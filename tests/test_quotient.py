"""The quotient check (`rotation.py`, `verify/symmetric/`): device 0's events decide a clean
verdict for the whole ring. It must never call clean what the full analysis rejects, and
it must reach the clean verdict on the library, or `check` at large N is slow."""

from __future__ import annotations

import itertools

from math import prod
from pathlib import Path

import pytest
from conftest import without_runtime_data
from hypothesis import given, settings
from hypothesis import strategies as st

import ringc
from ringc.ir import expr as E
from ringc.verify.symmetric import flow, moves, order as sym_order, races as sym_races, run as sym_run
from ringc.verify.symmetric.analysis import Unclear
from ringc.verify.check import check, check_program, meaning_of, quotient_report, resolve_topology
from ringc.verify.placement import route_summary
from ringc.verify.rotation import NotRotational, Rot, Torus, _make, device_offset, rotation_unroll
from ringc.verify.symmetric.program import SymmetricProgram
from ringc.collectives import PRODUCT, Buffers, Piece, collective_of
from ringc.verify.semantics import canonical_value, restrict_value
from ringc.verify.symmetry import memory_symmetric, semaphore_symmetric
from ringc.verify.unroll import unroll

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = without_runtime_data(sorted((ROOT / "schedules").glob("*.yaml")))
CORPUS = LIBRARY + without_runtime_data(sorted((ROOT / "tests" / "broken").glob("*.yaml"))) + sorted((ROOT / "tests" / "mutants").glob("*.yaml"))
ONE_AXIS = [p for p in CORPUS if p.name != "expected.yaml" and len(ringc.load(p).axes) == 1]


# -- the symbolic device id ---------------------------------------------------------

def _exprs(axes: list[str]) -> st.SearchStrategy[str]:
    leaf = st.sampled_from(["me", "step", "N", "1", "2", "3", *(f"me_{a}" for a in axes), *(f"N_{a}" for a in axes)])
    return st.recursive(leaf, lambda sub: st.tuples(sub, st.sampled_from(["+", "-", "*", "//", "%"]), sub).map(
        lambda t: f"({t[0]} {t[1]} {t[2]})"), max_leaves=6)


AXES = ["x", "y", "z"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=3).filter(lambda s: prod(s) > 1).flatmap(
    lambda shape: st.tuples(st.just(tuple(shape)), _exprs(AXES[:len(shape)]))), st.integers(0, 8))
def test_rot_agrees_with_every_device(case, step):
    """Where the symbolic evaluation succeeds, it is the concrete value on every device of
    the torus (a ring is the one-axis case)."""
    shape, text = case
    axes = AXES[:len(shape)]
    e = E.parse(text)
    torus = Torus(shape)
    sizes = {"step": step, "N": torus.n, **{f"N_{a}": s for a, s in zip(axes, shape)}}
    symbols = {"me": Rot.translate(0, shape), **{f"me_{a}": Rot.coordinate(i, shape) for i, a in enumerate(axes)}}
    try:
        v = E.evaluate(e, {**sizes, **symbols})
    except (NotRotational, E.ExprError, ZeroDivisionError):
        return
    for d in range(torus.n):
        coords = torus.coord(d)
        try:
            want = E.evaluate(e, {**sizes, "me": d, **{f"me_{a}": c for a, c in zip(axes, coords)}})
        except (E.ExprError, ZeroDivisionError):
            return
        assert (v.at(d) if isinstance(v, Rot) else v) == want, (text, shape, d)


@settings(max_examples=300, deadline=None)
@given(st.integers(-20, 20), st.integers(-40, 40), st.lists(st.integers(-9, 9), min_size=1, max_size=3),
       st.integers(1, 24), st.integers(-5, 5))
def test_one_atom_shortcut_is_the_canonical_form(k, c, a, m, coef):
    """`_make`'s shortcut for one atom (what `%` and `//` make) gives the canonical form
    the general path gives: the same value, and `Rot.same` (targets, memo keys) holds."""
    shape = tuple(8 for _ in a)
    term = ((c, tuple(a), m), coef)
    fast = _make(k, [term], shape)
    general = _make(k, [term, ((0, tuple(1 for _ in a), 8), 0)], shape)  # a second term: no shortcut
    assert type(fast) is type(general)
    assert fast.same(general) if isinstance(fast, Rot) else fast == general


def test_rot_refuses_what_is_not_a_rotation():
    me = Rot.translate(0, (8,))
    for bad in (lambda: me == 0, lambda: bool(me), lambda: me * me, lambda: (me + 1) % 3,
                lambda: min(me, 3)):
        with pytest.raises(NotRotational):
            bad()
    # A reflection is a value, but no target: device d sends to -d.
    assert Rot.translate(0, (8,)).at(3) == 3
    with pytest.raises(NotRotational):
        device_offset(-me % 8, Torus((8,)))
    # On a torus, `(me + 1) % N` wraps rows: no translation; `right_y` is one.
    me2 = Rot.translate(0, (3, 4))
    with pytest.raises(NotRotational):
        device_offset((me2 + 1) % 12, Torus((3, 4)))
    right_y = me2 + ((Rot.coordinate(1, (3, 4)) + 1) % 4 - Rot.coordinate(1, (3, 4)))
    assert device_offset(right_y, Torus((3, 4))) == 1


def test_torus_runs_translate_exactly():
    """`Torus.runs` cuts a run of flat ids into runs whose translation is a run."""
    for shape in ((6,), (3, 4), (2, 3, 2)):
        torus = Torus(shape)
        for t in range(torus.n):
            for lo in range(torus.n):
                for hi in range(lo + 1, torus.n + 1):
                    got = [y + i for x0, x1, y in torus.runs(lo, hi, t) for i in range(x1 - x0)]
                    assert got == [torus.add(j, t) for j in range(lo, hi)], (shape, t, lo, hi)


def test_torus_image_is_the_translated_set_in_maximal_runs():
    """`Torus.image` gives exactly the translated ids, as sorted, maximal runs (a whole
    torus or whole inner rows stay one run), and `adder` agrees with `add`."""
    for shape in ((6,), (3, 4), (2, 3, 2), (4, 1, 3)):
        torus = Torus(shape)
        for t in range(torus.n):
            assert torus.adder(t) == [torus.add(j, t) for j in range(torus.n)]
            for lo in range(torus.n):
                for hi in range(lo + 1, torus.n + 1):
                    got = torus.image(lo, hi, t)
                    assert [y for a, b in got for y in range(a, b)] == sorted(torus.add(j, t) for j in range(lo, hi))
                    assert all(a < b for a, b in got) and all(x[1] < y[0] for x, y in zip(got, got[1:]))
        assert torus.image(0, torus.n, 1) == [(0, torus.n)]


# -- proving symmetry without the other devices ------------------------------------

@pytest.mark.parametrize("path", ONE_AXIS, ids=lambda p: p.stem)
def test_rotation_unroll_is_device_0_and_only_when_symmetric(path):
    sched = ringc.load(path)
    for n in (3, 4, 6):
        try:
            full = unroll(sched, n)
        except ringc.ScheduleError:
            with pytest.raises(ringc.ScheduleError):  # the same error, from device 0
                rotation_unroll(sched, n)
            continue
        quot = rotation_unroll(sched, n)
        symmetric = semaphore_symmetric(full) and memory_symmetric(full)
        if quot is None:
            continue
        assert symmetric, f"{path.name} N={n}: proven rotational but device events differ"
        assert [(e.line, e.point, e.action) for e in quot.events] == \
               [(e.line, e.point, e.action) for e in full.devices[0]]
        assert quot.event_count == full.event_count


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: p.stem)
def test_library_is_proven_rotational(path):
    sched = ringc.load(path)
    if path.stem in NOT_ROTATIONAL:  # partners me ^ (1 << k): a reflection, not a translation
        assert rotation_unroll(sched, 4) is None
    elif len(sched.axes) == 1:
        assert rotation_unroll(sched, 5) is not None


# Library schedules no device translation maps onto themselves: the hypercube's partners
# `me ^ (1 << k)` are XOR-symmetric instead, decided on the XOR quotient (test_xor.py).
NOT_ROTATIONAL = {"all_gather_hypercube"}
# -- the verdict ---------------------------------------------------------------------

@pytest.mark.parametrize("path", ONE_AXIS, ids=lambda p: p.stem)
def test_quotient_is_sound_and_complete_on_the_library(path):
    """Clean here => clean in the full analysis, on every broken schedule and mutant;
    and every clean library schedule is clean here too."""
    sched = ringc.load(path)
    for n in (2, 3, 4, 6):
        for calls in (1, 2):
            placement = resolve_topology(sched, n, "ring")
            try:
                full = check_program(sched, unroll(sched, sizes=placement.sizes, invocations=calls), placement)
            except ringc.ScheduleError:
                full = None
            try:
                fast = quotient_report(sched, placement, calls)
            except ringc.ScheduleError:  # the same bad input (a hypercube at N = 3)
                assert full is None
                fast = None
            clean = fast is not None
            # Clean: no errors; warnings (a send past the neighbours) are the full analysis's own.
            full_clean = full is not None and full.ok
            assert not clean or full_clean, f"{path.name} N={n} x{calls}: quotient clean, full finds {full.kinds()}"
            if clean:
                assert [f.to_text(full.program) for f in fast.findings] == \
                       [f.to_text(full.program) for f in full.findings], f"{path.name} N={n} x{calls}"
                assert fast.routes == route_summary(full.program, placement)
            if path in LIBRARY and path.stem not in NOT_ROTATIONAL:
                assert clean == full_clean, f"{path.name} N={n} x{calls}"


@pytest.mark.parametrize("mutant, stage", [
    ("07_all_reduce_over_wait", "run"),
    ("06_all_reduce_extra_final_signal", "run"),
    ("01_all_reduce_accumulate_before_wait", "races"),
    ("04_ppermute_two_writers", "races"),
    ("05_all_reduce_run_ahead_no_handshake", "races"),
])
def test_each_stage_rejects_its_bug(mutant, stage):
    """The run and the race stage each say no to the bugs they are there for (the data
    flow: `test_data_flow_rejects_a_misplaced_block`)."""
    sched = ringc.load(ROOT / "tests" / "mutants" / f"{mutant}.yaml")
    program = rotation_unroll(sched, 4)
    assert program is not None
    if stage == "run":
        with pytest.raises(Unclear):
            sym_run.check_run(program)
        return
    sym_run.check_run(program)
    order = sym_order.quotient_order(program)
    rot = moves.Rotator(program)
    assert not sym_races.race_free(program, order, rot)


def test_race_stage_lists_pairs_or_sweeps_alike(monkeypatch):
    """On more than `SMALL` devices the race stage finds the DMA intervals of a semaphore
    with many waits with numpy (`symmetric.races._numpy_ends`) and lists the pairs of accesses
    whose spans meet (`_meeting`, their regions' overlap with numpy too past `OVERLAPS`);
    on fewer it loops and sweeps (`_concurrent_pairs`). The same intervals and verdicts on
    every corpus schedule the quotient unrolls at N = 4, racy mutants and broken ones among
    them."""
    verdicts = []
    for path in ONE_AXIS:
        program = rotation_unroll(ringc.load(path), 4)
        if program is None:
            continue
        seen = []
        for small, overlaps, ends in ((sym_order.SMALL, sym_races.OVERLAPS, sym_races.ENDS), (0, sym_races.OVERLAPS, 0), (0, 0, 0)):
            monkeypatch.setattr(sym_order, "SMALL", small)
            monkeypatch.setattr(sym_races, "OVERLAPS", overlaps)
            monkeypatch.setattr(sym_races, "ENDS", ends)
            try:
                order = sym_order.quotient_order(program)
                seen.append((sym_races.quotient_ends(program, order), sym_races.race_free(program, order, moves.Rotator(program))))
            except Unclear as e:
                seen.append(str(e))
        assert all(s == seen[0] for s in seen), path.stem
        verdicts.append(seen[0] if isinstance(seen[0], str) else seen[0][1])
    assert verdicts.count(True) >= 30 and verdicts.count(False) >= 30, verdicts


def test_data_flow_rejects_a_misplaced_block():
    path = ROOT / "schedules" / "all_gather_ring.yaml"
    text = path.read_text()
    bad_text = text.replace('own:     {src: x, dst: "out[me]"', 'own:     {src: x, dst: "out[(me + 1) % N]"')
    assert bad_text != text
    for source, right in ((text, True), (bad_text, False)):
        sched = ringc.load_text(source, "all_gather_ring.yaml")
        program = rotation_unroll(sched, 5)
        assert program is not None
        assert flow.data_flow_right(sched, program, meaning_of(sched)) is right


# -- the meaning rotates --------------------------------------------------------------

def _canonical(pieces: list[Piece], cuts: list[list[int]] | None = None) -> set:
    """The pieces as (box, canonical value) pairs, each first cut at `cuts` (sorted cut
    points per dimension): two partitions of the same content compare equal once both are
    cut at the union of their boundaries (a translated piece may wrap into several)."""
    out = set()
    for p in pieces:
        if cuts is None:
            out.add((p.box, canonical_value(p.value, p.box)))
            continue
        value = canonical_value(p.value, p.box)
        ranges = [[(x, y) for x, y in zip(c, c[1:]) if a <= x and y <= b] for c, (a, b) in zip(cuts, p.box)]
        for cell in itertools.product(*ranges):
            out.add((cell, canonical_value(restrict_value(value, p.box, cell), cell)))
    return out


def _same_content(a: list[Piece], b: list[Piece]) -> bool:
    cuts = [sorted({x for p in a + b for x in p.box[i]}) for i in range(len(a[0].box))] if a and b else None
    return _canonical(a, cuts) == _canonical(b, cuts)


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: p.stem)
def test_meaning_rotates_agrees_with_every_device(path):
    """`meaning_rotates` says device d's expected output is device 0's translated by d;
    check it against `expected` on every device (of a ring, a 3x4 or a 2x3x2 torus), and that a
    wrong step breaks both."""
    sched = ringc.load(path)
    if path.stem in NOT_ROTATIONAL:
        pytest.skip("not rotational: no translated meaning to compare")
    sizes = dict(zip(sched.axes, {1: (4,), 2: (3, 4), 3: (2, 3, 2)}[len(sched.axes)]))
    n = prod(sizes.values())
    program = rotation_unroll(sched, sizes)
    out = sched.io_buffer("output")
    c, b = collective_of(sched), Buffers.of(sched)
    steps = moves.data_steps(program, c, b)  # the boxes' steps, and those of whole dims (gauge.py)
    assert steps is not None

    def brute(prog, steps) -> bool:
        rot = moves.Rotator(prog, steps)
        base = c.expected(n, 0, prog.shapes, b)
        try:
            return all(_same_content(rot.pieces(out, base, d), c.expected(n, d, prog.shapes, b))
                       for d in range(n))
        except Unclear:  # the steps move an input dim past its end: no rotation
            return False

    assert moves.meaning_rotates(c, b, program, steps) and brute(program, steps)
    if any(steps.get((out, 0), ())):
        steps[(out, 0)] = (0,) * len(sizes)  # the output's device dim no longer moves
        assert not _or_unclear(moves.meaning_rotates, c, b, program, steps) and not _or_unclear(brute, program, steps)


RELAY = """
name: all_gather_whole_relay
collective: all_gather
params: {rows: 8, cols: 128}
buffers:
  x:   {kind: input,  shape: [rows, cols]}
  out: {kind: output, slots: N, shape: [rows, cols]}
  u:   {kind: vmem_scratch, slots: N, shape: [rows, cols]}
  r:   {kind: vmem_scratch, slots: N, shape: [rows, cols]}
semaphores: {local_sem: dma, send_sem: dma, recv_sem: dma}
copies:
  own:   {src: x, dst: "out[me]", sem: local_sem}
  keep:  {src: out, dst: u, sem: local_sem}
  relay: {src: u, dst: r, to: right, send_sem: send_sem, recv_sem: recv_sem}
  take:  {src: "TAKE", dst: "out[(me - 1) % N]", sem: local_sem}
body:
  - {start: own}
  - {wait: own}
  - {start: keep}
  - {wait: keep}
  - {start: relay}
  - {wait: relay}
  - {start: take}
  - {wait: take}
"""


@pytest.mark.parametrize("take, right", [("r[(me - 1) % N]", True), ("r[0]", False)])
def test_whole_copies_pin_their_steps(take, right):
    """Whole copies carry data between dims whose steps must then agree (`gauge.py`): `out`
    moves by 1 per device, so `u` (copied whole from it) must too, and so must `r`. Reading
    `r[0]` pins `r`'s step at 0: no translation of the memory commutes with the events. The
    quotient once replayed that anyway, with `u` at step 0, and called the ring of 2 clean:
    device 1's `u[0]` is garbage, not x@1. Now it leaves the verdict to the full analysis."""
    sched = ringc.load_text(RELAY.replace("TAKE", take), "relay.yaml")
    program = rotation_unroll(sched, 2)
    steps = moves.data_steps(program, collective_of(sched), Buffers.of(sched))
    assert (steps is not None) is right
    for n in (2, 3, 4):  # one relay step gathers a ring of 2 only
        placement = resolve_topology(sched, n, "ring")
        full = check_program(sched, unroll(sched, sizes=placement.sizes), placement)
        ok = right and n == 2
        assert full.ok is ok and (ok or full.kinds() == {"wrong_result"})
        assert (quotient_report(sched, placement, 1) is not None) is ok
        assert check(sched, n).ok is ok


def _or_unclear(claim, *args) -> bool:
    """The claim, or False where the rotation cannot tell (the check then falls back to the
    full analysis): with the output pinned, an input that moves per device (a psum's
    `x[block]` indexed from `me`) no longer lines up with it."""
    try:
        return claim(*args)
    except Unclear:
        return False


# -- symbolic sums of runs -----------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 7), min_size=1, max_size=12), st.randoms())
def test_runs_of_devices_are_canonical(devices, rnd):
    """A sum written term by term, or with runs of devices merged first, in any order, is
    the same value; a different multiset of devices is a different value."""
    box = ((0, 4),)
    term = lambda d: ("x", d, ((0, 0),))  # noqa: E731
    one = canonical_value([term(d) for d in devices], box)
    shuffled = list(devices)
    rnd.shuffle(shuffled)
    half = canonical_value([term(d) for d in shuffled[: len(shuffled) // 2]], box)
    assert canonical_value(list(half) + [term(d) for d in shuffled[len(shuffled) // 2:]], box) == one
    assert canonical_value([term(d) for d in devices] + [term(devices[0])], box) != one


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 3)), min_size=1, max_size=16), st.randoms())
def test_products_over_runs_of_devices_are_canonical(cells, rnd):
    """A sum of products x_d[:, k] * y_d[k, :], one per (device d, k) cell, is the same
    value whether written cell by cell or with pairs of devices given as one run, in any
    order; one more cell changes it."""
    box = ((0, 4), (0, 4))

    def prod(lo: int, hi: int, k: int) -> tuple:
        dev = lo if hi == lo + 1 else (lo, hi)
        return (PRODUCT, ("x", dev, ((0, 0), (-1, 0))), ("y", dev, ((-1, 0), (1, 0))), k, k + 1)

    one = canonical_value([prod(d, d + 1, k) for d, k in cells], box)
    rest, terms = sorted(cells), []
    while rest:
        d, k = rest.pop(0)
        if (d + 1, k) in rest and rnd.random() < 0.5:
            rest.remove((d + 1, k))
            terms.append(prod(d, d + 2, k))
        else:
            terms.append(prod(d, d + 1, k))
    rnd.shuffle(terms)
    assert canonical_value(terms, box) == one
    d, k = cells[0]
    assert canonical_value(terms + [prod(d, d + 1, k)], box) != one


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([None, 0, 1]), st.integers(0, 3)), min_size=2, max_size=2),
       st.tuples(st.integers(0, 3), st.integers(1, 4)), st.tuples(st.integers(0, 3), st.integers(1, 4)),
       st.integers(0, 3), st.integers(0, 3))
def test_restricting_a_canonical_value_is_canonical(imap, rows, cols, r0, c0):
    """`restrict_value` (the shortcut taken when a stored piece is cut) gives what canonical form
    of the smaller box gives, also when the cut leaves a single index."""
    big = ((rows[0], rows[0] + rows[1]), (cols[0], cols[0] + cols[1]))
    small = tuple((lo + min(o, hi - lo - 1), hi) for (lo, hi), o in zip(big, (r0, c0)))
    small = (small[0], (small[1][0], small[1][0] + 1)) if c0 % 2 else small
    terms = [("x", 0, tuple(imap)), ("x", 1, tuple(imap)), (PRODUCT, ("a", 2, ((0, 0), (-1, 3))),
                                                           ("b", 2, ((-1, 3), (1, 0))), 3, 5)]
    assert restrict_value(canonical_value(terms, big), big, small) == canonical_value(terms, small)


def test_a_copy_stores_canonical_values():
    """A copy skips canonical form (it moves canonical pieces), so it must leave exactly what
    canonical form gives, term order included, after shifting offsets that reorder terms."""
    from ringc.verify.events import Region
    from ringc.verify.semantics import Memory
    r = lambda b, lo, n: Region(b, 0, ((lo, lo + n),), (0,), 4)  # noqa: E731
    mem = Memory({"x": (32,), "y": (32,), "z": (32,)})
    mem.init_input(0, "x")
    mem.copy(r("x", 5, 4), r("y", 0, 4))
    mem.accumulate(r("x", 10, 4), r("y", 0, 4))
    mem.copy(r("y", 0, 4), r("z", 6, 4))
    [piece] = mem.read(r("z", 6, 4))
    assert len(piece.value) == 2 and piece.value == canonical_value(piece.value, piece.box)


def test_check_takes_the_quotient_and_reports_the_same():
    sched = ringc.load(ROOT / "schedules" / "reduce_scatter_bidirectional.yaml")
    fast = check(sched, 8)
    assert isinstance(fast.program, SymmetricProgram) and fast.ok
    placement = resolve_topology(sched, 8, "ring")
    slow = check_program(sched, unroll(sched, 8), placement)
    fast_json, slow_json = fast.to_json(), slow.to_json()
    fast_json.pop("seconds"), slow_json.pop("seconds")
    assert fast_json == slow_json
    assert fast.to_text().split("(")[1].split(",")[0] == slow.to_text().split("(")[1].split(",")[0]  # events
