"""Progress on stderr for the commands that take a while (tqdm).

`ringc cost --collective ... --sweep`, `ringc tune`, `ringc synth` (its pricing, then the
checks of the fastest), a script or test module under `ringc check` and a `ringc check` over
several files show a bar on stderr once they have run for
2 seconds, and only when stderr is a terminal: a pipe, a file, CI logs and `--format
json`/`sarif` (whose document is on stdout) never see one, nor does `check -q`. `RINGC_PROGRESS=1` shows it
whatever stderr is, from the start (for a terminal emulator that is not a tty, and for the
tests); `RINGC_PROGRESS=0` turns it off. The bar is cleared when the work is done, so what
is left on the screen is the command's own output.

Library code calls `bar(...)`; outside the command line (`active()` is false: ringc used
from Python, a pytest run) it is a no-op, so nothing but the CLI draws on a user's stderr.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Iterator

DELAY = 2.0      # seconds of work before a bar appears on a terminal
TICK = 0.5       # how often an open bar redraws its elapsed time while nothing completes

_active = False  # set by the command line (`enabled_for_command`)
_told = None     # the command line's stderr, where it may say how long work runs, bar or not (`heartbeat`)


def wanted(stream=None) -> bool:
    """Whether a bar may be drawn on `stream` (stderr): RINGC_PROGRESS=1/0 decides, else
    whether it is a terminal."""
    flag = os.environ.get("RINGC_PROGRESS", "").strip().lower()
    if flag in ("1", "true", "yes", "on"):
        return True
    if flag in ("0", "false", "no", "off"):
        return False
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def forced() -> bool:
    return os.environ.get("RINGC_PROGRESS", "").strip().lower() in ("1", "true", "yes", "on")


def active() -> bool:
    return _active


@contextlib.contextmanager
def enabled_for_command(on: bool = True) -> Iterator[None]:
    """Around one CLI command: bars may be drawn (if `wanted()`)."""
    global _active, _told
    before, _active = _active, on and wanted()
    told, _told = _told, sys.stderr if on else None   # (the checked file's own output is redirected)
    try:
        yield
    finally:
        _active, _told = before, told


def heartbeat(file: str, seconds: float, line: int | None, limit: int) -> None:
    """Where no bar is drawn (a pipe, a CI log) but a command line runs: one line on stderr
    each `limits.HEARTBEAT_S` of the checked file's own code (a benchmark cell, a dense
    reference on CPU), so a long run is not silence; `limit` is `user_code_s`. Nothing from
    Python or with `-q`."""
    if _told is None or _active:
        return
    print(f"ringc: {file}: its own code has run for {seconds:.0f} s" + (f", now at line {line}" if line else "")
          + f"; the kernel calls it made are checked when it ends (limit user_code_s = {limit:,} s: "
          "--limit user_code_s=VALUE)", file=_told, flush=True)


class _Null:
    """A bar that draws nothing."""
    def update(self, n: int = 1) -> None: ...
    def describe(self, text: str) -> None: ...
    def close(self) -> None: ...
    def __enter__(self): return self
    def __exit__(self, *exc) -> None: ...

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        yield


class _Bar:
    """A tqdm bar on stderr that redraws its elapsed time while a long step runs (a script
    check can spend 40 s in one step) and disappears when closed."""

    def __init__(self, total: int | None, desc: str, unit: str):
        from tqdm import tqdm
        self._bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False, dynamic_ncols=True,
                         delay=0.0 if forced() else DELAY, mininterval=0.2,
                         bar_format=None if total else "{desc} [{elapsed}]")
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, daemon=True, name="ringc-progress")
        self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(TICK):
            self._bar.update(0)  # redraws (elapsed time) once `delay` has passed

    def update(self, n: int = 1) -> None:
        self._bar.update(n)

    def describe(self, text: str) -> None:
        self._bar.set_description_str(text, refresh=False)

    def close(self) -> None:
        self._stop.set()
        self._ticker.join()
        self._bar.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Clear the bar while the command prints a result to the same terminal."""
        with self._bar.external_write_mode(file=sys.stderr):
            yield


def bar(total: int | None, desc: str, unit: str = "it"):
    """A progress bar for `total` steps (None: one long step, its elapsed time), or a no-op one
    outside the command line, when stderr is not a terminal, or without tqdm."""
    if not _active:
        return _Null()
    try:
        return _Bar(total, desc, unit)
    except ImportError:  # tqdm is a base dependency; a broken install loses the bar only
        return _Null()
