"""Every error remat raises itself: one of its own types, exported from ``remat``, still the
built-in type older code caught, and one line naming what was given, what is accepted and the
fix. A table of bad inputs (budgets, models, inputs, solver names, graphs, options) is fed to the
Python API and to the CLI, and each message is checked."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

import remat
from remat import errors
from remat.budget import parse, parse_budget
from remat.cli import main


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def chain() -> remat.Graph:
    return remat.Graph.chain(6)


X = torch.randn(4, 8)
LABELS = torch.tensor([0, 1, 2, 3])


class _KeepsAPlainTensor(torch.nn.Module):
    """A scale kept as a plain attribute, not a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.net, self.scale = torch.nn.Linear(8, 8), torch.full((8,), 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.net(x) * self.scale).sum()


class _MakesALiteralTensor(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.net(x) * torch.tensor([1.0, 2.0])).sum()


class _ReadsAGlobal(torch.nn.Module):
    """A loss module that reads its labels from a global: the plan would freeze them."""

    def __init__(self) -> None:
        super().__init__()
        self.net = mlp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.net(x), LABELS)

# (case, call, error type, pieces of the message: what was given, what is accepted, the fix)
API_CASES = [
    # budgets
    ("budget-word", lambda: parse_budget("lots", 1000), remat.BudgetError,
     ["'lots'", "bytes", "MiB", "40%", "(0, 1)"]),
    ("budget-negative", lambda: parse_budget(-5, 1000), remat.BudgetError, ["-5", "non-negative", "GiB"]),
    ("budget-inf", lambda: parse_budget(float("inf"), 1000), remat.BudgetError, ["inf", "finite"]),
    ("budget-nan", lambda: parse_budget(float("nan"), 1000), remat.BudgetError, ["nan", "finite"]),
    ("budget-bool", lambda: parse_budget(True, 1000), remat.BudgetError, ["True", "bytes"]),
    ("budget-none", lambda: parse_budget(None, 1000), remat.BudgetError, ["None", "bytes"]),
    ("budget-unit", lambda: parse_budget("5 parsecs", 1000), remat.BudgetError, ["'5 parsecs'", "GiB"]),
    ("budget-zero-percent", lambda: parse_budget("0%", 1000), remat.BudgetError, ["0%", "above 0"]),
    ("budget-relative-unknown-base", lambda: parse("40%").resolve(None), remat.BudgetError,
     ["'40%'", "relative", "4GiB"]),
    ("optimize-budget-inf", lambda: remat.optimize(mlp(), X, float("inf")), remat.BudgetError, ["inf", "finite"]),
    ("backend-budget", lambda: remat.backend(budget="lots"), remat.BudgetError, ["'lots'", "40%"]),
    ("solve-budget", lambda: remat.solve(chain(), "-3"), remat.BudgetError, ["'-3'", "bytes"]),
    ("infeasible", lambda: remat.optimize(mlp(), X, 16, solver="chen-sqrt", verify=False), remat.InfeasibleError,
     ["16 B", "below the minimum", "chen-sqrt", "raise the budget"]),
    # models
    ("model-function", lambda: remat.optimize(lambda x: x, X, "50%"), remat.InputError,
     ["function", "torch.nn.Module", "wrap it"]),
    ("model-class", lambda: remat.optimize(torch.nn.Linear, X, "50%"), remat.InputError,
     ["Linear", "torch.nn.Module", "not its class"]),
    ("capture-not-a-module", lambda: remat.capture("resnet", X), remat.InputError, ["str", "torch.nn.Module"]),
    ("model-frozen", lambda: remat.optimize(mlp().requires_grad_(False), X, "50%"), remat.InputError,
     ["requires grad", "requires_grad_(True)"]),
    ("model-closure-tensor", lambda: remat.optimize(_ReadsAGlobal(), X, "50%"), remat.CaptureError,
     ["a tensor (size (4,))", "neither an argument nor a parameter", "register_buffer"]),
    ("capture-closure-tensor", lambda: remat.capture(_ReadsAGlobal(), X), remat.CaptureError,
     ["cannot trace _ReadsAGlobal", "a tensor (size (4,))", "neither an argument nor a parameter", "register_buffer"]),
    ("capture-attribute-tensor", lambda: remat.capture(_KeepsAPlainTensor(), X), remat.CaptureError,
     ["a tensor (size (8,))", "a plain attribute", "register_buffer"]),
    ("capture-literal-tensor", lambda: remat.capture(_MakesALiteralTensor(), X), remat.CaptureError,
     ["a tensor (size (2,))", "torch.tensor([...])", "register_buffer"]),
    # inputs
    ("inputs-shape", lambda: remat.optimize(mlp(), torch.randn(4, 9), "50%"), remat.InputError,
     ["Sequential", "mat1 and mat2", "4x9", "example inputs do not fit", "tuple of positional"]),
    ("inputs-shape-unverified", lambda: remat.optimize(mlp(), torch.randn(4, 9), "50%", verify=False),
     remat.InputError, ["Sequential", "[4, 9]", "example inputs do not fit"]),
    ("inputs-shape-interpret", lambda: remat.optimize(mlp(), torch.randn(4, 9), "50%", executor="interpret"),
     remat.InputError, ["cannot trace Sequential", "[4, 9]", "example inputs do not fit"]),
    ("inputs-keyword", lambda: remat.optimize(mlp(), {"y": X}, "50%"), remat.InputError,
     ["unexpected keyword argument 'y'", "dict of keyword arguments"]),
    ("inputs-no-tensor", lambda: remat.optimize(mlp(), [1.0, 2.0], "50%"), remat.InputError,
     ["list [1.0, 2.0]", "torch.Tensor", "torch.randn"]),
    # solver names and options
    ("solver-optimize", lambda: remat.optimize(mlp(), X, "50%", solver="magic"), remat.UnknownSolverError,
     ["'magic'", "known solvers:", "chen-sqrt", "pass one of"]),
    ("solver-solve", lambda: remat.solve(chain(), 4, solver="magic"), remat.UnknownSolverError,
     ["'magic'", "dp-approx"]),
    ("solver-min-budget", lambda: remat.min_budget(chain(), solver="magic"), remat.UnknownSolverError,
     ["'magic'", "twremat"]),
    ("solver-backend", lambda: remat.backend(solver="magic"), remat.UnknownSolverError, ["'magic'", "auto"]),
    ("solver-refuses", lambda: remat.solve(remat.Graph.chain(14), 5, solver="dp-exhaustive"), remat.SolverError,
     ["dp-exhaustive", "12 nodes", "14"]),
    ("solver-option", lambda: remat.solve(chain(), 4, solver="milp", time_limit=0), remat.SolverError,
     ["time_limit", "> 0", "0"]),
    ("mode", lambda: remat.solve(chain(), 4, mode="fast"), remat.InputError, ["'fast'", "'time' or 'memory'"]),
    ("executor", lambda: remat.optimize(mlp(), X, "50%", executor="jit"), remat.InputError,
     ["'jit'", "'compiled' or 'interpret'"]),
    ("compiler", lambda: remat.backend(compiler="tvm"), remat.InputError, ["'tvm'", "inductor"]),
    ("zoo-name", lambda: remat.zoo.build("resnet9", batch=2), remat.InputError, ["'resnet9'", "resnet50"]),
    # graphs
    ("graph-missing-file", lambda: remat.Graph.from_json("/nonexistent/g.json"), remat.GraphError,
     ["'/nonexistent/g.json'", "does not exist", "Graph.save"]),
    ("graph-malformed", lambda: remat.Graph.from_json("{bad"), remat.GraphError, ["malformed", "remat-graph/1"]),
    ("graph-format", lambda: remat.Graph.from_json({"format": "onnx", "nodes": []}), remat.GraphError,
     ["'onnx'", "remat-graph/1", "Graph.save"]),
    ("graph-unknown-input", lambda: remat.Graph.from_json(
        {"format": "remat-graph/1", "nodes": [{"id": "a", "mem": 1, "cost": 1, "inputs": ["q"]}]}),
     remat.GraphError, ["'a'", "unknown input 'q'", "add that node"]),
    ("graph-negative-mem", lambda: remat.Graph.from_json(
        {"format": "remat-graph/1", "nodes": [{"id": "a", "mem": -1, "cost": 1}]}), remat.GraphError,
     ["'a'", "mem", ">= 0", "-1"]),
    ("schedule-no-plan", lambda: remat.simulate(chain(), remat.solve(chain(), 1)), remat.ScheduleError,
     ["infeasible", "smallest budget"]),
]


@pytest.mark.parametrize("case, call, kind, pieces", API_CASES, ids=[c[0] for c in API_CASES])
def test_bad_input_gets_one_remat_error_naming_given_accepted_and_fix(case, call, kind, pieces, capfd):
    with pytest.raises(kind) as info:
        call()
    e = info.value
    assert isinstance(e, remat.RematError) and type(e).__module__ == "remat.errors"
    message = str(e)
    assert "\n" not in message, message
    for piece in pieces:
        assert piece in message, f"{case}: {piece!r} not in {message!r}"
    out, err = capfd.readouterr()  # no internal traceback or torch log line on the way
    assert "Traceback" not in err and "fake_tensor" not in err and "USDT" not in err, err


def test_every_error_type_is_exported_and_keeps_its_builtin_base():
    for name in errors.__all__:
        assert getattr(remat, name) is getattr(errors, name)
    assert issubclass(remat.BudgetError, ValueError) and issubclass(remat.InfeasibleError, remat.BudgetError)
    assert issubclass(remat.InputError, ValueError) and issubclass(remat.InputError, TypeError)
    assert issubclass(remat.TooManyLowerSets, RuntimeError) and issubclass(remat.TooManyLowerSets, remat.SolverError)
    assert issubclass(remat.StepError, RuntimeError)
    for old, new in [("remat.optimize", "BudgetError"), ("remat.graph", "GraphError"),
                     ("remat.simulate", "ScheduleError"), ("remat.lowerset", "TooManyLowerSets")]:
        import importlib
        assert getattr(importlib.import_module(old), new) is getattr(remat, new)
    from remat.capture import CaptureError
    assert CaptureError is remat.CaptureError
    # they cross process boundaries (auto runs solvers in forked children)
    e = pickle.loads(pickle.dumps(remat.UnknownSolverError("unknown solver 'x'")))
    assert type(e) is remat.UnknownSolverError and str(e) == "unknown solver 'x'"


@pytest.mark.parametrize("budget, bytes_", [
    (1000, 1000.0), (0, 0.0), ("2GiB", 2 * 2**30), ("4 GiB", 4 * 2**30), ("512MiB", 512 * 2**20), ("2GB", 2e9),
    ("512 MB", 512e6), ("1.5kB", 1500.0), ("300KiB", 300 * 1024), ("1tib", 2**40), ("40%", 400.0),
    ("150%", 1500.0), (0.6, 600.0), ("0.6", 600.0), (".25", 250.0), (1.0, 1.0), ("2_000", 2000.0), ("3e3", 3000.0)])
def test_one_budget_syntax(budget, bytes_):
    """A float in (0, 1) is a fraction of the vanilla peak, never bytes."""
    assert parse_budget(budget, 1000) == bytes_


def test_the_same_budget_in_python_and_every_form_on_a_graph():
    g = chain()
    vanilla = remat.simulate(g, remat.solve(g, None, solver="none")).peak
    plans = [remat.solve(g, b, solver="dp-exact") for b in (0.8 * vanilla, "80%", 0.8, "0.8")]
    assert len({p.budget for p in plans}) == 1 and plans[0].budget == pytest.approx(0.8 * vanilla)


CLI_CASES = [
    (["solve", "{graph}", "--budget", "lots"], "remat solve: error: --budget must be", 2),
    (["solve", "{graph}", "--budget", "inf"], "got 'inf'", 2),
    (["solve", "/nonexistent.json"], "remat solve: error: graph file '/nonexistent.json' does not exist", 2),
    (["solve", "{bad}"], "unknown input 'q'", 2),
    (["min-budget", "{bad}"], "remat min-budget: error:", 2),
    (["compare", "{graph}", "--budget", "9", "--solvers", "none,magic"], "unknown training solver(s) magic", 2),
    (["run", "mlp", "--budget", "lots"], "remat run: error: --budget must be", 2),
    (["run", "resnet9", "--budget", "50%"], "unknown target 'resnet9'", 2),
    (["run", "nosuchmodule:build"], "cannot load 'nosuchmodule:build'", 2),
    (["bench", "--report-only"], "--report-only", 2),
    (["solve", "{graph}", "--budget", "3", "--solver", "dp-approx"], "", 1),  # infeasible: the plan is printed
]


@pytest.mark.parametrize("argv, message, code", CLI_CASES, ids=[" ".join(c[0][:3]) for c in CLI_CASES])
def test_cli_errors_are_one_line_and_exit_2(tmp_path, capsys, argv, message, code):
    graph, bad = tmp_path / "chain.json", tmp_path / "bad.json"
    remat.Graph.chain(8).save(graph)
    bad.write_text(json.dumps({"format": "remat-graph/1", "nodes": [{"id": "a", "mem": 1, "cost": 1, "inputs": ["q"]}]}))
    argv = [a.format(graph=graph, bad=bad) for a in argv]
    assert main(argv) == code
    err = capsys.readouterr().err
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err
        assert message in err and "Traceback" not in err
    else:
        assert err == ""


def test_cli_usage_errors_name_the_choices(capsys):
    assert main(["solve", "g.json", "--solver", "magic"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'magic'" in err and "dp-approx" in err
