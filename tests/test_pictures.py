"""PNG pictures a person would rather look at: the timeline's lanes (one per concurrent DMA,
no two bars overlapping in a lane), a finding's events highlighted, `check --show` drawing
every finding (or the chosen one), the rank plot marking sizes that do not fit VMEM.
Structure is asserted, not pixels."""

from __future__ import annotations

from pathlib import Path

import pytest

import ringc
from ringc.cli import main
from ringc.cost import estimate, hardware
from ringc.cost.model import memory_of
from ringc.cost.timeline import simulate
from ringc.show.png import layout

pytest.importorskip("matplotlib")

REPO = Path(__file__).resolve().parent.parent
BROKEN = REPO / "tests" / "broken"
PNG = b"\x89PNG\r\n\x1a\n"


def _no_overlap(lay) -> None:
    for lane in range(len(lay.lanes)):
        bars = sorted((b for b in lay.bars if b.lane == lane and b.kind in ("dma", "compute", "wait")),
                      key=lambda b: (b.start, b.end))
        for a, b in zip(bars, bars[1:]):
            assert a.end <= b.start + 1e-15, (lay.lanes[lane], a, b)


def test_a_lane_per_concurrent_dma():
    sched = ringc.load(REPO / "schedules" / "all_reduce_bidirectional.yaml")
    e = estimate(sched, hardware("ring", sched, n=4), every_device=True)
    lay = layout(e.machine)
    _no_overlap(lay)
    assert len({l.device for l in lay.lanes}) == 4
    for d in range(4):
        names = [l.name for l in lay.lanes_of(d)]
        assert names[0] == "core" and len([n for n in names if n.startswith("DMA")]) >= 2  # both directions at once
    spans = [s for s in e.machine.spans]
    assert len([b for b in lay.bars if b.kind in ("dma", "compute", "wait")]) == len(spans)
    assert all(b.label for b in lay.bars)  # every bar has its label (drawn where it fits)
    assert not lay.highlighted


def _failing(name: str, n: int = 4):
    sched = ringc.load(BROKEN / name)
    report = ringc.check(sched, n)
    machine = simulate(report.program, hardware("ring", sched, n=n), memory_of(sched))
    return sched, report, machine


def test_a_race_has_its_two_accesses_highlighted():
    _, report, machine = _failing("all_reduce_read_before_wait.yaml")
    race = next(f for f in report.findings if f.kind == "race")
    lay = layout(machine, race)
    _no_overlap(lay)
    marked = lay.highlighted
    assert len(marked) >= 2 and [b.highlighted for b in marked] == list(range(1, len(marked) + 1))
    assert {b.event for b in marked} >= {race.event, *race.related}
    assert {b.kind for b in marked} <= {"dma", "compute", "wait", "mark"}


def test_a_hang_draws_its_stuck_waits():
    _, report, machine = _failing("all_reduce_over_wait.yaml")
    hang = next(f for f in report.findings if f.kind == "hang")
    lay = layout(machine, hang)
    stuck = [b for b in lay.bars if b.kind == "stuck"]
    assert stuck and all(b.highlighted and b.end == lay.right > lay.horizon for b in stuck)
    assert all(b.label.startswith("stuck forever") for b in stuck)


def test_check_show_draws_every_finding_or_the_chosen_one(tmp_path, capsys):
    path = str(BROKEN / "all_reduce_no_capacity_wait.yaml")
    out = tmp_path / "f.png"
    assert main(["check", path, "--devices", "4", "-q", "--show", str(out)]) == 1
    report = ringc.check(ringc.load(path), 4)
    count = len(report.findings)
    assert count > 2
    drawn = sorted(p.name for p in tmp_path.iterdir())
    assert drawn == sorted(["f.png"] + [f"f-{k}.png" for k in range(2, count + 1)])
    assert all(p.read_bytes()[:8] == PNG for p in tmp_path.iterdir())
    err = capsys.readouterr().err
    assert f"finding 2 of {count}: [race]" in err
    chosen = tmp_path / "one"
    chosen.mkdir()
    assert main(["check", path, "--devices", "4", "-q", "--show", str(chosen / "g.png"), "--show-finding", "2"]) == 1
    assert [p.name for p in chosen.iterdir()] == ["g.png"]
    assert f"finding 2 of {count}" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--show-finding", "99", "--show", "{tmp}/x.png"], "--show-finding 99: the verdict drawn has"),
    (["--show-finding", "2"], "--show-finding K chooses the finding --show draws"),
])
def test_show_finding_bad_input(argv, message, tmp_path, capsys):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(["check", str(BROKEN / "all_reduce_no_capacity_wait.yaml"), "--devices", "4", "-q", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_rank_plot_marks_sizes_that_do_not_fit_vmem():
    import matplotlib.pyplot as plt
    from ringc.cost.rank import NO_FIT, rank, ranking_figure
    sizes = [2**k for k in range(12, 31, 3)]
    r = rank("psum", "ring:16", sizes)
    fig = ranking_figure(r)
    top = fig.axes[0]
    lines = {l.get_gid(): l for l in top.get_lines() if l.get_gid()}
    misfit = {name: [e.bound.volume for e in row if e is not None and not e.fits] for name, row in r.table.items()}
    assert any(misfit.values())  # the sweep reaches sizes some schedule cannot hold in VMEM
    for name, row in r.table.items():
        fits = [e.bound.volume for e in row if e is not None and e.fits]
        if fits:
            assert list(lines[f"fits:{name}"].get_xdata()) == fits
        if misfit[name]:
            assert list(lines[f"misfit:{name}"].get_xdata()) == misfit[name]
            assert lines[f"misfit:{name}"].get_marker() == "x"
        else:
            assert f"misfit:{name}" not in lines
    assert NO_FIT in [t.get_text() for t in top.get_legend().get_texts()]
    plt.close(fig)


def test_show_on_a_pallas_kernel_says_it_draws_nothing(tmp_path, capsys):
    out = tmp_path / "k.png"
    main(["check", str(REPO / "tests" / "pallas_import" / "entry_race.py"), "--devices", "4", "-q", "--show", str(out)])
    assert "--show: nothing drawn" in capsys.readouterr().err and not out.exists()
