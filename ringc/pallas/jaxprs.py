"""Walking traced JAX programs: every equation, into `jit`, `shard_map`, loops and conds,
but not into the kernels of `pallas_call`s."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

__all__ = ["kernel_name", "walk_eqns", "has_pallas", "jitted_calls", "jitted_lowerings", "eager_shard_maps"]


@contextlib.contextmanager
def jitted_calls(hook: Callable[..., Any]) -> Iterator[None]:
    """While inside: every jitted call JAX runs on its Python path goes to `hook(run, *args,
    jaxpr=..., **params)`, where `run(*args, jaxpr=..., **params)` is JAX's own
    implementation (`jax._src.pjit._pjit_call_impl_python`, a private API of jax 0.10). The
    one place ringc takes over jitted calls: `ringc check` capturing a script's kernel
    calls (`script._capturing`), and `pytest --ringc` recording a test's
    (`pytest_plugin.recording`)."""
    from jax._src import pjit
    run = pjit._pjit_call_impl_python
    pjit._pjit_call_impl_python = lambda *args, **params: hook(run, *args, **params)
    try:
        yield
    finally:
        pjit._pjit_call_impl_python = run


@contextlib.contextmanager
def jitted_lowerings(hook: Callable[..., Any]) -> Iterator[None]:
    """While inside: `jax.jit(f).lower(*args)` first gives `hook(jaxpr, args_flat)` the
    ClosedJaxpr it lowers and its flattened arguments, then lowers as JAX does (jax 0.10's
    `pjit.jit_lower`, set on the jitted functions' class; a private API). A script that only
    lowers its kernel (to print its Mosaic payload, as torch_xla users do) runs no call for
    `jitted_calls` to see."""
    import jax
    from jax._src import pjit, stages
    cls = type(jax.jit(lambda x: x))
    lower = pjit.jit_lower

    def lowering(jit_func, *args, **kwargs):
        p, args_flat = pjit._infer_params(jit_func._fun, jit_func._jit_info, args, kwargs)
        closed = p.params["jaxpr"]
        hook(closed, list(args_flat) if len(closed.in_avals) == len(args_flat) else list(p.consts) + list(args_flat))
        return stages.Traced(list(map(pjit.convert_to_metaty, args_flat)), p.params, p.in_tree, p.out_tree,
                             p.consts).lower()

    pjit.jit_lower, cls.lower = lowering, lowering   # `_cpp_pjit` sets the class's from the global
    try:
        yield
    finally:
        pjit.jit_lower, cls.lower = lower, lower


@contextlib.contextmanager
def eager_shard_maps(staging: Callable[[], Any]) -> Iterator[None]:
    """While inside: a `shard_map` called outside any trace (eagerly, not under `jax.jit`)
    runs its whole body as one jitted call, as under `jax.jit`, inside the context manager
    `staging()`. Eagerly, JAX runs each primitive of the body as its own jitted call, so a
    `pallas_call` reaches `jitted_calls` alone, with every output a result: an output the
    body drops (maxdiffusion's ring attention keeps `out[1]` of a flash kernel's outputs)
    would read as one the program reads. A body that needs concrete values (a Python `if`
    on an array) runs eagerly as before. jax 0.10's `EvalTrace.process_shard_map`, a
    private API."""
    import jax
    from jax._src import core

    eager = core.EvalTrace.process_shard_map
    inside = []   # staging now: a shard_map the jitted body runs eagerly (under `jax.disable_jit`) stays eager

    def staged(trace, prim, fun, args, **params):
        if inside or jax.config.jax_disable_jit:
            return eager(trace, prim, fun, args, **params)
        made = []

        def body(*xs):
            out = prim.bind(*xs, subfuns=(fun,), **params)
            made.append(out)
            return list(out.vals)
        inside.append(True)
        try:
            with staging():
                flat = jax.jit(body)(*args)
        except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError,
                jax.errors.NonConcreteBooleanIndexError):
            return eager(trace, prim, fun, args, **params)
        finally:
            inside.pop()
        return made[0].update(flat)

    core.EvalTrace.process_shard_map = staged
    try:
        yield
    finally:
        core.EvalTrace.process_shard_map = eager


# The primitives that call a kernel: a Pallas TPU `pallas_call`, a Mosaic GPU `plgpu.kernel` or a
# TPU `pl.kernel` over the TensorCores (`mpmd_map`), `pl.core_map` over them (inside `pl.run_state`).
KERNEL_CALLS = ("pallas_call", "mpmd_map", "core_map")


def kernel_jaxpr(eqn: Any) -> Any:
    """The kernel a kernel call runs: a `pallas_call`'s or `core_map`'s jaxpr, an `mpmd_map`'s
    one program."""
    return eqn.params["jaxpr"] if "jaxpr" in eqn.params else eqn.params["jaxprs"][0]


def kernel_name(eqn: Any, default: str = "kernel") -> str:
    """A kernel call's Python name, as the verdict's title says it: the call's `name`, else
    its kernel function's."""
    debug = getattr(kernel_jaxpr(eqn), "debug_info", None)
    return eqn.params.get("name") or getattr(debug, "func_name", None) or default


def walk_eqns(jaxpr: Any):
    from jax._src import core
    for eqn in jaxpr.eqns:
        yield eqn
        if eqn.primitive.name in KERNEL_CALLS:
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
            if j is not None and any(e.primitive.name in KERNEL_CALLS for e in walk_eqns(j)):
                return True
    return False


def gathers_whole(eqn: Any) -> bool:
    """`lax.all_gather(x, axis, tiled=True)` along dimension 0: every device's array laid
    side by side, nothing computed (a test harness's way to compare results)."""
    p = eqn.params
    return (eqn.primitive.name == "all_gather" and bool(p.get("tiled")) and p.get("all_gather_dimension") == 0
            and p.get("axis_index_groups") is None)


def concrete_errors() -> tuple:
    """The errors JAX raises where traced code needs a concrete value (`int(x)`, `if x:`)."""
    import jax
    return (jax.errors.ConcretizationTypeError, jax.errors.TracerIntegerConversionError,
            jax.errors.TracerBoolConversionError, jax.errors.TracerArrayConversionError)
