"""Measure what JAX's TPU interpret mode notices about each kernel in manifest.yaml.

For every manifest entry and every device count N in its `devices`, one run in a fresh
subprocess (JAX fixes its device count at import; a failed interpret run leaves global
state behind) on CPU with N + 1 host devices (a mesh over every host device can
deadlock interpret mode's barrier) and `InterpretParams(detect_races=True)`, default
`dma_execution_mode` ("on_wait"). The outcome of a run is one of

    race          interpret mode's happens-before race detector fired
    hang          no result within --timeout seconds (the subprocess is killed)
    error         the run raised (e.g. a semaphore non-zero at kernel exit)
    wrong_result  the output differs from the collective's meaning (corpus_common.expected)
    false         none of these

and an entry's `interpret_detects` is the first of race, hang, error, wrong_result that
any of its runs showed, else false. One run, one schedule of events: this is what a
kernel author gets from interpret mode, not what every interleaving could do.

    PYTHONPATH=$PWD python tests/pallas/measure_interpret.py [--only SUBSTR] [--write]

prints the table; --write rewrites the manifest's interpret_detects column in place.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.yaml"
ORDER = ("race", "hang", "error", "wrong_result")


def child(path: str, n: int) -> None:
    """Run one kernel once at N devices; print one JSON line with what was seen."""
    import importlib.util

    import jax
    import numpy as np
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as interp
    from jax.experimental.pallas import tpu as pltpu

    sys.path.insert(0, str(HERE))
    import corpus_common as cc

    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:n]), (cc.AXIS,))
    inputs = module.make_inputs(mesh, 0)
    seen = {"race": False, "error": None, "wrong_result": False, "max_err": None}
    try:
        fn = module.build(mesh, interpret=pltpu.InterpretParams(detect_races=True))
        out = np.asarray(jax.block_until_ready(fn(*inputs)))
    except Exception as e:  # the run itself failed: report what JAX said, first line
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        # A failure inside interpret mode's callbacks arrives wrapped in a traceback: its
        # last line is the real message (e.g. "Semaphore ... has non-zero count").
        seen["error"] = f"{type(e).__name__}: {(lines[-1] if lines else '')[:200]}"
    else:
        want = cc.expected(module.COLLECTIVE, n, *inputs)
        err = float(np.max(np.abs(out - want))) if out.shape == want.shape else float("inf")
        seen["max_err"] = None if np.isnan(err) else err
        seen["wrong_result"] = bool(np.isnan(err) or err > cc.tolerance(module.COLLECTIVE, n))
    races = interp.races
    seen["race"] = bool(races is not None and races.races_found)
    print("RESULT " + json.dumps(seen), flush=True)


def run_one(path: Path, n: int, timeout: float) -> tuple[str, float, str]:
    """(outcome, seconds, detail) of one subprocess run."""
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={n + 1}")
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, __file__, "--child", str(path), str(n)],
                              capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return "hang", time.perf_counter() - t0, f"no result in {timeout:.0f} s"
    seconds = time.perf_counter() - t0
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return "error", seconds, f"exit {proc.returncode}: {tail[:200]}"
    seen = json.loads(lines[-1][len("RESULT "):])
    detail = seen["error"] or (f"max |out - lax| = {seen['max_err']:.3g}"
                               if seen["max_err"] is not None else "output NaN")
    for outcome in ORDER:
        if seen.get(outcome):
            return outcome, seconds, detail
    return "false", seconds, detail


def load_manifest() -> list[dict]:
    import yaml
    return yaml.safe_load(MANIFEST.read_text())["kernels"]


def rewrite(values: dict[str, str]) -> None:
    """Replace the interpret_detects value of each entry named in `values`, keeping every
    other line (comments, order, formatting) as it is."""
    out, current = [], None
    for line in MANIFEST.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("- file:"):
            current = stripped.split(":", 1)[1].strip()
        elif stripped.startswith("interpret_detects:") and current in values:
            line = line[: line.index("interpret_detects:")] + f"interpret_detects: {values[current]}"
        out.append(line)
    MANIFEST.write_text("\n".join(out) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="only manifest files containing this text")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a run is a hang")
    ap.add_argument("--jobs", type=int, default=2, help="runs in parallel")
    ap.add_argument("--write", action="store_true", help="rewrite interpret_detects in the manifest")
    args = ap.parse_args()
    entries = [e for e in load_manifest() if not args.only or args.only in e["file"]]
    runs = [(e, n) for e in entries for n in e["devices"]]
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda r: run_one(HERE / r[0]["file"], r[1], args.timeout), runs))
    by_file: dict[str, list[str]] = {}
    print(f"{'kernel':48} {'N':>2} {'expect':7} {'interpret':12} {'s':>6}  detail")
    for (e, n), (outcome, seconds, detail) in zip(runs, results):
        by_file.setdefault(e["file"], []).append(outcome)
        print(f"{e['file']:48} {n:>2} {e['verdict']:7} {outcome:12} {seconds:6.1f}  {detail}")
    values = {f: next((o for o in ORDER if o in outs), "false") for f, outs in by_file.items()}
    print("\ninterpret_detects:")
    for e in entries:
        print(f"  {e['file']:48} {e['verdict']:7} {values[e['file']]}")
    if args.write:
        rewrite(values)
        print(f"rewrote {MANIFEST}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]))
    else:
        main()
