"""What it costs that `kernel` never runs at unchecked sizes (docs/jax-api.md, "What is
checked, and when"): the time `kernel(...)` adds at trace time, per schedule and size.

    python benchmarks/kernel_call_check.py [--devices 8] [--rows 16] [--schedule NAME ...]

For each schedule, on N devices with rows solved from the shard shape (sizes the module was
not emitted at), it times `jax.make_jaxpr` of a `shard_map` of `kernel` (nothing runs):
- proved: sizes in CHECKED (N = 4, PARAMS), the baseline trace;
- first: new sizes, checked now (inexact divisions, then `ringc.check`);
- memory: the same sizes again in this process (the in-memory verdict);
- disk: the same sizes in a new module with the in-memory verdicts dropped, as a new
  process would (the verdict read from the disk cache).
The verdict cache lives in a temporary folder (RINGC_CACHE_DIR), so nothing is reused
between runs. Seconds, best of --repeats (the first call is timed once: it checks).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ["ppermute_right", "all_gather_ring", "all_reduce_ring", "reduce_scatter_bidirectional"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--rows", type=int, default=16, help="the shard's leading dimension per device")
    ap.add_argument("--schedule", action="append", help=f"library schedules (default: {', '.join(DEFAULT)})")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    os.environ["RINGC_CACHE_DIR"] = tempfile.mkdtemp(prefix="ringc-verdicts-")
    sys.path.insert(0, str(ROOT))
    import jax
    from jax.sharding import PartitionSpec as P

    import ringc
    from ringc import jaxapi

    def trace(module, n: int, rows: int) -> float:
        mesh = jax.sharding.AbstractMesh((n,), ("i",))
        b = module.build.__globals__  # the module's namespace: its inputs' shard shapes
        sched = ringc.load(ROOT / "schedules" / f"{b['NAME']}.yaml")
        shapes = []
        for name in sched.buffers_of("input"):
            buf = sched.buffers[name]
            from ringc.ir import expr as E
            env = {"N": n, **sched.params, "rows": rows}
            shape = [E.evaluate(d, env) for d in buf.shard_shape]
            shapes.append(jax.ShapeDtypeStruct((shape[0] * n, *shape[1:]) if name == sched.io_buffer("input")
                                               else tuple(shape), "float32"))
        specs = tuple(P("i") if k == 0 else P() for k in range(len(shapes)))
        fn = jax.shard_map(lambda *xs: module.kernel(*xs, axis_name="i"), mesh=mesh, in_specs=specs,
                           out_specs=P("i"), check_vma=False)
        t = time.perf_counter()
        jax.make_jaxpr(fn)(*shapes)
        return time.perf_counter() - t

    def best(f) -> float:
        return min(f() for _ in range(args.repeats))

    print(f"kernel(...) traced on N = {args.devices}, rows = {args.rows} (seconds; proved: N = 4 at PARAMS)")
    print(f"{'schedule':32} {'proved':>8} {'first':>8} {'memory':>8} {'disk':>8}")
    for name in args.schedule or DEFAULT:
        path = ROOT / "schedules" / f"{name}.yaml"
        module = ringc.kernel(path)
        rows4 = ringc.load(path).params.get("rows", args.rows)
        proved = best(lambda: trace(module, 4, rows4))
        first = trace(module, args.devices, args.rows)
        memory = best(lambda: trace(module, args.devices, args.rows))

        def from_disk() -> float:
            jaxapi._VERDICTS.clear()
            fresh = jaxapi.import_kernel(ringc.load(path), checked=[])
            return trace(fresh, args.devices, args.rows)
        disk = best(from_disk)
        print(f"{name:32} {proved:8.3f} {first:8.3f} {memory:8.3f} {disk:8.3f}")


if __name__ == "__main__":
    main()
