"""Scripts as published on a TPU slice and over device ranges (`tests/pallas_import/slices/`):
a one-axis mesh of every device placed over a 2-D slice (`--topology v5e:2x2`), the device
count taken from a sized topology, JAX's own device list (`jax._src.xla_bridge.devices()`),
a range of sizes where some refuse, and SparseCore code beside single-device kernels."""

from pathlib import Path

import jax
import pytest

from ringc.errors import ScheduleError
from ringc.pallas import check_file
from ringc.pallas.tpu import answering, generation

from cli_run import run_cli

SLICES = Path(__file__).parent / "pallas_import" / "slices"
LINE = SLICES / "line_permute.py"


def _line(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


# -- F2: a one-axis mesh of 4 on a 2x2 slice ------------------------------------------------------


@pytest.mark.parametrize("spec", ["v5e:2x2", "torus:2x2"])
def test_a_one_axis_mesh_of_four_runs_over_the_whole_2x2_slice(spec):
    """The mesh's 4 devices are the slice's 4 chips in jax.devices() order (x fastest, as
    their `coords` say): not a ring of 2 along x placed twice, whose labels wrapped device 3
    onto (1, *)."""
    report, = check_file(str(LINE), 4, topology=spec)
    assert report.ok, report.to_text()
    assert report.placement.endswith("the mesh's x=4 over the whole slice in its devices' order: "
                                      "(0,0) (1,0) (0,1) (1,1)"), report.placement
    assert "instances" not in report.placement
    text = report.to_text()
    assert "*" not in text
    # device 1 at (1, 0) sends to device 2 at (0, 1): two links, through (0, 0)
    far, = [f for f in report.findings if f.kind == "not_neighbour"]
    assert "at device (1, 0)" in far.message and "goes to device (0, 1), 2 hops away" in far.message
    assert "((1, 0) -> (0, 0) -> (0, 1))" in far.message
    assert report.program.device_labels == ["(0, 0)", "(1, 0)", "(0, 1)", "(1, 1)"]


def test_a_sized_topology_gives_a_script_its_device_count():
    """`--topology v5e:2x2` without --devices runs the script on the slice's 4 devices, as
    `--help` says --devices is optional with a sized topology."""
    o = run_cli(["check", LINE, "--topology", "v5e:2x2"], budget=60)
    assert o.code == 0, o
    assert "N=4 on v5e:2x2 (2x2, no wraparound), the mesh's x=4 over the whole slice" in o.out, o


@pytest.mark.parametrize("n, spec", [(8, "v5e:2x2"), (4, "v5e:4x4"), (2, "torus:2x2")])
def test_a_device_count_the_topology_does_not_have_is_refused_as_for_a_schedule(n, spec):
    size = 16 if spec == "v5e:4x4" else 4
    with pytest.raises(ScheduleError, match=f"topology '{spec}' has {size} devices, but N={n}; pass --devices "
                                            f"{size} or a topology of {n} devices"):
        check_file(str(LINE), n, topology=spec)


def test_a_mesh_of_the_slices_shape_keeps_its_axes(tmp_path):
    """A 2x2 mesh on v5e:2x2 binds its axes to the slice's, as before (no chip list)."""
    text = LINE.read_text().replace('jax.sharding.Mesh(jax.devices(), ("x",))', 'jax.make_mesh((2, 2), ("x", "y"))')
    text = text.replace('device_id=(right,)', 'device_id=(lax.rem(lax.axis_index("x") + 1, 2), lax.axis_index("y"))')
    text = text.replace('P("x")', 'P(("x", "y"))')
    path = tmp_path / "square_permute.py"
    path.write_text(text)
    report, = check_file(str(path), 4, topology="v5e:2x2")
    assert report.ok, report.to_text()
    assert report.placement == "v5e:2x2 (2x2, no wraparound) along x, y", report.placement


# -- F1: jax._src.xla_bridge's device list -------------------------------------------------------


def test_xla_bridges_devices_are_the_scripts_devices():
    """tpu-inference's `make_optimized_mesh` sorts `xla_bridge.devices()` by `coords`: every
    route to the device list gives the N devices, each answering `coords` (the spare CPU
    device ringc starts JAX with made it an AttributeError with no message)."""
    report, = check_file(str(SLICES / "bridge_devices.py"), 4)
    assert report.ok, report.to_text()
    assert not any("script note" in a for a in report.assumptions), report.assumptions
    assert any("the code asked coords" in a for a in report.assumptions)


def test_jax_internals_still_see_every_cpu_device():
    from jax._src import xla_bridge as xb
    before = len(xb.devices())
    assert before > 4
    report, = check_file(str(SLICES / "bridge_devices.py"), 2)
    assert report.ok and len(xb.devices()) == before


def test_a_device_past_n_says_why_it_does_not_answer():
    gen = generation("v5e")
    spare = jax.devices()[3]
    with answering(gen, 2, __file__):
        with pytest.raises(AttributeError, match="device 3 is not one of the 2 devices ringc runs the code on"):
            spare.coords  # noqa: B018 (the question is the test)
        assert jax.devices()[1].coords == [0, 1, 0]  # a v5e 1x2 slice


# -- F4: a range where some sizes refuse ---------------------------------------------------------


def test_each_size_of_a_range_gets_its_verdict_or_its_refusal():
    """The script asserts a 2x2 mesh: N=2, 3 and 5 are refused, each naming its N, and N=4
    is still checked; the summary counts them all."""
    path = SLICES / "square_only.py"
    o = run_cli(["check", path, "--devices", "2..5"], budget=120)
    assert o.code == 2, o
    refusals = [line for line in o.err.splitlines() if ": error: N=" in line]
    assert [line.split(": error: ")[1][:4] for line in refusals] == ["N=2:", "N=3:", "N=5:"], o
    assert all("AssertionError: expected a 2x2 device mesh" in line for line in refusals)
    assert f"{path} _kernel (line {_line(path, '    main()')}, through main() at line {_line(path, '    return f(')}" \
        in o.out and "N=4: ok (" in o.out, o
    assert "Bad input: 1 verdict in 1 file: 1 ok, 0 failed, 3 refused as bad input" in o.err, o


def test_a_single_size_refusal_does_not_name_the_size():
    o = run_cli(["check", SLICES / "square_only.py", "--devices", "2"], budget=60)
    # (the assert that stopped the script leads, at its line: no `N=2:` before it)
    assert o.code == 2 and ":25: error: no kernel ran: line 35: AssertionError: expected a 2x2 device mesh" in o.err, o
    assert ": error: N=" not in o.err, o


# -- F6: SparseCore beside single-device kernels -------------------------------------------------


def test_sparsecore_beside_single_device_kernels_is_a_not_checked_verdict_of_its_own():
    """The chapter's single-device kernels are checked as one chip's programs (N = 1); its
    SparseCore kernel is a "not checked" verdict at the line that uses it, not a note."""
    path = SLICES / "sparsecore_beside_local.py"
    first, second, sparse = check_file(str(path), 2)
    assert first.ok and second.ok and first.program.n == 1, first.to_text()
    assert any("one chip's kernel, called outside shard_map" in a for a in first.assumptions)
    assert not sparse.ok and sparse.error.line == _line(path, "# the SparseCore line")
    assert sparse.error.message.startswith("SparseCore kernels (jax.experimental.pallas.tpu_sc) are not supported: ")
