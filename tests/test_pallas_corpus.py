"""The hand-written Pallas kernel corpus (tests/pallas/, issue 15).

Two things are checked here, independently of ringc's importer:
- the manifest is well-formed: every kernel file is listed, every listed file exists and
  follows the `ringc emit` module convention, kinds are real finding kinds, a `line`
  points at code, and every planted bug is marked in its file;
- every correct (`verdict: ok`) kernel, run in Pallas TPU interpret mode with the race
  detector on, equals its collective's meaning (corpus_common.expected, numpy) and has no
  detected race. N = 2 in the default suite, N = 3 and 4 marked slow.

Whether interpret mode notices the planted bugs is measured by
tests/pallas/measure_interpret.py (subprocesses, minutes), recorded in the manifest's
`interpret_detects`; one case is asserted here so the race check above can fail.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from ringc.verify.findings import KINDS

CORPUS = Path(__file__).parent / "pallas"
MANIFEST = yaml.safe_load((CORPUS / "manifest.yaml").read_text())["kernels"]
HELPERS = {"corpus_common.py", "measure_interpret.py"}
KEYS = {"file", "params", "devices", "verdict", "kinds", "interpret_detects", "note"}
DETECTS = {"race", "hang", "error", "wrong_result", False}
CONVENTION = ("build", "make_inputs", "COLLECTIVE", "AXIS", "IN_SPECS", "OUT_SPECS")
OK = [e for e in MANIFEST if e["verdict"] == "ok"]
EXPENSIVE = {"reduce_scatter_pipelined.py"}  # emit_pipeline: many small DMAs per step


def load(name: str):
    """A corpus module by file name, loaded from its path the way `ringc check` does."""
    if str(CORPUS) not in sys.path:
        sys.path.insert(0, str(CORPUS))
    spec = importlib.util.spec_from_file_location(f"corpus_{Path(name).stem}", CORPUS / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_manifest_lists_every_kernel_file_once():
    files = [e["file"] for e in MANIFEST]
    assert len(files) == len(set(files))
    on_disk = {p.name for p in CORPUS.glob("*.py")} - HELPERS
    assert set(files) == on_disk


@pytest.mark.parametrize("entry", MANIFEST, ids=lambda e: e["file"])
def test_manifest_entry_is_well_formed(entry):
    assert KEYS <= set(entry) <= KEYS | {"line"}, sorted(entry)
    assert entry["verdict"] in ("ok", "failed")
    assert set(entry["kinds"]) <= set(KINDS), set(entry["kinds"]) - set(KINDS)
    assert len(set(entry["kinds"])) == len(entry["kinds"])
    assert bool(entry["kinds"]) == (entry["verdict"] == "failed")
    assert entry["devices"] and all(isinstance(n, int) and n >= 2 for n in entry["devices"])
    assert isinstance(entry["params"], dict)
    assert entry["interpret_detects"] in DETECTS
    assert isinstance(entry["note"], str) and entry["note"].strip()
    source = (CORPUS / entry["file"]).read_text()
    tree = ast.parse(source)
    if "line" in entry:
        code_lines = {n.lineno for n in ast.walk(tree) if isinstance(n, ast.stmt)
                      and not isinstance(n, (ast.FunctionDef, ast.Expr))}
        code_lines |= {n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call)}
        assert entry["line"] in code_lines, f"line {entry['line']} is not a statement or call"
    doc = ast.get_docstring(tree) or ""
    bug_lines = [i for i, text in enumerate(source.splitlines(), 1) if "# BUG" in text]
    if entry["verdict"] == "failed":
        assert "BROKEN:" in doc and bug_lines, "a planted bug is named in the docstring and marked `# BUG`"
    else:
        assert "Correct." in doc and not bug_lines


@pytest.mark.parametrize("entry", MANIFEST, ids=lambda e: e["file"])
def test_kernel_follows_the_emit_convention(entry):
    module = load(entry["file"])
    missing = [name for name in CONVENTION if not hasattr(module, name)]
    assert not missing
    assert module.AXIS == "x" and len(module.IN_SPECS) >= 1


def _run(entry, n):
    import jax
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as interp
    from jax.experimental.pallas import tpu as pltpu

    module = load(entry["file"])
    common = sys.modules["corpus_common"]
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:n]), (common.AXIS,))
    inputs = module.make_inputs(mesh, 0, **entry["params"])
    fn = module.build(mesh, interpret=pltpu.InterpretParams(detect_races=True), **entry["params"])
    try:
        out = np.asarray(jax.block_until_ready(fn(*inputs)))
    except Exception:
        pltpu.reset_tpu_interpret_mode_state()
        raise
    raced = interp.races is not None and interp.races.races_found
    want = common.expected(module.COLLECTIVE, n, *inputs)
    return out, want, raced, common.tolerance(module.COLLECTIVE, n)


def _ok_cases(slow: bool):
    cases = []
    for e in OK:
        for n in e["devices"]:
            expensive = n > 2 or e["file"] in EXPENSIVE
            if expensive == slow:
                marks = [pytest.mark.slow] if slow else []
                cases.append(pytest.param(e, n, id=f"{e['file']}-N{n}", marks=marks))
    return cases


@pytest.mark.parametrize("entry,n", _ok_cases(False) + _ok_cases(True))
def test_correct_kernel_equals_lax_in_interpret_mode(entry, n):
    out, want, raced, tol = _run(entry, n)
    assert out.shape == want.shape
    np.testing.assert_allclose(out, want, atol=tol, rtol=0)
    assert not raced, "interpret mode's race detector fired on a kernel marked ok"


def test_interpret_mode_sees_the_read_before_wait_race():
    """The race check above can fail: the same run on the wait-after-read variant trips
    interpret mode's detector (manifest: interpret_detects race)."""
    entry = next(e for e in MANIFEST if e["file"] == "right_permute_wait_after_read.py")
    assert entry["interpret_detects"] == "race"
    _, _, raced, _ = _run(entry, 2)
    assert raced


def test_the_emit_pipeline_primitive_setting_is_turned_off_and_said(tmp_path):
    """JAX's fusible-matmul tests turn on `jax_use_emit_pipeline_primitive`: emit_pipeline
    then binds one primitive instead of its loop of copies and waits, which ringc refused as
    unknown. It is off while the pipeline is built, the loop is checked, and the verdict says
    so."""
    import shutil
    from ringc.pallas import check_file
    for name in ("reduce_scatter_pipelined.py", "corpus_common.py"):
        shutil.copy(CORPUS / name, tmp_path / name)
    path = tmp_path / "reduce_scatter_pipelined.py"
    text = path.read_text()
    assert "\nregister_cpu_tpu_info()" in text
    path.write_text(text.replace("\nregister_cpu_tpu_info()",
                                 '\nregister_cpu_tpu_info()\njax.config.update("jax_use_emit_pipeline_primitive", True)', 1))
    try:
        (report,) = check_file(str(path), 2)
    finally:
        import jax
        jax.config.update("jax_use_emit_pipeline_primitive", False)
    assert report.ok, report.to_text()
    assert any("jax_use_emit_pipeline_primitive=True -> off" in a for a in report.assumptions), report.assumptions
