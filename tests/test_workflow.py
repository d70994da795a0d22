"""Issue 32, where engineers work: every file gets its verdict, one JSON document, SARIF 2.1.0
(validated against the schema's models), GitHub annotations, `[tool.ringc]`, `-q` and a
closing summary, `--version` and help on bare `ringc`."""

from __future__ import annotations

import json
import textwrap

import pytest

from cli_run import run_cli
from conftest import REPO

BROKEN = REPO / "tests" / "broken"
RACE = BROKEN / "all_reduce_no_capacity_wait.yaml"  # unbalanced and races, with traces


def _doc(argv, cwd=None, monkeypatch=None):
    if cwd is not None:
        monkeypatch.chdir(cwd)
    o = run_cli([*argv, "--format", "json"], budget=120)
    return o, json.loads(o.out)


def test_every_file_gets_its_verdict_and_the_exit_code_is_the_worst(monkeypatch):
    files = sorted(str(p) for p in (REPO / "schedules").glob("*.yaml"))
    o, doc = _doc(["check", *files, "--devices", "4"], REPO, monkeypatch)
    assert o.code == 2 and doc["exit_code"] == 2  # 2-axis schedules on a ring: bad input, the rest checked
    refused = {e["file"] for e in doc["errors"]}
    assert {p.split("/")[-1] for p in refused} == {
        "all_gather_2d.yaml", "all_reduce_2d.yaml", "all_reduce_2d_bidirectional.yaml",
        "all_reduce_3d_bidirectional.yaml", "reduce_scatter_hierarchical.yaml", "ragged_all_to_all.yaml"}
    assert all(e["line"] and e["fix"] for e in doc["errors"])
    assert doc["summary"]["verdicts"] == len(files) - 6 and doc["summary"]["ok"] == len(files) - 6
    o = run_cli(["check", str(RACE), str(REPO / "schedules" / "ppermute_right.yaml"), "--devices", "4"])
    assert o.code == 1 and "all_reduce_no_capacity_wait.yaml N=4: FAILED" in o.out


def test_check_with_no_files_checks_the_library_from_tool_ringc(monkeypatch):
    o, doc = _doc(["check"], REPO, monkeypatch)
    assert o.code == 0, o.err
    assert doc["summary"]["files"] == len(list((REPO / "schedules").glob("*.yaml"))) + len(
        list((REPO / "schedules" / "synth").glob("*.yaml")))  # `ringc synth`'s winners, in groups of their own
    topologies = {r["file"].split("/")[-1]: r["topology"] for r in doc["reports"]}
    assert topologies["all_reduce_2d.yaml"].startswith("torus:4x4")
    assert topologies["all_reduce_3d_bidirectional.yaml"].startswith("torus:2x2x2")
    assert {r["N"] for r in doc["reports"] if r["file"].endswith("hypercube.yaml")} == {8}


def test_a_project_with_a_failing_file_and_options_from_the_command_line(tmp_path, monkeypatch):
    (tmp_path / "s").mkdir()
    for name in ("ppermute_right.yaml", "all_gather_ring.yaml"):
        (tmp_path / "s" / name).write_text((REPO / "schedules" / name).read_text())
    (tmp_path / "s" / "racy.yaml").write_text(RACE.read_text())
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent("""\
        [project]
        name = "mine"

        [[tool.ringc.check]]
        files = ["s/*.yaml"]
        exclude = ["s/all_gather_ring.yaml"]
        devices = "2..3"
        """))
    (tmp_path / "sub").mkdir()
    o, doc = _doc(["check"], tmp_path / "sub", monkeypatch)  # found from a folder below
    assert o.code == 1
    assert sorted({(r["file"].split("/")[-1], r["N"]) for r in doc["reports"]}) == [
        ("ppermute_right.yaml", 2), ("ppermute_right.yaml", 3), ("racy.yaml", 2), ("racy.yaml", 3)]
    o, doc = _doc(["check", "--devices", "4"], tmp_path, monkeypatch)  # the command line wins
    assert {r["N"] for r in doc["reports"]} == {4}


@pytest.mark.parametrize("table,says", [
    ('[[tool.ringc.check]]\nfiles = ["*.yaml"]\ndevice = 4\n', "check.0.device: Extra inputs are not permitted"),
    ('[[tool.ringc.check]]\nfiles = ["nope.yaml"]\n', "names `nope.yaml`, which does not exist"),
    ('[[tool.ringc.check]]\nfiles = ["*.yaml"]\ndevices = "x"\n', "devices = 'x'"),
    ('[tool.ringc]\nlimits = {nope = 3}\n[[tool.ringc.check]]\nfiles = ["*.yaml"]\n', "limits:"),
])
def test_a_bad_tool_ringc_is_one_message_naming_the_key(tmp_path, monkeypatch, table, says):
    (tmp_path / "a.yaml").write_text((REPO / "schedules" / "ppermute_right.yaml").read_text())
    (tmp_path / "pyproject.toml").write_text(table)
    monkeypatch.chdir(tmp_path)
    o = run_cli(["check"])
    assert o.code == 2 and says in o.err and "pyproject.toml" in o.err and "Traceback" not in o.err, o.err


def test_no_files_and_no_project_is_bad_input_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    o = run_cli(["check"])
    assert o.code == 2 and "[tool.ringc]" in o.err and "fix:" in o.err


def test_sarif_is_valid_sarif_2_1_0_with_rules_related_locations_and_code_flows():
    from pydantic_sarif.model import StaticAnalysisResultsFormatSarifVersion210JsonSchema as Sarif
    o = run_cli(["check", str(RACE), str(REPO / "schedules" / "ppermute_right.yaml"), "--devices", "4",
                 "--format", "sarif"])
    assert o.code == 1
    doc = json.loads(o.out)
    Sarif.model_validate(doc)  # the schema's own structure, extra keys forbidden
    run = doc["runs"][0]
    rules = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert sorted(rules) == ["race", "unbalanced", "wrong_result"] and all(r["help"]["text"] for r in run["tool"]["driver"]["rules"])
    race = next(r for r in run["results"] if r["ruleId"] == "race")
    assert rules[race["ruleIndex"]] == "race"
    assert race["locations"][0]["physicalLocation"]["region"]["startLine"] == 52
    assert race["relatedLocations"][0]["physicalLocation"]["region"]["startLine"] == 47  # the other side
    assert race["codeFlows"][0]["threadFlows"][0]["locations"]
    o = run_cli(["check", str(REPO / "nope.yaml"), "--devices", "4", "--format", "sarif"])
    doc = json.loads(o.out)
    Sarif.model_validate(doc)
    assert o.code == 2 and doc["runs"][0]["invocations"][0]["executionSuccessful"] is False


def test_github_annotations():
    o = run_cli(["check", str(RACE), "--devices", "4", "--format", "github"])
    assert o.code == 1
    lines = o.out.splitlines()
    assert lines[0].startswith(f"::error file={RACE},line=50,title=ringc [unbalanced]::")
    assert all("\n" not in ln for ln in lines) and lines[-1].startswith("Found problems: 1 verdict")


def test_quiet_prints_what_failed_and_the_summary_and_assumptions_are_said_once():
    ok = REPO / "schedules" / "ppermute_right.yaml"
    o = run_cli(["check", str(ok), str(RACE), "--devices", "3..4", "-q"])
    assert o.code == 1 and "ppermute_right" not in o.out and o.out.count(": FAILED") == 2
    assert "Found problems: 4 verdicts in 2 files: 2 ok, 2 failed" in o.err
    o = run_cli(["check", str(ok), "--devices", "2..4"])
    assert o.out.count("assumes: DMA ordering") == 1 and o.out.count(": ok (") == 3


def test_version_and_help_on_bare_ringc():
    from ringc.output import ringc_version
    o = run_cli(["--version"])
    assert o.code == 0 and o.out.strip() == f"ringc {ringc_version()}"
    o = run_cli([])
    assert o.code == 0 and "usage: ringc" in o.out and "check" in o.out


def test_pre_commit_hook_and_github_workflow_run_real_commands(monkeypatch):
    import shlex

    import yaml
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    hook = next(h for h in hooks if h["id"] == "ringc-check")
    argv = shlex.split(hook["entry"])
    assert argv[0] == "ringc" and hook["pass_filenames"] is False
    monkeypatch.chdir(REPO)
    assert run_cli(argv[1:], budget=120).code == 0  # the hook's command, in this repository
    workflow = yaml.safe_load((REPO / "docs" / "examples" / "github-workflow.yml").read_text())
    runs = [step.get("run", "") for step in workflow["jobs"]["check"]["steps"]]
    assert any("ringc check --format sarif" in r for r in runs) and any("--format github" in r for r in runs)
    assert any(step.get("uses", "").startswith("github/codeql-action/upload-sarif")
               for step in workflow["jobs"]["check"]["steps"])


def test_every_option_of_every_command_has_help_text():
    import argparse

    from ringc.cli import _parser
    missing = []
    for action in _parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                missing += [f"{name} {a.option_strings or a.dest}" for a in sub._actions
                            if not a.help and not isinstance(a, argparse._HelpAction)]
    assert not missing


def test_a_bad_device_count_is_said_once():
    o = run_cli(["check", str(REPO / "schedules" / "ppermute_right.yaml"), "--devices", "abc"])
    assert o.code == 2 and o.err.count("got 'abc'") == 1 and "e.g. 4 or 2..8" in o.err


def test_tune_says_why_a_choice_has_no_shapes_in_words():
    o = run_cli(["tune", str(REPO / "schedules" / "all_reduce_bidirectional.yaml"), "--topology", "ring:8",
                 "--bytes", "1MiB", "--param-range", "chunks=3..3", "--no-compile"], budget=120)
    row = next(ln for ln in o.out.splitlines() if ln.strip().startswith("3 "))
    assert row.rstrip().endswith("shapes: found no `rows`/`cols` for which the shapes of `all_reduce_bidirectional` "
                                 "divide exactly on 8 (x) devices"), row


def test_a_wrong_result_is_reported_at_the_last_write_of_the_wrong_box():
    path = BROKEN / "all_reduce_wrong_slot.yaml"
    o = run_cli(["check", str(path), "--devices", "4"])
    line = next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if "accumulate: out" in ln)
    assert f"{path}:{line}: error: [wrong_result]" in o.out
    assert f"its last write: out[0:8, 0:128] += receive[0:8, 0:128] at device 0, step=3 (line {line})" in o.out
