"""`ringc compile`: every library schedule compiles with the real TPU compiler (libtpu, no
TPU), its memory figures are the compiler's and add up, and schedules only the compiler
can reject (tests/broken_compile/) fail with an error in schedule terms."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from math import prod
from pathlib import Path

import pytest
import yaml

import ringc
from conftest import line_of
from ringc.compile.errors import KINDS
from ringc.ir.dtypes import itemsize
from ringc.verify.unroll import unroll

if importlib.util.find_spec("libtpu") is None:
    pytest.skip("libtpu is not installed (pip install -e '.[tpu]')", allow_module_level=True)

from ringc.compile import target_devices  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
BROKEN_DIR = REPO / "tests" / "broken_compile"
MANIFEST = yaml.safe_load((BROKEN_DIR / "expected.yaml").read_text())

# target -> devices it has: one per chip, except v4's compile-only topology, which exposes
# each of a chip's two TensorCores as a device.
TARGETS = {"v5e:2x2": 4, "v5p:2x2x1": 4, "v4:2x2x1": 8, "v6e:2x2": 4}


def _sizes(sched: ringc.Schedule, target: str) -> dict[str, int] | None:
    """Devices along each axis of a multi-axis schedule: the target's chip grid."""
    if len(sched.axes) == 1:
        return None
    dims = [int(d) for d in target.split(":")[1].split("x")]
    return dict(zip(sched.axes, dims))


def _bytes(sched: ringc.Schedule, kind: str, n: int, sizes: dict[str, int] | None = None) -> int:
    shapes = unroll(sched, None if sizes else n, sizes=sizes).shapes
    return sum(prod(shapes[name]) * itemsize(sched.dtype_of(name))
               for name, b in sched.buffers.items() if b.kind == kind)


def ringc_cli(*args: str) -> subprocess.CompletedProcess:
    """`python -m ringc ...` in a plain environment, as a user would run it: without the
    settings `quiet_libtpu` has put into this process's environment, and JAX_PLATFORMS."""
    quiet = {"RINGC_DEBUG", "JAX_PLATFORMS", "GRPC_VERBOSITY", "ALLOW_MULTIPLE_LIBTPU_LOAD"}
    env = {k: v for k, v in os.environ.items() if k not in quiet and not k.startswith("TPU_")}
    return subprocess.run([sys.executable, "-m", "ringc", *map(str, args)], capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=300)


# ---------------------------------------------------------------------------- library


@pytest.mark.parametrize("target", TARGETS)
def test_library_schedule_compiles(schedule_path, target):
    sched = ringc.load(schedule_path)
    if len(sched.axes) == 3 and target.count("x") == 1:
        with pytest.raises(ringc.ScheduleError, match="has 2 axes"):
            ringc.compile_for(sched, target)
        return
    if len(sched.axes) > 1 and TARGETS[target] != 4:
        with pytest.raises(ringc.ScheduleError, match="cannot follow the chip grid"):
            ringc.compile_for(sched, target)
        return
    res = ringc.compile_for(sched, target)
    assert res.ok, str(res.error)
    n = TARGETS[target]
    assert res.devices == n and res.error is None and res.raw_error is None
    assert res.lower_seconds > 0 and res.compile_seconds > 0
    mem = res.memory
    # Per device: the compiler's argument and output sizes are exactly the schedule's
    # inputs and outputs at this N.
    sizes = _sizes(sched, target)
    assert mem["hbm_argument"] == _bytes(sched, "input", n, sizes)
    assert mem["hbm_output"] == _bytes(sched, "output", n, sizes)
    assert mem["generated_code"] > 0
    # The kernel's scoped VMEM holds at least its VMEM scratch.
    assert mem["vmem_scoped"] >= _bytes(sched, "vmem_scratch", n, sizes)


def test_target_devices_are_the_slice():
    for target, n in TARGETS.items():
        devices = target_devices(target)
        assert len(devices) == n
        assert [d.id for d in devices] == sorted(d.id for d in devices)
        assert all(d.platform == "tpu" for d in devices)
    assert {d.device_kind for d in target_devices("v5e:2x2")} == {"TPU v5 lite"}
    # smaller than a host's block of chips
    assert len(target_devices("v5e:1x1")) == 1


def test_param_override_changes_the_compiled_sizes():
    sched = ringc.load(REPO / "schedules" / "ppermute_right.yaml")
    small = ringc.compile_for(sched, "v5e:2x2")
    big = ringc.compile_for(sched, "v5e:2x2", rows=64)
    assert big.ok and small.ok
    assert big.memory["hbm_argument"] == 8 * small.memory["hbm_argument"] == 64 * 128 * 4


def test_unknown_param_and_target_are_bad_input():
    sched = ringc.load(REPO / "schedules" / "ppermute_right.yaml")
    with pytest.raises(ringc.ScheduleError, match="unknown parameter 'rowz'") as e:
        ringc.compile_for(sched, "v5e:2x2", rowz=16)
    assert e.value.line and e.value.fix
    for bad in ("v7:2x2", "v5e:3x3", "nonsense"):
        with pytest.raises(ringc.ScheduleError) as e:
            ringc.compile_for(sched, bad)
        assert e.value.file == sched.file and "v5e:2x2" in e.value.fix


def test_shape_that_does_not_divide_for_the_target_is_located(tmp_path):
    # rows // N divides for N = 4 (v5e:2x2) but not for N = 8 (v4:2x2x1)
    text = (REPO / "schedules" / "ppermute_right.yaml").read_text()
    text = text.replace("params: {rows: 8, cols: 128}", "params: {rows: 12, cols: 128}")
    assert text.count("shape: [rows, cols]") == 2
    text = text.replace("shape: [rows, cols]", "shape: [rows // N, cols]")
    path = tmp_path / "divides.yaml"
    path.write_text(text)
    sched = ringc.load(path)
    assert ringc.compile_for(sched, "v5e:2x2").ok
    with pytest.raises(ringc.ScheduleError, match="does not divide") as e:
        ringc.compile_for(sched, "v4:2x2x1")
    assert e.value.line == line_of(text, "x:   {kind: input")


# ---------------------------------------------------------------------------- broken


def test_manifest_lists_exactly_the_corpus():
    files = {p.name for p in BROKEN_DIR.glob("*.yaml")} - {"expected.yaml"}
    assert files == set(MANIFEST)
    for name, entry in MANIFEST.items():
        assert set(entry) <= {"devices", "target", "kind", "at", "mentions", "fixed_by"}, name
        assert entry["kind"] in KINDS and entry["devices"] == len(target_devices(entry["target"]))


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_broken_schedule_passes_check_but_not_the_compiler(name):
    entry = MANIFEST[name]
    path = BROKEN_DIR / name
    sched = ringc.load(path)
    # only the compiler can find these
    assert ringc.check(sched, entry["devices"]).ok
    res = ringc.compile_for(sched, entry["target"])
    assert not res.ok and res.memory == {}
    err = res.error
    assert err.kind == entry["kind"], str(err)
    assert err.file == str(path) and err.line == line_of(path.read_text(), entry["at"]), str(err)
    for text in entry["mentions"]:
        assert text in err.message, f"{text!r} not in {err.message!r}"
    assert err.fix and len(err.fix) > 20
    # schedule terms, not a compiler dump; the dump is kept for --verbose
    for noise in ("MLIR", "memref<", "%", "Traceback", "Please report", "custom-call"):
        assert noise not in str(err), str(err)
    assert res.raw_error and len(res.raw_error) > len(err.message) // 4


@pytest.mark.parametrize("name", sorted(n for n, e in MANIFEST.items() if "fixed_by" in e))
def test_the_suggested_fix_compiles(name):
    entry = MANIFEST[name]
    sched = ringc.load(BROKEN_DIR / name)
    err = ringc.compile_for(sched, entry["target"]).error
    suggested = dict(re.findall(r"--param (\w+)=(\d+)", err.fix))
    assert {k: int(v) for k, v in suggested.items()} == entry["fixed_by"], err.fix
    fixed = ringc.compile_for(sched, entry["target"], **entry["fixed_by"])
    assert fixed.ok, str(fixed.error)


def test_dma_dtype_mismatch_is_explained(tmp_path):
    # `check` accepts a DMA from a float32 buffer into a bfloat16 one (it should not: a DMA
    # moves bytes); the compiler refuses, and the error names both buffers.
    text = (REPO / "schedules" / "all_reduce_ring.yaml").read_text()
    text = text.replace("receive: {kind: vmem_scratch, shape: [rows, cols]}",
                        "receive: {kind: vmem_scratch, shape: [rows, cols], dtype: bfloat16}")
    path = tmp_path / "mismatch.yaml"
    path.write_text(text)
    res = ringc.compile_for(ringc.load(path), "v5e:2x2")
    assert not res.ok and res.error.kind == "dtype_mismatch"
    assert res.error.line == line_of(text, "- start: load")
    assert "float32 `scratch[working]` into bfloat16 `receive`" in res.error.message


def test_streamed_all_reduce_compiles_at_256_mib_with_the_vmem_the_cost_model_counts():
    """The library's bandwidth-optimal all-reduce keeps its arrays in HBM and adds through
    pipeline blocks: 256 MiB per device compiles for v5e, and the scoped VMEM the compiler
    reports is exactly `ringc cost`'s count (three double-buffered blocks)."""
    from ringc.cost.model import vmem_need
    sched = ringc.load(REPO / "schedules" / "all_reduce_bidirectional.yaml", params={"rows": 131072})
    assert _bytes(sched, "input", 4) == 256 * 2**20
    res = ringc.compile_for(sched, "v5e:2x2")
    assert res.ok, str(res.error)
    assert res.memory["vmem_scoped"] == vmem_need(sched, unroll(sched, 4).shapes) == 3 * 2 * 512 * 128 * 4


@pytest.mark.parametrize("block, plain", [(11, 28160), (3, 7680), (20, 51200)])
def test_the_cost_models_vmem_is_the_compilers_in_whole_tiles(block, plain):
    """all_reduce_2d keeps x ([2 block, 128]) and three [block, 128] blocks in VMEM: the TPU
    compiler pads each to whole (8, 128) tiles of float32 (fewer than 8 rows to the power of
    2 that holds them), and `vmem_need` counts the same bytes it reports, more than the
    elements take when `block` is not a multiple of 8."""
    from ringc.cost.model import vmem_need
    sched = ringc.load(REPO / "schedules" / "all_reduce_2d.yaml", params={"block": block})
    sizes = {"x": 2, "y": 2}
    shapes = unroll(sched, sizes=sizes).shapes
    assert sum(4 * prod(shapes[n]) for n in ("x", "acc", "tmp", "red")) == plain
    res = ringc.compile_for(sched, "v5e:2x2")
    assert res.ok, str(res.error)
    assert res.memory["vmem_scoped"] == vmem_need(sched, shapes)
    assert (vmem_need(sched, shapes) > plain) == (block % 8 != 0)


def test_streamed_2d_all_reduce_compiles_at_256_mib_with_the_vmem_the_cost_model_counts():
    """The 2-D torus all-reduce streams too: 256 MiB per device on v5e:2x2 (rows = 32768),
    in the VMEM `ringc cost` counts: its largest pipeline, six double-buffered windows of
    [1024, 128] (`block` rows of a block; a column's windows, [2, 256, 128], are half that)."""
    from ringc.cost.model import vmem_need
    sched = ringc.load(REPO / "schedules" / "all_reduce_2d_bidirectional.yaml", params={"rows": 32768})
    sizes = {"x": 2, "y": 2}
    assert _bytes(sched, "input", 4, sizes) == 256 * 2**20
    res = ringc.compile_for(sched, "v5e:2x2")
    assert res.ok, str(res.error)
    assert res.memory["vmem_scoped"] == vmem_need(sched, unroll(sched, sizes=sizes).shapes) == 6 * 2 * 2 * 512 * 128 * 4


# ---------------------------------------------------------------------------- CLI


def test_cli_ok_with_clean_stderr():
    # The CLI needs no backend, and libtpu's start-up warnings about missing TPU metadata
    # must not reach the terminal. This test process has libtpu loaded too: the two must
    # not fight over libtpu's lockfile.
    res = ringc_cli("compile", "schedules/ppermute_right.yaml", "--target", "v5e:2x2", "--target", "v4:2x2x1")
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    lines = res.stdout.splitlines()
    assert re.match(r"schedules/ppermute_right.yaml v5e:2x2 \(4 x TPU v5 lite, N=4\): ok  compile \d", lines[0])
    assert "(8 x TPU v4, N=8): ok" in res.stdout
    assert "HBM arguments 4.0 KiB" in lines[1]


def test_cli_failure_text_and_verbose():
    path = BROKEN_DIR / "ppermute_split_columns.yaml"
    res = ringc_cli("compile", path, "--target", "v5e:2x2")
    assert res.returncode == 1 and res.stderr == ""
    assert "error: [tiling]" in res.stdout and "fix: make `half` (= 64)" in res.stdout
    assert "Mosaic" not in res.stdout and "--verbose" in res.stdout
    verbose = ringc_cli("compile", path, "--target", "v5e:2x2", "--verbose")
    assert verbose.returncode == 1 and verbose.stderr == ""
    assert "Mosaic failed to compile TPU kernel" in verbose.stdout
    assert "error: [tiling]" in verbose.stdout


def test_cli_json():
    res = ringc_cli("compile", "schedules/ppermute_right.yaml", BROKEN_DIR / "reduce_scatter_int8.yaml",
                    "--target", "v5e:2x2", "--format", "json")
    assert res.returncode == 1 and res.stderr == ""
    doc = json.loads(res.stdout)  # one document for the run
    assert doc["version"] == 1 and doc["command"] == "compile" and doc["exit_code"] == 1 and doc["errors"] == []
    ok, bad = doc["reports"]
    assert ok["ok"] and ok["devices"] == 4 and ok["memory"]["hbm_argument"] == 4096 and "error" not in ok
    assert not bad["ok"] and bad["error"]["kind"] == "unsupported" and bad["error"]["line"] == 82
    assert "raw_error" not in bad


def test_cli_bad_target_and_missing_file():
    res = ringc_cli("compile", "schedules/ppermute_right.yaml", "--target", "v7:2x2")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "schedules/ppermute_right.yaml: error: target 'v7:2x2'" in res.stderr and "fix: " in res.stderr
    res = ringc_cli("compile", "schedules/ppermute_right.yaml", "--target", "v5e")
    assert res.returncode == 2 and "GENERATION:TOPOLOGY" in res.stderr
    res = ringc_cli("compile", "no/such.yaml", "--target", "v5e:2x2")
    assert res.returncode == 2 and "no/such.yaml: error: cannot read schedule" in res.stderr
