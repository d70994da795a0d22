"""The runtime helpers of every emitted Mosaic GPU kernel module (`ringc emit --target mgpu`),
as real, importable Python, beside `runtime.py` (whose target-neutral helpers the GPU modules
share: sizes, parameters, `_checked`, random inputs).

`ringc.codegen.mgpu` copies the helpers a module uses into it by source, in the order they
appear here; a helper here replaces one of the same name in `runtime.py`.

How a schedule runs on a GPU (the emitted module's docstring says the same to its reader):
every GPU runs the schedule's steps in order in each of its thread blocks; block b owns
columns [b * tile, (b + 1) * tile) of every buffer (the last dimension) and moves and computes
only those. Semaphores are per block (Mosaic GPU scratch semaphores), so block b of one GPU
signals block b of another: each block pair runs the schedule on its own columns, as if the
buffers were that narrow. A block has two warpgroups: warpgroup 0 runs the schedule's ops, and
warpgroup 1 is the block's copy engine, as a TPU's DMA engine is: a copy's `start` hands it
over and returns; the copier, in the order copies were started, moves it through its SMEM a
chunk of rows at a time (a TMA load, then a TMA store, into a peer's memory through
`plgpu.remote_ref` for a remote copy), then signals the receiving block's semaphore by the
bytes moved, and our own DMA semaphore likewise, as a TPU DMA engine counts bytes on both;
`wait_send` and `wait_recv` wait for those bytes, as on a TPU.

The values below stand in for the emitted module's constants so that this module imports on
its own (see runtime.py).
"""

import dataclasses
import itertools
import math
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

NAME = "mgpu_runtime"
AXIS = "x"

# A TMA box has at most 256 elements along each dimension: a staging chunk is no larger.
_MAX_BOX = 256
# Bytes of one SMEM staging buffer at most (two per block, well inside an H100's 227 KiB).
_MAX_STAGE_BYTES = 32 * 1024


def _device(coord, axis, mesh_axes):
    """The device id Mosaic GPU takes (`remote_ref`, `semaphore_signal`) of the GPU at `coord`
    along the kernel's mesh axis: the kernels ringc emits for GPUs run on a one-axis mesh."""
    if tuple(mesh_axes) != (axis,):
        raise ValueError(f"{NAME}: the Mosaic GPU kernel runs on a mesh of the one axis {axis!r}; "
                         f"this mesh has axes {tuple(mesh_axes)}")
    return coord


def _blocks(cols, dtype, blocks, rows=()):
    """Thread blocks per GPU: `blocks` (None: the GPU's SM count), lowered to the largest
    count that splits the `cols` columns into equal tiles of a multiple of 128 bytes (Mosaic
    GPU issues a TMA copy from a whole warpgroup, 128 threads, so it moves a multiple of 128
    bytes), and so that a chunk of `rows` rows (each computed region's) of a tile holds a
    multiple of 128 elements (a warpgroup's registers hold SMEM data so). Raises when none
    does."""
    if blocks is None:
        blocks = jax.devices()[0].core_count
    if not isinstance(blocks, int) or blocks < 1:
        raise ValueError(f"{NAME}: blocks={blocks!r}: give a positive number of thread blocks")
    least = math.lcm(max(1, 128 // jnp.dtype(dtype).itemsize),
                     *(128 // math.gcd(128, math.gcd(r, _MAX_BOX)) for r in rows))
    for count in range(min(blocks, cols), 0, -1):
        if cols % count == 0 and (cols // count) % least == 0:
            return count
    raise ValueError(f"{NAME}: the last dimension ({cols}) must be a multiple of {least} "
                     f"elements of {jnp.dtype(dtype).name} to split it into tiles (128 bytes, and "
                     f"128 elements in a computed chunk of {', '.join(map(str, rows))} rows)")


def _row_blocks(rows, blocks):
    """Thread blocks per GPU for a schedule with a matmul, whose blocks split the rows:
    `blocks` (None: the GPU's SM count), lowered to the largest count that gives each block a
    multiple of 64 rows (a warpgroup's wgmma tile). Raises when none does."""
    if blocks is None:
        blocks = jax.devices()[0].core_count
    if not isinstance(blocks, int) or blocks < 1:
        raise ValueError(f"{NAME}: blocks={blocks!r}: give a positive number of thread blocks")
    for count in range(min(blocks, rows // 64), 0, -1):
        if rows % (count * 64) == 0:
            return count
    raise ValueError(f"{NAME}: the matmul's rows per GPU ({rows}) must be a multiple of 64 (a wgmma "
                     "tile) to split them among thread blocks; pass larger shapes")


def _chunk_cols(width):
    """Columns of one SMEM staging buffer: the most that divide `width` within a TMA box."""
    return max(d for d in range(1, min(width, _MAX_BOX) + 1) if width % d == 0)


def _chunk_rows(rows, width, dtype):
    """Rows of one SMEM staging buffer of `width` columns: the most that divide `rows` (each
    region's row count is cut by the gcd, see `_each_chunk`) within a TMA box and the budget."""
    most = max(1, min(_MAX_BOX, _MAX_STAGE_BYTES // (width * jnp.dtype(dtype).itemsize)))
    return max(d for d in range(1, min(rows, most) + 1) if rows % d == 0)


def _tile(ref, dim, block, tile):
    """Block `block`'s tile of a GMEM ref along dimension `dim`."""
    index = [slice(None)] * len(ref.shape)
    index[dim] = pl.ds(block * tile, tile)
    return ref.at[tuple(index)]


def _each_chunk(shape, stage, body):
    """Call `body(index, rows, cols)` for each chunk of a region of `shape` that fits in
    `stage`: every index of the leading dimensions, then the last two in chunks of as many
    rows and columns as `stage` has (cut to divide them; a Mosaic GPU loop over the rows
    when there are several chunks of them)."""
    *lead, rows, cols = shape
    chunk = math.gcd(rows, stage.shape[0])
    width = math.gcd(cols, stage.shape[1])
    for index in itertools.product(*map(range, lead)):
        for c in range(0, cols, width):
            columns = slice(None) if width == cols else pl.ds(c, width)
            if rows == chunk:
                body((*index, slice(None), columns), chunk, width)
                continue

            @pl.loop(0, rows // chunk)
            def _chunk(r, index=index, columns=columns):
                body((*index, pl.ds(r * chunk, chunk), columns), chunk, width)


def _load(src, view, barrier):
    """TMA load of a GMEM chunk into an SMEM view, waited for."""
    plgpu.copy_gmem_to_smem(src, view, barrier)
    plgpu.barrier_wait(barrier)


def _store(view, dst):
    """TMA store of an SMEM view into GMEM (ours or a peer's), waited for until it completes:
    the bytes have landed and the view may be written again."""
    plgpu.copy_smem_to_gmem(view, dst)
    plgpu.wait_smem_to_gmem(0, wait_read_only=False)


@dataclasses.dataclass
class _Multicast:
    """The broadcast copies (BROADCASTS) of one copy warpgroup, sent by multimem: a broadcast's
    starts send one region to every other GPU, one right after another, so its first start
    stores the data on every GPU of `axis` at once (`plgpu.multimem_store`: it crosses this
    GPU's NVLink port once, and the NVSwitch delivers it), and every start then signals as
    its own copy would. `stored` names those stored so far; the grid is unrolled when traced,
    so that is decided then."""
    axis: object
    stored: set = dataclasses.field(default_factory=set)


@dataclasses.dataclass(frozen=True)
class _Copy:
    """One schedule copy on one block: `src` to `dst` (GMEM, the block's tiles), on GPU `device`
    (None: this one), done by the block's copy warpgroup, as a TPU DMA engine does it.

    Both warpgroups run the schedule's control flow with their own `_Copy` objects (`copier`
    says which). In the schedule's warpgroup, `start` hands the copy over (signals `issued`)
    and returns; `wait_send` waits until our DMA semaphore `sem` (a remote copy's send
    semaphore, a local copy's semaphore) holds the copy's bytes and takes them, so the source
    may be written again; `wait_recv` does the same on `recv_sem` for the incoming copy. In
    the copy warpgroup, `start` waits for the hand-over, copies every chunk through its SMEM
    buffer `stage` (TMA loads land on `barrier`), waits for the stores, then signals the
    receiving block's `recv_sem` and our `sem` by the bytes copied (a release), as a TPU DMA
    engine counts bytes on both semaphores. The copier waits for nothing else, so it may be
    any number of copies behind.

    A broadcast copy (`broadcast` its name, `multicast` the copier's `_Multicast`) moves its
    data at its first start by one multimem store, through registers, and only signals at
    the others; with `multicast` None it is copied to each GPU as any other."""
    src: object
    dst: object
    stage: object
    barrier: object
    issued: object
    sem: object
    copier: bool
    recv_sem: object = None
    device: object = None
    broadcast: str = ""
    multicast: object = None

    def start(self):
        if not self.copier:
            pl.semaphore_signal(self.issued, 1)
            return
        pl.semaphore_wait(self.issued, 1)
        if self.broadcast and self.multicast is not None:
            if self.broadcast not in self.multicast.stored:
                self.multicast.stored.add(self.broadcast)
                self.store_everywhere(self.multicast.axis)
        else:
            self.copy()
        if self.device is not None:
            pl.semaphore_signal(self.recv_sem, self.nbytes(), device_id=self.device)
        pl.semaphore_signal(self.sem, self.nbytes())

    def copy(self):
        """Every chunk through SMEM by TMA, into the destination (a peer's, when remote)."""
        dst = self.dst if self.device is None else plgpu.remote_ref(self.dst, self.device)

        def chunk(index, rows, cols):
            view = self.stage.at[pl.ds(0, rows), pl.ds(0, cols)]
            _load(self.src.at[index], view, self.barrier)
            _store(view, dst.at[index])

        _each_chunk(self.src.shape, self.stage, chunk)

    def store_everywhere(self, axis):
        """Every chunk TMA-loaded into SMEM, then stored from registers into the destination
        on every GPU along `axis` by one multimem store (ours included)."""

        def chunk(index, rows, cols):
            view = self.stage.at[pl.ds(0, rows), pl.ds(0, cols)]
            _load(self.src.at[index], view, self.barrier)
            plgpu.multimem_store(view[...], self.dst.at[index], axis)

        _each_chunk(self.src.shape, self.stage, chunk)

    def nbytes(self):
        """The bytes this block's part of the copy moves."""
        return math.prod(self.src.shape) * jnp.dtype(self.src.dtype).itemsize

    def wait_send(self):
        if not self.copier:
            pl.semaphore_wait(self.sem, self.nbytes())

    def wait_recv(self):
        if not self.copier and self.device is not None:
            pl.semaphore_wait(self.recv_sem, self.nbytes())

    def wait(self):
        self.wait_send()
        self.wait_recv()


def _compute(fn, dst, srcs, stages, barrier):
    """`dst = fn(*srcs)` elementwise on GMEM regions of one block, a chunk of rows at a time:
    each source TMA-loaded into its own SMEM buffer, the result written into the first,
    fenced for the TMA engine (`commit_smem`) and TMA-stored."""

    def chunk(index, rows, cols):
        views = [stage.at[pl.ds(0, rows), pl.ds(0, cols)] for stage in stages]
        for src, view in zip(srcs, views):
            _load(src.at[index], view, barrier)
        views[0][...] = fn(*(view[...] for view in views[:len(srcs)])).astype(dst.dtype)
        plgpu.commit_smem()
        _store(views[0], dst.at[index])

    _each_chunk(dst.shape, stages[0], chunk)


def _matmul_tile_n(n):
    """Columns of a matmul's output tile: the most of 256, 128 and 64 that divide `n`."""
    for tile in (256, 128, 64):
        if n % tile == 0:
            return tile
    raise ValueError(f"{NAME}: the matmul's output has {n} columns; wgmma needs a multiple of 64")


def _matmul_smem(dtype):
    """The tile depth of a matmul's operands in SMEM, and their transforms: 128-byte swizzled
    rows, as wgmma reads 16-bit operands."""
    itemsize = jnp.dtype(dtype).itemsize
    if itemsize != 2:
        raise ValueError(f"{NAME}: wgmma multiplies 16-bit operands from row-major tiles; the inputs are "
                         f"{jnp.dtype(dtype).name}: pass bfloat16 or float16 inputs")
    tile_k = 128 // itemsize
    return tile_k, (plgpu.TilingTransform((8, tile_k)), plgpu.SwizzleTransform(128))


def _matmul(a, b, out, out_stage, a_smem, b_smem, loaded):
    """`out = a @ b`, accumulated in float32 and cast to out's dtype, by one warpgroup: for
    each tile of `out` (`out_stage`'s shape), a loop over k that TMA-loads the next tiles of a
    and b into the other of two SMEM slots (`a_smem`, `b_smem`, landing on `loaded`) while
    wgmma multiplies this step's into a register accumulator; then the accumulator through
    `out_stage` into `out` by a TMA store."""
    (m, k), (_, n) = a.shape, b.shape
    tile_m, tile_n = out_stage.shape
    tile_k = a_smem.shape[-1]
    if m % tile_m or n % tile_n or k % tile_k:
        raise ValueError(f"{NAME}: the matmul's shapes ({m} x {k} @ {k} x {n}) must be multiples of "
                         f"{tile_m} rows, {tile_n} columns and {tile_k} of depth")
    steps = k // tile_k
    for mi in range(m // tile_m):
        for ni in range(n // tile_n):

            def load(kk, slot, mi=mi, ni=ni):
                rows, cols = pl.ds(mi * tile_m, tile_m), pl.ds(ni * tile_n, tile_n)
                depth = pl.ds(kk * tile_k, tile_k)
                plgpu.copy_gmem_to_smem(a.at[rows, depth], a_smem.at[slot], loaded.at[slot])
                plgpu.copy_gmem_to_smem(b.at[depth, cols], b_smem.at[slot], loaded.at[slot])

            def tile(acc, mi=mi, ni=ni, load=load):
                load(0, 0)

                @pl.loop(0, steps)
                def _step(kk):
                    slot = lax.rem(kk, 2)

                    @pl.when(kk + 1 < steps)
                    def _next():
                        load(kk + 1, 1 - slot)

                    plgpu.barrier_wait(loaded.at[slot])
                    plgpu.wgmma(acc, a_smem.at[slot], b_smem.at[slot])
                    plgpu.wgmma_wait(0)

                out_stage[...] = acc[...].astype(out.dtype)
                plgpu.commit_smem()
                _store(out_stage, out.at[pl.ds(mi * tile_m, tile_m), pl.ds(ni * tile_n, tile_n)])

            pl.run_scoped(tile, plgpu.ACC((tile_m, tile_n), jnp.float32))


def _barrier(neighbours, sem, axis, mesh_axes):
    """Barrier with `neighbours` (device indices along `axis`): signal each one's block, then
    wait for as many signals. Mosaic GPU zeroes semaphores before every launch and launches
    no GPU before all are ready, so one round suffices where a TPU needs two."""
    for target in neighbours:
        pl.semaphore_signal(sem, 1, device_id=_device(target, axis, mesh_axes))
    pl.semaphore_wait(sem, len(neighbours))


def _no_interpret(interpret):
    """Mosaic GPU interpret mode runs no collective: a GPU kernel runs on GPUs only."""
    if interpret not in (None, False):
        raise ValueError(f"{NAME}: Mosaic GPU interpret mode runs no collective; run this kernel "
                         "on two or more Hopper GPUs, and check it anywhere with `ringc check`")
