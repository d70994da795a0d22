"""Schedule → Pallas TPU module.

`emit(schedule)` writes one self-contained Python module per schedule. The module reads like
the hand-written kernels of the Pallas distributed tutorial: one `_kernel` whose locals carry
the schedule's own names, one small function per copy descriptor (evaluated where it is used,
as the tutorial's descriptors are), and a `build(mesh)` that wraps `pl.pallas_call` in
`jax.shard_map`. The output is deterministic: the same schedule always gives the same bytes.

Layout of the emitted module:

    docstring        the schedule's header comment
    constants        NAME, COLLECTIVE, AXIS, PARAMS, IN_SPECS, OUT_SPECS (and SHIFT)
    helpers          only those the module uses, always in the same order
    _kernel          the body, one commented statement per schedule op
    build            pallas_call + shard_map
    make_inputs      random global inputs for `build`
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import keyword
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, NamedTuple

from ..ir import expr as E
from ..ir import schema as S
from ..ir.rules import RuleTable
from ..ir.resolve import axis_builtins, call_buffers, copy_ops, pipeline_windows, resolved, walk_ops
from ..collectives import collective_of

__all__ = ["MAX_LINE", "INDENT", "CodeWriter", "EmitRule", "EMIT", "Emitter", "compiled_source", "emit", "runtime_helpers", "wrap_words"]

MAX_LINE = 100
INDENT = "    "

# ---------------------------------------------------------------------------- code writer


class CodeWriter:
    """Collects lines at the current indentation; `block` opens an indented suite."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.level = 0

    @property
    def width(self) -> int:
        """Columns left on a line at the current indentation."""
        return MAX_LINE - len(INDENT) * self.level

    def line(self, text: str = "") -> None:
        self.lines.append(INDENT * self.level + text if text else "")

    def blank(self, count: int = 1) -> None:
        """Up to `count` blank lines; never at the start of a suite or doubled."""
        if not self.lines or self.lines[-1].rstrip().endswith(":"):
            return
        trailing = len(self.lines) - len(list(_rstrip_blank(self.lines)))
        self.lines.extend([""] * max(0, count - trailing))

    @contextlib.contextmanager
    def block(self, header: str) -> Iterator[None]:
        self.line(header)
        self.level += 1
        try:
            yield
        finally:
            self.level -= 1

    @contextlib.contextmanager
    def function(self, name: str, params: list[str]) -> Iterator[None]:
        """`def name(params):` (wrapped when it does not fit) and its indented suite."""
        self.call(f"def {name}", params, ":")
        self.level += 1
        try:
            yield
        finally:
            self.level -= 1

    def call(self, head: str, args: list[str], tail: str = "", explode: bool = False) -> None:
        """`head(args)tail`, wrapped like black does when it does not fit on one line."""
        flat = f"{head}({', '.join(args)}){tail}"
        if not explode and len(flat) <= self.width:
            self.line(flat)
            return
        joined = ", ".join(args)
        self.line(f"{head}(")
        if not explode and len(joined) + len(INDENT) <= self.width:
            self.line(INDENT + joined)
        else:
            for arg in args:
                self.line(f"{INDENT}{arg},")
        self.line(f"){tail}")

    def expr(self, head: str, text: str, tail: str = "") -> None:
        """`head + text + tail` for a Python expression `text`; when too long, its outermost
        call's arguments go one per line, each wrapped the same way."""
        if len(head + text + tail) <= self.width:
            self.line(head + text + tail)
            return
        split = _outer_call(text)
        if split is None:
            self.line(head + text + tail)
            return
        callee, args, after = split
        self.line(f"{head}{callee}(")
        self.level += 1
        for arg in args:
            self.expr("", arg, ",")
        self.level -= 1
        self.line(f"){after}{tail}")

    def docstring(self, text: str, wrap: bool = True) -> None:
        """A docstring; `wrap` refills each paragraph to the line width (else kept as is)."""
        text = _escape_docstring(text)
        if len(text) + 6 <= self.width and "\n" not in text:
            self.line(f'"""{text}"""')
            return
        if wrap:
            paragraphs = [" ".join(p.split()) for p in text.split("\n\n")]
            # The first line carries the opening quotes, so it is 3 columns shorter.
            text = "\n\n".join(wrap_words(p, self.width, first=self.width - 3 if i == 0 else None)
                                 for i, p in enumerate(paragraphs))
        lines = text.split("\n")
        self.line(f'"""{lines[0]}')
        for ln in lines[1:]:
            self.line(ln)
        self.line('"""')

    def snippet(self, text: str) -> None:
        """Fixed source text (a helper), re-indented to the current level."""
        for ln in text.strip("\n").split("\n"):
            self.line(ln)

    def text(self) -> str:
        return "\n".join(_rstrip_blank(self.lines)) + "\n"


def _outer_call(text: str) -> tuple[str, list[str], str] | None:
    """`f(a, b).g(c)` -> ("f", ["a", "b"], ".g(c)"): the first top-level call's callee, its
    arguments split at top-level commas, and what follows it; None if it has none."""
    depth, start, args, quote = 0, None, [], None
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            if depth == 0 and ch == "(":
                start, args = i, []
                last = i + 1
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0 and ch == ")" and start is not None:
                args.append(text[last:i].strip())
                return text[:start], [a for a in args if a], text[i + 1:]
        elif ch == "," and depth == 1 and start is not None:
            args.append(text[last:i].strip())
            last = i + 1
    return None


def _rstrip_blank(lines: list[str]) -> list[str]:
    end = len(lines)
    while end and lines[end - 1] == "":
        end -= 1
    return lines[:end]


def _escape_docstring(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')


# ---------------------------------------------------------------------------- helpers
# Emitted verbatim when used, in the order of `runtime.py`, where they are real Python.


def runtime_helpers(filename: str = "runtime.py") -> dict[str, str]:
    """Each helper of `ringc/codegen/<filename>` by name (a function or class, or a constant,
    whose name starts with `_`), as its source text with its decorators and, for a constant,
    the comment line above it (read with `ast`, as `inspect.getsource` would give it, without
    importing jax). A helper named `_device_axes` is the multi-axis `_device` and is emitted
    under that name."""
    path = Path(__file__).with_name(filename)
    source = path.read_text()
    out = {}
    lines = source.splitlines()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name.startswith("_"):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])  # with its decorators
            text = "\n".join(lines[first - 1:node.end_lineno])
            if node.name in _MULTI_AXIS_VARIANTS:
                text = text.replace(f"def {node.name}(", f"def {_MULTI_AXIS_VARIANTS[node.name]}(", 1)
            out[node.name] = "\n" + text + "\n"
        elif (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
              and node.targets[0].id.startswith("_") and node.targets[0].id.lstrip("_").isupper()):
            first = node.lineno - 1 if lines[node.lineno - 2].lstrip().startswith("#") else node.lineno
            out[node.targets[0].id] = "\n".join(lines[first - 1:node.end_lineno]) + "\n"
    return out


# Helpers emitted under another helper's name (a schedule over several mesh axes).
_MULTI_AXIS_VARIANTS = {"_device_axes": "_device", "_device_core": "_device", "_device_axes_core": "_device"}
_HELPERS: dict[str, str] = runtime_helpers()

_HELPER_DEPS = {"_floordiv": ("_mod",), "_barrier": ("_device",), "_device_axes": ("_mod", "_floordiv"),
                "_device_axes_core": ("_mod", "_floordiv"),
                "_emit_pipeline_fed": ("_ArrivingRef",)}
# Modules the helpers import beyond those every emitted module imports.
_HELPER_IMPORTS = {"_ArrivingRef": "dataclasses"}
# A schedule over several mesh axes gets these variants (same function names) instead.
_MULTI_AXIS_HELPERS = {"_device": "_device_axes"}
# A schedule on every TensorCore (`cores: 2`) gets these (same function names) instead.
_CORE_HELPERS = {"_device": "_device_core", "_device_axes": "_device_axes_core"}

_EXPR_HELPERS = {"%": "_mod", "//": "_floordiv", "and": "_and", "or": "_or"}

# Names the emitted module defines or uses; schedule names are renamed around them.
_MODULE_NAMES = {
    "dataclasses", "functools", "math", "jax", "jnp", "lax", "pl", "pltpu", "P", "NAME", "COLLECTIVE", "AXIS",
    "PARAMS", "IN_SPECS", "OUT_SPECS", "SHIFT", "DATA", "CHECKED", "SOURCE", "SCHEDULE", "build", "make_inputs",
    "_kernel", *_HELPERS,
}
_LOCAL_NAMES = {
    "me", "left", "right", "N", "mesh_axes", "_", "mesh", "interpret", "params", "p", "kernel",
    "per_device", "key", "keys", "_inner", "sharded", "axis", "axis_name", "dtype", "sizes", "call",
    "forward", "backward", "residuals", "cotangent", "i", "_sizes", "_call", "transpose", "data", "data_inputs",
}
_RESERVED = (set(keyword.kwlist) | set(keyword.softkwlist) | set(dir(builtins))
             | _MODULE_NAMES | _LOCAL_NAMES)


# ---------------------------------------------------------------------------- shared facts


def _str(text: str) -> str:
    """A double-quoted Python string literal."""
    return '"' + text.encode("unicode_escape").decode("ascii").replace('"', '\\"') + '"'


def _axis_text(axis: str | tuple[str, ...] | None) -> str:
    if axis is None:
        return "None"
    return _str(axis) if isinstance(axis, str) else _tuple_text([_str(a) for a in axis])


def _spec_text(spec: tuple[str | tuple[str, ...] | None, ...]) -> str:
    return f"P({', '.join(_axis_text(a) for a in spec)})"


def _tuple_text(items: list[str]) -> str:
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def _identifier(name: str) -> str:
    ident = re.sub(r"\W", "_", name)
    return "_" + ident if not ident or ident[0].isdigit() else ident


def _linear(e: E.Expr, name: str) -> tuple[E.Expr, E.Expr] | None:
    """(a, b) with e = a * name + b and neither a nor b mentioning `name`, when e is linear
    in it (sums, differences, and products with one side free of it); else None."""
    if name not in E.names(e):
        return E.Const(0), e
    if e == E.Var(name):
        return E.Const(1), E.Const(0)
    if isinstance(e, E.Neg):
        inner = _linear(e.operand, name)
        return None if inner is None else (_times(E.Const(-1), inner[0]), _times(E.Const(-1), inner[1]))
    if not isinstance(e, E.BinOp) or e.op not in ("+", "-", "*"):
        return None
    left, right = _linear(e.left, name), _linear(e.right, name)
    if left is None or right is None:
        return None
    if e.op == "*":
        if name in E.names(e.left) and name in E.names(e.right):
            return None
        (a, b), other = (left, e.right) if name in E.names(e.left) else (right, e.left)
        return _times(a, other), _times(b, other)
    return _plus(left[0], right[0], e.op), _plus(left[1], right[1], e.op)


def _times(a: E.Expr, b: E.Expr) -> E.Expr:
    if E.Const(0) in (a, b):
        return E.Const(0)
    if a == E.Const(1):
        return b
    return a if b == E.Const(1) else E.BinOp("*", a, b)


def _plus(a: E.Expr, b: E.Expr, op: str) -> E.Expr:
    if b == E.Const(0):
        return a
    if a == E.Const(0):
        return b if op == "+" else E.Neg(b)
    return E.BinOp(op, a, b)


def _walk_exprs(e: E.Expr) -> Iterator[E.Expr]:
    yield e
    for c in E.children(e):
        yield from _walk_exprs(c)


# ---------------------------------------------------------------------------- emitter


class _Call(NamedTuple):
    """One pallas_call of a split-phase program, as emitted: the refs its kernel gets, in
    Pallas order. `operands` (schedule names): the inputs it reads, the program's arrays an
    earlier call made, the semaphores it takes; `outputs`: (name, index of the operand it
    aliases or None), the program's arrays it binds, then the semaphores it returns;
    `scratch`: its own semaphores and VMEM scratch."""
    position: int
    kernel: str
    body: list
    fn: str
    operands: list[str]
    outputs: list[tuple[str, int | None]]
    scratch: list[str]
    barrier: bool


class Emitter:
    # What the emitted module imports, and the helpers it may use (by name: source text),
    # what each needs beside it, and the modules they import: the TPU target's.
    IMPORTS = ("import jax", "import jax.numpy as jnp", "from jax import lax", "from jax.experimental import pallas as pl",
               "from jax.experimental.pallas import tpu as pltpu")
    HELPERS = _HELPERS
    HELPER_DEPS = _HELPER_DEPS
    HELPER_IMPORTS = _HELPER_IMPORTS
    # Keywords of `kernel`, `build` and `_call` beyond the TPU target's (name, default).
    KEYWORDS: tuple[tuple[str, str], ...] = ()
    # The emit rule of each op class (`EMIT`, set below the table).
    RULES: Any = None
    # The helpers `kernel`, `build` and `make_inputs` use.
    API_HELPERS = {"_config", "_given", "_axis_sizes", "_interpret_mode", "_random_input", "_check_shard", "_checked"}

    def __init__(self, schedule: S.Schedule, checked: Iterable[Mapping[str, int]] | None = None):
        self.s = schedule
        self.resolved = resolved(schedule)
        self.checked = None if checked is None else [dict(c) for c in checked]
        self.helpers: set[str] = set()
        self.names_used: set[str] = set()
        self.rename = self._choose_names()
        self.windows: dict[str, S.Buffer] = {}  # inside a pipeline body: its VMEM blocks
        self.loop_names: set[str] = set()  # inside a `loop`: its indices, Python ints when traced

    def buffer(self, name: str) -> S.Buffer:
        return self.windows.get(name) or self.s.buffers[name]

    def dtype(self, name: str) -> str:
        return self.buffer(name).dtype or self.s.dtype

    # -- names -------------------------------------------------------------------
    def _choose_names(self) -> dict[str, str]:
        """Python names for the schedule's names: its own where possible, `_`-suffixed where
        they would clash with a keyword, a builtin or a name the module needs."""
        s = self.s
        # (key, wanted identifier, whether that is the schedule's name unchanged)
        wanted: list[tuple[str, str, bool]] = []
        pipelines = [op for op in walk_ops(s.all_ops) if isinstance(op, S.Pipeline)]
        local = list(dict.fromkeys([*(n for op in pipelines for n in (*op.pipeline, *op.specs)),
                                    *(n for op in walk_ops(s.all_ops) if isinstance(op, S.Loop) for n in op.loop),
                                    *(a for c in s.copies.values() for a in c.args)]))
        for table in (s.params, s.grid, s.let, s.buffers, s.data, s.semaphores, local):
            wanted += [(n, _identifier(n), _identifier(n) == n) for n in table]
        wanted += [(f"copy:{n}", "_" + _identifier(n), _identifier(n) == n) for n in s.copies]
        out = {n: n for n in ("me", "N", "left", "right", "core", *axis_builtins(s.axes))}
        taken = set(_RESERVED)
        # Unchanged names claim themselves first, so one rename never cascades into others.
        for key, ident, natural in wanted:
            if natural and ident not in taken:
                out[key] = ident
                taken.add(ident)
        for key, ident, _ in wanted:
            if key not in out:
                while ident in taken:
                    ident += "_"
                out[key] = ident
                taken.add(ident)
        return out

    def name(self, n: str) -> str:
        return self.rename[n]

    def copy_fn(self, n: str) -> str:
        return self.rename[f"copy:{n}"]

    # -- expressions ---------------------------------------------------------------
    def py(self, e: E.Expr) -> str:
        """An expression inside the kernel: traced or static, through the helpers."""
        for sub in _walk_exprs(e):
            if isinstance(sub, E.BinOp) and sub.op in _EXPR_HELPERS:
                self.helpers.add(_EXPR_HELPERS[sub.op])
            elif isinstance(sub, E.Not):
                self.helpers.add("_not")
            elif isinstance(sub, E.Call):
                self.helpers.add(f"_{sub.func}")
            elif isinstance(sub, E.IfExp):
                self.helpers.add("_select")
            elif isinstance(sub, (E.Var, E.Item)):
                self.names_used.add(sub.name)
        return E.to_python(e, self.rename)

    def static(self, e: E.Expr) -> str:
        """An expression of N and params outside the kernel: plain Python on ints, with the
        lets it uses that depend only on N and params written out (`Resolved.inline`)."""
        e = self.resolved.inline(e)
        if any(isinstance(sub, E.Call) and sub.func == "log2" for sub in _walk_exprs(e)):
            self.helpers.add("_log2")
        return E.to_static_python(e, self.rename)

    def divisions(self, exprs: Iterable[E.Expr]) -> Iterator[tuple[str, str]]:
        for e in exprs:
            for sub in _walk_exprs(self.resolved.inline(e)):
                if isinstance(sub, E.BinOp) and sub.op == "//":
                    yield self.static(sub.left), self.static(sub.right)

    def static_tuple(self, exprs: list[E.Expr]) -> str:
        return _tuple_text([self.static(d) for d in exprs]) if exprs else "()"

    # -- references ----------------------------------------------------------------
    def _indices(self, ref: E.Ref) -> list[str]:
        dims = self.buffer(ref.name).full_shape if ref.name in self.s.buffers or ref.name in self.windows else []
        out = []
        for axis, ix in enumerate(ref.indices):
            if not isinstance(ix, E.Slice):
                out.append(self.py(ix))
            elif ix.start is None and ix.size is None:
                out.append(":")
            else:
                start = ix.start if ix.start is not None else E.Const(0)
                size = ix.size if ix.size is not None else E.BinOp("-", dims[axis], start)
                out.append(f"pl.ds({self.py(start)}, {self.py(size)})")
        return out

    def dma_ref(self, ref: E.Ref) -> str:
        """A region as a DMA operand or a semaphore element: `buf.at[i, pl.ds(a, s)]`."""
        base = self.name(ref.name)
        return f"{base}.at[{', '.join(self._indices(ref))}]" if ref.indices else base

    def value_ref(self, ref: E.Ref) -> str:
        """A region to load or store: `buf[i, pl.ds(a, s)]`, or `buf[...]` for all of it."""
        base = self.name(ref.name)
        return f"{base}[{', '.join(self._indices(ref)) if ref.indices else '...'}]"

    def region_shape(self, ref: E.Ref) -> list[E.Expr]:
        dims = self.buffer(ref.name).full_shape
        shape: list[E.Expr] = []
        for axis, dim in enumerate(dims):
            if axis >= len(ref.indices):
                shape.append(dim)
                continue
            ix = ref.indices[axis]
            if isinstance(ix, E.Slice):
                if ix.size is not None:
                    shape.append(ix.size)
                elif ix.start is not None:
                    shape.append(E.BinOp("-", dim, ix.start))
                else:
                    shape.append(dim)
        return shape

    def device(self, target: E.Expr) -> str:
        self.helpers.add("_device")  # `_device_axes` for a multi-axis schedule, see `emit`
        return f"_device({self.py(target)}, axis, mesh_axes)"

    # -- module ----------------------------------------------------------------------
    def emit(self) -> str:
        kernel = self.kernel()  # first: it decides which helpers are needed
        api = self.api()
        w = CodeWriter()
        self.module_docstring(w)
        w.line()
        def variant(h: str) -> str:  # the helper a schedule over several mesh axes, or on every core, uses
            if len(self.s.axes) > 1:
                h = _MULTI_AXIS_HELPERS.get(h, h)
            return _CORE_HELPERS.get(h, h) if self.s.cores > 1 else h
        needed = {variant(h) for h in self.helpers}
        while more := {variant(d) for h in needed for d in self.HELPER_DEPS.get(h, ())} - needed:
            needed |= more
        imports = sorted({"functools", "math", *(self.HELPER_IMPORTS[h] for h in needed if h in self.HELPER_IMPORTS)})
        for ln in (*(f"import {m}" for m in imports), "", *self.IMPORTS, "", "P = jax.sharding.PartitionSpec"):
            w.line(ln)
        w.blank()
        self.constants(w)
        for h, src in self.HELPERS.items():
            if h in needed:
                w.blank(2)
                w.snippet(src)
        w.lines.extend(["", ""] + _rstrip_blank(kernel.lines) + ["", ""] + api.lines)
        w.blank(2)
        self.schedule_constant(w)
        return w.text()

    def module_docstring(self, w: CodeWriter) -> None:
        base = Path(self.s.file).name
        parts = [f"Generated by ringc from {base}. Do not edit; regenerate with `ringc emit`."]
        if self.s.header:
            parts.append(self.s.header)
        if self.s.description:
            parts.append(self.s.description.strip())
        ins = ", ".join(self.name(n) for n in self.s.buffers_of("input"))
        parts.append(wrap_words(
            f"Use: `kernel({ins}, axis_name=...)` on one device's shards inside your own jax.shard_map "
            f"(where the lax collective would be; shapes and dtype come from the arguments), or "
            f"`build(mesh)` for global arrays. Gradient: {self.backward_text(collective_of(self.s))}.",
            MAX_LINE))
        w.docstring("\n\n".join(parts), wrap=False)

    def constants(self, w: CodeWriter) -> None:
        s = self.s
        ins = s.buffers_of("input")
        outs = s.buffers_of("output")
        w.line(f"NAME = {_str(s.name)}")
        w.line(f"COLLECTIVE = {_str(s.collective.kind)}")
        if collective_of(s).takes_shift:
            w.line(f"SHIFT = {s.collective.shift!r}  # device d sends to (d + SHIFT) % N")
        w.line(f"AXIS = {_axis_text(s.axis)}")
        w.line(f"PARAMS = {{{', '.join(f'{_str(k)}: {v!r}' for k, v in s.params.items())}}}")
        specs = [_spec_text(s.partition_spec(n)) for n in ins] + [_spec_text((s.axis,))] * len(s.data)
        in_specs = f"IN_SPECS = {_tuple_text(specs)}  # {', '.join([*ins, *s.data])}"
        if len(in_specs) > MAX_LINE:  # the comment on its own line
            w.line(f"# {', '.join([*ins, *s.data])}")
            in_specs = in_specs.split("  # ")[0]
        w.line(in_specs)
        if s.data:
            w.line("# Runtime data: int32 [N] per device, read from SMEM (scalar prefetch), in this order.")
            w.line(f"DATA = {_tuple_text([_str(n) for n in s.data])}")
        out_specs = [_spec_text(s.partition_spec(n)) for n in outs]
        w.line(f"OUT_SPECS = {out_specs[0] if len(outs) == 1 else _tuple_text(out_specs)}"
               f"  # {', '.join(outs)}")
        self.checked_constant(w)

    def checked_call(self) -> str:
        """`kernel`'s call that has ringc check sizes not in CHECKED."""
        return "_checked(sizes)"

    def checked_constant(self, w: CodeWriter) -> None:
        """CHECKED: the sizes (N, the axis sizes, every parameter) `ringc check` proved this
        kernel at before emitting it; `kernel` has ringc check any others first (`_checked`)."""
        if self.checked is None:
            w.line("# Emitted with --unchecked: `kernel` runs any sizes without checking them.")
            w.line("CHECKED = None")
            return
        w.line("# The sizes `ringc check` proved this kernel at; `kernel` checks others with ringc first.")
        items = ["{" + ", ".join(f"{_str(self.name(k) if k in self.s.params else k)}: {v!r}" for k, v in c.items())
                 + "}" for c in self.checked]
        one = f"CHECKED = [{', '.join(items)}]"
        if len(one) <= MAX_LINE:
            w.line(one)
            return
        w.line("CHECKED = [")
        for item in items:
            w.line(f"{INDENT}{item},")
        w.line("]")

    def schedule_constant(self, w: CodeWriter) -> None:
        """SOURCE and SCHEDULE: the schedule's file and YAML text, which `_checked` gives
        ringc to check sizes not in CHECKED (None for a schedule made in code)."""
        w.line("# The schedule this module was emitted from: ringc checks new sizes against it.")
        w.line(f"SOURCE = {_str(Path(self.s.file).name)}")
        text = self.s.text
        if text is None:
            w.line("SCHEDULE = None")
        elif '"""' not in text and "\\" not in text and all(c == "\n" or c.isprintable() for c in text):
            w.line('SCHEDULE = """\\')
            w.lines.extend(text.rstrip("\n").split("\n"))
            w.line('"""')
        else:
            w.line(f"SCHEDULE = {text!r}")

    # -- kernel ----------------------------------------------------------------------
    def kernel_refs(self) -> list[tuple[str, str]]:
        """(schedule name, role) in pallas_call order: inputs, outputs, HBM scratch (extra
        outputs), semaphores, VMEM scratch."""
        s = self.s
        refs = [(n, "scalar prefetch (SMEM)") for n in s.data]
        refs += [(n, "input") for n in s.buffers_of("input")]
        refs += [(n, "output") for n in s.buffers_of("output")]
        refs += [(n, self.SCRATCH_OUTPUTS) for n in s.buffers_of("hbm_scratch")]
        refs += [(n, "semaphore") for n in s.semaphores]
        refs += [(n, "VMEM scratch") for n in s.buffers_of("vmem_scratch")]
        return refs

    def kernel(self) -> CodeWriter:
        s = self.s
        if s.kernels:
            w = CodeWriter()
            done: set[str] = set()
            for call in self.program_calls():
                if call.fn in done:
                    continue
                done.add(call.fn)
                if w.lines:
                    w.blank(2)
                refs = [self.name(n) for n in call.operands]
                refs += [self.name(n) if alias is None else self.alias_name(n) for n, alias in call.outputs]
                refs += [self.name(n) for n in call.scratch]
                aliased = [self.alias_name(n) for n, alias in call.outputs if alias is not None]
                copies = list(dict.fromkeys(op.copy_name for op in copy_ops(call.body)))
                doc = (f"{self.grid_text()} of kernel `{call.kernel}` of "
                       f"`{s.name}` on one device (pallas_call {call.position + 1} of {len(s.program)}).\n\n"
                       + self.call_ref_doc(call))
                w.lines.extend(self.kernel_text(call.fn, refs, doc, call.body, copies, aliased).lines)
            return w
        refs = [self.name(n) for n, _ in self.kernel_refs()]
        doc = f"{self.grid_text()} of `{s.name}` on one device.\n\n" + self.kernel_ref_doc()
        return self.kernel_text("_kernel", refs, doc, s.body, list(s.copies), [])

    def grid_text(self) -> str:
        """What one call of a kernel function is: a grid point, or the whole kernel."""
        if self.s.cores > 1:
            loops = f"its grid ({', '.join(self.s.grid)}) as loops" if self.s.grid else "no grid"
            return f"The whole kernel on one TensorCore ({loops})"
        return f"One point of the grid ({', '.join(self.s.grid)})" if self.s.grid else "The whole kernel (it has no grid)"

    def alias_name(self, n: str) -> str:
        """The kernel parameter of an output aliased to its input (unused: the input's ref is it)."""
        return f"_{self.name(n)}_aliased"

    def kernel_text(self, fn: str, refs: list[str], doc: str, ops: list[S.Op], copies: list[str],
                    aliased: list[str]) -> CodeWriter:
        """One kernel function: `fn(*refs, *, statics)`, its grid indices, lets, the descriptors
        of `copies` and the ops; `aliased` refs are deleted (the aliased input's ref is used)."""
        s = self.s
        # On every TensorCore (`cores: 2`) the kernel has no grid: its points are loops.
        loops = list(s.grid.items()) if s.cores > 1 else []
        lets = [f"{INDENT * (1 + len(loops))}{self.name(n)} = {self.py(e)}" for n, e in s.let.items()]
        body = CodeWriter()
        body.level = 1 + len(loops)
        for n in copies:
            body.blank()
            self.copy_descriptor(body, n, s.copies[n])
        body.blank()
        self.ops(body, ops, top=True)

        w = CodeWriter()
        statics = ["N", *self.axis_sizes(), *(self.name(p) for p in s.params), "axis", "mesh_axes"]
        w.call(f"def {fn}", refs + ["*"] + statics, ":")
        w.level = 1
        w.docstring(doc)
        if aliased:
            w.line(f"del {', '.join(aliased)}  # aliased outputs: the same memory as the inputs")
        w.line("me = lax.axis_index(axis)")
        if s.megacore:
            w.line("core = pl.program_id(0)  # megacore: the TensorCore, a parallel grid axis")
        elif s.cores > 1:
            w.line("core = lax.axis_index(\"core\")  # this TensorCore: the kernel runs on each")
        for i, g in enumerate(s.grid if not loops else (), start=1 if s.megacore else 0):
            w.line(f"{self.name(g)} = pl.program_id({i})")
        derived = self.derived_lines()
        for i, a in enumerate(s.axes):
            if f"me_{a}" in self.names_used:
                w.line(f"me_{a} = lax.axis_index(axis[{i}])")
        w.lines.extend(INDENT + line for line in derived)
        for g, size in loops:  # the grid's points in row-major order, as pallas_call runs them
            w.line()
            w.line(f"@pl.loop(0, {self.static(size)})")
            w.line(f"def _({self.name(g)}):")
            w.level += 1
        w.lines.extend(lets)
        w.blank()
        w.lines.extend(body.lines)
        return w

    def derived_lines(self) -> list[str]:
        """`left = ...`, `right = ...`: the builtins the ops used, each after those it uses."""
        derived = []
        for b, e in reversed(self.resolved.builtins.items()):  # dependents first: they add names
            if b in self.names_used:
                derived.insert(0, f"{b} = {self.py(e)}")
        return derived

    # The kernel call its docstring names, and its role of the scratch allocated as outputs.
    CALL = "pallas_call"
    SCRATCH_OUTPUTS = "HBM scratch"

    def kernel_ref_doc(self) -> str:
        groups: dict[str, list[str]] = {}
        for n, role in self.kernel_refs():
            groups.setdefault(role, []).append(f"`{self.name(n)}`")
        parts = []
        for role, refs in groups.items():
            plural = "s" if len(refs) > 1 and role in ("input", "output", "semaphore") else ""
            note = " (allocated as extra outputs)" if role == self.SCRATCH_OUTPUTS else ""
            parts.append(f"{role}{plural} {', '.join(refs)}{note}")
        call = "pl.kernel" if self.s.cores > 1 else self.CALL
        own = " Semaphores and VMEM scratch are this core's own; HBM is the chip's." if self.s.cores > 1 else ""
        return f"Refs, in {call} order: " + "; ".join(parts) + "." + own + " " + self.refs_note()

    def refs_note(self) -> str:
        return ("`axis` is the kernel's mesh axis name (a tuple over several), `mesh_axes` every mesh axis "
                "in order.")

    def program_calls(self) -> list[_Call]:
        """The pallas_calls of a split-phase program, in order (`_Call`). A call binds the
        buffers its body names (`resolve.call_buffers`, what the verifier unrolls): inputs are
        operands; an output or HBM scratch array is a new output in the first call that names
        it and an aliased operand in later ones; taken semaphores are operands (aliased if
        also returned), returned ones outputs, the rest the call's own scratch."""
        s = self.s
        made: set[str] = set()
        versions: dict[tuple, str] = {}
        out: list[_Call] = []
        for position, k in enumerate(s.program):
            kernel = s.kernels[k]
            used = call_buffers(s, kernel.body)
            operands = [n for n in used if s.buffers[n].kind == "input"]
            operands += [n for n in used if s.buffers[n].kind in ("output", "hbm_scratch") and n in made]
            operands += list(kernel.takes)
            outputs = [(n, operands.index(n) if n in operands else None) for n in used
                       if s.buffers[n].kind in ("output", "hbm_scratch")]
            outputs += [(n, operands.index(n) if n in operands else None) for n in kernel.returns]
            scratch = [n for n in s.semaphores if n not in kernel.takes and n not in kernel.returns]
            scratch += [n for n in used if s.buffers[n].kind == "vmem_scratch"]
            made |= {n for n, _ in outputs if n in s.buffers}
            layout = (k, tuple(operands), tuple(outputs), tuple(scratch))
            fn = versions.setdefault(layout, f"_kernel_{_identifier(k)}"
                                     + ("" if not any(v[0] == k for v in versions) else f"_{position + 1}"))
            barrier = any(isinstance(op, S.Barrier) for op in walk_ops(kernel.body))
            out.append(_Call(position, k, kernel.body, fn, operands, outputs, scratch, barrier))
        return out

    def call_ref_doc(self, call: _Call) -> str:
        parts = []
        if call.operands:
            parts.append("operands " + ", ".join(f"`{self.name(n)}`" for n in call.operands))
        if call.outputs:
            parts.append("outputs " + ", ".join(
                f"`{self.name(n)}`" if alias is None else f"`{self.alias_name(n)}` (aliased to `{self.name(n)}`)"
                for n, alias in call.outputs))
        if call.scratch:
            parts.append("scratch " + ", ".join(f"`{self.name(n)}`" for n in call.scratch))
        return ("Refs, in pallas_call order: " + "; ".join(parts) + ". Semaphores among the operands and "
                "outputs are handed from call to call with DMAs still counting on them (`takes` and "
                "`returns` in the schedule). `axis` is the kernel's mesh axis name (a tuple over several), "
                "`mesh_axes` every mesh axis in order.")

    def copy_doc(self, name: str, c: S.Copy) -> str:
        """A copy descriptor function's docstring: the copy in schedule terms."""
        where = f" (line {c.line})" if c.line else ""
        if c.remote:
            return f"Remote copy `{name}`{where}: {c.src.text()} -> {c.dst.text()} on device {E.to_text(c.to)}."
        return f"Local copy `{name}`{where}: {c.src.text()} -> {c.dst.text()}."

    def copy_descriptor(self, w: CodeWriter, name: str, c: S.Copy) -> None:
        """The function that makes copy `name`'s descriptor where it is used."""
        with w.block(f"def {self.copy_fn(name)}({', '.join(self.name(a) for a in c.args)}):"):
            w.docstring(self.copy_doc(name, c))
            callee, args = self.copy_call(name, c)
            w.call(f"return {callee}", args, explode=c.remote)

    def copy_call(self, name: str, c: S.Copy) -> tuple[str, list[str]]:
        """What makes the descriptor, and its arguments."""
        if c.remote:
            return "pltpu.make_async_remote_copy", [
                f"src_ref={self.dma_ref(c.src)}",
                f"dst_ref={self.dma_ref(c.dst)}",
                f"send_sem={self.dma_ref(c.send_sem)}",
                f"recv_sem={self.dma_ref(c.recv_sem)}",
                f"device_id={self.device(c.to)}",
                "device_id_type=pl.DeviceIdType.MESH",
            ]
        return "pltpu.make_async_copy", [
            f"src_ref={self.dma_ref(c.src)}",
            f"dst_ref={self.dma_ref(c.dst)}",
            f"sem={self.dma_ref(c.sem)}",
        ]

    # -- ops -------------------------------------------------------------------------
    def ops(self, w: CodeWriter, ops: list[S.Op], top: bool = False) -> None:
        for op in ops:
            is_block = isinstance(op, (S.When, S.Loop))
            if top and is_block:
                w.blank()
            where = f"line {op.line}: " if op.line else ""
            rule = self.RULES[type(op)]
            w.line(f"# {where}{rule.summary(op)}")
            rule.emit(self, w, op)
            if top and is_block:
                w.blank()

    def op_when(self, w: CodeWriter, op: S.When) -> None:
        # N, params and loop indices are Python ints: decided when traced. A guard's terms
        # of that kind (`and`ed with traced ones) are a Python `if` around the `pl.when`:
        # a branch they rule out is not traced at all (a copy there may index past its
        # buffer for these params, e.g. lane 1 of one lane: no trace error for a branch
        # that never runs, as `ringc check` has it).
        static, traced = self.resolved.split_guard(op.when, self.loop_names)
        with w.block(f"if {self.py(E.conjunction(static))}:") if static else contextlib.nullcontext():
            if not traced:
                self.ops(w, op.do)
                return
            w.line(f"@pl.when({self.py(E.conjunction(traced))})")
            with w.block("def _():"):
                self.ops(w, op.do)

    def descriptor(self, use: S.CopyUse) -> str:
        """The call that makes a copy's descriptor where it is used: `_push(k=step + 1)`."""
        args = [f"{self.name(a)}={self.py(e)}" for a, e in use.args]
        return f"{self.copy_fn(use.name)}({', '.join(args)})"

    def op_copy(self, w: CodeWriter, op: S.Op) -> None:
        """start, wait, wait_send, wait_recv: the descriptor's method of the same name."""
        w.line(f"{self.descriptor(op.copy_use)}.{op.tag}()")

    def op_loop(self, w: CodeWriter, op: S.Loop) -> None:
        """A Python `for` per index (row-major), unrolled when the kernel is traced."""
        outer, level = set(self.loop_names), w.level
        for name, size in op.loop.items():
            w.line(f"for {self.name(name)} in range({self.static(size)}):")
            w.level += 1
            self.loop_names.add(name)
        self.ops(w, op.do)
        w.level, self.loop_names = level, outer

    # Keywords of a remote signal beyond its device id (Mosaic GPU's take none).
    DEVICE_ID_TYPE = ("device_id_type=pl.DeviceIdType.MESH",)

    def op_signal(self, w: CodeWriter, op: S.Signal) -> None:
        sem, inc = self.dma_ref(op.signal), self.py(op.inc)
        for target in op.to:
            if target == E.Var("me"):
                w.call("pl.semaphore_signal", [sem, inc])
            else:
                w.call("pl.semaphore_signal", [sem, inc, f"device_id={self.device(target)}", *self.DEVICE_ID_TYPE])

    def op_semwait(self, w: CodeWriter, op: S.SemWait) -> None:
        w.call("pl.semaphore_wait", [self.dma_ref(op.sem_wait), self.py(op.value)])

    def op_barrier(self, w: CodeWriter, op: S.Barrier) -> None:
        self.helpers.add("_barrier")
        args = [f"[{', '.join(self.py(t) for t in op.barrier)}]", "axis", "mesh_axes"]
        if not op.double:
            args.append("double=False")
        w.call("_barrier", args)

    def op_zero(self, w: CodeWriter, op: S.Zero) -> None:
        buf = self.name(op.zero.name)
        if op.zero.indices:
            dims = [self.py(d) for d in self.region_shape(op.zero)]
            shape = _tuple_text(dims) if dims else "()"
        else:
            shape = f"{buf}.shape"
        w.line(f"{self.value_ref(op.zero)} = jnp.zeros({shape}, {buf}.dtype)")

    def op_accumulate(self, w: CodeWriter, op: S.Accumulate) -> None:
        src = self.value_ref(op.src)
        if self.dtype_key(op.src.name) != self.dtype_key(op.accumulate.name):
            src += f".astype({self.name(op.accumulate.name)}.dtype)"
        if op.base is not None:
            w.line(f"{self.value_ref(op.accumulate)} = {self.value_ref(op.base)} + {src}")
        else:
            w.line(f"{self.value_ref(op.accumulate)} += {src}")

    def op_cast(self, w: CodeWriter, op: S.Cast) -> None:
        w.line(f"{self.value_ref(op.cast)} = {self.value_ref(op.src)}.astype({self.name(op.cast.name)}.dtype)")

    def op_matmul(self, w: CodeWriter, op: S.Matmul) -> None:
        dst = self.value_ref(op.matmul)
        args = [self.value_ref(op.a), self.value_ref(op.b), "preferred_element_type=jnp.float32"]
        fn = "jnp.dot"
        if op.transposed:  # Mosaic contracts a transposed operand in the MXU: no transpose op
            ca, cb = op.contract
            fn = "lax.dot_general"
            args.insert(2, f"((({ca},), ({cb},)), ((), ()))")
        if self.dtype_key(op.matmul.name) == "float32":
            w.call(f"{dst} {'+=' if op.accumulate else '='} {fn}", args)
        else:  # float32 products, rounded once into the destination's type
            head = f"{dst} = ({dst} + {fn}" if op.accumulate else f"{dst} = ({fn}"
            w.call(head, args, f").astype({self.name(op.matmul.name)}.dtype)")

    def op_pipeline(self, w: CodeWriter, op: S.Pipeline) -> None:
        self.helpers.add("_tpu_info_on_cpu")
        blocks = [self.name(n) for n in op.specs]
        with w.block(f"def _inner({', '.join(blocks)}):"):
            w.docstring(f"One point of the inner grid ({', '.join(op.pipeline)}): the blocks "
                        f"{', '.join(blocks)} in VMEM.")
            for i, g in enumerate(op.pipeline):
                w.line(f"{self.name(g)} = pl.program_id({i})")
            outer, self.windows = self.windows, pipeline_windows(self.s, op)
            self.ops(w, op.do)
            self.windows = outer
        indices = ", ".join(self.name(g) for g in op.pipeline)

        def specs(w: CodeWriter, key: str, table: dict[str, S.BlockSpec]) -> None:
            with w.block(f"{key}=["):
                for n, spec in table.items():
                    index = _tuple_text([self.py(e) for e in spec.index])
                    w.line(f"# {n} {'<-' if key == 'in_specs' else '->'} {spec.ref.text()}")
                    w.call("pl.BlockSpec", [self.static_tuple(spec.block), f"lambda {indices}: {index}"], ",")
            w.line("],")

        arrivals = {n: f"_{self.name(n)}_arrives" for n in op.arrivals}
        for n, arrival in op.arrivals.items():  # the `copy_in` hook: wait for the block, then fetch it
            with w.block(f"def {arrivals[n]}({indices}):"):
                guard = f", at the fetches where {E.to_text(arrival.when)}" if arrival.when is not None else ""
                w.docstring(f"Block `{n}` of inner point ({', '.join(op.pipeline)}) arrives by remote copy "
                            f"`{arrival.copy_use}`: wait for it before the pipeline fetches it{guard} "
                            f"(line {arrival.line}).")
                wait: S.Op = arrival.wait
                self.ops(w, [wait if arrival.when is None else S.When(when=arrival.when, do=[wait], line=wait.line)])
        if arrivals:
            self.helpers.add("_emit_pipeline_fed")
        with w.block("_emit_pipeline_fed(" if arrivals else "pltpu.emit_pipeline("):
            w.line("_inner,")
            w.line(f"grid={self.static_tuple(list(op.pipeline.values()))},")
            specs(w, "in_specs", op.inputs)
            specs(w, "out_specs", op.outputs)
            if arrivals:
                w.line(f"arrivals=[{', '.join(arrivals.get(n, 'None') for n in op.inputs)}],")
        w.call(")", [self.dma_ref(spec.ref) for spec in op.specs.values()])

    def op_assign(self, w: CodeWriter, op: S.Assign) -> None:
        w.line(f"{self.value_ref(op.assign)} = {self.value_ref(op.src)}")

    # -- kernel, build and make_inputs ------------------------------------------------------
    def api(self) -> CodeWriter:
        s = self.s
        self.helpers |= self.API_HELPERS
        checks = self.division_checks()
        if checks:
            self.helpers.add("_check_divides")
        w = CodeWriter()
        self.sizes_fn(w, checks)
        w.blank(2)
        self.call_fn(w)
        w.blank(2)
        self.kernel_fn(w)
        w.blank(2)
        ins = ", ".join([*(self.name(n) for n in s.buffers_of("input")), *(self.name(n) for n in s.data)])
        keywords = "".join(f"{k}={v}, " for k, v in self.KEYWORDS)
        with w.block(f"def build(mesh, *, interpret=None, {keywords}**params):"):
            w.docstring(
                f"`{s.name}` on `mesh` as a jitted function of the global inputs (IN_SPECS): "
                "`kernel` under `jax.shard_map` along AXIS.\n\n"
                "`params` override PARAMS; every parameter is fixed (PARAMS by default), so the "
                f"inputs must have the shapes they give, and the schedule's dtype. {self.interpret_doc()}")
            self.config(w, checks)
            w.blank()
            with w.block(f"def per_device({ins}):"):
                for n in s.buffers_of("input"):
                    w.call("_check_shard", [_str(n), self.name(n), self.static_tuple(s.buffers[n].shard_shape),
                                            f"jnp.{s.dtype_of(n)}"])
                w.call("return kernel", [*ins.split(", "), "axis_name=AXIS", "interpret=interpret",
                                         *(f"{k}={k}" for k, _ in self.KEYWORDS), "**p"])
            w.blank()
            w.call("sharded = jax.shard_map", [
                "per_device", "mesh=mesh", "in_specs=IN_SPECS", "out_specs=OUT_SPECS",
                "check_vma=False"])
            w.line("return jax.jit(sharded)")
        w.blank(2)
        # `build`'s own keywords (a GPU kernel's `blocks`, `multimem`) are taken and ignored, so that one
        # set of keywords builds a kernel and makes its inputs (`ringc check FILE.py --param blocks=2`).
        keywords = "".join(f"{k}={v}, " for k, v in self.KEYWORDS)
        head = (f"def make_inputs(mesh, key, data=None, {'*, ' if keywords else ''}{keywords}**params):" if s.data
                else f"def make_inputs(mesh, key, {'*, ' if keywords else ''}{keywords}**params):")
        with w.block(head):
            w.docstring("Random global inputs for `build(mesh, **params)`, placed as IN_SPECS.\n\n"
                        "`key` is a PRNG key or an int seed."
                        + (f" {', '.join(f'`{k}`' for k, _ in self.KEYWORDS)}: `build`'s, taken so that the same "
                           "keywords build the kernel and make its inputs; they do not change the inputs."
                           if self.KEYWORDS else "")
                        + ("\n\n`data` gives the runtime data, which must satisfy the schedule's constraints: "
                           "for each name in DATA, one list of N integers per device (e.g. a sample of "
                           "`ringc.testing.draw_samples`); they are appended to the inputs, sharded along AXIS."
                           if s.data else ""))
            shapes = [s.buffers[n].shard_shape for n in s.buffers_of("input")]
            used = {n for sh in shapes for d in sh for n in E.names(d)}
            self.config(w, checks, uses_n="N" in used or bool(s.data), sizes=used)
            ins_list = s.buffers_of("input")
            with w.block("if isinstance(key, int):"):
                w.line("key = jax.random.key(key)")
            w.line(f"keys = jax.random.split(key, {len(ins_list)})")
            for i, n in enumerate(ins_list):
                w.call(f"{self.name(n)} = _random_input", [
                    f"keys[{i}]", self.static_tuple(s.buffers[n].shard_shape),
                    f"jnp.{s.dtype_of(n)}", "mesh", f"IN_SPECS[{i}]"])
            if s.data:
                self.helpers.add("_data_input")
                w.line("data_inputs = tuple(_data_input(data, name, N, mesh) for name in DATA)")
                w.line(f"return {_tuple_text([self.name(n) for n in ins_list])} + data_inputs")
            else:
                w.line(f"return {_tuple_text([self.name(n) for n in ins_list])}")
        return w

    # -- dtypes ----------------------------------------------------------------------------
    def follows(self, name: str) -> bool:
        """Whether buffer (or pipeline block) `name` takes its dtype from the collective's
        input at call time: neither it, nor the schedule, nor that input fixes one."""
        s = self.s
        return (self.buffer(name).dtype is None and "dtype" not in s.model_fields_set
                and s.buffers[s.io_buffer("input")].dtype is None)

    def dtype_key(self, name: str) -> str | None:
        """The fixed dtype of `name`, or None when it follows the input's."""
        return None if self.follows(name) else self.dtype(name)

    def dtype_text(self, name: str) -> str:
        """`dtype` (the input's, in `_call`) or the fixed `jnp.<dtype>`."""
        return "dtype" if self.follows(name) else f"jnp.{self.dtype(name)}"

    # -- shapes from the arguments -----------------------------------------------------------
    def solve_plan(self) -> list[tuple[str, str, int, E.Expr | None, E.Expr | None, E.Expr]]:
        """How `_sizes` finds each parameter that the inputs' shard shapes mention:
        (param, input, dim, scale, offset, dim expression), in an order where scale and
        offset use only N, the axis sizes and parameters found before; scale None: the
        shapes do not determine it (it appears with other unknowns, or not linearly)."""
        s = self.s
        dims = [(n, i, self.resolved.inline(d)) for n in s.buffers_of("input")
                for i, d in enumerate(s.buffers[n].shard_shape)]
        params = set(s.params)
        found: set[str] = set()
        plan: list = []
        progress = True
        while progress:
            progress = False
            for n, i, d in dims:
                unknown = (E.names(d) & params) - found
                if len(unknown) == 1:
                    (name,) = unknown
                    linear = _linear(d, name)
                    if linear is not None:
                        plan.append((name, n, i, *linear, d))
                        found.add(name)
                        progress = True
        for n, i, d in dims:
            for name in sorted((E.names(d) & params) - found):
                plan.append((name, n, i, None, None, d))
                found.add(name)
        return plan

    def sizes_fn(self, w: CodeWriter, checks: list[tuple[str, str, str]]) -> None:
        s = self.s
        ins = s.buffers_of("input")
        with w.block(f"def _sizes({', '.join(self.name(n) for n in ins)}, *, axis_name, params):"):
            w.docstring(
                "N, the axis sizes and every parameter for these shards, by `_call`'s names. A parameter "
                "not in `params` is solved from the shard shapes (the schedule's shape expressions) "
                "or is PARAMS' value when no shape mentions it; then the shapes and dtypes are "
                "checked, before the kernel runs.")
            sizes = self.axis_sizes()
            if sizes:
                w.line(f"{', '.join(sizes)} = _axis_sizes(axis_name)")
                w.line(f"N = {' * '.join(sizes)}")
            else:
                w.line("(N,) = _axis_sizes(axis_name)")
            w.line("p = _given(params)")
            planned = set()
            for name, buf, dim, scale, offset, d in self.solve_plan():
                planned.add(name)
                shape = f"{self.name(buf)}.shape"
                if scale is None:
                    self.helpers.add("_not_inferred")
                    w.call(f"{self.name(name)} = _not_inferred",
                           ["p", _str(name), _str(buf), shape, _str(E.to_text(d))])
                else:
                    self.helpers.add("_infer")
                    w.call(f"{self.name(name)} = _infer", [
                        "p", _str(name), _str(buf), shape, str(dim), self.static(scale),
                        self.static(offset), _str(E.to_text(d))])
            for name in s.params:
                if name not in planned:
                    w.line(f"{self.name(name)} = p.get({_str(name)}, PARAMS[{_str(name)}])")
            for a, b, what in checks:
                w.call("_check_divides", [a, b, _str(what)])
            src = self.name(s.io_buffer("input"))
            if any(self.follows(n) for n in ins):
                w.line(f"dtype = {src}.dtype")
            for n in ins:
                w.call("_check_shard", [_str(n), self.name(n), self.static_tuple(s.buffers[n].shard_shape),
                                        self.dtype_text(n)])
            names = ["N", *sizes, *(self.name(n) for n in s.params)]  # `_call`'s keyword names
            items = [f"{_str(n)}: {n}" for n in names]
            if len(f"return {{{', '.join(items)}}}") <= w.width:
                w.line(f"return {{{', '.join(items)}}}")
            else:  # many params: one per line, as black writes a long dict
                w.line("return {")
                for item in items:
                    w.line(f"{INDENT}{item},")
                w.line("}")

    def call_fn(self, w: CodeWriter) -> None:
        s = self.s
        ins = s.buffers_of("input")
        outs = s.buffers_of("output")
        scratch = self.extra_outputs()
        statics = ["N", *self.axis_sizes(), *(self.name(p) for p in s.params)]
        data = [self.name(n) for n in s.data]
        keywords = [k for k, _ in self.KEYWORDS]
        with w.function("_call", [*(self.name(n) for n in ins), *data, "*", "axis_name", "interpret", *keywords,
                                  *statics]):
            what = (f"The pallas_calls of `{s.name}` ({', '.join(s.program)})" if s.kernels else
                    f"The kernel call of `{s.name}` (`pl.kernel` on each TensorCore)" if s.cores > 1 else
                    f"The pallas_call of `{s.name}`")
            w.docstring(what + " on one device's shards, for sizes from "
                        "`_sizes` (no gradient rule: `kernel` adds it).")
            if any(self.follows(n) for n in s.buffers):
                w.line(f"dtype = {self.name(s.io_buffer('input'))}.dtype")
            self.call_prelude(w)
            w.line("mesh_axes = tuple(jax.sharding.get_abstract_mesh().axis_names)")
            if s.kernels:
                self.program_body(w)
                return
            self.pallas_call(w)
            args = []
            for n in ins:
                b = s.buffers[n]
                args.append(f"{self.name(n)}.reshape{self.static_tuple(b.full_shape)}"
                            if b.shard is not None else self.name(n))
            results = [self.name(n) for n in outs] + ["_"] * len(scratch)
            in_tuple = self.RESULTS_IN_TUPLE or s.cores > 1  # (pl.kernel's out_type is a tuple)
            unpack = f"({results[0]},)" if len(results) == 1 and in_tuple else ", ".join(results)
            w.call(f"{unpack} = call", data + args)
            returned = []
            for n in outs:
                b = s.buffers[n]
                returned.append(f"{self.name(n)}.reshape{self.static_tuple(b.shard)}"
                                if b.shard is not None else self.name(n))
            w.line(f"return {', '.join(returned)}")

    def extra_outputs(self) -> list[str]:
        """The buffers the call allocates as outputs beside the schedule's outputs (scratch)."""
        return self.s.buffers_of("hbm_scratch")

    # The call returns a tuple of its outputs even when there is one (plgpu.kernel's out_type is a tuple).
    RESULTS_IN_TUPLE = False

    def call_prelude(self, w: CodeWriter) -> None:
        """`_call`'s first statements, before the mesh axes are read."""
        if "_tpu_info_on_cpu" in self.helpers:
            w.line("_tpu_info_on_cpu(interpret)")

    def kernel_fn(self, w: CodeWriter) -> None:

        s = self.s
        shards = [self.name(n) for n in s.buffers_of("input")]
        ins = shards + [self.name(n) for n in s.data]  # runtime data: int32 [N] per device
        coll = collective_of(s)
        keywords = [f"{k}={v}" for k, v in self.KEYWORDS]
        with w.function("kernel", [*ins, "*", "axis_name=AXIS", "interpret=None", "transpose=None", *keywords,
                                   "**params"]):
            w.docstring(self.kernel_doc(coll))
            w.line(f"sizes = _sizes({', '.join(shards)}, axis_name=axis_name, params=params)")
            w.line(self.checked_call())
            w.blank()
            w.line("@jax.custom_vjp")
            with w.block(f"def call({', '.join(ins)}):"):
                w.call("return _call", [*ins, "axis_name=axis_name", "interpret=interpret",
                                        *(f"{k}={k}" for k, _ in self.KEYWORDS), "**sizes"])
            w.blank()
            with w.block(f"def forward({', '.join(ins)}):"):
                saved = _tuple_text(ins) if coll.takes_rhs else "None"
                w.line(f"return call({', '.join(ins)}), {saved}")
            w.blank()
            self.backward_fn(w, coll)
            w.blank()
            w.line("call.defvjp(forward, backward)")
            w.line(f"return call({', '.join(ins)})")

    def interpret_doc(self) -> str:
        return ("`interpret`: None or False compiles for TPU; True runs in Pallas TPU interpret mode with default "
                "`pltpu.InterpretParams()`; an `InterpretParams` instance is used as given.")

    def own_transpose(self, coll: Any) -> bool:
        """Whether this kernel computes its own transpose: the transpose collective is this
        one, on the same shard shapes (psum, all_to_all)."""
        s = self.s
        if coll.transpose() != coll or coll.takes_rhs or len(s.buffers_of("input", "output")) != 2:
            return False
        src, dst = s.buffers[s.io_buffer("input")], s.buffers[s.io_buffer("output")]
        return src.shard_shape == dst.shard_shape and src.full_shape == dst.full_shape

    def backward_text(self, coll: Any) -> str:
        """One sentence for docstrings: what the backward pass runs."""
        t = coll.transpose()
        if t is None:
            return f"{coll.kind} has no transpose collective: jax.grad raises"
        if self.s.data:
            return (f"the transpose of {coll.kind} is {t.kind} with the offsets' roles swapped, but a kernel "
                    "with runtime data emits no backward pass yet: jax.grad raises (pass `transpose`)")
        if self.own_transpose(coll):
            return (f"the transpose of {coll.label()} is {t.label()} on the same shapes, so the backward pass "
                    "runs this kernel again")
        what = f"the transpose of {coll.label()} is {t.label()}"
        if coll.takes_rhs:
            what += (" (for x, on the same y; y's cotangent is a local matmul with the gathered "
                     f"{'x' if coll.gathers else 'cotangent'})")
        return what + "; this module has no ringc kernel for it, so the backward pass runs lax"

    def kernel_doc(self, coll: Any) -> str:
        s = self.s
        ins = [self.name(n) for n in s.buffers_of("input")]
        src, dst = s.io_buffer("input"), s.io_buffer("output")
        x = self.name(src)
        rhs = self.name(s.io_buffer("rhs")) if "rhs" in coll.inputs else None
        third = s.io_buffer("values") if "values" in coll.inputs else None
        same = all(s.buffers[n].shard is None
                   for n in (src, dst, *([s.io_buffer("rhs")] if rhs else []), *([third] if third else [])))
        extra = {"values": self.name(third)} if third else {}
        call = coll.lax_text(x, "axis_name", "N", rhs=rhs, **extra)
        meaning = (f"`{call}`" if same else
                   f"`{call}` on the kernel's arrays (`{x}` reshaped to "
                   f"{self.static_tuple(s.buffers[src].full_shape)}, the result reshaped to "
                   f"{self.static_tuple(s.buffers[dst].shard_shape)})")
        given = ", ".join(ins)
        return (
            f"`{s.name}` on this device's shards {given}: call it inside your own `jax.shard_map` "
            f"(check_vma=False) where the lax collective would be. It computes {meaning}, "
            f"N devices along `axis_name` (default AXIS, or your mesh's name for it).\n\n"
            "Parameters that the shard shapes determine are solved from them; give any in `params` "
            "to fix it (the others default to PARAMS). Buffers whose dtype the schedule does not fix "
            f"take `{x}`'s. Wrong shapes or dtypes raise ValueError before the kernel runs.\n\n"
            f"jax.grad works through it (jax.custom_vjp): {self.backward_text(coll)}. `transpose`, "
            "if given, replaces that backward pass: a per-shard function from the output's cotangent "
            + (f"and the inputs, called as transpose({given}, cotangent), to their cotangents "
               if coll.takes_rhs else f"to `{x}`'s ")
            + "(say, another ringc kernel of the transpose collective).")

    def backward_fn(self, w: CodeWriter, coll: Any) -> None:
        s = self.s
        ins = s.buffers_of("input")
        src, dst = s.io_buffer("input"), s.io_buffer("output")
        names = {n: self.name(n) for n in s.buffers}
        with w.block("def backward(residuals, cotangent):"):
            w.docstring(self.backward_text(coll)[0].upper() + self.backward_text(coll)[1:] + ".")
            with w.block("if transpose is not None:  # the caller's backward pass"):
                w.line(f"return tuple(transpose({'*residuals, ' if coll.takes_rhs else ''}cotangent))"
                       if coll.takes_rhs else "return (transpose(cotangent),)")
            if s.data:  # (see backward_text)
                w.line('raise NotImplementedError("no backward pass for a kernel with runtime data yet: pass `transpose`")')
                return
            if coll.transpose() is None:
                w.line(f"raise NotImplementedError({_str(self.backward_text(coll))})")
                return
            if self.own_transpose(coll):
                w.line("return (call(cotangent),)")
                return
            rhs = s.io_buffer("rhs") if coll.takes_rhs else None
            dx, dy = coll.vjp_text(names[src], "axis_name", "N", "cotangent",
                                   rhs=names[rhs] if rhs else None)
            reshaped = [b for b in s.buffers.values() if b.kind in ("input", "output") and b.shard is not None]
            used = {n for b in reshaped for d in b.full_shape + b.shard for n in E.names(d)}
            if re.search(r"\bN\b", f"{dx} {dy}"):
                used.add("N")
            for n in sorted(used):
                ident = self.name(n) if n in s.params else n
                w.line(f"{ident} = sizes[{_str(ident)}]")

            def full(n: str, value: str) -> str:
                b = s.buffers[n]
                return f"{value}.reshape{self.static_tuple(b.full_shape)}" if b.shard is not None else value

            def shard(n: str, value: str) -> str:
                b = s.buffers[n]
                return f"{value}.reshape{self.static_tuple(b.shard)}" if b.shard is not None else value

            if rhs:
                w.line(f"{names[src]}, {names[rhs]} = residuals")
                for n in (src, rhs):
                    if s.buffers[n].shard is not None:
                        w.line(f"{names[n]} = {full(n, names[n])}")
            if s.buffers[dst].shard is not None:
                w.line(f"cotangent = {full(dst, 'cotangent')}")
            results = {src: shard(src, dx)}
            if rhs:
                results[rhs] = shard(rhs, dy)
            for n in ins:
                w.expr(f"d_{names[n]} = ", results[n])
            w.line(f"return {_tuple_text([f'd_{names[n]}' for n in ins])}")

    def division_checks(self) -> list[tuple[str, str, str]]:
        s = self.s
        checks: list[tuple[str, str, str]] = []
        sources: list[tuple[str, list[E.Expr]]] = []
        for n, b in s.buffers.items():
            sources.append((f"shape of buffer `{n}`", b.full_shape + list(b.shard or [])))
        for n, sem in s.semaphores.items():
            sources.append((f"shape of semaphore `{n}`", list(sem.shape)))
        for n, size in s.grid.items():
            sources.append((f"grid size `{n}`", [size]))
        for op in walk_ops(s.all_ops):
            if isinstance(op, S.Loop):
                for n, size in op.loop.items():
                    sources.append((f"loop size `{n}` (line {op.line})", [size]))
            if isinstance(op, S.Pipeline):
                for n, size in op.pipeline.items():
                    sources.append((f"pipeline grid size `{n}` (line {op.line})", [size]))
                for n, spec in op.specs.items():
                    sources.append((f"block shape of `{n}` (line {op.line})", list(spec.block)))
        for what, exprs in sources:
            # innermost first: `rows // 2 // bm` checks `rows // 2` before dividing it by bm
            for a, b in reversed(list(self.divisions(exprs))):
                if all((a, b) != (c, d) for c, d, _ in checks):
                    checks.append((a, b, what))
        return checks

    def axis_sizes(self) -> list[str]:
        """`N_x`, `N_y`, ...: the kernel's per-axis sizes (a schedule over several axes only)."""
        return [f"N_{a}" for a in self.s.axes] if len(self.s.axes) > 1 else []

    def config(self, w: CodeWriter, checks: list[tuple[str, str, str]], uses_n: bool = True,
               sizes: Iterable[str] | None = None) -> None:
        """Read N, the per-axis sizes (all, or `sizes`) and the parameters from the mesh."""
        def named(n: str) -> bool:   # a check's expression names n (`(N_x + N_y) * 2` names N_x)
            return any(re.search(rf"\b{n}\b", f"{a} {b}") for a, b, _ in checks)
        uses_n = uses_n or named("N")
        w.line(f"{'N' if uses_n else '_'}, p = _config(mesh, params)")
        wanted = set(self.axis_sizes() if sizes is None else sizes)
        for n in self.axis_sizes():
            if n in wanted or named(n):
                w.line(f"{n} = mesh.shape[{_str(n[2:])}]")
        for n in self.s.params:
            w.line(f"{self.name(n)} = p[{_str(n)}]")
        for a, b, what in checks:
            w.call("_check_divides", [a, b, _str(what)])

    def pallas_call(self, w: CodeWriter) -> None:
        s = self.s
        outs = s.buffers_of("output", "hbm_scratch")
        single = len(outs) == 1
        if s.cores > 1:
            self.core_kernel_call(w, outs)
            return

        memory, shape_dtype = self.memory_space, self.shape_dtype
        with w.block("call = pl.pallas_call("):
            w.call("functools.partial", ["_kernel", *self.statics()], ",")
            if single:
                w.line(f"out_shape={shape_dtype(outs[0])},  # {outs[0]}")
            else:
                with w.block("out_shape=("):
                    for n in outs:
                        line = f"{shape_dtype(n)},  # {n}{self.scratch_note(n)}"
                        if len(line) <= w.width:
                            w.line(line)
                        else:  # the note above a long shape
                            w.line(f"# {n}{self.scratch_note(n)}")
                            w.expr("", shape_dtype(n), ",")
                w.line("),")
            with w.block("grid_spec=pltpu.PrefetchScalarGridSpec("):
                w.line(f"num_scalar_prefetch={len(s.data)},{'  # ' + ', '.join(s.data) if s.data else ''}")
                with w.block("in_specs=["):
                    for n in s.buffers_of("input"):
                        w.line(f"pl.BlockSpec(memory_space={memory(n)}),  # {n}")
                w.line("],")
                if single:
                    w.line(f"out_specs=pl.BlockSpec(memory_space={memory(outs[0])}),  # {outs[0]}")
                else:
                    with w.block("out_specs=["):
                        for n in outs:
                            w.line(f"pl.BlockSpec(memory_space={memory(n)}),  # {n}")
                    w.line("],")
                cores = [E.Const(2)] if s.megacore else []  # megacore: two TensorCores per chip
                w.line(f"grid={self.static_tuple(cores + list(s.grid.values()))},")
                self.scratch_list(w, [*s.semaphores, *s.buffers_of("vmem_scratch")])
            w.line("),")
            params = []
            if s.barrier is not None:
                params.append(f"collective_id={s.barrier.collective_id}")
            params.append(f"dimension_semantics={self.semantics_text()}")
            if s.vmem_limit_mib is not None:
                params.append(f"vmem_limit_bytes={s.vmem_limit_mib} * 2**20")
            w.call("compiler_params=pltpu.CompilerParams", params, ",")
            w.line("interpret=_interpret_mode(interpret),")
        w.line(")")

    def core_kernel_call(self, w: CodeWriter, outs: list[str]) -> None:
        """`call = pl.kernel(...)` over the chip's TensorCores (`cores: 2`): each core runs
        `_kernel` once, its grid as loops; the operands and outputs stay in HBM, shared by
        the cores; semaphores and VMEM scratch are each core's own (`scratch_types`)."""
        s = self.s
        with w.block("call = pl.kernel("):
            w.call("functools.partial", ["_kernel", *self.statics()], ",")
            with w.block("out_type=("):
                for n in outs:
                    w.line(f"{self.shape_dtype(n)},  # {n}{self.scratch_note(n)}")
            w.line("),")
            w.line(f"mesh=pltpu.create_tensorcore_mesh(\"core\", num_cores={s.cores}),")
            self.scratch_list(w, [*s.semaphores, *s.buffers_of("vmem_scratch")], key="scratch_types")
            params = []
            if s.barrier is not None:
                params.append(f"collective_id={s.barrier.collective_id}")
            if s.vmem_limit_mib is not None:
                params.append(f"vmem_limit_bytes={s.vmem_limit_mib} * 2**20")
            if params:
                w.call("compiler_params=pltpu.CompilerParams", params, ",")
            w.line("interpret=_interpret_mode(interpret),")
        w.line(")")

    def program_body(self, w: CodeWriter) -> None:
        """`_call` of a split-phase program: its pallas_calls in order, each array and semaphore
        a Python variable handed from call to call (the future between `start` and `done`)."""
        s = self.s
        for n in s.buffers_of("input"):
            b = s.buffers[n]
            if b.shard is not None:
                w.line(f"{self.name(n)} = {self.name(n)}.reshape{self.static_tuple(b.full_shape)}")
        calls = self.program_calls()
        for call in calls:
            w.blank()
            w.line(f"# pallas_call {call.position + 1} of {len(calls)}: kernel `{call.kernel}` "
                   f"(line {s.line_of('kernels', call.kernel)})")
            self.program_pallas_call(w, call)
            results = [self.name(n) for n, _ in call.outputs]
            target = f"({results[0]},)" if len(results) == 1 else ", ".join(results)
            w.call(f"{target or '()'} = _call{call.position + 1}", [self.name(n) for n in call.operands])
            if call is not calls[-1]:
                live = [n for n in call.outputs if n[0] in s.semaphores]
                if live:
                    sems = ", ".join(self.name(n) for n, _ in live)
                    w.line(f"# Between the calls: DMAs in flight on {sems}; leave their buffers alone.")
        returned = []
        for n in s.buffers_of("output"):
            b = s.buffers[n]
            returned.append(f"{self.name(n)}.reshape{self.static_tuple(b.shard)}" if b.shard is not None
                            else self.name(n))
        w.line(f"return {', '.join(returned)}")

    def program_pallas_call(self, w: CodeWriter, call: _Call) -> None:
        s = self.s

        memory = self.memory_space

        def out_shape(n: str) -> str:
            if n in s.semaphores:
                sem = s.semaphores[n]
                return f"pltpu.SemaphoreType.{sem.kind.upper()}({self.static_tuple(list(sem.shape))})"
            return self.shape_dtype(n)

        with w.block(f"_call{call.position + 1} = pl.pallas_call("):
            w.call("functools.partial", [call.fn, *self.statics()], ",")
            with w.block("out_shape=("):
                for n, alias in call.outputs:
                    note = "" if alias is None else f" (aliased to operand {alias})"
                    w.line(f"{out_shape(n)},  # {n}{note}")
            w.line("),")
            with w.block("grid_spec=pltpu.PrefetchScalarGridSpec("):
                w.line("num_scalar_prefetch=0,")
                with w.block("in_specs=["):
                    for n in call.operands:
                        w.line(f"pl.BlockSpec(memory_space={memory(n)}),  # {n}")
                w.line("],")
                with w.block("out_specs=("):
                    for n, _ in call.outputs:
                        w.line(f"pl.BlockSpec(memory_space={memory(n)}),  # {n}")
                w.line("),")
                w.line(f"grid={self.static_tuple(list(s.grid.values()))},")
                self.scratch_list(w, call.scratch)
            w.line("),")
            aliases = {alias: j for j, (_, alias) in enumerate(call.outputs) if alias is not None}
            if aliases:
                w.line(f"input_output_aliases={{{', '.join(f'{i}: {j}' for i, j in aliases.items())}}},")
            params = []
            if call.barrier and s.barrier is not None:
                params.append(f"collective_id={s.barrier.collective_id}")
            if not call.outputs:  # nothing uses its results: keep it anyway
                params.append("has_side_effects=True")
            params.append(f"dimension_semantics={self.semantics_text()}")
            if s.vmem_limit_mib is not None:
                params.append(f"vmem_limit_bytes={s.vmem_limit_mib} * 2**20")
            w.call("compiler_params=pltpu.CompilerParams", params, ",")
            w.line("interpret=_interpret_mode(interpret),")
        w.line(")")

    def scratch_note(self, n: str) -> str:
        return " (HBM scratch)" if self.s.buffers[n].kind == "hbm_scratch" else ""

    # -- pieces every pallas_call of the module shares --------------------------------------
    def statics(self) -> list[str]:
        """The kernel function's keyword arguments, bound with functools.partial."""
        return ["N=N", *(f"{n}={n}" for n in self.axis_sizes()),
                *(f"{self.name(p)}={self.name(p)}" for p in self.s.params), "axis=axis_name", "mesh_axes=mesh_axes"]

    def memory_space(self, n: str) -> str:
        """A kernel operand's BlockSpec memory space: a semaphore, VMEM, or anywhere (HBM)."""
        if n in self.s.semaphores:
            return "pltpu.SEMAPHORE"
        return "pltpu.VMEM" if self.s.buffers[n].memory == "vmem" else "pl.ANY"

    def shape_dtype(self, n: str) -> str:
        return f"jax.ShapeDtypeStruct({self.static_tuple(self.s.buffers[n].full_shape)}, {self.dtype_text(n)})"

    def semantics_text(self) -> str:
        """The `dimension_semantics` tuple: megacore's core axis, then each grid axis's."""
        semantics = [f'"{sem}"' for sem in self.s.semantics]
        return _tuple_text(semantics) if semantics else "()"

    def scratch_list(self, w: CodeWriter, names: list[str], key: str = "scratch_shapes") -> None:
        """`scratch_shapes=[...]`: the named semaphores and VMEM scratch buffers, in order."""
        if not names:
            w.line(f"{key}=[],")
            return
        with w.block(f"{key}=["):
            for n in names:
                if n in self.s.semaphores:
                    sem = self.s.semaphores[n]
                    kind = f"pltpu.SemaphoreType.{sem.kind.upper()}"
                    text = f"{kind}({self.static_tuple(list(sem.shape))})" if sem.shape else kind
                else:
                    text = f"pltpu.VMEM({self.static_tuple(self.s.buffers[n].full_shape)}, {self.dtype_text(n)})"
                w.line(f"{text},  # {n}")
        w.line("],")


class EmitRule(NamedTuple):
    """How the emitter writes one op class: the comment above its statement (the op in
    schedule terms) and the `Emitter` method that writes its statements."""
    summary: Callable[[Any], str]
    emit: Callable[["Emitter", CodeWriter, Any], None]


def _accumulate_summary(op: S.Accumulate) -> str:
    if op.base is not None:
        return f"accumulate {op.accumulate.text()} = {op.base.text()} + {op.src.text()}"
    return f"accumulate {op.accumulate.text()} += {op.src.text()}"


def _exprs(exprs: list[E.Expr]) -> str:
    return ", ".join(E.to_text(t) for t in exprs)


# `EMIT[op class]`: one rule per op class (`schema.OPS`).
EMIT: RuleTable[EmitRule] = RuleTable("codegen (ringc/codegen/pallas.py EMIT)", "ops")
Emitter.RULES = EMIT
EMIT.register(S.When)(EmitRule(lambda op: f"when {E.to_text(op.when)}", Emitter.op_when))
EMIT.register(S.Loop)(EmitRule(
    lambda op: (f"loop{f' ({op.phase})' if op.phase else ''} over "
                f"({', '.join(f'{n}: {E.to_text(v)}' for n, v in op.loop.items())})"), Emitter.op_loop))
EMIT.register(S.Start, S.Wait, S.WaitSend, S.WaitRecv)(EmitRule(lambda op: f"{op.tag} {op.copy_use}",
                                                                 Emitter.op_copy))
EMIT.register(S.Signal)(EmitRule(
    lambda op: (f"signal {op.signal.text()}{'' if op.inc == E.Const(1) else f' by {E.to_text(op.inc)}'} "
                f"to {_exprs(op.to)}"), Emitter.op_signal))
EMIT.register(S.SemWait)(EmitRule(
    lambda op: f"sem_wait {op.sem_wait.text()}{'' if op.value == E.Const(1) else f' for {E.to_text(op.value)}'}",
    Emitter.op_semwait))
EMIT.register(S.Barrier)(EmitRule(
    lambda op: f"barrier with {_exprs(op.barrier)}{'' if op.double else ' (single)'}", Emitter.op_barrier))
EMIT.register(S.Zero)(EmitRule(lambda op: f"zero {op.zero.text()}", Emitter.op_zero))
EMIT.register(S.Accumulate)(EmitRule(_accumulate_summary, Emitter.op_accumulate))
EMIT.register(S.Assign)(EmitRule(lambda op: f"assign {op.assign.text()} = {op.src.text()}", Emitter.op_assign))
EMIT.register(S.Cast)(EmitRule(lambda op: f"cast {op.cast.text()} = {op.src.text()}", Emitter.op_cast))
EMIT.register(S.Matmul)(EmitRule(
    lambda op: f"matmul {op.matmul.text()} {'+=' if op.accumulate else '='} {op.a.text()}"
               f"{'' if op.contract[0] == 1 else '.T'} @ {op.b.text()}{'' if op.contract[1] == 0 else '.T'}",
    Emitter.op_matmul))
EMIT.register(S.Pipeline)(EmitRule(
    lambda op: f"pipeline over ({', '.join(op.pipeline)}): {', '.join(op.inputs)} -> {', '.join(op.outputs)}",
    Emitter.op_pipeline))


def wrap_words(text: str, width: int, first: int | None = None) -> str:
    """Fill words into lines of `width` columns (`first` for the first line, if given)."""
    lines, current = [], ""
    for word in text.split(" "):
        limit = first if first is not None and not lines else width
        if current and len(current) + 1 + len(word) > limit:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    lines.append(current)
    return "\n".join(lines)


def python_names(schedule: S.Schedule) -> dict[str, str]:
    """The emitted module's Python name of each parameter (its own, unless it clashes)."""
    names = Emitter(schedule).rename
    return {p: names[p] for p in schedule.params}


def emit(schedule: S.Schedule, checked: Iterable[Mapping[str, int]] | None = None) -> str:
    """The Pallas TPU module for `schedule`, as Python source text (deterministic).

    `checked`: the sizes (`_sizes`' dicts: N, the axis sizes, every parameter) the schedule
    was proved at, the module's CHECKED; None emits it unchecked (CHECKED = None).

    The text always compiles: Python's compiler checks it here, and a failure (names,
    nesting and expressions are all checked when the schedule loads, so it would be a
    ringc bug) raises RuntimeError instead of returning a module that cannot be imported."""
    return compiled_source(Emitter(schedule, checked).emit(), f"<ringc emit of {schedule.file}>")


def compiled_source(text: str, where: str) -> str:
    """`text`, once Python's compiler accepts it; RuntimeError (a ringc bug) if it does not."""
    try:
        compile(text, where, "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise RuntimeError(f"ringc emitted Python that does not compile ({type(e).__name__}: {e}); "
                           "this is a bug in ringc") from None
    return text
