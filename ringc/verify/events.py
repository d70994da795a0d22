"""The unrolled event graph: what each device does, in program order, for one concrete N.

Every later stage reads this one structure: the simulator, the ordering and race
analysis, the symbolic data flow, and (later) the cost model and timelines.
"""

from __future__ import annotations

import functools
import os
from collections import defaultdict
from dataclasses import MISSING, dataclass, field, fields, replace
from functools import cached_property
from enum import StrEnum
from math import prod
from typing import Any, Callable, Union

from ..ir import schema as S
from ..ir.rules import RuleTable

__all__ = ["SemId", "ZEROED_KINDS", "DMA_KINDS", "BARRIER", "SECOND_BARRIER", "DEVICE_BARRIER", "OP_COMPUTE_KINDS", "MODEL_KINDS", "IMPORT_KINDS",
           "COMPUTE_KINDS", "Origin", "ComputeSpec", "COMPUTES", "sem_text", "Region", "DmaStart", "SemWait", "Signal", "Compute", "Action",
           "Event", "Program", "remapped", "deposits", "feeders", "matmul_dims"]

# A semaphore instance: (device, name, index). The barrier semaphore is "barrier";
# the double barrier's kernel-scoped second semaphore is "barrier#2".
SemId = tuple[int, str, tuple[int, ...]]
BARRIER = "barrier"
SECOND_BARRIER = "barrier#2"
DEVICE_BARRIER = "pallas-entry-barrier#"  # + invocation: the implicit barrier without `barrier:`


# The kinds of `Compute` event: one per compute op of the schedule (its tag), then the
# race model's own writes. Stages that read events keep one rule per kind (`ringc.ir.rules`).
OP_COMPUTE_KINDS: tuple[str, ...] = tuple(c.tag for c in S.OPS if c.compute and c.writes)
MODEL_KINDS: tuple[str, ...] = ("enter", "exit", "allocate")
# Kinds only the Pallas importer makes: `load` reads `src` into a value (an assign, named for
# the messages); `opaque` writes data the model does not follow (a kernel's own arithmetic).
IMPORT_KINDS: tuple[str, ...] = ("load", "opaque", "signal")
COMPUTE_KINDS: tuple[str, ...] = OP_COMPUTE_KINDS + MODEL_KINDS + IMPORT_KINDS


# Semaphore kinds (`Program.sem_kinds`) whose count at kernel exit is no finding: Mosaic GPU
# zero-initialises every semaphore of a kernel before each launch (`gpu`), and the model's own
# launch and join counts (`launch`, `pallas/mgpu.py`) only grow. What a non-decrementing wait
# leaves is dropped there, not carried into the next launch.
ZEROED_KINDS = frozenset({"gpu", "launch", "tma"})
# Semaphores that count a copy's bytes (`order.dma_ends` reads their waits as the copies' ends):
# a DMA's, and a Mosaic GPU TMA load's own, which the barrier waits of its phase wait for
# without decrementing (`tma`: several warpgroups wait for one load).
DMA_KINDS = frozenset({"dma", "tma"})


def sem_text(sem: SemId) -> str:
    _, name, idx = sem
    return f"{name}[{', '.join(map(str, idx))}]" if idx else name


def _stored(cls: type) -> type:
    """A frozen dataclass whose `__init__` stores the fields straight into the instance's
    `__dict__`. The one `dataclass` writes calls `object.__setattr__` per field (what
    `frozen` asks for), which costs more than the rest of making the object, and the
    unroller makes a few hundred thousand. Same signature (names, order, defaults), and
    the fields, equality, hash and immutability are `dataclass`'s own."""
    params, stores, defaults = [], [], {}
    for f in fields(cls):
        assert f.default_factory is MISSING and f.init, f"{cls.__name__}.{f.name}: no factories here"
        if f.default is MISSING:
            params.append(f.name)
        else:
            params.append(f"{f.name}=_default_{f.name}")
            defaults[f"_default_{f.name}"] = f.default
        stores.append(f"    d[{f.name!r}] = {f.name}\n")
    source = f"def __init__(self, {', '.join(params)}):\n    d = self.__dict__\n{''.join(stores)}"
    exec(source, defaults)  # as `dataclasses` makes its own __init__
    init = defaults["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init
    return cls


@_stored
@dataclass(frozen=True)
class Region:
    """A box of one buffer on one device. `box` has one (start, stop) per dimension of
    the full buffer (slots first); `kept` are the dims not selected by a point index, so
    the region's logical shape is `[stop - start for kept dims]`."""
    buffer: str
    device: int
    box: tuple[tuple[int, int], ...]
    kept: tuple[int, ...]
    itemsize: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple([self.box[d][1] - self.box[d][0] for d in self.kept])

    @cached_property  # asked millions of times by the race and DMA-interval analyses
    def nbytes(self) -> int:
        return prod(b - a for a, b in self.box) * self.itemsize

    def overlaps(self, other: "Region") -> bool:
        return (self.buffer == other.buffer and self.device == other.device
                and all(a < d and c < b and a < b and c < d for (a, b), (c, d) in zip(self.box, other.box)))

    def text(self) -> str:
        parts = []
        for d, (a, b) in enumerate(self.box):
            parts.append(f"{a}:{b}" if d in self.kept else str(a))
        return f"{self.buffer}[{', '.join(parts)}]"


@_stored
@dataclass(frozen=True)
class DmaStart:
    copy: str
    src: Region
    dst: Region
    send_sem: SemId | None  # None for a local copy
    recv_sem: SemId         # the local copy's only semaphore
    explicit_self: bool = False  # the author says the target may be the sender (`self_copy`, `to: me`)
    # The element types the copy moves, source and destination, where a bitcast view of one
    # side (`ref.bitcast(jnp.bfloat16)`) makes them differ from the buffers' own; else None.
    viewed: tuple[str, str] | None = None

    @property
    def remote(self) -> bool:
        return self.send_sem is not None

    @property
    def nbytes(self) -> int:
        return self.dst.nbytes


@_stored
@dataclass(frozen=True)
class SemWait:
    """Block until the semaphore holds `value`, then subtract it. `why` tells what the
    author meant: wait_send / wait_recv / wait (local copy) / sem_wait / barrier.
    `decrement=False` (Mosaic GPU's `pl.semaphore_wait(..., decrement=False)`, and the model's
    own launch and join waits): block until the semaphore holds at least `value`, and leave
    it as it is: a threshold test on a count that only grows, which never disables another
    process's wait (`simulate.py`'s persistence argument holds)."""
    sem: SemId
    value: int
    why: str
    copy: str | None = None
    decrement: bool = True


@_stored
@dataclass(frozen=True)
class Signal:
    sem: SemId  # on the target device
    inc: int
    why: str = "signal"


@_stored
@dataclass(frozen=True)
class Compute:
    """An op on VMEM: zero, accumulate (dst += src, or dst = base + src), assign (dst = src), cast (dst = src in
    dst's type), matmul (dst = src @ rhs, or += with `accumulate`; `contract`
    names the contracted dims, as lax.dot_general's). Also the model's own
    writes: `enter` (the kernel takes over memory) and `allocate` (a pipeline's fresh
    VMEM blocks hold garbage), and `exit` (the caller takes the memory back). `opaque`: an
    imported Pallas kernel writes data the model does not follow (its own arithmetic); `load`:
    it reads `src` into a value register `dst` (an assign, named for the messages)."""
    kind: str
    dst: Region
    src: Region | None = None
    rhs: Region | None = None
    accumulate: bool = False
    base: Region | None = None   # accumulate: dst = base + src
    contract: tuple[int, int] = (1, 0)  # matmul: the contracted dims of src and rhs ((1, 1): src @ rhs.T)
    # Pallas imports only. assign/cast/accumulate: the pointwise functions applied to `src` on the
    # way, innermost first (`("2.0*",)`: twice src; `("tanh",)`: tanh(src), uninterpreted);
    # opaque: one text naming what was not followed (the primitive and its line).
    fn: tuple[str, ...] = ()

    @property
    def product_text(self) -> str:
        """A matmul's product as text: `a @ b`, `a @ b.T`, `a.T @ b`."""
        ca, cb = self.contract
        return f"{self.src.text()}{'' if ca == 1 else '.T'} @ {self.rhs.text()}{'' if cb == 0 else '.T'}"

    @property
    def reads(self) -> tuple[Region, ...]:
        """The regions it reads, besides `dst` when accumulating."""
        return tuple(r for r in (self.src, self.rhs, self.base) if r is not None)

    @property
    def reads_dst(self) -> bool:
        """Whether it reads its destination as well as writing it (`COMPUTES[kind].reads_dst`):
        an accumulate without a base (dst += src), a matmul with `accumulate` (dst += src @
        rhs), and `exit` (the caller takes back whatever is there). Every other compute
        replaces all of `dst` whatever it held (`overwrites`). The data flow's slicing and
        fused windows, the parallel-dependency check and the cost model read it."""
        return COMPUTES[self.kind].reads_dst(self)

    @property
    def overwrites(self) -> bool:
        """It replaces all of `dst` and does not read it (`reads_dst`): a write that hides
        every earlier one under it."""
        return not self.reads_dst

    @property
    def boundary(self) -> bool:
        """Kernel entry or exit: the memory changes hands."""
        return self.kind in ("enter", "exit")

    @property
    def work(self) -> bool:
        """A real op of the kernel, not one of the race model's own writes."""
        return COMPUTES[self.kind].origin is not Origin.MODEL


def matmul_dims(src: Region, rhs: Region, contract: tuple[int, int]) -> tuple[int, int, int, int]:
    """A matmul's buffer dims: src's contracted and free dim, then rhs's (`contract`, as
    lax.dot_general's, picks among each operand's kept dims; the free ones are the
    destination's rows and columns)."""
    ka, kb = src.kept[contract[0]], rhs.kept[contract[1]]
    return ka, src.kept[1 - contract[0]], kb, rhs.kept[1 - contract[1]]


Action = Union[DmaStart, SemWait, Signal, Compute]


# Identity: each event is one occurrence. Not frozen, for speed (the unroller makes tens of
# thousands per device); nothing assigns to an event after it is made.
@dataclass(eq=False, slots=True)
class Event:
    device: int
    index: int                 # position in this device's program
    point: tuple[int, ...]     # grid indices
    line: int                  # YAML line of the op
    action: Action
    invocation: int = 0        # which back-to-back kernel call (--invocations)
    inner: tuple[tuple[str, int], ...] = ()  # the indices of the loops and nested pipeline around it
    # A Pallas kernel's loops around it (`fori_loop`, `emit_pipeline`'s steps): (the loop's
    # line, the iteration, whether the loop is inside a call on that line), outermost first.
    # Only named in `Program.where`: it orders nothing.
    loops: tuple[tuple[int, int, bool], ...] = ()


@dataclass
class Program:
    """All devices' event lists for one concrete N (and parameter set). A program whose
    devices run device 0's events moved by a group element is a
    `symmetric.program.SymmetricProgram`, whose `representatives` is device 0's program."""
    schedule_name: str
    file: str
    n: int
    grid_names: tuple[str, ...]
    devices: list[list[Event]]
    sem_kinds: dict[str, str]                    # name -> dma | regular | barrier
    shapes: dict[str, tuple[int, ...]]           # buffer -> full shape for this N
    targets: list[tuple[Event, int]] = field(default_factory=list)  # (event, target) of every remote action
    axis_sizes: dict[str, int] = field(default_factory=dict)  # schedule axis -> devices along it
    device_labels: list[str] | None = None  # how findings name device d, e.g. "(1, 2)"; default "d"
    # Megacore: the events of each device's second TensorCore. They must not touch shared
    # state (see `core.megacore_findings`); `devices` holds core 0's.
    second_core: list[list[Event]] = field(default_factory=list)
    # A split-phase program: the kernel of each call (`Event.invocation`), for the findings.
    call_names: list[str] | None = None
    # Element type of each buffer a DMA may move (`check.dtype_findings`); a buffer missing here
    # (a pipeline's VMEM window: its HBM region's type by construction) is not compared.
    dtypes: dict[str, str] = field(default_factory=dict)
    # The grid dims (positions in `Event.point`) declared `parallel`: their iterations must not
    # depend on each other (`check.parallel_findings`).
    parallel: tuple[int, ...] = ()
    # The VMEM buffers that hold a nested pipeline's blocks (`unroll.window_id`): only the
    # pipeline's own copies and body touch them (`windows.py` fuses them in the data flow).
    windows: frozenset[str] = frozenset()
    # Pricing only (`rotation_unroll(fold=True)`, `cost/steady.py`): (start, end, times,
    # depth, stop): device 0's events [start, end), two rows of a pipeline whose outer index
    # is `Event.inner[depth]`, stand for `times` repetitions of themselves (each two rows
    # on), up to the pipeline's end at `stop`. Empty for every program the verifier sees.
    folds: tuple[tuple[int, int, int, int, int], ...] = ()
    # Processes that are not devices (Mosaic GPU: each block of each GPU runs as a process of
    # its own, `pallas/mgpu.py`): the devices that hold memory and semaphores are processes
    # 0..memories-1 (each GPU's launch process), every region's and semaphore's device is one of
    # them, and `places[p]` is the device process p runs on. 0: every process is a device.
    memories: int = 0
    places: tuple[int, ...] = ()
    # Mosaic GPU: each process's block (-1: a GPU's launch process), and the semaphores whose
    # first index is a block (one per block: block b's are at b). Blocks whose processes signal
    # and wait alike are interchangeable, which `order.compute_order` uses (`order.BlockOrder`).
    blocks: tuple[int, ...] = ()
    block_sems: frozenset[str] = frozenset()
    # TPU TensorCores per chip each running as a process (`cores: 2`, `Unroller.core_events`):
    # chip d's core c is process c * memories + d; its VMEM and semaphores are its own.
    cores: int = 1
    # The front end that made it ("yaml", "pallas"): findings say their remedies in its words
    # (`messages.Message.fixes`).
    front: str = "yaml"

    def place(self, process: int) -> int:
        """The device (a process that holds memory) `process` runs on: itself, but for a
        Mosaic GPU block or a TPU chip's second core (`places`)."""
        return self.places[process] if self.places else process

    @property
    def device_count(self) -> int:
        """The devices that hold memory (`memories`, else every process)."""
        return self.memories or self.n

    @property
    def event_count(self) -> int:
        """Events of all devices."""
        return sum(len(d) for d in self.devices)

    def label(self, device: int) -> str:
        """How findings name a device: its coordinates on the topology once `check` knows
        them (`(1, 2)`, `*` for every value of an axis the schedule does not run along)."""
        if self.device_labels is not None and 0 <= device < len(self.device_labels):
            return self.device_labels[device]
        if self.cores > 1 and self.device_count <= device < self.n:  # core 0 and HBM: the chip's label
            return f"{self.place(device)} core {device // self.device_count}"
        return str(device)

    def where(self, ev: Event) -> str:
        """`device 2, step=3 phase=1 (line 41)` — the location users read in findings."""
        pt = " ".join(f"{n}={v}" for n, v in zip(self.grid_names, ev.point))
        if ev.inner:  # the indices of the loops and the pipeline around it
            pt = " ".join([*([pt] if pt else []), "[" + " ".join(f"{n}={v}" for n, v in ev.inner) + "]"])
        call = f"call {ev.invocation + 1}" if ev.invocation else ""
        if self.call_names is not None and ev.invocation < len(self.call_names):
            call = f"call {ev.invocation + 1} (`{self.call_names[ev.invocation]}`)"
        parts = [f"device {self.label(ev.device)}"] + ([call] if call else [])
        if pt:  # a kernel without a grid (many hand-written ones) has no grid point to name
            parts.append(pt)
        parts += [f"iteration {i} of the loop{' inside the call' if inside else ''} at {self.line_text(at)}"
                  for at, i, inside in ev.loops]
        return f"{', '.join(parts)} ({self.line_text(ev.line)})"

    def line_text(self, line: Any) -> str:
        """`line 41`, or a line of another file (a Pallas kernel's helper module, as the
        finding's own location says it) with its file, `kernels.py:223`: `line 223` would
        read as the user's."""
        other = getattr(line, "file", None)
        same = other is None or _same_file(other, self.file)
        return f"line {line}" if same else f"{os.path.basename(other)}:{int(line)}"


@functools.lru_cache(maxsize=256)
def _same_file(a: str, b: str) -> bool:
    """Whether two paths name one file (a line's file is absolute, the program's as given;
    asked for every event a finding may name: cached)."""
    return os.path.realpath(a) == os.path.realpath(b)


def remapped(a: Action, region: Callable[[Region], Region], sem: Callable[[SemId], SemId]) -> Action:
    """`a` with every region it names replaced by `region(r)` and every semaphore by
    `sem(s)` (a missing one stays missing): the one place that knows where each kind of
    action keeps them (`unroll.on_core`, `cores.composed`)."""
    r = lambda x: None if x is None else region(x)  # noqa: E731
    s = lambda x: None if x is None else sem(x)  # noqa: E731
    if isinstance(a, DmaStart):
        return DmaStart(a.copy, r(a.src), r(a.dst), s(a.send_sem), s(a.recv_sem), a.explicit_self)
    if isinstance(a, SemWait):
        return SemWait(s(a.sem), a.value, a.why, a.copy, a.decrement)
    if isinstance(a, Signal):
        return Signal(s(a.sem), a.inc, a.why)
    if isinstance(a, Compute):
        return replace(a, **{f.name: r(getattr(a, f.name)) for f in fields(a) if isinstance(getattr(a, f.name), Region)})
    raise TypeError(f"remapped: no rule for {type(a).__name__}")


def deposits(a: Action) -> list[tuple[SemId, int]]:
    """What an action adds to which semaphores: a signal its increment on its target's; a DMA
    its byte count on the receive semaphore, then (remote) on the send semaphore. Waits and
    compute add nothing. The one place that says which actions feed a semaphore."""
    if isinstance(a, Signal):
        return [(a.sem, a.inc)]
    if isinstance(a, DmaStart):
        if a.send_sem is None:
            return [(a.recv_sem, a.nbytes)]
        return [(a.recv_sem, a.nbytes), (a.send_sem, a.nbytes)]
    return []


def feeders(program: Program) -> dict[SemId, list[Event]]:
    """Every event that adds to each semaphore (`deposits`): signals, and DMA starts on both sides."""
    out: dict[SemId, list[Event]] = defaultdict(list)
    for events in program.devices:
        for ev in events:
            for sem, _ in deposits(ev.action):
                out[sem].append(ev)
    return out


# ------------------------------------------------------------------ compute kinds

class Origin(StrEnum):
    """What makes compute events of a kind."""
    OP = "op"          # a compute op of the schedule (the kind is its tag)
    MODEL = "model"    # the race model's own writes: memory changing hands (enter, exit, allocate)
    IMPORT = "import"  # the Pallas importer only (load, opaque)


@dataclass(frozen=True)
class ComputeSpec:
    """Everything the stages know about one compute kind, in one place (`COMPUTES[kind]`).
    What a stage does with a kind beyond these facts is its own rule table (the gauge's
    `PAIRS`); a new kind is one entry here, every field required."""
    origin: Origin
    reads_dst: Callable[[Compute], bool]       # it reads its destination too (else it overwrites all of it)
    effect: Callable[[Any, Compute], None]     # its effect on the symbolic memory (`semantics.Memory`)
    flops: Callable[[Compute], float] | None   # its arithmetic (`cost/timeline.py`); None: unknown, not priced
    describe: Callable[[Compute, Event], str]  # its text in findings, regions in full (`races.describe`)
    writes: str | None                         # its write in a race's text: "`zero` zeroes it" (None: the model's)
    show: Callable[[Compute], str]             # its short text in pictures, buffers by name (`show.ops.op_text`)
    mark: str                                  # its mark in the slot table (`show.tables.slot_table`)


def _never(a: Compute) -> bool:
    return False


def _no_flops(a: Compute) -> float:
    return 0.0


def _matmul_flops(a: Compute) -> float:  # src [m, k] @ rhs [k, n], either transposed by `contract`
    ca, cb = a.contract
    m, k, n = a.src.shape[-2:][1 - ca], a.src.shape[-2:][ca], a.rhs.shape[-2:][1 - cb]
    return 2.0 * m * n * k


def _shown(op: str) -> Callable[[Compute], str]:
    return lambda a: f"{a.kind} {a.dst.buffer} {op} {a.src.buffer if a.src is not None else '?'}"


# `COMPUTES[kind]`: one entry per compute kind (`COMPUTE_KINDS`).
COMPUTES: RuleTable[ComputeSpec] = RuleTable("compute kinds (ringc/verify/events.py COMPUTES)", "compute")
COMPUTES.register("enter")(ComputeSpec(
    Origin.MODEL, _never, lambda mem, a: mem.forget(a.dst), _no_flops,
    lambda a, ev: f"enter the kernel (call {ev.invocation + 1}): {a.dst.text()} now belongs to it", None,
    lambda a: f"kernel entry ({a.dst.buffer})", "enter"))
COMPUTES.register("exit")(ComputeSpec(
    Origin.MODEL, lambda a: True,  # the caller takes back whatever is there
    lambda mem, a: None,           # the caller reads the memory as it is
    _no_flops,
    lambda a, ev: f"exit the kernel (call {ev.invocation + 1}): {a.dst.text()} goes back to the caller", None,
    lambda a: f"kernel exit ({a.dst.buffer})", "exit"))
COMPUTES.register("allocate")(ComputeSpec(
    Origin.MODEL, _never, lambda mem, a: mem.forget(a.dst), _no_flops,
    lambda a, ev: f"the pipeline allocates {a.dst.text()} (garbage until written)", None,
    _shown("="), "allocate"))
COMPUTES.register("zero")(ComputeSpec(
    Origin.OP, _never, lambda mem, a: mem.zero(a.dst), _no_flops,
    lambda a, ev: f"zero {a.dst.text()}", "zeroes",
    lambda a: f"zero {a.dst.buffer}", "zero"))
COMPUTES.register("accumulate")(ComputeSpec(
    Origin.OP, lambda a: a.base is None,  # dst += src; with a base, dst = base + src
    lambda mem, a: mem.accumulate(a.src, a.dst, a.base, a.fn), lambda a: float(prod(a.dst.shape)),
    lambda a, ev: (f"{a.dst.text()} = {a.base.text()} + {a.src.text()}" if a.base is not None
                   else f"{a.dst.text()} += {a.src.text()}"), "accumulates into",
    _shown("+="), "acc"))
COMPUTES.register("assign")(ComputeSpec(
    Origin.OP, _never, lambda mem, a: mem.copy_fn(a.src, a.dst, a.fn), _no_flops,
    lambda a, ev: f"{a.dst.text()} = {a.src.text()}", "assigns",
    _shown("="), "set"))
COMPUTES.register("cast")(ComputeSpec(
    Origin.OP, _never, lambda mem, a: mem.copy_fn(a.src, a.dst, a.fn), _no_flops,
    lambda a, ev: f"{a.dst.text()} = cast({a.src.text()})", "casts into",
    _shown("="), "cast"))
COMPUTES.register("matmul")(ComputeSpec(
    Origin.OP, lambda a: a.accumulate,  # dst += src @ rhs
    lambda mem, a: mem.matmul(a.dst, a.src, a.rhs, a.accumulate, a.contract), _matmul_flops,
    lambda a, ev: f"{a.dst.text()} {'+=' if a.accumulate else '='} {a.product_text}", "multiplies into",
    lambda a: (f"matmul {a.dst.buffer} {'+=' if a.accumulate else '='} {a.src.buffer}"
               f"{'' if a.contract[0] == 1 else '.T'} @ {a.rhs.buffer}{'' if a.contract[1] == 0 else '.T'}"),
    "matmul"))
COMPUTES.register("load")(ComputeSpec(  # a copy into a value register
    Origin.IMPORT, _never, lambda mem, a: mem.copy(a.src, a.dst), _no_flops,
    lambda a, ev: f"{a.dst.text()} = {a.src.text()}", "loads into",
    _shown("="), "load"))
COMPUTES.register("signal")(ComputeSpec(  # a Mosaic GPU signal's atomic add, as an access of the semaphore's word
    Origin.IMPORT, _never, lambda mem, a: None, _no_flops,
    lambda a, ev: f"the signal adds to {a.src.text()}", None,
    lambda a: f"signal {a.src.buffer}", "signal"))
COMPUTES.register("opaque")(ComputeSpec(  # data the model does not follow (the kernel's own arithmetic)
    Origin.IMPORT, _never, lambda mem, a: mem.opaque(a.dst, a.fn[0] if a.fn else None), None,
    lambda a, ev: f"compute into {a.dst.text()}", "computes into",
    lambda a: f"compute {a.dst.buffer}", "compute"))
