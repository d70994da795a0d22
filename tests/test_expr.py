"""The index-expression language: parsing, evaluation, printing, references."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ringc.ir.expr import (BinOp, Call, Const, ExprError, IfExp, Invert, Neg, Not, Ref, Slice, Var, evaluate,
                           names, parse, parse_ref, substitute, to_python, to_text)

VARS = ("a", "b", "c", "me", "N")


def ev(text: str, **env: int):
    return evaluate(parse(text), env)


# ----------------------------------------------------------------- parsing


def test_precedence_multiplication_binds_tighter():
    assert parse("a + b * c") == BinOp("+", Var("a"), BinOp("*", Var("b"), Var("c")))
    assert ev("a + b * c", a=1, b=2, c=3) == 7
    assert ev("(a + b) * c", a=1, b=2, c=3) == 9


def test_subtraction_is_left_associative():
    assert parse("a - b - c") == BinOp("-", BinOp("-", Var("a"), Var("b")), Var("c"))
    assert ev("a - b - c", a=10, b=3, c=2) == 5


@pytest.mark.parametrize("n", [2, 3, 8, 64])
def test_modulo_is_mathematical_for_negatives(n):
    # device 0's left neighbour is N - 1, not -1 (C / lax.rem semantics would give -1)
    assert ev("(me - 1) % N", me=0, N=n) == n - 1
    assert ev("(me - step - 1) % N", me=0, step=n - 1, N=n) == 0
    assert ev("left_ish % N", left_ish=-(2 * n) - 1, N=n) == n - 1


def test_modulo_result_has_sign_of_divisor():
    assert ev("a % b", a=7, b=-3) == -2
    assert ev("a % b", a=-7, b=3) == 2


def test_floor_division_floors_towards_minus_infinity():
    assert ev("a // b", a=7, b=2) == 3
    assert ev("a // b", a=-7, b=2) == -4
    assert ev("a // b", a=7, b=-2) == -4


def test_min_max():
    assert parse("min(a, b)") == Call("min", (Var("a"), Var("b")))
    assert ev("min(a, b, c)", a=4, b=-1, c=3) == -1
    assert ev("max(a, b, c)", a=4, b=-1, c=3) == 4
    assert ev("max(me - 1, 0)", me=0) == 0


@pytest.mark.parametrize("text,env,want", [
    ("a == b", {"a": 1, "b": 1}, True),
    ("a != b", {"a": 1, "b": 1}, False),
    ("a < b", {"a": 1, "b": 2}, True),
    ("a <= b", {"a": 2, "b": 2}, True),
    ("a > b", {"a": 2, "b": 2}, False),
    ("a >= b", {"a": 2, "b": 2}, True),
])
def test_comparisons(text, env, want):
    assert ev(text, **env) is want


def test_chained_comparison_means_conjunction():
    assert parse("a < b < c") == BinOp("and", BinOp("<", Var("a"), Var("b")), BinOp("<", Var("b"), Var("c")))
    assert ev("0 <= me < N", me=3, N=4) is True
    assert ev("0 <= me < N", me=4, N=4) is False
    # not the same as (0 <= me) < N, which would be True here
    assert ev("0 <= me < N", me=-1, N=4) is False


def test_boolean_operators():
    assert ev("step == 0 and phase == 0", step=0, phase=0) is True
    assert ev("step == 0 and phase == 0", step=0, phase=1) is False
    assert ev("step == 0 or phase == 0", step=1, phase=0) is True
    assert ev("not step == 0", step=1) is True
    assert ev("not (a == 1 or b == 1)", a=0, b=0) is True
    assert parse("a and b and c") == BinOp("and", BinOp("and", Var("a"), Var("b")), Var("c"))


def test_and_or_short_circuit():
    # the right operand would divide by zero; it must not be evaluated
    assert ev("b != 0 and a // b > 1", a=4, b=0) is False
    assert ev("b == 0 or a // b > 1", a=4, b=0) is True


def test_unary_minus():
    assert parse("-3") == Const(-3)
    assert parse("-a") == Neg(Var("a"))
    assert ev("-a * b", a=2, b=3) == -6
    assert ev("-(a + b)", a=2, b=3) == -5
    assert ev("--a", a=2) == 2
    assert ev("+a", a=2) == 2


def test_integers_and_booleans_are_constants():
    assert parse(5) == Const(5)
    assert parse("True") == Const(True)
    assert parse(True) == Const(True)
    assert ev("N - 1", N=8) == 7


def test_names():
    assert names(parse("min(me + step, N) % rows")) == {"me", "step", "N", "rows"}
    assert names(parse("3")) == set()


def test_substitute_inlines_lets():
    e = substitute(parse("working * 2 + me"), {"working": parse("step % 2")})
    assert e == parse("step % 2 * 2 + me")
    assert evaluate(e, {"step": 3, "me": 1}) == 3


def test_unknown_name_and_division_by_zero_raise_expr_error():
    with pytest.raises(ExprError, match="unknown name 'zz'"):
        evaluate(parse("zz + 1"), {})
    with pytest.raises(ExprError, match="division by zero"):
        evaluate(parse("a % b"), {"a": 1, "b": 0})
    with pytest.raises(ExprError, match="division by zero"):
        evaluate(parse("a // b"), {"a": 1, "b": 0})


def test_exact_division():
    with pytest.raises(ExprError, match="does not divide exactly"):
        evaluate(parse("7 // 2"), {}, exact_division=True)
    with pytest.raises(ExprError, match="rows // 2"):
        evaluate(parse("rows // 2"), {"rows": 15}, exact_division=True)
    assert evaluate(parse("rows // 2"), {"rows": 16}, exact_division=True) == 8
    assert evaluate(parse("7 // 2"), {}) == 3  # only shapes ask for exactness


# ------------------------------------------------------------ rejected syntax


@pytest.mark.parametrize("text,snippet", [
    ("__import__('os')", "__import__('os')"),
    ("__import__('os').system('true')", "__import__('os').system('true')"),
    ("a.b", "a.b"),
    ("x.__class__", "x.__class__"),
    ("lambda: 1", "lambda: 1"),
    ("a ** b", "a ** b"),
    ("2 ** 1000", "2 ** 1000"),
    ("'abc'", "'abc'"),
    ("a + 'abc'", "'abc'"),
    ("abs(a)", "abs(a)"),
    ("eval('1')", "eval('1')"),
    ("min(a)", "min(a)"),
    ("min(a, b, key=c)", "min(a, b, key=c)"),
    ("a / b", "a / b"),
    ("a ** b", "a ** b"),
    ("a[0][1]", "a[0][1]"),
    ("a in b", "a in b"),
    ("a is b", "a is b"),
    ("a @ b", "a @ b"),
    ("log2(a, b)", "log2(a, b)"),
    ("lambda: a", "lambda: a"),
    ("1.5", "1.5"),
    ("[a, b]", "[a, b]"),
    ("(a := 1)", "a := 1"),
])
def test_rejected_syntax_is_named_and_the_whitelist_listed(text, snippet):
    with pytest.raises(ExprError) as info:
        parse(text)
    msg = str(info.value)
    assert snippet in msg
    # the message says what is allowed, so the user knows what to write instead
    assert "allow" in msg and "min(" in msg and "%" in msg


@pytest.mark.parametrize("text", ["a +", "(a", "", "a b", "1 2"])
def test_unparseable_text(text):
    with pytest.raises(ExprError, match="cannot parse expression"):
        parse(text)


@pytest.mark.parametrize("value", [None, 1.5, [1, 2], {"a": 1}])
def test_non_expression_values(value):
    with pytest.raises(ExprError, match="expected an expression"):
        parse(value)


def test_expr_error_is_a_value_error():
    assert issubclass(ExprError, ValueError)


# ------------------------------------------------------------------- printing


@pytest.mark.parametrize("text", [
    "a + b * c", "(a + b) * c", "a - (b - c)", "a - b - c", "a // b // c", "a // (b // c)",
    "(me - 1) % N", "-a", "-(a + b)", "--a", "not a == b", "(not a) == b", "a and (b or c)",
    "a or b and c", "min(a, b + 1, -c)", "max(min(a, b), c) % N", "a < b < c",
    "-3 % N", "a - -3", "not (a and b)", "True", "step == 0 and phase == 0",
    "me ^ (1 << k)", "(me >> k) << k", "~a & b | c", "a ^ b ^ c", "a ^ (b ^ c)", "(a + 1) << k", "-~a",
    "a if c < 0 else b", "a if c else b if d else e", "(a if c else b) + 1", "(a if c else b) if d else e",
    "log2(N)", "log2(N) - 1",
])
def test_to_text_round_trips_examples(text):
    e = parse(text)
    assert parse(to_text(e)) == e


@pytest.mark.parametrize("text,env", [
    ("(a < b) < c", {"a": 2, "b": 1, "c": 1}),
    ("(me == 0) == (step == 0)", {"me": 1, "step": 1}),
    ("a == (b == c)", {"a": 0, "b": 1, "c": 2}),
])
def test_to_text_keeps_nested_comparisons_parenthesised(text, env):
    # `a < b < c` would be a chained comparison: a different expression. (Was a bug: the
    # printer treated comparisons as left-associative; emitted guards changed meaning.)
    e = parse(text)
    assert parse(to_text(e)) == e
    assert evaluate(parse(to_text(e)), env) == evaluate(e, env)
    assert "(" in to_text(e)


# Random expression trees, typed so that Python's semantics of the printed text are the
# language's: `and`/`or`/`not` only over booleans (Python's `and` returns an operand),
# arithmetic only over integers; comparisons over integers or booleans, so comparisons
# of comparisons (which must not print as a chain) are generated too.

def _int_exprs():
    leaves = st.one_of(st.integers(-20, 20).map(Const), st.sampled_from(VARS).map(Var))

    def extend(children):
        return st.one_of(
            st.tuples(st.sampled_from(["+", "-", "*", "//", "%", "^", "&", "|"]), children, children)
              .map(lambda t: BinOp(*t)),
            st.tuples(st.sampled_from(["<<", ">>"]), children, st.integers(0, 8).map(Const))
              .map(lambda t: BinOp(*t)),
            children.filter(lambda c: not isinstance(c, Const)).map(Invert),
            st.tuples(st.sampled_from(["<", "=="]), children, children, children, children)
              .map(lambda t: IfExp(BinOp(t[0], t[1], t[2]), t[3], t[4])),
            children.filter(lambda c: not isinstance(c, Const)).map(Neg),
            st.tuples(st.sampled_from(["min", "max"]), st.lists(children, min_size=2, max_size=3))
              .map(lambda t: Call(t[0], tuple(t[1]))),
        )
    return st.recursive(leaves, extend, max_leaves=10)


COMPARISONS = ["==", "!=", "<", "<=", ">", ">="]


def _bool_exprs(ints):
    compare = st.tuples(st.sampled_from(COMPARISONS), ints, ints).map(lambda t: BinOp(*t))
    leaves = st.one_of(compare, st.booleans().map(Const))

    def extend(children):
        operand = st.one_of(ints, children)
        return st.one_of(
            st.tuples(st.sampled_from(["and", "or"]), children, children).map(lambda t: BinOp(*t)),
            children.map(Not),
            st.tuples(st.sampled_from(COMPARISONS), operand, operand).map(lambda t: BinOp(*t)),
        )
    return st.recursive(leaves, extend, max_leaves=6)


INTS = _int_exprs()
EXPRS = st.one_of(INTS, _bool_exprs(INTS))
ENVS = st.fixed_dictionaries({v: st.integers(-50, 50) for v in VARS})


@settings(max_examples=300, deadline=None)
@given(EXPRS)
def test_to_text_round_trips(e):
    assert parse(to_text(e)) == e


def _python_value(text: str, env: dict[str, int]):
    try:
        return ("ok", eval(text, {"__builtins__": {}, "min": min, "max": max}, dict(env)))  # noqa: S307
    except ZeroDivisionError:
        return ("error", None)


def _our_value(e, env):
    try:
        value = evaluate(e, env)
    except ExprError as err:
        if "64-bit range" in str(err):  # `x << k` past 64 bits: refused here, a big int in Python
            return ("range", None)
        assert "division by zero" in str(err)
        return ("error", None)
    return ("ok", value)


@settings(max_examples=300, deadline=None)
@given(EXPRS, ENVS)
def test_evaluate_agrees_with_python_on_the_printed_text(e, env):
    text = to_text(e)
    ours = _our_value(e, env)
    assume(ours[0] != "range")
    assert ours == _python_value(text, env)


@settings(max_examples=200, deadline=None)
@given(INTS, INTS, ENVS)
def test_modulo_and_floor_division_identity(x, y, env):
    try:
        a, b = evaluate(x, env), evaluate(y, env)
    except ExprError:  # a division by zero inside x or y
        assume(False)
    assume(b != 0)
    q = evaluate(BinOp("//", x, y), env)
    r = evaluate(BinOp("%", x, y), env)
    assert q * b + r == a
    assert (r == 0) or ((r > 0) == (b > 0))  # remainder has the divisor's sign
    assert abs(r) < abs(b)


# ----------------------------------------------------------------- references


def test_parse_ref_bare_name():
    assert parse_ref("buf") == Ref("buf")


def test_parse_ref_one_index():
    assert parse_ref("buf[i]") == Ref("buf", (Var("i"),))
    assert parse_ref("recv_sems[step]") == Ref("recv_sems", (Var("step"),))


def test_parse_ref_indices_and_slices():
    r = parse_ref("buf[i, a:s, :]")
    assert r == Ref("buf", (Var("i"), Slice(Var("a"), Var("s")), Slice(None, None)))
    assert parse_ref("x[me, phase * half:half]").indices[1] == Slice(
        BinOp("*", Var("phase"), Var("half")), Var("half"))
    assert parse_ref("x[:4]").indices == (Slice(None, Const(4)),)
    assert parse_ref("x[2:]").indices == (Slice(Const(2), None),)


@pytest.mark.parametrize("text", ["buf", "buf[i]", "buf[i, a:s, :]", "scratch[(me - 1) % N, 0:half]",
                                  "x[me, half:half]", "x[:4]", "x[2:]"])
def test_ref_text_round_trips(text):
    r = parse_ref(text)
    assert parse_ref(r.text()) == r


def test_parse_ref_rejects_steps():
    with pytest.raises(ExprError, match="no step"):
        parse_ref("buf[a:b:c]")
    with pytest.raises(ExprError, match="no step"):
        parse_ref("buf[i, 0:8:2]")


@pytest.mark.parametrize("text", ["buf.x", "buf[i][j]", "f(buf)", "3", "buf + 1"])
def test_parse_ref_rejects_non_references(text):
    with pytest.raises(ExprError, match="expected `name` or `name\\[indices\\]`"):
        parse_ref(text)


def test_parse_ref_rejects_bad_index_expressions():
    with pytest.raises(ExprError, match="unsupported syntax"):
        parse_ref("buf[a ** 2]")
    with pytest.raises(ExprError, match="expected a reference"):
        parse_ref(3)


# ------------------------------------------------------------------- bitwise and conditional


@pytest.mark.parametrize("text,env,want", [
    ("me ^ (1 << k)", {"me": 5, "k": 1}, 7),
    ("me ^ (1 << k)", {"me": 5, "k": 0}, 4),
    ("(me >> k) << k", {"me": 7, "k": 2}, 4),
    ("me & ~((1 << k) - 1)", {"me": 7, "k": 2}, 4),
    ("a | b", {"a": 4, "b": 1}, 5),
    ("-9 >> 1", {}, -5),  # arithmetic: floor division by 2, as lax.shift_right_arithmetic
    ("~a", {"a": 0}, -1),
    ("a if c else b", {"a": 1, "b": 2, "c": 0}, 2),
    ("a if c > 0 else b", {"a": 1, "b": 2, "c": 3}, 1),
    ("log2(N)", {"N": 1024}, 10),
    ("log2(N)", {"N": 1}, 0),
])
def test_bitwise_conditional_and_log2(text, env, want):
    assert ev(text, **env) == want


def test_a_conditional_evaluates_only_the_branch_taken():
    assert ev("a // b if b != 0 else 0", a=1, b=0) == 0
    assert ev("missing if c else 7", c=False) == 7


@pytest.mark.parametrize("text,env,says", [
    ("1 << k", {"k": 64}, "shift count 64 is outside 0..63"),
    ("a >> k", {"a": 8, "k": -1}, "shift count -1 is outside 0..63"),
    ("1 << k", {"k": 63}, "64-bit range"),
    ("a ^ b", {"a": 1, "b": True}, "apply to integers, not to the truth value True"),
    ("~a", {"a": True}, "apply to integers"),
    ("log2(N)", {"N": 6}, "N = 6 is not a power of two"),
    ("log2(N)", {"N": 0}, "not a power of two"),
])
def test_bitwise_errors_are_named(text, env, says):
    with pytest.raises(ExprError, match=re.escape(says)):
        evaluate(parse(text), env)


@pytest.mark.parametrize("text", ["(a < b) ^ 1", "~(a == b)", "True & a", "(a and b) << 1"])
def test_bitwise_on_a_condition_is_refused_when_parsed(text):
    with pytest.raises(ExprError, match="is a condition: combine conditions with and/or/not"):
        parse(text)


def test_the_kernel_text_of_the_new_expressions():
    assert to_python(parse("me ^ (1 << k)")) == "me ^ (1 << k)"
    assert to_python(parse("a if c else b % N")) == "_select(c, a, _mod(b, N))"
    assert to_python(parse("log2(N)")) == "_log2(N)"
    assert names(parse("a if c else ~b")) == {"a", "b", "c"}
    assert substitute(parse("x if c else ~x"), {"x": Var("y")}) == parse("y if c else ~y")


@settings(max_examples=400, deadline=None)
@given(EXPRS, ENVS)
def test_compiled_evaluator_is_evaluate(e, env):
    """`evaluator(e)` (closures, for the unroller's hot loop) gives `evaluate`'s value, or
    raises its error with the same message."""
    from ringc.ir.expr import evaluator
    try:
        want = ("ok", evaluate(e, env))
    except ExprError as err:
        want = ("error", str(err))
    try:
        got = ("ok", evaluator(e)(env))
    except ExprError as err:
        got = ("error", str(err))
    assert got == want and type(got[1]) is type(want[1])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(VARS), EXPRS, st.booleans()), min_size=1, max_size=4), ENVS)
def test_let_block_is_evaluate_in_order(steps, env):
    """`block_evaluator` (a let block as one generated function, for the unroller's grid
    points) gives each step `evaluate`'s value where the earlier steps' values are bound, in
    order, memoized or not; where `evaluate` raises, the step is the caller's `slow(i)`, so
    the error is the caller's, raised at that step."""
    from ringc.ir.expr import block_evaluator
    want_env, want = dict(env), None
    for i, (name, e, _) in enumerate(steps):
        try:
            want_env[name] = evaluate(e, want_env)
        except ExprError as err:
            want = (i, str(err))
            break

    def slow(i):
        try:
            return evaluate(steps[i][1], got_env)
        except ExprError as err:
            raise ExprError(f"{i}: {err}") from None
    memo = {}
    run = block_evaluator([(name, e, tuple(sorted(names(e))) if memoize else None) for name, e, memoize in steps], {})
    for _ in range(2):  # the second time, from the memo where a step keeps its values
        got_env, got = dict(env), None
        try:
            run(got_env, {}, slow, memo)
        except ExprError as err:
            got = str(err)
        assert got == (None if want is None else f"{want[0]}: {want[1]}")
        if want is None:
            assert got_env == want_env and all(type(got_env[k]) is type(want_env[k]) for k in want_env)
