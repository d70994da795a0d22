"""Rule tables: how each stage says what it does for each op, compute kind or collective.

In the style of JAX's `lowering_rules[prim] = rule` (jax/_src/pallas/mosaic/lowering.py):
a stage keeps one `RuleTable`, fills it with `@table.register(key)` next to each rule,
and dispatches with `table[key]` (or `table.of(obj)`, keyed by `type(obj)`), which raises
`MissingRule` naming the stage and the key when the table lacks it. There is no default
rule: something new is an internal error, never a silent fallback.

Every table records itself in `TABLES` with the domain it must cover (`ops`: every class
in `schema.OPS`; `compute`: every `events.COMPUTE_KINDS`; `collectives`: every kind in
`ringc.collectives.COLLECTIVES`), so `tests/test_coverage.py` can say which rule is
missing after a new op or collective is added.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, Hashable, TypeVar

__all__ = ["MissingRule", "RuleTable", "TABLES"]

R = TypeVar("R")


class MissingRule(NotImplementedError):
    """A stage met an op, compute kind or collective its rule table has no rule for: a bug
    of ringc (a new op or collective not wired into every stage), not of the schedule."""

    def __init__(self, stage: str, key: Any):
        self.stage, self.key = stage, key
        name = getattr(key, "__name__", None) or repr(key)
        super().__init__(f"{stage} has no rule for {name}: add one to its rule table "
                         "(see docs/architecture.md, 'Adding an op')")


class RuleTable(dict, Generic[R]):
    """A dict from key (op class, compute kind or collective kind) to rule, that raises
    `MissingRule` on a key it lacks."""

    def __init__(self, stage: str, domain: str):
        super().__init__()
        self.stage = stage
        self.domain = domain  # "ops" | "compute" | "collectives"
        TABLES.append(self)

    def register(self, *keys: Hashable) -> Callable[[R], R]:
        def add(rule: R) -> R:
            for key in keys:
                if key in self:
                    raise ValueError(f"{self.stage}: two rules for {key!r}")
                dict.__setitem__(self, key, rule)
            return rule
        return add

    def __missing__(self, key: Hashable) -> R:
        raise MissingRule(self.stage, key)

    def of(self, obj: Any) -> R:
        """The rule for `type(obj)` (an op)."""
        return self[type(obj)]


TABLES: list[RuleTable] = []
