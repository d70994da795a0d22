"""Re-run `ringc check` on the public kernels of tests/real_kernels/manifest.yaml, as
published, and print a table: each kernel call's verdict now next to the manifest's, and
the seconds (wall and CPU of the `ringc check` process).

Nothing fetched is committed: fetch the sources yourself and lay them out under one
directory as each manifest entry's `src` says (`jax/...` is a checkout of jax-ml/jax at the
entry's commit; benchmarks/real_kernels.py documents the same layout):

    python benchmarks/real_manifest.py --src /tmp/real_src [--only NAME] [--dump]

`--dump` prints the verdicts as they are now in the manifest's YAML form (to update it
after a change that is meant to change them). Exit status 1 when a verdict differs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "tests" / "real_kernels" / "manifest.yaml"


def call_key(title: str) -> str:
    """A call's name in the manifest: its title up to the kernel call count."""
    return re.sub(r", kernel call \d+ of \d+.*$", "", title).rstrip(")") + ")" if "(line" in title else title


def verdict_of(report: dict) -> str:
    if "error" in report:
        return "not checked: " + report["error"]["message"]
    if report["ok"]:
        return "ok"
    kinds = sorted({f["kind"] for f in report["findings"] if f.get("severity", "error") == "error"})
    return "FAILED " + ",".join(kinds)


def run(entry: dict, src: Path, timeout: float) -> tuple[dict[str, str], float, float, str]:
    """(call -> verdict, wall s, CPU s, refusal or "") of `ringc check` on the entry."""
    path = src / entry["src"]
    args = shlex.split(entry.get("flags", ""))
    cmd = [sys.executable, "-m", "ringc", "check", str(path), *args, "--format", "json"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {}, wall, cpu, f"no JSON (exit {proc.returncode}): {tail[:160]}"
    got = {call_key(r.get("call", "")): verdict_of(r) for r in doc["reports"]}
    refused = "; ".join(e.get("message", "") for e in doc.get("errors", []))
    return got, wall, cpu, refused


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", default=os.environ.get("RINGC_REAL_SRC"), required=False,
                    help="directory of fetched sources (or env RINGC_REAL_SRC)")
    ap.add_argument("--only", help="entries whose name contains this text")
    ap.add_argument("--dump", action="store_true", help="print the verdicts now, as manifest YAML")
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args()
    if not args.src:
        ap.error("--src DIR (or RINGC_REAL_SRC) is required: the fetched sources")
    src = Path(args.src)
    manifest = yaml.safe_load(MANIFEST.read_text())
    differ = 0
    print(f"{'kernel':34} {'call':64} {'manifest':30} {'now':30} {'':4}")
    for entry in manifest["kernels"]:
        if args.only and args.only not in entry["name"]:
            continue
        if not (src / entry["src"]).exists():
            print(f"{entry['name']:34} {'-':64} {'source not fetched':30} needs {entry['src']} under --src")
            continue
        got, wall, cpu, refused = run(entry, src, args.timeout)
        if args.dump:
            print(f"# {entry['name']}: {wall:.1f} s wall, {cpu:.1f} s CPU")
            for call, verdict in got.items():
                print(f"      - call: {json.dumps(call)}\n        verdict: {json.dumps(verdict)}")
            if refused:
                print(f"      - call: null\n        verdict: {json.dumps('refused: ' + refused)}")
            continue
        expected = {c["call"]: c["verdict"] for c in entry["verdicts"]}
        if refused:
            got[None] = "refused: " + refused
        for call in list(expected) + [c for c in got if c not in expected]:
            want, now = expected.get(call, "-"), got.get(call, "-")
            same = now == want or (want.startswith("refused") and now.startswith("refused"))
            differ += not same
            print(f"{entry['name']:34} {str(call)[:64]:64} {want[:30]:30} {now[:30]:30} {'' if same else 'DIFF'}")
        print(f"{'':34} {entry['repo']}@{entry['commit'][:7]} {entry['path']}: "
              f"{len(got)} verdicts, {wall:.1f} s wall, {cpu:.1f} s CPU")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
