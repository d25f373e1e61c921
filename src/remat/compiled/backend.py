"""``remat.backend``: a torch.compile backend that partitions every graph with remat's planner.

    model = torch.compile(model, backend=remat.backend(budget="40%", solver="auto"))

``compiler="inductor"`` (default) hands the planned forward and backward graphs to inductor
(through its ``custom_partitioner_fn`` hook, so inductor's decompositions and joint-graph passes
run first, as they do for its own partitioner); ``compiler="eager"`` runs them as fx-generated
Python (AOTAutograd with remat's partition function). Budgets take the forms ``optimize`` takes;
a percentage applies to each graph's own simulated vanilla peak; bytes hold for the whole step
when graph breaks split it into several graphs (``chain``: the first step runs the graphs before
a break at their floor, the next plans them again with room for the graphs after), and when the
graphs a step runs are not that chain (a block compiled once and called per layer, or a graph per
layer compiled as a step of its own, as under FSDP2's per-block sharding): the first step's calls
are recorded, and graphs whose calls take the step over the budget are planned again together.
``backend.report`` summarises each graph's current plan.
"""

from __future__ import annotations

import functools
import warnings
from collections import Counter
from typing import Any, Callable

import torch

from .. import progress
from ..budget import is_relative
from ..errors import InfeasibleError, InputError
from . import accumulate, tangents
from .chain import Recorder, Slot, Swappable, ends_at_graph_break, held_before, step_peak, tail_bytes
from .costs import DEFAULT_COST
from .dynamic import is_dynamic
from .fusion import cache_key, config_patches, inner_compile
from .inductor_fixes import unaliased_donations
from .jointgraph import total_cost
from .partitioner import LEFTOVER, Planner

COMPILERS = ("inductor", "eager")
REPEAT_GRID = 6       # a graph run several times a step: leftovers per call tried at a first guess, then 5/6, 4/6, ...
REPEAT_REFINE = 2     # ... then bisected this many times above the first that fits (each try a compile)


class RematBackend:
    """A torch.compile backend (a callable on (GraphModule, example inputs)).

    ``slots``: every graph compiled, in order, with what its current plan holds and needs;
    graphs of one step split by graph breaks share a byte budget (``chain``)."""

    def __init__(self, planner: Planner, compiler: str) -> None:
        self.planner = planner
        self.compiler = compiler
        self.slots: list[Slot] = []
        self._chain: list[Slot] = []   # the graphs of the step being compiled
        self._recorder = Recorder(self._recorded)
        self._calls: list[Slot] = []   # the graph calls of the first training step (``Recorder``)
        self._warned_outside = False
        self._rerecorded = False       # a step recorded again after its graph-break chain was planned for good
        self._made: dict[int, tuple] = {}  # id(slot) -> (its Swappable, graph, symbolic inputs, input gradient bytes)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        shared = not is_relative(self.planner.budget)  # bytes: one budget for every graph of the step
        chain = self._chain if self._chain and self._chain[-1].breaks else []  # else: a new step (or recompile)
        self._chain = chain
        slot = Slot(index=len(chain), breaks=ends_at_graph_break(gm))
        chain.append(slot)
        self.slots.append(slot)
        if self._recorder.finished:  # a graph compiled after a recorded step (a recompile): record the next one
            self._recorder = Recorder(self._recorded)
        back = _input_grad_bytes(example_inputs)
        fakes = _symbolic_inputs(gm, example_inputs) if shared and is_dynamic(gm) else None
        if not shared:
            return self._wrap(slot, gm, fakes, back, self._compile(gm, example_inputs, self.compiler, slot, back))
        held = held_before(chain, slot.index)
        if not slot.breaks:
            return self._wrap(slot, gm, fakes, back, self._compile(gm, example_inputs, self.compiler, slot, back,
                                                                   held=held, before=slot.index,
                                                                   price=_price(chain[:slot.index])))
        # more graphs follow, unseen yet: the first step runs this one at its floor (fx codegen,
        # cheap to make); once the rest is known it is planned for good (``chain``)
        slot.provisional = True
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

        return self._wrap(slot, gm, fakes, back, first, replan)

    def _wrap(self, slot: Slot, gm: torch.fx.GraphModule, fakes: list | None, back: float, fn: Callable,
              replan: Callable[[list], Callable | None] | None = None) -> Swappable:
        """The callable dynamo runs for ``slot``: its calls recorded for the first step, and kept
        with what planning it again takes (``_recorded``)."""
        made = Swappable(fn, replan, slot, self._record)
        self._made[id(slot)] = (made, gm, fakes, back)
        return made

    def _record(self, slot: Slot, outputs: Any, inputs: Any) -> None:
        if not self._recorder.finished:
            self._recorder.called(slot, outputs, inputs)

    def _recorded(self, calls: list[Slot]) -> None:
        """The first step's graph calls, in order, once its backward starts. Each call holds its
        forward's leftovers until its backward, so the step needs ``step_peak`` over them: more than
        the chain planned for where one graph ran k > 1 times, or where graphs dynamo compiled as
        steps of their own (the breaks between them in code around them, e.g. FSDP2's per-block
        hooks) were each planned within the whole budget. Under a byte budget the step then exceeds,
        one graph run k times is planned again on its next call (``_repeated``); several graphs are
        first run for a step at the plans that leave the least after their forwards (``_at_floor``),
        then planned again for good in call order, as a chain of graph breaks is
        (``_floors_recorded``)."""
        self._calls = calls
        times = Counter(id(s) for s in calls)
        slots = list({id(s): s for s in calls}.values())
        for s in slots:
            s.calls = times[id(s)]
            if s.calls > 1 and s.planned is not None and is_relative(self.planner.budget):
                s.planned.notes.append(f"runs {s.calls} times a step (a block compiled once, called per layer): the "
                                       f"percentage applies to one call's peak; a byte budget bounds the whole step")
        if is_relative(self.planner.budget) or any(s.planned is None for s in slots):
            return
        from ..optimize import parse_budget

        budget = parse_budget(self.planner.budget, 1.0)
        if self._recorder.eager_inputs and not self._warned_outside:
            self._warned_outside = True
            warnings.warn(
                f"remat: a byte budget ({budget:.0f} bytes) covers the graphs torch.compile hands remat; here a "
                f"graph's input comes from code run outside them (eager layers, such as an embedding, or blocks "
                f"compiled one by one with a head left eager), whose memory comes on top. Compile the whole model, "
                f"or lower the budget by what that code holds", stacklevel=2)
        if len(calls) < 2:
            return
        if any(s.provisional for s in slots):  # planned again for its chain on its next call: judge the step after
            if not self._rerecorded:
                self._rerecorded = True
                self._recorder = Recorder(self._recorded)
            return
        if _fits(calls, budget):
            return
        if len(slots) == 1:
            self._made[id(slots[0])][0].replan_with(functools.partial(self._repeated, slots[0], calls, budget))
            return
        for s in slots:
            s.first_after = s.after
            self._made[id(s)][0].replan_with(functools.partial(self._at_floor, s))
        self._recorder = Recorder(functools.partial(self._floors_recorded, budget))

    def _at_floor(self, slot: Slot, args: list) -> Callable:
        """``slot``'s graph planned to leave the least after its forward (``LEFTOVER``: room for
        the calls after it), as fx-generated code (cheap to make), for one step."""
        _, gm, fakes, back = self._made[id(slot)]
        slot.provisional = True
        return self._compile(gm, fakes or args, "eager", slot, back, floor=LEFTOVER, fused=False)

    def _floors_recorded(self, budget: float, calls: list[Slot]) -> None:
        """The step run with every graph at ``_at_floor``: each planned again for good on its next call,
        in call order: within what the calls before it hold, leaving what those after it need at
        their floors (``_for_good``; ``_repeated`` for a graph run several times)."""
        slots = list({id(s): s for s in calls}.values())
        if not _fits(calls, budget):
            warnings.warn(f"remat: the step's {len(slots)} graphs ({len(calls)} calls) need {step_peak(calls):.0f} "
                          f"bytes even at their floors, over the budget of {budget:.0f}: they keep their floor plans. "
                          f"Raise the budget to at least that, or give a percentage (each graph's own peak)",
                          stacklevel=2)
            for s in slots:
                s.replans.append(f"at its floor: the step's graphs need {step_peak(calls):.0f} bytes there")
            return
        for s in slots:
            again = self._repeated if s.calls > 1 else self._for_good
            self._made[id(s)][0].replan_with(functools.partial(again, s, calls, budget))

    def _for_good(self, slot: Slot, calls: list[Slot], budget: float, args: list) -> Callable:
        """``slot``'s graph (run once a step) planned with the real compiler within what the calls
        before it hold, leaving what those after it need while its leftovers live (``chain``)."""
        _, gm, fakes, back = self._made[id(slot)]
        at = next(i for i, c in enumerate(calls) if c is slot)
        held, tail = held_before(calls, at), tail_bytes(calls, at)
        before = (slot.planned, slot.after, slot.need)
        try:  # (the input gradients it hands back count with what is held: ``step_peak`` counts them)
            fn = self._compile(gm, fakes or args, self.compiler, slot, back, held=held + back, before=at, tail=tail)
        except InfeasibleError as e:
            slot.planned, slot.after, slot.need = before
            slot.replans.append(f"keeps its floor: {type(e).__name__}: {e}")
            warnings.warn(f"remat: graph call {at} of the step keeps its floor plan: planning it within {held:.0f} "
                          f"bytes held before it and {tail:.0f} needed after it failed: {e}", stacklevel=2)
            return self._made[id(slot)][0].fn
        slot.provisional = False
        slot.replans.append(f"planned again as call {at} of the step's {len(calls)}: {held:.0f} bytes held before "
                            f"it, {tail:.0f} needed after it")
        return fn

    def _repeated(self, slot: Slot, calls: list[Slot], budget: float, args: list) -> Callable:
        """``slot``'s graph planned again so that the step's calls fit ``budget`` (``step_peak``).

        Run k times, the step needs about (k - 1) A + N: A what one call's forward leaves, N its
        own peak. A plan within B - (k - 1) a whose forward leaves at most a (a tail of B - k a
        after its forward: ``chain.with_tail``) fits. Both bounds bind, from either side, so a is
        tried first at (B - N) / (k - 1) with the current plan's N, then downwards on a grid (each
        try a compile), and the first that fits refined by bisection towards the one above it; the
        plan of least recomputation that fits is kept. Where none fits, the plan that leaves the
        least (``LEFTOVER``), with a warning."""
        _, gm, fakes, back = self._made[id(slot)]
        inputs = fakes or args
        k = slot.calls
        high = min(max(slot.after, slot.first_after), budget / k)  # (after a step at its floor: the plan before)
        fitting: list[tuple] = []
        tries = [0]

        def attempt(**plan: Any) -> tuple | None:
            tries[0] += 1
            try:
                fn = self._compile(gm, inputs, self.compiler, slot, back, before=k - 1, **plan)
            except InfeasibleError:
                return None
            got = (fn, step_peak(calls), (slot.planned, slot.after, slot.need))
            if _fits(calls, budget):
                fitting.append(got)
            return got

        def tried(a: float) -> bool:  # whether a plan leaving at most ``a`` a call fits
            before = len(fitting)
            attempt(held=(k - 1) * a, tail=budget - k * a)
            return len(fitting) > before

        slot.provisional = False
        guess = (budget - slot.need) / (k - 1)  # the current plan's own peak, its leftovers cut to fit
        start = guess if 0 < guess < high else high * (1 - 1 / REPEAT_GRID)
        with progress.task(f"remat.backend: graph {slot.index} runs {k} times a step: planning it again so that "
                           f"the step fits {budget:.0f} bytes"):
            above = high
            for a in [start * (1 - i / REPEAT_GRID) for i in range(REPEAT_GRID)]:
                if tried(a):
                    for _ in range(REPEAT_REFINE):  # between the fitting a and the one above it
                        mid = (a + above) / 2
                        if tried(mid):
                            a = mid
                        else:
                            above = mid
                    break
                above = a
            floor = attempt(floor=LEFTOVER) if not fitting else None
        if not fitting:
            if floor is None:
                raise InfeasibleError(f"remat: graph {slot.index} runs {k} times a step and cannot be planned again "
                                      f"at its floor")
            fn, peak, (slot.planned, slot.after, slot.need) = floor
            warnings.warn(
                f"remat: graph {slot.index} runs {k} times a step (a block compiled once, called per layer), and even "
                f"at its floor the step needs {peak:.0f} bytes, over the budget of {budget:.0f}: raise the budget to "
                f"at least that, or give a percentage (each call's own peak)", stacklevel=2)
            slot.replans.append(f"runs {k} times a step: at its floor, the step needs {peak:.0f} bytes, over the "
                                f"budget")
            return fn
        fn, peak, (slot.planned, slot.after, slot.need) = min(
            fitting, key=lambda got: got[2][0].prediction.recompute_cost)
        slot.replans.append(f"runs {k} times a step: planned again so that the step's calls fit the budget (step "
                            f"peak {peak:.0f} of {budget:.0f} bytes, {slot.after:.0f} left by each call's forward; "
                            f"{tries[0]} plans compiled)")
        return fn

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
        # the graph's parameters: where .grad is allocated, the backward adds each gradient in itself (``accumulate``)
        positions = tuple(i for i, t in enumerate(inputs) if isinstance(t, torch.nn.Parameter) and t.requires_grad)
        params = [t if i in positions else None for i, t in enumerate(inputs)]

        def state() -> list:
            return params

        part = functools.partial(part, params=positions)

        def planned() -> Any:  # this graph's plan, once partitioned
            return self.planner.planned[-1] if len(self.planner.planned) > made else None

        if compiler == "eager":
            from torch._dynamo.backends.common import aot_autograd

            from .eager_ops import eager_dropout, eager_layouts
            from .module import fx_codegen

            def one(bw: torch.fx.GraphModule, example: list) -> Callable:
                fn = fx_codegen(bw, example)
                if tangents.ORIGINAL not in bw.meta:
                    return fn
                return tangents.Backward(fn, bw, lambda original: fx_codegen(original, example))

            def backward(bw: torch.fx.GraphModule, example: list) -> Callable:  # (``accumulate``'s two forms)
                return accumulate.compiled(bw, example, one, state)

            # fx codegen only: gradients as eager's, dropout included; no zero gradients for outputs
            # the loss does not use; the backward traced without autocast, as eager autograd runs it after
            # the user's autocast block (torch's default traces it under the forward's autocast: casts
            # to bf16 in the backward of fp32 ops, e.g. CPU attention's math path, 6.5e-3 off on HF GPT-2)
            with eager_dropout(), eager_layouts(), tangents.no_zero_grads(planned), \
                    torch._functorch.config.patch(backward_pass_autocast="off"):
                fn = aot_autograd(fw_compiler=fx_codegen, bw_compiler=backward, partition_fn=part,
                                  keep_inference_input_mutations=True)(gm, inputs)
        else:
            import torch._inductor.config as inductor_config
            from torch._inductor.compile_fx import compile_fx

            key = ":".join(f"{k}={v}" for k, v in sorted(plan.items()))
            # inductor runs the order and holds the memory the plan was judged by (``fusion``; the
            # backward is compiled later, so the settings go with each compile)
            key += f":{cache_key()}"
            # inductor's code runs the convolutions channels-last (the weight gradients and some
            # values laid out again, copies): below what that code can meet, compile without the
            # layout optimization (slower convolutions, no copies) rather than refuse, or miss a percentage
            fallback = _convolutions(gm) and inductor_config.layout_optimization
            first = functools.partial(part, fallback=True) if fallback else part
            try:
                with inductor_config.patch(custom_partitioner_fn=_inductor_partitioner(self.planner, first, key)), \
                        tangents.no_zero_grads(planned), unaliased_donations(), _partitioned_each_time(self.planner):
                    fn = compile_fx(gm, inputs, inner_compile=inner_compile(state), config_patches=config_patches())
            except InfeasibleError as e:
                if not fallback:
                    raise
                key += ":layout=off"
                with inductor_config.patch(custom_partitioner_fn=_inductor_partitioner(self.planner, part, key)), \
                        tangents.no_zero_grads(planned), unaliased_donations(), _partitioned_each_time(self.planner):
                    fn = compile_fx(gm, inputs, inner_compile=inner_compile(state),
                                    config_patches={**config_patches(), "layout_optimization": False})
                if len(self.planner.planned) > made:
                    self.planner.planned[-1].notes.append(
                        f"compiled without inductor's channels-last layout optimization: with it, {e}")
        return fn

    @property
    def step_peak(self) -> float | None:
        """The predicted peak of a training step over its graphs' calls, with their current plans
        (``chain.step_peak``; None before the first step's backward)."""
        return step_peak(self._calls) if self._calls else None

    @property
    def report(self) -> list[dict[str, Any]]:
        """One summary per graph compiled, of its current plan (solver, budget, predicted peak,
        recompute fraction, ``recompute_time``: predicted seconds of the code's recomputation; with
        graph breaks, what it holds and leaves room for)."""
        return [{**s.planned.summary(), "replans": list(s.replans), "calls_per_step": s.calls}
                for s in self.slots if s.planned is not None]


def _fits(calls: list[Slot], budget: float) -> bool:
    """Whether a step's graph calls, with their current plans, fit a byte budget (``step_peak``)."""
    return step_peak(calls) <= budget


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
            cost: str = DEFAULT_COST, gradients: str = "auto", plan_cache: Any = None,
            search: Any = None) -> RematBackend:
    """A torch.compile backend planning each graph within ``budget`` with ``solver``.

    ``cost``: the op cost model (``remat.compiled.costs``): ``"roofline"`` (seconds from the
    device's peak FLOP/s and bandwidth), ``"profile"`` (each distinct op timed once on the device,
    cached on disk), ``"flops"``, ``"paper"``, or ``"auto"`` (default: profile on CUDA, roofline
    elsewhere). ``gradients``: "allocated" where the parameters' ``.grad`` exists before each step
    (gradient accumulation, DDP, ``zero_grad(set_to_none=False)``): the compiled backward's returned
    gradients are then held until it ends, and the plan counts them; "none"; "auto": as
    ``remat.measure`` steps, allocated on CUDA. ``plan_cache``: a directory where each graph's plan
    is stored, and loaded from when the same graph is compiled under the same terms (a restarted
    run): no planning then (``remat.compiled.storedplans``). ``search``: the planner's own search limits
    (``remat.Searching``: its searches' time limits, and when each runs; default: the defaults)."""
    from .costs import check

    check(cost)
    from ..optimize import candidates, parse_budget

    if compiler not in COMPILERS:
        raise InputError(f"compiler must be one of {', '.join(COMPILERS)}, got {compiler!r}")
    candidates(solver)  # unknown solver names raise here, not inside torch.compile
    parse_budget(budget, 1.0)  # so does a budget that cannot be read
    return RematBackend(Planner(budget, solver, mode, cost, name="compiled", strict=False,
                                fused=compiler == "inductor", loss_only=True, gradients=gradients,
                                cache=plan_cache, search=search), compiler)


def _partitioned_each_time(planner: Planner) -> Any:
    """With a plan cache, inductor's partitioner key is the same in a restarted run, so inductor's
    own caches of compiled graphs serve it; AOTAutograd's would hand back a partition without
    calling the planner, which records each graph's plan: that one is off (the plan cache makes
    partitioning cheap)."""
    import contextlib

    if planner.cache is None:
        return contextlib.nullcontext()
    return torch._functorch.config.patch(enable_autograd_cache=False)


def _inductor_partitioner(planner: Planner, partition: Callable, key: str) -> Any:
    from torch._inductor.custom_graph_pass import CustomPartitionerFn

    class InductorPartitioner(CustomPartitionerFn):
        """Inductor's ``custom_partitioner_fn``: remat's planner after inductor's joint passes."""

        def __call__(self, gm: torch.fx.GraphModule, joint_inputs: Any, **kwargs: Any) -> Any:
            kwargs.pop("compiler", None)
            return partition(gm, joint_inputs, **kwargs)

        def uuid(self) -> Any:  # with a plan cache, the same in every process using it (``_partitioned_each_time``)
            from .. import __version__
            made_by = (f"{planner.cache.directory.resolve()}:remat {__version__}" if planner.cache is not None
                       else id(planner))
            return (f"remat:{planner.budget}:{planner.solver}:{planner.mode}:{planner.cost}:{planner.gradients}:"
                    f"{made_by}:{key}")

        def __reduce__(self) -> Any:  # inductor pickles its config into cache keys: the uuid stands for it
            return (str, (self.uuid(),))

    return InductorPartitioner()
