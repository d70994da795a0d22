"""Progress on stderr (ringc/progress.py): drawn when forced on (RINGC_PROGRESS=1) or on a
terminal, never on a pipe, never on stdout, gone by the time the command's output is read."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ringc import progress

REPO = Path(__file__).resolve().parent.parent


def _ringc(*argv: str, progress_env: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RINGC_PROGRESS"}
    if progress_env is not None:
        env["RINGC_PROGRESS"] = progress_env
    return subprocess.run([sys.executable, "-m", "ringc", *argv], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


RANK = ("cost", "--collective", "psum", "--topology", "ring:8", "--sweep", "4KiB..16KiB")


def test_rank_shows_progress_when_forced_and_never_on_stdout():
    run = _ringc(*RANK, progress_env="1")
    assert run.returncode == 0, run.stderr
    assert "ranking psum" in run.stderr and "estimate" in run.stderr
    assert "%|" not in run.stdout and "ranking psum" not in run.stdout
    run = _ringc(*RANK, "--format", "json", progress_env="1")
    assert json.loads(run.stdout)["collective"] == "psum"  # the document is untouched
    assert "ranking psum" in run.stderr


def test_no_progress_when_stderr_is_not_a_terminal():
    for argv in (RANK, ("check", "schedules/all_gather_ring.yaml", "schedules/all_reduce_ring.yaml",
                        "--devices", "4")):
        run = _ringc(*argv, progress_env=None)  # stderr is a pipe here
        assert run.returncode == 0, run.stderr
        assert "%|" not in run.stderr and "ranking" not in run.stderr
    assert "%|" not in _ringc(*RANK, progress_env="0").stderr


def test_check_over_files_and_tune_show_progress_when_forced():
    run = _ringc("check", "schedules/all_gather_ring.yaml", "schedules/all_reduce_ring.yaml", "--devices", "4",
                 progress_env="1")
    assert run.returncode == 0
    assert "checking schedules/all_gather_ring.yaml" in run.stderr and "file" in run.stderr
    assert "%|" not in run.stdout and run.stdout.count(": ok") == 2
    run = _ringc("tune", "schedules/reduce_scatter_chunked.yaml", "--topology", "ring:4", "--bytes", "1MiB",
                 "--param-range", "chunks=1,2", "--no-compile", progress_env="1")
    assert run.returncode == 0, run.stderr
    assert "tuning reduce_scatter_chunked" in run.stderr and "verifying chunks=" in run.stderr
    assert "best: chunks=" in run.stdout and "%|" not in run.stdout


class _Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_wanted_follows_the_terminal_and_the_environment(monkeypatch):
    monkeypatch.delenv("RINGC_PROGRESS", raising=False)
    assert progress.wanted(_Stream(True)) and not progress.wanted(_Stream(False))
    monkeypatch.setenv("RINGC_PROGRESS", "0")
    assert not progress.wanted(_Stream(True))
    monkeypatch.setenv("RINGC_PROGRESS", "1")
    assert progress.wanted(_Stream(False))


def test_library_calls_draw_nothing(monkeypatch, capsys):
    """ringc used from Python (not the CLI) never draws, even when forced."""
    monkeypatch.setenv("RINGC_PROGRESS", "1")
    with progress.bar(3, "quiet") as bar:
        bar.update()
    assert capsys.readouterr().err == ""
