"""Verdict snapshots: the text of every verdict and finding on a fixed corpus, so that a
refactor of the verifier (issue 33, "one verifier core") can show it changed no verdict.

    python tests/snapshot.py --update [--pallas]   # rewrite tests/snapshots/*.json
    python tests/snapshot.py                       # compare, print what differs

The corpus: the library, tests/broken, tests/mutants, tests/torus and tests/xor at N = 2..5 on a
ring (the 2-D and 3-D schedules on the tori 2x2, 2x3, 3x3 and 2x2x2 instead), and with
`--pallas` the hand-written kernels of tests/pallas and tests/pallas_import at N = 2..4. Each
entry is the report's text with the timings and the jobs-dependent parts taken out: the
first line's "(E events, S s)" and the seconds (`normalized`). A case that is bad input
records its message. `tests/test_snapshot.py` holds both corpora to their files in the
default suite (about 30 s and 20 s).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
SNAPSHOTS = TESTS / "snapshots"
RING_SIZES = (2, 3, 4, 5)
TORI = {2: ("torus:2x2", "torus:2x3", "torus:3x3"), 3: ("torus:2x2x2",)}


def report_text(report) -> str:
    """A report's first line and assumptions, and every finding's text (not cut at five per
    kind, without the traces: their interleavings may legitimately change)."""
    lines = report.to_text().split("\n")
    head = [ln for ln in lines if not ln.startswith("  ") or ln.startswith("  assumes:")]
    program = getattr(report, "program", None)
    found = [f.to_text(program) for f in getattr(report, "findings", [])] if program is not None else lines[1:]
    return normalized("\n".join(head + found))


def normalized(text: str) -> str:
    """A report's text without what changes from run to run (seconds, the event count of a
    quotient check, which depends on the path taken; a script's own run time, said when over
    a second) and with paths relative to the repo."""
    text = re.sub(r"\(\d+ events, [0-9.]+s\)", "(…)", text)
    text = re.sub(r"\n  assumes: the script's own code ran for [0-9.]+ s[^\n]*", "", text)
    return text.replace(str(REPO) + "/", "")


def yaml_cases() -> list[tuple[str, str, dict]]:
    """(id, path, check kwargs) of the YAML corpus."""
    import ringc
    cases = []
    files = [*sorted((REPO / "schedules").glob("*.yaml"))]
    for folder in ("broken", "mutants", "torus", "xor"):
        files += sorted((TESTS / folder).glob("*.yaml"))
    for path in files:
        rel = str(path.relative_to(REPO))
        try:
            axes = len(ringc.load(path).axes)
        except ringc.ScheduleError:
            axes = 1
        if re.search(r"^data:", path.read_text(), re.M):
            cases += [(f"{rel} N={n} data", rel, {"n": n, "data": "random:2"}) for n in (3, 4)]
        elif axes == 1:
            cases += [(f"{rel} N={n}", rel, {"n": n}) for n in RING_SIZES]
        else:
            cases += [(f"{rel} {t}", rel, {"topology": t}) for t in TORI.get(axes, ())]
    return cases


def yaml_verdict(rel: str, kw: dict) -> str:
    import ringc
    from ringc.verify.check import check
    try:
        sched = ringc.load(REPO / rel)
        data, how = None, ""
        if "data" in kw:
            from ringc.testing import samples_for
            data, how = samples_for(kw["data"], sched, kw["n"], 0, {sched.axes[0]: kw["n"]})
        report = check(sched, kw.get("n"), topology=kw.get("topology", "ring"), data=data, data_how=how, jobs=1)
        return report_text(report)
    except ringc.ScheduleError as e:
        return normalized(f"bad input: {e}")


def pallas_cases() -> list[tuple[str, str, dict]]:
    cases = []
    for folder in ("pallas", "pallas_import"):
        for path in sorted((TESTS / folder).glob("*.py")):
            if path.name in ("corpus_common.py", "measure_interpret.py") or path.name.startswith("test_"):
                continue
            rel = str(path.relative_to(REPO))
            cases += [(f"{rel} N={n}", rel, {"n": n}) for n in (2, 3, 4)]
    return cases


def pallas_verdict(rel: str, kw: dict) -> str:
    from ringc.errors import ScheduleError
    from ringc.pallas import check_file
    try:
        return "\n".join(report_text(r) for r in check_file(str(REPO / rel), kw["n"]))
    except ScheduleError as e:
        return normalized(f"bad input: {e}")


def compute(kind: str) -> dict[str, str]:
    cases, verdict = (yaml_cases(), yaml_verdict) if kind == "yaml" else (pallas_cases(), pallas_verdict)
    return {case: verdict(rel, kw) for case, rel, kw in cases}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--update", action="store_true")
    ap.add_argument("--pallas", action="store_true", help="the Pallas corpus too (minutes)")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    status = 0
    for kind in ("yaml", "pallas") if args.pallas else ("yaml",):
        got = compute(kind)
        path = SNAPSHOTS / f"{kind}.json"
        if args.update:
            SNAPSHOTS.mkdir(exist_ok=True)
            path.write_text(json.dumps(got, indent=0, sort_keys=True) + "\n")
            print(f"wrote {path} ({len(got)} verdicts)")
            continue
        want = json.loads(path.read_text())
        diff = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
        for k in diff:
            print(f"--- {k}\n  was: {want.get(k)!r:.300}\n  now: {got.get(k)!r:.300}")
        print(f"{kind}: {len(got)} verdicts, {len(diff)} differ")
        status |= bool(diff)
    return status


if __name__ == "__main__":
    sys.exit(main())
