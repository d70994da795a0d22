"""ringc's Pallas importer against real, public, unmodified Pallas TPU collective kernels.

Nothing fetched is committed: point this script at a directory of sources you fetched
yourself (argument `--src` or env RINGC_REAL_SRC), laid out as

    jax/docs/pallas/tpu/distributed.md        jax-ml/jax (the tutorial's code cells)
    tpu-inference/tpu_inference/kernels/...   vllm-project/tpu-inference @ HEAD
    rsmm/<commit>/tpu_inference/kernels/...   the reduce_scatter_matmul history (5 commits)

(the commands are in the ROWS sources below and in the survey note). JAX's own
`ops/tpu/all_gather.py` comes from the installed jax. Each row's adapter is our code: it
builds a mesh and inputs, imports or executes their code as published, and returns the
jitted function, its arguments and the expected result. Then, per row and device count,
in a fresh subprocess (JAX fixes its device count at import; a failed interpret run
leaves state behind):

- `ringc.check_pallas(fn, args, mesh, collective=...)` when the importer exists
  (otherwise the row says "importer not available"): verdict, finding kinds, seconds;
- one run in Pallas TPU interpret mode (`pltpu.force_tpu_interpret_mode` with
  `InterpretParams(detect_races=True)`, N + 1 host devices: one spare, a mesh over every
  host device can deadlock): race detector, result against the lax/numpy reference,
  error or timeout.

    python benchmarks/real_kernels.py --src /tmp/real_src [--only NAME] [--devices 2,3,4]

Workers see the caller's PYTHONPATH first, then this repository: to measure an importer
checkout that is not this tree, put it on PYTHONPATH.

Prints a table: kernel, source, N, ringc verdict and kinds, ringc seconds, interpret
outcome, interpret seconds, notes.

`benchmarks/real_manifest.py` runs `ringc check` itself on the files of
tests/real_kernels/manifest.yaml exactly as published (no adapter), against the same
--src layout, and compares every verdict with the manifest's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

RESULT = "RESULT "


@dataclass
class Case:
    """What an adapter hands back: `fn(*args)` runs the kernel (jitted, shard_map'ed)."""
    fn: Callable
    args: tuple
    mesh: Any
    expected: Any = None            # numpy array of the whole output, or None
    collective: str | None = None   # ringc's name for the meaning check, if it fits
    notes: list[str] = field(default_factory=list)


@dataclass
class Row:
    name: str
    source: str                      # repo @ commit : path
    needs: str | None                # path under --src that must exist, None: installed jax
    adapter: Callable[[Path, int], Case]
    devices: tuple[int, ...] = (2, 3, 4)


# ----------------------------------------------------------------------------- adapters

def _mesh(n):
    import jax
    import numpy as np
    return jax.sharding.Mesh(np.array(jax.devices()[:n]), ("x",))


def _put(x, mesh, spec):
    import jax
    return jax.device_put(x, jax.sharding.NamedSharding(mesh, spec))


def _stub_packages(root: Path, names: list[str]) -> None:
    """Import `root/<a>/<b>/...` modules without running their packages' __init__ (which
    pull in vLLM and friends): register empty parent packages pointing at the folders."""
    for name in names:
        module = types.ModuleType(name)
        module.__path__ = [str(root.joinpath(*name.split(".")))]
        sys.modules[name] = module


def jax_ops_all_gather(src: Path, n: int) -> Case:
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import pallas as pl
    from jax.experimental.pallas.ops.tpu import all_gather as ag
    P = __import__("jax").sharding.PartitionSpec
    mesh = _mesh(n)
    x = jnp.arange(n * 16 * 128, dtype=jnp.float32).reshape(n * 16, 128)
    x = _put(x, mesh, P("x", None))

    def fn(x):
        return ag.all_gather(x, mesh=mesh, axis_name="x", memory_space=pl.ANY)
    return Case(fn, (x,), mesh, expected=np.asarray(x),
                notes=["output replicated (out_specs P(None)): no ringc COLLECTIVE name fits"])


def tpu_inference_all_gather_matmul(src: Path, n: int) -> Case:
    import jax
    import jax.numpy as jnp
    import numpy as np
    root = src / "tpu-inference"
    _stub_packages(root, ["tpu_inference", "tpu_inference.kernels",
                          "tpu_inference.kernels.collectives"])
    from tpu_inference.kernels.collectives import all_gather_matmul as agmm
    P = jax.sharding.PartitionSpec
    mesh = _mesh(n)
    m, k, cols = 16 * n, 256, 256 * n
    x = jax.random.normal(jax.random.key(0), (m, k), jnp.float32)
    y = jax.random.normal(jax.random.key(1), (k, cols), jnp.float32)
    xs, ys = _put(x, mesh, P("x", None)), _put(y, mesh, P(None, "x"))

    def fn(x, y):
        return agmm.all_gather_matmul(x, y, mesh, "x", bn=128, bk=128)
    # Its output is the flat (N * m, n) product; ringc checks all_gather_matmul's meaning on
    # its per-device view (N, m, n) (`ringc.pallas.importer.flat_views`).
    return Case(fn, (xs, ys), mesh, expected=np.asarray(x, np.float64) @ np.asarray(y, np.float64),
                collective="all_gather_matmul", notes=["flat (N*m, n) output, checked on its (N, m, n) view"])


def _old_api_shims():
    """Spellings of older jax that jax 0.10 dropped, added back so code written for them
    runs unchanged: `pltpu.MemorySpace.ANY` and `pltpu.TPUMemorySpace` are `pl.ANY` and
    `pltpu.MemorySpace`; `emit_pipeline(should_accumulate_out=False)` is the default."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    old = pltpu.MemorySpace
    if not hasattr(old, "ANY"):
        names = {k: getattr(old, k) for k in dir(old) if k.isupper()}
        pltpu.MemorySpace = types.SimpleNamespace(ANY=pl.ANY, **names)
    if "TPUMemorySpace" not in vars(pltpu):
        pltpu.TPUMemorySpace = pltpu.MemorySpace
    if not getattr(pltpu.emit_pipeline, "_old_api_shim", False):
        emit_pipeline = pltpu.emit_pipeline

        def emit_pipeline_old_api(body, *, should_accumulate_out=False, **kw):
            """Older emit_pipeline took should_accumulate_out; False (outputs are written,
            not loaded first) is jax 0.10's only behaviour, True has no equivalent."""
            if should_accumulate_out:
                raise NotImplementedError("emit_pipeline(should_accumulate_out=True) is gone in jax 0.10")
            return emit_pipeline(body, **kw)
        emit_pipeline_old_api._old_api_shim = True
        pltpu.emit_pipeline = emit_pipeline_old_api


def _rs_matmul(commit: str, bk: int = 128) -> Callable[[Path, int], Case]:
    """Commit `commit` of reduce_scatter_matmul; k per device is 128 and `bk` its block
    (bk = 64 gives grid_k = 2, the case a00668b gets wrong)."""
    def adapter(src: Path, n: int) -> Case:
        import jax
        import jax.numpy as jnp
        import numpy as np
        root = src / "rsmm" / commit
        _stub_packages(root, ["tpu_inference", "tpu_inference.kernels",
                              "tpu_inference.kernels.collectives"])
        _old_api_shims()
        from tpu_inference.kernels.collectives import reduce_scatter_matmul as rs
        P = jax.sharding.PartitionSpec
        mesh = _mesh(n)
        # The early commits assert m == 768, n == 512, k_per_dev == 128 (their test's shapes).
        bm, bn = (384 if n == 2 else 128), 256
        m, k, cols = bm * n, 128 * n, bn * 2
        x = jax.random.uniform(jax.random.key(0), (m, k), jnp.float32)
        y = jax.random.uniform(jax.random.key(1), (cols, k), jnp.float32)
        xs, ys = _put(x, mesh, P(None, "x")), _put(y, mesh, P(None, "x"))
        fn = jax.jit(jax.shard_map(
            lambda a, b: rs.reduce_scatter_matmul(a, b, mesh=mesh, axis_name="x", collective_id=0,
                                                  scatter_dim=0, bm=bm, bk=bk, bn=bn),
            mesh=mesh, in_specs=(P(None, "x"), P(None, "x")), out_specs=P("x", None),
            check_vma=False))
        # x @ y.T reduce-scattered is matmul_psum_scatter_t; x (m, k) per device is flat, and
        # ringc states the meaning on its (N, m / N, k) view (`ringc.pallas.importer.flat_views`).
        return Case(fn, (xs, ys), mesh,
                    expected=np.asarray(x, np.float64) @ np.asarray(y, np.float64).T,
                    collective="matmul_psum_scatter_t",
                    notes=["old-API shims: MemorySpace.ANY, emit_pipeline(should_accumulate_out=False)",
                           "x @ y.T: matmul_psum_scatter_t, x checked on its (N, m/N, k) view"])
    return adapter


# The tutorial's code cells: which cell defines and runs each kernel, which cell compares.
TUTORIAL = {"right_permute": (1, 1), "all_gather": (2, 2), "all_reduce": (3, 3),
            "reduce_scatter": (4, 5), "reduce_scatter_pipelined": (6, 7)}
# The only edit: the pipelined kernel's (4096, 4096) HBM blocks are far too large for CPU
# interpretation; (256, 256) keeps its inner (128, 128) pipeline grid non-trivial.
TUTORIAL_SIZES = {"outer_block_size = (4096, 4096)": "outer_block_size = (256, 256)"}


def _code_cells(md: str) -> list[str]:
    cells = re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", md, flags=re.S)
    return [re.sub(r"\A---\n.*?\n---\n", "", c, flags=re.S) for c in cells]


class _CapturingJax(types.ModuleType):
    """`jax` for the tutorial's cells, except that `jax.jit(f)(*args)` of a function
    containing a `pallas_call` is recorded instead of run (it returns zeros of the right
    shapes, so the cell's own printing and comparison code runs)."""

    def __init__(self):
        import jax
        super().__init__("jax")
        self._jax = jax
        self.captured: list[tuple[Callable, tuple]] = []

    def __getattr__(self, name):
        return getattr(self._jax, name)

    def make_mesh(self, shape, names, **kw):
        """jax 0.10's make_mesh defaults to Explicit axes, under which the tutorial's own
        printing (`input_arr[0, ::128]` of a sharded array) raises ShardingTypeError: the
        tutorial was written for Auto axes, so ask for them."""
        auto = self._jax.sharding.AxisType.Auto
        kw.setdefault("axis_types", (auto,) * len(names))
        return self._jax.make_mesh(shape, names, **kw)

    def jit(self, f, *a, **kw):
        jax = self._jax
        jitted = jax.jit(f, *a, **kw)

        def call(*args):
            if "pallas_call" not in str(jax.make_jaxpr(jitted)(*args)):
                return jitted(*args)
            # Keep the function, not this jit: a fresh jit traces again, so the caller's
            # interpret mode (a tracing-time context) applies.
            self.captured.append((lambda: jax.jit(f, *a, **kw), args))
            return jax.tree.map(lambda s: jax.numpy.zeros(s.shape, s.dtype),
                                jax.eval_shape(jitted, *args))
        return call


def _tutorial(kernel: str) -> Callable[[Path, int], Case]:
    run_cell, compare_cell = TUTORIAL[kernel]

    def adapter(src: Path, n: int) -> Case:
        import numpy as np
        md = (src / "jax" / "docs" / "pallas" / "tpu" / "distributed.md").read_text()
        for old, new in TUTORIAL_SIZES.items():
            md = md.replace(old, new)
        cells = _code_cells(md)
        fake = _CapturingJax()
        # Cell 0 imports and asserts a TPU: replaced by the same imports and N devices.
        ns: dict[str, Any] = {"__name__": "tutorial"}
        exec("import functools\nfrom jax import lax\nfrom jax import numpy as jnp\n"
             "from jax.experimental import pallas as pl\n"
             "from jax.experimental.pallas import tpu as pltpu\n", ns)
        ns.update(jax=fake, P=fake.sharding.PartitionSpec, num_devices=n)
        _old_api_shims()
        for i in range(1, compare_cell + 1):
            before = len(fake.captured)
            with contextlib.redirect_stdout(open(os.devnull, "w")):
                exec(compile(cells[i], f"distributed.md[cell {i}]", "exec"), ns)
            if i == run_cell:
                assert len(fake.captured) == before + 1, f"cell {i} ran {len(fake.captured) - before} kernels"
        make_fn, args = fake.captured[-1]
        fn = make_fn()
        expected = np.asarray(ns["xla_result"])
        return Case(fn, args, args[0].sharding.mesh, expected=expected,
                    notes=["cell 0 replaced (TPU assert); make_mesh axis_types=Auto"]
                    + (["block sizes shrunk"] if kernel == "reduce_scatter_pipelined" else []))
    return adapter


RSMM = "vllm-project/tpu-inference (branch xiowei/rs_scatter_matmul_take1) @ {} : " \
       "tpu_inference/kernels/collectives/reduce_scatter_matmul.py"
ROWS = [
    Row("jax_ops_all_gather", "jax-ml/jax (installed 0.10.2) : jax/experimental/pallas/ops/tpu/all_gather.py",
        None, jax_ops_all_gather),
    Row("tpu_inference_all_gather_matmul",
        "vllm-project/tpu-inference @ b8692ff : tpu_inference/kernels/collectives/all_gather_matmul.py",
        "tpu-inference/tpu_inference/kernels/collectives/all_gather_matmul.py",
        tpu_inference_all_gather_matmul),
    # The first two commits assert their test's shapes (m == 768, k_per_dev == 128): N = 2 only.
    *[Row(f"rs_matmul_{c}", RSMM.format(c), f"rsmm/{c}", _rs_matmul(c), devices)
      for c, devices in (("21bcbbd", (2,)), ("a00668b", (2,)), ("f90fe59", (2, 4)),
                         ("0753ab9", (2, 4)), ("abda97e", (2, 4)))],
    *[Row(f"rs_matmul_{c}_grid_k2", RSMM.format(c), f"rsmm/{c}", _rs_matmul(c, bk=64), (2,))
      for c in ("a00668b", "f90fe59")],
    *[Row(f"tutorial_{k}", "jax-ml/jax @ cec06d1 : docs/pallas/tpu/distributed.md",
          "jax/docs/pallas/tpu/distributed.md", _tutorial(k),
          (2, 3) if k == "reduce_scatter_pipelined" else (2, 3, 4)) for k in TUTORIAL],
]


# ------------------------------------------------------------------------------ running

def child(name: str, n: int, src: Path) -> None:
    """One row at N devices: ringc, then interpret mode; print one RESULT line."""
    import numpy as np
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "pallas"))
    from corpus_common import register_cpu_tpu_info
    register_cpu_tpu_info()  # emit_pipeline (tutorial, rs_matmul) asks for the TPU generation
    row = next(r for r in ROWS if r.name == name)
    out: dict[str, Any] = {"notes": []}
    try:
        case = row.adapter(src, n)
    except Exception as e:
        out["adapter_error"] = f"{type(e).__name__}: {_last_line(e)}"
        print(RESULT + json.dumps(out), flush=True)
        return
    out["notes"] += case.notes
    out.update(_ringc(case))
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as interp
    from jax.experimental.pallas import tpu as pltpu
    t0 = time.perf_counter()
    try:
        # Interpret mode is decided when a pallas_call is traced, and traces are cached:
        # build the case again inside the context, so every pallas_call is traced anew.
        with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(detect_races=True)):
            case = row.adapter(src, n)
            got = __import__("jax").block_until_ready(case.fn(*case.args))
        if isinstance(got, (tuple, list)):  # e.g. (result, hbm_scratch): compare the result
            got = got[0]
        got = np.asarray(got)
    except Exception as e:
        out["interpret"] = "error"
        out["interpret_detail"] = f"{type(e).__name__}: {_last_line(e)}"
    else:
        raced = interp.races is not None and interp.races.races_found
        err = None
        if case.expected is not None:
            exp = np.asarray(case.expected, np.float64)
            err = float(np.max(np.abs(got - exp))) if got.shape == exp.shape else float("inf")
        bad = err is not None and not (err <= 1e-3 * max(1.0, float(np.max(np.abs(exp)))))
        out["interpret"] = "race" if raced else "wrong_result" if bad else "false"
        out["interpret_detail"] = "" if err is None else f"max err {err:.3g}"
    out["interpret_seconds"] = time.perf_counter() - t0
    print(RESULT + json.dumps(out), flush=True)


def _ringc(case: Case) -> dict:
    try:
        import ringc
        check = ringc.check_pallas
    except (ImportError, AttributeError):
        return {"verdict": "importer not available"}
    t0 = time.perf_counter()
    try:
        report = check(case.fn, case.args, case.mesh, collective=case.collective)
    except Exception as e:  # an importer limit (unknown primitive...) is a result too
        return {"verdict": "error", "kinds": [], "ringc_detail": f"{type(e).__name__}: {_last_line(e)}",
                "ringc_seconds": time.perf_counter() - t0}
    kinds = sorted({f.kind for f in report.errors()}) if hasattr(report, "errors") else []
    return {"verdict": "ok" if getattr(report, "ok", False) else "failed", "kinds": kinds,
            "ringc_seconds": time.perf_counter() - t0}


def _last_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return (lines[-1] if lines else "")[:160]


def run_row(row: Row, n: int, src: Path, timeout: float) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={n + 1}",
               # The caller's path first (e.g. an importer checkout), then this repository.
               PYTHONPATH=os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"),
                                                        str(Path(__file__).resolve().parent.parent)])))
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, __file__, "--child", row.name, str(n), str(src)],
                              capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"interpret": "hang", "interpret_detail": f"no result in {timeout:.0f} s",
                "interpret_seconds": time.perf_counter() - t0, "notes": []}
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT)]
    if not lines:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"interpret": "error", "interpret_detail": f"worker exit {proc.returncode}: {tail[:160]}",
                "notes": []}
    return json.loads(lines[-1][len(RESULT):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", default=os.environ.get("RINGC_REAL_SRC"),
                    help="directory of fetched sources (or env RINGC_REAL_SRC)")
    ap.add_argument("--only", help="rows whose name contains this text")
    ap.add_argument("--devices", help="comma-separated N, overriding each row's own")
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args()
    src = Path(args.src) if args.src else None
    print(f"{'kernel':34} {'N':>2} {'ringc':24} {'kinds':28} {'s':>6} {'interpret':12} {'s':>6}  notes")
    print(f"{'':34} {'':>2} source")
    for row in ROWS:
        if args.only and args.only not in row.name:
            continue
        devices = [int(d) for d in args.devices.split(",")] if args.devices else row.devices
        if row.needs and (src is None or not (src / row.needs).exists()):
            print(f"{row.name:34} {'-':>2} {'source not fetched':24} {'':28} {'':>6} {'':12} {'':>6}  "
                  f"needs {row.needs} under --src")
            continue
        for n in devices:
            r = run_row(row, n, src or Path("."), args.timeout)
            kinds = ",".join(r.get("kinds", []))
            verdict = r.get("verdict", "adapter error" if "adapter_error" in r else "-")
            notes = "; ".join(filter(None, [r.get("adapter_error"), r.get("ringc_detail"),
                                            r.get("interpret_detail"), *r.get("notes", [])]))
            rs = r.get("ringc_seconds")
            print(f"{row.name:34} {n:>2} {verdict:24} {kinds:28} "
                  f"{(f'{rs:6.1f}' if rs is not None else '-'):>6} {r.get('interpret', '-'):12} "
                  f"{r.get('interpret_seconds', 0):6.1f}  {notes}", flush=True)
        print(f"{'':34} {'':>2} {row.source}")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
    else:
        main()
