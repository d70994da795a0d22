"""The unroller's generated and cached paths against the plain ones they stand for.

`Unroller.walker` (an op list's rules as one generated function), `Unroller.copy_function`
(a copy op's actions as one generated function), the generated regions (`region_function`,
`spec_regions_function`, with `place_code`) and `RotationUnroller.place`'s cache of placed
boxes are each claimed to change nothing but the time: the same events, targets,
steps and errors. Here each schedule of a small corpus (the library, the broken and
mutant cases) is unrolled both ways, in full on 3 devices and as device 0 of the rotation
quotient on 4, and every event, target, recorded step and error must be the same. The
plain way: `walk_plain` for `walk`, no generated copy, region or block-spec functions, and
a `placed` cache that keeps nothing (every box proved again). Variants of `ppermute_right`
add bad input on the copy ops, which the generated code must leave to the plain rule's
error.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

import ringc
from ringc.verify.rotation import RotationUnroller
from ringc.verify.unroll import Unroller

ROOT = Path(__file__).resolve().parent.parent
CORPUS = sorted([*(ROOT / "schedules").glob("*.yaml"), *(ROOT / "tests" / "broken").glob("*.yaml"),
                 *(ROOT / "tests" / "mutants").glob("*.yaml")])


class _Forgets(dict):
    """A cache that keeps nothing."""

    def __setitem__(self, key, value):
        pass


class _ForgetsSet(set):
    def add(self, item):
        pass


def _plain(u: Unroller) -> Unroller:
    u.walk = partial(Unroller.walk_plain, u)
    u.copy_function = lambda op: None
    u.region_function = lambda ref, plan: None
    u.spec_regions_function = lambda specs: None
    if isinstance(u, RotationUnroller):
        u.placed, u.unmoved = _Forgets(), _ForgetsSet()
    return u


def _outcome(make, plain: bool):
    try:
        u = make()
        if plain:
            _plain(u)
        events, second = u.device_events(0, 2) if isinstance(u, RotationUnroller) else (u.run(2), None)
    except Exception as e:  # noqa: BLE001 -- an error is an outcome to compare
        return f"{type(e).__name__}: {e}"
    if second is None:  # a full program
        p = events
        return repr((p.devices, p.second_core, [(e.device, e.index, t) for e, t in p.targets]))
    return repr((events, second, [(e.device, e.index, t) for e, t in u.targets], u.steps))


# Bad input on the copy ops' generated paths: each variant of `ppermute_right` makes the
# plain rule raise (a semaphore or region index out of range, regions of different shapes).
PPERMUTE = (ROOT / "schedules" / "ppermute_right.yaml").read_text()
VARIANTS = {
    "recv_sem_index": [("  recv_sem: dma", "  recv_sem: {kind: dma, shape: [2]}"),
                       ("recv_sem: recv_sem}", "recv_sem: \"recv_sem[step + 2]\"}")],
    "send_sem_index": [("  send_sem: dma", "  send_sem: {kind: dma, shape: [2]}"),
                       ("send_sem: send_sem,", "send_sem: \"send_sem[(me + 1) % N]\",")],
    "region_slice": [("dst: out,", "dst: \"out[step + 8:1]\",")],
    "shapes": [("src: x,", "src: \"x[0:4]\",")],
}


def _variant(changes: list[tuple[str, str]]) -> str:
    text = PPERMUTE
    for old, new in changes:
        assert old in text, old
        text = text.replace(old, new)
    return text


def _cases() -> list:
    scheds = [(path.parent.name + "/" + path.stem, lambda path=path: ringc.load(path)) for path in CORPUS]
    scheds += [(f"variant/{name}", lambda c=c: ringc.load_text(_variant(c), "ppermute_right.yaml"))
               for name, c in VARIANTS.items()]
    for name, load in scheds:
        try:
            sched = load()
        except ringc.ScheduleError:
            continue
        if len(sched.axes) != 1 or sched.data:
            continue
        yield pytest.param(sched, id=name)


@pytest.mark.parametrize("sched", list(_cases()))
def test_generated_paths_make_the_plain_events(sched):
    """Every case of the corpus unrolls to the same events (or error) both ways."""
    axis = sched.axes[0]
    full = partial(Unroller, sched, 3, {axis: 3})
    assert _outcome(full, False) == _outcome(full, True)
    rotated = partial(RotationUnroller, sched, {axis: 4})
    assert _outcome(rotated, False) == _outcome(rotated, True)

