"""ringc's race analysis against JAX's dynamic race detector, on the mutation corpus.

For every mutant in tests/mutants/expected.yaml (and the one-axis library schedules, as
controls): `ringc check` at the manifest's N and invocations, and the emitted kernel run in
Pallas TPU interpret mode with `InterpretParams(detect_races=True, random_seed=s,
dma_execution_mode=m)` for several seeds and both DMA execution modes. JAX's verdict is
`interpret_pallas_call.races.races_found` after each run.

Each mutant's runs happen in a worker subprocess with a timeout: an interpreted kernel that
crashes leaves JAX's interpreter threads blocked, so a crash ends the worker and the rest of
that mutant's runs continue in a fresh one. Mutants that `ringc check` proves hang are not
run (interpret mode would block forever). Interpret mode clears its semaphores between
`pallas_call`s, so a mutant checked with `invocations: 2` runs as one call.

    python benchmarks/race_detection.py [--seeds 3] [--only SUBSTRING] [--timeout 600]

Prints one row per schedule: ringc's verdict and error kinds, its time, how many of the JAX
runs found a race (and crashed), and the mean interpreted kernel time per run (excluding
compilation). The last line states whether ringc reported a race wherever JAX did.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MUTANTS = REPO / "tests" / "mutants"
LIBRARY = REPO / "schedules"
MODES = ("on_wait", "eager")
RESULT = "RESULT "  # worker output lines carrying a JSON result; JAX prints its race reports too


@dataclass
class JaxRun:
    mode: str
    seed: int
    races: bool | None = None     # None: the run did not finish
    error: str | None = None      # the interpreter's exception, if it crashed
    seconds: float = 0.0          # the kernel's interpreted run, excluding compilation


@dataclass
class Row:
    name: str
    klass: str                    # "1".."15", or "lib" for a library control
    path: Path
    devices: int
    invocations: int
    ringc_kinds: list[str] = field(default_factory=list)
    ringc_seconds: float = 0.0
    hangs: bool = False
    runs: list[JaxRun] = field(default_factory=list)
    jax_wall: float = 0.0         # all runs, with process start, jax import and compiles

    @property
    def ringc_race(self) -> bool:
        return "race" in self.ringc_kinds

    @property
    def jax_races(self) -> int:
        return sum(1 for r in self.runs if r.races)

    @property
    def agrees(self) -> bool:
        """Whenever JAX reports a race, ringc reports one too."""
        return self.ringc_race or self.jax_races == 0


def cases() -> list[Row]:
    import yaml

    manifest = yaml.safe_load((MUTANTS / "expected.yaml").read_text())
    rows = [Row(name, str(e["class"]), MUTANTS / name, e["devices"], e.get("invocations", 1))
            for name, e in manifest.items()]
    import ringc
    # The library's one-axis schedules on a ring of 4 (interpret mode runs a ring here).
    rows += [Row(p.name, "lib", p, 4, 1) for p in sorted(LIBRARY.glob("*.yaml")) if len(ringc.load(str(p)).axes) == 1]
    return rows


def check_row(row: Row) -> None:
    import ringc

    sched = ringc.load(row.path)
    data = {}
    if sched.data:  # runtime data: checked on samples, the interpret-mode run draws its own
        from ringc.testing import samples_for
        samples, how = samples_for("random:5", sched, row.devices)
        data = {"data": samples, "data_how": how}
    report = ringc.check(sched, row.devices, invocations=row.invocations, **data)
    row.ringc_kinds = sorted({f.kind for f in report.errors()})
    row.ringc_seconds = report.seconds
    row.hangs = "hang" in row.ringc_kinds


def run_jax(row: Row, seeds: int, timeout: float) -> None:
    """All (mode, seed) runs of one schedule, in as many worker processes as crashes need."""
    todo = [(m, s) for m in MODES for s in range(seeds)]
    start = time.perf_counter()
    while todo:
        spec = ",".join(f"{m}:{s}" for m, s in todo)
        cmd = [sys.executable, __file__, "--worker", str(row.path), str(row.devices), spec]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
            out = proc.stdout
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            proc = None
        done = [JaxRun(**json.loads(line[len(RESULT):])) for line in out.splitlines()
                if line.startswith(RESULT)]
        row.runs += done
        todo = todo[len(done):]
        if todo and (proc is None or not done):
            # A timeout, or a worker that died before reporting: record and move on.
            why = "timeout" if proc is None else f"worker failed: {proc.stderr.strip()[-200:]}"
            mode, seed = todo.pop(0)
            row.runs.append(JaxRun(mode, seed, None, why))
    row.jax_wall = time.perf_counter() - start


def worker(path: str, devices: int, spec: str) -> None:
    """Run the listed (mode, seed) pairs in this process until the first crash."""
    from ringc.run import ensure_host_devices

    ensure_host_devices(devices)
    import ringc
    from ringc.run import run_schedule

    sched = ringc.load(path)
    for item in spec.split(","):
        mode, seed = item.split(":")
        run = JaxRun(mode, int(seed))
        try:
            res = run_schedule(sched, devices, seed=int(seed), dma_execution_mode=mode,
                               interpret_seed=int(seed))
            run.races, run.seconds = bool(res.races_found), res.seconds
        except Exception as e:  # the interpreter's threads may be wedged now: stop here
            run.error = f"{type(e).__name__}: {_last_line(str(e))}"
        print(RESULT + json.dumps(run.__dict__), flush=True)
        if run.error:
            return


def _last_line(text: str) -> str:
    lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
    return lines[-1][:120] if lines else ""


def table(rows: list[Row]) -> str:
    head = ["schedule", "class", "N", "ringc verdict", "ringc s", "JAX races", "JAX s/run", "JAX wall s",
            "JAX notes"]
    body = []
    for r in rows:
        verdict = ("ok" if not r.ringc_kinds else "FAIL") + (f" ({', '.join(r.ringc_kinds)})" if r.ringc_kinds else "")
        n = f"{r.devices}" + (f" x{r.invocations} calls" if r.invocations > 1 else "")
        if r.hangs:
            jax, per_run, wall, notes = "not run", "-", "-", "hangs: interpret mode would block"
        else:
            finished = [x for x in r.runs if x.races is not None]
            jax = f"{r.jax_races}/{len(r.runs)}"
            modes = [f"{m} {sum(1 for x in r.runs if x.mode == m and x.races)}/"
                     f"{sum(1 for x in r.runs if x.mode == m)}" for m in MODES]
            per_run = f"{sum(x.seconds for x in finished) / len(finished):.3f}" if finished else "-"
            wall = f"{r.jax_wall:.1f}"
            crashes = [x for x in r.runs if x.error]
            notes = ", ".join(modes)
            if crashes:
                error = crashes[0].error.removeprefix("JaxRuntimeError: ")
                if error.startswith(("KeyError: ('hbm'", "KeyError: ('vmem'")):
                    error += ": a DMA into a device that has not allocated it (not in the kernel)"
                notes += f"; crashed {len(crashes)}x: {error}"
            if r.invocations > 1:
                notes += "; run as 1 call"
        body.append([r.name.removesuffix(".yaml"), r.klass, n, verdict, f"{r.ringc_seconds:.4f}", jax, per_run,
                     wall, notes])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    fmt = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"
    lines = [fmt(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    return "\n".join(lines + [fmt(b) for b in body])


def main(argv: list[str] | None = None) -> list[Row]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=3, help="random seeds per DMA execution mode")
    p.add_argument("--only", default="", help="only schedules whose file name contains this")
    p.add_argument("--timeout", type=float, default=600, help="seconds per worker process")
    p.add_argument("--worker", nargs=3, metavar=("FILE", "N", "MODE:SEED,..."), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), args.worker[2])
        return []
    rows = [r for r in cases() if args.only in r.name]
    start = time.perf_counter()
    for r in rows:
        check_row(r)
        if not r.hangs:
            run_jax(r, args.seeds, args.timeout)
        print(f"  {r.name}: ringc {r.ringc_kinds or 'ok'}, JAX races {r.jax_races}/{len(r.runs)}",
              file=sys.stderr, flush=True)
    print(table(rows))
    missed = [r.name for r in rows if not r.agrees]
    runs = sum(len(r.runs) for r in rows)
    print(f"\n{len(rows)} schedules, {runs} interpret-mode runs, {time.perf_counter() - start:.0f}s. "
          + ("ringc reports a race wherever JAX found one." if not missed
             else f"JAX found races ringc missed in: {', '.join(missed)}"))
    return rows


if __name__ == "__main__":
    main()
