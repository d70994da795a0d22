"""Runtime data (`data:`): declarations, constraints, samples, data files, and `check --data`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings

import ringc
from ringc.data import derive, load_samples, problems
from ringc.ir import expr as E
from ringc.errors import ScheduleError
from ringc.testing import data_samples, draw_samples

ROOT = Path(__file__).resolve().parent.parent
RAGGED = ROOT / "schedules" / "ragged_all_to_all.yaml"


@pytest.fixture(scope="module")
def ragged():
    return ringc.load(RAGGED)


def test_item_expressions_read_one_element():
    e = E.parse("send_sizes[(me + 1) % N] > 0")
    assert E.names(e) == {"send_sizes", "me", "N"}
    assert E.to_text(e) == "send_sizes[(me + 1) % N] > 0"
    assert E.evaluate(e, {"send_sizes": (0, 3), "me": 0, "N": 2}) is True
    assert E.to_python(E.parse("sizes[t]"), {"sizes": "sizes_"}) == "sizes_[t]"
    with pytest.raises(E.ExprError, match="outside data array `sizes` of length 2"):
        E.evaluate(E.parse("sizes[2]"), {"sizes": (1, 2)})
    with pytest.raises(E.ExprError, match="is a data array"):
        E.evaluate(E.parse("sizes + 1"), {"sizes": (1, 2)})
    with pytest.raises(E.ExprError, match="not a data array"):
        E.evaluate(E.parse("rows[0]"), {"rows": 8})


@settings(max_examples=30, deadline=None)
@given(data=data_samples(ringc.load(RAGGED), 3))
def test_drawn_samples_satisfy_every_constraint(data):
    sched = ringc.load(RAGGED)
    assert problems(sched, 3, data) == []
    sizes = data["send_sizes"]
    assert all(sum(row) <= 8 for row in sizes)                         # sum_at_most: rows
    assert all(sum(sizes[j][d] for j in range(3)) <= 8 for d in range(3))  # receive capacity


def test_derived_arrays_and_reproducible_draws(ragged):
    s = derive(ragged, 2, {"send_sizes": [[1, 2], [3, 0]]})
    assert s["input_offsets"] == ((0, 1), (0, 3))
    assert s["recv_sizes"] == ((1, 3), (2, 0))
    assert s["recv_offsets"] == ((0, 1), (0, 2))
    assert s["output_offsets"] == ((0, 0), (1, 2))   # device 1's rows land after device 0's
    assert draw_samples(ragged, 3, 4, seed=5) == draw_samples(ragged, 3, 4, seed=5)
    assert len(draw_samples(ragged, 3, 4, seed=5)) == 4


def test_problems_name_the_broken_constraint(ragged):
    s = derive(ragged, 2, {"send_sizes": [[5, 4], [0, 0]]})
    assert any("sums to 9" in t for _, t in problems(ragged, 2, s))
    s = derive(ragged, 2, {"send_sizes": [[0, 6], [0, 6]]})
    assert [n for n, _ in problems(ragged, 2, s)] == ["recv_sizes"]   # 12 rows for device 1's 8
    s = dict(derive(ragged, 2, {"send_sizes": [[1, 1], [1, 1]]}), input_offsets=((0, 0), (0, 1)))
    assert any("exclusive prefix sum" in t for _, t in problems(ragged, 2, s))


# ------------------------------------------------------------------ check --data


def _variant(tmp_path, ragged_text, old, new, name):
    assert old in ragged_text
    path = tmp_path / f"{name}.yaml"
    path.write_text(ragged_text.replace(old, new))
    return ringc.load(path)


def test_check_with_data_names_the_sample_and_says_it_is_sampled(ragged):
    samples = draw_samples(ragged, 3, 6, seed=1)
    report = ringc.check(ragged, 3, data=samples, data_how="random:6")
    assert report.ok and not report.findings, report.to_text()
    assert any("a verdict on these samples, not on all data" in a for a in report.assumptions)
    with pytest.raises(ScheduleError, match="--data random:K"):
        ringc.check(ragged, 3)                    # runtime data needs samples


@pytest.mark.parametrize("old, new, kind", [
    # the receive buffer's constraint dropped: some sample overflows it
    ("transpose_of: send_sizes, sum_at_most: out_rows}", "transpose_of: send_sizes}", "out_of_bounds"),
    # the handshake dropped: a neighbour's rows can land before init is copied into out
    ('      - signal: "ready[step]"\n        to: source\n      - sem_wait: "ready[step]"\n', "", "race"),
    # the sender's offset instead of the receiver's
    ('dst: "out[output_offsets[target]:', 'dst: "out[input_offsets[target]:', "wrong_result"),
    # a receive never waited for
    ("      - when: recv_sizes[source] > 0\n        do:\n          - wait_recv: arrive\n", "", "dma_not_waited"),
])
def test_broken_variants_are_caught_on_some_sample(tmp_path, ragged, old, new, kind):
    sched = _variant(tmp_path, RAGGED.read_text(), old, new, kind)
    report = ringc.check(sched, 3, data=draw_samples(sched, 3, 10, seed=0), data_how="random:10")
    assert kind in report.kinds(), report.to_text()
    finding = next(f for f in report.findings if f.kind == kind)
    assert "[data sample " in finding.message and "send_sizes = [[" in finding.message
    assert any("a verdict on sampled data, not on all data" in a for a in report.assumptions)


def test_the_explorer_agrees_on_a_sample(ragged):
    """The independent explorer (explore.py) on the unrolled events of one sample: no hang,
    no race, nothing left at exit, as `check` says."""
    from ringc.verify.explore import explore
    from ringc.verify.unroll import unroll

    sample = draw_samples(ragged, 3, 3, seed=2)[-1]
    result = explore(unroll(ragged, 3, data=sample), max_states=60_000)
    assert result.complete and not result.hang and not result.race and not result.nonzero_exit


def test_data_file_samples_and_their_errors(tmp_path, ragged):
    good = tmp_path / "data.json"
    good.write_text(json.dumps({"samples": [{"send_sizes": [[1, 2], [3, 0]]},
                                            {"send_sizes": [[0, 1, 1], [2, 0, 0], [1, 1, 1]]}]}, indent=1))
    loaded = load_samples(str(good), ragged)
    assert [n for n, _ in loaded] == [2, 3] and loaded[0][1]["output_offsets"] == ((0, 0), (1, 2))
    report = ringc.check(ragged, 2, data=[loaded[0][1]], data_how="data.json")
    assert report.ok, report.to_text()

    def error(text):
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        with pytest.raises(ScheduleError) as e:
            load_samples(str(bad), ragged)
        assert e.value.file == str(bad) and e.value.fix
        return e.value

    e = error('{"send_sizes": [[1, 2],\n [3, 0]')
    assert "not JSON" in e.message and e.line == 2
    e = error('{\n "send_sizes": [[9, 0], [0, 0]]\n}')           # 9 > rows = 8
    assert "every value must lie in 0..8" in e.message and e.line == 2
    e = error('{\n "send_sizes": [[1, 1], [1, 1]],\n "sizes": [[0, 0], [0, 0]]\n}')
    assert "`sizes` is no data array" in e.message and e.line == 3
    e = error('{\n "send_sizes": [[1, 1], [1, 1]],\n "input_offsets": [[0, 0], [0, 1]]\n}')
    assert "exclusive prefix sum" in e.message and e.line == 3
    e = error('{\n "send_sizes": [[1, 1], [1, 1]],\n "send_sizes": [[0, 0], [0, 0]]\n}')
    assert "given twice" in e.message and e.line == 3
    e = error("[" * 100_000)
    assert "too deeply" in e.message
    e = error('{"send_sizes": []}')
    assert "lists no device" in e.message
    from ringc import limits
    with limits.overridden({"data_samples": 1}):
        e = error('{"samples": [\n {"send_sizes": [[1, 1], [1, 1]]},\n {"send_sizes": [[0, 1], [1, 1]]}]}')
    assert "over the limit `data_samples` of 1" in e.message and e.line == 1


def test_malformed_constraints_are_bad_input_with_line_and_fix(tmp_path):
    text = RAGGED.read_text()
    cases = [
        ("input_offsets:  {shape: [N], prefix_sum_of: send_sizes}", "input_offsets:  {shape: [N], prefix_sum_of: sends}",
         "derived from `sends`, which is no data array"),
        ("send_sizes:     {shape: [N], range: [0, rows], sum_at_most: rows}", "send_sizes:     {shape: [N], sum_at_most: rows}",
         "needs `range: [lo, hi]`"),
        ("send_sizes:     {shape: [N], range: [0, rows], sum_at_most: rows}",
         "send_sizes:     {shape: [N], range: [0, me], sum_at_most: rows}", "unknown name `me` in range"),
        ("recv_sizes:     {shape: [N], transpose_of", "recv_sizes:     {shape: [rows], transpose_of",
         "has shape [rows] but `send_sizes`"),
        ("input_offsets:  {shape: [N], prefix_sum_of: send_sizes}",
         "input_offsets:  {shape: [N], prefix_sum_of: send_sizes, range: [0, 1]}", "applies to free arrays only"),
    ]
    for old, new, message in cases:
        assert old in text
        path = tmp_path / "bad.yaml"
        path.write_text(text.replace(old, new))
        with pytest.raises(ScheduleError, match=re.escape(message)) as e:
            ringc.load(path)
        key = new.split(":")[0].strip()
        assert e.value.line == next(i for i, l in enumerate(path.read_text().splitlines(), 1)
                                    if l.startswith(f"  {key}:")), (message, e.value)


def test_cli_check_data(tmp_path, capsys):
    from ringc.cli import main

    assert main(["check", str(RAGGED), "--devices", "2..3", "--data", "random:4", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert out.count(": ok (") == 2 and "random:4, seed 3" in out
    broken = ROOT / "tests" / "broken" / "ragged_all_to_all_receive_overflow.yaml"
    assert main(["check", str(broken), "--devices", "3", "--data", "random:10"]) == 1
    assert "[out_of_bounds]" in capsys.readouterr().out
    assert main(["check", str(RAGGED), "--devices", "2", "--data", "random:0"]) == 2
    assert "positive integer" in capsys.readouterr().err
    # the number of samples is a limit checked before any is drawn (each is a whole check)
    assert main(["check", str(RAGGED), "--devices", "8", "--data", "random:1000000000"]) == 2
    err = capsys.readouterr().err
    assert "over the limit `data_samples` of 1,000" in err and "--limit data_samples=" in err
    assert main(["check", str(RAGGED), "--devices", "2", "--data", "random:3",
                 "--limit", "data_samples=2"]) == 2
    assert main(["check", str(RAGGED), "--devices", "2", "--data", "random:2",
                 "--limit", "data_samples=2"]) == 0


# ------------------------------------------------------------------ meaning, lax, emit, run, compile


def _shard_run(fn, n, *arrays):
    """`fn` under shard_map on n CPU devices, every array sharded along x."""
    import jax
    import numpy as np
    from jax.sharding import PartitionSpec as P

    mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")[:n]), ("x",))
    return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=(P("x"),) * len(arrays), out_specs=P("x"),
                                 check_vma=False))(*arrays)


def test_cpu_reference_is_the_lax_docstring_example():
    """XLA:CPU has no ragged-all-to-all; the reference `run` uses on CPU gives the example of
    `lax.ragged_all_to_all`'s own docstring (jax 0.10.2)."""
    import jax.numpy as jnp
    from ringc.collectives import ragged_all_to_all_lax

    def f(x, init, io, ss, oo, rs):
        return ragged_all_to_all_lax(x, init, io, ss, oo, rs, "x", 2)

    i32 = lambda v: jnp.array(v, jnp.int32)   # noqa: E731
    out = _shard_run(f, 2, jnp.array([1, 2, 2, 3, 4, 0.]), jnp.zeros(8), i32([0, 1, 0, 1]), i32([1, 2, 1, 1]),
                     i32([0, 0, 1, 2]), i32([1, 1, 2, 1]))
    assert out.tolist() == [1, 3, 0, 0, 2, 2, 4, 0]


def test_meaning_equals_the_reference_on_samples(ragged):
    """The symbolic meaning the verifier proves (`RaggedAllToAll.expected`) and the lax
    reference `run` compares with agree, evaluated on numbers, for drawn samples."""
    import jax.numpy as jnp
    import numpy as np
    from ringc.collectives import Buffers, RaggedAllToAll, ragged_all_to_all_lax

    n, rows = 3, 8
    b = Buffers("x", "out", "init")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, rows, 2)).astype(np.float32)
    init = rng.normal(size=(n, rows, 2)).astype(np.float32)
    for sample in draw_samples(ragged, n, 5, seed=4):
        arrays = [jnp.array(np.array(sample[k], np.int32).reshape(-1)) for k in
                  ("input_offsets", "send_sizes", "output_offsets", "recv_sizes")]
        got = np.asarray(_shard_run(lambda *a: ragged_all_to_all_lax(*a, "x", n), n, x.reshape(-1, 2),
                                    init.reshape(-1, 2), *arrays)).reshape(n, rows, 2)
        coll = RaggedAllToAll().with_data(sample)
        for d in range(n):
            want = np.empty((rows, 2), np.float32)
            for piece in coll.expected(n, d, {"x": (rows, 2), "out": (rows, 2), "init": (rows, 2)}, b):
                (lo, hi), _ = piece.box
                (name, dev, imap), = piece.value
                src = (x if name == "x" else init)[dev]
                want[lo:hi] = src[lo + imap[0][1]:hi + imap[0][1]]
            assert np.array_equal(got[d], want), (sample, d)


def test_emit_and_run_equal_to_lax_at_two_devices(ragged):
    """Interpret mode, race detector on, against the lax reference, on a sample where both
    devices send rows to each other (N = 3 and 4: the slow test below)."""
    from ringc.data import derive
    from ringc.run import run_schedule

    text = ringc.emit(ragged)
    assert "num_scalar_prefetch=5" in text and "@pl.when(send_sizes[target] > 0)" in text
    assert "x.at[pl.ds(input_offsets[target], send_sizes[target])]" in text
    sample = derive(ragged, 2, {"send_sizes": [[2, 3], [4, 1]]})
    result = run_schedule(ragged, 2, data=sample)
    assert result.ok and result.max_abs_err == 0 and result.races_found is False, result


@pytest.mark.slow
@pytest.mark.parametrize("n", [3, 4])
def test_run_equal_to_lax(ragged, n):
    from ringc.run import run_schedule
    from ringc.testing import heaviest_sample

    for seed in (0, 1):
        sample = heaviest_sample(ragged, n, seed)
        assert sum(sample["send_sizes"][j][d] for j in range(n) for d in range(n) if j != d) > 0
        result = run_schedule(ragged, n, data=sample)
        assert result.ok and result.max_abs_err == 0 and result.races_found is False, (sample, result)


@pytest.mark.slow
def test_compiles_for_v5e():
    """Dynamic-size DMAs (`pl.ds(offset, size)` with both from SMEM) on HBM refs: Mosaic
    compiles them for v5e (docs/schedule-format.md, "Runtime data")."""
    from ringc.compile import compile_for, libtpu_available

    if not libtpu_available():
        pytest.skip("libtpu is not installed")
    result = compile_for(ringc.load(RAGGED), "v5e:2x2")
    assert result.ok, result.to_text(verbose=True)


def test_lax_text_and_vjp_text_are_lax_and_its_transpose(ragged):
    """The source texts of ragged_all_to_all (the emitted docstring's call, and JAX's
    transpose rule) against the CPU reference and `jax.vjp` of it, with `lax.ragged_all_to_all`
    itself replaced by that reference (XLA:CPU cannot run it)."""
    import types

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from ringc.collectives import RaggedAllToAll, ragged_all_to_all_lax

    n, rows = 3, 8
    c = RaggedAllToAll()
    sample = draw_samples(ragged, n, 4, seed=6)[-1]
    names = ("input_offsets", "send_sizes", "output_offsets", "recv_sizes")
    arrays = [jnp.array(np.array(sample[k], np.int32).reshape(-1)) for k in names]
    key = iter(jax.random.split(jax.random.key(0), 3))
    x, init, g = (jax.random.normal(next(key), (n * rows, 2)) for _ in range(3))

    def body(x, init, g, *data):
        values = dict(zip(names, data))
        fake = types.SimpleNamespace(**{k: getattr(lax, k) for k in ("all_to_all", "all_gather", "axis_index")})
        fake.ragged_all_to_all = lambda *a, axis_name: ragged_all_to_all_lax(*a, axis_name, n)
        env = {"lax": fake, "jnp": jnp, "x": x, "init": init, "g": g, **values}

        def f(x, init):
            return c.lax(x, "x", n, rhs=init, data=values)
        out, vjp = jax.vjp(f, x, init)
        dx, dinit = vjp(g)
        text = eval(c.lax_text("x", '"x"', "N", rhs="init"), env)
        tdx, tdinit = (eval(t, env) for t in c.vjp_text("x", '"x"', "N", "g", rhs="init"))
        return jnp.stack([jnp.max(jnp.abs(a - b)) for a, b in ((out, text), (dx, tdx), (dinit, tdinit))])[None]

    errors = _shard_run(body, n, x, init, g, *arrays)
    assert float(jnp.max(errors)) < 1e-6, errors
