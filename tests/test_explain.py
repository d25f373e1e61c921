"""explain: the per-module split adds up to the simulator's timeline, rows account for every byte
and recomputation, the figure renders (PNG, notebook), and ``remat explain`` runs."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings

import models
import remat
from remat import schedule
from remat.explain import (GRADIENTS, OTHER, TOP, Explanation, auto_depth, explain, explain_steps, group,
                           intervals, timeline)
from remat.fit import build_on_meta, trace_graph
from remat.optimize import plan_within, vanilla_peak
from remat.runtime import executed_schedule
from remat.simulate import simulate_training
from strategies import dags, residual

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def cnn():
    """A captured graph with module paths, batch norm (saved_mem) and in-place residual adds."""
    model, inputs = build_on_meta(lambda n: models.build_cnn(batch=n), 4)
    graph = trace_graph(model, inputs, name="SkipCNN")
    choice = plan_within(graph, 0.5 * vanilla_peak(graph), "auto", "time")
    return graph, executed_schedule(graph, choice.plan)


def _covering(graph, steps):
    ivs, grads, total = intervals(graph, steps)
    by_step = [0.0] * len(steps)
    for iv in ivs:
        assert 0 <= iv.first <= iv.last < len(steps) and iv.bytes >= 0
        for k in range(iv.first, iv.last + 1):
            by_step[k] += iv.bytes
    return [a + g for a, g in zip(by_step, grads)], total


@settings(max_examples=60, deadline=None)
@given(dags(max_nodes=8))
def test_intervals_add_up_to_the_simulated_timeline_on_random_graphs(g):
    for steps in (schedule.vanilla(g), executed_schedule(g, set())):
        parts, total = _covering(g, steps)
        assert parts == pytest.approx(total)


def test_intervals_add_up_on_a_captured_graph_and_its_plan(cnn):
    graph, steps = cnn
    for s in (steps, schedule.vanilla(graph)):
        parts, total = _covering(graph, s)
        assert parts == pytest.approx(total)
        assert total == simulate_training(graph, s).timeline


def test_stacked_timeline_is_the_total_and_keeps_the_largest_modules(cnn):
    graph, steps = cnn
    tl = timeline(graph, steps, colour_depth=1, row_depth=2, groups=2)
    assert len(tl.layers) <= 3 and (OTHER in tl.layers) == (len({group(graph[v].module, 1) for v in graph.order}) > 2)
    for k in range(len(steps)):
        assert sum(layer[k] for layer in tl.layers.values()) + tl.gradients[k] == pytest.approx(tl.total[k])
    assert tl.peak == max(tl.total) and tl.total[tl.peak_step] == tl.peak
    assert sum(tl.at_peak.values()) == pytest.approx(tl.peak)


def test_module_paths_and_depth():
    assert auto_depth(["model.layers.0.mlp.up", "model.layers.1.self_attn.q", "lm_head"]) == 4
    assert auto_depth(["layer1.0.conv1", "layer2.1.bn2", "fc"]) == 3
    assert auto_depth(["encoder.conv", "head", None]) == 2
    assert group("model.layers.3.mlp.act_fn", 4) == "model.layers.3.mlp"
    assert group(None, 3) == TOP


def test_rows_account_for_every_byte_and_recomputation(cnn):
    graph, steps = cnn
    exp = explain_steps(graph, steps, depth=2, name="SkipCNN")
    assert sum(r.values for r in exp.rows) == len(graph)
    recomputed = [v for k, (kind, v) in enumerate(steps) if kind == "fwd" and ("fwd", v) in steps[:k]]
    assert sum(r.recomputations for r in exp.rows) == len(recomputed) > 0
    assert sum(r.recomputed for r in exp.rows) == pytest.approx(sum(graph[v].mem for v in recomputed))
    assert 1.0 + sum(r.extra_time for r in exp.rows) == pytest.approx(exp.time_ratio)
    assert exp.peak == pytest.approx(simulate_training(graph, steps).peak)
    assert exp.vanilla_peak == pytest.approx(vanilla_peak(graph))
    assert sum(r.kept for r in exp.rows) < sum(r.saved_vanilla for r in exp.rows)
    names = {r.module for r in exp.rows}
    assert {"stem.0", "blocks.0", "head"} <= names  # paths as model.named_modules() spells them
    assert sum(r.live_at_peak for r in exp.rows) + exp.plan.at_peak.get(GRADIENTS, 0) == pytest.approx(exp.peak)


def test_explain_on_an_abstract_graph_and_a_kept_set():
    g = residual(4)
    exp = explain(g, {"b2", "b4"})
    assert [r.module for r in exp.rows] == [TOP] and exp.rows[0].recomputations > 0
    assert "remat explain residual" in str(exp)
    with pytest.raises(TypeError, match="give the plan"):
        explain(g)
    with pytest.raises(TypeError, match="remat.optimize returns"):
        explain(object())


def test_optimized_module_explains_itself_with_a_figure(tmp_path):
    model, inputs = models.build_transformer()
    module = remat.optimize(model, inputs, "80%", verify=False)
    exp = module.explain()
    assert isinstance(exp, Explanation)
    assert exp.budget == module.report.budget and exp.solver == module.report.solver
    assert exp.peak == pytest.approx(module.report.predicted_peak)
    assert any(r.module.startswith("mlp") for r in exp.rows)
    text = exp.table()
    assert text.splitlines()[0].startswith("remat explain TransformerBlock") and "recomputed" in text
    path = exp.save(tmp_path / "plan.png")
    assert path.read_bytes()[:8] == PNG
    assert exp._repr_png_()[:8] == PNG
    assert "<img src='data:image/png;base64," in exp._repr_html_()
    record = json.loads(json.dumps(exp.to_json()))
    assert record["modules"] and record["plan"]["peak"] == pytest.approx(exp.peak)


def test_remat_explain_command(tmp_path, capsys):
    from remat.cli import main

    png = tmp_path / "mlp.png"
    assert main(["explain", "models:build_mlp", "--budget", "60%", "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert "remat explain models:build_mlp" in out and "layers.0" in out and str(png) in out
    assert png.read_bytes()[:8] == PNG
    assert main(["explain", "models:build_mlp", "--budget", "60%", "--no-png", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["png"] is None and {m["module"] for m in record["modules"]} >= {"layers.0", "head"}
    assert record["peak"] <= record["budget"]
