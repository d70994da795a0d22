"""Kernels written in the style of real public code (tests/pallas_import/real_style/),
each a regression test for something `ringc check` got wrong on the published original
(the sources and verdicts: tests/real_kernels/manifest.yaml)."""

from pathlib import Path

import pytest

from ringc.cli import main
from ringc.pallas import check_file

HERE = Path(__file__).parent / "pallas_import" / "real_style"


def test_select_ref_and_scalar_smem_operands_are_checked():
    """`pl.select_ref(idx_ref[...], a, b)` with a 0-d SMEM index (JAX's
    tpu_pallas_distributed_test.py select_ref tests): was "SelectTransform is not supported",
    and a 0-d ref in a racy program an IndexError."""
    reports = check_file(str(HERE / "select_ref_cases.py"), 4)
    by_test = {r.title.split(":")[0].split(" (")[0]: r for r in reports}
    assert by_test["SelectRefTest.test_exchange_selected0"].ok
    assert by_test["SelectRefTest.test_exchange_selected1"].ok
    assert by_test["SelectRefTest.test_exchange_no_recv_wait"].kinds() == {"dma_not_waited", "race"}
    strided = by_test["SelectRefTest.test_strided_send"]
    assert not strided.ok and "strided slice" in strided.to_text()


def test_a_call_not_checked_among_others_is_summed_up(capsys):
    """A test module with one call ringc cannot check: its own "not checked" verdict and the
    summary line (was: internal error, `CallError` has no `program`)."""
    rc = main(["check", str(HERE / "select_ref_cases.py"), "--devices", "4"])
    captured = capsys.readouterr()
    assert rc == 1
    assert "not checked" in captured.out
    # the call not checked is counted as that, not as a failed verdict
    assert "4 verdicts in 1 file: 2 ok, 1 failed, 1 not checked" in captured.err


def test_a_race_between_two_runs_of_one_line_in_a_helper_says_which_is_which():
    """Two DMAs started from one line of a Python loop, through a helper (the way
    tpu-inference's kernels start theirs in `_start_or_wait_copy`): the two accesses of the
    write-write race are told apart, and the finding names the helper's callers."""
    path = HERE / "loop_sends.py"
    text = path.read_text().splitlines()
    start = next(i for i, line in enumerate(text, 1) if "copy.start()" in line)
    call = next(i for i, line in enumerate(text, 1) if "copies.append(_start(" in line)
    launch = next(i for i, line in enumerate(text, 1) if line.startswith("result = launch(x)"))
    report, = check_file(str(path), 4)
    assert report.kinds() == {"race"}
    assert report.title.startswith(f"send_halves_kernel (line {launch}, through launch() at line ")
    race = report.findings[0]
    assert int(race.event.line) == start
    assert "(1st time the line runs there)" in race.message and "(2nd time)" in race.message
    assert race.event.line.via == f"in _start(), called from send_halves_kernel() at line {call}"
    assert f"line {start} is in _start(), called from send_halves_kernel() at line {call}" in report.to_text()


def test_a_markdown_note_skips_its_pseudocode_blocks_and_checks_its_example():
    """A design note's ```py pseudocode (jax-ml/jax docs/pallas/design/async_note.md has
    `pl.pallas_call(k, out_shape=x, ...)`) was "not valid Python" for the whole file."""
    report, = check_file(str(HERE / "design_note.md"), 3)
    assert report.ok and report.title.startswith("permute_kernel (line ")
    assert any("is not valid Python" in a and "ringc skipped it" in a for a in report.assumptions)


def test_top_level_prints_of_values_are_not_run_but_prints_that_call_the_script_are():
    """The tutorial prints slices of its 1 GiB sharded arrays (`input_arr[::4, 0]`): 20 s on
    CPU devices, for output ringc drops. A print that calls the script's own function may
    run a kernel, so it runs."""
    import ast

    from ringc.pallas.script import _only_prints

    def only(src):
        return _only_prints(ast.parse(src).body[0])
    assert only("print('Input:', x.shape, x[::4, 0])")
    assert only("print('Difference', jnp.mean(jnp.abs(a - b)))")
    assert only("print(f'{x.sum():.3f}')")
    assert not only("print(run(x))")
    assert not only("print(pl.pallas_call(kernel, out_shape=o)(x))")   # a kernel, run where it is printed
    assert not only("print(jax.jit(add)(x, y))")
    assert not only("print(x, file=log)")
    assert not only("y = print(x)")


def test_a_library_switch_picks_the_kernel_with_a_word_param(capsys):
    """A per-shard `reduce_scatter(x, axis_name, mode="auto")` whose default runs lax (as
    collective libraries such as erfanzar/ejkernel's do): `--param mode=one_shot` selects the
    kernel (--param took integers only), and without it the message names the switch."""
    path = str(HERE / "one_shot_reduce_scatter.py")
    base = ["check", path, "--devices", "4", "--entry", "reduce_scatter", "--arg", "x=float32[32*N,128]@x"]
    assert main(base) == 2
    assert "it kept its defaults mode='auto', wait_sends=True" in capsys.readouterr().err
    assert main(base + ["--param", "mode=one_shot"]) == 0
    assert "reduce_scatter(x=float32[32*N,128]@x, mode=one_shot): _kernel" in capsys.readouterr().out
    assert main(base + ["--param", "mode=one_shot", "--param", "wait_sends=false"]) == 1
    out = capsys.readouterr().out
    assert "[dma_not_waited]" in out and "wait_sends=False" in out


def test_a_schedule_refuses_a_word_param(capsys):
    schedule = str(Path(__file__).parent.parent / "schedules" / "all_reduce_ring.yaml")
    assert main(["check", schedule, "--devices", "2", "--param", "rows=many"]) == 2
    assert "a schedule's parameters are integers" in capsys.readouterr().err


def test_a_generic_kernel_wrapper_is_titled_with_the_kernel_it_runs():
    """beshrislambouli/TPU-Collectives runs every kernel inside a `kernel_wrapper` that loops
    with `lax.fori_loop`: its 11 verdicts were all `kernel_wrapper (line 859, ...)`. Now the
    title names the user's kernel the wrapper runs, and the script line and helpers."""
    path = HERE / "looped_launch.py"
    text = path.read_text().splitlines()
    main_line = next(i for i, line in enumerate(text, 1) if line.strip() == "main()")
    first, second = check_file(str(path), 4)
    assert first.title.startswith(f"shift_kernel in kernel_wrapper (line {main_line}, through main() at line ")
    assert "run_scenario() at line" in first.title
    assert {f.kind for f in first.errors()} == {f.kind for f in second.errors()} == {"race"}


def test_newer_jax_tensorcore_mesh_and_kernel_keywords_are_aliased(tmp_path):
    """JAX's tpu_pallas_interpret_distributed_test.py (at cec06d1) and its quickstart build
    `pltpu.TensorCoreMesh(axis_name=...)`, a name the jax ringc runs on lacks (it was an empty
    AttributeError, then a refusal); older code calls `pl.kernel(out_shape=...,
    scratch_shapes=...)`. Both are aliased, and the verdict says so: here a kernel over one
    chip's two cores (outside shard_map: N = 1), whose cores write the same slice."""
    script = tmp_path / "core_mesh.py"
    script.write_text(
        "import jax\nimport jax.numpy as jnp\nfrom jax.experimental import pallas as pl\n"
        "from jax.experimental.pallas import tpu as pltpu\n\n"
        # newer JAX's fields, which its tests read (tpu_pallas_memory_space_test.py: `mesh.num_cores`)
        "CORES = pltpu.TensorCoreMesh(axis_name='core').num_cores\n\n\n"
        "@pl.kernel(out_shape=jax.ShapeDtypeStruct((128 * CORES,), jnp.float32),\n"
        "           mesh=pltpu.TensorCoreMesh(axis_name='core', num_cores=2),\n"
        "           scratch_shapes=dict(v=pltpu.VMEM((128,), jnp.float32)))\n"
        "def fill(o_ref, v):\n"
        "    v[...] = jnp.zeros((128,), jnp.float32) + jax.lax.axis_index('core')\n"
        "    pltpu.sync_copy(v, o_ref.at[pl.ds(0, 128)])\n\n\n"
        "out = fill()\n")
    (report,) = check_file(str(script), 1, tpu="v5p")
    assert report.program.cores == 2 and "race" in report.kinds(), report.to_text()
    assert any("pltpu.TensorCoreMesh(axis_name, num_cores)" in a for a in report.assumptions)
    assert any("pl.kernel(out_shape=..., scratch_shapes=...)" in a for a in report.assumptions)
    copy_line = next(n for n, ln in enumerate(script.read_text().splitlines(), 1) if "sync_copy" in ln)
    assert any(int(f.event.line) == copy_line for f in report.findings if f.kind == "race")


RING_ARGS = ["--arg", "q=float32[256*N,128]@x", "--arg", "k=float32[256*N,128]@x", "--arg", "v=float32[256*N,128]@x"]


def _ring(capsys, *extra):
    rc = main(["check", str(HERE / "ring_flash.py"), "--devices", "4", *RING_ARGS, *extra])
    return rc, capsys.readouterr().out


def test_ring_attention_single_device_kernels_round_a_ppermute_ring_get_a_verdict(capsys):
    """Ring attention as libraries publish it (erfanzar/ejkernel ring_attention): a flash
    pallas_call per step, `lax.ppermute` of K/V between. Each call is checked as the
    single-device kernel it is, the ring is stated (a single cycle through every device), and
    the accumulator outputs the program drops are scratch, not a megacore result (they were
    three megacore_vmem findings per call). The old spellings it carries are aliased."""
    rc, out = _ring(capsys)
    assert rc == 0, out
    assert ": _flash_block (line " in out and "N=4: ok" in out
    assert ("single-device kernels: no pallas_call moves data or signals between devices" in out
            and "lax.ppermute on axis 'x', i -> i+1 mod 4: one cycle through all 4 devices" in out)
    assert "the program never reads outputs `m_scratch_ref`, `l_scratch_ref`, `acc_scratch_ref`" in out
    for alias in ("jax.jit(abstracted_axes=None) -> jax.jit", "OldOrderSpec) -> a plain pl.BlockSpec",
                  "pltpu.repeat(x, r, axis) -> jnp.tile"):
        assert alias in out


def test_ring_attention_returning_its_accumulator_output_fails_on_megacore(capsys):
    """The broken case: the caller keeps the accumulator output, which both TensorCores of a
    megacore chip write back from their own VMEM (JAX's interpret mode models one core)."""
    rc, out = _ring(capsys, "--param", "keep_scratch=true")
    assert rc == 1
    assert "[megacore_vmem] output `acc_scratch_ref` (line " in out
    assert "`m_scratch_ref`, `l_scratch_ref` of the pallas_call" in out and "m_scratch_ref` (line" not in out


def test_a_ring_that_does_not_visit_every_device_is_stated(capsys):
    """`shift=2` on 4 devices: two cycles of 2, so each device attends to half the keys (JAX's
    interpret mode: max error 0.25 against softmax(q k^T) v, against 2e-7 at shift=1). ringc
    checks no meaning for attention; the verdict says what the ring is."""
    rc, out = _ring(capsys, "--param", "shift=2")
    assert rc == 0
    assert "i -> i+2 mod 4: 2 cycles of 2 devices (an array passed on only visits its own cycle's devices)" in out


def test_param_takes_none_floats_and_python_literals():
    """haoliuhl/ringattention's entry takes `blockwise_kwargs` (a dict) and `attn_bias=None`
    without defaults: `--param` passes them (it took integers and words only)."""
    from ringc.cli import _param
    assert _param("attn_bias=None") == ("attn_bias", None)
    assert _param("kw={'query_chunk_size': 128, 'causal_block_size': None}") == (
        "kw", {"query_chunk_size": 128, "causal_block_size": None})
    assert _param("pdrop=0.5") == ("pdrop", 0.5) and _param("sizes=[1, 2]") == ("sizes", [1, 2])
    assert _param("mode=one_shot") == ("mode", "one_shot") and _param("n=3") == ("n", 3)
    import argparse
    import pytest
    with pytest.raises(argparse.ArgumentTypeError, match="not a Python literal"):
        _param("kw={'a': ")


def test_lax_collectives_beside_kernels_that_communicate_are_named_apart(tmp_path):
    """A per-shard launcher whose kernel sends to its right neighbour, then a `lax.psum` and a
    pairwise `lax.ppermute` of the result: the kernel is checked as a collective kernel, and the
    verdict names the lax collectives XLA runs between (not the single-device wording)."""
    entries = Path(__file__).parent / "pallas_import" / "entries"
    path = tmp_path / "permute_then_psum.py"
    path.write_text((entries / "permute_shard.py").read_text() + '''

def permute_then_reduce(x: jax.Array, axis_name: str = TP) -> jax.Array:
    y = lax.psum(right_permute(x), axis_name)
    return lax.ppermute(y, axis_name, [(0, 1), (1, 0), (2, 3)])
''')
    report, = check_file(str(path), 4, entry="permute_then_reduce", axis="tp")
    assert report.ok, report.to_text()
    text = report.to_text()
    assert "single-device kernels" not in text
    lines = path.read_text().splitlines()
    psum = next(i for i, ln in enumerate(lines, 1) if "lax.psum(right_permute" in ln)
    assert (f"between the kernels XLA runs lax.psum on axis 'tp' (line {psum}); lax.ppermute on axis 'tp', 3 pairs: "
            "cycles of 2 devices and 1 chain that ends (a device no pair sends to receives zeros) "
            f"(line {psum + 1}): value semantics, nothing to race; not part of the check") in text


def test_a_multi_host_benchmark_script_is_checked_as_one_host(monkeypatch):
    """A microbenchmark that calls `jax.distributed.initialize()` at import (unless an env var
    says single host), sizes from env vars, a mesh from the devices' coords, `main()` under
    `__main__`, one remote DMA per (token, top-k) assignment from a `fori_loop`: was a script
    note with JAX's RuntimeError ("must be called before any JAX calls"). Now the
    initialization is answered as one host, which the verdict states at the script's line; the
    warm-up and timed calls are one check; skipping the receive wait is found."""
    path = HERE / "multihost_scatter.py"
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "jax.distributed.initialize()" in t)
    (report,) = check_file(str(path), 4)
    assert report.ok, report.to_text()
    assert "and 2 identical calls" in report.title
    text = report.to_text()
    assert f"a single host: jax.distributed.initialize() (line {line}) returned at once" in text
    assert "process 0 of 1" in text and "RuntimeError" not in text
    monkeypatch.setenv("SCATTER_WRONG", "1")
    (wrong,) = check_file(str(path), 4)
    assert "dma_not_waited" in wrong.kinds()
    monkeypatch.setenv("SCATTER_SINGLE_HOST", "1")  # the script's own switch: nothing to state
    monkeypatch.delenv("SCATTER_WRONG")
    (single,) = check_file(str(path), 4)
    assert single.ok and "jax.distributed.initialize" not in single.to_text()


def test_an_old_api_test_module_reaches_its_verdicts():
    """A distributed test written against JAX 0.4.3x (JAX's own interpret-mode tests of 2024):
    `pl.pallas_call(..., backend='mosaic_tpu')` was a TypeError before any kernel ran; now the
    keyword is dropped (stated), and a permute sent four times into the same block is the
    write-write race JAX's interpret-mode detector reports, sent once ok."""
    reports = check_file(str(HERE / "old_api_permute_cases.py"), 4)
    by_test = {r.title.split(":")[0]: r for r in reports}
    assert by_test["OldApiPermuteTest.test_single_permute"].ok
    repeated = by_test["OldApiPermuteTest.test_repeated_permute"]
    assert repeated.kinds() == {"race"}
    # which runs of the scan's body race: its iterations (`Event.loops`)
    assert ("from device 3, iteration 0 of the loop at line 58 (line 55), while copy `input_ref->output_ref` "
            "(device 3 -> 0) writes it at device 3, iteration 1 of the loop at line 58") in repeated.to_text()
    assert "pl.pallas_call(backend='mosaic_tpu') -> pl.pallas_call" in repeated.to_text()


def test_a_gpu_backend_keyword_is_refused_by_name(tmp_path):
    """`pl.pallas_call(..., backend='triton')` (old JAX's GPU spelling) is not checked as a TPU
    kernel: the user's test stops with a message naming the backend."""
    from ringc.pallas.compat import AliasLog, aliases
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    import jax
    import pytest

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    with aliases(AliasLog()) as log:
        with pytest.raises(TypeError, match=r"backend='triton'\) asks for a GPU backend, which is not supported yet"):
            pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32), backend="triton")
        assert not log.used


MEGACORE_COPY = '''
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

def kernel(x_hbm, o_ref, buf, sem):
    c, j = pl.program_id(0), pl.program_id(1)
    cp = pltpu.make_async_copy(x_hbm.at[c * 2 + j], buf, sem)
    cp.start()
    cp.wait()
    o_ref[...] = buf[...]

x = jnp.ones((4, 8, 128), jnp.float32)
out = jax.jit(pl.pallas_call(
    kernel, grid=(2, 2), in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
    out_specs=pl.BlockSpec((None, 8, 128), lambda c, j: (c * 2 + j, 0, 0)),
    out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA(())],
    compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary"))))(x)
'''


def test_core_1s_copies_into_its_own_vmem_under_a_parallel_axis_are_no_finding(tmp_path):
    """JAX's paged attention with `megacore_mode` on v5p (sweep 9): each TensorCore, on its half
    of the `parallel` axis, copies pages into its own VMEM with its own DMA semaphore. That
    was a `megacore_dma` finding (the YAML model's rule for `megacore: true`, whose core 1
    issues no DMA); it is clean, and saying so. Core 1 copying into HBM rows core 0 reads is
    still a finding (into rows of its own it is not: the next test)."""
    path = tmp_path / "paged_style.py"
    path.write_text(MEGACORE_COPY)
    ok, = check_file(str(path), 1, tpu="v5p")
    assert ok.ok, ok.to_text()
    assert any("core 1's waits are checked against its own copies" in a for a in ok.assumptions), ok.assumptions
    to_hbm = tmp_path / "to_hbm.py"
    to_hbm.write_text(MEGACORE_COPY.replace("cp.start()", "cp.start()\n    cp.wait()\n    cp = pltpu.make_async_copy("
                                            "buf, x_hbm.at[(c + 1) % 2 * 2 + j], sem)\n    cp.start()"))
    bad, = check_file(str(to_hbm), 1, tpu="v5p")
    assert "megacore_dma" in bad.kinds(), bad.to_text()
    # in the words of Pallas, not the YAML model's (`when: core == 0`: sweep 9)
    message = next(f.message for f in bad.findings if f.kind == "megacore_dma")
    assert "make the axis `arbitrary`" in message and "when: core" not in message, message


MASKED = '''
import jax, jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

EARLY = False

def kernel(x_hbm, o_ref, buf, sem):
    cp = pltpu.make_async_copy(x_hbm, buf, sem)
    cp.start()
    if not EARLY:
        cp.wait()
    rows = lax.broadcasted_iota(jnp.int32, buf.shape, 0)
    pltpu.store(buf, jnp.zeros(buf.shape, jnp.float32), mask=rows >= 4)
    if EARLY:
        cp.wait()
    o_ref[...] = pltpu.load(buf, mask=rows < 4) + 1

x = jnp.ones((8, 128), jnp.float32)
out = jax.jit(pl.pallas_call(kernel, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                             out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                             scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA(())]))(x)
'''


def test_masked_loads_and_stores_are_whole_box_accesses(tmp_path):
    """JAX's ragged paged attention stores with `mask=` (sweep 9: refused, "ringc models
    whole-box stores"): a masked store reads its box and writes it back, a masked load reads
    it, and the verdict says so; a masked store into a buffer a DMA is still filling races."""
    path = tmp_path / "masked.py"
    path.write_text(MASKED)
    ok, = check_file(str(path), 1)
    assert ok.ok, ok.to_text()
    assert any(a.startswith("a masked load or store") for a in ok.assumptions), ok.assumptions
    early = tmp_path / "early.py"
    early.write_text(MASKED.replace("EARLY = False", "EARLY = True"))
    bad, = check_file(str(early), 1)
    assert not bad.ok and "race" in bad.kinds(), bad.to_text()


PREFETCH_FLAG = '''
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

def kernel(flag_ref, x_hbm, o_ref, buf, sems):
    c, j = pl.program_id(0), pl.program_id(1)
    nj = pl.num_programs(1)
    def cp(jj):
        return pltpu.make_async_copy(x_hbm.at[c * nj + jj], buf.at[jj % 2], sems.at[jj % 2])
    first = flag_ref[0]
    flag_ref[0] = 0
    @pl.when(first == 1)
    def _():
        cp(j).start()
    @pl.when(j + 1 < nj)
    def _():
        cp(j + 1).start()
    cp(j).wait()
    o_ref[...] = buf[j % 2]

x = jnp.ones((4, 8, 128), jnp.float32)
out = jax.jit(pl.pallas_call(
    kernel, grid_spec=pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(2, 2), in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((None, 8, 128), lambda c, j, f: (c * 2 + j, 0, 0)),
        scratch_shapes=[pltpu.VMEM((2, 8, 128), jnp.float32), pltpu.SemaphoreType.DMA((2,))]),
    out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary"))))(jnp.array([1], jnp.int32), x)
'''


def test_core_1_starts_from_the_calls_entry_state_and_its_waits_need_its_own_copies(tmp_path):
    """JAX's paged attention (`megacore_mode="batch"`, v5p; sweep 9): a scalar-prefetch flag
    the kernel clears starts each core's first copy, since each TensorCore has its own SMEM
    copy of it. Core 1 ran on after core 0's state (the flag already 0), a false
    `parallel_dependency`; it starts from the entry state: ok. Starting the first copy on
    core 0 only leaves core 1 waiting for bytes no copy of its own brings: a hang."""
    path = tmp_path / "flag.py"
    path.write_text(PREFETCH_FLAG)
    ok, = check_file(str(path), 1, tpu="v5p")
    assert ok.ok, ok.to_text()
    broken = tmp_path / "core0_only.py"
    broken.write_text(PREFETCH_FLAG.replace("@pl.when(first == 1)", "@pl.when((first == 1) & (c == 0))"))
    bad, = check_file(str(broken), 1, tpu="v5p")
    assert "hang" in bad.kinds(), bad.to_text()
    assert any("on core 1 (its half of the parallel grid axis) no copy of its own started them" in f.message
               for f in bad.findings)


BLOCK_KEPT = '''
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

def kernel(x_ref, y_ref, o_ref, acc_ref):
    acc_ref[...] = x_ref[...] + y_ref[...]
    o_ref[...] = acc_ref[...]

out = jax.jit(pl.pallas_call(
    kernel, grid=(2, 2),
    in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, 0)),     # kept across j, as a matmul's lhs
              pl.BlockSpec((8, 128), lambda i, j: (i, j))],
    out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, j)),
    out_shape=jax.ShapeDtypeStruct((16, 256), jnp.float32),
    scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)],
    compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel"))))(
        jnp.ones((16, 128), jnp.float32), jnp.ones((16, 256), jnp.float32))
'''


@pytest.mark.parametrize("variant,kinds", [
    ("as published", set()),
    # the scratch written at j = 0 only, read at every j: a dependency between the j's
    ("scratch from j = 0", {"parallel_dependency"}),
    # both halves of i (the axis split over the TensorCores) write the output block (0, j)
    ("one output block", {"race", "parallel_dependency", "megacore_vmem", "megacore_dma"}),
])
def test_an_input_block_kept_across_a_parallel_axis_is_no_dependency(tmp_path, variant, kinds):
    """JAX's fusible matmul test and axlearn's online softmax (sweep 10): an input whose block
    index ignores a parallel axis (`lambda i, j: (i, 0)`) is fetched once and kept while `j`
    moves on, and that skipped fetch was a false `parallel_dependency`. Mosaic's pipeline
    fetches what the iteration before it on its own core did not, so each parallel index is
    modelled as fetching its input blocks itself; state the kernel keeps across the axis, or
    one output block the iterations share, is still found."""
    text = BLOCK_KEPT
    if variant == "scratch from j = 0":
        text = text.replace("    acc_ref[...] = x_ref[...] + y_ref[...]\n",
                            "    @pl.when(pl.program_id(1) == 0)\n    def _():\n"
                            "        acc_ref[...] = x_ref[...] + y_ref[...]\n")
    elif variant == "one output block":
        text = text.replace("out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, j))",
                            "out_specs=pl.BlockSpec((8, 128), lambda i, j: (0, j))")
    path = tmp_path / "kept.py"
    path.write_text(text)
    report, = check_file(str(path), 1)
    if not kinds:
        assert report.ok, report.to_text()
    else:
        assert not report.ok and set(report.kinds()) & kinds, report.to_text()


VMAPPED = '''
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

def kernel(s_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...] + s_ref[pl.program_id(0)].astype(jnp.float32)

def f(x):
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32), grid=(2,),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
    )(jnp.array([1, 0], jnp.int32), x)

jax.jit(jax.vmap(f))(jnp.zeros((4, 16, 128), jnp.float32))
'''

NAMED_GRID = '''
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

def kernel(s_ref, x, y):
    y[:] = x[:] + s_ref[jax.lax.axis_index('bar')].astype(x.dtype)

jax.jit(lambda s, x: pl.pallas_call(
    kernel,
    grid_spec=pl.GridSpec(grid=(('foo', 2), ('bar', 4)),
                          in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec((8, 128), lambda i, j: (i, j))],
                          out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, j))),
    out_shape=jax.ShapeDtypeStruct((16, 512), jnp.float32))(s, x))(jnp.zeros((4,), jnp.int32), jnp.zeros((16, 512)))
'''


@pytest.mark.parametrize("text,broken", [
    (VMAPPED, ("s_ref[pl.program_id(0)]", "s_ref[pl.program_id(0) + 1]")),
    (NAMED_GRID, ("s_ref[jax.lax.axis_index('bar')]", "s_ref[jax.lax.axis_index('bar') + 1]")),
])
def test_program_id_counts_the_kernels_own_grid_dims(tmp_path, text, broken):
    """A vmapped pallas_call (JAX's tests vmap kernels) adds a batch dim to the grid that the
    kernel's `program_id(0)` does not count: it was read as the batch index, a false
    out_of_bounds; and a named grid dim (`grid=(("foo", 2), ("bar", 4))`, `axis_index("bar")`)
    was refused as not a mesh axis (sweep 10). Both read as Mosaic lowers them; one past the
    end is still out_of_bounds."""
    path = tmp_path / "k.py"
    path.write_text(text)
    report, = check_file(str(path), 1)
    assert report.ok, report.to_text()
    path.write_text(text.replace(*broken))
    report, = check_file(str(path), 1)
    assert "out_of_bounds" in report.kinds(), report.to_text()


@pytest.mark.parametrize("text", [
    # a bitcast view to a narrower type of an int32 buffer whose values ringc follows
    '''
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl

def kernel(x_ref, y_ref):
    y_ref[...] = x_ref.at[:8, :128].bitcast(jnp.int16)[...]

jax.jit(lambda x: pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.int16))(x))(
    jnp.arange(16 * 256, dtype=jnp.int32).reshape(16, 256))
''',
    # a grid sized by jax.random under jit (the key has no numpy array)
    '''
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl

def kernel(o_ref):
    o_ref[0] = 42.0

@jax.jit
def f():
    n = jax.random.randint(jax.random.key(0), (), 10, 20, dtype=jnp.int32)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((1,), jnp.float32), grid=(n,),
                          out_specs=pl.BlockSpec((1,), lambda _: (0,)))()

f()
'''])
def test_what_was_an_internal_error_is_checked(tmp_path, text):
    """Sweep 10's internal errors: a ref's `.bitcast` to a narrower type ('cannot reshape
    array'), a grid sized by `jax.random` ('PRNGKey dtype cannot be converted to a NumPy
    array'). Both reach a verdict; an access one past the output's end still is a finding."""
    path = tmp_path / "k.py"
    path.write_text(text)
    report, = check_file(str(path), 1)
    assert report.ok, report.to_text()
    # the broken case: an output block past the output's end (the index map's, which JAX
    # does not check when tracing)
    path.write_text(text.replace("pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.int16))",
                                 "pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.int16), grid=(1,), "
                                 "in_specs=[pl.BlockSpec((16, 256), lambda i: (0, 0))], "
                                 "out_specs=pl.BlockSpec((16, 128), lambda i: (0, 1)))")
                    .replace("lambda _: (0,)", "lambda _: (1,)"))
    report, = check_file(str(path), 1)
    assert "out_of_bounds" in report.kinds(), report.to_text()


SELF_COPY = '''
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

def kernel(x_ref, o_ref, send, recv):
    me = jax.lax.axis_index("x")
    c = pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=TARGET,
                                     device_id_type=pl.DeviceIdType.LOGICAL)
    c.start()
    c.wait()

mesh = jax.make_mesh((2,), ("x",))
f = jax.jit(jax.shard_map(lambda x: pl.pallas_call(
    kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
    out_specs=pl.BlockSpec(memory_space=pl.ANY), scratch_shapes=[pltpu.SemaphoreType.DMA] * 2)(x),
    mesh=mesh, in_specs=jax.P("x"), out_specs=jax.P("x"), check_vma=False))
f(jnp.zeros((16, 128), jnp.float32))
'''


def test_a_copy_to_its_own_device_is_said_in_the_words_of_pallas(tmp_path):
    """A remote copy whose computed target is the sender (`self_target`) was told to add
    `self_copy: true`, a YAML key (sweep 10); a Pallas kernel is told to copy locally or to
    give `lax.axis_index` itself as the device id, which then is no warning."""
    path = tmp_path / "self_copy.py"
    path.write_text(SELF_COPY.replace("TARGET", "(me + 2) % 2"))
    report, = check_file(str(path), 2)
    message = next(f.message for f in report.findings if f.kind == "self_target")
    assert "pltpu.make_async_copy" in message and "self_copy: true" not in message, message
    path.write_text(SELF_COPY.replace("TARGET", "me"))
    report, = check_file(str(path), 2)
    assert "self_target" not in report.kinds(), report.to_text()


MEGACORE_TEMPLATE = '''
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

def inner(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0

def outer(x_hbm, o_hbm):
    c = pl.program_id(0)
    pltpu.emit_pipeline(
        inner, grid=(2,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (c * 2 + i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (c * 2 + i, 0)),
    )(x_hbm, o_hbm)

jax.jit(lambda x: pl.pallas_call(
    outer, grid=(2,), in_specs=[pl.BlockSpec(memory_space=pltpu.ANY)],
    out_specs=pl.BlockSpec(memory_space=pltpu.ANY), out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
    compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)))(x))(jnp.zeros((32, 128), jnp.float32))
'''


def test_each_core_writing_back_its_own_rows_is_no_megacore_finding(tmp_path):
    """JAX's megacore pipelining template (docs pipelining.md; sglang-jax's fused_mlp.py,
    sweep 11): a `parallel` outer axis, each step an emit_pipeline over its own rows, so core
    1 copies into HBM rows core 0 never touches: no shared state, ok on v5p. Core 1 writing
    rows core 0 writes too is still `megacore_dma` (and a `parallel_dependency`)."""
    path = tmp_path / "template.py"
    path.write_text(MEGACORE_TEMPLATE)
    ok, = check_file(str(path), 1, tpu="v5p")
    assert ok.ok, ok.to_text()
    path.write_text(MEGACORE_TEMPLATE.replace("out_specs=pl.BlockSpec((8, 128), lambda i: (c * 2 + i, 0))",
                                              "out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0))"))
    bad, = check_file(str(path), 1, tpu="v5p")
    assert {"megacore_dma", "parallel_dependency"} <= set(bad.kinds()), bad.to_text()
