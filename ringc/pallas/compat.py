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


def _plgpu():
    """Mosaic GPU's Pallas module; an ImportError while it is refused (devices answering as a
    TPU, `tpu.answering`) or when absl-py, which it imports, is missing."""
    import sys
    from jax.experimental.pallas import mosaic_gpu as plgpu
    if type(sys.modules.get("jax.experimental.pallas.mosaic_gpu")).__name__ == "_RefusingModule":
        raise ImportError("refused")
    return plgpu


def _memory_spaces() -> Any:
    """The old enum: today's `pltpu.MemorySpace` members, and `ANY`, which moved to `pl.ANY`."""
    import types
    members = {name: getattr(_pltpu().MemorySpace, name) for name in _pltpu().MemorySpace.__members__}
    return types.SimpleNamespace(**members, ANY=_pl().ANY)


def _repeat(x: Any, repeats: int, axis: int) -> Any:
    """`pltpu.repeat` as it was before jax removed it for `jnp.tile` (Feb 2026): `x` tiled
    `repeats` times along `axis` (a negative axis was refused, as it was then)."""
    import jax.numpy as jnp
    if axis < 0 or axis >= x.ndim:
        raise ValueError(f"axis: {axis} is out of range [0, {x.ndim})")
    return jnp.tile(x, [repeats if i == axis else 1 for i in range(x.ndim)])


def _removed_primitive(name: str) -> Callable[[], Any]:
    """`pl.load`, `pl.store`, `pl.swap`: removed from `pl` in jax 0.10 (deprecated for
    `ref[idx]` / `ref[idx] = v`), still the same functions in jax's own module."""
    def get() -> Any:
        from jax._src.pallas import primitives
        return getattr(primitives, name)
    return get


def _mosaic_gpu():
    import jax.experimental.mosaic.gpu as mgpu
    return mgpu


def _jax_lib():
    import jax.lib
    return jax.lib


def _xla_bridge() -> Any:
    """`jax.lib.xla_bridge`, gone in jax 0.10: its `get_backend` is `jax.extend.backend.get_backend`."""
    import types

    from jax.extend import backend
    return types.SimpleNamespace(get_backend=backend.get_backend)


# (module getter, old attribute, new object getter, text for the verdict)
ALIASES: list[tuple[Callable[[], Any], str, Callable[[], Any], str]] = [
    (_pltpu, "TPUMemorySpace", lambda: _memory_spaces(), "pltpu.TPUMemorySpace -> pltpu.MemorySpace (ANY -> pl.ANY)"),
    (_pltpu, "ANY", lambda: _pl().ANY, "pltpu.ANY -> pl.ANY"),
    (_pltpu, "TPUCompilerParams", lambda: _pltpu().CompilerParams, "pltpu.TPUCompilerParams -> pltpu.CompilerParams"),
    (_pltpu, "run_scoped", lambda: _pl().run_scoped, "pltpu.run_scoped -> pl.run_scoped"),
    (_pltpu, "delay", lambda: _pl().delay, "pltpu.delay -> pl.delay"),
    (_pltpu, "repeat", lambda: _repeat, "pltpu.repeat(x, r, axis) -> jnp.tile(x, r along axis)"),
    (_pl, "load", _removed_primitive("load"), "pl.load(ref, idx) -> ref[idx] (the same primitive)"),
    (_pl, "store", _removed_primitive("store"), "pl.store(ref, idx, v) -> ref[idx] = v (the same primitive)"),
    (_pl, "swap", _removed_primitive("swap"), "pl.swap(ref, idx, v) -> the same primitive"),
    (_jax_lib, "xla_bridge", _xla_bridge, "jax.lib.xla_bridge.get_backend -> jax.extend.backend.get_backend"),
    (_plgpu, "ThreadSemantics", lambda: _plgpu().LoweringSemantics,
     "plgpu.ThreadSemantics -> plgpu.LoweringSemantics"),
    # removed from JAX (0.10): the stand-in H100s have the NVSHMEM collectives it asked about
    (_mosaic_gpu, "supports_cross_device_collectives", lambda: (lambda: True),
     "mgpu.supports_cross_device_collectives() -> True (removed from JAX; the stand-in H100s have them)"),
    # newer JAX's constructor (jax 0.10 has the factory only)
    (_pltpu, "TensorCoreMesh", lambda: _tensorcore_mesh,
     "pltpu.TensorCoreMesh(axis_name, num_cores) -> pltpu.create_tensorcore_mesh(axis_name, num_cores=...)"),
]


def _tensorcore_mesh(axis_name: str = "core", num_cores: int | None = None, devices: Any = None) -> Any:
    """Newer JAX's `pltpu.TensorCoreMesh(axis_name=..., num_cores=...)`: jax 0.10's
    `create_tensorcore_mesh`, looked up when called (`tpu.answering` answers its `num_cores`),
    with newer JAX's fields `axis_name` and `num_cores` on it."""
    mesh = _pltpu().create_tensorcore_mesh(axis_name, devices=devices, num_cores=num_cores)
    # newer JAX's fields, which code written for it reads (`mesh.num_cores`): on the frozen
    # dataclass of jax 0.10, as plain attributes
    object.__setattr__(mesh, "axis_name", axis_name)
    object.__setattr__(mesh, "num_cores", int(mesh.devices.size))
    return mesh


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
        with _without_pipeline_primitive(log):
            return build(body, *args, should_accumulate_out=should_accumulate_out, in_specs=in_specs,
                         out_specs=out_specs, **kwargs)

    def build(body, *args, should_accumulate_out=False, in_specs=(), out_specs=(), **kwargs):
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


PIPELINE_PRIMITIVE_TEXT = ("jax_use_emit_pipeline_primitive=True -> off while emit_pipeline builds its loop (the "
                           "emit_pipeline primitive is not modelled; the loop it stands for is what ringc checks)")


@contextlib.contextmanager
def _without_pipeline_primitive(log: "AliasLog") -> Iterator[None]:
    """`emit_pipeline` with JAX's `jax_use_emit_pipeline_primitive` on (JAX's fusible-matmul
    tests turn it on) binds one `emit_pipeline` primitive instead of the loop of copies and
    waits it stands for: turned off while the pipeline is built, so that loop is what ringc
    checks (noted in the verdict)."""
    from jax._src import config
    state = getattr(config, "use_emit_pipeline_primitive", None)
    if state is None or not state.value:
        yield
        return
    log.note(PIPELINE_PRIMITIVE_TEXT)
    with state(False):
        yield


def _jax():
    import jax
    return jax


JIT_ABSTRACTED_AXES_TEXT = ("jax.jit(abstracted_axes=None) -> jax.jit (the keyword is gone; None was its default: "
                            "no dynamic shapes)")


def _jit_without_abstracted_axes(jit: Callable[..., Any], log: "AliasLog", text: str) -> Callable[..., Any]:
    """`jax.jit` as it was with `abstracted_axes`: libraries that wrap jit pass every keyword
    it once had (ejkernel's `ejit` passes `abstracted_axes=None`). None was the default, so
    dropping it keeps the meaning exactly; any other value asked for the removed dynamic-shape
    tracing, which ringc cannot give, and is refused by name."""

    def shim(*args: Any, **kwargs: Any) -> Any:
        if "abstracted_axes" in kwargs:
            value = kwargs.pop("abstracted_axes")
            if value is not None:
                raise TypeError(f"jax.jit(abstracted_axes={value!r}): dynamic-shape tracing was removed from jax, and "
                                "ringc checks with jax 0.10, which has no equivalent (fix: drop abstracted_axes)")
            log.note(text)
        return jit(*args, **kwargs)
    return shim


PALLAS_BACKEND_TEXT = ("pl.pallas_call(backend='mosaic_tpu') -> pl.pallas_call (the keyword is gone; the TPU backend is "
                       "the one ringc checks)")


def _pallas_call_without_backend(pallas_call: Callable[..., Any], log: "AliasLog", text: str) -> Callable[..., Any]:
    """`pl.pallas_call` as it was with `backend=` (jax 0.4.3x; JAX's interpret-mode tests pass
    `backend='mosaic_tpu'`): the TPU backend is what a pallas_call under ringc lowers for, so
    dropping it keeps the meaning; a GPU backend is refused by name."""

    def shim(*args: Any, **kwargs: Any) -> Any:
        if "backend" in kwargs:
            value = kwargs.pop("backend")
            if value not in (None, "mosaic_tpu", "mosaic"):
                raise TypeError(f"pl.pallas_call(backend={value!r}) asks for a GPU backend, which is not supported "
                                "yet: ringc checks Pallas TPU kernels (backend='mosaic_tpu')")
            if value is not None:
                log.note(text)
        return pallas_call(*args, **kwargs)
    return shim


# (module getter, function, removed keyword, shim factory, text): a keyword a function lost,
# emulated with today's API where its meaning can be kept exactly.
KEYWORD_SHIMS: list[tuple[Callable[[], Any], str, str, Callable[..., Any], str]] = [
    (_pltpu, "emit_pipeline", "should_accumulate_out", _accumulating_pipeline,
     "pltpu.emit_pipeline(should_accumulate_out=True) -> emit_pipeline reading each output block back and adding "
     "it after the body"),
    (_jax, "jit", "abstracted_axes", _jit_without_abstracted_axes, JIT_ABSTRACTED_AXES_TEXT),
    (_pl, "pallas_call", "backend", _pallas_call_without_backend, PALLAS_BACKEND_TEXT),
    (_plgpu, "CompilerParams", "thread_semantics",
     lambda fn, log, text: _renamed_keyword(fn, log, text, "thread_semantics", "lowering_semantics"),
     "plgpu.CompilerParams(thread_semantics=...) -> plgpu.CompilerParams(lowering_semantics=...)"),
    # `jax.experimental.shard_map`'s keyword, which `jax.shard_map` (jax 0.10) takes as check_vma
    (_jax, "shard_map", "check_rep",
     lambda fn, log, text: _renamed_keyword(fn, log, text, "check_rep", "check_vma"),
     "jax.shard_map(check_rep=...) -> jax.shard_map(check_vma=...) (the keyword's new name)"),
    # `pl.kernel`'s keywords before their rename (jax-ml/jax 71c25556e9); one shim per function
    (_pl, "kernel", "out_shape",
     lambda fn, log, text: _renamed_keyword(fn, log, text, "out_shape", "out_type", scratch_shapes="scratch_types"),
     "pl.kernel(out_shape=..., scratch_shapes=...) -> pl.kernel(out_type=..., scratch_types=...)"),
]


def _renamed_keyword(fn: Callable[..., Any], log: "AliasLog", text: str, old: str, new: str,
                     **more: str) -> Callable[..., Any]:
    """`fn` taking its keyword `new` by its old name `old` too (the same meaning, renamed), and
    each of `more` (old=new) likewise."""
    renamed = {old: new, **more}

    def shim(*args: Any, **kwargs: Any) -> Any:
        for was, now in renamed.items():
            if was in kwargs:
                kwargs[now] = kwargs.pop(was)
                log.note(text)
        return fn(*args, **kwargs)
    return shim


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


SUBCLASS_REPLACE_TEXT = ("a pl.BlockSpec subclass with its own __init__ ({name}) -> a plain pl.BlockSpec of the same "
                         "fields where jax 0.10 copies it (`BlockSpec.replace`, which calls the subclass' __init__ "
                         "with every field and fails there on jax 0.10 itself)")


def _plain_blockspec_replace(log: "AliasLog") -> Callable[[], None]:
    """Libraries kept the old argument order with a subclass (ejkernel's
    `PatchBlockSpec(index_map, block_shape)` calling `super().__init__(block_shape=...,
    index_map=...)`). jax 0.10's pallas_call copies each spec without a memory space with
    `BlockSpec.replace` (`dataclasses.replace`), which calls the subclass' `__init__` with every
    field: a TypeError in jax itself. Such a subclass adds no field and no behaviour, only an
    argument order, so its copy is made as a plain `pl.BlockSpec` of the same fields (noted in
    the verdict). A subclass whose `__init__` takes the fields, or one that adds fields, is
    copied as before. Returns what puts `BlockSpec.replace` back."""
    import dataclasses
    cls = _pl().BlockSpec
    replace = vars(cls)["replace"]
    names = [f.name for f in dataclasses.fields(cls) if f.init]

    def plain(self: Any, **changes: Any) -> Any:
        kind = type(self)
        same_fields = [f.name for f in dataclasses.fields(self) if f.init] == names
        if kind is not cls and "__init__" in vars(kind) and same_fields:
            try:
                return replace(self, **changes)
            except TypeError:
                log.note(SUBCLASS_REPLACE_TEXT.format(name=f"{kind.__module__}.{kind.__qualname__}"))
                return replace(cls(**{name: getattr(self, name) for name in names}), **changes)
        return replace(self, **changes)

    cls.replace = plain

    def restore() -> None:
        cls.replace = replace
    return restore


DICT_COMPILER_PARAMS_TEXT = ("pl.pallas_call(compiler_params=dict(mosaic=dict(...))) -> "
                             "compiler_params=pltpu.CompilerParams(...) (the dict form is gone)")


def _dict_compiler_params(log: "AliasLog") -> Callable[[], None]:
    """Old kernels pass `compiler_params=dict(mosaic=dict(dimension_semantics=...))`
    (haoliuhl/ringattention). jax 0.10 takes `pltpu.CompilerParams` only: the dict traces, but
    its dimension semantics are lost and lowering fails on it (an unhashable dict). While the
    user's code runs, such a dict becomes `pltpu.CompilerParams(**inner)` (noted); every other
    call is as it was. Returns what puts `pl.pallas_call` back."""
    pl, pltpu = _pl(), _pltpu()
    pallas_call = vars(pl)["pallas_call"]

    def shim(*args: Any, compiler_params: Any = None, **kwargs: Any) -> Any:
        if isinstance(compiler_params, dict) and set(compiler_params) <= {"mosaic", "mosaic_tpu"} and compiler_params:
            inner = next(iter(compiler_params.values()))
            if isinstance(inner, dict):
                log.note(DICT_COMPILER_PARAMS_TEXT)
                compiler_params = pltpu.CompilerParams(**inner)
        return pallas_call(*args, compiler_params=compiler_params, **kwargs)

    pl.pallas_call = shim

    def restore() -> None:
        pl.pallas_call = pallas_call
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
        restore_replace = _plain_blockspec_replace(log)
        restore_params = _dict_compiler_params(log)
    except ImportError:
        restore_blockspec = restore_replace = restore_params = lambda: None  # noqa: E731 - no Pallas
    try:
        yield log
    finally:
        restore_params()
        restore_replace()
        restore_blockspec()
        for module, attr, enum in reversed(replaced):
            setattr(module, attr, enum)
        for module, old in previous.items():
            if old is None:
                vars(module).pop("__getattr__", None)
            else:
                module.__getattr__ = old
