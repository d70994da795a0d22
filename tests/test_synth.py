"""`ringc synth` (ringc/synth/): the search over families, its frontier, the check of the
winner (a broken candidate is dropped), the emitted YAML, and bad input. All on the cost
model, without the TPU compiler (`compile=False`, `--no-compile`): fast."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ringc
from ringc.cli import main
from ringc.cost.chips import CHIPS
from ringc.ir.loader import load_text
from ringc.synth import synth
from ringc.synth.families import Candidate, library_text, with_params
from ringc.verify.check import check

REPO = Path(__file__).resolve().parent.parent
KiB, MiB = 2**10, 2**20


@pytest.fixture(scope="module")
def ring8():
    return synth("psum", "ring:8", [64 * KiB, 256 * MiB], compile=False)


def test_psum_on_ring8_at_256mib_is_within_5_percent_of_the_bound(ring8):
    choice = ring8.choices[-1]
    w = choice.winner
    sec, eff, bound, binding, fits, sized = w.points[256 * MiB]
    # The bound, derived here: all-reduce must move 2 (1 - 1/p) V into each chip over its 2 links.
    v = 8 * sized["rows"] * sized["cols"] * 4 if w.candidate.family == "bidirectional_ring" else None
    B = CHIPS["v5e"].link_bandwidth
    if v is not None:
        assert bound == pytest.approx(2 * (1 - 1 / 8) * v / (2 * B), rel=1e-9)
    assert binding == "ingress" and fits
    assert eff >= 0.95 and sec == pytest.approx(bound / eff)
    assert w.verified.startswith("ringc check ok on ring:8")
    assert choice.runner_up is not None and choice.runner_up.points[256 * MiB][1] <= eff


def test_the_winners_yaml_loads_and_rechecks(ring8):
    w = ring8.choices[-1].winner
    text = ring8.yaml_of(w)
    assert text.startswith("# ringc synth psum --topology ring:8")
    assert "of the bound" in text and "runner-up" in text and "Checked: ringc check ok" in text
    sched = load_text(text, "<synth winner>")
    assert check(sched, topology="ring:8").ok
    assert check(sched, 4).ok  # and on another ring: the template is N-generic


def test_at_64kib_latency_dominates_and_the_winner_differs(ring8):
    small, big = ring8.choices
    assert small.winner.points[64 * KiB][3] == "latency"
    assert small.winner is not big.winner
    assert ring8.changes and ring8.changes[0][0] == 256 * MiB
    # The frontier: lowest latency first, each next one trades latency for bandwidth.
    front = ring8.frontier
    assert len(front) >= 2
    lats = [lat for _, lat, _ in front]
    slopes = [s for _, _, s in front]
    assert lats == sorted(lats) and slopes == sorted(slopes, reverse=True)
    assert small.winner in [p for p, _, _ in front]  # the small-size winner trades bandwidth for latency
    assert big.winner.candidate.name not in [p.candidate.name for p, _, _ in front[:1]]
    for p in ring8.priced:  # nothing left out is better on both counts
        lat = p.seconds(4 * KiB)
        if lat is None or p in [f[0] for f in front]:
            continue
        assert any(f_lat <= lat for _, f_lat, _ in front)


class BrokenFamily:
    """all_reduce_bidirectional without its all-gather phase: twice as fast on the model,
    and wrong (each chip ends with only its own block reduced)."""
    FAMILY = "broken"
    WHAT = "a test's broken candidate"

    @staticmethod
    def generate(kind, topo):
        text = with_params(library_text("all_reduce_bidirectional"), "broken_fast_psum", {})
        text = text.replace('grid: {k: "(2 * N - 2) * chunks + min(chunks - 1, 1)"}',
                            'grid: {k: "(N - 1) * chunks + min(chunks - 1, 1)"}')
        assert "(N - 1) * chunks + min" in text
        yield Candidate("broken", "broken_fast_psum", text, "broken", {})


def test_a_candidate_that_fails_check_is_dropped_and_the_next_taken():
    from ringc.synth.families import bidirectional_ring
    r = synth("psum", "ring:8", [256 * MiB], compile=False, families=[BrokenFamily, bidirectional_ring])
    broken = next(p for p in r.priced if p.candidate.name == "broken_fast_psum")
    choice = r.choices[0]
    # It was the fastest on the model, so it was tried first, refused, and passed over.
    assert broken.points[256 * MiB][1] > max(p.points[256 * MiB][1] for p in r.priced
                                             if p is not broken and 256 * MiB in p.points)
    assert broken.verdict.startswith("refused by ringc check")
    assert [n for n, _ in choice.dropped] == ["broken_fast_psum"]
    assert choice.winner.candidate.family == "bidirectional_ring" and choice.winner.verdict == ""
    assert "broken_fast_psum" not in [p.candidate.name for p, _, _ in r.frontier]


class SplitFamily:
    """The 3-D rotated all-gather without its exact split: six parts of rows // 6 rows, so
    rows that 6 does not divide leave the last rows ungathered. Its template rows (48)
    divide."""
    @staticmethod
    def generate(kind, topo):
        from ringc.synth.families import rotated_bidirectional
        text = rotated_bidirectional.all_gather(3)
        exact = "shape: [S * (rows // q) // 6]"
        assert exact in text
        yield Candidate("split", "split_all_gather", text.replace(exact, "shape: [S]"), "split", {})


def test_a_winner_is_also_checked_with_the_params_sized_for_each_size():
    """256 MiB on torus:2x2x2 sizes rows to 65536, which 6 does not divide: the template
    checks at 48 rows, the sized schedule misses 4 rows of every shard."""
    from ringc.synth.families import direct
    r = synth("all_gather", "torus:2x2x2", [64 * KiB, 256 * MiB], compile=False, families=[SplitFamily, direct])
    split = next(p for p in r.priced if p.candidate.name == "split_all_gather")
    small, big = r.choices
    assert split.points[256 * MiB][5]["rows"] % 6 and split.verdict == ""
    assert big.winner.candidate.family == "direct"
    ((name, why),) = big.dropped
    assert name == "split_all_gather" and "refused by ringc check at rows=" in why and "wrong_result" in why
    assert split.sized_verdicts[256 * MiB] == why and not split.usable(256 * MiB)
    doc = next(c for c in r.to_json()["candidates"] if c["name"] == "split_all_gather")
    assert doc["sized_checks"][str(256 * MiB)] == why
    if small.winner is split:   # where its sized rows divide, it stays a winner, checked with them
        assert split.sized_verdicts[64 * KiB] == "" and "checked with these params too" in r.yaml_of(split)


@pytest.mark.parametrize("topology", ["ring:5", "ring:8", "torus:4x4", "torus:2x3", "torus:2x2", "v5p:2x2x2",
                                      "torus:3x2x4"])
@pytest.mark.parametrize("family", ["direct", "per_axis_direct", "rotated_bidirectional", "recursive_doubling"])
@pytest.mark.parametrize("kind", ["all_gather", "psum"])
def test_the_generated_families_check(kind, family, topology):
    """The families the library lacks, checked wherever they generate a candidate, on
    slices whose axes differ (a row-major offset or a max over the axes would show)."""
    import importlib
    from ringc import topology as T
    module = importlib.import_module(f"ringc.synth.families.{family}")
    for cand in module.generate(kind, T.parse(topology)):
        sched = load_text(cand.text, cand.name)
        report = check(sched, topology=topology)
        assert report.ok, [f.message for f in report.findings]


def test_the_per_axis_direct_psum_hangs_without_its_last_grid_point():
    """The mistake made while writing it: the final wait for every peer's `done` at the
    first step of the last phase, before the last round's peers could signal."""
    from ringc.synth.families.per_axis_direct import psum
    text = psum(2).replace("step == max(N_x, N_y) - 2", "step == 0")
    report = check(load_text(text, "early_done_wait"), topology="torus:4x4")
    assert not report.ok and "hang" in [f.kind for f in report.findings if f.severity == "error"]


@pytest.mark.parametrize("path", sorted((REPO / "schedules" / "synth").glob("*.yaml")), ids=lambda p: p.name)
def test_the_synthesized_library_checks(path):
    sched = ringc.load(path)
    spec = {1: "ring:8", 2: "torus:4x4", 3: "torus:2x2x2"}[len(sched.axes)]
    head = path.read_text().split("\n", 1)[0]
    assert head.startswith("# ringc synth ")
    if any(name.startswith("only_") for name in sched.semaphores):
        # a paced schedule, unrolled for its slice (the guard refuses another): checked there
        spec = head.split("--topology ")[1].split()[0]
    assert check(sched, topology=spec).ok


def test_cli_says_a_relative_output_as_given(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["synth", "all_gather", "--topology", "ring:4", "--bytes", "64KiB", "--no-compile",
                 "-o", "ag.yaml"]) == 0
    assert "wrote ag.yaml" in capsys.readouterr().err.splitlines()
    assert (tmp_path / "ag.yaml").is_file()


def test_cli_text_json_and_output(tmp_path, capsys):
    out = tmp_path / "ag.yaml"
    assert main(["synth", "all_gather", "--topology", "torus:4x4", "--bytes", "64KiB", "--no-compile",
                 "-o", str(out)]) == 0
    captured = capsys.readouterr()
    text = captured.out
    assert "ringc synth all_gather on torus:4x4 (16 chips, v5e)" in text and "frontier" in text
    assert f"wrote {out}" in captured.err  # an absolute -o, as given
    assert check(ringc.load(out), topology="torus:4x4").ok
    assert main(["synth", "all_reduce", "--topology", "ring:4", "--bytes", "1MiB", "--no-compile",
                 "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["command"] == "synth" and doc["ok"]
    (report,) = doc["reports"]
    assert report["collective"] == "psum" and report["choices"][0]["winner"]


@pytest.mark.parametrize("argv, says", [
    (["psum_scater", "--topology", "ring:8", "--bytes", "1MiB"], "did you mean psum_scatter"),
    (["allgathr", "--topology", "ring:8", "--bytes", "1MiB"], "did you mean all"),
    (["ppermute", "--topology", "ring:8", "--bytes", "1MiB"], "searches psum, all_gather, psum_scatter"),
    (["psum", "--topology", "ring:x", "--bytes", "1MiB"], "bad topology"),
    (["psum", "--topology", "ring", "--bytes", "1MiB"], "needs a sized topology"),
    (["psum", "--topology", "ring:8", "--bytes", "1XB"], "expected a size"),
    (["psum", "--topology", "ring:8", "--bytes", "0"], "at least 1 byte"),
    (["psum", "--topology", "v5e:1x1", "--bytes", "1MiB"], "is one chip: a collective over it moves no data"),
])
def test_bad_input_is_one_clear_message_and_exit_2(argv, says, capsys):
    try:
        rc = main(["synth", *argv, "--no-compile"])
    except SystemExit as e:  # argparse's own refusal of an argument (a size), usage and one error line
        rc = e.code
    assert rc == 2
    err = capsys.readouterr().err
    assert says in err
    assert "Traceback" not in err


@pytest.mark.parametrize("topology", ["torus:4x4", "torus:2x3", "torus:3x4"])
def test_the_2d_reduce_scatter_cut_from_the_all_reduce_checks(topology):
    """per_axis's psum_scatter: all_reduce_2d_bidirectional stopped after its reduce-scatters
    (a text transformation of the library file, so a change there shows here)."""
    from ringc import topology as T
    from ringc.synth.families import per_axis
    cands = list(per_axis.generate("psum_scatter", T.parse(topology)))
    assert [c.params["chunks"] for c in cands] == [1, 2, 4]
    for cand in cands:
        sched = load_text(cand.text, cand.name)
        assert sched.collective.kind == "psum_scatter" and "a_gx_r" not in cand.text
        report = check(sched, topology=topology)
        assert report.ok, [f.message for f in report.findings]


def test_the_search_prices_under_its_own_fluid_network_budget(monkeypatch):
    """A candidate with many transfers in flight at once costs the square of them to time
    (the one-shot to every chip of v5p:16x16x16 at 256 MiB: over a minute). The search
    prices each estimate under `SEARCH_TIMED_FLOWS` re-ratings (unless the user sets the
    `timed_flows` limit) and lists one past it as not priced there, with the limit's
    message; the other sizes and candidates are priced as before."""
    from ringc import limits
    from ringc.synth import search
    from ringc.synth.families import direct
    monkeypatch.setattr(search, "SEARCH_TIMED_FLOWS", 1_000)  # the one-shot on v5p:4x4x4 re-rates ~4,000
    r = synth("all_gather", "v5p:4x4x4", [256 * MiB], compile=False, verify=False, families=[direct])
    one_shot = next(p for p in r.priced if p.candidate.name == "all_gather_direct_3d")
    assert 256 * MiB not in one_shot.points
    assert "`timed_flows` of 1,000" in one_shot.problems[256 * MiB]
    assert 4 * KiB in one_shot.points or 4 * KiB in one_shot.problems  # the latency probe is tried on its own
    # A limit the user sets is the search's budget.
    with limits.overridden({"timed_flows": 1_000_000}):
        r = synth("all_gather", "v5p:4x4x4", [256 * MiB], compile=False, verify=False, families=[direct])
    assert 256 * MiB in next(p for p in r.priced if p.candidate.name == "all_gather_direct_3d").points


def test_a_winner_the_compiler_refuses_for_scoped_vmem_is_compiled_with_the_limit_raised():
    """The one-shot-per-axis reduce-scatter at 16 MiB on v5p:4x4x4 stages its arrivals in
    VMEM: more than libtpu's default scoped VMEM, less than the chip's. Compiled again with
    `vmem_limit_mib` (the core's 64 MiB) it passes, and the winner keeps that line."""
    pytest.importorskip("libtpu")
    from ringc import topology as T
    from ringc.compile import compile_for
    from ringc.cost.model import hardware
    from ringc.cost.sizing import fit_volume
    from ringc.cost.tune import compile_target
    from ringc.synth import search
    from ringc.synth.families import per_axis_direct
    cand = next(per_axis_direct.generate("psum_scatter", T.parse("v5p:4x4x4")))
    sched = load_text(cand.text, cand.name)
    hw = hardware("v5p:4x4x4", sched)
    plain = compile_for(fit_volume(sched, hw.placement.sizes, 16 * MiB), compile_target(hw, sched))
    assert not plain.ok and plain.error.kind == "vmem_overflow"
    p = search.Priced(cand, sched, hw=hw)
    search._compile(p, hw, 16 * MiB, "")
    assert p.verdict is None and p.compiled.endswith("with vmem_limit_mib: 64 (its default scoped VMEM refused it)")
    assert "\nvmem_limit_mib: 64 " in p.candidate.text and p.schedule.vmem_limit_mib == 64
    assert check(p.schedule, topology="torus:2x2x2").ok


# -- slices without wraparound ------------------------------------------------------------

@pytest.mark.parametrize("family, kind, topology", [
    ("bidirectional_ring", "psum", "line:8"), ("per_axis", "psum", "v5e:2x4"),
    ("per_axis", "psum_scatter", "v5e:4x4"), ("vmem_windows", "psum_scatter", "v5e:2x4"),
    ("vmem_windows", "psum", "v5p:2x2x4"), ("rotated_bidirectional", "all_gather", "v5e:4x4"),
    ("paced_parts", "all_gather", "v5e:2x4"), ("recursive_doubling", "psum", "v5e:4x4")])
def test_the_ring_families_generate_and_check_on_slices_without_wraparound(family, kind, topology):
    """A v5e or v6e axis wraps only when it spans the pod, so most slices users hold have no
    wraparound: the ring families are generated there too (the wrap-around step goes back
    over the other direction's links) and their candidates are proved there."""
    import importlib
    from ringc import topology as T
    topo = T.parse(topology)
    assert not any(w for w, n in zip(topo.wrap, topo.shape) if n > 2)
    cands = list(importlib.import_module(f"ringc.synth.families.{family}").generate(kind, topo))
    assert cands, f"{family} generates no {kind} on {topology}"
    report = check(load_text(cands[0].text, cands[0].name), topology=topology)
    assert report.ok, [f.message for f in report.findings if f.severity == "error"]


def test_a_slice_without_wraparound_gets_a_verified_reduce_scatter_at_256mib():
    """On v5e:2x2 (and v5e:4x4, v6e:4x4, ...) `ringc synth psum_scatter` at 256 MiB said
    "none verifies": no ring family was generated without wraparound, and the one-shot and
    halving families' VMEM buffers do not fit. The VMEM windows now take it within 5%."""
    from ringc.cost import estimate, hardware
    (choice,) = synth("psum_scatter", "v5e:2x2", [256 * MiB], compile=False).choices
    assert choice.winner is not None and choice.winner.candidate.family == "vmem_windows"
    assert choice.winner.points[256 * MiB][1] >= 0.95
    assert choice.winner.verified.startswith("ringc check ok on v5e:2x2")
    # and the rotated all-gather on v5e:4x4 (axes of 4, none wrapping) within 5% of its bound
    from ringc.synth.families import rotated_bidirectional
    from ringc import topology as T
    cand = next(rotated_bidirectional.generate("all_gather", T.parse("v5e:4x4")))
    sched = load_text(cand.text, cand.name)
    assert estimate(sched, hardware("v5e:4x4", sched), nbytes=256 * MiB).efficiency >= 0.95


def test_none_verifies_says_which_limit_would_price_the_candidates():
    """A size with no winner because ringc's own limits left its candidates unpriced says
    the `--limit` that would price them (on v5e:8x16 at 256 MiB every chip is timed: the
    slice has no wraparound, so no symmetry), not only the candidates' reasons."""
    from ringc import limits
    with limits.overridden({"timed_events": 2000}):
        r = synth("psum_scatter", "v5e:2x2", [256 * MiB], compile=False)
    assert r.choices[0].winner is None
    text = r.to_text()
    assert "over the limit `timed_events` of 2,000" in text
    hint = [ln for ln in text.splitlines() if ln.startswith("  none verifies at 256 MiB: --limit timed_events=")]
    assert len(hint) == 1, text
    need = int(hint[0].split("timed_events=")[1].split()[0])
    with limits.overridden({"timed_events": need}):
        assert synth("psum_scatter", "v5e:2x2", [256 * MiB], compile=False).choices[0].winner is not None


def test_a_slice_with_an_axis_of_one_chip_is_synthesized_on_its_other_axes():
    """v5p:2x2x1 (the v5p-8 slice) is a 2x2 grid: the 3-D families, whose axis of one chip
    has no step to send on, found nothing at 256 MiB ("none verifies" for psum and
    psum_scatter). The families now generate for the other axes, and the winner is checked
    on the slice along them (said in its header) within 5% of the bound."""
    from ringc import topology as T
    from ringc.synth.search import squeezed
    gen, along = squeezed(T.parse("v5p:2x1x2"))
    assert (gen.shape, gen.generation, along) == ((2, 2), "v5p", "x,z")
    assert squeezed(T.parse("v5p:4x4x4"))[1] is None
    r = synth("psum_scatter", "v5p:2x1x2", [256 * MiB], compile=False)
    w = r.choices[0].winner
    assert w is not None and w.points[256 * MiB][1] >= 0.95 and len(w.schedule.axes) == 2
    assert w.verified.startswith("ringc check ok on v5p:2x1x2 --along x,z")
    assert "# Checked: ringc check ok on v5p:2x1x2 --along x,z" in r.yaml_of(w)
    with pytest.raises(ValueError, match="v5e:1x1 is one chip: a collective over it moves no data"):
        synth("psum", "v5e:1x1", [MiB], compile=False)


@pytest.mark.parametrize("topology", ["v5e:2x2", "v5e:2x4", "v5e:4x4", "v5e:4x8", "v5e:8x8", "v5e:8x16",
                                      "v5e:16x16", "v6e:4x4", "v4:2x2x1", "v4:2x2x4", "v5p:2x2x1", "v5p:2x1x2",
                                      "v5p:2x2x2", "v5p:2x4x4", "v5p:4x4x4", "v5p:4x4x8"])
def test_every_family_generates_loadable_candidates_on_the_slices_users_hold(topology):
    """Every family, for every collective, on the slices Cloud TPU sells (with and without
    wraparound, with an axis of one chip): generating raises nothing and every candidate is a
    schedule the loader takes, whose axes bind to the slice as the search binds them."""
    from ringc import topology as T
    from ringc.cost import hardware
    from ringc.synth.families import collectives, families
    from ringc.synth.search import squeezed
    topo = T.parse(topology)
    gen, along = squeezed(topo)
    count = 0
    for kind in collectives():
        for fam in families():
            for cand in fam.generate(kind, gen):
                sched = load_text(cand.text, cand.name)
                assert hardware(topology, sched, along=along).placement.n == topo.size, cand.name
                count += 1
    assert count >= 8


def test_a_slice_libtpu_does_not_know_is_refused_before_the_search():
    """v5e:3x3 is no v5e slice (hosts hold 2x2 chips): every winner would be dropped by the
    compiler after the whole search. Refused at once, saying --no-compile searches it on the
    model alone, which then works; a ring of 9 compiles for v5e:3x3 too."""
    pytest.importorskip("libtpu")
    for topology in ("v5e:3x3", "ring:9"):
        with pytest.raises(ValueError, match=r"compiled for v5e:3x3.*--no-compile"):
            synth("psum", topology, [MiB])
    res = synth("psum", "v5e:3x3", [MiB], compile=False)
    assert res.ok and res.compile_note == "--no-compile"
