"""Fused compute: matmul, cast and nested pipelines in the IR, the verifier and the emitted
kernels.

- Bad input names the file, the line and a fix, statically (names, memory spaces, what a
  pipeline body may do) and when unrolled (shapes that do not tile into blocks).
- The symbolic data flow: a matmul blocked over k adds up to the unblocked product.
- The matmul library schedules in interpret mode for N = 2..8 and several shapes against
  the jnp/lax reference, float32 tight and bfloat16 within the stated tolerance.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_loader import line_of

import ringc
from ringc.ir import ScheduleError, load_text
from ringc.run import run_schedule
from ringc.verify.events import Region
from ringc.collectives import KDIM, PRODUCT, Piece
from ringc.verify.semantics import Memory, canonical_value

REPO = Path(__file__).resolve().parent.parent
FILE = "mine.yaml"


def library(stem: str) -> str:
    return (REPO / "schedules" / f"{stem}.yaml").read_text()


AG = library("all_gather_matmul")
RS = library("matmul_reduce_scatter")
PIPELINED = library("reduce_scatter_pipelined")


def mutate(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
    return text.replace(old, new)


def load_error(text: str) -> ScheduleError:
    with pytest.raises(ScheduleError) as info:
        load_text(text, FILE)
    return info.value


def check_error(text: str, n: int = 4) -> ScheduleError:
    sched = load_text(text, FILE)
    with pytest.raises(ScheduleError) as info:
        ringc.check(sched, n)
    return info.value


def assert_located(err: ScheduleError, line: int) -> None:
    assert err.file == FILE and err.line == line, f"reported line {err.line}, expected {line}: {err}"
    assert err.fix, f"no fix in: {err}"


# ------------------------------------------------------------------ static errors


def test_matmul_on_hbm_is_rejected():
    text = mutate(RS, "      - matmul: acc\n        a: x_block\n", "      - matmul: acc\n        a: \"x[0, :, 0:bk]\"\n")
    err = load_error(text)
    assert "computes on VMEM" in err.message and "`x`" in err.message
    assert_located(err, line_of(text, "- matmul: acc"))


def test_block_used_outside_its_pipeline():
    text = mutate(AG, "      - wait: send_own\n", "      - wait: send_own\n      - zero: o\n")
    err = load_error(text)
    assert "block of the pipeline" in err.message and "`o`" in err.message
    assert_located(err, line_of(text, "- zero: o"))


def test_dma_ops_are_not_allowed_in_a_pipeline_body():
    text = mutate(PIPELINED, "        do: &add\n", "        do: &add\n          - {signal: left_capacity, to: me}\n")
    err = load_error(text)
    assert "`signal` cannot appear in a pipeline body" in err.message
    assert "before or after the pipeline" in err.fix
    assert_located(err, line_of(text, "{signal: left_capacity, to: me}"))


def test_pipeline_must_stream_hbm():
    text = mutate(RS, "  acc:      {kind: vmem_scratch, shape: [rows, bn], dtype: float32}\n",
                  "  acc:      {kind: vmem_scratch, shape: [rows, bn], dtype: float32}\n"
                  "  spare:    {kind: vmem_scratch, shape: [rows, cols]}\n")
    text = mutate(text, "  - when: step == N + 1 and first\n",
                  "  - pipeline: {i: 2}\n    inputs:\n      blk: {ref: spare, block: [8, cols], index: [i, 0]}\n"
                  "    do:\n      - zero: acc\n  - when: step == N + 1 and first\n")
    err = load_error(text)
    assert "lives in VMEM" in err.message and "`spare`" in err.message
    assert_located(err, line_of(text, "blk: {ref: spare"))


def test_input_blocks_are_read_only():
    text = mutate(AG, "              - cast: o\n                src: acc\n",
                  "              - cast: a\n                src: acc\n")
    err = load_error(text)
    assert "input block" in err.message and "cannot be written" in err.message
    assert "outputs" in err.fix


def test_block_rank_must_match_the_region():
    text = mutate(AG, "          a: {ref: x, block: [bm, bk], index: [i, k]}",
                  "          a: {ref: x, block: [bm], index: [i]}")
    err = load_error(text)
    assert "has 1 dimensions but `x` has 2" in err.message
    assert_located(err, line_of(text, "a: {ref: x, block: [bm]"))


def test_one_name_cannot_be_input_and_output_block():
    text = mutate(PIPELINED, "          acc_out: {ref: \"scratch[working, 0:half]\"",
                  "          acc_in: {ref: \"scratch[working, 0:half]\"")
    err = load_error(text)
    assert "both an input and an output block" in err.message and "acc_in" in err.message


def test_pipeline_names_must_not_shadow_schedule_names():
    text = mutate(AG, "      - pipeline: &blocks {i: rows // bm,", "      - pipeline: &blocks {block: rows // bm,")
    err = load_error(text)
    assert "`block` names both a let and a pipeline grid index" in err.message


def test_assign_between_dtypes_suggests_cast():
    text = mutate(AG, "              - cast: o\n", "              - assign: o\n")
    text = mutate(text, "\nparams:", "\ndtype: bfloat16\nparams:")  # acc stays float32
    err = load_error(text)
    assert "element types differ" in err.message and "cast" in err.fix
    assert_located(err, line_of(text, "- assign: o"))


def test_matmul_collective_needs_its_right_hand_side():
    text = mutate(AG, "collective: {kind: all_gather_matmul, input: x, rhs: y}",
                  "collective: {kind: all_gather_matmul, input: x, rhs: z}")
    err = load_error(text)
    assert "collective.rhs `z`" in err.message and "y" in err.fix
    text = mutate(library("all_gather_ring"), "collective: all_gather", "collective: {kind: all_gather, rhs: x}")
    assert "applies to matmul collectives" in load_error(text).message


def test_misspelt_block_spec_key_is_named():
    text = mutate(AG, "a: {ref: x, block: [bm, bk], index: [i, k]}", "a: {ref: x, blok: [bm, bk], index: [i, k]}")
    err = load_error(text)
    assert "unknown key `blok`" in err.message and err.fix == "did you mean `block`?"
    assert_located(err, line_of(text, "blok:"))


def test_misspelt_matmul_is_not_taken_for_accumulate():
    text = mutate(AG, "          - matmul: acc\n", "          - matmull: acc\n")
    err = load_error(text)
    assert "unknown operation" in err.message and err.fix == "did you mean `matmul`?"
    assert_located(err, line_of(text, "- matmull: acc"))


def test_accumulate_flag_belongs_to_the_matmul():
    # `accumulate: true` under `matmul:` is the matmul's flag, not a second operation
    sched = load_text(AG, FILE)
    pipeline = sched.body[2].do[0]
    assert pipeline.do[1].accumulate is True


# ------------------------------------------------------------------ N-dependent errors


def test_rows_that_do_not_split_into_row_blocks():
    """M = N * rows not divisible by N * bm: named with the shape, the block and the fix."""
    err = check_error(mutate(AG, "params: {rows: 16,", "params: {rows: 20,"))
    assert "pipeline grid `i: rows // bm`: the extent `rows` = 20 does not split into blocks of `bm` = 8" in err.message
    assert "(the block size of `a` [bm, bk], `o` [bm, bn])" in err.message
    assert "make `rows` a multiple of `bm` (e.g. 24)" in err.fix
    assert err.line == line_of(AG, "- pipeline: &blocks")


def test_block_that_does_not_tile_its_region():
    text = mutate(AG, "          a: {ref: x, block: [bm, bk], index: [i, k]}",
                  "          a: {ref: x, block: [bm, 96], index: [i, k]}")
    err = check_error(text)
    assert "`x` has shape [16, 256], which blocks of [8, 96] do not tile (256 is not a multiple of 96)" in err.message
    assert "divide" in err.fix
    assert_located(err, line_of(text, "a: {ref: x, block: [bm, 96]"))


def test_block_index_outside_the_region():
    text = mutate(AG, "          a: {ref: x, block: [bm, bk], index: [i, k]}",
                  "          a: {ref: x, block: [bm, bk], index: [i + 1, k]}")
    err = check_error(text)
    assert "block index [2, 0]" in err.message and "outside the [2, 2] blocks" in err.message
    assert_located(err, line_of(text, "index: [i + 1, k]"))


def test_matmul_contraction_mismatch():
    text = mutate(RS, "  y_block:  {kind: vmem_scratch, shape: [bk, bn]}",
                  "  y_block:  {kind: vmem_scratch, shape: [bk, bn]}\n  y_wide:   {kind: vmem_scratch, shape: [2 * bk, bn]}")
    text = mutate(text, "        b: y_block\n", "        b: y_wide\n")
    err = check_error(text)
    assert "a's columns (128) must equal b's rows (256)" in err.message
    assert_located(err, line_of(text, "- matmul: acc"))


# ------------------------------------------------------------------ symbolic products


def _region(name: str, box, itemsize: int = 4) -> Region:
    return Region(name, 0, tuple(box), tuple(range(len(box))), itemsize)


def test_blocked_matmul_adds_up_to_the_whole_product():
    mem = Memory({"a": (8, 256), "b": (256, 128), "acc": (8, 128)})
    mem.init_input(0, "a")
    mem.init_input(0, "b")
    acc = _region("acc", [(0, 8), (0, 128)])
    mem.zero(acc)
    for k0 in (128, 0):  # any order of the k blocks
        mem.matmul(acc, _region("a", [(0, 8), (k0, k0 + 128)]), _region("b", [(k0, k0 + 128), (0, 128)]), True)
    (got,) = mem.read(acc)
    want = ((PRODUCT, ("a", 0, ((0, 0), (KDIM, 0))), ("b", 0, ((KDIM, 0), (1, 0))), 0, 256),)
    assert got.value == canonical_value(want, got.box)


def test_a_k_block_counted_twice_or_missing_is_visible():
    mem = Memory({"a": (8, 256), "b": (256, 128), "acc": (8, 128)})
    mem.init_input(0, "a")
    mem.init_input(0, "b")
    acc = _region("acc", [(0, 8), (0, 128)])
    mem.zero(acc)
    for k0 in (0, 0):
        mem.matmul(acc, _region("a", [(0, 8), (k0, k0 + 128)]), _region("b", [(k0, k0 + 128), (0, 128)]), True)
    (got,) = mem.read(acc)
    assert [t[3:] for t in got.value] == [(0, 128), (0, 128)]  # never merged into 0:256


def test_products_follow_copies_into_other_buffers():
    mem = Memory({"a": (8, 16), "b": (16, 4), "acc": (8, 4), "out": (2, 8, 4)})
    mem.init_input(0, "a")
    mem.init_input(0, "b")
    acc = _region("acc", [(0, 8), (0, 4)])
    mem.matmul(acc, _region("a", [(0, 8), (0, 16)]), _region("b", [(0, 16), (0, 4)]), False)
    dst = Region("out", 0, ((1, 2), (0, 8), (0, 4)), (1, 2), 4)
    mem.copy(acc, dst)
    (got,) = [p for p in mem.read(_region("out", [(0, 2), (0, 8), (0, 4)])) if p.box[0] == (1, 2)]
    want = Piece(got.box, ((PRODUCT, ("a", 0, ((1, 0), (KDIM, 0))), ("b", 0, ((KDIM, 0), (2, 0))), 0, 16),))
    assert got.value == canonical_value(want.value, got.box)


def test_contraction_blocks_of_one_index_still_add_up():
    """A (bm, 1) block in VMEM keeps no trace of which k it holds; the comparison falls back
    to one term per k and still proves the product (and still rejects a lost k block)."""
    unit = {"depth": 3, "bk": 1}
    assert ringc.check(ringc.load(REPO / "schedules" / "all_gather_matmul.yaml", unit), 3).ok
    broken = ringc.load(REPO / "tests" / "broken" / "all_gather_matmul_no_accumulate.yaml", unit)
    assert ringc.check(broken, 3).kinds() == {"wrong_result"}


# ------------------------------------------------------------------ interpret mode

def _with(text: str, dtype: str | None = None) -> ringc.Schedule:
    if dtype:
        text = mutate(text, "\nparams:", f"\ndtype: {dtype}\nparams:")
    return load_text(text, "schedule.yaml")


def assert_matches(result) -> None:
    assert result.races_found is False, result
    assert result.ok and result.max_abs_err <= result.tolerance, result


# (params, dtype) per schedule: several shapes; a bfloat16 case each.
SHAPES = {
    "all_gather_matmul": [{}, {"rows": 8, "cols": 256, "depth": 128}, {"rows": 32, "bm": 16, "bn": 64, "cols": 64}],
    "all_gather_matmul_bidirectional": [{}, {"rows": 32, "cols": 256, "depth": 128}, {"rows": 32, "bm": 16}],
    "matmul_reduce_scatter": [{}, {"rows": 32, "cols": 128, "depth": 384}, {"rows": 8, "bn": 256}],
    "reduce_scatter_pipelined": [{}, {"rows": 32, "cols": 128}, {"rows": 64, "bm": 16, "bn": 256}],
}


@settings(max_examples=2, deadline=None, database=None)
@given(stem=st.sampled_from(sorted(SHAPES)), n=st.integers(2, 8), shape=st.integers(0, 2))
@example(stem="matmul_reduce_scatter", n=8, shape=1)
@example(stem="all_gather_matmul_bidirectional", n=5, shape=2)
def test_fused_schedules_match_the_reference(stem, n, shape):
    """Property: on any ring size and shape, float32, within 1e-5 per multiply-add."""
    params = SHAPES[stem][shape]
    sched = _with(library(stem))
    assert ringc.check(load_text(library(stem), "s.yaml", params=params), n).ok
    assert_matches(run_schedule(sched, n, params=params, seed=n))


@pytest.mark.parametrize("stem", sorted(SHAPES))
def test_fused_schedules_in_bfloat16(stem):
    """bfloat16 operands and results (float32 accumulators): within one bfloat16 rounding per
    hop plus the reference's own, relative to the largest result (`ringc.run.tolerance`)."""
    assert_matches(run_schedule(_with(library(stem), "bfloat16"), 4, seed=1))


def test_bfloat16_tolerance_still_catches_a_missing_partial_sum():
    text = (REPO / "tests" / "broken" / "matmul_reduce_scatter_no_reduce.yaml").read_text()
    result = run_schedule(_with(text, "bfloat16"), 4, seed=1)
    assert result.races_found is False
    assert not result.ok and result.max_abs_err > 3 * result.tolerance


def test_wrong_k_blocking_fails_at_runtime_too():
    """The interpret-mode run catches what `check` proves wrong (and the race detector stays quiet)."""
    text = (REPO / "tests" / "broken" / "all_gather_matmul_no_accumulate.yaml").read_text()
    result = run_schedule(load_text(text, "b.yaml"), 3)
    assert result.races_found is False
    assert not result.ok and result.max_abs_err > 10 * result.tolerance
