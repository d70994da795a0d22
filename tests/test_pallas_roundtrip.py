"""Round trip: every library schedule and every case of tests/broken/ and tests/mutants/,
emitted with `ringc emit` and checked as Pallas (`ringc check kernel.py`), gets the same
verdict and the same finding kinds as its YAML."""

from pathlib import Path

import pytest
from conftest import without_runtime_data
import yaml

import ringc
from ringc.pallas import check_module

TESTS = Path(__file__).parent
LIBRARY = without_runtime_data(sorted((TESTS.parent / "schedules").glob("*.yaml")))
# Cases with runtime data (`data:` in the manifest) are checked per sample in tests/test_data.py.
CASES = [(d, name, entry) for d in ("broken", "mutants")
         for name, entry in sorted(yaml.safe_load((TESTS / d / "expected.yaml").read_text()).items())
         if "data" not in entry]


def _emitted(tmp_path: Path, path: Path) -> str:
    out = tmp_path / (path.stem + ".py")
    out.write_text(ringc.emit(ringc.load(str(path))))
    return str(out)


def _agree(yaml_report, pallas_report) -> None:
    assert pallas_report.ok == yaml_report.ok, pallas_report.to_text()
    assert pallas_report.kinds() == yaml_report.kinds(), (
        f"YAML: {sorted(yaml_report.kinds())}, Pallas: {sorted(pallas_report.kinds())}\n{pallas_report.to_text()}")


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: p.stem)
@pytest.mark.parametrize("n", [4, pytest.param(8, marks=pytest.mark.slow)])
def test_library_schedule_round_trips(tmp_path, path, n):
    sched = ringc.load(str(path))
    module = _emitted(tmp_path, path)
    if len(sched.axes) == 1:
        want, got = ringc.check(sched, n), check_module(module, n)
    else:
        topo = f"torus:2x{n // 2}" if len(sched.axes) == 2 else f"torus:2x2x{max(2, n // 4)}"
        want, got = ringc.check(sched, topology=topo), check_module(module, topology=topo)
    assert want.ok
    _agree(want, got)


@pytest.mark.parametrize("corpus,name,entry", CASES, ids=[f"{d}/{n}" for d, n, _ in CASES])
def test_broken_case_round_trips(tmp_path, corpus, name, entry):
    path = TESTS / corpus / name
    n, k = entry.get("devices", 4), entry.get("invocations", 1)
    topo, along = entry.get("topology", "ring"), entry.get("along")
    want = ringc.check(ringc.load(str(path)), n, invocations=k, topology=topo, along=along)
    got = check_module(_emitted(tmp_path, path), n, invocations=k, topology=None if topo == "ring" else topo,
                       along=along)
    assert not want.ok
    _agree(want, got)


def test_a_transposed_operand_is_folded_into_the_dimension_numbers(tmp_path):
    """The emitted `lax.dot_general(a, b, (((1,), (1,)), ...))` written by hand as
    `jnp.dot(a, b.T)`: the importer folds the 2-D transpose into the dot's dimension
    numbers, so the kernel still computes all_gather_matmul_t."""
    import re
    path = TESTS.parent / "schedules" / "all_gather_matmul_t.yaml"
    text = ringc.emit(ringc.load(str(path)))
    by_hand, count = re.subn(r"lax\.dot_general\(\s*a\[\.\.\.\], b\[\.\.\.\], \(\(\(1,\), \(1,\)\), \(\(\), \(\)\)\),",
                             "jnp.dot(a[...], b[...].T,", text)
    assert count == 2  # one per pipeline (step 0 reads x, later steps the scratch)
    module = tmp_path / "by_hand.py"
    module.write_text(by_hand)
    report = check_module(str(module), 2)
    assert report.ok, report.to_text()


@pytest.mark.parametrize("values, ok", [(1, True), (0, False)], ids=["values", "keys_as_values"])
def test_a_chained_dot_in_registers_is_a_chained_product(tmp_path, values, ok):
    """ring_attention's two matmuls written by hand as one expression, the scores never
    stored: `out += jnp.dot(lax.dot_general(q, k, ...), v)`. The importer stores the inner
    dot in a value register of its own, so the outer product's left factor is the inner
    product and the kernel still computes ring attention; with the keys as values it is
    a wrong result, not an opaque one."""
    text = ringc.emit(ringc.load(str(TESTS.parent / "schedules" / "ring_attention.yaml")))
    scores = ("lax.dot_general(\n        q[...], kv[working, 0], (((1,), (1,)), ((), ())), "
              "preferred_element_type=jnp.float32\n    )")
    old = (f"scores[...] = {scores}\n    # line 76: matmul out += scores @ kv[working, 1]\n"
           "    out[...] = (out[...] + jnp.dot(\n        scores[...], kv[working, 1], ")
    assert text.count(old) == 1
    by_hand = text.replace(old, f"out[...] = (out[...] + jnp.dot(\n        {scores}, kv[working, {values}], ")
    module = tmp_path / "by_hand.py"
    module.write_text(by_hand)
    report = check_module(str(module), 3)
    assert report.ok == ok, report.to_text()
    if not ok:
        assert report.kinds() == {"wrong_result"} and "sum(t in" in report.to_text()
