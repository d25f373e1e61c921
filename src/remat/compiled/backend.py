"""``remat.backend``: a torch.compile backend that partitions every graph with remat's planner.

    model = torch.compile(model, backend=remat.backend(budget="40%", solver="auto"))

``compiler="inductor"`` (default) hands the planned forward and backward graphs to inductor
(through its ``custom_partitioner_fn`` hook, so inductor's decompositions and joint-graph passes
run first, as they do for its own partitioner); ``compiler="eager"`` runs them as fx-generated
Python (AOTAutograd with remat's partition function). Budgets take the forms ``optimize`` takes;
a percentage applies to each graph's own simulated vanilla peak; bytes hold for the whole step
when graph breaks split it into several graphs (``chain``: the first step runs the graphs before
a break at their floor, the next plans them again with room for the graphs after).
``backend.report`` summarises each graph's current plan.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, Callable

import torch

from .. import progress
from ..budget import is_relative
from ..errors import InfeasibleError, InputError
from . import tangents
from .chain import Slot, Swappable, ends_at_graph_break, held_before, tail_bytes
from .costs import DEFAULT_COST
from .dynamic import is_dynamic
from .fusion import cache_key, config_patches, inner_compile
from .jointgraph import total_cost
from .partitioner import Planner

COMPILERS = ("inductor", "eager")


class RematBackend:
    """A torch.compile backend (a callable on (GraphModule, example inputs)).

    ``slots``: every graph compiled, in order, with what its current plan holds and needs;
    graphs of one step split by graph breaks share a byte budget (``chain``)."""

    def __init__(self, planner: Planner, compiler: str) -> None:
        self.planner = planner
        self.compiler = compiler
        self.slots: list[Slot] = []
        self._chain: list[Slot] = []   # the graphs of the step being compiled

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        shared = not is_relative(self.planner.budget)  # bytes: one budget for every graph of the step
        chain = self._chain if self._chain and self._chain[-1].breaks else []  # else: a new step (or recompile)
        self._chain = chain
        slot = Slot(index=len(chain), breaks=ends_at_graph_break(gm))
        chain.append(slot)
        self.slots.append(slot)
        back = _input_grad_bytes(example_inputs)
        if not shared:
            return self._compile(gm, example_inputs, self.compiler, slot, back)
        held = held_before(chain, slot.index)
        if not slot.breaks:
            return self._compile(gm, example_inputs, self.compiler, slot, back, held=held, before=slot.index,
                                 price=_price(chain[:slot.index]))
        # more graphs follow, unseen yet: the first step runs this one at its floor (fx codegen,
        # cheap to make); once the rest is known it is planned for good (``chain``)
        slot.provisional = True
        fakes = _symbolic_inputs(gm, example_inputs) if is_dynamic(gm) else None
        first = self._compile(gm, example_inputs, "eager", slot, back, held=held, before=slot.index, floor=True,
                              fused=False)

        def replan(args: list) -> Callable | None:
            if chain[-1].breaks:
                return None  # the graphs after this one are not all compiled yet
            held, tail = held_before(chain, slot.index), tail_bytes(chain, slot.index)
            try:
                fn = self._compile(gm, fakes or args, self.compiler, slot, back, held=held, before=slot.index,
                                   tail=tail)
            except Exception as e:  # noqa: BLE001 -- the provisional plan fits: keep it, say why
                slot.replans.append(f"{type(e).__name__}: {e}")
                warnings.warn(f"remat: graph {slot.index} of a step with graph breaks keeps its floor plan: "
                              f"planning it within {held:.0f} bytes held before it and {tail:.0f} needed after it "
                              f"failed: {e}", stacklevel=2)
                return first
            slot.provisional = False
            slot.replans.append(f"planned again with {held:.0f} bytes held before it, {tail:.0f} after it")
            return fn

        return Swappable(first, replan)

    def _compile(self, gm: torch.fx.GraphModule, inputs: list, compiler: str, slot: Slot, back: float,
                 **plan: Any) -> Callable:
        """Compile one graph with ``compiler``, partitioned by the planner with ``plan``'s keywords;
        record in ``slot`` what the plan holds and needs."""
        part = functools.partial(self.planner, index=slot.index, **plan)
        made = len(self.planner.planned)
        with progress.task(f"remat.backend: graph {slot.index} of the step ({len(gm.graph.nodes)} nodes), "
                           f"{compiler} code"):
            fn = self._compile_graph(gm, inputs, compiler, part, plan)
        if len(self.planner.planned) > made:  # a training graph was partitioned (not inference)
            slot.planned = self.planner.planned[-1]
            code = slot.planned.code
            slot.after, slot.need = code.after_forward, code.peak + back
        return fn

    def _compile_graph(self, gm: torch.fx.GraphModule, inputs: list, compiler: str, part: Callable,
                       plan: dict[str, Any]) -> Callable:
        """``gm`` compiled by ``compiler``, partitioned by ``part`` (the planner)."""
        made = len(self.planner.planned)

        def planned() -> Any:  # this graph's plan, once partitioned
            return self.planner.planned[-1] if len(self.planner.planned) > made else None

        if compiler == "eager":
            from torch._dynamo.backends.common import aot_autograd

            from .eager_ops import eager_dropout
            from .module import fx_codegen

            def backward(bw: torch.fx.GraphModule, example: list) -> Callable:
                fn = fx_codegen(bw, example)
                if tangents.ORIGINAL not in bw.meta:
                    return fn
                return tangents.Backward(fn, bw, lambda original: fx_codegen(original, example))

            # fx codegen only: gradients as eager's, dropout included; no zero gradients for outputs
            # the loss does not use
            with eager_dropout(), tangents.no_zero_grads(planned):
                fn = aot_autograd(fw_compiler=fx_codegen, bw_compiler=backward, partition_fn=part,
                                  keep_inference_input_mutations=True)(gm, inputs)
        else:
            import torch._inductor.config as inductor_config
            from torch._inductor.compile_fx import compile_fx

            key = ":".join(f"{k}={v}" for k, v in sorted(plan.items()))
            # inductor runs the order and holds the memory the plan was judged by (``fusion``; the
            # backward is compiled later, so the settings go with each compile)
            key += f":{cache_key()}"
            # inductor's code runs the convolutions channels-last, copying their inputs: below what
            # that code can meet, compile without the layout optimization (slower convolutions, no
            # copies) rather than refuse, or miss a percentage
            fallback = _convolutions(gm) and inductor_config.layout_optimization
            first = functools.partial(part, fallback=True) if fallback else part
            try:
                with inductor_config.patch(custom_partitioner_fn=_inductor_partitioner(self.planner, first, key)), \
                        tangents.no_zero_grads(planned):
                    fn = compile_fx(gm, inputs, inner_compile=inner_compile(), config_patches=config_patches())
            except InfeasibleError as e:
                if not fallback:
                    raise
                key += ":layout=off"
                with inductor_config.patch(custom_partitioner_fn=_inductor_partitioner(self.planner, part, key)), \
                        tangents.no_zero_grads(planned):
                    fn = compile_fx(gm, inputs, inner_compile=inner_compile(),
                                    config_patches={**config_patches(), "layout_optimization": False})
                if len(self.planner.planned) > made:
                    self.planner.planned[-1].notes.append(
                        f"compiled without inductor's channels-last layout optimization: with it, {e}")
        return fn

    @property
    def report(self) -> list[dict[str, Any]]:
        """One summary per graph compiled, of its current plan (solver, budget, predicted peak,
        recompute fraction, ``recompute_time``: predicted seconds of the code's recomputation; with
        graph breaks, what it holds and leaves room for)."""
        return [{**s.planned.summary(), "replans": list(s.replans)} for s in self.slots if s.planned is not None]


def _convolutions(gm: torch.fx.GraphModule) -> bool:
    """Whether a Dynamo graph convolves (what inductor's layout optimization acts on)."""
    for n in gm.graph.nodes:
        if n.op == "call_module" and isinstance(gm.get_submodule(str(n.target)), torch.nn.modules.conv._ConvNd):
            return True
        if n.op == "call_function" and "conv" in getattr(n.target, "__name__", str(n.target)):
            return True
    return False


def _symbolic_inputs(gm: torch.fx.GraphModule, example_inputs: list) -> list:
    """A dynamic-shape graph's inputs as dynamo traced them (fake tensors and SymInts): it is
    compiled again from these, not from a call's tensors, which would trace code for their sizes
    alone (run under dynamo's guards for every size)."""
    fakes = [n.meta.get("example_value") for n in gm.graph.find_nodes(op="placeholder")]
    if len(fakes) != len(example_inputs) or any(f is None for f in fakes):
        raise InputError("remat: this graph has symbolic sizes and ends at a graph break, and dynamo left no example "
                         "values to plan it again from once the graphs after it are known: give a percentage budget "
                         "(each graph planned alone), or compile with torch.compile(..., dynamic=False)")
    return fakes


def _price(before: list[Slot]) -> float:
    """What the graphs before a graph break recompute per byte freed, on average: their whole
    forward's cost over their vanilla peaks. A later graph whose floor frees bytes for less takes
    it (``Planner``'s ``price``), leaving the room to them."""
    done = [s.planned for s in before if s.planned is not None]
    peak = sum(p.vanilla for p in done)
    return sum(total_cost(p.joint.graph) for p in done) / peak if peak > 0 else 0.0


def _input_grad_bytes(inputs: list) -> float:
    """Bytes of the gradients a graph hands back for inputs that are not parameters (an earlier
    graph's outputs): allocated by its backward while the earlier graphs still hold their values."""
    return float(sum(t.numel() * t.element_size() for t in inputs
                     if isinstance(t, torch.Tensor) and t.requires_grad and not isinstance(t, torch.nn.Parameter)))


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
    return RematBackend(Planner(budget, solver, mode, cost, name="compiled", strict=False,
                                fused=compiler == "inductor", loss_only=True), compiler)


def _inductor_partitioner(planner: Planner, partition: Callable, key: str) -> Any:
    from torch._inductor.custom_graph_pass import CustomPartitionerFn

    class InductorPartitioner(CustomPartitionerFn):
        """Inductor's ``custom_partitioner_fn``: remat's planner after inductor's joint passes."""

        def __call__(self, gm: torch.fx.GraphModule, joint_inputs: Any, **kwargs: Any) -> Any:
            kwargs.pop("compiler", None)
            return partition(gm, joint_inputs, **kwargs)

        def uuid(self) -> Any:
            return f"remat:{planner.budget}:{planner.solver}:{planner.mode}:{planner.cost}:{id(planner)}:{key}"

        def __reduce__(self) -> Any:  # inductor pickles its config into cache keys: the uuid stands for it
            return (str, (self.uuid(),))

    return InductorPartitioner()
