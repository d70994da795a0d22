"""Bad input: every problem is a `ScheduleError` naming the file, the line and a fix.

Each test starts from BASE, a small valid ring all-reduce, changes one thing, and checks
that the reported line is the line of the change (found by searching the mutated text,
never hard-coded).
"""

from __future__ import annotations

import pytest

import ringc
from ringc.ir import ScheduleError, load, load_text

FILE = "mine.yaml"

BASE = """\
name: ring_sum
collective: psum
params: {rows: 8, cols: 128}
buffers:
  x:       {kind: input,  shape: [rows, cols], space: vmem}
  out:     {kind: output, shape: [rows, cols], space: vmem}
  scratch: {kind: hbm_scratch, slots: 2, shape: [rows, cols]}
  receive: {kind: vmem_scratch, shape: [rows, cols]}
semaphores:
  copy_sem: dma
  recv_sem: dma
  send_sem: dma
  capacity: regular
barrier: {collective_id: 0}
grid: {step: N}
let:
  working: step % 2
  receiving: 1 - working
copies:
  initial: {src: x, dst: "scratch[working]", to: right, send_sem: send_sem, recv_sem: recv_sem}
  load:    {src: "scratch[working]", dst: receive, sem: copy_sem}
  pass:    {src: "scratch[working]", dst: "scratch[receiving]", to: right, send_sem: send_sem, recv_sem: recv_sem}
body:
  - when: step == 0
    do:
      - barrier: [left, right]
      - zero: out
      - zero: receive
      - start: initial
      - wait: initial
  - signal: capacity
    to: left
  - start: load
  - sem_wait: capacity
  - start: pass
  - wait: load
  - accumulate: out
    src: receive
  - wait: pass
"""


def mutate(old: str, new: str, text: str = BASE) -> str:
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
    return text.replace(old, new)


def line_of(text: str, marker: str) -> int:
    """1-based line of the only line containing `marker`."""
    hits = [i for i, line in enumerate(text.splitlines(), 1) if marker in line]
    assert len(hits) == 1, f"{marker!r} is on lines {hits}"
    return hits[0]


def error_of(text: str, **kw) -> ScheduleError:
    with pytest.raises(ScheduleError) as info:
        load_text(text, FILE, **kw)
    return info.value


def assert_located(err: ScheduleError, line: int, *, fix: bool = True) -> None:
    assert err.file == FILE
    assert err.line == line, f"reported line {err.line}, expected {line}: {err}"
    text = str(err)
    assert text.startswith(f"{FILE}:{line}: error: ")
    if fix:
        assert err.fix, f"no fix hint in: {err}"
        assert f"\n  fix: {err.fix}" in text
    assert "Traceback" not in text


def test_base_is_valid_for_several_n():
    sched = load_text(BASE, FILE)
    for n in (2, 3, 4):
        report = ringc.check(sched, n)
        assert report.ok and not report.findings, report.to_text()


# ------------------------------------------------------------------ YAML level


def test_malformed_yaml_bad_indentation():
    text = mutate("  recv_sem: dma\n", "   recv_sem: dma\n")
    err = error_of(text)
    assert "malformed YAML" in err.message
    assert_located(err, line_of(text, "   recv_sem: dma"))


def test_malformed_yaml_bad_indentation_in_body():
    text = mutate("  - start: load\n", "   - start: load\n")
    err = error_of(text)
    assert "malformed YAML" in err.message
    assert_located(err, line_of(text, "- start: load"))


def test_duplicate_key_points_at_the_second_one():
    text = mutate("  send_sem: dma\n", "  send_sem: dma\n  copy_sem: regular\n")
    err = error_of(text)
    assert "duplicate key `copy_sem`" in err.message
    assert_located(err, line_of(text, "copy_sem: regular"))


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_empty_file(text):
    err = error_of(text)
    assert "empty" in err.message
    assert_located(err, 1)


def test_not_a_mapping():
    err = error_of("- name: a\n- name: b\n")
    assert "mapping" in err.message
    assert err.file == FILE and err.line == 1


def test_unknown_top_level_key_suggests_the_right_one():
    text = mutate("grid: {step: N}\n", "grid: {step: N}\ngird: {step: N}\n")
    err = error_of(text)
    assert "unknown key `gird`" in err.message
    assert err.fix == "did you mean `grid`?"
    assert err.file == FILE


@pytest.mark.parametrize("old,new,marker", [
    ("grid: {step: N}\n", "grid: {step: N}\ngird: {step: N}\n", "gird:"),
    ("  - signal: capacity\n    to: left\n", "  - signal: capacity\n    to: left\n    bogus: 1\n", "bogus:"),
])
def test_unknown_key_line_is_the_keys_line(old, new, marker):
    text = mutate(old, new)
    assert_located(error_of(text), line_of(text, marker))


# -------------------------------------------------------------------- model level


def test_unknown_op_in_body():
    text = mutate("  - wait: pass\n", "  - waitt: pass\n")
    err = error_of(text)
    assert "unknown operation" in err.message
    assert "wait_send" in err.message  # lists what is allowed
    assert_located(err, line_of(text, "waitt"), fix=False)


def test_unknown_op_has_a_fix_hint():
    text = mutate("  - wait: pass\n", "  - waitt: pass\n")
    err = error_of(text)
    assert err.fix and "`wait`" in err.fix


@pytest.mark.parametrize("old,new,marker", [
    ("      - zero: receive\n", "      - zeroo: receive\n", "zeroo"),
    ("    src: receive\n", '    src: "receive[0:8:2]"\n', "0:8:2"),
    ("    to: left\n", '    to: "left ** 2"\n', "left ** 2"),
])
def test_errors_inside_ops_point_at_their_line(old, new, marker):
    text = mutate(old, new)
    assert error_of(text).line == line_of(text, marker)


@pytest.mark.parametrize("new", ["  - wait: pass\n    start: pass\n", "  - {wait: pass, start: pass}\n"])
def test_op_with_two_operation_keys(new):
    text = mutate("  - wait: pass\n", new)
    err = error_of(text)
    assert err.line == line_of(text, "wait: pass")
    assert "`wait`" in err.message and "`start`" in err.message  # names both keys
    assert err.fix and "did you mean `wait`" not in err.fix


def test_missing_required_key():
    text = mutate("  receive: {kind: vmem_scratch, shape: [rows, cols]}\n", "  receive: {shape: [rows, cols]}\n")
    err = error_of(text)
    assert "missing required key `kind`" in err.message
    assert_located(err, line_of(text, "receive: {shape"))


def test_bad_expression_syntax_in_a_copy():
    text = mutate('dst: "scratch[receiving]"', 'dst: "scratch[receiving ** 2]"')
    err = error_of(text)
    assert "receiving ** 2" in err.message
    assert err.line == line_of(text, "receiving ** 2")


def test_a_copy_must_be_remote_or_local():
    text = mutate("dst: receive, sem: copy_sem}", "dst: receive, sem: copy_sem, send_sem: send_sem}")
    err = error_of(text)
    assert "local copy" in err.message
    assert err.line == line_of(text, "load:")


# ------------------------------------------------------------- resolution level


def test_unknown_buffer_in_a_copy():
    text = mutate("dst: receive, sem: copy_sem", "dst: recieve, sem: copy_sem")
    err = error_of(text)
    assert "unknown buffer `recieve`" in err.message
    assert err.fix == "did you mean `receive`?"
    assert_located(err, line_of(text, "recieve"))


def test_unknown_semaphore_in_a_copy():
    text = mutate("sem: copy_sem}", "sem: copysem}")
    err = error_of(text)
    assert "unknown semaphore `copysem`" in err.message
    assert err.fix == "did you mean `copy_sem`?"
    assert_located(err, line_of(text, "copysem"))


def test_unknown_semaphore_in_an_op():
    text = mutate("  - sem_wait: capacity\n", "  - sem_wait: capacty\n")
    err = error_of(text)
    assert "unknown semaphore `capacty`" in err.message
    assert err.fix == "did you mean `capacity`?"
    assert_located(err, line_of(text, "capacty"))


def test_unknown_copy_in_an_op():
    text = mutate("  - start: pass\n", "  - start: pas\n")
    err = error_of(text)
    assert "names no copy" in err.message
    assert "pass" in err.fix
    assert_located(err, line_of(text, "start: pas"))


def test_unknown_copy_in_an_op_suggests_the_copy():
    text = mutate("  - start: pass\n", "  - start: pas\n")
    assert error_of(text).fix == "did you mean `pass`?"


def test_unknown_name_in_a_copy_target():
    text = mutate('"scratch[receiving]", to: right', '"scratch[receiving]", to: rigth')
    err = error_of(text)
    assert "unknown name `rigth`" in err.message
    assert err.fix == "did you mean `right`?"
    assert_located(err, line_of(text, "rigth"))


def test_unknown_name_in_an_op_index():
    text = mutate("  - accumulate: out\n", '  - accumulate: "out[0:rowz]"\n')
    err = error_of(text)
    assert "unknown name `rowz`" in err.message
    assert err.fix == "did you mean `rows`?"
    assert_located(err, line_of(text, "rowz"))


def test_unknown_name_in_a_guard():
    text = mutate("  - when: step == 0\n", "  - when: stpe == 0\n")
    err = error_of(text)
    assert "unknown name `stpe`" in err.message
    assert err.fix == "did you mean `step`?"
    assert_located(err, line_of(text, "stpe"))


def test_unknown_name_in_a_let_is_reported_with_a_suggestion():
    text = mutate("  receiving: 1 - working\n", "  receiving: 1 - workng\n")
    err = error_of(text)
    assert "unknown name `workng`" in err.message
    assert err.fix == "did you mean `working`?"


@pytest.mark.parametrize("old,new,marker", [
    ("  receiving: 1 - working\n", "  receiving: 1 - workng\n", "workng"),
    ("grid: {step: N}\n", "grid: {step: M}\n", "step: M"),
    ("collective: psum\n", "collective: psum\ndtype: float33\n", "float33"),
    ("  capacity: regular\n", "  capacity: regular\n  me: regular\n", "me: regular"),
])
def test_errors_in_tables_point_at_the_entry(old, new, marker):
    text = mutate(old, new)
    assert error_of(text).line == line_of(text, marker)


def test_signal_on_a_dma_semaphore():
    text = mutate("  - signal: capacity\n", "  - signal: send_sem\n")
    err = error_of(text)
    assert "signal needs a regular semaphore" in err.message and "`send_sem` is dma" in err.message
    assert_located(err, line_of(text, "signal: send_sem"))


def test_dma_copy_on_a_regular_semaphore():
    text = mutate("sem: copy_sem}", "sem: capacity}")
    err = error_of(text)
    assert "needs a dma semaphore" in err.message
    assert_located(err, line_of(text, "sem: capacity}"))


def test_wait_send_on_a_local_copy():
    text = mutate("  - wait: load\n", "  - wait_send: load\n")
    err = error_of(text)
    assert "`wait_send` applies to remote copies" in err.message
    assert err.fix == "use `wait: load`"
    assert_located(err, line_of(text, "wait_send: load"))


def test_zero_of_an_input_buffer():
    text = mutate("      - zero: receive\n", "      - zero: x\n")
    err = error_of(text)
    assert "`x` is an input and cannot be written" in err.message
    assert_located(err, line_of(text, "zero: x"))


def test_copy_into_an_input_buffer():
    text = mutate("dst: receive, sem: copy_sem", "dst: x, sem: copy_sem")
    err = error_of(text)
    assert "`x` is an input and cannot be written" in err.message
    assert_located(err, line_of(text, "dst: x"))


def test_accumulate_into_an_hbm_buffer():
    text = mutate("  - accumulate: out\n", '  - accumulate: "scratch[working]"\n')
    err = error_of(text)
    assert "accumulate computes on VMEM" in err.message and "`scratch` lives in HBM" in err.message
    assert "vmem" in err.fix
    assert_located(err, line_of(text, 'accumulate: "scratch'))


def test_accumulate_from_an_hbm_buffer():
    text = mutate("    src: receive\n", '    src: "scratch[working]"\n')
    err = error_of(text)
    assert "`scratch` lives in HBM" in err.message
    assert err.line is not None and err.fix


def test_barrier_op_without_barrier_config():
    text = mutate("barrier: {collective_id: 0}\n", "")
    err = error_of(text)
    assert "barrier" in err.message
    assert "collective_id" in err.fix
    assert_located(err, line_of(text, "- barrier: [left, right]"))


def test_too_many_indices():
    text = mutate('dst: "scratch[receiving]"', 'dst: "scratch[receiving, 0, 0, 0]"')
    err = error_of(text)
    assert "has 4 indices but `scratch` has rank 3" in err.message
    assert_located(err, line_of(text, "scratch[receiving, 0, 0, 0]"))


def test_semaphore_index_on_a_scalar_semaphore():
    text = mutate("  - sem_wait: capacity\n", '  - sem_wait: "capacity[0]"\n')
    err = error_of(text)
    assert "must select one semaphore" in err.message
    assert_located(err, line_of(text, "capacity[0]"))


# ------------------------------------------------------------ N-dependent errors


def test_shape_that_does_not_divide_is_reported_when_unrolled():
    text = mutate("  receive: {kind: vmem_scratch, shape: [rows, cols]}\n",
                  "  receive: {kind: vmem_scratch, shape: [rows, cols]}\n"
                  "  half:    {kind: vmem_scratch, shape: [rows // 2, cols]}\n")
    text = mutate("params: {rows: 8, cols: 128}", "params: {rows: 7, cols: 128}", text)
    sched = load_text(text, FILE)  # statically fine: it depends on the parameters
    with pytest.raises(ScheduleError) as info:
        ringc.check(sched, 4)
    err = info.value
    assert "rows // 2" in err.message and "does not divide exactly" in err.message
    assert_located(err, line_of(text, "half:"))


def test_param_override_makes_a_shape_not_divide():
    text = mutate("  receive: {kind: vmem_scratch, shape: [rows, cols]}\n",
                  "  receive: {kind: vmem_scratch, shape: [rows, cols]}\n"
                  "  half:    {kind: vmem_scratch, shape: [rows // 2, cols]}\n")
    assert ringc.check(load_text(text, FILE), 4).ok
    sched = load_text(text, FILE, params={"rows": 15})
    with pytest.raises(ScheduleError) as info:
        ringc.check(sched, 4)
    assert "15 // 2" in info.value.message
    assert info.value.line == line_of(text, "half:")


def test_index_out_of_range_for_some_n_only():
    # a double buffer indexed by `step` instead of `working`: fine while N <= 2
    text = mutate("  receive: {kind: vmem_scratch, shape: [rows, cols]}\n",
                  "  receive: {kind: vmem_scratch, slots: 2, shape: [rows, cols]}\n")
    text = mutate("dst: receive, sem: copy_sem", 'dst: "receive[working]", sem: copy_sem', text)
    text = mutate("  - accumulate: out\n    src: receive\n", '  - {accumulate: out, src: "receive[step]"}\n', text)
    sched = load_text(text, FILE)
    ringc.check(sched, 2)  # no error for N = 2
    with pytest.raises(ScheduleError) as info:
        ringc.check(sched, 3)
    err = info.value
    assert "out of range" in err.message and "receive[step]" in err.message
    assert "step=2" in err.message and "N=3" in err.message  # where it first happens
    assert_located(err, line_of(text, '"receive[step]"'))


def test_index_out_of_range_through_a_copy():
    # `working` reaches 2 at step 2, but `scratch` has 2 slots
    text = mutate("  working: step % 2\n", "  working: step % 3\n")
    sched = load_text(text, FILE)
    assert ringc.check(sched, 2).ok
    with pytest.raises(ScheduleError) as info:
        ringc.check(sched, 3)
    err = info.value
    assert "out of range" in err.message and "scratch[working]" in err.message and "step=2" in err.message
    # the copy is evaluated where an op uses it: either line names the problem
    assert err.line in {line_of(text, "  load:"), line_of(text, "- start: load")}
    assert err.fix


def test_region_shape_mismatch_in_an_op():
    text = mutate("  - accumulate: out\n", '  - accumulate: "out[0:4]"\n')
    sched = load_text(text, FILE)
    with pytest.raises(ScheduleError) as info:
        ringc.check(sched, 4)
    err = info.value
    assert "[4, 128]" in err.message and "[8, 128]" in err.message
    assert_located(err, line_of(text, '"out[0:4]"'))


def test_region_shape_mismatch_in_a_copy():
    text = mutate('{src: "scratch[working]", dst: receive', '{src: "scratch[working, 0:4]", dst: receive')
    sched = load_text(text, FILE)
    with pytest.raises(ScheduleError) as info:
        ringc.check(sched, 4)
    err = info.value
    assert "copy `load`" in err.message and "[4, 128]" in err.message and "[8, 128]" in err.message
    assert err.line in {line_of(text, "  load:"), line_of(text, "- start: load")}
    assert err.fix


def test_slice_leaving_its_dimension():
    text = mutate("  - accumulate: out\n    src: receive\n",
                  '  - accumulate: "out[4:8]"\n    src: "receive[0:8]"\n')
    sched = load_text(text, FILE)
    with pytest.raises(ScheduleError) as info:
        ringc.check(sched, 2)
    assert "leaves dimension" in info.value.message
    assert info.value.line == line_of(text, '"out[4:8]"')


def test_n_must_be_positive():
    with pytest.raises(ScheduleError, match="at least 1"):
        ringc.check(load_text(BASE, FILE), 0)


# ------------------------------------------------------------------- parameters


def test_unknown_param_override():
    err = error_of(BASE, params={"rowz": 4})
    assert "unknown parameter 'rowz'" in err.message
    assert "rows" in err.fix and "cols" in err.fix
    assert_located(err, line_of(BASE, "params:"))


def test_known_param_override_is_applied():
    sched = load_text(BASE, FILE, params={"rows": 16})
    assert sched.params["rows"] == 16
    assert ringc.check(sched, 3).program.shapes["scratch"] == (2, 16, 128)


# ------------------------------------------------------------------------ files


def test_load_missing_file(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(ScheduleError) as info:
        load(path)
    assert info.value.file == str(path) and "cannot read" in info.value.message


def test_load_reports_the_path_as_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text(mutate("  - start: pass\n", "  - start: pas\n"))
    with pytest.raises(ScheduleError) as info:
        load(path)
    assert info.value.file == str(path)
    assert str(info.value).startswith(f"{path}:{line_of(path.read_text(), 'start: pas')}: error:")


def test_load_non_utf8_file(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(BASE.replace("ring_sum", "ring_\xe9").encode("latin-1"))
    with pytest.raises(ScheduleError):
        load(path)


def test_control_character_is_a_schedule_error():
    with pytest.raises(ScheduleError):
        load_text(mutate("name: ring_sum", "name: ring\x07sum"), FILE)
