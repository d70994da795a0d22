"""Generators of candidate schedules for `ringc synth`, one module per family (as networkx's
`generators/`: one constructor per family of graphs).

Every family exposes `FAMILY` (its name), `WHAT` (one line: what it is) and
`generate(kind, topo) -> Iterator[Candidate]`: the schedules of the family, as YAML text,
that compute the collective `kind` over the whole of the topology `topo`, one per choice
of the family's structural params (chunks, pipeline depth). Nothing here is trusted: the
search prices every candidate, and the winner is checked (`ringc check`) before it is
emitted; a candidate that fails is dropped and the next one taken."""

from __future__ import annotations

from .base import Candidate, library_text, with_params  # noqa: F401 (the families' shared parts)


def families() -> list:
    """The generator modules, in the order their candidates are tried on a tie."""
    from . import (all_to_all_direct, bidirectional_ring, direct, hamiltonian_ring, library, paced_parts, per_axis,
                   per_axis_direct, recursive_doubling, recursive_halving, rotated_bidirectional, shifted_halving,
                   vmem_windows)
    return [library, bidirectional_ring, hamiltonian_ring, per_axis, rotated_bidirectional, paced_parts, direct,
            per_axis_direct, recursive_doubling, recursive_halving, shifted_halving, all_to_all_direct, vmem_windows]


def collectives() -> tuple[str, ...]:
    return ("psum", "all_gather", "psum_scatter", "all_to_all")
