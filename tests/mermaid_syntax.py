"""A small structural validator for the mermaid diagram types `ringc show` emits: gantt,
graph/flowchart and stateDiagram-v2. It checks the grammar of every line, that blocks
balance, that ids are identifiers, and that edges and transitions name declared nodes.
(Stricter than mermaid where mermaid would silently create a node from a typo.)"""

from __future__ import annotations

import re

ID = r"[A-Za-z_][A-Za-z0-9_]*"
QUOTED = r'"[^"]*"'


class MermaidError(ValueError):
    pass


def blocks(markdown: str) -> list[str]:
    return re.findall(r"```mermaid\n(.*?)```", markdown, flags=re.S)


def validate(diagram: str) -> str:
    """Raise MermaidError for a malformed diagram; return its type."""
    lines = [l for l in diagram.strip("\n").split("\n") if l.strip() and not l.strip().startswith("%%")]
    if not lines:
        raise MermaidError("empty diagram")
    head = lines[0].strip()
    body = [l.strip() for l in lines[1:]]
    if head == "gantt":
        _gantt(body)
    elif re.fullmatch(r"(graph|flowchart) (TB|TD|BT|LR|RL)", head):
        _graph(body)
    elif head == "stateDiagram-v2":
        _state(body)
    else:
        raise MermaidError(f"unknown diagram type {head!r}")
    return head.split()[0]


def _fail(line: str, why: str) -> None:
    raise MermaidError(f"{why}: {line!r}")


def _gantt(body: list[str]) -> None:
    ids: set[str] = set()
    date_format = None
    for line in body:
        if m := re.fullmatch(r"dateFormat (\S+)", line):
            date_format = m.group(1)
        elif re.fullmatch(r"(title|axisFormat|section) \S.*", line):
            continue
        elif m := re.fullmatch(r"([^:#;]+?) :(.*)", line):
            meta = [p.strip() for p in m.group(2).split(",")]
            tags = [p for p in meta if p in ("done", "active", "crit", "milestone")]
            rest = meta[len(tags):]
            if meta[: len(tags)] != tags or len(rest) != 3:
                _fail(line, "a task is `name :tags, id, start, end`")
            tid, start, end = rest
            if not re.fullmatch(ID, tid) or tid in ids:
                _fail(line, "task ids must be unique identifiers")
            ids.add(tid)
            if date_format != "X":
                _fail(line, "tasks before `dateFormat X`")
            if not (start.isdigit() and end.isdigit()) or int(end) < int(start):
                _fail(line, "start and end must be integers (dateFormat X) with end >= start")
        else:
            _fail(line, "not a gantt statement")
    if not ids:
        raise MermaidError("a gantt without tasks")


def _graph(body: list[str]) -> None:
    nodes: set[str] = set()
    depth = 0
    edges: list[tuple[str, str, str]] = []
    styles: list[tuple[str, str]] = []
    for line in body:
        if m := re.fullmatch(rf"subgraph ({ID})(\[{QUOTED}\])?", line):
            depth += 1
        elif line == "end":
            depth -= 1
            if depth < 0:
                _fail(line, "`end` without `subgraph`")
        elif m := re.fullmatch(rf"({ID})\[({QUOTED})\]", line):
            nodes.add(m.group(1))
        elif m := re.fullmatch(rf"({ID}) -->(\|{QUOTED}\|)? ({ID})", line):
            edges.append((m.group(1), m.group(3), line))
        elif m := re.fullmatch(rf"style ({ID}) ([a-z-]+:[#A-Za-z0-9]+)(,[a-z-]+:[#A-Za-z0-9]+)*", line):
            styles.append((m.group(1), line))
        else:
            _fail(line, "not a graph statement (node, edge, subgraph, end or style)")
    if depth:
        raise MermaidError(f"{depth} subgraph(s) not closed with `end`")
    for a, b, line in edges:
        if a not in nodes or b not in nodes:
            _fail(line, "edge between undeclared nodes")
    for node, line in styles:
        if node not in nodes:
            _fail(line, "style of an undeclared node")


def _state(body: list[str]) -> None:
    declared: set[str] = set()
    stack: list[str] = []
    transitions: list[tuple[str, str, str]] = []
    for line in body:
        if m := re.fullmatch(rf"state ({ID}) \{{", line):
            declared.add(m.group(1))
            stack.append(m.group(1))
        elif line == "}":
            if not stack:
                _fail(line, "`}` without `state X {`")
            stack.pop()
        elif m := re.fullmatch(rf"(\[\*\]|{ID}) --> (\[\*\]|{ID})( : [^:;{{}}]+)?", line):
            transitions.append((m.group(1), m.group(2), line))
        elif m := re.fullmatch(rf"({ID}) : ([^:;{{}}]+)", line):
            declared.add(m.group(1))
        else:
            _fail(line, "not a state statement")
    if stack:
        raise MermaidError(f"state(s) {stack} not closed with `}}`")
    for a, b, line in transitions:
        for s in (a, b):
            if s != "[*]" and s not in declared:
                _fail(line, f"transition to or from undeclared state {s}")
