"""How `ringc check` speaks: one home for every output format.

- `text`: each verdict as it comes (`Report.to_text`), an `assumes:` line printed once per
  run (a later verdict with the same assumption does not repeat it), refusals on stderr as
  `file:line: error: ...`, and a closing summary like mypy's. `-q` prints only what failed,
  and the summary.
- `json`: one document per invocation (`JSON_VERSION`): `{"version", "command", "ok",
  "exit_code", "summary", "reports": [...], "errors": [...]}`; bad input is an entry of
  `errors`, never a bare message on stderr alone.
- `sarif`: SARIF 2.1.0, one run: a rule per finding kind (`findings.KINDS`) with its help,
  a result per finding at its file and line, `relatedLocations` for the other events of
  the finding (the other side of a race), a `codeFlow` for its trace; refusals are the
  invocation's notifications. GitHub code scanning reads it.
- `github`: workflow commands (`::error file=F,line=L,title=...::message`) for GitHub
  Actions' annotations, then the summary.

The exit code is the worst of the run: 0 ok, 1 a check failed, 2 bad input. Every file gets
its verdict: a bad file does not stop the others.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any, TextIO

from .errors import ScheduleError
from .verify.findings import KINDS

__all__ = ["FORMATS", "JSON_VERSION", "Output", "EXIT_OK", "EXIT_FAILED", "EXIT_BAD_INPUT", "document", "error_json",
           "ringc_version"]

FORMATS = ("text", "json", "sarif", "github")
JSON_VERSION = 1  # of the `--format json` document; bumped when a field changes meaning
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def ringc_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("ringc")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "0+unknown"


def document(command: str, exit_code: int, reports: list[dict], errors: list[ScheduleError],
             summary: dict | None = None) -> dict[str, Any]:
    """The `--format json` document of one invocation of any command (`JSON_VERSION`)."""
    return {"version": JSON_VERSION, "tool": "ringc", "tool_version": ringc_version(), "command": command,
            "ok": exit_code == EXIT_OK, "exit_code": exit_code, **({"summary": summary} if summary else {}),
            "reports": reports, "errors": [error_json(e) for e in errors]}


def error_json(e: ScheduleError) -> dict[str, Any]:
    """A refusal (bad input) as data: file, line, message, fix."""
    return {"file": e.file, "line": e.line, "message": e.message, "fix": e.fix}


@dataclass
class Output:
    """Collects one command's verdicts and refusals and prints them in `fmt`."""
    fmt: str = "text"
    command: str = "check"
    quiet: bool = False
    explain: bool = False
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    reports: list = field(default_factory=list)
    errors: list[ScheduleError] = field(default_factory=list)
    _said: set = field(default_factory=set)  # assumption lines already printed (text)

    def __post_init__(self) -> None:
        if self.fmt not in FORMATS:
            raise ValueError(f"unknown format {self.fmt!r}")

    # -- what happened ------------------------------------------------------------
    def report(self, report) -> None:
        self.reports.append(report)
        if self.fmt == "text":
            if not (self.quiet and report.ok):  # flushed: a verdict shows as it comes, also through a pipe
                print(self._text(report), file=self.out, flush=True)
        elif self.fmt == "github":
            for line in _github_lines(report):
                print(line, file=self.out, flush=True)

    def refused(self, e: ScheduleError) -> None:
        self.errors.append(e)
        if self.fmt == "text":
            print(str(e), file=self.err, flush=True)
        elif self.fmt == "github":
            print(_workflow_command("error", e.file, e.line, "ringc: bad input",
                                    e.message + (f" (fix: {e.fix})" if e.fix else "")), file=self.out, flush=True)

    @property
    def exit_code(self) -> int:
        if self.errors:
            return EXIT_BAD_INPUT
        return EXIT_OK if all(r.ok for r in self.reports) else EXIT_FAILED

    def close(self) -> int:
        """Print what is printed at the end (the summary, the document); the exit code."""
        if self.fmt == "json":
            print(json.dumps(self.document(), indent=1), file=self.out)
        elif self.fmt == "sarif":
            print(json.dumps(self.sarif(), indent=1), file=self.out)
        elif len(self.reports) + len(self.errors) > 1 or self.quiet or self.fmt == "github":
            print(self.summary_text(), file=self.err if self.fmt == "text" else self.out)
        return self.exit_code

    # -- text ---------------------------------------------------------------------
    def _text(self, report) -> str:
        lines = []
        for line in report.to_text(explain=self.explain).split("\n"):
            if line.startswith("  assumes: "):
                if line in self._said:
                    continue
                self._said.add(line)
            lines.append(line)
        return "\n".join(lines)

    def summary(self) -> dict[str, int]:
        # A call that was not checked (`importer.CallError`) has a file but no program.
        files = {str(r.program.file if hasattr(r, "program") else r.file) for r in self.reports} | {str(e.file) for e in self.errors}
        unchecked = sum(not hasattr(r, "program") for r in self.reports)
        return {"files": len(files), "verdicts": len(self.reports), "ok": sum(r.ok for r in self.reports),
                "failed": sum(not r.ok for r in self.reports) - unchecked, "not_checked": unchecked,
                "refused": len(self.errors), "findings": sum(len(r.errors()) for r in self.reports)}

    def summary_text(self) -> str:
        s = self.summary()
        head = {EXIT_OK: "Success", EXIT_FAILED: "Found problems", EXIT_BAD_INPUT: "Bad input"}[self.exit_code]
        parts = [f"{s['verdicts']} verdict{'s' if s['verdicts'] != 1 else ''} in {s['files']} "
                 f"file{'s' if s['files'] != 1 else ''}: {s['ok']} ok, {s['failed']} failed"
                 + (f", {s['not_checked']} not checked" if s["not_checked"] else "")]
        if s["findings"]:
            parts.append(f"{s['findings']} error finding{'s' if s['findings'] != 1 else ''}")
        if s["refused"]:
            parts.append(f"{s['refused']} refused as bad input")
        stopped = sum(bool(getattr(r, "stopped", "")) for r in self.reports)
        if stopped:   # (a script that did not run to its end: its later kernels were not checked)
            parts.append(f"{stopped} from a script that stopped short")
        return f"{head}: " + ", ".join(parts)

    # -- json ---------------------------------------------------------------------
    def document(self) -> dict[str, Any]:
        return document(self.command, self.exit_code, [r.to_json() for r in self.reports], self.errors,
                        self.summary())

    # -- sarif --------------------------------------------------------------------
    def sarif(self) -> dict[str, Any]:
        used = sorted({f.kind for r in self.reports for f in r.findings})
        rules = [{"id": kind, "name": _rule_name(kind), "shortDescription": {"text": KINDS.get(kind, kind)},
                  "fullDescription": {"text": KINDS.get(kind, kind)},
                  "help": {"text": f"{KINDS.get(kind, kind)}. Run `ringc check FILE --explain` for a run that "
                                   "shows it; docs/verification.md describes each check."},
                  "defaultConfiguration": {"level": "error"}} for kind in used]
        index = {kind: i for i, kind in enumerate(used)}
        results = []
        for r in self.reports:
            for f in r.findings:
                results.append(_sarif_result(r, f, index[f.kind]))
        notes = [{"level": "error", "message": {"text": e.message + (f" (fix: {e.fix})" if e.fix else "")},
                  **({"locations": [_location(e.file, e.line)]} if e.file else {})} for e in self.errors]
        for r in self.reports:   # a kernel call not checked: said, with where it stopped
            e = _not_checked(r)
            if e is not None:
                notes.append({"level": "error", "message": {"text": _not_checked_text(r, e)},
                              "locations": [_location(e.file or r.file, e.line)]})
        run = {"tool": {"driver": {"name": "ringc", "version": ringc_version(), "rules": rules}},
               "invocations": [{"executionSuccessful": not self.errors, "toolExecutionNotifications": notes}],
               "results": results}
        return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}


def _rule_name(kind: str) -> str:
    return "".join(part.capitalize() for part in kind.split("_"))


def _location(file: Any, line: int | None, message: str | None = None) -> dict[str, Any]:
    physical: dict[str, Any] = {"artifactLocation": {"uri": str(file)}}
    if line:
        physical["region"] = {"startLine": int(line)}
    loc: dict[str, Any] = {"physicalLocation": physical}
    if message:
        loc["message"] = {"text": message}
    return loc


def _finding_file(report, event) -> str:
    return str(getattr(event.line, "file", report.program.file)) if event is not None else str(report.program.file)


def _sarif_result(report, f, rule_index: int) -> dict[str, Any]:
    ev = f.event
    where = report.title or f"N={report.program.n}"
    result: dict[str, Any] = {
        "ruleId": f.kind, "ruleIndex": rule_index, "level": "error" if f.severity == "error" else "warning",
        "message": {"text": f"{f.message} ({where})"},
        "locations": [_location(_finding_file(report, ev), int(ev.line) if ev else None)],
    }
    related = [_location(_finding_file(report, e), int(e.line) if e.line else None,
                         f"device {e.device}, the other event of this finding") for e in f.related]
    if related:
        result["relatedLocations"] = [{**loc, "id": i} for i, loc in enumerate(related)]
    if f.trace:
        result["codeFlows"] = [{"message": {"text": "a run that shows it"}, "threadFlows": [{"locations": [
            {"location": {"message": {"text": step}}} for step in f.trace]}]}]
    return result


# -- github -------------------------------------------------------------------------

def _escape(text: str, property_: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if property_ else text


def _workflow_command(level: str, file: Any, line: int | None, title: str, message: str) -> str:
    props = []
    if file:
        props.append(f"file={_escape(str(file), True)}")
    if line:
        props.append(f"line={int(line)}")
    props.append(f"title={_escape(title, True)}")
    return f"::{level} {','.join(props)}::{_escape(message)}"


def _not_checked(report) -> ScheduleError | None:
    """The error of a kernel call that could not be checked (`importer.CallError`), else None."""
    error = getattr(report, "error", None)
    return error if isinstance(error, ScheduleError) else None


def _not_checked_text(report, e: ScheduleError) -> str:
    return f"{report.title}: not checked: {e.message}" + (f" (fix: {e.fix})" if e.fix else "")


def _github_lines(report) -> list[str]:
    e = _not_checked(report)
    if e is not None:   # no verdict: an error annotation, never silence
        return [_workflow_command("error", e.file or report.file, e.line, "ringc: not checked",
                                  _not_checked_text(report, e))]
    out = []
    for f in report.findings:
        ev = f.event
        out.append(_workflow_command("error" if f.severity == "error" else "warning", _finding_file(report, ev),
                                     int(ev.line) if ev else None, f"ringc [{f.kind}]",
                                     f"{f.message} ({report.title or f'N={report.program.n}'})"))
    return out
