"""The quotient's clean verdict: the symmetric back ends of the checks `OnQuotient.CERTIFIED`
(`core.CHECKS`: the run, the races, the meaning), in order, on one `SymmetricAnalysis`.

Any finding at all sends `check` back to the full analysis, which explains it: this is a
fast path for the clean verdict, never a second source of findings.
"""

from __future__ import annotations

from typing import Callable

from ...collectives import Buffers, Collective
from ..background import default_jobs
from ..rotation import NotRotational
from ..spec import Spec
from . import flow, races, run
from .analysis import SymmetricAnalysis, Unclear
from .program import SymmetricProgram

__all__ = ["BACK_ENDS", "clean"]

# The symmetric back ends of the run, the races and the meaning, in `core.CHECKS`' order.
BACK_ENDS: tuple[Callable[[SymmetricAnalysis], bool], ...] = (run.certify, races.certify, flow.certify)


def clean(spec: Spec, program: SymmetricProgram, meaning: "tuple[Collective, Buffers] | None",
          jobs: int | None = None, back_ends: "tuple[Callable[[SymmetricAnalysis], bool], ...]" = BACK_ENDS) -> bool:
    """True when every back end of `back_ends` certifies the symmetric program: by default
    it runs to the end with every semaphore at 0, has no race and computes the collective;
    False when something fails or the quotient cannot tell. `meaning`: `(Collective,
    Buffers)`, or None for no meaning check; `spec` names the buffers' kinds (`spec.Spec`: a
    schedule, or a traced kernel's description). (Routes and megacore rules are checked by
    `core.on_quotient` on the same events.) `jobs`: processes (default
    `background.default_jobs()`): with more than one, the data flow may run in a forked
    child (`flow.fork`)."""
    a = SymmetricAnalysis(spec, program, meaning)
    if flow.certify in back_ends:
        flow.fork(a, default_jobs() if jobs is None else jobs)
    try:
        return all(back_end(a) for back_end in back_ends)
    except (Unclear, NotRotational):
        return False
    finally:
        if a.flow is not None:
            a.flow.close()
