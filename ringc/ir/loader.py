"""YAML → `Schedule`, keeping the line of every node so each error names file:line.

PyYAML composes the node tree (with marks); we build plain Python data from it, record a
path → line table, and tag every mapping with `__line__` for the models. Pydantic's error
locations are then mapped back through the table.
"""

from __future__ import annotations

import difflib
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

import yaml
from pydantic import ValidationError

from .. import limits
from ..errors import ScheduleError
from . import schema
from .expr import ExprError
from .resolve import resolve
from .schema import OP_KEYS, Schedule, copy_key

LineTable = dict[tuple, int]


_CORE = "tag:yaml.org,2002:"
_SCALAR_TAGS = {_CORE + t for t in ("str", "int", "float", "bool", "null", "timestamp")}
_MERGE = _CORE + "merge"


class _Builder:
    """Plain data from a composed YAML node tree, with a path -> line table.

    Guards (`ringc.limits`): at most `yaml_nodes` nodes are built, aliases counted each time
    they are expanded (so a "billion laughs" file stops after that many, not after 10^9);
    at most `yaml_depth` levels of nesting (Python's own recursion limit is never the
    guard); an alias inside its own anchor is refused; tags other than YAML's core scalar
    tags are refused at their line; integers are 64-bit. Booleans are YAML 1.2's: only
    true/false (True, TRUE, ...); YAML 1.1's yes/no/on/off (which PyYAML still resolves
    as booleans) stay text, so `off:` or `n:` can name a let, a param or a buffer. Merge keys (`<<: *base`,
    `<<: [*a, *b]`) are expanded as YAML 1.1 defines them: keys written in the mapping win,
    then earlier merged mappings over later ones; a merged key keeps the line where it
    was written (in the anchored mapping)."""

    def __init__(self, loader: yaml.SafeLoader, file: str):
        self.loader = loader
        self.file = file
        self.lines: LineTable = {}
        self.nodes = 0
        self.max_nodes = limits.value("yaml_nodes")
        self.max_depth = limits.value("yaml_depth")
        self.open: set[int] = set()  # ids of the collection nodes being built (alias cycles)

    def fail(self, node: yaml.Node, msg: str, fix: str | None = None) -> None:
        raise ScheduleError(msg, file=self.file, line=node.start_mark.line + 1, fix=fix)

    def build(self, node: yaml.Node, path: tuple, depth: int = 1) -> Any:
        self.nodes += 1
        line = node.start_mark.line + 1
        if self.nodes > self.max_nodes or depth > self.max_depth:
            limits.check("yaml_nodes", self.nodes, "the number of YAML nodes, aliases expanded,", file=self.file,
                  line=line, fix="write the repeated part once instead of through nested aliases")
            limits.check("yaml_depth", depth, "the YAML nesting depth", file=self.file, line=line)
        self.lines[path] = line
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node)
        if node.tag not in (_CORE + "map", _CORE + "seq"):
            self.fail(node, f"YAML tag `{node.tag}` is not supported",
                      fix="remove the tag: a schedule uses plain mappings, lists and scalars")
        if id(node) in self.open:
            self.fail(node, "an alias refers to the mapping or list that contains it (a recursive alias)",
                      fix="an alias (*name) may only repeat a node defined before, outside it")
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                return [self.build(v, path + (i,), depth + 1) for i, v in enumerate(node.value)]
            return self.mapping(node, path, depth)
        finally:
            self.open.discard(id(node))

    def scalar(self, node: yaml.ScalarNode) -> Any:
        if node.tag not in _SCALAR_TAGS:
            what = ("a merge key `<<` needs a mapping (or a list of them) as its value" if node.tag == _MERGE
                    else f"YAML tag `{node.tag}` is not supported")
            self.fail(node, what, fix="remove the tag: a schedule uses plain mappings, lists and scalars")
        if node.tag in (_CORE + "str", _CORE + "timestamp"):
            return node.value  # a date-like string stays text
        if node.tag == _CORE + "bool" and node.value.lower() not in ("true", "false"):
            return node.value  # YAML 1.1's yes/no/on/off: text, as in YAML 1.2
        if node.tag == _CORE + "int":
            digits = node.value.lstrip("+-").replace("_", "")
            if len(digits) > 40:
                limits.check_int64(10**41, "this integer", file=self.file, line=node.start_mark.line + 1)
        try:
            value = self.loader.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, OverflowError) as e:
            self.fail(node, f"cannot read the value {node.value[:40]!r}: {e}")
        if isinstance(value, int) and not isinstance(value, bool):
            limits.check_int64(value, "this integer", file=self.file, line=node.start_mark.line + 1)
        return value

    def mapping(self, node: yaml.MappingNode, path: tuple, depth: int) -> dict:
        out: dict[Any, Any] = {}
        merged: list[yaml.Node] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                if not all(isinstance(m, yaml.MappingNode) for m in sources) or not sources:
                    self.fail(value_node, "a merge key `<<` needs a mapping (or a list of them) as its value",
                              fix="write `<<: *name` where `&name` anchors a mapping")
                merged += sources
                continue
            key = self.key(key_node)
            if key in out:
                self.fail(key_node, f"duplicate key `{key}`",
                          fix="each key may appear once per mapping; remove or rename one of them")
            out[key] = self.build(value_node, path + (key,), depth + 1)
        for source in merged:
            if id(source) in self.open:
                self.fail(source, "a merge key `<<` merges a mapping into itself",
                          fix="merge a mapping anchored outside this one")
            self.open.add(id(source))
            try:
                for key_node, value_node in source.value:
                    if key_node.tag == _MERGE:
                        self.fail(key_node, "a merged mapping has a merge key of its own",
                                  fix="merge the mappings in one list instead: `<<: [*a, *b]`")
                    key = self.key(key_node)
                    if key not in out:
                        out[key] = self.build(value_node, path + (key,), depth + 1)
            finally:
                self.open.discard(id(source))
        out["__line__"] = node.start_mark.line + 1
        return out

    def key(self, node: yaml.Node) -> str | int:
        key = self.scalar(node) if isinstance(node, yaml.ScalarNode) else None
        if not isinstance(key, (str, int)) or isinstance(key, bool):
            if isinstance(node, yaml.ScalarNode):
                self.fail(node, f"mapping keys must be names, but YAML reads `{node.value}` as {_yaml_kind(key)}",
                          fix=f'quote it (`"{node.value}":`) to use it as a name, or choose another name')
            self.fail(node, f"mapping keys must be names, got a {node.id}", fix="write a plain name as the key")
        return key


def _yaml_kind(value: Any) -> str:
    """What YAML made of a plain scalar that is not text, for error messages."""
    if isinstance(value, bool):
        return "a boolean"
    return {float: "a number", type(None): "null"}.get(type(value), f"a {type(value).__name__}")


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when installed: 25x faster


def _compose(text: str, file: str) -> tuple[Any, yaml.Node | None]:
    """The YAML node tree, composed only after an iterative pass over the parser's events
    has found the nesting within the `yaml_depth` limit (composition recurses).

    The limit is ringc's whichever PyYAML parses the file: libyaml (PyYAML >= 6.0.2's
    wheels) refuses nesting past its own maximum (1,000) while scanning ahead, before the
    events reach this pass; the pure-Python parser, which has no such maximum, then
    counts the depth instead, and composes the file when the limit was raised past it."""
    loader_class = _Loader
    try:
        _check_depth(text, file, loader_class)
    except yaml.YAMLError as e:
        if "nesting depth" not in str(getattr(e, "problem", "") or e) or loader_class is yaml.SafeLoader:
            raise
        loader_class = yaml.SafeLoader
        _check_depth(text, file, loader_class)
    loader = loader_class(text)
    try:
        return loader, loader.get_single_node()
    finally:
        loader.dispose()


def _check_depth(text: str, file: str, loader_class: type) -> None:
    limit, depth = limits.value("yaml_depth"), 0
    for event in yaml.parse(text, Loader=loader_class):
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > limit:
                limits.check("yaml_depth", depth, "the YAML nesting depth (at least)", file=file,
                      line=event.start_mark.line + 1)
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _first_over(root: yaml.Node, limit: int) -> tuple[yaml.Node, int] | None:
    """The first node whose tree, aliases expanded, has more than `limit` nodes (None if
    none has). Linear in the nodes as written: each node's expanded size is computed once
    (iteratively, so alias chains cannot exhaust the recursion limit). A recursive alias is
    left to the builder, which names its line."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        if finished:
            on_path.discard(id(node))
            size[id(node)] = 1 + sum(size.get(id(c), 1) for c in _children(node))
            if size[id(node)] > limit:
                return node, size[id(node)]
        elif id(node) not in size:
            if id(node) in on_path:
                return None  # a cycle
            on_path.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in _children(node) if id(c) not in size)
    return None


@contextmanager
def _recursion_for_depth() -> Iterator[None]:
    """Room on Python's stack for composing and building `yaml_depth` levels (each level
    takes a few frames), so a limit raised past the default never ends in RecursionError."""
    saved = sys.getrecursionlimit()
    sys.setrecursionlimit(max(saved, 1_000 + 8 * limits.value("yaml_depth")))
    try:
        yield
    finally:
        sys.setrecursionlimit(saved)


def parse_yaml(text: str, file: str) -> tuple[Any, LineTable]:
    with _recursion_for_depth():
        return _parse_yaml(text, file)


def _parse_yaml(text: str, file: str) -> tuple[Any, LineTable]:
    try:
        loader, node = _compose(text, file)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        if isinstance(e, yaml.reader.ReaderError):
            problem = f"character {e.character!r} is not allowed in YAML"
            mark = yaml.Mark(file, e.position, text.count("\n", 0, e.position), 0, None, None)
        fix = "check indentation and that every `key: value` pair is well formed"
        if mark is not None and _tab_at(text, mark):
            problem = f"a tab character (column {mark.column + 1}): YAML indents with spaces only"
            fix = "replace the tab with spaces"
        raise ScheduleError(f"malformed YAML: {problem}", file=file,
                            line=mark.line + 1 if mark else None, fix=fix) from None
    except UnicodeEncodeError as e:  # libyaml, on a lone surrogate (text from Python, not a file)
        raise ScheduleError(f"malformed YAML: character {e.object[e.start]!r} is not allowed in YAML", file=file,
                            line=text.count("\n", 0, e.start) + 1, fix="remove it") from None
    if node is None:
        raise ScheduleError("the file is empty", file=file, line=1, fix="start from a schedule in schedules/")
    builder = _Builder(loader, file)
    big = _first_over(node, builder.max_nodes)  # a "billion laughs" stops here, before building
    if big is not None:
        limits.check("yaml_nodes", big[1], "the number of YAML nodes in this one, aliases expanded,", file=file,
              line=big[0].start_mark.line + 1, fix="write the repeated part once instead of through nested aliases")
    data = builder.build(node, ())
    if not isinstance(data, dict):
        raise ScheduleError("a schedule is a YAML mapping (name:, collective:, buffers:, ...)", file=file, line=1)
    return data, builder.lines


def _tab_at(text: str, mark: Any) -> bool:
    """Whether the parser stopped at a tab (or the line it stopped in is indented with one)."""
    lines = text.split("\n")
    if not 0 <= mark.line < len(lines):
        return False
    line = lines[mark.line]
    return line[mark.column:mark.column + 1] == "\t" or "\t" in line[:len(line) - len(line.lstrip())]


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
    path: tuple = ()
    for i, comp in enumerate(loc):
        if i and isinstance(loc[i - 1], int) and comp in OP_KEYS:
            continue
        if path + (comp,) in lines:
            path = path + (comp,)
    return lines.get(path)


def _known_keys() -> list[str]:
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
        given = [k for k in (e["input"] if isinstance(e["input"], dict) else {}) if k != "__line__"]
        ops = [k for k in given if k in OP_KEYS]
        if len(ops) > 1:
            msg = f"one list item holds several operations ({', '.join(f'`{k}`' for k in ops)})"
            fix = "write each operation as its own `- ` item"
        else:
            close = difflib.get_close_matches(str(given[0]), OP_KEYS, n=1) if given else []
            fix = (f"did you mean `{close[0]}`?" if close else
                   f"start the op with one of: {', '.join(OP_KEYS)}")
    elif e["type"] in ("literal_error", "enum"):
        choices = re.findall(r"'([^']*)'", (e.get("ctx") or {}).get("expected", ""))
        close = difflib.get_close_matches(str(e["input"]), choices, n=1, cutoff=0.5)
        msg = f"`{e['input']}` is not one of {', '.join(f'`{c}`' for c in choices)}"
        fix = f"did you mean `{close[0]}`?" if close else f"write one of: {', '.join(choices)}"
    elif e["type"] == "string_type" and isinstance(e["input"], (bool, int, float)):
        shown = str(e["input"]).lower() if isinstance(e["input"], bool) else e["input"]
        msg = f"expected a name, but YAML reads `{shown}` as {_yaml_kind(e['input'])}"
        fix = f'quote it ("{shown}") to use it as a name'
    elif isinstance((e.get("ctx") or {}).get("error"), ExprError):
        fix = e["ctx"]["error"].fix or ("expressions are Python-style integer expressions: see the Expressions "
                                        "section of docs/schedule-format.md")
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
    limits.check("schedule_bytes", len(text), "the schedule's size in characters", file=file)
    for name, v in (params or {}).items():
        if not isinstance(v, int):
            raise ScheduleError(f"parameter {name!r}: expected an integer, got {v!r}", file=file)
        limits.check_int64(v, f"parameter {name!r}", file=file)
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
    sched._text = text
    sched._header = _header_comment(text)
    for key in list(lines):  # a template copy `push(k)` is named `push`
        if len(key) >= 2 and key[0] == "copies" and (parsed := copy_key(key[1])) is not None:
            lines.setdefault(("copies", parsed[0], *key[2:]), lines[key])
    sched._lines = lines
    resolve(sched)
    return sched


def load(path: str | Path, params: Mapping[str, int] | None = None) -> Schedule:
    """Load and statically validate a schedule file. Raises `ScheduleError` on bad input."""
    try:
        with open(path, "rb") as f:  # at most one byte past the limit: /dev/zero ends here too
            data = f.read(limits.value("schedule_bytes") + 1)
    except OSError as e:
        raise ScheduleError(f"cannot read schedule: {e.strerror}", file=str(path)) from None
    limits.check("schedule_bytes", len(data), "the schedule file's size in bytes"
                 + (" (at least)" if len(data) > limits.value("schedule_bytes") else ""), file=str(path),
                 fix="check that this is a schedule file (a schedule is a few kilobytes)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise ScheduleError(f"the file is not UTF-8 text (byte {e.object[e.start]:#x})", file=str(path),
                            line=line, fix="save the schedule as UTF-8") from None
    return load_text(text, str(path), params)
