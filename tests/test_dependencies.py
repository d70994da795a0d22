"""What each install needs (pyproject.toml): `ringc.testing` imports without hypothesis (its
strategies import it when built), networkx is only the tests' oracle, libtpu only `ringc
compile` (one clear message without it), and the README's first command needs no extra.
Each runs in a fresh interpreter with the package hidden (None in sys.modules)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

HIDDEN = """
import sys
sys.path.insert(0, {repo!r})
for name in {hidden!r}:
    sys.modules[name] = None  # `import name` raises ImportError
"""


def _python(hidden: list[str], code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", HIDDEN.format(repo=str(REPO), hidden=hidden) + code], cwd=REPO,
                          capture_output=True, text=True, timeout=600)


def _ringc(hidden: list[str], *argv: str) -> subprocess.CompletedProcess:
    return _python(hidden, f"from ringc.cli import main\nsys.exit(main({list(argv)!r}))")


def test_ringc_testing_imports_without_hypothesis():
    run = _python(["hypothesis"], """
import ringc, ringc.testing as t
sched = ringc.load("schedules/all_gather_ring.yaml")
assert t.check_sized(sched, 3).ok and t.supports(sched, 4)
assert t.mutations_of(sched) and t.mutate(sched, t.mutations_of(sched)[0]) != sched
try:
    t.device_counts()
except ImportError as e:
    print("MESSAGE", e)
else:
    raise SystemExit("a strategy was built without hypothesis")
assert "hypothesis" not in sys.modules or sys.modules["hypothesis"] is None
""")
    assert run.returncode == 0, run.stderr
    assert "MESSAGE ringc.testing's strategies need hypothesis: pip install hypothesis" in run.stdout


def test_check_data_random_without_hypothesis_is_one_message():
    run = _ringc(["hypothesis"], "check", "schedules/ragged_all_to_all.yaml", "--devices", "2", "--data", "random:2")
    assert run.returncode == 2
    assert "pip install hypothesis" in run.stderr and "--data FILE.json" in run.stderr
    assert "Traceback" not in run.stderr and "internal error" not in run.stderr


def test_compile_without_libtpu_is_one_message():
    run = _ringc(["libtpu"], "compile", "schedules/all_reduce_ring.yaml", "schedules/all_gather_ring.yaml",
                 "--target", "v5e:2x2", "--target", "v5p:2x2x1")
    assert run.returncode == 2
    assert run.stderr.count('pip install "ringc[tpu]"') == 1 and run.stderr.count("error:") == 1
    assert "schedules/all_reduce_ring.yaml" in run.stderr and "Traceback" not in run.stderr
    run = _ringc(["libtpu"], "tune", "schedules/reduce_scatter_chunked.yaml", "--topology", "ring:4",
                 "--bytes", "1MiB", "--param-range", "chunks=1,2")
    assert run.returncode == 0, run.stderr  # tune prices and verifies without it, and says so
    assert 'not compiled: libtpu is not installed: pip install "ringc[tpu]"' in run.stdout


def test_compile_for_h100_without_the_cuda_plugin_is_one_message():
    """`--target h100` needs the `gpu` extra; without it, one message naming it (and
    --lower-only, which needs no plugin)."""
    kernel = "tests/pallas_import/mgpu/ring_kernels.py"
    run = _ringc(["jax_plugins", "jax_cuda12_plugin"], "compile", kernel, kernel, "--target", "h100", "--devices", "2")
    assert run.returncode == 2
    assert run.stderr.count('pip install "ringc[gpu]"') == 1 and run.stderr.count("error:") == 1
    assert kernel in run.stderr and "--lower-only" in run.stderr and "Traceback" not in run.stderr


def test_readme_command_one_needs_no_extra(tmp_path):
    """The first command's check, emit and run with libtpu, networkx, matplotlib and pytest hidden."""
    readme = (REPO / "README.md").read_text()
    commands = re.findall(r"^# \d\. .*\n(.*)$", readme.split("## ", 1)[0], flags=re.M)
    assert len(commands) == 2
    one, two = commands
    assert one.startswith("pip install -e . && ")  # no extra
    assert '".[' in two and "test" in two  # the tests' extra
    hidden = ["libtpu", "networkx", "matplotlib", "pytest"]
    steps = [s.split() for s in one.split(" && ")[1:]]
    assert [s[:2] for s in steps] == [["ringc", "check"], ["ringc", "emit"], ["ringc", "run"]]
    for step in steps:
        argv = [a if a != "2..8" else "2..3" for a in step[1:]]  # fewer sizes: the same code path
        argv = [a if a != "all_reduce_ring.py" else str(tmp_path / a) for a in argv]
        run = _ringc(hidden, *argv)
        assert run.returncode == 0, (step, run.stderr)


def test_pyproject_dependencies():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    base = " ".join(project["dependencies"])
    for name in ("hypothesis", "tqdm", "jax", "numpy", "pydantic", "PyYAML"):
        assert name in base
    assert "networkx" not in base and "tpu" not in base and "matplotlib" not in base
    extras = project["optional-dependencies"]
    assert any(d.startswith("networkx") for d in extras["test"])
    assert any("jax[tpu]" in d for d in extras["tpu"])
    gpu = " ".join(extras["gpu"])  # `ringc compile --target h100`: the CUDA plugin at jax's version, ptxas
    assert all(name in gpu for name in ("jax-cuda12-plugin==", "jax-cuda12-pjrt==", "nvidia-cuda-nvcc-cu12"))
