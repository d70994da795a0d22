"""`ringc.kernel`: a schedule's kernel module in memory, checked first; and the check that
`ringc emit` runs before it writes anything.

A kernel module (`ringc emit`'s text, `ringc/codegen/pallas.py`) exposes `kernel(*shards,
axis_name=AXIS, interpret=None, **params)`, the per-shard call to use inside your own
`jax.shard_map`, with shapes and dtype from its arguments and a `jax.custom_vjp` whose
backward pass is the transpose collective (`docs/jax-api.md`). `ringc.kernel(path)` checks
the schedule, emits the same text `ringc emit` writes and imports it without a file: the
source stays in `linecache` under the name `<ringc kernel FILE>`, so tracebacks and
`inspect` show the generated lines.

What the check before emitting proves, and assumes: `ringc.check` (no hang, balanced
semaphores, no race over every interleaving, the collective's meaning) at the schedule's
PARAMS, on `CHECK_SIZES` (`check_topologies`) unless other device counts are given. A
schedule that passes there is emitted; a kernel called with other sizes or parameters
runs a schedule `check` has not seen at those sizes: check them with `ringc check
--devices N --param k=v` (every library schedule's proofs hold for every N it was swept at,
see docs/verification.md). `unchecked=True` / `--unchecked` emits without checking (for
broken schedules on purpose: mutants, interpret-mode experiments).
"""

from __future__ import annotations

import linecache
import math
from pathlib import Path
from types import ModuleType
from typing import Iterable, Mapping

from .ir import Schedule, ScheduleError, load

__all__ = ["CHECK_SIZES", "EMIT_DATA", "check_topologies", "check_before_emit", "refusal", "import_kernel", "kernel"]

# Device counts `ringc emit` and `ringc.kernel` check a one-axis schedule at: the smallest
# ring (left = right), an odd one and an even one beyond it.
CHECK_SIZES = (2, 3, 4)  # sizes a schedule refuses (log2(N) at N = 3) are skipped


def check_topologies(sched: Schedule, devices: Iterable[int] | None = None) -> list[tuple[int | None, str]]:
    """(n, topology) pairs to check `sched` on before emitting: rings of `devices` (default
    CHECK_SIZES) for a one-axis schedule; over k axes, the tori 2 x ... x 2 and 3 x 2 x ... x 2,
    or, given `devices`, the most nearly square k-D torus of each count."""
    k = len(sched.axes)
    if k == 1:
        return [(n, "ring") for n in (devices or CHECK_SIZES)]
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


def check_before_emit(sched: Schedule, devices: Iterable[int] | None = None) -> tuple[list, list[ScheduleError]]:
    """`ringc.check` reports of `sched` on `check_topologies(sched, devices)`, in order, up
    to the first that fails; and the sizes the schedule itself refuses (a ScheduleError such
    as `log2(N)` of an N that is not a power of two: its kernel refuses that N too), which
    are skipped. If it refuses every size, the first refusal is raised. A schedule with
    runtime data is checked on `EMIT_DATA` samples drawn from its constraints (seed 0)."""
    from .verify import check

    reports, refused = [], []
    for n, topo in check_topologies(sched, devices):
        try:
            data, how = None, ""
            if sched.data:
                from .testing import samples_for
                from .verify.check import resolve_topology
                sizes = resolve_topology(sched, n, topo).sizes
                data, how = samples_for(EMIT_DATA, sched, math.prod(sizes.values()), 0, sizes)
            reports.append(check(sched, n, topology=topo, data=data, data_how=how))
        except ScheduleError as e:
            refused.append(e)
            continue
        if not reports[-1].ok:
            break
    if not reports:
        raise refused[0]
    return reports, refused


def refusal(sched: Schedule, reports: list) -> ScheduleError:
    """The error for a schedule whose check failed: the failing report's text."""
    failed = [r for r in reports if not r.ok]
    text = "\n".join(r.to_text() for r in failed)
    err = ScheduleError(f"`{sched.name}` fails `ringc check`, so no kernel is emitted:\n{text}", file=sched.file,
                        fix="fix the findings above; to emit it anyway (a broken kernel on purpose), pass "
                            "--unchecked (ringc emit) or unchecked=True (ringc.kernel)")
    err.reports = failed  # type: ignore[attr-defined]
    return err


def import_kernel(sched: Schedule) -> ModuleType:
    """Emit `sched`'s module and import it in memory (no file, no check). The module is named
    `ringc_kernel_<name>` where that is an identifier (else `ringc_kernel`); its source stays in
    `linecache` so tracebacks show the generated lines."""
    from .codegen import emit

    text = emit(sched)
    filename = f"<ringc kernel {Path(sched.file).name}>"
    ident = "ringc_kernel_" + sched.name
    module = ModuleType(ident if ident.isidentifier() and len(ident) < 200 else "ringc_kernel")
    module.__file__ = filename
    # mtime None: linecache.checkcache keeps the entry, which has no file behind it.
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)
    exec(compile(text, filename, "exec", dont_inherit=True), module.__dict__)  # as written: no future flags of ours
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
    if not unchecked:
        reports, _ = check_before_emit(sched, devices)
        if not all(r.ok for r in reports):
            raise refusal(sched, reports)
    return import_kernel(sched)
