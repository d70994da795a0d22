"""`ringc check kernel.py` on code as published, without a wrapper: the entry shapes of
`ringc/pallas/entries.py` (per-shard launchers, keyword axis names, factories of closures,
meshes with other axis names or extra size-1 axes) and the imports of
`ringc/pallas/imports.py` (the repository's roots, `--stub`, a missing package).

The kernels under `tests/pallas_import/entries/` are written in the styles of real kernel
libraries; each has a broken variant behind a `--param`.
"""

import textwrap
from pathlib import Path

import numpy as np
import pytest

from ringc.errors import ScheduleError
from ringc.pallas import check_file
from ringc.pallas.entries import parse_arg

from cli_run import run_cli

ENTRIES = Path(__file__).parent / "pallas_import" / "entries"


def _said(report, text):
    return any(text in a for a in report.assumptions)


def test_a_per_shard_launcher_taking_arrays_only_runs_under_shard_map_along_axis():
    ok, = check_file(str(ENTRIES / "permute_shard.py"), 4, entry="right_permute", axis="tp")
    assert ok.ok, ok.to_text()
    assert _said(ok, "with mesh {'tp': 4}, axis 'tp' (--axis)")
    assert _said(ok, "per shard: ringc ran it under jax.shard_map") and _said(ok, "check_vma=False")
    assert ok.title.startswith("right_permute(x=float32[8*N,128]@tp (default; set with --arg))")
    late, = check_file(str(ENTRIES / "permute_shard.py"), 4, entry="right_permute", axis="tp", params={"late": 1})
    assert "race" in late.kinds() and not late.ok


def test_the_axis_a_per_shard_launcher_uses_is_found_without_axis():
    """The kernel's `lax.axis_index("tp")` is unbound under ringc's `x`: ringc calls again on "tp"."""
    ok, = check_file(str(ENTRIES / "permute_shard.py"), 3, entry="right_permute")
    assert ok.ok, ok.to_text()
    assert _said(ok, "axis 'tp' (the name the function uses; set with --axis)")


def test_a_launcher_taking_only_an_axis_name_runs_under_shard_map(tmp_path):
    """It makes its own inputs: called outside shard_map it fails on the unbound axis, so
    ringc runs it inside one, with no arrays."""
    path = tmp_path / "demo.py"
    path.write_text((ENTRIES / "permute_shard.py").read_text() + textwrap.dedent("""

        def permute_demo(axis_name: str = "tp", late: int = 0):
            return right_permute(jnp.ones((8, 128), jnp.float32), late)
        """))
    ok, = check_file(str(path), 3)
    assert ok.ok, ok.to_text()
    assert _said(ok, "per shard, with no arrays") and _said(ok, "mesh {'tp': 3}, axis 'tp'")
    late, = check_file(str(path), 3, params={"late": 1})
    assert "race" in late.kinds()


def test_keyword_axis_names_with_defaults_build_the_mesh():
    """`ep_axis_name="ep"` names the ring axis, `dp_axis_name="dp"` a size-1 axis; found
    without --entry (a public function taking an axis name)."""
    ok, = check_file(str(ENTRIES / "ep_gather.py"), 4)
    assert ok.ok, ok.to_text()
    assert _said(ok, "mesh {'dp': 1, 'ep': 4}, axis 'ep' (the default of ep_axis_name)")
    assert _said(ok, "mesh axis 'dp' of size 1: the default of dp_axis_name")
    wrong, = check_file(str(ENTRIES / "ep_gather.py"), 4, params={"wrong": 1})
    assert wrong.kinds() == {"race"}


def test_an_axis_parameter_defaulting_to_none_gets_the_ring_axis(tmp_path):
    path = tmp_path / "ring.py"
    path.write_text((ENTRIES / "ep_gather.py").read_text().replace(
        'ep_axis_name: str = "ep", dp_axis_name: str = "dp"', "ep_axis_name: str | None = None, dp_axis_name=None"))
    ok, = check_file(str(path), 3)
    assert ok.ok, ok.to_text()
    assert _said(ok, "with mesh {'x': 3}, axis 'x' (ringc's; set with --axis)")


def test_an_import_inside_the_entry_function_that_fails_names_the_package(tmp_path):
    path = tmp_path / "lazy.py"
    src = (ENTRIES / "permute_shard.py").read_text().replace(
        "def right_permute(x: jax.Array, late: int = 0) -> jax.Array:\n",
        "def right_permute(x: jax.Array, late: int = 0) -> jax.Array:\n    import vllm.envs\n")
    path.write_text(src)
    with pytest.raises(ScheduleError, match="the file imports `vllm`, which is not installed") as e:
        check_file(str(path), 2, entry="right_permute", axis="tp")
    assert e.value.line == src.splitlines().index("    import vllm.envs") + 1


def test_a_factory_of_start_and_wait_closures_is_one_split_phase_program():
    ok, = check_file(str(ENTRIES / "async_permute.py"), 4, entry="make_async_permute")
    assert ok.ok, ok.to_text()
    assert "_start_kernel, _wait_kernel" in ok.title
    assert _said(ok, "a factory: it returned start, wait; ringc called them in order")
    broken, = check_file(str(ENTRIES / "async_permute.py"), 4, entry="make_async_permute",
                         params={"wait_recv": 0})
    assert "dma_not_waited" in broken.kinds()


def test_a_mesh_with_an_extra_size_one_axis():
    """`all_gather(x, mesh)` reads mesh.shape["data"] and ["model"]: given with --mesh, or found
    from the failures that name them (model renames ringc's x, data is added with size 1)."""
    path = str(ENTRIES / "model_mesh.py")
    given, = check_file(path, 4, entry="all_gather", mesh=(("data", "1"), ("model", "N")))
    assert given.ok, given.to_text()
    assert _said(given, "mesh {'data': 1, 'model': 4}, axis 'model'")
    found, = check_file(path, 4, entry="all_gather")
    assert found.ok, found.to_text()
    assert _said(found, "mesh {'data': 1, 'model': 4}, axis 'model'")
    assert _said(found, "mesh axis 'data' of size 1: the function uses it (set with --mesh)")
    broken, = check_file(path, 4, entry="all_gather", params={"wait_recv": 0})
    assert {"dma_not_waited", "race"} <= broken.kinds()


def test_a_factory_over_the_mesh_returns_a_global_closure():
    ok, = check_file(str(ENTRIES / "model_mesh.py"), 4, entry="make_all_gather")
    assert ok.ok, ok.to_text()
    assert _said(ok, "a factory: it returned gather; ringc called it on x=float32[8*N,128]@model")
    assert _said(ok, "mesh {'data': 1, 'model': 4}, axis 'model'")
    broken, = check_file(str(ENTRIES / "model_mesh.py"), 4, entry="make_all_gather", params={"wait_recv": 0})
    assert "dma_not_waited" in broken.kinds()


def test_a_factorys_closure_runs_traced_as_its_callers_jit_would():
    """`pl.kernel(out_type=pltpu.HBM(...))` in the closure fails eagerly in JAX itself (sweep 8,
    a remote-DMA benchmark): ringc traces the closure, and the kernel is checked."""
    ok, = check_file(str(ENTRIES / "hbm_factory.py"), 4, entry="make_permute", axis="device")
    assert ok.ok, ok.to_text()
    assert _said(ok, "a factory: it returned permute; ringc called it on x=float32[8*N,128]@device")
    broken, = check_file(str(ENTRIES / "hbm_factory.py"), 4, entry="make_permute", axis="device",
                         params={"wait_recv": 0})
    assert not broken.ok and "dma_not_waited" in broken.kinds(), broken.to_text()


def test_entry_naming_a_kernel_body_says_so_and_names_its_launcher(tmp_path):
    """`--entry` on a kernel body (refs and semaphores in; sweep 8's benchmark utilities): one
    message naming the function that launches it, not made-up float32 arrays for semaphores."""
    text = (ENTRIES / "permute_shard.py").read_text()
    body = next(line.split("(")[0][4:] for line in text.splitlines()
                if line.startswith("def ") and "_ref" in line)
    o = run_cli(["check", ENTRIES / "permute_shard.py", "--devices", "2", "--entry", body])
    assert o.code == 2 and "Traceback" not in o.err, str(o)
    assert f"`{body}` is a kernel body (its parameters " in o.err and "float32[ROWS" not in o.err, o.err
    assert "fix: name the function that launches it: --entry right_permute" in o.err, o.err
    alone = tmp_path / "body_only.py"
    alone.write_text("def send_kernel(src_ref, dst_ref, send_sem, recv_sem):\n    pass\n")
    o = run_cli(["check", alone, "--devices", "2", "--entry", "send_kernel"])
    assert o.code == 2 and f"{alone}:1: error: --entry send_kernel: `send_kernel` is a kernel body" in o.err, o.err
    assert "the file only defines the kernel" in o.err


def test_a_build_that_is_not_the_emit_interface_is_an_entry_function(tmp_path):
    """A benchmark's own `build(mesh, shift, repeats)` (sweep 8) is a factory ringc calls, not
    a half-written `ringc emit` interface to complete: its unannotated numbers are asked for
    with --param first, and given, the kernel is checked."""
    path = tmp_path / "bench.py"
    path.write_text((ENTRIES / "hbm_factory.py").read_text().replace(
        "def make_permute(mesh, wait_recv: int = 1):", "def build(mesh, wait_recv):"))
    o = run_cli(["check", path, "--devices", "2"])
    assert o.code == 2 and "the module lacks make_inputs" not in o.err, str(o)
    assert ("fix: if the arguments ringc made arrays for are numbers or words, pass them: --param wait_recv=V; "
            "else") in o.err, o.err
    ok, = check_file(str(path), 2, params={"wait_recv": 1})
    assert ok.ok, ok.to_text()


def test_an_entry_whose_default_keyword_takes_the_lax_path_is_told_which_keyword(tmp_path):
    """Sweep 13 (an ejkernel reduce-scatter: `mode="auto"` took `lax`): the fix named the
    array `x` as a number to pass and offered `--param tiled=VALUE`. It leads with the
    keywords kept at their defaults, words first; given, the kernel is checked."""
    path = tmp_path / "switch.py"
    src = (ENTRIES / "permute_shard.py").read_text()
    head = "def right_permute(x: jax.Array, late: int = 0) -> jax.Array:\n"
    assert head in src
    path.write_text(src.replace(head, "def right_permute(x: jax.Array, late: int = 0, tiled: bool = True, "
                                      "mode: str = \"auto\") -> jax.Array:\n"
                                      "    if mode == \"auto\":   # the lax path\n"
                                      "        n = jax.lax.axis_size(\"tp\")\n"
                                      "        return jax.lax.ppermute(x, \"tp\", [(i, (i + 1) % n) for i in range(n)])\n"))
    o = run_cli(["check", path, "--devices", "2", "--entry", "right_permute", "--axis", "tp"])
    assert o.code == 2, str(o)
    assert ("fix: pass the keyword that chooses the kernel: --param mode=VALUE (its default 'auto') or --param "
            "tiled=VALUE (its default True)") in o.err, o.err
    ok, = check_file(str(path), 2, entry="right_permute", axis="tp", params={"mode": "kernel"})
    assert ok.ok, ok.to_text()


def test_a_syntax_error_in_an_imported_module_names_its_path_and_the_python_its_project_needs(tmp_path):
    """A package written for Python 3.12 (`type X = ...`; tokamax, sweep 8) read by the Python
    ringc runs on: the module's whole path (a package has many `api.py`), the project's
    `requires-python`, and a fix that says so, not "fix it there" at the import line."""
    import sys
    # (a package name no other test uses: run_cli runs in this process, where sys.modules keeps one)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "syntaxpkg"\nrequires-python = ">=3.99"\n')
    (tmp_path / "syntaxpkg").mkdir()
    (tmp_path / "syntaxpkg" / "__init__.py").write_text("")
    (tmp_path / "syntaxpkg" / "api.py").write_text("x = 1\ndef f(:\n    pass\n")
    (tmp_path / "syntaxpkg" / "kern.py").write_text("import jax\nfrom syntaxpkg import api\n")
    o = run_cli(["check", tmp_path / "syntaxpkg" / "kern.py", "--devices", "2"])
    assert o.code == 2 and "Traceback" not in o.err, str(o)
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert f"SyntaxError: invalid syntax at {tmp_path / 'syntaxpkg' / 'api.py'}:2 (its project asks for Python >= 3.99; " \
           f"ringc runs on {here}" in o.err, o.err
    assert "fix: the SyntaxError raised at line 2 stopped the script before its kernel ran: a module it imports " \
           "needs Python >= 3.99: run ringc from a Python that new" in o.err, o.err
    (tmp_path / "pyproject.toml").unlink()
    o = run_cli(["check", tmp_path / "syntaxpkg" / "kern.py", "--devices", "2"])
    assert f"fix it at {tmp_path / 'syntaxpkg' / 'api.py'}:2, in a module it imports" in o.err, o.err


def test_an_int_parameter_without_default_needs_param(tmp_path):
    src = (ENTRIES / "permute_shard.py").read_text().replace(
        "def right_permute(x: jax.Array, late: int = 0)", "def right_permute(x: jax.Array, late: int)")
    path = tmp_path / "needs_late.py"
    path.write_text(src)
    with pytest.raises(ScheduleError, match="parameter `late` \\(int\\) has no default") as e:
        check_file(str(path), 2, entry="right_permute", axis="tp")
    assert e.value.fix == "pass --param late=V" and e.value.line == src.splitlines().index(
        "def right_permute(x: jax.Array, late: int) -> jax.Array:") + 1
    ok, = check_file(str(path), 2, entry="right_permute", axis="tp", params={"late": 0})
    assert ok.ok


def test_every_parameter_ringc_cannot_make_up_is_named_at_once(tmp_path):
    """Sweep 12: a factory of two int parameters without defaults asked for one, then, run
    again, for the other; one message names both, with both --param in its fix, and a str one
    too (--param takes a word: tpu-inference's `activation`, sweep 25, was told to change the
    kernel)."""
    src = (ENTRIES / "permute_shard.py").read_text().replace(
        "def right_permute(x: jax.Array, late: int = 0)", "def right_permute(x: jax.Array, late: int, hops: int, tag: str)")
    path = tmp_path / "needs_two.py"
    path.write_text(src)
    with pytest.raises(ScheduleError, match="parameters `late` \\(int\\), `hops` \\(int\\), `tag` \\(str\\) have no "
                                            "default, and ringc cannot make them up") as e:
        check_file(str(path), 2, entry="right_permute", axis="tp")
    assert e.value.fix == "pass --param late=V --param hops=V --param tag=WORD", e.value.fix


def test_a_param_no_entry_function_takes_is_bad_input():
    with pytest.raises(ScheduleError, match="--param wait_recv: no entry function takes it \\(right_permute\\)"):
        check_file(str(ENTRIES / "permute_shard.py"), 2, entry="right_permute", axis="tp", params={"wait_recv": 0})


def test_arg_shards_along_a_named_axis():
    ok, = check_file(str(ENTRIES / "permute_shard.py"), 2, entry="right_permute", axis="tp",
                     args=[parse_arg("x=float32[16*N,256]@tp")])
    assert ok.ok and "x=float32[16*N,256]@tp)" in ok.title
    with pytest.raises(ScheduleError, match="the mesh has no axis 'y'"):
        check_file(str(ENTRIES / "permute_shard.py"), 2, entry="right_permute", axis="tp",
                   args=[parse_arg("x=float32[8*N,128]@y")])


# A serving framework's package: its __init__ imports vllm (not installed); the kernel module
# imports a tuned block-size table beside it by a relative import.
PACKAGE = {
    "serving/__init__.py": """\
        from vllm.logger import init_logger

        logger = init_logger(__name__)
        """,
    "serving/kernels/__init__.py": "",
    "serving/kernels/tuned_block_sizes.py": """\
        TUNED_ROWS = {2: 8, 4: 16}


        def get_rows(num_devices):
            return TUNED_ROWS.get(num_devices, 8)
        """,
    "serving/kernels/permute.py": (ENTRIES / "permute_shard.py").read_text()
    .replace('TP = "tp"\n', 'TP = "tp"\nROWS = tuned_block_sizes.get_rows(2)\n')
    .replace("    return pl.pallas_call(\n",
             "    assert x.shape[0] % ROWS == 0, 'rows: a multiple of the tuned block'\n    return pl.pallas_call(\n")
    .replace("import functools\n", "import functools\n\nfrom . import tuned_block_sizes\n"),
}


def _package(tmp_path, files=PACKAGE):
    for name, text in files.items():
        p = tmp_path / "repo" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return tmp_path / "repo"


def test_a_missing_package_is_one_message_with_both_fixes(tmp_path):
    repo = _package(tmp_path)
    kernel = repo / "serving" / "kernels" / "permute.py"
    with pytest.raises(ScheduleError) as e:
        check_file(str(kernel), 2, entry="right_permute", axis="tp")
    assert e.value.message == "the file imports `vllm` (through serving/__init__.py:1), which is not installed"
    assert e.value.line == kernel.read_text().splitlines().index("from . import tuned_block_sizes") + 1
    assert e.value.fix == "pip install vllm, or pass --stub vllm if the kernel does not need it"
    o = run_cli(["check", kernel, "--devices", "2", "--entry", "right_permute", "--axis", "tp"], budget=60)
    assert o.code == 2 and "Traceback" not in o.out + o.err
    assert f"{kernel}:{e.value.line}: error: the file imports `vllm`" in o.err
    assert "fix: pip install vllm, or pass --stub vllm" in o.err


def test_a_missing_package_names_every_package_its_import_chain_lacks(tmp_path):
    """ejkernel's ring attention took three runs (chex; then einops, imported by a sibling;
    then triton, by another kernel family), sglang-jax's MoE test five: the message names
    every package not installed that the file's import chain imports, each with its place,
    and none that it does not (a benchmark's sibling `import kernel`, a server's own
    dependencies): an import under `try`, `if TYPE_CHECKING:` or in a function is left out."""
    repo = _package(tmp_path, {**PACKAGE,
                               "serving/kernels/__init__.py": "from . import rearrange\nfrom ..gpu import triton_kernels\n",
                               "serving/kernels/rearrange.py": "import ringc_missing_einops_like\n",
                               "serving/gpu/__init__.py": "",
                               "serving/gpu/triton_kernels.py":
                                   "import os\n\nfrom ringc_missing_triton_like import jit\n",
                               "serving/optional.py": "try:\n    import ringc_missing_optional\nexcept ImportError:\n"
                                                      "    pass\n",
                               "serving/server.py": "import ringc_missing_server_only\n",
                               "serving/bench/bench.py": "import kernel\nimport ringc_missing_bench_only\n",
                               "serving/bench/kernel.py": "",
                               "serving/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                                   "    import ringc_missing_typing_only\n"
                                                   "def f():\n    import ringc_missing_lazy\n"})
    (repo / "serving" / "kernels" / "rearrange.py").write_text("from .. import optional, typed\n"
                                                               "import ringc_missing_einops_like\n")
    kernel = repo / "serving" / "kernels" / "permute.py"
    with pytest.raises(ScheduleError) as e:
        check_file(str(kernel), 2, entry="right_permute", axis="tp")
    assert e.value.message == (
        "the file imports `vllm` (through serving/__init__.py:1), which is not installed; the modules it imports in turn "
        "import `ringc_missing_einops_like` (serving/kernels/rearrange.py:2), `ringc_missing_triton_like` "
        "(serving/gpu/triton_kernels.py:3), not installed either")
    assert e.value.fix == ("pip install vllm ringc_missing_einops_like ringc_missing_triton_like, or pass --stub vllm "
                           "--stub ringc_missing_einops_like --stub ringc_missing_triton_like if the kernel does not "
                           "need them")


def test_stub_lets_the_package_import_and_the_relative_import_of_a_table_work(tmp_path):
    kernel = _package(tmp_path) / "serving" / "kernels" / "permute.py"
    ok, = check_file(str(kernel), 2, entry="right_permute", axis="tp", stubs=("vllm",))
    assert ok.ok, ok.to_text()
    assert _said(ok, "stubbed modules: vllm (--stub): code that uses them is not checked")
    assert _said(ok, "vllm.logger.init_logger() at __init__.py:3")
    late, = check_file(str(kernel), 2, entry="right_permute", axis="tp", stubs=("vllm",), params={"late": 1})
    assert "race" in late.kinds()
    o = run_cli(["check", kernel, "--devices", "2", "--entry", "right_permute", "--axis", "tp", "--stub", "vllm"],
                budget=60)
    assert o.code == 0, o
    assert "assumes: stubbed modules: vllm (--stub)" in o.out


def test_stubbing_a_submodule_stubs_its_missing_parent(tmp_path):
    files = dict(PACKAGE)
    files["serving/__init__.py"] = "from vllm.logger import init_logger\n"
    kernel = _package(tmp_path, files) / "serving" / "kernels" / "permute.py"
    ok, = check_file(str(kernel), 2, entry="right_permute", axis="tp", stubs=("vllm.logger",))
    assert ok.ok, ok.to_text()
    assert _said(ok, "stubbed modules: vllm.logger (--stub): code that uses them is not checked")
    assert not _said(ok, "never imported")
    unused, = check_file(str(kernel), 2, entry="right_permute", axis="tp", stubs=("vllm", "sglang"))
    assert _said(unused, "stubbed modules: vllm, sglang (--stub): code that uses them is not checked (sglang never "
                         "imported)")


def test_stubs_stand_in_for_what_published_code_does_with_a_framework(tmp_path):
    """Annotations (`jax.Array | torch.Tensor`, `Optional[...]`), decorators, subclasses,
    flags: the code as written runs; calls are recorded."""
    import typing
    from ringc.pallas.imports import importing
    path = tmp_path / "uses_stubs.py"
    path.write_text("")
    with importing(str(path), stubs=("torch", "vllm")) as imports:
        import torch
        from vllm.envs import USE_PATHWAYS
        from vllm.model_executor import register

        def kernel(x):
            return x

        assert register(kernel) is kernel and torch.compile(kernel) is kernel  # decorators keep the function
        assert typing.Optional[int | torch.Tensor] is not None
        assert not USE_PATHWAYS and list(torch.cuda.devices()) == []

        class Layer(torch.nn.Module):
            pass

        assert Layer().__class__.__name__ == "Layer"
        torch.manual_seed(0)
    assert ("torch.manual_seed", f"{Path(__file__).name}:{_line_of_seed()}") in imports.calls
    assert "torch" not in __import__("sys").modules


def _line_of_seed() -> int:
    return next(i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1)
                if line.strip() == "torch.manual_seed(0)")


def test_a_kernel_that_needs_a_stubs_value_says_so(tmp_path):
    files = dict(PACKAGE)
    files["serving/kernels/permute.py"] = PACKAGE["serving/kernels/permute.py"].replace(
        "from . import tuned_block_sizes\n", "from . import tuned_block_sizes\nfrom vllm.config import get_config\n"
    ).replace("out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype)",
              "out_shape=jax.ShapeDtypeStruct((get_config().rows, 128), x.dtype)")
    kernel = _package(tmp_path, files) / "serving" / "kernels" / "permute.py"
    line = kernel.read_text().splitlines().index(
        "        out_shape=jax.ShapeDtypeStruct((get_config().rows, 128), x.dtype),") + 1
    with pytest.raises(ScheduleError, match=f"the code called the stub vllm.config.get_config\\(\\) at line {line}: "
                                            "its result is a stand-in"):
        check_file(str(kernel), 2, entry="right_permute", axis="tp", stubs=("vllm",))


def test_a_test_module_beside_its_package_imports_it(tmp_path):
    files = dict(PACKAGE)
    files["tests/test_permute.py"] = """\
        import unittest

        import jax
        from jax.sharding import PartitionSpec as P

        from serving.kernels import permute


        class PermuteTest(unittest.TestCase):
            def test_permute(self):
                mesh = jax.make_mesh((jax.device_count(),), ("tp",))
                x = jax.numpy.zeros((8 * jax.device_count(), 128))
                jax.jit(jax.shard_map(permute.right_permute, mesh=mesh, in_specs=P("tp"), out_specs=P("tp"),
                                      check_vma=False))(x)


        if __name__ == "__main__":
            unittest.main()
        """
    test = _package(tmp_path, files) / "tests" / "test_permute.py"
    ok, = check_file(str(test), 2, stubs=("vllm",))
    assert ok.ok, ok.to_text()
    assert "PermuteTest.test_permute" in ok.title


def test_a_parameterized_test_is_titled_with_its_whole_parameters(tmp_path):
    """absl's parameterized tests have ids like `m.Class.test_ring0 (<class 'numpy.float32'>,
    P=2)`: the dots inside the parameters must not cut the title short."""
    files = dict(PACKAGE)
    files["tests/test_permute.py"] = """\
        import jax
        import numpy as np
        from absl.testing import absltest, parameterized
        from jax.sharding import PartitionSpec as P

        from serving.kernels import permute


        class PermuteTest(parameterized.TestCase):
            @parameterized.product(dtype=[np.float32], rows=[8])
            def test_permute(self, dtype, rows):
                mesh = jax.make_mesh((jax.device_count(),), ("tp",))
                x = jax.numpy.zeros((rows * jax.device_count(), 128), dtype)
                jax.jit(jax.shard_map(permute.right_permute, mesh=mesh, in_specs=P("tp"), out_specs=P("tp"),
                                      check_vma=False))(x)


        if __name__ == "__main__":
            absltest.main()
        """
    test = _package(tmp_path, files) / "tests" / "test_permute.py"
    ok, = check_file(str(test), 2, stubs=("vllm",))
    assert ok.ok, ok.to_text()
    assert ok.title.startswith("PermuteTest.test_permute0 (dtype=numpy.float32, rows=8): "), ok.title


def test_stub_and_axis_are_refused_for_a_schedule():
    from cli_run import assert_refused
    from conftest import REPO
    o = run_cli(["check", str(REPO / "schedules" / "ppermute_right.yaml"), "--devices", "2", "--stub", "vllm"])
    assert_refused(o, says="--stub")


@pytest.mark.parametrize("text, message", [
    ("data=1,model=N", None),
    ("data:1", "is not NAME=SIZE"),
    ("x=N,x=1", "named twice"),
])
def test_mesh_syntax(text, message):
    from ringc.pallas.entries import parse_mesh
    if message is None:
        assert parse_mesh(text) == (("data", "1"), ("model", "N"))
    else:
        with pytest.raises(ValueError, match=message):
            parse_mesh(text)


SIZED = str(ENTRIES / "sized_ring.py")


def _sized(value: str):
    report, = check_file(SIZED, 4, args=[parse_arg(f"sizes=int32[N]@{value}")])
    return report


def test_a_finding_on_made_up_integers_says_so_in_its_headline_and_names_the_arg_to_give():
    """All-zero `sizes` (made up) break the kernel's contract: the hang it gives is flagged
    as such in the verdict's first line, with the --arg that gives real values."""
    made = _sized("")
    assert made.kinds() == {"hang", "byte_mismatch"} and made.made_up == ("sizes",)
    head = made.to_text().splitlines()[0]
    assert "FAILED on made-up inputs" in head and "its findings may come from the zeros ringc made up for sizes" in head
    assert "--arg 'sizes=int32[N]@=VALUE'" in head
    assert made.to_json()["made_up_inputs"] == ["sizes"]


def test_real_values_for_an_integer_argument_decide_the_verdict():
    ok = _sized("=np.full(N, 8)")  # the contract: every block is whole
    assert ok.ok and not ok.made_up, ok.to_text()
    assert "made-up" not in ok.to_text() and "sizes=int32[N]@=np.full(N, 8)" in ok.title
    assert any("with the values given with --arg" in a for a in ok.assumptions)
    half = _sized("=np.full(N, 4)")  # half of each block is sent: a real hang, on real values
    assert "hang" in half.kinds() and not half.made_up
    assert "made-up" not in half.to_text().splitlines()[0]


def test_values_from_a_npy_file(tmp_path):
    path = tmp_path / "sizes.npy"
    np.save(path, np.full(4, 8, np.int32))
    assert _sized(f"={path}").ok
    np.save(path, np.full(5, 8, np.int32))
    with pytest.raises(ScheduleError, match=r"has shape \[5\] at N = 4, the declared \[N\] is \[4\]"):
        _sized(f"={path}")


@pytest.mark.parametrize("value, message", [
    ("=np.full(N + 1, 8)", r"--arg sizes: the value `np.full\(N \+ 1, 8\)` has shape \[5\] at N = 4"),
    ("=np.fulll(N, 8)", r"failed at N = 4: AttributeError: module 'numpy' has no attribute 'fulll'"),
    ("=np.full(N, 8.5)", r"holds 8.5 at \[0\], which int32 cannot hold"),
    ("=open('x')", r"failed at N = 4: NameError: name 'open' is not defined"),
    ("=np.full(N, 'a')", r"holds <U1, not numbers"),
    ("=/nowhere/sizes.npy", r"cannot read /nowhere/sizes.npy"),
])
def test_a_bad_value_is_one_message_with_the_fix(value, message):
    with pytest.raises(ScheduleError, match=message) as e:
        _sized(value)
    assert "np.full(N, 1)" in e.value.fix and "a .npy file" in e.value.fix


def test_parse_arg_reads_a_value_after_the_spec():
    a = parse_arg("group_sizes=int32[2*N]@=np.full(2*N, 8)")
    assert (a.spec, a.value, a.made_up) == (("",), "np.full(2*N, 8)", False)
    b = parse_arg("x=int32[8*N,128]@x,=np.zeros((8*N, 128))")
    assert b.spec == ("x", "") and b.value == "np.zeros((8*N, 128))"
    assert b.text() == "x=int32[8*N,128]@x,=np.zeros((8*N, 128))"
    assert parse_arg("ids=int32[N]@").made_up and not parse_arg("x=float32[N]@").made_up
    with pytest.raises(ValueError, match="nothing after `=`"):
        parse_arg("ids=int32[N]@=")
    scalar = parse_arg("length=int32[]@=32")   # a 0-d array (JetStream's chunked prefill `length`)
    assert (scalar.dims, scalar.spec, scalar.value) == ((), (), "32")


def test_the_cli_takes_a_value_and_reports_a_bad_one_without_a_traceback():
    ok = run_cli(["check", SIZED, "--devices", "4", "--arg", "sizes=int32[N]@=np.full(N, 8)"], budget=60)
    assert ok.code == 0, ok
    bad = run_cli(["check", SIZED, "--devices", "4", "--arg", "sizes=int32[N]@=np.full(N+1, 8)"], budget=60)
    assert bad.code == 2 and "Traceback" not in bad.out + bad.err, bad
    assert "has shape [5] at N = 4" in bad.out + bad.err


EXCHANGE_ARGS = [parse_arg("control=int32[(N-1)*N,128]@core=np.ones(((N-1)*N,128))"),
                 parse_arg("payload=int32[(N-1)*N,8,128]@core"),
                 parse_arg("counts=int32[(N-1)*N,128]@core=np.ones(((N-1)*N,128))")]


def test_a_factory_returning_the_pallas_call_itself_is_found_and_its_arrays_named():
    """A module whose only public function is `make_exchange_call(mesh, *, wrong=False)`, which
    returns `pl.pallas_call(kernel, ...)` (a research library's variable-count exchange): it was
    "no entry function: none takes an axis name", and with --entry the closure was called on one
    made-up array ("Pytree for `in_specs` and `inputs` do not match"). Now a function taking a
    mesh is an entry when none takes an axis name, and the pallas_call's inputs are the kernel's
    first parameters, named without `_ref` for --arg."""
    path = str(ENTRIES / "exchange_factory.py")
    ok, = check_file(path, 4, axis="core", args=EXCHANGE_ARGS)
    assert ok.ok, ok.to_text()
    assert _said(ok, "a factory: it returned pl.pallas_call(kernel); ringc called it per shard")
    assert _said(ok, "control=int32[(N-1)*N,128]@core=np.ones(((N-1)*N,128)), payload=")
    broken, = check_file(path, 4, axis="core", args=EXCHANGE_ARGS, params={"wrong": 1})
    assert "race" in broken.kinds()
    made_up, = check_file(path, 4, axis="core")  # no values for the control it branches on
    assert "control_ref" in made_up.to_text() and not made_up.ok


def test_pallas_call_inputs_reads_the_kernel_not_the_wrapper():
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    from ringc.pallas.entries import pallas_call_inputs

    def kernel(x_ref, y, o_ref, scratch_ref):
        pass

    def star(*refs):
        pass
    out = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    from jax.experimental.pallas import tpu as pltpu
    call = pl.pallas_call(kernel, out_shape=out, scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)])
    assert pallas_call_inputs(call) == ["x", "y"]
    assert pallas_call_inputs(pl.pallas_call(star, out_shape=out)) is None
    assert pallas_call_inputs(lambda a, b: a) is None


def test_an_entry_that_launches_a_sparsecore_kernel_is_refused_at_its_line(tmp_path):
    """A serving library's SparseCore scatter: `sc_scatter(tokens, ids, *, bt: int, top_k: int,
    mesh)` builds `plsc.ScalarSubcoreMesh` after reading `tokens.shape[1]`. It was "parameter
    `bt` has no default", and with every --param an IndexError on the made-up array: now the
    entry is not called and the refusal names SparseCore at the line that uses it."""
    path = tmp_path / "sc_scatter.py"
    path.write_text(textwrap.dedent('''\
        import jax
        from jax.experimental import pallas as pl
        from jax.experimental.pallas import tpu as pltpu
        from jax.experimental.pallas import tpu_sc as plsc


        def sc_scatter(tokens, ids, *, bt: int, top_k: int, tp_axis_name: str = "tensor", mesh):
            packing = tokens.shape[1]

            def body(tokens_hbm, ids_hbm, out_hbm, sem):
                pass
            kernel = pl.kernel(body, out_shape=tokens, mesh=plsc.ScalarSubcoreMesh(axis_name="core", num_cores=1),
                               scratch_shapes=[pltpu.SemaphoreType.DMA])
            return jax.shard_map(kernel, mesh=mesh, in_specs=None, out_specs=None)(tokens, ids)
        '''))
    with pytest.raises(ScheduleError) as e:
        check_file(str(path), 4)
    assert e.value.message.startswith("SparseCore kernels (jax.experimental.pallas.tpu_sc) are not supported")
    assert e.value.line == 12


BLOCKED = '''
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def scale(x, axis_name: str = "x"):
    """Per shard, in blocks of 128 rows."""
    assert x.shape[0] % 128 == 0, f"rows {x.shape[0]} are not whole blocks of 128"
    rows = x.shape[0] // 128
    return pl.pallas_call(_kernel, grid=(rows,), out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          in_specs=[pl.BlockSpec((128, 128), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((128, 128), lambda i: (i, 0)))(x)
'''


def test_an_entry_whose_blocks_outgrow_the_default_arrays_says_how_to_size_them(tmp_path):
    """ringc's default array is one (8, 128) tile per device: a kernel in blocks of 128 rows
    fails its own shape assert. The refusal names the arrays ringc made and the --arg that sizes
    them (it said only `--entry NAME --arg x=float32[8*N,128]@x`); with them the call runs."""
    path = tmp_path / "blocked.py"
    path.write_text(BLOCKED)
    with pytest.raises(ScheduleError) as e:
        check_file(str(path), 2)
    assert "scale ran no kernel (AssertionError: rows 8 are not whole blocks of 128" in e.value.message
    assert ("ringc made x=float32[8*N,128]@x (its default, one (8, 128) tile per device): if the kernel's blocks "
            "need more, size them: --entry scale --arg x=float32[ROWS,COLS]@x") in e.value.message, e.value.message
    (report,) = check_file(str(path), 2, entry="scale", args=[parse_arg("x=float32[128*N,128]@x")])
    assert "scale(x=float32[128*N,128]@x)" in report.title


TWO_AXES = '''
import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def kernel(x_ref, o_ref, send_sem, recv_sem):
    nx = jax.lax.axis_size("x")
    right = jax.lax.rem(jax.lax.axis_index("x") + 1, nx)
    copy = pltpu.make_async_remote_copy(x_ref, o_ref.at[pl.ds(0, 8)], send_sem, recv_sem,
                                        device_id=(right, jax.lax.axis_index("y")),
                                        device_id_type=pltpu.DeviceIdType.MESH)

    @pl.when(pl.program_id(0) == 0)
    def _():
        copy.start()
        copy.wait()


def shift(x):
    nx = jax.lax.axis_size("x")
    return pl.pallas_call(kernel, grid=(nx // 2,), out_shape=jax.ShapeDtypeStruct((8 * nx, 128), x.dtype),
                          in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec(memory_space=pl.ANY),
                          scratch_shapes=[pltpu.SemaphoreType.DMA] * 2)(x)
'''


def test_a_per_shard_launcher_on_two_axes_keeps_the_ring_on_the_axis_it_was_guessed(tmp_path):
    """The function reads `y`, then `x`: ringc renamed its guessed ring `x` to `y` on the first
    failure, then added `x` of size 1 on the second, and the grid (N_x // 2,) was empty: an
    `ok` that checked nothing. The guess was one of the function's axes: it keeps the N
    devices, the other axis is size 1. A kernel whose grid is empty is refused by name."""
    path = tmp_path / "two_axes.py"
    path.write_text(TWO_AXES)
    (report,) = check_file(str(path), 4, entry="shift")
    assert report.ok, report.to_text()
    assert _said(report, "mesh {'x': 4, 'y': 1}, axis 'x'") and _said(report, "mesh axis 'y' of size 1")
    assert "(20 events" in report.to_text()   # the copies ran (8 events: none did)
    path.write_text(TWO_AXES.replace("grid=(nx // 2,)", "grid=(nx // 8,)"))
    (empty,) = check_file(str(path), 4, entry="shift")
    assert not empty.ok and "has an empty grid (0,): its kernel never runs" in empty.error.message


JITTED_FACTORY = '''
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def make_permute(mesh, late: int = 0):
    n = mesh.size

    def kernel(x_ref, o_ref, send_sem, recv_sem):
        right = lax.rem(lax.axis_index("i") + 1, n)
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(right,),
                                            device_id_type=pl.DeviceIdType.MESH)
        copy.start()
        if not late:
            copy.wait()

    call = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                          in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec(memory_space=pl.ANY),
                          scratch_shapes=[pltpu.SemaphoreType.DMA] * 2)
    spec = jax.sharding.PartitionSpec("i")
    return jax.jit(jax.shard_map(call, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False))
'''


def test_a_factory_returning_a_jitted_shard_map_is_called_with_an_array(tmp_path):
    """The returned `jax.jit(jax.shard_map(...))` has the signature `(*args)`: ringc read it as
    taking no arrays and called it with none (JAX: "Pytree for in_specs and inputs do not
    match"). It gets one default array (or the --arg ones), and a missing wait is found."""
    path = tmp_path / "factory.py"
    path.write_text(JITTED_FACTORY)
    (ok,) = check_file(str(path), 4)
    assert ok.ok and "(20 events" in ok.to_text(), ok.to_text()
    (late,) = check_file(str(path), 4, params={"late": 1})
    assert not late.ok and "dma_not_waited" in late.kinds(), late.to_text()
    # `--arg x=...@i` names the mesh axis before the function does: ringc takes it (it refused
    # "the mesh has no axis 'i'" on its own first guess, `x`)
    (given,) = check_file(str(path), 4, entry="make_permute", args=[parse_arg("x=float32[8*N,128]@i")])
    assert given.ok and _said(given, "axis 'i' (the axis the --arg arrays are sharded along)"), given.to_text()


def test_a_missing_package_comes_before_another_entrys_refusal(tmp_path):
    """Two entry functions: the first takes an int without a default (refused: ringc cannot
    make one up), the second imports a package that is not installed. Neither runs a kernel;
    the message is the missing package, the first thing to fix (it was the int parameter)."""
    path = tmp_path / "two_entries.py"
    path.write_text(
        "import jax\n\n\n"
        "def first(x, chunk_size: int, axis_name: str = 'x'):\n"
        "    return x\n\n\n"
        "def second(x, axis_name: str = 'x'):\n"
        "    import not_a_package_anywhere\n"
        "    return x\n")
    with pytest.raises(ScheduleError) as e:
        check_file(str(path), 2)
    assert "the file imports `not_a_package_anywhere`" in e.value.message, e.value.message


def test_an_entry_a_failed_import_left_undefined_is_the_missing_import(tmp_path):
    """`--entry launch` on a module whose `from flax import ...` failed (maxtext, ejkernel,
    axlearn: sweep 11) said "the module has no function of that name; name one of: print"
    (`print`: ringc's own stand-in). The missing package is why: its message, as without
    --entry. A name the module really lacks lists the module's own functions only."""
    path = tmp_path / "kern.py"
    from conftest import COPY_CALL, COPY_KERNEL
    path.write_text(COPY_KERNEL.replace("import jax,", "from ringc_missing_pkg import MASK_VALUE\nimport jax,")
                    + f"def launch(x, *, fill=MASK_VALUE):\n    return {COPY_CALL}\n")
    with pytest.raises(ScheduleError) as e:
        check_file(str(path), 1, entry="launch", args=[parse_arg("x=float32[8,128]@")])
    assert e.value.message == "the file imports `ringc_missing_pkg`, which is not installed" and e.value.line == 1
    path.write_text("import jax\n\n\ndef helper(x):\n    print(x)\n    return x\n")
    with pytest.raises(ScheduleError) as e:
        check_file(str(path), 1, entry="launch", args=[parse_arg("x=float32[8,128]@")])
    assert e.value.message == "--entry launch: the module has no function of that name"
    assert e.value.fix == "name one of: helper", e.value.fix


AMBIENT = '''
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.sharding import PartitionSpec as P

def _k(x_ref, o_ref):
    o_ref[...] = x_ref[...]

@jax.jit
def copy_sharded(x):
    @jax.shard_map(in_specs=P("tensor", None), out_specs=P("tensor", None), check_vma=False)
    def per_shard(x):
        assert x.shape[0] == 8, f"local rows {x.shape[0]}, expected 8 (global 8*N over N)"
        return pl.pallas_call(_k, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    return per_shard(x)
'''


def test_an_entry_that_runs_its_own_shard_map_on_the_ambient_mesh_is_called_on_global_arrays(tmp_path):
    """sglang-jax's kv-cache update calls `jax.shard_map` with no `mesh=` (its caller's
    `jax.set_mesh`) (sweep 11): ringc ran it per shard, so its own shard_map split each shard
    again (a confusing assertion, or at larger sizes a check of half the heads). It is called
    on the global arrays, under the mesh as the ambient one."""
    path = tmp_path / "ambient.py"
    path.write_text(AMBIENT)
    report, = check_file(str(path), 2, entry="copy_sharded", args=[parse_arg("x=float32[8*N,128]@tensor")],
                         mesh=(("tensor", "N"),))
    assert report.ok, report.to_text()
    assert any("with mesh {'tensor': 2}" in a for a in report.assumptions), report.assumptions


def test_ringcs_own_name_error_inside_an_entry_call_is_not_blamed_on_the_entry(tmp_path, monkeypatch):
    """ringc's own NameError, raised while it called an entry function (a missing import in
    ringc, met while building the ambient-mesh fix), read "copy_sharded raised NameError": it
    is ringc's bug and is raised as such, not reported as the user's error."""
    import ringc.pallas.entries as entries
    ns: dict = {}
    exec(compile("def broken(*args, **kwargs):\n    return not_defined_anywhere\n", entries.__file__, "exec"), ns)
    monkeypatch.setattr(entries, "_global_array", ns["broken"])
    path = tmp_path / "k.py"
    from conftest import COPY_CALL, COPY_KERNEL
    path.write_text(COPY_KERNEL + f"def launch(x):\n    return {COPY_CALL}\n")
    with pytest.raises(NameError, match="not_defined_anywhere"):
        check_file(str(path), 1, entry="launch", args=[parse_arg("x=float32[8,128]@")])


SHAPED = '''
import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

ROWS = 64


def make_permute(mesh):
    tc = pltpu.create_tensorcore_mesh("tc", num_cores=1)

    @jax.shard_map(mesh=mesh, in_specs=P("device"), out_specs=P("device"), check_vma=False)
    def permute(x):
        @pl.kernel(out_type=pltpu.HBM(x.shape, x.dtype), mesh=tc,
                   scratch_types=(pltpu.VMEM((ROWS, 128), x.dtype), pltpu.SemaphoreType.DMA))
        def kernel(x_hbm, o_hbm, acc, sem):
            pltpu.async_copy(x_hbm.at[0], acc, sem).wait()   # a shard of [1, ROWS, 128] per device
            pltpu.async_copy(acc, o_hbm.at[0], sem).wait()
        return kernel(x)

    return permute
'''


def test_a_call_not_checked_on_arrays_ringc_shaped_says_so_and_names_the_arg(tmp_path):
    """Sweep 12 (a per-chip benchmark's factory): ringc called the closure on its default
    x=float32[8*N,128], the kernel's copy then had unequal shapes, and the "not checked"
    verdict blamed the kernel alone. It says the shapes were ringc's and which --arg gives
    the kernel's; with that --arg the call is checked."""
    path = tmp_path / "shaped.py"
    path.write_text(SHAPED)
    bad, = check_file(str(path), 2, entry="make_permute", axis="device")
    text = bad.to_text()
    assert not bad.ok and "not checked on arrays ringc shaped itself (x=float32[8*N,128]@device)" in text, text
    assert "--arg 'x=DTYPE[DIMS]@device'" in text.splitlines()[0]
    assert "the shapes differ" in text and "(default; set with --arg)" in text
    assert bad.to_json()["shaped_by_ringc"] == ["x=float32[8*N,128]@device"]
    ok, = check_file(str(path), 2, entry="make_permute", axis="device",
                     args=[parse_arg("x=float32[N,64,128]@device")])
    assert ok.ok, ok.to_text()


def test_a_private_one_chip_launcher_is_named_and_called_outside_shard_map(tmp_path):
    """levanter's depthwise convolution (sweep 23) has one launcher, `_forward_core`: the
    refusal named no function (it listed public ones only), and with --entry and an unsharded
    --arg the call ran under a shard_map of 4 devices (N=4). The module's functions that run a
    kernel are named first, private ones too, and kernel bodies never; such an entry is one
    chip's call (N = 1), while a kernel naming an axis still runs per shard."""
    path = tmp_path / "conv.py"
    path.write_text(textwrap.dedent("""\
        from functools import partial
        import jax
        import jax.numpy as jnp
        from jax.experimental import pallas as pl


        def _kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...] + AXIS


        def helper(n):
            return n + 1


        @partial(jax.jit, static_argnames=("block",))
        def _forward_core(x, block: int = 8):
            return pl.pallas_call(_kernel, grid=(x.shape[0] // block,),
                                  in_specs=[pl.BlockSpec((block, x.shape[1]), lambda i: (i, 0))],
                                  out_specs=pl.BlockSpec((block, x.shape[1]), lambda i: (i, 0)),
                                  out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
        """))
    path.write_text(path.read_text().replace("AXIS", "1.0"))
    with pytest.raises(ScheduleError) as refused:
        check_file(str(path), 4)
    assert "the module's functions are _forward_core, helper, those that run a kernel first" in refused.value.message, \
        refused.value.message
    report, = check_file(str(path), 4, entry="_forward_core", args=[parse_arg("x=float32[64,128]@")])
    assert report.ok and "N=1" in report.to_text().splitlines()[0], report.to_text()
    assert _said(report, "one chip's call: the function takes no axis name")
    path.write_text(path.read_text().replace("+ 1.0", "+ jax.lax.axis_index('x').astype(jnp.float32)"))
    report, = check_file(str(path), 4, entry="_forward_core", args=[parse_arg("x=float32[64,128]@")])
    assert report.ok and "N=4" in report.to_text().splitlines()[0], report.to_text()


def test_a_factory_needing_values_and_a_missing_package_is_told_everything_in_one_run(tmp_path):
    """A benchmark's `build(mesh, flows: list[Flow], repeats: int)` beside `import tpu_init`
    (sweep 24): five runs, one need each (`--param repeats`, then the missing package, then
    `--param flows`, whose list ringc had made an array of). The package comes first; then
    every value parameter at once, a list as a Python literal."""
    path = tmp_path / "flows.py"
    path.write_text(textwrap.dedent("""\
        import jax
        from jax.experimental import pallas as pl
        from jax.sharding import PartitionSpec as P
        import tpu_init_not_installed

        Flow = tuple[int, int]


        def build(mesh: jax.sharding.Mesh, flows: list[Flow], repeats: int):
            def kernel(x_ref, o_ref):
                o_ref[...] = x_ref[...]

            @jax.shard_map(mesh=mesh, in_specs=P('device'), out_specs=P('device'), check_vma=False)
            def exchange(x):
                return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
            return exchange
        """))
    with pytest.raises(ScheduleError) as first:
        check_file(str(path), 4)
    assert "imports `tpu_init_not_installed`, which is not installed" in first.value.message, first.value.message
    with pytest.raises(ScheduleError) as then:
        check_file(str(path), 4, stubs=("tpu_init_not_installed",))
    assert "parameters `flows` (list), `repeats` (int) have no default" in then.value.message, then.value.message
    assert then.value.fix.startswith("pass --param flows=[...] --param repeats=V") and "which takes a mesh" in \
        then.value.fix, then.value.fix
    report, = check_file(str(path), 4, stubs=("tpu_init_not_installed",), params={"flows": [(0, 1)], "repeats": 1})
    assert report.ok, report.to_text()
