"""remat: train PyTorch models in less memory by recomputing activations, same gradients.

Modules, in processing order (data only flows down):

    graph.py      Graph: nodes with mem, cost, inputs, what backward reads; JSON; validation
    lowerset.py   seed 000 §2: δ+, δ−, lower sets, boundary, enumeration, pruned family {L_v}
    canonical.py  seed 000 §3: the canonical strategy's overhead (eq. 1) and peak (eq. 2)
    solvers/      one module per algorithm family, one signature, one registry
    schedule.py   lowering: stages or a kept set -> the step schedule
    simulate.py   liveness simulation of a schedule: the common yardstick for all solvers
    api.py        solve(), min_budget()
    joint.py      the joint forward+backward graph (seed 004's problem for training)
    capture.py    torch -> Graph on fake tensors (the interpreter's); measure.py measures
    compiled/     AOTAutograd joint graph -> planning Graph -> planned forward/backward fx graphs:
                  what optimize() runs, and the torch.compile backend (backend())
    runtime.py    the op-by-op interpreter, optimize(executor="interpret")
    optimize.py   optimize(): trace, plan, compile, verify against the measured peak
    plancache.py  plans kept on disk, shapes planned up front, re-plans that hold the budget
    distributed.py  DDP and FSDP2 around or inside optimize()
    hf.py         remat.hf.enable(model, budget): Hugging Face models and Trainer in one line
    zoo/          the papers' networks and their paper-style graphs
    bench/        the benchmark suite behind ``remat bench``
    cli.py        the ``remat`` command (one module per subcommand in commands/)
"""

import importlib.util
import sys
import types

from .api import min_budget, solve
from .budget import fmt_bytes, parse_budget
from .errors import (BudgetError, CaptureError, GraphError, InfeasibleError, InputError, RematError,
                     ScheduleError, SolverError, StepError, TooManyLowerSets, UnknownSolverError)
from .graph import Graph, GraphError, Node
from .plan import Plan
from .simulate import ScheduleError, Simulation, simulate

# The torch-backed front-end is imported when first used: planning a graph (remat.solve, and the
# command line's solve, compare and min-budget) needs no torch, and importing it (dynamo
# included) took 4 of the 6 seconds of ``remat --version``. Name -> (submodule, attribute; None:
# the submodule itself).
_LAZY = {"capture": ("capture", "capture"), "measure": ("measure", "measure"),
         "optimize": ("optimize", "optimize"), "backend": ("compiled.backend", "backend"),
         "zoo": ("zoo", None), "distributed": ("distributed", None), "hf": ("hf", None),
         "plancache": ("plancache", None), "Report": ("report", "Report"),
         "Explanation": ("explain", "Explanation"), "explain": ("explain", "explain"),
         "Fit": ("fit", "Fit"), "fit": ("fit", "fit"), "Searching": ("compiled.searching", "Searching")}


def __getattr__(name: str):
    """``remat.optimize`` and the rest of the torch front-end (``_LAZY``), and any submodule
    (``remat.runtime``), imported on first use."""
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = importlib.import_module(f"{__name__}.{module}")
        value = value if attr is None else getattr(value, attr)
    elif importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


class _Package(types.ModuleType):
    """The package module: a submodule named as the function it holds (``remat.optimize``,
    ``remat.capture``, ``remat.measure``, ``remat.explain``, ``remat.fit``) stays the function
    when the import system binds the submodule to the package."""

    def __setattr__(self, name: str, value: object) -> None:
        if isinstance(value, types.ModuleType) and _LAZY.get(name, (None, None))[1] == name:
            value = getattr(value, name, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__all__ = ["BudgetError", "CaptureError", "Graph", "GraphError", "InfeasibleError", "InputError", "Node", "Plan",
           "RematError", "ScheduleError", "Simulation", "SolverError", "StepError", "TooManyLowerSets",
           "UnknownSolverError", "__version__", "backend", "capture", "fmt_bytes", "measure", "min_budget",
           "optimize", "parse_budget", "simulate", "solve", "zoo"]

__all__ += ["Explanation", "Fit", "Report", "Searching", "explain", "fit"]
__all__ += ["distributed", "hf", "plancache"]

try:
    from importlib.metadata import PackageNotFoundError, version as _version

    __version__ = _version("remat")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"
