"""milp, the yardstick: hand-computed optima, an exhaustive search over every schedule as the
oracle on tiny graphs, and "never worse than any other registered solver" on random DAGs.

The oracle (``brute_force``) is Dijkstra over states (forward values in memory, nodes
back-propagated, nodes computed so far) with the simulator's memory accounting and explicit
frees, so it ranges over *all* valid training schedules, not only milp's class.
"""

import heapq

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import remat
from remat import Graph, judge, solvers
from remat.simulate import simulate
from remat.solvers.milp import min_peak, solve as milp
import bench_scripts
from strategies import dags, skip_block


# ---- the oracle ------------------------------------------------------------------------------

def brute_force(g: Graph, budget: float) -> float | None:
    """Least recompute cost over every schedule whose memory never exceeds budget (None: none).

    Gradients as remat.simulate counts them on graphs without ``grad_alias``: bwd v holds the
    live gradients, a seed mem(v) if no consumer sent v one, and a new contribution mem(u) for
    each input u; contributions then accumulate in place, and v's gradient goes.
    """
    assert not any(g[v].grad_alias for v in g.order), "the oracle models no gradient aliasing"
    order = list(g.order)
    n = len(order)
    bit = {v: 1 << i for i, v in enumerate(order)}
    mem = {v: g[v].mem for v in order}
    rg = {v: g[v].requires_grad for v in order}
    inputs = {v: sum(bit[u] for u in g[v].inputs) for v in order}
    saved = {v: sum(bit[u] for u in g[v].saved) for v in order}
    consumers = {v: sum(bit[w] for w in g.succ[v]) for v in order}
    senders = {v: sum(bit[w] for w in g.succ[v] if rg[w]) if rg[v] else 0 for v in order}
    traffic = {v: (mem[v] * (not senders[v]) + sum(mem[u] for u in g[v].inputs if rg[u])) * rg[v]
               for v in order}
    full = (1 << n) - 1

    def total(mask: int) -> float:
        return sum(mem[v] for v in order if mask & bit[v])

    def grads(done: int) -> float:  # gradients held between backward steps
        return sum(mem[v] for v in order if not done & bit[v] and senders[v] & done)

    start = (0, 0, 0)
    best = {start: 0.0}
    heap = [(0.0, start)]
    while heap:
        cost, state = heapq.heappop(heap)
        if cost > best[state]:
            continue
        live, done, computed = state
        if done == full and computed == full:
            return cost
        moves = []
        for v in order:
            b = bit[v]
            if live & b:
                moves.append((0.0, (live & ~b, done, computed)))
            elif not done & b and inputs[v] & live == inputs[v]:
                if total(live) + mem[v] + grads(done) <= budget:
                    extra = g[v].cost if computed & b else 0.0
                    moves.append((extra, (live | b, done, computed | b)))
            if not done & b and consumers[v] & done == consumers[v] and saved[v] & live == saved[v]:
                if total(live) + grads(done) + traffic[v] <= budget:
                    moves.append((0.0, (live, done | b, computed)))
        for extra, nxt in moves:
            if cost + extra < best.get(nxt, float("inf")):
                best[nxt] = cost + extra
                heapq.heappush(heap, (cost + extra, nxt))
    return None


def check_schedule(g: Graph, plan) -> None:
    sim = simulate(g, plan)
    assert sim.peak <= plan.budget
    assert sim.peak == plan.peak and sim.recompute_cost == plan.recompute_cost
    assert sorted(v for kind, v in plan.schedule if kind == "bwd") == sorted(g.order)


# ---- hand-sized cases ------------------------------------------------------------------------

def chain(costs):
    g = Graph(name="chain")
    for i, c in enumerate(costs, 1):
        g.add_node(f"x{i}", 1, c, [f"x{i-1}"] if i > 1 else [])
    return g


def test_chain_vanilla_budget_needs_no_recomputation():
    # vanilla peak 6: x1..x4 and the gradients of x4 and x3 during bwd x4
    plan = milp(chain([1, 1, 1, 1]), 6)
    assert (plan.status, plan.feasible, plan.recompute_cost, plan.peak) == ("optimal", True, 0, 6)


@pytest.mark.parametrize("costs, dropped", [([1, 5, 1, 1], "x1"), ([5, 1, 1, 1], "x2")])
def test_chain_one_recomputation_of_the_cheaper_value(costs, dropped):
    # budget 5: during bwd x4 one of x1, x2 must be out of memory; recomputing it once suffices
    g = chain(costs)
    plan = milp(g, 5)
    assert plan.status == "optimal" and plan.recompute_cost == 1
    fwds = [v for kind, v in plan.schedule if kind == "fwd"]
    assert fwds.count(dropped) == 2 and len(fwds) == 5
    check_schedule(g, plan)


def test_chain_budget_four_recomputes_x1_twice_and_x2_once():
    # bwd x4 holds x3, x4 and two gradients (4): x1, x2 must go; bwd x3 holds x2, x3 and two
    # gradients: x1 must go again after rebuilding x2, and come back for bwd x2
    g = chain([1, 1, 1, 1])
    plan = milp(g, 4)
    assert plan.status == "optimal" and plan.recompute_cost == 3
    fwds = [v for kind, v in plan.schedule if kind == "fwd"]
    assert (fwds.count("x1"), fwds.count("x2"), fwds.count("x3")) == (3, 2, 1)
    check_schedule(g, plan)


def test_infeasible_budget():
    plan = milp(chain([1, 1, 1, 1]), 3)  # bwd x4 alone needs x3, x4 and two gradients
    assert plan.status == "infeasible" and not plan.feasible and not plan.schedule
    assert "budget 3" in plan.message


def diamond():
    g = Graph(name="diamond")
    g.add_node("a", 2, 3)
    g.add_node("b", 1, 1, ["a"])
    g.add_node("c", 1, 1, ["a"])
    g.add_node("d", 1, 1, ["b", "c"])
    return g


@pytest.mark.parametrize("make", [diamond, skip_block, lambda: chain([2, 1, 3, 1, 2])])
def test_equals_exhaustive_search_at_every_budget(make):
    g = make()
    top = remat.solve(g, None, solver="none").peak
    for budget in range(int(top), 0, -1):
        plan = milp(g, budget, forward_runs=2, warm_start=False)
        best = brute_force(g, budget)
        if best is None:
            assert plan.status == "infeasible" and not plan.feasible
            continue
        assert plan.status == "optimal" and plan.recompute_cost == best
        check_schedule(g, plan)


def test_forward_runs_widen_the_initial_forward_order():
    # backward steps that read little: the only schedules within 10 compute the sources in an
    # order against the topological one, which one forward run cannot express
    g = Graph(name="unread")
    g.add_node("v0", 4, 3, bwd_uses=[])
    g.add_node("v1", 2, 4)
    g.add_node("v2", 2, 3, bwd_uses=[])
    g.add_node("v3", 3, 1, ["v0", "v2"], bwd_uses=[])
    g.add_node("v4", 2, 4, ["v1", "v3"], bwd_uses=["v3"])
    narrow = milp(g, 10, warm_start=False)
    wide = milp(g, 10, forward_runs=2, warm_start=False)
    assert narrow.status == "infeasible" and not narrow.feasible
    assert wide.status == "optimal" and wide.recompute_cost == brute_force(g, 10) == 4
    check_schedule(g, wide)


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="time_limit"):
        milp(chain([1, 1]), 1, time_limit=0)
    with pytest.raises(ValueError, match="backward_order"):
        milp(chain([1, 1]), 1, backward_order="sideways")


def test_unlimited_budget_is_the_vanilla_step():
    g = diamond()
    plan = remat.solve(g, None, solver="milp")
    assert plan.feasible and plan.status == "optimal" and plan.recompute_cost == 0


# ---- random DAGs -----------------------------------------------------------------------------

SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(g=dags(max_nodes=5, max_mem=4, max_cost=4), frac=st.floats(0.3, 1.0))
def test_never_below_the_oracle_and_equal_to_it_with_enough_runs(g, frac):
    budget = round(frac * remat.solve(g, None, solver="none").peak)
    best = brute_force(g, budget)
    plan = milp(g, budget, runs=2, forward_runs=len(g), warm_start=False)
    if best is None:
        assert not plan.feasible and plan.status == "infeasible"
        return
    assert plan.status == "optimal"
    check_schedule(g, plan)
    assert plan.recompute_cost == best


@SETTINGS
@given(g=dags(max_nodes=8), frac=st.floats(0.0, 1.0))
def test_never_worse_than_any_registered_solver(g, frac):
    least, top = min_peak(g).peak, remat.solve(g, None, solver="none").peak
    budget = round(least + frac * (top - least))  # mostly feasible, so the comparison happens
    plan = milp(g, budget, forward_runs=3, warm_start=False)  # the program alone, not auto's help
    fixed = milp(g, budget, backward_order="fixed", forward_runs=3, warm_start=False)
    if plan.status == "optimal":
        check_schedule(g, plan)
    if plan.status == "optimal" and fixed.status == "optimal":
        assert plan.recompute_cost <= fixed.recompute_cost  # fixed order is a special case
    for name in solvers.names("training"):
        if name in ("milp", "auto"):
            continue
        try:
            other = solvers.get(name).fn(g, budget, mode="time", problem="training")
        except ValueError:
            continue  # refuses this graph
        if not other.schedule:
            continue
        sim = simulate(g, other)
        if sim.peak <= budget:
            assert plan.status == "optimal", f"{name} fits budget {budget} but milp says {plan.status}"
            assert plan.recompute_cost <= sim.recompute_cost + 1e-9, name


@SETTINGS
@given(g=dags(max_nodes=5, max_mem=4, max_cost=4))
def test_min_budget_is_the_least_budget_any_schedule_meets(g):
    least = judge.own_min_budget(g, "milp", runs=2, forward_runs=len(g))
    assert brute_force(g, least) is not None and brute_force(g, least - 1) is None
    assert milp(g, least).feasible  # reached by the default class too


def test_bench_smoke(tmp_path):
    """bench/bench_milp.py on one small graph: its rows agree with the oracle."""
    bench = bench_scripts.load("bench_milp")
    g = bench.residual(5)
    rows = bench.bench_graph(g, (0.0, 0.5), time_limit=20)
    assert rows[0]["kind"] == "min_peak" and brute_force(g, rows[0]["peak"] - 1) is None
    for r in rows[1:]:
        assert r["status"] == "optimal" and r["recompute_cost"] == brute_force(g, r["budget"])


@SETTINGS
@given(g=dags(max_nodes=6, max_mem=4, max_cost=4), frac=st.floats(0.0, 1.0))
def test_warm_start_keeps_the_optimum(g, frac):
    least, top = min_peak(g).peak, remat.solve(g, None, solver="none").peak
    budget = round(least + frac * (top - least))
    warm, cold = milp(g, budget), milp(g, budget, warm_start=False)
    assert warm.status == cold.status == "optimal"
    # auto's plan may lie outside milp's class, so warm can only be cheaper, never below all
    assert brute_force(g, budget) <= warm.recompute_cost <= cold.recompute_cost
    check_schedule(g, warm)


@st.composite
def autograd_dags(draw, alias: bool):
    """Random DAGs with captured-graph features: bwd_uses, requires_grad, optionally grad_alias."""
    base = draw(dags(max_nodes=5, max_mem=4, max_cost=4))
    g = Graph(name="autograd")
    for v in base.order:
        n = base[v]
        uses = [u for u in (*n.inputs, v) if draw(st.booleans())]
        grad_alias = [u for u in n.inputs if draw(st.booleans())] if alias else []
        g.add_node(v, n.mem, n.cost, n.inputs, bwd_uses=uses, grad_alias=grad_alias,
                   requires_grad=draw(st.integers(0, 4)) > 0)
    return g


@SETTINGS
@given(g=autograd_dags(alias=False), frac=st.floats(0.0, 1.0))
def test_requires_grad_and_bwd_uses_match_the_oracle(g, frac):
    least = min_peak(g, runs=2, forward_runs=len(g)).peak
    top = remat.solve(g, None, solver="none").peak
    budget = round(least + frac * (top - least))
    plan = milp(g, budget, runs=2, forward_runs=len(g), warm_start=False)
    assert plan.status == "optimal" and plan.recompute_cost == brute_force(g, budget)
    check_schedule(g, plan)


@SETTINGS
@given(g=autograd_dags(alias=True), frac=st.floats(0.0, 1.0))
def test_gradient_aliasing_is_counted_conservatively(g, frac):
    # milp may over-count aliased gradients, never under-count: its plans always fit, and its
    # least peak (its min_budget) is one it meets itself
    least = min_peak(g)
    assert least.stats["simulated_peak"] <= least.peak
    top = remat.solve(g, None, solver="none").peak
    plan = milp(g, least.peak + frac * max(top - least.peak, 0), warm_start=False)
    assert plan.status == "optimal"
    check_schedule(g, plan)
