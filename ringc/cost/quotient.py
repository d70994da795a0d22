"""Time a translation-symmetric schedule from device 0's events alone.

When `verify.rotation.rotation_unroll` proves that device d runs device 0's events
translated by d (targets, semaphore owners and boxes moved by d; indices, sizes, guards
and compute the same), and the placement's routes are translation invariant
(`Placement.symmetric`: every axis of the instance wraps, or has at most 2 chips), the
timed run of all N devices is N copies of device 0's, each moved by its device id. So
device 0 is timed alone, on the quotient of the network by the translations:

- **Arrivals.** Device 0's signal or DMA deposit on a semaphore of device t, at time tau,
  is (translated by -t) device -t's deposit on device 0's semaphore, at the same tau and
  after the same hop latency (hops depend only on the offset). So every deposit lands in
  device 0's own semaphore of that name and index (`home`), when device 0's own action
  would land on device t.
- **Resources.** A link is identified with its translates: its class is its step per
  axis modulo the axis size (`Placement.direction`: on an axis of 2 chips both ways are
  one class), and each class holds exactly n links, one leaving each device, all carrying
  the same load. A flow's coefficient on a class is the number of links of that class its
  route crosses: the translates of the flow that cross one given link L of class c are
  those moving one of its class-c links onto L, one translate for each (translations act
  freely on links). Likewise a memory: a DMA between devices a and b uses HBM (or VMEM)
  of a and of b, so the translates of it using device 0's HBM are the one moved by -a and
  the one moved by -b: coefficient 2 on the one HBM class when both ends are in HBM. The
  quotient has one resource per class, with one link's (one device's) capacity, named by
  its representative: the link leaving device 0's chip, device 0's HBM and VMEM.
- **Rates.** Max-min fair rates on the quotient equal those of the full network. The
  full problem is invariant under translation (the flows in flight are the translates of
  device 0's, the capacities equal along each class), so its max-min fair allocation,
  which is unique (Bertsekas & Gallager, "Data Networks", 6.5.2), is invariant too:
  translates of a flow get one rate. Then progressive filling runs in lockstep on both
  networks: the load per unit of rate on any link of class c is the sum of device 0's
  flows' coefficients on c, so the links of one class fill together, exactly when the
  quotient's resource c fills, and freeze the same flows. Completion times, and so every
  semaphore credit, follow.
- **Results.** Every device finishes when device 0 does (the estimate); a link's
  utilization is its class's; the links carry n times the quotient's link bytes, and each
  device's links in are busy when the classes are. A hang of device 0 is a hang of every
  device (the symmetric run is a maximal run of the persistent machine: `simulate.py`).
  The critical path walks device 0's events, and names the devices they stand for:
  a deposit from the source event on semaphore owner o, waited for on device w, came
  from device w - o.

With `cores: 2` the representatives are chip 0's cores (processes 0 and N,
`rotation._cores_unroll`): each core is its own translation orbit, so a semaphore or VMEM of
chip t's core c is (moved by -t) chip 0's core c's (`home`, `_memory_class`), HBM and links
are the chip's as above, and the quotient has one VMEM class per core.

Whatever is not proved symmetric is timed on every device (`model.estimate`).
"""

from __future__ import annotations

from ..verify.events import DmaStart, Event, SemId
from ..verify.placement import Link
from ..verify.rotation import Torus
from ..verify.symmetric.program import Group, SymmetricProgram
from .network import Resource
from .timeline import Hardware, TimedMachine

__all__ = ["QuotientMachine", "ASSUMPTION"]

ASSUMPTION = ("timed on the symmetric quotient: every device runs device 0's events translated (proved), over "
              "translation-invariant routes, so device 0's run stands for all (docs/cost-model.md)")


class QuotientMachine(TimedMachine):
    """`TimedMachine` on device 0's events of a translation-symmetric program and the quotient network."""

    def __init__(self, symmetric: SymmetricProgram, hw: Hardware, memory: dict[str, str]):
        if not isinstance(symmetric, SymmetricProgram) or symmetric.group is not Group.TRANSLATION:
            raise ValueError("the quotient times a translation-symmetric program (`rotation.rotation_unroll`)")
        program = symmetric.representatives
        if not hw.placement.symmetric:
            raise ValueError(f"{hw.placement.describe()} has an axis without wraparound: routes are not "
                             "translation invariant, so every device must be timed")
        self.torus = Torus(program.axis_sizes.values())
        self.chips = program.device_count  # (a process or memory c * chips + d is core c's, `cores: 2`)
        super().__init__(program, hw, memory)

    def capacities(self) -> dict[Resource, float]:
        pl, chip = self.hw.placement, self.hw.chip
        caps: dict[Resource, float] = {("link", *pl.representative(link)): self.hw.link_capacity(link)
                                       for link in pl.links}
        caps[("hbm", 0)] = chip.hbm_bandwidth
        for c in range(self.program.cores):  # each core's VMEM (`cores: 2`)
            caps[("vmem", c * self.program.device_count)] = chip.vmem_bandwidth
        return caps

    def _core_base(self, owner: int) -> int:
        """The representative of a process or memory: chip 0's, of the same core."""
        return owner - owner % self.chips

    def home(self, sem: SemId) -> SemId:
        owner = sem[0]
        return (owner - owner % self.chips, sem[1], sem[2])

    def uses(self, a: DmaStart, links: list[Link]) -> dict[Resource, float]:
        uses: dict[Resource, float] = {}
        pl, n, chips = self.hw.placement, self.program.n, self.chips
        classes = []
        for region in (a.src, a.dst):
            if 0 <= region.device < n:
                memory = self.memory[region.buffer]
                classes.append((memory, 0 if memory == "hbm" else region.device - region.device % chips))
        classes += [("link", *pl.representative(link)) for link in links]
        for r in classes:
            uses[r] = uses.get(r, 0.0) + 1.0
        return uses

    def source_device(self, device: int, source: Event, owner: int) -> int:
        n = self.program.device_count  # (a process c * N + d of `cores: 2`: its chip d moved)
        return self._core_base(source.device) + self.torus.sub(device % n, owner % n)

    def translate(self, device: int, target: int) -> int:
        n = self.program.device_count
        return self._core_base(target) + self.torus.add(device % n, target % n)

    def link_bytes(self) -> float:
        return self.program.device_count * super().link_bytes()

    def links_into(self) -> dict[int, list[list[list[float]]]]:
        """Device 0's links in, one per class that carried data (every device's alike)."""
        return {0: [spans for r, spans in self.net.active.items() if r[0] == "link"]}

    @property
    def alike(self) -> int:
        return self.program.device_count

    def stuck_devices(self) -> int:
        return self.program.device_count if self.stuck() else 0
