"""`ringc check script.py` for code as published: a script (or a notebook's code cells) that
builds its inputs and runs its kernels at top level, with no `build(mesh)`.

The tutorial's kernels, for example, are notebook cells: `num_devices =
jax.local_device_count()`, an `assert` that the devices are TPUs, a mesh over every device,
then `jax.jit(jax.shard_map(kernel, ...))(input_arr)` next to the `lax` reference. ringc runs
such a script as it is, on N CPU devices, and *captures* every top-level call of a jitted
function whose program contains a `pallas_call` instead of running it:

- `jax.devices()`, `jax.local_devices()`, `jax.device_count()` and `jax.local_device_count()`
  answer with N CPU devices (`--devices N`), and `jax.make_mesh` and
  `mesh_utils.create_device_mesh` build their meshes over them;
  `jax.make_mesh` without `axis_types` makes Auto axes, as it did before JAX made Explicit
  axes the default (the scripts were written for that default).
- A call whose jaxpr holds a `pallas_call` is recorded (its closed jaxpr and the argument
  values) and returns zeros of the output shapes: the kernel is checked, not run. Every
  other computation (input generation, the `lax` reference) runs on CPU as usual.
- Top-level statements run one by one. One that raises (an `assert` that the devices are
  TPUs, a print of a placeholder result) is reported as a note with its line, and the
  script continues with the next statement, the way a notebook runs its next cell; the
  verdict lists every such note, so nothing is skipped silently.
- A later call that computes exactly one `lax` collective under `shard_map` on the same input
  array as a captured kernel (the tutorial's `xla_result`) names the meaning to check that
  kernel against.

A module of functions (JAX's `ops/tpu/all_gather.py`: `all_gather(x, *, mesh, axis_name)`)
makes no call at top level. Then ringc calls its *entry functions* itself (`entries.py`:
global functions, per-shard launchers and factories, with the arguments it states in the
verdict). The file's imports resolve from its repository, and `--stub MODULE` stubs a
package it does not need (`imports.py`).

Each captured call is then checked like a module's `build(mesh)`.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import math
import functools
import os
import re
import sys
import traceback
import unittest
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from .. import limits
from ..collectives import COLLECTIVES
from ..errors import ScheduleError
from ..ir.schema import CollectiveKind as K
from .entries import ArgSpec, call_entries
from .jaxprs import KERNEL_CALLS, eager_shard_maps, gathers_whole, jitted_calls, jitted_lowerings, kernel_jaxpr, kernel_name, walk_eqns
from .usererrors import (describe_exception, limit_stop, script_line, stopped_before_kernels,  # noqa: F401
                         user_failure)  # (some re-exported)

__all__ = ["Capture", "Script", "lax_collectives", "lax_reference", "run_script", "script_source", "is_script", "register_cpu_tpu_info",
           "small_ints"]


def lax_collectives() -> dict[str, str]:
    """`lax` collective primitive -> the ringc collective it computes (the `lax_primitives`
    of each collective's class; see `lax_reference`)."""
    return {p: kind for kind, cls in COLLECTIVES.items() for p in cls.lax_primitives}


@dataclass(eq=False)  # a call is itself: its fields hold arrays, which compare elementwise
class Capture:
    """One top-level call of a jitted function that runs pallas_calls."""
    jaxpr: Any                    # the call's ClosedJaxpr
    args: list[Any]               # the arguments as `snapshot_args` keeps them (values feed scalar prefetch)
    line: int                     # the script line that made the call
    name: str                     # the jitted function's name
    first: "FirstArg"             # its first argument's identity, to pair the lax reference
    reference: dict | None = None  # {"kind": ..., "shift": ...}: the lax collective run on the same input
    reference_line: int = 0        # where the script computes that reference
    reference_ran: bool = False    # it ran before the kernel call (ringc could not know it was one)
    test: str | None = None        # the test method that made the call (a test module)
    copies: int = 0                # identical calls after it (parameterized tests), checked once
    assumes: list[str] = field(default_factory=list)  # how ringc called an entry function (`entries.py`)
    same: Any = None               # what the check depends on: an equal call elsewhere gets the same verdict
    via: str = ""                  # the helpers of the file between `line` and the call (`call_site`)
    made_up: list[Any] = field(default_factory=list)  # integer `entries.ArgSpec`s ringc filled with zeros
    shaped: list[Any] = field(default_factory=list)   # an entry's `entries.ArgSpec`s ringc shaped itself (no --arg)
    tests: list[str] = field(default_factory=list)    # the tests that made it or an identical call


@dataclass
class Script:
    path: str
    n: int
    captures: list[Capture] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    _went_on: set[str] = field(default_factory=set)   # who has had a failed comparison go on (`went_on`)
    test: str | None = None        # the test running now
    entry_line: int = 0            # the entry function ringc is calling (its def line), else 0
    seen: dict = field(default_factory=dict)  # a captured call's key -> its Capture (parameterized copies)
    # A `lax` reference computed before the kernel call it names (a harness computing `expected`
    # first): (its first argument's `FirstArg`, (meaning, line)), taken by the next capture on that array.
    early_references: list = field(default_factory=list)
    early_unread: list = field(default_factory=list)  # (FirstArg, note) of a reference before its call naming no meaning
    answers: Any = None            # `tpu.Answers`: what the code asked the stand-in TPU devices
    missing: Any = None            # the first missing package a statement imported (`imports.missing_import`)
    imports: Any = None            # `imports.Imports` of the run: its stubs' calls blame a failure on a stub
    assumes: list[str] = field(default_factory=list)  # stated on every verdict: stubs (`imports.py`)
    # (entry, its error, the arrays ringc made up for it) of one that ran no kernel
    entry_errors: list[tuple[str, str, str]] = field(default_factory=list)
    entry_numbers: list[str] = field(default_factory=list)  # `--param NAME=V` for what an entry's made-up arrays were
    # `--param NAME=VALUE` for the keywords an entry that ran no kernel kept at their defaults
    # (`mode='auto'`), the words first: one of them may choose the kernel
    entry_switches: list[str] = field(default_factory=list)
    # `--test PATTERN` (one or several): the test module's tests to run (a substring or a glob)
    tests: str | tuple[str, ...] | None = None
    skip_tests: tuple[str, ...] = ()   # `--skip-test PATTERN`: and those not to run
    left_out: int = 0              # tests `tests` left out
    matched: int = 0               # and those it ran
    # A limit that stopped a test module's run (`limits.LimitStop`): the kernel calls of the tests
    # before it are checked, then the limit's message (`importer.iter_script`).
    stopped: Any = None
    tests_ran: bool = False        # the module's unittest TestCase tests ran (`_run_tests`)
    _failures: list[str] = field(default_factory=list)   # `same_failure`'s last ones
    _left_titles: list[str] = field(default_factory=list)   # the tests `--test` left out (`no_test_matched`)

    def runs(self, title: str) -> bool:
        """Whether the test titled `title` runs under `--test` (a substring of the title, or a
        glob matching it); counts those left out and run."""
        runs = ((self.tests is None or any(_matches(title, p) for p in self._test_patterns))
                and not any(_matches(title, p) for p in self.skip_tests))
        self.left_out += not runs
        self.matched += runs
        if not runs and len(self._left_titles) < 10_000:
            self._left_titles.append(title)
        return runs

    @property
    def selection(self) -> str:
        """The options that chose the tests to run, as given ("" when none did)."""
        return " ".join([f"--test {p!r}" for p in self._test_patterns]
                        + [f"--skip-test {p!r}" for p in self.skip_tests])

    @property
    def _test_patterns(self) -> tuple[str, ...]:
        return () if self.tests is None else (self.tests,) if isinstance(self.tests, str) else tuple(self.tests)

    def went_on(self, what: str, line: int | None) -> None:
        """A failed comparison of the script's or a test's (`what`: `assertLess`, `assert`) at
        `line` did not stop it (the kernels' results are placeholders): said once per test,
        or once for the script."""
        who = f"test {self.test}" if self.test else "the script"
        if who not in self._went_on:
            self._went_on.add(who)
            self.notes.append(f"{who}: a failed {what} at line {line} (the kernels' results are placeholders) "
                              "did not stop it: ringc ran the code after it")

    def same_failure(self, e: BaseException, left: int) -> bool:
        """A test stopped before any kernel call with `e`: whether the run should stop, the last
        `SAME_FAILURES` tests having stopped with the same NameError or ImportError (code
        missing here) and no kernel call captured yet (maxtext's kernel tests, whose kernels
        come from modules missing here, ran 176 tests, 100 s, to say so; sweep 10); its note
        says so. Other errors (a test of a feature the kernel lacks) do not stop the run."""
        why = describe_exception(e, self.path) if isinstance(e, (NameError, ImportError)) else None
        self._failures = (self._failures + [why])[-SAME_FAILURES:]
        if (why is None or self.captures or left <= 0 or len(self._failures) < SAME_FAILURES
                or len(set(self._failures)) > 1):
            return False
        self.notes.insert(0, f"no test ran a kernel call, and the last {SAME_FAILURES} run all stopped before any with "
                             f"the same error ({why}): ringc ran none of the {left} other test{'s' if left != 1 else ''}")
        return True

    def no_test_matched(self) -> None:
        """`--test` matched none of the module's tests: one message, not another way in."""
        if self.selection and self.left_out and not self.matched:
            import difflib
            names = list(dict.fromkeys(t.split(" ")[0] for t in self._left_titles))   # without parameters
            by_own = {_own_name(t): t for t in reversed(names)} | {t: t for t in names}   # test_x, or Class.test_x
            near = [by_own[n] for p in self._test_patterns
                    for n in difflib.get_close_matches(p.strip("*"), list(by_own), 3, 0.5)]
            shown = list(dict.fromkeys(near))[:3] or names[:3]
            raise ScheduleError(f"{self.selection} leaves none of the module's {self.left_out} tests to run",
                                file=self.path, fix="give a part of a test's name (ClassName.test_name, or the "
                                                    "pytest node id) or a glob such as '*Permute*'; "
                                                    f"{'the nearest' if near else 'some'} of its tests: "
                                                    + ", ".join(shown))


SAME_FAILURES = 5   # tests in a row that stop before any kernel call with one error: the run stops


def _matches(title: str, pattern: str) -> bool:
    """A test's title and a `--test` / `--skip-test` pattern: a substring of it, or a glob of
    it, of it without its parameters (`*.test_kv_1` names `Case.test_kv_1 (params)`) or of
    the test's own name (`test_kv*` names `Case.test_kv_1 (params)` and
    `case.py::test_kv_1[params]`, as pytest's -k users expect). A pattern ending in a digit
    does not name the tests whose own names only add digits to it: `test_case2` is absl's
    third parameterized case, not `test_case20` to `test_case29` too (sweep 17: JetStream's
    `--test test_paged_attention2` ran 101 tests for 9 minutes)."""
    import fnmatch
    bare = title.split(" ")[0]   # without a parameterized test's parameters
    if pattern[-1:].isdigit() and re.fullmatch(re.escape(pattern) + r"\d+", _own_name(title)):
        return False   # `test_case2` names absl's third case, not `test_case20`..`test_case29`
    return pattern in title or any(fnmatch.fnmatchcase(t, pattern) for t in (title, bare, _own_name(title)))


def _own_name(title: str) -> str:
    """A test's own name: `test_kv_1` of `Case.test_kv_1 (params)` and `case.py::test_kv_1[params]`."""
    return title.split("::")[-1].split(" ")[0].split("[")[0].split(".")[-1]


def is_script(source: str) -> bool:
    """A module that is not the interface `ringc emit` writes (`build` with `make_inputs`,
    `COLLECTIVE` or `AXIS` beside it): ringc runs it as a script (and reports a syntax error at
    its line). A benchmark's own `build(mesh, flows, repeats)` alone is a factory ringc calls
    as an entry function, not a half-written interface."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return True
    defined = set()
    for s in tree.body:
        if isinstance(s, ast.FunctionDef):
            defined.add(s.name)
        elif isinstance(s, (ast.Assign, ast.AnnAssign)):
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            defined.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(s, (ast.Import, ast.ImportFrom)):   # `from common import make_inputs, COLLECTIVE`
            defined.update((a.asname or a.name).split(".")[0] for a in s.names)
    return "build" not in defined or not defined & {"make_inputs", "COLLECTIVE", "AXIS"}


def script_source(path: str) -> str:
    """The Python to run: the file itself, or a notebook's code cells (MyST `.md` or `.ipynb`)
    with every other line blank, so that a line number in the result is the line in the
    `.md` file (for `.ipynb`, in the JSON file)."""
    p = Path(path)
    text = p.read_text()
    if p.suffix == ".md":
        return _myst_code(text)
    if p.suffix == ".ipynb":
        return _ipynb_cells(path, text)[0]
    return text


def _blank_magic(line: str) -> str:
    """IPython magics and shell escapes are not Python: blank them (they do not run kernels)."""
    return "" if line.lstrip().startswith(("%", "!")) else line


def _myst_code(text: str) -> str:
    """A MyST notebook runs its `{code-cell}` blocks (a ```python fence there is prose: an
    API signature, say); plain Markdown with no code cells runs its ```python fences."""
    out: list[str] = []
    cell = header = False
    opens = ("```{code-cell}",) if "```{code-cell}" in text else ("```python", "```python3", "```py")
    for line in text.splitlines():
        fence = line.strip()
        if not cell and (fence.startswith("```{code-cell}") if opens[0] == "```{code-cell}" else fence in opens):
            cell, header = True, fence.startswith("```{code-cell}")
            out.append("")
            continue
        if cell and fence == "```":
            cell = False
            out.append("")
            continue
        if cell and header:  # a code cell's `---` options block, or its first line of code
            if fence == "---":
                header = "open" if header is True else False
                out.append("")
                continue
            if header == "open" or fence.startswith(":"):
                out.append("")
                continue
            header = False
        out.append(_blank_magic(line) if cell else "")
    return "\n".join(out) + "\n"


def _ipynb_cells(path: str, text: str) -> tuple[str, list[tuple[int, int]]]:
    """A notebook's code at the lines of the JSON file that hold it, and each code cell's
    first and last line there."""
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as e:
        raise ScheduleError(f"not a notebook: {e.msg}", file=path, line=e.lineno,
                            fix="give a .ipynb file in Jupyter's JSON format, or a .py script") from None
    lines = text.splitlines()
    out = [""] * (len(lines) + 1)
    spans: list[tuple[int, int]] = []
    cursor = 0
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        src = cell.get("source", [])
        src = src if isinstance(src, list) else src.splitlines(keepends=True)
        found: list[int] = []
        for s in src:
            # as the file spells it: Jupyter writes non-ASCII as it is, other tools as \u escapes
            encoded = {json.dumps(s, ensure_ascii=False)[1:-1], json.dumps(s)[1:-1]}
            k = next((i for i in range(cursor, len(lines)) if any(e in lines[i] for e in encoded)), None)
            if k is None:  # a notebook written on one line: keep the cell's order, not its lines
                out.append(_blank_magic(s.rstrip("\n")))
                continue
            out[k] = _blank_magic(s.rstrip("\n"))
            cursor = k + 1
            found.append(k + 1)
        if found:
            spans.append((found[0], found[-1]))
    return "\n".join(out) + "\n", spans


def _cells(path: str) -> list[tuple[int, int]]:
    """The lines (first, last) of each notebook cell of the file: a Markdown file's fenced
    code blocks, a `.ipynb` file's code cells, a percent-format script's `# %%` cells;
    none for a plain script."""
    text = Path(path).read_text()
    suffix = Path(path).suffix
    if suffix == ".ipynb":
        return _ipynb_cells(path, text)[1]
    lines = text.splitlines()
    if suffix == ".md":
        fences = [i + 1 for i, t in enumerate(lines) if t.strip().startswith("```")]
        return [(a + 1, b - 1) for a, b in zip(fences[::2], fences[1::2])]
    marks = [i + 1 for i, t in enumerate(lines) if t.startswith("# %%")]
    return [(a + 1, b - 1) for a, b in zip(marks, [*marks[1:], len(lines) + 1])]


def _failing_cells(path: str, source: str) -> list[tuple[int, int, SyntaxError]]:
    """The notebook cells of the file that are not Python on their own (a statement never
    spans two cells), with the error of each."""
    lines = source.split("\n")
    bad = []
    for a, b in _cells(path):
        try:
            ast.parse("\n" * (a - 1) + "\n".join(lines[a - 1:b]), path)
        except SyntaxError as e:
            bad.append((a, b, e))
    return bad


SMALL_INTS = 1 << 16  # integer arguments up to this many elements keep their values


# Syntax of newer Pythons than 3.11 (what the project's Python is): a line's start -> what it is.
_NEWER_SYNTAX = ((re.compile(r"^\s*type\s+\w+(\[.*\])?\s*="), "a `type` alias (PEP 695, Python 3.12)"),
                 (re.compile(r"^\s*(def|class)\s+\w+\["), "type parameters in brackets (PEP 695, Python 3.12)"))


def newer_syntax(source: str, e: SyntaxError) -> str | None:
    """What a SyntaxError's line is, when it is the syntax of a newer Python (JAX's own tests
    use PEP 695's `type` aliases), else None."""
    lines = source.splitlines()
    text = lines[e.lineno - 1] if e.lineno and 0 < e.lineno <= len(lines) else ""
    if sys.version_info >= (3, 12):
        return None
    return next((f"line {e.lineno} uses {what}" for pattern, what in _NEWER_SYNTAX if pattern.match(text)), None)


def small_ints(a: Any) -> "np.ndarray | None":
    """A small integer or boolean argument's values (a routing table, sizes, flags such as
    which requests have a state: they may steer the kernel, through SMEM or scalar
    prefetch), else None (data arrays are not followed)."""
    if isinstance(a, int) and not isinstance(a, bool):   # a Python int passed to jit (`f(x, 1)`)
        return np.asarray(a, np.int32)
    if type(a).__name__ == "ShapeDtypeStruct":   # what `snapshot_args` keeps of a data array: no values
        return None
    try:
        dtype = np.dtype(a.dtype) if hasattr(a, "dtype") else None
    except TypeError:   # an extended dtype (a PRNG key, `key<pl>`): no integers to follow
        return None
    if dtype is not None and (np.issubdtype(dtype, np.integer) or dtype == np.bool_) and np.size(a) <= SMALL_INTS:
        return np.asarray(a)
    return None


class FirstArg:
    """The identity of a call's first argument, to pair a `lax` reference computed on the same
    array with the kernel call, without keeping the array alive (`snapshot_args`): its id()
    alone would name a later array once this one is freed (a false meaning taken from
    another scenario's reference: sweep 18's TPU-Collectives run)."""

    def __init__(self, args: tuple) -> None:
        import weakref
        self._ref: Any = None
        if args:
            try:
                self._ref = weakref.ref(args[0])
            except TypeError:   # (a Python scalar: nothing to free, kept as it is)
                self._ref = (lambda a=args[0]: a)

    def names(self, args: tuple) -> bool:
        """Whether `args` starts with that same array, still alive."""
        return bool(args) and self._ref is not None and self._ref() is args[0]


def snapshot_args(args: tuple) -> list:
    """What the check needs of a call's arguments, taken when the call is made (it may donate
    them; a test module's hundreds of calls must not hold their data arrays): small integer
    arrays' values (`small_ints`), other arrays' shapes and dtypes."""
    import jax
    out: list = []
    for a in args:
        values = small_ints(a)
        out.append(values.copy() if values is not None else
                   jax.ShapeDtypeStruct(a.shape, a.dtype) if hasattr(a, "shape") and hasattr(a, "dtype") else a)
    return out


def kernel_names(jaxpr: Any) -> str:
    """The kernels a call runs, by their Python names: `right_permute_kernel`; a generic
    wrapper that runs the user's kernel inside JAX control flow is named with the kernel it
    runs, `all_gather_pallas_kernel in kernel_wrapper` (`_inner_kernel`)."""
    names = []
    for e in walk_eqns(jaxpr):
        if e.primitive.name in KERNEL_CALLS:
            name = kernel_name(e)
            inner = _inner_kernel(kernel_jaxpr(e), name)
            if inner:
                name = f"{inner} in {name}"
            if name not in names:
                names.append(name)
    return ", ".join(names)


def _inner_kernel(kernel_jaxpr: Any, name: str) -> str | None:
    """The user's function whose DMAs the pallas_call's kernel function runs, when the
    kernel function itself makes none: a launcher's `kernel_wrapper` that loops over the
    user's `all_gather_pallas_kernel` in a `fori_loop` (public benchmark harnesses do). Read
    off the DMAs' tracebacks: the outermost function named like a kernel that every DMA's
    chain of user frames goes through; None when there is none or the kernel function
    makes a DMA itself."""
    if kernel_jaxpr is None:
        return None
    from .interpret import internal_frame as internal

    chains = []
    for e in walk_eqns(getattr(kernel_jaxpr, "jaxpr", kernel_jaxpr)):  # (a kernel holds no pallas_call)
        if e.primitive.name not in ("dma_start", "dma_wait"):
            continue
        tb = e.source_info.traceback
        if tb is None:
            continue
        chain: list[str] = []
        for code in tb.raw_frames()[0]:  # innermost first
            if internal(code.co_filename):
                if chain:
                    break
                continue
            chain.append(code.co_name)
        chains.append(chain[::-1])
        if len(chains) > 64:
            break
    if not chains or any(name in chain for chain in chains):
        return None
    common = chains[0]
    for chain in chains[1:]:
        k = 0
        while k < min(len(common), len(chain)) and common[k] == chain[k]:
            k += 1
        common = common[:k]
    return next((f for f in common if "kernel" in f.lower() and f != name), None)


# Ops between a collective matmul's collective and its dot that keep its values (`_matmul_reference`).
from .primitives import KEEPS_VALUES as _PASS_THROUGH  # noqa: E402 -- ops that keep a reference's values


def _matmul_reference(eqns: list, coll: Any) -> dict | None:
    """The collective matmul a reference computes with one `dot_general` besides its one
    collective: `all_gather(x) @ y` (the dot reads the gathered x as its left operand) or
    `psum_scatter(x @ y)` (the scatter reads the product), contracting x's last dim with
    y's first (`y`) or last (`y.T`, the `_t` kinds), no batch dims, the collective along
    dimension 0; None if it is neither (`all_gather(x, axis=1) @ y` gathers the contraction
    dim: another computation, whose reference is noted as not read)."""
    dots = [e for e in eqns if e.primitive.name == "dot_general"]
    if len(dots) != 1:
        return None
    dot = dots[0]
    (lc, rc), (lb, _) = dot.params["dimension_numbers"]
    lhs, rhs = (v.aval for v in dot.invars)
    if lb or len(lc) != 1 or len(rc) != 1 or lc[0] != len(lhs.shape) - 1 or len(rhs.shape) != 2:
        return None
    made = {id(o): e for e in eqns for o in e.outvars}
    same: dict[int, Any] = {}  # across a nested jaxpr (jnp.einsum is a jitted call): inner and outer names
    for e in eqns:
        inner = e.params.get("jaxpr") if e.primitive.name in ("pjit", "jit", "closed_call") else None
        inner = getattr(inner, "jaxpr", inner)
        if inner is not None:
            same.update({id(i): o for i, o in zip(inner.invars, e.invars)})
            same.update({id(o): i for i, o in zip(inner.outvars, e.outvars)})

    def source(v: Any) -> Any:
        """The variable `v` is made from through value-keeping ops and nested calls."""
        while True:
            e = made.get(id(v))
            if id(v) in same:
                v = same[id(v)]
            elif e is not None and e.primitive.name in _PASS_THROUGH and len(e.invars) == 1:
                v = e.invars[0]
            else:
                return v

    flipped = False  # `x @ y.T` is a 2-D transpose of y feeding a plain dot
    y = source(dot.invars[1])
    while ((e := made.get(id(y))) is not None and e.primitive.name == "transpose"
           and tuple(e.params["permutation"]) == (1, 0)):
        y, flipped = source(e.invars[0]), not flipped
    transposed = (rc[0] == 1) != flipped
    if coll.params.get("all_gather_dimension", coll.params.get("scatter_dimension", 0)) != 0:
        return None   # gathered or scattered along another dimension (x's contraction dim): not the table's layout
    if coll.primitive.name == "all_gather" and source(dot.invars[0]) is coll.outvars[0]:
        kind = K.ALL_GATHER_MATMUL_T if transposed else K.ALL_GATHER_MATMUL
    elif coll.primitive.name == "reduce_scatter" and source(coll.invars[0]) is dot.outvars[0]:
        kind = K.MATMUL_PSUM_SCATTER_T if transposed else K.MATMUL_PSUM_SCATTER
    else:
        return None
    return {"kind": kind}


def _unread_reference(jaxpr: Any) -> str | None:
    """The collective of a jitted `shard_map` with one `lax` collective that `lax_reference`
    cannot read as a meaning (it does more around it); None if it has not just one."""
    eqns = list(walk_eqns(jaxpr))
    found = [e for e in eqns if e.primitive.name in lax_collectives()]
    if len(found) != 1 or not any(e.primitive.name == "shard_map" for e in eqns):
        return None
    return found[0].primitive.name


def lax_reference(jaxpr: Any) -> dict | None:
    """The one `lax` collective that a jitted `shard_map` computes, if that is all it does
    (besides reshapes and the like) and it is one the README's table means: {"kind",
    "shift", "axes"} (the mesh axes it runs along, in its rank order). `all_gather` and `psum_scatter` along dimension 0, `all_to_all` splitting and
    concatenating dimension 0; `tiled=True` too (the kernel's array is then flat, [N * m,
    ...], and the meaning check views it per device: `importer.flat_views`). Along another
    dimension the layout is not the table's: no meaning (None). With one `dot_general` besides
    the collective, the collective matmul it computes (`_matmul_reference`)."""
    eqns = list(walk_eqns(jaxpr))
    primitives = lax_collectives()
    found = [e for e in eqns if e.primitive.name in primitives]
    if len(found) == 2 and gathers_whole(found[1]) and found[1].invars[0] is found[0].outvars[0]:
        # a harness that gathers the result to compare it (MIT 6.S894's lab: the kernel's output
        # gathered the same way, `importer._meaning`): the meaning is the collective inside
        eqns = [e for e in eqns if e is not found[1]]
        found = found[:1]
    if len(found) != 1 or not any(e.primitive.name == "shard_map" for e in eqns):
        return None
    e = found[0]
    if e.params.get("axis_index_groups") is not None:
        return None   # groups of its own: not the mesh's axes
    names = e.params.get("axes", e.params.get("axis_name"))
    along = {"axes": tuple(names) if isinstance(names, (tuple, list)) else (names,)}
    if any(d.primitive.name == "dot_general" for d in eqns):
        found_matmul = _matmul_reference(eqns, e)
        return None if found_matmul is None else {**found_matmul, **along}
    kind = primitives[e.primitive.name]
    from .interpret import reference_pointwise
    fns = reference_pointwise(eqns, e)  # elementwise functions around the collective (`tanh(ppermute(x))`)
    if fns is None:
        return None
    extra = {"pointwise": fns} if fns else {}
    parameters = COLLECTIVES[kind].lax_parameters(e.params)
    return None if parameters is None else {"kind": kind, **parameters, **extra, **along}


def caller_line(path: str) -> int:
    """The last frame of the user's script on the stack: the line that made the call."""
    target = os.path.abspath(path)
    line = 0
    for frame in traceback.extract_stack():
        if os.path.abspath(frame.filename) == target:
            line = frame.lineno or line
    return line


def call_site(path: str, in_test: bool = False) -> tuple[int, str]:
    """Where the user's file made a call: the line of its outermost frame (a top-level
    statement; in a test, the test method's line) and, when that line called a helper of
    the same file that made the call, the chain of those helpers (`through run() at line
    16`); (0, "") if the file is not on the stack."""
    target = os.path.abspath(path)
    frames = [f for f in traceback.extract_stack() if os.path.abspath(f.filename) == target and f.lineno]
    if in_test:  # the test runner was started from the module's `absltest.main()` line
        frames = [f for f in frames if f.name != "<module>"] or frames
    if not frames:
        return 0, ""
    via = ", ".join(f"{f.name}() at line {f.lineno}" for f in frames[1:])
    return frames[0].lineno, (f", through {via}" if via else "")


@contextlib.contextmanager
def _devices(n: int, notes: list[str], script: str | None = None) -> Iterator[None]:
    """`jax.devices()` and friends answer with the first n CPU devices; `jax.make_mesh` uses
    them, with Auto axes unless the script names axis types. So do JAX's own
    `jax._src.xla_bridge.devices()` and friends when the user's code calls them
    (tpu-inference's `make_optimized_mesh`: `sorted(xb.devices(), key=lambda d: d.coords)`),
    while JAX's internals calling them still see every CPU device (`tpu.Askers`)."""
    import jax
    from jax._src import xla_bridge as xb
    from jax.sharding import AxisType
    from .tpu import Askers
    devices = jax.devices()[:n]
    if len(devices) < n:
        raise ScheduleError(f"ringc runs the script on {n} CPU devices, but JAX has {len(devices)}",
                            fix=f"set XLA_FLAGS=--xla_force_host_platform_device_count={n} before jax starts "
                                "(the CLI does this itself)")
    saved = {k: getattr(jax, k) for k in ("devices", "local_devices", "device_count", "local_device_count",
                                          "make_mesh")}
    make_mesh = saved["make_mesh"]

    def mesh(axis_shapes, axis_names, axis_types=None, *, devices=None, **kw):
        # JAX's signature: `axis_types` may come by position (`make_mesh(shape, names, (Explicit,))`)
        if devices is None:
            devices = jax.devices()[:math.prod(axis_shapes)]
        if axis_types is None:
            axis_types = (AxisType.Auto,) * len(axis_shapes)
            text = "jax.make_mesh without axis_types makes Auto axes (JAX's default when such scripts were written)"
            if text not in notes:
                notes.append(text)
        return make_mesh(axis_shapes, axis_names, axis_types, devices=devices, **kw)

    from jax.experimental import mesh_utils
    create_device_mesh = mesh_utils.create_device_mesh

    def device_mesh(mesh_shape, devices=None, *args, **kw):
        return create_device_mesh(mesh_shape, jax.devices() if devices is None else devices, *args, **kw)

    mesh_utils.create_device_mesh = device_mesh
    answer = {"devices": lambda *a, **kw: list(devices), "local_devices": lambda *a, **kw: list(devices),
              "device_count": lambda *a, **kw: n, "local_device_count": lambda *a, **kw: n}
    for k, f in answer.items():
        setattr(jax, k, f)
    jax.make_mesh = mesh
    askers = Askers(script or "<script>")
    bridge = {k: getattr(xb, k) for k in answer}

    def users(name: str) -> Any:
        def ask(*args: Any, **kwargs: Any) -> Any:
            if askers.user(sys._getframe(1)):
                return answer[name](*args, **kwargs)
            return bridge[name](*args, **kwargs)
        return ask

    for k in answer:
        setattr(xb, k, users(k))
    config_update = jax.config.update

    def update(name: str, value: Any) -> None:
        # `jax.config.update("jax_num_cpu_devices", 8)` at the top of a script: its devices are
        # ringc's (JAX refuses the update once they exist), said once instead of a RuntimeError
        if name == "jax_num_cpu_devices":
            text = (f"jax.config.update('jax_num_cpu_devices', {value!r}): not applied; ringc runs the script on "
                    f"{n} devices of its own (--devices N)")
            if text not in notes:
                notes.append(text)
            return None
        return config_update(name, value)

    jax.config.update = update
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(jax, k, v)
        for k, v in bridge.items():
            setattr(xb, k, v)
        mesh_utils.create_device_mesh = create_device_mesh
        del jax.config.update   # the class's own again


class CallKey:
    """What the check of a captured call depends on: the program around its kernels (not how
    interpret mode would run them), each kernel's program, grid, compiler params (collective_id,
    skip_device_barrier decide the entry barrier) and aliases, and the arguments' shapes,
    dtypes, shardings and small integer values. Printing a large kernel's program costs a
    tenth of a second (rpa_v3_cp: a third of its test module's check), so keys compare a
    cheap summary first (`summary`: hashed) and the printed programs only when the summaries
    agree, printing each program at most once."""

    def __init__(self, jaxpr: Any, kernels: list, args: tuple) -> None:
        self._jaxpr, self._kernels = jaxpr, kernels
        self._args = tuple((a.shape, str(a.dtype), str(getattr(a, "sharding", "")),
                            getattr(small_ints(a), "tobytes", bytes)()) for a in args if hasattr(a, "shape"))
        self.summary = (len(jaxpr.eqns), tuple(str(v.aval) for v in jaxpr.outvars),
                        tuple((str(e.params.get("name")), len(kernel_jaxpr(e).eqns),
                               str(e.params.get("compiler_params")), str(e.params.get("input_output_aliases")))
                              for e in kernels), self._args)
        self._printed: dict[str, Any] = {}

    def _print(self, what: str) -> Any:
        if what not in self._printed:
            self._printed[what] = (re.sub(r"interpret=(\w+\([^()]*\)|\w+)", "", str(self._jaxpr)) if what == "outer"
                                   else tuple(str(kernel_jaxpr(e)) + _mappings_text(e) for e in self._kernels))
        return self._printed[what]

    def kernels_key(self) -> "_KernelsKey":
        """The key without the program around the kernels (a parameterized copy of a test
        calls the same kernels from the same line)."""
        return _KernelsKey(self)

    def __hash__(self) -> int:
        return hash(self.summary)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, CallKey) and self.summary == other.summary
                and (self._jaxpr is other._jaxpr  # JAX's jit cache gave the very program again
                     or (self._print("kernels") == other._print("kernels")
                         and self._print("outer") == other._print("outer"))))


def _mappings_text(eqn: Any) -> str:
    """How a kernel call maps its operands: the grid mapping and, which its text leaves out,
    each block's index map, shape, memory space and pipeline mode (two calls of one kernel body
    whose index maps differ select different blocks: never identical), or a kernel's meshes."""
    gm = eqn.params.get("grid_mapping")
    if gm is None:
        return str(eqn.params.get("meshes", eqn.params.get("mesh")))
    blocks = "".join(f"|{bm.index_map_jaxpr}|{bm.block_shape}|{bm.transformed_block_aval}|{bm.array_aval}"
                     f"|{getattr(bm, 'pipeline_mode', None)}" for bm in getattr(gm, "block_mappings", ()))
    return str(gm) + blocks


class _KernelsKey:
    """`CallKey` less the program around the kernels."""

    def __init__(self, key: CallKey) -> None:
        self.key = key

    def __hash__(self) -> int:
        return hash(self.key.summary[2:])

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, _KernelsKey) and self.key.summary[2:] == other.key.summary[2:]
                and (self.key._jaxpr is other.key._jaxpr or self.key._print("kernels") == other.key._print("kernels")))


@contextlib.contextmanager
def _capturing(script: Script) -> Iterator[None]:
    """Top-level jitted calls that run pallas_calls are recorded and return zeros; a call that
    computes one lax collective on a captured call's input names that call's meaning."""
    def impl(run, *args, jaxpr, **params):
        def zeros():
            import jax  # jax arrays, so that `.block_until_ready()` and the like work on them
            return [jax.device_put(np.zeros(v.aval.shape, v.aval.dtype)) for v in jaxpr.jaxpr.outvars], None, None, []

        kernels = [e for e in walk_eqns(jaxpr.jaxpr) if e.primitive.name in KERNEL_CALLS]
        if kernels:
            line, via = call_site(script.path, script.test is not None)
            if not line:
                line, via = script.entry_line, ""
            # Parameterized tests run one kernel many times with other interpret settings: check it once.
            # The key keeps what the check depends on (compiler params: collective_id,
            # skip_device_barrier decide the entry barrier; aliases), not the interpret settings.
            # the program around the kernels too (what one passes the next), but not how
            # interpret mode would run them
            same = CallKey(jaxpr.jaxpr, kernels, args)
            key = (line, via, same.kernels_key())
            if key in script.seen:
                script.seen[key].first = FirstArg(args)  # so the reference that follows pairs with it
                script.seen[key].copies += 1
                script.seen[key].tests.append(script.test)
                return zeros()
            script.seen[key] = cap = Capture(jaxpr, snapshot_args(args), line, kernel_names(jaxpr.jaxpr),
                                             FirstArg(args), test=script.test, same=same, via=via, tests=[script.test])
            script.captures.append(cap)
            early = next((e for e in script.early_references if e[0].names(args)), None)
            if early is not None:
                script.early_references.remove(early)
                early = early[1]
                (cap.reference, cap.reference_line), cap.reference_ran = early, True
            unread = next((e for e in script.early_unread if e[0].names(args)), None)
            if unread is not None:   # a reference before the call that names no meaning: said
                script.early_unread.remove(unread)
                if cap.reference is None:
                    cap.assumes.append(unread[1])
            return zeros()
        ref = lax_reference(jaxpr.jaxpr)
        if ref is not None:
            for c in reversed(script.captures):
                if c.first.names(args) and (c.reference is None or c.reference == ref):
                    c.reference, c.reference_line = ref, caller_line(script.path)
                    return zeros()  # the reference only names the meaning: its values are not needed
            if args:   # before the kernel call it names: taken by the next capture on the same array
                script.early_references.append((FirstArg(args), (ref, caller_line(script.path))))
        elif (name := _unread_reference(jaxpr.jaxpr)) is not None:
            note = (f"line {caller_line(script.path)} computes a lax reference with `{name}` that ringc "
                    "cannot read as the collective's meaning (it slices, indexes or combines the data "
                    "around it, permutes devices other than by one shift, or gathers along another dimension): "
                    "no meaning taken from it (--collective names one)")
            for c in reversed(script.captures):
                if c.first.names(args) and c.reference is None:
                    if note not in c.assumes:
                        c.assumes.append(note)
                    break
            else:
                if args:   # before the kernel call it is about: said on the next capture on the same array
                    script.early_unread.append((FirstArg(args), note))
        return run(*args, jaxpr=jaxpr, **params)

    def lowered(jaxpr, args):
        """A jitted function only lowered (`f.lower(x)`), never called: its kernels are captured
        as if called (with zeros for arguments given only as shapes), and the verdict says so."""
        if not any(e.primitive.name in KERNEL_CALLS for e in walk_eqns(jaxpr.jaxpr)):
            return
        args = [a if hasattr(a, "__array__") else np.zeros(a.shape, a.dtype) for a in args]
        before = len(script.captures)
        impl(None, *args, jaxpr=jaxpr)
        for cap in script.captures[before:]:
            cap.assumes.append(f"line {cap.line} only lowers this jitted function (`.lower`), it never calls it: "
                               "ringc checked the kernel calls as if it did")

    @contextlib.contextmanager
    def staged() -> Iterator[None]:
        before = len(script.captures)
        yield
        for cap in script.captures[before:]:
            cap.assumes.append(f"line {cap.line} calls a shard_map outside jax.jit: ringc ran its whole body as "
                               "one jitted program, as jax.jit(shard_map(...)) does, so this kernel call is "
                               "checked with what the body does with its outputs")

    with jitted_calls(impl), jitted_lowerings(lowered), eager_shard_maps(staged):
        yield


@contextlib.contextmanager
def _claim_tpu() -> Iterator[None]:
    """JAX's test helpers answer as on the TPU the check assumes (`--tpu`): the device under
    test is "tpu", so `jtu.test_device_matches(["tpu"])` holds, and `jtu.is_device_tpu(5, "e")`,
    `jtu.is_device_tpu_at_least(6)` read the stand-in devices' `device_kind` (`tpu.py`): for
    tests that skip themselves off TPU. Nothing runs the kernels, so nothing depends on the
    claim but which tests run."""
    try:
        from jax._src import test_util as jtu
    except ImportError:
        yield
        return
    saved = jtu.device_under_test
    jtu.device_under_test = lambda: "tpu"
    try:
        yield
    finally:
        jtu.device_under_test = saved


def _test_title(test: Any) -> str:
    """`Class.test_method` and, for a parameterized test, its parameters as the test id gives
    them (`RingTest.test_ring0 (numpy.float32, P=2)`): the id's text after the method name,
    which may hold dots of its own, with `<class 'X'>` written `X`."""
    method = getattr(test, "_testMethodName", "")
    title = f"{type(test).__name__}.{method}"
    full = test.id()
    head = f"{type(test).__module__}.{type(test).__qualname__}.{method}"
    params = full[len(head):].strip() if method and full.startswith(head) else ""
    if not method or (not params and full != head):  # an id of another shape: its last two parts
        return ".".join(full.rsplit(".", 2)[-2:])
    params = re.sub(r"<class '([\w.]+)'>", r"\1", params)
    return f"{title} {params}" if params else title


def _future_flags(tree: ast.Module) -> int:
    """The compiler flags of the file's own `from __future__ import ...` statements: each of its
    statements is compiled on its own, with these and nothing of ringc's (whose modules postpone
    annotations: a user's dataclass or signature would see strings)."""
    import __future__
    flags = 0
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            for alias in stmt.names:
                feature = getattr(__future__, alias.name, None)
                flags |= getattr(feature, "compiler_flag", 0)
    return flags


@contextlib.contextmanager
def _claim_gpu(gen: Any) -> Iterator[None]:
    """JAX's test helpers answer as on the GPU the check assumes (`--gpu`, `tpu.GPUS`): the
    device under test is a CUDA "gpu" of the generation's compute capability, not ROCm, for
    tests that skip themselves below sm_90 (JAX's Mosaic GPU tests). Nothing runs the kernels."""
    try:
        from jax._src import test_util as jtu
    except ImportError:
        yield
        return
    want = tuple(int(x) for x in gen.capability.split("."))
    cap = lambda c: tuple(int(x) for x in c.split("."))  # noqa: E731
    saved = {k: getattr(jtu, k) for k in ("device_under_test", "is_device_cuda", "is_device_rocm",
                                          "is_cuda_compute_capability_at_least", "is_cuda_compute_capability_equal",
                                          "_get_device_tags") if hasattr(jtu, k)}
    jtu.device_under_test = lambda: "gpu"
    jtu.is_device_cuda = lambda: True
    jtu.is_device_rocm = lambda: False
    jtu.is_cuda_compute_capability_at_least = lambda c: want >= cap(c)
    jtu.is_cuda_compute_capability_equal = lambda c: want == cap(c)
    jtu._get_device_tags = lambda: {"gpu", "cuda"}
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(jtu, k, v)


def _test_cases(env: dict) -> list[type]:
    """The module's own unittest TestCase classes (not those it imported)."""
    import unittest
    return [v for v in list(env.values())
            if isinstance(v, type) and issubclass(v, unittest.TestCase) and v.__module__ == env["__name__"]]


def _run_tests(script: Script, env: dict) -> None:
    """What `unittest.main()` / `absltest.main()` does for a test module, under ringc: run
    every test method of the module's TestCase classes, one at a time, the kernel calls
    captured and titled with the test. A test that skips itself is run again with JAX's test
    helpers answering as on a TPU (`_claim_tpu`); one that still skips is a note. Test
    failures are expected (the kernels' results are placeholders) and are not reported."""
    script.tests_ran = True
    classes = _test_cases(env)
    import unittest
    loader = unittest.TestLoader()
    tests = [test for cls in classes for test in loader.loadTestsFromTestCase(cls)]
    for k, test in enumerate(tests):
        if not script.runs(_test_title(test)):
            continue
        script.test = _test_title(test)
        before = sum(c.copies for c in script.captures)
        gen = getattr(getattr(script, "answers", None), "generation", None)
        reasons: list[str] = []   # why it skipped itself, as it ran, then answered as a TPU (GPU)
        for claim in (contextlib.nullcontext(), _claim_gpu(gen) if getattr(gen, "gpu", False) else _claim_tpu()):
            result = _Result()
            with claim:
                test.run(result)
            if not result.skipped:
                break
            reasons.append(result.skipped[0][1][:100])
        else:
            why = "; answered as on the chip: ".join(dict.fromkeys(reasons))
            script.notes.append(f"test {script.test} skipped itself ({why}): its kernels were not checked")
            continue
        limits.relieve_memory(script.notes)
        stop = limit_stop(result.raised, script.path)
        if stop is not None:   # no more tests run; the kernel calls of those before it are still checked
            stop.where = stop.where or f"in test {script.test} ({k + 1} of the module's {len(tests)} tests)"
            script.stopped = stop
            break
        if (result.raised and not any(c.test == script.test for c in script.captures)
                and not _copied(script, before)):
            script.notes.append(stopped_before_kernels(script.test, result.raised[0], script.path, script.imports))
            if script.same_failure(result.raised[0], len(tests) - k - 1):
                break
        elif result.errors_raised and not any(
                any(e.primitive.name == "shard_map" for e in walk_eqns(c.jaxpr.jaxpr))
                for c in script.captures if script.test in c.tests):
            # An error (not a failed assertion on placeholder results) after single-device calls only.
            script.notes.append(f"test {script.test} stopped with an error after single-device kernel calls only "
                                f"({describe_exception(result.errors_raised[0], script.path)}): a kernel call under "
                                "shard_map after that point, if it has one, was not checked")
    script.test = None


class _Result(unittest.TestResult):
    """A test result that keeps the exceptions of failed tests, not only their text."""

    def __init__(self) -> None:
        super().__init__()
        self.raised: list[BaseException] = []
        self.errors_raised: list[BaseException] = []  # errors, not failed assertions

    def addError(self, test: Any, err: Any) -> None:
        super().addError(test, err)
        self.raised.append(err[1])
        if not isinstance(err[1], AssertionError):
            self.errors_raised.append(err[1])

    def addFailure(self, test: Any, err: Any) -> None:
        super().addFailure(test, err)
        self.raised.append(err[1])


def _copied(script: Script, before: int) -> bool:
    """The test made a call identical to an earlier one (a parameterized copy)."""
    return sum(c.copies for c in script.captures) > before


@contextlib.contextmanager
def _test_main(script: Script, env: dict) -> Iterator[None]:
    """`unittest.main`, `absltest.main` and JAX's `test_multiprocess.main` run the module's
    tests under ringc (`_run_tests`); `jtu.request_cpu_devices` keeps ringc's devices."""
    import unittest
    patches = [(unittest, "main")]
    try:
        from absl.testing import absltest
        patches.append((absltest, "main"))
    except ImportError:
        pass
    try:
        from jax._src import test_util as jtu
        patches.append((jtu, "request_cpu_devices"))
    except ImportError:
        pass
    try:  # JAX's multi-process GPU tests (0.7-0.8): one process per GPU, run here as one process
        from jax._src import test_multiprocess
        patches += [(test_multiprocess, "main"), (test_multiprocess.MultiProcessTest, "setUp"),
                    (test_multiprocess.MultiProcessTest, "tearDown")]
    except (ImportError, AttributeError):
        test_multiprocess = None
    try:  # JAX's interpret tests read the race detector's state after a call: give them a fresh one
        from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
        if ipc.races is None:
            patches.append((ipc, "races"))
    except ImportError:
        ipc = None
    try:  # JAX's test case turns on JAX's own IR checks (`jax_enable_checks`) in every test: off
        from jax._src import test_util as jtu
        patches.append((jtu.JaxTestCase, "_default_thread_local_config"))
    except (ImportError, AttributeError):
        pass
    saved = [(m, k, getattr(m, k)) for m, k in patches]

    def main(*args, **kwargs):
        _run_tests(script, env)

    for m, k in patches:
        if k == "_default_thread_local_config":
            # They re-check every jaxpr JAX builds (half of tracing a large kernel: rpa_v3_cp's test
            # module); they find bugs of JAX, not of the kernel, and change no program.
            setattr(m, k, {**getattr(m, k), "jax_enable_checks": False})
        elif k in ("setUp", "tearDown"):   # no distributed client to start and end each test together
            setattr(m, k, getattr(m.__mro__[1], k))
        elif k == "races":
            from jax._src.pallas.mosaic.interpret.race_detection_state import RaceDetectionState
            setattr(m, k, RaceDetectionState(num_cores=1))
        else:
            setattr(m, k, (lambda nr_devices: None) if k == "request_cpu_devices" else main)
    argv, sys.argv = sys.argv, [script.path]  # absl parses flags from sys.argv
    try:
        yield
    finally:
        sys.argv = argv
        for m, k, v in saved:
            setattr(m, k, v)


# The comparisons a test makes of its kernels' results. Those results are placeholders (zeros),
# so the comparisons fail by design; a failure must not stop the test before a kernel it calls
# later (a custom_vjp's backward kernels after the forward's check: sweep 16).
GO_ON = {("numpy.testing", None): ("assert_allclose", "assert_array_equal", "assert_array_almost_equal",
                                   "assert_almost_equal", "assert_equal", "assert_array_less"),
         ("unittest", "TestCase"): ("assertEqual", "assertNotEqual", "assertAlmostEqual", "assertNotAlmostEqual",
                                    "assertTrue", "assertFalse", "assertLess", "assertLessEqual", "assertGreater",
                                    "assertGreaterEqual", "assertSequenceEqual", "assertListEqual", "assertTupleEqual"),
         ("jax._src.test_util", "JaxTestCase"): ("assertAllClose", "assertArraysEqual", "assertArraysAllClose")}


# What a check of array values calls (`np.allclose(out, ref)`, `(out == ref).all()`,
# `jnp.max(jnp.abs(out - ref)) < tol`): an assert that calls none (`mesh.shape == (2, 2)`, a
# precondition of the environment) is left as Python has it.
VALUE_CHECKS = frozenset({"allclose", "isclose", "array_equal", "array_equiv", "all", "any", "max", "min", "abs",
                          "sum", "mean", "norm", "count_nonzero", "nonzero", "argmax"})


class _GoOnAsserts(ast.NodeTransformer):
    """The file's own bare `assert test, msg` that checks array values (`VALUE_CHECKS`) as
    `if not test: __ringc_assert__(line, msg)` (`_assert_went_on`): a check of the
    placeholder results (`assert np.allclose(out, ref)` in a loop over block sizes) does not
    end the statement, so the kernel calls after it are captured and checked too. Under a
    JAX trace (a static check in a kernel or a jitted function) it raises as Python's would."""

    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        calls = {c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", "")
                 for c in ast.walk(node.test) if isinstance(c, ast.Call)}
        if not calls & VALUE_CHECKS:
            return node
        call = ast.Call(ast.Name("__ringc_assert__", ast.Load()),
                        [ast.Constant(node.lineno), node.msg or ast.Constant(None)], [])
        out = ast.If(ast.UnaryOp(ast.Not(), node.test), [ast.Expr(call)], [])
        return ast.fix_missing_locations(ast.copy_location(out, node))


def _assert_went_on(script: Script) -> Callable[[int, Any], None]:
    def failed(line: int, msg: Any) -> None:
        from jax._src import core
        if not core.trace_state_clean():
            raise AssertionError(*(() if msg is None else (msg,)))
        script.went_on("assert", line)
    return failed


@contextlib.contextmanager
def _assertions_go_on(script: Script) -> Iterator[None]:
    """While the script runs, a failed comparison (`GO_ON`) returns instead of raising, and the
    first one of each test (or of the script) is a note naming its line: the code after it,
    and the kernels that code calls, are still run and checked. (A bare `assert` of the
    file's own code goes on too: `_GoOnAsserts`.)"""
    import importlib
    patched = []
    for (module, cls), names in GO_ON.items():
        try:   # (JAX's test utilities are in its source tree, not the wheel: often not there)
            owner = importlib.import_module(module)
            owner = getattr(owner, cls) if cls else owner
        except (ImportError, AttributeError):
            continue
        for name in names:
            original = owner.__dict__.get(name)
            if original is not None:
                patched.append((owner, name, original))

    def going_on(name: str, original: Any) -> Any:
        @functools.wraps(original)
        def compare(*args: Any, **kwargs: Any) -> Any:
            try:
                return original(*args, **kwargs)
            except AssertionError:
                frame, line = sys._getframe(1), None
                while frame is not None and line is None:
                    if os.path.abspath(frame.f_code.co_filename) == os.path.abspath(script.path):
                        line = frame.f_lineno
                    frame = frame.f_back
                script.went_on(name, line)
                return None
        return compare

    for owner, name, original in patched:
        setattr(owner, name, going_on(name, original))
    try:
        yield
    finally:
        for owner, name, original in patched:
            setattr(owner, name, original)


def register_cpu_tpu_info() -> None:
    """`emit_pipeline` asks for the TPU generation while it traces; on CPU, answer the default
    generation (v5e, one TensorCore: `tpu.GENERATIONS`), as the importer's abstract mesh does.
    While a script runs, `tpu.answering` answers its `--tpu` generation instead."""
    from jax._src.pallas.mosaic import tpu_info
    from .tpu import generation
    tpu_info.registry.setdefault("cpu", generation(None).tpu_info)


def is_pytest_module(tree: ast.Module) -> bool:
    """A pytest-style test module: top-level `def test_...` functions, or `class Test...`
    without base classes (unittest and absltest classes run through `_run_tests`)."""
    for s in tree.body:
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name.startswith("test"):
            return True
        if isinstance(s, ast.ClassDef) and s.name.startswith("Test") and not s.bases:
            return True
    return False


def _run_pytest(script: Script) -> None:
    try:
        from .pytests import run_pytest_module
    except ImportError as e:
        if e.name != "pytest" and not (e.name or "").startswith("pytest."):
            raise   # ringc's own (an internal error), not a missing pytest
        raise ScheduleError("a pytest-style test module (def test_... functions), but pytest is not installed",
                            file=script.path, fix="pip install pytest (ringc runs the module's tests with it)") from None
    run_pytest_module(script)


# Modules whose functions a print's arguments may call without the call mattering to ringc
# (they compute values to show; a kernel runs only through the script's own functions).
_LOWERING = {"lower", "trace", "compile"}   # a jitted function's methods that trace it (`jitted_lowerings`)
_PRINT_SAFE_ROOTS = {"jnp", "np", "numpy", "jax", "lax", "math", "str", "repr", "len", "float", "int", "abs",
                     "round", "max", "min", "sum", "type", "list", "tuple", "format"}


def _only_prints(stmt: ast.stmt) -> bool:
    """A top-level `print(...)` whose arguments call nothing of the script's own: its output
    is dropped, so it is not run at all (formatting `input_arr[::4, 0]` of the tutorial's
    sharded 1 GiB array took 20 s on CPU devices). A print that calls one of the script's
    functions (`print(run(x))`, which may run a kernel), calls what a call made
    (`print(pl.pallas_call(kernel, ...)(x))`, `print(jax.jit(f)(x))`) or lowers one
    (`print(f.lower(x).compiler_ir())`, a kernel's only trace in scripts that dump its payload)
    still runs."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id == "print"):
        return False
    if any(k.arg == "file" for k in stmt.value.keywords):
        return False
    for node in ast.walk(stmt.value):
        if isinstance(node, ast.Call) and node is not stmt.value:
            if isinstance(node.func, ast.Call):  # `pl.pallas_call(k, ...)(x)`, `jax.jit(f)(x)`: runs code
                return False
            root = node.func
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Call):  # f(x).g(): judged when the walk reaches f(x)
                continue
            if not isinstance(root, (ast.Name, ast.Constant)):
                return False
            if isinstance(root, ast.Name) and root.id not in _PRINT_SAFE_ROOTS and root is node.func:
                return False  # a bare call of a name: the script's own function
            if isinstance(node.func, ast.Attribute) and node.func.attr in _LOWERING:
                return False  # `print(f.lower(x).compiler_ir())`: the kernel's only trace in the script
            if isinstance(root, ast.Name) and root is not node.func and root.id not in _PRINT_SAFE_ROOTS:
                # a method of a value (`x.sum()`, `arr.block_until_ready()`): a value's own method
                continue
    return True


def _unprinted(*args: Any, file: Any = None, **kwargs: Any) -> None:
    """`print` for the script's own code: output to stdout or stderr (dropped while ringc
    runs it) is not formatted; a print to a file the script opened still happens."""
    if file is not None and file is not sys.stdout and file is not sys.stderr:
        print(*args, file=file, **kwargs)


def run_script(path: str, n: int, log: Any, *, entry: str | None = None,
               args: list[ArgSpec] | None = None, params: dict[str, int] | None = None,
               axis: str | None = None, mesh: tuple[tuple[str, str], ...] | None = None,
               stubs: tuple[str, ...] = (), tpu: str | None = None, shape: tuple[int, ...] | None = None,
               tests: str | tuple[str, ...] | None = None, skip_tests: tuple[str, ...] = ()) -> Script:
    """Run the script at `path` on n CPU devices that answer as the TPU generation `tpu`
    (`tpu.answering`, default v5e), capturing its kernel calls; a module of
    functions that makes none has its entry functions called (`entries.call_entries`). Its
    imports resolve from its repository, with `stubs` stubbed (`imports.py`); a package it
    needs that is not installed is an error when nothing got checked. `shape`: the slice the
    devices' `coords` lay out (`--topology`; default the generation's slice of n chips)."""
    from .compat import aliases
    from .imports import importing, missing_import, package_of
    from .tpu import answering, generation
    gen = generation(tpu)
    source = script_source(path)
    skipped: list[str] = []
    try:
        tree = ast.parse(source, path)
    except SyntaxError as e:
        # A notebook cell that is not Python (a design note's pseudocode in a Markdown block,
        # `f(x, out_shape=x, ...)`; a puzzle's cell left to the reader) is skipped like a
        # notebook cell that fails; a script with invalid syntax is refused.
        bad = _failing_cells(path, source)
        if not bad:
            newer = newer_syntax(source, e)
            if newer is not None:   # valid Python of a newer version than the one ringc runs on
                raise ScheduleError(f"{newer}, which Python {sys.version_info.major}.{sys.version_info.minor} (the "
                                    "one ringc runs on) cannot parse", file=path, line=e.lineno,
                                    fix="run ringc from a Python that new (pip install ringc into its venv)") from None
            raise ScheduleError(f"not valid Python: {e.msg}", file=path, line=e.lineno,
                                fix="fix the syntax; ringc runs the script as Python") from None
        lines = source.split("\n")
        cell = "code block" if Path(path).suffix == ".md" else "cell"
        for a, b, err in bad:
            lines[a - 1:b] = [""] * (b - a + 1)
            skipped.append(f"line {err.lineno}: the {cell} at lines {a}-{b} is not valid Python ({err.msg}): "
                           "ringc skipped it, as a notebook cell that fails")
        source = "\n".join(lines)
        tree = ast.parse(source, path)
    script = Script(path, n, tests=tests, skip_tests=tuple(skip_tests))
    script.notes += skipped
    register_cpu_tpu_info()
    env: dict[str, Any] = {"__name__": "__main__", "__file__": os.path.abspath(path), "__builtins__": __builtins__,
                           "__package__": package_of(path), "__ringc_assert__": _assert_went_on(script)}
    # The script's own output (prints of placeholder results) is not ringc's: it is dropped,
    # and its top-level `print` does not even format its arguments: printing a sharded array
    # fetches it from every device (seconds for the tutorial's 1 GiB arrays), for nothing.
    env["print"] = _unprinted
    with (importing(path, tree, stubs) as imports, _devices(n, script.notes, path),
          answering(gen, n, path, shape) as script.answers, _capturing(script), aliases(log),
          _test_main(script, env), _assertions_go_on(script), contextlib.redirect_stdout(io.StringIO()),
          contextlib.redirect_stderr(io.StringIO())):
        script.imports = imports
        pytest_module = entry is None and not args and is_pytest_module(tree)
        future = _future_flags(tree)  # the file's own `from __future__ import ...`, not ringc's
        if pytest_module:  # `def test_...` functions: pytest runs them (`pytests.run_pytest_module`)
            _run_pytest(script)
        for stmt in ([] if pytest_module else tree.body):
            if _only_prints(stmt):
                continue
            try:
                code = compile(ast.Module([_GoOnAsserts().visit(stmt)], type_ignores=[]), path, "exec", flags=future,
                               dont_inherit=True)
            except SyntaxError as e:  # found only when compiled (`def f(_, _)`): like a statement that fails
                script.notes.append(f"line {e.lineno or stmt.lineno}: not valid Python ({e.msg}): ringc skipped the "
                                    "statement and ran the next")
                continue
            stub_calls = len(imports.calls)
            try:
                try:
                    exec(code, env)
                except SystemExit:
                    script.notes.append(f"line {stmt.lineno}: the script exited; statements after it did not run")
                    break
                except KeyboardInterrupt:
                    raise
                except Exception as e:  # a notebook cell that fails: note it, run the next statement
                    user_failure(e, path)
                    missing = missing_import(e, path, imports, stmt.lineno)
                    script.missing = script.missing or missing
                    fix = f"; {missing.fix}" if missing else imports.blame(str(e), stub_calls, type(e).__name__)
                    inner = script_line(e, path)  # the line inside a function the statement called (a kernel's)
                    said = describe_exception(e, path)  # (one with no message already says where it was raised)
                    at = (f", raised at line {inner}" if inner not in (None, stmt.lineno) and "raised at" not in said
                          else "")
                    script.notes.append(f"line {stmt.lineno}: {said}{at} "
                                        f"(ringc ran the next statement{fix})")
            except limits.LimitStop as stop:   # no more statements run; the kernel calls made before it are checked
                script.stopped = stop
                break
        if not pytest_module and entry is None and not args and not script.tests_ran and _test_cases(env):
            # TestCase classes and no `unittest.main()` line: pytest (or `python -m unittest`)
            # collects them, whatever their names; ringc runs them as `main` would
            script.notes.append("the module's unittest TestCase classes ran as pytest runs them (the module has no "
                                "`unittest.main()` / `absltest.main()` line)")
            _run_tests(script, env)
        script.no_test_matched()
        if entry is not None or args or params or axis or mesh or (not script.captures and not pytest_module):
            call_entries(script, env, entry, list(args or []), params, axis=axis, mesh=mesh, imports=imports)
        script.assumes = imports.assumptions()
    if not script.captures and script.missing is not None:
        raise script.missing
    return script
