"""The ``selective`` solver: golden answers on a matmul chain, the shared checker's properties on
random DAGs (plan.peak and plan.feasible are the executed schedule's simulated peak), monotone
recompute cost in the budget, pinned values, and the time limit."""

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import remat
from remat import schedule, simulate
from remat.solvers import selective
from remat.solvers.selective import drop_order, executed, predict
from strategies import dags, residual

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def mlp_chain(layers: int = 4) -> remat.Graph:
    """x -> [mm_i (cost 100) -> act_i (cost 2)] * layers -> head (mm) -> loss; sizes 2 (loss 1)."""
    g = remat.Graph(name="mlp-chain")
    g.add_node("x", 2, 1, op="embedding")
    prev = "x"
    for i in range(1, layers + 1):
        g.add_node(f"mm{i}", 2, 100, [prev], op="mm")
        g.add_node(f"act{i}", 2, 2, [f"mm{i}"], op="silu")
        prev = f"act{i}"
    g.add_node("head", 2, 100, [prev], op="mm")
    g.add_node("loss", 1, 1, ["head"], op="nll_loss_forward", bwd_uses=["head"])
    return g


def vanilla_peak(g: remat.Graph) -> float:
    return simulate(g, schedule.vanilla(g)).peak


def test_keeps_the_matmul_outputs_and_recomputes_the_cheap_ops():
    g = mlp_chain()
    assert vanilla_peak(g) == 24
    plan = remat.solve(g, 16, solver="selective")
    # every matmul output kept; x and act1..3 recomputed (1 + 3 * 2). act4 stays: the first
    # backward step (head's) reads it, so dropping it would not lower the peak
    assert plan.kept == ["mm1", "mm2", "mm3", "mm4", "act4", "head"]
    assert plan.feasible and plan.peak == 16 and plan.recompute_cost == 7
    # keeping only the matmul outputs reaches the same peak at a higher cost
    _, only_mm = executed(g, ["mm1", "mm2", "mm3", "mm4", "head"])
    assert only_mm.peak == 16 and only_mm.recompute_cost == 9


def test_executed_is_remembered_per_graph_and_forgotten_when_it_changes():
    """A kept set judged again is answered from the graph's memo, the same as judged afresh; a caller
    extending the schedule it got changes no later answer; a graph priced another way (``with_costs``)
    or given a node answers afresh."""
    g = mlp_chain()
    kept = ["mm1", "mm2", "mm3", "mm4", "head"]
    steps, sim = executed(g, kept)
    steps.append(("fwd", "x"))  # the caller's own list
    again, sim_again = executed(g, set(kept))
    assert sim_again is sim and again == steps[:-1]
    fresh = schedule.executable(g, schedule.from_kept(g, set(kept)))
    assert again == fresh and simulate(g, fresh).peak == sim.peak == 16 and sim.recompute_cost == 9
    pricier = g.with_costs({"x": 10})
    assert executed(pricier, kept)[1].recompute_cost == 18  # x, recomputed once, now costs 10 instead of 1
    g.add_node("extra", 2, 1, ["head"], op="relu")
    extended, _ = executed(g, kept)
    assert ("fwd", "extra") in extended and ("fwd", "extra") not in again


@pytest.mark.parametrize("budget, kept, cost", [
    (24, ["x", "mm1", "act1", "mm2", "act2", "mm3", "act3", "mm4", "act4", "head"], 0),
    (22, ["mm1", "act1", "mm2", "act2", "mm3", "act3", "mm4", "act4", "head"], 1),
    (20, ["mm1", "mm2", "act2", "mm3", "act3", "mm4", "act4", "head"], 3),
    (14, ["mm2", "mm3", "mm4", "act4", "head"], 107),  # below 16 a matmul output has to go
])
def test_golden_plans_along_the_budget(budget, kept, cost):
    plan = remat.solve(mlp_chain(), budget, solver="selective")
    assert plan.feasible and plan.kept == kept and plan.recompute_cost == cost


def test_drop_order_puts_pointwise_before_matmul():
    g = mlp_chain()
    held, moves = drop_order(g)
    assert held == {"x", "mm1", "act1", "mm2", "act2", "mm3", "act3", "mm4", "act4", "head"}
    dropped = [v for m in moves for v in m.nodes]
    assert set(dropped[:5]) == {"x", "act1", "act2", "act3", "act4"}


def test_below_the_floor_is_an_infeasible_plan_with_a_schedule():
    g = mlp_chain()
    plan = remat.solve(g, 10, solver="selective")
    assert not plan.feasible and plan.schedule and plan.peak > 10
    assert f"smallest budget it can meet is {remat.min_budget(g, solver='selective'):g}" in plan.message


def test_recompute_cost_is_monotone_in_the_budget():
    for g in (mlp_chain(6), residual(6)):
        top = vanilla_peak(g)
        costs = []
        for b in range(int(top), 0, -1):
            plan = remat.solve(g, b, solver="selective")
            if plan.feasible:
                costs.append(plan.recompute_cost)
        assert costs == sorted(costs)


@SETTINGS
@given(g=dags(max_nodes=9), frac=st.floats(0.2, 1.2))
def test_peak_and_feasible_are_the_executed_schedules(g, frac):
    budget = round(frac * vanilla_peak(g))
    plan = remat.solve(g, budget, solver="selective", mode="memory")
    steps, sim = executed(g, plan.kept)
    assert plan.schedule == steps
    assert plan.peak == sim.peak == simulate(g, plan).peak
    assert plan.recompute_cost == sim.recompute_cost
    assert plan.feasible == (sim.peak <= budget)
    assert predict(g, plan)[1].peak == plan.peak  # what the runtime runs is this schedule


@SETTINGS
@given(g=dags(max_nodes=8))
def test_min_budget_is_feasible_and_every_budget_above_it(g):
    low = remat.min_budget(g, solver="selective")
    assert remat.solve(g, low, solver="selective").feasible
    top = vanilla_peak(g)
    for b in range(int(low) + 1, int(top) + 1):
        assert remat.solve(g, b, solver="selective").feasible


def test_pinned_values_are_never_recomputed():
    g = mlp_chain()
    g.pinned = frozenset({"act2"})  # e.g. a dropout draw: capture pins it
    plan = remat.solve(g, 16, solver="selective")
    assert "act2" in plan.kept
    forwards = [v for kind, v in plan.schedule if kind == "fwd"]
    assert forwards.count("act2") == 1


def test_time_limit_returns_a_plan_and_says_what_was_cut_short():
    g = residual(40)
    plan = selective.solve(g, 0.5 * vanilla_peak(g), time_limit=1e-9)
    assert plan.schedule and "cut_short" in plan.stats
    assert plan.feasible == (simulate(g, plan).peak <= 0.5 * vanilla_peak(g))


@SETTINGS
@given(g=dags(max_nodes=9))
def test_a_floor_cut_short_by_its_time_limit_says_so_and_is_still_met(g):
    """``lowest`` with no time left probes one prefix (the longest) and says the floor was cut
    short; that floor is at or above the whole search's, and a plan within it exists."""
    whole, cut = selective.lowest(g), selective.lowest(g, time_limit=0.0)
    assert "cut_short" not in whole.stats
    assert cut.stats["prefix"] == max(selective._probes(len(drop_order(g)[1]), 24))
    assert cut.peak >= whole.peak
    assert ("cut_short" in cut.stats) == (len(selective._probes(len(drop_order(g)[1]), 24)) > 1)
    assert selective.solve(g, cut.peak).feasible


def test_no_budget_recomputes_nothing():
    plan = remat.solve(mlp_chain(), None, solver="selective")
    assert plan.feasible and plan.recompute_cost == 0


# ---- fused code (inductor): moves through fusible values, seeds, a judge --------------------

def loss_head() -> remat.Graph:
    """h -> logits (mm, 4) -> up (fp32 cast, 8) -> lsm (log-softmax, 8) -> loss; the loss's
    backward reads lsm, the matmul's reads h."""
    g = remat.Graph(name="loss-head")
    g.add_node("h", 1, 1, op="embedding")
    g.add_node("logits", 4, 100, ["h"], op="mm", bwd_uses=["h"])
    g.add_node("up", 8, 2, ["logits"], op="convert_element_type", bwd_uses=[])
    g.add_node("lsm", 8, 3, ["up"], op="_log_softmax", bwd_uses=["lsm"])  # its backward reads its output
    g.add_node("loss", 1, 1, ["lsm"], op="nll_loss_forward", bwd_uses=["lsm"])
    return g


def test_a_fused_move_drops_the_fusible_chain_back_to_the_matmul_output():
    g = loss_head()
    _, plain = drop_order(g)
    _, fused = drop_order(g, fusible={"up", "lsm"})
    # unfused, dropping lsm holds up (8 bytes): nothing gained, so lsm's move takes the whole
    # chain back to h, the matmul included
    assert [(m.nodes, m.held) for m in plain if "lsm" in m.nodes] == [(("lsm", "up", "logits"), ())]
    # fused, up is recomputed inside lsm's kernel and the matmul output is held instead: 8 - 4
    lsm = next(m for m in fused if "lsm" in m.nodes)
    assert set(lsm.nodes) == {"lsm", "up"} and lsm.held == ("logits",) and lsm.gain == 4 and lsm.cost == 5


def test_a_judge_decides_feasibility_and_the_peak():
    g = mlp_chain()
    calls = []

    def judge(kept, steps, sim):
        calls.append(len(kept))
        return sim.peak / 2   # as if fused code needed half the simulated memory

    plan = selective.solve(g, 12, judge=judge)
    assert calls and plan.feasible and plan.recompute_cost == 0 and plan.peak == 12
    assert not selective.solve(g, 11, judge=judge).feasible or selective.solve(g, 11, judge=judge).recompute_cost > 0


@SETTINGS
@given(g=dags(max_nodes=9), data=st.data())
def test_an_order_seeded_with_another_plans_kept_set_starts_there_and_stays_executable(g, data):
    start = set(data.draw(st.sets(st.sampled_from(g.order))))
    search = selective._search(g, float("inf"), start=start)
    search.at(0)
    first = search.sims[0][0]
    assert first == selective.kept_of(g, search.held, [], search.again)
    assert executed(g, first)[1].recompute_cost == executed(g, start)[1].recompute_cost  # prefix 0: the seed's plan
    for k in range(len(search.moves) + 1):
        kept = selective.kept_of(g, search.held, search.moves[:k], search.again)
        steps, sim = executed(g, kept)           # a valid schedule (executed asserts its order)
        assert simulate(g, steps).peak == sim.peak
        assert search.at(k).recompute_cost >= search.at(0).recompute_cost  # moves only add recomputation


def test_a_seeded_plan_with_room_keeps_again_what_its_seed_recomputes():
    """Seeded with a plan that recomputes every matmul, at the vanilla peak there is room to keep
    some again: the plan does (the costliest per byte first) and still fits."""
    g = mlp_chain()
    start = {"x"}                                     # recompute the whole chain from its input
    seeded = executed(g, start)[1]
    assert seeded.recompute_cost > 0
    budget = vanilla_peak(g)
    plan = selective.solve(g, budget, start=start)
    assert plan.feasible and plan.peak <= budget
    assert plan.recompute_cost < seeded.recompute_cost and plan.stats["given_back"] > 0


@SETTINGS
@given(g=dags(max_nodes=9), data=st.data())
def test_giving_back_never_leaves_the_budget(g, data):
    start = set(data.draw(st.sets(st.sampled_from(g.order))))
    budget = data.draw(st.floats(0.3, 1.5)) * vanilla_peak(g)
    plan = selective.solve(g, budget, start=start)
    if plan.feasible:
        steps, sim = executed(g, set(plan.kept))
        assert sim.peak == plan.peak <= budget * (1 + 1e-9)


@SETTINGS
@given(g=dags(max_nodes=9), data=st.data())
def test_a_bound_skips_only_passes_that_cannot_get_below_it(g, data):
    """With ``bound`` (the recompute cost of a plan the caller already has) the plan is the
    unbounded one wherever that one recomputes less than the bound, and recomputes no less than
    the bound wherever it does not: the skipped undo and give-back trials could not have mattered."""
    start = data.draw(st.none() | st.sets(st.sampled_from(g.order)).map(set))
    budget = data.draw(st.floats(0.3, 1.5)) * vanilla_peak(g)
    free = selective.solve(g, budget, start=start)
    bound = data.draw(st.floats(0.0, 1.5)) * max(free.recompute_cost, 1.0)
    bounded = selective.solve(g, budget, start=start, bound=bound)
    assert bounded.feasible == free.feasible
    if free.recompute_cost < bound:
        assert bounded.kept == free.kept and bounded.recompute_cost == free.recompute_cost
    else:
        assert bounded.recompute_cost >= bound


def wide_chain() -> remat.Graph:
    """x -> [mm_i (4 bytes, cost 100) -> act_i (1 byte, cost 2)] * 3 -> loss."""
    g = remat.Graph(name="wide-chain")
    g.add_node("x", 1, 1, op="embedding")
    prev = "x"
    for i in (1, 2, 3):
        g.add_node(f"mm{i}", 4, 100, [prev], op="mm")
        g.add_node(f"act{i}", 1, 2, [f"mm{i}"], op="silu")
        prev = f"act{i}"
    g.add_node("loss", 1, 1, [prev], op="sum")
    return g


def test_memory_order_drops_the_largest_values_first():
    g = wide_chain()
    _, by_ratio = drop_order(g)
    _, by_bytes = drop_order(g, mode="memory")
    assert [m.nodes for m in by_ratio[:2]] == [("x",), ("loss",)]
    assert [m.nodes for m in by_bytes[:3]] == [("mm1",), ("mm2",), ("mm3",)]
    assert {m.nodes for m in by_ratio} == {m.nodes for m in by_bytes}


def test_time_order_falls_back_on_the_memory_order_below_its_floor():
    """The time order's prefixes bottom out at 15 (every pointwise value dropped first, then the
    matmul outputs, which need their inputs held); bytes first reach 12."""
    g = wide_chain()
    memory = remat.solve(g, 12, solver="selective", mode="memory")
    assert memory.feasible and memory.peak == 12 and memory.kept == ["act1", "act2", "mm3", "act3", "loss"]
    plan = remat.solve(g, 12, solver="selective")  # mode "time": no prefix of its own order fits
    assert plan.feasible and plan.kept == memory.kept and plan.stats["order"] == "memory"
    above = remat.solve(g, 16, solver="selective")
    assert above.stats["order"] == "time" and above.recompute_cost == 102
    assert remat.min_budget(g, solver="selective") == remat.min_budget(g, solver="selective", mode="memory") == 12



def residual_stream(blocks: int = 6) -> remat.Graph:
    """x0 -> [m_i = mm(x_{i-1}) (cost 100), h_i = relu(m_i), x_i = x_{i-1} + h_i] * blocks -> loss; sizes 4.
    The backward reads each x_{i-1} (the matmul's input) and each h_i (the ReLU's output)."""
    g = remat.Graph(name="residual-stream")
    g.add_node("x0", 4, 1, op="embedding")
    for i in range(1, blocks + 1):
        g.add_node(f"m{i}", 4, 100, [f"x{i - 1}"], op="mm", bwd_uses=[f"x{i - 1}"])
        g.add_node(f"h{i}", 4, 1, [f"m{i}"], op="relu", bwd_uses=[f"h{i}"])
        g.add_node(f"x{i}", 4, 1, [f"x{i - 1}", f"h{i}"], op="add", bwd_uses=[])
    g.add_node("loss", 1, 1, [f"x{blocks}"], op="sum", bwd_uses=[])
    return g


def test_a_chain_limit_keeps_every_third_value_of_the_residual_stream():
    """Each x_i costs one op to recompute (x_0 from nothing, x_i from x_{i-1} and h_i), so the time
    order drops the stream first. Dropped whole, the last matmul's backward remakes x_5 ... x_0 at
    once and every one of them lives on to its own matmul's backward: keeping x_2 and x_5 too is
    lower. With one
    chained value allowed, x_0 goes, and x_1 (remaking x_0 early); x_2 would remake x_1 early from
    x_0: it stays, and so on."""
    g = residual_stream()
    _, unlimited = drop_order(g)
    assert [m.nodes for m in unlimited[:6]] == [(f"x{i}",) for i in range(6)]
    _, limited = drop_order(g, chain_limit=1)
    assert [m.nodes for m in limited[:4]] == [("x0",), ("x1",), ("x3",), ("x4",)]
    assert not {("x2",), ("x5",)} & {m.nodes for m in limited}
    hs = {f"h{i}" for i in range(1, 7)}
    assert executed(g, hs)[1].peak > executed(g, hs | {"x2", "x5"})[1].peak
    longer = residual_stream(9)  # and the floor along the order: lower with two chained values allowed
    assert selective.lowest(longer, chain_limit=2).peak < selective.lowest(longer).peak


def test_selective_chains_meets_a_budget_selective_cannot_and_auto_takes_it():
    """Nine blocks: unlimited, the order's floor is 60; with short chains it is 56. At 56 only the
    limited solver fits, and auto, which runs both, answers with a plan that costs no more."""
    g = residual_stream(9)
    budget = remat.min_budget(g, solver="selective-chains")
    assert budget == 56 < remat.min_budget(g, "selective") == 60
    assert not remat.solve(g, budget, solver="selective").feasible
    limited = remat.solve(g, budget, solver="selective-chains")
    assert limited.feasible and limited.solver == "selective-chains" and simulate(g, limited).peak == limited.peak
    plan = remat.solve(g, budget, solver="auto")
    assert plan.feasible and plan.recompute_cost <= limited.recompute_cost


def test_selective_chains_keeps_the_limit_that_suits_the_streams_length():
    """The best limit grows with the stream, like Chen's sqrt(n) segments: 24 blocks reach 124 with
    chains of 8, against 128 with 4 and 140 with 16; ``selective-chains`` tries ``CHAIN_LIMITS`` and
    meets 124, where a limit of 4 asked for alone does not."""
    g = residual_stream(24)
    floors = {limit: selective.lowest(g, chain_limit=limit).peak for limit in selective.CHAIN_LIMITS}
    assert floors[8] == 124 < floors[4] == 128 < floors[16] == 140
    assert remat.min_budget(g, solver="selective-chains") == 124
    plan = remat.solve(g, 124, solver="selective-chains")
    assert plan.feasible and plan.stats["chain_limit"] == 8 and simulate(g, plan).peak == plan.peak <= 124
    assert not remat.solve(g, 124, solver="selective-chains", chain_limit=4).feasible


def _chain_counts(g: remat.Graph, dropped: set[str]) -> dict[str, int]:
    """From scratch: per dropped value, the most backward-read values its recomputation remakes early in a row."""
    saved = selective.backward_reads(g)
    count: dict[str, int] = {}
    for v in g.order:
        if v in dropped:
            count[v] = max((count[x] + (x in saved) for x in g[v].inputs if x in dropped), default=0)
    return count


@SETTINGS
@given(dags(), st.data())
def test_every_move_of_a_chain_limited_order_stays_within_the_limit(g, data):
    limit = data.draw(st.integers(0, 3))
    fusible = data.draw(st.sets(st.sampled_from(g.order))) if data.draw(st.booleans()) else set()
    mode = data.draw(st.sampled_from(["time", "memory"]))
    _, moves = drop_order(g, fusible, mode=mode, chain_limit=limit)
    dropped: set[str] = set()
    for m in moves:
        dropped.update(m.nodes)
        assert max(_chain_counts(g, dropped).values()) <= limit
    _, free = drop_order(g, fusible, mode=mode)
    assert {v for m in moves for v in m.nodes} <= {v for m in free for v in m.nodes} | set(g.order)
