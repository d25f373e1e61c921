"""``milp``: the optimal rematerialization schedule as a mixed-integer program (the yardstick).

Checkmate (Jain et al. 2020, §4) on the joint forward+backward graph, solved with HiGHS through
``scipy.optimize.milp``. The joint graph is the one ``remat.joint`` describes: a backward node
``b:v`` reads ``graph[v].saved`` and the backward nodes of v's consumers. It is read here straight
from ``Graph.saved`` and ``Graph.succ``, and memory is counted as ``remat.simulate`` counts it
(autograd's gradient buffers), not with the joint graph's per-node output sizes:

- the gradient of u is live from the first backward step of a consumer that sends it one (both
  require grad) to u's own backward step; its size is mem(u);
- during bwd v the live gradients are joined by a seed mem(v) (when no consumer sent v one) and a
  new contribution mem(u) for each input u that requires grad; they accumulate in place after.

That is exact without ``grad_alias``. With it the program is conservative: an aliased
contribution (which the simulator does not allocate) is still counted as mem(u), and u's
gradient is counted at the size of the largest buffer that can reach it through aliases (cat
hands on a view of its larger output gradient), so a plan may simulate below what milp assumed.

Formulation. Each backward node is evaluated exactly once, so the stages are grouped by backward
step: group g (g = 1..n) ends with the g-th backward step, and is preceded by ``runs`` forward runs
(``forward_runs`` for the first group, i.e. the initial forward pass). A run computes forward
values in the graph's topological order, each at most once. Variables:

- ``B[g, v]`` binary: v is back-propagated in group g (a permutation; Checkmate fixes the order,
  here it is free unless ``backward_order="fixed"``; only slots between v's earliest and latest
  possible position exist). ``D[g, v] = Σ_{g'<=g} B[g', v]``: v done by the end of group g.
- ``R[t, i]`` binary: forward value i is computed in stage t; ``S[t, i]`` binary: i is in memory
  when stage t starts (Checkmate's R and S).
- ``F[t, i, k]`` in [0, 1]: i is freed right after the fwd step of k (k = i or a consumer of i).
  Only upper bounds restrict it (k computed, no later consumer computed in the stage, not read by
  the stage's backward step, not kept into t+1), so at the optimum it equals the liveness of the
  simulator, and any smaller value only over-counts memory.
- ``Gs[g, u]`` in [0, 1], lower-bounded by D[g-1, w] - D[g-1, u] for each consumer w sending u
  a gradient: u's gradient is live while group g runs.
- ``U[t, k]`` memory during the fwd step of k in stage t, ``<= budget``; the backward step of each
  group has its own row: values left after the last fwd step, the Gs gradients, and what the
  back-propagated node allocates (a constant per node, picked by B).

Constraints: dependencies (R[t,j] <= R[t,i] + S[t,i] for an input i of j; a backward step needs
its saved values), S[t+1,i] <= R[t,i] + S[t,i], a backward step after those of all consumers,
every forward value computed at least once. Valid cuts that only remove useless work: a value
is never kept and recomputed in one stage (S + R <= 1), never touched after its own backward
step (nothing needs it then), and a copy computed or kept in a stage is used there or kept on.
The backward-step memory rows are written over R, S, F directly, for HiGHS's knapsack cuts.
Objective: total forward compute, so recompute cost = objective - T(V). Memory and cost are
scaled to O(1) so HiGHS's absolute tolerances mean the same on bytes and on unit graphs.
``min_peak`` is the same program with the peak as objective: milp's exact ``min_budget``.
Warm start: scipy's HiGHS takes no starting solution, so ``auto``'s plan (the fast solvers)
enters as a cutoff row (objective strictly below its cost); if HiGHS proves that infeasible,
auto's plan is returned as optimal. A caller that already has such a plan passes it as
``start`` (auto's gap check does), and milp then does not call auto.

What "optimal" means. The optimum is over every schedule whose forward steps between two
backward steps form at most ``runs`` runs in topological order (``forward_runs`` before the first
backward step), with any backward order. With ``runs=1`` that class holds every schedule of the
kept-set and canonical-strategy solvers except for the order of the initial forward pass, which
``forward_runs`` widens. Within the class the memory model equals the simulator's, so a plan with
status "optimal" has simulated peak <= budget and the least recompute cost the simulator can
report for that class. Any schedule is in the class for large enough ``runs`` (one step a run).

Limits. Like Checkmate's, the LP relaxation is weak when the budget is tight (it keeps fractions
of values), so proofs take branching: chains of 40 nodes and most 20-node graphs are proven in
seconds, while tight budgets on 40-node DAGs often end at the time limit with an incumbent and a
proven lower bound (``stats["recompute_lower_bound"]``); bench/bench_milp.py measures this.
scipy hands on HiGHS's bound only with a schedule; when HiGHS found none cheaper than the warm
start, the bound is the LP relaxation's optimum (``stats["bound_from"]``), solved after the time
limit in at most ``LP_BOUND_SHARE`` of it more (a second at least).

Tested against an exhaustive search over all schedules (tests/test_milp.py: equal on graphs of
up to 5 nodes, and min_budget equal to the least feasible budget), hand-computed optima on
chains, every other registered solver on random DAGs (never worse when optimal), and the
simulator.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from ..errors import SolverError
from .. import schedule as lowering
from ..graph import Graph
from ..plan import Plan, Step
from ..simulate import simulate_training
from . import register
from .common import within

DEFAULT_TIME_LIMIT = 60.0
LP_BOUND_SHARE = 0.25  # the LP relaxation's time, as a share of the time limit (at least a second)


# ---- a small sparse model builder -------------------------------------------------------------

@dataclass
class _Model:
    """Variables (bounds, integrality, objective) and rows lo <= A x <= hi, in COO form."""

    lb: list[float] = field(default_factory=list)
    ub: list[float] = field(default_factory=list)
    integer: list[int] = field(default_factory=list)
    obj: list[float] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    cols: list[int] = field(default_factory=list)
    vals: list[float] = field(default_factory=list)
    row_lo: list[float] = field(default_factory=list)
    row_hi: list[float] = field(default_factory=list)

    def var(self, lb: float = 0.0, ub: float = 1.0, integer: bool = True, obj: float = 0.0) -> int:
        self.lb.append(lb)
        self.ub.append(ub)
        self.integer.append(int(integer))
        self.obj.append(obj)
        return len(self.lb) - 1

    def row(self, terms: list[tuple[int, float]], lo: float = -np.inf, hi: float = np.inf) -> None:
        """One constraint lo <= Σ coef·x <= hi; a constant term is passed as index -1."""
        const = sum(c for i, c in terms if i < 0)
        r = len(self.row_lo)
        for i, c in terms:
            if i >= 0 and c != 0:
                self.rows.append(r)
                self.cols.append(i)
                self.vals.append(c)
        self.row_lo.append(lo - const)
        self.row_hi.append(hi - const)

    def solve(self, time_limit: float, gap: float, relax: bool = False):
        """HiGHS on the program (``relax``: its LP relaxation, every variable continuous)."""
        n = len(self.lb)
        a = coo_matrix((self.vals, (self.rows, self.cols)), shape=(len(self.row_lo), n)).tocsr()
        return milp(np.asarray(self.obj), integrality=np.zeros(n) if relax else np.asarray(self.integer),
                    bounds=Bounds(np.asarray(self.lb), np.asarray(self.ub)),
                    constraints=LinearConstraint(a, np.asarray(self.row_lo), np.asarray(self.row_hi)),
                    options={"time_limit": time_limit, "mip_rel_gap": gap, "disp": False})


Terms = list[tuple[int, float]]
ONE = (-1, 1.0)  # the constant 1 in a row's terms


@dataclass
class _Stage:
    group: int          # which backward step this stage leads to
    bwd: bool           # whether the stage ends with that backward step


# ---- the formulation -------------------------------------------------------------------------

class _Formulation:
    """Builds the MILP for one graph and budget, and reads a solution back as steps."""

    def __init__(self, graph: Graph, budget: float | None, runs: int, forward_runs: int,
                 fixed_order: bool):
        """``budget=None`` builds the min-peak program instead: the objective is the peak."""
        self.g = graph
        self.order = list(graph.order)
        self.n = n = len(self.order)
        self.pos = {v: i for i, v in enumerate(self.order)}
        self.succ = [[self.pos[w] for w in graph.succ[v]] for v in self.order]
        # readers[u]: backward nodes that read forward value u (b:v reads graph[v].saved)
        self.readers: list[list[int]] = [[] for _ in range(n)]
        for v in self.order:
            for u in graph[v].saved:
                self.readers[self.pos[u]].append(self.pos[v])
        self._gradient_model(graph)
        mems = np.array([graph[v].mem for v in self.order], dtype=float)
        costs = np.array([graph[v].cost for v in self.order], dtype=float)
        # scale to O(1) so that HiGHS's absolute tolerances mean the same on bytes and units
        self.mscale = float(mems.max()) or 1.0
        self.cscale = float(costs.max()) or 1.0
        self.mem = mems / self.mscale
        self.gsize = self.gsize / self.mscale
        self.traffic = self.traffic / self.mscale
        self.cost = costs / self.cscale
        self.cap = None if budget is None else budget / self.mscale
        self.stages = [_Stage(g, r == k - 1) for g in range(n)
                       for k in [forward_runs if g == 0 else runs] for r in range(k)]
        self.window = self._windows(fixed_order)
        self.m = _Model()
        self._variables()
        self._constraints()

    def _gradient_model(self, graph: Graph) -> None:
        """The simulator's gradient buffers, per node (unscaled).

        gsucc[u]: consumers that send u a gradient (both require grad). gsize[u]: the size of
        the buffer u's gradient can be: mem(u), or a consumer's buffer that reaches u through
        ``grad_alias`` (exact without aliasing; an upper bound with it, as cat hands on a view of
        a larger buffer). traffic[v]: what bwd v allocates besides the gradients already live: a
        seed mem(v) when no consumer sent it one, and mem(u) per input u that gets a gradient
        (a new contribution, or the buffer an in-place-impossible accumulation allocates).
        """
        nodes = [graph[v] for v in self.order]
        rg = [n.requires_grad for n in nodes]
        self.gsucc = [[w for w in self.succ[u] if rg[u] and rg[w]] for u in range(self.n)]
        gsize = [n.mem for n in nodes]
        for v in reversed(range(self.n)):  # consumers come later in the order
            for u in nodes[v].grad_alias:
                if rg[v] and rg[self.pos[u]]:
                    gsize[self.pos[u]] = max(gsize[self.pos[u]], gsize[v])
        traffic = []
        for v, n in enumerate(nodes):
            seed = n.mem if rg[v] and not self.gsucc[v] else 0.0
            sent = sum(graph[u].mem for u in n.inputs if graph[u].requires_grad) if rg[v] else 0.0
            traffic.append(seed + sent)
        self.gsize, self.traffic = np.array(gsize, dtype=float), np.array(traffic, dtype=float)

    def _windows(self, fixed: bool) -> list[range]:
        """Backward slots each node can take: after all its descendants, before its ancestors."""
        nxg = self.g.to_networkx()
        out = []
        for i, v in enumerate(self.order):
            if fixed:
                out.append(range(self.n - 1 - i, self.n - i))
            else:
                lo = len(nx.descendants(nxg, v))
                out.append(range(lo, self.n - len(nx.ancestors(nxg, v))))
        return out

    # -- variables
    def _variables(self) -> None:
        m, n, T = self.m, self.n, len(self.stages)
        self.B = {(g, i): m.var() for i in range(n) for g in self.window[i]}
        self.R = [[m.var(obj=self.cost[i], ub=self._alive(t, i)) for i in range(n)] for t in range(T)]
        self.S = [[m.var(ub=0.0 if t == 0 else self._alive(t, i)) for i in range(n)] for t in range(T)]
        self.F = [{(i, k): m.var(integer=False) for i in range(n) for k in [i, *self.succ[i]]}
                  for _ in range(T)]
        self.peak = m.var(lb=0.0, ub=np.inf, integer=False, obj=1.0) if self.cap is None else None
        if self.peak is not None:  # min-peak program: compute cost does not count
            for t in range(T):
                for i in range(n):
                    m.obj[self.R[t][i]] = 0.0
        self.U = [[m.var(lb=0.0, ub=np.inf, integer=False) for _ in range(n)] for _ in range(T)]
        self.Gs = [[m.var(integer=False) for _ in range(n)] for _ in range(n)]

    def _alive(self, t: int, i: int) -> float:
        """Upper bound of R/S: 0 once i's backward step surely happened in an earlier group."""
        return 0.0 if self.stages[t].group > self.window[i][-1] else 1.0

    def done(self, g: int, i: int) -> Terms:
        """D[g, i]: i back-propagated in group g or before (g = -1: nothing done yet)."""
        w = self.window[i]
        if g < w.start:
            return []
        if g >= w[-1]:
            return [ONE]
        return [(self.B[h, i], 1.0) for h in range(w.start, g + 1)]

    def reads(self, g: int, u: int) -> Terms:
        """1 if the backward step of group g reads forward value u."""
        return [(self.B[g, v], 1.0) for v in self.readers[u] if (g, v) in self.B]

    # -- constraints
    def _constraints(self) -> None:
        self._backward_order()
        self._gradients()
        for t in range(len(self.stages)):
            self._stage(t)
        for i in range(self.n):  # every forward value is computed at least once
            self.m.row([(self.R[t][i], 1.0) for t in range(len(self.stages))], lo=1.0)

    def _backward_order(self) -> None:
        m, n = self.m, self.n
        for g in range(n):
            m.row([(self.B[g, i], 1.0) for i in range(n) if (g, i) in self.B], lo=1.0, hi=1.0)
        for i in range(n):
            m.row([(self.B[g, i], 1.0) for g in self.window[i]], lo=1.0, hi=1.0)
        for u in range(n):  # b:u after b:w for every consumer w: D[g, u] <= D[g-1, w]
            for w in self.succ[u]:
                for g in range(self.window[u].start, self.window[w][-1] + 1):
                    m.row(self.done(g, u) + _neg(self.done(g - 1, w)), hi=0.0)

    def _gradients(self) -> None:
        """Gs[g,u]: the gradient of u is live between backward steps g-1 and g, i.e. a consumer
        that sends u a gradient is done and u is not."""
        m, n = self.m, self.n
        for g in range(n):
            for u in range(n):
                if g == 0:
                    m.ub[self.Gs[g][u]] = 0.0
                    continue
                for w in self.gsucc[u]:
                    m.row([(self.Gs[g][u], 1.0)] + _neg(self.done(g - 1, w)) + self.done(g - 1, u), lo=0.0)

    def _stage(self, t: int) -> None:
        m, n, st = self.m, self.n, self.stages[t]
        R, S, F, U = self.R[t], self.S[t], self.F[t], self.U[t]
        nxt = self.S[t + 1] if t + 1 < len(self.stages) else None
        for i in range(n):
            m.row([(S[i], 1.0), (R[i], 1.0)], hi=1.0)
            for j in self.succ[i]:
                m.row([(R[j], 1.0), (R[i], -1.0), (S[i], -1.0)], hi=0.0)
            if nxt is not None:
                m.row([(nxt[i], 1.0), (R[i], -1.0), (S[i], -1.0)], hi=0.0)
            if st.group > 0:  # nothing needs i once its backward step is done
                d = self.done(st.group - 1, i)
                m.row([(R[i], 1.0)] + d, hi=1.0)
                m.row([(S[i], 1.0)] + d, hi=1.0)
            if st.bwd:
                m.row(self.reads(st.group, i) + [(R[i], -1.0), (S[i], -1.0)], hi=0.0)
            self._useful(t, i)
        for i in range(n):  # freed at most once, and only if present and not kept or read later
            freed = [(F[i, k], 1.0) for k in [i, *self.succ[i]]]
            present = [(R[i], -1.0), (S[i], -1.0)]
            if nxt is not None:
                m.row(freed + [(nxt[i], 1.0)] + present, hi=0.0)
            m.row(freed + (self.reads(st.group, i) if st.bwd else []) + present, hi=0.0)
        for (i, k), f in F.items():
            m.row([(f, 1.0), (R[k], -1.0)], hi=0.0)
            for j in self.succ[i]:
                if j > k:
                    m.row([(f, 1.0), (R[j], 1.0)], hi=1.0)
            if nxt is not None:
                m.row([(f, 1.0), (nxt[i], 1.0)], hi=1.0)
            if st.bwd:
                m.row([(f, 1.0)] + self.reads(st.group, i), hi=1.0)
        self._memory(t)

    def _useful(self, t: int, i: int) -> None:
        """Cuts: a value computed or kept in stage t is used there or kept on. Dropping a copy
        that is neither only lowers memory, and it is never the only copy of a value that
        something reads, since that reader needs a copy present in its own stage."""
        if not self.succ[i] and not self.readers[i]:
            return
        st, R, S = self.stages[t], self.R[t], self.S[t]
        uses = [(R[j], -1.0) for j in self.succ[i]] + (_neg(self.reads(st.group, i)) if st.bwd else [])
        if t + 1 < len(self.stages):
            uses.append((self.S[t + 1][i], -1.0))
        self.m.row([(R[i], 1.0)] + uses, hi=0.0)
        self.m.row([(S[i], 1.0)] + uses, hi=0.0)

    def _memory(self, t: int) -> None:
        """U[t,k] = U[t,k-1] - freed after k-1 + mem(k)·R[t,k]; U[t,-1] = kept values + gradients."""
        m, n, st = self.m, self.n, self.stages[t]
        R, S, U = self.R[t], self.S[t], self.U[t]
        frees_after: list[Terms] = [[] for _ in range(n)]
        for (i, k), f in self.F[t].items():
            frees_after[k].append((f, -self.mem[i]))
        between = [(self.Gs[st.group][u], self.gsize[u]) for u in range(n)]
        start = [(S[i], self.mem[i]) for i in range(n)] + between
        m.row([(U[0], 1.0), (R[0], -self.mem[0])] + _neg(start), lo=0.0, hi=0.0)
        for k in range(1, n):
            m.row([(U[k], 1.0), (U[k - 1], -1.0), (R[k], -self.mem[k])] + _neg(frees_after[k - 1]),
                  lo=0.0, hi=0.0)
        for k in range(n):
            if self.peak is None:
                m.ub[U[k]] = self.cap
            elif m.ub[R[k]] > 0:  # where nothing is computed, memory only went down since
                m.row([(U[k], 1.0), (self.peak, -1.0)], hi=0.0)
        if st.bwd:  # during the backward step: values left after the last fwd, and its gradients
            # written out over R, S, F rather than through U, so that HiGHS's knapsack cuts see it
            during = between + [(self.B[st.group, v], self.traffic[v]) for v in range(n)
                                if (st.group, v) in self.B]
            present = [(x[i], self.mem[i]) for x in (R, S) for i in range(n)]
            freed = [term for terms in frees_after for term in terms]
            self._at_most_budget(present + freed + during)

    def cutoff(self, total_cost: float) -> None:
        """Only schedules strictly cheaper than one already known (total forward cost)."""
        bound = total_cost / self.cscale
        terms = [(r, self.cost[i]) for row in self.R for i, r in enumerate(row)]
        self.m.row(terms, hi=bound - 1e-7 * max(bound, 1.0))

    def _at_most_budget(self, terms: Terms) -> None:
        if self.peak is None:
            self.m.row(terms, hi=self.cap)
        else:
            self.m.row(terms + [(self.peak, -1.0)], hi=0.0)

    # -- reading a solution back
    def steps(self, x: np.ndarray) -> list[Step]:
        on = lambda idx: x[idx] > 0.5  # noqa: E731
        bwd_of = {g: i for (g, i), b in self.B.items() if on(b)}
        out: list[Step] = []
        for t, st in enumerate(self.stages):
            present = []
            for i in range(self.n):
                if on(self.R[t][i]):
                    out.append(("fwd", self.order[i]))
                if on(self.R[t][i]) or on(self.S[t][i]):
                    present.append(i)
            if st.bwd:
                out.append(("bwd", self.order[bwd_of[st.group]]))
                kept = self.S[t + 1] if t + 1 < len(self.stages) else None
                # explicit frees for the runtime; the simulator's liveness frees no later
                out += [("free", self.order[i]) for i in present if kept is None or not on(kept[i])]
        return out

    def size(self) -> dict[str, int]:
        return {"variables": len(self.m.lb), "integer_variables": int(sum(self.m.integer)),
                "constraints": len(self.m.row_lo), "nonzeros": len(self.m.vals),
                "stages": len(self.stages)}


def _neg(terms: Terms) -> Terms:
    return [(i, -c) for i, c in terms]


# ---- the solver ------------------------------------------------------------------------------

_STATUS = {0: "optimal", 1: "time_limit", 2: "infeasible"}


def _run(form: _Formulation, time_limit: float, gap: float, options: dict) -> tuple[str, object, dict]:
    """Solve a built program; HiGHS's status in our words, the result, and what it reported."""
    res = form.m.solve(time_limit, gap)
    bound = getattr(res, "mip_dual_bound", None)
    stats = {**form.size(), **options, "highs_status": res.status, "highs_message": res.message,
             "mip_gap": getattr(res, "mip_gap", None), "mip_node_count": getattr(res, "mip_node_count", None),
             "highs_dual_bound": bound}
    return _STATUS.get(res.status, "error"), res, stats


@dataclass
class _Best:
    """The cheapest schedule known so far, and where it came from."""

    steps: list[Step]
    cost: float
    source: str


@register("milp", min_budget=lambda g, **o: min_peak(g, **o).peak)
def solve(graph: Graph, budget: float | None = None, mode: str = "time",
          time_limit: float | None = None, runs: int = 1, forward_runs: int = 1,
          backward_order: str = "free", warm_start: bool = True, mip_rel_gap: float = 1e-6,
          start: Plan | None = None, **options) -> Plan:
    """Optimal schedule by mixed-integer programming (Checkmate, HiGHS); small graphs.

    ``time_limit`` (seconds, the whole call; default ``DEFAULT_TIME_LIMIT``, read at call time)
    bounds HiGHS; ``plan.status`` is "optimal",
    "time_limit" (an incumbent not proven optimal, or none: then feasible=False) or
    "infeasible". ``runs`` and ``forward_runs`` widen the class of schedules searched (module
    docstring); ``backward_order="fixed"`` back-propagates in reverse topological order
    (Checkmate's choice, much faster to prove, often costlier). ``warm_start`` first takes
    ``auto``'s plan (the fast solvers), then, for the free order, the fixed-order optimum (within
    a third of the time), and asks HiGHS only for schedules strictly cheaper than the best of
    them (scipy's HiGHS takes no starting solution); when none exists, that plan is returned,
    "optimal" if HiGHS proved it. ``start``: a plan already known (its schedule), taken instead of
    calling ``auto`` (auto's own gap check passes its plan this way). ``mode`` does not change
    the program: milp minimises recompute cost; ``stats["recompute_lower_bound"]`` (also
    ``stats["bound"]``) is the bound HiGHS proved for the class (or the LP relaxation's, as
    ``stats["bound_from"]`` says), ``stats["mip_gap"]`` its relative gap, and
    ``stats["cut_short"]`` says when the time limit stopped it with an incumbent.
    """
    started = time.perf_counter()
    time_limit = DEFAULT_TIME_LIMIT if time_limit is None else time_limit
    _check_options(time_limit, runs, forward_runs, backward_order)
    vanilla = lowering.vanilla(graph)
    if within(simulate_training(graph, vanilla).peak, budget):  # nothing to recompute: least cost
        return _plan(graph, vanilla, budget, started, mode, "optimal",
                     "the vanilla step fits; nothing to recompute", {"shortcut": "vanilla"})
    shape = {"runs": runs, "forward_runs": forward_runs}
    best, phases = None, []
    if warm_start:
        best = _incumbent(graph, budget, time_limit / 4, start)
        phases.append({"program": "auto" if start is None else "start", "cost": best and best.cost,
                       "source": best and best.source})
        if backward_order == "free":
            left = time_limit - (time.perf_counter() - started)
            _, best, info = _program(graph, budget, True, shape, best, left / 3, mip_rel_gap)
            phases.append(info)
    left = time_limit - (time.perf_counter() - started)
    status, best, info = _program(graph, budget, backward_order == "fixed", shape, best, left, mip_rel_gap,
                                  lp_bound=True)
    phases.append(info)
    stats = {**info.pop("size"), **shape, "backward_order": backward_order, "phases": phases,
             "source": best and best.source}
    for key in ("recompute_lower_bound", "bound_from", "mip_gap", "mip_node_count", "highs_message"):
        if key in info:
            stats[key] = info[key]
    if "recompute_lower_bound" in stats:
        stats["bound"] = stats["recompute_lower_bound"]
    if status == "time_limit":
        stats["cut_short"] = (f"HiGHS stopped at the time limit ({time_limit:g} s): the plan is its "
                              f"incumbent, not proven optimal (gap {stats.get('mip_gap')})")
    if best is None:
        msg = (f"no schedule of milp's class fits budget {budget:g} (proved by HiGHS); "
               f"remat.min_budget(graph, solver='milp') gives the least that does"
               if status == "infeasible" else f"HiGHS found no schedule within {time_limit:g} s")
        return Plan(solver="milp", budget=budget, feasible=False, mode=mode, status=status,
                    message=msg, solve_seconds=time.perf_counter() - started, stats=stats)
    if status == "infeasible":  # with a cutoff: nothing in the class is cheaper than best
        status = "optimal"
        stats["recompute_lower_bound"] = stats["bound"] = best.cost
        stats["mip_gap"] = 0.0
    return _plan(graph, best.steps, budget, started, mode, status, "", stats)


def _program(graph: Graph, budget: float, fixed: bool, shape: dict, best: _Best | None,
             time_limit: float, gap: float, lp_bound: bool = False) -> tuple[str, _Best | None, dict]:
    """One MILP over the class (``fixed`` order or free), asking only for schedules cheaper
    than ``best``; returns HiGHS's status, the better of its answer and ``best``, and a record.

    scipy reports no bound when HiGHS stops at the time limit before finding a schedule (often,
    with the cutoff): then, with ``lp_bound``, the LP relaxation's optimum is the bound (within
    ``LP_BOUND_SHARE`` of the time limit more), and an infeasible relaxation proves that nothing
    in the class is cheaper than ``best``."""
    t0 = time.perf_counter()
    form = _Formulation(graph, float(budget), shape["runs"], shape["forward_runs"], fixed)
    if best is not None:
        form.cutoff(graph.total_cost() + best.cost)
    status, res, stats = _run(form, max(time_limit - (time.perf_counter() - t0), 0.01), gap, {})
    info = {"program": "fixed order" if fixed else "free order", "status": status,
            "seconds": time.perf_counter() - t0, "size": form.size(),
            "mip_gap": stats["mip_gap"], "mip_node_count": stats["mip_node_count"],
            "highs_message": stats["highs_message"]}
    if stats["highs_dual_bound"] is not None:
        info["recompute_lower_bound"] = max(stats["highs_dual_bound"] * form.cscale - graph.total_cost(), 0.0)
        info["bound_from"] = "HiGHS"
    elif lp_bound and status == "time_limit" and res.x is None:
        lp = form.m.solve(max(LP_BOUND_SHARE * time_limit, 1.0), gap, relax=True)
        if lp.status == 2:  # not even fractionally: proved like an infeasible MILP
            status = info["status"] = "infeasible"
            info["highs_message"] = f"{info['highs_message']}; its LP relaxation is infeasible"
        elif lp.status == 0:
            info["recompute_lower_bound"] = max(lp.fun * form.cscale - graph.total_cost(), 0.0)
            info["bound_from"] = "LP relaxation"
        info["seconds"] = time.perf_counter() - t0
    if res.x is not None:
        steps = form.steps(res.x)
        best = _Best(steps, simulate_training(graph, steps).recompute_cost, info["program"])
    info["cost"] = best and best.cost
    return status, best, info


def _incumbent(graph: Graph, budget: float, time_limit: float, start: Plan | None = None) -> _Best | None:
    """The best plan of the fast solvers (``auto``, within ``time_limit`` seconds), or ``start``
    when given, if its simulated peak fits."""
    from . import get  # the registry is complete by the time a solver runs

    if start is not None:
        plan = start
    else:
        try:  # milp_gap=False: auto's gap check would call milp again
            plan = get("auto").fn(graph, budget, mode="time", problem="training", time_limit=time_limit,
                                  milp_gap=False)
        except ValueError:  # auto not installed in this build
            return None
    if not plan.feasible or not plan.schedule:
        return None
    if {v for kind, v in plan.schedule if kind == "fwd"} != set(graph.order):
        return None  # skips a forward value nobody reads: outside milp's class (a real step computes it)
    sim = simulate_training(graph, plan.schedule)
    if not within(sim.peak, budget):
        return None
    chosen = plan.stats.get("chosen", plan.solver)
    source = f"auto:{chosen}" if start is None else f"start:{chosen}"
    return _Best(list(plan.schedule), sim.recompute_cost, source)


def min_peak(graph: Graph, time_limit: float = DEFAULT_TIME_LIMIT, runs: int = 1, forward_runs: int = 1,
             backward_order: str = "free", **options) -> Plan:
    """The schedule of least simulated peak (recompute cost ignored): milp's ``min_budget``.

    Same program with the budget as the objective. ``plan.peak`` is exact when
    ``plan.status == "optimal"``; after a time limit it is the best peak found (feasible, maybe
    not least). With ``grad_alias`` it is milp's own (conservative) peak, so that ``solve`` meets
    it; ``stats["simulated_peak"]`` may be lower.
    """
    started = time.perf_counter()
    _check_options(time_limit, runs, forward_runs, backward_order)
    form = _Formulation(graph, None, runs, forward_runs, backward_order == "fixed")
    status, res, stats = _run(form, time_limit, 1e-9, {"runs": runs, "forward_runs": forward_runs,
                                                       "backward_order": backward_order})
    if res.x is None:
        raise SolverError(f"milp found no schedule of {graph.name!r} within {time_limit:g} s: "
                          f"raise time_limit ({res.message})")
    steps = form.steps(res.x)
    peak = simulate_training(graph, steps).peak
    if any(graph[v].grad_alias for v in graph.order):  # the program may count more than simulate
        stats["model_peak"] = float(res.fun) * form.mscale
        peak = max(peak, stats["model_peak"] * (1 + 1e-7))  # a budget milp itself then meets
    plan = _plan(graph, steps, peak, started, "memory", status, "least peak", stats)
    plan.peak = peak
    return plan


def _plan(graph: Graph, steps: list[Step], budget: float | None, started: float, mode: str,
          status: str, message: str, stats: dict) -> Plan:
    sim = simulate_training(graph, steps)
    fits = within(sim.peak, budget)
    if not fits:  # only HiGHS's tolerances could get here: say so rather than hide it
        status, message = "error", f"the MILP schedule simulates to {sim.peak:g} > budget {budget:g}"
    kept = [v for v in graph.order if sum(1 for s in steps if s == ("fwd", v)) == 1]
    return Plan(solver="milp", budget=budget, feasible=fits, schedule=steps, kept=kept,
                peak=sim.peak, recompute_cost=sim.recompute_cost,
                solve_seconds=time.perf_counter() - started, mode=mode, status=status,
                message=message, stats={"simulated_peak": sim.peak, **stats})


def _check_options(time_limit: float, runs: int, forward_runs: int, backward_order: str) -> None:
    if not time_limit > 0:
        raise SolverError(f"milp: time_limit must be > 0 seconds, got {time_limit!r}")
    for name, k in (("runs", runs), ("forward_runs", forward_runs)):
        if not isinstance(k, int) or k < 1:
            raise SolverError(f"milp: {name} must be an integer >= 1, got {k!r}")
    if backward_order not in ("free", "fixed"):
        raise SolverError(f"milp: backward_order must be 'free' or 'fixed', got {backward_order!r}")
