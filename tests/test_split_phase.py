"""Split-phase programs (`kernels:` and `program:`): several pallas_calls checked as one
program, with semaphores and in-flight DMAs handed from a `start` call to a `done` call."""

from pathlib import Path

import pytest

import ringc
from ringc.errors import ScheduleError
from ringc.verify.unroll import program_semaphores, unroll

REPO = Path(__file__).resolve().parents[1]
SPLIT = REPO / "schedules" / "permute_split_phase.yaml"
BROKEN = REPO / "tests" / "broken"


def test_a_dma_started_in_one_call_and_waited_in_the_next_is_one_dma():
    sched = ringc.load(SPLIT)
    for n in (2, 3, 4):
        report = ringc.check(sched, n)
        assert report.ok and not report.findings, report.to_text()
        assert "a program of 2 pallas_calls (start, done)" in report.to_text()
        assert "recv_sem (start -> done)" in report.to_text()


def test_the_program_repeats_under_invocations():
    report = ringc.check(ringc.load(SPLIT), 3, invocations=3)
    assert report.ok and not report.findings, report.to_text()


def test_each_call_is_an_invocation_and_keeps_handed_on_arrays():
    program = unroll(ringc.load(SPLIT), 3)
    events = program.devices[0]
    assert {ev.invocation for ev in events} == {0, 1}
    assert program.call_names == ["start", "done"]
    # `out` (in flight) and `x` (being read) stay with the kernels between the calls: no exit in `start`
    exits = [(ev.invocation, ev.action.dst.buffer) for ev in events
             if getattr(ev.action, "kind", None) == "exit"]
    assert exits == [(1, "x"), (1, "out")]


def test_semaphores_are_fresh_unless_handed_on(tmp_path):
    text = SPLIT.read_text().replace("program: [start, done]", "program: [start, done, start, done]")
    path = tmp_path / "twice.yaml"
    path.write_text(text)
    ids = program_semaphores(ringc.load(path))
    assert ids[0]["recv_sem"] == ids[1]["recv_sem"] == "recv_sem@start"
    assert ids[2]["recv_sem"] == ids[3]["recv_sem"] == "recv_sem@start#2"
    assert ringc.check(ringc.load(path), 3).ok


def test_reading_the_in_flight_buffer_between_the_calls_is_a_race():
    report = ringc.check(ringc.load(BROKEN / "permute_split_phase_touch_in_flight.yaml"), 3)
    assert report.kinds() == {"race"}, report.to_text()
    assert "call 2 (`peek`)" in report.to_text() and "call 3 (`done`)" in report.to_text()


def test_a_done_kernel_that_never_waits_for_the_landing_leaves_the_program_unbalanced():
    report = ringc.check(ringc.load(BROKEN / "permute_split_phase_done_no_wait_recv.yaml"), 3)
    assert report.kinds() == {"dma_not_waited", "race"}, report.to_text()
    assert "recv_sem@start" in report.to_text()


def _bad(tmp_path, old, new):
    text = SPLIT.read_text()
    assert old in text
    path = tmp_path / "bad.yaml"
    path.write_text(text.replace(old, new))
    with pytest.raises(ScheduleError) as err:
        ringc.load(path)
    e = err.value
    return e, text.replace(old, new).splitlines()


@pytest.mark.parametrize("old, new, says, at", [
    ("program: [start, done]", "program: [start, dnoe]", "calls `dnoe`, which is not a kernel", "program:"),
    ("    takes: [send_sem, recv_sem]\n", "    takes: [send_sem]\n",
     "returns semaphore `recv_sem`, but no later call", "returns:"),
    ("    returns: [send_sem, recv_sem]\n", "    returns: [send_sem]\n",
     "takes `recv_sem`, but no earlier call", "takes:"),
    ("    returns: [send_sem, recv_sem]\n", "    returns: [send_sem, recv_sem, out]\n",
     "returns buffer `out`", "returns:"),
    ("    returns: [send_sem, recv_sem]\n", "    returns: [send_sem, recv_sme]\n",
     "`recv_sme`, which is not a semaphore", "returns:"),
    ("program: [start, done]", "program: [start]", "kernel `done` is never called", "takes:"),
    ("program: [start, done]", "", "`kernels` needs `program`", None),
    ("collective: ppermute\n", "collective: ppermute\nmegacore: true\n", "cannot use `megacore: true`",
     "megacore:"),
])
def test_a_malformed_program_is_one_error_with_line_and_fix(tmp_path, old, new, says, at):
    e, lines = _bad(tmp_path, old, new)
    assert says in str(e)
    assert e.line and (at is None or at in lines[e.line - 1]), (e.line, lines[e.line - 1])
    assert e.fix or "e.g." in e.message  # the fix, or (a model error) the example in the message


def test_the_emitted_program_is_two_pallas_calls_handing_on_a_future():
    text = ringc.emit(ringc.load(SPLIT)).split('SCHEDULE = """')[0]  # the code, not the schedule it carries
    assert text.count("pl.pallas_call(") == 2
    assert "out, send_sem, recv_sem = _call1(x)" in text          # semaphore-typed outputs
    assert "(out,) = _call2(x, out, send_sem, recv_sem)" in text   # taken back as operands
    assert "input_output_aliases={1: 0}" in text                   # `out` aliased, in flight
    assert text.count("pl.BlockSpec(memory_space=pltpu.SEMAPHORE)") == 4
    assert "collective_id=0" in text.split("_call2 = ")[0]  # `start` has the barrier, `done` none
    assert "collective_id" not in text.split("_call2 = ")[1]


def _module(tmp_path, sched_path, name):
    out = tmp_path / f"{name}.py"
    out.write_text(ringc.emit(ringc.load(sched_path)))
    return out


def test_round_trip_the_emitted_module_checks_as_the_schedule(tmp_path):
    """The Pallas importer traces the emitted pallas_calls: the same program, the same verdict."""
    from ringc.pallas.importer import check_module
    sched = ringc.load(SPLIT)
    report = check_module(str(_module(tmp_path, SPLIT, "split")), 3)
    assert report.ok and not report.findings, report.to_text()
    assert "2 pallas_call(s)" in report.to_text()
    assert report.program.event_count == unroll(sched, 3).event_count
    broken = BROKEN / "permute_split_phase_touch_in_flight.yaml"
    report = check_module(str(_module(tmp_path, broken, "touch")), 3)
    assert report.kinds() == ringc.check(ringc.load(broken), 3).kinds() == {"race"}, report.to_text()


def test_run_refuses_a_program_that_interpret_mode_cannot_run():
    from ringc.run import run_schedule
    with pytest.raises(ScheduleError) as err:
        run_schedule(ringc.load(SPLIT), 2)
    assert "fresh semaphore" in str(err.value) and err.value.fix
    assert err.value.line == ringc.load(SPLIT).line_of("kernels")


def test_the_cost_model_times_the_program_calls_back_to_back():
    from ringc.cost.model import estimate, hardware
    sched = ringc.load(SPLIT)
    e = estimate(sched, hardware("ring:4", sched))
    assert e.seconds > 0


def test_jax_interpret_mode_still_cannot_run_semaphore_outputs():
    """Canary for the refusal above: jax's TPU interpreter fails on the emitted program's
    semaphore-typed outputs. When a jax upgrade makes this pass, teach `ringc run` programs."""
    import jax
    from ringc.run import _cpu_devices, load_module
    if len(_cpu_devices()) < 2:
        pytest.skip("needs 2 CPU devices (XLA_FLAGS)")
    module = load_module(ringc.load(SPLIT))
    mesh = jax.sharding.Mesh(_cpu_devices()[:2], ("x",))
    with pytest.raises(NotImplementedError, match="dma_sem"):
        jax.block_until_ready(module.build(mesh, interpret=True)(*module.make_inputs(mesh, 0)))
