"""The joint forward+backward graph and the training problem through it (src/remat/joint.py).

Golden: the joint graph of a diamond, node by node. Conversion of sequences to training steps,
including a repeated backward node. Random DAGs (hypothesis): training plans of twremat,
greedy and none built through the joint graph pass remat.simulate with plan.peak its peak.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import remat
from remat import schedule, solvers
from remat.graph import Graph
from remat.joint import joint_graph, joint_to_steps, training_plan
from remat.solvers.greedy import greedy_sequence
from remat.solvers.twremat import twremat_sequence
from remat.simulate import simulate_training
from strategies import dags


def diamond() -> Graph:
    g = Graph(name="diamond")
    g.add_node("a", 1, 1)
    g.add_node("b", 2, 3, ["a"])
    g.add_node("c", 3, 5, ["a"], bwd_uses=["c"])  # backward of c reads only its output
    g.add_node("d", 4, 7, ["b", "c"])
    return g


def as_table(g: Graph) -> dict[str, tuple]:
    return {v: (g[v].mem, g[v].cost, g[v].inputs) for v in g.order}


def test_joint_graph_of_a_diamond():
    j, final = joint_graph(diamond())
    assert final == "end"
    assert as_table(j) == {
        "a": (1, 1, ()),
        "b": (2, 3, ("a",)),
        "c": (3, 5, ("a",)),
        "d": (4, 7, ("b", "c")),
        "b:d": (2 + 3, 14, ("b", "c", "d")),          # a sink: only what it saved
        "b:c": (1, 10, ("c", "b:d")),                 # bwd_uses = [c]
        "b:b": (1, 6, ("a", "b", "b:d")),
        "b:a": (0, 2, ("a", "b:b", "b:c")),           # a source: its inputs are parameters
        "end": (0, 0, ("b:a",)),
    }
    assert j["b:a"].op == "bwd" and j.sinks == ("end",)


def test_end_reads_the_backward_node_of_every_source():
    g = Graph(name="two sources")
    g.add_node("x", 1, 1)
    g.add_node("y", 1, 1)
    g.add_node("z", 1, 1, ["x", "y"])
    j, final = joint_graph(g)
    assert j[final].inputs == ("b:x", "b:y")


def test_joint_graph_rejects_clashing_names():
    g = Graph.chain(2)
    g.add_node("end", 1, 1, ["x2"])
    with pytest.raises(ValueError, match="'end' collides"):
        joint_graph(g)


def test_joint_to_steps_drops_end_and_repeated_backward_nodes():
    seq = ["x1", "x2", "b:x2", "x1", "b:x2", "b:x1", "end"]
    assert joint_to_steps(seq) == [("fwd", "x1"), ("fwd", "x2"), ("bwd", "x2"), ("fwd", "x1"),
                                   ("bwd", "x1")]


def test_a_repeated_backward_node_keeps_its_first_evaluation_and_simulates():
    g = Graph.chain(3)
    j, end = joint_graph(g)
    # b:x3's gradient is dropped and recomputed in the joint schedule; the training step keeps it
    seq = ["x1", "x2", "x3", "b:x3", "x1", "x2", "x3", "b:x3", "b:x2", "b:x1", "end"]
    assert remat.simulate(j, remat.Plan("hand", None, True, seq, problem="schedule",
                                        stats={"final": end})).peak > 0
    steps = joint_to_steps(seq)
    assert [s for s in steps if s[0] == "bwd"] == [("bwd", "x3"), ("bwd", "x2"), ("bwd", "x1")]
    assert simulate_training(g, steps).recompute_cost == 3


def _loss_reading_nothing_back(n: int = 3) -> Graph:
    """A chain whose last value (a mean: its backward reads no forward value) nobody reads."""
    g = Graph.chain(n)
    g.add_node("loss", 1, 1, [f"x{n}"], bwd_uses=[])
    return g


def test_a_loss_back_propagated_before_its_inputs_are_computed_is_computed_first():
    """A sequence may back-propagate a loss whose backward reads nothing before it computes
    anything (TWRemat's did, on a tied-embedding model): autograd back-propagates only what the
    forward ran, so the loss and its inputs are computed right before, and computing them again
    later is recomputation (before: the loss came after its inputs' first computation, after its
    own backward, and the schedule did not simulate)."""
    g = _loss_reading_nothing_back(2)
    seq = ["b:loss", "x1", "x2", "b:x2", "b:x1", "end"]
    steps = joint_to_steps(seq, g)
    assert steps == [("fwd", "x1"), ("fwd", "x2"), ("fwd", "loss"), ("bwd", "loss"), ("fwd", "x1"), ("fwd", "x2"),
                     ("bwd", "x2"), ("bwd", "x1")]
    assert simulate_training(g, steps).recompute_cost == 2


def test_twremat_within_a_budget_on_a_loss_reading_nothing_back_simulates():
    """Its budget search tries every cut-off k on the training step: each schedule converts and
    simulates (before: ScheduleError, 'back-propagates loss, which was never computed')."""
    g = _loss_reading_nothing_back(6)
    vanilla = remat.simulate(g, remat.solve(g, None, solver="none")).peak
    for share in (1.0, 0.7, 0.5, 0.3):
        plan = remat.solve(g, share * vanilla, solver="twremat")
        assert remat.simulate(g, plan).peak == plan.peak


def test_noremat_on_the_joint_graph_is_the_vanilla_step():
    g = diamond()
    j, end = joint_graph(g)
    plan = remat.solve(j, None, solver="none", problem="schedule", final=end)
    assert joint_to_steps(plan.schedule) == schedule.vanilla(g)


@settings(max_examples=40, deadline=None)
@given(dags(max_nodes=9), st.sampled_from(["twremat", "greedy", "none"]))
def test_training_plans_through_the_joint_graph_simulate(g, solver):
    plan = remat.solve(g, None, solver=solver)
    assert plan.problem == "training" and plan.feasible
    sim = remat.simulate(g, plan)  # raises on an invalid schedule
    assert plan.peak == sim.peak and plan.recompute_cost == sim.recompute_cost
    assert sorted(v for k, v in plan.schedule if k == "bwd") == sorted(g.order)


@settings(max_examples=40, deadline=None)
@given(dags(max_nodes=9), st.sampled_from(["twremat", "greedy"]), st.integers(1, 4))
def test_joint_graph_sequences_back_propagate_in_autograd_order(g, solver, k):
    """A sequence of the joint graph built with ``autograd_order`` back-propagates in reverse
    creation order, so the runtime can run it as it is (before: TWRemat's backward order on GPT-2
    differed from autograd's, and its plan ran as its kept set, 0.98 of a forward recomputed where
    the ordered schedule recomputes 0.35 at the same peak)."""
    sequencer = ((lambda j, end: twremat_sequence(j, end, k)) if solver == "twremat"
                 else (lambda j, end: greedy_sequence(j, end)))
    raw = training_plan(g, None, solver, sequencer, 0.0, autograd_order=True)
    assert [v for kind, v in raw.schedule if kind == "bwd"] == list(reversed(g.order))
    assert schedule.executable(g, raw.schedule) is not None


def test_a_pinned_value_is_computed_once_and_held():
    """A value the runtime never recomputes (a generator state) is kept from its one computation
    to its last read, however often the joint sequence evaluates it."""
    g = Graph.chain(12)
    g.pinned = frozenset({"x1"})
    seq = ["x1", "x2", "b:x2", "x1", "b:x1", "end"]
    assert joint_to_steps(seq, Graph.chain(2)) == [("fwd", "x1"), ("fwd", "x2"), ("bwd", "x2"), ("fwd", "x1"),
                                                   ("bwd", "x1")]
    two = Graph.chain(2)
    two.pinned = frozenset({"x1"})
    assert joint_to_steps(seq, two) == [("fwd", "x1"), ("fwd", "x2"), ("bwd", "x2"), ("bwd", "x1")]
    raw = solvers.get("twremat").fn(g, None, problem="training", k=1)
    assert raw.schedule.count(("fwd", "x1")) == 1 and raw.schedule.count(("fwd", "x2")) > 1
    judged = remat.solve(g, None, solver="twremat", k=1)
    assert judged.peak == raw.peak and judged.recompute_cost <= raw.recompute_cost  # runs as planned


@settings(max_examples=20, deadline=None)
@given(dags(max_nodes=9))
def test_training_budget_is_checked_against_the_simulated_peak(g):
    peak = remat.solve(g, None, solver="twremat").peak
    assert remat.solve(g, peak, solver="twremat", k=1).feasible
    assert not remat.solve(g, peak - 0.5, solver="twremat", k=1).feasible


@settings(max_examples=20, deadline=None)
@given(dags(max_nodes=9))
def test_twremat_with_the_vanilla_budget_recomputes_nothing(g):
    # without k, the budget picks the largest cut-off that fits; k above the bag count is
    # NoRemat on the joint graph, i.e. the vanilla step, which fits the vanilla peak
    vanilla = remat.simulate(g, schedule.vanilla(g)).peak
    plan = remat.solve(g, vanilla, solver="twremat")
    assert plan.feasible and plan.recompute_cost == 0 and plan.schedule == schedule.vanilla(g)


def test_twremat_training_plan_on_a_long_chain_beats_vanilla():
    g = Graph.chain(200)
    tw = remat.solve(g, None, solver="twremat")
    vanilla = remat.solve(g, None, solver="none")
    assert tw.peak <= vanilla.peak / 10 and tw.recompute_cost > 0
