"""Real, unmodified public kernels checked as they are.

JAX's own all-gather op (`jax.experimental.pallas.ops.tpu.all_gather`, installed with jax)
sends half of each shard each way around the ring, one DMA per direction per step, and
reuses one receive semaphore per direction for every step. A left neighbour one step ahead
can satisfy this device's wait with the next step's bytes, so the device forwards a slot
that has not landed: a race at N >= 3 (JAX's interpret-mode detector also reports it at
N = 4, on the right-going copy at all_gather.py:91). At N = 2 there is one step: correct.

The race needs a neighbour's next-step DMA to land before its previous one on the same
link: every finding is labelled so, and under `--dma-order in-order` (FIFO per link) the
kernel is clean, which the exhaustive explorer confirms with its own in-order model.
"""

import functools
import inspect

import jax
import jax.numpy as jnp
import pytest

import ringc
from jax.experimental.pallas.ops.tpu import all_gather as jax_all_gather

from ringc.verify.explore import explore
from ringc.verify.races import OUT_OF_ORDER

SOURCE = inspect.getsource(jax_all_gather)


def _line(text: str) -> int:
    hits = [i for i, line in enumerate(SOURCE.splitlines(), 1) if text in line]
    assert len(hits) >= 1, text
    return hits


def _check(n: int, dma_order: str = "any"):
    mesh = jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])
    x = jax.ShapeDtypeStruct((8 * n, 128), jnp.float32, sharding=jax.sharding.NamedSharding(mesh, jax.P("x")))
    fn = functools.partial(jax_all_gather.all_gather, mesh=mesh, axis_name="x")
    return ringc.check_pallas(fn, (x,), mesh, "all_gather", dma_order=dma_order)


def test_jax_all_gather_is_correct_on_two_devices():
    report = _check(2)
    assert report.ok, report.to_text()
    assert report.program.event_count > 0


@pytest.mark.parametrize("n", [3, 4])
def test_jax_all_gather_races_on_its_shared_receive_semaphores(n):
    report = _check(n)
    assert not report.ok
    assert report.kinds() == {"race"}, report.to_text()
    remote_copies = set(_line("right_dma = pltpu.async_remote_copy(")) | set(_line("left_dma = pltpu.async_remote_copy("))
    for f in report.findings:
        assert f.event.line.file.endswith("all_gather.py")
        assert int(f.event.line) in remote_copies
        assert "can complete while it is still in flight" in f.message


@pytest.mark.parametrize("n", [3, 4])
def test_jax_all_gather_race_relies_on_out_of_order_landing(n):
    """Every race is labelled; in order per link the kernel is correct, and the explorer
    (FIFO implemented on its own) agrees under both models."""
    report = _check(n)
    assert report.findings and all(f.relies_on == OUT_OF_ORDER for f in report.findings), report.to_text()
    in_order = _check(n, "in-order")
    assert in_order.ok and not in_order.findings, in_order.to_text()
    assert any("in order per link" in a for a in in_order.assumptions)
    for dma_order, racy in (("any", True), ("in-order", False)):
        result = explore(report.program, max_states=100_000, dma_order=dma_order)
        assert result.complete and result.race == racy and not result.hang, (dma_order, result.summary())
