"""A small TE-CCL-style baseline for `synth_vs_anchors.py`: the collective as a flow problem
on the slice's directed links (`Topology.graph`: networkx, the test extra), solved with
scipy's HiGHS (`scipy.optimize.milp`, `linprog`; scipy comes with jax), no schedule text,
no verification.

- all-gather (and reduce-scatter, its time reversal): a time-expanded MILP. Every chip's
  shard is one chunk; in an epoch a directed link carries at most one chunk, from a chip
  that held it at the end of the previous epoch. The fewest epochs T after which every chip
  holds every chunk is found by trying T upwards from max(diameter, ceil((p - 1) / degree)).
- all-reduce: the reduce-scatter, then the all-gather (2 T epochs), as TE-CCL composes it.
- all-to-all: the multi-commodity flow LP (one commodity per source, V / p to every other
  chip) minimising the busiest link's bytes (on a fully wrapped torus, one source's flow
  with the links grouped by axis and direction: the same optimum, by translation).

Times are in the alpha-beta terms of the same chip (`ringc/cost/chips.py`): an epoch is one
hop latency, one DMA issue and a chunk at the link bandwidth; the all-to-all is its busiest
link's bytes at the link bandwidth plus the diameter in hops. That is an idealised schedule
(no contention inside an epoch, adds free), not the event-timed model of the other columns.
"""

from __future__ import annotations

import math
import time

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linprog, milp
from scipy.sparse import coo_matrix

MAX_CHIPS_MILP = 16       # the time-expanded MILP: 16 chips solve in seconds, 64 do not in a minute
MAX_CHIPS_LP = 64         # the all-to-all LP with a commodity per source (the symmetric one has no limit)
TIME_LIMIT = 60.0


def directed_links(topo) -> tuple[list, list[tuple[int, int]]]:
    nodes = topo.devices
    index = {c: i for i, c in enumerate(nodes)}
    links = []
    for a, b in topo.graph.edges():
        links += [(index[a], index[b]), (index[b], index[a])]
    return nodes, sorted(set(links))


def _diameter(topo) -> int:
    return sum(s // 2 if w else s - 1 for s, w in zip(topo.shape, topo.wrap))


def gather_epochs(topo) -> tuple[int | None, float]:
    """The fewest epochs of the time-expanded all-gather MILP, and the solve seconds; None
    when it does not solve within TIME_LIMIT or the slice is over MAX_CHIPS_MILP."""
    p = topo.size
    if p > MAX_CHIPS_MILP:
        return None, 0.0
    nodes, links = directed_links(topo)
    degree = max(sum(1 for _, v in links if v == n) for n in range(p))
    t0 = time.perf_counter()
    T = max(_diameter(topo), math.ceil((p - 1) / degree))
    while T <= 4 * p:
        if gather_feasible(p, links, T, TIME_LIMIT - (time.perf_counter() - t0)):
            return T, time.perf_counter() - t0
        if time.perf_counter() - t0 > TIME_LIMIT:
            return None, time.perf_counter() - t0
        T += 1
    return None, time.perf_counter() - t0


def gather_feasible(p: int, links: list[tuple[int, int]], T: int, budget: float) -> bool:
    L = len(links)
    nf = p * L * T                          # f[s, e, t]: chunk s crosses link e in epoch t (1..T)
    nh = p * p * (T + 1)                    # h[s, n, t]: chip n holds chunk s after epoch t (0..T)

    def f(s, e, t):
        return (s * L + e) * T + (t - 1)

    def h(s, n, t):
        return nf + (s * p + n) * (T + 1) + t

    rows, cols, vals, lo, hi = [], [], [], [], []
    r = 0

    def row(entries, lower, upper):
        nonlocal r
        for c, v in entries:
            rows.append(r)
            cols.append(c)
            vals.append(v)
        lo.append(lower)
        hi.append(upper)
        r += 1

    into = [[e for e, (_, v) in enumerate(links) if v == n] for n in range(p)]
    for t in range(1, T + 1):
        for e in range(L):
            row([(f(s, e, t), 1) for s in range(p)], -np.inf, 1)               # one chunk per link and epoch
    for s in range(p):
        for t in range(1, T + 1):
            for e, (u, _) in enumerate(links):
                row([(f(s, e, t), 1), (h(s, u, t - 1), -1)], -np.inf, 0)     # send only what is held
            for n in range(p):                                               # hold what was held or arrived
                row([(h(s, n, t), 1), (h(s, n, t - 1), -1)] + [(f(s, e, t), -1) for e in into[n]], -np.inf, 0)
    lb, ub = np.zeros(nf + nh), np.ones(nf + nh)
    for s in range(p):
        for n in range(p):
            lb[h(s, n, 0)] = ub[h(s, n, 0)] = 1.0 if n == s else 0.0
            lb[h(s, n, T)] = 1.0
    A = coo_matrix((vals, (rows, cols)), shape=(r, nf + nh)).tocsr()
    c = np.concatenate([np.ones(nf), np.zeros(nh)])                       # fewest sends
    res = milp(c, constraints=LinearConstraint(A, lo, hi), integrality=np.ones(nf + nh),
               bounds=Bounds(lb, ub), options={"time_limit": max(budget, 1.0)})
    return res.status == 0


def all_to_all_load(topo) -> tuple[float | None, float]:
    """The busiest link's load, in units of one chunk (V / p), of the least-congested
    routing of the all-to-all (a multi-commodity flow LP), and the solve seconds. On a
    torus wrapped on every axis the chips are translations of each other, so one source's
    flow is solved and every directed link carries the sum of that flow over its class
    (axis, direction): the LP of p commodities symmetrised, same optimum."""
    p = topo.size
    symmetric = all(topo.wrap)
    if p > MAX_CHIPS_LP and not symmetric:
        return None, 0.0
    t0 = time.perf_counter()
    nodes, links = directed_links(topo)
    L = len(links)
    sources = [0] if symmetric else list(range(p))
    n_x = len(sources) * L                    # x[s, e]: chunks of source s on link e; last var: the max load
    rows, cols, vals, b_eq = [], [], [], []
    r = 0
    for i, s in enumerate(sources):
        for n in range(p):
            for e, (u, v) in enumerate(links):
                if u == n:
                    rows.append(r), cols.append(i * L + e), vals.append(1.0)
                if v == n:
                    rows.append(r), cols.append(i * L + e), vals.append(-1.0)
            b_eq.append(p - 1.0 if n == s else -1.0)
            r += 1
    A_eq = coo_matrix((vals, (rows, cols)), shape=(r, n_x + 1)).tocsr()
    if symmetric:   # one row per class: (axis, +1 or -1 along it)
        def cls(e):
            u, v = nodes[links[e][0]], nodes[links[e][1]]
            a = next(k for k in range(topo.ndim) if u[k] != v[k])
            return a, (v[a] - u[a]) % topo.shape[a] == 1
        groups: dict = {}
        for e in range(L):
            groups.setdefault(cls(e), []).append(e)
        members = list(groups.values())
    else:
        members = [[e] for e in range(L)]
    rows, cols, vals = [], [], []
    for g, es in enumerate(members):
        for i in range(len(sources)):
            for e in es:
                rows.append(g), cols.append(i * L + e), vals.append(1.0)
        rows.append(g), cols.append(n_x), vals.append(-1.0)
    A_ub = coo_matrix((vals, (rows, cols)), shape=(len(members), n_x + 1)).tocsr()
    c = np.zeros(n_x + 1)
    c[-1] = 1.0
    res = linprog(c, A_ub=A_ub, b_ub=np.zeros(len(members)), A_eq=A_eq, b_eq=b_eq, bounds=(0, None),
                  method="highs", options={"time_limit": TIME_LIMIT})
    return (float(res.x[-1]) if res.status == 0 else None), time.perf_counter() - t0


def limit(kind: str) -> int:
    return MAX_CHIPS_LP if kind == "all_to_all" else MAX_CHIPS_MILP


def solve(kind: str, topo) -> tuple[float | None, float]:
    """The size-independent solution for `kind` on `topo`: the all-to-all's busiest link
    load in chunks, or the all-gather's epochs (the reduce-scatter's and all-reduce's
    derive from it); and the solve seconds."""
    return all_to_all_load(topo) if kind == "all_to_all" else gather_epochs(topo)


def seconds(kind: str, topo, volume: float, chip, hop_latency: float, dma_overhead: float,
            solved: tuple[float | None, float]) -> tuple[float | None, float]:
    """The baseline's time for `kind` moving `volume` bytes per chip (V as in
    cost/bounds.py) on `topo`, from `solve`'s answer; None where it was not solved."""
    unit, took = solved
    if unit is None:
        return None, took
    chunk = volume / topo.size
    B = chip.link_bandwidth
    if kind == "all_to_all":
        return unit * chunk / B + _diameter(topo) * hop_latency + dma_overhead, took
    epoch = hop_latency + dma_overhead + chunk / B
    return (2 if kind == "psum" else 1) * unit * epoch, took
