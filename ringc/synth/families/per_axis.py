"""Per-axis bidirectional schedules on a 2-D or 3-D torus, with their chunk counts: the
shard is cut into one part per axis order (rotated: x-then-y and y-then-x on 2-D, three
rotations on 3-D), the parts run concurrently, each axis phase as two rings (right and
left), so all 2k links of a chip carry data at once. Templates: the library's 2-D and
3-D bidirectional all-reduce, with `chunks` (the software pipeline's depth per step)
chosen here; all-gather and reduce-scatter have no chunked 2-D template yet."""

from __future__ import annotations

from typing import Iterator

from . import Candidate, library_text, with_params

FAMILY = "per_axis"
WHAT = "concurrent rotated-axis bidirectional rings, one part of the shard per axis order"

TEMPLATES = {("psum", 2): ("all_reduce_2d_bidirectional", (1, 2, 4)),
             ("psum", 3): ("all_reduce_3d_bidirectional", (1, 2, 4))}


def generate(kind: str, topo) -> Iterator[Candidate]:
    key = (kind, topo.ndim)
    if key not in TEMPLATES or not all(topo.wrap):
        return
    template, chunk_counts = TEMPLATES[key]
    text = library_text(template)
    for chunks in chunk_counts:
        name = f"{kind}_per_axis_{topo.ndim}d_c{chunks}"
        yield Candidate(FAMILY, name, with_params(text, name, {"chunks": chunks, "rows": 8 * chunks}),
                        WHAT, {"chunks": chunks})
