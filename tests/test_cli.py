"""The planning commands, run in-process through remat.cli.main."""

import json
import re

import pytest

from remat import Graph, min_budget
from remat import solve as remat_solve
from remat.cli import main


@pytest.fixture
def graph_file(tmp_path):
    path = tmp_path / "chain.json"
    Graph.chain(8).save(path)
    return path


def test_solve_json_is_a_summary_and_json_full_has_the_schedule(graph_file, capsys):
    assert main(["solve", str(graph_file), "--budget", "9", "--solver", "dp-exact", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["feasible"] is True and out["peak"] <= 9 and out["simulated"]["peak"] > 0
    assert {"recompute_cost", "num_stages", "schedule_steps", "kept_values", "solve_seconds"} <= set(out)
    assert not {"schedule", "stages", "kept"} & set(out)
    assert main(["solve", str(graph_file), "--budget", "9", "--solver", "dp-exact", "--json-full"]) == 0
    text = capsys.readouterr().out
    full = json.loads(text)
    assert len(text.strip().splitlines()) == 1  # one line, for tools
    assert full["num_stages"] == len(full["stages"]) and len(full["schedule"]) == out["schedule_steps"]


def test_solve_table_and_infeasible_exit_code(graph_file, capsys):
    assert main(["solve", str(graph_file), "--budget", "3", "--solver", "dp-approx"]) == 1
    out = capsys.readouterr().out
    best = min_budget(Graph.from_json(graph_file), solver="dp-approx")
    assert "feasible" in out and " no " in out and f"smallest budget it can meet is {best:g}" in out


def test_solve_table_names_the_solver_auto_chose(graph_file, capsys):
    assert main(["solve", str(graph_file), "--budget", "9", "--solver", "auto"]) == 0
    chosen = remat_solve(Graph.from_json(graph_file), 9, solver="auto").stats["chosen"]
    assert re.search(rf"^chosen\s+{re.escape(chosen)}\s*$", capsys.readouterr().out, re.M)


@pytest.mark.parametrize("budget, units", [("9", 9), ("90%", 9), ("0.9", 9), (".9", 9), ("9B", 9)])
def test_solve_reads_every_budget_form(graph_file, capsys, budget, units):
    """chain(8): vanilla simulated peak 10 units, so 90%, 0.9 and 9 are one budget."""
    assert main(["solve", str(graph_file), "--budget", budget, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["budget"] == units


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


@pytest.mark.slow
def test_demo_trains_at_the_least_budget_remat_names_where_its_own_is_below_it(capsys):
    """The demo's training step must succeed on any machine: the least plan's real peak depends on the
    CPU's convolution temporaries (at 64x64, 92.6% of vanilla on an AMD EPYC, above the demo's 60%). Given a
    budget no plan meets, it shows the refusal, then trains at the bytes the refusal names: gradients
    equal, and the measured peak within them."""
    from remat.commands import demo

    assert demo.train("5%") == 0
    out = capsys.readouterr().out
    assert "remat refused it: budget" in out and "Training at the least budget it names instead" in out
    assert re.search(r"gradients identical\s+yes", out)
    budget = float(re.search(r"^\s*budget\s{2,}[\d.]+ \w+ \(([\d.]+)%\)", out, re.M).group(1))
    measured = float(re.search(r"^\s*optimized peak, measured\s+[\d.]+ \w+ \(([\d.]+)%\)", out, re.M).group(1))
    assert 5 < budget and measured <= budget * 1.01


def test_version_and_help_without_markup(capsys):
    import remat

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"remat {remat.__version__}"
    for argv in (["--help"], ["solve", "--help"], ["compare", "--help"], ["run", "--help"], ["bench", "--help"],
                 ["min-budget", "--help"], ["demo", "--help"]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "``" not in out and ":class:" not in out, argv
    assert main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    assert "auto" in out and "chen-sqrt" in out and "twremat" in out  # --solver lists its choices


@pytest.fixture
def r50_file(tmp_path):
    from remat import zoo

    path = tmp_path / "r50.json"
    zoo.graph("resnet50", batch=32).save(path)
    return path


@pytest.mark.parametrize("argv", [
    ["solve", "{g}", "--budget", "40%"],
    ["min-budget", "{g}"],
    ["compare", "{g}", "--budget", "40%", "--solvers", "none,chen-sqrt,chen-greedy,dp-approx,twremat"],
])
def test_tables_fit_80_columns_with_sizes_in_binary_units(r50_file, capsys, monkeypatch, argv):
    monkeypatch.setenv("COLUMNS", "80")
    main([a.format(g=r50_file) for a in argv])
    out = capsys.readouterr().out
    assert all(len(line.rstrip()) <= 80 for line in out.splitlines()), out
    assert "…" not in out and "GiB" in out and "e+0" not in out


def test_progress_is_on_stderr_only_when_asked(graph_file, capsys):
    assert main(["solve", str(graph_file), "--budget", "9", "--json"]) == 0
    quiet = capsys.readouterr()
    assert quiet.err == ""  # stderr is not a terminal here
    assert main(["--progress", "always", "solve", str(graph_file), "--budget", "9", "--json"]) == 0
    loud = capsys.readouterr()
    assert json.loads(loud.out) and "dp-approx on chain" in loud.err  # stdout stays plain JSON


def test_bench_writes_to_a_fresh_folder_by_default(tmp_path):
    from remat.commands.bench import fresh_folder

    first = fresh_folder("quick", tmp_path)
    first.mkdir(parents=True)
    second = fresh_folder("quick", tmp_path)
    assert first.parent == tmp_path and first.name.startswith("quick-") and second != first


def test_progress_tasks_are_silent_when_off_and_nest_when_on(capsys):
    from remat import progress

    with progress.task("outer") as t:
        t.note("x")
        progress.note("y")
    assert capsys.readouterr().err == ""
    progress.enable(True)
    try:
        with progress.task("outer", total=2) as t:
            with progress.task("inner"):
                progress.note("detail")
            t.advance()
    finally:
        progress.enable(None)
    err = capsys.readouterr().err
    assert "outer" in err and "inner" in err


def test_solve_time_limit_says_what_was_cut_short(capsys):
    """``--time-limit``: a solver without a limit of its own is stopped from outside; the table
    says so, and the message does not claim a smallest budget it did not search for."""
    from pathlib import Path

    graph = Path(__file__).resolve().parents[1] / "bench" / "graphs" / "resnet50.json"
    assert main(["solve", str(graph), "--budget", "30%", "--solver", "twremat", "--time-limit", "0.001"]) == 1
    out = " ".join(capsys.readouterr().out.split())  # the table may fold a long value
    assert "cut short" in out and "stopped at the time limit" in out
    assert main(["solve", str(graph), "--budget", "30%", "--solver", "twremat", "--time-limit", "0", "--json"]) == 2
    assert "time_limit must be > 0" in capsys.readouterr().err
