"""The command line: exit codes, output formats, and bad input without tracebacks."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import without_runtime_data

from ringc.cli import main
from ringc.verify.findings import KINDS

REPO = Path(__file__).resolve().parent.parent
LIBRARY = without_runtime_data(sorted((REPO / "schedules").glob("*.yaml")))
ONE_AXIS = [p for p in LIBRARY if "\naxes: [x, y" not in p.read_text()]  # ring schedules
TWO_AXES = [p for p in LIBRARY if "\naxes: [x, y]\n" in p.read_text()]  # need a 2-D topology
BROKEN = REPO / "tests" / "broken"
RACY = BROKEN / "all_reduce_read_before_wait.yaml"      # one race, nothing else
NOT_WAITED = BROKEN / "ppermute_no_wait.yaml"          # dma_not_waited, and the race with kernel exit

LOCATED_ERROR = re.compile(r"^(?P<file>.+):(?P<line>\d+): error: \S.*$")


def ringc_cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RINGC_DEBUG"}
    return subprocess.run([sys.executable, "-m", "ringc", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


@pytest.fixture
def bad_schedule(tmp_path) -> tuple[Path, int]:
    """A library schedule with a misspelt buffer name; returns (path, line of the typo)."""
    text = (REPO / "schedules" / "all_reduce_ring.yaml").read_text()
    old = "dst: receive, sem: copy_sem"
    assert text.count(old) == 1
    text = text.replace(old, "dst: recieve, sem: copy_sem")
    path = tmp_path / "typo.yaml"
    path.write_text(text)
    line = next(i for i, l in enumerate(text.splitlines(), 1) if "recieve" in l)
    return path, line


def assert_one_located_error(stderr: str, path: Path, line: int) -> None:
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 2, stderr
    m = LOCATED_ERROR.match(lines[0])
    assert m, lines[0]
    assert m["file"] == str(path) and int(m["line"]) == line
    assert lines[1].startswith("  fix: ") and len(lines[1]) > len("  fix: ")


# ------------------------------------------------------------------------ check




def test_check_library_exit_0():
    any_n = [p for p in ONE_AXIS if "log2(N)" not in p.read_text()]  # a hypercube: powers of two
    res = ringc_cli("check", *any_n, "--devices", "2..6")
    assert res.returncode == 0, res.stdout + res.stderr
    for path in any_n:
        for n in range(2, 7):
            assert re.search(rf"^{re.escape(str(path))} N={n}: ok \(", res.stdout, re.M), (path, n)
    assert "error" not in res.stdout
    assert TWO_AXES and len(ONE_AXIS) > 4
    for path in set(ONE_AXIS) - set(any_n):
        for n in (2, 4, 8):
            res = ringc_cli("check", path, "--devices", str(n))
            assert res.returncode == 0 and f"N={n}: ok (" in res.stdout, res.stdout + res.stderr


@pytest.mark.parametrize("topology", ["torus:2x3", "v5p:4x4x4", "mesh:3x2"])
def test_check_two_axis_library_on_a_topology_exit_0(topology):
    res = ringc_cli("check", *TWO_AXES, "--topology", topology)
    assert res.returncode == 0, res.stdout + res.stderr
    for path in TWO_AXES:
        assert re.search(rf"^{re.escape(str(path))} N=\d+ on {topology} .*: ok \(", res.stdout, re.M), res.stdout


def test_check_two_axis_schedule_on_a_ring_is_bad_input():
    res = ringc_cli("check", REPO / "schedules" / "all_gather_2d.yaml", "--devices", "8")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "runs over 2 axes (x, y), but" in res.stderr and "has 1 axis" in res.stderr
    assert "fix: use 2 axes or more: `check --topology torus:4x4`" in res.stderr
    res = ringc_cli("check", REPO / "schedules" / "all_gather_2d.yaml", "--topology", "line:8")
    assert res.returncode == 2 and "has 1 axis" in res.stderr


def test_check_ring_on_a_slice_without_wraparound_warns_and_fails_under_strict():
    ring = REPO / "schedules" / "all_gather_ring.yaml"
    res = ringc_cli("check", ring, "--topology", "v5e:4x4")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "warning: [no_wraparound]" in res.stdout and "3 hops" in res.stdout
    assert "a v5e axis only wraps when it spans the 16-chip pod" in res.stdout
    strict = ringc_cli("check", ring, "--topology", "v5e:4x4", "--strict")
    assert strict.returncode == 1
    assert "error: [no_wraparound]" in strict.stdout and "FAILED" in strict.stdout
    # With wraparound (a full 16-chip v5e axis, or a v4 cube) there is nothing to say.
    for topology, along in (("v5e:8x16", "y"), ("v4:4x4x4", "z")):
        res = ringc_cli("check", ring, "--topology", topology, "--along", along, "--strict")
        assert res.returncode == 0 and "warning" not in res.stdout and "error" not in res.stdout, res.stdout


def test_check_v5e_offset_that_is_not_a_power_of_2_exit_1():
    res = ringc_cli("check", BROKEN / "ppermute_v5e_offset.yaml", "--topology", "v5e:8x16", "--along", "y")
    assert res.returncode == 1
    assert "error: [unroutable]" in res.stdout and "offset y +3" in res.stdout
    assert "power-of-2" in res.stdout and "seed 000" in res.stdout
    # The same send on a v5p torus is routed, only far: a warning.
    res = ringc_cli("check", BROKEN / "ppermute_v5e_offset.yaml", "--topology", "v5p:4x4x16", "--along", "z")
    assert res.returncode == 0 and "warning: [not_neighbour]" in res.stdout


@pytest.mark.parametrize("args, message", [
    (["--topology", "torus:4x4", "--along", "w"], "--along 'w' must name 1 distinct axes"),
    (["--topology", "torus:4x4", "--devices", "8"], "has 16 devices, but N=8"),
    (["--topology", "v5e:4x4x4"], "v5e slices have 2 axes"),
    ([], "--devices is required"),
])
def test_check_topology_bad_input_exit_2(args, message):
    res = ringc_cli("check", REPO / "schedules" / "all_gather_ring.yaml", *args)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and message in res.stderr


def test_check_broken_exit_1():
    res = ringc_cli("check", NOT_WAITED, "--devices", "3")
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"{NOT_WAITED} N=3: FAILED" in res.stdout
    assert "[dma_not_waited]" in res.stdout
    assert res.stderr == ""


def test_check_exit_1_if_any_file_fails(capsys):
    assert main(["check", str(ONE_AXIS[0]), str(NOT_WAITED), "--devices", "3"]) == 1
    out = capsys.readouterr().out
    assert f"{ONE_AXIS[0]} N=3: ok" in out and f"{NOT_WAITED} N=3: FAILED" in out


def test_check_bad_input_exit_2_one_located_line(bad_schedule):
    path, line = bad_schedule
    res = ringc_cli("check", path, "--devices", "2..4")
    assert res.returncode == 2
    assert_one_located_error(res.stderr, path, line)
    assert "recieve" in res.stderr and "did you mean `receive`?" in res.stderr
    assert res.stdout == ""


def test_check_n_dependent_bad_input_exit_2(tmp_path):
    text = (REPO / "schedules" / "reduce_scatter_bidirectional.yaml").read_text()
    path = tmp_path / "rs.yaml"
    path.write_text(text)
    res = ringc_cli("check", path, "--devices", "2", "--param", "rows=15")
    assert res.returncode == 2
    accum_line = next(i for i, l in enumerate(text.splitlines(), 1) if l.strip().startswith("accum:"))
    assert_one_located_error(res.stderr, path, accum_line)
    assert "rows // 2" in res.stderr


def test_check_unknown_param_exit_2(capsys):
    path = ONE_AXIS[0]
    assert main(["check", str(path), "--devices", "2", "--param", "rowz=3"]) == 2
    err = capsys.readouterr().err
    params_line = next(i for i, l in enumerate(path.read_text().splitlines(), 1) if l.startswith("params:"))
    assert_one_located_error(err, path, params_line)
    assert "rowz" in err


def test_check_param_override_changes_the_check(capsys):
    path = REPO / "schedules" / "ppermute_right.yaml"
    assert main(["check", str(path), "--devices", "3", "--param", "rows=4", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True


def test_check_missing_file_exit_2(tmp_path):
    path = tmp_path / "nope.yaml"
    res = ringc_cli("check", path, "--devices", "2")
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert res.stderr.startswith(f"{path}: error: cannot read schedule")


@pytest.mark.parametrize("args", [["--devices", "0"], ["--devices", "5..3"], ["--devices", "x"],
                                  ["--devices", "2", "--param", "rows"], ["--devices", "2", "--format", "xml"]])
def test_check_bad_arguments_exit_2(args):
    res = ringc_cli("check", ONE_AXIS[0], *args)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert "usage:" in res.stderr


def test_check_unknown_topology_is_bad_input():
    res = ringc_cli("check", ONE_AXIS[0], "--devices", "3", "--topology", "torus")
    assert "Traceback" not in res.stderr
    assert res.returncode == 2


def test_check_zero_invocations_is_bad_input():
    res = ringc_cli("check", ONE_AXIS[0], "--devices", "3", "--invocations", "0")
    assert res.returncode == 2


def test_check_control_character_is_bad_input(tmp_path):
    path = tmp_path / "bell.yaml"
    path.write_text((REPO / "schedules" / "ppermute_right.yaml").read_text().replace("ppermute_right", "pp\x07"))
    res = ringc_cli("check", path, "--devices", "2")
    assert "Traceback" not in res.stderr
    assert res.returncode == 2
    assert LOCATED_ERROR.match(res.stderr.splitlines()[0])


def test_internal_errors_print_no_traceback(tmp_path):
    # whatever the exit code, a user never sees a Python traceback without RINGC_DEBUG
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"name: caf\xe9\n")
    res = ringc_cli("check", path, "--devices", "2")
    assert res.returncode in (2, 3)
    assert "Traceback" not in res.stderr and res.stderr.strip()


# ------------------------------------------------------------------ json output


def test_check_json_is_one_document_with_a_report_per_file_and_n():
    files = [ONE_AXIS[0], RACY, NOT_WAITED]
    res = ringc_cli("check", *files, "--devices", "3..4", "--format", "json")
    assert res.returncode == 1
    doc = json.loads(res.stdout)  # one document: `json.load` reads the whole output
    assert doc["version"] == 1 and doc["command"] == "check" and doc["exit_code"] == 1 and doc["errors"] == []
    assert doc["summary"] == {"files": 3, "verdicts": 6, "ok": 2, "failed": 4, "not_checked": 0, "refused": 0,
                              "findings": sum(len([f for f in o["findings"] if f["severity"] == "error"])
                                              for o in doc["reports"])}
    objs = doc["reports"]
    assert [(o["file"], o["N"]) for o in objs] == [(str(f), n) for f in files for n in (3, 4)]
    for o in objs:
        assert isinstance(o["ok"], bool)
        assert isinstance(o["findings"], list)
        assert o["ok"] == (not any(f["severity"] == "error" for f in o["findings"]))
        for f in o["findings"]:
            assert {"kind", "device", "step", "message", "line"} <= set(f)
            assert f["kind"] in KINDS
            assert isinstance(f["message"], str) and f["message"]
            assert f["device"] is None or isinstance(f["device"], int)
            assert f["line"] is None or isinstance(f["line"], int)
            assert f["step"] is None or (isinstance(f["step"], dict) and set(f["step"]) == {"step"})
    by_file = {(o["file"], o["N"]): o for o in objs}
    assert by_file[(str(ONE_AXIS[0]), 3)]["ok"] is True and by_file[(str(ONE_AXIS[0]), 3)]["findings"] == []
    racy = by_file[(str(RACY), 3)]
    assert racy["ok"] is False
    race = next(f for f in racy["findings"] if f["kind"] == "race")
    accumulate_line = next(i for i, l in enumerate(RACY.read_text().splitlines(), 1) if "- accumulate: out" in l)
    assert race["line"] == accumulate_line and race["step"] == {"step": 0}
    assert race["trace"], "json findings carry the interleaving"
    assert {f["kind"] for f in by_file[(str(NOT_WAITED), 4)]["findings"]} == {"dma_not_waited", "race"}


def test_check_json_warning_keeps_ok(capsys, tmp_path):
    text = (REPO / "schedules" / "ppermute_right.yaml").read_text()
    text = text.replace("collective: {kind: ppermute, shift: 1}", "collective: {kind: ppermute, shift: 2}")
    text = text.replace("to: right", "to: (me + 2) % N")
    path = tmp_path / "far.yaml"
    path.write_text(text)
    assert main(["check", str(path), "--devices", "5", "--format", "json"]) == 0
    obj = json.loads(capsys.readouterr().out)["reports"][0]
    assert obj["ok"] is True
    assert [(f["kind"], f["severity"]) for f in obj["findings"]] == [("not_neighbour", "warning")]


# ----------------------------------------------------------------------- explain


def test_explain_prints_a_trace_for_a_race(capsys):
    assert main(["check", str(RACY), "--devices", "3", "--explain"]) == 1
    explained = capsys.readouterr().out
    assert main(["check", str(RACY), "--devices", "3"]) == 1
    plain = capsys.readouterr().out
    assert "[race]" in plain and "a run that shows it" not in plain
    assert "a run that shows it:" in explained
    trace = explained.split("a run that shows it:", 1)[1].splitlines()
    marked = [l for l in trace if l.strip().startswith(">")]
    assert len(marked) == 2  # both racing events, in the order they ran
    assert "start local copy `load`" in marked[0] and "+= receive" in marked[1]
    assert any("has not happened yet" in l for l in trace)


# ------------------------------------------------------------------------ schema


def test_schema_is_json_schema(capsys):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert "buffers" in schema["properties"] and "body" in schema["properties"]
    assert set(schema["required"]) >= {"name", "collective", "buffers"}
    assert "grid" in schema["properties"] and "grid" not in schema["required"]  # a kernel may have none
    assert schema["oneOf"] == [{"required": ["body"]}, {"required": ["kernels", "program"]}]  # or a program
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    assert not validator.is_valid({"name": "x"})
    assert any("bogus" in e.message for e in validator.iter_errors({"bogus": 1}))


def test_schema_accepts_the_library():
    import yaml
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(ringc_cli("schema").stdout)
    validator = jsonschema.Draft202012Validator(schema)
    for path in LIBRARY:
        errors = [e.message for e in validator.iter_errors(yaml.safe_load(path.read_text()))]
        assert not errors, (path.name, errors[:3])


# -------------------------------------------------------------------------- emit


def test_emit_bad_input_writes_nothing(bad_schedule, tmp_path):
    pytest.importorskip("ringc.codegen")
    path, line = bad_schedule
    out = tmp_path / "out.py"
    res = ringc_cli("emit", path, "-o", out)
    assert res.returncode == 2
    assert_one_located_error(res.stderr, path, line)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary left behind either


def test_emit_bad_input_keeps_an_existing_output(bad_schedule, tmp_path):
    pytest.importorskip("ringc.codegen")
    path, _ = bad_schedule
    out = tmp_path / "out.py"
    out.write_text("# previous kernel\n")
    assert ringc_cli("emit", path, "-o", out).returncode == 2
    assert out.read_text() == "# previous kernel\n"


def test_emit_into_missing_directory_exit_2(tmp_path):
    pytest.importorskip("ringc.codegen")
    out = tmp_path / "no" / "such" / "dir" / "out.py"
    res = ringc_cli("emit", ONE_AXIS[0], "-o", out)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr and "does not exist" in res.stderr
    assert not out.exists()


def _emit_or_skip(tmp_path) -> Path:
    pytest.importorskip("ringc.codegen")
    out = tmp_path / "kernel.py"
    res = ringc_cli("emit", REPO / "schedules" / "ppermute_right.yaml", "-o", out)
    if res.returncode != 0:
        pytest.skip(f"emit does not work yet: {res.stderr.strip()[:200]}")
    return out


def test_emit_writes_the_module(tmp_path):
    out = _emit_or_skip(tmp_path)
    compile(out.read_text(), str(out), "exec")


def test_emit_output_has_the_usual_permissions(tmp_path):
    out = _emit_or_skip(tmp_path)
    plain = tmp_path / "plain.py"
    plain.write_text("")
    assert (out.stat().st_mode & 0o777) == (plain.stat().st_mode & 0o777)


def test_run_on_a_mesh():
    res = ringc_cli("run", REPO / "schedules" / "all_gather_2d.yaml", "--mesh", "2x2")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "N=4 on a 2x2 mesh: ok" in res.stdout and "no races" in res.stdout
    res = ringc_cli("run", REPO / "schedules" / "ppermute_right.yaml", "--mesh", "2x2", "--along", "y")
    assert res.returncode == 0 and "N=2 on a 2x2 mesh: ok" in res.stdout, res.stdout + res.stderr
    res = ringc_cli("run", REPO / "schedules" / "all_gather_2d.yaml", "--devices", "4")
    assert res.returncode == 2 and "Traceback" not in res.stderr and "`run --mesh 2x2`" in res.stderr
    res = ringc_cli("run", REPO / "schedules" / "all_gather_2d.yaml")
    assert res.returncode == 2 and "either --devices" in res.stderr


def test_a_verdict_is_flushed_as_it_comes():
    """A test module's verdicts come one by one; through a pipe or into a CI log (a block
    buffer) each must show when it comes, not when 8 KiB of them have."""
    import io
    from ringc.errors import ScheduleError
    from ringc.output import Output
    from ringc.pallas.importer import CallError

    class Recorded(io.StringIO):
        flushed_at: list

        def flush(self):
            self.flushed_at.append(len(self.getvalue()))
            super().flush()

    for fmt in ("text", "github"):
        out, err = Recorded(), Recorded()
        out.flushed_at, err.flushed_at = [], []
        sink = Output(fmt, out=out, err=err)
        sink.report(CallError("k.py", "call 1", ScheduleError("no", file="k.py")))
        assert out.flushed_at and out.flushed_at[-1] == len(out.getvalue()) > 0, fmt
        sink.refused(ScheduleError("bad", file="k.py"))
        shown = err if fmt == "text" else out
        assert shown.flushed_at and shown.flushed_at[-1] == len(shown.getvalue()) > 0, fmt


def test_a_kernel_call_not_checked_is_said_in_github_and_sarif_output():
    """A captured call that could not be checked has no findings: GitHub annotations and SARIF
    (code scanning) must still show it, at the line where it stopped, never nothing."""
    import io
    from ringc.errors import ScheduleError
    from ringc.output import Output
    from ringc.pallas.importer import CallError
    call = CallError("k.py", "kernel (line 9, kernel call 1 of 1)",
                     ScheduleError("an unknown primitive `foo`", file="k.py", line=7, fix="avoid foo"))
    github = Output("github", out=io.StringIO(), err=io.StringIO())
    github.report(call)
    line, = github.out.getvalue().splitlines()
    assert line.startswith("::error file=k.py,line=7,title=ringc%3A not checked::")
    assert "kernel call 1 of 1): not checked: an unknown primitive `foo` (fix: avoid foo)" in line
    sarif = Output("sarif", out=io.StringIO(), err=io.StringIO())
    sarif.report(call)
    note, = sarif.sarif()["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert note["level"] == "error" and "not checked: an unknown primitive `foo`" in note["message"]["text"]
    assert note["locations"][0]["physicalLocation"]["region"] == {"startLine": 7}
