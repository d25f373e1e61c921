"""The frontier (DESIGN.md): per-block solvers on graphs with module paths, coarsening, time
limits (auto, dp, milp), and auto never costlier than any candidate, on random DAGs and on a
captured Hugging Face Llama at 90/70/50% of its vanilla peak."""

import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import remat
from remat import canonical, schedule, simulate, solvers
from remat.coarsen import Coarsening, expensive
from remat.lowerset import Poset
from remat.solvers import auto, blocks, dp
from remat.solvers.selective import predict
from strategies import dags, residual

SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def layered(n: int = 3) -> remat.Graph:
    """embed -> n blocks 'model.layers.i' [norm -> up (mm) -> act -> down (mm) -> res = prev + down]
    -> head (mm) -> loss, with module paths as a capture records them."""
    g = remat.Graph(name="layered")
    g.add_node("embed", 2, 1, op="embedding", module="model.embed_tokens")
    prev = "embed"
    for i in range(n):
        m = f"model.layers.{i}"
        g.add_node(f"ln{i}", 2, 2, [prev], op="mul", module=f"{m}.norm")
        g.add_node(f"up{i}", 4, 100, [f"ln{i}"], op="mm", module=f"{m}.mlp.up_proj")
        g.add_node(f"act{i}", 4, 4, [f"up{i}"], op="silu", module=f"{m}.mlp.act_fn")
        g.add_node(f"down{i}", 2, 100, [f"act{i}"], op="mm", module=f"{m}.mlp.down_proj")
        g.add_node(f"res{i}", 2, 2, [prev, f"down{i}"], op="add", module=m, bwd_uses=[])
        prev = f"res{i}"
    g.add_node("head", 4, 100, [prev], op="mm", module="lm_head")
    g.add_node("loss", 1, 1, ["head"], op="nll_loss_forward", bwd_uses=["head"])
    return g


def vanilla_peak(g: remat.Graph) -> float:
    return simulate(g, schedule.vanilla(g)).peak


# ---- Node.module and per-block checkpointing ---------------------------------------------------

def test_module_paths_round_trip_through_json():
    g = layered(2)
    back = remat.Graph.from_json(g.to_json())
    assert [back[v].module for v in back.order] == [g[v].module for v in g.order]
    assert back["act1"].module == "model.layers.1.mlp.act_fn" and back["loss"].module is None
    assert "module" not in remat.Graph.chain(2).to_json()["nodes"][0]


def test_blocks_are_the_most_repeated_module_prefix():
    prefix, found, block_of = blocks.find_blocks(layered(3))
    assert prefix == "model.layers" and found == ["model.layers.0", "model.layers.1", "model.layers.2"]
    assert block_of["act1"] == "model.layers.1" and "embed" not in block_of and "head" not in block_of


def test_checkpointing_every_block_keeps_block_outputs_and_values_outside():
    g = layered(3)
    plan = remat.solve(g, 26, solver="blocks")  # the untrimmed plan fits: the cheaper one is taken
    assert plan.kept == ["embed", "res0", "res1", "res2", "head"]
    assert plan.stats["checkpointed"] == 3 and plan.stats["trimmed"] == []
    # each block is recomputed once, but for the value it hands on (res_i)
    assert plan.recompute_cost == 3 * (2 + 100 + 4 + 100)
    assert plan.peak == simulate(g, plan).peak == 26
    sel = remat.solve(g, 36, solver="blocks-selective")
    assert sel.kept == ["embed", "up0", "down0", "res0", "up1", "down1", "res1", "up2", "down2", "res2", "head"]
    assert sel.recompute_cost == 3 * (2 + 4) and sel.peak == 36


def test_checkpointing_every_block_trims_cheap_values_outside_the_blocks():
    # budget=None: the lower peak; the embedding (no matmul behind it) is recomputed in block 0's
    # backward rather than held through the head's; the head (a matmul) stays kept
    g = layered(3)
    assert blocks.trim_outside(g, {"embed", "res0", "res1", "res2", "head"}, blocks.find_blocks(g)[2]) == (
        {"res0", "res1", "res2", "head"}, ["embed"])
    plan = remat.solve(g, None, solver="blocks")
    assert plan.kept == ["res0", "res1", "res2", "head"] and plan.stats["trimmed"] == ["embed"]
    assert plan.recompute_cost == 3 * (2 + 100 + 4 + 100) + 1
    assert plan.peak == simulate(g, plan).peak == 24
    sel = remat.solve(g, None, solver="blocks-selective")
    assert sel.kept == ["up0", "down0", "res0", "up1", "down1", "res1", "up2", "down2", "res2", "head"]
    assert sel.recompute_cost == 3 * (2 + 4) + 1 and sel.peak == 34
    assert remat.solve(g, 25, solver="blocks").stats["trimmed"] == ["embed"]


@pytest.mark.parametrize("budget, checkpointed", [(54, 0), (44, 1), (30, 2), (26, 3), (24, 3)])
def test_blocks_checkpoints_the_fewest_first_blocks_that_fit(budget, checkpointed):
    plan = remat.solve(layered(3), budget, solver="blocks")
    assert plan.feasible and plan.stats["checkpointed"] == checkpointed and plan.peak <= budget


def test_blocks_below_its_floor_is_infeasible_and_min_budget_says_where():
    g = layered(3)
    assert remat.min_budget(g, solver="blocks") == 24
    assert remat.min_budget(g, solver="blocks-selective") == 34
    assert not remat.solve(g, 23, solver="blocks").feasible


def test_blocks_refuses_graphs_without_module_paths_and_auto_skips_it():
    g = residual(4)
    with pytest.raises(ValueError, match="no module paths"):
        remat.solve(g, None, solver="blocks")
    plan = remat.solve(g, 0.8 * vanilla_peak(g), solver="auto")
    assert plan.feasible and "blocks" in plan.stats["skipped"]


# ---- coarsening ---------------------------------------------------------------------------------

def test_coarsening_fuses_cheap_chains_into_their_output():
    g = layered(2)
    c = Coarsening.of(g)
    assert c.groups["up0"] == ("ln0", "up0")  # the norm feeds only the matmul
    assert c.groups["down0"] == ("act0", "down0")  # so does the activation
    assert "act0" not in c.groups  # up0 is a matmul: the chain stops there
    assert c.groups["head"] == ("res1", "head")  # the last residual feeds only the head
    assert c.group_of["ln0"] == "up0" and len(c) == len(g) - 5
    assert c.expand_kept(["up0"]) == {"ln0", "up0"}  # the matmul's backward reads ln0
    assert c.expand_stages([["up0"], ["down0"]]) == [["ln0", "up0"], ["act0", "down0"]]
    assert expensive(g, "up0") and not expensive(g, "act0")


@SETTINGS
@given(g=dags(max_nodes=9))
def test_groups_are_chains_that_partition_the_graph(g):
    c = Coarsening.of(g)
    assert sorted(u for grp in c.groups.values() for u in grp) == sorted(g.order)
    for out, grp in c.groups.items():
        assert grp[-1] == out
        for a, b in zip(grp, grp[1:]):
            assert g.succ[a] == (b,) and g[b].inputs == (a,)
    # a kept group recomputes none of its own members
    kept = c.outputs[::2]
    full = c.expand_kept(kept)
    assert set(kept) <= full <= set(g.order)
    steps = schedule.from_kept(g, full)
    recomputed = {v for v in g.order if [s for s in steps if s == ("fwd", v)][1:]}
    assert not recomputed & {u for out in kept for u in c.groups[out]}


@SETTINGS
@given(g=dags(max_nodes=9), frac=st.floats(0.3, 1.2))
def test_dp_on_the_coarse_family_gives_canonical_plans_of_the_full_graph(g, frac):
    budget = round(frac * vanilla_peak(g))
    plan = dp.solve_approx(g, budget, coarsen=True)
    if not plan.feasible:
        return
    p = Poset.of(g)
    canonical.check_sequence(p, canonical.lowers_of_stages(p, plan.stages))
    assert plan.peak == pytest.approx(canonical.peak(g, plan.stages)) and plan.peak <= budget
    assert simulate(g, plan).recompute_cost == pytest.approx(plan.recompute_cost)
    exact = dp.solve_approx(g, budget, coarsen=False, resolution=0.0)
    assert exact.feasible and exact.stats["eq1_overhead"] <= plan.stats["eq1_overhead"] + 1e-9


# ---- time limits --------------------------------------------------------------------------------

def test_dp_time_limit_coarsens_and_says_so():
    g = residual(30)
    plan = remat.solve(g, 0.5 * vanilla_peak(g), solver="dp-approx", time_limit=1e-9)
    assert "cut_short" in plan.stats and plan.feasible
    assert plan.stats["solver_peak"] == pytest.approx(canonical.peak(g, plan.stages))
    assert plan.peak == simulate(g, plan).peak <= 0.5 * vanilla_peak(g)


def test_auto_time_limit_returns_the_best_so_far():
    g = residual(8)
    plan = remat.solve(g, 0.6 * vanilla_peak(g), solver="auto", time_limit=1e-6)
    cut = plan.stats["cut_short"]
    assert any("not run" in why for why in cut.values())
    if plan.feasible:
        assert simulate(g, plan).peak == plan.peak <= 0.6 * vanilla_peak(g)


def test_isolated_calls_are_stopped_at_their_time_limit():
    started = time.perf_counter()
    with pytest.raises(auto._TimedOut):
        auto.isolated(time.sleep, (30,), {}, 0.2, "sleep")
    assert time.perf_counter() - started < 10
    assert auto.isolated(sum, ([1, 2, 3],), {}, 10) == 6
    with pytest.raises(ValueError, match="boom"):
        auto.isolated(_raise, (), {}, 10)


def _raise():
    raise ValueError("boom")


def test_milp_reports_its_bound_and_gap():
    g = residual(3)
    plan = remat.solve(g, 0.7 * vanilla_peak(g), solver="milp", time_limit=30)
    assert plan.status == "optimal"
    assert plan.stats["bound"] <= plan.recompute_cost + 1e-6 and plan.stats["mip_gap"] is not None


# ---- auto is never costlier than a candidate -----------------------------------------------------

def fitting_costs(g: remat.Graph, budget: float, names: list[str]) -> dict[str, float]:
    """Each solver's plan at the budget, judged as the runtime executes it, where it fits."""
    out = {}
    for name in names:
        try:
            plan = solvers.get(name).fn(g, budget, mode="time", problem="training")
        except (ValueError, RuntimeError):
            continue
        if plan.schedule:
            _, sim = predict(g, plan)
            if sim.peak <= budget * (1 + 1e-9):
                out[name] = sim.recompute_cost
    return out


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(g=dags(max_nodes=7), frac=st.floats(0.3, 1.0))
def test_auto_is_never_costlier_than_any_candidate(g, frac):
    budget = round(frac * vanilla_peak(g))
    plan = remat.solve(g, budget, solver="auto")
    others = fitting_costs(g, budget, list(auto.default_candidates()))
    if others:
        assert plan.feasible and plan.recompute_cost <= min(others.values()) + 1e-9
        assert simulate(g, plan).peak == plan.peak <= budget


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(g=dags(max_nodes=8), name=st.sampled_from(["dp-approx", "dp-exact"]))
def test_auto_at_a_stage_solvers_least_budget_is_not_costlier_than_its_answer(g, name):
    """At a dp solver's least budget its answer is its floor plan, which comes from a planning
    budget above that budget (eq. (2) is not monotone in what executes); auto takes that plan too."""
    low = remat.min_budget(g, solver=name)
    alone = remat.solve(g, low, solver=name)
    plan = remat.solve(g, low, solver="auto")
    assert alone.feasible and plan.feasible and plan.recompute_cost <= alone.recompute_cost + 1e-9


def test_auto_at_dp_approx_least_budget_on_the_demo_graph():
    """The demo's first rows (seed 003's ResNet-50 at batch 96): auto recomputed 663 units there
    where dp-approx, asked alone, recomputed 445."""
    from remat import zoo

    g = zoo.graph("resnet50", batch=96)
    low = remat.min_budget(g, solver="dp-approx", mode="time")
    alone = remat.solve(g, low, solver="dp-approx")
    plan = remat.solve(g, low, solver="auto")
    assert plan.feasible and plan.recompute_cost <= alone.recompute_cost


def test_auto_on_a_graph_with_module_paths_considers_the_block_solvers():
    g = layered(3)
    for frac in (0.9, 0.7, 0.5):
        budget = frac * vanilla_peak(g)
        plan = remat.solve(g, budget, solver="auto")
        others = fitting_costs(g, budget, list(auto.default_candidates()))
        assert {"blocks", "blocks-selective"} & {t["solver"] for t in plan.stats["tried"]}
        assert plan.recompute_cost <= min(others.values()) + 1e-9


def tiny_llama(layers: int):
    """A Hugging Face Llama from a tiny config, with default arguments, and its input ids."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16)
    return transformers.LlamaForCausalLM(cfg), torch.randint(0, cfg.vocab_size, (2, 16))


@pytest.fixture(scope="module")
def llama_graph():
    model, ids = tiny_llama(2)
    return remat.capture(model, {"input_ids": ids, "use_cache": False})


@pytest.mark.parametrize("frac", [0.9, 0.7, 0.5])
def test_auto_leads_the_frontier_on_a_captured_llama(llama_graph, frac):
    g = llama_graph
    budget = frac * vanilla_peak(g)
    plan = remat.solve(g, budget, solver="auto")
    assert plan.feasible and simulate(g, plan).peak == plan.peak <= budget
    names = [n for n in solvers.names("training") if n not in ("auto", "milp", "dp-exhaustive")]
    others = fitting_costs(g, budget, names)
    assert plan.recompute_cost <= min(others.values()) + 1e-9, (plan.stats["chosen"], others)
    if frac == 0.9:  # the selective plan: a few percent of a forward, not a third
        assert plan.recompute_cost <= 0.05 * g.total_cost()


# ---- one auto, on many-layer captured graphs -----------------------------------------------------

@pytest.fixture(scope="module")
def deep_llama_graph():
    """An 8-layer Llama, captured as remat.optimize captures it (joint graph)."""
    model, ids = tiny_llama(8)
    return remat.optimize(model, {"input_ids": ids}, budget="100%", verify=False).graph


def test_auto_plans_a_captured_many_layer_llama_within_its_time_limit(deep_llama_graph):
    g, limit = deep_llama_graph, 5.0
    for frac in (0.9, 0.5):
        budget = frac * vanilla_peak(g)
        plan = remat.solve(g, budget, solver="auto", time_limit=limit)
        assert plan.feasible and simulate(g, plan).peak == plan.peak <= budget
        # every candidate ran, refused the graph, or is named as cut short
        accounted = ({t["solver"] for t in plan.stats["tried"]} | set(plan.stats["skipped"])
                     | set(plan.stats.get("cut_short", {})))
        assert set(auto.default_candidates()) <= accounted
        assert plan.solve_seconds < 3 * limit + 10  # the limit is honoured (the call in flight ends)


def test_optimize_plans_with_the_auto_solver_that_solve_runs():
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 64),
                                torch.nn.GELU(), torch.nn.Linear(64, 4))
    m = remat.optimize(model, torch.randn(32, 16), budget="85%", verify=False)
    assert m.plan.solver == "auto" and m.plan.stats["chosen"] in solvers.names("training")
    tried = {t["solver"] for t in m.plan.stats["tried"]}
    assert {"selective", "dp-approx", "chen-greedy"} <= tried  # auto's candidates, not a list of optimize's own


def test_min_budget_of_auto_is_met_and_every_budget_above_it(deep_llama_graph):
    g = deep_llama_graph
    low = remat.min_budget(g, solver="auto")
    top = vanilla_peak(g)
    assert low < 0.5 * top
    for b in (low, low + 0.1 * (top - low), low + 0.5 * (top - low)):
        plan = remat.solve(g, b, solver="auto")
        assert plan.feasible and plan.peak <= b
    below = remat.solve(g, 0.9 * low, solver="auto")
    if not below.feasible:
        assert f"{low:.0f}" in below.message or "lowest" in below.message
