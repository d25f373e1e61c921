"""``remat compare``: every training solver on one graph, judged by the simulator, gaps to milp."""

import json

import pytest

from remat import Graph, solvers
from remat.cli import main
from remat.commands.compare import parse_budget
from strategies import skip_block


@pytest.fixture
def graph_file(tmp_path):
    g = skip_block()
    path = tmp_path / "residual.json"
    g.save(path)
    return path


def run_json(capsys, *argv):
    assert main(["compare", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_has_one_row_per_training_solver_but_auto(graph_file, capsys):
    out = run_json(capsys, str(graph_file), "--budget", "12")
    expected = [n for n in solvers.names("training") if n != "auto"]
    assert [r["solver"] for r in out["rows"]] == expected
    assert out["budget"] == 12 and out["nodes"] == 5
    milp = next(r for r in out["rows"] if r["solver"] == "milp")
    assert milp["status"] == "optimal" and milp["fits"] and milp["gap_to_milp"] == 0
    assert out["milp_optimal_cost"] == milp["recompute_cost"]
    for r in out["rows"]:
        if r["fits"]:  # the yardstick: nobody that fits beats the proven optimum
            assert r["gap_to_milp"] >= 0
            assert r["gap_to_milp"] == pytest.approx((r["recompute_cost"] - milp["recompute_cost"])
                                                     / max(milp["recompute_cost"], 1e-12))
            assert r["simulated_peak"] <= 12
        else:
            assert r["gap_to_milp"] is None


def test_vanilla_budget_gives_zero_cost_rows(graph_file, capsys):
    out = run_json(capsys, str(graph_file), "--budget", "100%", "--solvers", "none,milp")
    none, milp = out["rows"]
    assert out["budget"] == out["vanilla_peak"]
    assert none["fits"] and none["recompute_cost"] == 0 and none["gap_to_milp"] == 0
    assert milp["recompute_cost"] == 0


def test_no_gap_when_milp_is_infeasible(graph_file, capsys):
    out = run_json(capsys, str(graph_file), "--budget", "2", "--solvers", "none,milp")
    assert out["milp_optimal_cost"] is None
    assert [r["status"] for r in out["rows"]][1] == "infeasible"
    assert all(r["gap_to_milp"] is None for r in out["rows"])


def test_refusing_solver_is_reported_not_raised(tmp_path, capsys):
    path = tmp_path / "chain.json"
    Graph.chain(14).save(path)  # dp-exhaustive refuses graphs above 12 nodes
    out = run_json(capsys, str(path), "--budget", "60%", "--solvers", "dp-exhaustive,none")
    refused = out["rows"][0]
    assert refused["status"] == "refused" and "12" in refused["note"]
    assert refused["recompute_cost"] is None


def test_table_output(graph_file, capsys):
    assert main(["compare", str(graph_file), "--budget", "12", "--solvers", "none,milp"]) == 0
    out = capsys.readouterr().out
    assert "milp" in out and "optimal" in out and "none" in out


@pytest.mark.parametrize("argv, message", [
    (["--budget", "lots"], "--budget must be a number"),
    (["--budget", "8", "--solvers", "none,magic"], "unknown training solver"),
    (["--budget", "8", "--time-limit", "0"], "--time-limit"),
])
def test_bad_arguments_are_one_line_errors(graph_file, capsys, argv, message):
    assert main(["compare", str(graph_file), *argv]) == 2
    assert message in capsys.readouterr().err


def test_parse_budget():
    assert parse_budget("40%", 50) == 20 and parse_budget("7", 50) == 7
