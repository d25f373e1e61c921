"""Chen et al. 2016 (seed 002) §4.2: drop the results of low-cost operations, alone and with segments.

§4.2: "keep the result of convolution, but drop the result of the batch normalization, activation
function and pooling". In Alg. 2's terms every cheap node gets mirror count m(v) = 1 and every
other node m(v) = 0: the backward recomputes a cheap value from the kept ones right before the
first backward step that reads it, and keeps that copy until its last read.

Which nodes are cheap (``cheap_nodes``):

- by ``Node.op`` where it names a known kind (captured graphs carry aten names such as
  ``relu.default``, ``native_batch_norm.default``, ``_native_batch_norm_legit_functional``,
  ``max_pool2d_with_indices``; the zoo's abstract graphs carry ``batchnorm``, ``relu``,
  ``maxpool``...): normalisations, activations and pooling are cheap; convolutions, matrix
  products and attention kernels are expensive and always kept;
- any other node (no ``op``, or an op of neither list: add, cat, mul, dropout...) is cheap when its
  cost per byte of output is below ``threshold`` times the graph's average, T(V) / M(V). On
  FLOP-costed graphs that average is dominated by convolutions and matmuls (13-256 FLOP/byte
  against 0.25 for an elementwise op); on seed 000's paper costs (conv 10, rest 1) the rest falls
  below it. Nodes of zero size are kept (dropping them saves nothing), and so are the values the
  runtime cannot recompute (``graph.pinned``: random ops whose draws it cannot replay).

``ops=False`` ignores op names and uses the cost/byte rule everywhere.

Alg. 2 mirrors recursively: a dropped node is recomputed from its inputs' mirrors, so a path of
dropped nodes is recomputed whole, and on a residual or dense net the cheap skip path (add, relu,
add, ... or cat, cat, ...) chains from the first block to the last: the first backward step then
recomputes, and holds, the whole path. ``max_chain`` bounds such paths: a node that would end a
path of more than ``max_chain`` dropped nodes is kept. Which rule is best depends on the net (on
seed 002's ResNets the cost/byte rule with chains of at most 6-10 wins; on DenseNet unbounded;
on a captured ResNet-18 chains of 3), so by default (``threshold=None``, ``max_chain="search"``)
the solver lowers and simulates every distinct cheap set of threshold in {0 (op names only), 1}
x max_chain in {unbounded, 3, 6} and keeps the least peak; with a budget, the least recompute
cost among those that fit (the recompute costs differ little: all are cheap ops). Fixing
``threshold`` and ``max_chain`` runs one rule.

Segments (option ``segments``, or one registered name each). Segments are contiguous in the
graph's own topological order (on captured graphs the forward's execution order), so that the
backward runs in autograd's order and the runtime executes the schedule as planned
(``schedule.executable``); Chen's DFS order, which ``chen-sqrt`` and ``chen-greedy`` cut, may
differ from it. Where a segment may end (``cuts``, ``cut_flags``): ``"single"`` after a value that
is the only one of everything before it read later (on a chain every node, on a ResNet each block
output; the analogue of ``chen.py``'s articulation points in that order), ``"minima"`` where the
memory read across the cut (``frontier_mem``) is a local minimum (a stacked LSTM has no
single-value cut), ``"search"`` (default) both, each lowered and simulated. A cut stores every
value read across it.

- ``chen-drop-cheap`` (``"none"``): the kept set is every expensive node; lowered by
  ``schedule.from_kept``.
- ``chen-drop-cheap-sqrt`` (``"sqrt"``): Chen's sqrt(n) segments (``chen.sqrt_splits``: k =
  round(sqrt(n)) segments, cut at the candidate nearest each j n / k), the least-peak of the cut
  rules (with a budget: the least recompute that fits). Across segments only the segment boundaries are kept
  (m = 0 at split points); a segment's backward first recomputes its expensive values, then each
  backward step recomputes the cheap values it reads (m(v) = 2 for a cheap node inside a segment:
  once with the segment, once for the backward), so a segment's backward holds its expensive
  values only.
- ``chen-drop-cheap-greedy`` (``"greedy"``): Alg. 3 with the grid search of appendix A, as
  ``chen-greedy``, but with the running ``size-of-output`` counting only the expensive values (the
  cheap ones are not held through a segment's backward; x adds what a cut stores, whole).
  That estimate is rough (a segment's backward also holds gradients and recomputed cheap values),
  so ``chen-greedy``'s own grid (every value counted) is searched too. The candidates are the
  distinct plans of both grids plus the unsegmented plan; each is lowered and simulated, and the
  choice follows ``chen-greedy``'s rule on simulated figures: without a budget the least peak;
  with one the least recompute cost among those that fit, else the least peak with
  ``feasible=False``. The candidate set does not depend on the budget, so feasibility is
  monotone in it.

``plan.peak`` is the simulated peak of the plan's schedule (DESIGN.md "One truth"); ``mode`` is
ignored. ``stats`` report the rule chosen (``threshold``, ``max_chain``), the number of cheap
nodes and their bytes, every rule's unsegmented peak (``rules``) and the segments. The segmented
variants segment with the cheap set of the least-peak unsegmented rule.

Tested in tests/test_seed_rest.py: kept sets and peaks of hand-sized conv-bn-relu chains, op-name
and cost/byte classification, validity on random DAGs.
"""

from __future__ import annotations

import math
import time
from typing import Iterable, Sequence

from ..errors import SolverError
from ..graph import Graph
from ..lowerset import Poset
from ..plan import Plan, Step
from ..simulate import simulate_training
from . import register
from .chen import GRID_SIZE, segments as cut, sqrt_splits
from .common import kept_plan, within

# Op kinds, matched on the aten name without its overload and leading underscores, lower case.
EXPENSIVE_OPS = frozenset({
    "conv", "convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "cudnn_convolution", "mkldnn_convolution", "linear", "addmm", "mm", "bmm",
    "matmul", "baddbmm", "addbmm", "addmv", "mv", "einsum", "lstm", "gru", "rnn_tanh", "rnn_relu",
})
CHEAP_OPS = frozenset({
    "relu", "relu6", "gelu", "silu", "sigmoid", "tanh", "hardtanh", "hardswish", "hardsigmoid",
    "leaky_relu", "elu", "selu", "celu", "mish", "softplus", "threshold", "clamp", "clamp_min",
    "prelu", "glu", "log_sigmoid", "log_sigmoid_forward",
})
SEGMENTS = ("none", "sqrt", "greedy")
THRESHOLDS = (0.0, 1.0)   # op names only; op names, then cost/byte against the graph's average
CHAINS = (None, 3, 6)     # bound on a path of dropped nodes (None: unbounded)


def op_kind(op: str | None) -> str | None:
    """"cheap", "expensive", or None when the op name does not decide (cost/byte does)."""
    if not op:
        return None
    name = op.split(".")[0].strip("_").lower()
    if name in EXPENSIVE_OPS or name.startswith("conv") or "scaled_dot_product" in name or "attention" in name:
        return "expensive"
    if name in CHEAP_OPS or "norm" in name or "pool" in name:
        return "cheap"
    return None


def pinned_values(graph: Graph) -> frozenset[str]:
    """Values the runtime must never recompute (``graph.pinned``, set by capture for random ops
    whose draws it cannot replay): never dropped here."""
    return frozenset(getattr(graph, "pinned", ()) or ())


def cheap_nodes(graph: Graph, threshold: float = 1.0, ops: bool = True, max_chain: int | None = None) -> set[str]:
    """Nodes whose results §4.2 drops: by op kind, else cost/byte below ``threshold`` x T(V)/M(V);
    with ``max_chain``, a node that would end a path of more than that many dropped nodes is
    kept instead (its recomputation then starts from it)."""
    total_mem = graph.total_mem()
    density = graph.total_cost() / total_mem if total_mem else 0.0
    pinned = pinned_values(graph)
    out: set[str] = set()
    depth: dict[str, int] = {}  # longest path of dropped nodes ending here
    for v in graph.order:
        n = graph[v]
        depth[v] = 0
        if n.mem <= 0 or v in pinned:
            continue
        kind = op_kind(n.op) if ops else None
        if kind is None:
            kind = "cheap" if n.cost < threshold * density * n.mem else "expensive"
        if kind == "cheap":
            d = 1 + max((depth[u] for u in n.inputs), default=0)
            if max_chain is None or d <= max_chain:
                out.add(v)
                depth[v] = d
    return out


# ---- where a segment may end ---------------------------------------------------------------------
CUTS = ("single", "minima")


def last_reads(graph: Graph) -> list[int]:
    """For each position i of ``graph.order``, the position of the last consumer of its value (i
    when nothing reads it)."""
    pos = {v: i for i, v in enumerate(graph.order)}
    return [max((pos[w] for w in graph.succ[v]), default=i) for i, v in enumerate(graph.order)]


def frontier_mem(graph: Graph) -> list[float]:
    """fm[e], e = 0..n: memory of the values before position e that a node at or after e reads:
    what a cut before position e has to keep."""
    order, last = graph.order, last_reads(graph)
    diff = [0.0] * (len(order) + 2)
    for i, v in enumerate(order):
        if last[i] > i:
            diff[i + 1] += graph[v].mem
            diff[last[i] + 1] -= graph[v].mem
    out, run = [], 0.0
    for e in range(len(order) + 1):
        run += diff[e]
        out.append(run)
    return out


def single_cuts(graph: Graph) -> list[bool]:
    """For each position i of ``graph.order``: whether, cutting right after it, the value at i is
    the only one of the prefix that the rest reads (a one-value checkpoint; the last position is
    never a cut)."""
    last = last_reads(graph)
    out, reach = [], -1  # reach: the furthest consumer of any value before i
    for i in range(len(last)):
        out.append(reach <= i and i < len(last) - 1)
        reach = max(reach, last[i])
    return out


def minima_cuts(graph: Graph) -> list[bool]:
    """Cut after position i where the memory crossing the cut is a (non-strict) local minimum:
    the single-value cuts of a chain or a ResNet, and on a stacked RNN, whose every cut keeps
    several states, the cheapest places between steps."""
    fm, n = frontier_mem(graph), len(graph.order)
    return [i < n - 1 and (i == 0 or fm[i + 1] <= fm[i]) and (i + 2 > n - 1 or fm[i + 1] <= fm[i + 2])
            for i in range(n)]


def cut_flags(graph: Graph, cuts: str = "single") -> list[bool]:
    if cuts not in CUTS:
        raise SolverError(f"cuts must be one of {CUTS} or 'search', got {cuts!r}")
    return single_cuts(graph) if cuts == "single" else minima_cuts(graph)


def cut_rules(graph: Graph, cuts: str) -> list[str]:
    """The cut rules ``cuts`` names ("search": both), without one that gives the same cuts."""
    if cuts != "search":
        cut_flags(graph, cuts)  # validates the name
        return [cuts]
    single, minima = single_cuts(graph), minima_cuts(graph)
    return ["single"] if single == minima else ["single", "minima"]


def cut_nodes(graph: Graph, cuts: str = "single") -> set[str]:
    """Split candidates: the values after which a segment may end (``cut_flags``)."""
    return {v for v, ok in zip(graph.order, cut_flags(graph, cuts)) if ok}


# ---- Alg. 2 lowered to steps -------------------------------------------------------------------
class Mirror:
    """Builds a step schedule the way Alg. 2 executes: ``valid`` holds the values whose current
    copy later steps may read; ``ensure`` recomputes a value that is not valid (and, first, its
    inputs that are not). Dropping a value is forgetting it: under the simulator's liveness its
    copy dies at its last read before it is computed again. Shared with ``chen_recursive``."""

    def __init__(self, graph: Graph):
        self.inputs = {v: graph[v].inputs for v in graph.order}
        self.saved = {v: graph[v].saved for v in graph.order}
        self.steps: list[Step] = []
        self.valid: set[str] = set()
        self.pinned = pinned_values(graph)

    def ensure(self, target: str) -> None:
        if target in self.valid:
            return
        stack = [(target, False)]
        while stack:
            v, expanded = stack.pop()
            if v in self.valid:
                continue
            if expanded:
                self.steps.append(("fwd", v))
                self.valid.add(v)
                continue
            stack.append((v, True))
            stack += [(u, False) for u in self.inputs[v] if u not in self.valid]

    def forward(self, ids: Iterable[str]) -> None:
        for v in ids:
            self.ensure(v)

    def backward(self, v: str) -> None:
        """Recompute what v's backward step reads, then back-propagate v."""
        for u in self.saved[v]:
            self.ensure(u)
        self.steps.append(("bwd", v))

    def drop(self, ids: Iterable[str]) -> None:
        """Forget the current copies of ``ids`` (pinned values are never dropped)."""
        self.valid.difference_update(v for v in ids if v not in self.pinned)


def segment_schedule(graph: Graph, stages: Sequence[Sequence[str]], cheap: set[str]) -> list[Step]:
    """Stages V_1..V_k (contiguous in a topological order) with cheap values dropped everywhere:
    the forward keeps the stage boundaries ∂(L_i) and the expensive values of the last stage; a
    stage's backward recomputes its expensive values, drops its cheap ones again, and each
    backward step recomputes the cheap values it reads."""
    p = Poset.of(graph)
    m = Mirror(graph)
    lower, boundary = 0, set()
    for s in stages[:-1]:
        lower |= p.mask(s)
        boundary.update(p.ids(p.boundary(lower)))
    m.forward(v for s in stages for v in s)
    m.valid = boundary | {v for v in stages[-1] if v not in cheap} | (m.pinned & m.valid)
    for i in range(len(stages) - 1, -1, -1):
        stage = stages[i]
        if i < len(stages) - 1:
            m.forward(v for v in stage if v not in cheap)
            m.drop(v for v in stage if v in cheap and v not in boundary)
        for v in reversed(stage):
            m.backward(v)
    return m.steps


# ---- Alg. 3 on the expensive sizes ---------------------------------------------------------------
def _alg3(order: Sequence[str], candidates: set[str], held: dict[str, float], stored: dict[str, float],
          budget: float) -> tuple[list[str], float, float]:
    """Algorithm 3 with ``held`` (what a segment's backward holds of a value) as the running
    size-of-output; a split point adds what its cut stores (``stored``: the split value itself
    at a single-value cut) to x."""
    temp = x = y = 0.0
    splits: list[str] = []
    for v in order:
        temp += held[v]
        if v in candidates and temp > budget:
            x, y = x + stored[v], max(y, temp)
            splits.append(v)
            temp = 0.0
    return splits, x, y


def greedy_stages(graph: Graph, cheap: set[str], cuts: str = "single") -> list[list[list[str]]]:
    """Distinct stage lists of the appendix-A grids (B0 first) for two running sizes, the
    expensive values only and every value (``chen-greedy``'s stages), then the single stage."""
    order, cands = list(graph.order), cut_nodes(graph, cuts)
    fm = frontier_mem(graph)
    stored = {v: fm[i + 1] for i, v in enumerate(order)}
    out: dict[tuple, list[list[str]]] = {}
    for held in ({v: 0.0 if v in cheap else graph[v].mem for v in order}, {v: graph[v].mem for v in order}):
        _, x, y = _alg3(order, cands, held, stored, 0.0)
        b0 = math.sqrt(x * y)
        lo, hi = b0 / math.sqrt(2), b0 * math.sqrt(2)
        for b in [b0] + [lo + (hi - lo) * i / (GRID_SIZE - 1) for i in range(GRID_SIZE)]:
            stages = cut(order, _alg3(order, cands, held, stored, b)[0])
            out.setdefault(tuple(map(tuple, stages)), stages)
    out.setdefault((tuple(order),), [list(order)])
    return list(out.values())


# ---- solvers ---------------------------------------------------------------------------------------
def _segment_plan(graph: Graph, stages: list[list[str]], cheap: set[str], name: str,
                  budget: float | None, started: float, **stats) -> Plan:
    steps = segment_schedule(graph, stages, cheap)
    sim = simulate_training(graph, steps)
    once = _computed_once(steps)
    return Plan(solver=name, budget=budget, feasible=within(sim.peak, budget), schedule=steps,
                kept=[v for v in graph.order if v in once], stages=None, peak=sim.peak,
                recompute_cost=sim.recompute_cost, solve_seconds=time.perf_counter() - started,
                stats={"simulated_peak": sim.peak, "segments": len(stages), **stats})


def _computed_once(steps: list[Step]) -> set[str]:
    seen: dict[str, int] = {}
    for kind, v in steps:
        if kind == "fwd":
            seen[v] = seen.get(v, 0) + 1
    return {v for v, c in seen.items() if c == 1}


def _pick(plans: list[Plan], budget: float | None) -> Plan:
    """chen-greedy's rule on simulated figures: the least recompute that fits, else least peak."""
    fitting = [p for p in plans if within(p.peak, budget)] if budget is not None else []
    if fitting:
        return min(fitting, key=lambda p: (p.recompute_cost, p.peak))
    return min(plans, key=lambda p: (p.peak, p.recompute_cost))


def solve(graph: Graph, budget: float | None = None, segments: str = "none", threshold: float | None = None,
          ops: bool = True, max_chain: int | str | None = "search", name: str | None = None,
          cuts: str = "search") -> Plan:
    """Drop cheap results (seed 002 §4.2), optionally within sqrt(n) or Alg. 3 segments."""
    if segments not in SEGMENTS:
        raise SolverError(f"segments must be one of {SEGMENTS}, got {segments!r}")
    if threshold is not None and not (isinstance(threshold, (int, float)) and threshold >= 0):
        raise SolverError(f"threshold must be a number >= 0 (a multiple of T(V)/M(V)) or None, got {threshold!r}")
    if max_chain != "search" and max_chain is not None and not (isinstance(max_chain, int) and max_chain >= 1):
        raise SolverError(f"max_chain must be an integer >= 1, None (unbounded) or 'search', got {max_chain!r}")
    started = time.perf_counter()
    name = name or {"none": "chen-drop-cheap", "sqrt": "chen-drop-cheap-sqrt",
                    "greedy": "chen-drop-cheap-greedy"}[segments]
    rules: dict[frozenset, tuple] = {}
    for t in THRESHOLDS if threshold is None else (threshold,):
        for c in CHAINS if max_chain == "search" else (max_chain,):
            rules.setdefault(frozenset(cheap_nodes(graph, t, ops, c)), (t, c))
    alone = []
    for cheap, (t, c) in rules.items():
        kept = [v for v in graph.order if v not in cheap]
        alone.append(kept_plan(graph, kept, name, budget, started, threshold=t, max_chain=c,
                               cheap_nodes=len(cheap), cheap_bytes=graph.mem(cheap), segments_rule=segments))
    rule_peaks = [[p.stats["threshold"], p.stats["max_chain"], p.peak] for p in alone]
    if segments == "none":
        best = _pick(alone, budget)
        best.stats["rules"] = rule_peaks
        best.solve_seconds = time.perf_counter() - started
        return best
    first = min(alone, key=lambda p: (p.peak, p.recompute_cost))  # the rule segments run with
    stats = {k: first.stats[k] for k in ("threshold", "max_chain", "cheap_nodes", "cheap_bytes", "segments_rule")}
    cheap = set(graph.order) - set(first.kept)
    order = list(graph.order)
    if segments == "sqrt":
        stage_lists = {tuple(map(tuple, st)): st for st in
                       (cut(order, sqrt_splits(order, cut_nodes(graph, r))) for r in cut_rules(graph, cuts))}
    else:
        stage_lists = {tuple(map(tuple, st)): st for r in cut_rules(graph, cuts) for st in greedy_stages(graph, cheap, r)}
    plans = [_segment_plan(graph, st, cheap, name, budget, started, **stats) for st in stage_lists.values()]
    best = _pick(plans, budget)
    best.stats.update(grid_peaks=[p.peak for p in plans], grid_recompute=[p.recompute_cost for p in plans],
                      rules=rule_peaks)
    best.solve_seconds = time.perf_counter() - started
    return best


@register("chen-drop-cheap")
def solve_none(graph: Graph, budget: float | None = None, *, segments: str = "none", threshold: float | None = None,
               ops: bool = True, max_chain: int | str | None = "search", **options) -> Plan:
    """Chen et al. §4.2: keep conv/matmul results, recompute cheap ones (BN, activations, pooling)."""
    return solve(graph, budget, segments, threshold, ops, max_chain, name="chen-drop-cheap")


@register("chen-drop-cheap-sqrt")
def solve_sqrt(graph: Graph, budget: float | None = None, *, threshold: float | None = None, ops: bool = True,
               max_chain: int | str | None = "search", cuts: str = "search", **options) -> Plan:
    """Chen et al. §4.2 within sqrt(n) segments (§4.3): boundaries kept, cheap results dropped."""
    return solve(graph, budget, "sqrt", threshold, ops, max_chain, cuts=cuts)


@register("chen-drop-cheap-greedy")
def solve_greedy(graph: Graph, budget: float | None = None, *, threshold: float | None = None, ops: bool = True,
                 max_chain: int | str | None = "search", cuts: str = "search", **options) -> Plan:
    """Chen et al. §4.2 within Alg. 3 segments sized by expensive values, grid search over B."""
    return solve(graph, budget, "greedy", threshold, ops, max_chain, cuts=cuts)
