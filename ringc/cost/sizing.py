"""`--bytes 64MiB`: choose a schedule's shape parameters so the collective has that size.

The size V is the collective's per-device array (`bounds.volume_buffer`: the gathered
output of an all-gather, the input otherwise). Schedules state shapes through params,
e.g. `shape: [rows, cols]`. We scale the *row* parameter (the first one in that buffer's
shape) and keep the others; only when fewer than 8 rows (one sublane tile) would be
needed do we fix rows at a small legal value and scale the *column* parameter (the last
one) instead. Candidates are tried nearest-first, preferring multiples of 8 rows and
128 columns, and the first whose shapes all divide (the schedule's own rules, checked
by `verify.unroll.buffer_shapes`) wins. The achieved V is reported: it can differ slightly from the request.
"""

from __future__ import annotations

import re
from math import prod

from ..ir import expr as E
from ..ir import schema as S
from ..errors import ScheduleError
from ..units import size_text
from ..verify.unroll import buffer_shapes
from ..collectives import Buffers, collective_of
from .bounds import volume_buffer

_UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
          "kb": 10**3, "mb": 10**6, "gb": 10**9, "k": 2**10, "m": 2**20, "g": 2**30}


def parse_size(text: str) -> int:
    """`4096`, `4KiB`, `64MiB`, `1GiB`, `1.5MB` -> bytes."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"expected a size like 4096, 4KiB, 64MiB or 1GiB, got {text!r}")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not value < 2**63:  # also inf, from hundreds of digits
        raise ValueError(f"a size must be below 2**63 bytes, got {text!r}")
    if value < 1:
        raise ValueError(f"a size must be at least 1 byte, got {text!r}")
    return int(value)


def parse_sweep(text: str) -> list[int]:
    """`4KiB..1GiB` -> 4 KiB, 8 KiB, ..., 1 GiB (doubling; the upper end always included)."""
    lo_text, sep, hi_text = text.partition("..")
    if not sep:
        raise ValueError(f"expected a range like 4KiB..1GiB, got {text!r}")
    lo, hi = parse_size(lo_text), parse_size(hi_text)
    if hi < lo:
        raise ValueError(f"the sweep {text!r} ends below where it starts")
    sizes = []
    s = lo
    while s < hi:
        sizes.append(s)
        s *= 2
    return sizes + [hi]


def _size_params(sched: S.Schedule) -> tuple[str, str | None]:
    name = volume_buffer(sched)
    buf = sched.buffers[name]
    found = [p for dim in buf.shape for p in sorted(E.names(dim)) if p in sched.params]
    if not found:
        raise ScheduleError(
            f"--bytes cannot size `{sched.name}`: the shape of `{name}` uses no parameter",
            file=sched.file, line=buf.line,
            fix=f"write the shape of `{name}` with params (e.g. `shape: [rows, cols]`), or use --param")
    rows, cols = found[0], found[-1]
    return rows, (cols if cols != rows else None)


def _names(text: str) -> set[str]:
    """The names an expression mentions (the words of `text` if it is not one)."""
    try:
        return E.names(E.parse(text))
    except Exception:   # not an expression: the message had another form
        return set(re.findall(r"[A-Za-z_]\w*", text))


def _volume_at(sched: S.Schedule, sizes: dict[str, int], params: dict[str, int]) -> int | None:
    """V for these params, or None if some shape of the schedule does not divide."""
    try:
        shapes = buffer_shapes(sched.model_copy(update={"params": params}), sizes)
    except ScheduleError:
        return None
    return collective_of(sched).volume(prod(sizes.values()), shapes, Buffers.of(sched))


def _near(ideal: float, align: int) -> list[int]:
    """Integer candidates near `ideal`, aligned ones first."""
    out: list[int] = []
    if ideal >= align:
        base = int(ideal // align) * align
        out += [base + k * align for k in (0, 1, -1, 2, -2, 3, 4) if base + k * align >= align]
    f = max(1, int(ideal))
    out += [f, f + 1, max(1, f - 1)]
    return list(dict.fromkeys(out))


def fit_volume(sched: S.Schedule, sizes: dict[str, int], target: int) -> S.Schedule:
    """The schedule with params chosen so its collective is about `target` bytes."""
    rows, cols = _size_params(sched)
    base = dict(sched.params)
    # V is linear in each size parameter: measure it per unit at the schedule's defaults,
    # or at the first doubling of the row parameter whose shapes divide (with --param
    # bm=512 the default 8 rows do not hold one block; 512 rows do, and then every
    # multiple of 512 does).
    unit = next((base[rows] << k for k in range(24)
                 if _volume_at(sched, sizes, {**base, rows: base[rows] << k}) is not None), base[rows])
    per_row = (_volume_at(sched, sizes, {**base, rows: unit}) or 0) / max(1, unit)
    candidates: list[dict[str, int]] = []
    if per_row:
        ideal = target / per_row
        align = max(8, unit if unit > base[rows] else 8)
        candidates += [{**base, rows: r} for r in _near(ideal, align)]
        # Pipeline windows may need coarser multiples (a 1 MiB window over 6 blocks of a
        # 256 MiB shard: 1365 rows divide into no window): try every doubling too, after.
        while align * 2 <= ideal:
            align *= 2
            candidates += [{**base, rows: r} for r in _near(ideal, align)[:3]]
        # A schedule whose default rows are the least its shapes divide into (a paced
        # schedule's 8 x 82 rows) divides at their multiples, which neither list may hold.
        if unit > 8:
            candidates += [{**base, rows: r} for r in _near(ideal, unit)[:3]]
        if ideal < 8 and cols is not None:
            for r in (8, 4, 2, 1):
                per_col = (_volume_at(sched, sizes, {**base, rows: r}) or 0) / max(1, base[cols])
                if per_col:
                    candidates += [{**base, rows: r, cols: c} for c in _near(target / per_col, 128)]
    best = None
    for i, params in enumerate(candidates):
        v = _volume_at(sched, sizes, params)  # None: some shape does not divide
        if v is not None and (best is None or (round(abs(v - target) / target, 3), i) < best[0]):
            best = ((round(abs(v - target) / target, 3), i), params)
    if best is None:
        # A shape that divides at no rows (a guard on the axis sizes, as a paced schedule
        # unrolled for one slice has) is the reason to show: it names what the rows cannot fix.
        why = ""
        try:
            buffer_shapes(sched, sizes)
        except ScheduleError as e:
            failing = e.message.split(": ", 1)[-1].split(" = ", 1)[0]   # the expression that does not divide
            if rows not in _names(failing):   # no rows would make it divide: say so
                why = f"; at its own params: {e.message}"
        raise ScheduleError(
            f"--bytes {size_text(target)}: found no `{rows}`{f'/`{cols}`' if cols else ''} for which the shapes of "
            f"`{sched.name}` divide exactly on {' x '.join(f'{v} ({k})' for k, v in sizes.items())} devices{why}",
            file=sched.file, line=sched.buffers[volume_buffer(sched)].line, fix="pick the parameters yourself with --param")
    return sched.model_copy(update={"params": best[1]})
