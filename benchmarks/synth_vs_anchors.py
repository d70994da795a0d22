"""`ringc synth` against its anchors, on the cost model (model against model, not hardware):
for each collective, slice and size, the lower bound, the best library schedule, per-axis
rings (one axis after another, one direction: XLA / the scaling book; a flat ring on a
1-D slice; for all_to_all on k axes the one-shot-per-axis schedule of `ringc synth`'s
per_axis_direct family), k edge-disjoint Hamiltonian rings (benchmarks/hamiltonian_rings.py:
a ring, or two on a square 2-D torus, each bidirectional), a tree packing
(benchmarks/tree_packing.py, ForestColl-style: every chip's shard down its dimension-ordered
shortest-path out-trees, their shares by a small LP; `-` for all_to_all), a small TE-CCL-style MILP
(benchmarks/milp_baseline.py: scipy's HiGHS; its solve seconds in brackets), these three in
idealised alpha-beta terms, not the timed model,
and the winner of `ringc synth`, each as estimate (ratio bound / estimate), and the search
time (pricing every candidate at the table's sizes plus the 4 KiB latency probe, and
checking each winner; no TPU compiler: --no-compile).

    python benchmarks/synth_vs_anchors.py [--collectives psum,all_gather,psum_scatter,all_to_all]
        [--topologies ring:16,torus:4x4,v5p:4x4x4,v5e:16x16] [--sizes 64KiB,4MiB,256MiB] [--markdown]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import hamiltonian_rings  # benchmarks/hamiltonian_rings.py (the script's folder is on the path)
import milp_baseline  # benchmarks/milp_baseline.py
import tree_packing  # benchmarks/tree_packing.py
from tables import print_table  # benchmarks/tables.py

ROOT = Path(__file__).resolve().parent.parent

# Per-axis rings (one direction, one axis after another), by collective and number of axes.
PER_AXIS = {("psum", 1): "all_reduce_ring", ("psum", 2): "all_reduce_2d",
            ("all_gather", 1): "all_gather_ring", ("psum_scatter", 2): "reduce_scatter_hierarchical",
            ("all_to_all", 1): "all_to_all_ring"}


def main() -> int:
    sys.path.insert(0, str(ROOT))
    import ringc
    from ringc import topology as T
    from ringc.cost import CostError, estimate, hardware
    from ringc.cost.chips import DMA_ISSUE_OVERHEAD, HOP_LATENCY
    from ringc.cost.sizing import parse_size
    from ringc.errors import ScheduleError
    from ringc.ir.loader import load_text
    from ringc.synth import synth
    from ringc.synth.families import per_axis_direct
    from ringc.units import size_text, time_text

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collectives", default="psum,all_gather,psum_scatter,all_to_all")
    ap.add_argument("--topologies", default="ring:16,torus:4x4,v5p:4x4x4,v5e:16x16")
    ap.add_argument("--sizes", default="64KiB,4MiB,256MiB")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]

    def cell(sec, eff) -> str:
        return f"{time_text(sec)} ({eff:.0%})"

    head = ["collective", "slice", "V", "bound", "best library", "per-axis rings", "Hamiltonian rings (alpha-beta)",
            "tree packing (alpha-beta)", "MILP (alpha-beta) [solve s]",
            "ringc synth", "synth / bound", "search s"]
    rows = []
    milp_solves: dict[tuple[str, str], tuple] = {}   # (problem, slice) -> (unit time or None, solve s)
    for kind in args.collectives.split(","):
        for spec in args.topologies.split(","):
            topo = T.parse(spec)
            t0 = time.perf_counter()
            try:
                r = synth(kind, spec, sizes, compile=False)
            except ValueError as e:
                print(f"{kind} on {spec}: {e}", file=sys.stderr)
                continue
            took = time.perf_counter() - t0
            per_axis = PER_AXIS.get((kind, topo.ndim))
            base = ringc.load(ROOT / "schedules" / f"{per_axis}.yaml") if per_axis else None
            if kind == "all_to_all" and topo.ndim > 1 and topo.generation != "v5e":
                base = load_text(per_axis_direct.all_to_all(topo.ndim), "<per-axis all_to_all>")
                per_axis = base.name
            for ch in r.choices:
                lib = [p for p in r.priced if p.candidate.family == "library" and p.usable(ch.size)]
                best = max(lib, key=lambda p: p.points[ch.size][1], default=None)
                pa = "-"
                if base is not None:
                    try:
                        e = estimate(base, hardware(spec, base), nbytes=ch.size)
                        pa = cell(e.seconds, e.efficiency) + ("" if e.fits else " !VMEM")
                    except (ScheduleError, CostError, ValueError) as err:
                        pa = "n/a: " + (getattr(err, "message", None) or str(err)).splitlines()[0][:40]
                w = ch.winner
                wp = w.points[ch.size] if w else None
                bound = wp[2] if wp else (best.points[ch.size][2] if best else None)
                mi = "-"
                if wp is not None:
                    problem = "all_to_all" if kind == "all_to_all" else "gather"
                    if (problem, spec) not in milp_solves:  # the epochs / the load do not depend on V
                        milp_solves[(problem, spec)] = milp_baseline.solve(kind, topo)
                    sec, solve_s = milp_baseline.seconds(kind, topo, w.volumes[ch.size], w.hw.chip, HOP_LATENCY,
                                                         DMA_ISSUE_OVERHEAD, milp_solves[(problem, spec)])
                    mi = (f"{time_text(sec)} ({wp[2] / sec:.0%}) [{solve_s:.1f}]" if sec is not None else
                          f"not solved [{solve_s:.1f}]" if solve_s else f"- (over {milp_baseline.limit(kind)} chips)")
                ham = "-"
                if wp is not None:
                    hs = hamiltonian_rings.seconds(kind, topo, w.volumes[ch.size], w.hw.chip, HOP_LATENCY,
                                                   DMA_ISSUE_OVERHEAD)
                    k = len(hamiltonian_rings.rings(topo)) if hs else 0
                    ham = f"{k} ring{'s' if k > 1 else ''}: {cell(hs, wp[2] / hs)}" if hs else "-"
                trees = "-"
                if wp is not None:
                    ts = tree_packing.seconds(kind, topo, w.volumes[ch.size], w.hw.chip, HOP_LATENCY,
                                              DMA_ISSUE_OVERHEAD)
                    trees = f"{tree_packing.trees_per_root(topo)} trees/root: {cell(ts, wp[2] / ts)}" if ts else "-"
                rows.append([kind, spec, size_text(ch.size), time_text(bound) if bound else "-",
                             f"{best.candidate.name} {cell(*best.points[ch.size][:2])}" if best else "-",
                             f"{per_axis} {pa}" if per_axis else "-", ham, trees, mi,
                             f"{w.candidate.label} {time_text(wp[0])}" if w else "none verifies",
                             f"{wp[1]:.1%}" if wp else "-", f"{took:.1f}"])
                print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    print_table(head, rows, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
