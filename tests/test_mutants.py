"""The mutation corpus (`tests/mutants/`): 15 bug classes, each caught with its diagnosis.

Every mutant is a broken variant of a library schedule; `tests/mutants/expected.yaml` says
where it is checked and what `ringc check` must report. Here:

- the manifest covers exactly the corpus and the 15 classes of issue 3;
- each mutant is reported with exactly its expected error kinds, and the finding that
  diagnoses its class names the right op (file:line) and explains it in the expected words;
- where a bug needs a larger ring or repeated calls, the same file is clean without them,
  and the documented fix makes it clean (so the finding is the bug's, not the file's);
- the library schedule it is derived from is clean at the same N;
- the exhaustive explorer agrees with the analysis on every mutant for N <= 4;
- JAX's interpret-mode race detector never reports a race that ringc does not.
"""

from __future__ import annotations

import difflib
import importlib.util
import re
import sys
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

import ringc
from ringc.ir import load_text
from ringc.verify.unroll import unroll
from ringc.verify.findings import KINDS
from test_explore import assert_agreement

REPO = Path(__file__).resolve().parent.parent
MUTANTS = REPO / "tests" / "mutants"
MANIFEST = yaml.safe_load((MUTANTS / "expected.yaml").read_text())
NAMES = sorted(MANIFEST)
KEYS = {"class", "name", "base", "devices", "invocations", "kinds", "finding", "at", "explain", "clean", "fix"}

# The classes of issue 3, section 4 (RMARaceBench, MPI Bugs Initiative, the seed's failure modes).
CLASSES = {
    1: "reading the destination before its wait_recv",
    2: "reusing the source before wait_send",
    3: "a DMA started and never waited",
    4: "two writers to one destination",
    5: "run-ahead flipping the working and receiving slots: 2 slots with no handshake",
    6: "over-signal, non-zero at exit",
    7: "over-wait, a hang",
    8: "byte-count mismatch",
    9: "wrong neighbour or direction, or a missing mod N",
    10: "one semaphore shared by concurrent DMAs of different sizes",
    11: "a barrier only with neighbours while data goes further",
    12: "relying on transitive sync through a third device that doesn't hold",
    13: "overlapping or misindexed slices",
    14: "a wait before its start",
    15: "barrier reuse across invocations",
}


@lru_cache(maxsize=None)
def schedule(name: str) -> ringc.Schedule:
    return ringc.load(MUTANTS / name)


@lru_cache(maxsize=None)
def report(name: str, devices: int | None = None, invocations: int | None = None):
    entry = MANIFEST[name]
    return ringc.check(schedule(name), devices or entry["devices"],
                       invocations=invocations or entry.get("invocations", 1))


def line_of(name: str, at: int | str) -> int:
    if isinstance(at, int):
        return at
    hits = [i for i, line in enumerate((MUTANTS / name).read_text().splitlines(), 1)
            if at in line and not line.startswith("#")]
    assert len(hits) == 1, f"{name}: {at!r} is on lines {hits}"
    return hits[0]


def diagnosis(name: str):
    """The findings of the diagnosing kind that name the expected line."""
    entry = MANIFEST[name]
    line = line_of(name, entry["at"])
    return [f for f in report(name).findings if f.kind == entry["finding"] and f.event is not None
            and line in {f.event.line, *(r.line for r in f.related)}]


# ------------------------------------------------------------------ the corpus


def test_manifest_lists_exactly_the_corpus_and_all_fifteen_classes():
    files = {p.name for p in MUTANTS.glob("*.yaml")} - {"expected.yaml"}
    assert files == set(MANIFEST)
    for name, entry in MANIFEST.items():
        assert set(entry) <= KEYS and {"class", "name", "base", "devices", "kinds", "finding", "at",
                                       "explain"} <= set(entry), name
        assert entry["name"] == CLASSES[entry["class"]], name
        assert name.startswith(f"{entry['class']:02d}_"), name
        assert (REPO / "schedules" / f"{entry['base']}.yaml").exists(), name
        assert entry["kinds"] and set(entry["kinds"]) <= set(KINDS) and entry["finding"] in entry["kinds"], name
    assert {e["class"] for e in MANIFEST.values()} == set(CLASSES)


def test_readme_describes_every_mutant():
    readme = (MUTANTS / "README.md").read_text()
    for name in MANIFEST:
        assert f"`{name.removesuffix('.yaml')}`" in readme, name


@pytest.mark.parametrize("name", NAMES)
def test_mutant_header_explains_the_bug(name):
    entry = MANIFEST[name]
    text = (MUTANTS / name).read_text()
    first = re.fullmatch(r"# MUTANT (\d+): (.+) \(derived from schedules/(\w+)\.yaml\)", text.splitlines()[0])
    assert first and (int(first[1]), first[3]) == (entry["class"], entry["base"]), text.splitlines()[0]
    header = "".join(l for l in text.splitlines(keepends=True) if l.startswith("#"))
    assert "# Bug: " in header and "Fix:" in header
    # the library's own header comment follows, unchanged
    library = (REPO / "schedules" / f"{entry['base']}.yaml").read_text().splitlines(keepends=True)
    assert "".join(l for l in library if l.startswith("#")) in header
    # and the body is a variant of the library schedule, not a new schedule
    body = [l for l in text.splitlines(keepends=True) if not l.startswith("#")]
    similarity = difflib.SequenceMatcher(None, [l for l in library if not l.startswith("#")], body).ratio()
    assert similarity > 0.6, f"{name}: only {similarity:.0%} like {entry['base']}"


# ------------------------------------------------------------------ the diagnosis


@pytest.mark.parametrize("name", NAMES)
def test_mutant_is_caught_with_its_kinds(name):
    entry = MANIFEST[name]
    rep = report(name)
    assert not rep.ok
    assert sorted({f.kind for f in rep.errors()}) == sorted(entry["kinds"]), rep.to_text()


@pytest.mark.parametrize("name", NAMES)
def test_finding_names_the_op_and_explains_the_bug(name):
    entry = MANIFEST[name]
    found = diagnosis(name)
    line = line_of(name, entry["at"])
    assert found, f"no {entry['finding']} finding names line {line}:\n{report(name).to_text()}"
    explained = [f for f in found if entry["explain"] in f.message]
    assert explained, f"no {entry['finding']} finding at line {line} says {entry['explain']!r}:\n" + \
        "\n".join(f.message for f in found)
    f = explained[0]
    # file:line in the report, and the line of every op the message mentions is real
    text = report(name).to_text()
    assert f"{MUTANTS / name}:{f.event.line}: error: [{entry['finding']}]" in text
    for ev in (f.event, *f.related):
        assert f"(line {ev.line})" in f.message


@pytest.mark.parametrize("name", NAMES)
def test_every_located_finding_is_on_an_op(name):
    """Findings point at the op's own line: its YAML text holds an op, or the barrier/body
    line that kernel entry and exit are attributed to."""
    lines = (MUTANTS / name).read_text().splitlines()
    for f in report(name).errors():
        if f.kind == "wrong_result" and f.event is None:  # nothing writes the box
            assert f.device is not None and "nothing writes it" in f.message
            continue
        text = lines[f.event.line - 1].strip()
        assert text.startswith("- ") or text.startswith(("barrier:", "body:")), (f.kind, f.event.line, text)


@pytest.mark.parametrize("name", [n for n in NAMES if "clean" in MANIFEST[n]])
def test_mutant_is_clean_where_its_bug_cannot_happen(name):
    for where in MANIFEST[name]["clean"]:
        rep = report(name, where["devices"], where.get("invocations", 1))
        assert rep.ok, (where, rep.to_text())


@pytest.mark.parametrize("name", [n for n in NAMES if "fix" in MANIFEST[n]])
def test_documented_fix_makes_it_clean(name):
    entry = MANIFEST[name]
    text = (MUTANTS / name).read_text()
    for old, new in entry["fix"]:
        assert text.count(old) == 1, (name, old)
        text = text.replace(old, new)
    fixed = load_text(text, f"{name}[fixed]")
    for n in sorted({entry["devices"], 8}):
        rep = ringc.check(fixed, n, invocations=entry.get("invocations", 1))
        assert rep.ok, rep.to_text()


@pytest.mark.parametrize("name", NAMES)
def test_base_schedule_is_clean_where_the_mutant_is_checked(name):
    entry = MANIFEST[name]
    base = ringc.load(REPO / "schedules" / f"{entry['base']}.yaml")
    rep = ringc.check(base, entry["devices"], invocations=entry.get("invocations", 1))
    assert rep.ok and not rep.findings, rep.to_text()


def test_dma_outliving_the_kernel_races_with_its_exit():
    """Kernel exit hands every buffer back to the caller: a DMA never waited still reads the
    input and writes the neighbour's output then (JAX sees the output copy-out race)."""
    rep = report("03_ppermute_never_waited.yaml")
    exits = [f for f in rep.findings if f.kind == "race" and "exits the kernel" in f.message]
    assert exits  # one finding per pair of YAML lines: the input's and the output's share theirs
    for f in exits:  # anchored at the copy, related to the exit
        assert f.event.action.copy == "push" and f.related[0].action.kind == "exit"
        assert "no wait guarantees that copy `push` has finished" in f.message


@pytest.mark.parametrize("name", [n for n in NAMES if MANIFEST[n]["class"] in (11, 12, 15)])
def test_entry_race_trace_starts_the_copy_before_the_entry(name):
    """The printed run shows the copy start first, then the target device's entry, with the
    receiver's wait still pending: the write lands in memory that is not the kernel's yet."""
    for f in report(name).findings:
        if f.kind != "race":
            continue
        marked = [line for line in f.trace if line.startswith(">")]
        assert len(marked) == 2 and "start remote copy" in marked[0] and "enter the kernel" in marked[1], f.trace
        assert f.trace[-1].strip().startswith("... ") and "has not happened yet" in f.trace[-1]


# ------------------------------------------------------------------ the explorer


# More than 3 million states even with the reduction: only what a budget reaches is compared.
TOO_BIG = {("05_all_reduce_run_ahead_no_handshake.yaml", 4)}


def _explorer_cases():
    for name in NAMES:
        inv = MANIFEST[name].get("invocations", 1)
        for n in (2, 3, 4):
            marks = [pytest.mark.slow] if (name, n) in TOO_BIG else []
            yield pytest.param(name, n, inv, marks=marks, id=f"{name.removesuffix('.yaml')}-N{n}")


@pytest.mark.parametrize("name, n, invocations", list(_explorer_cases()))
def test_explorer_agrees_with_the_analysis(name, n, invocations):
    """Same verdicts (race, hang, non-zero exit) and the same racing pairs of YAML lines,
    at every N <= 4, with the invocations of the manifest (clean there for class 15)."""
    try:
        unroll(schedule(name), n)
    except ringc.ScheduleError as e:
        pytest.skip(f"not a valid schedule at N={n}: {e}")
    budget = 300_000 if (name, n) in TOO_BIG else 3_000_000
    assert_agreement(schedule(name), n, budget, invocations=invocations)


def test_explorer_confirms_barrier_reuse_beyond_four_devices():
    """Class 15 needs a ring of 5; the explorer is small enough there to confirm it."""
    name = next(n for n in NAMES if MANIFEST[n]["class"] == 15)
    entry = MANIFEST[name]
    assert_agreement(schedule(name), entry["devices"], invocations=entry["invocations"])
    assert "race" in report(name).kinds()


# ------------------------------------------------------------------ JAX's race detector


def _benchmark():
    spec = importlib.util.spec_from_file_location("race_detection", REPO / "benchmarks" / "race_detection.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


QUICK = ["04_ppermute_two_writers.yaml", "01_all_reduce_accumulate_before_wait.yaml",
         "06_all_reduce_extra_final_signal.yaml"]


@pytest.mark.parametrize("mode", ["on_wait", "eager"])
@pytest.mark.parametrize("name", QUICK)
def test_jax_race_is_a_ringc_race(name, mode):
    """One interpret-mode run per DMA execution mode, in this process: if JAX's detector sees
    a race, ringc reported one. (Two of these mutants race in every JAX run, so the
    implication is not vacuous.)"""
    from ringc.run import run_schedule
    res = run_schedule(schedule(name), MANIFEST[name]["devices"], seed=0, dma_execution_mode=mode,
                       interpret_seed=0)
    assert res.races_found is not None
    if res.races_found:
        assert "race" in report(name).kinds()
    if name.startswith(("04_", "01_all_reduce")):
        assert res.races_found, "JAX's detector stopped seeing this race"


@pytest.mark.slow
def test_jax_never_finds_a_race_ringc_misses():
    """The full cross-check of benchmarks/race_detection.py: every runnable mutant and library
    schedule, 3 seeds x both DMA execution modes, each mutant in its own worker process."""
    bench = _benchmark()
    rows = bench.main(["--seeds", "3"])
    assert {r.name for r in rows} >= set(NAMES)
    for r in rows:
        assert r.agrees, f"JAX found a race in {r.name} that ringc does not report"
        if r.klass == "lib":
            assert r.jax_races == 0 and not r.ringc_kinds
    assert sum(r.jax_races for r in rows) > 0
