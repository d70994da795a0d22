"""Old Pallas spellings that jax 0.10 no longer has, offered while a user's module is imported.

Published kernels were written against older JAX releases. Where a name moved (and means
the same thing), ringc puts the new object under the old name for the duration of the
import and trace, and the verdict says so ("checked with alias X for Y"). Nothing is
aliased that changed meaning. The table is the one home for these; `docs/pallas-import.md`
lists it.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator


def _pltpu():
    from jax.experimental.pallas import tpu as pltpu
    return pltpu


def _pl():
    from jax.experimental import pallas as pl
    return pl


def _memory_spaces() -> Any:
    """The old enum: today's `pltpu.MemorySpace` members, and `ANY`, which moved to `pl.ANY`."""
    import types
    members = {name: getattr(_pltpu().MemorySpace, name) for name in _pltpu().MemorySpace.__members__}
    return types.SimpleNamespace(**members, ANY=_pl().ANY)


# (module getter, old attribute, new object getter, text for the verdict)
ALIASES: list[tuple[Callable[[], Any], str, Callable[[], Any], str]] = [
    (_pltpu, "TPUMemorySpace", lambda: _memory_spaces(), "pltpu.TPUMemorySpace -> pltpu.MemorySpace (ANY -> pl.ANY)"),
    (_pltpu, "ANY", lambda: _pl().ANY, "pltpu.ANY -> pl.ANY"),
    (_pltpu, "TPUCompilerParams", lambda: _pltpu().CompilerParams, "pltpu.TPUCompilerParams -> pltpu.CompilerParams"),
    (_pltpu, "run_scoped", lambda: _pl().run_scoped, "pltpu.run_scoped -> pl.run_scoped"),
    (_pltpu, "delay", lambda: _pl().delay, "pltpu.delay -> pl.delay"),
]


class AliasLog:
    """Which aliases the user's code actually looked up."""

    def __init__(self) -> None:
        self.used: list[str] = []

    def note(self, text: str) -> None:
        if text not in self.used:
            self.used.append(text)


@contextlib.contextmanager
def aliases(log: AliasLog) -> Iterator[AliasLog]:
    """Install the missing old names (only those missing) while the block runs. A module
    `__getattr__` records each use, so the verdict names only aliases the code needed."""
    installed: list[tuple[Any, str, Any]] = []
    for get_module, old, get_new, text in ALIASES:
        try:
            module = get_module()
        except ImportError:
            continue
        if old in vars(module):
            continue
        installed.append((module, old, vars(module).get("__getattr__")))
    hooks: dict[Any, dict[str, tuple[Callable[[], Any], str]]] = {}
    for get_module, old, get_new, text in ALIASES:
        try:
            module = get_module()
        except ImportError:
            continue
        if any(m is module and o == old for m, o, _ in installed):
            hooks.setdefault(module, {})[old] = (get_new, text)
    previous = {}
    for module, table in hooks.items():
        previous[module] = vars(module).get("__getattr__")
        fallback = previous[module]

        def getattr_hook(name: str, table=table, fallback=fallback):
            if name in table:
                get_new, text = table[name]
                log.note(text)
                return get_new()
            if fallback is not None:
                return fallback(name)
            raise AttributeError(name)
        module.__getattr__ = getattr_hook
    try:
        yield log
    finally:
        for module, old in previous.items():
            if old is None:
                vars(module).pop("__getattr__", None)
            else:
                module.__getattr__ = old
