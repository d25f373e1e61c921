"""``schedule.executable``: a solver's schedule in the form the runtime follows step for step.

Exact cases on hand-sized graphs, and invariants on random DAGs (hypothesis) over every
schedule-producing solver: one forward pass, autograd's backward order, recomputations only
where the runtime has control and only when something reads them, never more recompute cost.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import remat
from remat import Graph, schedule, solvers
from remat.runtime import executed_schedule
from remat.simulate import ScheduleError, simulate_training

from strategies import dags


def chain(n: int) -> Graph:
    g = Graph(name="chain")
    for i in range(n):
        g.add_node(f"x{i}", 1, 1, [f"x{i - 1}"] if i else [])
    return g


def test_a_value_recomputed_twice_stays_recomputed_twice():
    """x1 is recomputed before bwd x3 and again before bwd x2: both recomputations are read."""
    g = chain(4)
    steps = [("fwd", "x0"), ("fwd", "x1"), ("fwd", "x2"), ("fwd", "x3"),
             ("fwd", "x2"), ("bwd", "x3"),
             ("fwd", "x1"), ("bwd", "x2"),
             ("fwd", "x1"), ("bwd", "x1"), ("bwd", "x0")]
    # the first recomputation of x1 is read by nothing before x1 is computed again
    assert schedule.executable(g, steps) == [
        ("fwd", "x0"), ("fwd", "x1"), ("fwd", "x2"), ("fwd", "x3"),
        ("fwd", "x2"), ("bwd", "x3"),
        ("fwd", "x1"), ("bwd", "x2"),
        ("fwd", "x1"), ("bwd", "x1"), ("bwd", "x0")]
    # after bwd x2 nothing reads x2 or x3: recomputing them is dropped, both of them
    useless = steps[:8] + [("fwd", "x2"), ("fwd", "x3")] + steps[8:]
    assert schedule.executable(g, useless) == schedule.executable(g, steps)


def test_forward_recomputation_becomes_one_pass_and_frees_go():
    g = chain(3)
    steps = [("fwd", "x0"), ("fwd", "x1"), ("free", "x0"), ("fwd", "x0"), ("fwd", "x2"), ("free", "x1"),
             ("fwd", "x1"), ("bwd", "x2"), ("bwd", "x1"), ("bwd", "x0")]
    assert schedule.executable(g, steps) == [
        ("fwd", "x0"), ("fwd", "x1"), ("fwd", "x2"), ("fwd", "x1"), ("bwd", "x2"), ("bwd", "x1"), ("bwd", "x0")]


def test_recomputation_moves_past_a_step_that_reads_nothing():
    """c's backward reads nothing (bwd_uses=()): the runtime never gets control there."""
    g = Graph(name="g")
    g.add_node("a", 1, 1)
    g.add_node("b", 1, 1, ["a"])
    g.add_node("c", 1, 1, ["b"], bwd_uses=[])
    g.add_node("d", 1, 1, ["c"])
    steps = [("fwd", "a"), ("fwd", "b"), ("fwd", "c"), ("free", "b"), ("fwd", "d"), ("bwd", "d"),
             ("fwd", "b"), ("bwd", "c"), ("bwd", "b"), ("bwd", "a")]
    assert schedule.executable(g, steps) == [
        ("fwd", "a"), ("fwd", "b"), ("fwd", "c"), ("fwd", "d"), ("bwd", "d"), ("bwd", "c"),
        ("fwd", "b"), ("bwd", "b"), ("bwd", "a")]


def test_another_backward_order_is_not_executable():
    g = Graph(name="fork")
    g.add_node("a", 1, 1)
    g.add_node("b", 1, 1, ["a"])
    g.add_node("c", 1, 1, ["a"])
    fwd = [("fwd", "a"), ("fwd", "b"), ("fwd", "c")]
    assert schedule.executable(g, fwd + [("bwd", "c"), ("bwd", "b"), ("bwd", "a")]) is not None
    assert schedule.executable(g, fwd + [("bwd", "b"), ("bwd", "c"), ("bwd", "a")]) is None
    assert schedule.executable(g, [("fwd", "a"), ("fwd", "b"), ("bwd", "b"), ("fwd", "c"),
                                   ("bwd", "c"), ("bwd", "a")]) is None


def _check_runtime_form(g: Graph, out: list, original: list) -> None:
    order = g.order
    assert out[:len(order)] == [("fwd", v) for v in order]
    tail = out[len(order):]
    assert [v for kind, v in tail if kind == "bwd"] == list(reversed(order))
    assert all(kind in ("fwd", "bwd") for kind, _ in tail)
    for i, (kind, v) in enumerate(tail):
        if kind == "fwd":  # recomputed where the runtime has control, and read before recomputed
            nxt = next(k for k in tail[i:] if k[0] == "bwd")
            assert schedule.triggers(g, nxt[1])
            later = tail[i + 1:]
            end = next((j for j, s in enumerate(later) if s == ("fwd", v)), len(later))
            assert any((k == "fwd" and v in g[w].inputs) or (k == "bwd" and v in g[w].saved)
                       for k, w in later[:end])
    assert simulate_training(g, out).recompute_cost <= simulate_training(g, original).recompute_cost


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(g=dags(min_nodes=2, max_nodes=8), solver=st.sampled_from(["twremat", "dp-exact", "chen-sqrt", "reforward",
                                                                   "greedy"]),
       fraction=st.sampled_from([0.5, 0.7, 1.0]))
def test_every_solver_schedule_lowers_to_a_runnable_schedule(g, solver, fraction):
    vanilla = remat.simulate(g, schedule.vanilla(g)).peak
    plan = remat.solve(g, fraction * vanilla, solver=solver)
    if not plan.schedule:
        return
    out = schedule.executable(g, plan.schedule)
    if out is not None:
        try:
            simulate_training(g, out)
        except ScheduleError:  # only when a non-triggering step reads a moved value
            assert any(not schedule.triggers(g, v) and g[v].saved for v in g.order)
            return
        _check_runtime_form(g, out, plan.schedule)
    chosen = executed_schedule(g, plan)
    lazy = schedule.executable(g, schedule.from_kept(g, plan.kept))
    assert remat.simulate(g, chosen).peak <= remat.simulate(g, lazy).peak
    _check_runtime_form(g, chosen, chosen)


@settings(max_examples=25, deadline=None)
@given(g=dags(min_nodes=2, max_nodes=5, single_sink=True))
def test_milp_schedules_keep_their_peak(g):
    """With one sink that reads every node, milp's schedules (backward order fixed) begin with
    one forward pass; nothing moves (all nodes save their inputs here), so the runtime form has
    their peak or less."""
    vanilla = remat.simulate(g, schedule.vanilla(g)).peak
    plan = solvers.get("milp").fn(g, 0.7 * vanilla, backward_order="fixed", time_limit=20)
    if not plan.feasible:
        return
    out = schedule.executable(g, plan.schedule)
    assert out is not None
    assert remat.simulate(g, out).peak <= remat.simulate(g, plan.schedule).peak
    _check_runtime_form(g, out, plan.schedule)
