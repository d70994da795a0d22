"""Hypothesis strategies for property-testing schedules, yours or the library's.

    from hypothesis import given
    from ringc.testing import device_counts, schedules_from, mutants_of

    @given(schedules_from("schedules"), device_counts(2, 16))
    def test_my_schedules_verify(sched, n):
        assert ringc.testing.check_sized(sched, n).ok   # ring, or a torus for 2-D schedules

A mutant is a schedule with one small, plausible bug: an op dropped (a wait, a signal, a
start), a direction flipped, or two neighbouring ops swapped. Most mutants are broken;
use them to check that your own checks fail for the right reason.

hypothesis is imported where a strategy is built, not when this module is: `check_sized`,
`supports`, `mutations_of` and `mutate` work without it. It is a base dependency all the
same, because ringc itself draws runtime-data samples with it (`ringc check --data random:K`,
`ringc run` and an emitted kernel's `make_inputs` on a schedule with `data:`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from .ir import expr as E
from .ir import schema as S
from .ir.loader import load
from .ir.schema import op_tag
from .topology import DEFAULT, sized_by_devices
from .data import Sample, bounds, derive, load_samples, parse_spec, problems
from .errors import ScheduleError
from .verify.check import check, resolve_topology
from .verify.unroll import buffer_shapes

if TYPE_CHECKING:
    from hypothesis import strategies as st


def _strategies():
    """`hypothesis.strategies`, imported when a strategy is built."""
    try:
        from hypothesis import strategies
    except ImportError:
        raise ImportError('ringc.testing\'s strategies need hypothesis: pip install hypothesis (a dependency of '
                          'ringc; also in "ringc[test]")') from None
    return strategies


def device_counts(min_n: int = 2, max_n: int = 8) -> st.SearchStrategy[int]:
    """Ring sizes, odd and even, shrinking towards the smallest."""
    return _strategies().integers(min_value=min_n, max_value=max_n)


def topology_for(sched: S.Schedule, n: int) -> str:
    """A `--topology` to check `sched` on with about `n` devices: `ring` (n devices) for a
    schedule over one axis; for k axes, the most nearly square k-D torus of n devices with
    every axis at least 2 or, where n has none, 2 x ... x 2 x ceil(n / 2^(k-1))."""
    k = len(sched.axes)
    if k == 1:
        return DEFAULT

    def splits(m: int, parts: int) -> list[tuple[int, ...]]:
        if parts == 1:
            return [(m,)] if m >= 2 else []
        return [(a, *rest) for a in range(2, m + 1) if m % a == 0 for rest in splits(m // a, parts - 1)]

    shapes = splits(n, k) or [(2,) * (k - 1) + (max(2, -(-n // 2 ** (k - 1))),)]
    best = min(shapes, key=lambda sh: (max(sh) - min(sh), sh))
    return "torus:" + "x".join(map(str, best))


def supports(sched: S.Schedule, n: int) -> bool:
    """Whether a one-axis schedule's shapes and grid are defined for n devices (a
    hypercube's `log2(N)` is for powers of two only); a multi-axis one: always."""
    if len(sched.axes) > 1:
        return True
    try:
        buffer_shapes(sched, {sched.axes[0]: n})
    except ScheduleError:
        return False
    return True


def supported_size(sched: S.Schedule, n: int) -> int:
    """n, or for a schedule defined only for some device counts the largest one below n
    (else the smallest above it): a hypercube checked at "about 6" runs at 4."""
    for m in [*range(n, 1, -1), *range(n + 1, 4 * n + 2)]:
        if supports(sched, m):
            return m
    return n  # none: let the check say why


def check_sized(sched: S.Schedule, n: int, **kwargs):
    """`ringc.check` on `topology_for(sched, n)`: n devices on a ring for a one-axis
    schedule (`supported_size`: a power of two for a hypercube), a torus of about n
    devices for a multi-axis one. A schedule with runtime data is checked on
    `CHECK_SIZED_DATA` samples drawn from its constraints (seed 0) unless `data` is given."""

    n = supported_size(sched, n)
    topo = topology_for(sched, n)
    if sched.data and kwargs.get("data") is None:
        sizes = resolve_topology(sched, n if sized_by_devices(topo) else None, topo).sizes
        kwargs["data"], kwargs["data_how"] = samples_for(CHECK_SIZED_DATA, sched, math.prod(sizes.values()), 0, sizes)
    return check(sched, n if sized_by_devices(topo) else None, topology=topo, **kwargs)


CHECK_SIZED_DATA = "random:5"  # the samples `check_sized` checks a schedule with runtime data on


def schedules_from(directory: str | Path, pattern: str = "*.yaml") -> st.SearchStrategy[S.Schedule]:
    """Every schedule file in `directory`, loaded and statically validated."""
    paths = sorted(Path(directory).glob(pattern))
    if not paths:
        raise ValueError(f"no schedules matching {pattern!r} in {directory}")
    return _strategies().sampled_from(paths).map(load)


@dataclass(frozen=True)
class Mutation:
    kind: str          # drop | flip | swap | unfeed
    path: tuple[int, ...]
    line: int
    op: str            # the mutated op's key: wait, sem_wait, signal, start, ...

    def describe(self) -> str:
        what = {"drop": "dropped the op", "flip": "flipped the direction of the copy used",
                "swap": "swapped the op with the next one",
                "unfeed": "dropped the `arrives` of the pipeline's inputs (fetched without waiting)"}[self.kind]
        return f"{what} at line {self.line}"


def _op_paths(ops: list[S.Op], prefix: tuple[int, ...] = ()) -> list[tuple[tuple[int, ...], S.Op]]:
    out = []
    for i, op in enumerate(ops):
        out.append((prefix + (i,), op))
        if isinstance(op, (S.When, S.Loop)):
            out += _op_paths(op.do, prefix + (i,))
    return out


def _edit(ops: list[S.Op], path: tuple[int, ...], fn) -> list[S.Op]:
    i, rest = path[0], path[1:]
    if not rest:
        return fn(list(ops), i)
    block = ops[i]
    return ops[:i] + [block.model_copy(update={"do": _edit(block.do, rest, fn)})] + ops[i + 1:]


_FLIP = {"left": "right", "right": "left"}


def _flip(name: str) -> str | None:
    """`left` <-> `right`, and per axis `left_x` <-> `right_x`; None for any other target."""
    base, sep, axis = name.partition("_")
    return _FLIP.get(base, "") + sep + axis if base in _FLIP else None


def mutate(sched: S.Schedule, mutation: Mutation) -> S.Schedule:
    """Apply one mutation; the result keeps the original file name for messages."""
    if mutation.kind == "drop":
        body = _edit(sched.body, mutation.path, lambda ops, i: ops[:i] + ops[i + 1:])
        update: dict[str, Any] = {"body": body}
    elif mutation.kind == "swap":
        body = _edit(sched.body, mutation.path,
                     lambda ops, i: ops[:i] + [ops[i + 1], ops[i]] + ops[i + 2:])
        update = {"body": body}
    elif mutation.kind == "unfeed":
        def unfeed(ops: list[S.Op], i: int) -> list[S.Op]:
            inputs = {n: spec.model_copy(update={"arrives": None}) for n, spec in ops[i].inputs.items()}
            return ops[:i] + [ops[i].model_copy(update={"inputs": inputs})] + ops[i + 1:]
        update = {"body": _edit(sched.body, mutation.path, unfeed)}
    else:
        op = dict(_op_paths(sched.body))[mutation.path]
        name = op.copy_name
        copy = sched.copies[name]
        flipped = E.Var(_flip(copy.to.name))
        update = {"copies": {**sched.copies, name: copy.model_copy(update={"to": flipped})}}
    out = sched.model_copy(update=update)
    out._file, out._header = sched.file, sched.header
    return out


def _siblings(sched: S.Schedule, path: tuple[int, ...]) -> list[S.Op]:
    ops = sched.body
    for i in path[:-1]:
        ops = ops[i].do
    return ops


def mutations_of(sched: S.Schedule) -> list[Mutation]:
    out = []
    for path, op in _op_paths(sched.body):
        if isinstance(op, (S.Wait, S.WaitSend, S.WaitRecv, S.SemWait, S.Signal, S.Start, S.Barrier,
                           S.Zero)):
            out.append(Mutation("drop", path, op.line, op_tag(op)))
        if not isinstance(op, (S.When, S.Loop)) and path[-1] + 1 < len(_siblings(sched, path)):
            out.append(Mutation("swap", path, op.line, op_tag(op)))
        if isinstance(op, S.Start):
            to = sched.copies[op.copy_name].to
            if isinstance(to, E.Var) and _flip(to.name) is not None:
                out.append(Mutation("flip", path, op.line, "start"))
        if isinstance(op, S.Pipeline) and op.arrivals:
            out.append(Mutation("unfeed", path, op.line, op_tag(op)))
    return out


def mutants_of(sched: S.Schedule) -> st.SearchStrategy[tuple[Mutation, S.Schedule]]:
    """(mutation, mutated schedule) pairs for one schedule."""
    muts = mutations_of(sched)
    return _strategies().sampled_from(muts).map(lambda m: (m, mutate(sched, m)))


def data_samples(sched: S.Schedule, n: int, sizes: dict[str, int] | None = None) -> st.SearchStrategy[dict]:
    """Samples of a schedule's runtime data (`data:`) at N devices that satisfy its declared
    constraints (`ringc.data`): each free array's elements are drawn in `range`, device by
    device, each bounded by what its own `sum_at_most` and the `sum_at_most` of an array that
    is its transpose leave; derived arrays are computed; a draw that still breaks a
    constraint is rejected. Shrinks towards zeros. `ringc check --data random:K` draws K."""
    st = _strategies()
    from hypothesis import reject


    limits = bounds(sched, n, sizes)
    free = [k for k, d in sched.data.items() if d.source is None]
    column_caps = {k: [limits[t]["sum"] for t, d in sched.data.items()
                       if d.transpose_of == k and limits[t]["sum"] is not None] for k in free}

    @st.composite
    def draw_sample(draw: Any) -> dict:
        values: dict[str, tuple[tuple[int, ...], ...]] = {}
        for name in free:
            lim = limits[name]
            length = lim["length"]
            columns = [min(column_caps[name], default=None)] * length
            rows = []
            for _dev in range(n):
                budget, row = lim["sum"], []
                for j in range(length):
                    hi = lim["hi"]
                    for cap in (budget, columns[j]):
                        if cap is not None:
                            hi = min(hi, cap)
                    if hi < lim["lo"]:
                        reject()
                    v = draw(st.integers(lim["lo"], hi))
                    row.append(v)
                    budget = None if budget is None else budget - v
                    if columns[j] is not None:
                        columns[j] -= v
                rows.append(tuple(row))
            values[name] = tuple(rows)
        sample = derive(sched, n, values)
        if problems(sched, n, sample, sizes):
            reject()
        return sample

    return draw_sample()


def draw_samples(sched: S.Schedule, n: int, count: int, seed: int = 0,
                 sizes: Mapping[str, int] | None = None) -> list[Sample]:
    """`count` samples valid for the declared constraints, drawn with hypothesis from
    `ringc.testing.data_samples` with a fixed seed: the same every time for the same
    schedule, N, count and seed (duplicates dropped, so possibly fewer when few exist)."""
    _strategies()  # the message, if hypothesis is missing
    from hypothesis import HealthCheck, Phase, given, seed as hseed, settings

    drawn: list[Sample] = []

    def run() -> None:
        @hseed(seed)
        @settings(max_examples=max(4 * count, 10), database=None, phases=[Phase.generate], deadline=None,
                  suppress_health_check=list(HealthCheck), derandomize=False)
        @given(data_samples(sched, n, sizes))
        def collect(sample: dict) -> None:
            if len(drawn) < count and sample not in drawn:
                drawn.append(sample)

        collect()

    from hypothesis import currently_in_test_context

    if currently_in_test_context():
        # Called from inside a property test (e.g. `check_sized` under @given): hypothesis
        # refuses a nested @given in the same thread, and its test context is per thread,
        # so the seeded draw runs on its own thread (same samples, same seed).
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(1) as pool:
            pool.submit(run).result()
    else:
        run()
    return drawn


def samples_for(spec: str, sched: S.Schedule, n: int, seed: int = 0,
                sizes: Mapping[str, int] | None = None) -> tuple[list[Sample], str]:
    """The samples `--data SPEC` gives at N devices, and how they were chosen (for the verdict)."""

    kind, arg = parse_spec(spec)
    if kind == "random":
        try:
            samples = draw_samples(sched, n, arg, seed, sizes)
        except ImportError as e:  # an install without hypothesis (--no-deps)
            raise ScheduleError(str(e), file=sched.file,
                                fix="pip install hypothesis, or give the samples in a file: --data FILE.json") from None
        return samples, f"{len(samples)} sample(s) drawn at random from the declared constraints (random:{arg}, seed {seed})"
    found = [s for m, s in load_samples(arg, sched) if m == n]
    if not found:
        raise ScheduleError(f"the data file has no sample for N={n}", file=arg,
                            fix=f"add a sample with {n} lists (one per device) per array, or check other --devices")
    return found, f"{len(found)} sample(s) from {arg}"


def heaviest_sample(sched: S.Schedule, n: int, seed: int = 0, sizes: Mapping[str, int] | None = None,
                    draws: int = 8) -> dict:
    """The sample `ringc run` uses: of `draws` samples drawn with `seed`, the one with the
    largest sum of free values (hypothesis draws the all-zero sample first, and a run that
    moves nothing shows little)."""
    samples = draw_samples(sched, n, draws, seed, sizes)
    return max(samples, key=lambda d: sum(v for k in d if sched.data[k].source is None for row in d[k] for v in row))
