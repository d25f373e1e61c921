"""``auto``: run the applicable solvers and keep the cheapest plan that fits.

Plans are judged on one scale: the simulation of the schedule the runtime executes for them
(``selective.predict``, which is ``runtime.predict`` without torch). A candidate fits when that
peak is within the budget, and the cheapest is the one with the least recompute cost there
(ties: the lower peak). The returned plan carries that executed schedule, so ``plan.peak`` and
``plan.feasible`` are its simulated peak (DESIGN.md, "One truth"). Every candidate is asked at
the budget itself with the caller's mode, so auto is never costlier than any one candidate's
plan that fits (unless that candidate was cut short by auto's time limit, which stats say).
Stage-based solvers plan against eq. (2), which over-estimates what liveness analysis
achieves, so they are also tried with relaxed planning budgets (``relax``), memory-centric
where the time-centric plan misses; so are the other solvers with a model of their own.

Time: ``time_limit`` seconds for the whole call (default 30), shared among the candidates still
to run in proportion to ``WEIGHT`` (what a fast one leaves goes to the next). Solvers that honour a ``time_limit`` option
get their share and return their best plan so far; on graphs of ``ISOLATE_NODES`` nodes and
more, the others run in a child process that is stopped when its share is spent.
``plan.stats["cut_short"]`` names each candidate cut short, and why.

Candidates: ``default_candidates()``, DEFAULT_CANDIDATES first (the fast, strong ones lead, so
they are sure to get their time), then any other registered training solver. Solvers that
refuse a graph (too many lower sets, no module paths) are skipped and noted in
``plan.stats["skipped"]``. The yardsticks (dp-exhaustive, milp) are not run by default.
"""

from __future__ import annotations

import multiprocessing
import time
from typing import Any, Callable

from ..errors import SolverError
from ..graph import Graph
from ..plan import Plan, infeasible
from . import get, register
from .selective import predict

DEFAULT_CANDIDATES = ("selective", "blocks-selective", "blocks", "chen-sqrt", "chen-greedy",
                      "chen-drop-cheap-greedy", "chen-drop-cheap-sqrt", "chen-drop-cheap", "dp-approx",
                      "dp-exact", "chen-recursive", "twremat", "greedy", "reforward", "none")
YARDSTICKS = ("milp", "dp-exhaustive")  # exact references, too slow to run by default
# never chosen on the zoo and captured graphs (3-9 forwards of recompute, ~10 s on 10k nodes):
# run it by name (bench/results/kumar_path.md)
OPT_IN = ("kumar-path",)
STAGE_SOLVERS = {"dp-approx", "dp-exact"}
ONE_CALL = {"selective", "blocks", "blocks-selective", "none"}  # judge their own executed peak: no relaxing
TIME_AWARE = {"selective", "blocks", "blocks-selective", "dp-approx", "dp-exact", "milp", "none"}
# shares of the time limit, relative to 1 for the others: the strong ones first get more
WEIGHT = {"selective": 6.0, "dp-approx": 4.0, "dp-exact": 2.0}
DEFAULT_TIME_LIMIT = 30.0
ISOLATE_NODES = 1000


class _TimedOut(RuntimeError):
    """A candidate run in a child process did not finish within its share of the time."""


def default_candidates() -> tuple[str, ...]:
    """Installed DEFAULT_CANDIDATES in order, then every other registered training solver but
    the yardsticks: a new solver module is a candidate without being listed."""
    from . import names

    listed = [n for n in DEFAULT_CANDIDATES if _installed(n)]
    rest = [n for n in names("training") if n not in listed and n not in YARDSTICKS and n not in OPT_IN and n != "auto"]
    return (*listed, *rest)


@register("auto")
def solve(graph: Graph, budget: float | None = None, mode: str = "time",
          candidates: tuple[str, ...] | None = None,
          relax: tuple[float, ...] = (1.0, 1.25, 1.5, 2.0),
          time_limit: float | None = DEFAULT_TIME_LIMIT, **options) -> Plan:
    """Every applicable solver; the cheapest plan whose executed schedule fits the budget."""
    started = time.perf_counter()
    run = _Run(graph, budget, started + time_limit if time_limit is not None else float("inf"))
    names = [n for n in (candidates or default_candidates()) if _installed(n)]
    weights = [WEIGHT.get(n, 1.0) for n in names]
    for i, name in enumerate(names):
        left = run.deadline - time.perf_counter()
        if left <= 0:
            run.cut_short[name] = "not run: auto's time limit was spent"
            continue
        run.start(name, time.perf_counter() + left * weights[i] / sum(weights[i:]))
        factors = relax if name not in ONE_CALL and budget is not None else (1.0,)
        for f in factors:
            outcome = run.attempt(mode if name not in STAGE_SOLVERS else "time", f, len(factors) + 1)
            if outcome == "fits":
                continue
            if outcome == "misses" and name in STAGE_SOLVERS:
                # eq. (2) over-estimates: the memory-centric plan at this budget may fit
                outcome = run.attempt("memory", f, len(factors) + 1)
                if outcome == "fits":
                    continue
            if outcome in ("misses", "stop"):  # a larger planning budget only gives larger plans
                break
    stats = {"tried": run.tried, "skipped": run.skipped}
    if run.cut_short:
        stats["cut_short"] = run.cut_short
    if run.best is None:
        lowest = min((t["simulated_peak"] for t in run.tried), default=float("inf"))
        return infeasible("auto", budget, f"no solver fits budget {budget:g}; the lowest simulated "
                          f"peak found is {lowest:g}", stats=stats,
                          solve_seconds=time.perf_counter() - started)
    cost, peak, chosen, steps = run.best
    return Plan(solver="auto", budget=budget, feasible=True, schedule=steps, kept=chosen.kept,
                stages=chosen.stages, peak=peak, recompute_cost=cost,
                solve_seconds=time.perf_counter() - started, mode=chosen.mode,
                stats={**chosen.stats, "chosen": chosen.solver, "chosen_mode": chosen.mode, **stats})


class _Run:
    """auto's bookkeeping: the candidate being run and its share of time, what was tried, the best."""

    def __init__(self, graph: Graph, budget: float | None, deadline: float) -> None:
        self.graph, self.budget, self.deadline = graph, budget, deadline
        self.tried: list[dict] = []
        self.skipped: dict[str, str] = {}
        self.cut_short: dict[str, str] = {}
        self.best: tuple[float, float, Plan, Any] | None = None

    def start(self, name: str, share_end: float) -> None:
        self.name, self.fn, self.share_end, self.calls = name, get(name).fn, share_end, 0

    def attempt(self, mode: str, factor: float, most: int) -> str:
        """One call at ``budget * factor``: "fits", "misses", "none" (no schedule) or "stop"."""
        left = self.share_end - time.perf_counter()
        if left <= 0:
            self.cut_short.setdefault(self.name, f"its share of auto's time limit ran out after {self.calls} calls")
            return "stop"
        planning = None if self.budget is None else self.budget * factor
        # the first call (at the budget itself) may take the whole share; relaxed ones split the rest
        limit = None if self.deadline == float("inf") else (left if not self.calls else left / max(most - self.calls, 1))
        self.calls += 1
        try:
            plan = _call(self.fn, self.name, self.graph, planning, mode, limit)
        except _TimedOut as e:
            self.cut_short[self.name] = str(e)
            return "stop"
        except (ValueError, RuntimeError) as e:
            self.skipped[self.name] = str(e)
            return "stop"
        if "cut_short" in plan.stats:
            self.cut_short[self.name] = str(plan.stats["cut_short"])
        if not plan.schedule:
            return "none"
        steps, sim = predict(self.graph, plan)
        fits = self.budget is None or sim.peak <= self.budget * (1 + 1e-9)
        self.tried.append({"solver": self.name, "mode": mode, "planning_budget": planning,
                           "simulated_peak": sim.peak, "recompute_cost": sim.recompute_cost, "fits": fits,
                           "seconds": plan.solve_seconds})
        if fits and (self.best is None or (sim.recompute_cost, sim.peak) < self.best[:2]):
            self.best = (sim.recompute_cost, sim.peak, plan, steps)
        return "fits" if fits else "misses"


def _installed(name: str) -> bool:
    try:
        get(name)
    except ValueError:
        return False
    return True


def _call(fn: Callable[..., Plan], name: str, graph: Graph, budget: float | None, mode: str,
          time_limit: float | None) -> Plan:
    """One candidate call within ``time_limit`` seconds (module docstring)."""
    kwargs: dict[str, Any] = {"mode": mode, "problem": "training"}
    if name in TIME_AWARE or time_limit is None or len(graph) < ISOLATE_NODES:
        if name in TIME_AWARE and time_limit is not None:
            kwargs["time_limit"] = max(time_limit, 1e-3)
        return fn(graph, budget, **kwargs)
    return isolated(fn, (graph, budget), kwargs, time_limit, name)


def isolated(fn: Callable[..., Any], args: tuple, kwargs: dict, timeout: float, label: str = "call") -> Any:
    """``fn(*args, **kwargs)`` in a forked child process, stopped after ``timeout`` seconds
    (raising _TimedOut); its exception, if it raised one, is raised here. Without fork (not
    Linux/macOS) the call runs in this process."""
    try:
        ctx = multiprocessing.get_context("fork")
    except ValueError:
        return fn(*args, **kwargs)
    recv, send = ctx.Pipe(duplex=False)

    def target() -> None:
        try:
            send.send(("ok", fn(*args, **kwargs)))
        except BaseException as e:  # noqa: BLE001 - handed to the parent as it is
            send.send(("error", e))

    child = ctx.Process(target=target, daemon=True)
    child.start()
    send.close()
    try:
        if not recv.poll(max(timeout, 0.0)):
            raise _TimedOut(f"{label} stopped after its share of auto's time limit ({timeout:.3g} s)")
        kind, value = recv.recv()
    except EOFError:
        raise SolverError(f"{label} ended without an answer (exit code {child.exitcode})") from None
    finally:
        recv.close()
        if child.is_alive():
            child.kill()
        child.join()
    if kind == "error":
        raise value
    return value
