"""What the symmetric back ends of the checks share: one quotient analysis of a
`SymmetricProgram` (`SymmetricAnalysis`), and `Unclear`, which any of them raises when the
quotient cannot give the clean verdict.

The quotient only ever certifies a clean run: any finding, or a question it cannot
answer, sends the subject to the full analysis, which decides and explains
(`core.on_quotient`). So a symmetric back end answers True (clean) or False / `Unclear`
(let the full analysis decide), never a finding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..spec import Spec
from .program import SymmetricProgram

if TYPE_CHECKING:
    from ...collectives import Buffers, Collective
    from ..background import Background
    from ..order import Order
    from .moves import Rotator

__all__ = ["Key", "SymmetricAnalysis", "Unclear"]

Key = tuple[str, tuple[int, ...]]  # a semaphore of device 0: (name, index)


class Unclear(Exception):
    """The quotient cannot give the clean verdict: let the full analysis decide."""


@dataclass
class SymmetricAnalysis:
    """One quotient analysis: the program, what the checks read beside it (`spec`, the
    meaning), and what each symmetric back end learns that later ones read, in the order
    of `core.CHECKS`: the feeds of device 0's semaphores (`run.feeds_of`), the order
    (`order.quotient_order`) and the rotated regions (`moves.Rotator`), and the data flow
    running in a forked child (`flow.fork`)."""
    spec: Spec
    program: SymmetricProgram
    meaning: "tuple[Collective, Buffers] | None"
    feeds: Any = None                     # `run.feeds_of`: (every feed, the DMAs')
    order: "Order | None" = None
    rot: "Rotator | None" = None
    flow: "Background | None" = None
