"""Shared test setup: nine CPU devices for Pallas TPU interpret mode, and the schedule library.

JAX fixes its platform and CPU device count when it is first imported, so the environment is
set here, at import time, before any test module imports jax.
"""

import os
import re
from pathlib import Path

os.environ["JAX_PLATFORMS"] = "cpu"
_flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
          if not f.startswith("--xla_force_host_platform_device_count")]
# Nine: runs go up to N = 8, and interpret mode needs one spare host device when operands are
# large (see ringc/run.py; the matmul schedules pass over 100 KiB per device at N = 8).
os.environ["XLA_FLAGS"] = " ".join([*_flags, "--xla_force_host_platform_device_count=9"])

import pytest  # noqa: E402

REPO = Path(__file__).parent.parent
# A one-chip copy kernel and its imports, for tests that write a file around it.
COPY_KERNEL = ("import jax, jax.numpy as jnp\nfrom jax.experimental import pallas as pl\n\n\n"
               "def _k(x_ref, o_ref):\n    o_ref[...] = x_ref[...]\n\n\n")
COPY_CALL = "pl.pallas_call(_k, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)"


def without_runtime_data(paths) -> list[Path]:
    """The schedules among `paths` that read no runtime data (no `data:`): those are checked,
    costed and run for samples of their data only (tests/test_data.py), so the suites that
    take every schedule as it is leave them out."""
    return [p for p in paths if not re.search(r"^data:", Path(p).read_text(), re.M)]


LIBRARY = without_runtime_data(sorted((REPO / "schedules").glob("*.yaml")))


def line_of(text: str, at) -> int:
    """The line `at` names in `text`: a line number, or a text on exactly one line (used by
    the broken-schedule manifests)."""
    if isinstance(at, int):
        return at
    hits = [i for i, line in enumerate(text.splitlines(), 1) if at in line]
    assert len(hits) == 1, f"{at!r} is on lines {hits}"
    return hits[0]


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running test (deselect with -m 'not slow')")


@pytest.fixture
def library_schedules() -> list[Path]:
    """The paths of the library's schedules, `schedules/*.yaml`, sorted."""
    return list(LIBRARY)


def pytest_generate_tests(metafunc):
    """A test taking `schedule_path` runs once per library schedule (id: the file's stem)."""
    if "schedule_path" in metafunc.fixturenames:
        metafunc.parametrize("schedule_path", LIBRARY, ids=[p.stem for p in LIBRARY])
