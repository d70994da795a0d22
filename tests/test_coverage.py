"""Every stage has a rule for every op and every collective, and nothing falls back silently.

- Coverage: each stage's rule table (`ringc.ir.rules.TABLES`) has a rule for every key of
  its domain: every op class (`schema.OPS`), every compute-event kind
  (`events.COMPUTE_KINDS`), every collective kind (`schema.CollectiveKind`). A new op or
  collective fails here, naming the stage and the missing rule, until each stage has one.
- Each collective class defines every part of its meaning, and its transpose is an involution.
- The silent fallbacks of issue 12 are errors now: each has a test below that fails on the
  old behaviour.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import ringc
from ringc import collectives as C
from ringc.ir import schema as S
from ringc.ir.rules import TABLES, MissingRule
from ringc.pallas.primitives import mosaic_tpu_primitives
from ringc.verify.events import COMPUTE_KINDS, Compute, Event, Region

REPO = Path(__file__).resolve().parent.parent

# Every stage that keeps a rule table, by module: a table removed or renamed fails here too.
STAGES = {
    "ringc.ir.resolve": ["RESOLVE"],
    "ringc.verify.unroll": ["UNROLL"],
    "ringc.verify.events": ["COMPUTES"],
    "ringc.verify.gauge": ["PAIRS"],
    "ringc.codegen.pallas": ["EMIT"],
    "ringc.codegen.mgpu": ["MGPU_EMIT"],
    "ringc.compile.errors": ["SITE_TEXT"],
    "ringc.collectives": ["COLLECTIVES"],
    # The importer's table (ringc/pallas/primitives.py) is complete once its rules are
    # registered: the kernel interpreter's (interpret.py) and the outer walker's (importer.py).
    "ringc.pallas.importer": ["PRIMITIVES"],
}
DOMAINS = {
    "ops": list(S.OPS),
    "compute": list(COMPUTE_KINDS),
    "collectives": list(S.CollectiveKind),
    # Every primitive Pallas' Mosaic TPU lowering has a rule for: a JAX upgrade that adds one
    # fails here until the importer registers it (ringc/pallas/primitives.py).
    "pallas_tpu": mosaic_tpu_primitives(),
}
# Domains whose tables may also hold keys outside the domain: the importer's table registers
# what the program around the kernels uses too (`shard_map`, `pallas_call`, lax collectives)
# and names older JAX versions spell (`pjit`).
OPEN_DOMAINS = {"pallas_tpu"}


def _tables():
    out = []
    for module, names in STAGES.items():
        mod = importlib.import_module(module)
        out += [(f"{module}.{name}", getattr(mod, name)) for name in names]
    return out


def _name(key) -> str:
    return getattr(key, "__name__", None) or repr(key)


@pytest.mark.parametrize("where, table", _tables(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_stage_has_a_rule_for_every_key(where, table):
    missing = [_name(k) for k in DOMAINS[table.domain] if k not in table]
    assert not missing, f"{where} ({table.stage}) has no rule for: {', '.join(missing)}"
    extra = [_name(k) for k in table if k not in DOMAINS[table.domain] and table.domain not in OPEN_DOMAINS]
    assert not extra, f"{where} has rules for keys that do not exist: {', '.join(extra)}"


def test_every_table_is_listed_here():
    """A stage that adds a rule table must add it to STAGES (so its coverage is checked)."""
    listed = {id(t) for _, t in _tables()}
    unlisted = [t.stage for t in TABLES if id(t) not in listed]
    assert not unlisted, f"rule tables not in tests/test_coverage.py STAGES: {unlisted}"


def test_ops_are_declared_once():
    """The YAML tags, the union and the key lists all come from `schema.OPS`."""
    assert S.OP_KEYS == tuple(c.tag for c in S.OPS)
    assert len(set(S.OP_KEYS)) == len(S.OPS)
    union = S.Op.__origin__.__args__  # Annotated[Union[...], Discriminator]
    assert [a.__origin__ for a in union] == list(S.OPS)
    assert set(S.COMPUTE_OP_KEYS) == {c.tag for c in S.OPS if c.compute}
    for c in S.OPS:
        for role in ("reads", "writes", "sems"):
            fields = getattr(c, role)
            if not c.copy_halves:
                assert set(fields) <= set(c.model_fields), (c.__name__, role, fields)
            else:
                assert set(fields) <= set(S.Copy.model_fields), (c.__name__, role, fields)


def test_a_missing_rule_names_the_stage_and_the_op():
    from ringc.verify.unroll import UNROLL

    class ReduceMax(S.OpNode):
        tag = "reduce_max"

    with pytest.raises(MissingRule, match=r"unroll .*UNROLL.* has no rule for ReduceMax"):
        UNROLL[ReduceMax]


# ------------------------------------------------------------------ collectives

METHODS = ("shape_problem", "expected", "_rotates", "lax", "lax_text", "traffic", "transpose")
# Collectives whose linear transpose is no collective of ringc.collectives: ring attention's
# cotangents of q, k and v are three different gathers and scatters of products.
NO_TRANSPOSE = {"ring_attention"}


@pytest.mark.parametrize("kind", list(S.CollectiveKind))
def test_collective_defines_its_whole_meaning(kind):
    cls = C.COLLECTIVES[kind]
    assert cls.kind == kind and cls.title
    undefined = [m for m in METHODS if getattr(cls, m) is getattr(C.Collective, m)]
    assert not undefined, f"collective {kind} does not define {', '.join(undefined)}"
    c = cls(shift=3)
    t = c.transpose()
    if kind in NO_TRANSPOSE:  # jax.grad of its kernel raises, naming why (tests/test_codegen.py)
        assert t is None
        return
    assert t is not None and t.transpose() == c, (c, t, t.transpose())


def test_transposes_are_the_known_pairs():
    pairs = {k: C.COLLECTIVES[k]().transpose().kind for k in C.COLLECTIVES if k not in NO_TRANSPOSE}
    assert pairs == {"all_gather": "psum_scatter", "psum_scatter": "all_gather", "psum": "psum",
                     "ppermute": "ppermute", "all_to_all": "all_to_all",
                     "all_gather_matmul": "matmul_psum_scatter_t", "matmul_psum_scatter_t": "all_gather_matmul",
                     "matmul_psum_scatter": "all_gather_matmul_t", "all_gather_matmul_t": "matmul_psum_scatter",
                     "ragged_all_to_all": "ragged_all_to_all"}
    assert C.COLLECTIVES["ppermute"](shift=2).transpose().shift == -2


def test_meaning_check_needs_no_schedule():
    """A front end without YAML calls the meaning check with a collective and buffer roles."""
    from ringc.verify.semantics import Memory, mismatches
    shapes = {"x": (4, 8), "out": (4, 8)}
    roles = C.Buffers("x", "out", itemsize={"x": 4, "out": 4})
    mem = Memory(shapes)
    for d in range(3):
        mem.init_input(d, "x")
        mem.copy(Region("x", d, ((0, 4), (0, 8)), (0, 1), 4), Region("out", (d + 1) % 3, ((0, 4), (0, 8)), (0, 1), 4))
    assert not mismatches(C.COLLECTIVES["ppermute"](shift=1), roles, mem, range(3), 3, shapes)
    wrong = mismatches(C.COLLECTIVES["ppermute"](shift=2), roles, mem, range(3), 3, shapes)
    assert len(wrong) == 3 and "x@" in wrong[0].want


# ------------------------------------------------------------------ the silent fallbacks of issue 12

def _event(action) -> Event:
    return Event(0, 0, (0,), 1, action)


REGION = Region("acc", 0, ((0, 8), (0, 128)), (0, 1), 4)


UNKNOWN = r"compute kinds .*COMPUTES.* has no rule for 'reduce_max'"


def test_semantics_rejects_an_unknown_compute_kind():
    """Was: `semantics.apply` treated any unknown kind as accumulate."""
    from ringc.verify.semantics import Memory, apply
    mem = Memory({"acc": (8, 128)})
    with pytest.raises(MissingRule, match=UNKNOWN):
        apply(mem, _event(Compute("reduce_max", REGION, REGION)), 1)


def test_races_rejects_an_unknown_compute_kind_by_name():
    """Was: `races.py` raised a bare KeyError('reduce_max')."""
    from ringc.verify.races import describe, event_accesses
    with pytest.raises(MissingRule, match=UNKNOWN) as err:
        describe(_event(Compute("reduce_max", REGION, REGION)))
    assert not isinstance(err.value, KeyError)
    with pytest.raises(MissingRule, match=UNKNOWN):
        list(event_accesses([_event(Compute("reduce_max", REGION, REGION))], 1))


def test_cost_and_show_reject_an_unknown_compute_kind():
    from ringc.cost.chips import chip
    from ringc.cost.timeline import compute_time
    from ringc.show.ops import op_text
    with pytest.raises(MissingRule, match=UNKNOWN):
        compute_time(Compute("reduce_max", REGION, REGION), chip("v5e"), {})
    with pytest.raises(MissingRule, match=UNKNOWN):
        op_text(_event(Compute("reduce_max", REGION, REGION)), None)


def test_every_compute_kind_has_one_reads_dst_rule():
    """`Compute.reads_dst` is its kind's (`events.COMPUTES`): the cases that read their
    destination, and one that does not, each kind and variant."""
    from ringc.verify.events import COMPUTES
    reads = {k: COMPUTES[k].reads_dst(Compute(k, REGION, REGION, REGION)) for k in COMPUTE_KINDS}
    assert {k for k, r in reads.items() if r} == {"exit", "accumulate"}
    assert Compute("matmul", REGION, REGION, REGION, accumulate=True).reads_dst
    assert not Compute("accumulate", REGION, REGION, base=REGION).reads_dst
    assert Compute("accumulate", REGION, REGION).overwrites is False


def test_the_cost_model_refuses_a_kind_of_unknown_arithmetic():
    from ringc.cost.chips import chip
    from ringc.cost.timeline import compute_time
    with pytest.raises(ValueError, match="cannot price `acc`"):
        compute_time(Compute("opaque", REGION), chip("v5e"), {})


def test_an_unknown_collective_is_an_error_not_the_slow_path():
    """Was: `quotient.meaning_rotates` returned False for an unknown collective, silently
    sending the check down the full analysis."""
    from ringc.verify.symmetric import certify
    from ringc.verify.check import meaning_of
    from ringc.verify.rotation import rotation_unroll
    sched = ringc.load(REPO / "schedules" / "all_reduce_ring.yaml")
    program = rotation_unroll(sched, 4)
    unknown = sched.model_copy(update={"collective": sched.collective.model_copy(update={"kind": "reduce_max"})})
    with pytest.raises(MissingRule, match=r"collectives .* has no rule for 'reduce_max'"):
        certify.clean(unknown, program, meaning_of(unknown))
    assert certify.clean(sched, program, meaning_of(sched))


def test_mermaid_memory_diagram_draws_every_read_of_a_compute_op():
    """Was: `show/mermaid.py` kept a `.get` table of sources that skipped unknown kinds and
    ignored `base`. reduce_scatter_pipelined accumulates `scratch = x block + received`:
    the base (the pipeline's input block, streamed from x) now gets its edge."""
    from ringc.show.mermaid import memory_diagram
    from ringc.verify.unroll import unroll
    sched = ringc.load(REPO / "schedules" / "reduce_scatter_pipelined.yaml")
    accs = [op for op in S_walk(sched) if isinstance(op, S.Accumulate) and op.base is not None]
    assert accs, "the schedule should use `accumulate` with `base`"
    text = memory_diagram(sched, unroll(sched, 4))
    edges = [line for line in text.splitlines() if "-->" in line and "accumulate" in line]
    assert any(line.strip().startswith("B_scratch -->") and line.strip().endswith("B_scratch")
               for line in edges), edges


def S_walk(sched):
    from ringc.ir.resolve import walk_ops
    return walk_ops(sched.body)


def test_compile_errors_locate_cast_and_matmul():
    """Was: `compile_errors._refs_of`/`_op_text` knew zero, accumulate and assign only, so
    an error at a cast or a matmul named no buffer and said `cast`/`matmul`."""
    from ringc.compile.errors import Site, site_refs, site_text
    sched = ringc.load(REPO / "schedules" / "all_gather_matmul.yaml")
    ops = list(S_walk(sched))
    matmul = next(op for op in ops if isinstance(op, S.Matmul))
    cast = next(op for op in ops if isinstance(op, S.Cast))
    assert site_refs(sched, Site(matmul.line, matmul)) == [matmul.matmul, matmul.a, matmul.b]
    assert site_refs(sched, Site(cast.line, cast)) == [cast.cast, cast.src]
    assert site_text(matmul) == f"matmul: {matmul.matmul.text()} (a: {matmul.a.text()}, b: {matmul.b.text()})"
    assert site_text(cast) == f"cast: {cast.cast.text()} (src: {cast.src.text()})"


# ------------------------------------------------------------------ finding texts

def test_every_finding_kind_has_its_texts_in_the_registry():
    """The verifier's finding texts live in `verify/messages.py`: every kind of finding has a
    message there, and every message is of a known kind."""
    from ringc.verify.findings import KINDS, Severity
    from ringc.verify.messages import MESSAGES
    without = sorted(set(KINDS) - {m.kind for m in MESSAGES.values()})
    assert not without, f"finding kinds with no message in ringc/verify/messages.py: {', '.join(without)}"
    unknown = sorted(name for name, m in MESSAGES.items() if m.kind not in KINDS)
    assert not unknown, f"messages of no kind in findings.KINDS: {', '.join(unknown)}"
    assert all(isinstance(m.severity, Severity) for m in MESSAGES.values())


def test_no_check_writes_a_finding_text_of_its_own():
    """A finding is made from its message (`Message.finding`), not spelled where it is found."""
    import ast
    offenders = []
    for path in sorted((REPO / "ringc").rglob("*.py")):
        if path.name in ("findings.py", "messages.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Finding":
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not offenders, f"Finding(...) made outside verify/messages.py: {', '.join(offenders)}"


def test_every_mosaic_gpu_primitive_has_a_gpu_rule_or_is_refused():
    """The Mosaic GPU interpreter's slot of the same table (`PRIMITIVES.gpu`), against every
    primitive Mosaic GPU's lowering has a rule for (`mgpu.mosaic_gpu_primitives`): a JAX upgrade
    that adds one fails here until it has a rule, a shared TPU rule or a refusal by name."""
    from ringc.pallas import importer  # noqa: F401 - registers every rule
    from ringc.pallas.mgpu import mosaic_gpu_primitives
    from ringc.pallas.primitives import PRIMITIVES, Does
    missing = []
    for name in mosaic_gpu_primitives():
        p = PRIMITIVES.get(name)
        if p is None or not (p.gpu is not None or Does.PURE in p.does or Does.UNSUPPORTED in p.does
                             or Does.KERNEL in p.does or p.kernel is None and p.outer is not None):
            missing.append(name)
    assert not missing, f"Mosaic GPU primitives with no GPU rule: {missing}"
