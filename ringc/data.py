"""Runtime data: the small integer arrays a schedule reads at run time (`data:`), their
constraints, concrete samples of them, and data files.

A *sample* gives every data array of the schedule its values on every device:
`{name: ((values of device 0), (values of device 1), ...)}`. `ringc check --data` verifies
the schedule once per sample (the unroller reads `name[i]` from it), so a verdict is about
the samples checked, never about all data (docs/verification.md, "Runtime data").

Constraints (`schema.Data`): a free array has every element in `range: [lo, hi]` and, with
`sum_at_most: c`, the elements of one device sum to at most c; a derived array is the
exclusive prefix sum of another array of the same device (`prefix_sum_of`, offsets of packed
sizes) or its transpose across devices (`transpose_of`: element j on device d is element d
on device j, what `lax.all_to_all` gives). `sum_at_most` may also bound a derived array
(the receive side of a ragged all-to-all: what arrives must fit the receive buffer).

Samples come from a data file (`load_samples`) or from the hypothesis strategy
`ringc.testing.data_samples` (`ringc.testing.draw_samples`, reproducible with a seed). Every sample is
checked against the constraints (`problems`) before it is used.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from .ir import expr as E
from .ir import schema as S
from .errors import ScheduleError
from . import limits
from .ir.resolve import axis_size_env, resolved

__all__ = ["Sample", "static_env", "bounds", "derive", "problems", "sample_text", "parse_spec",
           "load_samples"]

Sample = dict[str, tuple[tuple[int, ...], ...]]


def static_env(sched: S.Schedule, n: int, sizes: Mapping[str, int] | None = None) -> dict[str, int]:
    """N, the axis sizes and the params: what a constraint may use (with static lets inlined)."""
    return {"N": n, **axis_size_env(sched.axes, sizes or {sched.axes[0]: n}), **sched.params}


def _value(sched: S.Schedule, e: E.Expr, env: Mapping[str, int]) -> int:
    return int(E.evaluate(resolved(sched).inline(e), env))


def bounds(sched: S.Schedule, n: int, sizes: Mapping[str, int] | None = None
           ) -> dict[str, dict[str, int | None]]:
    """Per data array: its length, range (lo, hi; None for a derived array) and sum bound (or None)."""
    env = static_env(sched, n, sizes)
    out: dict[str, dict[str, int | None]] = {}
    for name, d in sched.data.items():
        lo, hi = (_value(sched, b, env) for b in d.range) if d.range is not None else (None, None)
        out[name] = {"length": _value(sched, d.shape[0], env), "lo": lo, "hi": hi,
                     "sum": _value(sched, d.sum_at_most, env) if d.sum_at_most is not None else None}
    return out


def derive(sched: S.Schedule, n: int, free: Mapping[str, Any]) -> Sample:
    """The full sample from the free arrays' values (per device), the derived arrays computed
    in dependency order. Derived arrays given in `free` are kept as given (`problems` checks them)."""
    out: Sample = {k: tuple(tuple(int(x) for x in dev) for dev in v) for k, v in free.items()}
    pending = [k for k in sched.data if k not in out]
    while pending:
        for name in list(pending):
            d = sched.data[name]
            src = out.get(d.source) if d.source else None
            if src is None:
                continue
            if d.prefix_sum_of:
                out[name] = tuple(_prefix(dev) for dev in src)
            else:
                out[name] = tuple(tuple(src[j][dev] if dev < len(src[j]) else 0 for j in range(len(src)))
                                  for dev in range(len(src)))
            pending.remove(name)
        if all(sched.data[k].source not in out for k in pending):
            break  # a free array is missing: `problems` says so
    return out


def _prefix(values: tuple[int, ...]) -> tuple[int, ...]:
    out, total = [], 0
    for v in values:
        out.append(total)
        total += v
    return tuple(out)


def problems(sched: S.Schedule, n: int, sample: Mapping[str, Any], sizes: Mapping[str, int] | None = None
             ) -> list[tuple[str, str]]:
    """Every way `sample` breaks the declared constraints at N devices, as (array, text)."""
    limits = bounds(sched, n, sizes)
    out: list[tuple[str, str]] = []
    for name in sample:
        if name not in sched.data:
            out.append((name, f"`{name}` is no data array of the schedule (it has {', '.join(sched.data) or 'none'})"))
    for name, d in sched.data.items():
        values = sample.get(name)
        lim = limits[name]
        if values is None:
            out.append((name, f"no values for data array `{name}`"))
            continue
        if len(values) != n or any(len(dev) != lim["length"] for dev in values):
            out.append((name, f"`{name}` needs {n} devices x {lim['length']} values, got "
                              f"{[len(dev) for dev in values]} values per device"))
            continue
        for dev, row in enumerate(values):
            if lim["lo"] is not None and not all(lim["lo"] <= v <= lim["hi"] for v in row):
                out.append((name, f"`{name}` on device {dev} is {list(row)}: every value must lie in "
                                  f"{lim['lo']}..{lim['hi']}"))
            if lim["sum"] is not None and sum(row) > lim["sum"]:
                out.append((name, f"`{name}` on device {dev} is {list(row)}, which sums to {sum(row)}: at "
                                  f"most {lim['sum']} allowed (sum_at_most)"))
        src = sample.get(d.source) if d.source else None
        if src is not None and len(src) == n:
            want = (derive(sched, n, {d.source: src})[name] if d.prefix_sum_of else
                    tuple(tuple(src[j][dev] for j in range(n)) for dev in range(n)) if all(
                        len(r) == n for r in src) else None)
            if want is not None and tuple(tuple(r) for r in values) != want:
                rel = "the exclusive prefix sum" if d.prefix_sum_of else "the transpose across devices"
                out.append((name, f"`{name}` is {[list(r) for r in values]}, but it is declared {rel} of "
                                  f"`{d.source}`: {[list(r) for r in want]}"))
    return out


def sample_text(sample: Mapping[str, Any], names: list[str] | None = None) -> str:
    """`send_sizes = [[1, 0], [2, 1]], ...`: the free arrays (or `names`) per device."""
    keys = names if names is not None else list(sample)
    return ", ".join(f"{k} = {[list(r) for r in sample[k]]}" for k in keys if k in sample)


def parse_spec(spec: str) -> tuple[str, Any]:
    """`--data random:K` -> ("random", K); anything else is a file path -> ("file", path)."""
    if spec.startswith("random:"):
        count = spec[len("random:"):]
        if not count.isdigit() or int(count) < 1:
            raise ScheduleError(f"--data {spec}: K in random:K must be a positive integer",
                                fix="e.g. --data random:20")
        limits.check("data_samples", int(count), f"--data {spec}: the number of samples",
                     fix="check fewer samples")
        return "random", int(count)
    if not spec.strip():
        raise ScheduleError("--data is empty", fix="give --data random:K or the path of a JSON data file")
    return "file", spec


def _line_of_key(text: str, key: str, last: bool = False) -> int | None:
    """The line of the first (or last) mention of `"key"` in a JSON text."""
    needle = json.dumps(key)
    found = [i for i, line in enumerate(text.splitlines(), start=1) if needle in line]
    return (found[-1] if last else found[0]) if found else None


def load_samples(path: str, sched: S.Schedule) -> list[tuple[int, Sample]]:
    """The samples of a data file, as (line, sample). The file is JSON: one sample, a
    mapping from data array names to one list of values per device, or
    `{"samples": [sample, ...]}`. Derived arrays may be left out (they are computed).
    Raises `ScheduleError` with the file, the line and a fix on anything malformed."""
    fix = ('write JSON such as {"samples": [{"send_sizes": [[1, 2], [0, 3]]}]}: one list of '
           'integers per device for each free data array')
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(1 << 20)
    except (OSError, UnicodeDecodeError) as e:
        raise ScheduleError(f"cannot read data file: {getattr(e, 'strerror', None) or e}", file=path,
                            fix="give an existing JSON file, or --data random:K") from None
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, v in pairs:
            if key in seen:  # json.loads would keep the last silently: the user meant one of them
                raise ScheduleError(f"`{key}` is given twice in one mapping of the data file", file=path,
                                    line=_line_of_key(text, key, last=True), fix="keep one of them")
            seen[key] = v
        return seen

    try:
        doc = json.loads(text, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as e:
        raise ScheduleError(f"the data file is not JSON: {e.msg}", file=path, line=e.lineno, fix=fix) from None
    except RecursionError:
        raise ScheduleError("the data file nests lists or mappings too deeply to read", file=path, line=1,
                            fix=fix) from None
    raw = doc.get("samples") if isinstance(doc, dict) and "samples" in doc else [doc]
    if not isinstance(raw, list) or not raw:
        raise ScheduleError("`samples` must be a non-empty list of samples", file=path,
                            line=_line_of_key(text, "samples"), fix=fix)
    limits.check("data_samples", len(raw), "the number of samples in the data file", file=path,
                 line=_line_of_key(text, "samples"), fix="split the file")
    out: list[tuple[int, Sample]] = []
    for i, sample in enumerate(raw):
        where = f"sample {i + 1}" if len(raw) > 1 else "the sample"
        if not isinstance(sample, dict):
            raise ScheduleError(f"{where} is not a mapping of data array names to values", file=path,
                                line=_line_of_key(text, "samples"), fix=fix)
        for name, values in sample.items():
            line = _line_of_key(text, name)
            if name not in sched.data:
                raise ScheduleError(f"{where}: `{name}` is no data array of {sched.name} "
                                    f"({', '.join(sched.data) or 'it declares none'})", file=path, line=line,
                                    fix=f"name the arrays declared under `data:` in {sched.file}")
            if not (isinstance(values, list) and all(isinstance(r, list) and all(
                    type(v) is int for v in r) for r in values)):
                raise ScheduleError(f"{where}: `{name}` must be a list with one list of integers per device",
                                    file=path, line=line, fix=fix)
        free = [k for k, d in sched.data.items() if d.source is None]
        missing = [k for k in free if k not in sample]
        if missing:
            raise ScheduleError(f"{where} gives no values for {', '.join(f'`{k}`' for k in missing)}", file=path,
                                line=_line_of_key(text, "samples") or 1, fix=fix)
        lengths = {len(v) for v in sample.values()}
        if 0 in lengths:
            empty = next(k for k, v in sample.items() if not v)
            raise ScheduleError(f"{where}: `{empty}` lists no device", file=path, line=_line_of_key(text, empty),
                                fix=fix)
        if len(lengths) != 1:
            raise ScheduleError(f"{where}: the arrays list different numbers of devices {sorted(lengths)}",
                                file=path, line=_line_of_key(text, next(iter(sample))), fix=fix)
        n = lengths.pop()
        full = derive(sched, n, sample)
        found = problems(sched, n, full)
        if found:
            name, text_ = found[0]
            raise ScheduleError(f"{where} (N={n}) breaks the constraints of {sched.name}: {text_}", file=path,
                                line=_line_of_key(text, name) or _line_of_key(text, sched.data[name].source or name),
                                fix=f"change the values, or the constraints at {sched.file}:"
                                    f"{sched.line_of('data', name)}")
        out.append((n, full))
    return out
