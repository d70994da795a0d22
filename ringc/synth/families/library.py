"""The library's own schedules (`schedules/*.yaml`) of the collective that span the whole
topology with one instance, at their default params: what `ringc cost --collective`
ranks (`ringc/cost/rank.py`), the baseline every other family has to beat."""

from __future__ import annotations

from typing import Iterator

from ...cost.rank import library_dir
from .base import Candidate

FAMILY = "library"
WHAT = "a library schedule at its default params"


def generate(kind: str, topo) -> Iterator[Candidate]:
    from ...ir.loader import load
    for path in sorted(library_dir().glob("*.yaml")):
        sched = load(path)
        if sched.collective.kind != kind or len(sched.axes) != topo.ndim:
            continue
        first = next((ln for ln in path.read_text().splitlines() if ln.startswith("# ")), "# ")[2:].rstrip(".")
        yield Candidate(FAMILY, sched.name, path.read_text(), first or WHAT, {})
