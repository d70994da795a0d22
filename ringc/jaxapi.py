"""`ringc.kernel`: a schedule's kernel module in memory, checked first; the check that
`ringc emit` runs before it writes anything; and the check an emitted module asks for when
it is called at sizes that were not checked.

A kernel module (`ringc emit`'s text, `ringc/codegen/pallas.py`) exposes `kernel(*shards,
axis_name=AXIS, interpret=None, **params)`, the per-shard call to use inside your own
`jax.shard_map`, with shapes and dtype from its arguments and a `jax.custom_vjp` whose
backward pass is the transpose collective (`docs/jax-api.md`). `ringc.kernel(path)` checks
the schedule, emits the same text `ringc emit` writes and imports it without a file: the
source stays in `linecache` under the name `<ringc kernel FILE>`, so tracebacks and
`inspect` show the generated lines.

What is proved, and when (docs/jax-api.md, "What is checked, and when"):
- before emitting, `ringc.check` (no hang, balanced semaphores, no race over every
  interleaving, the collective's meaning) at the schedule's PARAMS, on `CHECK_SIZES`
  (`check_topologies`) unless other device counts are given. The module's CHECKED lists
  those sizes.
- when `kernel` is called at other sizes (another N, or parameters solved from the
  arguments' shapes), `check_sizes` checks them first: every static division in a `let`, a
  shape or a slice must be exact there (`inexact_divisions`), then `ringc.check` at that N;
  the verdict is kept in memory and on disk (`verdict_cache_dir`), keyed by the schedule's
  text, the sizes, the topology and ringc's own source, so later calls cost a dictionary
  look-up. A failing verdict raises ValueError before the kernel runs.
`unchecked=True` / `--unchecked` emits without checking (CHECKED = None: any sizes run;
for broken schedules on purpose: mutants, interpret-mode experiments).
"""

from __future__ import annotations

import hashlib
import json
import linecache
import math
import os
from pathlib import Path
from types import ModuleType
from typing import Iterable, Mapping

from . import topology as T
from .ir import Schedule, ScheduleError, load

__all__ = ["CHECK_SIZES", "EMIT_DATA", "check_topologies", "check_before_emit", "refusal",
           "import_kernel", "kernel", "check_sizes", "inexact_divisions", "verdict_cache_dir"]

# Device counts `ringc emit` and `ringc.kernel` check a one-axis schedule at: the smallest
# ring (left = right), an odd one and an even one beyond it.
CHECK_SIZES = (2, 3, 4)  # sizes a schedule refuses (log2(N) at N = 3) are skipped


def check_topologies(sched: Schedule, devices: Iterable[int] | None = None) -> list[tuple[int | None, str]]:
    """(n, topology) pairs to check `sched` on before emitting: rings of `devices` (default
    CHECK_SIZES) for a one-axis schedule; over k axes, the tori 2 x ... x 2 and 3 x 2 x ... x 2,
    or, given `devices`, the most nearly square k-D torus of each count."""
    k = len(sched.axes)
    if k == 1:
        return [(n, T.DEFAULT) for n in (devices or CHECK_SIZES)]
    if devices is None:
        return [(None, "torus:" + "x".join(["2"] * k)), (None, "torus:" + "x".join(["3"] + ["2"] * (k - 1)))]
    out = []
    for n in devices:
        shape = _square(n, k)
        if shape is None:
            raise ScheduleError(f"{n} devices do not make a {k}-D torus with every axis at least 2",
                                file=sched.file, fix=f"give device counts that are products of {k} factors >= 2")
        out.append((None, "torus:" + "x".join(map(str, shape))))
    return list(dict.fromkeys(out))


def _square(n: int, k: int) -> tuple[int, ...] | None:
    """The most nearly square factorization of n into k factors >= 2 (None if there is none)."""
    def splits(m: int, parts: int) -> list[tuple[int, ...]]:
        if parts == 1:
            return [(m,)] if m >= 2 else []
        return [(a, *rest) for a in range(2, m + 1) if m % a == 0 for rest in splits(m // a, parts - 1)]
    shapes = splits(n, k)
    return min(shapes, key=lambda sh: (max(sh) - min(sh), sh)) if shapes else None


EMIT_DATA = "random:10"  # the samples `ringc emit` checks a schedule with runtime data on


def check_before_emit(sched: Schedule, devices: Iterable[int] | None = None
                      ) -> tuple[list, list[ScheduleError], list[dict[str, int]]]:
    """`ringc.check` reports of `sched` on `check_topologies(sched, devices)`, in order, up
    to the first that fails; and the sizes the schedule itself refuses (a ScheduleError such
    as `log2(N)` of an N that is not a power of two: its kernel refuses that N too), which
    are skipped. If it refuses every size, the first refusal is raised. A schedule with
    runtime data is checked on `EMIT_DATA` samples drawn from its constraints (seed 0).
    Third: the sizes proved (`_sizes`' dicts), the emitted module's CHECKED."""
    reports, refused, proved = [], [], []
    for n, topo in check_topologies(sched, devices):
        try:
            reports.append(_check_at(sched, n, topo))
        except ScheduleError as e:
            refused.append(e)
            continue
        if not reports[-1].ok:
            break
        proved.append(_sizes_at(sched, n, topo))
    if not reports:
        raise refused[0]
    return reports, refused, proved


def _check_at(sched: Schedule, n: int | None, topo: str):
    """`ringc.check` of `sched` on one topology; a schedule with runtime data on `EMIT_DATA`
    samples drawn from its constraints (seed 0)."""
    from .verify.check import check
    data, how = None, ""
    if sched.data:
        from .testing import samples_for
        from .verify.check import resolve_topology
        sizes = resolve_topology(sched, n, topo).sizes
        data, how = samples_for(EMIT_DATA, sched, math.prod(sizes.values()), 0, sizes)
    return check(sched, n, topology=topo, data=data, data_how=how)


def _sizes_at(sched: Schedule, n: int | None, topo: str) -> dict[str, int]:
    """The sizes of a check on (n, topo), as an emitted module's `_sizes` names them (before
    renaming): N, N_<axis> over several axes, then every parameter."""
    from .verify.check import resolve_topology
    axis_sizes = resolve_topology(sched, n, topo).sizes
    out = {"N": math.prod(axis_sizes.values())}
    if len(sched.axes) > 1:
        out.update({f"N_{a}": axis_sizes[a] for a in sched.axes})
    return {**out, **sched.params}


def _topology_of(sched: Schedule, sizes: Mapping[str, int]) -> tuple[int | None, str]:
    """(n, topology) to check `sched` at `sizes`: a ring of N, or the torus of the axis sizes."""
    if len(sched.axes) == 1:
        return sizes["N"], T.DEFAULT
    return None, "torus:" + "x".join(str(sizes[f"N_{a}"]) for a in sched.axes)


def inexact_divisions(sched: Schedule, sizes: Mapping[str, int]) -> list[ScheduleError]:
    """Every static division (`a // b` over N, the axis sizes, params and static lets, with a
    parameter among its names) in a `let`, a shape, a grid, a copy or an op whose remainder
    is not zero at `sizes` (N, N_<axis>, and the parameters `sched` was loaded with): there
    the floor would drop elements silently (a bidirectional gather's `half: rows // 2` at
    rows = 5 never sends row 4). One error per division, at its line. A division over N
    alone (`far: N // 2`) is the schedule's own choice, left to the check."""
    from .ir import expr as E
    from .ir.resolve import resolved
    env = {**sizes, **sched.params}
    static = set(env)
    errors: list[ScheduleError] = []
    seen: set = set()

    def visit(e: E.Expr, line: int, where: str) -> None:
        for sub in _subexpressions(e):
            if not (isinstance(sub, E.BinOp) and sub.op == "//") or sub in seen:
                continue
            a, b = resolved(sched).inline(sub.left), resolved(sched).inline(sub.right)
            names = E.names(a) | E.names(b)
            if not names <= static or names.isdisjoint(sched.params):
                continue
            try:
                x, y = E.evaluate(a, env), E.evaluate(b, env)
            except E.ExprError:
                continue
            if y and x % y:
                seen.add(sub)
                at = ", ".join(f"{k}={v}" for k, v in env.items() if k in names)
                errors.append(ScheduleError(
                    f"{where}: `{E.to_text(sub)}` is {x} // {y} at {at}, which leaves a remainder of {x % y}: "
                    "the kernel would silently leave it out", file=sched.file, line=line or None,
                    fix="give the inputs a shape at which it divides (or pass the parameter), or write the "
                        "schedule for this size"))

    for name, e in sched.let.items():
        visit(e, sched.line_of("let", name), f"let `{name}`")
    for name, e in sched.grid.items():
        visit(e, sched.line_of("grid"), f"grid axis `{name}`")
    for node, where in _nodes(sched):
        for e in _node_expressions(node):
            visit(e, node.line or sched.line, where)
    return errors


def _subexpressions(e):
    from .ir import expr as E
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(E.children(x))


def _nodes(sched: Schedule):
    """(node, what it is) for the schedule's buffers, grid, copies and ops (nested too)."""
    from .ir.resolve import walk_ops
    for name, b in sched.buffers.items():
        yield b, f"buffer `{name}`"
    for name, c in sched.copies.items():
        yield c, f"copy `{name}`"
    for op in walk_ops(sched.all_ops):
        yield op, f"`{type(op).__name__.lower()}` op"


def _node_expressions(node):
    """Every expression a node holds directly: expression fields, list or dict entries of
    them, and the indices and slices of its references."""
    from .ir import expr as E
    from .ir import schema as S
    for field in type(node).model_fields:
        value = getattr(node, field)
        values = value.values() if isinstance(value, dict) else value if isinstance(value, list) else [value]
        for v in values:
            if isinstance(v, E.EXPR_TYPES):
                yield v
            elif isinstance(v, S.Node) and not isinstance(v, S.OpNode):  # a pipeline's block specs
                yield from _node_expressions(v)
            elif isinstance(v, E.Ref):
                for ix in v.indices:
                    parts = (ix.start, ix.size) if isinstance(ix, E.Slice) else (ix,)
                    yield from (p for p in parts if p is not None)


def refusal(sched: Schedule, reports: list) -> ScheduleError:
    """The error for a schedule whose check failed: the failing report's text."""
    failed = [r for r in reports if not r.ok]
    text = "\n".join(r.to_text() for r in failed)
    err = ScheduleError(f"`{sched.name}` fails `ringc check`, so no kernel is emitted:\n{text}", file=sched.file,
                        fix="fix the findings above; to emit it anyway (a broken kernel on purpose), pass "
                            "--unchecked (ringc emit) or unchecked=True (ringc.kernel)")
    err.reports = failed  # type: ignore[attr-defined]
    return err


def import_kernel(sched: Schedule, checked: Iterable[Mapping[str, int]] | None = None,
                  target: str = "tpu") -> ModuleType:
    """Emit `sched`'s module for `target` ("tpu" or "mgpu") and import it in memory (no file, no
    check). The module is named `ringc_kernel_<name>` where that is an identifier (else
    `ringc_kernel`); its source stays in `linecache` so tracebacks show the generated lines.
    `checked`: the sizes proved (its CHECKED; None: any sizes run). A schedule made in code has
    no YAML text: its module's SCHEDULE is the `Schedule` itself, so new sizes can still be
    checked."""
    from .codegen import emit, emit_mgpu

    text = (emit_mgpu if target == "mgpu" else emit)(sched, checked)
    filename = f"<ringc {'Mosaic GPU ' if target == 'mgpu' else ''}kernel {Path(sched.file).name}>"
    ident = "ringc_kernel_" + sched.name
    module = ModuleType(ident if ident.isidentifier() and len(ident) < 200 else "ringc_kernel")
    module.__file__ = filename
    # mtime None: linecache.checkcache keeps the entry, which has no file behind it.
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)
    exec(compile(text, filename, "exec", dont_inherit=True), module.__dict__)  # as written: no future flags of ours
    if module.SCHEDULE is None:
        module.SCHEDULE = sched
    return module


def kernel(source: str | Path | Schedule, *, unchecked: bool = False, devices: Iterable[int] | None = None,
           params: Mapping[str, int] | None = None) -> ModuleType:
    """The kernel module of a schedule (a path or a loaded `Schedule`), checked, emitted and
    imported in memory: `ringc.kernel("schedules/all_reduce_ring.yaml").kernel(x, axis_name="i")`.

    `params` override the schedule's parameters before checking (they become the module's
    PARAMS); `devices` replaces the device counts checked (`check_topologies`). A schedule
    that fails the check raises ScheduleError listing the findings, unless `unchecked`."""
    if isinstance(source, Schedule):
        sched = source
        if params:
            raise ValueError("params apply when loading a schedule: pass its path, or load it with ringc.load(path, params)")
    else:
        sched = load(source, dict(params or {}))
    checked = None
    if not unchecked:
        reports, _, checked = check_before_emit(sched, devices)
        if not all(r.ok for r in reports):
            raise refusal(sched, reports)
    return import_kernel(sched, checked)


# -------------------------------------------------------------- sizes checked at call time

_VERDICTS: dict[str, dict] = {}  # cache key -> {"ok": bool, "text": str}, this process


def verdict_cache_dir() -> Path:
    """Where verdicts are kept between processes: $RINGC_CACHE_DIR, else
    $XDG_CACHE_HOME/ringc/verdicts, else ~/.cache/ringc/verdicts."""
    if os.environ.get("RINGC_CACHE_DIR"):
        return Path(os.environ["RINGC_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ringc" / "verdicts"


_SOURCE_HASH: list[str] = []


def _ringc_hash() -> str:
    """A hash of ringc's own source (the verifier that gave a verdict): a verdict kept on
    disk is used only by the ringc that made it."""
    if not _SOURCE_HASH:
        h = hashlib.sha256()
        root = Path(__file__).parent
        for path in sorted(root.rglob("*.py")):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
        _SOURCE_HASH.append(h.hexdigest()[:16])
    return _SOURCE_HASH[0]


def check_sizes(schedule: "str | Schedule | None", source: str, sizes: Mapping[str, int],
                broadcasts: Iterable[str] = ()) -> None:
    """What an emitted module's `_checked` calls for sizes not in its CHECKED: raise
    ValueError unless `schedule` (YAML text, or a `Schedule`) at `sizes` (N, N_<axis>,
    every parameter, by the module's names) has no inexact division and passes
    `ringc.check` on a ring of N (a torus of the axis sizes over several axes). Verdicts
    are cached in memory and on disk; a failing one raises again without checking.
    `broadcasts`: copies a Mosaic GPU module sends by one multimem store; each must still be
    a broadcast at these sizes (`verify/broadcast.py`), else ValueError."""
    from .codegen.pallas import python_names
    sizes = dict(sizes)
    if schedule is None:
        raise ValueError(f"{source}: not checked at {sizes}, and this module does not carry its schedule; check "
                         "them with `ringc check` and emit again")
    if isinstance(schedule, Schedule):
        base, text = schedule, None
    else:
        from .ir.loader import load_text
        text = schedule
        base = load_text(text, source)
    names = python_names(base)  # the module's name of each parameter
    params = {p: sizes[names.get(p, p)] for p in base.params}
    n, topo = _topology_of(base, sizes)
    key_text = json.dumps([_ringc_hash(), text if text is not None else base.model_dump_json(),
                           sorted(params.items()), sizes["N"], topo])
    key = hashlib.sha256(key_text.encode()).hexdigest()
    verdict = _VERDICTS.get(key) or _read_verdict(key)
    if verdict is None:
        verdict = _verdict(base, text, source, params, sizes, n, topo)
        _write_verdict(key, verdict)
    _VERDICTS[key] = verdict
    if not verdict["ok"]:
        raise ValueError(verdict["text"])
    if broadcasts:
        from .verify.broadcast import why_not_broadcast
        from .verify.unroll import unroll
        at = base.model_copy(update={"params": {**base.params, **params}})
        program = unroll(at, n)  # a Mosaic GPU module runs over one axis
        for name in broadcasts:
            why = why_not_broadcast(at, program, name)
            if why is not None:
                raise ValueError(f"{source}: at {sizes}, copy `{name}` is not a broadcast ({why}), but this module "
                                 "sends it by one multimem store to every GPU: pass multimem=False (a TMA copy per "
                                 "GPU), or change the schedule")


def _verdict(base: Schedule, text: str | None, source: str, params: Mapping[str, int], sizes: Mapping[str, int],
             n: int | None, topo: str) -> dict:
    from .ir.loader import load_text
    sched = (load_text(text, source, params) if text is not None
             else base.model_copy(update={"params": {**base.params, **params}}))
    if text is None:
        sched._file, sched._header, sched._lines = base.file, base.header, base._lines
    flags = " ".join(f"--param {k}={v}" for k, v in params.items() if base.params.get(k) != v)
    command = f"ringc check {source} " + (f"--devices {n}" if n else f"--topology {topo}") + (f" {flags}" if flags else "")
    at = ", ".join(f"{k}={v}" for k, v in {**{"N": sizes["N"]}, **params}.items())
    divisions = inexact_divisions(sched, {k: v for k, v in sizes.items() if k == "N" or k.startswith("N_")})
    if divisions:
        lines = "\n".join(f"  {e}" for e in divisions)
        return {"ok": False, "text": f"{sched.name}: refused at {at} (sizes `ringc check` has not proved):\n{lines}"}
    try:
        report = _check_at(sched, n, topo)
    except ScheduleError as e:
        return {"ok": False, "text": f"{sched.name}: refused at {at}: {e}"}
    if report.ok:
        return {"ok": True, "text": ""}
    return {"ok": False, "text": f"{sched.name}: fails `ringc check` at {at}, the sizes of this call, so it does "
                                 f"not run (reproduce: `{command}`):\n{report.to_text()}"}


def _read_verdict(key: str) -> dict | None:
    try:
        verdict = json.loads((verdict_cache_dir() / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    return verdict if isinstance(verdict, dict) and isinstance(verdict.get("ok"), bool) else None


def _write_verdict(key: str, verdict: dict) -> None:
    """Keep a verdict on disk (atomically); a cache that cannot be written only costs time."""
    directory = verdict_cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f".{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(verdict))
        os.replace(tmp, directory / f"{key}.json")
    except OSError:
        pass
