"""The symbolic memory's piece index (`semantics._Index`, pieces in classes by their
length along the leading dim): after any sequence of writes, reading a region gives
exactly the last write of every cell, against a plain array of cells."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from ringc.collectives import Piece
from ringc.verify.events import Region
from ringc.verify.semantics import UNINIT, Memory

SHAPE = (24, 3)


@st.composite
def boxes(draw):
    out = []
    for size in SHAPE:
        lo = draw(st.integers(0, size - 1))
        out.append((lo, draw(st.integers(lo + 1, size))))
    return tuple(out)


def region(box) -> Region:
    return Region("buf", 0, box, (0, 1), 4)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(boxes(), st.booleans()), min_size=1, max_size=25), boxes())
def test_reads_see_the_last_write_of_every_cell(writes, probe):
    """Writes and forgets (`Memory.forget` erases the box's pieces: a box no piece covers
    reads as garbage), against a plain array of cells."""
    mem = Memory({"buf": SHAPE})
    cells = {}
    for tag, (box, forget) in enumerate(writes):
        if forget:
            mem.forget(region(box))
        else:
            mem.write(region(box), [Piece(box, (("x", tag, ((0, 0), (1, 0))),))])
        for cell in itertools.product(*(range(lo, hi) for lo, hi in box)):
            cells[cell] = None if forget else tag
    seen = {}
    for p in mem.read(region(probe)):
        for cell in itertools.product(*(range(lo, hi) for lo, hi in p.box)):
            assert cell not in seen, f"cell {cell} read twice"
            term = p.value[0]
            seen[cell] = None if term[0] == UNINIT + "buf" else term[1]
    want = {cell: cells.get(cell) for cell in itertools.product(*(range(lo, hi) for lo, hi in probe))}
    assert seen == want
