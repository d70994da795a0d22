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


# (module getter, enum attribute, old member, new object getter, text): a member an enum lost
# (`pltpu.MemorySpace.ANY` is `pl.ANY` now) while the enum itself is still there.
MEMBER_ALIASES: list[tuple[Callable[[], Any], str, str, Callable[[], Any], str]] = [
    (_pltpu, "MemorySpace", "ANY", lambda: _pl().ANY, "pltpu.MemorySpace.ANY -> pl.ANY"),
]


def _vmem_blocks(specs: Any, log: "AliasLog") -> Any:
    """Old `emit_pipeline` buffered every block in VMEM whatever its spec's memory space said
    (the tutorial's inner specs say `MemorySpace.ANY`); today's refuses ANY there. A spec
    with ANY becomes the same spec in VMEM, which is what the old pipeline did with it."""
    pl, pltpu = _pl(), _pltpu()

    def fix(spec: Any) -> Any:
        if isinstance(spec, pl.BlockSpec) and spec.memory_space is pl.ANY:
            log.note("pltpu.emit_pipeline block spec memory_space=ANY -> VMEM (old emit_pipeline buffered every "
                     "block in VMEM)")
            import dataclasses
            return dataclasses.replace(spec, memory_space=pltpu.VMEM)
        return spec
    if isinstance(specs, (list, tuple)):
        return type(specs)(fix(s) for s in specs)
    return fix(specs)


def _accumulating_pipeline(emit_pipeline: Callable[..., Any], log: "AliasLog", text: str) -> Callable[..., Any]:
    """`emit_pipeline` as it was with `should_accumulate_out=True`: each output block the body
    writes is added to what the output already holds (the tutorial's inner kernel writes
    `accum_ref[...] = input_ref[...]` for "accumulate"). Today's emit_pipeline has no such
    option, so the shim reads each output block in as an extra input and adds it after the
    body: out[block] = body's block + out[block], the removed option's meaning."""

    def shim(body, *args, should_accumulate_out=False, in_specs=(), out_specs=(), **kwargs):
        in_specs, out_specs = _vmem_blocks(in_specs, log), _vmem_blocks(out_specs, log)
        if not should_accumulate_out:
            return emit_pipeline(body, *args, in_specs=in_specs, out_specs=out_specs, **kwargs)
        log.note(text)
        ins = list(in_specs) if isinstance(in_specs, (list, tuple)) else [in_specs]
        outs = list(out_specs) if isinstance(out_specs, (list, tuple)) else [out_specs]
        k, m = len(ins), len(outs)

        def accumulating_body(*refs):
            body(*refs[:k], *refs[k + m:])
            for out, old in zip(refs[k + m:], refs[k:k + m]):
                out[...] = out[...] + old[...]

        inner = emit_pipeline(accumulating_body, *args, in_specs=[*ins, *outs], out_specs=out_specs, **kwargs)

        def pipeline(*refs, **call_kwargs):
            return inner(*refs[:k], *refs[k:], *refs[k:], **call_kwargs)
        return pipeline
    return shim


# (module getter, function, removed keyword, shim factory, text): a keyword a function lost,
# emulated with today's API where its meaning can be kept exactly.
KEYWORD_SHIMS: list[tuple[Callable[[], Any], str, str, Callable[..., Any], str]] = [
    (_pltpu, "emit_pipeline", "should_accumulate_out", _accumulating_pipeline,
     "pltpu.emit_pipeline(should_accumulate_out=True) -> emit_pipeline reading each output block back and adding "
     "it after the body"),
]


BLOCKSPEC_ORDER_TEXT = ("pl.BlockSpec(index_map, block_shape) -> pl.BlockSpec(block_shape, index_map) (the argument "
                        "order of jax before 0.4.31)")


def _old_blockspec_order(log: "AliasLog") -> Callable[[], None]:
    """JAX before 0.4.31 took `pl.BlockSpec(index_map, block_shape)`; today's takes the
    block shape first. While the user's code runs, a BlockSpec made with a function first and
    a shape second has them swapped (noted in the verdict); every other call is as it was.
    Returns what puts `BlockSpec.__init__` back."""
    cls = _pl().BlockSpec
    init = cls.__init__

    def swapped(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) >= 2 and callable(args[0]) and isinstance(args[1], (tuple, list)):
            log.note(BLOCKSPEC_ORDER_TEXT)
            args = (args[1], args[0], *args[2:])
        init(self, *args, **kwargs)

    cls.__init__ = swapped

    def restore() -> None:
        cls.__init__ = init
    return restore


class _Members:
    """An enum with its lost members put back: every other attribute is the enum's own."""

    def __init__(self, enum: Any, extra: dict[str, tuple[Callable[[], Any], str]], log: "AliasLog"):
        self._enum, self._extra, self._log = enum, extra, log

    def __getattr__(self, name: str) -> Any:
        if name in self._extra:
            get_new, text = self._extra[name]
            self._log.note(text)
            return get_new()
        return getattr(self._enum, name)

    def __iter__(self):
        return iter(self._enum)

    def __getitem__(self, name: str) -> Any:
        return self._enum[name]


def _importable(table: list) -> Iterator[tuple]:
    """A table's rows with their module imported (rows whose module does not import are skipped)."""
    for get_module, *rest in table:
        try:
            module = get_module()
        except ImportError:
            continue
        yield (module, *rest)


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
    replaced: list[tuple[Any, str, Any]] = []  # (module, attribute, the original) to put back
    for module, attr, member, get_new, text in _importable(MEMBER_ALIASES):
        enum = vars(module).get(attr)
        if enum is None or hasattr(enum, member) or isinstance(enum, _Members):
            continue
        replaced.append((module, attr, enum))
        setattr(module, attr, _Members(enum, {member: (get_new, text)}, log))
    import inspect
    for module, attr, keyword, factory, text in _importable(KEYWORD_SHIMS):
        fn = vars(module).get(attr)
        try:
            if fn is None or keyword in inspect.signature(fn).parameters or getattr(fn, "_ringc_shim", False):
                continue
        except (TypeError, ValueError):
            continue
        shim = factory(fn, log, text)
        shim._ringc_shim = True
        replaced.append((module, attr, fn))
        setattr(module, attr, shim)
    try:
        restore_blockspec = _old_blockspec_order(log)
    except ImportError:
        restore_blockspec = lambda: None  # noqa: E731 - no Pallas: nothing to put back
    try:
        yield log
    finally:
        restore_blockspec()
        for module, attr, enum in reversed(replaced):
            setattr(module, attr, enum)
        for module, old in previous.items():
            if old is None:
                vars(module).pop("__getattr__", None)
            else:
                module.__getattr__ = old
