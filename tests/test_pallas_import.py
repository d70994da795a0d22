"""`ringc check kernel.py` on hand-written Pallas kernels (tests/pallas_import/)."""

from pathlib import Path

import pytest

from conftest import line_of
from ringc.errors import ScheduleError
from ringc.pallas import check_module

HERE = Path(__file__).parent / "pallas_import"
RIGHT_PERMUTE = HERE / "right_permute.py"


@pytest.mark.parametrize("n", [2, 3, 4])
def test_hand_written_right_permute_passes(n):
    report = check_module(str(RIGHT_PERMUTE), n)
    assert report.ok, report.to_text()
    assert report.program.n == n


def test_wait_recv_after_the_read_is_a_race_at_the_read():
    report = check_module(str(RIGHT_PERMUTE), 4, params={"late": 1})
    races = [f for f in report.findings if f.kind == "race"]
    assert races, report.to_text()
    read = line_of(RIGHT_PERMUTE.read_text(), "out_ref[...] = recv_buf[...]")
    assert {int(f.event.line) for f in races} == {read}
    assert races[0].event.line.file.endswith("right_permute.py")
    text = report.to_text()
    assert f"right_permute.py:{read}: error: [race]" in text


SPLIT_CALLS = HERE / "split_calls.py"


def test_dma_started_in_one_call_and_waited_in_the_next_is_one_dma():
    report = check_module(str(SPLIT_CALLS), 3)
    assert report.ok, report.to_text()
    assert "2 pallas_call(s)" in report.to_text()


def test_forgetting_the_wait_in_the_second_call_is_caught():
    report = check_module(str(SPLIT_CALLS), 3, params={"wait": 0})
    assert {"dma_not_waited", "race"} <= report.kinds(), report.to_text()


def test_a_fori_loop_around_pallas_calls_is_unrolled():
    report = check_module(str(SPLIT_CALLS), 4, params={"rounds": 3})
    assert "6 pallas_call(s)" in report.to_text()
    assert report.kinds() == {"wrong_result"}, report.to_text()  # a permute by 3, not by SHIFT = 1
    assert "x_ref@1[" in report.to_text()  # device 0 holds device 1's block: (0 - 3) % 4


def test_a_script_without_build_is_refused_before_it_runs(tmp_path):
    script = tmp_path / "notebook.py"
    script.write_text("raise SystemExit('ran')\n")
    with pytest.raises(ScheduleError, match="no build"):
        check_module(str(script), 2)


KERNEL_TEMPLATE = '''
import jax, jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
P = jax.sharding.PartitionSpec
COLLECTIVE, AXIS, IN_SPECS, OUT_SPECS = None, "x", (P("x", None),), P("x", None)

def kernel(x_ref, o_ref):
{body}

def build(mesh, **params):
    call = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                          in_specs=[pl.BlockSpec(memory_space={space})],
                          out_specs=pl.BlockSpec(memory_space={space}))
    return jax.jit(jax.shard_map(call, mesh=mesh, in_specs=IN_SPECS, out_specs=OUT_SPECS, check_vma=False))

def make_inputs(mesh, key, **params):
    return (jnp.zeros((8 * mesh.shape["x"], 128), jnp.float32),)
'''


def _kernel(tmp_path, body: str, space: str = "pltpu.VMEM") -> str:
    path = tmp_path / "k.py"
    path.write_text(KERNEL_TEMPLATE.format(body=body, space=space))
    return str(path)


def test_an_unknown_primitive_with_effects_is_an_error_at_its_line(tmp_path):
    path = _kernel(tmp_path, "    from jax.experimental import checkify; checkify.check(x_ref[0, 0] > 0, 'negative')\n    o_ref[...] = x_ref[...]")
    with pytest.raises(ScheduleError) as e:
        check_module(path, 2)
    assert "`check`" in str(e.value) and e.value.line == 10 and e.value.file.endswith("k.py")


def test_a_branch_on_tensor_data_is_sampled_and_the_verdict_says_so(tmp_path):
    """A predicate computed from tensor data is runtime data (issue 31): ringc samples it
    reproducibly and says so, instead of refusing the kernel."""
    body = ("    @pl.when(x_ref[0, 0] > 0)\n    def _():\n        o_ref[...] = x_ref[...]")
    report = check_module(_kernel(tmp_path, body), 2)
    note = [a for a in report.assumptions if a.startswith("values from tensor data")]
    assert note and "`gt` at line" in note[0] and "false or true" in note[0], report.to_text()
    again = check_module(_kernel(tmp_path, body), 2)
    assert again.assumptions == report.assumptions and again.ok == report.ok  # reproducible


def test_old_spellings_get_an_alias_and_the_verdict_says_so(tmp_path):
    path = _kernel(tmp_path, "    o_ref[...] = x_ref[...]", space="pltpu.TPUMemorySpace.ANY")
    direct = check_module(path, 2)  # a direct load and store of HBM refs, as interpret mode runs them
    assert direct.ok and any("modelled as a direct write to HBM" in a for a in direct.assumptions)
    path = _kernel(tmp_path, "    pltpu.sync_copy(x_ref, o_ref)", space="pltpu.TPUMemorySpace.ANY")
    report = check_module(path, 2)
    assert report.ok, report.to_text()
    assert any("checked with alias pltpu.TPUMemorySpace" in a for a in report.assumptions)


def test_docs_list_exactly_the_rule_table():
    from ringc.pallas.interpret import rule_table_markdown
    doc = (Path(__file__).parent.parent / "docs" / "pallas-import.md").read_text()
    table = doc.split("<!-- rules:start -->\n")[1].split("\n<!-- rules:end -->")[0]
    assert table == rule_table_markdown()


ALL_GATHER_FLAT = HERE / "all_gather_flat.py"


def test_a_flat_output_is_checked_on_its_per_device_view():
    """`out` is [N * rows, cols] (lax.all_gather(tiled=True)'s layout): the meaning is
    checked on [N, rows, cols], on the quotient when every device runs device 0's events."""
    report = check_module(str(ALL_GATHER_FLAT), 4)
    assert report.ok, report.to_text()
    assert report.program.steps == {("out_ref", 0): (1,), ("out_ref", 1): (0,)}
    assert any("`out_ref` [32, 128] viewed as [4, 8, 128]" in a for a in report.assumptions)


def test_a_flat_output_holding_the_wrong_blocks_is_a_wrong_result():
    report = check_module(str(ALL_GATHER_FLAT), 4, params={"wrong": 1})
    wrong = [f for f in report.findings if f.kind == "wrong_result"]
    assert wrong and report.kinds() == {"race", "wrong_result"}, report.to_text()
    assert all("shape" not in f.message for f in wrong)
    assert "device 0: out_ref[0, 0:8, 0:128] ends as uninitialized" in report.to_text()


@pytest.mark.parametrize("call,kind", [
    ("lax.all_gather(a, 'x')", "all_gather"),
    ("lax.all_gather(a, 'x', tiled=True)", "all_gather"),
    ("lax.all_gather(a, 'x', axis=1, tiled=True)", None),
    ("lax.psum_scatter(a, 'x', tiled=True)", "psum_scatter"),
    ("lax.psum_scatter(a, 'x', scatter_dimension=1, tiled=True)", None),
    ("lax.all_to_all(a, 'x', 0, 0, tiled=True)", "all_to_all"),
    ("lax.all_to_all(a, 'x', 1, 0, tiled=True)", None),
])
def test_a_scripts_lax_reference_names_a_meaning_only_in_the_tables_layout(call, kind):
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec as P
    from ringc.pallas.script import lax_reference
    mesh = AbstractMesh((4,), ("x",), axis_types=(AxisType.Explicit,))
    fn = jax.shard_map(eval(f"lambda a: {call}", {"lax": lax}), mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    arg = jax.ShapeDtypeStruct((64, 16), jnp.float32, sharding=NamedSharding(mesh, P("x")))
    got = lax_reference(jax.make_jaxpr(fn)(arg).jaxpr)
    assert (got and got["kind"]) == kind


def test_a_while_loop_runs_under_the_loop_iterations_limit(tmp_path):
    """A `while` in a kernel is unrolled up to `loop_iterations` (limits.py, adjustable);
    past it, one message naming the limit and how to raise it."""
    from ringc import limits
    body = ("    n = lax.while_loop(lambda i: i < 50, lambda i: i + 1, 0)\n"
            "    o_ref[...] = x_ref[...] + n.astype(jnp.float32)")
    path = _kernel(tmp_path, body)
    assert check_module(path, 2).ok  # 50 iterations, within the default
    with limits.overridden({"loop_iterations": 10}), pytest.raises(ScheduleError) as e:
        check_module(path, 2)
    assert "10 iterations, the limit `loop_iterations`" in str(e.value) and "--limit loop_iterations=" in e.value.fix
