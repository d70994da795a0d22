"""What the verifier reads of a front end's description of a program besides its events
(`Spec`): a YAML `Schedule` and the Pallas importer's `KernelSpec` are both one. The checks
(`core.py`), the quotient (`symmetric/`) and the placement (`placement.py`) take a `Spec`,
never a front end's own type."""

from __future__ import annotations

from typing import Mapping, Protocol


class BufferFacts(Protocol):
    """What the checks read of one buffer: its kind (`input`, `output`, ...), its memory
    (`hbm`, `vmem`, ...) and the line that declares it."""
    kind: str
    memory: str
    line: int


class Spec(Protocol):
    """What the checks read of a front end's description of a program besides its events:
    its name and file, its mesh axes, its buffers and whether it runs on both TensorCores
    of a chip, and how. A YAML `Schedule` and the Pallas importer's `KernelSpec` are both one."""
    name: str
    file: str | None
    axes: list[str]
    buffers: Mapping[str, BufferFacts]
    megacore: bool
    # Whether core 1 runs its half of a split grid with its own VMEM, DMA semaphores and
    # copies (a Pallas kernel's `parallel` axis on a v4/v5p chip), not the YAML model's rule.
    split_grid: bool

    def line_of(self, key: str) -> int: ...
