"""`cores: 2`: a chip's two TensorCores (v5p, v4) each a process of its own
(`Unroller.core_events`): its own VMEM and semaphores, the chip's HBM shared, remote
copies and signals to the same core of the target chip. The verifier checks them as it
checks devices (and the explorer, the oracle, agrees on every case below); the cost model
issues DMAs per core and shares the chip's links; the emitter writes `pl.kernel` over the
TensorCore mesh, which libtpu compiles for v5p; interpret mode cannot run it (refused)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import ringc
from ringc.cli import main
from ringc.cost.model import estimate, hardware
from ringc.errors import ScheduleError
from ringc.verify.check import check
from ringc.verify.explore import explore
from ringc.verify.unroll import unroll

HERE = Path(__file__).parent / "cores"
GOOD = (HERE / "all_gather_two_cores.yaml").read_text()
MiB = 2**20


def variant(old: str, new: str, name: str) -> ringc.Schedule:
    assert old in GOOD, old
    return ringc.load_text(GOOD.replace(old, new, 1), f"all_gather_two_cores[{name}]")


# (name, edit, the finding kinds `check` must report at N=4)
BROKEN = [
    # both cores move the left half: they write the same HBM rows, and the right half stays unwritten
    ("same_half", ("c0: core * half", "c0: 0"), {"race", "wrong_result"}),
    # core 1 sends to the left but forwards the slots of a rightward ring
    ("wrong_slot", ("slot: (me - dir * step) % N", "slot: (me - step) % N"), {"race", "wrong_result"}),
    # core 1 never copies its own shard's half into `out`
    ("core1_no_own", ("  - when: step == 0\n", "  - when: step == 0 and core == 0\n"), {"wrong_result"}),
    # only core 0 starts its forwards: core 1 waits for bytes that never come
    ("core1_never_sends", ("  - start: forward\n", "  - when: core == 0\n    do: [{start: forward}]\n"), {"hang"}),
    # core 1 never waits for its sends: its send semaphore ends non-zero, its DMA outlives the kernel
    ("core1_no_wait_send", ("  - wait: forward\n",
                            "  - when: core == 0\n    do: [{wait: forward}]\n"
                            "  - when: core == 1\n    do: [{wait_recv: forward}]\n"), {"dma_not_waited"}),
]


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_two_cores_all_gather_is_proved_and_the_explorer_agrees(n):
    sched = ringc.load_text(GOOD, "all_gather_two_cores.yaml")
    report = check(sched, n)
    assert report.ok, report.to_text()
    program = unroll(sched, n)
    assert program.n == 2 * n and program.device_count == n and program.cores == 2
    if n <= 3:
        res = explore(program, max_states=400_000)
        assert res.complete and not (res.race or res.hang or res.nonzero_exit), res.summary()


@pytest.mark.parametrize("name, edit, kinds", BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_two_core_schedules_are_rejected(name, edit, kinds):
    sched = variant(*edit, name)
    report = check(sched, 4)
    assert not report.ok
    assert kinds <= report.kinds(), (sorted(report.kinds()), report.to_text())
    # the explorer (every interleaving, `verify/explore.py`) finds the same verdicts at N=3
    res = explore(unroll(sched, 3), max_states=400_000)
    small = check(sched, 3).kinds()
    assert res.complete
    assert res.race == ("race" in small) and res.hang == ("hang" in small), (res.summary(), sorted(small))


def test_findings_name_the_second_core():
    report = check(variant("c0: core * half", "c0: 0", "same_half"), 4)
    text = report.to_text()
    assert "(2 TensorCores each)" in text
    assert "device 1 core 1" in text  # a second core's events
    assert "device 0's `out" in text  # HBM is the chip's


STAGED = (GOOD.replace("semaphores:\n", "  stage: {kind: vmem_scratch, shape: [rows, cols // 2]}\nsemaphores:\n", 1)
          .replace("  - start: forward\n", "  - start: forward\n  - start: stage_it\n  - wait: stage_it\n", 1)
          .replace("copies:\n", "copies:\n  stage_it: {src: \"x[:, c0:half]\", dst: stage, sem: local_sem}\n", 1))


def test_vmem_and_semaphores_are_each_cores_hbm_the_chips():
    """Core 1's semaphores and VMEM live on its own process; its HBM regions on the chip."""
    text = GOOD.replace("semaphores:\n", "  stage: {kind: vmem_scratch, shape: [rows, cols // 2]}\nsemaphores:\n", 1)
    text = text.replace("  - start: forward\n", "  - start: forward\n  - start: stage_it\n  - wait: stage_it\n", 1)
    text = text.replace("copies:\n", "copies:\n  stage_it: {src: \"x[:, c0:half]\", dst: stage, sem: local_sem}\n", 1)
    sched = ringc.load_text(text, "staged.yaml")
    assert check(sched, 4).ok  # each core's `stage` is its own: no race between the cores
    program = unroll(sched, 4)
    core1 = program.devices[4 + 2]  # chip 2's core 1
    starts = [ev.action for ev in core1 if type(ev.action).__name__ == "DmaStart"]
    stage = next(a for a in starts if a.copy == "stage_it")
    assert stage.src.device == 2 and stage.dst.device == 6  # x in chip 2's HBM, `stage` in core 1's VMEM
    assert stage.recv_sem[0] == 6
    forward = next(a for a in starts if a.copy == "forward")
    assert forward.dst.device == 1 and forward.send_sem[0] == 6 and forward.recv_sem[0] == 4 + 1


def test_the_cost_model_issues_per_core_and_shares_the_chips_links():
    """Both directions (one per core) against both cores on the right-hand links: the
    second shares each link between the cores, so it takes about twice as long."""
    both = ringc.load_text(GOOD, "two_cores.yaml")
    right = variant("dir: 1 - 2 * core", "dir: 1", "right_only")
    assert check(right, 4).ok  # disjoint halves: a correct schedule, only slower
    hw = hardware("ring:4", both, chip="v5p")
    fast, slow = estimate(both, hw, nbytes=64 * MiB), estimate(right, hw, nbytes=64 * MiB)
    assert slow.seconds > 1.8 * fast.seconds
    assert any("TensorCores" in a for a in fast.assumptions)
    # both cores of chip 0 issue DMAs at overlapping times: the issue time is per core
    issue = {p: [(d.issued, d.injected) for ev, d in fast.machine.dmas.items() if ev.device == p] for p in (0, 4)}
    assert any(a < d and c < b for a, b in issue[0] for c, d in issue[4])


def test_cores_are_refused_where_a_chip_has_one_or_interpret_mode_cannot_run(capsys):
    sched = ringc.load_text(GOOD, "two_cores.yaml")
    with pytest.raises(ScheduleError, match="v5e chip has 1"):
        check(sched, topology="v5e:2x2")
    with pytest.raises(ValueError, match="v5e chip has 1"):
        hardware("ring:4", sched)
    assert check(sched, topology="v5p:2x2x1").ok
    path = HERE / "all_gather_two_cores.yaml"
    assert main(["run", str(path), "--devices", "4"]) == 2
    err = capsys.readouterr().err
    assert "all_gather_two_cores.yaml:11:" in err and "interpret mode cannot run" in err and "Traceback" not in err
    assert main(["emit", str(path), "--target", "mgpu"]) == 2
    assert "TPU layout" in capsys.readouterr().err


def test_the_emitted_kernel_runs_on_each_core_and_names_the_core_of_every_target(tmp_path):
    out = tmp_path / "two_cores.py"
    assert main(["emit", str(HERE / "all_gather_two_cores.yaml"), "-o", str(out)]) == 0
    text = out.read_text()
    assert "pl.kernel(" in text and 'mesh=pltpu.create_tensorcore_mesh("core", num_cores=2)' in text
    assert "pallas_call" not in text.split("def _call")[1]
    assert 'core = lax.axis_index("core")' in text
    assert "@pl.loop(0, N - 1)\n    def _(step):" in text  # the grid, as a loop on each core
    assert '"core": lax.axis_index("core")' in text  # `_device`: the same core of the target
    assert text.count("def _device(") == 1
    compile(text, str(out), "exec")


def test_the_emitted_two_core_module_is_checked_as_written(tmp_path):
    """`ringc check` of the module `ringc emit` writes (`pl.kernel` over the TensorCore mesh):
    the Pallas importer runs each core of each device as a process, as the YAML model does
    (`pallas/cores.py`). It crashed in the Mosaic GPU launcher before (the same primitive)."""
    from ringc.pallas import check_file
    out = tmp_path / "two_cores.py"
    assert main(["emit", str(HERE / "all_gather_two_cores.yaml"), "-o", str(out)]) == 0
    (report,) = check_file(str(out), 4)
    assert report.ok, report.to_text()
    assert report.program.cores == 2 and report.program.n == 8
    assert any(a.startswith("TensorCores: a kernel over the TensorCore mesh") for a in report.assumptions)
    assert any("1 kernel call(s) over the TensorCore mesh" in a for a in report.assumptions)


@pytest.mark.parametrize("name, edit, kinds", BROKEN, ids=[b[0] for b in BROKEN])
def test_a_broken_schedule_emitted_is_refused_as_the_schedule_is(tmp_path, name, edit, kinds):
    """Each broken variant, emitted anyway (`--unchecked`) and checked as a Pallas module:
    the importer finds what `check` of the YAML finds."""
    from ringc.pallas import check_file
    yaml = tmp_path / f"{name}.yaml"
    yaml.write_text(GOOD.replace(*edit, 1))
    out = tmp_path / f"{name}.py"
    assert main(["emit", "--unchecked", str(yaml), "-o", str(out)]) == 0
    (report,) = check_file(str(out), 4)
    assert not report.ok and kinds <= set(report.kinds()), report.to_text()
    assert set(report.kinds()) == set(check(ringc.load_text(yaml.read_text(), str(yaml)), 4).kinds())


def test_a_hand_written_kernel_over_both_cores_is_checked():
    """`pl.kernel` over `pltpu.create_tensorcore_mesh` with a `device_id` dict naming the core:
    clean as written; both cores sending the same rows race on the neighbour's HBM."""
    from ringc.pallas import check_file
    path = str(HERE.parent / "pallas_import" / "cores" / "halves_per_core.py")
    (ok,) = check_file(path, 3)
    assert ok.ok, ok.to_text()
    (bad,) = check_file(path, 3, params={"same_rows": 1})
    assert "race" in bad.kinds() and not bad.ok
    assert any("device 0 core 1" in f.message for f in bad.findings)


def test_a_second_call_of_a_kernel_over_the_cores_meets_mosaics_entry_barrier_quietly():
    """Called twice, the second call starts with Mosaic's device barrier, as a pallas_call's
    does (`Builder.call_entry`, shared): clean, and no route warning for Mosaic's own signals
    (the cores' copy of the barrier named each target: `not_neighbour` on ring:4)."""
    from ringc.pallas import check_file
    (report,) = check_file(str(HERE.parent / "pallas_import" / "cores" / "halves_per_core.py"), 4, invocations=2)
    assert report.ok and not report.findings, report.to_text()


def test_a_core_map_inside_run_state_is_checked(tmp_path):
    """`pl.core_map` over the TensorCore mesh inside `pl.run_state`: the refs are the state
    arrays, read and written in place on each core; both cores copying the same rows race."""
    from ringc.pallas import check_file
    path = HERE.parent / "pallas_import" / "cores" / "core_map_halves.py"
    (ok,) = check_file(str(path), 2)
    assert ok.ok and ok.program.cores == 2, ok.to_text()
    assert any("1 kernel call(s) over the TensorCore mesh" in a for a in ok.assumptions)
    broken = tmp_path / "broken.py"
    broken.write_text(path.read_text().replace("BROKEN = False", "BROKEN = True"))
    (bad,) = check_file(str(broken), 2)
    assert not bad.ok and "race" in bad.kinds(), bad.to_text()


@pytest.mark.parametrize("case, kinds", [("ok", set()), ("nowait", {"dma_not_waited", "race"}),
                                          ("same_row", {"race"}), ("read_between", {"race"})])
def test_a_semaphore_and_an_smem_table_the_program_allocates_serve_several_core_maps(monkeypatch, case, kinds):
    """`pl.empty_ref_like` of a DMA semaphore and of an SMEM table outside the kernels (JAX's
    test_smem_async_copy_megacore): each core's own, shared by the kernels that follow, so a
    copy started in one kernel is waited in the next (it was "the DMA semaphore is not a
    semaphore"), and the cores' tables do not race (they did: both were one HBM array).
    Never waited: `dma_not_waited`; both cores copying into one row of HBM, or the program
    reading the destination between the start and the wait: a race."""
    from ringc.pallas import check_file
    monkeypatch.setenv("SEM_CASE", case)
    (report,) = check_file(str(HERE.parent / "pallas_import" / "cores" / "sem_across_kernels.py"), 2)
    assert report.kinds() == kinds and report.program.cores == 2, report.to_text()
    if case != "ok":   # named as the code names them, not `arg0`
        assert "copy `table->out`" in report.to_text(), report.to_text()


def test_cores_swapping_through_vmem_behind_the_barrier_semaphore():
    """A copy from one core to the other core of the same chip (`device_id={"core": other}`)
    after a barrier on the kernel's barrier semaphore (`collective_id`), as JAX's core_map
    guide writes it: clean, and not a copy to the sender itself (`self_target`). Without the
    barrier the copy may land before the other core allocated its VMEM: a race."""
    from ringc.pallas import check_file
    from ringc.pallas.entries import parse_arg
    path = str(HERE.parent / "pallas_import" / "cores" / "swap_cores.py")
    args = [parse_arg("x=float32[8*N,256]@x")]
    (ok,) = check_file(path, 2, args=args)
    assert ok.ok and not ok.findings, ok.to_text()
    (bad,) = check_file(path, 2, args=args, params={"barrier": 0})
    assert not bad.ok and "race" in bad.kinds(), bad.to_text()


def test_an_offset_the_caller_passes_is_followed_into_each_cores_smem(tmp_path):
    """An int32 input copied into SMEM inside a kernel over the cores (`sync_copy`), then a
    slice start, as JAX's core_map guide prefetches an index: ringc follows its value on both
    cores (the guide's kernel was refused as data it did not follow), and an offset past the
    rows is an out_of_bounds finding naming the value read."""
    from ringc.pallas import check_file
    path = HERE.parent / "pallas_import" / "cores" / "indexed_copy.py"
    (ok,) = check_file(str(path), 2)
    assert ok.ok and ok.program.cores == 2, ok.to_text()
    far = tmp_path / "far.py"
    far.write_text(path.read_text().replace("OFFSET = 4", "OFFSET = 12"))
    (bad,) = check_file(str(far), 2)
    assert not bad.ok and "out_of_bounds" in bad.kinds(), bad.to_text()
    assert any("the index is 12" in f.message for f in bad.findings)


def test_an_access_out_of_range_on_core_1_names_that_core_of_its_chip(tmp_path):
    """Only core 1 indexes past its scratch: the finding names `device 0 core 1`, as race
    findings do, not the process's flat index (`device 1`, which N = 1 does not have)."""
    from ringc.pallas import check_file
    path = tmp_path / "core_oob.py"
    path.write_text('''import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

@pl.kernel(mesh=pltpu.create_tensorcore_mesh("core", num_cores=2),
           out_type=jax.ShapeDtypeStruct((8, 128), jnp.float32),
           scratch_types=[pltpu.VMEM((8, 128), jnp.float32)])
def kernel(x_ref, o_ref, vmem_ref):
    core = jax.lax.axis_index("core")

    @pl.when(core == 1)
    def _():
        vmem_ref[20, 0] = vmem_ref[0, 0]

    @pl.when(core == 0)
    def _():
        pltpu.sync_copy(x_ref, o_ref)

kernel(jnp.ones((8, 128), jnp.float32))
''')
    (bad,) = check_file(str(path), 1, tpu="v5p")
    oob = [f for f in bad.findings if f.kind == "out_of_bounds"]
    assert oob and oob[0].message.startswith("device 0 core 1: index 20 of `vmem_ref`"), bad.to_text()


def test_a_mesh_of_the_chips_cores_has_as_many_as_the_tpu_checked_on(tmp_path):
    """`pltpu.create_tensorcore_mesh("core")` asks a device for `num_cores`: ringc answers as
    the TPU of `--tpu` (v5p: 2 TensorCores, the default v5e: 1), not refusing JAX's question."""
    from ringc.pallas import check_file
    text = (HERE.parent / "pallas_import" / "cores" / "halves_per_core.py").read_text()
    path = tmp_path / "asks.py"
    path.write_text(text.replace('create_tensorcore_mesh("core", num_cores=2)', 'create_tensorcore_mesh("core")'))
    (v5p,) = check_file(str(path), 3, tpu="v5p")
    (v5e,) = check_file(str(path), 3)
    assert v5p.ok and v5p.program.cores == 2 and v5p.program.n == 6, v5p.to_text()
    assert v5e.ok and v5e.program.n == 3, v5e.to_text()
    # its device_id names the core axis: on v5e's one core that is the sender itself, and the
    # verdict says how to check it as meant (JAX's core_map.md, sweep 15)
    said = "device_id names the TensorCore axis 'core' on a chip of one TensorCore"
    assert any(a.startswith(said) and "--tpu v5p" in a for a in v5e.assumptions), v5e.assumptions
    assert not any(a.startswith(said) for a in v5p.assumptions), v5p.assumptions


def test_a_device_id_of_the_devices_coordinates_reaches_the_same_core(tmp_path):
    """A tuple MESH `device_id` (one coordinate per device mesh axis, as JAX's
    interpret-mode tests write it) reaches the same core of the target, as JAX's interpret
    mode delivers it: the kernel is the dict form's. An id that says neither (LOGICAL) is
    refused at the copy's line, with the dict to write."""
    from ringc.pallas import check_file
    text = (HERE.parent / "pallas_import" / "cores" / "halves_per_core.py").read_text()
    old = 'device_id={axis: jax.lax.rem(me + n - 1, n), "core": core},'
    assert old in text
    path = tmp_path / "tuple_id.py"
    path.write_text(text.replace(old, "device_id=(jax.lax.rem(me + n - 1, n),),"))
    (report,) = check_file(str(path), 3, tpu="v5p")
    (as_dict,) = check_file(str(HERE.parent / "pallas_import" / "cores" / "halves_per_core.py"), 3, tpu="v5p")
    targets = lambda r: [(ev.device, t) for ev, t in r.program.targets]  # noqa: E731
    assert report.ok and targets(report) == targets(as_dict), report.to_text()
    path.write_text(text.replace(old, "device_id=jax.lax.rem(me + n - 1, n),").replace(
        "device_id_type=pltpu.DeviceIdType.MESH)", "device_id_type=pltpu.DeviceIdType.LOGICAL)"))
    (report,) = check_file(str(path), 3, tpu="v5p")
    assert not report.ok and "neither a dict of mesh coordinates" in report.error.message, report.to_text()
    assert f"{path.name}:25:" in report.to_text() and "'core': core" in report.error.fix


@pytest.mark.parametrize("text", [GOOD, GOOD.replace("dir: 1 - 2 * core", "dir: 1"), STAGED],
                         ids=["a_core_a_direction", "both_cores_right", "staged_in_vmem"])
@pytest.mark.parametrize("topology", ["ring:2", "ring:4", "ring:8", "torus:4x4"])
def test_the_quotient_of_chip_0s_cores_times_what_every_process_does(text, topology):
    """On wrapped slices both cores of chip 0 are timed for every chip (`rotation._cores_unroll`,
    `QuotientMachine`): the same estimate, bound, bottleneck and VMEM as timing every process."""
    from ringc.cost.quotient import QuotientMachine
    sched = ringc.load_text(text, "two_cores.yaml")
    hw = hardware(topology, sched, chip="v5p")
    for size in (MiB, 64 * MiB):
        q, full = estimate(sched, hw, nbytes=size), estimate(sched, hw, nbytes=size, every_device=True)
        assert isinstance(q.machine, QuotientMachine) and not isinstance(full.machine, QuotientMachine)
        assert q.seconds == pytest.approx(full.seconds, rel=1e-9)
        assert q.bound.seconds == full.bound.seconds and q.bottleneck == full.bottleneck
        assert q.vmem == full.vmem


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="libtpu is not installed")
def test_libtpu_compiles_the_two_core_kernel_for_v5p_and_refuses_v5e(capsys):
    path = str(HERE / "all_gather_two_cores.yaml")
    assert main(["compile", path, "--target", "v5p:2x2x1"]) == 0
    assert "v5p:2x2x1 (4 x TPU v5, N=4): ok" in capsys.readouterr().out
    assert main(["compile", path, "--target", "v5e:2x2"]) != 0
    assert "v5e chip has 1" in capsys.readouterr().err


@pytest.mark.parametrize("old, new, message", [
    ("cores: 2\n", "cores: 2\nmegacore: true\n", "choose one"),
    ("cores: 2\n", "cores: 3\n", "less than or equal to 2"),
    ("out: {kind: output,", "out: {kind: output, space: vmem,", "in VMEM"),
])
def test_bad_cores_declarations_get_one_message(old, new, message):
    with pytest.raises(ScheduleError, match=message):
        ringc.load_text(GOOD.replace(old, new, 1), "bad.yaml")


@pytest.mark.parametrize("topology", ["ring:4", "ring:8", "torus:3x3"])
def test_the_quotient_joins_chip_0s_cores_where_they_share_no_hbm_element(topology):
    """`cores.composed`: chip 0's two cores as one process decides the schedule when no
    HBM element is touched by both cores with a write; it is clean where every process
    is, and where the cores write the same rows it is not taken (the full analysis finds
    the race)."""
    from ringc.verify.check import quotient_report, resolve_topology
    from ringc.verify.cores import composed, separated
    from ringc.verify.rotation import rotation_unroll
    good = ringc.load_text(GOOD, "two_cores.yaml")
    placement = resolve_topology(good, None, topology)
    report = quotient_report(good, placement, 1)
    assert report is not None and report.ok
    sym = rotation_unroll(good, placement.sizes)
    assert separated(sym) and len(composed(sym).events) < len(sym.representatives.devices[0]) * 2
    for name, edit, _ in BROKEN:
        bad = variant(*edit, name)
        assert quotient_report(bad, resolve_topology(bad, None, topology), 1) is None, name
    same = variant("c0: core * half", "c0: 0", "same_half")
    assert not separated(rotation_unroll(same, placement.sizes))
    assert "race" in check(same, topology=topology).kinds()


# -- `pipeline` on each core -----------------------------------------------------------------

PIPELINED = (HERE / "reduce_scatter_two_cores.yaml").read_text()
BROKEN_PIPELINED = [
    # both cores reduce the top rows: they land, add and write the same HBM rows
    ("same_rows", ("r0: core * half ", "r0: 0 "), {"race", "wrong_result"}),
    # the add takes the block of the chip the partial sum came from, not the one it is for
    ("wrong_block", ("own: (me - dir * (step + 2)) % N", "own: (me - dir * (step + 1)) % N"), {"wrong_result"}),
    # core 1 adds an arrival before waiting for it
    ("core1_adds_unwaited", ("    do: [{start: fwd}, {wait: fwd}]\n",
                             "    do: [{start: fwd}]\n  - when: step > 0 and core == 0\n    do: [{wait: fwd}]\n"),
     {"race"}),
]


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_two_cores_adding_in_pipelines_are_proved_and_the_explorer_agrees(n):
    """A nested `pipeline` on each core: its VMEM windows and their DMA semaphores are the
    core's own (`on_core`), so the two cores' adds of the same step do not share a window."""
    sched = ringc.load_text(PIPELINED, "reduce_scatter_two_cores.yaml")
    report = check(sched, n)
    assert report.ok, report.to_text()
    if n <= 3:
        res = explore(unroll(sched, n), max_states=400_000)
        assert res.complete and not (res.race or res.hang or res.nonzero_exit), res.summary()


@pytest.mark.parametrize("name, edit, kinds", BROKEN_PIPELINED, ids=[b[0] for b in BROKEN_PIPELINED])
def test_broken_two_core_pipelines_are_rejected(name, edit, kinds):
    assert edit[0] in PIPELINED, edit[0]
    sched = ringc.load_text(PIPELINED.replace(*edit, 1), f"reduce_scatter_two_cores[{name}]")
    report = check(sched, 3)
    assert not report.ok and kinds <= report.kinds(), (sorted(report.kinds()), report.to_text())
    res = explore(unroll(sched, 2), max_states=400_000)
    assert res.race == ("race" in check(sched, 2).kinds()), res.summary()


def test_the_emitted_two_core_pipelines_are_checked_as_written(tmp_path):
    """`emit_pipeline` inside the kernel over the TensorCore mesh: the importer runs each
    core's pipeline with its own windows too."""
    from ringc.pallas import check_file
    out = tmp_path / "rs_two_cores.py"
    assert main(["emit", str(HERE / "reduce_scatter_two_cores.yaml"), "-o", str(out)]) == 0
    assert "emit_pipeline" in out.read_text()
    (report,) = check_file(str(out), 3)
    assert report.ok and report.program.cores == 2, report.to_text()


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="libtpu is not installed")
def test_libtpu_compiles_the_two_core_pipelines_for_v5p(capsys):
    assert main(["compile", str(HERE / "reduce_scatter_two_cores.yaml"), "--target", "v5p:2x2x1"]) == 0
    assert "v5p:2x2x1 (4 x TPU v5, N=4): ok" in capsys.readouterr().out


@pytest.mark.parametrize("topology", ["ring:4", "ring:8"])
def test_the_quotient_joins_the_cores_pipeline_windows_as_each_cores_own(topology):
    """`cores.composed` renames core 1's pipeline windows with its VMEM (`NAME@core1`): the
    joined program is clean as every process is; with both cores on the same rows it is not
    taken (the full analysis finds the race)."""
    from ringc.verify.check import quotient_report, resolve_topology
    from ringc.verify.cores import composed
    from ringc.verify.rotation import rotation_unroll
    good = ringc.load_text(PIPELINED, "reduce_scatter_two_cores.yaml")
    placement = resolve_topology(good, None, topology)
    report = quotient_report(good, placement, 1)
    assert report is not None and report.ok, report.to_text()
    joined = composed(rotation_unroll(good, placement.sizes))
    assert joined is not None and any("@" in b and b.endswith("@core1") for b in joined.representatives.shapes)
    bad = ringc.load_text(PIPELINED.replace(*BROKEN_PIPELINED[0][1], 1), "same_rows.yaml")
    assert composed(rotation_unroll(bad, resolve_topology(bad, None, topology).sizes)) is None


CLOSES_OVER_AXIS_INDEX = '''
from functools import partial
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

mesh = jax.make_mesh((jax.device_count(),), ("x",))

@jax.jit
@partial(jax.shard_map, mesh=mesh, in_specs=jax.P("x"), out_specs=jax.P("x"), check_vma=False)
def right_permute(x):
    me = jax.lax.axis_index("x")   # OUTSIDE
    n = jax.lax.axis_size("x")
    @pl.kernel(mesh=pltpu.create_tensorcore_mesh("core", num_cores=1),
               out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
               scratch_types=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
               compiler_params=pltpu.CompilerParams(collective_id=0))
    def kernel(x_hbm, o_hbm, send, recv):
        right = (me + 1) % n
        pltpu.make_async_remote_copy(x_hbm, o_hbm, send, recv, device_id={"x": right}).start()
        pltpu.make_async_remote_copy(x_hbm, o_hbm, send, recv, device_id={"x": right}).wait()
    return kernel(x)

x = jnp.arange(4 * jax.device_count() * 128, dtype=jnp.float32).reshape(-1, 128)
y = right_permute(x)
'''


def test_a_scalar_the_kernel_over_the_cores_closes_over_is_the_callers_value(tmp_path):
    """`pl.kernel` passes a scalar its body closes over (the caller's `axis_index`) by value:
    the body gets that value, not an HBM array (it crashed indexing with it, or called it
    computed from tensor data), so the device id is followed; the same kernel with
    `axis_index` inside its body gets the same verdict."""
    from ringc.pallas import check_file
    verdicts = []
    for name, text in (("outside", CLOSES_OVER_AXIS_INDEX),
                       ("inside", CLOSES_OVER_AXIS_INDEX.replace('    me = jax.lax.axis_index("x")   # OUTSIDE\n', "")
                        .replace("        right = (me + 1) % n", '        right = (jax.lax.axis_index("x") + 1) % n'))):
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        (report,) = check_file(str(path), 4)
        assert "tensor data" not in report.to_text(), report.to_text()
        verdicts.append((report.ok, sorted(report.kinds())))
    assert "OUTSIDE" in CLOSES_OVER_AXIS_INDEX and verdicts[0] == verdicts[1], verdicts
    assert verdicts[0][1] == ["race"], verdicts   # (no entry barrier: a copy may land before the peer enters)


CORE_INDEX_BARRIER = '''
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

mesh = pltpu.create_tensorcore_mesh("core", num_cores=2)

@jax.jit
def f(x):
    @pl.kernel(out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=mesh,
               scratch_types=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.REGULAR])
    def k(x_hbm, o_hbm, v, sem):
        c = jax.lax.axis_index("core")
        for i in range(2):
            pl.semaphore_signal(sem, 1, core_index=i)
        pl.semaphore_wait(sem, 2)
        pltpu.sync_copy(x_hbm.at[pl.ds(c * 8, 8)], v)
        pltpu.sync_copy(v, o_hbm.at[pl.ds(c * 8, 8)])
    return k(x)

y = f(jnp.zeros((16, 128), jnp.float32))
'''


def test_a_signal_to_a_core_by_core_index_lands_on_that_core(tmp_path):
    """`pl.semaphore_signal(sem, 1, core_index=i)` (JAX's tpu_pallas_interpret_test.py
    test_core_map): the signal goes to core i of the chip (it was refused: "ringc models one
    core per device"); both cores signalling core 0 only leaves core 1's wait hanging."""
    from ringc.pallas import check_file
    good, bad = tmp_path / "core_barrier.py", tmp_path / "core_barrier_bad.py"
    good.write_text(CORE_INDEX_BARRIER)
    bad.write_text(CORE_INDEX_BARRIER.replace("core_index=i)", "core_index=0)"))
    (report,) = check_file(str(good), 1, tpu="v5p")
    assert report.ok and report.program.cores == 2, report.to_text()
    (report,) = check_file(str(bad), 1, tpu="v5p")
    assert report.kinds() >= {"hang"}, report.to_text()


PRNG_KEY_IN_CORE_MAP = '''
import functools
import jax, jax.numpy as jnp
from jax import random as jax_random
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

def main(refs):
    key_hbm, o_ref = refs
    @pl.core_map(pltpu.create_tensorcore_mesh('core'))
    def _():
        @functools.partial(pl.run_scoped, key_smem=pltpu.SMEM((), key_hbm.dtype),
                           o_vmem=pltpu.VMEM(o_ref.shape, o_ref.dtype))
        def _scoped(key_smem, o_vmem):
            pltpu.sync_copy(key_hbm, key_smem)
            o_vmem[...] = jax_random.uniform(key_smem[...], shape=o_ref.shape, minval=0.0, maxval=1.0)
            pltpu.sync_copy(o_vmem, o_ref)

@jax.jit
def f(rng_key):
    y = jnp.zeros((8, 128), dtype=jnp.float32)
    _, y = pl.run_state(main)((rng_key, y))
    return y

y = f(pltpu.to_pallas_key(jax_random.key(0, impl="rbg")))
'''


def test_a_prng_key_in_a_kernel_over_the_cores_is_carried_not_followed(tmp_path):
    """A Pallas PRNG key (`key<pl>`, an extended dtype numpy cannot interpret: JAX's
    tpu_pallas_random_test.py test_key_in_core_map) is copied and used without ringc
    following its bits (it stopped the script, then was an internal error); both cores
    write the whole output, a race as written."""
    from ringc.pallas import check_file
    path = tmp_path / "key_in_core_map.py"
    path.write_text(PRNG_KEY_IN_CORE_MAP)
    (report,) = check_file(str(path), 1, tpu="v5p")
    assert report.program.cores == 2 and report.kinds() == {"race"}, report.to_text()


def test_a_python_int_the_jitted_caller_passes_is_followed_into_the_kernel(tmp_path):
    """`jax.jit(f)(x, 1)` with the kernel's body indexing by the closed-over `i` (JAX's
    tpu_pallas_state_test.py test_capture_scalar): the index is the caller's 1 (it was an
    internal error, then an index not known before the run); a core reading past the rows
    is an out_of_bounds finding."""
    from ringc.pallas import check_file
    text = (
        "import jax, jax.numpy as jnp\nfrom jax.experimental import pallas as pl\n"
        "from jax.experimental.pallas import tpu as pltpu\n\n"
        "mesh = pltpu.create_tensorcore_mesh('core', num_cores=2)\n\n\n"
        "def f(x, i):\n"
        "    def body(x_ref, out_ref):\n"
        "        idx = jax.lax.axis_index('core')\n"
        "        pltpu.sync_copy(x_ref.at[i], out_ref.at[idx])\n"
        "    return pl.kernel(body, mesh=mesh, out_type=jax.ShapeDtypeStruct((2, *x.shape[1:]), jnp.int32))(x)\n\n\n"
        "x = jnp.arange(4 * 8 * 128, dtype=jnp.int32).reshape((4, 8, 128))\n"
        "out = jax.jit(f)(x, I)\n")
    for i, ok in ((1, True), (7, False)):
        path = tmp_path / f"capture_scalar_{i}.py"
        path.write_text(text.replace("(x, I)", f"(x, {i})"))
        (report,) = check_file(str(path), 1, tpu="v5p")
        assert report.ok == ok and (ok or "out_of_bounds" in report.kinds()), report.to_text()


def test_an_empty_ref_in_a_kernel_over_the_cores_is_each_cores_fresh_scratch(tmp_path):
    """`jax.empty_ref(aval, memory_space=VMEM)` in the body (JAX's tpu_pallas_mpmd_test.py
    test_mpmd_capture_scalar_and_ref; it was refused as unknown): fresh VMEM of each core, so
    both cores staging their rows through it do not race; staging both halves through the
    chip's output rows instead does."""
    from ringc.pallas import check_file
    text = (
        "import jax, jax.numpy as jnp\nfrom jax.experimental import pallas as pl\n"
        "from jax.experimental.pallas import tpu as pltpu\n\n"
        "mesh = pltpu.create_tensorcore_mesh('core', num_cores=2)\n\n\n"
        "@jax.jit\n"
        "def f(x):\n"
        "    def body(x_ref, out_ref):\n"
        "        c = jax.lax.axis_index('core')\n"
        "        stage = jax.empty_ref(jax.core.ShapedArray((8, 128), jnp.float32), memory_space=pltpu.VMEM)\n"
        "        pltpu.sync_copy(x_ref.at[pl.ds(c * 8, 8)], stage)\n"
        "        pltpu.sync_copy(stage, out_ref.at[pl.ds(ROWS, 8)])\n"
        "    return pl.kernel(body, mesh=mesh, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)\n\n\n"
        "y = f(jnp.zeros((16, 128), jnp.float32))\n")
    for rows, kinds in (("c * 8", set()), ("0", {"race"})):
        path = tmp_path / f"stage_{len(kinds)}.py"
        path.write_text(text.replace("ROWS", rows))
        (report,) = check_file(str(path), 1, tpu="v5p")
        assert report.kinds() == kinds and report.program.cores == 2, report.to_text()
