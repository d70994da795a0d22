"""The Mosaic GPU front end (`ringc/pallas/mgpu.py`): multi-GPU kernels checked on CPU.

JAX's three shipped collective kernels (`jax/experimental/pallas/ops/gpu/`, read from the
installed jax, not copied) with the real H100 SM count, the planted bugs of
tests/pallas_import/mgpu/manifest.yaml, the model's own waits against the explorer (the
oracle), and `ringc check` on a shipped file as published."""

from __future__ import annotations

import dataclasses
import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

from ringc.pallas.importer import check_file, check_pallas  # noqa: E402
from ringc.pallas import mgpu  # noqa: E402
from ringc.verify.events import SemWait  # noqa: E402

HERE = Path(__file__).parent / "pallas_import" / "mgpu"
MANIFEST = yaml.safe_load((HERE / "manifest.yaml").read_text())
sys.path.insert(0, str(HERE))
import ring_kernels as rk  # noqa: E402

SMS = 132  # an H100's SMs: the shipped kernels' default grid


def _mesh(n: int):
    if len(jax.devices()) < n:
        pytest.skip(f"needs {n} CPU devices")
    return jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])


def _check(fn, n: int, rows: int, collective: str | None, **kw):
    mesh = _mesh(n)
    f = jax.shard_map(fn, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    x = jax.ShapeDtypeStruct((n * rows, 128), jnp.float32, sharding=NamedSharding(mesh, P("x")))
    return check_pallas(f, (x,), mesh, collective, **kw)


def _shipped(name: str):
    from jax.experimental.pallas.ops.gpu import all_gather_mgpu, reduce_scatter_mgpu
    return {"all_gather": all_gather_mgpu, "reduce_scatter": reduce_scatter_mgpu}[name]


@pytest.mark.parametrize("n", [2, 4])
def test_shipped_all_gather_is_clean_with_its_meaning(n):
    ag = _shipped("all_gather")
    r = _check(functools.partial(ag.all_gather, axis_name="x", num_blocks=SMS), n, 256, "all_gather")
    assert r.ok, r.to_text()
    assert r.program.device_count == n and r.program.n == n + n * SMS
    assert not any("COLLECTIVE is None" in a for a in r.assumptions)
    assert any("132 blocks" in a for a in r.assumptions)


@pytest.mark.parametrize("n,mode,collective", [(2, 0, "psum_scatter"), (4, 0, "psum_scatter"), (4, None, "psum")])
def test_shipped_reduce_scatter_and_all_reduce(n, mode, collective):
    rs = _shipped("reduce_scatter")
    fn = functools.partial(rs.reduce_scatter, axis_name="x", num_blocks=SMS, scatter_dimension=mode)
    r = _check(fn, n, n * 128, collective)
    assert r.ok, r.to_text()


def test_the_meaning_is_checked():
    """The all-reduce kernel is not an all-gather: the meaning check must say so."""
    rs = _shipped("reduce_scatter")
    fn = functools.partial(rs.reduce_scatter, axis_name="x", num_blocks=4, scatter_dimension=0)
    r = _check(fn, 2, 256, "all_gather")
    assert not r.ok and "wrong_result" in r.kinds(), r.to_text()


@pytest.mark.slow
@pytest.mark.parametrize("which", ["all_gather", "reduce_scatter", "all_reduce"])
def test_shipped_kernels_at_8_gpus(which):
    if which == "all_gather":
        r = _check(functools.partial(_shipped("all_gather").all_gather, axis_name="x", num_blocks=SMS), 8, 256,
                   "all_gather")
    else:
        dim = 0 if which == "reduce_scatter" else None
        r = _check(functools.partial(_shipped("reduce_scatter").reduce_scatter, axis_name="x", num_blocks=SMS,
                                     scatter_dimension=dim), 8, 8 * 128, "psum_scatter" if dim == 0 else "psum")
    assert r.ok, r.to_text()


@pytest.mark.parametrize("n", [2, 3, 4])
def test_ring_all_gather_is_clean(n):
    fn = functools.partial(rk.ring_all_gather, axis_name="x", num_blocks=2)
    r = _check(fn, n, 2 * 32, "all_gather")
    assert r.ok, r.to_text()


@pytest.mark.parametrize("case", MANIFEST["cases"], ids=lambda c: c["bug"])
def test_planted_bug_is_caught_with_its_kind_and_line(case):
    n, blocks = MANIFEST["devices"], MANIFEST["blocks"]
    if case["bug"] == "no_exit_barrier":
        fn = functools.partial(rk.multimem_all_gather, axis_name="x", num_blocks=blocks, exit_barrier=False)
    else:
        fn = functools.partial(rk.ring_all_gather, axis_name="x", num_blocks=blocks, bug=case["bug"])
    r = _check(fn, n, blocks * 32, "all_gather")
    assert not r.ok
    found = {(f["kind"], f["line"], os.path.basename(f["file"])) for f in r.to_json()["findings"]}
    assert (case["kind"], case["line"], "ring_kernels.py") in found, r.to_text()


def test_missing_exit_barrier_races_across_two_calls():
    fn = functools.partial(rk.multimem_all_gather, axis_name="x", num_blocks=2, exit_barrier=False)
    assert "race" in _check(fn, 2, 64, "all_gather", invocations=2).kinds()
    fn = functools.partial(rk.multimem_all_gather, axis_name="x", num_blocks=2, exit_barrier=True)
    r = _check(fn, 2, 64, "all_gather", invocations=2)
    assert r.ok, r.to_text()


def test_threshold_waits_agree_with_the_explorer():
    """The oracle (`verify/explore.py`) and the verifier agree on a small ring, clean and broken."""
    from jax.experimental.pallas.ops.gpu import all_gather_mgpu  # noqa: F401 - importable
    from ringc.verify.explore import explore
    for bug, want_race, want_hang in ((None, False, False), ("shared_count", True, False),
                                      ("drop_signal", False, True)):
        fn = functools.partial(rk.ring_all_gather, axis_name="x", num_blocks=2, bug=bug)
        r = _check(fn, 3, 64, None)
        program = r.program
        assert any(isinstance(e.action, SemWait) and not e.action.decrement for evs in program.devices for e in evs)
        got = explore(program, max_states=2_000_000)
        assert got.complete
        assert got.race == want_race == ("race" in r.kinds()), (bug, got.summary(), r.to_text())
        assert got.hang == want_hang == ("hang" in r.kinds()), (bug, got.summary(), r.to_text())


def test_the_docs_list_the_gpu_rules_from_the_table():
    doc = (Path(__file__).parent.parent / "docs" / "pallas-import.md").read_text()
    assert mgpu.rule_table_markdown() in doc


def test_ringc_check_on_the_shipped_file_as_published(tmp_path):
    from jax.experimental.pallas.ops.gpu import all_gather_mgpu
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-m", "ringc", "check", all_gather_mgpu.__file__, "--devices", "4"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "N=4 (528 block processes)" in out.stdout and ": ok" in out.stdout, out.stdout
    assert "devices answer as NVIDIA H100" in out.stdout and "core_count" in out.stdout


def _matmul(kernel: str, n: int, sms: int, m: int, collective: str | None = None):
    """An all-gather matmul (JAX's shipped one, or the seed's) on n GPUs of `sms` SMs, its
    meaning `collective` checked (None: hangs, balance, races and unwritten memory only)."""
    from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hm
    if kernel == "shipped":
        from jax.experimental.pallas.ops.gpu import collective_matmul_mgpu as module
    else:
        import seed_collective_matmul as module
    from ringc.pallas.tpu import GPUS, answering
    mesh = _mesh(n)
    cfg = hm.TuningConfig(tile_m=64, tile_n=64, tile_k=64, max_concurrent_steps=2,
                          grid_minor_dim=hm.MatmulDimension.M, grid_tile_width=1, wg_dimension=hm.MatmulDimension.N)
    fn = functools.partial(module.all_gather_lhs_matmul, axis_name="x", config=cfg, dtype=jnp.float16)
    f = jax.shard_map(fn, mesh=mesh, in_specs=(P("x", None), P(None, "x")), out_specs=P(None, "x"), check_vma=False)
    a = jax.ShapeDtypeStruct((n * m, 128), jnp.float16, sharding=NamedSharding(mesh, P("x", None)))
    b = jax.ShapeDtypeStruct((128, n * 128), jnp.float16, sharding=NamedSharding(mesh, P(None, "x")))
    gpu = dataclasses.replace(GPUS["h100"], sms=sms)
    saved = jax.device_count, jax.process_count
    jax.device_count = jax.process_count = lambda: n  # one host owning n GPUs, as ringc runs a script
    try:
        with answering(gpu, n, module.__file__):
            return check_pallas(f, (a, b), mesh, collective)
    finally:
        jax.device_count, jax.process_count = saved


def test_the_shipped_matmul_checked_for_its_meaning_is_not_followed_through_tiled_smem_not_wrong():
    """Sweep 13: with its meaning (`--collective all_gather_matmul`) JAX's collective matmul
    was reported wrong. Its epilogue stores each tile into tiled SMEM (values not followed)
    and a TMA copies the tiles to GMEM; the copy paired the regions' dims one by one, tile
    indices with the array's rows and columns ([8, 1, 8, 64] onto [64, 64]), so a tile's
    value landed on a sliver and the rest read as uninitialized. A copy between regions of
    different ranks now leaves its destination not followed: no finding, and the verdict
    says the output's meaning is not checked where it holds that value."""
    r = _matmul("shipped", 2, 3, 64, "all_gather_matmul")
    assert r.ok, r.to_text()
    assert any(a.startswith("not followed: a copy between layouts: `smem@") for a in r.assumptions), r.assumptions


@pytest.mark.parametrize("case", MANIFEST["matmul_cases"],
                         ids=lambda c: f"{c['kernel']}-N{c['devices']}-sms{c['sms']}-m{c['m']}")
def test_all_gather_matmuls(case):
    r = _matmul(case["kernel"], case["devices"], case["sms"], case["m"])
    if case.get("ok"):
        assert r.ok, r.to_text()
        return
    found = {(f["kind"], f["line"], os.path.basename(f["file"])) for f in r.to_json()["findings"]}
    assert (case["kind"], case["line"], case["file"]) in found, r.to_text()


@pytest.mark.parametrize("build", ["ring", "shared_count", "matmul"])
def test_the_block_quotient_order_is_the_full_order(build):
    """`order.BlockOrder` (one pass per class of interchangeable blocks) answers every
    must-happen-before question as the pass per process does."""
    import random
    from ringc.verify.order import BlockOrder, compute_order
    if build == "matmul":
        program = _matmul("shipped", 3, 3, 64).program
    else:
        fn = functools.partial(rk.ring_all_gather, axis_name="x", num_blocks=4,
                               bug="shared_count" if build == "shared_count" else None)
        program = _check(fn, 3, 4 * 32, None).program
    quick, full = compute_order(program), compute_order(program, use_symmetry=False)
    assert isinstance(quick, BlockOrder) and not isinstance(full, BlockOrder)
    assert len(quick.rows) < program.n  # some blocks share a row
    events = [ev for evs in program.devices for ev in evs]
    rng = random.Random(0)
    pairs = [(rng.choice(events), rng.choice(events)) for _ in range(20_000)]
    assert [quick.before(e, f) for e, f in pairs] == [full.before(e, f) for e, f in pairs]


def test_a_script_names_the_meaning_with_its_lax_reference():
    """A user's script: JAX's shipped all-gather, then lax.all_gather on the same input. The
    reference names the meaning, which is checked (with the real SM count)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-m", "ringc", "check", str(HERE / "all_gather_script.py"), "--devices", "4"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "meaning: all_gather, from the lax reference" in out.stdout and "528 block processes" in out.stdout


def _cli(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-m", "ringc", "check", *argv], capture_output=True, text=True, env=env,
                          timeout=600)


def test_an_entry_taking_a_tuning_config_is_built_from_params():
    """An entry whose `config` is a dataclass with no default (JAX's collective matmul takes a
    TuningConfig): one message naming the --param to give; given, the kernel is checked; a
    field or an Enum member that does not exist is refused in one line."""
    path = str(HERE / "configured.py")
    out = _cli(path, "--devices", "2")
    assert out.returncode == 2 and "--param config.num_blocks=V" in out.stderr and "Traceback" not in out.stderr
    out = _cli(path, "--devices", "3", "--param", "config.num_blocks=2", "--param", "config.order=BACKWARD")
    assert out.returncode == 0 and "order=<Order.BACKWARD" in out.stdout and ": ok" in out.stdout, out.stdout + out.stderr
    out = _cli(path, "--devices", "2", "--param", "config.num_blocks=2", "--param", "config.rows=4")
    assert out.returncode == 2 and "Config has no field `rows`" in out.stderr
    out = _cli(path, "--devices", "2", "--param", "config.num_blocks=2", "--param", "config.order=SIDEWAYS")
    assert out.returncode == 2 and "not an Order member" in out.stderr, out.stderr


def test_a_kernel_too_big_to_check_is_refused_early(monkeypatch):
    """The events of a Mosaic GPU call are estimated from its first block and held to the limit
    `gpu_events` (one message, no run out of memory)."""
    from ringc import limits
    from ringc.errors import ScheduleError
    monkeypatch.setitem(limits._overrides, "gpu_events", 1_000)
    with pytest.raises(ScheduleError, match="over the limit `gpu_events`") as e:
        _check(functools.partial(_shipped("all_gather").all_gather, axis_name="x", num_blocks=SMS), 2, 256, None)
    assert "x 132 blocks x 2 GPUs" in str(e.value)


def test_the_meaning_named_with_collective_on_a_published_file():
    """`--collective KIND` names the meaning of a module's entry kernel: JAX's reduce-scatter is a
    psum_scatter (ok) and not an all_gather (wrong_result); an unknown kind is one message."""
    from jax.experimental.pallas.ops.gpu import reduce_scatter_mgpu
    out = _cli(reduce_scatter_mgpu.__file__, "--devices", "4", "--collective", "psum_scatter")
    assert out.returncode == 0 and "meaning: psum_scatter, from --collective" in out.stdout, out.stdout + out.stderr
    out = _cli(reduce_scatter_mgpu.__file__, "--devices", "4", "--collective", "all_gather")
    assert out.returncode == 1 and "[wrong_result]" in out.stdout
    out = _cli(reduce_scatter_mgpu.__file__, "--devices", "4", "--collective", "gather")
    assert out.returncode == 2 and "not a collective ringc knows" in out.stderr and "psum_scatter" in out.stderr


@pytest.mark.parametrize("flag, value", [("--collective", "psum"), ("--gpu", "h100"), ("--test", "test_small"),
                                         ("--skip-test", "test_big")])
def test_python_only_flags_are_refused_on_a_schedule(capsys, flag, value):
    from ringc.cli import main
    schedule = str(Path(__file__).parent.parent / "schedules" / "ppermute_right.yaml")
    assert main(["check", schedule, "--devices", "2", flag, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{schedule}: error: {flag} names") and err.count("\n") == 2


def test_warp_level_code_is_refused_as_warp_level():
    """A `core_map` over `plgpu.WarpMesh` is warp specialisation inside a `plgpu.kernel`: the
    refusal says warps are not modelled, at the core_map's line, not to launch the kernel with
    plgpu.kernel (it is)."""
    from ringc.pallas import check_file
    path = HERE / "warp_signal.py"
    (report,) = check_file(str(path), 2)
    text = report.to_text()
    line = next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if "@pl.core_map" in ln)
    assert not report.ok and f"warp_signal.py:{line}: error: `core_map` over plgpu.WarpMesh" in text, text
    assert "launch the kernel with plgpu.kernel" not in text


BOTH_BLOCKS_STORE = '''
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.sharding import PartitionSpec as P


def kernel(x_ref, o_ref):
    o_ref[0, 0] = 1.0   # every block stores the flag


call = plgpu.kernel(kernel, out_type=jax.ShapeDtypeStruct((8, 128), jnp.float32), grid=(2,), grid_names=("b",))
mesh = jax.sharding.Mesh(jax.devices()[:2], ["x"])
x = jnp.zeros((16, 128), jnp.float32)
y = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))(x)
'''


def test_a_race_between_two_blocks_stores_says_they_are_stores(tmp_path):
    """Two blocks storing the same flag (marin's spike_transport_mgpu.py `done_ref[0] = 1`): a
    race, each side "a store writes it" (it read "`opaque` computes into it")."""
    from ringc.pallas import check_file
    path = tmp_path / "both_blocks.py"
    path.write_text(BOTH_BLOCKS_STORE)
    (report,) = check_file(str(path), 2)
    text = report.to_text()
    assert report.kinds() == {"race"} and "a store writes it from device 0 block 1 (line 10)" in text, text
    assert "opaque" not in text


def test_a_multi_process_test_module_runs_its_tests_with_a_process_per_gpu(tmp_path):
    """JAX's 0.7-0.9 distributed GPU tests run under `jt_multiprocess.main()` with one process
    per GPU, and ask the removed `mgpu.supports_cross_device_collectives()`: ringc runs their
    tests, answers `process_count()` as N (and says so) and the removed helper as True; the
    broken variant (signal before the store) is a race."""
    path = HERE / "multiprocess_style.py"
    report, = check_file(str(path), 3)
    assert report.ok, report.to_text()
    assert any("jax.process_count() answered 3" in a for a in report.assumptions), report.assumptions
    assert "supports_cross_device_collectives" in report.to_text()
    broken = tmp_path / "multiprocess_style.py"
    broken.write_text(path.read_text().replace("BROKEN = False", "BROKEN = True"))
    bad, = check_file(str(broken), 3)
    assert "race" in bad.kinds(), bad.to_text()


def test_a_mosaic_gpu_pallas_call_is_a_launch_of_its_grids_blocks(tmp_path):
    """JAX's 0.8-0.9 distributed GPU tests write Mosaic GPU kernels as `pl.pallas_call` (whole
    GMEM operands, semaphores in scratch_shapes, often no compiler params): each grid point
    is a block (`pl.program_id` its index), each block's semaphore its own. It was refused
    as "one GPU's kernel", or checked as a TPU kernel. The broken variant races; a BlockSpec
    that pipelines blocks through SMEM is refused at the call."""
    path = HERE / "pallas_call_style.py"
    report, = check_file(str(path), 3)
    assert report.ok, report.to_text()
    assert "(6 block processes)" in report.to_text().splitlines()[0]
    broken = tmp_path / "pallas_call_style.py"
    broken.write_text(path.read_text().replace("BROKEN = False", "BROKEN = True"))
    bad, = check_file(str(broken), 3)
    assert "race" in bad.kinds(), bad.to_text()
    blocked = tmp_path / "blocked.py"
    blocked.write_text(path.read_text().replace("in_specs=[pl.BlockSpec(memory_space=plgpu.GMEM)]",
                                                "in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))]"))
    refused, = check_file(str(blocked), 3)
    assert "pipelines blocks through SMEM" in refused.to_text(), refused.to_text()
