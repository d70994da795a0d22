"""How ringc names an exception of the user's code, everywhere it reports one (script notes,
tests that stopped, entry functions that ran no kernel, failed imports and builds), and
which of them are ringc's own input errors (a device question its stand-in TPU devices do
not answer, `tpu.Unanswered`)."""

from __future__ import annotations

import linecache
import os
from typing import TYPE_CHECKING, Any

from ..errors import ScheduleError

if TYPE_CHECKING:
    from ..limits import LimitStop

__all__ = ["script_line", "describe_exception", "user_failure", "stopped_after_kernels", "stopped_before_kernels"]


def script_line(e: BaseException, path: str) -> int | None:
    """The innermost line of the file at `path` in `e`'s traceback (None if it is not there)."""
    tb, line = e.__traceback__, None
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == os.path.abspath(path):
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _raised_at(e: BaseException, path: str) -> str:
    """Where the user's code raised `e`: `file:line` of the innermost frame outside JAX's and
    ringc's internals, and the script's own line if that frame is in another file."""
    from .tpu import Askers
    askers = Askers(path)
    inner, mine = None, None
    tb = e.__traceback__
    while tb is not None:
        if askers.user(tb.tb_frame):
            inner = (tb.tb_frame.f_code.co_filename, tb.tb_lineno)
            if os.path.abspath(inner[0]) == askers.script:
                mine = inner
        tb = tb.tb_next
    if inner is None:
        return "a line ringc cannot name"
    where = f"{inner[0]}:{inner[1]}"
    code = linecache.getline(inner[0], inner[1]).strip()   # what raised it (an empty AttributeError names nothing)
    where += f" (`{code}`)" if code and len(code) <= 80 else ""
    return where if mine is None or mine == inner else f"{where} (from {path}:{mine[1]})"


def describe_exception(e: BaseException, path: str) -> str:
    """How ringc names an exception from the user's code, everywhere it reports one: `Type:
    the message's first line` (and the two after a first line ending in ':', up to 500
    characters); an exception with no message (an empty `AttributeError:`) is
    named by its type and the user's file:line that raised it."""
    if isinstance(e, SyntaxError) and e.filename and os.path.abspath(e.filename) != os.path.abspath(path):
        return _syntax_elsewhere(e)
    text = str(e).strip()
    if text:
        # The first line, and the two after it when it ends with ':' (JAX's shard_map error
        # names the argument and shapes that do not divide there).
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        shown = lines[0]
        if shown.endswith(":"):
            shown = " ".join(lines[:3])
        if len(shown) > 500:
            shown = shown[:497] + "..."
        return f"{type(e).__name__}: {shown}"
    return f"{type(e).__name__} with no message, raised at {_raised_at(e, path)}"


_RINGC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the ringc package


def _raised_by_ringc(e: BaseException) -> bool:
    """A NameError whose innermost frame is ringc's own code: ringc's bug (it never raises one
    on purpose), not the user's, however deep in the user's call it happened."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return (isinstance(e, NameError) and tb is not None
            and os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_RINGC + os.sep))


def user_failure(e: BaseException, path: str) -> None:
    """Raise the input error for an exception of the user's code that ringc, not the code, is
    the cause of: a device attribute the stand-in TPU devices do not answer (`tpu.Unanswered`),
    an allocation past ringc's `user_code_mib` (`limits.refuse_memory_error`); and re-raise
    ringc's own bug (`_raised_by_ringc`), which would otherwise read as the user's error."""
    if _raised_by_ringc(e):
        raise e
    from ..limits import refuse_memory_error
    from .tpu import QUESTIONS, Unanswered
    refuse_memory_error(e)
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, Unanswered):
            file, line = e.where
            via = " through JAX" if not e.by_user else ""
            if os.path.abspath(file) != os.path.abspath(path):  # a helper asked: name it, point at the script
                via, file, line = f"{via} (at {file}:{line})", path, script_line(e, path)
            if e.by_user:
                raise ScheduleError(
                    f"setup code asked the device for `{e.name}`{via}, which ringc's stand-in TPU "
                    f"{e.generation.name} devices do not answer", file=file, line=line,
                    fix=f"they answer {', '.join(QUESTIONS[:-1])} and pltpu.get_tpu_info() (docs/pallas-import.md, "
                        "\"What ringc answers as a TPU\"); give the value the kernel needs directly, or guard the "
                        "question with hasattr") from None
            raise ScheduleError(
                f"setup code asked the device for `{e.name}`{via}, which ringc's stand-in TPU {e.generation.name} "
                "devices answer only to the script's own code", file=file, line=line,
                fix="JAX's internals see ringc's devices as the CPU devices they are, so that meshes and sharding "
                    "work; ask the device itself (jax.devices()[0].num_cores) or pltpu.get_tpu_info()") from None
        e = e.__cause__ or e.__context__


def limit_stop(errors: list[BaseException], path: str) -> "LimitStop | None":
    """What a test runner caught of a test (unittest and pytest catch every exception, a
    limit's too): the limit that stopped it (`limits.LimitStop`, an allocation past
    `user_code_mib` among them), else None; the other errors through `user_failure`."""
    from ..limits import LimitStop
    for e in errors:
        if isinstance(e, LimitStop):
            return e
        try:
            user_failure(e, path)  # a question ringc cannot answer stops the check
        except LimitStop as stop:
            return stop
    return None


def _syntax_elsewhere(e: SyntaxError) -> str:
    """A SyntaxError in a module the file imports: its whole path and line (a package has many
    `api.py`), and the Python the project asks for where its pyproject.toml names a newer one
    than ringc runs on (`type X = ...`, Python 3.12, read by 3.11)."""
    import sys
    where = f"{e.filename}:{e.lineno}" if e.lineno else e.filename
    said = f"{type(e).__name__}: {e.msg} at {where}"
    needs = _requires_python(e.filename)
    if needs is not None and needs > sys.version_info[:2]:
        said += (f" (its project asks for Python >= {needs[0]}.{needs[1]}; ringc runs on "
                 f"{sys.version_info[0]}.{sys.version_info[1]}: run ringc from a Python that new)")
    return said


def _requires_python(file: str) -> tuple[int, int] | None:
    """The least Python `requires-python` of the nearest pyproject.toml above `file` allows
    (`>=3.12` -> (3, 12)); None where there is none or it says no `>=` bound."""
    import re
    import tomllib
    from pathlib import Path
    for folder in Path(os.path.abspath(file)).parents:
        project = folder / "pyproject.toml"
        if project.is_file():
            try:
                spec = tomllib.loads(project.read_text()).get("project", {}).get("requires-python", "")
            except (OSError, ValueError):
                return None
            m = re.search(r">=\s*(\d+)\.(\d+)", str(spec))
            return (int(m.group(1)), int(m.group(2))) if m else None
    return None


def stopped_after_kernels(test: str, e: BaseException, path: str) -> str | None:
    """The note for a test that stopped with `e` after its first kernel calls, where `e` is no
    failed check of the placeholder results (an assert, a numpy or JAX test helper's
    comparison): a package it imports there (jax-llm-examples' `from tune_jax import tune`
    before its tuned block sizes), a name it lacks. None for a failed check: expected."""
    if isinstance(e, AssertionError):
        return None
    said, line = describe_exception(e, path), script_line(e, path)
    at = f" at line {line}" if line else ""
    return (f"test {test} stopped{at} after its first kernel calls ({said}): the kernel calls it would have made "
            "after that were not checked")


def stopped_before_kernels(test: str, e: BaseException, path: str, imports: Any = None) -> str:
    """The note for a test that stopped before any kernel call with `e`, naming the stub call
    whose stand-in value stopped it when one did (`imports.Imports.blame`)."""
    said = describe_exception(e, path)
    blame = imports.blame(said, 0, type(e).__name__) if imports is not None and "Stub" in said else ""
    return f"test {test} stopped before any kernel call ({said}{blame}): its kernels were not checked"
