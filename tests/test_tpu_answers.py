"""`ringc check --tpu`: while ringc runs a script as published, its CPU devices answer the
script's TPU questions as the generation the check assumes (`ringc/pallas/tpu.py`).

The scripts here are written the way published kernels set themselves up: a ring laid out
from `device.coords`, block sizes chosen from `device_kind` and `pltpu.get_tpu_info()` with
an error for an unknown generation, a v5p-only script, a test module that skips off v5p, and
GPU / TensorCore-mesh code ringc refuses. Each reaches a verdict: ok for the correct kernel,
FAILED for the same script with the kernel's receive wait dropped.
"""

import os
import sys

import pytest

from ringc.cli import main
from ringc.errors import ScheduleError
from ringc.pallas import check_file
from ringc.pallas.tpu import GENERATIONS, generation

HEADER = """\
import re

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

ROWS = 8
"""

# A right permute around the mesh axis "ring", its lax reference on the same input; WAIT is the
# kernel's last line: `copy.wait()` (correct) or `copy.wait_send()` (the receive never waited).
KERNEL = """
def permute_kernel(x_ref, o_ref, send_sem, recv_sem):
    me = lax.axis_index("ring")
    right = lax.rem(me + 1, lax.psum(1, "ring"))
    copy = pltpu.make_async_remote_copy(src_ref=x_ref, dst_ref=o_ref, send_sem=send_sem, recv_sem=recv_sem,
                                        device_id=(right,), device_id_type=pltpu.DeviceIdType.MESH)
    copy.start()
    WAIT


n = mesh.shape["ring"]
permute = pl.pallas_call(permute_kernel, out_shape=jax.ShapeDtypeStruct((ROWS, 128), jnp.float32),
                         in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec(memory_space=pl.ANY),
                         scratch_shapes=[pltpu.SemaphoreType.DMA] * 2)
x = jax.device_put(jnp.arange(ROWS * n * 128, dtype=jnp.float32).reshape(ROWS * n, 128),
                   NamedSharding(mesh, P("ring")))
out = jax.jit(jax.shard_map(permute, mesh=mesh, in_specs=P("ring"), out_specs=P("ring"), check_vma=False))(x)
ref = jax.jit(jax.shard_map(lambda v: lax.ppermute(v, "ring", [(i, (i + 1) % n) for i in range(n)]), mesh=mesh,
                            in_specs=P("ring"), out_specs=P("ring")))(x)
print("max |pallas - lax|:", jnp.max(jnp.abs(out - ref)))
"""

# (a) A ring around a 2x2 slice, laid out from the chips' coordinates.
COORDS = """
xs = sorted({d.coords[0] for d in jax.devices()})
ys = sorted({d.coords[1] for d in jax.devices()})
if (len(xs), len(ys)) != (2, 2):
    raise ValueError(f"this kernel runs around a 2x2 slice, not {len(xs)}x{len(ys)}")
chip = {tuple(d.coords[:2]): d for d in jax.devices()}
ring = [chip[c] for c in [(0, 0), (1, 0), (1, 1), (0, 1)]]  # neighbours on the slice, no wraparound
mesh = Mesh(np.array(ring), ("ring",))
"""

# (b) Block sizes from the generation, which is parsed from device_kind.
GENERATION = """
kind = jax.devices()[0].device_kind
found = re.match(r"TPU v?(\\d+)", kind)
tpu_version = int(found.group(1)) if found else None
if tpu_version is None or tpu_version < 4:
    raise ValueError(f"unsupported tpu_version: {kind!r}")
info = pltpu.get_tpu_info()
ROWS = 8 if "lite" in kind.lower() else 16  # one (8, 128) tile per TensorCore of the device
assert ROWS * 128 * 4 <= info.vmem_capacity_bytes
mesh = jax.make_mesh((jax.device_count(),), ("ring",))
"""

# (d) A script for v5p megacore devices only.
V5P = """
dev = jax.devices()[0]
if dev.device_kind not in ("TPU v5", "TPU v5p") or dev.num_cores != 2:
    raise RuntimeError(f"this script needs TPU v5p devices, got {dev.device_kind}")
assert pltpu.get_tpu_info().chip_version == pltpu.ChipVersion.TPU_V5P
mesh = Mesh(np.array(sorted(jax.devices(), key=lambda d: d.coords[::-1])), ("ring",))
"""


def script(tmp_path, setup: str, broken: bool = False, name: str = "kernel.py") -> str:
    path = tmp_path / name
    wait = "copy.wait_send()" if broken else "copy.wait()"
    path.write_text(HEADER + setup + KERNEL.replace("WAIT", wait))
    return str(path)


def line(path: str, text: str) -> int:
    """The first line of the file holding `text` (a line equal to it, if there is one)."""
    lines = open(path).read().splitlines()
    return next((i for i, ln in enumerate(lines, 1) if ln == text), None) or \
        next(i for i, ln in enumerate(lines, 1) if text in ln)


def notes(report) -> list[str]:
    return [a for a in report.assumptions if a.startswith("script note")]


def verdict(path: str, n: int, tpu: str | None = None):
    report, = check_file(path, n, tpu=tpu)
    return report


def asked(report) -> str:
    return next(a for a in report.assumptions if a.startswith("devices answer as TPU"))


# -- the table -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name, n, shape", [
    ("v5e", 1, (1, 1)), ("v5e", 4, (2, 2)), ("v5e", 8, (2, 4)), ("v5e", 16, (4, 4)), ("v5e", 32, (4, 8)),
    ("v5e", 3, (3, 1)), ("v6e", 8, (2, 4)),
    ("v5p", 4, (2, 2, 1)), ("v5p", 8, (2, 2, 2)), ("v5p", 16, (2, 2, 4)), ("v5p", 32, (2, 4, 4)),
    ("v5p", 64, (4, 4, 4)), ("v4", 128, (4, 4, 8)), ("v5p", 6, (6, 1, 1)),
])
def test_slices_have_the_generations_shapes(name, n, shape):
    assert generation(name).shape(n) == shape


def test_bad_generation_names_the_choices():
    with pytest.raises(ValueError, match="choose one of v5e, v5p, v4, v6e, v7x"):
        generation("v7")


@pytest.mark.parametrize("layout", ["2x2x1", "2x2x2"])
def test_tpu7x_answers_two_devices_per_chip_as_libtpu_reports(layout):
    """TPU7x runs each TensorCore as its own JAX device: two per chip, the chip's coords and
    `core_on_chip` 0 and 1, one core each (libtpu's compile-only `TPU7x:2x2x1` devices)."""
    from ringc.compile import libtpu_available, quiet_libtpu
    if not libtpu_available():
        pytest.skip("libtpu is not installed")
    quiet_libtpu()
    from jax.experimental import topologies
    real = topologies.get_topology_desc(f"TPU7x:{layout}", platform="tpu").devices
    gen, n = GENERATIONS["v7x"], len(real)
    assert {d.device_kind for d in real} == {gen.device_kind} and gen.chips(n) == tuple(map(int, layout.split("x")))
    assert [(list(d.coords), d.core_on_chip, d.num_cores) for d in real] == [
        (gen.coords(i, n), i % 2, gen.cores) for i in range(n)]
    assert gen.tpu_info().num_cores == 1 and gen.tpu_info().generation == 7


def test_a_test_that_skips_below_tpu7_is_advised_v7x_and_checks_there(tmp_path):
    """tpu-inference's newest kernel tests skip unless `jtu.is_device_tpu_at_least(version=7)`
    (sweep 17: "pick the --tpu generation it needs", and none was v7): the advice names
    `--tpu v7x`, and there the test runs and its kernel is checked."""
    from ringc.pallas import check_file
    path = tmp_path / "v7_only_test.py"
    path.write_text(V7_ONLY)
    with pytest.raises(ScheduleError) as e:
        check_file(str(path), 4)
    assert "skipped itself (Expect TPUv7+)" in e.value.message and "(--tpu v7x)" in e.value.fix, e.value
    report, = check_file(str(path), 4, tpu="v7x")
    assert report.ok, report.to_text()
    assert any("device_kind 'TPU7x'" in a and "2 devices per chip" in a for a in report.assumptions), \
        report.assumptions


V7_ONLY = """
import jax, jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P
from absl.testing import absltest
from jax._src import test_util as jtu


def kernel(x_ref, o_ref, send_sem, recv_sem):
    right = (lax.axis_index("x") + 1) % lax.axis_size("x")
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=right,
                                        device_id_type=pl.DeviceIdType.MESH)
    copy.start()
    copy.wait()


class V7Only(jtu.JaxTestCase):
    def setUp(self):
        super().setUp()
        if not jtu.is_device_tpu_at_least(version=7):
            self.skipTest("Expect TPUv7+")

    def test_permute(self):
        mesh = jax.make_mesh((jax.device_count(),), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
        vmem = pl.BlockSpec(memory_space=pltpu.VMEM)
        f = jax.jit(jax.shard_map(
            lambda x: pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), in_specs=[vmem],
                                     out_specs=vmem, scratch_shapes=[pltpu.SemaphoreType.DMA] * 2)(x),
            mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
        f(jnp.zeros((8 * jax.device_count(), 128), jnp.float32))


if __name__ == "__main__":
    absltest.main()
"""


@pytest.mark.parametrize("target", ["v5e:2x2", "v5e:2x4", "v5p:2x2x1", "v5p:2x2x2", "v6e:2x2", "v4:2x2x1"])
def test_the_table_answers_what_libtpus_devices_report(target):
    """libtpu's compile-only devices (those of `ringc compile`) are the real answers. v4's are
    one per TensorCore there; JAX runs v4 chips as megacore devices, as the table does."""
    from ringc.compile import libtpu_available, target_devices
    if not libtpu_available():
        pytest.skip("libtpu is not installed")
    real = target_devices(target)
    gen = GENERATIONS[target.split(":")[0]]
    assert {d.device_kind for d in real} == {gen.device_kind}
    if gen.name == "v4":
        return
    n = len(real)
    assert [list(d.coords) for d in real] == [gen.coords(i, n) for i in range(n)]
    assert {(d.core_on_chip, d.num_cores) for d in real} == {(0, gen.cores)}


# -- (a) coords ----------------------------------------------------------------------------------


def test_a_ring_laid_out_from_coords(tmp_path):
    ok = verdict(script(tmp_path, COORDS), 4)
    assert ok.ok, ok.to_text()
    assert "coords of a 2x2 slice" in asked(ok) and "asked coords" in asked(ok)
    broken = verdict(script(tmp_path, COORDS, broken=True), 4)
    assert not broken.ok


def test_coords_lay_out_the_generations_slice(tmp_path):
    """At N = 8 a v5e slice is 2x4: the script's own check of the layout says so (and, a
    notebook, goes on with the ring around the first 2x2 of it)."""
    path = script(tmp_path, COORDS)
    report = verdict(path, 8)
    assert f"line {line(path, 'if (len(xs)')}: ValueError: this kernel runs around a 2x2 slice, not 2x4" \
        in " ".join(notes(report))
    assert "coords of a 2x4 slice" in asked(report)


def test_mesh_utils_builds_its_mesh_over_the_stand_ins(tmp_path):
    setup = ("from jax.experimental import mesh_utils\n"
             "assert jax.devices()[0].platform == 'tpu'\n"
             "mesh = Mesh(mesh_utils.create_device_mesh((4,)), ('ring',))\n")
    assert verdict(script(tmp_path, setup), 4).ok
    assert not verdict(script(tmp_path, setup, broken=True), 4).ok


# -- (b) device_kind and get_tpu_info ------------------------------------------------------------


def test_block_sizes_from_the_generation(tmp_path):
    ok = verdict(script(tmp_path, GENERATION), 4)
    assert ok.ok, ok.to_text()
    assert "asked device_kind, get_tpu_info" in asked(ok)
    broken = verdict(script(tmp_path, GENERATION, broken=True), 4)
    assert not broken.ok
    assert "0:8, 0:128" in broken.to_text()  # v5e: "lite", 8 rows


@pytest.mark.parametrize("tpu, rows", [("v5p", 16), ("v4", 16), ("v6e", 8)])
def test_other_generations_pick_their_blocks(tmp_path, tpu, rows):
    broken = verdict(script(tmp_path, GENERATION, broken=True), 4, tpu=tpu)
    assert not broken.ok
    assert f"0:{rows}, 0:128" in broken.to_text()
    assert asked(broken).startswith(f"devices answer as TPU {tpu} (--tpu): device_kind {GENERATIONS[tpu].device_kind!r}")


def test_an_unknown_generation_is_the_scripts_error_not_ringcs(tmp_path):
    """Without the answers the script raises "unsupported tpu_version" (the CPU device's kind)."""
    path = script(tmp_path, GENERATION.replace("jax.devices()[0].device_kind", "'cpu'"))
    assert any("ValueError: unsupported tpu_version: 'cpu'" in note for note in notes(verdict(path, 4)))


# -- (c) what is not answered --------------------------------------------------------------------


def test_an_unanswered_attribute_names_itself_and_the_line(tmp_path):
    setup = "bounds = jax.devices()[0].chips_per_host_bounds\nmesh = jax.make_mesh((4,), ('ring',))\n"
    path = script(tmp_path, setup)
    with pytest.raises(ScheduleError) as e:
        check_file(path, 4)
    assert e.value.line == line(path, "chips_per_host_bounds")
    assert e.value.message == ("setup code asked the device for `chips_per_host_bounds`, which ringc's stand-in "
                               "TPU v5e devices do not answer")
    assert "coords" in e.value.fix
    # A probe that falls back is not an error: the kernel is checked.
    probe = setup.replace("jax.devices()[0].chips_per_host_bounds", "getattr(jax.devices()[0], 'chips_per_host_bounds', (2, 2, 1))")
    assert verdict(script(tmp_path, probe), 4).ok
    assert not verdict(script(tmp_path, probe, broken=True), 4).ok


def test_an_attribute_asked_in_a_helper_points_at_the_script(tmp_path):
    (tmp_path / "helper.py").write_text("def bounds(d):\n    return d.host_bounds\n")
    setup = "import helper\nb = helper.bounds(jax.devices()[0])\nmesh = jax.make_mesh((4,), ('ring',))\n"
    path = script(tmp_path, setup)
    with pytest.raises(ScheduleError) as e:
        check_file(path, 4)
    assert e.value.file == path and e.value.line == line(path, "helper.bounds")
    assert f"`host_bounds` (at {tmp_path / 'helper.py'}:2)" in e.value.message


def test_the_cli_says_it_in_one_error_and_exits_2(tmp_path, capsys):
    path = script(tmp_path, "b = jax.devices()[0].host_bounds\nmesh = jax.make_mesh((4,), ('ring',))\n")
    assert main(["check", path, "--devices", "4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{path}:{line(path, 'host_bounds')}: error: setup code asked the device for "
                          "`host_bounds`, which ringc's stand-in TPU v5e devices do not answer\n  fix: ")


def test_an_exception_with_no_message_is_named_with_its_line(tmp_path):
    setup = ("def tile():\n    raise AttributeError()\n\n\ntile()\nmesh = jax.make_mesh((4,), ('ring',))\n")
    path = script(tmp_path, setup)
    report = verdict(path, 4)
    note = next(a for a in report.assumptions if "AttributeError" in a)
    assert note == (f"script note: line {line(path, 'tile()')}: AttributeError with no message, raised at "
                    f"{path}:{line(path, 'raise AttributeError()')} (`raise AttributeError()`) (ringc ran the next "
                    "statement)")
    assert report.ok and not verdict(script(tmp_path, setup, broken=True), 4).ok


def test_the_fix_points_at_the_first_failure_with_no_message_not_its_knock_on(tmp_path):
    """JAX's megablox/ops.py as a script: `gmm = jax.custom_vjp(backend.gmm, ...)` raises an
    AttributeError with no message (line 22), and a later statement using `gmm` a NameError.
    The fix named the NameError; it names the first failure."""
    path = tmp_path / "ops.py"
    path.write_text("import jax\n\n\nclass Backend:\n    def __getattr__(self, name):\n        raise AttributeError\n\n\n"
                    "gmm = jax.custom_vjp(\n    Backend().gmm,\n)\n\ngrad = gmm\n")
    with pytest.raises(ScheduleError) as e:
        check_file(str(path), 2)
    assert "NameError" in e.value.message and "(`raise AttributeError`)" in e.value.message, e.value.message
    assert e.value.fix.startswith("the AttributeError raised at line 9 stopped the script before its kernel ran: "
                                  "fix it there"), e.value.fix


# -- (d) --tpu v5p -------------------------------------------------------------------------------


def test_a_v5p_script_checks_with_tpu_v5p(tmp_path):
    ok = verdict(script(tmp_path, V5P), 4, tpu="v5p")
    assert ok.ok, ok.to_text()
    assert "TPU v5p (--tpu): device_kind 'TPU v5', coords of a 2x2x1 slice, 2 TensorCores" in asked(ok)
    assert not verdict(script(tmp_path, V5P, broken=True), 4, tpu="v5p").ok
    v5e = verdict(script(tmp_path, V5P), 4)  # the default
    assert any("RuntimeError: this script needs TPU v5p devices, got TPU v5 lite" in note for note in notes(v5e))


TEST_MODULE = HEADER + """
import unittest
from jax._src import test_util as jtu


class PermuteTest(unittest.TestCase):
    def setUp(self):
        if not jtu.is_device_tpu(5, "p"):
            self.skipTest("v5p only")

    def test_permute(self):
        global mesh
        mesh = jax.make_mesh((jax.device_count(),), ("ring",))
        exec(compile(KERNEL, __file__, "exec"), globals())


if __name__ == "__main__":
    unittest.main()
"""


@pytest.mark.parametrize("broken", [False, True])
def test_a_test_module_that_runs_on_v5p_only(tmp_path, broken):
    path = tmp_path / "permute_test.py"
    kernel = KERNEL.replace("WAIT", "copy.wait_send()" if broken else "copy.wait()")
    path.write_text(f"KERNEL = {kernel!r}\n" + TEST_MODULE)
    report, = check_file(str(path), 4, tpu="v5p")
    assert report.ok != broken and report.title.startswith("PermuteTest.test_permute: ")
    with pytest.raises(ScheduleError, match="skipped itself \\(v5p only\\)"):
        check_file(str(path), 4, tpu="v6e")


def test_the_cli_takes_tpu_and_refuses_others(tmp_path, capsys):
    path = script(tmp_path, V5P)
    assert main(["check", path, "--devices", "4", "--tpu", "v5p"]) == 0
    assert main(["check", path, "--devices", "4", "--tpu", "v7"]) == 2
    err = capsys.readouterr().err
    assert err == f"{path}: error: --tpu v7: unknown TPU generation 'v7': choose one of v5e, v5p, v4, v6e, v7x (default v5e)\n"


# -- (e) hardware ringc does not model -----------------------------------------------------------

GPU = """
from jax.experimental.pallas import mosaic_gpu as plgpu

def add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1

add = pl.pallas_call(add_one, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                     compiler_params=plgpu.CompilerParams(thread_semantics=plgpu.ThreadSemantics.Warpgroup))
y = jax.jit(add)(jnp.zeros((8, 128)))
"""


@pytest.mark.parametrize("code", [GPU, GPU.replace("from jax.experimental.pallas import mosaic_gpu as plgpu",
                                                    "import jax.experimental.pallas.mosaic_gpu as plgpu")])
def test_a_mosaic_gpu_pallas_call_on_one_gpu_is_refused_as_single_device(tmp_path, capsys, code):
    """A Mosaic GPU pallas_call is checked as a launch of its blocks (tests/test_mgpu.py); one
    outside shard_map is one GPU's kernel: refused as single-device, in one message."""
    path = tmp_path / "other.py"
    path.write_text(HEADER + code)
    assert main(["check", str(path), "--devices", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{path}:{line(str(path), 'y = jax.jit(add)')}: error: the script's 1 kernel call runs "
                          "outside shard_map (single-device kernels)"), err
    assert "Traceback" not in err and "ran no pallas_call" not in err


@pytest.mark.parametrize("code, what, at", [
    ("from jax.experimental.pallas import triton as plt\nparams = plt.CompilerParams(num_warps=4)\n",
     "Pallas Triton GPU kernels (jax.experimental.pallas.triton) are not supported yet", "plt.CompilerParams"),
    # (a kernel over the TensorCores, `pl.kernel` or `pl.core_map`, is checked: tests/test_cores.py)
    ("from jax.experimental.pallas import tpu_sc as plsc\nsc = plsc.VectorSubcoreMesh(core_axis_name='c', "
     "subcore_axis_name='s')\n", "SparseCore kernels", "plsc.VectorSubcoreMesh"),
])
def test_out_of_scope_hardware_is_refused_in_one_line(tmp_path, capsys, code, what, at):
    path = tmp_path / "other.py"
    path.write_text(HEADER + code)
    assert main(["check", str(path), "--devices", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{path}:{line(str(path), at)}: error: {what}")
    assert err.count("\n") == 1 and "ran no pallas_call" not in err


@pytest.mark.parametrize("use", [False, True])
def test_a_pytest_module_importing_a_triton_name_still_checks_its_tpu_kernels(tmp_path, capsys, use):
    """`from jax.experimental.pallas.triton import CompilerParams` at the top of a pytest module
    of TPU kernels (axlearn's paged KV cache test, sweep 18) refused the whole module at the
    import, with nothing checked: the name is now refused where it is used, the TPU kernel is
    checked, and the verdict says what was imported. Using it is still the one refusal."""
    path = tmp_path / "test_mixed.py"
    path.write_text("import jax\nimport jax.numpy as jnp\nfrom jax.experimental import pallas as pl\n"
                    "from jax.experimental.pallas.triton import CompilerParams\n\n\n"
                    "def kernel(x_ref, o_ref):\n    o_ref[...] = x_ref[...] + 1.0\n\n\n"
                    "def test_add_one():\n" + ("    CompilerParams(num_warps=4)\n" if use else "")
                    + "    x = jnp.ones((8, 128), jnp.float32)\n"
                    "    pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)\n")
    from ringc.pallas import check_file
    if use:
        with pytest.raises(ScheduleError, match="Pallas Triton GPU kernels"):
            check_file(str(path), 1)
        return
    report, = check_file(str(path), 1)
    assert report.ok and any("imports `CompilerParams` from jax.experimental.pallas.triton" in a
                             for a in report.assumptions), report.to_text()


def test_importing_gpu_pallas_is_not_using_it(tmp_path):
    """A TPU script that imports Mosaic GPU (for another path) is checked as usual."""
    setup = "from jax.experimental.pallas import mosaic_gpu as plgpu\nmesh = jax.make_mesh((4,), ('ring',))\n"
    assert verdict(script(tmp_path, setup), 4).ok
    assert not verdict(script(tmp_path, setup, broken=True), 4).ok


def test_a_captured_gpu_kernel_is_recognised_from_its_jaxpr():
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu
    from jax.experimental.pallas import tpu as pltpu
    from ringc.pallas.tpu import mosaic_gpu_call, unsupported_in

    def copy(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    spec = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    gpu = jax.make_jaxpr(pl.pallas_call(copy, out_shape=spec, compiler_params=plgpu.CompilerParams()))(spec)
    tpu = jax.make_jaxpr(pl.pallas_call(copy, out_shape=spec, compiler_params=pltpu.CompilerParams()))(spec)
    assert mosaic_gpu_call(gpu.jaxpr.eqns[0]) and not mosaic_gpu_call(tpu.jaxpr.eqns[0])
    assert unsupported_in(gpu.jaxpr) is None and unsupported_in(tpu.jaxpr) is None


# -- undone after the run ------------------------------------------------------------------------


def test_everything_is_put_back(tmp_path):
    import jax
    from jax.experimental.pallas import tpu as pltpu
    before = (pltpu.get_tpu_info, jax.default_backend, sys.modules.get("jax.experimental.pallas.mosaic_gpu"))
    verdict(script(tmp_path, COORDS + GENERATION), 4)
    d = jax.devices()[0]
    assert (d.platform, d.device_kind, hasattr(d, "coords"), hasattr(d, "num_cores")) == ("cpu", "cpu", False, False)
    assert (pltpu.get_tpu_info, jax.default_backend,
            sys.modules.get("jax.experimental.pallas.mosaic_gpu")) == before
    assert jax.default_backend() == "cpu"
    assert os.environ.get("JAX_PLATFORMS") == "cpu"


def test_a_module_with_build_is_traced_on_the_generation(capsys):
    """`right_permute.py` (build(mesh)) traces on an abstract mesh of the --tpu generation."""
    from pathlib import Path
    module = str(Path(__file__).parent / "pallas_import" / "right_permute.py")
    assert main(["check", module, "--devices", "3", "--tpu", "v5p"]) == 0
    assert main(["check", module, "--devices", "3", "--tpu", "v5p", "--param", "late=1"]) == 1


def test_a_schedule_takes_no_tpu(capsys):
    from pathlib import Path
    schedule = str(Path(__file__).parent.parent / "schedules" / "ppermute_right.yaml")
    assert main(["check", schedule, "--devices", "2", "--tpu", "v5p"]) == 2
    assert "--tpu names the TPU a Python kernel's code asks about" in capsys.readouterr().err


def test_an_attribute_jax_reads_for_the_script_is_named_too(tmp_path):
    """JAX's internals see CPU devices: a TPU attribute read there on the script's behalf is
    named, with JAX's line and the script's."""
    setup = ("from jax._src.pallas.mosaic import tpu_info\ncores = tpu_info.get_num_device_cores()\n"
             "mesh = jax.make_mesh((4,), ('ring',))\n")
    path = script(tmp_path, setup)
    with pytest.raises(ScheduleError) as e:
        check_file(path, 4)
    assert e.value.line == line(path, "cores = ")
    assert e.value.message.startswith("setup code asked the device for `num_cores` through JAX (at ")
    assert e.value.message.endswith("which ringc's stand-in TPU v5e devices answer only to the script's own code")
    asked = setup.replace("tpu_info.get_num_device_cores()", "jax.devices()[0].num_cores")
    assert verdict(script(tmp_path, asked), 4).ok
    assert not verdict(script(tmp_path, asked, broken=True), 4).ok


def test_the_cli_names_every_generation_without_importing_them():
    from ringc.cli import TPU_CHOICES
    from ringc.pallas.tpu import DEFAULT, GENERATIONS
    assert TPU_CHOICES.split("|") == [DEFAULT, *(g for g in GENERATIONS if g != DEFAULT)]


def test_the_backend_the_users_code_asks_for_is_the_generations(tmp_path):
    """dtunai/Ring-Attention-Jax (sweep 23) picks its Pallas path with
    `jax.lib.xla_bridge.get_backend().platform == "tpu"`: the backend answered "cpu", and
    the script took its XLA path, with no kernel. The user's code gets the generation's
    platform (JAX's own calls still get the CPU backend); put back after the run."""
    import jax.extend.backend as jex_backend
    before = jex_backend.get_backend
    path = tmp_path / "pick.py"
    path.write_text(
        "import jax\nimport jax.numpy as jnp\nfrom jax.lib import xla_bridge\nfrom jax.experimental import pallas as pl\n\n"
        "def kernel(x_ref, o_ref):\n    o_ref[...] = x_ref[...] * 2.0\n\n"
        "def on_tpu(x):\n    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)\n\n"
        "double = on_tpu if xla_bridge.get_backend().platform == 'tpu' else (lambda x: x * 2.0)\n"
        "jax.jit(double)(jnp.ones((8, 128), jnp.float32))\n")
    report = verdict(str(path), 1)
    assert report.ok and "kernel" in report.title, report.to_text()
    assert jex_backend.get_backend is before and jex_backend.get_backend().platform == "cpu"
