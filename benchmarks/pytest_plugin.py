"""What `pytest --ringc` costs per distinct kernel: a pytest run of one test that runs the
clean right permute of tests/pallas_import/pytest_permute.py (interpret mode, N CPU devices),
timed without and with `--ringc`, for N = 2, 4, 8.

    python benchmarks/pytest_plugin.py [--repeat 3]

Every run is `pytest.main` in this process (JAX imported once, so the difference is the
plugin's: recording the call, checking the kernel, the summary); each run traces and
compiles its kernel afresh, with or without the plugin. A warm-up run of each kind comes
first (printed separately: the process's first kernel run warms JAX's interpret mode up). Best of --repeat, wall seconds. Target: under 1 s per distinct
kernel at N <= 8.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["XLA_FLAGS"] = " ".join([f for f in os.environ.get("XLA_FLAGS", "").split()
                                    if not f.startswith("--xla_force_host_platform_device_count")]
                                   + ["--xla_force_host_platform_device_count=9"])

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import pytest  # noqa: E402

SOURCE = (REPO / "tests" / "pallas_import" / "pytest_permute.py").read_text()
TEST = SOURCE.split("@pytest.fixture")[0] + '''
def test_permute():
    n = {n}
    mesh = jax.make_mesh((n,), ("x",), axis_types=(jax.sharding.AxisType.Auto,), devices=jax.devices()[:n])
    x = jax.device_put(jax.random.normal(jax.random.key(0), (8 * n, 128), jnp.float32),
                       jax.sharding.NamedSharding(mesh, P("x", None)))
    np.testing.assert_array_equal(right_permute(x, mesh), np.roll(np.asarray(x), 8, axis=0))
'''


def run(path: Path, ringc: bool) -> tuple[float, float]:
    """Wall seconds of one pytest run, and the check seconds its ringc summary states."""
    args = [str(path), "-p", "no:cacheprovider", "-p", "ringc.pytest_plugin", "-q", "-o", "addopts=", "-W", "ignore"]
    out = io.StringIO()
    seen: list = []

    class Config:  # keeps the session's config, to read the checker's own clock
        def pytest_configure(self, config):
            seen.append(config)

    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out):
        code = pytest.main(args + (["--ringc"] if ringc else []), plugins=[Config()])
    wall = time.perf_counter() - t0
    if code != 0:
        raise SystemExit(f"pytest failed on {path}:\n{out.getvalue()}")
    if ringc and "ringc: 1 distinct kernel checked (1 call recorded): 1 ok" not in out.getvalue():
        raise SystemExit(f"no ringc verdict:\n{out.getvalue()}")
    checker = seen[0].pluginmanager.get_plugin("ringc-checker") if ringc else None
    return wall, checker.seconds if checker else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sizes", default="2,4,8")
    opts = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="ringc_pytest_bench_"))
    sizes = [int(s) for s in opts.sizes.split(",")]
    paths = {}
    for n in sizes:
        paths[n] = folder / f"test_permute_{n}.py"
        paths[n].write_text(TEST.replace("{n}", str(n)))
    first_plain, _ = run(paths[sizes[0]], False)
    first_ringc, first_check = run(paths[sizes[0]], True)
    print(f"warm-up at N={sizes[0]}: plain {first_plain:.2f}s, --ringc {first_ringc:.2f}s "
          f"(its check {first_check:.3f}s; the process's first runs: JAX's interpret mode warms up)")
    print(f"{'N':>3} {'plain s':>8} {'--ringc s':>10} {'overhead s':>11} {'check s':>8}")
    for n in sizes:
        plain = min(run(paths[n], False)[0] for _ in range(opts.repeat))
        with_ringc = min(run(paths[n], True) for _ in range(opts.repeat))
        print(f"{n:>3} {plain:8.2f} {with_ringc[0]:10.2f} {with_ringc[0] - plain:11.2f} {with_ringc[1]:8.3f}")


if __name__ == "__main__":
    main()
