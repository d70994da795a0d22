"""What public kernels as published are told (sweep 6 of real code): the package to install,
the stub that broke import-time code, entry functions whose axis parameter ends in `_axis`,
the whole of an error that names the bad argument after its first line, a fixed device count,
JAX's renamed shard_map keyword. Each case was a file that stopped with a message that
pointed the wrong way."""

import textwrap

import pytest

from ringc.errors import ScheduleError
from ringc.pallas import check_file

PERMUTE = '''
import functools
import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
P = jax.sharding.PartitionSpec


def _kernel(x_ref, o_ref, send_sem, recv_sem):
    right = lax.rem(lax.axis_index(AXIS) + 1, lax.axis_size(AXIS))
    c = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(right,),
                                     device_id_type=pltpu.DeviceIdType.MESH)
    c.start()
    WAIT


def _call(x):
    return pl.pallas_call(
        _kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA])(x)
'''


def _file(tmp_path, body, wait="c.wait()", axis='"x"', name="kernel.py"):
    path = tmp_path / name
    path.write_text(PERMUTE.replace("WAIT", wait).replace("AXIS", axis) + textwrap.dedent(body))
    return path


def test_the_fix_names_the_package_pip_installs():
    from ringc.pallas.imports import pip_name
    assert pip_name("attr") == "attrs" and pip_name("zmq") == "pyzmq" and pip_name("einops") == "einops"


def test_a_missing_module_whose_package_has_another_name_is_fixed_with_the_package(tmp_path, monkeypatch):
    import ringc.pallas.imports as imports
    monkeypatch.setitem(imports.PIP_NAMES, "ringc_missing_attr_like", "ringc-missing-attrs-like")
    path = tmp_path / "uses.py"
    path.write_text("import ringc_missing_attr_like\n")
    with pytest.raises(ScheduleError) as e:
        check_file(str(path), 2)
    assert e.value.fix.startswith("pip install ringc-missing-attrs-like, or pass --stub ringc_missing_attr_like")


def test_an_entry_whose_axis_parameter_ends_in_axis_is_called(tmp_path):
    """sglang-jax's `kv_cache_update(..., kv_partition_axis="tensor")`; a broken variant (no
    wait) is a finding, so the entry really ran."""
    body = '''
    def right_permute(x, *, kv_partition_axis: str = "x"):
        return _call(x)
    '''
    ok, = check_file(str(_file(tmp_path, body)), 2)
    assert ok.ok and "the default of kv_partition_axis" in ok.to_text(), ok.to_text()
    bad, = check_file(str(_file(tmp_path, body, wait="pass")), 2)
    assert not bad.ok


def test_an_array_dimension_named_axis_is_not_taken_for_a_mesh_axis():
    import inspect
    from ringc.pallas.entries import axis_parameters

    def f(x, *, concat_axis: int = 0, kv_partition_axis: str = "x", axis_name="y"):
        pass
    assert [p.name for p in axis_parameters(dict(inspect.signature(f).parameters))] == ["kv_partition_axis",
                                                                                         "axis_name"]


def test_an_error_that_names_the_bad_argument_after_its_first_line_is_shown_whole(tmp_path):
    """JAX's shard_map divisibility error says which argument does not divide on its later
    lines; the message kept only the first, cut at 160 characters."""
    from ringc.pallas.entries import parse_arg
    body = '''
    def right_permute(mesh, x, y, *, axis_name="x"):
        @functools.partial(jax.shard_map, mesh=mesh, in_specs=(P(axis_name), P(axis_name)),
                           out_specs=P(axis_name), check_vma=False)
        def f(x, y):
            return _call(x)
        return jax.jit(f)(x, y)
    '''
    with pytest.raises(ScheduleError) as e:
        check_file(str(_file(tmp_path, body)), 4, args=[parse_arg("x=float32[8*N,128]@x"),
                                                        parse_arg("y=float32[6,128]@")])
    assert "args[1] of shape float32[6,128]" in e.value.message and "does not evenly divide 6" in e.value.message


def test_a_script_with_a_fixed_mesh_size_is_told_the_device_count(tmp_path):
    body = '''
    mesh = jax.make_mesh((8,), ("x",))
    y = jax.jit(jax.shard_map(_call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))(
        jax.numpy.zeros((64, 128)))
    '''
    with pytest.raises(ScheduleError) as e:
        check_file(str(_file(tmp_path, body)), 4)
    assert "it lays out 8 devices: check with --devices 8" in e.value.fix, e.value.fix
    ok, = check_file(str(_file(tmp_path, body)), 8)
    assert ok.ok, ok.to_text()


def test_a_stub_that_breaks_import_time_code_is_named_with_the_package_to_install(tmp_path):
    """axlearn's config module decorates a class with `attr.define(...)`: with `--stub`, the
    stand-in breaks the import; the fix names the stub call and the package, not "fix it there"."""
    pkg = tmp_path / "cfgpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "config.py").write_text("import ringc_stubbed_attrs\n\n\nclass _Base:\n    pass\n\n\n"
                                   "Cfg = ringc_stubbed_attrs.define(maybe_cls=_Base, kw_only=True)\n"
                                   "NAME = Cfg.__qualname__\n")
    path = _file(tmp_path, "from cfgpkg import config\n")
    with pytest.raises(ScheduleError) as e:
        check_file(str(path), 2, stubs=("ringc_stubbed_attrs",))
    assert "the code called the stub ringc_stubbed_attrs.define() at config.py:8" in e.value.message, e.value.message
    assert "pip install ringc_stubbed_attrs instead of stubbing it" in e.value.fix, e.value.fix


def test_shard_maps_old_check_rep_keyword_is_its_new_name(tmp_path):
    body = '''
    def doubled(mesh, x, *, axis_name="x"):
        f = functools.partial(jax.shard_map, mesh=mesh, in_specs=P(axis_name), out_specs=P(axis_name),
                              check_rep=False)(_call)
        return jax.jit(f)(x)
    '''
    ok, = check_file(str(_file(tmp_path, body)), 2)
    assert ok.ok, ok.to_text()
    assert any("jax.shard_map(check_rep=...) -> jax.shard_map(check_vma=...)" in a for a in ok.assumptions)
