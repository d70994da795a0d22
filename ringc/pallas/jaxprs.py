"""Walking traced JAX programs: every equation, into `jit`, `shard_map`, loops and conds,
but not into the kernels of `pallas_call`s."""

from __future__ import annotations

from typing import Any

__all__ = ["walk_eqns", "has_pallas"]


def walk_eqns(jaxpr: Any):
    from jax._src import core
    for eqn in jaxpr.eqns:
        yield eqn
        if eqn.primitive.name == "pallas_call":
            continue
        for p in eqn.params.values():
            for sub in (p if isinstance(p, (tuple, list)) else [p]):
                if isinstance(sub, core.ClosedJaxpr):
                    yield from walk_eqns(sub.jaxpr)
                elif isinstance(sub, core.Jaxpr):
                    yield from walk_eqns(sub)


def has_pallas(eqn: Any) -> bool:
    from jax._src import core
    for p in eqn.params.values():
        for sub in (p if isinstance(p, (tuple, list)) else [p]):
            j = sub.jaxpr if isinstance(sub, core.ClosedJaxpr) else sub if isinstance(sub, core.Jaxpr) else None
            if j is not None and any(e.primitive.name == "pallas_call" for e in walk_eqns(j)):
                return True
    return False
