"""Every verdict and finding text on the corpus is as recorded (`tests/snapshot.py`): a change
to the verifier that changes a verdict shows here, case by case. After an intended change,
rewrite the files with `python tests/snapshot.py --update --pallas` and review the diff."""

from __future__ import annotations

import json

import snapshot


def _compare(kind: str) -> None:
    want = json.loads((snapshot.SNAPSHOTS / f"{kind}.json").read_text())
    got = snapshot.compute(kind)
    assert set(got) == set(want), sorted(set(got) ^ set(want))[:10]
    differ = [k for k in sorted(got) if got[k] != want[k]]
    assert not differ, "\n".join(f"{k}\n  was: {want[k]}\n  now: {got[k]}" for k in differ[:3])


def test_yaml_verdicts_are_as_recorded():
    _compare("yaml")


def test_pallas_verdicts_are_as_recorded():
    _compare("pallas")
