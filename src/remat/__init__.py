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
    zoo/          the papers' networks and their paper-style graphs
    bench/        the benchmark suite behind ``remat bench``
    cli.py        the ``remat`` command (one module per subcommand in commands/)
"""

from .api import min_budget, solve
from .graph import Graph, GraphError, Node
from .plan import Plan
from .simulate import ScheduleError, Simulation, simulate
# torch-backed front-end (capture.py, runtime.py, measure.py, optimize.py); imported after the
# submodules of the same names so that remat.capture / remat.measure / remat.optimize are the functions
from .capture import capture  # noqa: E402
from .measure import measure  # noqa: E402
from .optimize import BudgetError, optimize  # noqa: E402
from .capture import CaptureError  # noqa: E402
from .compiled.backend import backend  # noqa: E402
from . import zoo  # noqa: E402

__all__ = ["BudgetError", "CaptureError", "Graph", "GraphError", "Node", "Plan", "ScheduleError", "Simulation",
           "backend", "capture", "measure", "min_budget", "optimize", "simulate", "solve", "zoo"]
