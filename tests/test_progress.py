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
    assert json.loads(run.stdout)["reports"][0]["collective"] == "psum"  # the document is untouched
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


def _on_a_terminal(*argv: str) -> tuple[float, bytes, bytes]:
    """Run ringc with stderr on a pseudo-terminal of 100 columns (stdout a pipe): seconds,
    what reached the terminal, stdout."""
    import fcntl
    import pty
    import struct
    import termios
    import time
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    env = {k: v for k, v in os.environ.items() if k != "RINGC_PROGRESS"}
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "ringc", *argv], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=slave)
    os.close(slave)
    err = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        err += chunk
    out = proc.communicate(timeout=300)[0]
    os.close(master)
    assert proc.returncode == 0, err
    return time.monotonic() - start, err, out


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_a_terminal_sees_progress_after_two_seconds_and_a_clean_line_after():
    seconds, err, out = _on_a_terminal("cost", "--collective", "psum", "--topology", "ring:16", "--sweep",
                                       "4KiB..1GiB")
    if seconds < progress.DELAY + 1.5:
        pytest.skip(f"ranked in {seconds:.1f}s: too fast for a bar")
    assert b"ranking psum" in err and b"%|" in err and b"estimate/s" in err
    assert err.endswith(b"\r")  # the bar is cleared: the terminal is left as the command's output left it
    assert b"%|" not in out and b"all_reduce_ring" in out
    _, err, out = _on_a_terminal("cost", "--collective", "psum", "--topology", "ring:8", "--sweep", "4KiB..8KiB")
    assert b"%|" not in err and b"ranking" not in err  # done within the delay: never a bar


def test_synth_shows_its_pricing_and_verifying_when_forced():
    """`ringc synth` prices every candidate and then checks (and compiles) the fastest: minutes
    on a slice without symmetry (v5e:8x16), so both show on stderr, never on stdout."""
    run = _ringc("synth", "psum", "--topology", "ring:8", "--bytes", "1MiB", "--no-compile", progress_env="1")
    assert run.returncode == 0, run.stderr
    assert "pricing psum candidates on ring:8" in run.stderr and "candidate" in run.stderr
    assert "verifying the fastest" in run.stderr
    assert "%|" not in run.stdout and "ringc synth psum on ring:8" in run.stdout
    run = _ringc("synth", "psum", "--topology", "ring:8", "--bytes", "1MiB", "--no-compile", progress_env=None)
    assert run.returncode == 0 and "pricing" not in run.stderr


def test_a_long_run_of_the_files_own_code_says_so_where_no_bar_shows(tmp_path, monkeypatch):
    """Into a pipe or a CI log no bar is drawn: a script whose own code runs long (a benchmark
    cell, a dense reference on CPU devices) gets a line on stderr every `limits.HEARTBEAT_S`
    naming the line it is at and the limit, instead of minutes of silence (sweep 16). None
    with -q, none from Python."""
    import sys as _sys
    sys.path.insert(0, str(REPO / "tests"))
    from cli_run import run_cli
    from ringc import limits
    from ringc.pallas import check_file
    monkeypatch.setattr(limits, "HEARTBEAT_S", 0.3)
    monkeypatch.setenv("RINGC_PROGRESS", "0")
    path = tmp_path / "slow_tail.py"
    path.write_text("import time\nimport jax, jax.numpy as jnp\nfrom jax.experimental import pallas as pl\n\n"
                    "def k(x_ref, o_ref):\n    o_ref[...] = x_ref[...]\n\n"
                    "y = pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32))(jnp.zeros((8, 128)))\n"
                    "for _ in range(12):\n    time.sleep(0.1)\n")
    o = run_cli(["check", str(path), "--devices", "2"], budget=120)
    assert o.code == 0, str(o)
    assert f"ringc: {path}: its own code has run for" in o.err and ", now at line 10;" in o.err, o.err
    assert "limit user_code_s = 300 s: --limit user_code_s=VALUE" in o.err
    quiet = run_cli(["check", str(path), "--devices", "2", "-q"], budget=120)
    assert "its own code has run for" not in quiet.err, quiet.err
    monkeypatch.setattr(_sys, "stderr", io.StringIO())
    check_file(str(path), 2)
    assert "its own code has run for" not in _sys.stderr.getvalue()
