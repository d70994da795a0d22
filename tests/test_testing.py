"""ringc.testing: the strategies users get, exercised the way the README shows."""

from pathlib import Path

from hypothesis import given, settings

import ringc
from ringc.testing import (check_sized, device_counts, mutants_of, mutate, mutations_of, schedules_from,
                           topology_for)

ROOT = Path(__file__).resolve().parent.parent
ALL_REDUCE = ringc.load(ROOT / "schedules" / "all_reduce_ring.yaml")


@settings(max_examples=10, deadline=None)
@given(schedules_from(ROOT / "schedules"), device_counts(2, 8))
def test_library_schedules_verify(sched, n):
    assert check_sized(sched, n).ok  # a torus of about n devices for the 2-D schedules


def test_topology_for_gives_a_ring_or_a_square_torus():
    ring = ringc.load(ROOT / "schedules" / "all_gather_ring.yaml")
    two = ringc.load(ROOT / "schedules" / "all_gather_2d.yaml")
    assert topology_for(ring, 7) == "ring"
    assert [topology_for(two, n) for n in (4, 8, 12, 16, 7)] == [
        "torus:2x2", "torus:2x4", "torus:3x4", "torus:4x4", "torus:2x4"]


def test_flipping_a_per_axis_direction_is_caught():
    sched = ringc.load(ROOT / "schedules" / "all_gather_2d.yaml")
    flips = [m for m in mutations_of(sched) if m.kind == "flip"]
    assert len(flips) == 4  # right_x / right_y, each copy
    for m in flips:
        mutated = mutate(sched, m)
        assert not check_sized(mutated, 12).ok, m.describe()


@settings(max_examples=15, deadline=None)
@given(mutants_of(ALL_REDUCE))
def test_dropping_a_wait_is_caught(mutant):
    mutation, sched = mutant
    if mutation.kind == "drop" and mutation.op in ("wait", "wait_recv", "sem_wait"):
        assert not ringc.check(sched, 4).ok, mutation.describe()


def test_mutations_change_the_schedule_and_keep_its_file():
    muts = mutations_of(ALL_REDUCE)
    assert {m.kind for m in muts} == {"drop", "swap", "flip"}
    for m in muts:
        mutated = mutate(ALL_REDUCE, m)
        assert mutated.model_dump() != ALL_REDUCE.model_dump(), m
        assert mutated.file == ALL_REDUCE.file


def test_flipping_the_forward_direction_is_caught():
    sched = ringc.load(ROOT / "schedules" / "all_gather_ring.yaml")
    flips = [m for m in mutations_of(sched) if m.kind == "flip"]
    assert flips
    assert all(not ringc.check(mutate(sched, m), 4).ok for m in flips)


def test_dropping_a_pipelines_arrivals_is_caught():
    """`unfeed`: a pipeline fed by remote copies fetches its blocks without waiting for them."""
    sched = ringc.load(ROOT / "schedules" / "all_gather_matmul_streamed.yaml")
    unfeeds = [m for m in mutations_of(sched) if m.kind == "unfeed"]
    assert len(unfeeds) == 2  # step 1's pipeline and the later steps'
    for m in unfeeds:
        mutated = mutate(sched, m)
        assert mutated.model_dump() != sched.model_dump(), m
        assert {"race", "dma_not_waited"} <= ringc.check(mutated, 4).kinds(), m.describe()
