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
depend on both L and L' (T and M of ∂(L') \\ L). Speed, for graphs of thousands of nodes:

- the per-set terms (δ±, ∂) come from sparse matrix products over all sets at once;
- a predecessor L ⊆ L' is found by its maximal elements (one, for L_v) instead of bit masks;
- a predecessor whose best entries are beaten outright by another's is skipped whole;
- time-centric runs first bound eq. (1) by T(V)/16, doubling the bound until a sequence fits
  (exact: entries above the optimum are never needed), which prunes most entries;
- dp-approx thins each Pareto front to one entry per ``resolution * T(V)`` of eq. (1) (the
  entry of least memory: feasibility is never lost, eq. (1) errs by at most that per stage;
  dp-exact keeps them exact); ``time_limit`` coarsens the fronts further when the sweep would
  overrun it, and past it keeps one entry per lower set (which still decides feasibility
  exactly); a sweep still running ``GRACE`` of the limit later (``MIN_GRACE`` seconds at least)
  stops, its last stage going from the sets reached to V; the minimal-budget search stops at
  the least feasible budget found (``plan.stats["cut_short"]`` says what was cut short);
- ``coarsen=True`` (default from ``COARSEN_NODES`` nodes) restricts {L_v} to lower sets that
  split no chain of cheap ops (``remat.coarsen``); eq. (1) and (2) stay the full graph's.

Tested against dp-exhaustive on random DAGs (tests/test_dp.py), the coarse family and the time
limit in tests/test_frontier.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import csr_matrix

from ..errors import SolverError
from .. import canonical
from ..coarsen import Coarsening, free_nodes
from ..graph import Graph
from ..lowerset import Poset, TooManyLowerSets
from ..plan import Plan, infeasible
from . import register
from .common import stage_plan, within

EXACT_CAP = 4_096  # lower sets; past this the O(#L^2) sweep takes minutes (6,912 on a 40-node CNN: 92 s a pass)
RESOLUTION = 1e-4  # dp-approx's Pareto fronts are thinned to steps of this fraction of T(V)
COARSEN_NODES = 2000  # dp-approx plans over coarsened lower sets (remat.coarsen) from this size
DEFAULT_TIME_LIMIT = 60.0  # seconds for one dp-approx call; then its fronts are coarsened
GRACE = 0.5       # a sweep past the time limit may run this share of the limit more (one entry per set) ...
MIN_GRACE = 2.0   # ... or this many seconds, if more; then it stops and ends in V from the sets reached


@dataclass
class _Family:
    """Lower sets (∅ first, then by size) with the per-set quantities of the transitions."""

    masks: list[int]
    member: np.ndarray     # bool [sets, n]: membership
    mem: np.ndarray        # M(L)
    cost: np.ndarray       # T(L)
    extra: np.ndarray      # M(δ+(L) \ L) + M(δ−(δ+(L)) \ L)
    boundary: list[np.ndarray]  # column indices of ∂(L)
    top: np.ndarray        # the one maximal element of L (-1: several, -2: none, i.e. L = ∅)
    maximal: list[np.ndarray]   # column indices of the maximal elements of L
    max_ptr: np.ndarray = field(default=None)  # maximal elements of set q: max_idx[max_ptr[q]:max_ptr[q + 1]]
    max_idx: np.ndarray = field(default=None)

    def __post_init__(self) -> None:
        if self.max_ptr is None:  # the maximal elements flat, for _subsets to test many sets at once
            lens = np.fromiter((len(x) for x in self.maximal), dtype=np.int64, count=len(self.maximal))
            self.max_ptr = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
            self.max_idx = (np.concatenate(self.maximal).astype(np.int64) if len(self.maximal)
                            else np.zeros(0, dtype=np.int64))

    @classmethod
    def build(cls, p: Poset, masks: list[int]) -> "_Family":
        masks = [0] + [m for m in masks if m]
        n = p.n
        member = np.stack([p.row(m) for m in masks])
        mem_of = np.asarray(p.mem_of, dtype=float)
        cost_of = np.asarray(p.cost_of, dtype=float)
        succ = csr_matrix(p._succ, dtype=np.float32)  # succ[i, j]: j reads i
        pred = succ.T.tocsr()
        bwd_succ = csr_matrix(p._bwd_in.T, dtype=np.float32)  # [i, j]: j's backward reads input i
        extra = np.empty(len(masks))
        bnd: list[np.ndarray] = []
        maximal: list[np.ndarray] = []
        for lo in range(0, len(masks), 1024):  # δ± of many sets at once, as sparse products
            rows = member[lo:lo + 1024]
            plus = (pred @ rows.T.astype(np.float32)).T > 0                # δ+(L)
            outside = (plus & ~rows).T.astype(np.float32)
            siblings = (bwd_succ @ outside).T > 0  # inputs the backward of δ+(L) \ L reads
            extra[lo:lo + len(rows)] = (plus & ~rows) @ mem_of + (siblings & ~rows) @ mem_of
            read_outside = (succ @ (~rows).T.astype(np.float32)).T > 0     # δ−(V \ L)
            bnd += [np.flatnonzero(b) for b in read_outside & rows]
            read_inside = (succ @ rows.T.astype(np.float32)).T > 0         # δ−(L)
            maximal += [np.flatnonzero(b) for b in rows & ~read_inside]
        # L ⊆ L' iff the maximal elements of L are in L' (L is their down-closure)
        top = np.array([x[0] if len(x) == 1 else (-2 if len(x) == 0 else -1) for x in maximal], dtype=np.int64)
        return cls(masks, member, member @ mem_of, member @ cost_of, extra, bnd, top, maximal)


def _pareto(a: np.ndarray, m: np.ndarray, maximize: bool, step: float = 0.0) -> np.ndarray:
    """Indices of the non-dominated (a, m) pairs: better a (min, or max) and smaller m.

    With ``step > 0`` the front is thinned to one entry per interval of width ``step`` in a,
    the one of least m: every dropped entry has a kept one with no more memory and less than
    ``step`` worse overhead, so what is feasible stays feasible and eq. (1) errs by less than
    ``step`` per stage of the sequence.
    """
    key = -a if maximize else a
    # entries outside the box spanned by the best-a and the least-m entries are dominated
    i_a, i_m = int(np.argmin(key)), int(np.argmin(m))
    box = np.flatnonzero((m <= m[i_a]) & (key <= key[i_m]))
    k, mm = key[box], m[box]
    if step > 0:
        lo = float(k.min())
        bucket = np.floor((k - lo) / step).astype(np.int64)
        width = int(bucket.max()) + 1
        if width <= 4 * box.size:  # one entry per bucket without sorting: its least m
            least = np.full(width, np.inf)
            np.minimum.at(least, bucket, mm)
            hit = np.flatnonzero(mm == least[bucket])
            hit = hit[np.argsort(k[hit], kind="stable")]  # among equal m, the best a first
            b, first = np.unique(bucket[hit], return_index=True)
            reps = hit[first]  # ascending bucket, so ascending key
            ms = mm[reps]
            best_before = np.minimum.accumulate(np.concatenate(([np.inf], ms[:-1])))
            return box[reps[ms < best_before]]
    order = np.argsort(mm, kind="stable")
    ks = k[order]
    best_before = np.minimum.accumulate(np.concatenate(([np.inf], ks[:-1])))
    front = order[ks < best_before]  # ascending m, strictly improving a
    if step > 0 and front.size > 1:
        bucket = np.floor(k[front] / step)
        front = front[np.concatenate(([True], bucket[1:] != bucket[:-1]))]
    return box[front]


@dataclass
class _Budget:
    """How fine the Pareto fronts are kept, and when to coarsen them, or stop, to finish in time.

    ``step``: width in eq. (1) units of the intervals fronts are thinned to (0: exact).
    ``deadline``: a ``time.perf_counter()`` instant. When the sweep, at the rate it has run since
    the last change, would pass it, ``step`` grows eightfold (from a thousandth of T(V)); past
    T(V), and past the deadline, each lower set keeps only its entry of least cached memory,
    which decides feasibility exactly and still finishes the sweep with a plan that fits.
    ``grace``: seconds a sweep may run past the deadline (or past its own start, for one begun
    after it) that way; then it stops (``stopped_at``): the remaining lower sets are skipped and
    the last stage goes from the sets reached straight to V, a sequence that is still valid.
    """

    step: float = 0.0
    deadline: float = float("inf")
    total: float = 1.0
    grace: float = 0.0
    first_step: float | None = None
    coarsened_at: tuple[int, int] | None = None   # (lower set, of how many) of the first change
    stopped_at: tuple[int, int] | None = None     # (lower set, of how many) where a sweep last stopped
    bisection: str | None = None                  # how a minimal-budget search was cut short
    stopped: bool = False                         # whether the current (last) sweep stopped early
    _since: tuple[int, float] | None = None       # (lower set, time) of the last change
    _start: float = field(default_factory=time.perf_counter)
    _sweep_end: float = float("inf")

    @classmethod
    def limited(cls, started: float, time_limit: float | None, **kw) -> "_Budget":
        """A control for ``time_limit`` seconds from ``started`` (None: no limit), its grace
        ``GRACE`` of the limit, at least ``MIN_GRACE`` seconds."""
        if time_limit is None:
            return cls(**kw)
        return cls(deadline=started + time_limit, grace=max(GRACE * time_limit, MIN_GRACE), _start=started, **kw)

    def sweep(self) -> None:
        """A sweep begins: it may run until ``grace`` past the deadline, or past now if later."""
        self.stopped = False
        if self.deadline != float("inf"):
            self._sweep_end = max(self.deadline, time.perf_counter()) + self.grace

    def out_of_time(self) -> bool:
        return time.perf_counter() > self.deadline

    def must_stop(self, r: int, sets: int) -> bool:
        """Whether the sweep must skip from lower set r to V (recorded when it must)."""
        if self._sweep_end == float("inf") or time.perf_counter() <= self._sweep_end:
            return False
        self.stopped, self.stopped_at = True, (r, sets)
        return True

    def adjust(self, r: int, sets: int) -> None:
        if self.deadline == float("inf") or self.step == float("inf"):
            return
        now = time.perf_counter()
        if self._since is None or r < self._since[0]:  # a new sweep
            self._since = (r, now)
            if now > self.deadline:  # begun after the deadline: one entry per set at once
                self._coarsen(r, sets, float("inf"))
            return
        if now > self.deadline:
            self._coarsen(r, sets, float("inf"))
            return
        r0, t0 = self._since
        if r - r0 < max(4, sets // 16):  # judge the rate on a sixteenth of the sweep at least
            return
        if now - self._start < 0.25 * (self.deadline - self._start):  # early rates mislead: wait
            return
        # the work per set grows with the set's size, so double what the recent rate predicts
        if 2 * (now - t0) / (r - r0) * (sets - r) > self.deadline - now:
            step = max(8 * self.step, self.total / 1024)
            self._coarsen(r, sets, step if step < self.total else float("inf"))
            self._since = (r, now)

    def _coarsen(self, r: int, sets: int, step: float) -> None:
        if self.coarsened_at is None:
            self.first_step, self.coarsened_at = self.step, (r, sets)
        self.step = step

    def report(self) -> str | None:
        """What the time limit changed, for ``plan.stats["cut_short"]``."""
        notes = []
        if self.bisection:
            notes.append(self.bisection)
        if self.coarsened_at is not None:
            to = "one entry per lower set" if self.step == float("inf") else f"steps of {self.step:.4g}"
            notes.append(f"time limit: Pareto fronts coarsened from steps of {self.first_step:.4g} to {to}, "
                         f"from lower set {self.coarsened_at[0]} of {self.coarsened_at[1]} on")
        if self.stopped_at is not None:
            notes.append(f"time limit: the sweep stopped at lower set {self.stopped_at[0]} of {self.stopped_at[1]}, "
                         f"its last stage going from the sets reached to V")
        return "; ".join(notes) or None


def _run_dp(p: Poset, fam: _Family, budget: float, objective: str, control: _Budget | None = None,
            cap: float = float("inf")):
    """Algorithm 1, pull-style over L' in ascending size.

    objective: "min" / "max" total overhead (eq. 1) within ``budget``; or "feasible", which
    keeps per lower set only the entry of least cached memory m: feasibility depends on m
    alone, so this decides exactly whether any sequence fits, much faster. ``control`` thins
    the Pareto fronts (see ``_Budget``); None keeps them exact. ``cap`` (objective "min"):
    entries whose overhead exceeds it are dropped, since overhead only grows along a sequence.
    Returns the entry arrays and the index of the best entry at V (or None).
    """
    control = control or _Budget()
    mem_of = np.asarray(p.mem_of, dtype=float)
    cost_of = np.asarray(p.cost_of, dtype=float)
    ents = _Entries()
    ents.add(np.array([0]), np.array([0.0]), np.array([0.0]), np.array([-1]))
    start = np.zeros(len(fam.masks), dtype=np.int64)   # entries of set q: [start[q], start[q] + count[q])
    count = np.zeros(len(fam.masks), dtype=np.int64)
    count[0] = 1
    sign = -1.0 if objective == "max" else 1.0  # key = sign * a: smaller is better
    least_m = np.full(len(fam.masks), np.inf)  # per set: least cached memory m of its entries ...
    key_at_least_m = np.zeros(len(fam.masks))  # ... and that entry's key
    best_key = np.zeros(len(fam.masks))        # its best key ...
    m_at_best = np.zeros(len(fam.masks))       # ... and that entry's m
    least_m[0] = 0.0
    last = len(fam.masks) - 1
    control.sweep()
    r = 0
    while r < last:
        r += 1
        control.adjust(r, len(fam.masks))
        if control.step == float("inf"):
            cap = float("inf")  # out of time: decide feasibility exactly rather than sweep again
        if r < last and control.must_stop(r, len(fam.masks)):
            r = last  # out of time, grace included: from the sets reached straight to V
        # predecessors: proper subsets of L' (all processed already: sets are sorted by size)
        # ... and, under a finite budget, only those leaving a stage V' small enough to fit:
        # line 6 needs 2 M(V') + M(δ+...) + M(δ−(δ+...)) <= B since opt[L, t] >= 0
        close = fam.mem[:r] >= fam.mem[r] - (budget - fam.extra[r]) / 2 - 1e-9
        # ... with an entry that can fit the stage at all
        close &= least_m[:r] + 2 * (fam.mem[r] - fam.mem[:r]) + fam.extra[r] <= budget * (1 + 1e-12) + 1e-9
        close &= count[:r] > 0
        rows = _subsets(fam, r, np.flatnonzero(close))
        if rows.size == 0:
            continue
        # per predecessor set L: the terms of lines 6, 9, 10 that do not depend on the entry
        b = fam.boundary[r]
        in_prev = fam.member[np.ix_(rows, b)]                 # ∂(L') ∩ L
        d_cost = cost_of[b].sum() - in_prev @ cost_of[b]     # T(∂(L') \ L)
        d_mem = mem_of[b].sum() - in_prev @ mem_of[b]        # M(∂(L') \ L)
        stage = 2 * (fam.mem[r] - fam.mem[rows]) + fam.extra[r]
        step_t = fam.cost[r] - fam.cost[rows] - d_cost       # T(V' \ ∂(L'))
        if cap != float("inf"):
            low = best_key[rows] + step_t <= cap
            rows, d_mem, stage, step_t = rows[low], d_mem[low], stage[low], step_t[low]
        if objective != "feasible" and control.step != float("inf") and rows.size > 1:  # (else: least m only)
            live = _undominated_sets(sign * step_t, d_mem, stage, budget, best_key[rows], m_at_best[rows],
                                     key_at_least_m[rows], least_m[rows])
            rows, d_mem, stage, step_t = rows[live], d_mem[live], stage[live], step_t[live]
        counts = count[rows]
        idx = np.repeat(start[rows] - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
        owner = np.repeat(np.arange(rows.size), counts)      # entry -> position in rows
        e_a, e_m = ents.a[idx], ents.m[idx]
        stage_mem = e_m + stage[owner]                       # line 6
        new_m = e_m + d_mem[owner]                           # line 10
        new_a = e_a + step_t[owner]                                        # line 9
        fits = stage_mem <= budget * (1 + 1e-12) + 1e-9                  # line 7
        cand = np.flatnonzero(fits if cap == float("inf") else fits & (new_a <= cap))
        if cand.size == 0:
            continue
        if objective == "feasible" or control.step == float("inf"):
            keep = cand[[np.argmin(new_m[cand])]]
        elif budget == float("inf"):
            # with no memory constraint ahead m cannot matter: keep the single best entry
            key = -new_a[cand] if objective == "max" else new_a[cand]
            keep = cand[[np.lexsort((new_m[cand], key))[0]]]
        else:
            keep = cand[_pareto(new_a[cand], new_m[cand], maximize=objective == "max", step=control.step)]
        start[r] = ents.size
        count[r] = keep.size
        k_keep, m_keep = sign * new_a[keep], new_m[keep]
        i, j = int(np.argmin(m_keep)), int(np.argmin(k_keep))
        least_m[r], key_at_least_m[r] = m_keep[i], k_keep[i]
        best_key[r], m_at_best[r] = k_keep[j], m_keep[j]
        ents.add(np.full(keep.size, r), new_a[keep], new_m[keep], idx[keep])
    full_row = last
    if fam.masks[full_row] != p.full or count[full_row] == 0:
        return ents, None
    vals = ents.a[start[full_row]:start[full_row] + count[full_row]]
    best = int(start[full_row] + (np.argmax(vals) if objective == "max" else np.argmin(vals)))
    return ents, best


def _undominated_sets(shift: np.ndarray, d_mem: np.ndarray, stage: np.ndarray, budget: float,
                      best_key: np.ndarray, m_at_best: np.ndarray, key_at_least_m: np.ndarray,
                      least_m: np.ndarray) -> np.ndarray:
    """Mask of the predecessor sets whose entries can reach the new front.

    Every entry of set q lands at or beyond its ideal point (best key + shift, least m + d_mem);
    if a real feasible entry of another set lands strictly better than that ideal point, all of
    q's entries are dominated. The real entries used: each set's best-key and least-m ones.
    """
    ideal_k, ideal_m = best_key + shift, least_m + d_mem
    fits = m_at_best + stage <= budget * (1 + 1e-12) + 1e-9
    ref_k = np.concatenate((best_key[fits] + shift[fits], key_at_least_m + shift))
    ref_m = np.concatenate((m_at_best[fits] + d_mem[fits], least_m + d_mem))
    front = _pareto(ref_k, ref_m, maximize=False)
    fk, fm = ref_k[front][None, :], ref_m[front][None, :]
    ik, im = ideal_k[:, None], ideal_m[:, None]
    dominated = (((fk < ik) & (fm <= im)) | ((fk <= ik) & (fm < im))).any(axis=1)
    return ~dominated


def _subsets(fam: _Family, r: int, rows: np.ndarray) -> np.ndarray:
    """The sets among ``rows`` that are subsets of set r: those whose maximal elements are all in
    it (one lookup for a set with one maximal element; the others at once, flattened)."""
    top = fam.top[rows]
    ok = top == -2
    one = top >= 0
    ok[one] = fam.member[r, top[one]]
    several = np.flatnonzero(top == -1)
    if several.size:
        sets = rows[several]
        first, lens = fam.max_ptr[sets], fam.max_ptr[sets + 1] - fam.max_ptr[sets]
        ends = np.cumsum(lens)
        flat = np.repeat(first - ends + lens, lens) + np.arange(int(ends[-1]))
        ok[several] = np.logical_and.reduceat(fam.member[r, fam.max_idx[flat]], ends - lens)
    return rows[ok]


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


def _coarsening(graph: Graph, coarsen: bool | str) -> Coarsening:
    """The groups lower sets must not split: none (every node its own group), the chains of
    cheap ops (True, "chains"), or layers (an expensive op with its cheap tail, "layers")."""
    if coarsen in (False, None):
        return Coarsening(graph, {v: (v,) for v in graph.order}, {v: v for v in graph.order})
    if coarsen not in (True, "chains", "layers"):
        raise SolverError(f"coarsen must be True, False, 'chains' or 'layers', got {coarsen!r}")
    return Coarsening.of(graph, layers=coarsen == "layers")


def _family(p: Poset, exact: bool, cap: int, graph: Graph, coarsen: bool | str = False) -> _Family:
    """All lower sets (dp-exact), or the pruned family {L_v} (dp-approx); with ``coarsen``, only
    those that split no group (``remat.coarsen``). dp-exact keeps the isolated nodes together
    (``coarsen.free_nodes``: those of size 0, which is exact, and, with ``coarsen``, all of them
    when the lower sets exceed ``cap`` otherwise and they are under a millionth of M(V):
    BatchNorm's 8-byte counter updates), since each would double the lower sets."""
    if exact:
        groups = _coarsening(graph, coarsen)
        try:
            return _Family.build(p, p.lower_sets(cap=cap, units=groups.units(p.pos)))
        except TooManyLowerSets:
            sized = sum(graph[v].mem for v in free_nodes(graph))
            if not coarsen or not 0 < sized <= 1e-6 * graph.total_mem():
                raise  # uncoarsened dp-exact stays exact: it refuses rather than run for many minutes
            # isolated nodes of negligible size together: eq. (2) within 2 M(isolated) of the optimum
            return _Family.build(p, p.lower_sets(cap=cap, units=groups.units(p.pos, sized_free=True)))
    if not coarsen:
        return _Family.build(p, p.pruned_family())
    masks = set(_coarsening(graph, coarsen).lower_family(p.ancestor_sets(), p.pos)) | {p.full}
    return _Family.build(p, sorted(masks, key=lambda m: (m.bit_count(), m)))


def _first_cap(objective: str, budget: float, total: float, memory: float) -> float:
    """Time-centric DP runs first with eq. (1) bounded by a fraction of T(V), which prunes most
    entries, and the bound is widened twofold until a sequence fits. Exact: with the bound at or
    above the optimum, the optimum is found. The first bound grows with how far the budget is
    below M(V) (about the vanilla peak): (1 - B / M(V))^3 of T(V), at least 1/16, which on the
    516-node ResNet152 graph is just above the optimum from 50% to 30% (one sweep instead of up to
    four: bench/bench_dp_budgets.py); only speed depends on it."""
    if objective != "min" or budget == float("inf"):
        return float("inf")
    short = 1.0 - min(budget / memory, 1.0) if memory > 0 else 0.0
    return total * min(max(short ** 3, 1 / 16), 1.0)


def _dp_min_budget(graph: Graph, exact: bool, cap: int = EXACT_CAP, coarsen: bool | str | None = False,
                   time_limit: float | None = None) -> float:
    """The smallest budget with a feasible sequence over the family (seed 000 §5.1); with
    ``time_limit``, the least found within it (always a budget with a feasible sequence)."""
    started = time.perf_counter()
    if time_limit is not None and not time_limit > 0:
        raise SolverError(f"{'dp-exact' if exact else 'dp-approx'}: time_limit must be > 0 seconds, got {time_limit!r}")
    p = Poset.of(graph)
    try:
        fam = _family(p, exact, cap, graph, _default_coarsen(graph, coarsen))
    except TooManyLowerSets as e:
        raise SolverError(f"{'dp-exact' if exact else 'dp-approx'}: {e}") from None
    return _min_peak(p, fam, graph, _Budget.limited(started, time_limit))


def _min_peak(p: Poset, fam: _Family, graph: Graph, control: _Budget | None = None) -> float:
    """Binary search on the budget with the exact feasibility DP; returns the eq. (2) peak of
    the least-memory sequence found, so that budget is itself feasible. Past ``control``'s
    deadline the search stops at the least such peak found so far (``control.bisection`` says so)."""
    control = control or _Budget()
    ents, best = _run_dp(p, fam, float("inf"), "feasible", control)
    hi = _peak_of(p, fam, ents, best)
    lo = 0.0
    integral = all(float(m).is_integer() for m in p.mem_of)
    # to the unit on integral sizes up to a million units, else to a millionth of the peak
    while hi - lo > max(1.0 if integral else 0.0, 1e-6 * hi):
        if control.out_of_time():
            control.bisection = (f"time limit: the minimal-budget search stopped at {hi:.6g}, a feasible "
                                 f"budget (the least lies between {lo:.6g} and it)")
            break
        mid = (lo + hi) // 2 if integral else (lo + hi) / 2
        ents, best = _run_dp(p, fam, mid, "feasible", control)
        if best is None:
            if control.stopped:  # a sweep stopped early proves nothing infeasible
                continue
            lo = mid
        else:
            hi = min(mid, _peak_of(p, fam, ents, best))
    return hi


def _peak_of(p: Poset, fam: _Family, ents: "_Entries", best: int) -> float:
    stages = _trace(p, fam, ents, best)
    return max(t.memory for t in canonical.stage_terms(p, canonical.lowers_of_stages(p, stages)))


def _default_coarsen(graph: Graph, coarsen: bool | str | None) -> bool | str:
    """``coarsen=None``: chains of cheap ops from ``COARSEN_NODES`` nodes on, else none."""
    if coarsen is None:
        return len(graph) >= COARSEN_NODES
    return coarsen


def _dp_solve(graph: Graph, budget: float | None, mode: str, exact: bool, name: str,
              cap: int = EXACT_CAP, resolution: float = RESOLUTION, time_limit: float | None = None,
              coarsen: bool | None = False) -> Plan:
    started = time.perf_counter()
    if resolution < 0 or (time_limit is not None and not time_limit > 0):
        raise SolverError(f"{name}: resolution must be >= 0 and time_limit > 0 seconds, "
                          f"got {resolution!r} and {time_limit!r}")
    p = Poset.of(graph)
    coarsen = _default_coarsen(graph, coarsen)
    try:
        fam = _family(p, exact, cap, graph, coarsen)
    except TooManyLowerSets as e:
        raise SolverError(f"{name}: {e}") from None
    floor_note = None
    if mode == "memory" and budget is None:  # the least budget first, within half the time limit
        floor_control = _Budget.limited(started, None if time_limit is None else time_limit / 2)
        budget_used = _min_peak(p, fam, graph, floor_control)
        floor_note = floor_control.bisection
    else:
        budget_used = float("inf") if budget is None else float(budget)
    total = float(sum(p.cost_of)) or 1.0
    control = _Budget.limited(started, time_limit, step=resolution * total, total=total)
    objective = "max" if mode == "memory" else "min"
    cap = _first_cap(objective, budget_used, total, float(sum(p.mem_of)))
    while True:  # widen the bound on eq. (1) twofold until a sequence fits under it
        ents, best = _run_dp(p, fam, budget_used, objective, control, cap=cap)
        if best is not None or cap == float("inf") or control.stopped:
            break  # (a sweep that stopped at its grace: another would too)
        # out of time: one last sweep with no bound (it keeps one entry per set, fast)
        cap = cap * 2 if cap * 2 < total and not control.out_of_time() else float("inf")
    stats = {"lower_sets": len(fam.masks) - 1, "resolution": resolution, "coarse_family": coarsen}
    cut = "; ".join(x for x in (floor_note, control.report()) if x)
    if cut:
        stats["cut_short"] = cut
    if best is None:
        why = (f"no sequence of lower sets fits budget {budget_used:g} in the canonical strategy's "
               f"eq. (2) over {stats['lower_sets']} lower sets" + (f" ({cut})" if cut else ""))
        return infeasible(name, budget, why, mode=mode, stats=stats)
    stages = _trace(p, fam, ents, best)
    return stage_plan(graph, stages, name, budget, started, mode=mode, planning_budget=budget_used, **stats)


# dp-approx's floor is sought with and without chains coarsened (dp-exact's family is already
# exact; coarsened it is a restriction that takes minutes on large graphs): on captured graphs eq. (2) mis-rates
# stages cut inside a conv -> BN -> ReLU chain (VGG19: -10% uncoarsened, -51% coarsened), while
# on a few graphs the finer family reaches a little lower (bench/results/paper_fidelity)
FLOOR_VARIANTS = ({}, {"coarsen": "chains"})


@register("dp-exact", min_budget=lambda g, **o: _dp_min_budget(g, exact=True, cap=o.get("cap", EXACT_CAP),
                                                               coarsen=o.get("coarsen", False),
                                                               time_limit=o.get("time_limit")))
def solve_exact(graph: Graph, budget: float | None = None, mode: str = "time",
                cap: int = EXACT_CAP, resolution: float = 0.0, time_limit: float | None = None,
                coarsen: bool | str = False, **options) -> Plan:
    """Exact DP over all lower sets (seed 000 §4.2, Algorithm 1); with ``coarsen``, over those
    that split no group (``remat.coarsen``), which fits graphs with too many lower sets."""
    return _dp_solve(graph, budget, mode, exact=True, name="dp-exact", cap=cap, resolution=resolution,
                     time_limit=time_limit, coarsen=coarsen)


@register("dp-approx", min_budget=lambda g, **o: _dp_min_budget(g, exact=False, coarsen=o.get("coarsen"),
                                                                time_limit=o.get("time_limit")),
          variants=FLOOR_VARIANTS)
def solve_approx(graph: Graph, budget: float | None = None, mode: str = "time",
                 resolution: float = RESOLUTION, time_limit: float | None = DEFAULT_TIME_LIMIT,
                 coarsen: bool | None = None, **options) -> Plan:
    """Approximate DP over the pruned lower sets {L_v} (seed 000 §4.3)."""
    return _dp_solve(graph, budget, mode, exact=False, name="dp-approx", resolution=resolution,
                     time_limit=time_limit, coarsen=coarsen)


# ---- the reference: exhaustive search (§4.1) ------------------------------------------------

@register("dp-exhaustive")
def solve_exhaustive(graph: Graph, budget: float | None = None, mode: str = "time",
                     max_nodes: int = 12, **options) -> Plan:
    """Exhaustive search over all lower-set sequences (seed 000 §4.1); small graphs only."""
    started = time.perf_counter()
    if len(graph) > max_nodes:
        raise SolverError(f"dp-exhaustive refuses graphs above {max_nodes} nodes (this one has "
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
        return infeasible("dp-exhaustive", budget, f"no sequence of lower sets fits budget {limit:g} in the "
                          "canonical strategy's eq. (2)", mode=mode)
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
