"""Rotation symmetry of an unrolled program: device d does device 0's work, shifted by d.

Most ring schedules are one program run on every device with the device id as a
parameter. When that is exactly true of the unrolled events, every analysis that is
invariant under relabelling devices d -> d + 1 (mod N) needs to look at one device only:

- `semaphore_symmetric`: device d's waits, signals and DMA deposits are device 0's with
  every semaphore owner moved by d. Then the semaphore machine commutes with the
  rotation, so holding device p before event i gives device 0's cuts rotated by p
  (`order.compute_order` does one pass instead of N).
- `memory_symmetric`: in addition, the accesses to device d's memory are those to device
  0's with accessors moved by d and every box rotated along each buffer dimension by a
  fixed step per device (blocks indexed by `(me - step) % N`, for instance). Rotation is a
  bijection on each dimension, so it keeps overlaps; with the order symmetric too, a race
  on device d's memory exists iff one exists on device 0's (`races.find_races`).

Both are decided by comparing concrete events, never assumed, so a schedule that treats
some device specially simply gets the full, per-device analysis.
"""

from __future__ import annotations

from .events import Compute, DmaStart, Program, Region, SemId, SemWait, Signal


class _Broken(Exception):
    """The symmetry does not hold (or cannot be expressed, e.g. a send off the ring)."""


def _rel(device: int, d: int, n: int) -> int:
    if not 0 <= device < n:
        raise _Broken
    return (device - d) % n


def _sem_traffic(program: Program, d: int) -> list[tuple | None]:
    n = program.n

    def rel(sem: SemId | None):
        return None if sem is None else (_rel(sem[0], d, n), sem[1], sem[2])

    out: list[tuple | None] = []
    for ev in program.devices[d]:
        a = ev.action
        if isinstance(a, SemWait):
            out.append((rel(a.sem), a.value))
        elif isinstance(a, Signal):
            out.append((rel(a.sem), a.inc, "signal"))
        elif isinstance(a, DmaStart):
            out.append((rel(a.recv_sem), rel(a.send_sem), a.nbytes))
        else:
            out.append(None)
    return out


def semaphore_symmetric(program: Program) -> bool:
    """Every device's semaphore traffic is device 0's, shifted by its id."""
    if program.n < 2:
        return False
    try:
        base = _sem_traffic(program, 0)
        return all(_sem_traffic(program, d) == base for d in range(1, program.n))
    except _Broken:
        return False


def _memory_accesses(program: Program) -> list[list[tuple[tuple, Region]]]:
    """Per device d: (key, region) of every access to d's memory, key = (accessor offset
    from d, event index, role), sorted by key so that devices line up."""
    n = program.n
    per: list[list[tuple[tuple, Region]]] = [[] for _ in range(n)]
    for events in program.devices:
        for ev in events:
            a = ev.action
            regions: list[tuple[str, Region]] = []
            if isinstance(a, DmaStart):
                regions = [("src", a.src), ("dst", a.dst)]
            elif isinstance(a, Compute):  # every region the race analysis sees (`races.accesses`)
                regions = [("dst", a.dst), *((f"read{i}", r) for i, r in enumerate(a.reads))]
            for role, region in regions:
                owner = region.device
                if not 0 <= owner < n:
                    raise _Broken
                per[owner].append(((_rel(ev.device, owner, n), ev.index, role), region))
    for accs in per:
        accs.sort(key=lambda kr: kr[0])
    return per


def memory_symmetric(program: Program) -> bool:
    """Accesses to device d's memory are device 0's, moved by d, with each box rotated by
    d times a per-(buffer, dimension) step. (Only meaningful with `semaphore_symmetric`.)"""
    return memory_steps(program) is not None


def memory_steps(program: Program) -> dict[tuple[str, int], int] | None:
    """The steps of `memory_symmetric` when it holds, else None: (buffer, dim) -> r, device
    d's box along that dim is device 0's moved by d * r (a dim only ever accessed whole has
    none: any step keeps it)."""
    if program.n < 2:
        return None
    try:
        per = _memory_accesses(program)
        step: dict[tuple[str, int], int] = {}

        # Learn the step of every (buffer, dim) from device 1, then check every device.
        for d in range(1, program.n):
            if len(per[d]) != len(per[0]):
                raise _Broken
            for (k0, r0), (kd, rd) in zip(per[0], per[d]):
                if k0 != kd or r0.buffer != rd.buffer or r0.kept != rd.kept:
                    raise _Broken
                extents = program.shapes[r0.buffer]  # boxes span the buffer's full rank
                for dim, ((lo0, hi0), (lod, hid), extent) in enumerate(zip(r0.box, rd.box, extents)):
                    if hi0 - lo0 != hid - lod:
                        raise _Broken
                    if hi0 - lo0 == extent:
                        continue  # the whole dimension: any rotation keeps it
                    if d == 1:
                        step.setdefault((r0.buffer, dim), (lod - lo0) % extent)
                    r = step.get((r0.buffer, dim))
                    if r is None or lod != (lo0 + d * r) % extent:
                        raise _Broken
        return step
    except _Broken:
        return None
