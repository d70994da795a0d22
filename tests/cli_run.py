"""Run `ringc` in-process with a time budget: the harness of the bad-input and fuzz tests.

`run_cli(argv)` calls `ringc.cli.main(argv)` with stdout and stderr captured, turns
argparse's `SystemExit` into its exit code, and interrupts the call with `Overtime` (a
BaseException, so the CLI's own `except Exception` cannot swallow it) when it runs past
its budget: a hang is a test failure, not a stuck test run.
"""

from __future__ import annotations

import io
import signal
import time
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from typing import Sequence

from ringc import cli


class Overtime(BaseException):
    """The command ran past its time budget."""


@dataclass
class Outcome:
    argv: list[str]
    code: int
    out: str
    err: str
    seconds: float

    def __str__(self) -> str:
        return (f"ringc {' '.join(self.argv)}\n  exit {self.code} in {self.seconds:.2f}s\n"
                f"  stdout: {self.out[-800:]!r}\n  stderr: {self.err[-1500:]!r}")


def run_cli(argv: Sequence[str], budget: float = 10.0) -> Outcome:
    argv = [str(a) for a in argv]
    out, err = io.StringIO(), io.StringIO()

    def overtime(*_):
        raise Overtime(f"ringc {' '.join(argv)[:300]} ran past its budget of {budget}s")

    previous = signal.signal(signal.SIGALRM, overtime)
    signal.setitimer(signal.ITIMER_REAL, budget)
    start = time.perf_counter()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = cli.main(argv)
            except SystemExit as e:  # argparse: bad arguments exit 2, --help exits 0
                code = e.code if isinstance(e.code, int) else 2
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    seconds = time.perf_counter() - start
    return Outcome(argv, code, out.getvalue() if not out.closed else "", err.getvalue() if not err.closed else "",
                   seconds)


def assert_clean(o: Outcome) -> None:
    """What every outcome must be: exit 0, 1 or 2, and no traceback or internal error."""
    assert o.code in (0, 1, 2), str(o)
    assert "Traceback" not in o.err + o.out and "internal error" not in o.err, str(o)


def assert_refused(o: Outcome, line: int | None = None, *, says: str = "", seconds: float = 3.0) -> None:
    """Bad input: exit 2, one message (with `file:line:` when `line` is given) and a fix,
    quickly. (The issue asks for well under a second; the bound here leaves room for a
    loaded CI machine, and the measured times are in the report.)"""
    assert_clean(o)
    assert o.code == 2, str(o)
    if line is not None:
        assert f":{line}: error:" in o.err, str(o)
    assert says in o.err, str(o)
    assert o.seconds < seconds, str(o)
