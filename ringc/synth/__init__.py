"""`ringc synth`: the fastest verified schedule for a collective on a given slice.

Candidates come from the generators in `ringc/synth/families/` (one module per family),
are priced by the cost model (`ringc/cost/`) at every requested size, and the fastest
at each size that `ringc check` proves on the slice (and, where libtpu is installed, the
TPU compiler accepts) is emitted as a readable YAML schedule (`search.py`)."""

from __future__ import annotations

from .search import SynthResult, synth

__all__ = ["SynthResult", "synth"]
