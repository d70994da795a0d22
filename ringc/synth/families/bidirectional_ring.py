"""Bidirectional rings on one axis (a `ring:N`), with their chunk counts: half of
every block travels right and half left, so both links into every chip carry data, and
with `chunks` >= 2 the pieces of a step are software-pipelined so a link does not idle
through the hop latency or the add. Templates: the library's bidirectional schedules,
with `chunks` (the param `ringc tune` ranges over) chosen here. On an axis without
wraparound the wrap-around step goes back over the N - 1 links of the other direction:
correct, and the two rings then share every link (about one ring's time)."""

from __future__ import annotations

from typing import Iterator

from .base import Candidate, library_text, with_params

FAMILY = "bidirectional_ring"
WHAT = "two rings at once, half of every block each way"

# collective -> (template, the chunk counts tried; () when the template has no `chunks`)
TEMPLATES = {"psum": ("all_reduce_bidirectional", (1, 2, 4, 8)),
             "all_gather": ("all_gather_bidirectional", ()),
             "psum_scatter": ("reduce_scatter_chunked", (1, 2, 4, 8))}


def generate(kind: str, topo) -> Iterator[Candidate]:
    if kind not in TEMPLATES or topo.ndim != 1 or topo.size < 3:
        return
    template, chunk_counts = TEMPLATES[kind]
    text = library_text(template)
    for chunks in chunk_counts or (None,):
        params = {"chunks": chunks, "rows": 16 * chunks} if chunks else {}
        name = f"{kind}_bidirectional_ring" + (f"_c{chunks}" if chunks else "")
        yield Candidate(FAMILY, name, with_params(text, name, params), WHAT,
                        {"chunks": chunks} if chunks else {})
