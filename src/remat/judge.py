"""One truth about a plan: the simulation of the schedule the runtime executes for it.

Every solver plans against a model of its own: eq. (2) for the stage solvers (it over-estimates
what liveness achieves), its own schedule for the others. What a user is told (``plan.peak``,
``plan.feasible``, ``plan.recompute_cost``, in the API, the CLI, JSON, reports and the demo) is
instead the simulated peak and cost of the schedule the runtime executes for the plan
(``selective.predict``, which is ``runtime.predict`` without torch), the same yardstick for every
solver. The solver's own figures stay in ``plan.stats`` (``solver_peak``, ``solver_feasible``).

A solver's answer at a budget B (``answer``) is its best plan over the planning budgets tried
whose executed schedule fits B:

1. its plan at B;
2. if that fits and the solver's own model over-estimated it, plans at larger planning budgets
   (``RELAX``) while they still fit: cheaper plans with room to spare;
3. if it does not fit, where the solver's own model said it fits (an under-estimate): tighter
   planning budgets, shrunk by the overshoot, then the memory-centric plan (stage solvers), then
   fixed fractions of B;
4. else its ``floor``: the plan of least executed peak it was seen to make (cached by the graph's content).
A solver that searches planning budgets itself (``searches_budgets``: auto) is answered by its first call.

So ``solve(g, B, s)`` is feasible for every B at or above ``min_budget(g, s)``, which is the
floor's peak: feasibility is monotone in the budget by construction, and a budget an error
message names is always met. Torch-free, like the solvers.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections import OrderedDict
from typing import Any, Callable

from . import progress, solvers
from .budget import fmt_bytes
from .graph import Graph
from .plan import Plan, infeasible
from .solvers.selective import predict

RELAX = (1.25, 1.5, 2.0)      # larger planning budgets tried once a plan fits (model over-estimates)
TIGHTEN_ROUNDS = 3            # planning budgets shrunk by the overshoot of the executed peak
TIGHTEN = (0.8, 0.6, 0.45, 0.3)  # then fixed fractions: solvers whose executed peak is far above their model
STAGE_SOLVERS = ("dp-approx", "dp-exact", "dp-exhaustive")  # eq. (2): try memory-centric when time misses
FLOOR_GRID = (1.1, 1.2, 1.3, 1.5, 1.75, 2.0)  # stage solvers' floor: planning budgets tried above eq. (2)'s
# least, memory-centric (``_floor_of``; ten points from 1.05 found the same floors on seed 000's networks but
# DenseNet161's, -83.1% against -82.9%, at twice the calls)
BISECT_STEPS = 14             # floor search without a solver shortcut: precision 2**-14 of the vanilla peak
FLOOR_KEY = "_remat_floors"   # where a Graph keeps its floors (dropped when the graph changes)
FLOOR_GRAPHS = 16             # graphs whose floors are kept by content (``floors``)
_FLOORS: OrderedDict[tuple, dict] = OrderedDict()


def units(x: float) -> str:
    """A budget in graph units, with its byte size where it is large enough to be bytes."""
    return f"{x:.0f} ({fmt_bytes(x)})" if math.isfinite(x) and x >= 1024 else f"{x:g}"


def judge(graph: Graph, plan: Plan, budget: float | None) -> Plan:
    """Set ``plan``'s peak, recompute cost, feasibility and schedule to those of the schedule the
    runtime executes for it; the solver's own figures go to ``stats``. Idempotent."""
    if not plan.schedule and not plan.kept:
        return plan
    if "solver_peak" not in plan.stats:
        plan.stats["solver_peak"] = plan.peak
        plan.stats["solver_feasible"] = plan.feasible
    steps, sim = predict(graph, plan)
    plan.schedule, plan.peak, plan.recompute_cost = steps, sim.peak, sim.recompute_cost
    plan.feasible = budget is None or sim.peak <= budget * (1 + 1e-9) + 1e-12
    if plan.status == "infeasible" and plan.feasible:
        plan.status, plan.message = "ok", ""
    return plan


class _Search:
    """Calls of one solver at planning budgets, each judged; the cheapest that fits ``budget``."""

    def __init__(self, graph: Graph, budget: float | None, name: str, mode: str, options: dict,
                 deadline: float = math.inf, time_aware: bool = False, isolate: bool = False) -> None:
        self.graph, self.budget, self.name, self.mode = graph, budget, name, mode
        self.options = {k: v for k, v in options.items() if k not in ("problem", "mode")}
        spec = solvers.get(name)
        self.fn: Callable[..., Plan] = spec.fn
        # one call answers: a plan that does not depend on the budget, or a solver that searches planning budgets
        # itself (auto: a second call at a relaxed budget ran every candidate's search again, with a time limit
        # of its own; a 48-layer GPT-2: 42 s against auto's 30)
        self.budget_free = spec.budget_free or spec.searches_budgets
        self.deadline = deadline
        self.best: Plan | None = None
        self.lowest: Plan | None = None     # least executed peak seen, fitting or not
        self.tried: list[dict] = []
        self._seen: dict[tuple, Plan] = {}
        self.cut_short: Any = None  # why a call was cut short (the solver's own words)
        self.new = False  # whether the last call made a plan not seen before
        self.time_aware = time_aware and math.isfinite(deadline)
        # a finite deadline and a solver that takes no time limit: each call in a child process
        self.isolate = isolate and math.isfinite(deadline) and not time_aware

    def call(self, planning: float | None, mode: str | None = None, force: bool = False) -> Plan | None:
        """The solver's plan at ``planning``, judged against the real budget (None: it made no
        plan, or the time is up, unless ``force``: then the call is made with what is left).
        ``self.new`` says whether the plan differs from every earlier one (a solver whose plan
        does not move with the budget makes the same plan again)."""
        self.new = False
        now = time.perf_counter()
        if now > self.deadline and self.tried and not force:
            self.cut_short = f"the time limit ran out after {len(self.tried)} calls"
            return None
        mode = mode or self.mode
        options = dict(self.options)
        if self.time_aware:
            options["time_limit"] = max(self.deadline - now, 1e-3)
        if self.isolate:  # a solver with no time limit of its own: stopped from outside
            from .solvers.auto import _TimedOut, isolated

            try:
                plan = isolated(self.fn, (self.graph, planning), {"mode": mode, "problem": "training", **options},
                                self.deadline - now, self.name)
            except _TimedOut:
                self.cut_short = (f"{self.name} was stopped at the time limit after {len(self.tried)} "
                                  f"finished call(s)")
                return None
        else:
            plan = self.fn(self.graph, planning, mode=mode, problem="training", **options)
        if "cut_short" in plan.stats:
            self.cut_short = plan.stats["cut_short"]
        if not plan.schedule:
            self.tried.append({"solver": self.name, "mode": mode, "planning_budget": planning,
                               "fits": False, "message": plan.message})
            return None
        key = (tuple(plan.kept), len(plan.schedule), plan.recompute_cost)
        if key in self._seen:
            seen = self._seen[key]
            seen.feasible = self.budget is None or seen.peak <= self.budget * (1 + 1e-9) + 1e-12
            return seen
        self._seen[key] = plan
        self.new = True
        judge(self.graph, plan, self.budget)
        self.tried.append({"solver": self.name, "mode": mode, "planning_budget": planning,
                           "simulated_peak": plan.peak, "recompute_cost": plan.recompute_cost,
                           "fits": plan.feasible, "seconds": plan.solve_seconds})
        if self.lowest is None or (plan.peak, plan.recompute_cost) < (self.lowest.peak, self.lowest.recompute_cost):
            self.lowest = plan
        if plan.feasible and (self.best is None or
                              (plan.recompute_cost, plan.peak) < (self.best.recompute_cost, self.best.peak)):
            self.best = plan
        return plan

    def run(self) -> Plan | None:
        """Steps 1-3 of the module docstring; the best fitting plan or None."""
        b = self.budget
        first = self.call(b)
        if b is None or self.budget_free:
            return self.best if b is not None else first
        if first is not None and first.feasible:
            if first.stats.get("solver_peak", first.peak) > first.peak * (1 + 1e-9):
                for f in RELAX:  # the solver's model left room: a larger planning budget may still fit
                    p = self.call(b * f)
                    if p is None or not p.feasible or not self.new:
                        break
            return self.best
        if first is None or not first.stats.get("solver_feasible", True):
            return self.best  # its own model says no plan fits: a tighter planning budget cannot help
        planning, last = b, first
        for _ in range(TIGHTEN_ROUNDS):
            if last is None or not math.isfinite(last.peak) or last.peak <= 0:
                break
            planning *= min(0.95, b / last.peak)
            last = self.call(planning)
            if self.best is not None:
                return self.best
        if self.name in STAGE_SOLVERS and self.mode == "time":  # least peak for the stages it chose
            p = self.call(b, "memory")
            if p is not None and p.feasible:
                return self.best
        for f in TIGHTEN:
            if b * f < planning:
                self.call(b * f)
                if self.best is not None:
                    return self.best
        return self.best


def takes_time_limit(name: str) -> bool:
    """Whether solver ``name`` honours a ``time_limit`` option itself (returning its best plan
    so far when it runs out)."""
    import inspect

    return "time_limit" in inspect.signature(solvers.get(name).fn).parameters


def answer(graph: Graph, budget: float | None, name: str, mode: str = "time", *, use_floor: bool = True,
           deadline: float = math.inf, time_limit: float | None = None, **options: Any) -> Plan:
    """``name``'s judged plan at ``budget`` (module docstring), or an infeasible Plan whose
    message names the smallest budget it meets.

    ``time_limit`` (seconds) holds for the whole answer: a solver that takes one gets what is
    left on each call, any other runs each call in a child process stopped at the limit; the
    best plan found by then is the answer, and ``stats["cut_short"]`` says what was stopped."""
    started = time.perf_counter()
    if time_limit is not None:
        if not time_limit > 0:
            from .errors import SolverError

            raise SolverError(f"{name}: time_limit must be > 0 seconds, got {time_limit!r}")
        deadline = min(deadline, started + time_limit)
    aware = takes_time_limit(name)
    search = _Search(graph, budget, name, mode, options, deadline, time_aware=aware, isolate=True)
    best = search.run()
    limited = False
    if use_floor and math.isfinite(deadline) and not _has_floor(graph, name, mode, options):
        use_floor, limited = False, True  # a floor search is not bounded in time: what the search saw
        if best is None:
            search.cut_short = search.cut_short or f"{name}: its floor was not sought within the time limit"
    low = None
    if best is None and use_floor and budget is not None:  # its floor, within what is left of the time
        low = floor(graph, name, mode, deadline=deadline, **options)
        if low is not None and low.peak <= budget * (1 + 1e-9):
            best = _copy(low, budget)
            best.stats["floor"] = True
    if best is None:
        if not (use_floor and budget is not None):
            low = search.lowest
        elif low is None and math.isfinite(deadline) and time.perf_counter() > deadline:
            low, limited = search.lowest, True  # no floor found within the time limit
            search.cut_short = search.cut_short or f"{name}: its floor was not found within the time limit"
        least = low.peak if low is not None else math.inf
        msg = (f"no {name} plan found within the time limit fits budget {units(budget)}; the least peak of "
               f"the plans it made is {units(least)}; a longer time limit may find less" if limited and math.isfinite(least)
               else f"no {name} plan fits budget {units(budget)}; the smallest budget it can meet is {units(least)}"
               if math.isfinite(least) else f"{name} makes no plan for {graph.name}")
        plan = infeasible(name, budget, msg, mode=mode, stats={"min_budget": least, "tried": search.tried})
        if search.lowest is not None:  # what it would run: its least peak, over the budget
            plan.schedule, plan.kept, plan.stages = search.lowest.schedule, search.lowest.kept, search.lowest.stages
            plan.peak, plan.recompute_cost = search.lowest.peak, search.lowest.recompute_cost
        if low is not None and low.stats.get("cut_short") and low is not search.lowest:  # a floor cut short
            search.cut_short = _with_floor_cut(search.cut_short, low.stats["cut_short"])
    else:
        plan = best
        plan.stats.setdefault("tried", search.tried)
    if search.cut_short and "cut_short" not in plan.stats:
        plan.stats["cut_short"] = search.cut_short
    plan.budget = budget
    plan.solve_seconds = time.perf_counter() - started
    return plan


def _with_floor_cut(cut: Any, floor_cut: Any) -> Any:
    """What was cut short, with what the floor search cut short: candidates named "(floor)" in
    auto's dict, else a sentence."""
    if isinstance(floor_cut, dict):
        return {**(cut if isinstance(cut, dict) else {"search": cut} if cut else {}),
                **{f"{k} (floor)": v for k, v in floor_cut.items()}}
    if isinstance(cut, dict):
        return {**cut, "floor": floor_cut}
    return f"{cut}; floor: {floor_cut}" if cut else f"floor: {floor_cut}"


def _copy(plan: Plan, budget: float | None) -> Plan:
    out = dataclasses.replace(plan, stats=dict(plan.stats), budget=budget)
    out.feasible = budget is None or out.peak <= budget * (1 + 1e-9) + 1e-12
    return out


UNPLANNED_OPTIONS = ("time_limit", "milp_gap")  # options that change no plan (auto's gap only adds stats)


def _floor_key(name: str, mode: str, options: dict) -> tuple:
    return (name, mode, tuple(sorted((k, repr(v)) for k, v in options.items() if k not in UNPLANNED_OPTIONS)))


def floors(graph: Graph) -> dict:
    """The floors found on ``graph``, shared by every graph of the same content (name and nodes,
    in order): a model planned again (a refused budget retried at the one the refusal named,
    another budget, a recompile) traces to a new planning graph with the same nodes, and its
    floors (3.4 s of a 72-node tiny Bloom's first 10.7 s optimize call) are not sought again. It also keeps
    that retry's floor the one the refusal named, where a search cut short by a time limit could
    otherwise end elsewhere. The last ``FLOOR_GRAPHS`` contents are kept (``forget_floors``)."""
    cache = graph.__dict__.get(FLOOR_KEY)
    if cache is None:
        try:
            key = (graph.name, tuple(graph.nodes.values()), _attributes(graph))
            cache = _FLOORS.pop(key, None)
        except TypeError:  # an attribute that cannot be compared: this graph object's own floors
            cache = graph.__dict__[FLOOR_KEY] = {}
            return cache
        _FLOORS[key] = cache = {} if cache is None else cache
        while len(_FLOORS) > FLOOR_GRAPHS:
            _FLOORS.popitem(last=False)
        graph.__dict__[FLOOR_KEY] = cache
    return cache


def _attributes(graph: Graph) -> tuple:
    """What solvers read of a graph beside its nodes, hashable: the attributes set on it
    (``pinned``, ``modules``), not its cached views."""
    def frozen(x: Any) -> Any:
        if isinstance(x, dict):
            return tuple(sorted((k, frozen(v)) for k, v in x.items()))
        if isinstance(x, (set, frozenset)):
            return tuple(sorted(map(frozen, x)))
        if isinstance(x, (list, tuple)):
            return tuple(map(frozen, x))
        return x

    return tuple(sorted((k, frozen(v)) for k, v in graph.__dict__.items() if k not in ("name", "_nodes", FLOOR_KEY)
                        and not isinstance(getattr(type(graph), k, None), functools.cached_property)))


def forget_floors() -> None:
    """Drop the floors kept by content (``floors``): a solver changed (a test's stand-in)."""
    _FLOORS.clear()


def found_floors(graph: Graph, mode: str = "time") -> dict[str, Plan]:
    """The solvers' floors already found on ``graph`` in ``mode`` (no options), by solver: no search runs."""
    return {key[0]: low for key, low in list(floors(graph).items())
            if isinstance(key, tuple) and len(key) == 3 and key[1] == mode and not key[2] and low is not None}


def _has_floor(graph: Graph, name: str, mode: str, options: dict) -> bool:
    """Whether ``name``'s floor is at hand in bounded time: cached, or sought by a solver's own
    time-limited floor (auto's)."""
    return _floor_key(name, mode, options) in floors(graph) or solvers.get(name).floor is not None


def floor(graph: Graph, name: str, mode: str = "time", *, deadline: float = math.inf, **options: Any) -> Plan | None:
    """The plan of least executed peak ``name`` makes on ``graph`` (cached by its content, ``floors``): at its
    own minimal budget where it has a shortcut, else the least found by bisecting the budget.

    ``deadline`` (a ``time.perf_counter()`` instant; or ``time_limit`` seconds, an option): the
    search stops there with the least peak found so far, which ``stats["cut_short"]`` says; it
    is still the executed peak of a plan the solver made, so a budget it meets. A floor cut
    short is cached too (answers on one graph stay consistent); a later call with no limit
    seeks the solver's floor again, unless the solver has a time-limited floor of its own."""
    limit = options.pop("time_limit", None)
    if limit is not None:
        deadline = min(deadline, time.perf_counter() + limit)
    cache = floors(graph)
    key = _floor_key(name, mode, options)
    limited = ("limited", key)  # cached, but found within a time limit it ran to
    if key not in cache or (limited in cache and not math.isfinite(deadline) and solvers.get(name).floor is None):
        low = _floor(graph, name, mode, options, deadline)
        ran_out = math.isfinite(deadline) and time.perf_counter() > deadline
        if low is None and ran_out:
            return None  # no plan within the time limit: not known to make none
        cache[key] = low
        if ran_out:
            cache[limited] = True
        else:
            cache.pop(limited, None)
    return cache[key]


def _floor(graph: Graph, name: str, mode: str, options: dict, deadline: float = math.inf) -> Plan | None:
    spec = solvers.get(name)
    if spec.floor is not None:
        if math.isfinite(deadline):
            options = {**options, "time_limit": max(deadline - time.perf_counter(), 1e-3)}
        return spec.floor(graph, mode=mode, **options)
    lows = []
    variants = [v for v in spec.variants if not (v and any(k in options for k in v))]  # the caller chose that option
    for i, variant in enumerate(variants):
        # variants share what is left of the time, in turn
        share = deadline if not math.isfinite(deadline) else \
            time.perf_counter() + max(deadline - time.perf_counter(), 0.0) / (len(variants) - i)
        try:
            lows.append(_floor_of(graph, name, spec, mode, {**options, **variant}, share))
        except (ValueError, RuntimeError):
            if not variant:
                raise
    lows = [p for p in lows if p is not None]
    low = min(lows, key=lambda p: (p.peak, p.recompute_cost), default=None)
    if low is not None:
        low.feasible, low.budget = True, low.peak
        low.stats["floor"] = True
        cut = [p.stats["cut_short"] for p in lows if p.stats.get("cut_short")]
        if cut and "cut_short" not in low.stats:
            low.stats["cut_short"] = "; ".join(map(str, cut))
    return low


def _floor_of(graph: Graph, name: str, spec: Any, mode: str, options: dict,
              deadline: float = math.inf) -> Plan | None:
    """The least executed peak of the plans ``name`` makes with ``options``: one call for a
    budget-free solver, at its own minimal budget where it has that shortcut, else bisection;
    up to ``deadline`` (each call of a solver that takes a time limit gets what is left, the
    shortcut too; the bisection stops there).

    A stage solver's least eq. (2) budget is not where its plans execute lowest: eq. (2) ignores
    liveness, and the memory-centric plan (most recomputation) at a larger planning budget has
    longer stages for liveness to act on (seed 000 §4.4). Its floor is the least over planning
    budgets ``FLOOR_GRID`` times that least one, memory-centric: on seed 000's captured networks
    dp-approx goes from -75% to -82% on ResNet152, -80% to -83% on DenseNet161 (-81% in the paper)
    and -77% to -81% on PSPNet (``bench/results/paper_fidelity``)."""
    limited = math.isfinite(deadline)
    search = _Search(graph, None, name, mode, options, deadline=deadline, time_aware=takes_time_limit(name))
    if spec.budget_free:
        search.call(None)
    elif spec.min_budget is not None:
        # half of what is left for the shortcut, the rest for the call at the budget it found
        give = max((deadline - time.perf_counter()) / 2, 1e-3) if limited else math.inf
        shortcut_end = time.perf_counter() + give
        low = spec.min_budget(graph, **options, **({"time_limit": give} if limited else {}))
        ran_out = time.perf_counter() > shortcut_end
        search.call(low, force=True)
        if ran_out:
            note = f"{name}: its minimal-budget search ran to its time limit ({units(low)} found)"
            search.cut_short = f"{note}; {search.cut_short}" if search.cut_short else note
        if name in STAGE_SOLVERS and math.isfinite(low):  # seed 000's memory-centric plan (1.0) too
            for f in FLOOR_GRID if mode == "memory" else (1.0, *FLOOR_GRID):
                progress.note(f"{name}: memory-centric at {f:g}x its least eq. (2) budget")
                if search.call(low * f, "memory") is None and time.perf_counter() > deadline:
                    break
    if search.lowest is None:
        top = search.call(None, force=True)  # out of time or not: a plan with no budget, its peak met
        if top is None:
            return None
        lo, hi = 0.0, top.peak
        for _ in range(BISECT_STEPS):
            mid = (lo + hi) / 2
            progress.note(f"{name}: trying {units(mid)}, met at {units(hi)}")
            search.budget = mid
            p = search.call(mid)
            if p is None and search.cut_short and time.perf_counter() > deadline:
                break  # out of time: the least peak found so far
            if p is not None and p.peak <= mid * (1 + 1e-9):
                hi = p.peak
            else:
                lo = mid
            if hi - lo <= 1e-4 * top.peak:
                break
    if search.lowest is not None:
        search.lowest.stats.update({k: v for k, v in options.items() if k != "time_limit"})
        if search.cut_short:
            search.lowest.stats["cut_short"] = search.cut_short
    return search.lowest


def own_min_budget(graph: Graph, solver: str, mode: str = "time", **options: Any) -> float:
    """The least budget at which ``solver`` calls its own plan feasible, by its own model (eq. (2)
    for the stage solvers): seed 000 §5.1's binary search, or the solver's shortcut. What the
    papers' tables report; ``remat.min_budget`` is the executed truth instead."""
    spec = solvers.get(solver)
    if spec.min_budget is not None and mode == "time":
        return spec.min_budget(graph, **options)

    def attempt(b: float | None) -> Plan:
        return spec.fn(graph, b, mode=mode, problem="training", **options)

    top = attempt(None)
    if not top.feasible:
        raise ValueError(f"{solver} finds no plan for {graph.name!r} even without a budget: {top.message}")
    lo, hi = 0.0, top.peak
    best = hi
    integral = all(float(graph[v].mem).is_integer() for v in graph.order)
    while hi - lo > (0.5 if integral else 1e-9 * max(hi, 1.0)):
        mid = math.floor((lo + hi) / 2) if integral else (lo + hi) / 2
        if mid <= lo:
            break
        progress.note(f"{solver}: trying {units(mid)}, feasible at {units(hi)}")
        plan = attempt(mid)
        if plan.feasible:
            hi = best = min(plan.peak, mid)
        else:
            lo = mid
    return best
