"""The schedule IR: pydantic v2 models, validated from YAML.

One model per concept, as in `jax/_src/pallas`: buffers, semaphores, DMA descriptors
(`copies`) and the per-step operations. Expressions and references are parsed into the
typed trees of `ringc.ir.expr` during validation, so a bad expression is reported by
pydantic at its exact location. Name resolution happens afterwards, in `resolve.py`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, PlainSerializer,
                      PlainValidator, PrivateAttr, Tag, WithJsonSchema, model_validator)
from pydantic.json_schema import SkipJsonSchema

from . import expr as E

__all__ = ["ExprT", "RefT", "ExprList", "Node", "CollectiveKind", "Collective", "Buffer", "Data", "Semaphore",
           "BarrierConfig", "Copy", "CopyUse", "CopyUseT",
           "copy_key", "OpNode", "Start", "Wait", "WaitSend", "WaitRecv", "Signal", "SemWait", "Barrier", "Zero",
           "Accumulate", "Assign", "Cast", "Matmul", "Arrival", "BlockSpec", "Pipeline", "When", "Loop", "OPS",
           "OP_KEYS", "COMPUTE_OP_KEYS", "OP_OF_TAG", "op_tag", "Op", "Kernel", "Schedule"]


def _parse_expr(v: Any) -> E.Expr:
    if isinstance(v, E.EXPR_TYPES):
        return v
    return E.parse(v)


def _parse_ref(v: Any) -> E.Ref:
    return v if isinstance(v, E.Ref) else E.parse_ref(v)


ExprT = Annotated[
    Any, PlainValidator(_parse_expr), PlainSerializer(E.to_text, return_type=str),
    WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "integer"}],
                    "description": "integer expression over me, N, grid indices, params and lets"}),
]
RefT = Annotated[
    Any, PlainValidator(_parse_ref), PlainSerializer(lambda r: r.text(), return_type=str),
    WithJsonSchema({"type": "string", "description": "`name` or `name[i, start:size, :]`"}),
]


def _one_or_many(v: Any) -> Any:
    return v if isinstance(v, list) else [v]


# One expression or a list of them (`to: left` or `to: [left, right]`).
_EXPR_SCHEMA = {"anyOf": [{"type": "string"}, {"type": "integer"}]}
ExprList = Annotated[list[ExprT], BeforeValidator(_one_or_many),
                     WithJsonSchema({"anyOf": [*_EXPR_SCHEMA["anyOf"], {"type": "array", "items": _EXPR_SCHEMA}],
                                     "description": "one expression or a list of them"})]


class Node(BaseModel):
    """Base of every model: strict keys, immutable, and the YAML line it came from."""
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    line: SkipJsonSchema[int] = Field(default=0, alias="__line__", exclude=True)


# ------------------------------------------------------------------ declarations

class CollectiveKind(StrEnum):
    """What a schedule computes: the one spelling of each collective. Its facts (inputs,
    meaning, aliases, ...) are on its class in `ringc.collectives` (`COLLECTIVES[kind]`)."""
    PPERMUTE = "ppermute"
    ALL_GATHER = "all_gather"
    PSUM = "psum"
    PSUM_SCATTER = "psum_scatter"
    ALL_TO_ALL = "all_to_all"
    ALL_GATHER_MATMUL = "all_gather_matmul"
    MATMUL_PSUM_SCATTER = "matmul_psum_scatter"
    ALL_GATHER_MATMUL_T = "all_gather_matmul_t"
    MATMUL_PSUM_SCATTER_T = "matmul_psum_scatter_t"
    RAGGED_ALL_TO_ALL = "ragged_all_to_all"
    RING_ATTENTION = "ring_attention"


class Collective(Node):
    """What the schedule computes. The verifier proves it; `ringc run` compares with `lax`."""
    kind: CollectiveKind
    input: str | None = Field(None, description="input buffer (default: the only input)")
    output: str | None = Field(None, description="output buffer (default: the only output)")
    shift: int = Field(1, description="ppermute only: device d sends to d + shift")
    rhs: str | None = Field(None, description="matmul collectives: the right-hand input; ragged_all_to_all: "
                                              "lax's `output` argument, the values kept where nothing lands "
                                              "(default: the input that is not `input`)")
    values: str | None = Field(None, description="ring_attention only: the values input v (`rhs` is the keys k)")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        return {"kind": v} if isinstance(v, str) else v


class Buffer(Node):
    """A per-device array. `slots` are leading dimensions addressed by index, e.g. the two
    halves of a double buffer; the full shape is `slots + shape`."""
    kind: Literal["input", "output", "hbm_scratch", "vmem_scratch"]
    shape: list[ExprT]
    slots: ExprList = []
    dtype: str | None = Field(None, description="default: the schedule's dtype")
    space: Literal["hbm", "vmem"] | None = Field(
        None, description="inputs and outputs only: where the kernel sees them (default hbm)")
    shard: list[ExprT] | None = Field(
        None, description="inputs and outputs only: the per-device array under shard_map, "
                          "reshaped to slots + shape for the kernel (default: slots + shape)")
    spec: list[str | list[str] | None] | None = Field(
        None, description="inputs and outputs only: PartitionSpec of the global array, one entry per "
                          "dimension: an axis, a list of axes, or null (default: the schedule's axes "
                          "on the first dimension)")

    @model_validator(mode="after")
    def _io_only(self) -> "Buffer":
        if self.kind not in ("input", "output"):
            for name in ("space", "shard", "spec"):
                if getattr(self, name) is not None:
                    raise ValueError(f"`{name}` applies to inputs and outputs only, not to {self.kind}")
        return self

    @property
    def full_shape(self) -> list[E.Expr]:
        return [*self.slots, *self.shape]

    @property
    def shard_shape(self) -> list[E.Expr]:
        """The per-device array under shard_map (default: the kernel's slots + shape)."""
        return list(self.shard) if self.shard is not None else self.full_shape

    @property
    def memory(self) -> Literal["hbm", "vmem"]:
        if self.kind == "hbm_scratch":
            return "hbm"
        if self.kind == "vmem_scratch":
            return "vmem"
        return self.space or "hbm"


class Data(Node):
    """A small integer array read at run time: scalar prefetch (`PrefetchScalarGridSpec`),
    in SMEM, one per device, e.g. the sizes and offsets of a ragged all-to-all. Expressions
    read one element, `send_sizes[t]`, in slice starts and sizes, targets and guards.

    Its constraints say which values are valid; `ringc check --data` verifies the schedule
    for concrete samples of them (`ringc.data`). An array is either *free*, drawn within
    `range` (and `sum_at_most`), or *derived* from another: `prefix_sum_of` (the exclusive
    prefix sum of an array of the same device) or `transpose_of` (element j on device d is
    element d of that array on device j: what `lax.all_to_all` of it gives)."""
    shape: list[ExprT] = Field(min_length=1, max_length=1, description="one dimension, e.g. [N]")
    range: list[ExprT] | None = Field(None, min_length=2, max_length=2,
                                      description="[lo, hi]: every element lies in lo..hi (inclusive)")
    sum_at_most: ExprT | None = Field(None, description="the elements of one device sum to at most this, "
                                                         "e.g. a buffer's capacity")
    prefix_sum_of: str | None = Field(None, description="the exclusive prefix sum of this data array "
                                                         "(of the same device): offsets of packed sizes")
    transpose_of: str | None = Field(None, description="element j on device d is element d of this data "
                                                        "array on device j (its lax.all_to_all)")

    @model_validator(mode="after")
    def _free_or_derived(self) -> "Data":
        derived = [k for k in ("prefix_sum_of", "transpose_of") if getattr(self, k) is not None]
        if len(derived) > 1:
            raise ValueError("a data array is derived from one other: give `prefix_sum_of` or `transpose_of`, "
                             "not both")
        if derived and self.range is not None:
            raise ValueError(f"`{derived[0]}` fixes every value: `range` applies to free arrays only")
        if not derived and self.range is None:
            raise ValueError("a free data array needs `range: [lo, hi]` (or `prefix_sum_of` / `transpose_of`)")
        return self

    @property
    def source(self) -> str | None:
        """The array this one is derived from, or None for a free array."""
        return self.prefix_sum_of or self.transpose_of


class Semaphore(Node):
    """DMA semaphores count bytes; REGULAR ones count signals. `shape` makes an array."""
    kind: Literal["dma", "regular"]
    shape: list[ExprT] = []

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        return {"kind": v} if isinstance(v, str) else v


class BarrierConfig(Node):
    """The global barrier semaphore (`pltpu.get_barrier_semaphore`)."""
    collective_id: int = Field(ge=0)


class Copy(Node):
    """An async copy descriptor. With `to` it is a remote DMA (`make_async_remote_copy`)
    with `send_sem` and `recv_sem`; without, a local DMA (`make_async_copy`) with `sem`.
    Ops `start`, `wait_send`, `wait_recv` and `wait` refer to it by name. Like the Pallas
    descriptor, it is evaluated where it is used: its indices may depend on the step.

    A template (`args`, or the key spelled `push(k)`) is a Python function returning a
    descriptor: every use binds its arguments (`start: push(k=step + 1)`), so the
    descriptor of another micro-batch or of the previous loop iteration is the same copy
    with other arguments (`wait: push(k=i - 1)`)."""
    args: list[str] = Field(default_factory=list, description="template parameters, bound by every use: "
                                                               "`start: push(k=step + 1)`")
    self_copy: bool = Field(False, description="remote copies only: the target may be this device itself, "
                                               "on purpose (no `self_target` warning)")
    src: RefT
    dst: RefT
    to: ExprT | None = Field(None, description="target device along the axis, e.g. right, left, (me + 2) % N")
    send_sem: RefT | None = None
    recv_sem: RefT | None = None
    sem: RefT | None = None

    @model_validator(mode="after")
    def _remote_or_local(self) -> "Copy":
        if self.to is not None:
            if self.send_sem is None or self.recv_sem is None or self.sem is not None:
                raise ValueError("a remote copy (with `to`) needs `send_sem` and `recv_sem`, and no `sem`")
        elif self.sem is None or self.send_sem is not None or self.recv_sem is not None:
            raise ValueError("a local copy (without `to`) needs `sem`, and no `send_sem`/`recv_sem`")
        if self.self_copy and self.to is None:
            raise ValueError("`self_copy` applies to remote copies (with `to`); a local copy always stays here")
        return self

    @property
    def explicit_self(self) -> bool:
        """Whether the author says the target may be this device: `self_copy: true`, or
        `to: me` written out."""
        return self.self_copy or self.to == E.Var("me")

    @property
    def remote(self) -> bool:
        return self.to is not None


def copy_key(key: str) -> tuple[str, list[str]] | None:
    """A copy table key spelled as a template, `push(k)` or `push(k, j)`: (name, args);
    None if the key is not of that form (a plain name)."""
    m = _TEMPLATE_KEY.fullmatch(key) if isinstance(key, str) else None
    if m is None:
        return None
    args = [a.strip() for a in m.group(2).split(",")] if m.group(2).strip() else []
    return m.group(1), args


_TEMPLATE_KEY = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*\((.*)\)\s*")


@dataclass(frozen=True)
class CopyUse:
    """The copy a copy op names, and the template arguments it binds: `push` or
    `push(k=step + 1)` (every argument by keyword, an integer expression)."""
    name: str
    args: tuple[tuple[str, E.Expr], ...] = ()

    def __str__(self) -> str:
        if not self.args:
            return self.name
        return f"{self.name}({', '.join(f'{k}={E.to_text(v)}' for k, v in self.args)})"

    @staticmethod
    def parse(v: Any) -> "CopyUse":
        if isinstance(v, CopyUse):
            return v
        if not isinstance(v, str):
            raise ValueError(f"expected a copy name, or a template use like `push(k=step + 1)`, got {v!r}")
        text = v.strip()
        if "(" not in text:
            return CopyUse(text)
        try:
            tree = ast.parse(text, mode="eval").body
        except SyntaxError:
            tree = None
        if not (isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name) and not tree.args
                and all(k.arg is not None for k in tree.keywords)):
            raise E.ExprError(f"`{text}` is not a copy use: write the copy's name, or `name(arg=expr, ...)` "
                              "with every argument by keyword", fix="e.g. `start: push(k=step + 1)`")
        args = tuple((k.arg, E.parse(ast.get_source_segment(text, k.value))) for k in tree.keywords)
        return CopyUse(tree.func.id, args)


CopyUseT = Annotated[
    Any, PlainValidator(CopyUse.parse), PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "description": "a copy's name, or a template's use: `push(k=step + 1)`"}),
]


# ------------------------------------------------------------------ operations
#
# Every op class is declared once, here, and listed once in `OPS` (below): its YAML key
# (`tag`), whether it may appear in a pipeline body (`compute`), and its operand roles,
# as names of its own fields (or, for the copy ops, of its copy's): the regions it reads
# and writes and the semaphores it touches. The YAML tags, the pydantic union `Op` and the
# key lists are derived from `OPS`; every later stage keeps one rule per class in a table
# keyed by the class (`ringc.ir.rules.RuleTable`) and raises on a class it lacks.


class OpNode(Node):
    """Base of every step operation. Class attributes (not YAML fields):

    - `tag`: the YAML key that names the op (`start: push`);
    - `compute`: allowed inside a pipeline body (the inner kernel only computes);
    - `reads`, `writes`: fields holding the buffer refs it reads and writes (a copy op:
      fields of its copy, `src`/`dst`, see `copy_halves`); optional fields may be None;
    - `sems`: fields holding the semaphore refs it touches (a copy op: of its copy);
    - `copy_halves`: a copy op's halves ("send", "recv") it starts or waits for, else ().
    """
    tag: ClassVar[str] = ""
    compute: ClassVar[bool] = False
    reads: ClassVar[tuple[str, ...]] = ()
    writes: ClassVar[tuple[str, ...]] = ()
    sems: ClassVar[tuple[str, ...]] = ()
    copy_halves: ClassVar[tuple[str, ...]] = ()

    @property
    def copy_name(self) -> str | None:
        """The copy a copy op starts or waits for (its tag's value), else None."""
        return getattr(self, self.tag).name if self.copy_halves else None

    @property
    def copy_use(self) -> "CopyUse | None":
        """A copy op's copy and the template arguments it binds, else None."""
        return getattr(self, self.tag) if self.copy_halves else None

    def refs(self, role: str) -> list[E.Ref]:
        """The op's own refs in `role` ("reads", "writes" or "sems"), in declaration order,
        the absent optional ones left out. A copy op's roles name its copy's fields: ask
        `Schedule.operands`, which knows the copies."""
        if self.copy_halves:
            raise TypeError(f"`{self.tag}` names its copy's operands: use Schedule.operands")
        return [v for v in (getattr(self, f) for f in getattr(type(self), role)) if v is not None]


class Start(OpNode):
    """Start a copy (non-blocking)."""
    tag: ClassVar[str] = "start"
    reads: ClassVar[tuple[str, ...]] = ("src",)
    writes: ClassVar[tuple[str, ...]] = ("dst",)
    sems: ClassVar[tuple[str, ...]] = ("send_sem", "recv_sem", "sem")
    copy_halves: ClassVar[tuple[str, ...]] = ("send", "recv")
    start: CopyUseT


class Wait(OpNode):
    """Wait for a copy: both halves for a remote copy, the one semaphore for a local one."""
    tag: ClassVar[str] = "wait"
    sems: ClassVar[tuple[str, ...]] = ("send_sem", "recv_sem", "sem")
    copy_halves: ClassVar[tuple[str, ...]] = ("send", "recv")
    wait: CopyUseT


class WaitSend(OpNode):
    """Remote copy: block until the source may be reused (the send semaphore)."""
    tag: ClassVar[str] = "wait_send"
    sems: ClassVar[tuple[str, ...]] = ("send_sem",)
    copy_halves: ClassVar[tuple[str, ...]] = ("send",)
    wait_send: CopyUseT


class WaitRecv(OpNode):
    """Remote copy: block until the destination has arrived (the receive semaphore)."""
    tag: ClassVar[str] = "wait_recv"
    sems: ClassVar[tuple[str, ...]] = ("recv_sem",)
    copy_halves: ClassVar[tuple[str, ...]] = ("recv",)
    wait_recv: CopyUseT


class Signal(OpNode):
    """`pl.semaphore_signal`: add `inc` to `sem` on each device in `to` (default: me)."""
    tag: ClassVar[str] = "signal"
    sems: ClassVar[tuple[str, ...]] = ("signal",)
    signal: RefT
    to: ExprList = Field(default_factory=lambda: [E.Var("me")])
    inc: ExprT = E.Const(1)


class SemWait(OpNode):
    """`pl.semaphore_wait`: block until `sem` >= value, then subtract value."""
    tag: ClassVar[str] = "sem_wait"
    sems: ClassVar[tuple[str, ...]] = ("sem_wait",)
    sem_wait: RefT
    value: ExprT = E.Const(1)


class Barrier(OpNode):
    """Neighbour barrier on the global barrier semaphore: signal each device listed,
    then wait for as many signals. `double` adds the seed's second, kernel-scoped
    barrier that makes reuse of `collective_id` across invocations safe."""
    tag: ClassVar[str] = "barrier"  # its semaphore is the global barrier semaphore, not a field
    barrier: ExprList
    double: bool = True


class Zero(OpNode):
    """Fill a VMEM region with zeros."""
    tag: ClassVar[str] = "zero"
    compute: ClassVar[bool] = True
    writes: ClassVar[tuple[str, ...]] = ("zero",)
    zero: RefT


class Accumulate(OpNode):
    """`dst += src` on VMEM regions of the same shape; with `base`, `dst = base + src`."""
    tag: ClassVar[str] = "accumulate"
    compute: ClassVar[bool] = True
    reads: ClassVar[tuple[str, ...]] = ("src", "base")
    writes: ClassVar[tuple[str, ...]] = ("accumulate",)
    accumulate: RefT
    src: RefT
    base: RefT | None = Field(None, description="add src to this region instead of to dst itself, e.g. "
                                                "a pipeline's input block when updating a region in place")


class Assign(OpNode):
    """`dst = src` on VMEM regions of the same shape (a vector load and store)."""
    tag: ClassVar[str] = "assign"
    compute: ClassVar[bool] = True
    reads: ClassVar[tuple[str, ...]] = ("src",)
    writes: ClassVar[tuple[str, ...]] = ("assign",)
    assign: RefT
    src: RefT


class Cast(OpNode):
    """`dst = src.astype(dst.dtype)` on VMEM regions of the same shape, e.g. a float32
    accumulator into a bfloat16 output block."""
    tag: ClassVar[str] = "cast"
    compute: ClassVar[bool] = True
    reads: ClassVar[tuple[str, ...]] = ("src",)
    writes: ClassVar[tuple[str, ...]] = ("cast",)
    cast: RefT
    src: RefT


def _contract(v: Any) -> Any:
    """`contract: [i, j]`: one dim of each 2-D operand, each 0 or 1."""
    if not (isinstance(v, (list, tuple)) and len(v) == 2 and all(type(d) is int and d in (0, 1) for d in v)):
        raise E.ExprError(f"contract: {v!r} is not two dims of 2-D blocks (each 0 or 1): the dim of `a` and the "
                          "dim of `b` multiplied together",
                          fix="write `contract: [1, 0]` for a @ b (the default) or `contract: [1, 1]` for a @ b.T")
    return tuple(v)


class Matmul(OpNode):
    """`dst = a @ b` (or `dst += a @ b` with `accumulate`) on 2-D VMEM blocks, multiplied
    with float32 accumulation (`jnp.dot(..., preferred_element_type=float32)`). A
    `(bm, bn, bk)` blocking is a grid over blocks of this op: zero the accumulator at the
    first k block, accumulate, cast it out at the last.

    `contract: [i, j]` are its dimension numbers: dim i of `a` is contracted with dim j of
    `b`, as `lax.dot_general(a, b, (((i,), (j,)), ((), ())))`; the default [1, 0] is
    `a @ b`, [1, 1] is `a @ b.T` (the collective matmuls of production kernels keep y as
    [n, k]). The result's dims are a's free dim, then b's."""
    tag: ClassVar[str] = "matmul"
    compute: ClassVar[bool] = True
    reads: ClassVar[tuple[str, ...]] = ("a", "b")
    writes: ClassVar[tuple[str, ...]] = ("matmul",)
    matmul: RefT
    a: RefT
    b: RefT
    accumulate: bool = Field(False, description="add the product to dst instead of overwriting it")
    contract: Annotated[tuple[Literal[0, 1], Literal[0, 1]], BeforeValidator(_contract), WithJsonSchema({
        "type": "array", "items": {"enum": [0, 1]}, "minItems": 2, "maxItems": 2})] = Field(
        (1, 0), description="dimension numbers: the dim of `a` contracted with the dim of `b`, as "
                            "lax.dot_general's (((i,), (j,)), ((), ())); [1, 0] is a @ b, [1, 1] is a @ b.T")

    @property
    def transposed(self) -> bool:
        """Whether this is not the plain `a @ b`."""
        return tuple(self.contract) != (1, 0)


def _arrival_shorthand(schema: dict[str, Any]) -> None:
    """Advertise `arrives: forward(t=step - 1, r=i)` (a string: the copy use) to editors."""
    mapping = dict(schema)
    schema.clear()
    schema["anyOf"] = [{"type": "string", "description": "shorthand for {copy: ...}"}, mapping]


class Arrival(Node):
    """How a pipeline input block lands: by the remote copy `copy` (field `copy_use`: a copy
    op's use, evaluated at the inner grid point whose block the pipeline fetches, its
    indices bound), waited for (`wait_recv`) right before that fetch; with `when`, only at
    the fetches where it holds (a copy that delivers several blocks is waited for at the
    first one). The YAML shorthand `arrives: forward(t=step - 1, r=i)` is `{copy: ...}`."""
    model_config = ConfigDict(**Node.model_config, json_schema_extra=_arrival_shorthand)
    copy_use: CopyUseT = Field(alias="copy", description="the remote copy the block arrives by, e.g. "
                                                         "`forward(t=step - 1, r=i)`")
    when: ExprT | None = Field(None, description="wait only at the fetches where this holds (over the inner "
                                                 "grid indices too), e.g. `k == 0`: default every fetch")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        if isinstance(v, str):
            return {"copy": v}
        if not isinstance(v, (dict, Arrival)):
            raise E.ExprError(f"`arrives: {v!r}` names no copy: it is the remote copy the block arrives by",
                              fix="write `arrives: forward(t=step - 1, r=i)`, or `arrives: {copy: ..., "
                                  "when: k == 0}` to wait at some fetches only")
        return v

    @property
    def wait(self) -> "WaitRecv":
        """The wait before a fetch, as an op (`wait_recv: copy`, at this line) for the later stages."""
        if self._wait is None:
            self._wait = WaitRecv(wait_recv=self.copy_use, line=self.line)
        return self._wait

    _wait: "WaitRecv | None" = PrivateAttr(None)


class BlockSpec(Node):
    """One operand of a nested pipeline: HBM region `ref` cut into blocks of shape `block`;
    at each inner grid point the body sees block number `index` (per dimension) in VMEM,
    as `pl.BlockSpec(block, lambda *grid: index)`.

    `arrives` (inputs only): the block lands by a remote copy (`Arrival`): before fetching
    it, the pipeline waits for that copy's arrival, as hand-written kernels do by overriding
    the buffered ref's `copy_in`."""
    ref: RefT
    block: list[ExprT]
    index: list[ExprT]
    arrives: Arrival | None = Field(None, description=(
        "inputs only: the remote copy the block arrives by, evaluated at the inner grid point fetched, e.g. "
        "`forward(t=step - 1, r=i)` or `{copy: forward(t=step - 1, r=i), when: k == 0}`; the pipeline waits for "
        "its arrival (wait_recv) before fetching the block"))

    @model_validator(mode="before")
    @classmethod
    def _arrives_at_this_line(cls, v: Any) -> Any:
        # `arrives: forward(...)` (a string, no line of its own) is written on the block's line
        if isinstance(v, dict) and isinstance(v.get("arrives"), str):
            v = {**v, "arrives": {"copy": v["arrives"], "__line__": v.get("__line__", 0)}}
        return v


def _strip_line(v: Any) -> Any:
    return {k: x for k, x in v.items() if k != "__line__"} if isinstance(v, dict) else v


class Pipeline(OpNode):
    """A nested `pltpu.emit_pipeline` over HBM-resident regions: its own grid (the key's
    value, row-major), input and output blocks streamed through double-buffered VMEM
    windows, and a body of compute ops run at every inner grid point."""
    tag: ClassVar[str] = "pipeline"
    pipeline: Annotated[dict[str, ExprT], BeforeValidator(_strip_line)] = Field(min_length=1)
    inputs: Annotated[dict[str, BlockSpec], BeforeValidator(_strip_line)] = {}
    outputs: Annotated[dict[str, BlockSpec], BeforeValidator(_strip_line)] = {}
    do: list["Op"] = Field(min_length=1)

    @property
    def specs(self) -> dict[str, BlockSpec]:
        return {**self.inputs, **self.outputs}

    @property
    def arrivals(self) -> dict[str, Arrival]:
        """The input blocks that arrive by a remote copy (`arrives`)."""
        return {name: spec.arrives for name, spec in self.inputs.items() if spec.arrives is not None}


class When(OpNode):
    """Run `do` only where the guard holds, e.g. `step == 0` for a prologue."""
    tag: ClassVar[str] = "when"
    compute: ClassVar[bool] = True
    when: ExprT
    do: list["Op"]


class Loop(OpNode):
    """A Python loop in the kernel (`for i in range(N - 1):`, as hand-written kernels
    without a grid do): `do` runs once per point of the loop's own indices (the key's
    value, row-major; sizes use N, params and static lets only), unrolled when the kernel
    is traced. The indices are plain integers there, so a `when:` on them is a Python `if`.
    Consecutive loops are the phases of a kernel (prologue, steady state, drain)."""
    tag: ClassVar[str] = "loop"
    loop: Annotated[dict[str, ExprT], BeforeValidator(_strip_line)] = Field(min_length=1)
    phase: str | None = Field(None, description="a name for this loop in messages, e.g. `drain`")
    do: list["Op"] = Field(min_length=1)


# Every op class, in the order the YAML error message lists their keys. The single list.
OPS: tuple[type[OpNode], ...] = (When, Loop, Start, Wait, WaitSend, WaitRecv, Signal, SemWait, Barrier, Zero,
                                 Accumulate, Assign, Cast, Matmul, Pipeline)
OP_KEYS: tuple[str, ...] = tuple(c.tag for c in OPS)
# Ops allowed inside a pipeline body: the inner kernel only computes on its blocks.
COMPUTE_OP_KEYS: tuple[str, ...] = tuple(c.tag for c in OPS if c.compute)
OP_OF_TAG: dict[str, type[OpNode]] = {c.tag: c for c in OPS}
assert len(OP_OF_TAG) == len(OPS), "two op classes share a tag"


def op_tag(v: Any) -> str | None:
    """The tag of an op, or of a YAML mapping that is one (None if it names no single op)."""
    if isinstance(v, dict):
        present = [key for key in OP_KEYS if key in v]
        if "accumulate" in present and ("matmul" in present or isinstance(v["accumulate"], bool)):
            present.remove("accumulate")  # matmul's own `accumulate: true` flag
        return present[0] if len(present) == 1 else None
    return v.tag if isinstance(v, OpNode) else None


Op = Annotated[
    Union[tuple(Annotated[c, Tag(c.tag)] for c in OPS)],  # type: ignore[valid-type]
    Discriminator(op_tag, custom_error_type="unknown_op",
                  custom_error_message=f"unknown operation: each step operation is one of {', '.join(OP_KEYS)}"),
]

When.model_rebuild()
Loop.model_rebuild()
Pipeline.model_rebuild()


def _semantics(v: Any) -> Any:
    """`dimension_semantics: {axis: parallel | arbitrary}`, as Pallas spells them."""
    if isinstance(v, dict):
        for axis, sem in v.items():
            if axis != "__line__" and sem not in ("parallel", "arbitrary"):
                raise E.ExprError(f"dimension_semantics of `{axis}` is {sem!r}, not `parallel` or `arbitrary`",
                                  fix="write `parallel` (independent iterations) or `arbitrary` (the default)")
    return v


_NAME_TABLES = ("params", "buffers", "data", "semaphores", "grid", "let", "copies", "kernels", "dimension_semantics")


class Kernel(Node):
    """One pallas_call of a split-phase program (`kernels:` and `program:`): its own body over
    the schedule's grid, buffers, lets and copies. Semaphores are the call's own (fresh, zero)
    unless an earlier call hands them on: `returns` lists the semaphores this call returns
    as outputs with DMAs still counting on them (a JAX future), `takes` those it receives
    from an earlier call (inputs aliased to outputs). Output and HBM scratch buffers are the
    program's arrays: every call that names one gets it, in flight or not."""
    body: list[Op] = Field(min_length=1)
    returns: list[str] = Field([], description="semaphores this call hands on to a later call, "
                                               "with DMAs in flight on them (semaphore-typed outputs)")
    takes: list[str] = Field([], description="semaphores an earlier call of the program returned "
                                             "(aliased inputs): the same semaphores, not fresh ones")


def _schema_shorthands(schema: dict[str, Any]) -> None:
    """Advertise the string shorthands (`collective: psum`, `send_sem: dma`) to editors."""
    props = schema["properties"]
    props["collective"] = {"anyOf": [{"type": "string", "enum": [k.value for k in CollectiveKind]},
                                     props["collective"]]}
    # one kernel (`body`) or a split-phase program of several (`kernels` and `program`)
    schema["oneOf"] = [{"required": ["body"]}, {"required": ["kernels", "program"]}]
    sems = props["semaphores"]
    sems["additionalProperties"] = {"anyOf": [{"type": "string", "enum": ["dma", "regular"]},
                                              sems["additionalProperties"]]}


def _template_entry(key: Any, c: Any) -> tuple[Any, Any]:
    parsed = copy_key(key)
    if parsed is None or not isinstance(c, dict):
        return key, c
    if "args" in c:
        raise ValueError(f"copy `{key}` gives its template parameters twice (in the key and in `args`)")
    return parsed[0], {**c, "args": parsed[1]}


class Schedule(Node):
    """A collective as a step-by-step SPMD schedule. Every device runs `body` once per
    point of `grid`, in row-major order, with `me` its index over `axes` (row-major)."""
    model_config = ConfigDict(**Node.model_config, json_schema_extra=_schema_shorthands)
    name: str
    description: str | None = None
    collective: Collective
    axes: list[str] = Field(default_factory=lambda: ["x"], min_length=1, max_length=3,
                            description="the mesh axes the schedule runs over; `me` and `N` are the "
                                        "row-major index and count over all of them")
    megacore: bool = Field(False, description=(
        "v4/v5p chips have two TensorCores: add a leading `parallel` grid axis `core` (0, 1) so "
        "both run the kernel, and issue every DMA and semaphore op from core 0 (guard them with "
        "`when: core == 0`), as the Pallas distributed tutorial recommends"))
    cores: int = Field(1, ge=1, le=2, description=(
        "TensorCores per chip that run the body (v4/v5p have two): with 2, each core runs the "
        "whole body with the builtin `core` (0 or 1), its own VMEM scratch and semaphores, and "
        "the chip's HBM buffers shared with the other core; a remote copy or signal goes to "
        "the same core of its target chip (Pallas `pl.kernel` over a TensorCoreMesh)"))
    dtype: str = "float32"
    vmem_limit_mib: int | None = Field(None, ge=1, description=(
        "MiB of VMEM the kernel may use, passed to the TPU compiler as Pallas' `vmem_limit_bytes`: raise "
        "its default scoped limit for large VMEM buffers (up to the chip's VMEM per core)"))
    params: dict[str, int] = {}
    buffers: dict[str, Buffer]
    data: dict[str, Data] = Field(default_factory=dict, description=(
        "small integer arrays read at run time (scalar prefetch, SMEM), with their constraints: "
        "`ringc check --data` verifies the schedule for samples of them"))
    semaphores: dict[str, Semaphore] = {}
    barrier: BarrierConfig | None = None
    grid: dict[str, ExprT] = Field(default_factory=dict, description=(
        "the Pallas grid (row-major); omit it for a kernel without one, whose body runs once "
        "(with `loop:` blocks for Python loops)"))
    dimension_semantics: Annotated[dict[str, Literal["parallel", "arbitrary"]], BeforeValidator(_semantics)] = Field(
        default_factory=dict, description=(
        "per grid axis, Pallas' `parallel` or `arbitrary` (the default): a parallel axis promises that its "
        "iterations are independent; on v4/v5p the compiler splits it over the two TensorCores"))
    let: dict[str, ExprT] = {}
    copies: dict[str, Copy] = {}
    body: list[Op] = Field([], description="the ops every device runs at every grid point (one "
                                           "kernel; a split-phase program has `kernels` instead)")
    kernels: dict[str, Kernel] = Field({}, description=(
        "split-phase: several pallas_calls, each with its own body, run in the order `program` gives "
        "(e.g. a `start` kernel that begins remote copies and a `done` kernel that waits)"))
    program: list[str] = Field([], description="the kernels' names in call order (with `kernels`)")

    @model_validator(mode="after")
    def _one_program(self) -> "Schedule":
        if self.kernels and self.body:
            raise ValueError("give either `body` (one kernel) or `kernels` with `program` (a split-phase "
                             "program of several pallas_calls), not both")
        if not self.kernels and not self.body:
            raise ValueError("`body` is missing: the ops every device runs (or `kernels` and `program` "
                             "for a split-phase program)")
        if self.kernels and not self.program:
            raise ValueError("`kernels` needs `program`: the kernels' names in call order, e.g. "
                             f"`program: [{', '.join(self.kernels)}]`")
        if self.program and not self.kernels:
            raise ValueError("`program` lists kernels declared under `kernels`, which is missing")
        return self

    @property
    def calls(self) -> list[tuple[str, list[Op]]]:
        """The pallas_calls in order, (kernel name, body): one, named after the schedule, for a
        plain schedule; the `program` of a split-phase one."""
        if not self.kernels:
            return [(self.name, self.body)]
        return [(k, self.kernels[k].body) for k in self.program if k in self.kernels]

    @property
    def all_ops(self) -> list[Op]:
        """The top-level ops of every kernel (each kernel once): `body`, or every kernel's body."""
        if not self.kernels:
            return self.body
        return [op for k in self.kernels.values() for op in k.body]

    @model_validator(mode="before")
    @classmethod
    def _strip_table_lines(cls, v: Any) -> Any:
        # The loader tags every mapping with its line; name tables are not models.
        if isinstance(v, dict):
            v = {k: ({n: x for n, x in t.items() if n != "__line__"}
                     if k in _NAME_TABLES and isinstance(t, dict) else t) for k, t in v.items()}
            if isinstance(v.get("copies"), dict):  # `push(k): {...}` is `push: {args: [k], ...}`
                entries = [_template_entry(k, c) for k, c in v["copies"].items()]
                names = [k for k, _ in entries]
                twice = sorted({k for k in names if names.count(k) > 1})
                if twice:
                    raise ValueError(f"copy `{twice[0]}` is declared twice (once as a template `{twice[0]}(...)`)")
                v["copies"] = dict(entries)
        return v

    _file: str = PrivateAttr("<schedule>")
    _header: str = PrivateAttr("")
    _lines: dict = PrivateAttr(default_factory=dict)
    _text: str | None = PrivateAttr(None)  # the YAML as loaded (None for a schedule built in code)
    _resolved: Any = PrivateAttr(None)  # `resolve.resolved`: this schedule as resolved, while current

    def line_of(self, *path: Any) -> int:
        """The YAML line of a table entry such as ("let", "working"), else the schedule's."""
        return self._lines.get(tuple(path)) or self._lines.get(tuple(path[:1])) or self.line

    @property
    def axis(self) -> str | tuple[str, ...]:
        """The `axis_name` to give `lax`: the axis, or the tuple of axes of a multi-axis schedule."""
        return self.axes[0] if len(self.axes) == 1 else tuple(self.axes)

    @property
    def file(self) -> str:
        """The YAML file this schedule was loaded from (for error locations)."""
        return self._file

    @property
    def text(self) -> str | None:
        """The YAML text this schedule was loaded from (params not applied), or None for one
        made in code (a mutant): what an emitted module checks new sizes against."""
        return self._text

    @property
    def header(self) -> str:
        """The YAML's leading comment: the author's explanation of the algorithm."""
        return self._header

    @property
    def split_grid(self) -> bool:
        """Never: a schedule's core 1 (`megacore: true`) issues no DMA of its own
        (`verify.core.megacore_findings`; a Pallas kernel's split grid does)."""
        return False

    def operands(self, op: OpNode, role: str) -> list[E.Ref]:
        """The refs `op` has in `role` ("reads", "writes" or "sems"); for a copy op, the
        fields of its copy that the op's roles name."""
        if not op.copy_halves:
            return op.refs(role)
        c = self.copies[op.copy_name]
        return [v for v in (getattr(c, f) for f in getattr(type(op), role)) if v is not None]

    def buffers_of(self, *kinds: str) -> list[str]:
        """Buffer names of the given kinds, grouped by kind in the order given, each group in
        declaration order."""
        return [n for k in kinds for n, b in self.buffers.items() if b.kind == k]

    def partition_spec(self, name: str) -> tuple[str | tuple[str, ...] | None, ...]:
        """The PartitionSpec entries of an input or output: `spec`, or the schedule's axis (the
        tuple of its axes) on the first dimension of the per-device array and None elsewhere."""
        buf = self.buffers[name]
        if buf.spec is not None:
            return tuple(tuple(a) if isinstance(a, list) else a for a in buf.spec)
        return (self.axis,) + (None,) * (len(buf.shard_shape) - 1)

    @property
    def semantics(self) -> tuple[str, ...]:
        """Pallas' `dimension_semantics` of the kernel's grid: megacore's `core` axis, then
        each grid axis's (default arbitrary)."""
        return ("parallel",) * self.megacore + tuple(self.dimension_semantics.get(g, "arbitrary") for g in self.grid)

    def dtype_of(self, buffer: str) -> str:
        return self.buffers[buffer].dtype or self.dtype

    def io_buffer(self, kind: str) -> str:
        """The collective's input or output buffer name (`rhs`: a matmul's right-hand input;
        `values`: ring_attention's third input)."""
        if kind == "values":
            return self.collective.values
        if kind == "rhs":
            if self.collective.rhs:
                return self.collective.rhs
            lhs = self.io_buffer("input")
            return next(n for n, b in self.buffers.items() if b.kind == "input" and n != lhs)
        explicit = self.collective.input if kind == "input" else self.collective.output
        if explicit:
            return explicit
        return next(n for n, b in self.buffers.items() if b.kind == kind)
