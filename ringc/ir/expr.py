"""Index expressions: a small, safe integer language over `me`, `N`, grid indices and params.

Text is parsed with Python's own parser (`ast`, never `eval`) and then converted into
the typed tree below; anything outside the whitelist is rejected with a message.

Semantics differ from C and from `lax.rem` on purpose: `%` is the mathematical modulo
(the result has the sign of the divisor, so `(me - 1) % N` is a valid device id) and `//`
is floor division. The code generator emits helpers with the same meaning.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Callable, Mapping, Union, get_args


class ExprError(ValueError):
    """A malformed or ill-typed expression; the loader adds the file and line."""


@dataclass(frozen=True)
class Const:
    value: int | bool


@dataclass(frozen=True)
class Var:
    name: str


@dataclass(frozen=True)
class BinOp:
    op: str  # + - * // % == != < <= > >= and or
    left: "Expr"
    right: "Expr"


@dataclass(frozen=True)
class Not:
    operand: "Expr"


@dataclass(frozen=True)
class Neg:
    operand: "Expr"


@dataclass(frozen=True)
class Call:
    func: str  # min | max
    args: tuple["Expr", ...]


Expr = Union[Const, Var, BinOp, Not, Neg, Call]
EXPR_TYPES = get_args(Expr)  # for isinstance

COMPARE = ("==", "!=", "<", "<=", ">", ">=")
FUNCS = ("min", "max")

_AST_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}
_AST_CMPOPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


def _over_limit(name: str, amount: int, what: str) -> ExprError:
    from ..limits import LIMITS, value
    return ExprError(f"{what} is {amount:,}, over the limit `{name}` of {value(name):,} (raise it with "
                     f"{LIMITS[name].how_to_raise})")


def _depth(node: ast.AST, limit: int) -> int:
    """The nesting depth of a Python AST, walked without recursion (stops past `limit`)."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        n, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > limit:
            break
        stack.extend((c, d + 1) for c in ast.iter_child_nodes(n) if not isinstance(c, (ast.expr_context,
                                                                                        ast.operator, ast.cmpop,
                                                                                        ast.boolop, ast.unaryop)))
    return deepest


def _parse_python(text: str) -> ast.expr:
    """Python's parser on a short, shallow text: the length and depth limits (`ringc.limits`)
    are checked first, so nothing downstream (conversion, evaluation, printing, all
    recursive) can exhaust Python's recursion limit."""
    from ..limits import value
    text = str(text).strip()
    if len(text) > value("expr_chars"):
        raise _over_limit("expr_chars", len(text), f"the length of expression {text[:20]!r}...")
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError as e:
        raise ExprError(f"cannot parse expression {text!r}: {e.msg}") from None
    except (RecursionError, MemoryError):
        raise _over_limit("expr_depth", value("expr_depth") + 1, f"the nesting of {text[:20]!r}...") from None
    depth = _depth(tree, value("expr_depth"))
    if depth > value("expr_depth"):
        raise _over_limit("expr_depth", depth, f"the nesting depth of {text[:20]!r}... (at least)")
    return tree


def _int64(v: int) -> int:
    from ..limits import INT64_MAX, INT64_MIN
    if not INT64_MIN <= v <= INT64_MAX:
        raise ExprError(f"the integer {str(v)[:20]}... is outside the 64-bit range "
                        f"[{INT64_MIN}, {INT64_MAX}]")
    return v


def _convert(node: ast.AST, text: str) -> Expr:
    if isinstance(node, ast.Constant) and type(node.value) in (int, bool):
        return Const(_int64(node.value))
    if isinstance(node, ast.Name):
        return Var(node.id)
    if isinstance(node, ast.BinOp) and type(node.op) in _AST_BINOPS:
        return BinOp(_AST_BINOPS[type(node.op)], _convert(node.left, text), _convert(node.right, text))
    if isinstance(node, ast.UnaryOp):
        if isinstance(node.op, ast.USub):
            inner = _convert(node.operand, text)
            return Const(-inner.value) if isinstance(inner, Const) else Neg(inner)
        if isinstance(node.op, ast.UAdd):
            return _convert(node.operand, text)
        if isinstance(node.op, ast.Not):
            return Not(_convert(node.operand, text))
    if isinstance(node, ast.Compare):
        # Chained comparisons `a < b < c` mean `a < b and b < c`, as in Python.
        parts, left = [], _convert(node.left, text)
        for op, comp in zip(node.ops, node.comparators):
            if type(op) not in _AST_CMPOPS:
                break
            right = _convert(comp, text)
            parts.append(BinOp(_AST_CMPOPS[type(op)], left, right))
            left = right
        else:
            out = parts[0]
            for p in parts[1:]:
                out = BinOp("and", out, p)
            return out
    if isinstance(node, ast.BoolOp):
        op = "and" if isinstance(node.op, ast.And) else "or"
        out = _convert(node.values[0], text)
        for v in node.values[1:]:
            out = BinOp(op, out, _convert(v, text))
        return out
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in FUNCS and not node.keywords and len(node.args) >= 2):
        return Call(node.func.id, tuple(_convert(a, text) for a in node.args))
    snippet = ast.get_source_segment(text, node) or type(node).__name__
    raise ExprError(
        f"unsupported syntax {snippet!r} in {text!r}: expressions allow integers, names, "
        "+ - * // %, comparisons, and/or/not, min(...) and max(...)")


def parse(text: str | int) -> Expr:
    """Parse an expression from YAML text (or a bare integer)."""
    if isinstance(text, bool):
        return Const(text)
    if isinstance(text, int):
        return Const(_int64(text))
    if not isinstance(text, str):
        raise ExprError(f"expected an expression string or integer, got {type(text).__name__} {text!r}")
    return _convert(_parse_python(text), text)


def names(expr: Expr) -> set[str]:
    """All variable names an expression mentions."""
    if isinstance(expr, Var):
        return {expr.name}
    if isinstance(expr, BinOp):
        return names(expr.left) | names(expr.right)
    if isinstance(expr, (Not, Neg)):
        return names(expr.operand)
    if isinstance(expr, Call):
        return set().union(*(names(a) for a in expr.args))
    return set()


def evaluate(expr: Expr, env: Mapping[str, int], *, exact_division: bool = False) -> int:
    """Evaluate with Python integers. `exact_division` rejects `a // b` with a remainder
    (used for shapes, where a silent floor would hide a tiling bug)."""
    if isinstance(expr, Const):
        return expr.value
    if isinstance(expr, Var):
        try:
            return env[expr.name]
        except KeyError:
            raise ExprError(f"unknown name {expr.name!r}") from None
    if isinstance(expr, Neg):
        return -evaluate(expr.operand, env, exact_division=exact_division)
    if isinstance(expr, Not):
        return not evaluate(expr.operand, env, exact_division=exact_division)
    if isinstance(expr, Call):
        vals = [evaluate(a, env, exact_division=exact_division) for a in expr.args]
        return min(vals) if expr.func == "min" else max(vals)
    a = evaluate(expr.left, env, exact_division=exact_division)
    if expr.op == "and":
        return bool(a) and bool(evaluate(expr.right, env, exact_division=exact_division))
    if expr.op == "or":
        return bool(a) or bool(evaluate(expr.right, env, exact_division=exact_division))
    b = evaluate(expr.right, env, exact_division=exact_division)
    if expr.op in ("//", "%") and b == 0:
        raise ExprError(f"division by zero in {to_text(expr)}")
    if expr.op == "//" and exact_division and a % b:
        raise ExprError(f"{to_text(expr)} = {a} // {b} does not divide exactly")
    return _PY_OPS[expr.op](a, b)


_PY_OPS: dict[str, Callable[[int, int], int | bool]] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "//": lambda a, b: a // b, "%": lambda a, b: a % b,
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}

# Binding strength for printing with the fewest parentheses.
_PREC = {"or": 1, "and": 2, "==": 4, "!=": 4, "<": 4, "<=": 4, ">": 4, ">=": 4,
         "+": 5, "-": 5, "*": 6, "//": 6, "%": 6}


def to_text(expr: Expr) -> str:
    """Canonical source text in the schedule language."""
    return _render(expr, _text_leaf)


def _text_leaf(expr: Expr) -> str | None:
    return None


def _render(expr: Expr, hook: Callable[[Expr], str | None], prec: int = 0) -> str:
    custom = hook(expr)
    if custom is not None:
        return custom
    if isinstance(expr, Const):
        return str(expr.value)
    if isinstance(expr, Var):
        return expr.name
    if isinstance(expr, Neg):
        return "-" + _render(expr.operand, hook, 7)
    if isinstance(expr, Not):
        s = "not " + _render(expr.operand, hook, 3)
        return f"({s})" if prec > 3 else s
    if isinstance(expr, Call):
        return f"{expr.func}({', '.join(_render(a, hook) for a in expr.args)})"
    p = _PREC[expr.op]
    # Left-associative: the right operand of an equal-precedence op needs parentheses.
    # Comparisons chain in Python (`a < b < c`), so a comparison operand always does.
    left_prec = p + 1 if expr.op in COMPARE else p
    s = f"{_render(expr.left, hook, left_prec)} {expr.op} {_render(expr.right, hook, p + 1)}"
    return f"({s})" if prec > p else s


def to_python(expr: Expr, rename: Mapping[str, str] | None = None) -> str:
    """Python source for the emitted kernel. Works on Python ints and on JAX scalars:
    `%`, `//`, min/max and the logical operators go through helpers that keep the
    mathematical meaning for negative operands and trace cleanly under Pallas."""
    rename = rename or {}

    def hook(e: Expr) -> str | None:
        if isinstance(e, Var):
            return rename.get(e.name, e.name)
        if isinstance(e, Const) and isinstance(e.value, bool):
            return "True" if e.value else "False"
        if isinstance(e, BinOp) and e.op in ("%", "//", "and", "or"):
            fn = {"%": "_mod", "//": "_floordiv", "and": "_and", "or": "_or"}[e.op]
            return f"{fn}({to_python(e.left, rename)}, {to_python(e.right, rename)})"
        if isinstance(e, Not):
            return f"_not({to_python(e.operand, rename)})"
        if isinstance(e, Call):
            return f"_{e.func}({', '.join(to_python(a, rename) for a in e.args)})"
        return None

    return _render(expr, hook)


def substitute(expr: Expr, bindings: Mapping[str, Expr]) -> Expr:
    """Replace names by expressions (used to inline `let` definitions)."""
    if isinstance(expr, Var):
        return bindings.get(expr.name, expr)
    if isinstance(expr, BinOp):
        return BinOp(expr.op, substitute(expr.left, bindings), substitute(expr.right, bindings))
    if isinstance(expr, Not):
        return Not(substitute(expr.operand, bindings))
    if isinstance(expr, Neg):
        return Neg(substitute(expr.operand, bindings))
    if isinstance(expr, Call):
        return Call(expr.func, tuple(substitute(a, bindings) for a in expr.args))
    return expr


# ---------------------------------------------------------------- references

@dataclass(frozen=True)
class Slice:
    """`start:size` (as `pl.ds(start, size)`); either part may be omitted: `:` is the whole axis."""
    start: Expr | None
    size: Expr | None


Index = Union[Expr, Slice]


@dataclass(frozen=True)
class Ref:
    """`name`, `name[i]`, `name[i, a:s, :]`: a buffer region or a semaphore element."""
    name: str
    indices: tuple[Index, ...] = ()

    def text(self) -> str:
        if not self.indices:
            return self.name
        parts = []
        for ix in self.indices:
            if isinstance(ix, Slice):
                parts.append(f"{to_text(ix.start) if ix.start else ''}:{to_text(ix.size) if ix.size else ''}")
            else:
                parts.append(to_text(ix))
        return f"{self.name}[{', '.join(parts)}]"


def parse_ref(text: str) -> Ref:
    if not isinstance(text, str):
        raise ExprError(f"expected a reference such as `buf[slot, 0:8]`, got {text!r}")
    node = _parse_python(text)
    if isinstance(node, ast.Name):
        return Ref(node.id)
    if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)):
        raise ExprError(f"expected `name` or `name[indices]`, got {text!r}")
    items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    indices: list[Index] = []
    for item in items:
        if isinstance(item, ast.Slice):
            if item.step is not None:
                raise ExprError(f"slices are `start:size`, with no step, in {text!r}")
            indices.append(Slice(
                _convert(item.lower, text) if item.lower is not None else None,
                _convert(item.upper, text) if item.upper is not None else None))
        else:
            indices.append(_convert(item, text))
    return Ref(node.value.id, tuple(indices))


def ref_names(ref: Ref) -> set[str]:
    out: set[str] = set()
    for ix in ref.indices:
        if isinstance(ix, Slice):
            for part in (ix.start, ix.size):
                if part is not None:
                    out |= names(part)
        else:
            out |= names(ix)
    return out
