"""The verifier: the broken corpus is rejected for the right reasons, warnings stay
warnings, and the machinery (semaphore machine, must-happen-before, race traces) agrees
with brute force on small programs."""

from __future__ import annotations

import difflib
from collections import deque
from pathlib import Path

import pytest
import yaml

import ringc
from conftest import line_of, without_runtime_data
from ringc.ir import load_text
from ringc.testing import supports
from ringc.verify.events import Compute, DmaStart, Program, Region, SemWait, Signal
from ringc.verify.symmetric.program import SymmetricProgram
from ringc.verify.findings import KINDS
from ringc.testing import topology_for
from ringc.verify.check import check_program, resolve_topology
from ringc.verify.order import compute_order
from ringc.verify.symmetry import semaphore_symmetric
from ringc.verify.simulate import Machine, maximal_run
from ringc.verify.unroll import unroll
from ringc.testing import samples_for

REPO = Path(__file__).resolve().parent.parent
LIBRARY_DIR = REPO / "schedules"
BROKEN_DIR = REPO / "tests" / "broken"
MANIFEST = yaml.safe_load((BROKEN_DIR / "expected.yaml").read_text())
WARNING_KINDS = {"not_neighbour", "self_target", "no_wraparound", "byte_mismatch"}
ERROR_KINDS = set(KINDS) - WARNING_KINDS


def _derived_from(path: Path) -> Path:
    first = path.read_text().splitlines()[0]
    name = first.split("derived from schedules/", 1)[1].rstrip(")")
    return LIBRARY_DIR / name


# ------------------------------------------------------------------ the corpus


def test_manifest_lists_exactly_the_corpus():
    files = {p.name for p in BROKEN_DIR.glob("*.yaml")} - {"expected.yaml"}
    assert files == set(MANIFEST)
    for name, entry in MANIFEST.items():
        assert set(entry) <= {"devices", "kinds", "warnings", "at", "topology", "along", "strict", "data"}, name
        assert isinstance(entry["devices"], int) and entry["devices"] >= 2
        assert entry["kinds"] and set(entry["kinds"]) <= set(KINDS), name
        assert set(entry.get("warnings", [])) <= WARNING_KINDS, name
        assert set(entry.get("at", {})) <= set(entry["kinds"]) | set(entry.get("warnings", [])), name


# Kinds no YAML schedule can make, with the test that rejects their broken Pallas case: a
# schedule always names its collective, so `unwritten_output` (asked only where there is no
# meaning to compare with) is a Pallas kernel's.
PALLAS_ONLY_KINDS = {
    "unwritten_output": ("test_published_patterns.py", "test_an_output_nothing_fills_is_an_error_where_there_is_no_meaning"),
    "unwritten_read": ("test_published_patterns.py", "test_a_read_of_scratch_nothing_fills_into_an_output_is_an_error"),
    "vmem_overflow": ("test_published_patterns.py", "test_a_kernel_over_its_vmem_is_found_as_the_tpu_compiler_refuses_it"),
}


def test_every_error_kind_has_a_broken_case():
    covered = {k for entry in MANIFEST.values() for k in entry["kinds"]}
    for kind, (module, test) in PALLAS_ONLY_KINDS.items():
        assert f"def {test}(" in (REPO / "tests" / module).read_text(), (kind, module, test)
        covered.add(kind)
    assert ERROR_KINDS <= covered, f"no broken schedule for {sorted(ERROR_KINDS - covered)}"


def _check_entry(path: Path, entry: dict):
    """`ringc check` as the manifest entry says: N devices on a ring, or on `topology`; a
    schedule with runtime data for the samples `data` gives (`--data random:K`, seed 0)."""
    sched = ringc.load(path)
    samples = samples_for(entry["data"], sched, entry["devices"])[0] if "data" in entry else None
    return ringc.check(sched, entry["devices"], topology=entry.get("topology", "ring"),
                       along=entry.get("along"), strict=entry.get("strict", False), data=samples)


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_broken_file_is_a_small_change_of_a_library_schedule(name):
    path = BROKEN_DIR / name
    lines = path.read_text().splitlines(keepends=True)
    assert lines[0].startswith("# BROKEN: ") and len(lines[0]) > 20
    source = _derived_from(path)
    original = source.read_text().splitlines(keepends=True)
    # the library's header comment is kept, right after the BROKEN line
    header = [l for l in original if l.startswith("#")][:3]
    assert lines[1:1 + len(header)] == header
    changed = [l for l in difflib.unified_diff(original, lines[1:], n=0)
               if l[:1] in "+-" and not l.startswith(("+++", "---"))]
    assert 1 <= len(changed) <= 8, "".join(changed)


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_broken_schedule_is_rejected(name):
    entry = MANIFEST[name]
    path = BROKEN_DIR / name
    report = _check_entry(path, entry)
    assert report.ok is False
    kinds = report.kinds()
    assert set(entry["kinds"]) <= kinds, f"expected {entry['kinds']}, got {sorted(kinds)}"
    assert all(f.kind in KINDS for f in report.findings)
    assert all(f.severity == "error" for f in report.findings if f.kind in entry["kinds"])
    for kind in entry.get("warnings", []):
        assert any(f.kind == kind and f.severity == "warning" for f in report.findings), (kind, report.to_text())
    text = path.read_text()
    for kind, at in entry.get("at", {}).items():
        line = line_of(text, at)
        got = sorted({f.event.line for f in report.findings if f.kind == kind and f.event})
        assert line in got, f"{kind} expected at line {line}, reported at {got}"


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_library_source_of_broken_case_passes(name):
    # the bug is what makes it fail, not the device count
    report = _check_entry(_derived_from(BROKEN_DIR / name), MANIFEST[name])
    assert report.ok and not report.findings, report.to_text()


def _race_reports():
    for name in sorted(MANIFEST):
        if "race" in MANIFEST[name]["kinds"]:
            yield name, _check_entry(BROKEN_DIR / name, MANIFEST[name])


def test_race_findings_carry_a_trace():
    seen = 0
    for name, report in _race_reports():
        for f in report.findings:
            if f.kind != "race":
                continue
            seen += 1
            assert f.event is not None and len(f.related) == 1, name
            assert f.trace, f"{name}: race without a trace: {f.message}"
            assert any(line.startswith(">") for line in f.trace), name
            # the message names both operations' locations
            assert report.program.where(f.event) in f.message
            assert report.program.where(f.related[0]) in f.message
    assert seen >= 10


def test_race_trace_shows_both_racing_events():
    for name, report in _race_reports():
        for f in report.findings:
            if f.kind != "race":
                continue
            text = "\n".join(f.trace)
            marked = [line for line in f.trace if line.startswith(">")]
            for ev in (f.event, f.related[0]):
                assert f"(line {ev.line})" in text, (name, ev.line, f.trace)
                where = report.program.where(ev)
                assert any(where in line for line in marked), (name, where, f.trace)


# ------------------------------------------------------------------- warnings

PERMUTE = """\
name: far_permute
collective: {kind: ppermute, shift: SHIFT}
params: {rows: 8, cols: 128}
buffers:
  x:   {kind: input,  shape: [rows, cols]}
  out: {kind: output, shape: [rows, cols]}
semaphores:
  send_sem: dma
  recv_sem: dma
grid: {step: 1}
copies:
  push: {src: x, dst: out, to: "TARGET", send_sem: send_sem, recv_sem: recv_sem}
body:
  - start: push
  - wait: push
"""
START_LINE = PERMUTE.splitlines().index("  - start: push") + 1


def _permute(shift: int, target: str):
    return load_text(PERMUTE.replace("SHIFT", str(shift)).replace("TARGET", target), "far.yaml")


@pytest.mark.parametrize("n,hops", [(4, 2), (5, 2), (7, 2)])
def test_send_two_hops_away_is_a_not_neighbour_warning(n, hops):
    report = ringc.check(_permute(2, "(me + 2) % N"), n)
    assert report.ok is True
    assert [(f.kind, f.severity) for f in report.findings] == [("not_neighbour", "warning")]
    f = report.findings[0]
    assert f"{hops} hops" in f.message and f.event.line == START_LINE


def test_not_neighbour_depends_on_the_ring_size():
    # on a ring of 3, (me + 2) % 3 is the left neighbour
    report = ringc.check(_permute(2, "(me + 2) % N"), 3)
    assert report.ok and not report.findings


def test_far_send_that_computes_the_wrong_thing_is_still_an_error():
    report = ringc.check(_permute(1, "(me + 2) % N"), 5)
    assert report.ok is False
    assert {"not_neighbour", "wrong_result"} <= report.kinds()


def test_send_to_self_is_a_self_target_warning():
    # implicit: the target is computed, and happens to be the sender
    report = ringc.check(_permute(0, "(me + N) % N"), 4)
    assert report.ok is True
    assert {(f.kind, f.severity) for f in report.findings} == {("self_target", "warning")}
    assert report.findings[0].event.line == START_LINE
    assert "self_copy: true" in report.findings[0].message


@pytest.mark.parametrize("target,flag", [("me", ""), ("(me + N) % N", ", self_copy: true")])
def test_an_explicit_self_copy_is_not_warned(target, flag):
    """`to: me` written out, or `self_copy: true`: the author says the copy stays here (a
    remote DMA to oneself, as JAX's all_gather kernel copies its own shard)."""
    text = PERMUTE.replace("SHIFT", "0").replace("TARGET", target).replace(
        "recv_sem: recv_sem}", f"recv_sem: recv_sem{flag}}}")
    report = ringc.check(load_text(text, "self.yaml"), 4)
    assert report.ok and not report.findings, report.to_text()
    # still a remote DMA for every other check: dropping its wait is an error
    report = ringc.check(load_text(text.replace("  - wait: push\n", ""), "self.yaml"), 4)
    assert "dma_not_waited" in report.kinds() and "self_target" not in report.kinds()


def test_warnings_do_not_fail_the_cli(tmp_path, capsys):
    from ringc.cli import main
    path = tmp_path / "far.yaml"
    path.write_text(PERMUTE.replace("SHIFT", "2").replace("TARGET", "(me + 2) % N"))
    assert main(["check", str(path), "--devices", "4..6"]) == 0
    out = capsys.readouterr().out
    assert out.count("warning: [not_neighbour]") == 3


TWO_PART = """\
name: two_part_permute
collective: {kind: ppermute, shift: 1}
params: {rows: 8, cols: 128}
buffers:
  x:   {kind: input,  shape: [rows, cols]}
  out: {kind: output, shape: [rows, cols]}
semaphores:
  send_sem: dma
  recv_sem: dma
grid: {step: 1}
copies:
  a: {src: "x[0:2]", dst: "out[0:2]", to: right, send_sem: send_sem, recv_sem: recv_sem}
  b: {src: "x[2:6]", dst: "out[2:6]", to: right, send_sem: send_sem, recv_sem: recv_sem}
body:
  - start: a
  - start: b
  - wait: FIRST
  - wait: SECOND
"""


def _two_part(first: str, second: str):
    return load_text(TWO_PART.replace("FIRST", first).replace("SECOND", second), f"{first}{second}.yaml")


def test_two_dmas_on_one_semaphore_waited_in_start_order():
    report = ringc.check(_two_part("a", "b"), 3)
    assert report.ok and not report.findings, report.to_text()


def test_waiting_in_the_other_order_is_just_as_fine():
    report = ringc.check(_two_part("b", "a"), 3)
    assert report.kinds() == ringc.check(_two_part("a", "b"), 3).kinds()
    assert report.ok, report.to_text()


# -------------------------------------------------------- machine and ordering

TINY = """\
name: tiny
collective: {kind: ppermute, shift: 1}
params: {rows: 8, cols: 128}
buffers:
  x:   {kind: input,  shape: [rows, cols]}
  out: {kind: output, shape: [rows, cols]}
semaphores:
  send_sem: dma
  recv_sem: dma
  go: regular
grid: {step: 1}
copies:
  push: {src: x, dst: out, to: right, send_sem: send_sem, recv_sem: recv_sem}
body:
  - when: me == 0
    do:
      - signal: go
        to: right
  - when: me == 1
    do:
      - sem_wait: go
        value: GO
  - start: push
  - wait: push
"""


def _tiny(n: int = 2, go: int = 1) -> Program:
    return unroll(load_text(TINY.replace("GO", str(go)), "tiny.yaml"), n)


def _first(program: Program, device: int, kind, **attrs):
    for ev in program.devices[device]:
        if isinstance(ev.action, kind) and all(getattr(ev.action, k) == v for k, v in attrs.items()):
            return ev
    raise LookupError((device, kind, attrs))


def test_machine_runs_the_tiny_schedule_to_completion():
    p = _tiny()
    m = Machine(p).run()
    assert m.finished() and m.stuck() == []
    assert sorted(m.order, key=lambda e: (e.device, e.index)) == [e for d in p.devices for e in d]
    for d in range(p.n):  # program order is kept per device
        assert [e for e in m.order if e.device == d] == p.devices[d]
    assert all(v == 0 for v in m.value.values())


def test_machine_blocks_on_a_wait_until_the_signal():
    p = _tiny()
    wait = _first(p, 1, SemWait, why="sem_wait")
    signal = _first(p, 0, Signal)
    assert signal.action.sem == (1, "go", ())
    m = Machine(p, [0, len(p.devices[1])]).run()  # hold device 0 before everything
    assert m.stuck() == [wait]
    assert m.pc == [0, wait.index] and m.value[(1, "go", ())] == 0
    assert not m.finished()
    m.release(0, signal.index + 1)  # let the signal through, nothing else
    assert m.pc[0] == signal.index + 1
    assert m.pc[1] > wait.index  # the wait passed
    blocked = m.stuck()
    assert [e.device for e in blocked] == [1]
    assert isinstance(blocked[0].action, SemWait) and blocked[0].action.sem[0] == 1
    m.release(0, len(p.devices[0]))
    assert m.finished()


def test_machine_accounts_which_event_fed_each_wait():
    p = _tiny()
    m = maximal_run(p)
    wait = _first(p, 1, SemWait, why="sem_wait")
    signal = _first(p, 0, Signal)
    record = next(c for c in m.consumed if c.wait is wait)
    assert record.taken == [(signal, 1, 1)]
    start0 = _first(p, 0, DmaStart)
    recv1 = _first(p, 1, SemWait, why="wait_recv")
    record = next(c for c in m.consumed if c.wait is recv1)
    assert record.taken == [(start0, start0.action.nbytes, start0.action.nbytes)]
    assert start0.action.nbytes == 8 * 128 * 4


def test_machine_finds_the_hang_and_check_reports_it():
    p = _tiny(go=2)
    m = maximal_run(p)
    wait = _first(p, 1, SemWait, why="sem_wait")
    recv0 = _first(p, 0, SemWait, why="wait_recv")  # device 1 never sends, so device 0 waits too
    assert not m.finished() and set(m.stuck()) == {wait, recv0}
    assert m.value[(1, "go", ())] == 1
    report = ringc.check(load_text(TINY.replace("GO", "2"), "tiny.yaml"), 2)
    assert report.kinds() == {"hang"}
    assert {f.event.line for f in report.findings} == {wait.line, recv0.line}
    hang = next(f for f in report.findings if (f.event.device, f.event.line) == (1, wait.line))
    assert "wait go >= 2, but only 1 can ever arrive" in hang.message


def _brute_force_can_run_before(program: Program):
    """All reachable (pc, semaphore) states of the semaphore machine, by BFS; returns
    can(e, f): some reachable state has f executed while e has not."""
    n = program.n
    init = (tuple([0] * n), ())
    seen = {init}
    queue = deque([init])
    while queue:
        pcs, sems = queue.popleft()
        values = dict(sems)
        for d in range(n):
            if pcs[d] >= len(program.devices[d]):
                continue
            a = program.devices[d][pcs[d]].action
            new = dict(values)
            if isinstance(a, SemWait):
                if new.get(a.sem, 0) < a.value:
                    continue
                new[a.sem] -= a.value
            elif isinstance(a, Signal):
                if 0 <= a.sem[0] < n:
                    new[a.sem] = new.get(a.sem, 0) + a.inc
            elif isinstance(a, DmaStart):
                for s in (a.recv_sem, a.send_sem):
                    if s is not None and 0 <= s[0] < n:
                        new[s] = new.get(s, 0) + a.nbytes
            else:
                assert isinstance(a, Compute)
            state = (pcs[:d] + (pcs[d] + 1,) + pcs[d + 1:], tuple(sorted((k, v) for k, v in new.items() if v)))
            if state not in seen:
                seen.add(state)
                queue.append(state)
    pcs_seen = {s[0] for s in seen}

    def can(e, f) -> bool:
        return any(p[f.device] > f.index and p[e.device] <= e.index for p in pcs_seen)
    return can


@pytest.mark.parametrize("make", [
    lambda: _tiny(2), lambda: _tiny(3),
    lambda: unroll(ringc.load(LIBRARY_DIR / "ppermute_right.yaml"), 3),
    lambda: unroll(ringc.load(LIBRARY_DIR / "all_gather_ring.yaml"), 3),
    lambda: unroll(ringc.load(BROKEN_DIR / "all_gather_shared_recv_sem.yaml"), 3),
], ids=["tiny2", "tiny3", "ppermute3", "all_gather3", "shared_recv3"])
def test_compute_order_equals_brute_force(make):
    p = make()
    order = compute_order(p)
    can = _brute_force_can_run_before(p)
    events = [e for d in p.devices for e in d]
    checked = 0
    for e in events:
        for f in events:
            if e is f:
                continue
            must = not can(e, f)
            assert order.before(e, f) == must, (p.where(e), p.where(f))
            assert order.can_precede(f, e) == (not must)
            checked += 1
    assert checked > 50


def test_compute_order_on_the_signal_wait_pair():
    p = _tiny()
    order = compute_order(p)
    signal = _first(p, 0, Signal)
    wait = _first(p, 1, SemWait, why="sem_wait")
    start0, start1 = _first(p, 0, DmaStart), _first(p, 1, DmaStart)
    recv0, recv1 = _first(p, 0, SemWait, why="wait_recv"), _first(p, 1, SemWait, why="wait_recv")
    assert order.before(signal, wait) and not order.before(wait, signal)
    assert order.can_precede(signal, wait) and not order.can_precede(wait, signal)
    assert order.before(signal, start1)  # through the wait, in device 1's program order
    # device 0's own start is not ordered with device 1's wait, either way
    assert not order.before(start0, wait) and not order.before(wait, start0)
    # a DMA start must precede the receiver's wait for its bytes
    assert order.before(start0, recv1) and order.before(start1, recv0)
    assert not order.before(recv1, start0)
    # same device: program order
    assert order.before(signal, start0) and not order.before(start0, signal)


# ------------------------------------------------ cross-check with the explorer


def _explore():
    try:
        from ringc.verify.explore import explore
    except ImportError:  # the explorer is being written elsewhere
        pytest.skip("ringc.verify.explore not available")
    return explore


# Schedules with runtime data are cross-checked per sample in tests/test_data.py.
EXPLORER_CASES = ([n for n in sorted(MANIFEST) if "data" not in MANIFEST[n]]
                  + [p.name for p in without_runtime_data(sorted(LIBRARY_DIR.glob("*.yaml")))])


@pytest.mark.parametrize("name", EXPLORER_CASES)
def test_verifier_agrees_with_the_explorer(name):
    """Cross-check with the exhaustive interleaving explorer (its default DMA model is the
    one of docs/verification.md) at N = 3, or N = 2 if that is too big. Hangs and exit
    balance are exact in the verifier, so they must agree; races are sound (every race the
    explorer finds is reported) and, on these schedules, exact as well."""
    explore = _explore()
    path = BROKEN_DIR / name if name in MANIFEST else LIBRARY_DIR / name
    sched = ringc.load(path)
    entry = MANIFEST.get(name, {})
    if len(sched.axes) > 1 or "topology" in entry:  # on its topology (a 2-D schedule: 2 x 2, 3-D 2 x 2 x 2)
        topo = entry.get("topology", "torus:2x2" if len(sched.axes) < 3 else "torus:2x2x2")
        report = _check_entry(path, {"devices": None, **entry, "topology": topo})
        program = report.program
        if isinstance(program, SymmetricProgram):  # a clean quotient check kept device 0's events only
            program = unroll(sched, sizes=program.axis_sizes)
        result = explore(program, max_states=60_000)
        if not result.complete:
            pytest.skip("explorer state budget exceeded")
        n, kinds = None, report.kinds()
    else:
        for n in (3, 2):
            if not supports(sched, n):  # a hypercube: powers of two only
                continue
            result = explore(unroll(sched, n), max_states=60_000)
            if result.complete:
                break
        else:
            pytest.skip("explorer state budget exceeded")
        kinds = ringc.check(sched, n).kinds()
    assert ("hang" in kinds) == result.hang, (n, sorted(kinds))
    if not result.hang:
        assert bool(kinds & {"unbalanced", "dma_not_waited"}) == result.nonzero_exit, (n, sorted(kinds))
        if result.race:
            assert "race" in kinds, (n, sorted(kinds), result.races[:3])
        assert ("race" in kinds) == result.race, (n, sorted(kinds))


def _placed(sched, n: int):
    """The unrolled program and its placement on `topology_for(sched, n)`."""
    topo = topology_for(sched, n)
    placement = resolve_topology(sched, n if topo == "ring" else None, topo)
    return unroll(sched, sizes=placement.sizes), placement


@pytest.mark.parametrize("path", without_runtime_data(sorted(LIBRARY_DIR.glob("*.yaml")) + sorted(
    set(BROKEN_DIR.glob("*.yaml")) - {BROKEN_DIR / "expected.yaml"})),
                         ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_symmetric_order_equals_the_full_computation(path):
    """The one-pass rotated cuts answer every query exactly as N separate passes do."""
    for n in (3, 4):
        if not supports(ringc.load(path), n):
            continue
        program, _ = _placed(ringc.load(path), n)
        fast, full = compute_order(program), compute_order(program, use_symmetry=False)
        assert not full.symmetric
        events = [e for d in program.devices for e in d]
        for e in events[::3]:
            for f in events:
                assert fast.before(e, f) == full.before(e, f), (path.stem, n, program.where(e), program.where(f))


def test_symmetry_is_refused_when_devices_differ():
    """Guards on `me` make devices 0 and 1 unlike the others: no rotated shortcut, and the
    full computation still answers (test_compute_order_equals_brute_force covers tiny)."""
    assert not semaphore_symmetric(_tiny(3)) and not compute_order(_tiny(3)).symmetric
    assert semaphore_symmetric(unroll(ringc.load(LIBRARY_DIR / "ppermute_right.yaml"), 4))
    # a send to a device that does not exist cannot be rotated either
    assert not semaphore_symmetric(unroll(ringc.load(BROKEN_DIR / "ppermute_missing_mod.yaml"), 4))


def _finding_keys(report) -> set:
    """What a finding is about, whichever of its two ops a race names first."""
    return {(f.kind, f.device, tuple(sorted(([f.event.line] if f.event else []) + [r.line for r in f.related])))
            for f in report.findings}


@pytest.mark.parametrize("path", without_runtime_data(sorted(LIBRARY_DIR.glob("*.yaml")) + sorted(
    set(BROKEN_DIR.glob("*.yaml")) - {BROKEN_DIR / "expected.yaml"})),
                         ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_symmetry_reduction_finds_exactly_what_the_full_analysis_finds(path):
    sched = ringc.load(path)
    for n in (3, 4, 6):
        if not supports(sched, n):
            continue
        program, placement = _placed(sched, n)
        fast = check_program(sched, program, placement)
        full = check_program(sched, program, placement, use_symmetry=False)
        assert _finding_keys(fast) == _finding_keys(full), (path.stem, n)


def test_memoized_unrolling_keeps_true_apart_from_1():
    """The unroller memoizes on the values an op reads; True and 1 are equal keys in
    Python, but a box must print as `x[1, ...]`, never `x[True, ...]`."""
    sched = load_text("""\
name: bool_index
collective: {kind: ppermute, shift: 0}
params: {rows: 2, cols: 8}
buffers:
  x:   {kind: input,  shape: [rows, cols]}
  out: {kind: output, shape: [rows, cols]}
semaphores:
  sem: dma
grid: {step: 3}
let:
  a: "max(step == 0, step - 1)"
copies:
  cp: {src: "x[a]", dst: "out[a]", sem: sem}
body:
  - start: cp
  - wait: cp
""")
    starts = [ev.action for ev in unroll(sched, 2).devices[0] if isinstance(ev.action, DmaStart)]
    assert [a.src.text() for a in starts] == ["x[1, 0:8]", "x[0, 0:8]", "x[1, 0:8]"]


# ------------------------------------------------------------------ issue 13: dimension semantics

PARALLEL_PERMUTE = """\
name: ppermute_halves
collective: {kind: ppermute, shift: 1}
params: {rows: 8, cols: 128}
buffers:
  x:   {kind: input,  shape: [rows, cols]}
  out: {kind: output, shape: [rows, cols]}
semaphores: {send_sem: dma, recv_sem: dma}
grid: {h: 2}
dimension_semantics: {h: parallel}
copies:
  lo: {src: "x[0:rows // 2]", dst: "out[0:rows // 2]", to: right, send_sem: send_sem, recv_sem: recv_sem}
  hi: {src: "x[rows // 2:rows // 2]", dst: "out[rows // 2:rows // 2]", to: right, send_sem: send_sem, recv_sem: recv_sem}
body:
  - when: h == 0
    do:
      - start: lo
      - start: hi
      - wait: lo
      - wait: hi
"""


def test_a_parallel_axis_whose_iterations_are_independent_checks_clean():
    """Iteration h = 1 (core 1 of a megacore chip) does nothing, h = 0 everything: no
    iteration needs another, and the emitted compiler params say `parallel`."""
    from ringc.ir.loader import load_text
    sched = load_text(PARALLEL_PERMUTE)
    for n in (2, 3):
        report = ringc.check(sched, n)
        assert report.ok, report.to_text()
    assert 'dimension_semantics=("parallel",)' in ringc.emit(sched)


def test_a_parallel_axis_carrying_a_dependency_is_an_error_at_the_dependent_op():
    """The same halves, `hi` started at h = 0 and waited at h = 1: the wait depends on
    another iteration, and core 1 would wait (`megacore_dma`)."""
    from ringc.ir.loader import load_text
    text = PARALLEL_PERMUTE.replace("      - wait: hi\n", "  - when: h == 1\n    do:\n      - wait: hi\n")
    report = ringc.check(load_text(text), 3)
    deps = [f for f in report.findings if f.kind == "parallel_dependency"]
    assert deps and {f.event.line for f in deps} == {line_of(text, "- wait: hi")}, report.to_text()
    assert "another iteration of the parallel axis `h`" in deps[0].message
    assert "megacore_dma" in report.kinds()
    # arbitrary: the same schedule is fine on one core, in grid order
    assert ringc.check(load_text(text.replace("{h: parallel}", "{h: arbitrary}")), 3).ok


def test_actions_are_dataclasses_with_their_own_init():
    """`events._stored` makes the actions' and regions' `__init__` faster; what a dataclass
    promises still holds: defaults, keywords, equality, hash, `replace`, and immutability."""
    import dataclasses
    r = Region("x", 0, ((0, 1), (0, 8)), (1,), 4)
    assert r == Region(buffer="x", device=0, box=((0, 1), (0, 8)), kept=(1,), itemsize=4)
    assert hash(r) == hash(Region("x", 0, ((0, 1), (0, 8)), (1,), 4)) and r.shape == (8,) and r.nbytes == 32
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.device = 1
    c = Compute("zero", r)
    assert (c.src, c.accumulate, c.contract) == (None, False, (1, 0))
    assert dataclasses.replace(c, kind="exit") == Compute("exit", r)
    assert Signal((0, "s", ()), 1).why == "signal" and SemWait((0, "s", ()), 2, "wait").copy is None
    assert not DmaStart("c", r, r, None, (0, "s", ())).explicit_self
    with pytest.raises(TypeError):
        DmaStart("c", r, r)  # the semaphores have no default
