"""The emitted Pallas module: deterministic text, correct constants, helpers and checks."""

import inspect
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ringc.codegen import emit
from ringc.ir.loader import load, load_text
from ringc.run import load_module

P = jax.sharding.PartitionSpec
REPO = Path(__file__).parent.parent

# The seed kernels' PartitionSpecs, which the schedules must reproduce.
EXPECTED = {
    "all_gather_ring": dict(collective="all_gather", in_specs=(P("x", None),),
                            out_specs=P("x", None, None), params={"rows": 8, "cols": 128}),
    "all_reduce_ring": dict(collective="psum", in_specs=(P(None, "x"),), out_specs=P(None, "x"),
                            params={"rows": 8, "cols": 128}),
    "ppermute_right": dict(collective="ppermute", in_specs=(P(None, "x"),),
                           out_specs=P(None, "x"), params={"rows": 8, "cols": 128}),
    "permute_split_phase": dict(collective="ppermute", in_specs=(P("x", None),),
                                out_specs=P("x", None), params={"rows": 8, "cols": 128}),
    "reduce_scatter_bidirectional": dict(collective="psum_scatter", in_specs=(P(None, "x"),),
                                         out_specs=P("x", None), params={"rows": 16, "cols": 128}),
    "reduce_scatter_bidirectional_overlapped": dict(collective="psum_scatter", in_specs=(P(None, "x"),),
                                                    out_specs=P("x", None), params={"rows": 16, "cols": 128}),
    "all_gather_bidirectional": dict(collective="all_gather", in_specs=(P("x", None),),
                                     out_specs=P("x", None, None), params={"rows": 8, "cols": 128}),
    "all_gather_megacore": dict(collective="all_gather", in_specs=(P("x", None),),
                                out_specs=P("x", None, None), params={"rows": 8, "cols": 128}),
    # issue 13: a Python-unrolled kernel without a grid, with copy templates
    "all_gather_bidirectional_unrolled": dict(collective="all_gather", in_specs=(P("x", None),),
                                              out_specs=P("x", None, None), params={"rows": 8, "cols": 128}),
    # issue 16: the bandwidth-bound library
    "reduce_scatter_chunked": dict(collective="psum_scatter", in_specs=(P(None, "x"),), out_specs=P("x", None),
                                   params={"rows": 32, "cols": 128, "chunks": 2, "block": 512}),
    "all_reduce_bidirectional": dict(collective="psum", in_specs=(P("x", None, None),),
                                     out_specs=P("x", None, None), params={"rows": 32, "cols": 128, "chunks": 2, "block": 512}),
    "all_to_all_direct": dict(collective="all_to_all", in_specs=(P("x", None, None),),
                              out_specs=P("x", None, None), params={"rows": 8, "cols": 128}),
    "all_reduce_one_shot": dict(collective="psum", in_specs=(P("x", None),), out_specs=P("x", None),
                                params={"rows": 8, "cols": 128}),
    "all_gather_hypercube": dict(collective="all_gather", in_specs=(P("x", None),),
                                 out_specs=P("x", None, None), params={"rows": 8, "cols": 128}),
    "ppermute_bidirectional": dict(collective="ppermute", in_specs=(P(None, "x"),), out_specs=P(None, "x"),
                                   params={"rows": 8, "cols": 128}),
    "all_reduce_2d_bidirectional": dict(collective="psum", axis=("x", "y"), in_specs=(P(None, ("x", "y")),),
                                        out_specs=P(None, ("x", "y")),
                                        params={"rows": 8, "cols": 128, "chunks": 2, "block": 1024, "cblock": 256}),
    "all_reduce_3d_bidirectional": dict(collective="psum", axis=("x", "y", "z"), in_specs=(P(None, ("x", "y", "z")),),
                                        out_specs=P(None, ("x", "y", "z")),
                                        params={"rows": 8, "cols": 128, "chunks": 2, "block": 1024, "rblock": 768,
                                                "pblock": 256}),
    "all_to_all_ring": dict(collective="all_to_all", in_specs=(P("x", None, None),),
                            out_specs=P("x", None, None), params={"rows": 8, "cols": 128}),
    # Over two axes: lax's tuple axis, in the specs too.
    "all_gather_2d": dict(collective="all_gather", axis=("x", "y"), in_specs=(P(("x", "y"), None),),
                          out_specs=P(("x", "y"), None, None), params={"rows": 8, "cols": 128}),
    "all_reduce_2d": dict(collective="psum", axis=("x", "y"), in_specs=(P(None, ("x", "y")),),
                          out_specs=P(None, ("x", "y")), params={"block": 8, "cols": 128}),
    # issue 13: two levels as two phases (loops) of a kernel without a grid
    "reduce_scatter_hierarchical": dict(collective="psum_scatter", axis=("x", "y"),
                                        in_specs=(P(("x", "y"), None, None),), out_specs=P(("x", "y"), None),
                                        params={"rows": 8, "cols": 128}),
    "reduce_scatter_pipelined": dict(collective="psum_scatter", in_specs=(P(None, "x"),),
                                     out_specs=P("x", None), params={"rows": 16, "cols": 256, "bm": 8, "bn": 128}),
    # seed 002: x sharded by rows, y by columns, the product by columns
    "all_gather_matmul": dict(collective="all_gather_matmul", in_specs=(P("x", None), P(None, "x")),
                              out_specs=P(None, "x"), params={"rows": 16, "cols": 128, "depth": 256,
                                                              "bm": 8, "bn": 128, "bk": 128}),
    "all_gather_matmul_bidirectional": dict(collective="all_gather_matmul", in_specs=(P("x", None), P(None, "x")),
                                            out_specs=P(None, "x"), params={"rows": 16, "cols": 128, "depth": 256,
                                                                            "bm": 8, "bn": 128, "bk": 128}),
    # issue 14: the same, the matmul pipeline fed block by block as they arrive
    "all_gather_matmul_streamed": dict(collective="all_gather_matmul", in_specs=(P("x", None), P(None, "x")),
                                       out_specs=P(None, "x"), params={"rows": 16, "cols": 128, "depth": 256,
                                                                       "bm": 8, "bn": 128, "bk": 128}),
    # seed 003: x and y sharded along the contraction, the product by rows
    "matmul_reduce_scatter": dict(collective="matmul_psum_scatter", in_specs=(P(None, "x"), P("x", None)),
                                  out_specs=P("x", None), params={"rows": 16, "cols": 256, "depth": 256,
                                                                  "bn": 128, "bk": 128}),
    # issue 13: the same with y stored [n, k] and multiplied transposed, in bfloat16
    "all_gather_matmul_t": dict(collective="all_gather_matmul_t", in_specs=(P("x", None), P("x", None)),
                                out_specs=P(None, "x"), params={"rows": 16, "cols": 128, "depth": 256,
                                                                "bm": 16, "bn": 128, "bk": 128}),
    "matmul_reduce_scatter_t": dict(collective="matmul_psum_scatter_t", in_specs=(P(None, "x"), P(None, "x")),
                                    out_specs=P("x", None), params={"rows": 16, "cols": 256, "depth": 256,
                                                                    "bn": 128, "bk": 128}),
    # issue 13: q, k and v each sharded by rows (sequence), the output too
    "ring_attention": dict(collective="ring_attention", in_specs=(P("x", None),) * 3, out_specs=P("x", None),
                           params={"rows": 8, "kv_rows": 128, "dim": 128}),
}


def mesh_of(n, shape=None):
    """n devices on a 1-D mesh ("x"), or shaped `shape` with axes x, y."""
    if shape is None:
        return jax.sharding.Mesh(np.array(jax.devices()[:n]), ("x",))
    return jax.sharding.Mesh(np.array(jax.devices()[:n]).reshape(shape), ("x", "y", "z")[:len(shape)])


@pytest.fixture(scope="module")
def all_reduce():
    return load_module(load(REPO / "schedules" / "all_reduce_ring.yaml"))


@pytest.fixture(scope="module")
def reduce_scatter():
    return load_module(load(REPO / "schedules" / "reduce_scatter_bidirectional.yaml"))


def test_library_is_complete(library_schedules):
    assert {p.stem for p in library_schedules} == set(EXPECTED)


def test_emission_is_deterministic(schedule_path):
    text = emit(load(schedule_path))
    assert emit(load(schedule_path)) == text
    # Same text whichever way the file is named: no absolute paths leak into the module.
    assert emit(load(os.path.relpath(schedule_path))) == text
    assert str(REPO) not in text


def test_emitted_text_compiles_and_is_tidy(schedule_path):
    schedule = load(schedule_path)
    text = emit(schedule)
    compile(text, schedule_path.name, "exec")
    first = text.splitlines()[0]
    assert first == (f'"""Generated by ringc from {schedule_path.name}. '
                     "Do not edit; regenerate with `ringc emit`.")
    assert schedule.header.splitlines()[0] in text
    # Line 1 is the mandated sentence; the module ends with the schedule verbatim (SCHEDULE,
    # its lines as the author wrote them); everything else fits in 100 columns.
    code, verbatim = text.split('SCHEDULE = """\\\n')
    assert verbatim == schedule.text.rstrip("\n") + '\n"""\n'
    assert all(len(line) <= 100 for line in code.splitlines()[1:])
    assert not any(line != line.rstrip() for line in code.splitlines())
    assert "\n\n\n\n" not in text
    for op_line in (op.line for op in schedule.body):
        assert f"# line {op_line}: " in text


def test_constants(schedule_path):
    schedule = load(schedule_path)
    module = load_module(schedule)
    want = EXPECTED[schedule_path.stem]
    assert module.NAME == schedule.name
    assert module.COLLECTIVE == want["collective"]
    assert module.AXIS == want.get("axis", "x")
    assert module.PARAMS == want["params"]
    assert module.IN_SPECS == want["in_specs"]
    assert module.OUT_SPECS == want["out_specs"]
    assert hasattr(module, "SHIFT") == (want["collective"] == "ppermute")
    if want["collective"] == "ppermute":
        assert module.SHIFT == 1


def test_helpers_are_emitted_only_when_used():
    ppermute = emit(load(REPO / "schedules" / "ppermute_right.yaml"))
    all_reduce = emit(load(REPO / "schedules" / "all_reduce_ring.yaml"))
    reduce_scatter = emit(load(REPO / "schedules" / "reduce_scatter_bidirectional.yaml"))
    assert "def _barrier(" not in ppermute and "def _floordiv(" not in ppermute
    assert "def _barrier(" in all_reduce and "def _floordiv(" not in all_reduce
    assert "left = " not in ppermute  # only `right` is used
    for h in ("_mod", "_floordiv", "_and", "_not", "_device", "_barrier", "_check_divides"):
        assert f"def {h}(" in reduce_scatter
    assert "def _or(" not in reduce_scatter and "def _min(" not in reduce_scatter
    # Fixed order.
    order = [reduce_scatter.index(f"def {h}(") for h in ("_mod", "_floordiv", "_and", "_not",
                                                          "_device", "_barrier")]
    assert order == sorted(order)


def test_mod_is_mathematical_for_python_and_traced_values(all_reduce):
    _mod = all_reduce._mod
    for a in range(-9, 10):
        for b in (-4, -3, 1, 3, 4):
            got = _mod(a, b)
            assert type(got) is int and got == a % b
    a = jnp.arange(-9, 10, dtype=jnp.int32)
    for b in (-4, -3, 3, 4):
        traced = jax.jit(lambda a, b: _mod(a, b))(a, jnp.int32(b))
        assert np.array_equal(np.asarray(traced), np.mod(np.arange(-9, 10), b))
        static_b = jax.jit(lambda a: _mod(a, b))(a)
        assert np.array_equal(np.asarray(static_b), np.mod(np.arange(-9, 10), b))


def test_floordiv_and_logic_helpers(reduce_scatter):
    m = reduce_scatter
    assert m._floordiv(-7, 2) == -4 and type(m._floordiv(-7, 2)) is int
    a = jnp.arange(-9, 10, dtype=jnp.int32)
    for b in (-4, 3):
        got = jax.jit(lambda a: m._floordiv(a, b))(a)
        assert np.array_equal(np.asarray(got), np.floor_divide(np.arange(-9, 10), b))
    # Python bools stay Python bools, so `pl.when` decides statically.
    assert m._and(True, False) is False and m._and(True, True) is True
    assert m._not(False) is True
    traced = jax.jit(lambda t: m._and(m._not(t), True))(jnp.bool_(False))
    assert bool(traced) is True


def test_kernel_refs_follow_pallas_order():
    """Inputs, outputs, HBM scratch, semaphores, VMEM scratch; declaration order within each."""
    schedule = load_text("""
name: order
collective: {kind: psum, output: o2}
params: {rows: 8}
buffers:
  v1:  {kind: vmem_scratch, shape: [rows, 128]}
  h1:  {kind: hbm_scratch, shape: [rows, 128]}
  o2:  {kind: output, shape: [rows, 128], space: vmem}
  i1:  {kind: input, shape: [rows, 128], space: vmem}
  o1:  {kind: output, shape: [rows, 128], space: vmem}
  v0:  {kind: vmem_scratch, shape: [rows, 128]}
semaphores: {s2: regular, s1: dma}
grid: {step: 1}
body:
  - accumulate: o2
    src: i1
""")
    module = load_module(schedule)
    params = list(inspect.signature(module._kernel).parameters)
    assert params == ["i1", "o2", "o1", "h1", "s2", "s1", "v1", "v0", "N", "rows", "axis", "mesh_axes"]
    assert module.OUT_SPECS == (P("x", None), P("x", None))


def test_names_that_clash_with_python_are_suffixed():
    schedule = load_text("""
name: clashes
collective: ppermute
params: {rows: 8, len: 128}
buffers:
  input: {kind: input,  shape: [rows, len]}
  pl:    {kind: output, shape: [rows, len]}
semaphores: {lax: dma, recv_sem: dma}
grid: {step: 1}
let: {sum: rows + 0}
copies:
  mod: {src: input, dst: pl, to: right, send_sem: lax, recv_sem: recv_sem}
body:
  - start: mod
  - wait: mod
""")
    text = emit(schedule)
    compile(text, "clashes.py", "exec")
    assert "def _kernel(input_, pl_, lax_, recv_sem, *, N, rows, len_, axis, mesh_axes):" in text
    assert "def _mod_():" in text and "sum_ = rows + 0" in text
    assert 'len_ = p["len"]' in text


def test_inexact_shape_division_names_the_buffer(reduce_scatter):
    mesh = mesh_of(2)
    with pytest.raises(ValueError, match="accum"):
        reduce_scatter.build(mesh, interpret=True, rows=15)
    with pytest.raises(ValueError, match="accum"):
        reduce_scatter.make_inputs(mesh, 0, rows=15)
    reduce_scatter.build(mesh, interpret=True, rows=32)  # divides: fine


def test_unknown_parameter_is_rejected(all_reduce):
    with pytest.raises(ValueError, match="unknown parameter depth"):
        all_reduce.build(mesh_of(2), depth=3)


def test_interpret_argument(all_reduce):
    from jax.experimental.pallas import tpu as pltpu

    params = pltpu.InterpretParams(detect_races=True)
    assert all_reduce._interpret_mode(None) is False
    assert all_reduce._interpret_mode(False) is False
    assert isinstance(all_reduce._interpret_mode(True), pltpu.InterpretParams)
    assert all_reduce._interpret_mode(params) is params


def test_make_inputs_shapes_and_shardings(schedule_path):
    module = load_module(load(schedule_path))
    axes = len(module.AXIS) if isinstance(module.AXIS, tuple) else 1
    mesh = mesh_of(8, (2, 2, 2)) if axes == 3 else mesh_of(4, (2, 2) if axes == 2 else None)
    inputs = module.make_inputs(mesh, 0)
    assert [x.sharding.spec for x in inputs] == list(module.IN_SPECS)
    bf16 = schedule_path.stem in ("all_gather_matmul_t", "matmul_reduce_scatter_t")  # bfloat16 schedules
    assert all(x.dtype == (jnp.bfloat16 if bf16 else jnp.float32) for x in inputs)
    p = module.PARAMS
    rows, cols, depth = p.get("rows", 0), p.get("cols", 0), p.get("depth", 0)
    want = {"all_gather_ring": [(4 * rows, cols)], "all_reduce_ring": [(rows, 4 * cols)],
            "ppermute_right": [(rows, 4 * cols)],
            "permute_split_phase": [(4 * rows, cols)],
            "reduce_scatter_bidirectional": [(4 * rows, 4 * cols)],
            "reduce_scatter_bidirectional_overlapped": [(4 * rows, 4 * cols)],
            "all_gather_bidirectional": [(4 * rows, cols)], "all_gather_megacore": [(4 * rows, cols)],
            "all_gather_bidirectional_unrolled": [(4 * rows, cols)],
            "all_to_all_ring": [(16, rows, cols)],  # [N, rows, cols] per device, N sharded
            "all_gather_2d": [(4 * rows, cols)],
            "all_reduce_2d": [(2 * 8, 4 * cols)],  # [N_x * block, cols] per device
            "reduce_scatter_hierarchical": [(16, rows, cols)],  # [N, rows, cols] per device, N = 2 x 2
            "reduce_scatter_pipelined": [(4 * rows, 4 * cols)],
            "all_gather_matmul": [(4 * rows, depth), (depth, 4 * cols)],
            "all_gather_matmul_bidirectional": [(4 * rows, depth), (depth, 4 * cols)],
            "all_gather_matmul_streamed": [(4 * rows, depth), (depth, 4 * cols)],
            "matmul_reduce_scatter": [(4 * rows, 4 * depth), (4 * depth, cols)],
            "all_gather_matmul_t": [(4 * rows, depth), (4 * cols, depth)],
            "matmul_reduce_scatter_t": [(4 * rows, 4 * depth), (cols, 4 * depth)],
            "reduce_scatter_chunked": [(4 * rows, 4 * cols)],
            "all_reduce_bidirectional": [(16, rows, cols)],
            "all_to_all_direct": [(16, rows, cols)], "all_reduce_one_shot": [(4 * rows, cols)],
            "all_gather_hypercube": [(4 * rows, cols)],
            "ppermute_bidirectional": [(4 * rows, 4 * cols)],
            "all_reduce_2d_bidirectional": [(4 * 4 * rows, 4 * cols)],  # [4 N rows, cols], N = 2 x 2
            "all_reduce_3d_bidirectional": [(6 * 8 * rows, 8 * cols)],
            "ring_attention": [(4 * rows, p.get("dim", 0))] + [(4 * p.get("kv_rows", 0), p.get("dim", 0))] * 2,
            }[schedule_path.stem]
    assert [x.shape for x in inputs] == want
    again = module.make_inputs(mesh, jax.random.key(0))
    assert all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(inputs, again))
    assert len(inputs) == 1 or not np.array_equal(np.asarray(inputs[0])[:4, :4], np.asarray(inputs[1])[:4, :4])


@pytest.mark.parametrize("stem", ["all_reduce_2d_bidirectional", "all_gather_2d", "all_reduce_3d_bidirectional"])
def test_a_multi_axis_module_defines_each_helper_once(stem):
    """A schedule over several axes with a barrier gets the multi-axis `_device` only (its
    barrier helper's own dependency is mapped to the variant too): no dead first definition."""
    import ast
    from ringc import load
    from ringc.codegen import emit
    tree = ast.parse(emit(load(REPO / "schedules" / f"{stem}.yaml")))
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)



GUARDED = """
name: guarded_past_the_end
collective: all_gather
params: {rows: 8, cols: 128, extra: 0}
buffers:
  x:   {kind: input,  shape: [rows, cols]}
  out: {kind: output, slots: N, shape: [rows, cols]}
semaphores:
  local_sem: dma
  send_sem: dma
  recv_sems: {kind: dma, shape: [N - 1]}
grid: {step: N - 1}
let:
  slot: (me - step) % N
copies:
  own:     {src: x, dst: "out[me]", sem: local_sem}
  again:   {src: "x[0:rows // 2]", dst: "out[me, rows // 2 + (1 - extra) * rows:rows // 2]", sem: local_sem}
  forward: {src: "out[slot]", dst: "out[slot]", to: right, send_sem: send_sem, recv_sem: "recv_sems[step]"}
body:
  - when: step == 0
    do:
      - start: own
      - wait: own
  - when: step == 0 and extra == 1   # never with extra = 0, where `again`'s rows start past `out`'s
    do:
      - start: again
      - wait: again
  - start: forward
  - wait: forward
"""


def test_a_guard_s_static_terms_keep_a_branch_that_never_runs_untraced():
    """A `when` of a grid index and a param: the param's term is a Python `if` around the
    `pl.when`, so the branch it rules out is not traced. Traced, its copy's static rows
    (rows // 2 + rows: 12 of `out`'s 8) are an "Out of bound slice" error of the trace, in
    a kernel `ringc check` proves: the branch never runs."""
    from ringc.run import run_schedule
    from ringc.verify.check import check
    sched = load_text(GUARDED, "guarded")
    assert check(sched, n=4).ok
    source = emit(sched)
    at = source.index("if extra == 1:")
    assert source[at:].split("\n")[1].strip() == "@pl.when(step == 0)", source[at:at + 200]
    result = run_schedule(sched, 4, seed=1)
    assert result.ok, result


NEVER = GUARDED.replace("step == 0 and extra == 1   # never with extra = 0, where `again`'s rows start past `out`'s",
                        "step == N   # never: step < N - 1")


def test_a_static_slice_past_its_buffer_in_a_branch_no_device_runs_is_refused_by_check():
    """`step == N` never holds, so no device runs the copy and the unroller never evaluates
    it; but the emitted kernel traces it (`pl.when` of a grid index), and its rows are
    static and past `out`: the trace fails. `ringc check` refuses it at the copy's line,
    not an ok for a kernel `ringc run` cannot trace; with a term of N ruling the branch
    out (`N < 0`: a Python `if`, not traced) it is ok, and it runs."""
    from ringc.errors import ScheduleError
    from ringc.run import run_schedule
    from ringc.verify.check import check
    assert NEVER != GUARDED
    with pytest.raises(ScheduleError, match=r"never:17: .*slice 12:4 \(start:size\) leaves dimension 1 of `out` "
                                            r"\(size 8\).*used at line 26.*emitted kernel traces"):
        check(load_text(NEVER, "never"), n=4)
    with pytest.raises(ValueError, match="Out of bound slice"):   # what check stands for
        run_schedule(load_text(NEVER, "never"), 4, seed=1)
    ruled_out = load_text(NEVER.replace("step == N", "step == N and N < 0"), "ruled_out")
    assert check(ruled_out, n=4).ok and run_schedule(ruled_out, 4, seed=1).ok


def test_ringc_run_refuses_a_static_slice_past_its_buffer_before_tracing(tmp_path, capsys):
    """`ringc run` unrolls what the devices run, not what the kernel traces: it holds the
    traced branches to their static slices first (`traced_indices`), one message with the
    line and exit 2, where the trace's ValueError was an internal error (exit 3)."""
    from ringc.cli import main
    path = tmp_path / "never.yaml"
    path.write_text(NEVER)
    assert main(["run", str(path), "--devices", "4"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:17: error:" in err and "slice 12:4 (start:size)" in err and "Traceback" not in err
