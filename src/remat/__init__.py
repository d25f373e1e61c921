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

from .api import min_budget, solve
from .budget import fmt_bytes, parse_budget
from .errors import (BudgetError, CaptureError, GraphError, InfeasibleError, InputError, RematError,
                     ScheduleError, SolverError, StepError, TooManyLowerSets, UnknownSolverError)
from .graph import Graph, GraphError, Node
from .plan import Plan
from .simulate import ScheduleError, Simulation, simulate
# torch-backed front-end (capture.py, runtime.py, measure.py, optimize.py); imported after the
# submodules of the same names so that remat.capture / remat.measure / remat.optimize are the functions
from .capture import capture  # noqa: E402
from .measure import measure  # noqa: E402
from .optimize import optimize  # noqa: E402
from .compiled.backend import backend  # noqa: E402
from . import zoo  # noqa: E402
from . import distributed, hf, plancache  # noqa: E402  (remat.hf.enable: Hugging Face Trainer in one line)
from .report import Report  # noqa: E402
from .explain import Explanation, explain  # noqa: E402  (remat.explain / remat.fit are the functions)
from .fit import Fit, fit  # noqa: E402

__all__ = ["BudgetError", "CaptureError", "Graph", "GraphError", "InfeasibleError", "InputError", "Node", "Plan",
           "RematError", "ScheduleError", "Simulation", "SolverError", "StepError", "TooManyLowerSets",
           "UnknownSolverError", "__version__", "backend", "capture", "fmt_bytes", "measure", "min_budget",
           "optimize", "parse_budget", "simulate", "solve", "zoo"]

__all__ += ["Explanation", "Fit", "Report", "explain", "fit"]
__all__ += ["distributed", "hf", "plancache"]

try:
    from importlib.metadata import PackageNotFoundError, version as _version

    __version__ = _version("remat")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"
