"""`ringc check` imports only what checking needs: a checker meant to run on every save
must not pay for jax, matplotlib, numpy, networkx or the cost model (their import
time is most of a small check's wall time; benchmarks/cli_start.py measures it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("jax", "jaxlib", "matplotlib", "numpy", "networkx", "ringc.cost.model", "ringc.codegen", "ringc.run",
         "ringc.show.document")

PROBE = """
import contextlib, io, json, sys
sys.path.insert(0, {repo!r})
import ringc.cli
out = io.StringIO()
codes = []
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
    for argv in {runs!r}:
        codes.append(ringc.cli.main(argv))
print(json.dumps({{"codes": codes, "modules": sorted(sys.modules)}}))
"""


def _probe(runs: list[list[str]]) -> tuple[list[int], list[str]]:
    code = PROBE.format(repo=str(REPO), runs=runs)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result["codes"], result["modules"]


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


def test_check_imports_nothing_heavy():
    codes, modules = _probe([
        ["check", "schedules/ppermute_right.yaml", "--devices", "4"],                      # the quotient
        ["check", "schedules/all_gather_2d.yaml", "--topology", "torus:2x3"],              # on a torus
        ["check", "schedules/all_gather_2d.yaml", "--topology", "mesh:2x3"],               # the full analysis
        ["check", "tests/broken/ppermute_no_wait.yaml", "--devices", "3", "--format", "json"],  # findings
    ])
    assert codes == [0, 0, 0, 1]
    assert "ringc.verify.check" in modules  # the probe did run the checker
    assert _heavy(modules) == []


def test_the_probe_sees_heavy_imports():
    """The same probe notices the cost model when a command needs it."""
    codes, modules = _probe([["cost", "schedules/ppermute_right.yaml", "--topology", "ring:4"]])
    assert codes == [0]
    assert "ringc.cost.model" in _heavy(modules)
