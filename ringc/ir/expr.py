"""Index expressions: a small, safe integer language over `me`, `N`, grid indices and params.

Text is parsed with Python's own parser (`ast`, never `eval`) and then converted into
the typed tree below; anything outside the whitelist is rejected with a message.

Semantics differ from C and from `lax.rem` on purpose: `%` is the mathematical modulo
(the result has the sign of the divisor, so `(me - 1) % N` is a valid device id) and `//`
is floor division. The code generator emits helpers with the same meaning.

The bitwise operators `^ & | << >> ~` take integers only (a condition is combined with
`and`/`or`/`not`: `~True` is -2 in Python but False in JAX, so booleans are refused
rather than given two meanings); `>>` is arithmetic (floor division by a power of two,
as Python and `lax.shift_right_arithmetic`), and a shift count must lie in 0..63.
`a if c else b` evaluates only the branch taken. `log2(x)` is exact: x must be a power of
two (the round count of a recursive-doubling schedule, `log2(N)`).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Union, get_args

from .. import limits


class ExprError(ValueError):
    """A malformed or ill-typed expression (or integer field, e.g. a matmul's `contract`); the
    loader adds the file and line. `fix`, when set, says what to write instead."""
    fix: str | None = None

    def __init__(self, msg: str, fix: str | None = None):
        super().__init__(msg)
        if fix is not None:
            self.fix = fix


class _Node:
    """What every expression node shares: its compiled evaluator (`evaluator`), kept on the
    node itself, outside its value: not a field, so not in its equality or hash, and not in
    its pickled state."""

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "compiled"}


@dataclass(frozen=True)
class Const(_Node):
    value: int | bool


@dataclass(frozen=True)
class Var(_Node):
    name: str


@dataclass(frozen=True)
class BinOp(_Node):
    op: str  # + - * // % ^ & | << >> == != < <= > >= and or
    left: "Expr"
    right: "Expr"


@dataclass(frozen=True)
class Not(_Node):
    operand: "Expr"


@dataclass(frozen=True)
class Neg(_Node):
    operand: "Expr"


@dataclass(frozen=True)
class Invert(_Node):
    """`~a`: bitwise not of an integer (-a - 1)."""
    operand: "Expr"


@dataclass(frozen=True)
class Call(_Node):
    func: str  # min | max | log2
    args: tuple["Expr", ...]


@dataclass(frozen=True)
class Item(_Node):
    """`name[index]`: one element of a runtime data array (`data:` in the schedule, read from
    SMEM in the kernel), e.g. `send_sizes[t]`. Only data arrays are indexed in expressions;
    buffers and semaphores are indexed in references."""
    name: str
    index: "Expr"


@dataclass(frozen=True)
class IfExp(_Node):
    """`then if cond else orelse`: only the branch taken is evaluated."""
    cond: "Expr"
    then: "Expr"
    orelse: "Expr"


Expr = Union[Const, Var, BinOp, Not, Neg, Invert, Call, IfExp, Item]
EXPR_TYPES = get_args(Expr)  # for isinstance

COMPARE = ("==", "!=", "<", "<=", ">", ">=")
BITWISE = ("^", "&", "|", "<<", ">>")
FUNCS = ("min", "max", "log2")
_ARITY = {"min": (2, None), "max": (2, None), "log2": (1, 1)}  # (least, most) arguments

_AST_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%",
               ast.BitXor: "^", ast.BitAnd: "&", ast.BitOr: "|", ast.LShift: "<<", ast.RShift: ">>"}
_AST_CMPOPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


def _over_limit(name: str, amount: int, what: str) -> ExprError:
    return ExprError(f"{what} is {amount:,}, over the limit `{name}` of {limits.value(name):,} (raise it with "
                     f"{limits.LIMITS[name].how_to_raise})")


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
    text = str(text).strip()
    if len(text) > limits.value("expr_chars"):
        raise _over_limit("expr_chars", len(text), f"the length of expression {text[:20]!r}...")
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError as e:
        raise ExprError(f"cannot parse expression {text!r}: {e.msg}") from None
    except (RecursionError, MemoryError):
        raise _over_limit("expr_depth", limits.value("expr_depth") + 1, f"the nesting of {text[:20]!r}...") from None
    depth = _depth(tree, limits.value("expr_depth"))
    if depth > limits.value("expr_depth"):
        raise _over_limit("expr_depth", depth, f"the nesting depth of {text[:20]!r}... (at least)")
    return tree


def _int64(v: int) -> int:
    if not limits.INT64_MIN <= v <= limits.INT64_MAX:
        raise ExprError(f"the integer {str(v)[:20]}... is outside the 64-bit range "
                        f"[{limits.INT64_MIN}, {limits.INT64_MAX}]")
    return v


def _convert(node: ast.AST, text: str) -> Expr:
    if isinstance(node, ast.Constant) and type(node.value) in (int, bool):
        return Const(_int64(node.value))
    if isinstance(node, ast.Name):
        return Var(node.id)
    if isinstance(node, ast.BinOp) and type(node.op) in _AST_BINOPS:
        op = _AST_BINOPS[type(node.op)]
        left, right = _convert(node.left, text), _convert(node.right, text)
        if op in BITWISE:
            _integer_operands(op, (left, right), text)
        return BinOp(op, left, right)
    if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
            and not isinstance(node.slice, (ast.Slice, ast.Tuple))):
        return Item(node.value.id, _convert(node.slice, text))
    if isinstance(node, ast.IfExp):
        return IfExp(_convert(node.test, text), _convert(node.body, text), _convert(node.orelse, text))
    if isinstance(node, ast.UnaryOp):
        if isinstance(node.op, ast.Invert):
            inner = _convert(node.operand, text)
            _integer_operands("~", (inner,), text)
            return Const(~inner.value) if isinstance(inner, Const) else Invert(inner)
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
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCS
            and not node.keywords and not any(isinstance(a, ast.Starred) for a in node.args)
            and _ARITY[node.func.id][0] <= len(node.args) <= (_ARITY[node.func.id][1] or len(node.args))):
        return Call(node.func.id, tuple(_convert(a, text) for a in node.args))
    snippet = ast.get_source_segment(text, node) or type(node).__name__
    raise ExprError(
        f"unsupported syntax {snippet!r} in {text!r}: expressions allow integers, names, "
        "+ - * // %, bitwise ^ & | << >> ~ on integers, comparisons, and/or/not, `a if c else b`, "
        "min(...), max(...), log2(...) and one element of a data array, `sizes[i]`")


def _is_condition(e: Expr) -> bool:
    """Whether `e` is a truth value by its form: a comparison, and/or/not, True/False."""
    return ((isinstance(e, BinOp) and (e.op in COMPARE or e.op in ("and", "or"))) or isinstance(e, Not)
            or (isinstance(e, Const) and isinstance(e.value, bool)))


def _integer_operands(op: str, operands: tuple[Expr, ...], text: str) -> None:
    for e in operands:
        if _is_condition(e):
            raise ExprError(f"`{op}` in {text!r} applies to integers, but `{to_text(e)}` is a condition: "
                            "combine conditions with and/or/not",
                            fix=f"use and/or/not on conditions, or turn one into an integer: "
                                f"`(1 if {to_text(e)} else 0)`")


def parse(text: str | int) -> Expr:
    """Parse an expression from YAML text (or a bare integer)."""
    if isinstance(text, bool):
        return Const(text)
    if isinstance(text, int):
        return Const(_int64(text))
    if not isinstance(text, str):
        raise ExprError(f"expected an expression string or integer, got {type(text).__name__} {text!r}")
    return _parsed(text, limits.value("expr_chars"), limits.value("expr_depth"))


@functools.lru_cache(maxsize=1 << 16)
def _parsed(text: str, chars: int, depth: int) -> Expr:
    """`parse` of a text, once per text and limits in force (keyed by them, so a lowered
    limit is checked again): expressions are frozen, and a synthesis search loads the same
    texts (a schedule's lets, its regions) for every candidate and size. A text that fails
    raises each time (an exception is not cached)."""
    return _convert(_parse_python(text), text)


def names(expr: Expr) -> set[str]:
    """All variable names an expression mentions."""
    if isinstance(expr, Var):
        return {expr.name}
    out: set[str] = {expr.name} if isinstance(expr, Item) else set()
    for c in children(expr):
        out |= names(c)
    return out


def children(expr: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of `expr`, in source order."""
    if isinstance(expr, BinOp):
        return (expr.left, expr.right)
    if isinstance(expr, (Not, Neg, Invert)):
        return (expr.operand,)
    if isinstance(expr, Call):
        return expr.args
    if isinstance(expr, IfExp):
        return (expr.then, expr.cond, expr.orelse)
    if isinstance(expr, Item):
        return (expr.index,)
    return ()


def evaluate(expr: Expr, env: Mapping[str, int], *, exact_division: bool = False) -> int:
    """Evaluate with Python integers. `exact_division` rejects `a // b` with a remainder
    (used for shapes, where a silent floor would hide a tiling bug)."""
    if isinstance(expr, Const):
        return expr.value
    if isinstance(expr, Var):
        try:
            v = env[expr.name]
        except KeyError:
            raise ExprError(f"unknown name {expr.name!r}") from None
        if type(v) is tuple:
            raise ExprError(f"`{expr.name}` is a data array: use one element, `{expr.name}[i]`")
        return v
    if isinstance(expr, Neg):
        return -evaluate(expr.operand, env, exact_division=exact_division)
    if isinstance(expr, Not):
        return not evaluate(expr.operand, env, exact_division=exact_division)
    if not isinstance(expr, BinOp):  # the rarer nodes; binary operators are the hot path
        return _evaluate_other(expr, env, exact_division)
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
    try:
        return _PY_OPS[expr.op](a, b)
    except _Refused as why:  # a bitwise operator's own checks
        raise ExprError(f"{to_text(expr)}: {why}") from None


def _evaluate_other(expr: Expr, env: Mapping[str, int], exact_division: bool) -> Any:
    """`evaluate` of `~`, a conditional and a call."""
    if isinstance(expr, Invert):
        return ~_integer(evaluate(expr.operand, env, exact_division=exact_division), expr)
    if isinstance(expr, IfExp):
        taken = expr.then if evaluate(expr.cond, env, exact_division=exact_division) else expr.orelse
        return evaluate(taken, env, exact_division=exact_division)
    if isinstance(expr, Item):
        return _item(expr, env, evaluate(expr.index, env, exact_division=exact_division))
    vals = [evaluate(a, env, exact_division=exact_division) for a in expr.args]
    if expr.func == "log2":
        return _log2(vals[0], expr)
    return min(vals) if expr.func == "min" else max(vals)


def _item(expr: Item, env: Mapping[str, Any], i: Any) -> int:
    """`name[i]` of a data array (a tuple in `env`); an index outside it is an error."""
    if expr.name not in env:
        raise ExprError(f"unknown name {expr.name!r}")
    array = env[expr.name]
    if type(array) is not tuple:
        raise ExprError(f"`{to_text(expr)}`: `{expr.name}` is not a data array (only `data:` arrays are indexed "
                        "in expressions)")
    if isinstance(i, bool) or not isinstance(i, int):
        raise ExprError(f"`{to_text(expr)}`: the index must be an integer known on this device")
    if not 0 <= i < len(array):
        raise ExprError(f"`{to_text(expr)}`: index {i} is outside data array `{expr.name}` of length {len(array)}")
    return array[i]


def conjuncts(e: Expr) -> list[Expr]:
    """The terms of `a and b and ...` (the expression itself when it is no `and`)."""
    if isinstance(e, BinOp) and e.op == "and":
        return conjuncts(e.left) + conjuncts(e.right)
    return [e]


def conjunction(terms: list[Expr]) -> Expr:
    """`terms[0] and terms[1] and ...`, left-nested as the parser writes it."""
    out = terms[0]
    for term in terms[1:]:
        out = BinOp("and", out, term)
    return out


class _Refused(Exception):
    """A bitwise operand or shift count out of the language's range (`evaluate` names the expression)."""


def _integer(v: Any, expr: Expr | None = None) -> Any:
    """A bitwise operand: an integer, not a truth value (a symbolic value passes through)."""
    if isinstance(v, bool):
        why = f"bitwise operators apply to integers, not to the truth value {v}"
        raise ExprError(f"{to_text(expr)}: {why}") if expr is not None else _Refused(why)
    return v


def _shift(a: Any, b: Any, left: bool) -> Any:
    a, b = _integer(a), _integer(b)
    if isinstance(b, int) and not 0 <= b <= 63:
        raise _Refused(f"the shift count {b} is outside 0..63")
    if not left:
        return a >> b
    if isinstance(a, int):
        try:
            return _int64(a << b)
        except ExprError as e:
            raise _Refused(str(e)) from None
    return a << b


class Log2Error(ExprError):
    """`log2(x)` of an x that is not a power of two; `fix` says what to change."""
    fix = ("log2 needs a power of two: run on N = 2, 4, 8, ... devices (--devices), or choose "
           "parameters (--param k=v) that make its argument one")


def _log2(v: Any, expr: Expr) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        v = _integer(v, expr)
        raise ExprError(f"{to_text(expr)}: the argument must not depend on the device")
    if v <= 0 or v & (v - 1):
        arg = to_text(expr.args[0])
        raise Log2Error(f"{to_text(expr)}: {arg}{f' = {v}' if arg != str(v) else ''} is not a power of two")
    return v.bit_length() - 1


_PY_OPS: dict[str, Callable[[int, int], int | bool]] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "//": lambda a, b: a // b, "%": lambda a, b: a % b,
    "^": lambda a, b: _integer(a) ^ _integer(b), "&": lambda a, b: _integer(a) & _integer(b),
    "|": lambda a, b: _integer(a) | _integer(b),
    "<<": lambda a, b: _shift(a, b, True), ">>": lambda a, b: _shift(a, b, False),
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}

class _Fallback(Exception):
    """Raised inside a compiled expression where `evaluate` would raise: it then runs
    `evaluate`, which raises the error with its message."""


def evaluator(expr: Expr) -> Callable[[Mapping[str, Any]], Any]:
    """`lambda env: evaluate(expr, env)`, compiled once into one generated Python function
    (`Emitter`: no dispatch on the node type at every evaluation: the unroller evaluates
    each of a schedule's few expressions at every grid point). The code does what
    `evaluate` does for each node, in the same order; wherever `evaluate` would raise, it
    gives up and `evaluate` runs instead, so the value is the same and so is every error
    and its message. Kept on the node (`_Node`): an expression is compiled once however
    many stages and schedules share it."""
    hit = expr.__dict__.get("compiled")
    if hit is not None:
        return hit
    code = Emitter()
    body: list[str] = []
    result = code.emit(expr, body)
    code.consts["_expr"], code.consts["_evaluate"] = expr, evaluate
    run = code.function("run(env)", [
        "try:", *("    " + line for line in body), f"    return {result}",
        "except Exception:  # NotRotational, ExprError, ...: `evaluate` says which",
        "    return _evaluate(_expr, env)"])
    object.__setattr__(expr, "compiled", run)  # frozen: the node's value (its fields) is untouched
    return run


class Emitter:
    """Python source computing expressions as `evaluate` does, node for node, with Python's
    own operators on the same values (so floor division and modulo, and a symbolic value's
    own operators), `bool(a) and bool(b)` (the right side only when needed), `not`, the
    bitwise operators' own functions (`_PY_OPS`) and the rarer nodes through
    `_evaluate_other`. Where `evaluate` would raise (a division by zero, a data array read
    whole), the code raises `_Fallback`; what runs it catches every exception and
    computes the value its own way (`evaluate`, or a caller's)."""

    def __init__(self) -> None:
        self.consts: dict[str, Any] = {"_Fallback": _Fallback, "_other": _evaluate_other, "_OPS": _PY_OPS}
        self.local: dict[str, str] = {}  # a name already computed (`block_evaluator`) -> its local variable
        self.temps = 0

    def const(self, value: Any) -> str:
        name = f"_c{len(self.consts)}"
        self.consts[name] = value
        return name

    def emit(self, e: Expr, body: list[str]) -> str:
        """Statements computing `e` into a fresh temporary, appended to `body`; returns it."""
        t = f"_t{self.temps}"
        self.temps += 1
        if isinstance(e, Const):
            body.append(f"{t} = {self.const(e.value)}")
        elif isinstance(e, Var):
            if e.name in self.local:
                body.append(f"{t} = {self.local[e.name]}")
            else:  # a KeyError gives up too: `evaluate` names the unknown name
                body.append(f"{t} = env[{e.name!r}]")
                body.append(f"if type({t}) is tuple: raise _Fallback")
        elif isinstance(e, Neg):
            body.append(f"{t} = -{self.emit(e.operand, body)}")
        elif isinstance(e, Not):
            body.append(f"{t} = not {self.emit(e.operand, body)}")
        elif not isinstance(e, BinOp):
            body.append(f"{t} = _other({self.const(e)}, env, False)")
        elif e.op in ("and", "or"):
            a = self.emit(e.left, body)
            right: list[str] = []
            b = self.emit(e.right, right)
            body.append(f"{t} = bool({a})")
            body.append(f"if {'' if e.op == 'and' else 'not '}{t}:")
            body.extend("    " + line for line in right)
            body.append(f"    {t} = bool({b})")
        else:
            a = self.emit(e.left, body)
            b = self.emit(e.right, body)
            if e.op in ("//", "%"):
                body.append(f"if {b} == 0: raise _Fallback")
            if e.op in ("+", "-", "*", "//", "%") or e.op in COMPARE:
                body.append(f"{t} = {a} {e.op} {b}")
            else:  # bitwise: their own checks
                body.append(f"{t} = _OPS[{e.op!r}]({a}, {b})")
        return t

    def function(self, signature: str, body: list[str]) -> Callable[..., Any]:
        """The function `def signature: body`, its constants bound (`compiled`)."""
        return compiled("\n".join([f"def {signature}:", *("    " + line for line in body)]), self.consts)


_CODE: dict[str, Any] = {}


def compiled(source: str, namespace: Mapping[str, Any]) -> Callable[..., Any]:
    """The one function `source` defines, its global names bound to `namespace`. The code is
    compiled once per source text (a schedule's expressions are compiled again for every
    N and every load, as text they are the same; the values differ only in `namespace`)."""
    code = _CODE.get(source)
    if code is None:
        if len(_CODE) > 20_000:  # a bound on what it keeps (property tests make many)
            _CODE.clear()
        code = _CODE[source] = compile(source, "<ringc generated>", "exec")
    scope = dict(namespace)
    exec(code, scope)
    return scope[source[4:source.index("(")]]  # `def name(`


def block_evaluator(steps: list[tuple[str, Expr | None, tuple[str, ...] | None]],
                    keyed: Mapping[type, Callable[[Any], Any]]) -> Callable[..., None]:
    """A sequence of assignments (a schedule's `let:` block at one grid point), compiled
    into one Python function `run(env, given, slow, memo)` that does, for each step
    (name, expr, key) number i, in order,

        env[name] = given[name]            (expression None: a value known beforehand)
        env[name] = evaluator(expr)(env)   (else; where that would raise: slow(i))

    `slow(i)` is the caller's own evaluation of step i, which gives its value or raises
    its error. The code is `evaluator`'s (`Emitter`), one step after the other, and
    where it gives up or anything raises, the step runs `slow(i)` instead, so each value
    is the one `evaluator` gives, or the caller's. A step's value is also kept in a
    local, read by the later steps for its name (as `env` then holds it). A step with a
    `key` (names whose values, with the others `expr` reads fixed, determine its value)
    keeps the values it computes in `memo` under ("let", i, those values), each value
    standing as `keyed` says for its type (as `Unroller.memoized` keys do), and looks
    there first."""
    code = Emitter()
    code.consts["_keyed"], code.consts["_missing"] = keyed, object()
    lines: list[str] = []
    for i, (name, e, key) in enumerate(steps):
        var = f"_v{i}"
        if e is None:
            lines.append(f"env[{name!r}] = {var} = given[{name!r}]")
            code.local[name] = var
            continue
        body: list[str] = []
        result = code.emit(e, body)
        if key is not None:
            head = []
            for j, n in enumerate(key):
                k = f"_k{j}"
                head += [f"{k} = {code.local.get(n) or f'env.get({n!r}, _missing)'}", f"if type({k}) is not int:",
                         f"    _f = _keyed.get(type({k}))", "    if _f is not None:", f"        {k} = _f({k})"]
            head += [f"_key = ('let', {i}{''.join(f', _k{j}' for j in range(len(key)))})",
                     f"{var} = memo.get(_key, _missing)", f"if {var} is _missing:"]
            body = [*head, *("    " + line for line in body), f"    {var} = memo[_key] = {result}"]
            lines += ["try:", *("    " + line for line in body), "except Exception:", f"    {var} = slow({i})"]
        else:
            lines += ["try:", *("    " + line for line in body), f"    {var} = {result}",
                      "except Exception:", f"    {var} = slow({i})"]
        lines.append(f"env[{name!r}] = {var}")
        code.local[name] = var
    return code.function("run(env, given, slow, memo)", lines or ["pass"])


# Binding strength for printing with the fewest parentheses (Python's: a conditional
# expression 0, not 3, the unary operators 12).
_PREC = {"or": 1, "and": 2, "==": 4, "!=": 4, "<": 4, "<=": 4, ">": 4, ">=": 4,
         "|": 5, "^": 6, "&": 7, "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "//": 10, "%": 10}
_UNARY = 12


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
    if isinstance(expr, (Neg, Invert)):
        return ("-" if isinstance(expr, Neg) else "~") + _render(expr.operand, hook, _UNARY)
    if isinstance(expr, Not):
        s = "not " + _render(expr.operand, hook, 3)
        return f"({s})" if prec > 3 else s
    if isinstance(expr, IfExp):
        # `a if c else b` binds loosest; its `else` part may be another one unparenthesised.
        s = f"{_render(expr.then, hook, 1)} if {_render(expr.cond, hook, 1)} else {_render(expr.orelse, hook, 0)}"
        return f"({s})" if prec > 0 else s
    if isinstance(expr, Call):
        return f"{expr.func}({', '.join(_render(a, hook) for a in expr.args)})"
    if isinstance(expr, Item):
        return f"{expr.name}[{_render(expr.index, hook)}]"
    p = _PREC[expr.op]
    # Left-associative: the right operand of an equal-precedence op needs parentheses.
    # Comparisons chain in Python (`a < b < c`), so a comparison operand always does.
    left_prec = p + 1 if expr.op in COMPARE else p
    right_prec = p + 1
    # `me ^ (1 << k)`, not `me ^ 1 << k`: a bitwise operator's operands that mix in another
    # operator, and a comparison's bitwise operands (`j < (1 << k)`), keep parentheses.
    if expr.op in BITWISE or expr.op in COMPARE:
        left_prec, right_prec = (_UNARY if isinstance(side, BinOp) and side.op != expr.op and (
                                     expr.op in BITWISE or side.op in BITWISE) else prec_
                                 for side, prec_ in ((expr.left, left_prec), (expr.right, right_prec)))
    s = f"{_render(expr.left, hook, left_prec)} {expr.op} {_render(expr.right, hook, right_prec)}"
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
        if isinstance(e, Item):  # an SMEM ref (scalar prefetch) read at one index
            return f"{rename.get(e.name, e.name)}[{to_python(e.index, rename)}]"
        if isinstance(e, IfExp):
            return f"_select({to_python(e.cond, rename)}, {to_python(e.then, rename)}, {to_python(e.orelse, rename)})"
        return None

    return _render(expr, hook)


def to_static_python(expr: Expr, rename: Mapping[str, str] | None = None) -> str:
    """Python source for an expression of N and params evaluated on Python ints outside
    the kernel: the schedule text itself (Python's operators mean the same on ints), with
    names renamed and `log2` through its helper `_log2`."""
    rename = rename or {}

    def hook(e: Expr) -> str | None:
        if isinstance(e, Var):
            return rename.get(e.name, e.name)
        if isinstance(e, Call) and e.func == "log2":
            return f"_log2({to_static_python(e.args[0], rename)})"
        return None

    return _render(expr, hook)


def substitute(expr: Expr, bindings: Mapping[str, Expr]) -> Expr:
    """Replace names by expressions (used to inline `let` definitions)."""
    if isinstance(expr, Var):
        return bindings.get(expr.name, expr)
    if isinstance(expr, BinOp):
        return BinOp(expr.op, substitute(expr.left, bindings), substitute(expr.right, bindings))
    if isinstance(expr, (Not, Neg, Invert)):
        return type(expr)(substitute(expr.operand, bindings))
    if isinstance(expr, Call):
        return Call(expr.func, tuple(substitute(a, bindings) for a in expr.args))
    if isinstance(expr, IfExp):
        return IfExp(*(substitute(x, bindings) for x in (expr.cond, expr.then, expr.orelse)))
    if isinstance(expr, Item):
        return Item(expr.name, substitute(expr.index, bindings))
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
