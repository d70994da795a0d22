"""The hand-written Pallas corpus (tests/pallas/, branch pallas-corpus): `ringc check` on
each kernel as written gives the manifest's verdict, exactly its finding kinds, and points
the main finding at its Python line."""

from pathlib import Path

import pytest
import yaml

from ringc.pallas import check_module

CORPUS = Path(__file__).parent / "pallas"
MANIFEST = CORPUS / "manifest.yaml"
ENTRIES = yaml.safe_load(MANIFEST.read_text())["kernels"] if MANIFEST.exists() else []
CASES = [(e, n) for e in ENTRIES for n in e["devices"]]

pytestmark = pytest.mark.skipif(not ENTRIES, reason="tests/pallas/manifest.yaml is not in this tree yet")


@pytest.mark.parametrize("entry,n", CASES, ids=[f"{e['file']}-N{n}" for e, n in CASES])
def test_corpus_kernel(entry, n):
    report = check_module(str(CORPUS / entry["file"]), n, params=entry.get("params") or {})
    errors = {f.kind for f in report.errors()}
    assert report.ok == (entry["verdict"] == "ok"), report.to_text()
    assert errors == set(entry["kinds"]), f"want {sorted(entry['kinds'])}, got {sorted(errors)}\n{report.to_text()}"
    if entry.get("line") is not None:  # some finding names the planted bug's line, in the kernel's file
        main = [f for f in report.errors() if f.event is not None]
        lines = {int(f.event.line) for f in main} | {int(r.line) for f in main for r in f.related}
        assert entry["line"] in lines, f"findings at lines {sorted(lines)}, want {entry['line']}"
        assert all(getattr(f.event.line, "file", "").endswith(entry["file"]) for f in main
                   if int(f.event.line) == entry["line"])
