"""ringc's pytest plugin: `pytest --ringc` checks every distributed Pallas TPU kernel your
tests run, with the tests' own arguments and meshes, and `ringc check test_file.py` on a
pytest-style test module (`ringc.pallas.pytests.run_pytest_module`).

Registered as the `pytest11` entry point `ringc` (pyproject.toml); off unless `--ringc` is
given (or `-p ringc.pytest_plugin --ringc` where ringc is not installed as a distribution).
When on:

- Every top-level call of a jitted function a test makes whose program runs a `pallas_call`
  under `shard_map` with DMAs or semaphores (a collective kernel) is *recorded* -- its
  traced program, its arguments, the test file's line -- and then **runs as usual**, so the
  test's own assertions still hold (`ringc check script.py` instead returns zeros). The
  hook is the one `script._capturing` uses (`jaxprs.jitted_calls`): JAX's
  path for a jitted call it has not compiled yet for these argument types. A jitted function
  called again with the same types runs from JAX's C++ cache and is not seen again: the
  test that first runs it carries its verdict.
- After the test body, each *distinct* kernel (its kernel jaxprs and grid mappings, the
  argument shapes, dtypes and small integer values, the mesh, the options) is checked once
  per session (`importer.check_capture`, what `ringc check` runs on a captured call), on
  the mesh the test used. A FAILED verdict fails every test that runs that kernel, with
  the finding at the kernel's file:line and the run that shows it (`--explain`'s lines).
  A kernel ringc cannot check (an unsupported primitive) is a warning, not a failure.
- A `lax` collective the test computes under `shard_map` on the same input array as a
  recorded kernel (`lax.ppermute(x, ...)` as the reference) names the meaning to check it
  against, as in `ringc check`.
- `@pytest.mark.ringc(skip=True)`, `@pytest.mark.ringc(dma_order="in-order")`,
  `@pytest.mark.ringc(invocations=2)` adjust one test (or a class or module: `pytestmark`);
  `--ringc-dma-order` and `--ringc-invocations` set the session's defaults.
- The terminal summary says how many distinct kernels were checked, ok, failed, not
  checked, and the seconds spent, and states the verdicts' assumptions once.

Only the size the test traced is checked: ringc sees a traced program, fixed to the test's
mesh and arrays, and nothing in it says how the test would build them for another N (for
other sizes, parametrize the test over meshes, or check a `build(mesh)` module with
`ringc check --devices 2..8`).
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from typing import Any, Iterator

import pytest

from .pallas.pytests import MARKER  # noqa: E402 (one text for the marker, registered by both)
_OPTIONS = {"skip": bool, "dma_order": str, "invocations": int}
_KERNEL_PRIMITIVES = ("dma_start", "dma_wait", "semaphore_signal", "semaphore_wait", "semaphore_read",
                      "get_barrier_semaphore")


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("ringc", "ringc: verify distributed Pallas TPU kernels")
    group.addoption("--ringc", action="store_true", default=False,
                    help="check every distributed Pallas TPU kernel the tests run (each distinct one once) with "
                         "ringc's verifier; a kernel that can hang, race or leave semaphores dirty fails its test")
    from .verify.order import DmaOrder
    group.addoption("--ringc-dma-order", default="any", choices=tuple(DmaOrder),
                    help="the DMA ordering model of the checks (default any; a test's "
                         "@pytest.mark.ringc(dma_order=...) wins)")
    group.addoption("--ringc-invocations", type=int, default=1, metavar="K",
                    help="check K back-to-back calls of each kernel (default 1; the marker's invocations= wins)")


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", MARKER)
    if not 1 <= config.getoption("ringc_invocations", 1) <= 64:
        raise pytest.UsageError(f"--ringc-invocations {config.getoption('ringc_invocations')}: not a count from 1 "
                                "to 64 (back-to-back calls of each kernel to check); fix: --ringc-invocations 2")
    if config.getoption("ringc", False) and not config.pluginmanager.has_plugin("ringc-checker"):
        config.pluginmanager.register(Checker(config), "ringc-checker")


@dataclass
class _Call:
    """A recorded kernel call: a `script.Capture` and where the test made it."""
    capture: Any
    file: str
    line: int


@dataclass
class _Verdict:
    report: Any = None        # the Report; None if not checked
    error: str = ""           # why it was not checked
    seconds: float = 0.0
    first: str = ""           # the node id of the first test that ran it
    where: str = ""           # file:line of that call


def _is_collective(jaxpr: Any) -> list:
    """The pallas_call equations of a traced call that runs under shard_map and moves data
    with DMAs or semaphores; [] for anything else (single-device kernels, plain XLA)."""
    from .pallas.jaxprs import walk_eqns
    eqns = list(walk_eqns(jaxpr))
    kernels = [e for e in eqns if e.primitive.name == "pallas_call"]
    if not kernels or not any(e.primitive.name == "shard_map" for e in eqns):
        return []

    def uses_dmas(closed: Any) -> bool:
        inner = getattr(closed, "jaxpr", closed)
        for e in inner.eqns:
            if e.primitive.name in _KERNEL_PRIMITIVES:
                return True
            for p in e.params.values():
                for sub in (p if isinstance(p, (tuple, list)) else [p]):
                    if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
                        if uses_dmas(sub):
                            return True
        return False

    return kernels if any(uses_dmas(e.params["jaxpr"]) for e in kernels) else []


def _caller(path: str) -> int:
    from .pallas.script import caller_line
    return caller_line(path)


@contextlib.contextmanager
def recording(calls: list[_Call], path: str) -> Iterator[None]:
    """While a test body runs: record its collective kernel calls (and pair a `lax` reference
    computed on the same input), then run every call as JAX would."""
    from .pallas.jaxprs import jitted_calls
    from .pallas.script import Capture, FirstArg, kernel_names, lax_reference, snapshot_args

    def impl(run: Any, *args: Any, jaxpr: Any, **params: Any) -> Any:
        try:
            if _is_collective(jaxpr.jaxpr):
                cap = Capture(jaxpr, snapshot_args(args), _caller(path), kernel_names(jaxpr.jaxpr), FirstArg(args))
                calls.append(_Call(cap, path, cap.line))
            elif calls and (ref := lax_reference(jaxpr.jaxpr)) is not None:
                for c in reversed(calls):
                    if c.capture.first.names(args) and c.capture.reference is None:
                        c.capture.reference, c.capture.reference_line = ref, _caller(path)
                        break
        except Exception:  # noqa: BLE001 - recording must never change what the test does
            pass
        return run(*args, jaxpr=jaxpr, **params)

    with jitted_calls(impl):
        yield


def _marker_options(item: Any, config: Any) -> dict:
    """The test's `@pytest.mark.ringc(...)` over the session's defaults; bad options fail the
    test with one message (file, line, fix)."""
    opts = {"skip": False, "dma_order": config.getoption("ringc_dma_order"),
            "invocations": config.getoption("ringc_invocations")}
    file, line = item.location[0], item.location[1] + 1 if item.location[1] is not None else 0
    for mark in reversed(list(item.iter_markers("ringc"))):  # the closest marker wins
        if mark.args:
            pytest.fail(f"{file}:{line}: @pytest.mark.ringc takes keywords only, got {mark.args!r}\n"
                        "  fix: write @pytest.mark.ringc(skip=True), (dma_order='in-order') or (invocations=2)",
                        pytrace=False)
        for k, v in mark.kwargs.items():
            if k not in _OPTIONS:
                pytest.fail(f"{file}:{line}: @pytest.mark.ringc: unknown option {k!r}\n"
                            f"  fix: use {', '.join(_OPTIONS)}", pytrace=False)
            from .verify.order import DmaOrder
            if k == "dma_order" and v not in tuple(DmaOrder):
                pytest.fail(f"{file}:{line}: @pytest.mark.ringc(dma_order={v!r}): not a DMA ordering model\n"
                            "  fix: dma_order='any' (the default) or 'in-order'", pytrace=False)
            if k == "invocations" and (not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 64):
                pytest.fail(f"{file}:{line}: @pytest.mark.ringc(invocations={v!r}): not a count from 1 to 64\n"
                            "  fix: invocations=2 checks two back-to-back calls", pytrace=False)
            if k == "skip" and not isinstance(v, bool):
                pytest.fail(f"{file}:{line}: @pytest.mark.ringc(skip={v!r}): not True or False\n"
                            "  fix: @pytest.mark.ringc(skip=True)", pytrace=False)
            opts[k] = v
    return opts


def _key(cap: Any, opts: dict) -> tuple:
    """A kernel's identity for `check once per session`: its kernels, grid mappings, the
    arguments' shapes, dtypes and small integer values, its mesh, and the check's options."""
    from .pallas.importer import kernel_mesh_axes
    from .pallas.script import small_ints
    from .pallas.jaxprs import walk_eqns
    kernels = tuple(str(e.params["jaxpr"]) + str(e.params["grid_mapping"])
                    for e in walk_eqns(cap.jaxpr.jaxpr) if e.primitive.name == "pallas_call")
    args = tuple((a.shape, str(a.dtype), getattr(small_ints(a), "tobytes", bytes)())
                 for a in cap.args if hasattr(a, "shape"))
    return (kernels, args, tuple(sorted(kernel_mesh_axes(cap.jaxpr).items())), opts["dma_order"], opts["invocations"],
            str(cap.reference))


# Assumptions a kernel's summary line states (the others are said once for the session).
_PER_KERNEL = ("N = ", "meaning: ", "COLLECTIVE is None")


def _failure_text(v: _Verdict) -> str:
    """What a failing test shows: the verdict line, each finding at its file:line with the
    run that shows it (assumptions are said once, in the terminal summary)."""
    text = v.report.to_text(explain=True)
    return "\n".join(line for line in text.splitlines() if not line.startswith("  assumes: "))


class Checker:
    """The `--ringc` session: records, checks once, fails tests, sums up."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.verdicts: dict[tuple, _Verdict] = {}
        self.calls = 0
        self.seconds = 0.0
        self._setup_calls: dict[str, list[_Call]] = {}  # node id -> calls its fixtures made

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: Any) -> Any:
        """Fixtures run kernels too: what they run is checked with the test's own calls."""
        calls: list[_Call] = []
        self._setup_calls[item.nodeid] = calls
        with recording(calls, str(item.path)):
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: Any) -> Any:
        calls = self._setup_calls.pop(item.nodeid, [])
        opts = _marker_options(item, self.config)
        if opts["skip"]:
            return (yield)
        with recording(calls, str(item.path)):
            try:
                result = yield  # the test body
            except Exception:  # it failed on its own: its kernels still count in the summary
                for c in calls:
                    self._check(c, opts, item)
                raise
        failed = [v for v in (self._check(c, opts, item) for c in calls) if v.report is not None and not v.report.ok]
        if failed:
            pytest.fail("ringc found problems in a kernel this test runs:\n" +
                        "\n".join(_failure_text(v) for v in failed), pytrace=False)
        return result

    def _check(self, call: _Call, opts: dict, item: Any) -> _Verdict:
        from .errors import ScheduleError
        from .pallas.compat import AliasLog
        from .pallas.importer import check_capture
        from .pallas.tpu import unsupported_in
        self.calls += 1
        key = _key(call.capture, opts)
        if key in self.verdicts:
            return self.verdicts[key]
        rel = os.path.relpath(call.file, str(self.config.rootpath))
        rel = call.file if rel.startswith("..") else rel
        v = _Verdict(first=item.nodeid, where=f"{rel}:{call.line}")
        self.verdicts[key] = v
        t0 = time.perf_counter()
        cap = call.capture
        try:
            refused = unsupported_in(cap.jaxpr.jaxpr)
            if refused:
                v.error = refused
            else:
                v.report = check_capture(cap, rel, cap.name, AliasLog(), invocations=opts["invocations"],
                                         dma_order=opts["dma_order"])
                v.report.title = f"{cap.name} (line {call.line}, first run by {item.nodeid})"
                if cap.reference:
                    shift = f" by {cap.reference['shift']}" if "shift" in cap.reference else ""
                    v.report.assumptions.append(f"meaning: {cap.reference['kind']}{shift} (the lax reference "
                                                f"at line {cap.reference_line})")
        except ScheduleError as e:
            v.error = str(e).replace("\n", " ")
        except Exception as e:  # noqa: BLE001 - a ringc bug must not stop the user's test session
            v.error = f"ringc failed ({type(e).__name__}: {e}); please report it with the kernel"
        v.seconds = time.perf_counter() - t0
        if v.report is not None:
            v.report.seconds = v.seconds
        self.seconds += v.seconds
        if v.error:
            item.warn(pytest.PytestWarning(f"ringc did not check {cap.name} ({v.where}): {v.error}"))
        return v

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        tr = terminalreporter
        tr.section("ringc")
        vs = list(self.verdicts.values())
        checked = [v for v in vs if v.report is not None]
        ok = sum(v.report.ok for v in checked)
        unchecked = len(vs) - len(checked)
        tr.write_line(f"ringc: {len(checked)} distinct kernel{'s' if len(checked) != 1 else ''} checked "
                      f"({self.calls} call{'s' if self.calls != 1 else ''} recorded): {ok} ok, "
                      f"{len(checked) - ok} failed" + (f", {unchecked} not checked" if unchecked else "")
                      + f", {self.seconds:.2f}s")
        if not vs:
            tr.write_line("  no test ran a distributed Pallas kernel (a pallas_call under shard_map with DMAs or "
                          "semaphores, called through jax.jit)")
        said: list[str] = []
        for v in checked:
            for a in v.report.assumptions:
                if not a.startswith(_PER_KERNEL) and a not in said:
                    said.append(a)
        for a in said:
            tr.write_line(f"  assumes: {a}")
        for v in vs:
            if v.report is None:
                tr.write_line(f"  {v.where}: not checked: {v.error} (first run by {v.first})")
                continue
            name = v.report.title.split(" (")[0]
            size = "; ".join("no lax reference: hangs, balance, races and unwritten memory only" if a.startswith("COLLECTIVE is None")
                             else a for a in v.report.assumptions if a.startswith(_PER_KERNEL))
            tr.write_line(f"  {v.where} {name}: {'ok' if v.report.ok else 'FAILED'} ({size}; {v.seconds:.2f}s, "
                          f"first run by {v.first})")


# ---------------------------------------------------------------- `ringc check test_file.py`

