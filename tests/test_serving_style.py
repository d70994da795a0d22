"""Serving stacks' and MoE libraries' kernels as published (issue 31): values from tensor
data (the router's argmax, counts staged through SMEM, scalar-prefetch operands computed by
jitted code), reshaped refs, split-phase calls with semaphores passed between pallas_calls.
The kernels under `tests/pallas_import/serving_style/` are written in the styles of the
public kernels listed in `tests/real_kernels/serving_manifest.yaml`."""

import textwrap
from pathlib import Path

import pytest

from ringc.pallas import check_file
from ringc.pallas.interpret import _box_of, _flat_range

HERE = Path(__file__).parent / "pallas_import" / "serving_style"
ROUTE = str(HERE / "topk_route.py")
LOGITS = ["logits=float32[8*N,2*N]@"]


def _notes(report, prefix="values from tensor data"):
    return [a for a in report.assumptions if a.startswith(prefix)]


def _args():
    from ringc.pallas.entries import parse_arg
    return [parse_arg(a) for a in LOGITS]


def test_the_routers_argmax_is_sampled_in_its_range_and_the_verdict_says_so():
    ok, = check_file(ROUTE, 4, args=_args())
    assert ok.ok, ok.to_text()
    note, = _notes(ok)
    assert "`argmax` at line 42" in note and "in its range [0, 8)" in note and "seed 0" in note


def test_an_index_made_from_the_sampled_expert_is_out_of_bounds_and_the_check_goes_on():
    bad, = check_file(ROUTE, 4, args=_args(), params={"wrong": 1})
    assert bad.kinds() == {"out_of_bounds"}, bad.to_text()
    text = bad.to_text()
    assert "topk_route.py:48" in text and "computed from `argmax` at line 42, runtime data that ringc sampled" in text
    again, = check_file(ROUTE, 4, args=_args(), params={"wrong": 1})
    assert [f.message for f in again.findings] == [f.message for f in bad.findings]  # reproducible


def test_a_split_phase_ragged_dispatch_with_offsets_computed_before_the_kernel():
    """Each device's row of the routing table is picked by `lax.axis_index` inside the
    shard_map, the offsets by a jitted cumsum: both are computed, so the sizes are concrete."""
    ok, = check_file(str(HERE / "ragged_dispatch.py"), 4)
    assert ok.ok, ok.to_text()
    assert "2 pallas_call(s)" in ok.to_text()


def test_a_split_phase_ragged_dispatch_waiting_for_the_wrong_count_hangs(tmp_path):
    src = (HERE / "ragged_dispatch.py").read_text().replace("\nWRONG = 0\n", "\nWRONG = 1\n")
    path = tmp_path / "ragged_dispatch.py"
    path.write_text(src)
    bad, = check_file(str(path), 4)
    assert "hang" in bad.kinds(), bad.to_text()
    assert any(f.kind == "hang" and f.event.line == 53 for f in bad.findings)


def test_reshaped_refs_map_back_to_boxes():
    assert _flat_range((4, 8, 16), ((1, 2), (0, 8), (0, 16))) == (128, 256)
    assert _flat_range((4, 8, 16), ((0, 2), (0, 4), (0, 16))) is None  # not contiguous
    assert _box_of((4, 8, 16), 128, 160) == ((1, 2), (0, 2), (0, 16))
    assert _box_of((4, 8, 16), 0, 512) == ((0, 4), (0, 8), (0, 16))
    assert _box_of((4, 8, 16), 16, 40) is None  # not one box


STAGED = '''
import jax, jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _kernel(x_ref, o_ref, counts_vmem, counts_smem, sem):
    counts_vmem[...] = jnp.where(x_ref[0:8, 0:128] > 0, 1, 0).astype(jnp.int32)
    copy = pltpu.make_async_copy(counts_vmem, counts_smem, sem)
    copy.start()
    copy.wait()
    n = counts_smem[0, 0]

    @pl.when(n + 1 > 1)
    def _():
        o_ref[...] = x_ref[...]


def staged(x, *, axis_name="x"):
    del axis_name
    return pl.pallas_call(
        _kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)], out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.int32), pltpu.SMEM((8, 128), jnp.int32),
                        pltpu.SemaphoreType.DMA])(x)
'''


def test_smem_filled_by_a_dma_is_never_read_as_its_old_values(tmp_path):
    """Counts staged VMEM -> SMEM by a DMA are runtime data: a value computed from them is
    not sampled apart from them, so the verdict names the DMA instead of reading the SMEM's
    initial zeros (which made the branch look never taken)."""
    path = tmp_path / "staged.py"
    path.write_text(textwrap.dedent(STAGED))
    report, = check_file(str(path), 2)
    text = report.to_text()
    assert "not checked" in text and "which a DMA at line 11 filled from `counts_vmem`" in text, text


def test_a_summary_with_a_kernel_call_not_checked_is_no_traceback():
    from ringc.errors import ScheduleError
    from ringc.output import Output
    from ringc.pallas.importer import CallError
    import io
    out = Output(out=io.StringIO(), err=io.StringIO())
    out.report(CallError("k.py", "call 1", ScheduleError("no", file="k.py")))
    out.report(CallError("k.py", "call 2", ScheduleError("no", file="k.py")))
    assert out.summary() == {"files": 1, "verdicts": 2, "ok": 0, "failed": 2, "refused": 0, "findings": 0}
    assert out.close() != 0


def test_an_entrys_made_up_integer_arrays_are_said_to_be_zeros(tmp_path):
    from ringc.pallas.entries import parse_arg
    path = tmp_path / "ragged.py"
    path.write_text((HERE / "ragged_dispatch.py").read_text().split("\nn = jax.device_count()")[0])
    report, = check_file(str(path), 4, entry="dispatch",
                         args=[parse_arg("x=float32[8*N,128]@x"), parse_arg("sizes=int32[N,N]@"),
                               parse_arg("offsets=int32[N,N]@"), parse_arg("sent=int32[N]@"),
                               parse_arg("received=int32[N]@")])
    assert report.ok, report.to_text()
    note, = _notes(report)
    assert "the arrays ringc made up hold zeros" in note


def test_every_missing_package_of_the_importing_module_is_named_at_once(tmp_path):
    """A serving framework's utility module imports several packages that are not installed
    (sglang-jax's utils import zmq, fastapi, uvicorn, ...): one message names them all."""
    from ringc.errors import ScheduleError
    pkg = tmp_path / "serving"
    (pkg / "utils").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "utils" / "__init__.py").write_text("import ringc_missing_a\nimport ringc_missing_b\nimport json\n")
    (pkg / "kernel.py").write_text("from serving.utils import json\n\ndef f(x, *, axis_name='x'):\n    return x\n")
    with pytest.raises(ScheduleError) as err:
        check_file(str(pkg / "kernel.py"), 2)
    e = err.value
    assert "`ringc_missing_a`" in e.message and "also imports `ringc_missing_b`" in e.message, e.message
    assert "--stub ringc_missing_a --stub ringc_missing_b" in e.fix and "json" not in e.fix


def test_a_module_beside_the_file_brings_its_package_root(tmp_path):
    """The kernel imports a sibling relatively, the sibling imports the repository's package
    absolutely, and a folder between them has no `__init__.py` (a namespace package)."""
    root = tmp_path / "python"
    mod = root / "serving" / "kernels" / "moe"
    mod.mkdir(parents=True)
    (root / "serving" / "__init__.py").write_text("")
    (root / "serving" / "config.py").write_text("BLOCK = 8\n")
    (mod / "__init__.py").write_text("")
    (mod / "tuned.py").write_text("from serving.config import BLOCK\n")
    (mod / "kernel.py").write_text("from .tuned import BLOCK\n\ndef f(x, *, axis_name='x'):\n    return x\n")
    from ringc.pallas.imports import repo_roots
    import ast
    roots = repo_roots(ast.parse((mod / "kernel.py").read_text()), str(mod / "kernel.py"))
    assert str(root) in roots


def test_the_serving_manifest_lists_every_kernel_with_its_command_and_verdict():
    import yaml
    path = Path(__file__).parent / "real_kernels" / "serving_manifest.yaml"
    doc = yaml.safe_load(path.read_text())
    assert len(doc["kernels"]) >= 8
    for k in doc["kernels"]:
        assert {"repo", "commit", "path", "command", "verdict", "right"} <= set(k), k.get("name")
        assert len(k["commit"]) == 40 and k["command"].startswith("ringc check ")


COUNTS = '''
import jax, jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec
REDUCE = lax.pmax


def kernel(info_ref, x_ref, o_ref, sem):
    rows, start = info_ref[0], info_ref[1]

    @pl.when(rows > 0)
    def _():
        copy = pltpu.make_async_copy(x_ref.at[pl.ds(start, rows)], o_ref.at[pl.ds(0, rows)], sem)
        copy.start()
        copy.wait()


def body(x, counts, offsets):
    rows = REDUCE(counts[lax.axis_index("x")], "x")
    info = jnp.stack([rows, offsets[0]])
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), x.dtype),
                          in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pl.ANY)],
                          out_specs=pl.BlockSpec(memory_space=pl.ANY),
                          scratch_shapes=[pltpu.SemaphoreType.DMA])(info, x)


n = jax.device_count()
mesh = jax.make_mesh((n,), ("x",))
offsets_all = jnp.arange(n, dtype=jnp.int32) % 2  # closed over by the jitted function


@jax.jit
def run(x, counts):
    return jax.shard_map(body, mesh=mesh, in_specs=(P("x"), P(), P("x")), out_specs=P("x"),
                         check_vma=False)(x, counts, offsets_all)


out = run(jnp.ones((8 * n, 128), jnp.float32), jnp.array([3, 5], jnp.int32))
'''


def test_counts_reduced_across_devices_and_closed_over_offsets_are_computed(tmp_path):
    """`lax.pmax` of each device's count, a table closed over by the jitted function and a
    row picked by `lax.axis_index`, all before the kernel: the kernel's SMEM is concrete."""
    path = tmp_path / "counts.py"
    path.write_text(COUNTS)
    ok, = check_file(str(path), 2)
    assert ok.ok, ok.to_text()
    path.write_text(COUNTS.replace("REDUCE = lax.pmax", "REDUCE = lax.psum"))  # 3 + 5 rows from offset 1
    bad, = check_file(str(path), 2)
    assert bad.kinds() == {"out_of_bounds"}, bad.to_text()
    assert "slice 1:9 of `x_ref`" in bad.to_text() and "read from `info_ref[1]`" in bad.to_text()


def test_a_kernel_for_megacore_chips_gets_the_tpu_flag_in_the_fix(tmp_path):
    """tpu-inference's SparseCore reduce-scatter asserts 2 cores per chip before it builds
    anything: on ringc's default TPU v5e answers the fix says which --tpu has 2."""
    from ringc.errors import ScheduleError
    path = tmp_path / "megacore.py"
    path.write_text("import jax\nfrom jax.experimental.pallas import tpu as pltpu\n\n"
                    "def reduce(x, *, axis_name='x'):\n"
                    "    cores = pltpu.get_tpu_info().num_cores\n"
                    "    assert cores == 2, f'strictly supports 2 cores per chip, but found {cores}'\n"
                    "    return x\n")
    with pytest.raises(ScheduleError) as err:
        check_file(str(path), 2)
    assert "--tpu v5p" in err.value.fix, err.value.fix
