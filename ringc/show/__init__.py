"""Pictures of a schedule from its timed run: mermaid diagrams, a markdown document, PNG timelines."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..cost.model import Estimate

DIAGRAMS = ("gantt", "ring", "state", "memory")


def __getattr__(name: str) -> Any:
    """`document` loads on first use (PEP 562): the CLI's parser reads `DIAGRAMS` only."""
    if name == "document":
        from .document import document
        globals()["document"] = document  # the function, not the submodule of the same name
        return document
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def diagram(e: Estimate, which: str = "gantt", device: int = 0) -> str:
    """One mermaid diagram (without the ``` fence)."""
    from . import mermaid
    if which == "gantt":
        return mermaid.gantt(e.machine, f"{e.schedule.name} N={e.program.n}")
    if which == "ring":
        return mermaid.ring_diagram(e.program)
    if which == "state":
        return mermaid.state_diagram(e.program, device)
    if which == "memory":
        return mermaid.memory_diagram(e.schedule, e.program)
    raise ValueError(f"unknown diagram {which!r}; one of {', '.join(DIAGRAMS)}")


def timeline_png(e: Estimate) -> bytes:
    from .png import timeline_png as draw
    return draw(e.machine, f"{e.schedule.name}: N={e.program.n} on {e.hw.placement.topo.spec}, "
                           f"estimate {e.seconds * 1e6:.4g} us, efficiency {e.efficiency:.0%}")


__all__ = ["DIAGRAMS", "diagram", "document", "timeline_png"]
