"""The planning commands, run in-process through remat.cli.main."""

import json

import pytest

from remat import Graph, min_budget
from remat.cli import main


@pytest.fixture
def graph_file(tmp_path):
    path = tmp_path / "chain.json"
    Graph.chain(8).save(path)
    return path


def test_solve_json_has_the_plan_fields(graph_file, capsys):
    assert main(["solve", str(graph_file), "--budget", "9", "--solver", "dp-exact", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["feasible"] is True and out["peak"] <= 9
    assert out["num_stages"] == len(out["stages"]) and out["simulated"]["peak"] > 0
    assert {"recompute_cost", "schedule", "kept", "solve_seconds"} <= set(out)


def test_solve_table_and_infeasible_message(graph_file, capsys):
    assert main(["solve", str(graph_file), "--budget", "3", "--solver", "dp-approx"]) == 0
    out = capsys.readouterr().out
    best = min_budget(Graph.from_json(graph_file), solver="dp-approx")
    assert "False" in out and f"smallest budget it can meet is {best:g}" in out


def test_min_budget_command(graph_file, capsys):
    assert main(["min-budget", str(graph_file), "--solver", "dp-exact", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["min_budget"] == min_budget(Graph.from_json(graph_file), solver="dp-exact")


def test_errors_are_one_line_messages(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "remat-graph/1", "nodes": [{"id": "a", "mem": 1, "cost": 1, "inputs": ["q"]}]}))
    assert main(["solve", str(bad)]) == 2
    assert "unknown input 'q'" in capsys.readouterr().err
    assert main(["solve", str(bad).replace("bad", "missing")]) == 2


def test_demo_plans_resnet50_with_every_fast_solver(capsys):
    assert main(["demo", "--json", "--no-train"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {(r["budget"], r["solver"]): r for r in out["rows"]}
    assert out["nodes"] == 176
    assert rows[("100%", "none")]["feasible"] and rows[("100%", "none")]["recompute_cost"] == 0
    assert not rows[("50%", "none")]["feasible"]
    # dp-approx at its own minimal budget always has a plan
    assert rows[("min (dp-approx)", "dp-approx")]["feasible"]
