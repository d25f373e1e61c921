"""The package's face: planning a graph imports no torch, and the torch front-end is there on
first use, with ``remat.optimize`` (and the other functions named as their modules) the function."""

import subprocess
import sys
import types

import pytest

import remat

FUNCTIONS = ("capture", "measure", "optimize", "explain", "fit")


def test_planning_a_graph_imports_no_torch():
    code = ("import sys, remat\n"
            "g = remat.Graph.chain(16, mem=4, cost=1)\n"
            "plan = remat.solve(g, '60%', solver='auto')\n"
            "assert plan.feasible, plan.message\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_command_line_lists_its_commands_without_torch():
    code = ("import sys\n"
            "from remat.cli import build_parser\n"
            "build_parser()\n"
            "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("name", FUNCTIONS)
def test_a_function_named_as_its_module_stays_the_function(name):
    import importlib

    module = importlib.import_module(f"remat.{name}")  # binds the submodule to the package: the function stays
    assert isinstance(module, types.ModuleType) and sys.modules[f"remat.{name}"] is module
    assert getattr(remat, name) is getattr(module, name) and callable(getattr(remat, name))


def test_the_front_end_and_submodules_on_first_use():
    assert remat.backend.__module__ == "remat.compiled.backend"
    assert isinstance(remat.zoo, types.ModuleType) and isinstance(remat.runtime, types.ModuleType)
    assert {"optimize", "backend", "zoo", "fit"} <= set(dir(remat))
    with pytest.raises(AttributeError, match="no attribute 'nonesuch'"):
        remat.nonesuch
