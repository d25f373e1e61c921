"""The rest of seeds 002 and 004: chen-drop-cheap(-sqrt, -greedy) (seed 002 §4.2), chen-recursive
(§4.4) and kumar-path (seed 004 §5).

Golden answers on hand-sized graphs (schedules, kept sets, peaks worked out step by step in the
comments), every schedule accepted by remat.simulate on random DAGs, and the complexity claims
on generated chains: §4.4's memory grows by about log2 n, its extra work by about n log2 n.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import remat
from remat import schedule, solvers
from remat.graph import Graph
from remat.joint import joint_graph
from remat.simulate import simulate_sequence, simulate_training
from remat.solvers import chen_drop, chen_recursive, kumar_path
from remat.solvers.twremat import undirected
import bench_scripts
from strategies import dags, figure1

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def conv_bn_relu(blocks: int, fc: bool = True, mem: float = 4) -> Graph:
    """c1 -> b1 -> r1 -> c2 -> ... (conv cost 10, the rest 1), then a linear layer of size 1."""
    g = Graph(name="cbr")
    prev: list[str] = []
    for i in range(1, blocks + 1):
        g.add_node(f"c{i}", mem, 10, prev, op="convolution.default")
        g.add_node(f"b{i}", mem, 1, [f"c{i}"], op="_native_batch_norm_legit_functional.default")
        g.add_node(f"r{i}", mem, 1, [f"b{i}"], op="relu.default")
        prev = [f"r{i}"]
    if fc:
        g.add_node("fc", 1, 10, prev, op="addmm.default")
    return g


# ---- chen-drop-cheap: classification ---------------------------------------------------------------
def test_op_names_decide_where_they_are_known():
    cheap = ["relu.default", "native_batch_norm.default", "_native_batch_norm_legit_functional.default",
             "max_pool2d_with_indices.default", "avg_pool2d", "batchnorm", "maxpool", "gelu", "native_layer_norm"]
    expensive = ["convolution.default", "addmm.default", "mm", "bmm.default", "conv", "linear",
                 "_scaled_dot_product_flash_attention.default"]
    assert all(chen_drop.op_kind(o) == "cheap" for o in cheap)
    assert all(chen_drop.op_kind(o) == "expensive" for o in expensive)
    assert chen_drop.op_kind("add.Tensor") is None and chen_drop.op_kind(None) is None


def test_cost_per_byte_decides_elsewhere():
    # T(V)/M(V) = 22/10 = 2.2 per unit; a and c have 10 per unit, b and d 0.25
    g = Graph(name="abstract")
    g.add_node("a", 1, 10)
    g.add_node("b", 4, 1, ["a"])
    g.add_node("c", 1, 10, ["b"], op="relu")     # op name wins: cheap although dense
    g.add_node("d", 4, 1, ["c"], op="conv")      # op name wins: expensive although sparse
    g.add_node("z", 0, 0, ["d"])                 # zero size: never dropped
    assert chen_drop.cheap_nodes(g) == {"b", "c"}
    assert chen_drop.cheap_nodes(g, ops=False) == {"b", "d"}
    assert chen_drop.cheap_nodes(g, threshold=0, ops=False) == set()


# ---- chen-drop-cheap: golden plans ------------------------------------------------------------------
def test_drop_cheap_on_two_conv_bn_relu_blocks_by_hand():
    g = conv_bn_relu(2)  # sizes 4, fc 1
    plan = solvers.get("chen-drop-cheap").fn(g, None)
    assert plan.kept == ["c1", "c2", "fc"]
    bwd = plan.schedule[plan.schedule.index(("fwd", "fc")) + 2:]  # after the forward's last free
    assert bwd == [("fwd", "b2"), ("fwd", "r2"), ("bwd", "fc"), ("bwd", "r2"), ("bwd", "b2"),
                   ("fwd", "b1"), ("fwd", "r1"), ("bwd", "c2"), ("bwd", "r1"), ("bwd", "b1"), ("bwd", "c1")]
    # Peak 24 at bwd r2: live c1 c2 b2 r2 (16) + gradient of r2 (4) + its contribution to b2 (4);
    # again at bwd c2: c1 c2 b1 r1 + g_c2 + contribution to r1. The forward holds at most 16
    # (c1 c2 b2 r2), bwd fc 17 + 5. Vanilla: all six values (24) at bwd r2, + 4 + 4 = 32.
    assert plan.peak == 24 and plan.recompute_cost == 4 and plan.feasible
    assert remat.solve(g, None, solver="none").peak == 32
    assert remat.solve(g, 23, solver="chen-drop-cheap").feasible is False


def test_single_value_cuts():
    g = Graph(name="cuts")
    for v, ins in [("a", []), ("b", ["a"]), ("c", ["b"]), ("d", ["c", "b"]), ("e", ["d"]), ("f", ["e"])]:
        g.add_node(v, 1, 1, ins)
    # after b: b is read later (c, d) but a is not; after c: b is still read by d
    assert chen_drop.single_cuts(g) == [True, True, False, True, True, False]


def test_drop_cheap_within_sqrt_segments_by_hand():
    g = conv_bn_relu(2, fc=False, mem=1)
    plan = remat.solve(g, None, solver="chen-drop-cheap-sqrt")
    # sqrt(6) -> 2 segments, cut after r1 (the candidate nearest 6/2); r1 is the boundary.
    # Stage 2's cheap values are recomputed for its backward, stage 1 first recomputes its conv,
    # then b1 for bwd r1 (r1 itself is kept).
    assert plan.schedule == [("fwd", v) for v in ("c1", "b1", "r1", "c2", "b2", "r2", "b2", "r2")] + [
        ("bwd", "r2"), ("bwd", "b2"), ("bwd", "c2"), ("fwd", "c1"), ("fwd", "b1"),
        ("bwd", "r1"), ("bwd", "b1"), ("bwd", "c1")]
    # Peak at bwd r2: r1 c2 b2 r2 (4) + seed + contribution to b2 = 6; vanilla: 6 + 2 = 8.
    assert plan.peak == 6 and plan.recompute_cost == 1 + 1 + 10 + 1
    assert plan.kept == ["r1", "c2"]
    assert remat.solve(g, None, solver="none").peak == 8


def test_greedy_candidates_include_the_unsegmented_plan_and_respect_the_budget():
    g = conv_bn_relu(12)
    alone = remat.solve(g, None, solver="chen-drop-cheap")
    least = remat.solve(g, None, solver="chen-drop-cheap-greedy")
    assert least.peak <= alone.peak and least.peak in least.stats["grid_peaks"]
    assert alone.peak in least.stats["grid_peaks"]
    # at the unsegmented plan's peak the greedy rule takes the least recompute that fits: it
    roomy = remat.solve(g, alone.peak, solver="chen-drop-cheap-greedy")
    assert roomy.feasible and roomy.recompute_cost == alone.recompute_cost
    assert not remat.solve(g, least.peak - 1, solver="chen-drop-cheap-greedy").feasible


def test_chains_of_dropped_nodes_are_bounded():
    # a residual path of cheap adds: r_i = relu(c_i + r_{i-1}); unbounded, recomputing r_10 needs
    # r_9, ..., r_1; with max_chain=3 every third node of the path is kept
    g = Graph(name="skips")
    g.add_node("x", 1, 10, op="conv")
    prev = "x"
    for i in range(1, 11):
        g.add_node(f"c{i}", 1, 10, [prev], op="conv")
        g.add_node(f"a{i}", 1, 1, [f"c{i}", prev], op="add")
        prev = f"a{i}"
    assert chen_drop.cheap_nodes(g) == {f"a{i}" for i in range(1, 11)}
    assert chen_drop.cheap_nodes(g, max_chain=3) == {f"a{i}" for i in range(1, 11) if i % 4}
    plan = remat.solve(g, None, solver="chen-drop-cheap")
    peaks = {(t, c): p for t, c, p in plan.stats["rules"]}
    assert plan.peak == min(peaks.values()) and (plan.stats["threshold"], plan.stats["max_chain"]) in peaks
    one = remat.solve(g, None, solver="chen-drop-cheap", threshold=1.0, max_chain=3)
    assert one.stats["rules"] == [[1.0, 3, one.peak]]


def test_drop_cheap_keeps_about_a_third_of_a_deep_conv_bn_relu_chain():
    g = conv_bn_relu(30)
    ratio = remat.solve(g, None, solver="chen-drop-cheap").peak / remat.solve(g, None, solver="none").peak
    assert ratio < 0.4


def test_bad_segments_option_is_named():
    with pytest.raises(ValueError, match="segments must be one of"):
        remat.solve(conv_bn_relu(1), None, solver="chen-drop-cheap", segments="many")


OPS = [None, "convolution.default", "relu.default", "native_batch_norm.default", "add.Tensor", "addmm.default"]


@st.composite
def dags_with_ops(draw):
    g = draw(dags(max_nodes=8))
    h = Graph(name="ops")
    for v in g.order:
        n = g[v]
        h.add_node(v, n.mem, n.cost, n.inputs, op=draw(st.sampled_from(OPS)))
    return h


@FAST
@given(dags_with_ops(), st.sampled_from(["chen-drop-cheap", "chen-drop-cheap-sqrt", "chen-drop-cheap-greedy"]),
       st.sampled_from([0.0, 0.5, 1.0, 3.0]))
def test_drop_cheap_schedules_simulate_on_random_dags(g, solver, threshold):
    plan = remat.solve(g, None, solver=solver, threshold=threshold)
    sim = remat.simulate(g, plan)  # raises on an invalid schedule or a node never back-propagated
    assert plan.feasible and plan.peak == sim.peak and plan.recompute_cost == sim.recompute_cost
    assert schedule.executable(g, plan.schedule) is not None
    cheap = chen_drop.cheap_nodes(g, threshold, max_chain=plan.stats["max_chain"])
    assert cheap <= chen_drop.cheap_nodes(g, threshold)  # bounding chains only keeps more
    recomputed = {v for v in g.order if [s for s in plan.schedule if s == ("fwd", v)][1:]}
    if solver == "chen-drop-cheap":  # m(v) = 1 for cheap nodes, 0 for the rest
        assert recomputed <= cheap and set(plan.kept) == set(g.order) - cheap


# ---- chen-recursive ----------------------------------------------------------------------------------
def test_recursion_on_a_chain_of_four_by_hand():
    plan = remat.solve(Graph.chain(4), None, solver="chen-recursive")
    # k=1: store x2 (half the memory), drop x1; the right half stores x3; x4 is computed once.
    assert plan.schedule == [("fwd", "x1"), ("fwd", "x2"), ("fwd", "x3"), ("fwd", "x4"), ("bwd", "x4"),
                             ("bwd", "x3"), ("fwd", "x1"), ("bwd", "x2"), ("bwd", "x1")]
    # bwd x4: x2 x3 x4 + seed + contribution to x3 = 5 (vanilla: 4 + 2 = 6)
    assert plan.peak == 5 and plan.recompute_cost == 1 and plan.kept == ["x2", "x3", "x4"]


def test_two_levels_are_chens_sqrt_segments():
    g = Graph.chain(9)
    plan = remat.solve(g, None, solver="chen-recursive", levels=2)
    stages = [[f"x{i}" for i in range(a, a + 3)] for a in (1, 4, 7)]
    canonical = simulate_training(g, schedule.from_stages(g, stages))
    assert plan.recompute_cost == canonical.recompute_cost == 4  # x1 x2 x4 x5
    assert plan.peak == canonical.peak


def test_one_level_is_the_vanilla_step():
    g = conv_bn_relu(3)
    plan = remat.solve(g, None, solver="chen-recursive", levels=1)
    assert plan.schedule == schedule.vanilla(g) and plan.recompute_cost == 0


@FAST
@given(dags(max_nodes=9), st.sampled_from([("k", 1), ("k", 2), ("k", 3), ("levels", 2), ("levels", 3)]))
def test_recursive_schedules_simulate_on_random_dags(g, option):
    plan = remat.solve(g, None, solver="chen-recursive", **dict([option]))
    sim = remat.simulate(g, plan)
    assert plan.peak == sim.peak and plan.recompute_cost == sim.recompute_cost
    assert [v for kind, v in plan.schedule if kind == "bwd"] == list(reversed(g.order))
    assert schedule.executable(g, plan.schedule) is not None  # the runtime follows it as planned


@FAST
@given(dags(max_nodes=8), st.integers(0, 6))
def test_recursive_budget_takes_the_least_recompute_that_fits(g, pick):
    points = [(p.peak, p.recompute_cost) for rule in chen_drop.cut_rules(g, "search")
              for p in (solvers.get("chen-recursive").fn(g, None, levels=L, cuts=rule)
                        for L in range(1, chen_recursive.max_levels(g) + 1))]
    budget = sorted(p for p, _ in points)[min(pick, len(points) - 1)]
    plan = solvers.get("chen-recursive").fn(g, budget)
    assert plan.feasible and plan.peak <= budget
    assert plan.recompute_cost == min(r for p, r in points if p <= budget)
    assert not solvers.get("chen-recursive").fn(g, min(p for p, _ in points) - 0.5).feasible


def two_layer_rnn(n: int) -> Graph:
    """a_i -> a_{i+1}, b_i reads a_i and b_{i-1}: every cut keeps two values."""
    g = Graph(name="rnn")
    for i in range(1, n + 1):
        g.add_node(f"a{i}", 1, 1, [f"a{i-1}"] if i > 1 else [])
        g.add_node(f"b{i}", 1, 1, [f"a{i}", *([f"b{i-1}"] if i > 1 else [])])
    return g


def test_recursion_cuts_where_several_values_cross():
    g = two_layer_rnn(100)
    assert not any(chen_drop.single_cuts(g)[2:])  # only after a1 (b1 not yet there)
    assert sum(chen_drop.minima_cuts(g)) >= 99
    single = remat.solve(g, None, solver="chen-recursive", cuts="single")
    plan = remat.solve(g, None, solver="chen-recursive")
    assert plan.stats["cuts"] == "minima" and plan.peak < single.peak / 5
    # each level stores both states at its cut: about 2 log2(100) values (vanilla: 200 + 2)
    assert plan.peak <= 2 * math.log2(100) + 6


def test_recursion_memory_grows_by_log_n_and_work_by_n_log_n():
    small = remat.solve(Graph.chain(100), None, solver="chen-recursive")
    large = remat.solve(Graph.chain(1000), None, solver="chen-recursive")
    # g(n) = log2 n: ten times the nodes add log2(10) = 3.3 stored values (vanilla adds 900)
    assert 1 <= large.peak - small.peak <= math.log2(10) + 1
    assert large.peak <= 15
    # extra work n (a + b log2 n) with b = 1/2 for k = 1: per node it grows by about 1.7 forwards
    per_node = large.recompute_cost / 1000 - small.recompute_cost / 100
    assert 0.5 * math.log2(10) - 0.6 <= per_node <= 0.5 * math.log2(10) + 0.6
    assert large.stats["max_mirror_count"] > small.stats["max_mirror_count"] > 1


def test_bad_recursion_options_are_named():
    with pytest.raises(ValueError, match="k must be"):
        remat.solve(Graph.chain(3), None, solver="chen-recursive", k=0)
    with pytest.raises(ValueError, match="not both"):
        remat.solve(Graph.chain(3), None, solver="chen-recursive", k=1, levels=2)
    with pytest.raises(ValueError, match="cuts must be one of"):
        remat.solve(Graph.chain(3), None, solver="chen-recursive", cuts="anywhere")


def test_pinned_values_are_never_recomputed():
    # graph.pinned (set by capture for random ops the runtime cannot replay): never recomputed
    g = conv_bn_relu(4)
    g.pinned = frozenset({"r2", "b3"})
    for solver in ("chen-drop-cheap", "chen-drop-cheap-sqrt", "chen-drop-cheap-greedy", "chen-recursive"):
        plan = remat.solve(g, None, solver=solver)
        fwd = [v for kind, v in plan.schedule if kind == "fwd"]
        assert fwd.count("r2") == fwd.count("b3") == 1, solver
        remat.simulate(g, plan)


# ---- kumar-path ----------------------------------------------------------------------------------------
def test_kumar_path_on_figure1_by_hand():
    g = figure1()
    pd, order, widths = kumar_path.decomposition(g, "E")
    # the spine adds nothing here (A-B, B-C, C-D, D-E are edges); the topological layout holds A
    # B C D at position 3 (width 3); breadth-first from E lays out E A D B C: width 2
    assert order == list("ABCDE") and widths["topological"] == [3, 3]
    assert pd.layout == "bfs-final" and pd.width == 2
    assert pd.bags() == [frozenset("EAD"), frozenset("ADB"), frozenset("DBC")]
    # E's bag X_0 leaves the other two on one side (2 <= 2/3 of 3 bags): it is the separator;
    # D's inputs B and C are computed in the right side, then D, then E: NoRemat's order, M = 4
    plan = remat.solve(g, None, solver="kumar-path", problem="schedule", final="E")
    assert plan.schedule == list("ABCDE") and plan.peak == 4
    assert plan.stats["separators_from_last_node"] == 2


def with_final(g: Graph) -> tuple[Graph, str]:
    h = Graph.from_json(g.to_json())
    h.add_node("f", 1, 1, g.sinks)
    return h, "f"


@FAST
@given(dags(max_nodes=10), st.sampled_from([1, 2, 1000]))
def test_kumar_path_schedules_are_valid_on_random_dags(g, k):
    g, f = with_final(g)
    plan = remat.solve(g, None, solver="kumar-path", problem="schedule", final=f, k=k)
    seq, seen = plan.schedule, set()
    for v in seq:  # seed 004 §2: every node after all of its inputs, f computed
        assert set(g[v].inputs) <= seen
        seen.add(v)
    assert seq[-1] == f and plan.peak == simulate_sequence(g, seq, f).peak
    pd, order, _ = kumar_path.decomposition(g, f)
    bags = pd.bags()
    assert set().union(*bags) == set(g.order)
    spined = kumar_path.spined(g, order)
    assert all(any(u in b and v in b for b in bags) for u in spined for v in spined[u])
    assert all(pd.lo[v] <= pd.hi[v] for v in g.order)
    assert order[-1] == f
    assert all(order.index(u) < order.index(v) for v in g.order for u in g[v].inputs)


@FAST
@given(dags(max_nodes=9))
def test_kumar_path_training_plans_simulate(g):
    plan = remat.solve(g, None, solver="kumar-path")
    sim = remat.simulate(g, plan)
    assert plan.feasible and plan.peak == sim.peak and plan.recompute_cost == sim.recompute_cost
    assert remat.solve(g, plan.peak, solver="kumar-path").feasible


def test_kumar_path_on_joint_chains_is_logarithmic_like_twremat():
    peaks = {}
    for n in (100, 1000):
        j, end = joint_graph(Graph.chain(n))
        plan = remat.solve(j, None, solver="kumar-path", problem="schedule", final=end)
        assert plan.stats["pathwidth"] <= 3 and plan.stats["recursion_depth"] <= 2 * math.log2(2 * n)
        peaks[n] = plan.peak
    assert peaks[1000] <= 1.5 * peaks[100] and peaks[1000] < 20


def test_hubs_are_laid_out_first():
    j, end = joint_graph(Graph.chain(40))
    j.add_node("hub", 1, 1, [v for v in j.order if v.startswith("b:")])
    adj = undirected(j)
    assert kumar_path.hubs(adj) == {"hub"}


# ---- smoke runs of the benchmarks ------------------------------------------------------------------
def test_bench_chen_recursive_smoke(tmp_path):
    bench = bench_scripts.load("bench_chen_recursive")
    rows = [bench.measure(n, 1) for n in (50, 100, 200)]
    summary = [bench.fits(rows, 1)]
    assert 0.5 < summary[0]["peak_vs_log2n"]["b"] < 2
    bench.plot(rows, summary, tmp_path / "r.png")
    assert (tmp_path / "r.png").stat().st_size > 0


def test_bench_kumar_path_smoke():
    bench = bench_scripts.load("bench_kumar_path")
    row = bench.compare(bench.ladder(6), "ladder")
    assert {"twremat", "kumar-path", "none"} <= set(row["schedule"])
    assert row["schedule"]["none"]["relative_length"] == 1


def test_bench_chen_figures_strategies_smoke():
    bench = bench_scripts.load("bench_chen_figures")
    row = bench.strategies(conv_bn_relu(6), sublinear=True)
    assert row["no_optimization"] > row["sharing"] > row["drop_bn_relu"] > 0
    assert row["sublinear"] < row["sharing"]

