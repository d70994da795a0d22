"""The pieces of schedule YAML that the generated families write alike: a chip's row-major
index from per-axis coordinates, the offset lets of a direct send, a schedule's head, and
`body:` entries (`when`), including the tail an all-reduce round ends with (wait for the
load of what arrived, add it into `out`, signal the sender). Each returns YAML text, so a
generator stays an f-string of its schedule with these filled in."""

from __future__ import annotations

from typing import Callable

AXES = "xyz"   # the names of a torus' axes, in row-major order


def row_major(axes: str, coord: Callable[[str], str]) -> str:
    """The row-major index over `axes` of the chip whose coordinate along axis a is `coord(a)`."""
    out = ""
    for a in axes:
        out = coord(a) if not out else f"({out}) * N_{a} + {coord(a)}"
    return out


def core_lets(axes: str, back: bool = True) -> list[str]:
    """The lets of a schedule on both TensorCores (`cores: 2`) with a ring direction per core:
    `dir` (-1 on core 0, whose rings run right, +1 on core 1), `fwd_<a>` (the next chip of the
    core's ring along a) and, with `back`, `back_<a>` (the one before)."""
    lets = ["dir: 2 * core - 1                          # core 0's rings run right (blocks from the left), core 1's left"]
    lets += [f"fwd_{a}: left_{a} if core == 1 else right_{a}   # the next chip of this core's ring along {a}"
             for a in axes]
    if back:
        lets += [f"back_{a}: right_{a} if core == 1 else left_{a}   # and the one before" for a in axes]
    return lets


def far_first(j: str, n: str) -> str:
    """The j-th offset (j = 0 .. n - 1) round an axis of n chips, farthest first: n // 2,
    then n // 2 + 1 and n // 2 - 1, n // 2 + 2 and n // 2 - 2, ... (n even: n - 1 and 1 at j = n - 3, n - 2),
    and 0 last (j = n - 1). A direct send issued at j x the issue time lands after its
    hops, so sending the long routes first makes the last arrival about the diameter plus
    one issue, where nearest first waits N - 1 issues for the farthest."""
    return f"({n} // 2 + (({j} + 1) // 2) * (2 * ({j} % 2) - 1)) % {n}"


def offset_lets(axes: str) -> list[str]:
    """The lets of a direct send's offset, one per `step` = 0 .. N - 2: along each axis a
    the row-major digit j_a of step picks the offset d_a (`far_first`), so every other chip
    comes once (the digits all N_a - 1, offset 0, are step N - 1: never run) and step 0 is
    the chip farthest away. One axis: `o` is the offset."""
    if len(axes) == 1:
        return [f"o: {far_first('step', 'N')}   # the offset, farthest first"]
    lets = []
    for i, a in enumerate(axes):
        inner = " * ".join(f"N_{b}" for b in axes[i + 1:])
        lets.append(f"j_{a}: ({f'step // ({inner})' if inner else 'step'}) % N_{a}")
        lets.append(f"d_{a}: {far_first(f'j_{a}', f'N_{a}')}   # the offset along {a}, farthest first")
    return lets


def head(name: str, collective: str, axes: str, rows: int = 8) -> str:
    """A schedule's first lines after its comment: name, collective, axes and the default params."""
    return (f"name: {name}\ncollective: {collective}\naxes: [{', '.join(axes)}]\n"
            f"params: {{rows: {rows}, cols: 128}}")


def when(cond: str, *actions: str) -> str:
    """One `body:` entry: `actions` done where `cond` holds. An action is its YAML lines,
    unindented, joined by newlines (`"wait: load"`, `"signal: done\\nto: source"`)."""
    lines = [f"  - when: {cond}", "    do:"]
    for action in actions:
        first, *rest = action.split("\n")
        lines += [f"      - {first}", *(f"        {ln}" for ln in rest)]
    return "\n".join(lines)


def own_copy(me: str) -> str:
    """The `copies:` entry of an all-gather's own shard: `x` into `out[me]`, locally."""
    return f'  own: {{src: x, dst: "out[{me}]", sem: local_sem}}'


def keep_own(cond: str) -> str:
    """The `body:` entry that copies the own shard into place (`own_copy`) where `cond` holds."""
    return when(cond, "start: own", "wait: own")


def accumulate(dst: str, src: str, base: str | None = None) -> str:
    """The action `dst = (base or dst) + src`."""
    return f"accumulate: {dst}\nsrc: {src}" + (f"\nbase: {base}" if base else "")


def add_arrivals(first: str, later: str, dst: str, src: str, base: str) -> str:
    """The two entries that add an arrival `src` into `dst`: onto `base` where `first`
    holds (the first arrival), onto `dst` itself where `later` holds."""
    return when(first, accumulate(dst, src, base)) + "\n" + when(later, accumulate(dst, src))


def load_add_signal(step: str, src: str, senders: list[str]) -> str:
    """Phase 2 of an all-reduce round that loaded its arrival into VMEM: wait for the load,
    add `src` into `out` (onto x where `step` is 0), and signal `done` to each of `senders`,
    so that their next call may write the slot again."""
    return "\n".join([when("phase == 2", "wait: load"),
                      add_arrivals(f"phase == 2 and {step} == 0", f"phase == 2 and {step} > 0", "out", src, "x"),
                      when("phase == 2", *(f"signal: done\nto: {s}" for s in senders))])
