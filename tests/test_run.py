"""Generated kernels in Pallas TPU interpret mode against the lax reference."""

import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from conftest import without_runtime_data
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ringc import errors as ringc_errors
from ringc.ir.loader import load, load_text
from ringc.reference import apply_collective
from ringc.run import RunResult, ensure_host_devices, host_device_count, run_schedule
from ringc.testing import supported_size, supports

P = jax.sharding.PartitionSpec
REPO = Path(__file__).parent.parent


def check(result: RunResult) -> None:
    assert result.races_found is False, f"race in {result.name} on {result.devices} devices"
    assert result.max_abs_err <= result.tolerance, result
    assert result.ok


# ---------------------------------------------------------------------------- the library

@settings(max_examples=1, deadline=None, database=None)
@given(n=st.integers(2, 8))
@example(n=2)
@example(n=3)
def test_library_schedule_matches_lax(schedule_path, n):
    """Property: every library schedule equals lax on any ring size (a 2-D schedule: on one
    of the 8-device meshes), race-free."""
    if schedule_path.stem in FEW_SIZES:
        pytest.skip("run on few sizes by test_bandwidth_library_matches_lax (all under slow)")
    if schedule_path.stem in PROGRAMS:
        pytest.skip("a split-phase program: interpret mode cannot run it (test_split_phase checks the refusal)")
    check(run_library(schedule_path, n, seed=n))


# The bandwidth-bound library (issue 16) runs many transfers per step, 5-15 s per run in
# interpret mode: the default suite runs each on a ring of 2 (left = right) and of 4 (even:
# all_to_all_direct splits its half-way block), the 2-D and 3-D ones on a 2 x 2 (x 2) mesh;
# test_library_schedule_matches_lax_exhaustively (slow) runs them at N = 2..8.
FEW_SIZES = {"all_reduce_bidirectional": (2, 4), "reduce_scatter_chunked": (2, 4), "all_to_all_direct": (2, 4),
             "all_reduce_one_shot": (2, 4), "ppermute_bidirectional": (2, 4),
             "all_gather_hypercube": (2, 4),  # log2(N): powers of two only
             "all_reduce_2d_bidirectional": (0,), "all_reduce_3d_bidirectional": (0,),
             # issue 13: the same algorithm as a library neighbour (all_gather_bidirectional), at the
             # sizes the issue names; a 2-D one on the 2 x 2 mesh (the axis-tuple test runs all three)
             "all_gather_bidirectional_unrolled": (2, 3, 4), "reduce_scatter_hierarchical": (0,),
             # issue 13's transposed bfloat16 matmuls (nested pipelines, ~10 s a run): one size each;
             # their other default runs (a mesh axis, params) are under slow (SLOW_RUNS)
             "all_gather_matmul_t": (3,), "matmul_reduce_scatter_t": (2,),
             # the matmul and pipelined schedules (nested pipelines, 4-5 s a run): one odd size
             # each in the default suite, N = 2..8 under slow (test_..._exhaustively)
             "all_gather_matmul": (3,), "all_gather_matmul_bidirectional": (3,),
             "all_gather_matmul_streamed": (3,), "matmul_reduce_scatter": (3,),
             "reduce_scatter_pipelined": (3,), "reduce_scatter_bidirectional_overlapped": (3,)}
SLOW_RUNS = {"all_gather_matmul_t", "matmul_reduce_scatter_t", "all_reduce_3d_bidirectional",
             "all_gather_matmul_streamed"}


@pytest.mark.parametrize("stem, n", [(s, n) for s, sizes in FEW_SIZES.items() for n in sizes])
def test_bandwidth_library_matches_lax(stem, n):
    check(run_library(REPO / "schedules" / f"{stem}.yaml", n, seed=n))


@pytest.mark.slow
@pytest.mark.parametrize("n", range(2, 9))
def test_library_schedule_matches_lax_exhaustively(schedule_path, n):
    if schedule_path.stem in PROGRAMS:
        pytest.skip("a split-phase program: interpret mode cannot run it (test_split_phase checks the refusal)")
    if not supports(load(schedule_path), n):
        pytest.skip("defined for powers of two only")
    check(run_library(schedule_path, n))


# ---------------------------------------------------------------------------- meshes

MESHES_2D = [(2, 2), (2, 4), (4, 2)]  # the 8-CPU-device meshes with two axes
LIBRARY = without_runtime_data(sorted((REPO / "schedules").glob("*.yaml")))
# Split-phase programs (several pallas_calls): jax 0.10.2's interpret mode gives every call fresh
# semaphores, so `run_schedule` refuses them (tests/test_split_phase.py); `ringc check` decides them.
PROGRAMS = {p.stem for p in LIBRARY if load(p).kernels}
ONE_AXIS = [p.stem for p in LIBRARY if len(load(p).axes) == 1 and p.stem not in PROGRAMS]
TWO_AXES = [p.stem for p in LIBRARY if len(load(p).axes) == 2]
# Each one-axis schedule along one axis of one mesh (rotating), fast; all of them under slow.
ALONG = [((2, 4), "y"), ((4, 2), "x"), ((2, 4), "x"), ((4, 2), "y"), ((2, 2), "y")]


def run_library(path: Path, n: int, seed: int = 0) -> RunResult:
    """A library schedule on a ring of n devices, a 2-D one on MESHES_2D[n % 3], a 3-D one on
    the 2 x 2 x 2 mesh."""
    sched = load(path)
    if len(sched.axes) == 1:
        return run_schedule(sched, n, seed=seed)
    if len(sched.axes) == 3:
        return run_schedule(sched, 8, mesh_shape=(2, 2, 2), seed=seed)
    shape = MESHES_2D[n % len(MESHES_2D)]
    return run_schedule(sched, shape[0] * shape[1], mesh_shape=shape, seed=seed)


@pytest.mark.parametrize("shape", MESHES_2D, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("stem", TWO_AXES)
def test_two_axis_schedule_matches_lax_over_the_axis_tuple(stem, shape):
    """lax.psum / all_gather over ("x", "y"), on every 8-device mesh shape."""
    sched = load(REPO / "schedules" / f"{stem}.yaml")
    check(run_schedule(sched, shape[0] * shape[1], mesh_shape=shape, seed=sum(shape)))


@pytest.mark.parametrize("stem", [pytest.param(s, marks=pytest.mark.slow) if s in SLOW_RUNS else s for s in ONE_AXIS])
def test_one_axis_schedule_runs_along_an_axis_of_a_mesh(stem):
    """The other coordinate stays fixed: each row (or column) runs its own ring, and the
    result equals lax over that one axis."""
    shape, along = ALONG[ONE_AXIS.index(stem) % len(ALONG)]
    check(run_schedule(load(REPO / "schedules" / f"{stem}.yaml"), 8 if shape != (2, 2) else 4,
                       mesh_shape=shape, along=along))


@pytest.mark.slow
@pytest.mark.parametrize("shape, along", [((2, 4), "x"), ((2, 4), "y"), ((4, 2), "x"), ((4, 2), "y")])
@pytest.mark.parametrize("stem", ONE_AXIS)
def test_one_axis_schedule_runs_along_every_axis_of_every_mesh(stem, shape, along):
    check(run_schedule(load(REPO / "schedules" / f"{stem}.yaml"), 8, mesh_shape=shape, along=along))


def test_mesh_layout_names_the_other_axes():
    from ringc.run import mesh_layout
    ring = load(REPO / "schedules" / "all_gather_ring.yaml")
    assert mesh_layout(ring, (2, 4), "y") == (("y", "x"), {"x": 4})
    assert mesh_layout(ring, (2, 4), None) == (("x", "y"), {"x": 2})
    two = load(REPO / "schedules" / "all_gather_2d.yaml")
    assert mesh_layout(two, (4, 2), None) == (("x", "y"), {"x": 4, "y": 2})
    with pytest.raises(ringc_errors.ScheduleError, match="2 axes"):
        mesh_layout(two, (8,), None)


# ---------------------------------------------------------------------------- failures show

WRONG_WAY_PERMUTE = """
# Claims ppermute with shift 1 but sends to the left: wrong for N >= 3.
name: wrong_way_permute
collective: {kind: ppermute, shift: 1}
params: {rows: 8, cols: 128}
buffers:
  x:   {kind: input,  shape: [rows, cols]}
  out: {kind: output, shape: [rows, cols]}
semaphores: {send_sem: dma, recv_sem: dma}
grid: {step: 1}
copies:
  push: {src: x, dst: out, to: left, send_sem: send_sem, recv_sem: recv_sem}
body:
  - start: push
  - wait: push
"""

RACY_PERMUTE = """
# Zeroes its output while the left neighbour's DMA may be writing it: the right answer
# (the DMA lands last in interpret mode), but a race.
name: racy_permute
collective: ppermute
params: {rows: 8, cols: 128}
buffers:
  x:   {kind: input,  shape: [rows, cols], space: vmem}
  out: {kind: output, shape: [rows, cols], space: vmem}
semaphores: {send_sem: dma, recv_sem: dma}
grid: {step: 1}
copies:
  push: {src: x, dst: out, to: right, send_sem: send_sem, recv_sem: recv_sem}
body:
  - start: push
  - zero: out
  - wait: push
"""


def test_wrong_schedule_is_caught():
    result = run_schedule(load_text(WRONG_WAY_PERMUTE), 3)
    assert not result.ok
    assert result.max_abs_err > 1.0 > result.tolerance
    assert result.races_found is False
    # On two devices left is right: the same schedule is correct there.
    check(run_schedule(load_text(WRONG_WAY_PERMUTE), 2))


def test_all_reduce_missing_a_step_is_caught():
    text = (REPO / "schedules" / "all_reduce_ring.yaml").read_text()
    assert "grid: {step: N}" in text
    broken = load_text(text.replace("grid: {step: N}", "grid: {step: N - 1}"), "broken.yaml")
    result = run_schedule(broken, 4)
    assert not result.ok and result.max_abs_err > 100 * result.tolerance


def test_race_is_reported():
    result = run_schedule(load_text(RACY_PERMUTE), 3)
    assert result.races_found is True
    assert result.max_abs_err <= result.tolerance
    assert not result.ok
    off = run_schedule(load_text(RACY_PERMUTE), 3, detect_races=False)
    assert off.races_found is None and off.ok


# ---------------------------------------------------------------------------- codegen corners

def test_static_guards_work_under_pl_when():
    """Guards over N and params only are Python bools, decided at trace time."""
    schedule = load_text("""
name: static_guards
collective: ppermute
params: {rows: 8, cols: 128}
buffers:
  x:   {kind: input,  shape: [rows, cols], space: vmem}
  out: {kind: output, shape: [rows, cols], space: vmem}
  tmp: {kind: vmem_scratch, shape: [rows, cols]}
semaphores: {send_sem: dma, recv_sem: dma}
grid: {step: 1}
let: {big: N > 1 and rows >= 8}
copies:
  push: {src: tmp, dst: out, to: right, send_sem: send_sem, recv_sem: recv_sem}
body:
  - when: big and not (N == 1)
    do:
      - assign: tmp
        src: x
  - when: N == 1 or rows < 0
    do:
      - zero: tmp
  - when: min(N, 2) == 2 and max(rows, 1) == rows
    do:
      - start: push
      - wait: push
""")
    for n in (2, 3):
        check(run_schedule(schedule, n))


def test_regions_and_renamed_names_run():
    """Slices with omitted start/size, `:`, slots, local signals and clashing names."""
    schedule = load_text("""
name: regions
collective: ppermute
params: {rows: 8, len: 128}
buffers:
  input: {kind: input,  shape: [rows, len], space: vmem}
  pl:    {kind: output, shape: [rows, len]}
  sum:   {kind: vmem_scratch, slots: 2, shape: [rows, len]}
semaphores: {lax: dma, recv_sem: dma, local: dma, flag: regular}
grid: {step: 1}
let: {half: rows // 2}
copies:
  top:    {src: "sum[1, :half]", dst: "pl[0:half, :]", to: right, send_sem: lax, recv_sem: recv_sem}
  bottom: {src: "sum[1, half:]", dst: "pl[half:, 0:len]", to: right, send_sem: lax, recv_sem: recv_sem}
body:
  - zero: "sum[0]"
  - assign: "sum[1]"
    src: input
  - accumulate: "sum[1, half:, :]"
    src: "sum[0, :half]"
  - signal: flag
  - sem_wait: flag
  - start: top
  - wait: top
  - start: bottom
  - wait: bottom
""")
    check(run_schedule(schedule, 3))


def test_params_override(schedule_path):
    if schedule_path.stem in SLOW_RUNS:
        pytest.skip("under slow: test_params_override_slow")
    params_override(schedule_path)


@pytest.mark.slow
@pytest.mark.parametrize("stem", sorted(SLOW_RUNS))
def test_params_override_slow(stem):
    params_override(REPO / "schedules" / f"{stem}.yaml")


def params_override(schedule_path: Path) -> None:
    schedule = load(schedule_path)
    if schedule.kernels:
        pytest.skip("a split-phase program: interpret mode cannot run it (test_split_phase checks the refusal)")
    name = "rows" if "rows" in schedule.params else "block"
    doubled = {name: 2 * schedule.params[name]}
    if len(schedule.axes) == 1:
        check(run_schedule(schedule, supported_size(schedule, 3), params=doubled))
    elif len(schedule.axes) == 3:
        check(run_schedule(schedule, 8, params=doubled, mesh_shape=(2, 2, 2)))
    else:
        check(run_schedule(schedule, 4, params=doubled, mesh_shape=(2, 2)))


# ---------------------------------------------------------------------------- the reference

def test_reference_table():
    """Each lax call means what the reference's table says, on per-device x[d][i, j]."""
    n = 4
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:n]), ("x",))
    x = np.array([[[100 * d + 10 * i + j for j in range(3)] for i in range(n)] for d in range(n)],
                 dtype=np.float32)  # x[d] is device d's (n, 3) array

    def run(kind, **kw):
        fn = jax.shard_map(lambda v: apply_collective(kind, v[0], "x", n, **kw)[None], mesh=mesh,
                           in_specs=P("x"), out_specs=P("x"))
        return np.asarray(jax.jit(fn)(x))

    for shift in (1, 3):
        got = run("ppermute", shift=shift)
        assert all(np.array_equal(got[(d + shift) % n], x[d]) for d in range(n))
    got = run("all_gather")
    assert all(np.array_equal(got[d], x) for d in range(n))
    got = run("psum")
    assert all(np.array_equal(got[d], x.sum(0)) for d in range(n))
    got = run("psum_scatter")
    assert all(np.array_equal(got[d], x[:, d].sum(0)) for d in range(n))
    got = run("all_to_all")
    assert all(np.array_equal(got[d][j], x[j][d]) for d in range(n) for j in range(n))


# ---------------------------------------------------------------------------- devices

def test_too_few_devices_is_a_clear_error():
    schedule = load(REPO / "schedules" / "ppermute_right.yaml")
    with pytest.raises(RuntimeError, match="XLA_FLAGS=--xla_force_host_platform_device_count=11"):
        run_schedule(schedule, 10)


def test_host_device_count_leaves_a_spare():
    assert [host_device_count(n) for n in (1, 7, 8, 12)] == [8, 8, 9, 13]


def test_ensure_host_devices_after_import_changes_nothing():
    before = dict(os.environ)
    assert ensure_host_devices(16) is False
    assert dict(os.environ) == before


def test_ensure_host_devices_before_import():
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    code = ("from ringc.run import ensure_host_devices; assert ensure_host_devices(12); "
            "import jax; print(len(jax.devices()), jax.devices()[0].platform)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    # One spare device: interpret mode can deadlock when a kernel uses every host device.
    assert out.stdout.split() == ["13", "cpu"]


@pytest.mark.parametrize("stem, shape", [("all_reduce_2d_bidirectional", (2, 2)), pytest.param(
    "all_reduce_3d_bidirectional", (2, 2, 2), marks=pytest.mark.slow)])
def test_pipelined_torus_all_reduces_match_lax(stem, shape):
    """The streamed 2-D and 3-D all-reduces with two pieces (16 rows): the software-pipelined
    program, not only the default one-piece one, equals lax.psum in interpret mode."""
    sched = load(REPO / "schedules" / f"{stem}.yaml", params={"rows": 16})
    check(run_schedule(sched, int(np.prod(shape)), mesh_shape=shape, seed=1))
