"""The DMA model (issue 14, sections 3 and 4): waits for a total of several DMAs, and which
DMA ordering a verdict rests on.

- A DMA semaphore counts bytes from any DMA: one wait for the total of several DMAs is
  accepted (YAML, on the fast and the full path, and a hand-written Pallas kernel); a total
  short by one DMA is a race, never a hang; a wait no combination of the DMAs adds up to is
  a `byte_mismatch` warning that names every DMA on the semaphore and their total.
- `--dma-order in-order` removes exactly the findings labelled as relying on out-of-order
  landing on one link, over the broken corpus, the mutants and JAX's own all-gather; and
  the exhaustive explorer, which implements the in-order model on its own (FIFO per link
  and side), finds exactly the racing ops the analysis reports under each model.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

import ringc
from ringc.testing import samples_for
from ringc.ir import load_text
from ringc.verify.check import check_program, quotient_report, resolve_topology
from ringc.verify.explore import explore
from ringc.verify.order import DMA_ORDERS, sums_to
from ringc.verify.races import OUT_OF_ORDER
from ringc.verify.unroll import unroll

REPO = Path(__file__).resolve().parent.parent
BROKEN = REPO / "tests" / "broken"
MUTANTS = REPO / "tests" / "mutants"
BROKEN_MANIFEST = yaml.safe_load((BROKEN / "expected.yaml").read_text())
MUTANT_MANIFEST = yaml.safe_load((MUTANTS / "expected.yaml").read_text())
TOTAL_WAIT_KERNEL = REPO / "tests" / "pallas_import" / "total_wait.py"

# ppermute_right with the shard sent as two halves on one semaphore pair, both sides waited
# once with a third descriptor `push` over the whole shard: a wait for the total.
TOTAL_WAIT = (REPO / "schedules" / "ppermute_right.yaml").read_text().replace(
    "  push: {src: x, dst: out, to: right, send_sem: send_sem, recv_sem: recv_sem}\n",
    "  push: {src: x, dst: out, to: right, send_sem: send_sem, recv_sem: recv_sem}   # only waited\n"
    '  lo: {src: "x[0:rows // 2]", dst: "out[0:rows // 2]", to: right, send_sem: send_sem, recv_sem: recv_sem}\n'
    '  hi: {src: "x[rows // 2:rows // 2]", dst: "out[rows // 2:rows // 2]", to: right, send_sem: send_sem,'
    " recv_sem: recv_sem}\n").replace("  - start: push\n", "  - start: lo\n  - start: hi\n")


def _total_wait():
    assert "start: push" not in TOTAL_WAIT and "- wait: push" in TOTAL_WAIT
    return load_text(TOTAL_WAIT, "total_wait.yaml")


# ---------------------------------------------------------------- waiting for a total


def test_sums_to_is_subset_sum_with_multiplicities():
    assert sums_to(8192, [4096, 4096]) and sums_to(4096, [4096, 4096]) and sums_to(0, [])
    assert not sums_to(6144, [4096, 4096]) and not sums_to(12288, [4096, 4096])
    assert sums_to(7168, [4096, 2048, 1024]) and not sums_to(3584, [4096, 2048, 1024])
    assert sums_to(3 * 5 + 7 * 2, [3] * 10 + [7] * 2) and not sums_to(7 * 3, [7, 7, 3])
    assert sums_to(2 ** 40, {2 ** 30: 1024}) and not sums_to(2 ** 40 + 1, {2 ** 30: 2048})


@pytest.mark.parametrize("n", [2, 3, 4])
def test_a_wait_for_the_total_of_two_dmas_is_accepted(n):
    sched = _total_wait()
    report = ringc.check(sched, n)
    assert report.ok and not report.findings, report.to_text()
    # The fast path decides it, and the full analysis agrees with no finding at all.
    placement = resolve_topology(sched, n, "ring")
    assert quotient_report(sched, placement, 1) is not None
    in_order = ringc.check(sched, n, dma_order="in-order")
    assert in_order.ok and in_order.assumptions == [f"DMA ordering: {DMA_ORDERS['in-order']}"]
    full = check_program(sched, unroll(sched, n), placement, use_symmetry=False)
    assert full.ok and not full.findings, full.to_text()
    result = explore(unroll(sched, n))
    assert result.complete and not (result.race or result.hang or result.nonzero_exit), result.summary()


def test_a_total_short_by_one_dma_races_and_does_not_hang():
    """The wait takes 2048 of the 4096 bytes that arrive, so it never blocks; when it passes
    either half may still be landing (the other supplies the count), and `hi` is never waited."""
    report = ringc.check(ringc.load(BROKEN / "ppermute_total_wait_short.yaml"), 3)
    assert {f.kind for f in report.errors()} == {"race", "dma_not_waited"}, report.to_text()
    result = explore(report.program)
    assert result.race and not result.hang and result.nonzero_exit


def test_byte_mismatch_is_a_warning_naming_every_dma_and_the_total():
    report = ringc.check(ringc.load(BROKEN / "ppermute_total_wait_no_sum.yaml"), 3)
    [warning] = [f for f in report.findings if f.kind == "byte_mismatch"]
    assert warning.severity == "warning"
    for part in ("expects 4096 bytes, which is no sum of the DMAs on send_sem", "copy `lo` 2048 bytes",
                 "copy `rest` 1024 bytes", "3072 bytes in all"):
        assert part in warning.message, warning.message
    # The class-8 mutant (a half-size descriptor) keeps its warning, besides its errors.
    mutant = ringc.check(ringc.load(MUTANTS / "08_ppermute_byte_mismatch.yaml"), 4)
    assert [f.severity for f in mutant.findings if f.kind == "byte_mismatch"] == ["warning"]


@pytest.mark.parametrize("short, kinds", [(0, set()), (1, {"race", "dma_not_waited"})])
def test_pallas_kernel_waiting_once_for_a_total(short, kinds):
    from ringc.pallas import check_module
    report = check_module(str(TOTAL_WAIT_KERNEL), 3, params={"short": short})
    assert {f.kind for f in report.errors()} == kinds, report.to_text()
    assert not any(f.kind == "byte_mismatch" for f in report.findings)
    if short:  # the first half's races need the second half to land first: labelled
        assert any(f.relies_on == OUT_OF_ORDER for f in report.findings)


# ---------------------------------------------------------------- DMA ordering


def _key(f) -> tuple:
    return (f.kind, f.severity, f.event.line if f.event else None, f.device,
            tuple(sorted(r.line for r in f.related)))


def assert_in_order_removes_exactly_the_labelled(any_report, in_order_report) -> int:
    """The in-order findings are the any-order ones minus those labelled, and say so."""
    labelled = [f for f in any_report.findings if f.relies_on is not None]
    assert all(f.kind == "race" and f.relies_on == OUT_OF_ORDER and "--dma-order in-order" in f.message
               for f in labelled)
    assert not any(f.relies_on for f in in_order_report.findings)
    want = Counter(_key(f) for f in any_report.findings if f.relies_on is None)
    assert Counter(_key(f) for f in in_order_report.findings) == want, (any_report.to_text(), in_order_report.to_text())
    # The DMA ordering is stated first; the other assumptions (a program of several calls,
    # sampled data, no meaning) are the same under both orders.
    assert any_report.assumptions[0] == f"DMA ordering: {DMA_ORDERS['any']}"
    assert in_order_report.assumptions[0] == f"DMA ordering: {DMA_ORDERS['in-order']}"
    assert any_report.assumptions[1:] == in_order_report.assumptions[1:]
    return len(labelled)


# The cases with races labelled as needing out-of-order landing (the others have none). The
# seed's shared receive semaphore is then clean; mutant 10 is not here: its two DMAs sharing
# a semaphore are local copies, on no link, so no ordering is assumed between them.
LABELLED = {"all_gather_shared_recv_sem.yaml", "all_reduce_no_capacity_wait.yaml", "ppermute_total_wait_short.yaml",
            "reduce_scatter_wrong_direction.yaml", "05_all_reduce_run_ahead_no_handshake.yaml"}


def _corpus():
    """Every broken schedule and mutant; the default suite takes the labelled ones and a few
    others (the whole corpus checks twice in about a minute: `slow`)."""
    quick = LABELLED | {"all_gather_no_wait_recv.yaml", "ppermute_total_wait_no_sum.yaml",
                        "10_all_reduce_split_load_one_sem.yaml", "ppermute_no_wait.yaml"}
    for folder, manifest in ((BROKEN, BROKEN_MANIFEST), (MUTANTS, MUTANT_MANIFEST)):
        for name, entry in sorted(manifest.items()):
            marks = [] if name in quick else [pytest.mark.slow]
            yield pytest.param(folder / name, entry, id=name.removesuffix(".yaml"), marks=marks)


def _check(path, entry, dma_order):
    sched = ringc.load(path)
    data = samples_for(entry["data"], sched, entry["devices"])[0] if "data" in entry else None
    return ringc.check(sched, entry["devices"], topology=entry.get("topology", "ring"),
                       along=entry.get("along"), invocations=entry.get("invocations", 1),
                       strict=entry.get("strict", False), dma_order=dma_order, data=data)




@pytest.mark.parametrize("path, entry", list(_corpus()))
def test_in_order_removes_exactly_the_labelled_findings(path, entry):
    labelled = assert_in_order_removes_exactly_the_labelled(_check(path, entry, "any"), _check(path, entry, "in-order"))
    assert (labelled > 0) == (path.name in LABELLED), labelled


def _races(result):
    return {frozenset((a.line, b.line)) for a, b in result.races}


def _race_lines(report):
    return {frozenset((f.event.line, *(r.line for r in f.related[:1]))) for f in report.findings if f.kind == "race"}


@pytest.mark.parametrize("path", [BROKEN / "all_gather_shared_recv_sem.yaml", BROKEN / "ppermute_total_wait_short.yaml",
                                  MUTANTS / "10_all_reduce_split_load_one_sem.yaml", BROKEN / "all_gather_no_wait_recv.yaml",
                                  BROKEN / "ppermute_no_wait.yaml"], ids=lambda p: p.stem)
def test_the_explorer_finds_the_same_racing_ops_in_both_orders(path):
    """The oracle implements FIFO per link on its own (explore.py); at N = 3 it finds exactly
    the racing ops the analysis reports, under each model."""
    sched = ringc.load(path)
    for dma_order in DMA_ORDERS:
        report = ringc.check(sched, 3, dma_order=dma_order)
        result = explore(unroll(sched, 3), max_states=200_000, dma_order=dma_order)
        assert result.complete, result.summary()
        assert _races(result) == _race_lines(report), (dma_order, result.summary(), report.to_text())
        assert result.hang == ("hang" in report.kinds())


@pytest.mark.parametrize("path, n", [(BROKEN / "all_gather_shared_recv_sem.yaml", 3),
                                     (BROKEN / "ppermute_total_wait_short.yaml", 2)], ids=lambda p: getattr(p, "stem", p))
def test_in_order_reduction_finds_what_the_full_search_finds(path, n):
    """The partial-order reduction stays exact with FIFO links (its withholding run holds back
    the DMAs queued behind a withheld last byte)."""
    program = unroll(ringc.load(path), n)
    full = explore(program, max_states=300_000, reduction="none", dma_order="in-order")
    assert full.complete
    for reduction in ("local", "withhold"):
        res = explore(program, reduction=reduction, dma_order="in-order")
        assert ({(a.device, a.index, b.device, b.index) for a, b in res.races}, res.hang, res.final) == \
            ({(a.device, a.index, b.device, b.index) for a, b in full.races}, full.hang, full.final)


def test_cli_dma_order_for_yaml_and_kernels(capsys):
    from ringc import cli
    shared = str(BROKEN / "all_gather_shared_recv_sem.yaml")
    assert cli.main(["check", shared, "--devices", "4", "--format", "json"]) == 1
    out = json.loads(capsys.readouterr().out)["reports"][0]
    assert out["assumptions"] == [f"DMA ordering: {DMA_ORDERS['any']}"]
    assert out["findings"] and all(f["relies_on"] == OUT_OF_ORDER for f in out["findings"])
    assert cli.main(["check", shared, "--devices", "4", "--dma-order", "in-order"]) == 0
    text = capsys.readouterr().out
    assert ": ok (" in text and "assumes: DMA ordering: in order per link" in text
    kernel = str(TOTAL_WAIT_KERNEL)
    assert cli.main(["check", kernel, "--devices", "3", "--param", "short=1", "--dma-order", "in-order"]) == 1
    text = capsys.readouterr().out
    assert "in order per link" in text and "relies on" not in text and "[race]" in text
    with pytest.raises(SystemExit):
        cli.main(["check", shared, "--devices", "4", "--dma-order", "fifo"])
    assert "--dma-order" in capsys.readouterr().err
