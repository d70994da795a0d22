"""The XOR quotient (`ringc/verify/xor.py`): a hypercube schedule, whose partners are
`me ^ (1 << k)`, is decided from device 0's events. The symbol must agree with every
device, the proof must hold on every device's concrete events, and the quotient must
never call clean what the full analysis rejects, with the same findings and routes."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import without_runtime_data
from hypothesis import given, settings
from hypothesis import strategies as st

import ringc
from ringc.ir import expr as E
from ringc.verify.check import check_program, quotient_report, resolve_topology
from ringc.verify.placement import route_summary, xor_route_summary
from ringc.verify.rotation import NotRotational
from ringc.verify.events import Program
from ringc.verify.unroll import unroll
from ringc.verify.xor import Xor, XorCube, xor_unroll

ROOT = Path(__file__).resolve().parent.parent
HYPERCUBE = ROOT / "schedules" / "all_gather_hypercube.yaml"
CORPUS = [p for p in without_runtime_data(sorted((ROOT / "schedules").glob("*.yaml"))
                                          + sorted((ROOT / "tests" / "broken").glob("*.yaml"))
                                          + sorted((ROOT / "tests" / "mutants").glob("*.yaml"))
                                          + sorted((ROOT / "tests" / "xor").glob("*.yaml")))
          if p.name != "expected.yaml" and len(ringc.load(p).axes) == 1]
# tests/xor/: a recursive-doubling psum (partial sums over runs of devices, which XOR
# permutes) and the same with one receive slot for every round (a race, and a wrong sum).
DOUBLING = ROOT / "tests" / "xor" / "all_reduce_recursive_doubling.yaml"
ONE_SLOT = ROOT / "tests" / "xor" / "all_reduce_recursive_doubling_one_slot.yaml"


def _exprs() -> st.SearchStrategy[str]:
    leaf = st.sampled_from(["me", "j", "N", "1", "2", "3", "(1 << k)"])
    ops = ["^", "&", "%", "+", "-", "*", "//", "|", ">>"]
    return st.recursive(leaf, lambda sub: st.tuples(sub, st.sampled_from(ops), sub).map(
        lambda t: f"({t[0]} {t[1]} {t[2]})"), max_leaves=6)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from([2, 4, 8, 16]), _exprs(), st.integers(0, 7), st.integers(0, 3))
def test_xor_agrees_with_every_device(n, text, j, k):
    """Where the symbolic evaluation succeeds, it is the concrete value on every device."""
    e = E.parse(text)
    env = {"N": n, "j": j, "k": k}
    try:
        v = E.evaluate(e, {**env, "me": Xor(0, n - 1)})
    except (NotRotational, E.ExprError, ZeroDivisionError):
        return
    for d in range(n):
        try:
            want = E.evaluate(e, {**env, "me": d})
        except (E.ExprError, ZeroDivisionError):
            return
        assert (v.at(d) if isinstance(v, Xor) else v) == want, (text, n, d)


def test_xor_refuses_what_is_not_a_reflection():
    me = Xor(0, 7)
    for bad in (lambda: me + 1, lambda: me == 0, lambda: bool(me), lambda: me >> 1, lambda: me % 3,
                lambda: me | 1, lambda: me * 2):
        with pytest.raises(NotRotational):
            bad()


@pytest.mark.parametrize("n", [2, 4, 8, 16, 32])
def test_cube_image_is_the_xored_set_in_maximal_runs(n):
    cube = XorCube(n)
    for lo in range(n):
        for hi in range(lo + 1, n + 1):
            for t in range(n):
                got = cube.image(lo, hi, t)
                assert sorted(x for a, b in got for x in range(a, b)) == sorted(j ^ t for j in range(lo, hi))
                assert all(x[1] < y[0] for x, y in zip(got, got[1:]))


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_xor_unroll_holds_on_every_device(path):
    """When device 0 unrolls under the XOR symbol, device t's concrete events are device
    0's with every device id, and the index of every dim of step (1,), XORed by t."""
    sched = ringc.load(path)
    for n in (2, 4, 8):
        try:
            quot = xor_unroll(sched, n)
        except ringc.ScheduleError:
            continue
        if quot is None:
            continue
        full = unroll(sched, n)
        assert [(e.line, e.point, e.action) for e in quot.events] == \
               [(e.line, e.point, e.action) for e in full.devices[0]]
        steps = quot.steps
        for t in range(1, n):
            def move_region(r):
                box = tuple((lo ^ t, (lo ^ t) + 1) if any(steps.get((r.buffer, i), (0,))) and hi - lo == 1 else (lo, hi)
                            for i, (lo, hi) in enumerate(r.box))
                return (r.buffer, r.device ^ t, box, r.kept)

            def key(a):
                out = [type(a).__name__]
                for f in ("src", "dst", "rhs", "base"):
                    r = getattr(a, f, None)
                    out.append(move_region(r) if r is not None else None)
                for f in ("sem", "send_sem", "recv_sem"):
                    s = getattr(a, f, None)
                    out.append((s[0] ^ t, *s[1:]) if s is not None else None)
                out += [getattr(a, f, None) for f in ("value", "inc", "kind", "copy", "nbytes")]
                return tuple(out)

            def plain(a):  # the concrete event's own regions, unmoved
                out = [type(a).__name__]
                for f in ("src", "dst", "rhs", "base"):
                    r = getattr(a, f, None)
                    out.append((r.buffer, r.device, r.box, r.kept) if r is not None else None)
                for f in ("sem", "send_sem", "recv_sem"):
                    out.append(getattr(a, f, None))
                out += [getattr(a, f, None) for f in ("value", "inc", "kind", "copy", "nbytes")]
                return tuple(out)

            assert [key(e.action) for e in quot.events] == [plain(e.action) for e in full.devices[t]], \
                f"{path.name} N={n}: device {t} is not device 0 XORed"
            assert sorted(tt ^ t for _, tt in quot.representatives.targets) == sorted(tt for e, tt in full.targets if e.device == t)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_xor_quotient_is_sound(path):
    """Clean on the XOR quotient => clean in the full analysis, with the same findings
    (warnings) and route summary; the library's hypercube is clean on both."""
    sched = ringc.load(path)
    for n in (2, 4, 8):
        placement = resolve_topology(sched, n, "ring")
        try:
            program = xor_unroll(sched, n)
        except ringc.ScheduleError:
            continue
        if program is None:
            continue
        full = check_program(sched, unroll(sched, n), placement)
        fast = quotient_report(sched, placement, 1)
        if fast is None or fast.program.group != "xor":
            continue
        assert full.ok, f"{path.name} N={n}: XOR quotient clean, full finds {full.kinds()}"
        assert [f.to_text(full.program) for f in fast.findings] == [f.to_text(full.program) for f in full.findings]
        assert fast.routes == route_summary(full.program, placement)
        assert fast.program.event_count == full.program.event_count


def test_hypercube_is_decided_on_the_xor_quotient():
    for path in (HYPERCUBE, DOUBLING):
        sched = ringc.load(path)
        for n in (2, 4, 8, 16, 256):
            report = ringc.check(sched, n)
            assert report.ok and report.program.group == "xor" and len(report.program.representatives.devices) == 1


def test_a_race_under_xor_symmetry_goes_to_the_full_analysis():
    sched = ringc.load(ONE_SLOT)
    for n in (4, 8):
        assert xor_unroll(sched, n) is not None  # symmetric, and wrong
        assert quotient_report(sched, resolve_topology(sched, n, "ring"), 1) is None
        assert {"race", "wrong_result"} <= ringc.check(sched, n).kinds()


def _variant(old: str, new: str, tmp_path: Path) -> "ringc.ir.schema.Schedule":
    text = HYPERCUBE.read_text()
    assert old in text
    path = tmp_path / "variant.yaml"
    path.write_text(text.replace(old, new))
    return ringc.load(path)


def test_slots_by_absolute_device_id_break_the_symmetry(tmp_path):
    """`((me >> k) << k) + j` names the same slots as `me ^ j`, in another order on each
    device: no XOR symmetry, so the full analysis decides (and agrees it is correct)."""
    sched = _variant("slot: me ^ j ", "slot: ((me >> k) << k) + j ", tmp_path)
    assert xor_unroll(sched, 8) is None
    report = ringc.check(sched, 8)
    assert report.ok and isinstance(report.program, Program)


@pytest.mark.parametrize("old, new, kind", [
    ("      - wait: exchange\n", "      - wait: exchange\n      - wait: exchange\n", "hang"),
    ('dst: "out[slot]", to: partner', 'dst: "out[slot ^ 1]", to: partner', "wrong_result"),
    ('recv_sem: "recv_sems[k]"', 'recv_sem: "recv_sems[0]"', "race"),
])
def test_broken_hypercubes_go_to_the_full_analysis(tmp_path, old, new, kind):
    """A hang, a wrong slot and a shared receive semaphore: the XOR quotient does not call
    them clean, and the full analysis names the bug."""
    sched = _variant(old, new, tmp_path)
    placement = resolve_topology(sched, 8, "ring")
    assert quotient_report(sched, placement, 1) is None
    report = ringc.check(sched, 8)
    assert kind in report.kinds(), report.kinds()


@pytest.mark.parametrize("n", [16, 32, 64])
def test_xor_route_summary_counts_agree(n):
    """The difference-array count of link loads is the enumeration's."""
    sched = ringc.load(HYPERCUBE)
    program = xor_unroll(sched, n).representatives
    placement = resolve_topology(sched, n, "ring")
    assert xor_route_summary(program, placement, brute=0) == xor_route_summary(program, placement)
    assert xor_route_summary(program, placement) == route_summary(unroll(sched, n), placement)
