"""`ringc compile FILE.py --target h100` (`ringc/compile/gpu.py`): Mosaic GPU kernel files
lowered for CUDA and compiled ahead of time for sm_90a, without a GPU.

Most tests need no CUDA plugin: the one-line refusal when it is missing, the arguments, the
lowering to StableHLO (`lowering_platforms=("cuda",)`) with each kernel's shared memory, a
shared-memory overflow reported at the kernel's line, and the reading of ptxas' report.
The tests that compile skip, saying why, unless `pip install -e ".[gpu]"` installed the
plugin and ptxas; none needs a GPU. JAX's shipped kernels are read from the installed jax."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

from ringc.cli import main  # noqa: E402
from ringc.compile import gpu  # noqa: E402

HERE = Path(__file__).parent
RING = HERE / "pallas_import" / "mgpu" / "ring_kernels.py"
NEEDS_PLUGIN = pytest.mark.skipif(not gpu.gpu_available(), reason='JAX\'s CUDA plugin and ptxas are not installed '
                                  '(pip install -e ".[gpu]"); compiling for sm_90a needs them, not a GPU')


def _shipped(name: str) -> str:
    import importlib
    return importlib.import_module(f"jax.experimental.pallas.ops.gpu.{name}").__file__


# ---------------------------------------------------------------------------- no plugin needed


def test_without_the_plugin_one_message_names_the_extra(monkeypatch, capsys):
    monkeypatch.setattr(gpu, "gpu_available", lambda: False)
    assert main(["compile", _shipped("all_gather_mgpu"), "--target", "h100", "--devices", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and 'pip install "ringc[gpu]"' in err and "Traceback" not in err, err
    assert "--lower-only" in err


@pytest.mark.parametrize("argv,says", [
    (["schedules/all_gather_ring.yaml", "--target", "h100"], "a schedule compiles for TPU slices"),
    ([str(RING), "--target", "v5e:2x2"], "a Python file compiles for a GPU"),
    (["schedules/all_gather_ring.yaml", "--target", "v5e:2x2", "--devices", "4"], "are for Python Mosaic GPU"),
])
def test_targets_and_files_that_do_not_go_together_are_refused_in_one_line(argv, says, capsys):
    assert main(["compile", *argv]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("error:") == 1 and "Traceback" not in err, err


def test_an_unknown_target_names_the_gpu(capsys):
    with pytest.raises(SystemExit):
        main(["compile", str(RING), "--target", "h200"])
    assert "h100" in capsys.readouterr().err


def test_the_target_config_is_the_h100_the_checker_answers_as():
    from ringc.pallas.tpu import GPUS
    text = gpu.target_config("h100")
    assert f"core_count: {GPUS['h100'].sms}" in text and "major: 9 minor: 0" in text
    assert f'"{GPUS["h100"].device_kind}"' in text and "shared_memory_per_block_optin: 232448" in text


@pytest.mark.parametrize("name", ["all_gather_mgpu", "reduce_scatter_mgpu"])
def test_the_shipped_kernels_lower_to_stablehlo_for_cuda(name):
    (r,) = gpu.compile_file(_shipped(name), 2, compile=False)
    assert r.ok and not r.compiled, r.to_text()
    assert r.stablehlo_calls == 1 and len(r.kernels) == 1
    k = r.kernels[0]
    assert k.registers is None and k.launch_smem == 0  # multimem through registers: no SMEM
    assert k.file == _shipped(name) and k.line > 0
    assert any("ringc called" in a for a in r.assumes)


def test_lowering_reads_the_launch_shared_memory():
    """ring_all_gather stages (rows_per_block, 128) f32 in SMEM: 32 rows at N=2, 2 blocks."""
    (r,) = gpu.compile_file(str(RING), 2, compile=False, entry="ring_all_gather", params={"num_blocks": 2},
                            args=[_arg("x=float32[64*N,128]@x")])
    assert r.ok, r.to_text()
    assert r.kernels[0].launch_smem == 32 * 128 * 4


def _arg(text: str):
    from ringc.pallas.entries import parse_arg
    return parse_arg(text)


def test_too_much_shared_memory_is_reported_at_the_kernel(capsys):
    """(512, 128) f32 is 256 KiB of SMEM per block: more than the 227 KiB an H100 block may have.
    Mosaic GPU refuses it while lowering, so no plugin is needed to say so."""
    code = main(["compile", str(RING), "--target", "h100", "--devices", "2", "--lower-only", "--entry",
                 "ring_all_gather", "--param", "num_blocks=1", "--arg", "x=float32[512*N,128]@x", "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and not doc["ok"]
    (report,) = doc["reports"]
    err = report["error"]
    assert err["kind"] == "smem_overflow"
    kernel_line = RING.read_text().splitlines().index("  def kernel(x_ref, y_ref, smem, block_sem):") + 1
    assert err["file"].endswith("ring_kernels.py") and err["line"] == kernel_line  # `def kernel(...)`
    assert "262144 bytes per block" in err["message"] and "232448" in err["message"] and "SMEM" in err["fix"]
    assert "its SMEM scratch: float32[512,128] (256.0 KiB)" in err["message"]


def test_lower_only_in_text(capsys):
    assert main(["compile", _shipped("all_gather_mgpu"), "--target", "h100", "--devices", "2", "--lower-only"]) == 0
    out = capsys.readouterr().out
    assert "ok  lowered only" in out and "smem 0 B/block" in out and "not compiled (lowered only)" in out


def test_ptxas_report_is_read_per_entry_function():
    text = ("ptxas info    : 0 bytes gmem\n"
            "ptxas info    : Compiling entry function 'k_mosaic_gpu_kernel' for 'sm_90a'\n"
            "ptxas info    : Function properties for k_mosaic_gpu_kernel\n"
            "    8 bytes stack frame, 16 bytes spill stores, 24 bytes spill loads\n"
            "ptxas info    : Used 255 registers, used 3 barriers, 1024 bytes smem\n")
    assert gpu.ptxas_report(text) == {"k_mosaic_gpu_kernel": {
        "arch": "sm_90a", "stack_frame": 8, "spill_stores": 16, "spill_loads": 24, "registers": 255,
        "barriers": 3, "static_smem": 1024}}


# ---------------------------------------------------------------------------- with the plugin


@NEEDS_PLUGIN
@pytest.mark.parametrize("name", ["all_gather_mgpu", "reduce_scatter_mgpu"])
def test_the_shipped_kernels_compile_for_sm_90a(name):
    (r,) = gpu.compile_file(_shipped(name), 4)
    assert r.ok and r.compiled, r.to_text(verbose=True)
    (k,) = r.kernels
    assert k.arch == "sm_90a" and 0 < k.registers <= 255 and k.spill_stores == 0 and k.spill_loads == 0
    # Compiled again in this process, the plugin takes the kernel from its cache and runs no
    # ptxas: the figures are those of the first compile.
    (again,) = gpu.compile_file(_shipped(name), 4)
    assert again.kernels == r.kernels


def _matmul_call(n: int):
    from jax.experimental.pallas.ops.gpu import collective_matmul_mgpu as module, hopper_matmul_mgpu as hm
    mesh = jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])
    cfg = hm.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=4,
                          grid_minor_dim=hm.MatmulDimension.M, grid_tile_width=1, wg_dimension=hm.MatmulDimension.N)
    fn = functools.partial(module.all_gather_lhs_matmul, axis_name="x", config=cfg, dtype=jnp.float16)
    f = jax.shard_map(fn, mesh=mesh, in_specs=(P("x", None), P(None, "x")), out_specs=P(None, "x"), check_vma=False)
    a = jax.ShapeDtypeStruct((n * 1024, 4096), jnp.float16, sharding=NamedSharding(mesh, P("x", None)))
    b = jax.ShapeDtypeStruct((4096, n * 1024), jnp.float16, sharding=NamedSharding(mesh, P(None, "x")))
    return module, f, (a, b)


def _answering(module, n: int):
    """The matmul asks jax.device_count() while it traces (one host owning n GPUs);
    `compile_pallas` answers the SM count itself."""
    import contextlib

    @contextlib.contextmanager
    def ctx():
        saved = jax.device_count, jax.process_count
        jax.device_count = jax.process_count = lambda: n
        try:
            yield
        finally:
            jax.device_count, jax.process_count = saved
    return ctx()


def test_the_collective_matmul_lowers_with_its_pipeline_in_smem():
    module, f, args = _matmul_call(4)
    with _answering(module, 4):
        r = gpu.compile_pallas(f, args, compile=False, path=module.__file__)
    assert r.ok, r.to_text(verbose=True)
    (k,) = r.kernels
    # 4 slots of a 128x64 lhs tile and a 64x128 rhs tile in f16: 128 KiB, and more beside them
    assert 4 * 2 * 128 * 64 * 2 < k.launch_smem <= 227 * 1024


@NEEDS_PLUGIN
def test_the_collective_matmul_compiles_for_sm_90a():
    module, f, args = _matmul_call(4)
    with _answering(module, 4):
        r = gpu.compile_pallas(f, args, path=module.__file__)
    assert r.ok and r.compiled, r.to_text(verbose=True)
    (k,) = r.kernels
    assert k.arch == "sm_90a" and k.registers > 100 and k.spill_stores == 0 and k.smem > 128 * 1024


def test_an_op_mosaic_gpu_cannot_lower_is_reported_at_its_line(capsys):
    path = HERE / "pallas_import" / "mgpu" / "unlowerable.py"
    assert main(["compile", str(path), "--target", "h100", "--devices", "2", "--lower-only"]) == 1
    out = capsys.readouterr().out
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "lax.sort(" in text)
    assert f"unlowerable.py:{line}: error: [unsupported] Mosaic GPU cannot lower `sort`" in out, out
    assert "fix: compute the sort outside the kernel" in out and "Traceback" not in out


def test_the_documented_matmul_script_lowers():
    """examples/mgpu_collective_matmul.py (docs/compile.md, "H100"): the script's one jitted
    call captured and lowered, its pipeline's SMEM read from the launch."""
    (r,) = gpu.compile_file(str(HERE.parent / "examples" / "mgpu_collective_matmul.py"), 2, compile=False)
    assert r.ok and r.line == 33 and r.stablehlo_calls == 1, r.to_text(verbose=True)
    (k,) = r.kernels
    assert k.file.endswith("collective_matmul_mgpu.py") and 128 * 1024 < k.launch_smem <= 227 * 1024


def test_a_plugin_that_cannot_start_is_bad_input_not_the_kernels_fault(monkeypatch):
    def broken(*_):
        raise RuntimeError("Unable to load CUDA. Is it installed?")
    monkeypatch.setattr(gpu, "gpu_available", lambda: True)
    monkeypatch.setattr(gpu, "gpu_devices", broken)
    with pytest.raises(gpu.ScheduleError) as e:
        gpu.compile_file(_shipped("all_gather_mgpu"), 2, compile=True)
    assert "cannot describe 2 compile-only H100s: Unable to load CUDA" in e.value.message
    assert 'pip install "ringc[gpu]"' in e.value.fix
