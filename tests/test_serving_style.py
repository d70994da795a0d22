"""Serving stacks' and MoE libraries' kernels as published (issue 31): values from tensor
data (the router's argmax, counts staged through SMEM, scalar-prefetch operands computed by
jitted code), reshaped refs, split-phase calls with semaphores passed between pallas_calls.
The kernels under `tests/pallas_import/serving_style/` are written in the styles of the
public kernels listed in `tests/real_kernels/serving_manifest.yaml`."""

import textwrap
from pathlib import Path

import numpy as np
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
    assert out.summary() == {"files": 1, "verdicts": 2, "ok": 0, "failed": 0, "not_checked": 2, "refused": 0,
                             "findings": 0}
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
    assert "ringc made up sizes, offsets, sent, received as zeros" in note
    assert report.made_up == ("sizes", "offsets", "sent", "received")
    assert "ok on made-up inputs" in report.to_text().splitlines()[0]
    assert "it covers only the zeros ringc made up for sizes" in report.to_text().splitlines()[0]


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


@pytest.mark.parametrize("clone", ["repo", "ringc_srcpkg"])
def test_a_src_layout_repositorys_package_is_imported_from_src(tmp_path, clone):
    """A test in tests/ imports the repository's package, which lives in src/ and is not
    installed (maxtext's layout): ringc imports it from src/, as the project's pytest
    configuration would, instead of advising to stub the package that holds the kernel
    (sweep 16). The test's kernel is checked, also where the clone is named like its package
    (`git clone .../maxtext`: the clone's folder, no package, hid src/maxtext; sweep 25)."""
    tmp_path = tmp_path / clone
    tmp_path.mkdir()
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'srcpkg'\n")
    pkg = tmp_path / "src" / "ringc_srcpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "double.py").write_text(
        "import jax\nfrom jax.experimental import pallas as pl\n\n"
        "def _double(x_ref, o_ref):\n    o_ref[...] = x_ref[...] * 2\n\n"
        "@jax.jit\ndef double(x):\n"
        "    return pl.pallas_call(_double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)\n")
    (tmp_path / "tests").mkdir()
    test = tmp_path / "tests" / "double_test.py"
    test.write_text("import unittest\nimport jax.numpy as jnp\nfrom ringc_srcpkg.double import double\n\n\n"
                    "class DoubleTest(unittest.TestCase):\n    def test_double(self):\n"
                    "        double(jnp.ones((8, 128), jnp.float32))\n")
    (report,) = check_file(str(test), 2)
    assert report.ok and "DoubleTest.test_double" in report.title, report.to_text()


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


MOE = str(HERE / "moe_counts.py")
MOE_ARGS = ["logits=float32[8*N,2*N]@ep"]


def _moe(wrong: int = 0):
    from ringc.pallas.entries import parse_arg
    report, = check_file(MOE, 4, entry="dispatch", args=[parse_arg(a) for a in MOE_ARGS], params={"wrong": wrong})
    return report


def test_routing_staged_into_smem_and_counts_all_gathered_by_remote_dmas_are_followed():
    """The argmax table reaches SMEM through a VMEM -> SMEM DMA and the per-expert counts
    through remote DMAs around the ring: ringc follows both (the devices evaluated together),
    so every slice start, size and target of the dispatch is the run's, and says so."""
    ok = _moe()
    assert ok.ok, ok.to_text()
    routed = _notes(ok, "values routed through DMAs")
    assert any("`table_vmem` -> `table_smem` at line 46" in n for n in routed), routed
    assert any("`counts_vmem` -> `counts_vmem` at line 60" in n and "evaluated together" in n
               and "race-free run" in n for n in routed), routed
    assert _notes(ok, "values from tensor data") and not _notes(ok, "values sent between devices")


def test_reading_the_smem_table_before_the_staging_dmas_wait_is_a_race_at_the_read():
    bad = _moe(wrong=1)
    races = [f for f in bad.findings if f.kind == "race"]
    assert races and all(f.event.line == 72 for f in races), bad.to_text()
    assert "copy `table_vmem->table_smem` writes it" in races[0].message and "`load` reads it" in races[0].message


def test_waiting_for_a_wrong_count_received_through_remote_dmas_is_a_hang_at_the_wait():
    bad = _moe(wrong=2)
    hangs = [f for f in bad.findings if f.kind == "hang"]
    assert hangs and all(f.event.line == 106 for f in hangs), bad.to_text()
    assert {f.kind for f in bad.findings if f.severity == "error"} == {"hang"}, bad.to_text()
    released, = _notes(bad, "values sent between devices")
    assert "none could go on" in released and "let through" in released


BITCAST = '''
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

TO = jnp.uint32


def _kernel(x_ref, o_ref, scratch, sem):
    copy = pltpu.make_async_copy(x_ref.bitcast(TO), scratch.bitcast(TO), sem)
    copy.start()
    copy.wait()
    o_ref[...] = scratch[...]


def kernel(x, *, axis_name="x"):
    del axis_name
    return pl.pallas_call(
        _kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM(x.shape, x.dtype), pltpu.SemaphoreType.DMA])(x)
'''


def test_a_bitcast_ref_is_the_same_bytes_at_the_same_width_and_at_another(tmp_path):
    """float32 seen as uint32 (the same width) and as uint16 (the second-minor dimension
    doubles, as a TPU packs it): the DMA between the views moves the buffer's bytes, and a
    read of the scratch after the wait is ordered."""
    path = tmp_path / "bitcast.py"
    for to in ("jnp.uint32", "jnp.uint16"):
        path.write_text(textwrap.dedent(BITCAST).replace("TO = jnp.uint32", f"TO = {to}"))
        ok, = check_file(str(path), 2)
        assert ok.ok, (to, ok.to_text())
    # the read moved before the wait: a race on the bytes the DMA writes through the view
    path.write_text(textwrap.dedent(BITCAST).replace("TO = jnp.uint32", "TO = jnp.uint16").replace(
        "    copy.wait()\n    o_ref[...] = scratch[...]", "    o_ref[...] = scratch[...]\n    copy.wait()"))
    bad, = check_file(str(path), 2)
    assert "race" in bad.kinds(), bad.to_text()


def test_devices_evaluated_together_switch_only_where_a_wait_needs_another_device():
    """`CoRun`: device 0 runs until its wait needs device 1's signal, then device 1 runs; a run
    where no device can go on lets the lowest blocked wait through (and counts it); an error
    on one device is the run's error."""
    from ringc.pallas.corun import CoRun
    from ringc.verify.events import SemWait, Signal

    order: list[str] = []

    def waits(run: CoRun, d: int, sem: str):
        def body():
            order.append(f"{d} start")
            run.on_event(d, SemWait((d, sem, ()), 1, "sem_wait"))
            order.append(f"{d} waited")
        return body

    def signals(run: CoRun):
        def body():
            order.append("1 start")
            run.on_event(1, Signal((0, "s", ()), 1))
            order.append("1 signalled")
        return body

    run = CoRun(2)
    run.run([waits(run, 0, "s"), signals(run)])
    assert order == ["0 start", "1 start", "1 signalled", "0 waited"] and run.released == 0
    order.clear()
    hung = CoRun(2)
    hung.run([waits(hung, 0, "a"), waits(hung, 1, "b")])
    assert order == ["0 start", "1 start", "0 waited", "1 waited"] and hung.released == 2

    def fails():
        raise ValueError("device 1 failed")

    with pytest.raises(ValueError, match="device 1 failed"):
        CoRun(2).run([lambda: None, fails])


PACKED = str(HERE / "packed_kv.py")
PACKED_ARGS = ["x=bfloat16[16*N,128]@x"]


def _packed(**params):
    from ringc.pallas.entries import parse_arg
    report, = check_file(PACKED, 4, args=[parse_arg(a) for a in PACKED_ARGS], params=params)
    return report


def test_a_dma_through_bitcast_views_and_a_strided_load_of_one_are_checked():
    """rpa_v3_cp's style: a bfloat16 block sent through uint32 views, its keys read back
    with a strided load of the view. The waits count the bytes of the uint32 view (as many
    as the bfloat16 block's: no byte mismatch), and the verdict says how the strided load
    is read."""
    ok = _packed()
    assert ok.ok, ok.to_text()
    note, = [a for a in ok.assumptions if "strided slice" in a]
    assert "stride 2" in note and "`recv_ref` loaded at line 40" in note and "first to its last element" in note


def test_a_strided_load_of_a_bitcast_view_before_the_wait_is_a_race_on_the_bytes_it_reads():
    bad = _packed(late=1)
    assert bad.kinds() == {"race"}, bad.to_text()
    assert len(bad.findings) == 1, bad.to_text()
    # uint32 rows 0, 2, 4, 6 of the view are bfloat16 rows 0..13 of the buffer
    assert "packed_kv.py:40: error: [race]" in bad.to_text() and "`recv_ref[0:14, 0:128]`" in bad.to_text()


def test_a_strided_store_is_one_clear_refusal_at_its_line():
    report = _packed(strided_store=1)
    text = report.to_text()
    assert "not checked" in text and "packed_kv.py:42" in text, text
    assert "a strided slice (stride 2) of `keys_ref` as a store's destination" in text


def test_a_view_of_a_strided_slice_is_refused_at_its_line():
    text = _packed(strided_view=1).to_text()
    assert "packed_kv.py:38" in text and "a bitcast of a strided slice (stride 2) of `recv_ref`" in text, text


def test_bitcast_views_map_to_the_bytes_of_the_buffer():
    from ringc.pallas.interpret import _bitcast_box, _elements_box
    from ringc.pallas.values import Buffer, Ref
    bf16 = Buffer("kv", (2, 16, 128), np.dtype("float16"), "vmem", "scratch")
    base = Ref(bf16, 0, ((1, 2), (0, 16), (0, 128)), (1, 2))  # kv.at[1]: [16, 128] of 2-byte elements
    u32 = Ref.whole(Buffer("kv", (8, 128), np.dtype("uint32"), "vmem", "scratch"), 0)
    view = Ref(u32.buffer, 0, ((2, 5), (0, 128)), (0, 1))  # u32 rows 2..4 = 16-bit rows 4..9
    assert _bitcast_box(base, view) == ((1, 2), (4, 10), (0, 128))
    wide = Ref(Buffer("w", (4, 128), np.dtype("uint32"), "vmem", "scratch"), 0, ((0, 4), (0, 128)), (0, 1))
    narrow = Ref(Buffer("w", (8, 128), np.dtype("float16"), "vmem", "scratch"), 0, ((3, 5), (0, 128)), (0, 1))
    assert _bitcast_box(wide, narrow) == ((1, 3), (0, 128))  # 16-bit rows 3, 4 lie in 32-bit rows 1, 2
    # a reshape that splits the minor dim: a slice of the reshape that is no flat range is still one box
    assert _elements_box((256, 5, 1, 128), 0, (256, 5, 1, 1, 128),
                         ((0, 256), (0, 2), (0, 1), (0, 1), (0, 128)), False) == ((0, 256), (0, 2), (0, 1), (0, 128))
    assert _elements_box((32, 16, 2), 0, (512, 2), ((8, 24), (0, 2)), False) is None  # two pages: no box
    assert _box_of((32, 16, 2), 160, 160) == ((5, 5), (0, 16), (0, 2))  # a copy of 0 rows is an empty box


def test_a_copy_of_no_rows_overlaps_nothing():
    """A paged fetch of 0 rows (`pl.ds(page * 16, 0)`) is an empty box: it meets no access."""
    from ringc.verify.events import Region
    empty = Region("kv", 0, ((0, 1), (16, 16), (0, 128)), (1, 2), 2)
    full = Region("kv", 0, ((0, 1), (0, 512), (0, 128)), (1, 2), 2)
    assert not empty.overlaps(full) and not full.overlaps(empty)
    assert full.overlaps(Region("kv", 0, ((0, 1), (15, 17), (0, 128)), (1, 2), 2))
