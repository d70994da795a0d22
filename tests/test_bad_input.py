"""One regression test per class of bad input in issue 20: each is refused with exit 2, at
its line, with a fix and quickly (or, for merge keys and long names, works).

Every command runs in-process through `cli_run.run_cli`, under a time budget, so a hang
fails the test instead of stalling the suite.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from cli_run import assert_clean, assert_refused, run_cli
from conftest import REPO, line_of

from ringc import limits

AG = REPO / "schedules" / "all_gather_ring.yaml"
AR = REPO / "schedules" / "all_reduce_ring.yaml"
PP = REPO / "schedules" / "ppermute_right.yaml"
PIPE = REPO / "schedules" / "reduce_scatter_pipelined.yaml"


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def edited(path: Path, old: str, new: str) -> str:
    text = path.read_text()
    assert old in text
    return text.replace(old, new, 1)


# ----------------------------------------------------------------------- YAML

def test_yaml_tag_is_refused_at_its_line(tmp_path):
    text = edited(AG, "collective: all_gather", "collective: !custom all_gather")
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, line_of(text, "!custom"), says="YAML tag `!custom`")


@pytest.mark.parametrize("tag", ["!!python/object:os.system", "!!binary aGk=", "!!set {a, b}"])
def test_other_tags_are_refused(tmp_path, tag):
    text = edited(AG, "name: all_gather_ring", f"name: all_gather_ring\ndescription: {tag}")
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, line_of(text, tag), says="YAML tag")


MERGED = """\
  x:   &io {kind: input,  shape: [rows, cols]}
  out:
    <<: *io
    kind: output
    slots: N"""


def test_merge_keys_work(tmp_path):
    text = edited(AG, "  x:   {kind: input,  shape: [rows, cols]}\n  out: {kind: output, slots: N, shape: [rows, cols]}",
                  MERGED)
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert o.code == 0, str(o)


def test_an_error_in_a_merged_key_names_the_line_it_was_written_on(tmp_path):
    # `params` is merged into a buffer: its keys are not buffer keys, and the error names
    # the line where the merged key was written, in the anchored mapping.
    text = edited(AG, "params: {rows: 8, cols: 128}", "params: &p\n  rows: 8\n  cols: 128")
    text = edited(Path(write(tmp_path, text)), "  x:   {kind: input,  shape: [rows, cols]}",
                  "  x:\n    <<: *p\n    kind: input\n    shape: [rows, cols]")
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, line_of(text, "  rows: 8"), says="unknown key `rows`")


def test_a_model_error_in_a_merging_mapping_names_the_mapping(tmp_path):
    text = edited(AG, "  x:   {kind: input,  shape: [rows, cols]}",
                  "  x:   &io {kind: input,  shape: [rows, cols], space: hbm}\n  tmp:\n    <<: *io\n"
                  "    kind: hbm_scratch")
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, line_of(text, "<<: *io"), says="`space` applies to inputs and outputs only")


def test_recursive_alias_is_refused(tmp_path):
    text = AG.read_text() + "extra: &a [*a]\n"
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, line_of(text, "extra:"), says="recursive alias")


def test_billion_laughs_stops_at_the_node_limit(tmp_path):
    text = 'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    for prev, name in zip("abcdefgh", "bcdefghi"):
        text += f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]\n"
    assert len(text) < 1024
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, says="`yaml_nodes`")
    assert "--limit yaml_nodes=" in o.err and "RINGC_LIMIT_YAML_NODES" in o.err


@pytest.mark.parametrize("depth", [100, 100_000])
def test_deeply_nested_yaml_is_refused(tmp_path, depth):
    text = AG.read_text() + "description: " + "[" * depth + "]" * depth + "\n"
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, says="`yaml_depth`")


@pytest.mark.parametrize("loader", ["CSafeLoader", "SafeLoader"])
def test_yaml_depth_is_ringcs_whichever_parser_reads_the_file(tmp_path, monkeypatch, loader):
    """libyaml stops at 1,000 levels on its own; the pure-Python parser does not. The
    limit in force (here raised past libyaml's) decides, not the parser: 1,500 levels
    within `yaml_depth=2000` are read (and refused for what they are, a list where
    text belongs), 2,500 are refused by the limit."""
    import yaml
    from ringc.ir import loader as L
    from ringc.errors import ScheduleError
    if not hasattr(yaml, loader):
        pytest.skip(f"this PyYAML has no {loader}")
    monkeypatch.setattr(L, "_Loader", getattr(yaml, loader))
    with limits.overridden({"yaml_depth": 2000}):
        for depth, says in ((1500, "Input should be a valid string"), (2500, "`yaml_depth` of 2,000")):
            text = AG.read_text() + "description: " + "[" * depth + "]" * depth + "\n"
            with pytest.raises(ScheduleError, match=re.escape(says)):
                L.load_text(text, "deep.yaml")


def test_integer_of_thousands_of_digits_is_refused_at_its_line(tmp_path):
    text = edited(AG, "params: {rows: 8, cols: 128}", "params: {rows: 8, cols: " + "9" * 5000 + "}")
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, line_of(text, "params:"), says="64-bit range")


def test_integer_just_past_64_bits_is_refused_in_an_expression(tmp_path):
    text = edited(AG, "grid: {step: N - 1}", f"grid: {{step: N - 1 + {2**63} - {2**63}}}")
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, line_of(text, "grid:"), says="64-bit range")


# ----------------------------------------------------------------------- files

def test_ten_megabyte_schedule_is_refused_unread(tmp_path):
    text = AG.read_text() + "# " + "x" * (10 << 20) + "\n"
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, says="`schedule_bytes`")


def test_dev_zero_is_refused():
    o = run_cli(["check", "/dev/zero", "--devices", "4"])
    assert_refused(o, says="`schedule_bytes`")


def test_the_file_size_limit_can_be_raised(tmp_path):
    text = AG.read_text() + "# " + "x" * (2 << 20) + "\n"
    p = write(tmp_path, text)
    assert run_cli(["check", p, "--devices", "2"]).code == 2
    o = run_cli(["check", p, "--devices", "2", "--limit", f"schedule_bytes={3 << 20}"], budget=60)
    assert o.code == 0, str(o)


# ----------------------------------------------------------------------- expressions

@pytest.mark.parametrize("expr,limit", [
    ("(" * 1000 + "N" + ")" * 1000, "expr_chars"),
    (" + ".join(["1"] * 20_000), "expr_chars"),
    ("(" * 90 + "N" + " + 0)" * 90, "expr_depth"),
    ("not " * 100 + "N", "expr_depth"),
    ("-" * 200 + "N", "expr_depth"),
])
def test_long_or_deep_expressions_are_refused_at_their_line(tmp_path, expr, limit):
    text = edited(AG, "  slot: (me - step) % N", f"  slot: {expr}")
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, line_of(text, "  slot:"), says=f"`{limit}`")


def test_expression_limits_can_be_raised(tmp_path):
    text = edited(AG, "  slot: (me - step) % N", "  slot: " + "(" * 70 + "(me - step) % N" + " + 0)" * 70)
    p = write(tmp_path, text)
    assert run_cli(["check", p, "--devices", "4"]).code == 2
    assert run_cli(["check", p, "--devices", "4", "--limit", "expr_depth=100"]).code == 0


# ----------------------------------------------------------------------- sizes and arguments

@pytest.mark.parametrize("argv,says", [
    (["check", AR, "--devices", "1..100000000000000000000000"], "64-bit range"),
    (["check", AR, "--devices", "1..1000000"], "`devices`"),
    (["check", AR, "--devices", "4", "--invocations", "100000"], "`invocations`"),
    (["check", AR, "--topology", "torus:100000x100000"], "`devices`"),
    (["cost", AR, "--topology", "ring:100000"], "`devices`"),
    (["cost", AR, "--topology", "ring:4", "--hop-latency", "inf"], "finite duration"),
    (["cost", AR, "--topology", "ring:4", "--hop-latency", "nan"], "finite duration"),
    (["cost", AR, "--topology", "ring:4", "--dma-overhead=-1us"], "finite duration"),
    (["cost", AR, "--topology", "ring:4", "--bytes", "9" * 400], "size"),
    (["cost", AR, "--topology", "ring:4", "--bytes", "2000TiB"], "`size_bytes`"),
    (["compile", AR, "--target", "v5e:1000x1000"], "`devices`"),
    (["compile", AR, "--target", "v5e:2x2", "--limit", "devices=3"], "`devices`"),
    (["run", AR, "--mesh", "1000x1000"], "`devices`"),
    (["run", AR, "--devices", "4", "--seed", "-1"], "seed"),
    (["run", AR, "--devices", "4096"], "`run_devices`"),
    (["show", AR, "--devices", "99999999"], "`devices`"),
    (["check", AR, "--devices", "4", "--param", "rows=" + "1" * 31], "64-bit range"),
    (["check", AR, "--devices", "4", "--param", "rows=10**30"], "name=integer"),
    (["check", AR, "--devices", "4", "--limit", "nonsense=3"], "--limit"),
    (["check", AR, "--devices", "4", "--limit", "devices=-3"], "positive integer"),
    (["check", AR, "--devices", "4", "--jobs", "0"], "positive integer"),
])
def test_arguments_are_range_checked_for_every_command(argv, says):
    o = run_cli(argv)
    assert_refused(o, says=says)


def test_a_huge_parameter_is_refused_where_shapes_are_evaluated():
    o = run_cli(["check", AR, "--devices", "4", "--param", f"rows={2**40}"])
    assert_refused(o, line_of(AR.read_text(), "  x: "), says="`buffer_bytes`")


def test_a_shape_that_no_parameter_divides_says_the_schedule_is_for_other_sizes(tmp_path):
    """`N // 3` on 4 devices divides for no parameter: the fix says the schedule is written
    for other axis sizes, not to choose parameters."""
    text = edited(AG, "recv_sems: {kind: dma, shape: [N - 1]}", "recv_sems: {kind: dma, shape: [N // 3 * 0 + N - 1]}")
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, line_of(text, "  recv_sems:"), says="depends on the axis sizes alone")


def test_a_grid_of_billions_is_refused(tmp_path):
    text = edited(AG, "grid: {step: N - 1}", "grid: {step: 1000000000 * N}")
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, line_of(text, "grid:"), says="`grid_points`")


def test_a_pipeline_grid_of_millions_of_blocks_is_refused():
    o = run_cli(["check", PIPE, "--devices", "4", "--param", f"rows={16 << 20}"])
    assert_refused(o, says="`grid_points`")


def test_the_events_limit_is_counted_before_unrolling():
    # a broken schedule is not decided from device 0's events: all 4,096 would be unrolled
    # (refused after the attempt from device 0's events alone, which is itself bounded)
    o = run_cli(["check", REPO / "tests" / "broken" / "all_reduce_no_capacity_wait.yaml", "--devices", "4096"],
                budget=60)
    assert_refused(o, says="`events`", seconds=60)
    assert re.search(r"all_reduce_no_capacity_wait.yaml:\d+: error: the events to unroll", o.err), str(o)
    # the cost model times every device of a schedule not proved symmetric: N events per
    # device's event, each re-rating flows on N devices; the timeline's own budget
    # (`timed_events`) stops it first, and `events` (N^2 per event) stands behind it
    corner = REPO / "tests" / "torus" / "all_gather_2d_corner_copies_twice.yaml"
    o = run_cli(["cost", corner, "--topology", "torus:64x64"], budget=60)
    assert_refused(o, says="`timed_events`", seconds=60)
    assert "the events of all 4096 devices to time" in o.err, str(o)
    o = run_cli(["cost", corner, "--topology", "torus:64x64", "--limit", "timed_events=10000000000"], budget=60)
    assert_refused(o, says="`events`", seconds=60)
    assert "the timed run of every device (4096 devices" in o.err, str(o)


def test_a_real_pod_is_not_refused():
    """4,096 chips: the library's rotation-symmetric ring is checked, and priced, from device 0's events."""
    o = run_cli(["check", AG, "--devices", "4096"], budget=120)
    assert o.code == 0, str(o)
    o = run_cli(["cost", AR, "--topology", "ring:4096"], budget=120)
    assert o.code == 0 and "symmetric quotient" in o.out, str(o)


def test_nan_hop_latency_never_calls_a_correct_schedule_a_hang():
    o = run_cli(["cost", AR, "--topology", "ring:4", "--hop-latency", "nan"])
    assert o.code == 2 and "hang" not in o.out + o.err, str(o)


def test_cost_on_one_device():
    o = run_cli(["cost", AR, "--topology", "ring:1"])
    assert_clean(o)
    assert o.code == 0, str(o)


def test_limits_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("RINGC_LIMIT_DEVICES", "3")
    assert_refused(run_cli(["check", AR, "--devices", "4"]), says="`devices`")
    monkeypatch.setenv("RINGC_LIMIT_DEVICES", "banana")
    o = run_cli(["check", AR, "--devices", "4"])
    assert_refused(o, says="RINGC_LIMIT_DEVICES")


def test_readme_limits_table_is_the_limits_module():
    readme = (REPO / "README.md").read_text()
    assert limits.markdown_table() in readme
    for lim in limits.LIMITS.values():  # a real pod is below every count limit
        assert lim.default >= 1
    assert limits.LIMITS["devices"].default >= 4096


# ----------------------------------------------------------------------- emit

def test_empty_do_is_refused_at_its_line(tmp_path):
    text = edited(AG, "    do:\n      - start: own\n      - wait: own", "    do: []\n  - start: own\n  - wait: own")
    o = run_cli(["emit", write(tmp_path, text)])
    assert_refused(o, line_of(text, "when: step == 0"), says="empty `do:`")


def test_when_nested_a_hundred_deep_is_refused_at_its_line(tmp_path):
    ops = "      - start: own\n      - wait: own"
    nested = ""
    for i in range(100):
        pad = "  " * (2 * i)
        nested += f"{pad}  - when: step == 0\n{pad}    do:\n"
    pad = "  " * 200
    nested += f"{pad}  - start: own\n{pad}  - wait: own\n"
    text = edited(AG, "  - when: step == 0\n    do:\n" + ops + "\n", nested)
    o = run_cli(["emit", write(tmp_path, text), "--limit", "yaml_depth=1000"])
    whens = [i for i, line in enumerate(text.splitlines(), 1) if "when: step == 0" in line]
    assert_refused(o, whens[limits.LIMITS["op_depth"].default], says="`op_depth`")


def test_names_that_python_would_merge_are_refused(tmp_path):
    text = edited(AG, "params: {rows: 8, cols: 128}", "params: {rows: 8, cols: 128, ｒｏｗｓ: 4}")
    o = run_cli(["emit", write(tmp_path, text)])
    assert_refused(o, line_of(text, "params:"), says="is not a valid name")


@pytest.mark.parametrize("name", ["build", "jax", "sharded", "_check_shard", "per_device", "kernel", "NAME"])
def test_names_of_the_module_itself_are_renamed_and_the_module_compiles(tmp_path, name):
    text = edited(AG, "params: {rows: 8, cols: 128}", f"params: {{rows: 8, cols: 128, {name}: 3}}")
    out = tmp_path / "k.py"
    o = run_cli(["emit", write(tmp_path, text), "-o", out])
    assert o.code == 0, str(o)
    compile(out.read_text(), str(out), "exec")


def test_a_schedule_name_longer_than_a_file_name_loads_as_a_module(tmp_path):
    import ringc
    from ringc.run import load_module
    text = edited(PP, "name: ppermute_right", "name: " + "n" * 400)
    module = load_module(ringc.load(write(tmp_path, text)))
    assert module.NAME == "n" * 400


# ----------------------------------------------------------------------- output paths

def _no_temp_files(directory: Path) -> None:
    assert not [p.name for p in directory.iterdir() if p.name.startswith(".ringc-")]


def test_output_refuses_a_directory(tmp_path):
    o = run_cli(["emit", PP, "-o", tmp_path])
    assert_refused(o, says="is a directory")
    assert list(tmp_path.iterdir()) == []


def test_output_refuses_the_input_schedule(tmp_path):
    src = write(tmp_path, PP.read_text())
    before = src.read_text()
    for argv in (["emit", src, "-o", src], ["show", src, "--devices", "2", "-o", src],
                 ["cost", src, "--topology", "ring:2", "--plot", src],
                 ["check", src, "--devices", "2", "--show", src]):
        assert_refused(run_cli(argv), says="is the input schedule")
    assert src.read_text() == before
    _no_temp_files(tmp_path)


def test_check_show_draws_nothing_when_a_size_is_bad_input(tmp_path):
    """`--devices 2..4 --topology ring:2`: N=2 checks, N=3 is refused; bad input writes
    nothing, so the picture of N=2 is not drawn either (found by the slow fuzz)."""
    out = tmp_path / "run.png"
    o = run_cli(["check", PP, "--devices", "2..4", "--topology", "ring:2", "--show", out])
    assert o.code == 2 and "has 2 devices, but N=3" in o.err and "nothing drawn" in o.err, str(o)
    assert not out.exists()
    o = run_cli(["check", PP, "--devices", "2", "--topology", "ring:2", "--show", out])
    assert o.code == 0 and out.exists(), str(o)


def test_output_refuses_a_device():
    assert_refused(run_cli(["emit", PP, "-o", "/dev/null"]), says="not a regular file")


def test_output_writes_through_a_symlink_and_keeps_it(tmp_path):
    target = tmp_path / "real.py"
    target.write_text("old\n")
    target.chmod(0o640)
    link = tmp_path / "link.py"
    link.symlink_to(target.name)
    o = run_cli(["emit", PP, "-o", link])
    assert o.code == 0, str(o)
    assert link.is_symlink() and os.readlink(link) == target.name
    assert target.read_text().startswith('"""Generated by ringc')
    assert target.stat().st_mode & 0o777 == 0o640
    _no_temp_files(tmp_path)


def test_a_failed_emit_writes_nothing(tmp_path):
    bad = write(tmp_path, edited(AG, "grid: {step: N - 1}", "grid: {step: N - nope}"))
    out = tmp_path / "k.py"
    assert_refused(run_cli(["emit", bad, "-o", out]), says="unknown name")
    assert not out.exists()
    _no_temp_files(tmp_path)


def test_emit_compiles_what_it_writes(monkeypatch):
    """A module Python cannot compile is a ringc bug: exit 3, reported, and nothing written."""
    from ringc.codegen import pallas
    monkeypatch.setattr(pallas.Emitter, "emit", lambda self: "def broken(:\n")
    o = run_cli(["emit", PP])
    assert o.code == 3 and "bug in ringc" in o.err and "please report it" in o.err, str(o)
    assert o.out == ""


# ----------------------------------------------------------------------- the emitted guard

def test_emitted_kernel_refuses_shards_of_the_wrong_shape_or_dtype():
    import jax
    import jax.numpy as jnp
    import numpy as np

    import ringc
    from ringc.run import load_module
    module = load_module(ringc.load(PP))
    mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")[:2]), ("x",))
    fn = module.build(mesh, interpret=True)
    (good,) = module.make_inputs(mesh, 0)
    for bad, given in ((jnp.zeros((16, 256), jnp.float32), r"\(16, 128\) and dtype float32"),
                       (good.astype(jnp.bfloat16), r"\(8, 128\) and dtype bfloat16")):
        with pytest.raises(ValueError, match=r"input `x` has per-device shape " + given
                           + r", but the kernel needs shape \(8, 128\) and dtype float32"):
            fn(bad)


def test_a_compiler_error_on_a_multi_axis_schedule_is_explained():
    """`compile` explains a rejection with the schedule's shapes at the target's axis sizes
    (a 2-D schedule's `N_x`, `N_y`): before, evaluating them without those leaked ExprError."""
    import ringc
    from ringc.compile import errors as compile_errors
    from ringc.run import load_module
    sched = ringc.load(REPO / "schedules" / "all_gather_2d.yaml")
    err = compile_errors.explain(RuntimeError("INTERNAL: Mosaic failed to compile TPU kernel: something"),
                                 sched, 4, "v5e:2x2", load_module(sched), {"x": 2, "y": 2})
    assert err.kind and "something" in str(err), str(err)


# ----------------------------------------------------------------------- issue 13: the format

HC = REPO / "schedules" / "all_gather_hypercube.yaml"


def test_a_hypercube_on_a_device_count_not_a_power_of_two_names_the_fix():
    o = run_cli(["check", HC, "--devices", "6"])
    assert_refused(o, line_of(HC.read_text(), "recv_sems: {kind: dma"), says="N = 6 is not a power of two")
    assert "fix: log2 needs a power of two: run on N = 2, 4, 8" in o.err


@pytest.mark.parametrize("slot,says", [
    ("(me - step) % N + (1 << (step + 64))", "shift count 64 is outside 0..63"),
    ("me ^ (step == 0)", "`step == 0` is a condition"),
    ("~(step > 0)", "`step > 0` is a condition"),
    ("me if step == 0 else nope", "unknown name `nope`"),
    ("me if step == 0", "cannot parse expression"),
])
def test_bitwise_and_conditional_expressions_refused_at_their_line(tmp_path, slot, says):
    text = edited(AG, "  slot: (me - step) % N", f"  slot: {slot}")
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, line_of(text, "  slot:"), says=says)
    assert "fix:" in o.err


def test_a_let_of_the_device_in_a_shape_is_refused_with_its_cause(tmp_path):
    text = edited(AG, "  slot: (me - step) % N", "  slot: (me - step) % N\n  size: rows + me")
    text = edited(Path(write(tmp_path, text)), "shape: [rows, cols]}", "shape: [size, cols]}")
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, line_of(text, "  x:"), says="let `size` in shape of `x` `size` depends on `me`")
    assert "fix: shape of `x` may use N, params and lets of those only" in o.err


def test_a_static_guard_on_a_bad_n_names_the_fix(tmp_path):
    text = edited(AG, "  - start: forward\n", "  - when: log2(N) > 1\n    do:\n      - start: forward\n")
    o = run_cli(["check", write(tmp_path, text), "--devices", "3"])
    assert_refused(o, line_of(text, "when: log2(N)"), says="log2(N): N = 3 is not a power of two")
    assert "fix: log2 needs a power of two" in o.err


YAML11 = "let:\n  off: (me - step) % N\n  on: off\n  yes: on\n  no: yes\n  y: no\n  n: y\n  slot: n\n"


def test_yaml_1_1_booleans_are_names(tmp_path):
    text = edited(AG, "let:\n  slot: (me - step) % N\n", YAML11)
    text = edited(Path(write(tmp_path, text)), "params: {rows: 8, cols: 128}", "params: {rows: 8, cols: 128, On: 1}")
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert o.code == 0, str(o)


@pytest.mark.parametrize("old,new,at,says", [
    ("params: {rows: 8, cols: 128}", "params: {rows: 8, cols: 128, true: 1}", "params:",
     "mapping keys must be names, but YAML reads `true` as a boolean"),
    ("params: {rows: 8, cols: 128}", "params: {rows: 8, cols: 128, 1.5: 1}", "params:",
     "YAML reads `1.5` as a number"),
    ("collective: all_gather", "collective: {kind: all_gather, input: false}", "collective:",
     "collective.input: expected a name, but YAML reads `false` as a boolean"),
])
def test_what_yaml_still_reads_as_a_boolean_or_number_names_the_key_and_cause(tmp_path, old, new, at, says):
    text = edited(AG, old, new)
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, line_of(text, at), says=says)
    assert "fix: quote it" in o.err


# ----------------------------------------------------------------------- loops, copy templates, self-copies
# (issue 13 section 2; the library example is schedules/all_gather_bidirectional_unrolled.yaml)

AGU = REPO / "schedules" / "all_gather_bidirectional_unrolled.yaml"


@pytest.mark.parametrize("old,new,at,says,fix", [
    # a loop's size must be known when the kernel is traced
    ("  - loop: {i: N - 1}", "  - loop: {i: N - me}", "- loop:", "unknown name `me` in loop size `i`",
     "use N, params and lets of those only"),
    # a loop index exists only inside its loop: a copy takes it as a template parameter
    ('recv_sem: "recv_right[k]"}', 'recv_sem: "recv_right[i]"}', "to_right(k):",
     "`i` in copy `to_right` recv_sem is the index of the loop at line",
     "make it a template parameter: `name(k):` in `copies`, used as `start: name(k=i)`"),
    ("  - wait: to_left(k=N - 2)", "  - wait: to_left(k=i)", "- wait: to_left(k=i)",
     "`i` in argument `k` of `wait: to_left` is the index of the loop at line", "inside the loop's `do:`"),
    ("  - loop: {i: N - 1}\n    do:\n", "  - loop: {i: N - 1}\n    do:\n      - loop: {i: 2}\n        do: [{start: own}]\n",
     "- loop: {i: 2}", "loop index `i` shadows the index of an enclosing loop", "give the inner loop its own index"),
    # every use of a template binds exactly its parameters, by keyword
    ("      - start: to_right(k=i)", "      - start: to_right", "- start: to_right",
     "`start: to_right` leaves parameter `k` of the copy template `to_right(k)` unbound",
     "bind every parameter: `start: to_right(k=...)`"),
    ("      - start: to_right(k=i)", "      - start: to_right(k=i, j=1)", "- start: to_right(k=i, j=1)",
     "binds `j`, which is no parameter of copy `to_right(k)`", "bind its parameters: `start: to_right(k=...)`"),
    ("      - start: to_right(k=i)", "      - start: to_right(i)", "- start: to_right(i)",
     "`to_right(i)` is not a copy use", "e.g. `start: push(k=step + 1)`"),
    ("  - start: own", "  - start: own(k=1)", "- start: own(k=1)",
     "binds `k`, which is no parameter of copy `own`", "write `start: own`"),
    ("  to_left(k):", "  to_left(N):", "to_left(N):", "parameter `N` of copy `to_left` shadows the schedule name `N`",
     "choose another parameter name"),
    # an explicit self-copy is a remote copy
    ("own: {src: x, dst: \"out[me]\", sem: local_sem}", "own: {src: x, dst: \"out[me]\", sem: local_sem, self_copy: true}",
     "own: {", "`self_copy` applies to remote copies", "remote copies"),
])
def test_loops_and_copy_templates_refuse_bad_input_at_its_line(tmp_path, old, new, at, says, fix):
    text = edited(AGU, old, new)
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, line_of(text, at), says=says)
    assert fix in o.err, str(o)


RSH = REPO / "schedules" / "reduce_scatter_hierarchical.yaml"


def test_a_phase_with_a_negative_count_names_the_loop_and_the_fix(tmp_path):
    """A phase (a loop) may run 0 times, as `range(0)` does, but not fewer."""
    text = edited(RSH, "  - loop: {t: N_y - 2}", "  - loop: {t: N_y - 3}")
    o = run_cli(["check", write(tmp_path, text), "--topology", "torus:2x2"])
    assert_refused(o, line_of(text, "- loop: {t: N_y - 3}"), says="loop size: `N_y - 3` = -1 is negative (N=4)")
    assert "fix: sizes must be at least 0" in o.err
    o = run_cli(["check", RSH, "--topology", "torus:2x2"])  # its drain loops run 0 times there
    assert o.code == 0, str(o)


def test_a_phase_name_is_text(tmp_path):
    text = edited(RSH, "    phase: x_level", "    phase: [x_level]")
    o = run_cli(["check", write(tmp_path, text), "--topology", "torus:2x2"])
    assert_refused(o, line_of(text, "phase: [x_level]"), says="phase")


def test_a_copy_declared_as_a_template_and_plainly_is_refused(tmp_path):
    text = edited(AGU, "  own: {src: x,", "  to_left: {src: x, dst: \"out[me]\", sem: local_sem}\n  own: {src: x,")
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, says="copy `to_left` is declared twice")


# ----------------------------------------------------------------------- issue 13: compute and types

AGMT = REPO / "schedules" / "all_gather_matmul_t.yaml"


@pytest.mark.parametrize("old,new,says", [
    # y's blocks stay [bn, bk], contracted on the wrong dim: 128 columns against 16 rows
    ("            contract: [1, 1]", "            contract: [0, 1]", "the dims `contract: [0, 1]` multiplies together"),
    ("            contract: [1, 1]", "            contract: [1, 2]", "contract: [1, 2] is not two dims of 2-D blocks"),
])
def test_matmul_dimension_numbers_are_refused_at_the_matmul(tmp_path, old, new, says):
    text = edited(AGMT, old, new)
    o = run_cli(["check", write(tmp_path, text), "--devices", "2"])
    # the contract line itself, or the matmul's when the shapes show it (at unrolling)
    assert_refused(o, line_of(text, new if "[1, 2]" in new else "- matmul: acc"), says=says)
    assert "fix:" in o.err


def test_an_assign_between_element_types_is_refused_naming_the_cast(tmp_path):
    """bfloat16 output blocks, a float32 accumulator: storing it takes a `cast`."""
    text = edited(AGMT, "              - cast: o       # float32 into bfloat16, once", "              - assign: o")
    o = run_cli(["check", write(tmp_path, text), "--devices", "2"])
    assert_refused(o, line_of(text, "- assign: o"), says="assign copies `acc` (float32) into `o` (bfloat16)")
    assert "fix: use `cast: o` to convert" in o.err


@pytest.mark.parametrize("semantics,at,says,fix", [
    ("{stp: parallel}", "dimension_semantics:", "dimension_semantics names `stp`, which is not a grid axis",
     "did you mean `step`?"),
    ("{step: paralel}", "dimension_semantics:", "dimension_semantics of `step` is 'paralel', not `parallel` or "
     "`arbitrary`", "write `parallel`"),
])
def test_dimension_semantics_are_refused_at_their_line(tmp_path, semantics, at, says, fix):
    text = edited(AG, "grid: {step: N - 1}", f"grid: {{step: N - 1}}\ndimension_semantics: {semantics}")
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, line_of(text, at), says=says)
    assert f"fix: {fix}" in o.err


# ----------------------------------------------------------------------- issue 14: pipelines fed by remote copies
# (docs/schedule-format.md, "Pipelines fed by remote copies"; the library example is
# schedules/all_gather_matmul_streamed.yaml)

AGMS = REPO / "schedules" / "all_gather_matmul_streamed.yaml"
FED = 'arrives: {copy: "forward(t=step - 1, r=i)", when: j == 0 and k == 0}'


@pytest.mark.parametrize("old,new,at,says,fix", [
    # the copy named must exist, with every template parameter bound by the inner point's names
    (FED, 'arrives: {copy: "forwrd(t=step - 1, r=i)"}', "forwrd", "`arrives: forwrd` names no copy",
     "did you mean `forward`?"),
    (FED, 'arrives: {copy: "forward(r=i)"}', "forward(r=i)",
     "`arrives: forward(r=i)` leaves parameter `t` of the copy template `forward(t, r)` unbound",
     "bind every parameter: `arrives: forward(t=..., r=...)`"),
    (FED, 'arrives: {copy: "forward(t=step - 1, r=i)", when: jj == 0}', "jj == 0",
     "unknown name `jj` in `arrives` guard of `a`", "did you mean `j`?"),
    (FED, "arrives: 3", "arrives: 3", "`arrives: 3` names no copy", "write `arrives: forward(t=step - 1, r=i)`"),
    (FED, 'arrives: {copy: "forward(t=step - 1, r=i)", wen: k == 0}', "wen:", "unknown key `wen`",
     "did you mean `when`?"),
    # only an input block arrives
    ('          o: {ref: "out[block]", block: [bm, bn], index: [i, j]}',
     '          o: {ref: "out[block]", block: [bm, bn], index: [i, j], arrives: "send_own(r=i)"}',
     'arrives: "send_own(r=i)"', "output block `o` has `arrives: send_own(r=i)`: only an input block arrives",
     "move `o` to `inputs:`"),
])
def test_a_malformed_arrival_is_refused_at_its_line(tmp_path, old, new, at, says, fix):
    text = edited(AGMS, old, new)
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, line_of(text, at), says=says)
    assert f"fix: {fix}" in o.err, str(o)


def test_an_arrival_by_a_local_copy_is_refused_naming_the_wait(tmp_path):
    text = edited(AGMS, "  send_sem: dma\n", "  send_sem: dma\n  local_sem: dma\n")
    text = text.replace("copies:\n", 'copies:\n  fill(r): {src: "x[r * bm:bm]", dst: "scratch[0, r * bm:bm]", '
                                     'sem: local_sem}\n', 1)
    text = text.replace('arrives: {copy: "send_own(r=i)"', 'arrives: {copy: "fill(r=i)"', 1)
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, line_of(text, 'arrives: {copy: "fill(r=i)"'), says="`arrives` applies to remote copies; "
                                                                          "`fill` is local")
    assert "fix: wait for the local copy before the pipeline (`wait: fill`) and drop `arrives`" in o.err


def test_an_arrival_outside_its_copy_is_refused_at_unrolling(tmp_path):
    """N-dependent: slot `step` of the scratch does not exist at the last step."""
    text = edited(AGMS, FED, 'arrives: {copy: "forward(t=step, r=i)", when: j == 0 and k == 0}')
    o = run_cli(["check", write(tmp_path, text), "--devices", "3"])
    assert_refused(o, line_of(text, 'forward(t=step, r=i)'), says="out of range")
    assert "on device 0 at step=2" in o.err, str(o)


# ----------------------------------------------------------------------- ring_attention's three inputs
# (issue 13 section 4; the library example is schedules/ring_attention.yaml)

RA = REPO / "schedules" / "ring_attention.yaml"


@pytest.mark.parametrize("old,new,says,fix", [
    ("values: v, ", "", "collective.values is not set", "name the values input in collective.values"),
    ("rhs: k, ", "", "collective.rhs is not set", "name the keys input in collective.rhs"),
    ("values: v, ", "values: vv, ", "collective.values `vv` is not an input buffer", "did you mean `v`?"),
])
def test_ring_attention_names_its_three_inputs(tmp_path, old, new, says, fix):
    text = edited(RA, old, new)
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, line_of(text, "collective:"), says=says)
    assert fix in o.err, str(o)


def test_a_misspelt_choice_gets_did_you_mean(tmp_path):
    text = edited(AG, "collective: all_gather", "collective: allgather")
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, line=line_of(text, "collective: allgather"), says="`allgather` is not one of")
    assert "did you mean `all_gather`?" in o.err and "Input should be" not in o.err


def test_a_tab_is_called_a_tab(tmp_path):
    text = AG.read_text().replace("\n  x:", "\n\tx:", 1)
    assert "\t" in text
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, line=line_of(text, "\tx:"), says="a tab character")
    assert "replace the tab with spaces" in o.err


def test_an_index_out_of_range_in_a_copy_is_reported_where_the_copy_writes_it(tmp_path):
    text = edited(AG, 'dst: "out[slot]"', 'dst: "out[slot + N]"')
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, line=line_of(text, 'dst: "out[slot + N]"'), says="is out of range for dimension 0")
    assert f"used by the op at line {line_of(text, '- start: forward')}" in o.err


def test_a_let_using_a_let_below_it_is_refused_at_its_line_even_in_a_shape(tmp_path):
    """A size let that names lets written below it: the let's own line says which and where,
    not an empty "depends on" from the shape that uses it."""
    text = edited(AG, "  slot: (me - step) % N", "  slot: (me - step) % N\n  size: half + half\n  half: rows // 2")
    text = edited(Path(write(tmp_path, text)), "shape: [rows, cols]}", "shape: [size, cols]}")
    o = run_cli(["check", write(tmp_path, text), "--devices", "4"])
    assert_refused(o, line_of(text, "  size:"), says="let `size` uses let `half`, which is written below it (line "
                                                     f"{line_of(text, '  half:')})")
    assert f"fix: move `half` above line {line_of(text, '  size:')}" in o.err


@pytest.mark.parametrize("argv", [["emit"], ["run", "--devices", "4"], ["show", "--devices", "4"],
                                  ["cost", "--topology", "ring:4"], ["tune", "--topology", "ring:4", "--bytes", "1MiB"]])
def test_a_python_file_given_to_a_schedule_command_says_so(tmp_path, argv):
    """A Pallas kernel file where a command takes a YAML schedule: one message naming the file
    and the commands that take it (it was "malformed YAML" at the first line that is not
    YAML)."""
    kernel = tmp_path / "kernel.py"
    kernel.write_text("import jax\n\n\ndef f(x):\n    return x\n")
    o = run_cli([argv[0], kernel, *argv[1:]])
    assert_refused(o, says="a Python file, where this command takes a schedule (.yaml)")
    assert f"{kernel}: error:" in o.err and "ringc check FILE.py" in o.err and "YAML:" not in o.err, str(o)
