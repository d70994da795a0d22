"""`ringc check test_x.py` on a pytest-style test module: pytest runs its tests in this
process, under `ringc check`'s capture (set up by `script.run_script`), and each test's kernel
calls are titled with its pytest node id. Kept apart from the plugin (`ringc.pytest_plugin`,
which runs inside the user's own pytest) so that the script runner imports no plugin."""

from __future__ import annotations

import os
from typing import Any

import pytest

from ..limits import LimitStop
from .usererrors import describe_exception, limit_stop, stopped_after_kernels, stopped_before_kernels

__all__ = ["run_pytest_module"]

MARKER = ("ringc(skip=False, dma_order='any', invocations=1): how `pytest --ringc` checks the distributed Pallas "
          "kernels this test runs: skip=True checks none, dma_order='in-order' assumes a link delivers DMAs in "
          "order, invocations=K checks K back-to-back calls of each kernel")


def test_name(nodeid: str) -> str:
    """A test's title in verdicts: its pytest node id from the file's name on
    (`test_x.py::test_y[0]`), whatever folder pytest took as its root."""
    path, sep, rest = nodeid.partition("::")
    return f"{os.path.basename(path)}{sep}{rest}"


class _Titles:
    """Inside `ringc check`: each test's kernel calls are titled with its node id, and what
    stopped a test or its collection becomes a note of the verdict."""

    def __init__(self, script: Any) -> None:
        self.script = script
        self.raised: list[tuple[str, BaseException]] = []
        self.ran = 0
        self.collect_errors: list[BaseException] = []
        self.collected = 0
        self.kept = 0

    def pytest_configure(self, config: Any) -> None:
        config.addinivalue_line("markers", MARKER)

    def pytest_collection_modifyitems(self, config: Any, items: list) -> None:
        """`--test PATTERN`: only the tests it names run (`Script.runs`)."""
        self.collected = len(items)
        kept = [item for item in items if self.script.runs(test_name(item.nodeid))]
        self.kept = len(kept)
        if len(kept) != len(items):
            config.hook.pytest_deselected(items=[item for item in items if item not in kept])
            items[:] = kept

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: Any) -> Any:
        self.script.test = test_name(item.nodeid)  # kernels its fixtures run are titled with it too
        try:
            return (yield)
        finally:
            self.script.test = None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: Any) -> Any:
        self.script.test = test_name(item.nodeid)
        self.ran += 1
        before = len(self.script.captures) + sum(c.copies for c in self.script.captures)
        try:
            return (yield)
        except LimitStop as e:   # a limit stopped the test: no other test runs (`run_pytest_module` says it)
            e.where = f"in test {test_name(item.nodeid)} ({self.ran} of the module's {self.collected} tests)"
            self.raised.append(("", e))
            item.session.shouldstop = "a limit on the checked file's code"
            raise
        except Exception as e:
            if len(self.script.captures) + sum(c.copies for c in self.script.captures) == before:
                self.raised.append((test_name(item.nodeid), e))
                if self.script.same_failure(e, self.kept - self.ran):
                    item.session.shouldstop = "the same error before any kernel call, test after test"
            else:
                self.raised.append(("", e))  # failed after its kernels ran: the results are placeholders
                note = stopped_after_kernels(test_name(item.nodeid), e, self.script.path)
                if note is not None:   # not a failed check of the placeholders: what stopped it
                    self.script.notes.append(note)
            raise
        finally:
            self.script.test = None

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.skipped and report.when in ("setup", "call"):
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            self.script.notes.append(f"test {test_name(report.nodeid)} skipped ({reason[:100]}): its kernels were not checked")
        elif report.failed and report.when == "setup":
            self.script.notes.append(f"test {test_name(report.nodeid)} failed in setup ({_last_line(report)}): its kernels "
                                     "were not checked")

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        from .. import limits
        limits.relieve_memory(self.script.notes)   # between tests, as for a unittest module

    def pytest_exception_interact(self, node: Any, call: Any, report: Any) -> None:
        """The module's own import failed (pytest collects it by importing it): the exception
        itself, for the one message of a package that is not installed (`run_pytest_module`)."""
        if report.when == "collect":
            e = call.excinfo.value
            while e.__cause__ is not None and not isinstance(e, ModuleNotFoundError):  # (pytest's CollectError)
                e = e.__cause__
            self.collect_errors.append(e)

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.script.notes.append(f"pytest could not collect {report.nodeid or self.script.path} "
                                     f"({_last_line(report)})")


def _last_line(report: Any) -> str:
    lines = [s for s in str(report.longreprtext).splitlines() if s.strip()]
    err = [s for s in lines if s.startswith("E ")]
    return (err[-1][1:].strip() if err else lines[-1].strip() if lines else "no message")[:160]


def run_pytest_module(script: Any) -> None:
    """What `pytest FILE` does, in this process, under `ringc check`'s capture (the caller,
    `script.run_script`, has set up its devices and the capture): every test of the module
    runs, with its parametrizations and fixtures (conftest.py included), and the kernel
    calls each makes are titled with its pytest node id. Test failures are expected (the
    kernels return zero placeholders) and are not reported; a test that skips, cannot set
    up, or stops before its first kernel call is a note."""
    titles = _Titles(script)
    args = [os.path.abspath(script.path), "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly",
            "-s", "-q", "-o", "addopts=", "--no-header", "-W", "ignore"]
    import sys
    before = set(sys.modules)
    try:
        code = pytest.main(args, plugins=[titles])
        if int(code) == int(pytest.ExitCode.USAGE_ERROR) and not titles.ran:
            _conftest_failure(script.path)   # (pytest printed it and ran nothing)
    finally:
        _forget_test_modules(before, script.path)
    from .imports import missing_import
    for e in titles.collect_errors:   # a package the module imports is not installed: its one message
        missing = missing_import(e, script.path, script.imports)
        script.missing = script.missing or missing
    for nodeid, e in titles.raised:
        stop = limit_stop([e], script.path)
        if stop is not None:   # a limit stopped a test: the tests before it are still checked
            stop.where = stop.where or f"in test {nodeid}"
            script.stopped = stop
            break
        if nodeid:
            script.notes.append(stopped_before_kernels(nodeid, e, script.path, script.imports))
    script.notes.append(f"a pytest module: ringc ran its {titles.ran} test{'s' if titles.ran != 1 else ''} with "
                        f"pytest (exit code {int(code)}, failures expected: kernels return zeros)")


def _conftest_failure(path: str) -> None:
    """pytest ran no test because a conftest.py beside the module or above it failed to import
    (a fixture file importing torch): that error, at the conftest's line (a missing package:
    its one message, with --stub), instead of "ran its 0 tests"."""
    import runpy
    from ..errors import ScheduleError
    from .imports import missing_import
    from .usererrors import script_line
    folder = os.path.dirname(os.path.abspath(path))
    conftests = []
    while True:
        if os.path.isfile(os.path.join(folder, "conftest.py")):
            conftests.append(os.path.join(folder, "conftest.py"))
        parent = os.path.dirname(folder)
        if parent == folder or (conftests and not os.path.isfile(os.path.join(folder, "__init__.py"))):
            break
        folder = parent
    for conftest in reversed(conftests):   # pytest loads the outermost first
        try:
            runpy.run_path(conftest, run_name="conftest")
        except Exception as e:  # noqa: BLE001 - the user's conftest failed: say how
            missing = missing_import(e, conftest)
            raise missing if missing is not None else ScheduleError(
                f"pytest could not load {conftest}: {describe_exception(e, conftest)}", file=conftest,
                line=script_line(e, conftest), fix="fix it there: pytest runs none of the module's tests without "
                                                     "it") from None


def _forget_test_modules(before: set, path: str) -> None:
    """Unload what the run imported from the test's folder and every conftest.py, so that
    the next `ringc check` of a test module in this process imports its own afresh (pytest
    refuses a second `conftest` or `test_x` from another folder). JAX's and other installed
    modules stay: some must not be imported twice."""
    import sys
    folder = os.path.dirname(os.path.abspath(path))
    for name in set(sys.modules) - before:
        file = getattr(sys.modules.get(name), "__file__", None) or ""
        if file and (os.path.basename(file) == "conftest.py" or os.path.dirname(os.path.abspath(file)) == folder):
            del sys.modules[name]
