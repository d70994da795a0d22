"""ringc kernels inside real JAX programs (issue 18): the per-shard `kernel`, shapes from the
arguments, gradients through the transpose collective, `ringc.kernel` in memory, and the
check before emitting. Interpret-mode runs stay small (N = 2..4, one block per device)."""

from __future__ import annotations

import importlib.util
import linecache
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import without_runtime_data
from jax import lax
from jax.experimental.pallas import tpu as pltpu

import ringc
from ringc.cli import main as cli_main
from ringc.codegen import pallas
from ringc.codegen import runtime as R
from ringc.collectives import COLLECTIVES
from ringc.ir import expr as E

P = jax.sharding.PartitionSpec
REPO = Path(__file__).parent.parent
BROKEN = REPO / "tests" / "broken" / "all_reduce_no_capacity_wait.yaml"


def mesh_of(n: int, name: str = "i") -> jax.sharding.Mesh:
    return jax.sharding.Mesh(np.array(jax.devices("cpu")[:n]), (name,))


def interpreted(fn, *args):
    pltpu.reset_tpu_interpret_mode_state()
    try:
        return jax.block_until_ready(fn(*args))
    finally:
        pltpu.reset_tpu_interpret_mode_state()


def example(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", REPO / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------- the examples

def test_training_step_matches_lax_values_and_gradients():
    ex = example("training_step")
    loss, ref_loss, err, scale = ex.compare(n=2, batch=8, d_shard=8, d_out=128)
    assert abs(loss - ref_loss) <= 1e-6 * max(1.0, abs(ref_loss)), (loss, ref_loss)
    assert scale > 0 and err <= 1e-5 * max(1.0, scale), (err, scale)


def test_training_step_runs_the_ringc_kernel_forward_and_backward():
    """The step's jaxpr holds two pallas_calls: the all-reduce and, in the backward pass, the
    same kernel again (psum's transpose is psum); the lax step holds none."""
    ex = example("training_step")
    mesh = mesh_of(2, "model")
    args = (jnp.zeros((16, 128)), jnp.zeros((8, 16)), jnp.zeros((8, 128)))
    text = str(jax.make_jaxpr(lambda *a: ex.make_step(ex.ringc_reduce)(*a, mesh))(*args))
    assert text.count("pallas_call") == 2, text.count("pallas_call")
    assert "pallas_call" not in str(jax.make_jaxpr(lambda *a: ex.make_step(ex.lax_reduce)(*a, mesh))(*args))


def test_collective_matmul_layer_matches_lax_values_and_gradients():
    ex = example("collective_matmul_layer")
    loss_err, errs, scales, loss = ex.compare(n=2)
    assert loss_err <= 1e-5 * max(1.0, abs(loss)), loss_err
    for err, scale in zip(errs, scales):
        assert scale > 0 and err <= 1e-4 * max(1.0, scale), (errs, scales)
    mesh = mesh_of(2, "model")
    args = (jnp.zeros((16, 128)), jnp.zeros((128, 256)), jnp.zeros((256, 128)), jnp.zeros((16, 128)))
    text = str(jax.make_jaxpr(lambda *a: ex.make_step(ex.ringc_ops())(*a, mesh))(*args))
    assert text.count("pallas_call") == 2  # both forward kernels; their backward passes run lax


# ---------------------------------------------------------------------------- gradients per collective

def _grad_case(path: str, n: int, shape: tuple[int, ...], spec: P, lax_fn, seed: int = 0, ours=None):
    module = ringc.kernel(REPO / "schedules" / path)
    mesh = mesh_of(n)
    ours = ours or (lambda s: module.kernel(s, axis_name="i", interpret=True))

    def loss(f):
        body = jax.shard_map(lambda x: jnp.sum(jnp.sin(f(x)) ** 2)[None], mesh=mesh, in_specs=spec,
                             out_specs=P("i"), check_vma=False)
        return jax.jit(jax.value_and_grad(lambda x: jnp.sum(body(x))))

    x = jax.random.normal(jax.random.key(seed), shape)
    got = interpreted(loss(ours), x)
    want = loss(lax_fn)(x)
    assert abs(float(got[0]) - float(want[0])) <= 1e-4 * max(1.0, abs(float(want[0])))
    assert float(jnp.max(jnp.abs(got[1] - want[1]))) <= 1e-5 * max(1.0, float(jnp.max(jnp.abs(want[1]))))
    assert float(jnp.max(jnp.abs(want[1]))) > 0


def test_grad_of_psum_scatter_is_all_gather():
    # x shard [N * rows, cols] (P(None, "i")), out [rows, cols]: lax's tiled psum_scatter
    _grad_case("reduce_scatter_bidirectional.yaml", 2, (2 * 16, 2 * 128), P(None, "i"),
               lambda s: lax.psum_scatter(s, "i", scatter_dimension=0, tiled=True))


def test_grad_of_ppermute_is_the_reverse_ppermute():
    # N = 3: the reverse shift differs from the shift (at N = 2 they coincide)
    _grad_case("ppermute_right.yaml", 3, (8, 3 * 128), P(None, "i"),
               lambda s: lax.ppermute(s, "i", [(j, (j + 1) % 3) for j in range(3)]))


@pytest.mark.slow
@pytest.mark.parametrize("path, shape, spec, fn", [
    ("all_gather_ring.yaml", (2 * 8, 128), P("i", None), lambda s: lax.all_gather(s, "i")),
    ("all_to_all_ring.yaml", (2 * 2, 8, 128), P("i", None, None), lambda s: lax.all_to_all(s, "i", 0, 0)),
    ("all_reduce_one_shot.yaml", (2 * 8, 128), P("i", None), lambda s: lax.psum(s, "i")),
])
def test_grad_of_each_collective_matches_lax(path, shape, spec, fn):
    _grad_case(path, 2, shape, spec, fn)


TEXT_SHAPES = {"ppermute": ((3, 4), None, (3, 4)), "psum": ((3, 4), None, (3, 4)),
               "all_gather": ((3, 4), None, (3, 3, 4)), "psum_scatter": ((3, 3, 4), None, (3, 4)),
               "all_to_all": ((3, 3, 4), None, (3, 3, 4)), "all_gather_matmul": ((3, 4), (4, 5), (3, 3, 5)),
               "matmul_psum_scatter": ((3, 3, 4), (4, 5), (3, 5)),
               "all_gather_matmul_t": ((3, 4), (5, 4), (3, 3, 5)), "matmul_psum_scatter_t": ((3, 3, 4), (5, 4), (3, 5))}


# The default suite checks the collectives whose backward pass no interpret-mode test above
# runs (the rest run end to end there); all of them under slow. One compile per group.
@pytest.mark.parametrize("kinds", [("all_gather", "all_to_all", "psum", "all_gather_matmul_t", "matmul_psum_scatter_t"),
                                   pytest.param(tuple(TEXT_SHAPES), marks=pytest.mark.slow)])
def test_lax_text_and_vjp_text_are_the_lax_call_and_its_vjp(kinds):
    """Collectives' source text (what emitted modules run) against their `lax` call and
    `jax.vjp` of it, on 3 devices, in one compiled shard_map."""
    n, mesh = 3, mesh_of(3)
    # ragged_all_to_all: XLA:CPU cannot run its lax call; tests/test_data.py checks its texts;
    # ring_attention (three inputs, no transpose): test_ring_attention_lax_text_is_its_lax_call
    assert set(TEXT_SHAPES) == set(COLLECTIVES) - {"ragged_all_to_all", "ring_attention"}
    cases = [(kind, COLLECTIVES[kind](shift=shift)) for kind in kinds
             for shift in ((1, -1) if kind == "ppermute" else (1,))]
    keys = iter(jax.random.split(jax.random.key(1), 3 * len(cases)))
    arrays = []
    for kind, _ in cases:
        xs, ys, outs = TEXT_SHAPES[kind]
        arrays += [jax.random.normal(next(keys), (n, *xs)), jax.random.normal(next(keys), (n, *(ys or (1,)))),
                   jax.random.normal(next(keys), (n, *outs))]

    def body(*blocks):
        errors = []
        for i, (kind, c) in enumerate(cases):
            x, y, g = (b[0] for b in blocks[3 * i:3 * i + 3])
            rhs = TEXT_SHAPES[kind][1] is not None
            f = (lambda x, y, c=c: c.lax(x, "i", n, rhs=y)) if rhs else (lambda x, c=c: c.lax(x, "i", n))
            primals = (x, y) if rhs else (x,)
            env = {"lax": lax, "jnp": jnp, "x": x, "y": y, "N": n, "g": g}
            text = eval(c.lax_text("x", '"i"', "N", rhs="y" if rhs else None), env)
            dx, dy = c.vjp_text("x", '"i"', "N", "g", rhs="y" if rhs else None)
            assert (dy is None) == (not rhs), kind
            cts = jax.vjp(f, *primals)[1](g)
            ours = (eval(dx, env), eval(dy, env)) if rhs else (eval(dx, env),)
            pairs = [(f(*primals), text), *zip(cts, ours)]
            errors.append(jnp.stack([jnp.max(jnp.abs(a - b)) for a, b in pairs]).max()[None])
        return tuple(errors)

    errors = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("i"),) * len(arrays),
                                   out_specs=(P("i"),) * len(cases), check_vma=False))(*arrays)
    for (kind, c), err in zip(cases, errors):
        assert float(jnp.max(err)) <= 1e-5, (c, float(jnp.max(err)))


def test_ring_attention_lax_text_is_its_lax_call():
    """ring_attention's source text (the emitted module's docstring) against its `lax` call
    and against the definition, sum over j of (q @ k_j^T) @ v_j, on 3 devices."""
    n, mesh = 3, mesh_of(3)
    c = COLLECTIVES["ring_attention"]()
    keys = jax.random.split(jax.random.key(2), 3)
    q, k, v = (jax.random.normal(key, (n, *shape)) for key, shape in zip(keys, ((4, 8), (5, 8), (5, 8))))

    def body(q, k, v):
        q, k, v = q[0], k[0], v[0]
        env = {"lax": lax, "jnp": jnp, "q": q, "k": k, "v": v, "N": n}
        got = c.lax(q, "i", n, rhs=k, values=v)
        text = eval(c.lax_text("q", '"i"', "N", rhs="k", values="v"), env)
        ks, vs = lax.all_gather(k, "i"), lax.all_gather(v, "i")
        want = sum((q @ ks[j].T) @ vs[j] for j in range(n))
        return jnp.stack([jnp.max(jnp.abs(got - want)), jnp.max(jnp.abs(text - want))])[None]

    errors = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("i"),) * 3, out_specs=P("i"),
                                   check_vma=False))(q, k, v)
    assert float(jnp.max(errors)) <= 1e-4, errors


# ---------------------------------------------------------------------------- shapes from arguments

def test_kernel_takes_its_shapes_and_dtype_from_the_arguments():
    """all_reduce_ring at rows = 16, cols = 256 (PARAMS say 8, 128) and in bfloat16 (the
    schedule fixes no dtype), on a mesh axis not named like AXIS."""
    module = ringc.kernel(REPO / "schedules" / "all_reduce_ring.yaml")
    mesh = mesh_of(2, "data")
    x = jax.random.normal(jax.random.key(0), (16, 2 * 256)).astype(jnp.bfloat16)
    run = jax.jit(jax.shard_map(lambda s: module.kernel(s, axis_name="data", interpret=True), mesh=mesh,
                                in_specs=P(None, "data"), out_specs=P(None, "data"), check_vma=False))
    got = interpreted(run, x)
    assert got.dtype == jnp.bfloat16 and got.shape == x.shape
    want = x[:, :256].astype(jnp.float32) + x[:, 256:].astype(jnp.float32)
    assert float(jnp.max(jnp.abs(got[:, :256].astype(jnp.float32) - want))) <= 2 ** -7 * float(jnp.max(jnp.abs(want)))


def test_shapes_that_do_not_solve_are_refused_naming_the_param():
    module = ringc.kernel(REPO / "schedules" / "reduce_scatter_bidirectional.yaml")
    mesh = mesh_of(2)

    def run(shape, **params):
        f = jax.shard_map(lambda s: module.kernel(s, axis_name="i", interpret=True, **params), mesh=mesh,
                          in_specs=P(None, "i"), out_specs=P("i", None), check_vma=False)
        return jax.eval_shape(f, jax.ShapeDtypeStruct(shape, jnp.float32))

    assert run((32, 256)).shape == (32, 128)  # rows = 32 / N = 16
    with pytest.raises(ValueError, match=r"cannot infer `rows` from input `x` of per-device shape \(33, 128\): "
                                         r"dimension 0 is N \* rows = 2 \* rows"):
        run((33, 256))
    with pytest.raises(ValueError, match=r"`accum`"):  # rows = 5: rows // 2 does not divide
        run((10, 256))
    with pytest.raises(ValueError, match=r"per-device shape \(32, 128\).*needs shape \(48, 128\)"):
        run((32, 256), rows=24)  # a given parameter is used, and the shape checked against it
    with pytest.raises(ValueError, match="unknown parameter depth"):
        run((32, 256), depth=3)
    with pytest.raises(ValueError, match="inside jax.shard_map over mesh axis 'nope'"):
        jax.eval_shape(lambda s: module.kernel(s, axis_name="nope"), jax.ShapeDtypeStruct((32, 128), jnp.float32))


def test_solving_is_linear_and_names_what_it_cannot_solve(monkeypatch):
    rows, n = E.Var("rows"), E.Var("N")
    assert pallas._linear(E.parse("4 * N * rows"), "rows") == (E.BinOp("*", E.Const(4), n), E.Const(0))
    assert pallas._linear(E.parse("2 * rows + 3"), "rows") == (E.Const(2), E.Const(3))
    assert pallas._linear(rows, "rows") == (E.Const(1), E.Const(0))
    assert pallas._linear(E.parse("rows * rows"), "rows") is None
    assert pallas._linear(E.parse("rows // 2"), "rows") is None
    monkeypatch.setattr(R, "NAME", "k")
    assert R._infer({}, "rows", "x", (24, 8), 0, 4, 0, "4 * N * rows") == 6
    assert R._infer({"rows": 5}, "rows", "x", (24, 8), 0, 4, 0, "4 * N * rows") == 5
    with pytest.raises(ValueError, match=r"cannot infer `rows` from input `x` of per-device shape \(8,\) "
                                         r"\(rows \* cols\): the shapes do not determine it; pass rows="):
        R._not_inferred({}, "rows", "x", (8,), "rows * cols")
    # every library schedule solves every parameter its input shapes mention
    for path in without_runtime_data(sorted((REPO / "schedules").glob("*.yaml"))):
        plan = pallas.Emitter(ringc.load(path)).solve_plan()
        assert plan and all(scale is not None for _, _, _, scale, _, _ in plan), path.name


# ---------------------------------------------------------------------------- in memory, check first

def test_ringc_kernel_imports_the_emitted_text_without_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sched = ringc.load(REPO / "schedules" / "ppermute_right.yaml")
    module = ringc.kernel(sched)
    assert module.__file__ == "<ringc kernel ppermute_right.yaml>" and list(tmp_path.iterdir()) == []
    assert "".join(linecache.getlines(module.__file__)) == ringc.emit(sched, checked=module.CHECKED)
    assert callable(module.kernel) and callable(module.build) and module.COLLECTIVE == "ppermute"


def test_ringc_kernel_and_emit_refuse_a_schedule_that_fails_check(tmp_path, capsys):
    with pytest.raises(ringc.ScheduleError, match=r"fails `ringc check`") as e:
        ringc.kernel(BROKEN)
    assert "[race]" in str(e.value) and "unchecked=True" in str(e.value)
    assert ringc.kernel(BROKEN, unchecked=True).COLLECTIVE == "psum"
    out = tmp_path / "k.py"
    assert cli_main(["emit", str(BROKEN), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "[unbalanced]" in err and "--unchecked" in err and not out.exists()
    assert cli_main(["emit", str(BROKEN), "-o", str(out), "--unchecked"]) == 0
    assert out.read_text() == ringc.emit(ringc.load(BROKEN))
    assert cli_main(["emit", str(REPO / "schedules" / "all_gather_2d.yaml"), "-o", str(out)]) == 0


def test_kernel_along_one_axis_of_a_larger_mesh():
    """all_gather_ring along "model" of a data x model mesh (2 x 3): remote copies address
    the other axis by the device's own coordinate."""
    module = ringc.kernel(REPO / "schedules" / "all_gather_ring.yaml")
    mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")[:6]).reshape(2, 3), ("data", "model"))
    x = jax.random.normal(jax.random.key(1), (2 * 3 * 8, 128))

    def on(f):
        return jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P(("data", "model"), None),
                                     out_specs=P("data", None, None), check_vma=False))
    got = interpreted(on(lambda s: module.kernel(s, axis_name="model", interpret=True)), x)
    want = on(lambda s: lax.all_gather(s, "model"))(x)
    assert got.shape == want.shape == (6, 8, 128) and float(jnp.max(jnp.abs(got - want))) == 0.0


@pytest.mark.slow
def test_kernel_over_two_renamed_axes():
    module = ringc.kernel(REPO / "schedules" / "all_reduce_2d.yaml")
    mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")[:4]).reshape(2, 2), ("p", "q"))
    x = jax.random.normal(jax.random.key(0), (16, 4 * 128))

    def on(f):
        return jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P(None, ("p", "q")), out_specs=P(None, ("p", "q")),
                                     check_vma=False))
    got = interpreted(on(lambda s: module.kernel(s, axis_name=("p", "q"), interpret=True)), x)
    want = on(lambda s: lax.psum(s, ("p", "q")))(x)
    assert float(jnp.max(jnp.abs(got - want))) <= 4e-6


@pytest.mark.slow
def test_a_library_kernel_as_the_backward_pass():
    """all_gather_ring forward, reduce_scatter_bidirectional (psum_scatter, its transpose)
    backward through `transpose=`: jax.grad equals lax's, and both kernels run."""
    gather = ringc.kernel(REPO / "schedules" / "all_gather_ring.yaml")
    scatter = ringc.kernel(REPO / "schedules" / "reduce_scatter_bidirectional.yaml")

    def backward(g):  # g: [N, rows, cols] per device; the scatter kernel takes [N * rows, cols]
        return scatter.kernel(g.reshape(-1, g.shape[-1]), axis_name="i", interpret=True)

    def ours(s):
        return gather.kernel(s, axis_name="i", interpret=True, transpose=backward)

    _grad_case("all_gather_ring.yaml", 2, (2 * 8, 128), P("i", None), lambda s: lax.all_gather(s, "i"), ours=ours)
    mesh = mesh_of(2)
    body = jax.shard_map(lambda s: jnp.sum(ours(s) ** 2)[None], mesh=mesh, in_specs=P("i", None),
                         out_specs=P("i"), check_vma=False)
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda x: jnp.sum(body(x))))(jnp.zeros((16, 128))))
    assert jaxpr.count("pallas_call") == 2


@pytest.mark.slow
def test_the_transposed_matmul_kernel_runs_the_backward_pass_on_the_same_y():
    """matmul_reduce_scatter forward, all_gather_matmul_t (its transpose, `all_gather(g) @ y.T`
    on the same y, in bfloat16) backward through `transpose=`: x's gradient equals lax's to
    bfloat16 precision, with no transposed copy of y anywhere."""
    n, rows, depth, cols = 2, 16, 256, 256
    forward = ringc.kernel(REPO / "schedules" / "matmul_reduce_scatter.yaml")
    backward = ringc.kernel(REPO / "schedules" / "all_gather_matmul_t.yaml")
    mesh = mesh_of(n)

    def transpose(x, y, g):  # x [N * rows, depth], y [depth, cols], g [rows, cols] per device
        dx = backward.kernel(g.astype(jnp.bfloat16), y.astype(jnp.bfloat16), axis_name="i", interpret=True)
        dy = jnp.einsum("jmk,jmn->kn", x.reshape(n, rows, depth), lax.all_gather(g, "i"),
                        preferred_element_type=jnp.float32)
        return dx.astype(x.dtype), dy

    def loss(f):
        body = jax.shard_map(lambda x, y: jnp.sum(jnp.sin(f(x, y)) ** 2)[None], mesh=mesh,
                             in_specs=(P(None, "i"), P("i", None)), out_specs=P("i"), check_vma=False)
        return jax.jit(jax.grad(lambda x, y: jnp.sum(body(x, y))))

    ours = loss(lambda x, y: forward.kernel(x, y, axis_name="i", interpret=True, transpose=transpose))
    want = loss(lambda x, y: lax.psum_scatter(x @ y, "i", scatter_dimension=0, tiled=True))
    x = jax.random.normal(jax.random.key(0), (n * rows, n * depth)) / 16
    y = jax.random.normal(jax.random.key(1), (n * depth, cols)) / 16
    got, ref = interpreted(ours, x, y), want(x, y)
    scale = float(jnp.max(jnp.abs(ref)))
    assert scale > 0 and float(jnp.max(jnp.abs(got - ref))) <= 2e-2 * scale
