"""What each `COLLECTIVE` means: the `lax` call a generated kernel must agree with.

Every collective is applied under `jax.shard_map` along the schedule's axis to `x`, the
collective's input buffer in the kernel's own shape (slots + shape, after reshaping the
per-device shard), on N devices; `me` is the device's index along the axis. A schedule over
several axes passes their tuple as `axis` (`lax.psum(x, ("x", "y"))`): N counts the devices
over all of them and `me` is `lax.axis_index(("x", "y"))`, row-major.

| COLLECTIVE     | lax call                                                          | meaning                                              |
|----------------|-------------------------------------------------------------------|------------------------------------------------------|
| `ppermute`     | `lax.ppermute(x, axis, [(i, (i + shift) % N) for i in range(N)])` | device d's x lands on device (d + shift) % N         |
| `all_gather`   | `lax.all_gather(x, axis)` (tiled=False)                           | out[j] = device j's x (a new leading dim N)          |
| `psum`         | `lax.psum(x, axis)`                                               | out = sum over devices of x                          |
| `psum_scatter` | `lax.psum_scatter(x, axis)` (scatter_dimension=0, tiled=False)    | x has leading dim N; out = sum over devices of x[me] |
| `all_to_all`   | `lax.all_to_all(x, axis, 0, 0)` (tiled=False)                     | x has leading dim N; out[j] = device j's x[me]       |
| `all_gather_matmul` | `lax.all_gather(x, axis) @ y`                                | x [m, k], y [k, n]; out[j] = device j's x @ my y     |
| `matmul_psum_scatter` | `lax.psum_scatter(x @ y, axis)`                            | x [N, m, k], y [k, n]; out = sum over j of x_j[me] @ y_j |
| `ragged_all_to_all` | `lax.ragged_all_to_all(x, init, input_offsets, send_sizes, output_offsets, recv_sizes, axis_name=axis)` | rows x_j[input_offsets_j[me] : + send_sizes_j[me]] land at out[output_offsets_j[me] :]; other rows are init's (XLA:CPU lacks it: the same meaning in lax, `collectives.ragged_all_to_all_lax`) |
| `all_gather_matmul_t` | `lax.all_gather(x, axis) @ y.T`                            | x [m, k], y [n, k]; out[j] = device j's x @ my y^T   |
| `matmul_psum_scatter_t` | `lax.psum_scatter(x @ y.T, axis)`                        | x [N, m, k], y [n, k]; out = sum over j of x_j[me] @ y_j^T |
| `ring_attention` | `einsum("mjs,jsd->md", einsum("md,jsd->mjs", q, all_gather(k)), all_gather(v))` | q [m, d], k, v [s, d]; out = sum over j of (q @ k_j^T) @ v_j (linear: no softmax) |

The matmul collectives multiply with float32 accumulation and sum in float32, then
round once to the output's dtype. `y` is `collective.rhs`; ring_attention's q, k and v are
`collective.input`, `rhs` and `values`.

`shift` is `collective.shift` (default 1). The result is reshaped to the collective's output
buffer's shard shape; in and out PartitionSpecs are those of `build` (inputs: IN_SPECS; out:
the collective output's spec).
"""

from __future__ import annotations

import math
from typing import Callable, Mapping

from .collectives import COLLECTIVES
from .ir import expr as E
from .ir import schema as S
from .ir.resolve import axis_size_env, resolved

__all__ = ["apply_collective", "summed_terms", "reference"]


def apply_collective(kind: str, x, axis: str, n: int, *, shift: int = 1, rhs=None, dtype=None, data=None,
                     values=None):
    """The lax call for `kind` (see the module table) on a per-device array, inside shard_map.
    The matmul collectives take their right-hand side `rhs` and return `dtype` (default x's);
    ragged_all_to_all takes its `output` argument as `rhs` and its runtime data arrays (each
    device's [N] values, by name) as `data`; ring_attention takes its keys as `rhs` and its
    values as `values`. Each collective's call lives in its class (`ringc.collectives`)."""
    extra = {"data": data} if data is not None else {}
    if values is not None:
        extra["values"] = values
    return COLLECTIVES[kind](shift=shift).lax(x, axis, n, rhs=rhs, dtype=dtype, **extra)


def summed_terms(kind: str, n: int, dtype: str = "float32", depth: int = 1) -> int:
    """How many rounding steps stand between an output element and its exact value, for
    `ringc.run.tolerance` (`Collective.summed_terms`)."""
    return COLLECTIVES[kind]().summed_terms(n, dtype, depth)


def _eval_shape(s: S.Schedule, dims: list[E.Expr], env: Mapping[str, int], what: str) -> tuple[int, ...]:
    try:
        return tuple(int(E.evaluate(resolved(s).inline(d), env, exact_division=True)) for d in dims)
    except E.ExprError as e:
        raise ValueError(f"{what}: {e}") from None


def reference(schedule: S.Schedule, mesh, **params) -> Callable:
    """The schedule's collective as plain `lax`: a jitted shard_map function taking the same
    global inputs as `build(mesh, **params)` and returning the collective's output buffer,
    with the same PartitionSpecs."""
    import jax
    from jax.sharding import PartitionSpec as P

    s = schedule
    unknown = sorted(set(params) - set(s.params))
    if unknown:
        raise ValueError(f"{s.name}: unknown parameter {', '.join(unknown)} "
                         f"(parameters: {', '.join(s.params) or 'none'})")
    n = math.prod(mesh.shape[a] for a in s.axes)  # over a tuple of axes, lax counts all their devices
    env = {"N": n, **axis_size_env(s.axes, mesh.shape), **s.params, **params}
    inputs = s.buffers_of("input")
    src, dst = s.io_buffer("input"), s.io_buffer("output")
    src_shape = _eval_shape(s, s.buffers[src].full_shape, env, f"shape of buffer `{src}`")
    k = len(s.buffers[src].slots)
    if k > 1 and math.prod(src_shape[:k]) == n:  # N split over leading slots, row-major: lax sees one dim
        src_shape = (n, *src_shape[k:])
    dst_shape = _eval_shape(s, s.buffers[dst].shard_shape, env, f"shard shape of buffer `{dst}`")
    data = list(s.data)  # runtime data follows the inputs, as in `build`: int32 [N] per device
    in_specs = tuple(P(*s.partition_spec(b)) for b in inputs) + tuple(P(s.axis) for _ in data)
    out_spec = P(*s.partition_spec(dst))
    kind, axis, shift = s.collective.kind, s.axis, s.collective.shift
    roles = COLLECTIVES[kind].inputs
    rhs = s.io_buffer("rhs") if "rhs" in roles else None
    rhs_shape = _eval_shape(s, s.buffers[rhs].full_shape, env, f"shape of buffer `{rhs}`") if rhs else None
    third = s.io_buffer("values") if "values" in roles else None
    third_shape = _eval_shape(s, s.buffers[third].full_shape, env, f"shape of buffer `{third}`") if third else None
    out_dtype = s.dtype_of(dst)

    def per_device(*args):
        x = args[inputs.index(src)].reshape(src_shape)
        y = args[inputs.index(rhs)].reshape(rhs_shape) if rhs else None
        v = args[inputs.index(third)].reshape(third_shape) if third else None
        values = dict(zip(data, args[len(inputs):])) if data else None
        out = apply_collective(kind, x, axis, n, shift=shift, rhs=y, dtype=out_dtype, data=values, values=v)
        return out.reshape(dst_shape)

    # check_vma=False as in `build`: both sides read an output the same way.
    return jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=in_specs, out_specs=out_spec,
                                 check_vma=False))
