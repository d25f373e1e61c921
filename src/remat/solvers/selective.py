"""``selective``: keep the expensive values, recompute the cheap ones from them.

Selective activation checkpointing (torch.compile's knapsack partitioner, JAX's
``save_only_these_names``) as a solver: a kept set K, and every forward value the backward
reads that is not in K is recomputed in the backward from K and the graph's inputs
(``schedule.from_kept``). The plan is judged as the runtime runs it: ``executed(graph, kept)``
is ``runtime.predict``'s composition (from_kept, then ``schedule.executable``, then the
simulator) without torch, so ``plan.peak`` and ``plan.feasible`` are the simulated peak of the
schedule that will run (DESIGN.md, "One truth").

Why a greedy: the recompute cost of a kept set is additive. Starting from "keep what the
backward reads" (the vanilla step), the values that are *held* (read by a backward step, or by
a recomputation) are what costs memory between forward and backward. Dropping a held value u
costs exactly cost(u) more recomputation (its inputs are kept or already recomputed) and saves
mem(u), less the inputs of u that become held for it; or, as one move, u together with the
unheld ancestors it needs, back to held values. Moves are taken in order of bytes saved per unit
of recompute cost (a knapsack by ratio, re-evaluated lazily as values become held): pointwise
ops (one flop per element) go long before matmul and attention outputs. The order is fixed
whatever the budget; the plan at a budget is the shortest prefix of moves whose executed
schedule simulates within it, found with a handful of simulations (gallop, then bisection),
then the costliest moves of that prefix are undone while the peak still fits. So a larger
budget never gets a costlier plan than a smaller one along the order, and low budgets are
reached by dropping matmul outputs too. An order that starts from another plan's kept set (``start``)
then keeps again, costliest per byte first, values that plan recomputes while the peak fits.
``mode="memory"`` orders the moves by bytes freed alone (the memory-centric order): its prefixes
reach lower peaks sooner, at more recomputation per byte.

``graph.pinned`` (values that must never be recomputed: random ops) are always kept.

Chains (``chain_limit``). The executed schedule recomputes each value once, at the first backward
step that needs it, and it lives on to its last one. A recomputation that reads a value the backward
also reads, itself recomputed, remakes that value early, and with it whatever that one reads: along a
residual stream dropped whole, the first block's backward remakes every block's output at once, and
the peak does not fall. With a limit, no move may make a recomputation remake more than that many
backward-read values in a row. Measured on HF ResNet-152 (fp32, fused code): without a limit the
orders from the vanilla step bottomed out at 0.59 of its peak; with 4 they reach 0.30, and half the
peak recomputing a third of what per-block checkpointing does. Neither order wins everywhere (a
captured CPU-size Llama's floor: 0.279 without, 0.307 with 4), so ``selective-chains``
(``CHAIN_LIMITS``, the best of several limits) is a solver of its own, and ``auto`` runs both.

Fused code (inductor). A value recomputed inside a fused kernel takes no buffer of its own, so
with ``fusible`` (the values a fused kernel can make: no matmul, attention or other extern
kernel) a move drops u together with the fusible values it is recomputed from, back to held
values or to non-fusible ones, which become held: dropping a log-softmax output then holds the
bf16 logits it is made from, not the fp32 intermediates between. And with ``judge`` (a kept
set's executed schedule -> the peak of the code that will run, e.g. inductor's fused walk) the
prefix search and the undo pass judge plans by that peak instead of the op-by-op simulation.

Tested in tests/test_selective.py: the matmul-keeping plan on a hand-sized chain, feasible =
simulated peak within budget on random DAGs, monotone in the budget.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Iterable

from .. import schedule
from ..graph import Graph
from ..plan import Plan, Step, infeasible
from ..simulate import ScheduleError, Simulation, simulate_training
from . import register
from .common import within

CLOSURE_CAP = 32  # nodes a single move may recompute together (u and its unheld ancestors)
CHAIN_LIMIT = 4  # the fused search's limit: ResNet-152's floor 0.48 -> 0.28 (docstring)
# ``selective-chains`` tries each (in this order, the fused search's first) and keeps the best plan: the best
# limit grows with the stream's length, as Chen's sqrt(n) segments do (a 9-block residual stream's floor is
# least with 2-4, a 40-block one's with 8)
CHAIN_LIMITS = (4, 8, 2, 16)
JUDGED_POINTS = 8  # the grid of prefixes probed when no gallop brackets the budget, with a judge


def pinned(graph: Graph) -> frozenset[str]:
    """Values the runtime never recomputes (``graph.pinned``, set by capture for random ops)."""
    return frozenset(getattr(graph, "pinned", ()) or ())


def executed(graph: Graph, kept: Iterable[str]) -> tuple[list[Step], Simulation]:
    """The schedule the runtime executes for a kept set, and its simulation (``runtime.predict``
    for a kept set, without importing torch).

    Remembered per graph (``_Executed``, dropped when a node is added): the searches of one planning
    run judge the same kept sets again and again (auto's candidates share orders' prefixes, and the
    partitioner plans one graph at several budgets): on a captured HF Jamba (607 nodes, bf16) 1,143
    of 1,596 calls over four auto calls were repeats, and the four took 7.6 s instead of 12.0."""
    full = frozenset(kept) | pinned(graph)
    memo = graph.__dict__.get("_remat_executed")
    if memo is None:
        memo = graph.__dict__["_remat_executed"] = _Executed()
    hit = memo.get(full)
    if hit is None:
        steps = schedule.executable(graph, schedule.from_kept(graph, set(full)))
        assert steps is not None, "from_kept's backward order is autograd's"
        hit = memo.put(full, steps, simulate_training(graph, steps))
    return list(hit[0]), hit[1]  # (a list of its own: a caller may extend its schedule)


EXECUTED_STEPS = 500_000  # schedule steps ``executed`` remembers per graph (about 100 bytes each, with the timeline)


class _Executed:
    """Least recently used (kept set -> schedule, simulation), at most ``EXECUTED_STEPS`` steps in all."""

    def __init__(self) -> None:
        self.entries: OrderedDict[frozenset, tuple[list[Step], Simulation]] = OrderedDict()
        self.steps = 0

    def get(self, key: frozenset) -> tuple[list[Step], Simulation] | None:
        hit = self.entries.get(key)
        if hit is not None:
            self.entries.move_to_end(key)
        return hit

    def put(self, key: frozenset, steps: list[Step], sim: Simulation) -> tuple[list[Step], Simulation]:
        self.entries[key] = (steps, sim)
        self.steps += len(steps)
        while self.steps > EXECUTED_STEPS and len(self.entries) > 1:
            self.steps -= len(self.entries.popitem(last=False)[1][0])
        return steps, sim


def backward_reads(graph: Graph) -> set[str]:
    """Values some backward step reads: what the vanilla step holds between forward and backward."""
    return {u for v in graph.order for u in graph[v].saved}


# ---- the order of moves ---------------------------------------------------------------------

@dataclass
class Move:
    """Drop ``nodes`` (recompute them in the backward); ``held`` become held for them."""

    nodes: tuple[str, ...]
    held: tuple[str, ...]
    cost: float
    gain: float


@dataclass
class _State:
    graph: Graph
    keep: set[str]                 # values available in the backward without recomputation
    held: set[str]                 # kept values something in the backward reads
    fixed: frozenset[str]          # never dropped (pinned)
    fusible: frozenset[str] = frozenset()  # recomputed inside fused kernels: no buffer of their own
    moves: list[Move] = field(default_factory=list)
    saved: frozenset[str] = frozenset()  # values backward steps read
    chain_limit: int | None = None  # most saved values one recomputation may pull forward in a row (None: any)
    chain: dict[str, int] = field(default_factory=dict)  # dropped value -> that count for it

    def best_move(self, u: str) -> Move | None:
        """The better (bytes per cost) of dropping u alone and dropping it with its unheld ancestors,
        among those within the chain limit."""
        m = self._best_move(u)
        if self.chain_limit is None or m is None or self._chains(m) is not None:
            return m
        if self.fusible:
            return None
        single = self._alone(u)
        return single if single.gain > 0 and self._chains(single) is not None else None

    def _chains(self, move: Move) -> dict[str, int] | None:
        """The chain counts after ``move`` of its values and of the dropped values that read them,
        or None when one exceeds the limit. A recomputation that reads a recomputed value the
        backward also reads makes that value early, at the first use of what reads it, and it lives
        on to its own backward step: along a residual stream dropped whole, the backward's first
        step would remake every block's output at once."""
        g, nodes, out = self.graph, set(move.nodes), {}

        def count(v: str) -> int:
            if v not in nodes:
                return self.chain.get(v, 0)
            if v not in out:
                out[v] = 0
                out[v] = max((count(x) + (x in self.saved) for x in g[v].inputs
                              if x in nodes or x not in self.keep), default=0)
            return out[v]

        frontier = list(move.nodes)
        if max(count(v) for v in frontier) > self.chain_limit:
            return None
        while frontier:
            v = frontier.pop()
            for w in g.succ[v]:
                if w in nodes or w in self.keep:
                    continue
                was = out.get(w, self.chain.get(w, 0))
                now = out[v] + (v in self.saved)
                if now > was:
                    if now > self.chain_limit:
                        return None
                    out[w] = now
                    frontier.append(w)
        return out

    def _alone(self, u: str) -> Move:
        """Dropping u alone: its kept inputs that nothing holds yet become held."""
        g = self.graph
        new = tuple(x for x in g[u].inputs if x in self.keep and x not in self.held)
        return Move((u,), new, g[u].cost, g[u].mem - g.mem(new))

    def _best_move(self, u: str) -> Move | None:
        if self.fusible:
            return self.fused_move(u)
        g = self.graph
        single = self._alone(u)
        best, new = (single if single.gain > 0 else None), single.held
        if new:
            group, stack = [u], list(new)
            seen = set(new)
            while stack and len(group) <= CLOSURE_CAP:
                x = stack.pop()
                if x in self.fixed:
                    group = []
                    break
                group.append(x)
                for y in g[x].inputs:
                    if y in self.keep and y not in self.held and y not in seen:
                        seen.add(y)
                        stack.append(y)
            if group and not stack:
                closure = Move(tuple(group), (), g.cost(group), g[u].mem)
                if best is None or _ratio(closure) > _ratio(best):
                    best = closure
        return best

    def fused_move(self, u: str) -> Move | None:
        """Drop u and the fusible values it is recomputed from (unheld, not pinned), back to held
        values; the non-fusible ones met on the way become held."""
        g = self.graph
        group, new, seen = [u], [], {u}
        stack = list(g[u].inputs)
        while stack:
            x = stack.pop()
            if x in seen or x in self.held or x not in self.keep:  # held, or already recomputed
                continue
            seen.add(x)
            if x in self.fusible and x not in self.fixed and len(group) < CLOSURE_CAP:
                group.append(x)
                stack.extend(g[x].inputs)
            else:
                new.append(x)
        gain = g[u].mem - g.mem(new)
        return Move(tuple(group), tuple(new), g.cost(group), gain) if gain > 0 else None

    def apply(self, move: Move) -> None:
        if self.chain_limit is not None:
            self.chain.update(self._chains(move) or {})
        self.keep.difference_update(move.nodes)
        self.held.difference_update(move.nodes)
        self.held.update(move.held)
        self.moves.append(move)


def _ratio(m: Move) -> float:
    return math.inf if m.cost <= 0 else m.gain / m.cost


def _by_ratio(m: Move) -> tuple[float, float]:
    """Heap key of the time-centric order: most bytes per recompute cost first, then most bytes."""
    return -_ratio(m), -m.gain


def _by_bytes(m: Move) -> tuple[float, float]:
    """Heap key of the memory-centric order: most bytes first, then the cheaper."""
    return -m.gain, m.cost


def recomputed_by(graph: Graph, kept: Iterable[str]) -> set[str]:
    """Values the executed schedule of a kept set recomputes in the backward."""
    seen: set[str] = set()
    again: set[str] = set()
    for kind, v in schedule.from_kept(graph, set(kept) | pinned(graph)):
        if kind == "fwd":
            (again if v in seen else seen).add(v)
    return again


def drop_order(graph: Graph, fusible: Iterable[str] = (), start: Iterable[str] | None = None,
               mode: str = "time", chain_limit: int | None = None) -> tuple[set[str], list[Move]]:
    """The held values of the vanilla step (or the kept set ``start``, another plan's) and the
    greedy sequence of moves from there (module docstring; ``fusible``: moves for fused code;
    ``mode``: "time" orders by bytes per recompute cost, "memory" by bytes; ``chain_limit``: the
    most backward-read values one recomputation may remake early, in a row)."""
    held, moves, _ = _order(graph, fusible, start, mode, chain_limit)
    return held, moves


def _order(graph: Graph, fusible: Iterable[str] = (), start: Iterable[str] | None = None,
           mode: str = "time", chain_limit: int | None = None) -> tuple[set[str], list[Move], frozenset[str]]:
    """``drop_order``, and what the plan it starts from recomputes anyway."""
    key = _by_ratio if mode == "time" else _by_bytes
    fixed = pinned(graph)
    if start is None:
        held, keep, again = backward_reads(graph), set(graph.order), frozenset()
    else:
        held = set(start) | fixed
        again = frozenset(recomputed_by(graph, held))
        keep = set(graph.order) - again
    saved = frozenset(backward_reads(graph)) if chain_limit is not None else frozenset()  # read only with a limit
    st = _State(graph, keep, set(held), fixed, frozenset(fusible), saved=saved, chain_limit=chain_limit)
    heap: list[tuple[tuple[float, float], int, str]] = []
    index = graph.index

    def push(u: str) -> None:
        if u in st.held and u not in fixed:
            m = st.best_move(u)
            if m is not None:
                heapq.heappush(heap, (key(m), index[u], u))

    for u in graph.order:
        push(u)
    while heap:
        pushed, _, u = heapq.heappop(heap)
        if u not in st.held:
            continue
        m = st.best_move(u)
        if m is None:
            continue
        if key(m) != pushed:  # stale: ratios moved since pushed
            heapq.heappush(heap, (key(m), index[u], u))
            continue
        st.apply(m)
        for x in m.held:  # newly held: a candidate, and its consumers' moves got cheaper in memory
            push(x)
            for w in graph.succ[x]:
                push(w)
    return held, st.moves, again


# ---- the solver -----------------------------------------------------------------------------

Judge = Callable[[set[str], list[Step], Simulation], float]  # a kept set's executed schedule -> peak


class _Search:
    """Simulations of prefixes of the move order, memoized, with a deadline; ``judge``: the peak
    a plan is judged by (default: the simulated one)."""

    def __init__(self, graph: Graph, held: set[str], moves: list[Move], deadline: float,
                 judge: Judge | None = None, again: frozenset[str] = frozenset()):
        self.g, self.held, self.moves, self.deadline = graph, held, moves, deadline
        self.judge = judge
        self.again = again  # recomputed by the plan the order starts from
        self.points = 24 if judge is None else JUDGED_POINTS  # a judged prefix costs a split and a walk
        self.sims: dict[int, tuple[set[str], list[Step], Simulation]] = {}
        self.peaks: dict[int, float] = {}
        self.cut_short = ""

    def out_of_time(self) -> bool:
        return time.perf_counter() > self.deadline

    def at(self, k: int) -> Simulation:
        if k not in self.sims:
            kept = kept_of(self.g, self.held, self.moves[:k], self.again)
            self.sims[k] = (kept, *executed(self.g, kept))
            self.peaks[k] = self.peak_of(*self.sims[k])
        return self.sims[k][2]

    def peak_of(self, kept: set[str], steps: list[Step], sim: Simulation) -> float:
        return sim.peak if self.judge is None else self.judge(kept, steps, sim)

    def peak(self, k: int) -> float:
        self.at(k)
        return self.peaks[k]

    def fits(self, k: int, budget: float) -> bool:
        return within(self.peak(k), budget)

    def smallest_fitting(self, budget: float) -> int | None:
        """Least k whose prefix fits, or None: from the prefix whose estimated savings cover the
        excess over the budget, a gallop down or up to a bracket, then bisection; if no prefix
        fits on the way up (the peak is not monotone along the order), the fixed probes."""
        n = len(self.moves)
        if self.fits(0, budget):
            return 0
        excess, saved, k0 = self.peak(0) - budget, 0.0, n
        for i, m in enumerate(self.moves):
            saved += m.gain
            if saved >= excess:
                k0 = i + 1
                break
        lo, hi = 0, None
        if self.fits(k0, budget):
            hi, step = k0, 1
            while hi - step > lo and not self.out_of_time():
                if not self.fits(hi - step, budget):
                    lo = hi - step
                    break
                hi, step = hi - step, step * 2
        else:
            lo, step = k0, 1
            while lo < n and not self.out_of_time():
                k = min(n, lo + step)
                if self.fits(k, budget):
                    hi = k
                    break
                lo, step = k, step * 2
        if hi is None:  # not monotone: any probe that fits
            for k in _probes(n, self.points):
                if self.out_of_time():
                    self.cut_short = "search for a fitting prefix stopped at the time limit"
                    return None
                if self.fits(k, budget):
                    lo, hi = max((j for j in self.sims if j < k and not self.fits(j, budget)), default=0), k
                    break
        if hi is None:
            return None
        while hi - lo > 1:
            if self.out_of_time():
                self.cut_short = "bisection of the move order stopped at the time limit"
                break
            mid = (lo + hi) // 2
            if self.fits(mid, budget):
                hi = mid
            else:
                lo = mid
        return hi


def _grid(n: int, points: int) -> list[int]:
    return sorted({round(n * i / points) for i in range(1, points + 1)})


def _probes(n: int, points: int = 24) -> list[int]:
    """Every prefix ``smallest_fitting`` may test before bisecting, whatever the budget: 0, the
    gallop's 1, 3, 7, ... and the scan's grid of ``points``. The least peak among them is the
    min budget."""
    gallop, k = [], 1
    while k < n:
        gallop.append(k)
        k = 2 * k + 1
    return sorted({0, n, *gallop, *_grid(n, points)})


def _search(graph: Graph, deadline: float, fusible: Iterable[str] = (), judge: Judge | None = None,
            start: Iterable[str] | None = None, mode: str = "time", chain_limit: int | None = None) -> _Search:
    held, moves, again = _order(graph, fusible, start, mode, chain_limit)
    return _Search(graph, held, moves, deadline, judge, again)


def lowest(graph: Graph, fusible: Iterable[str] = (), judge: Judge | None = None,
           start: Iterable[str] | None = None, time_limit: float | None = None, mode: str = "time",
           chain_limit: int | None = None) -> Plan:
    """The plan of least (judged) peak among the prefixes the budget search may probe: its floor.
    With a ``time_limit``, the probes not reached within it (longest prefix first: the usual floor;
    at least one per move order) are left out, and ``stats["cut_short"]`` says so: the floor is
    then higher, still one every larger budget meets (``smallest_fitting`` tries every probe)."""
    started = time.perf_counter()
    deadline = started + (time_limit if time_limit is not None else math.inf)
    plans = []
    for order in _orders(mode, start):
        search = _search(graph, deadline, fusible, judge, start, order, chain_limit)
        probes = sorted(_probes(len(search.moves), search.points), reverse=True)
        tried: list[int] = []
        for k in probes:
            if tried and search.out_of_time():
                break
            search.peak(k)
            tried.append(k)
        k = min(tried, key=search.peak)
        kept, steps, sim = search.sims[k]
        stats = {"prefix": k, "floor": True, "order": order}
        if len(tried) < len(probes):
            stats["cut_short"] = f"floor sought among {len(tried)} of {len(probes)} prefixes: out of time"
        plans.append(Plan(solver="selective", budget=None, feasible=True, schedule=steps,
                          kept=[v for v in graph.order if v in kept], peak=search.peak(k),
                          recompute_cost=sim.recompute_cost, mode=mode, stats=stats))
        if search.out_of_time():
            break
    plan = min(plans, key=lambda p: p.peak)
    plan.solve_seconds = time.perf_counter() - started
    return plan


def _orders(mode: str, start: Iterable[str] | None) -> tuple[str, ...]:
    """The move orders a search tries: a time-centric search from the vanilla step falls back on
    the memory-centric order below its own floor. Measured on a tiny bf16 Llama's fused code: the
    time order's lowest judged peak was 2.14e6 bytes with this machine's roofline figures and
    1.93e6 with a 10x bandwidth, so whether a 1.94e6 budget fit depended on the machine; bytes
    first reach 1.66e6."""
    return ("time", "memory") if mode == "time" and start is None else (mode,)


def _min_budget(graph: Graph, fusible: Iterable[str] = (), judge: Judge | None = None,
                start: Iterable[str] | None = None, mode: str = "time", **options) -> float:
    """Least budget ``selective`` meets: every budget at or above it finds a prefix that fits (with a
    ``time_limit``, the least found within it: ``lowest``)."""
    return lowest(graph, fusible, judge, start, time_limit=options.get("time_limit"), mode=mode,
                  chain_limit=options.get("chain_limit")).peak


@register("selective", min_budget=_min_budget)
def solve(graph: Graph, budget: float | None = None, mode: str = "time",
          time_limit: float | None = None, undo: int = 4, fusible: Iterable[str] = (),
          judge: Judge | None = None, start: Iterable[str] | None = None, bound: float = math.inf,
          chain_limit: int | None = None, **options) -> Plan:
    """Selective recomputation: keep matmul-like values, recompute cheap ones (knapsack by ratio;
    ``mode="memory"``: by bytes freed). ``fusible`` and ``judge``: plan for fused code (module
    docstring); ``start``: the kept set of another plan to drop more from (its prefix 0);
    ``bound``: the recompute cost the caller already has a plan for (another search's): the undo
    and give-back passes are skipped where they cannot get below it (``_reaches``), so their
    judged trials are not paid for a plan the caller drops; ``chain_limit``: ``drop_order``'s."""
    started = time.perf_counter()
    deadline = started + (time_limit if time_limit is not None else math.inf)
    for order in _orders(mode, start):
        search = _search(graph, deadline, fusible, judge, start, order, chain_limit)
        k = 0 if budget is None else search.smallest_fitting(float(budget))
        if k is not None or search.out_of_time():
            break
    held, moves = search.held, search.moves
    stats = {"moves": len(moves), "order": order}
    if judge is not None:
        stats["judged"] = "by the code's own peak"
    if k is None:
        low = min(search.sims, key=search.peak)
        kept, steps, sim = search.sims[low]
        plan = infeasible("selective", budget, f"no prefix of the selective order fits budget {budget:g}; "
                          f"the lowest peak found is {search.peak(low):g}",
                          schedule=steps, kept=[v for v in graph.order if v in kept], peak=search.peak(low),
                          recompute_cost=sim.recompute_cost, mode=mode, stats=stats)
        if search.cut_short or search.out_of_time():
            plan.stats["cut_short"] = search.cut_short or "search stopped at the time limit"
        plan.solve_seconds = time.perf_counter() - started
        return plan
    search.at(k)
    kept, steps, sim = search.sims[k]
    peak = search.peak(k)
    if budget is not None and k > 0:
        kept, steps, sim, peak, undone = _undo_costliest(graph, kept, moves[:k], float(budget), undo, search,
                                                         bound)
        stats["undone"] = undone
    if budget is not None and search.again:
        kept, steps, sim, peak, given = _give_back(graph, kept, steps, sim, peak, float(budget), undo, search,
                                                   bound)
        stats["given_back"] = given
    stats.update(prefix=k, simulations=len(search.sims))
    if search.cut_short:
        stats["cut_short"] = search.cut_short
    return Plan(solver="selective", budget=budget, feasible=within(peak, budget), schedule=steps,
                kept=[v for v in graph.order if v in kept], peak=peak, recompute_cost=sim.recompute_cost,
                solve_seconds=time.perf_counter() - started, mode=mode,
                stats={"simulated_peak": sim.peak, **stats})


def _undo_costliest(graph: Graph, kept: set[str], prefix: list[Move], budget: float, tries: int,
                    search: _Search, bound: float = math.inf) -> tuple[set[str], list[Step], Simulation, float, int]:
    """Keep again the values of the costliest moves of the prefix while the peak still fits.

    Moves whose values are recomputed before the peak step are tried first: what they save ends
    before the peak (the last layer's values, read by the first backward steps), so undoing them
    often costs no peak. Each trial is the prefix without the move (``kept_of`` keeps it
    consistent), simulated."""
    search.at(len(prefix))
    steps, sim = search.sims[len(prefix)][1:]
    peak = search.peak(len(prefix))
    undone = 0
    first: dict[str, int] = {}
    seen: set[str] = set()
    for i, (kind, v) in enumerate(steps):
        if kind == "fwd":
            if v in seen:
                first.setdefault(v, i)
            seen.add(v)
    early = [i for i, m in enumerate(prefix) if all(first.get(v, len(steps)) < sim.peak_step for v in m.nodes)]
    order = sorted(early, key=lambda i: -prefix[i].cost)
    order += sorted(set(range(len(prefix))) - set(early), key=lambda i: -prefix[i].cost)
    skip: set[int] = set()
    tried = [i for i in order[:tries] if prefix[i].cost > 0]
    for t, i in enumerate(tried):
        if search.out_of_time():
            search.cut_short = search.cut_short or "undo pass stopped at the time limit"
            break
        rest = set(tried[t:]) | skip  # all this pass may still undo
        if not _reaches(graph, kept_of(graph, search.held, [m for j, m in enumerate(prefix) if j not in rest],
                                       search.again), bound):
            break
        trial = kept_of(graph, search.held, [m for j, m in enumerate(prefix) if j != i and j not in skip],
                        search.again)
        got = _cheaper_fit(graph, search, trial, sim.recompute_cost, budget)
        if got is not None:
            kept, steps, sim, peak = got
            skip.add(i)
            undone += 1
    return kept, steps, sim, peak, undone


def _cheaper_fit(graph: Graph, search: _Search, trial: set[str], recompute: float,
                 budget: float) -> tuple[set[str], list[Step], Simulation, float] | None:
    """Kept set ``trial`` with its executed schedule, simulation and (judged) peak, when it
    recomputes less than ``recompute`` and fits ``budget``; else None."""
    t_steps, t_sim = executed(graph, trial)
    if t_sim.recompute_cost >= recompute:
        return None
    t_peak = search.peak_of(trial, t_steps, t_sim)
    return (trial, t_steps, t_sim, t_peak) if within(t_peak, budget) else None


def _give_back(graph: Graph, kept: set[str], steps: list[Step], sim: Simulation, peak: float, budget: float,
               tries: int, search: _Search, bound: float = math.inf
               ) -> tuple[set[str], list[Step], Simulation, float, int]:
    """Keep again values the starting plan recomputes while the peak still fits: an order that
    starts from another plan (per-block checkpointing's floor) may fit with room to spare at
    prefix 0, where no move is left to undo. The candidates, costliest per byte first, are given
    back as the longest prefix that fits (a gallop, then bisection: a few simulations however
    many there are), then one by one for ``tries`` more."""
    order = [v for v in sorted(recomputed_by(graph, kept),
                               key=lambda v: (-graph[v].cost / max(graph[v].mem, 1.0), graph.index[v]))
             if graph[v].cost > 0]
    tried: dict[int, tuple | None] = {}

    def trial(values: set[str]) -> tuple | None:
        return _cheaper_fit(graph, search, kept | values, sim.recompute_cost, budget)

    def fits(m: int) -> bool:
        if m not in tried:
            tried[m] = trial(set(order[:m]))
        return tried[m] is not None

    n = len(order)
    start = kept

    def reaches(hi: int) -> bool:  # the plan keeps at most the first hi - 1 and ``tries`` more again
        return _reaches(graph, start | set(order[:hi - 1 + tries]), bound)

    lo, hi = 0, n + 1  # the longest fitting prefix is in [lo, hi)
    m = 1
    while m <= n and not search.out_of_time() and reaches(hi):
        if not fits(m):
            hi = m
            break
        lo, m = m, 2 * m
    if hi == n + 1 and lo < n and not search.out_of_time() and reaches(hi):
        lo, hi = (n, hi) if fits(n) else (lo, n)
    while hi - lo > 1 and not search.out_of_time() and reaches(hi):
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    given = lo
    if lo:
        kept, steps, sim, peak = tried[lo]
    rest = order[lo:lo + tries]
    for t, v in enumerate(rest):
        if search.out_of_time():
            search.cut_short = search.cut_short or "give-back pass stopped at the time limit"
            break
        if not _reaches(graph, kept | set(rest[t:]), bound):
            break
        got = trial({v})
        if got is not None:
            kept, steps, sim, peak = got
            given += 1
    return kept, steps, sim, peak, given


def _reaches(graph: Graph, kept: set[str], bound: float) -> bool:
    """Whether the plan keeping ``kept`` (all a pass may keep again) recomputes less than ``bound``:
    one keeping only some of those values again recomputes no less (``schedule.from_kept``
    recomputes each value once, the closure of what the backward reads, stopping at kept values).
    One simulation, where the pass judges a walk per trial."""
    return bound == math.inf or executed(graph, kept)[1].recompute_cost < bound


def kept_of(graph: Graph, held: set[str], moves: list[Move], again: Iterable[str] = ()) -> set[str]:
    """Held values after applying ``moves``, where a node some kept move still needs as input
    stays held (so dropping a subset of the order stays consistent); ``again``: recomputed
    anyway (by the plan the order started from)."""
    dropped: set[str] = set(again)
    for m in moves:
        dropped.update(m.nodes)
    out = {v for v in held if v not in dropped}
    for m in moves:
        out.update(x for x in m.held if x not in dropped)
    # a dropped node's inputs that are neither kept nor dropped must be held for its recomputation
    for v in dropped:
        out.update(x for x in graph[v].inputs if x not in dropped)
    return out


def predict(graph: Graph, plan: Plan) -> tuple[list[Step], Simulation]:
    """The schedule the runtime executes for a plan and its simulation: of the plan's kept set
    lowered lazily and its own schedule (where the runtime can follow it, and it recomputes no
    pinned value), the one of lower peak, then lower recompute cost (``runtime.predict``
    without torch)."""
    best = executed(graph, plan.kept)
    own = schedule.executable(graph, plan.schedule) if plan.problem == "training" and plan.schedule else None
    fixed = pinned(graph)
    if own is not None and fixed and _recomputes(own, fixed):
        own = None
    if own is not None:
        try:
            sim = simulate_training(graph, own)
        except ScheduleError:  # reads a value only a step the runtime never sees would have needed
            return best
        if (sim.peak, sim.recompute_cost) < (best[1].peak, best[1].recompute_cost):
            best = (own, sim)
    return best


def _recomputes(steps: list[Step], values: frozenset[str]) -> bool:
    seen: set[str] = set()
    for kind, v in steps:
        if kind == "fwd":
            if v in seen and v in values:
                return True
            seen.add(v)
    return False


def _chains_min_budget(graph: Graph, **options) -> float:
    """The least of ``CHAIN_LIMITS``' floors (or the one limit given), in their order; with a
    ``time_limit``, the limits not reached within it are left out (the first is always sought)."""
    limits = (options["chain_limit"],) if options.get("chain_limit") is not None else CHAIN_LIMITS
    deadline = time.perf_counter() + (options["time_limit"] if options.get("time_limit") is not None else math.inf)
    lows = []
    for i, limit in enumerate(limits):
        left = deadline - time.perf_counter()
        if lows and left < 0:
            break
        share = None if math.isinf(left) else max(left, 0.0) / (len(limits) - i)
        lows.append(_min_budget(graph, **{**options, "chain_limit": limit, "time_limit": share}))
    return min(lows)


@register("selective-chains", min_budget=_chains_min_budget)
def solve_chains(graph: Graph, budget: float | None = None, mode: str = "time", chain_limit: int | None = None,
                 time_limit: float | None = None, **options) -> Plan:
    """Selective recomputation whose recomputations remake at most ``chain_limit`` backward-read
    values in a row (module docstring, "Chains"): residual streams are dropped in part, not whole.
    Without a limit given, each of ``CHAIN_LIMITS`` is searched (the time limit shared) and the
    plan that fits with the least recomputation kept (none fits: the one of least peak)."""
    started = time.perf_counter()
    limits = (chain_limit,) if chain_limit is not None else CHAIN_LIMITS
    best: Plan | None = None
    for i, limit in enumerate(limits):
        spent = time.perf_counter() - started
        left = None if time_limit is None else max(time_limit - spent, 0.0) / (len(limits) - i)
        plan = solve(graph, budget, mode, time_limit=left, chain_limit=limit, **options)
        plan.stats["chain_limit"] = limit
        if best is None or _ranked(plan) < _ranked(best):
            best = plan
    best.solver, best.solve_seconds = "selective-chains", time.perf_counter() - started
    return best


def _ranked(plan: Plan) -> tuple:
    """Fitting plans first, by recompute cost; then the others, by peak."""
    return (0, plan.recompute_cost, plan.peak) if plan.feasible else (1, plan.peak, plan.recompute_cost)
