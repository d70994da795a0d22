"""`ringc emit --target mgpu`: schedules as Pallas Mosaic GPU modules, checked by the Mosaic GPU
front end (the round trip), refused in one message where the target cannot express them, and
compiled for sm_90a where the CUDA plugin is installed (`[gpu]` extra)."""

from pathlib import Path

import pytest
import yaml

import ringc
from ringc.codegen.mgpu import MGPU_EMIT, MgpuEmitError, emit_mgpu
from ringc.pallas.importer import check_file

TESTS = Path(__file__).parent
ROOT = TESTS.parent
LIBRARY = sorted((ROOT / "schedules").glob("*.yaml"))
# The library schedules the GPU target expresses; the others are refused (test below says why).
EMITTED = ["all_gather_bidirectional", "all_gather_bidirectional_unrolled", "all_gather_hypercube",
           "all_gather_matmul", "all_gather_ring", "all_reduce_bidirectional", "all_reduce_one_shot", "all_reduce_ring",
           "all_to_all_direct", "all_to_all_ring", "ppermute_bidirectional", "ppermute_right",
           "reduce_scatter_bidirectional", "reduce_scatter_bidirectional_overlapped", "reduce_scatter_chunked",
           "reduce_scatter_pipelined"]
def _gpu_params(sched) -> dict:
    """Sizes a GPU takes where the schedule's defaults are too small: a schedule with a matmul
    (wgmma multiplies 64-row tiles) at rows, cols and depth 128."""
    from ringc.codegen.mgpu import _has_matmul
    return {p: 128 for p in ("rows", "cols", "depth") if p in sched.params} if _has_matmul(sched) else {}
DIFFERENCES = yaml.safe_load((TESTS / "mgpu_roundtrip_differences.yaml").read_text())
# The differences in the hardware's semantics the file's header explains.
WHY = {"dma_not_waited", "unbalanced", "barrier", "order", "bytes", "run", "parallel"}


def _emit(tmp_path: Path, path: Path) -> str:
    out = tmp_path / (path.stem + ".py")
    out.write_text(emit_mgpu(ringc.load(str(path))))
    return str(out)


# Findings about a TPU slice's links: GPUs of one NVSwitch node all reach each other.
TPU_LINKS = {"not_neighbour"}


def _agree(want, got) -> None:
    assert got.ok == want.ok, got.to_text()
    assert got.kinds() == want.kinds() - TPU_LINKS, (
        f"YAML: {sorted(want.kinds())}, GPU: {sorted(got.kinds())}\n{got.to_text()}")


def test_the_library_splits_into_emitted_and_refused():
    emitted, refused = [], {}
    for path in LIBRARY:
        try:
            emit_mgpu(ringc.load(str(path)))
            emitted.append(path.stem)
        except MgpuEmitError as e:
            refused[path.stem] = str(e)
    assert emitted == EMITTED
    # Every refusal is one message with the file and a fix, naming what the target lacks.
    for name, text in refused.items():
        assert f"{name}.yaml" in text and "ringc emit --target mgpu:" in text and "fix:" in text, text
    assert "only a pipeline that is a blocked matmul" in refused["all_gather_matmul_streamed"]
    assert "all_gather_matmul_streamed.yaml:79:" in refused["all_gather_matmul_streamed"]  # the pipeline's line
    assert "2 mesh axes" in refused["all_reduce_2d"]
    assert "runtime data" in refused["ragged_all_to_all"]


@pytest.mark.parametrize("name", EMITTED)
@pytest.mark.parametrize("n", [2, 4])
def test_library_schedule_round_trips_through_the_gpu_front_end(tmp_path, name, n):
    """The emitted module, checked as Mosaic GPU code (every block of every GPU a process),
    gets the schedule's verdict: ok, the collective's meaning included."""
    path = ROOT / "schedules" / f"{name}.yaml"
    params = _gpu_params(ringc.load(str(path)))
    want = ringc.check(ringc.load(str(path), params), n)
    (got,) = check_file(_emit(tmp_path, path), n, params=params)
    assert want.ok
    _agree(want, got)
    assert any("Mosaic GPU: every block of each GPU is a process" in a for a in got.assumptions)
    assert any("devices answer as NVIDIA H100" in a for a in got.assumptions)


CASES = [(d, name, entry) for d in ("broken", "mutants")
         for name, entry in sorted(yaml.safe_load((TESTS / d / "expected.yaml").read_text()).items())
         if "data" not in entry and entry.get("topology", "ring") == "ring"]


@pytest.mark.parametrize("corpus,name,entry", CASES, ids=[f"{d}/{n}" for d, n, _ in CASES])
def test_broken_case_round_trips_or_differs_as_recorded(tmp_path, corpus, name, entry):
    """A broken schedule's GPU module gets the schedule's findings, or the findings recorded
    in tests/mgpu_roundtrip_differences.yaml (why: its header); a schedule the target cannot
    express is refused."""
    path = TESTS / corpus / name
    try:
        module = _emit(tmp_path, path)
    except MgpuEmitError as e:
        assert "ringc emit --target mgpu:" in str(e)
        return
    n, k = entry.get("devices", 4), entry.get("invocations", 1)
    params = _gpu_params(ringc.load(str(path)))
    want = ringc.check(ringc.load(str(path), params), n, invocations=k)
    assert not want.ok
    recorded = DIFFERENCES.get(f"{corpus}/{name}")
    if recorded and "error" in recorded:  # the check stops at the kernel's line, as for a hand-written kernel
        with pytest.raises(ringc.ScheduleError, match=recorded["error"]):
            check_file(module, n, invocations=k, params=params)
        return
    (got,) = check_file(module, n, invocations=k, params=params)
    if recorded is None:
        _agree(want, got)
    else:
        assert sorted(got.kinds()) == sorted(recorded["gpu"]), got.to_text()
        assert recorded["why"] and set(recorded["why"]) <= WHY, recorded


def test_emission_is_deterministic_and_readable():
    path = ROOT / "schedules" / "all_reduce_ring.yaml"
    a, b = emit_mgpu(ringc.load(str(path))), emit_mgpu(ringc.load(str(path)))
    assert a == b
    assert "plgpu.kernel(" in a and "plgpu.remote_ref" in a and "pltpu" not in a
    assert "# line 56: accumulate out += receive" in a  # the schedule's ops, commented with their lines
    code = a.split("\nSCHEDULE = ")[0]  # (the schedule's YAML follows, as its author wrote it)
    assert max(len(ln) for ln in code.splitlines()) <= 100


def test_every_op_has_a_gpu_emit_rule():
    from ringc.ir import schema as S
    assert set(MGPU_EMIT) == set(S.OPS)
    refused = {op.__name__ for op, rule in MGPU_EMIT.items() if rule.refusal}
    assert refused == {"Matmul"}  # outside a blocked matmul pipeline


def test_the_seed_matmul_becomes_a_wgmma_matmul_per_block():
    """all_gather_matmul's pipelines are blocked matmuls: each becomes one `_matmul` call on the
    block's rows (wgmma from swizzled SMEM tiles); the accumulator is the matmul's registers."""
    text = emit_mgpu(ringc.load(str(ROOT / "schedules" / "all_gather_matmul.yaml")))
    flat = " ".join(text.split())
    assert flat.count("_matmul( x, y, out.at[block],") + flat.count("_matmul(x, y, out.at[block],") == 1
    assert flat.count("_matmul( scratch.at[step - 1], y, out.at[block],") == 1
    assert "plgpu.wgmma(acc, a_smem.at[slot], b_smem.at[slot])" in text
    assert "acc" not in text.split("def _kernel(")[1].split(")")[0]  # no accumulator ref
    assert 'schedule = "bfloat16"' not in text and "jnp.bfloat16" in text  # 16-bit operands by default


def test_an_elementwise_pipeline_becomes_ops_on_whole_regions():
    """reduce_scatter_pipelined's accumulation pipeline: its blocks add up to the regions, so the
    GPU module adds the regions (through SMEM, a chunk at a time); a pipeline that reads an output
    block (which starts unloaded on a TPU) is refused instead."""
    text = emit_mgpu(ringc.load(str(ROOT / "schedules" / "reduce_scatter_pipelined.yaml")))
    flat = " ".join(text.split())
    assert "accumulate scratch[working, 0:half] = scratch[working, 0:half] + x[left_copy_device, 0:half]" in flat
    with pytest.raises(MgpuEmitError, match="read input blocks only"):
        emit_mgpu(ringc.load(str(TESTS / "broken" / "reduce_scatter_pipelined_no_base.yaml")))


def test_a_blocked_matmul_with_a_broken_body_is_refused(tmp_path):
    """A pipeline that is not exactly the blocked matmul (here: the accumulator is never zeroed)
    is refused, not emitted as a matmul that would hide the mistake."""
    text = (ROOT / "schedules" / "all_gather_matmul.yaml").read_text()
    broken = text.replace("          - when: k == 0\n            do:\n              - zero: acc\n", "", 1)
    assert broken != text
    path = tmp_path / "no_zero.yaml"
    path.write_text(broken)
    with pytest.raises(MgpuEmitError, match="only a pipeline that is a blocked matmul"):
        emit_mgpu(ringc.load(str(path)))


ONE_SHOT = ROOT / "schedules" / "all_reduce_one_shot.yaml"
# The runtime's broadcast path, and three ways to break it (each a `_Copy.start` edit).
_STORE_ONCE = """            if self.broadcast not in self.multicast.stored:
                self.multicast.stored.add(self.broadcast)
                self.store_everywhere(self.multicast.axis)"""
_SIGNALS = """        if self.device is not None:
            pl.semaphore_signal(self.recv_sem, self.nbytes(), device_id=self.device)
        pl.semaphore_signal(self.sem, self.nbytes())
"""
MULTICAST_MUTANTS = {
    # the value stored is not the source's: every receiver adds twice a peer's x
    "wrong_value": [("plgpu.multimem_store(view[...],", "plgpu.multimem_store(view[...] * 2,")],
    # stored again at every start: a receiver signalled earlier is reading the slot being written
    "every_start": [(_STORE_ONCE, "            self.store_everywhere(self.multicast.axis)")],
    # the receivers are signalled before the data is stored
    "signal_first": [(_STORE_ONCE, "            pass"),
                     (_SIGNALS, _SIGNALS + "        if self.broadcast and self.multicast is not None:\n"
                                "            self.store_everywhere(self.multicast.axis)\n")],
}


def test_a_one_shot_copy_goes_out_by_one_multimem_store(tmp_path):
    """all_reduce_one_shot's `send` reaches every other GPU, one start after another, with its
    own slot unused: it goes out as one multimem store (BROADCASTS), or per GPU with
    multimem=False; both check clean with the collective's meaning. Copies round a ring are
    not broadcasts."""
    text = emit_mgpu(ringc.load(str(ONE_SHOT)))
    assert "BROADCASTS = ('send',)" in text and "plgpu.multimem_store(" in text
    assert "def build(mesh, *, interpret=None, blocks=None, multimem=True, **params):" in text
    assert "multicast=multicast" in text.split("def _send(")[1].split("def _load(")[0]
    assert "multicast=" not in text.split("def _load(")[1].split("\n\n")[0]  # a local copy
    module = tmp_path / "one_shot.py"
    module.write_text(text)
    # build's keywords pass through `--param` (make_inputs takes them too): per GPU, and 2 blocks
    for params in ({}, {"multimem": False}, {"blocks": 2}):
        for n in (2, 4):
            (got,) = check_file(str(module), n, params=params)
            assert got.ok and not got.kinds(), (params, got.to_text())
    ring = emit_mgpu(ringc.load(str(ROOT / "schedules" / "all_reduce_ring.yaml")))
    assert "BROADCASTS" not in ring and "class _Multicast" not in ring and "multimem=True" not in ring


@pytest.mark.parametrize("mutant", sorted(MULTICAST_MUTANTS))
def test_a_broken_multicast_is_found_by_the_gpu_check(tmp_path, mutant):
    text = emit_mgpu(ringc.load(str(ONE_SHOT)))
    for old, new in MULTICAST_MUTANTS[mutant]:
        assert old in text
        text = text.replace(old, new)
    module = tmp_path / f"{mutant}.py"
    module.write_text(text)
    (got,) = check_file(str(module), 4)
    assert not got.ok
    assert {"wrong_value": "wrong_result"}.get(mutant, "race") in got.kinds(), got.to_text()


def test_a_copy_whose_own_region_is_used_is_not_multicast(tmp_path):
    """A multicast also writes the sender's own copy of the region: when the schedule uses it
    (here a local copy into it), the copy goes per GPU, and `why_not_broadcast` says why."""
    from ringc.verify.broadcast import why_not_broadcast
    from ringc.verify.unroll import unroll
    text = ONE_SHOT.read_text().replace("  done: regular\n", "  done: regular\n  keep_sem: dma\n")
    text = text.replace('sem: "load_sem[step]"}\n', 'sem: "load_sem[step]"}\n  keep: {src: x, dst: "gathered[me]", '
                        'sem: keep_sem}\n')
    text += ("  - when: phase == 1 and step == 0\n    do:\n      - start: keep\n"
             "  - when: phase == 2 and step == 0\n    do:\n      - wait: keep\n")
    path = tmp_path / "keep.yaml"
    path.write_text(text)
    sched = ringc.load(str(path))
    assert ringc.check(sched, 4).ok
    why = why_not_broadcast(sched, unroll(sched, 4), "send")
    assert why and "own gathered[0, 0:8, 0:128] is used" in why
    assert "BROADCASTS" not in emit_mgpu(sched)
    ring = ringc.load(str(ROOT / "schedules" / "all_reduce_ring.yaml"))
    assert "other events run between its starts" in why_not_broadcast(ring, unroll(ring, 4), "pass")


def test_a_one_shot_all_gather_multicasts_the_block_it_holds(tmp_path):
    """`ringc synth`'s radix-8 all-gather on 8 chips sends the block each holds (`out[me]`, after
    its own assign) to all 7 others at once: its own copy of the region is the source, so the
    multicast writes there what it holds, and the copy goes out by one multimem store, as
    JAX's all_gather_mgpu does. One output, no scratch: `build` gives an array, not a tuple."""
    from ringc import topology as T
    from ringc.ir.loader import load_text
    from ringc.synth.families import recursive_halving
    (cand,) = [c for c in recursive_halving.generate("all_gather", T.parse("ring:8")) if c.params["radix"] == 8]
    sched = load_text(cand.text, "all_gather_radix8.yaml")
    text = emit_mgpu(sched, checked=[{"N": 8, "rows": 8, "cols": 128}])
    assert "BROADCASTS = ('gather',)" in text and "(out,) = call(x)" in text
    module = tmp_path / "ag8.py"
    module.write_text(text)
    (got,) = check_file(str(module), 8)
    assert got.ok and not got.kinds(), got.to_text()


def test_new_sizes_are_checked_for_the_broadcasts():
    """A module's kernel at sizes not in CHECKED has ringc check them; a copy it multicasts must
    still be a broadcast there, else ValueError names it and the way out (multimem=False)."""
    from ringc.jaxapi import check_sizes
    text = ONE_SHOT.read_text()
    check_sizes(text, "all_reduce_one_shot.yaml", {"N": 6, "rows": 8, "cols": 128}, broadcasts=("send",))
    ring = (ROOT / "schedules" / "all_reduce_ring.yaml").read_text()
    with pytest.raises(ValueError, match="copy `pass` is not a broadcast .*multimem=False"):
        check_sizes(ring, "all_reduce_ring.yaml", {"N": 4, "rows": 8, "cols": 128}, broadcasts=("pass",))


def test_a_lowering_error_in_an_emitted_module_names_the_schedule_line(tmp_path):
    """Mosaic GPU refusing the code of an op (here an add made a cumsum, which it does not
    lower) is reported at the module's line and at the schedule's line the op came from, as
    the TPU target does; lowering needs no CUDA plugin."""
    from ringc.compile.gpu import compile_file
    text = emit_mgpu(ringc.load(str(ROOT / "schedules" / "all_reduce_ring.yaml")))
    call = "_compute(lax.add, out, [out, receive]"
    assert "# line 56: accumulate out += receive" in text and call in text
    module = tmp_path / "broken_add.py"
    module.write_text(text.replace(call, "_compute(lambda a, b: lax.cumsum(a, 0) + b, out, [out, receive]"))
    (result,) = compile_file(str(module), 4, compile=False)
    assert not result.ok and result.error.kind == "unsupported"
    assert "cumsum" in str(result.error) and "(from all_reduce_ring.yaml line 56)" in str(result.error)
    assert result.error.line == next(i for i, ln in enumerate(module.read_text().splitlines(), 1) if "cumsum" in ln)


def test_run_on_gpus_refuses_without_two_hopper_gpus(capsys):
    from ringc.cli import main
    rc = main(["run", str(ROOT / "schedules" / "ppermute_right.yaml"), "--devices", "2", "--target", "mgpu"])
    err = capsys.readouterr().err
    assert rc != 0
    assert "on Hopper GPUs; this machine has 0" in err and err.count("error:") == 1


def test_emit_cli_writes_a_gpu_module(tmp_path, capsys):
    from ringc.cli import main
    out = tmp_path / "k.py"
    assert main(["emit", str(ROOT / "schedules" / "ppermute_right.yaml"), "--target", "mgpu", "-o", str(out)]) == 0
    text = out.read_text()
    assert text.startswith('"""Generated by ringc from ppermute_right.yaml for Pallas Mosaic GPU')
    assert "CHECKED = [" in text  # checked before emitting, as for TPU
    rc = main(["emit", str(ROOT / "schedules" / "all_gather_matmul_streamed.yaml"), "--target", "mgpu"])
    assert rc != 0 and "line 79" in capsys.readouterr().err


needs_plugin = pytest.mark.skipif(not __import__("ringc.compile.gpu", fromlist=["gpu_available"]).gpu_available(),
                                  reason="needs the CUDA plugin and ptxas (pip install ringc[gpu])")


@needs_plugin
@pytest.mark.parametrize("name", ["ppermute_right", "all_gather_ring", "all_reduce_ring", "reduce_scatter_bidirectional",
                                  "all_gather_matmul", "all_reduce_one_shot"])
def test_emitted_module_compiles_for_sm90a(tmp_path, name):
    from ringc.compile.gpu import compile_file
    path = ROOT / "schedules" / f"{name}.yaml"
    (result,) = compile_file(_emit(tmp_path, path), 4, params=_gpu_params(ringc.load(str(path))))
    assert result.ok, result.to_text(verbose=True)
    assert result.kernels and all(k.spill_stores == 0 and k.registers for k in result.kernels)
