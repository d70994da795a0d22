"""How ringc names an exception of the user's code, everywhere it reports one (script notes,
tests that stopped, entry functions that ran no kernel, failed imports and builds), and
which of them are ringc's own input errors (a device question its stand-in TPU devices do
not answer, `tpu.Unanswered`)."""

from __future__ import annotations

import os

from ..errors import ScheduleError

__all__ = ["script_line", "describe_exception", "user_failure"]


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
    return where if mine is None or mine == inner else f"{where} (from {path}:{mine[1]})"


def describe_exception(e: BaseException, path: str) -> str:
    """How ringc names an exception from the user's code, everywhere it reports one: `Type:
    the message's first line` (and the two after a first line ending in ':', up to 500
    characters); an exception with no message (an empty `AttributeError:`) is
    named by its type and the user's file:line that raised it."""
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


def user_failure(e: BaseException, path: str) -> None:
    """Raise the input error for an exception of the user's code that ringc, not the code, is
    the cause of: a device attribute the stand-in TPU devices do not answer (`tpu.Unanswered`),
    an allocation past ringc's `user_code_mib` (`limits.refuse_memory_error`)."""
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
