"""Kusumoto et al. 2019 (seed 000 §4, seed 001 Algorithm 1): the best canonical strategy.

- ``dp-exhaustive`` (§4.1): depth-first search over every increasing lower-set sequence, each
  stage judged by ``canonical.stage_term`` straight from eq. (1) and (2). Exponential; it is the
  reference the DP solvers are tested against, and refuses graphs above ``max_nodes``.
- ``dp-exact`` (§4.2, Algorithm 1): DP over all lower sets. The table opt[L, t] = min M(U) is kept
  sparse, as the Pareto front of (t, m) pairs per lower set: this *is* the skip rule of §4.2
  (an entry with larger t and no smaller m is never explored).
- ``dp-approx`` (§4.3): the same DP over the pruned family {L_v} (plus V, so that graphs with
  several sinks can end the sequence).
- ``mode="time"`` minimises eq. (1); ``mode="memory"`` (§4.4) maximises it, which Algorithm 1
  gets by replacing min with max at line 15; the Pareto front flips accordingly. With
  ``budget=None`` the memory-centric mode uses the smallest feasible budget, as §4.4 advises.

Transitions L -> L' are evaluated for all predecessors L of one L' at once with numpy: sets are
rows of a boolean matrix, and only the few columns of ∂(L') are needed for the terms that
depend on both L and L' (T and M of ∂(L') \\ L). Tested against dp-exhaustive on random DAGs
(tests/test_dp.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .. import canonical
from ..graph import Graph
from ..lowerset import Poset, TooManyLowerSets
from ..plan import Plan, infeasible
from . import register
from .common import stage_plan, within

EXACT_CAP = 30_000  # lower sets; past this the O(#L^2) sweep takes minutes


@dataclass
class _Family:
    """Lower sets (∅ first, then by size) with the per-set quantities of the transitions."""

    masks: list[int]
    member: np.ndarray     # bool [sets, n]: membership
    mem: np.ndarray        # M(L)
    cost: np.ndarray       # T(L)
    extra: np.ndarray      # M(δ+(L) \ L) + M(δ−(δ+(L)) \ L)
    boundary: list[np.ndarray]  # column indices of ∂(L)
    packed: np.ndarray     # uint64 [sets, words]: membership bits, for fast subset tests

    @classmethod
    def build(cls, p: Poset, masks: list[int]) -> "_Family":
        masks = [0] + [m for m in masks if m]
        n = p.n
        member = np.zeros((len(masks), n), dtype=bool)
        for r, m in enumerate(masks):
            member[r, [i for i in range(n) if m >> i & 1]] = True
        mem_of = np.asarray(p.mem_of, dtype=float)
        cost_of = np.asarray(p.cost_of, dtype=float)
        extra = np.empty(len(masks))
        bnd = []
        for r, m in enumerate(masks):
            out = p.delta_plus(m) & ~m
            extra[r] = p.mem(out) + p.mem(p.delta_minus(p.delta_plus(m)) & ~m)
            b = p.boundary(m)
            bnd.append(np.array([i for i in range(n) if b >> i & 1], dtype=int))
        words = max(1, (n + 63) // 64)
        packed = np.array([[m >> (64 * w) & 0xFFFFFFFFFFFFFFFF for w in range(words)] for m in masks],
                          dtype=np.uint64)
        return cls(masks, member, member @ mem_of, member @ cost_of, extra, bnd, packed)


def _pareto(a: np.ndarray, m: np.ndarray, maximize: bool) -> np.ndarray:
    """Indices of the non-dominated (a, m) pairs: better a (min, or max) and smaller m."""
    key = -a if maximize else a
    order = np.lexsort((m, key))
    ms = m[order]
    best_before = np.minimum.accumulate(np.concatenate(([np.inf], ms[:-1])))
    return order[ms < best_before]


def _run_dp(p: Poset, fam: _Family, budget: float, objective: str):
    """Algorithm 1, pull-style over L' in ascending size.

    objective: "min" / "max" total overhead (eq. 1) within ``budget``; or "feasible", which
    keeps per lower set only the entry of least cached memory m: feasibility depends on m
    alone, so this decides exactly whether any sequence fits, much faster.
    Returns the entry arrays and the index of the best entry at V (or None).
    """
    mem_of = np.asarray(p.mem_of, dtype=float)
    cost_of = np.asarray(p.cost_of, dtype=float)
    ents = _Entries()
    ents.add(np.array([0]), np.array([0.0]), np.array([0.0]), np.array([-1]))
    start = np.zeros(len(fam.masks), dtype=np.int64)   # entries of set q: [start[q], start[q] + count[q])
    count = np.zeros(len(fam.masks), dtype=np.int64)
    count[0] = 1
    words = fam.packed
    for r in range(1, len(fam.masks)):
        # predecessors: proper subsets of L' (all processed already: sets are sorted by size)
        # ... and, under a finite budget, only those leaving a stage V' small enough to fit:
        # line 6 needs 2 M(V') + M(δ+...) + M(δ−(δ+...)) <= B since opt[L, t] >= 0
        close = fam.mem[:r] >= fam.mem[r] - (budget - fam.extra[r]) / 2 - 1e-9
        rows = np.flatnonzero(close & (count[:r] > 0))
        rows = rows[~(words[rows] & ~words[r]).any(axis=1)]
        if rows.size == 0:
            continue
        counts = count[rows]
        idx = np.repeat(start[rows] - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
        owner = np.repeat(np.arange(rows.size), counts)      # entry -> position in rows
        e_a, e_m = ents.a[idx], ents.m[idx]
        # per predecessor set L: the terms of lines 6, 9, 10 that do not depend on the entry
        b = fam.boundary[r]
        in_prev = fam.member[np.ix_(rows, b)]                 # ∂(L') ∩ L
        d_cost = cost_of[b].sum() - in_prev @ cost_of[b]     # T(∂(L') \ L)
        d_mem = mem_of[b].sum() - in_prev @ mem_of[b]        # M(∂(L') \ L)
        stage = 2 * (fam.mem[r] - fam.mem[rows]) + fam.extra[r]
        step_t = fam.cost[r] - fam.cost[rows] - d_cost       # T(V' \ ∂(L'))
        stage_mem = e_m + stage[owner]                       # line 6
        new_m = e_m + d_mem[owner]                           # line 10
        new_a = e_a + step_t[owner]                                        # line 9
        cand = np.flatnonzero(stage_mem <= budget * (1 + 1e-12) + 1e-9)   # line 7
        if cand.size == 0:
            continue
        if objective == "feasible":
            keep = cand[[np.argmin(new_m[cand])]]
        elif budget == float("inf"):
            # with no memory constraint ahead m cannot matter: keep the single best entry
            key = -new_a[cand] if objective == "max" else new_a[cand]
            keep = cand[[np.lexsort((new_m[cand], key))[0]]]
        else:
            keep = cand[_pareto(new_a[cand], new_m[cand], maximize=objective == "max")]
        start[r] = ents.size
        count[r] = keep.size
        ents.add(np.full(keep.size, r), new_a[keep], new_m[keep], idx[keep])
    full_row = len(fam.masks) - 1
    if fam.masks[full_row] != p.full or count[full_row] == 0:
        return ents, None
    vals = ents.a[start[full_row]:start[full_row] + count[full_row]]
    best = int(start[full_row] + (np.argmax(vals) if objective == "max" else np.argmin(vals)))
    return ents, best


class _Entries:
    """Growable arrays of DP entries (set row, objective a, cache memory m, parent entry)."""

    def __init__(self) -> None:
        self.size = 0
        self.set = np.zeros(1024, dtype=np.int64)
        self.a = np.zeros(1024)
        self.m = np.zeros(1024)
        self.parent = np.zeros(1024, dtype=np.int64)

    def add(self, sets: np.ndarray, a: np.ndarray, m: np.ndarray, parent: np.ndarray) -> None:
        end = self.size + sets.size
        if end > self.set.size:
            grow = max(end, 2 * self.set.size)
            for name in ("set", "a", "m", "parent"):
                old = getattr(self, name)
                new = np.zeros(grow, dtype=old.dtype)
                new[: self.size] = old[: self.size]
                setattr(self, name, new)
        self.set[self.size:end] = sets
        self.a[self.size:end] = a
        self.m[self.size:end] = m
        self.parent[self.size:end] = parent
        self.size = end


def _trace(p: Poset, fam: _Family, ents: _Entries, best: int) -> list[list[str]]:
    lowers = []
    e = best
    while e > 0:
        lowers.append(fam.masks[int(ents.set[e])])
        e = int(ents.parent[e])
    lowers.reverse()
    stages, prev = [], 0
    for lo in lowers:
        stages.append(p.ids(lo & ~prev))
        prev = lo
    return stages


def _family(p: Poset, exact: bool, cap: int) -> _Family:
    return _Family.build(p, p.lower_sets(cap=cap) if exact else p.pruned_family())


def _dp_min_budget(graph: Graph, exact: bool, cap: int = EXACT_CAP) -> float:
    """The smallest budget with a feasible sequence over the family (seed 000 §5.1)."""
    p = Poset.of(graph)
    return _min_peak(p, _family(p, exact, cap), graph)


def _min_peak(p: Poset, fam: _Family, graph: Graph) -> float:
    """Binary search on the budget with the exact feasibility DP; returns the eq. (2) peak of
    the least-memory sequence found, so that budget is itself feasible."""
    ents, best = _run_dp(p, fam, float("inf"), "feasible")
    hi = _peak_of(p, fam, ents, best)
    lo = 0.0
    integral = all(float(m).is_integer() for m in p.mem_of)
    # to the unit on integral sizes up to a million units, else to a millionth of the peak
    while hi - lo > max(1.0 if integral else 0.0, 1e-6 * hi):
        mid = (lo + hi) // 2 if integral else (lo + hi) / 2
        ents, best = _run_dp(p, fam, mid, "feasible")
        if best is None:
            lo = mid
        else:
            hi = min(mid, _peak_of(p, fam, ents, best))
    return hi


def _peak_of(p: Poset, fam: _Family, ents: "_Entries", best: int) -> float:
    stages = _trace(p, fam, ents, best)
    return max(t.memory for t in canonical.stage_terms(p, canonical.lowers_of_stages(p, stages)))


def _dp_solve(graph: Graph, budget: float | None, mode: str, exact: bool, name: str,
              cap: int = EXACT_CAP) -> Plan:
    started = time.perf_counter()
    p = Poset.of(graph)
    try:
        fam = _family(p, exact, cap)
    except TooManyLowerSets as e:
        raise ValueError(f"{name}: {e}") from None
    if mode == "memory" and budget is None:
        budget_used = _min_peak(p, fam, graph)
    else:
        budget_used = float("inf") if budget is None else float(budget)
    ents, best = _run_dp(p, fam, budget_used, "max" if mode == "memory" else "min")
    if best is None:
        return infeasible(name, budget, "", mode=mode, stats={"lower_sets": len(fam.masks) - 1})
    stages = _trace(p, fam, ents, best)
    return stage_plan(graph, stages, name, budget, started, mode=mode,
                      lower_sets=len(fam.masks) - 1, planning_budget=budget_used)


@register("dp-exact", min_budget=lambda g, **o: _dp_min_budget(g, exact=True, cap=o.get("cap", EXACT_CAP)))
def solve_exact(graph: Graph, budget: float | None = None, mode: str = "time",
                cap: int = EXACT_CAP, **options) -> Plan:
    """Exact DP over all lower sets (seed 000 §4.2, Algorithm 1)."""
    return _dp_solve(graph, budget, mode, exact=True, name="dp-exact", cap=cap)


@register("dp-approx", min_budget=lambda g, **o: _dp_min_budget(g, exact=False))
def solve_approx(graph: Graph, budget: float | None = None, mode: str = "time", **options) -> Plan:
    """Approximate DP over the pruned lower sets {L_v} (seed 000 §4.3)."""
    return _dp_solve(graph, budget, mode, exact=False, name="dp-approx")


# ---- the reference: exhaustive search (§4.1) ------------------------------------------------

@register("dp-exhaustive")
def solve_exhaustive(graph: Graph, budget: float | None = None, mode: str = "time",
                     max_nodes: int = 12, **options) -> Plan:
    """Exhaustive search over all lower-set sequences (seed 000 §4.1); small graphs only."""
    started = time.perf_counter()
    if len(graph) > max_nodes:
        raise ValueError(f"dp-exhaustive refuses graphs above {max_nodes} nodes (this one has "
                         f"{len(graph)}): use solver='dp-exact', which finds the same optimum")
    p = Poset.of(graph)
    lowers = p.lower_sets(cap=1 << max_nodes)
    limit = float("inf") if budget is None else float(budget)
    if mode == "memory" and budget is None:
        limit = _exhaustive_min_peak(p, lowers)
    best: tuple[float, list[int]] | None = None
    sign = -1 if mode == "memory" else 1

    def dfs(prev: int, cached: int, t: float, seq: list[int]) -> None:
        nonlocal best
        if prev == p.full:
            if best is None or sign * t < sign * best[0]:
                best = (t, list(seq))
            return
        for lower in lowers:
            if lower & prev == prev and lower != prev:
                term = canonical.stage_term(p, prev, lower, cached)
                if within(term.memory, limit):
                    seq.append(lower)
                    dfs(lower, cached | p.boundary(lower), t + term.overhead, seq)
                    seq.pop()

    dfs(0, 0, 0.0, [])
    if best is None:
        return infeasible("dp-exhaustive", budget, "", mode=mode)
    stages, prev = [], 0
    for lo in best[1]:
        stages.append(p.ids(lo & ~prev))
        prev = lo
    return stage_plan(graph, stages, "dp-exhaustive", budget, started, mode=mode, planning_budget=limit)


def _exhaustive_min_peak(p: Poset, lowers: list[int]) -> float:
    """Smallest eq. (2) peak over all sequences, by the same exhaustive walk."""
    best = float("inf")

    def dfs(prev: int, cached: int, peak: float) -> None:
        nonlocal best
        if peak >= best:
            return
        if prev == p.full:
            best = peak
            return
        for lower in lowers:
            if lower & prev == prev and lower != prev:
                term = canonical.stage_term(p, prev, lower, cached)
                dfs(lower, cached | p.boundary(lower), max(peak, term.memory))

    dfs(0, 0, 0.0)
    return best
