"""``remat.backend``: a torch.compile backend that partitions every graph with remat's planner.

    model = torch.compile(model, backend=remat.backend(budget="40%", solver="auto"))

``compiler="inductor"`` (default) hands the planned forward and backward graphs to inductor
(through its ``custom_partitioner_fn`` hook, so inductor's decompositions and joint-graph passes
run first, as they do for its own partitioner); ``compiler="eager"`` runs them as fx-generated
Python (AOTAutograd with remat's partition function). Budgets take the forms ``optimize`` takes;
a percentage applies to each graph's own simulated vanilla peak, bytes are shared among the
graphs of a model (graph breaks: see ``partitioner.Planner``). ``backend.planner.planned`` holds
what was decided for each graph.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from .costs import DEFAULT_COST
from .partitioner import Planner
from ..errors import InputError

COMPILERS = ("inductor", "eager")


class RematBackend:
    """A torch.compile backend (a callable on (GraphModule, example inputs))."""

    def __init__(self, planner: Planner, compiler: str) -> None:
        self.planner = planner
        self.compiler = compiler

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        if self.compiler == "eager":
            from torch._dynamo.backends.common import aot_autograd

            from .eager_ops import eager_dropout
            from .module import fx_codegen

            with eager_dropout():  # fx codegen only: gradients as eager's, dropout included
                return aot_autograd(fw_compiler=fx_codegen, bw_compiler=fx_codegen, partition_fn=self.planner,
                                    keep_inference_input_mutations=True)(gm, example_inputs)
        import torch._inductor.config as inductor_config
        from torch._inductor.compile_fx import compile_fx

        with inductor_config.patch(custom_partitioner_fn=_inductor_partitioner(self.planner)):
            return compile_fx(gm, example_inputs)

    @property
    def report(self) -> list[dict[str, Any]]:
        """One summary per graph planned (solver, budget, predicted peak, recompute fraction)."""
        return [p.summary() for p in self.planner.planned]


def backend(budget: Any = "50%", solver: str = "auto", compiler: str = "inductor", mode: str = "time",
            cost: str = DEFAULT_COST) -> RematBackend:
    """A torch.compile backend planning each graph within ``budget`` with ``solver``.

    ``cost``: the op cost model (``remat.compiled.costs``): ``"roofline"`` (default: seconds
    from the device's peak FLOP/s and bandwidth), ``"flops"``, ``"profile"`` (each distinct op timed once on
    the device, cached on disk) or ``"paper"``."""
    from .costs import check

    check(cost)
    from ..optimize import candidates, parse_budget

    if compiler not in COMPILERS:
        raise InputError(f"compiler must be one of {', '.join(COMPILERS)}, got {compiler!r}")
    candidates(solver)  # unknown solver names raise here, not inside torch.compile
    parse_budget(budget, 1.0)  # so does a budget that cannot be read
    return RematBackend(Planner(budget, solver, mode, cost, name="compiled", strict=False), compiler)


def _inductor_partitioner(planner: Planner) -> Any:
    from torch._inductor.custom_graph_pass import CustomPartitionerFn

    class InductorPartitioner(CustomPartitionerFn):
        """Inductor's ``custom_partitioner_fn``: remat's planner after inductor's joint passes."""

        def __call__(self, gm: torch.fx.GraphModule, joint_inputs: Any, **kwargs: Any) -> Any:
            kwargs.pop("compiler", None)
            return planner(gm, joint_inputs, **kwargs)

        def uuid(self) -> Any:
            return f"remat:{planner.budget}:{planner.solver}:{planner.mode}:{planner.cost}:{id(planner)}"

        def __reduce__(self) -> Any:  # inductor pickles its config into cache keys: the uuid stands for it
            return (str, (self.uuid(),))

    return InductorPartitioner()
