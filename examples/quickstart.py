"""Load, check, emit and run a library schedule from Python.

    python examples/quickstart.py [schedules/all_reduce_ring.yaml]
"""

import os
import sys

# Interpret mode runs a distributed kernel on CPU devices; ask for 8 before jax loads.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import importlib.util  # noqa: E402
import tempfile  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402

import ringc  # noqa: E402
from ringc.reference import reference  # noqa: E402

path = sys.argv[1] if len(sys.argv) > 1 else "schedules/all_reduce_ring.yaml"
sched = ringc.load(path)

# 1. Verify for several ring sizes: hangs, exit balance, races, and the result itself.
for n in (2, 3, 4, 8):
    report = ringc.check(sched, n)
    print(report.to_text())
    assert report.ok

# 2. Emit the Pallas module and import it.
source = ringc.emit(sched)
with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
    f.write(source)
spec = importlib.util.spec_from_file_location("kernel", f.name)
kernel = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kernel)

# 3. Run it on 8 CPU devices in TPU interpret mode and compare with the lax collective.
mesh = jax.make_mesh((8,), (kernel.AXIS,))
inputs = kernel.make_inputs(mesh, jax.random.key(0))
out = kernel.build(mesh, interpret=pltpu.InterpretParams(detect_races=True))(*inputs)
want = reference(sched, mesh)(*inputs)
print(f"{kernel.COLLECTIVE}: max |kernel - lax| = {float(np.max(np.abs(out - want))):.2e}")
os.unlink(f.name)
