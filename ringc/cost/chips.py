"""Per-chip hardware figures for the cost model, each with its public source.

Sources (cited per number below):
- [HSM] "How to Scale Your Model", part 2 "How to Think About TPUs"
  (https://jax-ml.github.io/scaling-book/tpus/, repository jax-ml/scaling-book, tpus.md,
  revision of 2025-02-18): the chip table (HBM BW/chip, FLOPs/s/chip bf16) and the
  interconnect table (ICI BW/link, one-way). A later revision of the same page lists
  5e10 / 1e11 / 1e11 one-way for v5e / v5p / v6e; we keep the 2025-02 figures, which match
  its worked problems ("TPU v5e with 4.5e10 unidirectional ICI bandwidth", part 3).
- [HSM3] "How to Scale Your Model", part 3 "Sharding", "A note on ICI latency": "Each hop
  over an ICI link has some intrinsic overhead regardless of the data volume. This is
  typically around 1us."
- [TPU_INFO] JAX 0.10.2, jax/_src/pallas/mosaic/tpu_info.py, `get_tpu_info()`: per-TensorCore
  VMEM capacity, HBM bandwidth and bf16 ops/s (multiply by the cores per chip).
- [CLOUD] Cloud TPU system architecture pages (https://cloud.google.com/tpu/docs/v4,
  /v5e, /v5p, /v6e): chips per pod, 2-D vs 3-D torus (hence ICI links per chip).

The H100 (`h100:N`, an HGX H100 8-GPU node, all-to-all through NVSwitch):
- [H100DS] NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100), H100 SXM
  column: "BFLOAT16 Tensor Core 1,979 teraFLOPS*" (* with sparsity; "Specifications are
  one-half lower without sparsity"), "GPU memory bandwidth 3.35TB/s", "NVIDIA NVLink: 900GB/s".
- [DGX] NVIDIA DGX H100 datasheet: "18x NVIDIA NVLink connections per GPU, 900GB/s of
  bidirectional GPU-to-GPU bandwidth"; 4 NVSwitches.
- [HGX] NVIDIA technical blog "Introducing NVIDIA HGX H100" (developer.nvidia.com/blog/
  introducing-nvidia-hgx-h100-...): eight H100s and four third-generation NVSwitches, each
  fully non-blocking, "any H100 to talk to any other H100 concurrently" at 900 GB/s
  bidirectional; "hardware acceleration for collective operations with multicast and NVIDIA
  SHARP in-network reductions".
- [HOPPER] "NVIDIA H100 Tensor Core GPU Architecture" whitepaper: 132 SMs on the H100 SXM5,
  shared memory configurable up to 228 KB per SM.
- [NCCL] NCCL's tuning model, src/graph/tuning.cc (NVIDIA/nccl, commit b6475625): `hwLat`
  NVLink, Ring, LL protocol: 0.6 us per ring step.
"""

from __future__ import annotations

from dataclasses import dataclass

# [HSM3]: about 1 us per ICI hop, whatever the size.
HOP_LATENCY = 1e-6
# The time the issuing core spends starting one DMA (descriptor push, semaphore set-up).
# No public figure; an assumption, overridable with --dma-overhead. [HSM3] measured ~8 us
# for a 3-hop latency-bound v5e all-gather that its 1 us/hop model puts at 3 us, so the
# per-step overheads on top of the hop latency are of this order.
DMA_ISSUE_OVERHEAD = 0.5e-6


@dataclass(frozen=True)
class Chip:
    name: str
    bf16_flops: float      # peak MXU FLOP/s per chip
    hbm_bandwidth: float   # bytes/s per chip
    vmem_bytes: int        # VMEM per TensorCore (a GPU: shared memory of all its SMs)
    tensor_cores: int
    ici_links: int         # ICI ports per chip (a 3-D torus has 6 neighbours, a 2-D one 4)
    link_bandwidth: float  # one-way bytes/s of one ICI link (of one NVLink on a GPU)
    # "ici": links to grid neighbours (a TPU); "nvswitch": all of them into one switch
    # fabric, so a GPU's port to it carries `ici_links x link_bandwidth` each way.
    fabric: str = "ici"
    hop_latency: float = HOP_LATENCY            # the default `--hop-latency`
    dma_overhead: float = DMA_ISSUE_OVERHEAD    # the default `--dma-overhead`

    @property
    def tpu(self) -> bool:
        """A TPU (ICI links): its VMEM laid out in (8, 128) tiles (`cost.model.tiled_bytes`),
        its scoped VMEM raised by a kernel's `vmem_limit_mib`; a GPU on NVSwitch has neither."""
        return self.fabric == "ici"

    @property
    def port_bandwidth(self) -> float:
        """One way, a GPU's NVLinks together: its port into (and out of) the switch fabric."""
        return self.ici_links * self.link_bandwidth

    @property
    def vmem_bandwidth(self) -> float:
        # [HSM] "VMEM bandwidth is around 22x higher than HBM bandwidth". (For the H100 the
        # same ratio stands in for shared memory: no figure is sourced; docs/cost-model.md.)
        return 22 * self.hbm_bandwidth


CHIPS: dict[str, Chip] = {
    "v4": Chip(
        "v4",
        bf16_flops=2.75e14,     # [HSM] TPU v4p 2.75e14; [TPU_INFO] "TPU v4": 2.75e14 // 2 per core, 2 cores
        hbm_bandwidth=1.2e12,   # [HSM] 1.2e12; [TPU_INFO] 1.23e12 per chip
        vmem_bytes=16 * 2**20,  # [TPU_INFO] "TPU v4": 16 MiB per core
        tensor_cores=2,         # [TPU_INFO] "TPU v4": 2 TensorCores per chip (megacore)
        ici_links=6,            # [HSM] "TPU v4 and TPU v5p are connected to the nearest 6 neighbors"; [CLOUD] v4 3D torus
        link_bandwidth=4.5e10,  # [HSM] interconnect table, TPU v4p one-way
    ),
    "v5e": Chip(
        "v5e",
        bf16_flops=1.97e14,     # [HSM] 1.97e14; [TPU_INFO] "TPU v5e": 1.97e14; [CLOUD] 197 TFLOPs
        hbm_bandwidth=8.1e11,   # [HSM] 8.1e11; [TPU_INFO] 8.20e11; [CLOUD] 819 GBps
        vmem_bytes=128 * 2**20,  # [TPU_INFO] "TPU v5e": 128 MiB per core; [HSM] "128 MiB on TPU v5e"
        tensor_cores=1,         # [TPU_INFO] "TPU v5e": 1 TensorCore per chip
        ici_links=4,            # [HSM] v5e and v6e connect "the 4 nearest neighbors"; [CLOUD] v5e 2D torus
        link_bandwidth=4.5e10,  # [HSM] interconnect table, TPU v5e one-way
    ),
    "v5p": Chip(
        "v5p",
        bf16_flops=4.59e14,     # [HSM] 4.59e14; [TPU_INFO] "TPU v5p": 4.59e14 // 2 per core, 2 cores
        hbm_bandwidth=2.8e12,   # [HSM] 2.8e12 ([TPU_INFO] says 2.46e12 per chip)
        vmem_bytes=64 * 2**20,  # [TPU_INFO] "TPU v5p": 64 MiB per core
        tensor_cores=2,         # [TPU_INFO] "TPU v5p": 2 TensorCores per chip
        ici_links=6,            # [HSM] nearest 6 neighbours (3D torus); [CLOUD] v5p 3D torus
        link_bandwidth=9e10,    # [HSM] interconnect table, TPU v5p one-way
    ),
    "v6e": Chip(
        "v6e",
        bf16_flops=9.2e14,      # [HSM] 9.20e14; [TPU_INFO] "TPU v6e": 9.20e14
        hbm_bandwidth=1.6e12,   # [HSM] 1.6e12; [TPU_INFO] 1.64e12
        vmem_bytes=128 * 2**20,  # [TPU_INFO] "TPU v6e": 128 MiB per core
        tensor_cores=1,         # [TPU_INFO] "TPU v6e": 1 TensorCore per chip
        ici_links=4,            # [HSM] 4 nearest neighbours (2D torus); [CLOUD] v6e 2D torus
        link_bandwidth=9e10,    # [HSM] interconnect table, TPU v6e one-way
    ),
    "h100": Chip(
        "h100",
        bf16_flops=9.895e14,    # [H100DS] 1,979 TFLOPS with sparsity, one half without
        hbm_bandwidth=3.35e12,  # [H100DS] H100 SXM 3.35 TB/s
        # [HOPPER] shared memory up to 228 KB per SM, 132 SMs on the H100 SXM: a kernel whose
        # grid has a block per SM stages the schedule's VMEM arrays through all of them.
        vmem_bytes=132 * 228 * 1024,
        tensor_cores=1,         # one JAX device per GPU
        ici_links=18,           # [DGX] 18 NVLink connections per GPU
        link_bandwidth=2.5e10,  # [DGX] 900 GB/s bidirectional over 18 links: 25 GB/s each way per link
        fabric="nvswitch",      # [HGX] all 18 into 4 non-blocking NVSwitches: all-to-all
        hop_latency=0.6e-6,     # [NCCL] NVLink ring step, LL protocol: the fastest step NCCL's model prices
    ),
}

DEFAULT_CHIP = "v5e"  # for topologies that name no generation (ring:N, torus:AxB, ...)


def chip(name: str) -> Chip:
    try:
        return CHIPS[name]
    except KeyError:
        raise ValueError(f"unknown chip {name!r}; known: {', '.join(CHIPS)}") from None


def too_few_cores(name: str, cores: int, generation: str) -> str | None:
    """What refuses schedule `name` run on `cores` TensorCores per chip (`cores: 2`) on a
    chip of `generation` that has fewer (v5e, v6e), or None where it has enough. The one
    text `check`, `cost` and `compile` give, each with its own fix."""
    have = chip(generation).tensor_cores
    if cores <= have:
        return None
    return f"`{name}` runs on {cores} TensorCores per chip (`cores: {cores}`), and a {generation} chip has {have}"


def of_topology(topo) -> Chip:
    """The chip a topology's figures default to: its generation's (v5p:4x4x4: v5p), else
    `DEFAULT_CHIP` (ring:N, torus:AxB name none)."""
    return chip(topo.generation or DEFAULT_CHIP)
