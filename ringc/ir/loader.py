"""YAML → `Schedule`, keeping the line of every node so each error names file:line.

PyYAML composes the node tree (with marks); we build plain Python data from it, record a
path → line table, and tag every mapping with `__line__` for the models. Pydantic's error
locations are then mapped back through the table.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Mapping

import yaml
from pydantic import ValidationError

from .errors import ScheduleError
from .schema import Schedule

LineTable = dict[tuple, int]


def _build(node: yaml.Node, path: tuple, lines: LineTable, loader: yaml.SafeLoader, file: str) -> Any:
    line = node.start_mark.line + 1
    lines[path] = line
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node)
            if not isinstance(key, (str, int)):
                raise ScheduleError(f"mapping keys must be names, got {key!r}", file=file,
                                    line=key_node.start_mark.line + 1)
            if key in out:
                raise ScheduleError(f"duplicate key `{key}`", file=file, line=key_node.start_mark.line + 1,
                                    fix="each key may appear once per mapping; remove or rename one of them")
            out[key] = _build(value_node, path + (key,), lines, loader, file)
        out["__line__"] = line
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(v, path + (i,), lines, loader, file) for i, v in enumerate(node.value)]
    return loader.construct_object(node)


def parse_yaml(text: str, file: str) -> tuple[Any, LineTable]:
    loader = None
    try:
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        if isinstance(e, yaml.reader.ReaderError):
            problem = f"character {e.character!r} is not allowed in YAML"
            mark = yaml.Mark(file, e.position, text.count("\n", 0, e.position), 0, None, None)
        raise ScheduleError(f"malformed YAML: {problem}", file=file,
                            line=mark.line + 1 if mark else None,
                            fix="check indentation and that every `key: value` pair is well formed") from None
    finally:
        if loader is not None:
            loader.dispose()
    if node is None:
        raise ScheduleError("the file is empty", file=file, line=1, fix="start from a schedule in schedules/")
    lines: LineTable = {}
    data = _build(node, (), lines, loader, file)
    if not isinstance(data, dict):
        raise ScheduleError("a schedule is a YAML mapping (name:, collective:, buffers:, ...)", file=file, line=1)
    return data, lines


def _header_comment(text: str) -> str:
    """The leading `#` comment block: the schedule's own explanation of its algorithm."""
    out = []
    for raw in text.splitlines():
        s = raw.strip()
        if s.startswith("#"):
            out.append(s[1:][1:] if s[1:].startswith(" ") else s[1:])
        elif s == "" and out:
            out.append("")
        elif s:
            break
    return "\n".join(out).strip()


def _line_of(loc: tuple, lines: LineTable) -> int | None:
    """Follow a pydantic location through the line table. Pydantic puts the op's union
    tag right after its list index (`body, 3, signal, to`): that tag is not a YAML key."""
    from .schema import OP_KEYS
    path: tuple = ()
    for i, comp in enumerate(loc):
        if i and isinstance(loc[i - 1], int) and comp in OP_KEYS:
            continue
        if path + (comp,) in lines:
            path = path + (comp,)
    return lines.get(path)


def _known_keys() -> list[str]:
    from . import schema
    keys: set[str] = set()
    for obj in vars(schema).values():
        if isinstance(obj, type) and issubclass(obj, schema.Node):
            keys |= {k for k in obj.model_fields if k != "line"}
    return sorted(keys)


def _pydantic_error(err: ValidationError, lines: LineTable, file: str) -> ScheduleError:
    errors = err.errors(include_url=False)
    # A misspelt key also makes the right one missing: name the misspelling, it has the fix.
    e = next((x for x in errors if x["type"] == "extra_forbidden"), errors[0])
    loc = tuple(c for c in e["loc"])
    where = ".".join(str(c) for c in loc if c in {p for path in lines for p in path}) or "schedule"
    msg = e["msg"].removeprefix("Value error, ")
    fix = None
    if e["type"] == "extra_forbidden":
        key = str(loc[-1])
        close = difflib.get_close_matches(key, _known_keys(), n=1)
        msg = f"unknown key `{key}`"
        fix = f"did you mean `{close[0]}`?" if close else "remove it; docs/schedule-format.md lists the keys"
    elif e["type"] == "unknown_op":
        from .schema import OP_KEYS
        given = [k for k in (e["input"] if isinstance(e["input"], dict) else {}) if k != "__line__"]
        ops = [k for k in given if k in OP_KEYS]
        if len(ops) > 1:
            msg = f"one list item holds several operations ({', '.join(f'`{k}`' for k in ops)})"
            fix = "write each operation as its own `- ` item"
        else:
            close = difflib.get_close_matches(str(given[0]), OP_KEYS, n=1) if given else []
            fix = (f"did you mean `{close[0]}`?" if close else
                   f"start the op with one of: {', '.join(OP_KEYS)}")
    elif e["type"] == "missing":
        msg = f"missing required key `{loc[-1]}`"
        fix = "see docs/schedule-format.md for what this entry needs"
        loc = loc[:-1]
    line = _line_of(loc, lines)
    more = len(err.errors()) - 1
    if more:
        msg += f" (and {more} more problem{'s' if more > 1 else ''})"
    return ScheduleError(f"{where}: {msg}", file=file, line=line, fix=fix)


def load_text(text: str, file: str = "<schedule>", params: Mapping[str, int] | None = None) -> Schedule:
    data, lines = parse_yaml(text, file)
    try:
        sched = Schedule.model_validate(data)
    except ValidationError as err:
        raise _pydantic_error(err, lines, file) from None
    if params:
        unknown = sorted(set(params) - set(sched.params))
        if unknown:
            raise ScheduleError(f"unknown parameter {', '.join(map(repr, unknown))}", file=file,
                                line=lines.get(("params",), 1),
                                fix=f"parameters of {sched.name}: {', '.join(sched.params) or 'none'}")
        sched = sched.model_copy(update={"params": {**sched.params, **params}})
    sched._file = file
    sched._header = _header_comment(text)
    sched._lines = lines
    from .resolve import resolve
    resolve(sched)
    return sched


def load(path: str | Path, params: Mapping[str, int] | None = None) -> Schedule:
    """Load and statically validate a schedule file. Raises `ScheduleError` on bad input."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ScheduleError(f"cannot read schedule: {e.strerror}", file=str(path)) from None
    except UnicodeDecodeError as e:
        line = p.read_bytes()[:e.start].count(b"\n") + 1
        raise ScheduleError(f"the file is not UTF-8 text (byte {e.object[e.start]:#x})", file=str(path),
                            line=line, fix="save the schedule as UTF-8") from None
    return load_text(text, str(path), params)
