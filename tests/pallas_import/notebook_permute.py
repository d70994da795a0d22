# A notebook written as a script, in the style of the Pallas distributed tutorial: no
# build(mesh), the kernels run at top level. `ringc check` runs it as it is.
#
# Cell 1: a right permute (correct). Cell 2: a ring all-gather that never waits for its
# receive, so the next step forwards a slot still landing: a race (the planted bug, at the
# copy started on line 73).
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec

num_devices = jax.local_device_count()
assert num_devices > 1, "Please run this notebook with more than one device."
assert "TPU" in jax.devices()[0].device_kind, "Please run this notebook with TPU devices."
print(f"Running with {num_devices} {jax.devices()[0].device_kind} devices.")

mesh = jax.make_mesh((num_devices,), ("x",))
sharding = jax.sharding.NamedSharding(mesh, P(None, "x"))
input_arr = jax.random.uniform(jax.random.key(0), (8, 128 * num_devices))
input_arr = jax.device_put(input_arr, sharding)


def right_permute_kernel(input_ref, output_ref, send_sem, recv_sem):
    my_id = lax.axis_index("x")
    right_neighbor = lax.rem(my_id + 1, num_devices)
    remote_copy_op = pltpu.make_async_remote_copy(
        src_ref=input_ref, dst_ref=output_ref, send_sem=send_sem, recv_sem=recv_sem,
        device_id=(right_neighbor,), device_id_type=pltpu.DeviceIdType.MESH)
    remote_copy_op.start()
    remote_copy_op.wait()


right_permute = pl.pallas_call(
    right_permute_kernel,
    out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
    in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
    out_specs=pl.BlockSpec(memory_space=pl.ANY),
    scratch_shapes=[pltpu.SemaphoreType.DMA] * 2,
)
pallas_result = jax.jit(jax.shard_map(right_permute, mesh=mesh, in_specs=P(None, "x"), out_specs=P(None, "x"),
                                      check_vma=False))(input_arr)
perm = tuple((src, (src + 1) % num_devices) for src in range(num_devices))
xla_result = jax.jit(jax.shard_map(lambda x: lax.ppermute(x, "x", perm), mesh=mesh, in_specs=P(None, "x"),
                                   out_specs=P(None, "x")))(input_arr)
print("Difference |Pallas - lax.ppermute|: ", jnp.mean(jnp.abs(pallas_result - xla_result)))

# Cell 2: all-gather around the ring, the slot for step k forwarded at step k + 1.
input_arr = jax.device_put(jax.random.uniform(jax.random.key(1), (8 * num_devices, 128)),
                           jax.sharding.NamedSharding(mesh, P("x")))


def all_gather_kernel(input_ref, output_ref, local_copy_sem, send_sem, recv_sems):
    outer_step = pl.program_id(0)
    my_id = lax.axis_index("x")
    right_neighbor = lax.rem(my_id + 1, num_devices)
    copy_slot = my_id - outer_step
    copy_slot = lax.rem(copy_slot + num_devices, num_devices)

    @pl.when(outer_step == 0)
    def _():
        local_copy_op = pltpu.make_async_copy(src_ref=input_ref, dst_ref=output_ref.at[my_id], sem=local_copy_sem)
        local_copy_op.start()
        local_copy_op.wait()

    remote_copy_op = pltpu.make_async_remote_copy(
        src_ref=output_ref.at[copy_slot], dst_ref=output_ref.at[copy_slot], send_sem=send_sem,
        recv_sem=recv_sems.at[outer_step], device_id=(right_neighbor,), device_id_type=pltpu.DeviceIdType.MESH)
    remote_copy_op.start()
    remote_copy_op.wait_send()  # the planted bug: no wait_recv, so step k + 1 forwards a slot still landing


all_gather = pl.pallas_call(
    all_gather_kernel,
    out_shape=jax.ShapeDtypeStruct((num_devices, 8, 128), jnp.float32),
    grid_spec=pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=0, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA] * 2 + [pltpu.SemaphoreType.DMA((num_devices - 1,))],
        grid=(num_devices - 1,)),
)
pallas_result = jax.jit(jax.shard_map(all_gather, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                                      check_vma=False))(input_arr)
xla_result = jax.jit(jax.shard_map(lambda x: lax.all_gather(x, "x"), mesh=mesh, in_specs=P("x"),
                                   out_specs=P("x")))(input_arr)
print("Difference |Pallas - lax.all_gather|: ", jnp.mean(jnp.abs(pallas_result - xla_result)))
