"""`SymmetricProgram`: the group and device 0's events (the orbit representatives) of a
program every device of which runs device 0's events moved by a group element."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from ..events import Event, Program


class Group(str, Enum):
    """How device d's events are device 0's moved (`rotation.py`, `xor.py`)."""
    TRANSLATION = "translation"  # device d runs them translated by d (every box step, every target)
    XOR = "xor"                  # device d runs them with every device id XORed by d


Steps = dict[tuple[str, int], tuple[int, ...]]  # (buffer, dim) -> its step, one entry per axis


@dataclass(frozen=True)
class SymmetricProgram:
    """Every device runs device 0's events moved by an element of `group`.

    `Group.TRANSLATION`: device d (coordinates d_a over the schedule's axes) runs them
    translated by d: every device id moved by d, each box of buffer dim (b, i) by
    sum_a d_a * steps[(b, i)][a]. `Group.XOR` (one axis, N a power of two): every device id
    XORed by d, and a box dim of step (1,) has its index XORed by d.

    `representatives` is device 0's program alone: its `devices` (and `second_core`, under
    megacore) holds device 0's events, its `n`, shapes, targets and labels are the whole
    program's. Made only where the symmetry is proved (`rotation.rotation_unroll`,
    `xor.xor_unroll`, `pallas.program.Builder.program`); `moves.expand` spells every
    device out as a `Program`."""
    representatives: Program
    steps: Steps
    group: Group = Group.TRANSLATION

    def __post_init__(self) -> None:
        if self.representatives.cores > 1:  # chip 0's cores: processes c * N (`rotation._cores_unroll`)
            if any(events for p, events in enumerate(self.representatives.devices) if p % self.device_count):
                raise ValueError("a symmetric program of several cores holds chip 0's cores' events alone")
        elif len(self.representatives.devices) != 1:
            raise ValueError(f"a symmetric program holds device 0's events alone, not "
                             f"{len(self.representatives.devices)} devices'")

    @property
    def events(self) -> list[Event]:
        """Device 0's events: every other device's are these moved (the class docstring)."""
        return self.representatives.devices[0]

    # What every device shares, as the representatives' program holds it.
    @property
    def device_count(self) -> int:
        """The devices that hold memory: every device (chip) of a symmetric program."""
        return self.representatives.device_count

    @property
    def n(self) -> int:
        return self.representatives.n

    @property
    def cores(self) -> int:
        """TensorCores per chip, each a process (`cores: 2`: the processes c * N hold chip 0's cores)."""
        return self.representatives.cores

    @property
    def file(self) -> str:
        return self.representatives.file

    @property
    def schedule_name(self) -> str:
        return self.representatives.schedule_name

    @property
    def grid_names(self) -> tuple[str, ...]:
        return self.representatives.grid_names

    @property
    def axis_sizes(self) -> dict[str, int]:
        return self.representatives.axis_sizes

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return self.representatives.shapes

    @property
    def folds(self) -> tuple:
        """The long pipelines spelled in a few rows for pricing (`Program.folds`): device 0's."""
        return self.representatives.folds

    @property
    def event_count(self) -> int:
        """Events of all devices: N copies of device 0's."""
        return self.n * len(self.events)

    def label(self, device: int) -> str:
        return self.representatives.label(device)

    def where(self, ev: Event) -> str:
        return self.representatives.where(ev)

    def line_text(self, line: Any) -> str:
        return self.representatives.line_text(line)


__all__ = ["Group", "Steps", "SymmetricProgram"]
