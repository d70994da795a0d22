"""`ringc show` and `ringc check --show`: documents whose mermaid blocks are valid, tables
that agree with the schedule's algebra, PNG timelines."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import without_runtime_data

import ringc
from ringc.cli import main
from ringc.cost import estimate, hardware
from ringc.show import diagram, document
from ringc.show.mermaid import phases
from ringc.show.tables import slot_table

from mermaid_syntax import MermaidError, blocks, validate

REPO = Path(__file__).resolve().parent.parent
SCHEDULES = without_runtime_data(sorted((REPO / "schedules").glob("*.yaml"))) + sorted((REPO / "tests" / "cost").glob("*.yaml"))
BROKEN = REPO / "tests" / "broken"
PNG = b"\x89PNG\r\n\x1a\n"


def timed(path: Path, n: int):
    sched = ringc.load(path)
    return estimate(sched, hardware("ring", sched, n=n), every_device=True)


@pytest.mark.parametrize("path", SCHEDULES, ids=lambda p: p.stem)
def test_show_md_document_has_valid_mermaid(path, tmp_path, capsys):
    out = tmp_path / "doc.md"
    sched = ringc.load(path)
    # 2-axis schedules on a 2x2 torus, 3-axis ones on 2x2x2
    devices, topo = {1: ("4", "ring"), 2: ("4", "torus:2x2"), 3: ("8", "torus:2x2x2")}[len(sched.axes)]
    assert main(["show", str(path), "--devices", devices, "--topology", topo, "-o", str(out)]) == 0
    text = out.read_text()
    found = [validate(b) for b in blocks(text)]
    assert found == ["graph", "graph", "gantt", "stateDiagram-v2"]
    for section in ("## Memory Hierarchy", "## Ring Topology", "## Pipeline Timeline", "## Per-Step State Machine",
                    "## Slot Occupancy", "## Performance"):
        assert section in text
    # One gantt section per device, one task per simulated span (up to the 400 drawn).
    e = estimate(sched, hardware(topo, sched, n=int(devices)), every_device=True)
    gantt = diagram(e, "gantt")
    assert gantt.count("\n    section device ") == int(devices)
    tasks = sum(1 for l in gantt.splitlines() if " :" in l and ", t" in l)
    assert tasks == min(len(e.machine.spans), 400)
    assert ("spans not drawn" in gantt) == (len(e.machine.spans) > 400)
    # One composite state per distinct per-step program.
    sigs, _, _ = phases(e.program)
    assert diagram(e, "state").count("    state ") == len(sigs)


def test_a_two_core_schedule_on_a_3d_slice_names_each_core_in_its_document(tmp_path):
    """With `cores: 2` a chip runs two processes (8 chips of v5p:2x2x2, 16 devices): the ring
    diagram labels process p with its chip's coordinates and, past the chips, `core 1` (it
    indexed the chips' coordinates by process: an internal error, found by the fuzz)."""
    out = tmp_path / "doc.md"
    path = REPO / "schedules" / "synth" / "all_gather_v5p_16x16x16_256MiB.yaml"
    assert main(["show", str(path), "--topology", "v5p:2x2x2", "-o", str(out)]) == 0
    text = out.read_text()
    assert [validate(b) for b in blocks(text)][:2] == ["graph", "graph"]
    assert 'D0["Device 0<br/>(0,0,0)"]' in text and 'D8["Device 8<br/>(0,0,0) core 1"]' in text
    assert 'D15["Device 15<br/>(1,1,1) core 1"]' in text and "D16[" not in text


def test_mermaid_validator_rejects_broken_diagrams():
    e = timed(REPO / "schedules" / "reduce_scatter_bidirectional.yaml", 4)
    good = {k: diagram(e, k) for k in ("gantt", "ring", "state", "memory")}
    for d in good.values():
        validate(d)
    broken = [
        ("gantt", ", t1, ", ", t0, "),                             # duplicate task id
        ("gantt", " :crit,", ": x :crit,"),                        # a colon in a task name
        ("gantt", "dateFormat X", "dateFormat YYYY"),
        ("ring", "    end\n", ""),                                 # unclosed subgraph
        ("ring", "D0 -->", "D9 -->"),                              # edge to an undeclared node
        ("memory", '"]', "]"),                                     # unterminated label
        ("state", "    }\n", ""),                                  # unclosed composite state
        ("state", "stateDiagram-v2\n", "stateDiagram-v2\n    S0_nowhere --> [*]\n"),  # undeclared state
        ("state", "stateDiagram-v2", "stateDiagram-v3"),
    ]
    for key, old, new in broken:
        bad = good[key].replace(old, new, 1)
        assert bad != good[key], (key, old)
        with pytest.raises(MermaidError):
            validate(bad)


def test_slot_table_follows_the_all_gather_algebra():
    """At step s device d sends out[(d - s) % N] right and receives out[(d - 1 - s) % N]."""
    n = 5
    sched = ringc.load(REPO / "schedules" / "all_gather_ring.yaml")
    e = estimate(sched, hardware("ring", sched, n=n), every_device=True)
    for d in (0, 3):
        rows = slot_table(sched, e.program, d).splitlines()
        head = [c.strip() for c in rows[0].strip("|").split("|")]
        for s, row in enumerate(rows[2:]):
            cells = dict(zip(head, (c.strip() for c in row.strip("|").split("|"))))
            assert "send right" in cells[f"out[{(d - s) % n}]"]
            assert "recv from left" in cells[f"out[{(d - 1 - s) % n}]"]
            others = [c for k, c in cells.items() if k.startswith("out[") and k not in
                      (f"out[{(d - s) % n}]", f"out[{(d - 1 - s) % n}]") and "load" not in c]
            assert all(not c for c in others)


def test_state_machine_of_the_bidirectional_reduce_scatter():
    """Prologue, steady phase 1, steady phase 0, last phase 0, last phase 1: five states,
    the steady ones alternating."""
    e = timed(REPO / "schedules" / "reduce_scatter_bidirectional.yaml", 6)
    sigs, groups, seq = phases(e.program)
    assert len(seq) == 12 and len(sigs) == 5  # N steps x 2 phases, 5 distinct programs
    assert groups[seq[1]] == [(s, 1) for s in range(5)] and groups[seq[2]] == [(s, 0) for s in range(1, 5)]
    text = diagram(e, "state")
    validate(text)
    steady0, steady1 = (f"S{sigs.index(seq[k])}_" for k in (2, 1))
    moves = [l.split(" : ")[0].split(" --> ") for l in text.splitlines() if " --> " in l and "[*]" not in l]
    moves = [(a.strip(), b) for a, b in moves]
    assert any(a.startswith(steady0) and b.startswith(steady1) for a, b in moves)
    assert any(a.startswith(steady1) and b.startswith(steady0) for a, b in moves)


def test_show_mermaid_and_png(tmp_path, capsys):
    path = REPO / "schedules" / "all_reduce_ring.yaml"
    assert main(["show", str(path), "--devices", "4", "--format", "mermaid", "--diagram", "ring"]) == 0
    assert validate(capsys.readouterr().out) == "graph"
    out = tmp_path / "t.png"
    assert main(["show", str(path), "--topology", "v5e:4x4", "--devices", "4", "--format", "png",
                 "-o", str(out), "--bytes", "1MiB"]) == 0
    assert out.read_bytes()[:8] == PNG


@pytest.mark.parametrize("args, message", [
    (["--devices", "4", "--format", "png"], "give -o"),
    ([], "needs --devices"),
    (["--devices", "4", "--topology", "v5e:4x4x4"], "v5e slices have 2 axes"),
    (["--devices", "3", "--topology", "v5e:4x4"], "not 3"),
])
def test_show_bad_input(args, message, capsys):
    assert main(["show", str(REPO / "schedules" / "ppermute_right.yaml"), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_show_of_a_hanging_schedule_points_to_check(capsys):
    assert main(["show", str(BROKEN / "all_reduce_over_wait.yaml"), "--devices", "4"]) == 1
    assert "check --show" in capsys.readouterr().err


@pytest.mark.parametrize("name, kind", [("all_reduce_over_wait.yaml", "hang"),
                                        ("all_reduce_read_before_wait.yaml", "race")])
def test_check_show_draws_the_finding(name, kind, tmp_path, capsys):
    out = tmp_path / f"{kind}.png"
    assert main(["check", str(BROKEN / name), "--devices", "4", "--explain", "--show", str(out)]) == 1
    assert f"[{kind}]" in capsys.readouterr().out
    assert out.read_bytes()[:8] == PNG


def test_document_is_deterministic():
    sched = ringc.load(REPO / "schedules" / "all_gather_ring.yaml")
    docs = {document(estimate(sched, hardware("ring", sched, n=4), every_device=True)) for _ in range(2)}
    assert len(docs) == 1


MERMAID_DIR = os.environ.get("RINGC_MERMAID_DIR")  # a directory with `npm install mermaid jsdom`


@pytest.mark.skipif(not (MERMAID_DIR and shutil.which("node")), reason="set RINGC_MERMAID_DIR to parse with mermaid")
@pytest.mark.parametrize("path", SCHEDULES, ids=lambda p: p.stem)
def test_mermaid_itself_parses_the_document(path, tmp_path):
    out = tmp_path / "doc.md"
    devices, topo = {1: ("4", "ring"), 2: ("4", "torus:2x2"), 3: ("8", "torus:2x2x2")}[len(ringc.load(path).axes)]
    assert main(["show", str(path), "--devices", devices, "--topology", topo, "-o", str(out)]) == 0
    script = tmp_path / "parse.mjs"
    script.write_text(
        "import { JSDOM } from 'jsdom';\n"
        "const dom = new JSDOM('<!DOCTYPE html><body></body>');\n"
        "globalThis.window = dom.window; globalThis.document = dom.window.document;\n"
        "const { default: mermaid } = await import('mermaid');\n"
        "import fs from 'fs';\n"
        "const text = fs.readFileSync(process.argv[2], 'utf8');\n"
        "for (const m of text.matchAll(/```mermaid\\n([\\s\\S]*?)```/g)) await mermaid.parse(m[1]);\n")
    env = {**os.environ, "NODE_PATH": str(Path(MERMAID_DIR) / "node_modules")}
    link = tmp_path / "node_modules"
    link.symlink_to(Path(MERMAID_DIR) / "node_modules")
    res = subprocess.run(["node", str(script), str(out)], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
