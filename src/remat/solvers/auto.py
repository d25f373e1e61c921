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
where the time-centric plan misses; so are the other solvers with a model of their own. Where
none of a stage solver's planning budgets gives a fitting plan, its floor plan (cached by the
graph's content) is taken when it fits: what that solver answers alone there (``_floor_within``).

Time: ``time_limit`` seconds for the whole call (default 30), shared among the candidates still
to run in proportion to ``WEIGHT`` (what a fast one leaves goes to the next). Solvers that honour a ``time_limit`` option
get their share and return their best plan so far; on graphs of ``ISOLATE_NODES`` nodes and
more, the others run in a child process that is stopped when its share is spent.
``plan.stats["cut_short"]`` names each candidate cut short, and why. auto's floor (its
least-peak plan, sought by ``remat.judge`` when no plan fits a budget) has a limit of its own,
``FLOOR_TIME_LIMIT`` (a third of auto's), shared among the candidates' floor searches the same
way; a search that runs out stops at the least peak it found, a plan it made, so a budget met.

Candidates: ``default_candidates()``, DEFAULT_CANDIDATES first (the fast, strong ones lead, so
they are sure to get their time), then any other registered training solver. Solvers that
refuse a graph (too many lower sets, no module paths) are skipped and noted in
``plan.stats["skipped"]``. The yardsticks (dp-exhaustive, milp) are candidates only when named.

Gap to the MILP bound: on graphs of at most ``MILP_GAP_NODES`` nodes (``milp_gap=True``, the
default), once auto has chosen its plan, milp runs at the same budget for what is left of the
time limit (at most ``MILP_GAP_SECONDS``), warm-started with auto's plan. ``plan.stats`` then
has ``milp_status``, ``milp_bound`` (a recompute cost no schedule of milp's class beats: HiGHS's
proof, or the LP relaxation's where HiGHS stopped without one), ``gap_to_milp_bound`` (auto's
recompute cost less the bound, relative to the bound; None when the bound is 0 and auto's cost
is not), ``gap_to_milp_bound_of_forward`` (the same difference over the forward cost) and, when
milp's plan, judged like the candidates', fits, ``milp_recompute_cost``. auto's plan is never
replaced by milp's; ``cut_short["milp_gap"]`` says when milp was stopped by its time limit or
not run for want of time. The bound holds for milp's class of schedules (milp's docstring), so
a plan outside it can show a negative gap.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import time
from typing import Any, Callable

from ..errors import SolverError
from ..graph import Graph
from ..plan import Plan, infeasible
from . import get, register
from .selective import predict

DEFAULT_CANDIDATES = ("selective", "selective-chains", "blocks-selective", "blocks", "chen-sqrt", "chen-greedy",
                      "chen-drop-cheap-greedy", "chen-drop-cheap-sqrt", "chen-drop-cheap", "dp-approx",
                      "dp-exact", "chen-recursive", "twremat", "greedy", "reforward", "none")
YARDSTICKS = ("milp", "dp-exhaustive")  # exact references, too slow to run by default
# never chosen on the zoo and captured graphs (3-9 forwards of recompute, ~10 s on 10k nodes):
# run it by name (bench/results/kumar_path.md)
OPT_IN = ("kumar-path",)
STAGE_SOLVERS = {"dp-approx", "dp-exact"}
# these judge their own executed peak: no relaxing
ONE_CALL = {"selective", "selective-chains", "blocks", "blocks-selective", "none"}
TIME_AWARE = {"selective", "selective-chains", "blocks", "blocks-selective", "dp-approx", "dp-exact", "milp", "none"}
# shares of the time limit, relative to 1 for the others: the strong ones first get more
WEIGHT = {"selective": 6.0, "selective-chains": 3.0, "dp-approx": 4.0, "dp-exact": 2.0}
DEFAULT_TIME_LIMIT = 30.0
# auto's floor (its least-peak plan, ``remat.judge.floor``): sought when no plan fits a budget,
# after the search at that budget, so it gets a third of auto's limit, shared like ``solve``'s
FLOOR_TIME_LIMIT = DEFAULT_TIME_LIMIT / 3
ISOLATE_NODES = 1000
MILP_GAP_NODES = 40       # graphs this small get the gap to milp's bound (milp proves most in seconds)
MILP_GAP_SECONDS = 1.0    # at most this long (and never past auto's time limit): auto stays fast
MILP_GAP_MIN_SECONDS = 0.1  # less time left than this: the gap check is not run


class _TimedOut(RuntimeError):
    """A candidate run in a child process did not finish within its share of the time."""


def default_candidates() -> tuple[str, ...]:
    """Installed DEFAULT_CANDIDATES in order, then every other registered training solver but
    the yardsticks: a new solver module is a candidate without being listed."""
    from . import names

    listed = [n for n in DEFAULT_CANDIDATES if _installed(n)]
    rest = [n for n in names("training") if n not in listed and n not in YARDSTICKS and n not in OPT_IN and n != "auto"]
    return (*listed, *rest)


def _floor(graph: Graph, mode: str = "time", candidates: tuple[str, ...] | None = None,
           time_limit: float | None = FLOOR_TIME_LIMIT, **options: Any) -> Plan | None:
    """auto's least-peak plan: the least of its candidates' floors (``remat.judge.floor``), those
    found within ``time_limit`` seconds (default ``FLOOR_TIME_LIMIT``), fast candidates first,
    each within its share of what is left (``WEIGHT``, as in ``solve``): a candidate's search
    stops at its share with the least peak it found, on large graphs in a child process stopped
    when the share is spent. ``stats["cut_short"]`` names the candidates whose floor search was
    cut short or not run."""
    from ..judge import floor

    deadline = time.perf_counter() + (time_limit if time_limit is not None else float("inf"))
    names = [n for n in (candidates or default_candidates()) if _installed(n)]
    weights = [WEIGHT.get(n, 1.0) for n in names]
    best: Plan | None = None
    cut_short: dict[str, str] = {}
    for i, name in enumerate(names):
        now = time.perf_counter()
        left = deadline - now
        if left <= 0 and best is not None:
            cut_short[name] = "floor not sought: the floor search's time limit was spent"
            continue
        share_end = now + max(left, 0.0) * weights[i] / sum(weights[i:])
        try:
            if len(graph) < ISOLATE_NODES or deadline == float("inf"):
                low = floor(graph, name, mode, deadline=share_end)
            else:  # stopped from outside too, with room for the search to end at its own deadline
                timeout = min(max(2 * left / (len(names) - i), 1.0), max(left, 1.0))
                low = isolated(floor, (graph, name, mode), {"deadline": now + timeout / 2}, timeout, name)
        except _TimedOut as e:
            cut_short[name] = str(e)
            continue
        except (ValueError, RuntimeError):
            continue
        if low is not None and low.stats.get("cut_short"):
            cut_short[name] = str(low.stats["cut_short"])
        elif low is None and time.perf_counter() > share_end:
            cut_short[name] = "no plan found within its share of the floor search's time limit"
        if low is not None and (best is None or (low.peak, low.recompute_cost) < (best.peak, best.recompute_cost)):
            best = low
    if best is None:
        return None
    stats = {**best.stats, "chosen": best.solver, "floor": True}
    stats.pop("cut_short", None)
    if cut_short:
        stats["cut_short"] = cut_short
    return Plan(solver="auto", budget=best.peak, feasible=True, schedule=best.schedule, kept=best.kept,
                stages=best.stages, peak=best.peak, recompute_cost=best.recompute_cost, mode=best.mode,
                stats=stats)


@register("auto", floor=_floor, searches_budgets=True)  # (each candidate: ``_candidate``)
def solve(graph: Graph, budget: float | None = None, mode: str = "time",
          candidates: tuple[str, ...] | None = None,
          time_limit: float | None = DEFAULT_TIME_LIMIT, milp_gap: bool = True, **options) -> Plan:
    """Every applicable solver; the cheapest plan whose executed schedule fits the budget.
    ``milp_gap``: on small graphs, report the gap to milp's bound (module docstring)."""
    started = time.perf_counter()
    deadline = started + time_limit if time_limit is not None else float("inf")
    names = [n for n in (candidates or default_candidates()) if _installed(n)]
    weights = [WEIGHT.get(n, 1.0) for n in names]
    best: Plan | None = None
    tried: list[dict] = []
    skipped: dict[str, str] = {}
    cut_short: dict[str, str] = {}
    for i, name in enumerate(names):
        left = deadline - time.perf_counter()
        if left <= 0:
            cut_short[name] = "not run: auto's time limit was spent"
            continue
        share_end = time.perf_counter() + left * weights[i] / sum(weights[i:])
        try:
            plan, calls, cut = _candidate(graph, budget, name, mode, share_end, options)
        except _TimedOut as e:
            cut_short[name] = str(e)
            continue
        except (ValueError, RuntimeError) as e:  # solvers refuse graphs they cannot handle
            skipped[name] = str(e)
            continue
        tried += calls
        if cut:
            cut_short[name] = str(cut)
        if plan is not None and plan.feasible and (
                best is None or (plan.recompute_cost, plan.peak) < (best.recompute_cost, best.peak)):
            best = plan
    stats: dict[str, Any] = {"tried": tried, "skipped": skipped}
    if best is not None and milp_gap:
        stats.update(gap_stats(graph, budget, best, deadline, cut_short))
    if cut_short:
        stats["cut_short"] = cut_short
    if best is None:
        lowest = min((t["simulated_peak"] for t in tried if "simulated_peak" in t), default=float("inf"))
        return infeasible("auto", budget, f"no solver fits budget {budget:g}; the lowest simulated "
                          f"peak found is {lowest:g}", stats=stats,
                          solve_seconds=time.perf_counter() - started)
    return Plan(solver="auto", budget=budget, feasible=True, schedule=best.schedule, kept=best.kept,
                stages=best.stages, peak=best.peak, recompute_cost=best.recompute_cost,
                solve_seconds=time.perf_counter() - started, mode=best.mode,
                stats={**best.stats, "chosen": best.solver, "chosen_mode": best.mode, **stats})


def gap_stats(graph: Graph, budget: float | None, plan: Plan, deadline: float,
              cut_short: dict[str, str]) -> dict[str, Any]:
    """The gap of ``plan`` to milp's bound at ``budget`` (module docstring) where the graph is
    small enough, with milp stopped at ``deadline``; why it was not run or was stopped goes in
    ``cut_short["milp_gap"]``. ``remat.solve`` asks it once, for the plan it answers with: its
    search plans at several planning budgets, and a bound at a tighter one bounds nothing here."""
    if len(graph) > MILP_GAP_NODES or not _installed("milp"):
        return {}
    left = deadline - time.perf_counter()
    if left < MILP_GAP_MIN_SECONDS:
        cut_short["milp_gap"] = "not run: auto's time limit was spent"
        return {}
    gap, cut = _milp_gap(graph, budget, plan, min(left, MILP_GAP_SECONDS))
    if cut:
        cut_short["milp_gap"] = cut
    return gap


def _milp_gap(graph: Graph, budget: float | None, plan: Plan,
              seconds: float) -> tuple[dict[str, Any], str | None]:
    """milp at ``budget`` within ``seconds``, warm-started with auto's (judged) ``plan``: the
    stats of the module docstring, and why milp was cut short (None if it was not)."""
    from ..judge import judge

    try:
        ref = get("milp").fn(graph, budget, mode="time", problem="training", time_limit=seconds, start=plan)
    except (ValueError, RuntimeError) as e:  # milp refuses the graph: say so, keep auto's plan
        return {"milp_status": "error", "milp_message": str(e)}, None
    out: dict[str, Any] = {"milp_status": ref.status, "milp_seconds": ref.solve_seconds}
    bound = ref.stats.get("recompute_lower_bound")
    if bound is None and ref.status == "optimal" and ref.feasible:  # vanilla fits: nothing to bound
        bound = ref.recompute_cost
    if bound is not None:
        over = plan.recompute_cost - bound
        out["milp_bound"] = bound
        out["gap_to_milp_bound"] = (over / bound if bound > 1e-12 else
                                    0.0 if over <= 1e-9 * max(graph.total_cost(), 1.0) else None)
        out["gap_to_milp_bound_of_forward"] = over / graph.total_cost() if graph.total_cost() > 0 else 0.0
    if ref.schedule:
        judge(graph, ref, budget)  # the candidates' yardstick: the executed schedule's simulation
        if ref.feasible:
            out["milp_recompute_cost"] = ref.recompute_cost
    return out, ref.stats.get("cut_short")


def _candidate(graph: Graph, budget: float | None, name: str, mode: str, share_end: float,
               options: dict) -> tuple[Plan | None, list[dict], str | None]:
    """One candidate's best judged plan at ``budget`` (``remat.judge``'s search, without its
    floor), the calls it made, and why it was cut short (None if it was not). Solvers that honour
    a time limit get what is left of the share on each call; on large graphs the others run in a
    child process stopped when the share is spent."""
    from ..judge import _Search

    aware = name in TIME_AWARE

    def run() -> tuple[Plan | None, list[dict], str | None]:
        search = _Search(graph, budget, name, mode, options, deadline=share_end, time_aware=aware)
        best = search.run()
        if best is None and budget is not None and name in STAGE_SOLVERS and time.perf_counter() < share_end:
            best = _floor_within(graph, budget, name, mode, share_end, options, search.tried)
        return best, search.tried, search.cut_short

    if aware or len(graph) < ISOLATE_NODES or share_end == float("inf"):
        return run()
    return isolated(run, (), {}, share_end - time.perf_counter(), name)


def _floor_within(graph: Graph, budget: float, name: str, mode: str, deadline: float, options: dict,
                  tried: list[dict]) -> Plan | None:
    """A stage solver's floor plan (``remat.judge.floor``, cached by the graph's content) when it
    fits ``budget`` where no planning budget the search tried gave a fitting plan: eq. (2) is not
    monotone in what executes, so its least-peak plan can come from a planning budget well above
    the budget (seed 003's ResNet-50 at dp-approx's least budget: from 1.71 times it, memory-
    centric). Without this, auto there recomputed 663 units where dp-approx asked alone, which
    falls back to its floor, recomputed 445."""
    from ..judge import floor

    options = {k: v for k, v in options.items() if k not in ("problem", "mode")}  # the floors' cache key
    low = floor(graph, name, mode, deadline=deadline, **options)
    if low is None or not low.peak <= budget * (1 + 1e-9) + 1e-12:
        return None
    tried.append({"solver": name, "mode": low.mode, "planning_budget": "floor", "simulated_peak": low.peak,
                  "recompute_cost": low.recompute_cost, "fits": True, "seconds": low.solve_seconds})
    # a plan that fits, not auto's floor (``stats["floor"]``: planned because no plan fits); a copy: floors are cached
    stats = {k: v for k, v in low.stats.items() if k != "floor"}
    return dataclasses.replace(low, budget=budget, stats={**stats, "from_floor": True})


def _installed(name: str) -> bool:
    try:
        get(name)
    except ValueError:
        return False
    return True


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
