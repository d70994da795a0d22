"""Say a TPU compiler failure in schedule terms: which buffer, which block, which YAML line,
and what to change, instead of Mosaic's MLIR dump or XLA's allocation report.

Two sources of facts:
- where: Mosaic errors carry the Python line of the emitted kernel that made the failing
  operation (`MosaicError.__traceback__`; lowering errors have an ordinary traceback). The
  emitted kernel puts `# line N: ...` above each op and `(line N)` in each copy's
  docstring, which leads back to the YAML.
- what: the compiler's message (memref shapes, tile sizes, VMEM sizes and limits), matched
  against the buffers and the concrete regions `ringc.verify.unroll` computes for this N.
"""

from __future__ import annotations

import linecache
import os
import re
import traceback
from dataclasses import dataclass
from math import prod
from types import ModuleType
from typing import Callable, Iterator

from ..ir import expr as E
from ..ir import schema as S
from ..ir.dtypes import itemsize
from ..errors import ScheduleError
from ..ir.resolve import copy_ops, walk_ops
from ..ir.rules import RuleTable
from ..units import size_text
from ..verify.events import Compute, DmaStart, Region
from ..verify.unroll import buffer_shapes, unroll

__all__ = ["KINDS", "CompileError", "raw_text", "bad_parameters", "Site", "site_refs", "SITE_TEXT",
           "site_text", "explain", "schedule_line"]

# smem_overflow: a Mosaic GPU kernel's shared memory past the GPU's per-block limit (`compile/gpu.py`).
KINDS = ("vmem_overflow", "hbm_overflow", "tiling", "unsupported", "dtype_mismatch", "smem_overflow", "compiler_error")

_OP_COMMENT = re.compile(r"^\s*# line (\d+): ")
_COPY_DOC = re.compile(r'^\s*"""(?:Remote|Local) copy `([^`]+)` \(line (\d+)\)')
_MEMREF = re.compile(r"memref<((?:\d+x)+)(\w+)[,>]")
_MLIR_DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16", "i32": "int32", "i16": "int16",
                "i8": "int8", "ui32": "uint32", "ui8": "uint8", "f8E4M3FN": "float8_e4m3fn",
                "f8E5M2": "float8_e5m2"}
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


class CompileError(ScheduleError):
    """The TPU compiler (or, for a Mosaic GPU file, Mosaic GPU, XLA or ptxas) rejected the
    kernel. `kind` is one of KINDS."""

    def __init__(self, kind: str, message: str, *, file: str | None, line: int | None, fix: str):
        super().__init__(message, file=file, line=line, fix=fix)
        self.kind = kind

    def __str__(self) -> str:
        where = (self.file or "<schedule>") + (f":{self.line}" if self.line else "")
        return f"{where}: error: [{self.kind}] {self.message}\n  fix: {self.fix}"


def raw_text(exc: BaseException) -> str:
    """The compiler's message as it raised it."""
    return f"{type(exc).__name__}: {exc}".rstrip()


def bad_parameters(schedule: S.Schedule, n: int, exc: ValueError) -> ScheduleError:
    """The emitted module refused the parameters (a shape that does not divide for this N):
    the unroller names the buffer and line; otherwise pass the module's message on."""
    try:
        unroll(schedule, n)
    except ScheduleError as located:
        return located
    return ScheduleError(str(exc), file=schedule.file, line=schedule.line_of("params"),
                         fix="choose parameters (--param k=v) that fit this target's device count")


# ---------------------------------------------------------------------------- facts


@dataclass
class Site:
    """Where in the schedule the failing operation came from."""
    line: int
    op: S.Op | None = None          # the body op at `line`
    copy: str | None = None         # the copy descriptor involved, if any

    def describe(self) -> str:
        if self.op is None:
            return f"copy `{self.copy}`" if self.copy is not None else "the kernel"
        return f"`{site_text(self.op)}`"


class _Facts:
    """The schedule at this N: buffer sizes, and the regions an op touches."""

    def __init__(self, schedule: S.Schedule, n: int, sizes: dict[str, int] | None = None):
        self.s = schedule
        self.n = n
        self.sizes = sizes or {schedule.axes[0]: n}  # devices along each axis
        self.shapes = buffer_shapes(schedule, self.sizes)  # ScheduleError, at its line, if one does not divide
        self._program = None

    def nbytes(self, name: str) -> int:
        return prod(self.shapes[name]) * itemsize(self.s.dtype_of(name))

    def buffers_in(self, memory: str) -> list[str]:
        """Buffers in VMEM or HBM, largest first."""
        names = [n for n, b in self.s.buffers.items() if b.memory == memory]
        return sorted(names, key=lambda n: -self.nbytes(n))

    def regions(self, site: Site) -> list[tuple[E.Ref, Region]]:
        """(schedule ref, concrete region on the first device that runs it) for each buffer
        region the op or copy at `site` touches (a pipeline's block windows left out)."""
        refs = site_refs(self.s, site)
        if not refs:
            return []
        if self._program is None:
            self._program = unroll(self.s, sizes=self.sizes)
        for events in self._program.devices:
            for ev in events:
                a = ev.action
                if isinstance(a, DmaStart) and a.copy == site.copy:
                    return [(refs[0], a.src), (refs[1], a.dst)]
                if ev.line == site.line and isinstance(a, Compute) and site.copy is None:
                    # not a pipeline's VMEM windows: the facts know the schedule's buffers only
                    return [(ref, reg) for ref, reg in zip(refs, (a.dst, *a.reads)) if reg.buffer in self.shapes]
        return []


def site_refs(s: S.Schedule, site: Site) -> list[E.Ref]:
    """The buffer refs at `site`: a copy's source and destination, else the op's written
    region then the ones it reads (its roles, `schema.OpNode`), in the order of the
    compute event's `dst, *reads`."""
    if site.copy is not None:
        c = s.copies[site.copy]
        return [c.src, c.dst]
    op = site.op
    if op is None or op.copy_halves:
        return []
    return [*op.refs("writes"), *op.refs("reads")]


def _value_text(value: object) -> str:
    if isinstance(value, E.Ref):
        return value.text()
    if isinstance(value, list):
        return ", ".join(E.to_text(v) for v in value)
    return str(value)


def _named_text(op: S.Op) -> str:
    """`start: push`, `signal: capacity`, `barrier: left, right`, `zero: acc`."""
    return f"{op.tag}: {_value_text(getattr(op, op.tag))}"


def _compute_text(op: S.Op) -> str:
    """`accumulate: out (src: recv)`, `matmul: acc (a: x, b: y)`."""
    dst = op.refs("writes")[0]
    reads = ", ".join(f"{f}: {getattr(op, f).text()}" for f in type(op).reads if getattr(op, f) is not None)
    return f"{op.tag}: {dst.text()} ({reads})"


# `SITE_TEXT[op class](op)`: how a compile error names the op it points at.
SITE_TEXT: RuleTable[Callable[[S.Op], str]] = RuleTable("compile errors (ringc/compile/errors.py SITE_TEXT)", "ops")
SITE_TEXT.register(S.Start, S.Wait, S.WaitSend, S.WaitRecv, S.Signal, S.SemWait, S.Barrier, S.Zero)(_named_text)
SITE_TEXT.register(S.Accumulate, S.Assign, S.Cast, S.Matmul)(_compute_text)
SITE_TEXT.register(S.When, S.Loop, S.Pipeline)(lambda op: op.tag)


def site_text(op: S.Op) -> str:
    """How compile errors name the op at a site: `cast: out (src: acc)`."""
    return SITE_TEXT[type(op)](op)


# ---------------------------------------------------------------------------- where


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _generated_lines(exc: BaseException, path: str) -> list[int]:
    """Lines of the emitted module in the exception's tracebacks, innermost first."""
    out: list[int] = []
    path = os.path.abspath(path)
    for e in _chain(exc):
        frames = [f for f in traceback.extract_tb(e.__traceback__) if os.path.abspath(f.filename) == path]
        for f in reversed(frames):
            if f.lineno and f.lineno not in out:
                out.append(f.lineno)
    return out


def schedule_line(exc: BaseException, path: str) -> tuple[int, str | None] | None:
    """The schedule line behind the innermost line of the module ringc emitted at `path`
    that an exception's tracebacks pass through (the `# line N:` comment above an op, or a
    copy descriptor's docstring), with the copy's name for a copy; None if none does. A
    line in a top-level helper is looked up at its caller."""
    source = linecache.getlines(path)
    for lineno in _generated_lines(exc, path):
        for text in reversed(source[:lineno]):
            if m := _OP_COMMENT.match(text):
                return int(m[1]), None
            if m := _COPY_DOC.match(text):
                return int(m[2]), m[1]
            if text.startswith("def "):  # a top-level helper: look at its caller
                break
    return None


def _site(schedule: S.Schedule, exc: BaseException, module: ModuleType) -> Site | None:
    """The schedule op (or copy) behind the innermost emitted line that maps to one."""
    found = schedule_line(exc, module.__file__)
    if found is None:
        return None
    line, copy = found
    if copy is not None:
        return Site(line, None, copy)
    ops = {op.line: op for op in walk_ops(schedule.all_ops)}
    for wait in copy_ops(schedule.all_ops):  # the waits of pipeline blocks that arrive by a copy too
        ops.setdefault(wait.line, wait)
    op = ops.get(line)
    return Site(line, op, op.copy_name if isinstance(op, S.OpNode) else None)


# ---------------------------------------------------------------------------- what


def explain(exc: BaseException, schedule: S.Schedule, n: int, target: str, module: ModuleType,
            sizes: dict[str, int] | None = None) -> CompileError:
    """`exc`, raised by lowering or compiling `schedule`'s kernel for `target` with N = n
    (`sizes`: devices along each of the schedule's axes, for a schedule over several)."""
    text = _core_message(str(exc))
    facts = _Facts(schedule, n, sizes)
    site = _site(schedule, exc, module)
    low = text.lower()
    if "vmem" in low and ("out of memory" in low or "limit" in low or "oom" in low or "would exceed memory" in low):
        return _overflow("vmem", text, facts, target)
    if "hbm" in low and ("out of memory" in low or "exceeds" in low):
        return _overflow("hbm", text, facts, target)
    if site is not None and re.search(r"tile|aligned|alignment|divisible", low):
        tiling = _tiling(text, str(exc), facts, site, target)
        if tiling is not None:
            return tiling
    return _generic(text, facts, site, target)


def _core_message(raw: str) -> str:
    """The compiler's statement of the problem, without status prefixes, MLIR dumps and
    bug-report boilerplate."""
    keep = []
    for line in raw.strip().splitlines():
        if line.startswith(("The MLIR operation involved", "Please report a bug", "See https://")):
            break
        keep.append(line.strip())
    text = " ".join(keep)
    text = re.sub(r"^(INTERNAL|RESOURCE_EXHAUSTED|INVALID_ARGUMENT|UNIMPLEMENTED): ", "", text)
    text = text.replace("Mosaic failed to compile TPU kernel: ", "")
    text = re.sub(r"^Pallas encountered an internal verification error\..*?Error details: ", "", text)
    text = re.sub(r"\s*see current operation:.*$", "", text)
    return text.strip()


def _bytes(match: re.Match | None) -> int | None:
    return int(float(match[1]) * _UNITS[match[2]]) if match else None


def _shape_text(facts: _Facts, name: str) -> str:
    b = facts.s.buffers[name]
    exprs = ", ".join(E.to_text(d) for d in b.full_shape)
    concrete = ", ".join(map(str, facts.shapes[name]))
    shape = f"[{exprs}]" if exprs == concrete else f"[{exprs}] = [{concrete}]"
    return f"{shape} {facts.s.dtype_of(name)}, {size_text(facts.nbytes(name), decimals=1)}"


def _overflow(memory: str, text: str, facts: _Facts, target: str) -> CompileError:
    s = facts.s
    names = facts.buffers_in(memory)
    # The compilers' three phrasings: "allocation with size 32.00M and limit 16.00M",
    # "the total memory required for HLO temporaries (36.00G) exceeds available HBM (15.75G)",
    # and Mosaic's "Allocation (size=268435456) would exceed memory (size=134217728) :: ... space=vmem".
    exact = re.search(r"\(size=(\d+)\) would exceed memory \(size=(\d+)\)", text)
    needed = (int(exact[1]) if exact else
              _bytes(re.search(r"size ([\d.]+)([KMG]?)\b", text) or re.search(r"required.*?\(([\d.]+)([KMG]?)\)", text)))
    limit = (int(exact[2]) if exact else
             _bytes(re.search(r"limit ([\d.]+)([KMG]?)\b", text) or re.search(r"available.*?\(([\d.]+)([KMG]?)\)", text)))
    space = memory.upper()
    amounts = f" (it needs {size_text(needed, decimals=1)}, the limit is {size_text(limit, decimals=1)})" if needed and limit else ""
    listing = "; ".join(f"`{n}` (line {s.buffers[n].line}) {_shape_text(facts, n)}" for n in names)
    if not names:
        return CompileError(f"{memory}_overflow", f"the kernel does not fit in {space} on {target}{amounts}",
                            file=s.file, line=s.line, fix="use smaller shapes (--param k=v)")
    big = names[0]
    largest = [n for n in names if facts.nbytes(n) == facts.nbytes(big)]
    params = sorted({v for n in largest for d in s.buffers[n].full_shape for v in E.names(d) if v in s.params})
    smaller = f" (--param {', '.join(f'{p}=...' for p in params)})" if params else ""
    which = (f"`{big}`, the largest," if len(largest) == 1 else
             f"the largest ({', '.join(f'`{n}`' for n in largest)})")
    where = ("keep data in HBM (`space: hbm` or an `hbm_scratch`) and move blocks through a smaller "
             "VMEM buffer" if memory == "vmem" else "use fewer slots")
    return CompileError(
        f"{memory}_overflow",
        f"the kernel's {space} buffers do not fit on {target}{amounts}: {listing}",
        file=s.file, line=s.buffers[big].line,
        fix=f"shrink {which} with smaller parameters{smaller}, or {where}")


def _tiling(text: str, raw: str, facts: _Facts, site: Site, target: str) -> CompileError | None:
    s = facts.s
    regions = facts.regions(site)
    if not regions:
        return None
    ref, region = regions[0]
    memref = _MEMREF.search(raw)  # the first memref of the MLIR op is the sliced buffer
    if memref:
        shape = tuple(int(d) for d in memref[1].rstrip("x").split("x"))
        dtype = _MLIR_DTYPES.get(memref[2], memref[2])
        ref, region = next(((r, reg) for r, reg in regions
                            if facts.shapes[reg.buffer] == shape and s.dtype_of(reg.buffer) == dtype),
                           (ref, region))
    name = region.buffer
    dtype = s.dtype_of(name)
    what = (f"{site.describe()} moves the block `{ref.text()}` = {list(region.shape)} {dtype} "
            f"of `{name}` {list(facts.shapes[name])}")
    dim = multiple = None
    part = "size"  # which part of the slice breaks the tiling: its size or its start
    if m := re.search(r"(size|index) at dimension (\d+) is divisible by the tile dimension (\d+)", text):
        part = "size" if m[1] == "size" else "start"
        dim, multiple = int(m[2]), int(m[3])
        rule = f"dimension {dim} of `{name}` is tiled by {multiple} on {target}"
    elif m := re.search(r"contiguous inner slice .*divisible by (\d+) bytes", text):
        dim, multiple = len(region.box) - 1, max(1, int(m[1]) // itemsize(dtype))
        rule = (f"a DMA on {target} needs the contiguous part of each row to be a multiple of "
                f"{m[1]} bytes ({multiple} {dtype} elements)")
    if dim is None or dim >= len(region.box):
        return CompileError(
            "tiling", f"{what}, which the TPU compiler cannot tile on {target}: {text}",
            file=s.file, line=site.line,
            fix="use blocks that cover whole TPU tiles: (8, 128) elements for 32-bit types, "
                "(16, 128) for 16-bit, (32, 128) for 8-bit")
    lo, hi = region.box[dim]
    index = ref.indices[dim] if dim < len(ref.indices) else None
    bad = getattr(index, part, None) if isinstance(index, E.Slice) else None
    value = hi - lo if part == "size" else lo
    expr = f"`{E.to_text(bad)}`" if bad is not None else f"the {part} of dimension {dim} of `{ref.text()}`"
    fix = f"make {expr} (= {value}) a multiple of {multiple}"
    if bad is not None and (hint := _param_hint(s, facts.n, bad, multiple)):
        fix += f", e.g. --param {hint}"
    if dim < len(s.buffers[name].slots):
        fix += f"; or pad `{name}` so that its blocks start and end on whole tiles"
    else:
        fix += f"; or slice `{name}` along a leading, untiled dimension instead"
    return CompileError(
        "tiling", f"{what}, but {rule}, and the block's {part} is {value} (it spans {lo}..{hi - 1}): "
                  "blocks must cover whole tiles",
        file=s.file, line=site.line, fix=fix)


def _static_env(s: S.Schedule, n: int, params: dict[str, int]) -> dict[str, int]:
    """N, the params, and the lets that depend on nothing else (e.g. `half: rows // 2`)."""
    env: dict[str, int] = {"N": n, **params}
    for name, e in s.let.items():
        try:
            env[name] = E.evaluate(e, env, exact_division=True)
        except E.ExprError:
            pass
    return env


def _param_hint(s: S.Schedule, n: int, size: E.Expr, multiple: int) -> str | None:
    """`rows=16`: the nearest larger value of one parameter that makes `size` a multiple of
    `multiple` while every buffer shape still divides exactly."""
    for param, current in sorted(s.params.items()):
        for value in range(current + 1, current + 1 + min(3 * current + multiple, 1024)):
            try:
                env = _static_env(s, n, {**s.params, param: value})
                ok = E.evaluate(size, env, exact_division=True) % multiple == 0
                for b in s.buffers.values():
                    for d in b.full_shape:
                        E.evaluate(d, env, exact_division=True)
            except E.ExprError:
                continue
            if ok:
                return f"{param}={value}"
    return None


def _generic(text: str, facts: _Facts, site: Site | None, target: str) -> CompileError:
    s = facts.s
    where = f"{site.describe()}" if site is not None else "the kernel"
    line = site.line if site is not None else s.line
    regions = facts.regions(site) if site is not None else []
    if m := re.search(r"Only vector<([^>]+)> and vector<([^>]+)> are supported, but got '(\w+)'", text):
        got = _MLIR_DTYPES.get(m[3], m[3])
        names = [reg.buffer for _, reg in regions if s.dtype_of(reg.buffer) == got]
        which = ", ".join(f"`{n}` (line {s.buffers[n].line})" for n in dict.fromkeys(names)) or "its buffers"
        return CompileError(
            "unsupported",
            f"{where} computes on {got} vectors ({which}), which the TPU vector unit on {target} does "
            f"not support for this op (only {_MLIR_DTYPES.get(m[1], m[1])} and {_MLIR_DTYPES.get(m[2], m[2])})",
            file=s.file, line=line,
            fix=f"declare them with `dtype: {_MLIR_DTYPES.get(m[2], m[2])}`")
    if ("element type mismatch" in text or "Invalid dtype" in text) and len(regions) == 2:
        (src_ref, src), (dst_ref, dst) = regions if site.copy is not None else regions[::-1]
        how = "a DMA moves bytes and cannot convert" if site.copy is not None else "ops do not convert types"
        return CompileError(
            "dtype_mismatch",
            f"{where} moves {s.dtype_of(src.buffer)} `{src_ref.text()}` into {s.dtype_of(dst.buffer)} "
            f"`{dst_ref.text()}`: {how}", file=s.file, line=line,
            fix=f"give `{src.buffer}` (line {s.buffers[src.buffer].line}) and `{dst.buffer}` (line "
                f"{s.buffers[dst.buffer].line}) the same dtype")
    unsupported = re.search(r"not implemented|unimplemented|unsupported|only .* supported", text.lower())
    first = text if len(text) <= 300 else text[:300].rsplit(" ", 1)[0] + " ..."
    return CompileError(
        "unsupported" if unsupported else "compiler_error",
        f"the TPU compiler cannot compile {where} for {target}: {first}", file=s.file, line=line,
        fix="see the compiler's message (--verbose) and change the op or its shapes")
