"""Hand-written Pallas TPU kernels for three of the tutorial's algorithms, written directly
in Pallas the way a kernel engineer would, as baselines for the emitted kernels:

- `all_reduce`: the unidirectional ring all-reduce (double-buffered HBM scratch, capacity
  handshake, double barrier);
- `reduce_scatter`: the bidirectional reduce-scatter over a (step, phase) grid;
- `reduce_scatter_large`: the same with blocks kept in HBM and the accumulation done by a
  nested `emit_pipeline`.

Each `build_*` returns a jitted `shard_map` function over the same global arrays (and with
the same PartitionSpecs) as the emitted module of the matching library schedule, so both
can be fed the same inputs and compared.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec
MESH = pl.DeviceIdType.MESH


def _ring(n):
    """(me, left, right) along axis "x"."""
    me = lax.axis_index("x")
    return me, lax.rem(me + n - 1, n), lax.rem(me + 1, n)


def _signal(sem, device):
    pl.semaphore_signal(sem, 1, device_id=(device,), device_id_type=MESH)


def _neighbour_barrier(left, right):
    """Signal both neighbours on the barrier semaphore and wait for both, twice: the second
    round, on a kernel-scoped semaphore, keeps a neighbour's next call from releasing us."""
    sem = pltpu.get_barrier_semaphore()
    _signal(sem, left)
    _signal(sem, right)
    pl.semaphore_wait(sem, 2)

    @functools.partial(pl.run_scoped, again=pltpu.SemaphoreType.REGULAR)
    def _(again):
        _signal(again, left)
        _signal(again, right)
        pl.semaphore_wait(again, 2)


def _send(src, dst, send_sem, recv_sem, device):
    return pltpu.make_async_remote_copy(src_ref=src, dst_ref=dst, send_sem=send_sem, recv_sem=recv_sem,
                                        device_id=(device,), device_id_type=MESH)


# ---------------------------------------------------------------- all-reduce


def build_all_reduce(mesh, rows: int, cols: int, interpret):
    n = mesh.shape["x"]

    def kernel(x, out, slots, copy_sem, recv_sem, send_sem, room, incoming):
        step = pl.program_id(0)
        me, left, right = _ring(n)
        cur = lax.rem(step, 2)
        nxt = 1 - cur

        @pl.when(step == 0)
        def _():
            _neighbour_barrier(left, right)
            out[...] = jnp.zeros_like(out)
            incoming[...] = jnp.zeros_like(incoming)
            first = _send(x, slots.at[cur], send_sem, recv_sem, right)
            first.start()
            first.wait()

        _signal(room, left)  # the slot we read this step is free for the left neighbour's next send
        fetch = pltpu.make_async_copy(slots.at[cur], incoming, copy_sem)
        fetch.start()
        pl.semaphore_wait(room, 1)
        forward = _send(slots.at[cur], slots.at[nxt], send_sem, recv_sem, right)
        forward.start()
        fetch.wait()
        out[...] += incoming[...]
        forward.wait()

    scratch = [pltpu.SemaphoreType.DMA] * 3 + [pltpu.SemaphoreType.REGULAR, pltpu.VMEM((rows, cols), jnp.float32)]
    return _ring_call(kernel, mesh, (mesh.shape["x"],), pltpu.VMEM, scratch, (rows, cols), None,
                      P(None, "x"), P(None, "x"), interpret)


def _ring_call(kernel, mesh, grid, space, scratch, shape, per_device_shape, in_spec, out_spec, interpret):
    """The jitted shard_map of a ring kernel with input x and output out (in `space`), and a
    double-buffered HBM scratch of `shape` allocated as a second output."""
    call = pl.pallas_call(
        kernel,
        out_shape=(jax.ShapeDtypeStruct(shape, jnp.float32), jax.ShapeDtypeStruct((2, *shape), jnp.float32)),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=0,
            in_specs=[pl.BlockSpec(memory_space=space)],
            out_specs=[pl.BlockSpec(memory_space=space), pl.BlockSpec(memory_space=pl.ANY)],
            grid=grid,
            scratch_shapes=scratch,
        ),
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=interpret,
    )

    def per_device(x):
        return call(x if per_device_shape is None else x.reshape(per_device_shape))[0]

    return jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(in_spec,), out_specs=out_spec, check_vma=False))


# ---------------------------------------------------------------- bidirectional reduce-scatter
#
# Top halves of the partial sums travel left, bottom halves right; phase 0 accumulates the
# left-moving half while the right-moving one is in flight, phase 1 the other way round.


def _reduce_scatter_kernel(n, half, accumulate_half):
    """The (step, phase) kernel shared by both reduce-scatters; `accumulate_half(slot, phase,
    device, rows)` adds input block `device`'s `rows` into the partial sum in `slot`."""

    def kernel(x, out, slots, copy_sem, lrecv, lsend, rrecv, rsend, lroom, rroom, *vmem):
        step, phase = pl.program_id(0), pl.program_id(1)
        me, left, right = _ring(n)
        first = jnp.logical_and(step == 0, phase == 0)
        final = step == n - 1
        cur = lax.rem(step, 2)
        nxt = 1 - cur
        top, bottom = pl.ds(0, half), pl.ds(half, half)

        seed_left = _send(x.at[me, top], slots.at[cur, top], lsend, lrecv, left)
        seed_right = _send(x.at[me, bottom], slots.at[cur, bottom], rsend, rrecv, right)
        pass_left = _send(slots.at[cur, top], slots.at[nxt, top], lsend, lrecv, left)
        # The right-moving half is sent for the next step: slots flipped.
        pass_right = _send(slots.at[nxt, bottom], slots.at[cur, bottom], rsend, rrecv, right)

        @pl.when(first)
        def _():
            _neighbour_barrier(left, right)
            if vmem:
                out[...] = jnp.zeros_like(out)
                vmem[0][...] = jnp.zeros_like(vmem[0])
            seed_left.start()
            seed_left.wait()
            seed_right.start()
            _signal(rroom, left)
            _signal(lroom, right)

        @pl.when(jnp.logical_and(~first, phase == 0))
        def _():
            pl.semaphore_wait(rroom, 1)
            pass_right.start()

        @pl.when(jnp.logical_and(~first, phase == 1))
        def _():
            pl.semaphore_wait(lroom, 1)
            pass_left.start()

        accumulate_half(x, out, slots, copy_sem, vmem, cur, phase, final,
                        lax.rem(me + step + 1, n), lax.rem(me + n - lax.rem(step + 1, n), n))

        @pl.when(first)
        def _():
            seed_right.wait()

        @pl.when(jnp.logical_and(~first, phase == 0))
        def _():
            pass_right.wait()
            _signal(rroom, left)

        @pl.when(jnp.logical_and(~first, phase == 1))
        def _():
            pass_left.wait()
            _signal(lroom, right)

        @pl.when(jnp.logical_and(final, phase == 0))
        def _():
            pl.semaphore_wait(rroom, 1)

        @pl.when(jnp.logical_and(final, phase == 1))
        def _():
            pl.semaphore_wait(lroom, 1)

    return kernel


def _reduce_scatter_call(kernel, mesh, rows, cols, space, extra_scratch, interpret):
    n = mesh.shape["x"]
    scratch = [pltpu.SemaphoreType.DMA] * 5 + [pltpu.SemaphoreType.REGULAR] * 2 + extra_scratch
    return _ring_call(kernel, mesh, (n, 2), space, scratch, (rows, cols), (n, rows, cols),
                      P(None, "x"), P("x", None), interpret)


def build_reduce_scatter(mesh, rows: int, cols: int, interpret):
    n, half = mesh.shape["x"], rows // 2

    def accumulate_half(x, out, slots, copy_sem, vmem, cur, phase, final, left_src, right_src):
        (acc,) = vmem
        here = pl.ds(phase * half, half)
        load = pltpu.make_async_copy(slots.at[cur, here], acc, copy_sem)
        load.start()
        load.wait()

        @pl.when(jnp.logical_and(~final, phase == 0))
        def _():
            acc[...] += x[left_src, pl.ds(0, half)]

        @pl.when(jnp.logical_and(~final, phase == 1))
        def _():
            acc[...] += x[right_src, pl.ds(half, half)]

        store = pltpu.make_async_copy(acc, slots.at[cur, here], copy_sem)
        store.start()
        store.wait()

        @pl.when(final)
        def _():
            out[here, :] = acc[...]

    kernel = _reduce_scatter_kernel(n, half, accumulate_half)
    return _reduce_scatter_call(kernel, mesh, rows, cols, pltpu.VMEM, [pltpu.VMEM((half, cols), jnp.float32)],
                                interpret)


def build_reduce_scatter_large(mesh, rows: int, cols: int, bm: int, bn: int, interpret):
    """Blocks stay in HBM; `emit_pipeline` streams (bm, bn) tiles of the input and of the
    partial sum through VMEM and writes the sum back in place (jax 0.10 has no
    `should_accumulate_out`: the partial sum is read and written through two specs)."""
    n, half = mesh.shape["x"], rows // 2
    tile = pl.BlockSpec((bm, bn), lambda i, j: (i, j))
    add_tiles = pltpu.emit_pipeline(
        lambda part, old, new: new.__setitem__(..., old[...] + part[...]),
        grid=(half // bm, cols // bn), in_specs=[tile, tile], out_specs=[tile])

    def accumulate_half(x, out, slots, copy_sem, vmem, cur, phase, final, left_src, right_src):
        @pl.when(jnp.logical_and(~final, phase == 0))
        def _():
            top = slots.at[cur, pl.ds(0, half)]
            add_tiles(x.at[left_src, pl.ds(0, half)], top, top)

        @pl.when(jnp.logical_and(~final, phase == 1))
        def _():
            bottom = slots.at[cur, pl.ds(half, half)]
            add_tiles(x.at[right_src, pl.ds(half, half)], bottom, bottom)

        @pl.when(final)
        def _():
            here = pl.ds(phase * half, half)
            store = pltpu.make_async_copy(slots.at[cur, here], out.at[here], copy_sem)
            store.start()
            store.wait()

    kernel = _reduce_scatter_kernel(n, half, accumulate_half)
    if interpret:
        _tpu_info_for_cpu()
    return _reduce_scatter_call(kernel, mesh, rows, cols, pl.ANY, [], interpret)


def _tpu_info_for_cpu():
    """emit_pipeline asks for the TPU generation; on CPU (interpret mode) say v5e."""
    from jax._src.pallas.mosaic import tpu_info

    tpu_info.registry.setdefault("cpu", lambda: tpu_info.get_tpu_info_for_chip(tpu_info.ChipVersion.TPU_V5E, 1))
