"""Every size limit on ringc's input, in one table: name, default, what it bounds.

Each limit is checked before the work it bounds starts (the file before it is read, a
device count before a topology is built, an unrolling's event count before it runs), so
an input past a limit fails at once with exit 2, naming the limit and how to raise it.
The defaults admit any real pod (4,096 chips; v5p pods have 8,960) and any real kernel;
they stop inputs whose work would not finish (a YAML "billion laughs", a ring of a
hundred thousand devices, `--invocations 100000`).

A limit is raised for one run with `--limit NAME=VALUE` (every command), or for a shell
with the environment variable `RINGC_LIMIT_<NAME>` (e.g. `RINGC_LIMIT_DEVICES=20000`).
The README's limits table is tested against `LIMITS` (tests/test_bad_input.py).
"""

from __future__ import annotations

import os
import resource
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from .errors import LimitError, ScheduleError

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1


@dataclass(frozen=True)
class Limit:
    name: str
    default: int
    what: str   # what it bounds, for the README table and the message

    @property
    def env(self) -> str:
        return f"RINGC_LIMIT_{self.name.upper()}"

    @property
    def how_to_raise(self) -> str:
        return f"--limit {self.name}=VALUE or {self.env}=VALUE"


LIMITS: dict[str, Limit] = {lim.name: lim for lim in (
    Limit("schedule_bytes", 1 << 20, "size of a schedule file in bytes"),
    Limit("yaml_nodes", 100_000, "YAML nodes after expanding aliases (a 'billion laughs' file stops here)"),
    Limit("yaml_depth", 64, "nesting depth of YAML mappings and lists"),
    Limit("op_depth", 16, "nesting depth of `when`, `loop` and `pipeline` blocks"),
    Limit("expr_chars", 1_000, "characters in one expression or reference"),
    Limit("expr_depth", 64, "nesting depth of one expression (operators, parentheses, calls)"),
    Limit("devices", 16_384, "devices in one check, run, cost, show or compile target "
                             "(--devices, --mesh, --topology, --target)"),
    Limit("run_devices", 64, "devices for `ringc run` (interpret mode simulates each on the CPU)"),
    Limit("grid_points", 10_000_000, "grid points per device, nested pipeline points included "
                                     "(check, cost, show, run)"),
    Limit("events", 50_000_000, "events unrolled for one check, cost or show: devices x invocations x grid "
                                "points x ops, counted before unrolling; a cost timed on every device (not "
                                "translation-symmetric, or show) counts devices^2 x one device's events"),
    Limit("timed_events", 1_000_000, "events timed by `ringc cost` (and tune, sweeps): device 0's on the "
                                     "symmetric quotient, else every device's, counted from above before unrolling (a timed event costs "
                                     "about 0.1 ms of fluid-network simulation); a long pipeline priced from its "
                                     "steady state counts the events its run times"),
    Limit("timed_flows", 10_000_000, "transfers re-rated by `ringc cost`'s timed run, summed over every start "
                                    "and end of a transfer (each re-rates all those in flight: a one-shot send "
                                    "to each of 4,096 chips at once re-rates about 16 million), counted as it "
                                    "runs (a re-rating costs 3-4 us; `ringc synth` prices its candidates "
                                    "under 2 million unless this limit is set)"),
    Limit("data_samples", 1_000, "runtime data samples checked with --data (random:K, or the samples of a data "
                                  "file): each sample is one whole check"),
    Limit("invocations", 64, "back-to-back kernel calls checked (--invocations)"),
    Limit("buffer_bytes", 1 << 40, "bytes of one per-device buffer, for the chosen parameters and N"),
    Limit("size_bytes", 1 << 50, "collective size given with --bytes or --sweep"),
    Limit("loop_iterations", 1_000_000, "iterations of one `while` loop (a fori_loop) ringc unrolls in a traced "
                                        "Pallas program, in a kernel or around pallas_calls"),
    Limit("gpu_events", 5_000_000, "events of one Mosaic GPU kernel call over every GPU, block and warpgroup "
                                   "(about 1 KB of memory each), estimated from the first block evaluated and "
                                   "counted as the blocks are evaluated"),
    Limit("gpu_processes", 20_000, "processes of one Mosaic GPU kernel call: GPUs x blocks x warpgroups, each "
                                   "evaluated and checked as a process of its own (132 blocks of an H100 on 8 GPUs "
                                   "with 3 warpgroups is 3,168)"),
    Limit("user_code_s", 300, "seconds the checked file's own code may run in `ringc check FILE.py` (importing "
                              "it, its statements, test methods and entry functions, build and make_inputs, "
                              "with the tracing of what they call)"),
    Limit("user_code_mib", 16_384, "MiB of memory ringc's process may hold while the checked file's own code runs "
                                   "(its arrays are allocated on the CPU devices: a benchmark at full size can "
                                   "take more than the machine has), checked every half second; one allocation "
                                   "past it by more than a quarter of it (which the system would kill the process "
                                   "for before the next look) fails at once, under a limit on the process's data "
                                   "size while that code runs"),
)}

_overrides: dict[str, int] = {}


def value(name: str) -> int:
    """The limit in force: a `--limit` override, else the environment, else the default."""
    lim = LIMITS[name]
    if name in _overrides:
        return _overrides[name]
    env = os.environ.get(lim.env)
    if env is not None:
        return parse_value(name, env, lim.env)
    return lim.default


def parse_value(name: str, text: str, source: str) -> int:
    try:
        v = int(str(text).strip().replace("_", ""))
    except ValueError:
        v = 0
    if not 1 <= v <= INT64_MAX:
        raise ScheduleError(f"{source}: limit `{name}` must be a positive integer, got {text!r}",
                            fix=f"e.g. {source}={LIMITS[name].default}")
    return v


def parse_override(text: str) -> tuple[str, int]:
    """`NAME=VALUE` for `--limit`. Raises ScheduleError for an unknown name or a bad value."""
    name, sep, v = text.partition("=")
    name = name.strip()
    if not sep or name not in LIMITS:
        raise ScheduleError(f"--limit {text!r}: expected NAME=VALUE with NAME one of {', '.join(LIMITS)}",
                            fix="see the limits table in README.md")
    return name, parse_value(name, v, f"--limit {name}")


@contextmanager
def overridden(values: Mapping[str, int]) -> Iterator[None]:
    """Limits raised (or lowered) for the duration of one command."""
    saved = dict(_overrides)
    _overrides.update(values)
    try:
        yield
    finally:
        _overrides.clear()
        _overrides.update(saved)


def apply(name: str, value_: int) -> None:
    """Set limit `name` for the rest of the command (`ringc.cli.main` restores the limits after
    each command): a project's `[tool.ringc] limits`."""
    _overrides[name] = value_


def check(name: str, amount: int | float, what: str, *, file: str | None = None, line: int | None = None,
          fix: str | None = None) -> None:
    """Raise LimitError (a ScheduleError) when `amount` exceeds limit `name`: `what` says what
    was counted."""
    limit = value(name)
    if amount > limit:
        raise LimitError(f"{what} is {amount:,}, over the limit `{name}` of {limit:,}", limit=name, amount=amount,
                         file=file, line=line,
                         fix=(f"{fix}; or " if fix else "") + f"raise the limit with {LIMITS[name].how_to_raise}")


class LimitStop(BaseException):
    """A limit on the user's code stopped it (a BaseException: the user's `except Exception`
    cannot swallow it). A test runner that catches every exception of a test (unittest and
    pytest both do) stops there, `where` saying which test it was in (`script._run_tests`)."""
    where = ""   # a test module: "in test T (k of the module's n tests)"


class _OverMemory(LimitStop):
    """The process held more than `user_code_mib` while the user's code ran (`mib`), or one
    allocation of it failed under the data size limit (`asked`: its MemoryError's words)."""

    def __init__(self, line: int | None, mib: int, asked: str = ""):
        super().__init__(line, mib, asked)
        self.line, self.mib, self.asked = line, mib, asked


def resident_mib() -> int:
    """The process's resident memory in MiB (0 where /proc is not there)."""
    return _status_mib("VmRSS")


TICK_S = 0.5   # how often the user's code is looked at for `user_code_mib`
HEARTBEAT_S = 60   # how often a long run of the user's code says so where no bar shows (`progress.heartbeat`)


def relieve_memory(notes: list[str]) -> None:
    """Between the tests of a test module: when the process holds over half of `user_code_mib`,
    clear JAX's caches of traced and compiled functions (each test's shapes compile anew:
    JetStream's 864-test paged attention module grew to 14 GB, about 9 MB a test, sweep 17),
    so that a long module runs to its end instead of into the limit; said once in `notes`.
    Clearing costs the retracing, so it is done only under that pressure."""
    if resident_mib() <= value("user_code_mib") // 2:
        return
    import gc
    import jax
    jax.clear_caches()
    gc.collect()
    note = ("the process held over half of `user_code_mib` between tests, so ringc cleared JAX's caches of traced and "
            "compiled functions there (the tests after it traced their functions again)")
    if note not in notes:
        notes.append(note)


def _status_mib(field: str) -> int:
    """A `/proc/self/status` figure (VmData, VmRSS) in MiB; 0 where it is not there."""
    try:
        with open("/proc/self/status") as f:
            for row in f:
                if row.startswith(field + ":"):
                    return int(row.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


# The files whose code a limit stopped in this process: what they left in flight on the CPU
# devices (a matmul of the tutorial's 8192 x 8192 arrays) would hold the process at its exit.
STOPPED: list[str] = []
# Set by the `ringc` command (`cli.console`), never by the Python API: a file's code blocked
# past `user_code_s` inside a call that does not come back to Python (an XLA computation's
# `block_until_ready`, where no signal handler runs) ends the whole process
# (`user_code_time`'s watchdog), `WATCHDOG_GRACE_S` after the limit.
END_PROCESS_WHEN_BLOCKED = False
WATCHDOG_GRACE_S = 5.0
DATA_MARGIN_MIB = 2048   # how far past `user_code_mib` one allocation may reach before it fails at once
_capped: list[str] = []   # the file whose code runs under `_data_limit` now, if any


def refuse_memory_error(e: BaseException) -> None:
    """Where the user's code raised a MemoryError under `_data_limit` (an allocation past
    `user_code_mib`, ringc's limit, not the code's fault), stop the check with the limit's
    message (a BaseException, past the handlers that note the user's errors and go on). An
    allocation of XLA's that failed so (`RESOURCE_EXHAUSTED: Out of memory allocating ...`,
    raised where the array is first read: JAX dispatches its work asynchronously) is one too."""
    if not _out_of_memory(e) or not _capped:
        return
    line, tb = None, e.__traceback__
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == _capped[-1]:
            line = tb.tb_lineno
        tb = tb.tb_next
    raise _OverMemory(line, resident_mib(), str(e).strip().rstrip(".") or "MemoryError") from None


def _out_of_memory(e: BaseException) -> bool:
    """A failed allocation: Python's MemoryError, or XLA's on the CPU devices."""
    return isinstance(e, MemoryError) or (type(e).__name__ in ("JaxRuntimeError", "XlaRuntimeError")
                                          and "RESOURCE_EXHAUSTED" in str(e))


@contextmanager
def _data_limit(most_mib: int, target: str) -> Iterator[None]:
    """While the user's code runs, let the process's data size (`RLIMIT_DATA`, its writable
    private memory, what one `np.ones` of 20 GiB asks for at once) grow only by what is left
    of `user_code_mib` over what it holds now, and a margin (a quarter of the limit, at least
    `DATA_MARGIN_MIB`): such an allocation then fails at its line with a MemoryError, which
    the caller reports, where the looks every `TICK_S` come too late (the system kills the
    process while the one C call fills the array). A limit already lower is kept; where the
    platform has none, nothing is set."""
    data = _status_mib("VmData")
    if not data or not hasattr(resource, "RLIMIT_DATA"):
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    # A margin over the limit: gradual growth is the looks' to stop, with their message (an
    # allocation of XLA's own that failed here would abort the process with nothing said).
    want = (data + max(most_mib - resident_mib(), 256) + max(DATA_MARGIN_MIB, most_mib // 4)) * 2**20
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    if soft != resource.RLIM_INFINITY and soft <= want:
        yield
        return
    resource.setrlimit(resource.RLIMIT_DATA, (want, hard))
    _capped.append(target)
    try:
        yield
    except Exception as e:   # a failed allocation raised where no handler of ringc's saw it
        refuse_memory_error(e)
        raise
    finally:
        _capped.pop()
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


class _OverTime(LimitStop):
    """The user's code ran past `user_code_s`; `line` is the line of the user's file it was
    running."""

    def __init__(self, line: int | None):
        super().__init__(line)
        self.line = line


@contextmanager
def user_code_time(file: str, what: str = "the file's own code") -> Iterator[None]:
    """Run the user's code (in `file`) under the `user_code_s` limit, wall-clock, and the
    `user_code_mib` limit on the process's resident memory (looked at every `TICK_S`). Past
    either, raise ScheduleError naming `file`, the line its code was at, the limit and how to
    raise it. Uses SIGALRM, so it applies in the main thread of a POSIX process (elsewhere the
    code runs unbounded); an outer SIGALRM timer (a test's budget) keeps its own deadline."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return
    seconds = value("user_code_s")
    most_mib = value("user_code_mib")
    target = os.path.abspath(file)
    now = time.monotonic()
    ours = now + seconds
    outer_handler = signal.getsignal(signal.SIGALRM)
    outer_left = signal.getitimer(signal.ITIMER_REAL)[0]
    outer = now + outer_left if outer_left else None

    def on_alarm(signum, frame):
        if outer is not None and time.monotonic() >= outer - 1e-3 and callable(outer_handler):
            outer_handler(signum, frame)  # the outer timer's turn (it may raise)
        over_time = time.monotonic() >= ours - 1e-3
        held = resident_mib()
        if over_time or held > most_mib:
            line = _user_line(frame, target)
            raise _OverTime(line) if over_time else _OverMemory(line, held)
        at = time.monotonic()
        if at - now >= beats[0] * HEARTBEAT_S:   # a line now and then where no bar shows
            beats[0] += 1
            from . import progress
            progress.heartbeat(file, at - now, _user_line(frame, target), seconds)
        nxt = min(ours, at + TICK_S, *([outer] if outer is not None and outer > at else []))
        signal.setitimer(signal.ITIMER_REAL, max(nxt - at, 1e-3))

    beats = [1]   # the next heartbeat, in HEARTBEAT_S
    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(min(ours, outer or ours, now + TICK_S) - now, 1e-3))
    left = threading.Event()
    if END_PROCESS_WHEN_BLOCKED:
        threading.Thread(target=_watchdog, args=(left, ours, target, file, what), daemon=True,
                         name="ringc-user-code-watchdog").start()
    try:
        with _data_limit(most_mib, target):
            yield
    except LimitStop as e:
        raise stopped_error(e, file, what) from None
    finally:
        left.set()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer_handler)
        if outer is not None:
            signal.setitimer(signal.ITIMER_REAL, max(outer - time.monotonic(), 1e-3))


def _watchdog(left: threading.Event, deadline: float, target: str, file: str, what: str) -> None:
    """The limit where SIGALRM cannot reach: the main thread blocked in a call that does not
    come back to Python (XLA's `BlockUntilReady` waits with the GIL released, and a Python
    signal handler runs only between bytecodes). Past the deadline and a grace, with the
    code still not left, say the limit's message at the line the code is blocked on and end
    the process (`END_PROCESS_WHEN_BLOCKED`: the command only)."""
    import sys
    if left.wait(max(deadline - time.monotonic(), 0.0) + WATCHDOG_GRACE_S):
        return
    frame = sys._current_frames().get(threading.main_thread().ident)
    e = stopped_error(_OverTime(_user_line(frame, target)), file, what)
    e.message += ("; it was blocked in a computation that does not come back to Python (JAX waiting for the CPU "
                  "devices), so ringc ended the command there: the kernel calls the code made before it were "
                  "not checked")
    try:
        sys.__stdout__.flush()
        print(str(e), file=sys.__stderr__, flush=True)   # (the code's own output is being captured)
    except BaseException as err:   # (the process ends either way)
        os.write(2, f"ringc: {e} ({type(err).__name__})\n".encode())
    os._exit(2)


def _user_line(frame: Any, target: str) -> int | None:
    """The line of the user's file (`target`, absolute) the innermost frame of it is at."""
    while frame is not None:
        if os.path.abspath(frame.f_code.co_filename) == target:
            return frame.f_lineno
        frame = frame.f_back
    return None


def stopped_error(e: LimitStop, file: str, what: str = "the file's own code") -> ScheduleError:
    """The one message for a limit that stopped the user's code in `file`: which limit, the
    line it was at (and the test), and the fix. The work the code left in flight on the CPU
    devices is not waited for at exit (`STOPPED`)."""
    STOPPED.append(file)
    if isinstance(e, _OverMemory):
        most_mib = value("user_code_mib")
        held = (f"asked for memory past the limit `user_code_mib` ({most_mib:,} MiB): {e.asked}" if e.asked else
                f"made ringc's process hold {e.mib:,} MiB, past the limit `user_code_mib` ({most_mib:,} MiB)")
        return ScheduleError(f"{what} {held}" + _at(e), file=file, line=e.line,
                             fix="run it at smaller sizes (its own knobs: environment variables, flags or "
                                 "constants; its arrays are allocated for real on the CPU devices), "
                                 + _fewer_tests(e) + f"or raise the limit with {LIMITS['user_code_mib'].how_to_raise}")
    return ScheduleError(f"{what} ran for {value('user_code_s'):,} s, the limit `user_code_s`" + _at(e), file=file,
                         line=getattr(e, "line", None),
                         fix=("" if e.where else "look for a loop that never ends, work that waits on devices, or a "
                                                  "benchmark at its published sizes (a tutorial's timing loop: run it "
                                                  "at smaller sizes with its own knobs); ")
                             + _fewer_tests(e) + f"or raise the limit with {LIMITS['user_code_s'].how_to_raise}")


def _at(e: LimitStop) -> str:
    """Where the stopped code was: its line, and the test it was in."""
    line = getattr(e, "line", None)
    return (f"; it was at line {line}" if line else "") + (f", {e.where}" if e.where else "")


def _fewer_tests(e: LimitStop) -> str:
    """A test module's remedy: check fewer of its tests at a time (the kernel calls of the
    tests before the one it stopped in are checked: their verdicts come first)."""
    return "check fewer of its tests at a time with --test NAME (a test's name or a part of it), " if e.where else ""


def check_int64(v: int, what: str, *, file: str | None = None, line: int | None = None) -> int:
    """Integers are 64-bit in the emitted kernel and in JAX: refuse others where they are read."""
    if not INT64_MIN <= v <= INT64_MAX:
        digits = len(str(abs(v))) if abs(v) < 10**100 else "over 100"
        raise ScheduleError(f"{what}: an integer of {digits} digits is outside the 64-bit range", file=file,
                            line=line, fix=f"use an integer between {INT64_MIN} and {INT64_MAX}")
    return v


def markdown_table() -> str:
    """The README's limits table (tests compare the README with this)."""
    rows = ["| limit | default | bounds |", "|---|---|---|"]
    rows += [f"| `{lim.name}` | {lim.default:,} | {lim.what} |" for lim in LIMITS.values()]
    return "\n".join(rows)
