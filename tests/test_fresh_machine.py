"""Issue 30: what a new user meets on a fresh machine.

- CI installs into its own fresh virtual environment with the README's command and runs the
  README's test command there; every module the tests need is declared.
- A kernel never runs at sizes `ringc check` has not proved: `kernel` checks new sizes first
  (cached in memory and on disk) and refuses inexact divisions at its line.
- The checked file's own code runs under `user_code_s`.
- A failing check piped into `head` keeps its exit code.
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import subprocess
import time
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from cli_run import assert_refused, run_cli
from conftest import REPO

import ringc
from ringc import jaxapi


def _readme_commands() -> list[str]:
    block = re.search(r"```sh\n(.*?)```", (REPO / "README.md").read_text(), re.S).group(1)
    return [ln for ln in block.splitlines() if ln and not ln.startswith("#")]


def test_ci_runs_the_readme_test_command_in_a_fresh_virtual_environment():
    script = (REPO / ".ci" / "run").read_text()
    commands = _readme_commands()
    assert len(commands) == 2, commands  # the README's first screen: one main job, one test run
    lines = [ln.strip() for ln in script.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    venv = next(i for i, ln in enumerate(lines) if re.search(r"python3? -m venv ", ln))
    activate = next(i for i, ln in enumerate(lines) if re.match(r"(\.|source) .*bin/activate", ln))
    test = lines.index(commands[1])  # word for word
    assert venv < activate < test
    assert "mktemp -d" in script  # a new folder each run: nothing installed before is seen


def _declared() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values() for r in extra]
    return {re.split(r"[\[<>=!~ ;]", r, maxsplit=1)[0].lower().replace("_", "-") for r in reqs}


def _top_imports(paths) -> set[str]:
    out = set()
    for path in paths:
        for node in ast.walk(ast.parse(Path(path).read_text())):
            if isinstance(node, ast.Import):
                out |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                out.add(node.module.split(".")[0])
    return out


def test_every_third_party_module_the_code_and_tests_import_is_declared():
    """Installed here is not declared: each distribution providing an imported module must be
    in pyproject's dependencies or extras (absl-py was missing: JAX's test utilities need it)."""
    local = {p.stem for p in (REPO / "tests").glob("*.py")} | {"ringc", "conftest", "cli_run"}
    local |= {p.name for p in (REPO / "tests").iterdir() if p.is_dir()}
    files = [*(REPO / "ringc").rglob("*.py"), *(REPO / "tests").glob("*.py")]
    providers = importlib.metadata.packages_distributions()
    declared = _declared() | {"libtpu"}  # libtpu: what the `tpu` extra's jax[tpu] installs
    missing = {}
    for module in sorted(_top_imports(files) - set(sys.stdlib_module_names) - local):
        dists = {d.lower().replace("_", "-") for d in providers.get(module, [])}
        if dists and not dists & declared and not dists & {"jax", "jaxlib"}:
            missing[module] = sorted(dists)
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"
    assert "absl-py" in _declared()


def test_jax_test_utilities_import():
    """`ringc check` runs JAX's own test modules; their helpers import absl."""
    import jax._src.test_util  # noqa: F401


# ------------------------------------------------------------ sizes not proved are checked

@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RINGC_CACHE_DIR", str(tmp_path / "verdicts"))
    jaxapi._VERDICTS.clear()
    yield tmp_path / "verdicts"
    jaxapi._VERDICTS.clear()


def _trace(module, n: int, shard_shape: tuple[int, ...]):
    """Trace `module.kernel` on n devices (nothing runs): what `kernel` refuses, it refuses here."""
    import jax
    from jax.sharding import PartitionSpec as P
    mesh = jax.sharding.AbstractMesh((n,), ("i",))
    fn = jax.shard_map(lambda x: module.kernel(x, axis_name="i"), mesh=mesh, in_specs=P("i"), out_specs=P("i"),
                       check_vma=False)
    return jax.make_jaxpr(fn)(jax.ShapeDtypeStruct((n * shard_shape[0], *shard_shape[1:]), "float32"))


def test_an_inexact_division_at_solved_params_is_refused_at_its_line(cache):
    """The issue's repro: a bidirectional all-gather with `half: rows // 2`, proved at rows = 8,
    called per shard on (5, 128): row 4 would never be sent. Refused, naming the let's line."""
    path = REPO / "schedules" / "all_gather_bidirectional.yaml"
    module = ringc.kernel(path)
    line = next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if re.match(r"\s*half: rows // 2", ln))
    with pytest.raises(ValueError, match=re.escape(f"all_gather_bidirectional.yaml:{line}: error: let `half`: "
                                                   "`rows // 2` is 5 // 2 at rows=5")):
        _trace(module, 4, (5, 128))
    _trace(module, 4, (16, 128))  # rows = 16 divides: checked now, and it passes
    assert {"N": 4, "rows": 16, "cols": 128} in module.CHECKED


def test_a_size_the_check_fails_at_is_refused_before_the_kernel_runs(cache):
    """Proved at N = 2 only (where left = right hides the direction), called at N = 4: the
    check at 4 fails, and `kernel` raises with the findings and the command to reproduce."""
    module = ringc.kernel(REPO / "tests" / "broken" / "all_gather_wrong_direction.yaml", devices=[2])
    assert module.CHECKED == [{"N": 2, **module.PARAMS}]
    _trace(module, 2, (8, 128))
    with pytest.raises(ValueError, match=r"fails `ringc check` at N=4.*reproduce: `ringc check "
                                         r".*all_gather_wrong_direction.yaml --devices 4`"):
        _trace(module, 4, (8, 128))


def test_verdicts_are_cached_in_memory_and_on_disk(cache, monkeypatch):
    path = REPO / "schedules" / "all_gather_ring.yaml"
    module = ringc.kernel(path)
    _trace(module, 5, (8, 128))  # N = 5 was not proved before emitting: checked now
    assert len(list(cache.glob("*.json"))) == 1

    def no_check(*a, **k):
        raise AssertionError("checked again")
    monkeypatch.setattr(jaxapi, "_check_at", no_check)
    _trace(ringc.kernel(path, unchecked=True), 5, (8, 128))  # unchecked module: runs anything
    again = jaxapi.import_kernel(ringc.load(path), checked=[])  # a new module, nothing proved
    jaxapi._VERDICTS.clear()  # a new process: only the disk remembers
    _trace(again, 5, (8, 128))
    with pytest.raises(AssertionError, match="checked again"):
        _trace(again, 6, (8, 128))


def test_an_unchecked_module_runs_any_size(cache):
    module = ringc.kernel(REPO / "tests" / "broken" / "all_gather_wrong_direction.yaml", unchecked=True)
    assert module.CHECKED is None
    _trace(module, 4, (8, 128))


def test_an_emitted_file_carries_its_schedule_and_what_was_proved(tmp_path, cache):
    out = tmp_path / "ag.py"
    o = run_cli(["emit", REPO / "schedules" / "all_gather_ring.yaml", "-o", out], budget=60)
    assert o.code == 0, str(o)
    text = out.read_text()
    assert "CHECKED = [" in text and "_checked(sizes)" in text
    namespace: dict = {}
    exec(compile(text, str(out), "exec"), namespace)
    assert ringc.load(REPO / "schedules" / "all_gather_ring.yaml").text == namespace["SCHEDULE"]
    assert [c["N"] for c in namespace["CHECKED"]] == [2, 3, 4]


# -------------------------------------------------------------------- the user's own code

@pytest.mark.parametrize("where,code,line", [
    ("at import", "import jax\n\nx = 0\nwhile True:\n    x += 1\n", 4),
    ("in build", textwrap.dedent("""\
        import jax
        COLLECTIVE, AXIS, IN_SPECS, OUT_SPECS = None, "x", (), None

        def build(mesh):
            while True:
                pass

        def make_inputs(mesh, key):
            return ()
        """), 5),
])
def test_user_code_runs_under_a_time_limit(tmp_path, where, code, line):
    path = tmp_path / "spin.py"
    path.write_text(code)
    o = run_cli(["check", path, "--devices", "4", "--limit", "user_code_s=1"], budget=30)
    assert_refused(o, line=line, says="the limit `user_code_s`", seconds=20)
    assert "--limit user_code_s=" in o.err


@pytest.mark.parametrize("runner,code,line", [
    ("unittest", textwrap.dedent("""\
        import unittest

        class Spin(unittest.TestCase):
            def test_a(self):
                pass

            def test_b(self):
                while True: pass  # noqa: E701

        if __name__ == "__main__":
            unittest.main()
        """), 8),
    ("pytest", textwrap.dedent("""\
        def test_a():
            pass


        def test_b():
            while True: pass  # noqa: E701
        """), 6),
])
def test_a_test_module_past_the_time_limit_names_the_test_and_suggests_test(tmp_path, runner, code, line):
    """unittest and pytest catch every exception of a test, the limit's included: JAX's
    tpu_paged_attention_kernel_test.py (872 tests) ran on past `user_code_s` (sweep 9) and was
    killed with nothing said. The limit stops the run at the test it was in, and the fix
    says to check fewer tests with --test."""
    path = tmp_path / "spin_test.py"
    path.write_text(code)
    o = run_cli(["check", path, "--devices", "2", "--limit", "user_code_s=2"], budget=60)
    assert_refused(o, line=line, says="the limit `user_code_s`", seconds=30)
    assert "in test" in o.err and "test_b" in o.err and "(2 of the module's 2 tests)" in o.err, o.err
    assert "--test NAME" in o.err and "--limit user_code_s=" in o.err


def test_the_tests_before_the_one_a_limit_stopped_are_checked(tmp_path):
    """A test module stopped by a limit keeps the verdicts of the tests that ran before: their
    kernel calls are checked and printed, then the limit's message (sweep 10: a slow test
    after a kernel test lost every verdict)."""
    path = tmp_path / "slow_test.py"
    path.write_text(textwrap.dedent("""\
        import time
        from absl.testing import absltest
        import jax, jax.numpy as jnp
        from jax.experimental import pallas as pl

        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...] + 1

        class T(absltest.TestCase):
            def test_a_kernel(self):
                jax.jit(lambda x: pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32))(x))(
                    jnp.zeros((8, 128), jnp.float32))

            def test_b_slow(self):
                time.sleep(60)

        if __name__ == "__main__":
            absltest.main()
        """))
    o = run_cli(["check", path, "--devices", "1", "--limit", "user_code_s=3"], budget=60)
    assert o.code == 2, str(o)
    assert "T.test_a_kernel: kernel (line 11, kernel call 1 of 1) N=1: ok" in o.out, str(o)
    assert f"{path}:15: error: the file's own code ran for 3 s, the limit `user_code_s`; it was at line 15, in test " \
           "T.test_b_slow (2 of the module's 2 tests)" in o.err, str(o)


def test_the_command_ends_when_a_limit_stops_code_that_left_work_in_flight(tmp_path):
    """JAX's sparse.md tutorial benchmarks dense matmuls on the CPU devices: stopped by
    `user_code_s` in `block_until_ready`, the computation it waited for kept running, and the
    process sat at its exit for minutes after printing the message. The `ringc` command ends
    once its output is out (`cli.console`)."""
    path, done, seconds = _stopped_spin(tmp_path, "jax.block_until_ready(spin(jnp.ones((512, 512), jnp.float32)))",
                                        "jax.lax.fori_loop(0, 10**6, lambda i, x: jnp.tanh(x @ x), x)", 3)
    assert f"{path}:5: error: the file's own code ran for 3 s, the limit `user_code_s`" in done.stderr, done.stderr
    assert seconds < 60, "the process waited at exit for the computation in flight"


def _stopped_spin(tmp_path, call: str, loop: str, limit: int):
    """`ringc check` (the command, in its own process) of a script whose line 5 runs `call`
    on `spin = jax.jit(lambda x: LOOP)`, under `user_code_s=limit`: it must end with exit 2."""
    path = tmp_path / "spin.py"
    path.write_text(f"import jax\nimport jax.numpy as jnp\n\nspin = jax.jit(lambda x: {loop})\n{call}\n")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ringc", "check", str(path), "--devices", "2", "--limit",
                           f"user_code_s={limit}"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2, done
    return path, done, time.perf_counter() - start


def test_the_command_ends_at_the_limit_when_the_code_is_blocked_in_one_computation(tmp_path):
    """jax-llm-examples' decode_ragged_dot test (sweep 23) sat in one long XLA computation:
    JAX waits for it with the GIL released, so no signal handler ran, and the command went
    past `user_code_s` (300 s) with nothing printed until it was killed. A watchdog ends the
    command a grace after the limit, with the limit's message at the blocked line."""
    path, done, seconds = _stopped_spin(tmp_path, "print(float(spin(jnp.float32(1.0))))",
                                        "jax.lax.while_loop(lambda x: x > -1.0, lambda x: x * 1.5 + 1.0, x)", 2)
    assert (f"{path}:5: error: the file's own code ran for 2 s, the limit `user_code_s`; it was at line 5; it was "
            "blocked in a computation that does not come back to Python") in done.stderr, done.stderr
    assert seconds < 60


def test_a_failing_check_piped_into_head_keeps_its_exit_code():
    cmd = (f"{sys.executable} -m ringc check {REPO / 'tests/broken/all_reduce_no_capacity_wait.yaml'} "
           "--devices 4 --explain | head -1")
    done = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 1, done
    assert "FAILED" in done.stdout and "Traceback" not in done.stderr and "Exception ignored" not in done.stderr


def test_user_code_runs_under_a_memory_limit(tmp_path):
    """A script that allocates past `user_code_mib` (a benchmark at full size: sglang-jax's
    bench_v2.py took 20 GB and was OOM-killed with nothing printed) is stopped with one
    message at its line, naming the limit and how to raise it."""
    path = tmp_path / "big.py"
    path.write_text(textwrap.dedent("""\
        import time
        import numpy as np

        held = []
        for _ in range(40):
            held.append(np.ones(2**27 // 8)); time.sleep(0.05)  # 128 MiB each, touched
        """))
    o = run_cli(["check", path, "--devices", "2", "--limit", "user_code_mib=1500"], budget=60)
    assert_refused(o, line=6, says="past the limit `user_code_mib` (1,500 MiB)", seconds=40)
    assert "--limit user_code_mib=" in o.err and "smaller sizes" in o.err


def test_one_allocation_past_the_memory_limit_fails_at_its_line(tmp_path):
    """One allocation past `user_code_mib` (np.ones of 6 GiB: one C call that fills it, where
    the looks every half second come too late and the system kills the process with nothing
    printed on a smaller machine) fails at once under the process's data size limit, with
    the limit's message at its line, not the script's MemoryError noted and the next
    statement run."""
    path = tmp_path / "one_big.py"
    path.write_text("import numpy as np\n\ntable = np.ones((6 << 30) // 8)  # 6 GiB at once\n")
    o = run_cli(["check", path, "--devices", "2", "--limit", "user_code_mib=1500"], budget=60)
    assert_refused(o, line=3, says="asked for memory past the limit `user_code_mib` (1,500 MiB): Unable to "
                                   "allocate 6.00 GiB", seconds=20)
    assert "ran the next statement" not in o.err


def test_an_xla_allocation_past_the_memory_limit_is_the_limits_message(tmp_path):
    """A module's make_inputs whose array XLA cannot allocate under the data size limit: JAX
    raises RESOURCE_EXHAUSTED where the array is first read (it dispatches asynchronously),
    inside ringc; that is the limit's message at the make_inputs line, not an internal error
    (found by the slow fuzz of mutated Python kernels)."""
    path = tmp_path / "big_inputs.py"
    path.write_text((REPO / "tests" / "pallas_import" / "prefetch_blocks.py").read_text().replace(
        "(n * BLOCKS * 8, 128), jnp.float32)", "(n * BLOCKS * 8, 16_000_000), jnp.float32)"))
    o = run_cli(["check", path, "--devices", "2", "--limit", "user_code_mib=1500"], budget=60)
    # (XLA's allocation fails first, at the make_inputs line, or, where XLA's succeeded,
    # numpy's copy of the array: both are the limit's message)
    assert_refused(o, says="asked for memory past the limit `user_code_mib` (1,500 MiB): ", seconds=40)
    assert "internal error" not in o.err and ("RESOURCE_EXHAUSTED" in o.err or "Unable to allocate" in o.err), o.err
