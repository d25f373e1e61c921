"""``remat.optimize``: model + example inputs + budget -> a module that trains within the budget.

The front-end of the whole spine (DESIGN.md): capture the model (``remat.capture``), turn the
budget into bytes, run the solver(s), judge every plan by the simulation of the schedule the
runtime really executes (``runtime.predict``: the plan's own schedule or its kept set), wrap the
cheapest one that fits (``runtime.RematModule``), and, with ``verify=True``, run one real step
to check the *measured* peak. If the measurement is over the budget, the planning budget is
tightened by the measured excess and the solvers run again, a few rounds at most; if the budget
still cannot be met the error says by how much.

Budget (``remat.budget``): bytes (int/float), a size string (``"2GiB"``, ``"512MB"``, ``"300 KiB"``),
a percentage of the vanilla step's activation peak (``"40%"``) or a fraction of it (a number in
(0, 1): ``0.4`` is 40%, never 0.4 bytes). With ``verify`` the vanilla peak is measured on
the plain model (one step, state restored), so a percentage is of what PyTorch really uses, in-place
ops included (a new input shape met in training too: remat.plancache); without it, the simulated peak of the
plain schedule on the captured graph, which is higher for models with in-place ops because the
runtime executes them out of place.

Tolerance: the measured peak may exceed the budget by ``tolerance`` (relative, default 1%)
before a re-plan. On CPU the compiled step is measured at the allocator level (the profiler's
allocations replayed, temporaries inside ops included, as the generated code's walk counts
them; the interpreter's plans by the storage tracker, as their simulation counts), so the slack
only covers what no graph node models: RNG states kept for dropout replay (5 KiB each), 0-dim
loss scalars. On CUDA the caching allocator rounds every block up to 512 bytes, which a
graph of N live values can add N * 512 bytes to; 1% covers that for tensors of 50 KB and more.

Tested against the runtime and measure modules on real models (tests/test_optimize.py): gradient
equality for every solver, measured peak within budget, error messages for bad input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import nn

from . import judge, progress, schedule, solvers
from .api import min_budget, solve
from .budget import UNITS, fmt_bytes, is_relative, parse_budget  # noqa: F401 - remat.optimize.parse_budget
from .budget import parse as parse_budget_syntax
from .errors import BudgetError, InfeasibleError, InputError, RematError, StepError  # noqa: F401
from .capture import Program, check_model, explain, trace, warn_hooks
from .compiled.costs import DEFAULT_COST
from .compiled.searching import checked_search
from .graph import Graph
from .measure import held_gradients, measure
from .plan import Plan
from .report import build as build_report
from .runtime import Compiled, RematModule, executed_schedule, predict
from .simulate import simulate

@dataclass
class Choice:
    """A plan and the simulation of the schedule the runtime executes for it."""

    plan: Plan
    peak: float
    recompute_cost: float
    planning_budget: float | None
    tried: list[dict] = field(default_factory=list)


def candidates(solver: str) -> list[str]:
    """Check ``solver`` names a registered training solver or ``auto`` (unknown names raise,
    listing the known ones); the names it stands for."""
    solvers.get(solver)
    return [solver]


def _choice(plan: Plan) -> Choice:
    return Choice(plan, plan.peak, plan.recompute_cost, plan.budget, plan.stats.get("tried", []))


def plan_within(graph: Graph, budget: float, solver: str, mode: str, rounds: int = 3,
                base: float | None = None, named: bool = True, **options: Any) -> Choice:
    """``solver``'s plan within ``budget`` as ``remat.solve`` makes it (judged on the executed
    schedule, the best over the planning budgets that fit, its floor if nothing else fits);
    InfeasibleError naming the smallest budget it meets when ``budget`` is below that, or, with
    ``named=False`` (a caller that tries otherwise and drops the message), without seeking it: that
    is the solver's floor search (on a captured HF Jamba, 10 s of auto's for a shortlist's refusal).
    ``options`` go to the solver (auto: ``candidates``). auto's gap to the MILP bound is not
    sought: no report of optimize's shows it, and the partitioner's searches plan a graph at up to
    a dozen planning budgets (the cost benchmark's two-layer MLP at 75%: 5.4-6.9 s of planning with
    it, 2.3-3.0 s without)."""
    if solver == "auto":
        options.setdefault("milp_gap", False)
    plan = solve(graph, budget, solver=solver, mode=mode, **options)
    if not plan.feasible:
        if not named:
            raise InfeasibleError(f"{solver} makes no plan within {fmt_bytes(budget)} on {graph.name} (the smallest "
                                  "budget it meets was not sought)")
        raise _too_small(graph, budget, solver, mode, base)
    return _choice(plan)


def smallest_choice(graph: Graph, solver: str, mode: str = "time") -> Choice | None:
    """``solver``'s plan of least executed peak (``remat.judge.floor``), None if it makes none."""
    try:
        low = judge.floor(graph, solver, mode)
    except (ValueError, RuntimeError):
        return None
    return None if low is None else _choice(low)


def smallest_budget(graph: Graph, solver: str, mode: str = "time") -> float:
    """The smallest budget ``solver`` meets on ``graph`` (``remat.min_budget``; inf if none)."""
    c = smallest_choice(graph, solver, mode)
    return math.inf if c is None else c.peak


def _too_small(graph: Graph, budget: float, solver: str, mode: str, base: float | None = None) -> InfeasibleError:
    vanilla = base if base is not None else vanilla_peak(graph)
    low = smallest_budget(graph, solver, mode)
    return InfeasibleError(
        f"budget {fmt_bytes(budget)} ({100 * budget / vanilla:.1f}% of the vanilla peak "
        f"{fmt_bytes(vanilla)}) is below the minimum: the smallest budget {solver} can meet on "
        f"{graph.name} is {fmt_bytes(low)} ({100 * low / vanilla:.1f}%, {int(math.ceil(low))} bytes): "
        f"raise the budget to at least that"
        if math.isfinite(low) else
        f"budget {fmt_bytes(budget)} ({100 * budget / vanilla:.1f}% of the vanilla peak {fmt_bytes(vanilla)}): "
        f"{solver} finds no plan at all on {graph.name}; try solver='auto'",
        needed=low if math.isfinite(low) else None)


def vanilla_peak(graph: Graph) -> float:
    """Simulated activation peak of the plain training step: the base of percentage budgets."""
    return simulate(graph, schedule.vanilla(graph)).peak


def optimize(model: nn.Module, example_inputs: Any, budget: int | float | str, solver: str = "auto",
             mode: str = "time", *, cost: str = DEFAULT_COST, verify: bool = True, rounds: int = 3,
             tolerance: float = 0.01, executor: str = "compiled", plan_cache: Any = None,
             shapes: Any = None, plan: Any = None, gradients: str = "auto", search: Any = None) -> nn.Module:
    """A module that trains ``model`` within ``budget`` bytes of activation memory, same gradients.

    ``solver``: a registered training solver (``remat.solvers.names("training")``) or ``"auto"``
    (``remat.solvers.auto``, the one ``remat.solve`` runs: every default candidate within a 30 s
    limit, the cheapest executed plan that fits). ``cost``: what recomputation is weighed in:
    ``"roofline"`` (seconds, max of FLOPs over the device's peak and bytes moved over its bandwidth,
    plus a per-op overhead), ``"profile"`` (each distinct op timed once on the model's device, cached
    on disk), ``"flops"``, or ``"auto"`` (default: profile on CUDA, roofline elsewhere, the fastest
    plans in the cost benchmark; ``remat.compiled.costs``). ``verify``: run one real
    step (model state, gradients and RNG restored afterwards) and re-plan, at most ``rounds``
    times, while the measured peak exceeds ``budget * (1 + tolerance)``.

    ``executor``: ``"compiled"`` (default) runs the plan as two fx-generated functions, the
    forward saving the kept values and the backward recomputing as the schedule says
    (``remat.compiled``); ``"interpret"`` is the earlier op-by-op interpreter
    (``remat.runtime``), kept as a named fallback for graphs AOTAutograd cannot trace. A budget
    that needs no recomputation, where the generated code would save under 3% of eager's measured
    peak, runs the model itself (``report.executor == "eager"``: no overhead; ``_runs_eager``).

    ``plan_cache``: a directory; each plan is stored there keyed by the model's structure, the
    input signature, the autocast state, the budget, solver, mode and cost, and a later call with
    the same key loads it instead of planning (``remat.plancache``). ``shapes``: more example
    inputs (same form as ``example_inputs``: other batch sizes, sequence lengths) planned up
    front, so that training never stops to plan. A signature first seen in training is planned
    as the first one is (its own measured vanilla peak, the check step), and says so once.
    ``plan``: a ``Plan`` (or the path of one saved with ``module.plan.save(path)``) to run
    instead of planning; it must have been made for this model and these inputs.
    ``gradients``: whether the parameters' ``.grad`` is allocated when each step starts
    ("allocated": gradient accumulation, DDP, ``zero_grad(set_to_none=False)``; "none"; "auto",
    default: as ``remat.measure`` steps, allocated on CUDA). Where it is, the generated backward's
    returned gradients are held together until it ends, and the plan and its check count them.

    Wrappers: ``DDP(remat.optimize(model, ...))`` and ``remat.optimize(DDP(model), ...)`` both train
    with DDP's all-reduce (the second puts the planned module inside the given DDP and returns
    it); FSDP2 works as ``fully_shard(remat.optimize(model, ...))`` (``remat.distributed``).
    """
    if mode not in ("time", "memory"):
        raise InputError(f"mode must be 'time' or 'memory', got {mode!r}")
    if executor not in ("compiled", "interpret"):
        raise InputError(f"executor must be 'compiled' or 'interpret', got {executor!r}")
    candidates(solver)
    held_gradients(gradients, None)  # so is an unknown gradients=
    checked_search(search)  # and a search= that is not a Searching
    parse_budget_syntax(budget)  # an unreadable budget is refused before any work
    check_model(model, example_inputs, "remat.optimize")
    model = _unwrap_compiled(model)
    warn_hooks(model)
    from . import distributed, plancache

    wrapped = distributed.optimize_wrapped(model, lambda inner: optimize(
        inner, example_inputs, budget, solver, mode, cost=cost, verify=verify, rounds=rounds, tolerance=tolerance,
        executor=executor, plan_cache=plan_cache, shapes=shapes, plan=plan, gradients=gradients, search=search))
    if wrapped is not None:  # DDP: the planned module inside it
        return wrapped
    if executor == "interpret":
        if plan_cache is not None or shapes is not None or plan is not None or gradients != "auto" or search:
            raise InputError("plan_cache, shapes, plan, gradients and search need the compiled executor "
                             "(executor='compiled')")
        return _optimize_interpreted(model, example_inputs, budget, solver, mode, cost, verify, rounds, tolerance)
    try:
        return plancache.optimize_signatures(model, example_inputs, budget, solver, mode, cost, verify, rounds,
                                             tolerance, plan_cache=plan_cache, shapes=shapes, plan=plan,
                                             one=_optimize_compiled, gradients=gradients, search=search)
    except InfeasibleError as e:
        own = own_checkpointing(model)
        if own is None or not is_relative(budget):
            raise
        raise InfeasibleError(
            f"{e}. The model checkpoints its own activations ({own[0]}), so a percentage is of its step as "
            f"checkpointed; remat plans in place of that checkpointing: call {own[1]} first for a share of the "
            f"plain step, or give the budget in bytes", needed=e.needed) from None


# (flag a model's layers carry while it checkpoints, the library, its (enable, disable) methods, newest first)
OWN_CHECKPOINTING = (
    ("gradient_checkpointing", "transformers", (("activation_checkpointing_enable()", "activation_checkpointing_disable()"),
                                                ("gradient_checkpointing_enable()", "gradient_checkpointing_disable()"))),
    ("grad_checkpointing", "timm", (("set_grad_checkpointing()", "set_grad_checkpointing(False)"),)),
)


def own_checkpointing(model: nn.Module) -> tuple[str, str] | None:
    """How the model checkpoints its own activations, where a library's flag says so: (how it was
    turned on, how to turn it off), with the methods this model has. Its vanilla step is then
    already checkpointed; remat traces through ``torch.utils.checkpoint`` and plans the step's ops
    in its place."""
    for m in model.modules():
        for flag, library, methods in OWN_CHECKPOINTING:
            if getattr(m, flag, None) is True:
                on, off = next(((a, b) for a, b in methods if hasattr(model, b.split("(")[0])), methods[-1])
                return f"{library}' {on}" if library.endswith("s") else f"{library}'s {on}", f"model.{off}"
    return None


def _optimize_compiled(model: nn.Module, example_inputs: Any, budget: int | float | str, solver: str, mode: str,
                       cost: str, verify: bool, rounds: int, tolerance: float, *,
                       gradients: str = "auto", search: Any = None) -> nn.Module:
    """One input signature, planned: measure the vanilla step, plan, verify (``optimize``)."""
    from .capture import split_inputs
    from .compiled.module import CompiledModule
    from .compiled.partitioner import Planner

    args, kwargs = split_inputs(example_inputs)
    report: dict[str, Any] = {"executor": "compiled"}
    vanilla = None
    device = next((p.device for p in model.parameters()), None)
    # on the CPU the allocator-level peak: the generated code's walk counts the temporaries inside
    # ops (convolution workspaces: 1.6 MB in a small ConvNext's depthwise backward, against a
    # 0.2 MB op-level peak), which the storage tracker cannot see
    method = "profiler" if device is None or device.type == "cpu" else "auto"
    if verify:  # percentages are of what PyTorch really uses, in-place ops included
        vanilla = report["vanilla_measured_peak"] = measure_restoring(model, example_inputs, method, gradients).peak

    def make_planner(planning_budget: float | None = None) -> Planner:
        return Planner(budget, solver, mode, cost, vanilla=vanilla, device=device, name=type(model).__name__,
                       planning_budget=planning_budget, gradients=gradients, search=search)

    module = CompiledModule(model, lambda: Planner(budget, solver, mode, cost, device=device,
                                                   name=type(model).__name__, gradients=gradients, search=search))
    step = module.compile_for(args, kwargs, make_planner())
    target = step.planned.budget
    planning, least = target, math.inf
    refused = None  # no plan's code meets the budget, but eager's step does: it runs eager
    try:
        for k in range(rounds + 1 if verify else 0):
            measured = measure_restoring(module, example_inputs, method, gradients)
            report.update(measured_peak=measured.peak, method=measured.method, verify_rounds=k)
            if measured.peak <= target * (1 + tolerance):
                break
            if step.planned.peak > target * (1 + max(tolerance, 0.0)) or below_floor(step.planned, target,
                                                                                     tolerance):
                # the plan's code predicted over as well: the planner's own search, down to its floor
                # and by the code's peak, found no plan whose code fits (a re-plan within less searched
                # again for nothing: the CPU-size HF ResNet bf16 at "50%" was refused after 26.5 s,
                # 11 s of it the re-plan, with the same least plan); or the budget is below the floor
                # of every plan's code: no re-plan can fit
                raise _least_plan_over(step.planned, target, measured.peak, vanilla, solver)
            if k == rounds:
                over = measured.peak - target
                raise InfeasibleError(
                    f"budget {fmt_bytes(target)} cannot be met on the real step: the best plan "
                    f"({step.planned.plan.stats.get('chosen', step.planned.plan.solver)}) measured "
                    f"{fmt_bytes(measured.peak)} ({measured.method}), {fmt_bytes(over)} "
                    f"({100 * over / target:.1f}%) over; predicted {fmt_bytes(step.planned.peak)}. Raise the budget "
                    "by at least that much")
            planning = planning * min(0.97, target / measured.peak)
            least = min(least, measured.peak)
            try:
                step = module.compile_for(args, kwargs, make_planner(planning))
            except InfeasibleError:  # no plan within the tightened planning budget: name the real one
                if step.planned.peak > target * (1 + max(tolerance, 0.0)):  # its code was predicted over as well
                    raise _least_plan_over(step.planned, target, measured.peak, vanilla, solver) from None
                raise InfeasibleError(
                    f"budget {fmt_bytes(target)} cannot be met on the real step: the generated code of "
                    f"{solver}'s least plan peaks at {fmt_bytes(least)} ({measured.method}, "
                    f"{int(math.ceil(least))} bytes), over the planning graph's estimate. Raise the budget to at "
                    "least that",
                    needed=least) from None
    except InfeasibleError as e:
        if not (verify and vanilla is not None and vanilla <= target * (1 + tolerance)):
            raise
        refused = e
    report.update(step.planned.summary())
    if refused is not None:  # (with gradients allocated a generated backward holds them all until it ends)
        step.eager = True
        report["notes"] = [*report.get("notes", []), (
            f"eager PyTorch's step fits the budget and no plan's generated code does ({refused}): the step runs "
            f"eager PyTorch")]
        report.update(executor="eager", measured_peak=vanilla, predicted_peak=vanilla, recompute_cost=0.0,
                      recompute_fraction=0.0, recompute_time=0.0)
    elif verify and _runs_eager(step, target, report["measured_peak"], vanilla, tolerance):
        step.eager = True
        report["notes"] = [*report.get("notes", []), (
            f"nothing to recompute within the budget, and the generated code measured "
            f"{100 * report['measured_peak'] / vanilla:.1f}% of eager's peak: the step runs eager PyTorch, "
            f"which costs nothing over it")]
        report.update(executor="eager", measured_peak=vanilla)
    if not step.eager and (traced := step.traced()) is not None:
        report["notes"] = [*report.get("notes", []), traced]
    if not step.eager and (own := own_checkpointing(model)) is not None:
        report["notes"] = [*report.get("notes", []), (
            f"the model checkpoints its own activations ({own[0]}): remat's plan replaces that checkpointing; "
            f"the vanilla peak is of the step as the model runs it, checkpointed, and the step with nothing "
            f"recomputed would hold {fmt_bytes(step.planned.vanilla)}")]
    report.update(budget=target, vanilla_predicted_peak=step.planned.vanilla, compile_seconds=step.compile_seconds,
                  solver=step.planned.plan.stats.get("chosen", step.planned.plan.solver),
                  mode=step.planned.plan.mode or mode, kept=len(step.planned.split.saved),
                  tried=step.planned.tried, dropped_outputs=list(step.flat.dropped))
    module.report = build_report(report, step.planned.joint.graph, step.planned.steps, type(model).__name__)
    return module


EAGER_SHARE = 0.97  # a plan that recomputes nothing and measures above this share of eager's peak runs eager


def _runs_eager(step: Any, target: float, measured: float, vanilla: float | None, tolerance: float) -> bool:
    """Whether the step should run the model itself: its plan recomputes nothing, eager's
    measured step fits the budget, and the generated code measured at least ``EAGER_SHARE`` of
    eager's peak. Such code is eager's step run from Python, op by op: on the CPU ViT and ResNet
    it cost 1.025-1.065x eager's time for at most 2.5% of its memory. Where the code saves more
    (a language model's loss written over its dying logits: 0.82-0.88 of eager's peak, and
    0.90-0.97x its time) it runs."""
    return (vanilla is not None and step.planned.prediction.recompute_cost == 0
            and vanilla <= target * (1 + tolerance) and measured >= EAGER_SHARE * vanilla)


def _least_plan_over(planned: Any, target: float, measured: float, vanilla: float | None,
                     solver: str) -> InfeasibleError:
    """The step measured over the budget, and a re-plan's generated code was predicted over it too
    (the planner searched down to its floor for one that fits): name what it needs.

    The walk of the generated code counts what the planning graph does not (temporaries inside
    ops: on the CPU a depthwise convolution's backward allocates im2col columns many times its
    input), so a budget the planning graph meets can be below every plan's real peak. The walk
    may also over-predict, so a plan predicted over is measured before it is refused."""
    need = max(planned.peak, measured)
    share = f" ({100 * need / vanilla:.1f}% of the measured vanilla peak)" if vanilla else ""
    floor = planned.plan.stats.get("code_floor")
    why = (f" Whatever a plan recomputes, its generated code needs at least {fmt_bytes(floor)}: "
           f"{planned.plan.stats.get('code_floor_why', '')}." if floor is not None else "")
    return InfeasibleError(
        f"budget {fmt_bytes(target)} is below what remat's least plan ({planned.plan.stats.get('chosen', solver)}) "
        f"needs when it runs: it measured {fmt_bytes(measured)} against {fmt_bytes(planned.peak)} predicted for its "
        f"generated code{share}, temporaries inside ops (such as convolution workspaces) included.{why} Raise the "
        f"budget to at least {fmt_bytes(need)} ({int(math.ceil(need))} bytes)", needed=need)


def below_floor(planned: Any, target: float, tolerance: float) -> bool:
    """Whether ``planned`` was made at the floor of every plan's generated code, above ``target``
    (``codefloor``): no plan within less can meet it."""
    return planned.plan.stats.get("code_floor", 0.0) > target * (1 + max(tolerance, 0.0))


def _input_copy(t: torch.Tensor) -> torch.Tensor:
    """A measurement's own copy of an input tensor: same data, layout and ``requires_grad``
    (parameters passed as inputs stay themselves)."""
    if isinstance(t, nn.Parameter):
        return t
    return t.detach().clone().requires_grad_(t.requires_grad)


def _unwrap_compiled(model: nn.Module) -> nn.Module:
    """The module inside ``torch.compile(model)``: remat plans the model itself (use
    ``remat.backend`` to combine both)."""
    inner = getattr(model, "_orig_mod", None)
    if isinstance(inner, nn.Module):
        import warnings

        warnings.warn("remat.optimize got a torch.compile'd module: optimizing the module inside it. To compile "
                      "remat's plan, use torch.compile(model, backend=remat.backend(budget=...)) instead",
                      stacklevel=3)
        return inner
    return model


def _optimize_interpreted(model: nn.Module, example_inputs: Any, budget: int | float | str, solver: str,
                          mode: str, cost: str, verify: bool, rounds: int, tolerance: float) -> RematModule:
    """The interpreter fallback (``executor="interpret"``): ``runtime.RematModule``. Its capture
    knows FLOP, profiled and paper costs; the roofline is planned as FLOPs there."""
    notes = []
    from .compiled.costs import resolve

    cost = resolve(cost, next((p.device for p in model.parameters()), None))
    if cost == "roofline":
        cost = "flops"
        notes.append("cost: the interpreter's capture has no roofline costs; planned with FLOPs")
    program = trace(model, example_inputs, cost=cost)
    graph = program.graph
    vanilla = vanilla_peak(graph)
    report: dict[str, Any] = {"executor": "interpret", "vanilla_predicted_peak": vanilla, "cost": cost}
    if notes:
        report["notes"] = notes
    if verify:  # percentages are of what PyTorch really uses, in-place ops included
        report["vanilla_measured_peak"] = measure_restoring(model, example_inputs).peak
    target = report["budget"] = parse_budget(budget, report.get("vanilla_measured_peak", vanilla))
    choice = plan_within(graph, target, solver, mode, base=report.get("vanilla_measured_peak"))

    def replan(args: tuple, kwargs: dict) -> Compiled:
        p = trace(model, kwargs if not args else (args if not kwargs else _no_mix()), cost=cost)
        b = parse_budget(budget, vanilla_peak(p.graph))
        c = plan_within(p.graph, b, solver, mode)
        return Compiled.of(p, c.plan.kept, c.plan)

    module = RematModule(model, Compiled.of(program, choice.plan.kept, choice.plan), replan=replan)
    if verify:
        choice = _verify(module, program, example_inputs, target, choice, solver, mode, rounds, tolerance, report)
    report.update(_summary(choice))
    module.report = build_report(report, graph, executed_schedule(graph, choice.plan), type(model).__name__)
    return module


def _no_mix() -> Any:
    raise StepError("remat: re-planning needs inputs passed all positionally or all by keyword")


def _summary(c: Choice) -> dict[str, Any]:
    return {"solver": c.plan.solver, "mode": c.plan.mode, "predicted_peak": c.peak,
            "recompute_cost": c.recompute_cost, "planning_budget": c.planning_budget,
            "kept": len(c.plan.kept), "tried": c.tried}


def _verify(module: RematModule, program: Program, inputs: Any, budget: float, choice: Choice, solver: str,
            mode: str, rounds: int, tolerance: float, report: dict) -> Choice:
    graph = program.graph
    target = choice.planning_budget if choice.planning_budget is not None else budget
    for k in range(rounds + 1):
        measured = measure_restoring(module, inputs)
        report.update(measured_peak=measured.peak, method=measured.method, verify_rounds=k)
        if measured.peak <= budget * (1 + tolerance):
            return choice
        if k == rounds:
            break
        target = target * min(0.97, budget / measured.peak)
        try:
            choice = plan_within(graph, target, solver, mode, rounds=1, base=report.get("vanilla_measured_peak"))
        except BudgetError:
            break
        module.compiled = module._plans[program.key] = Compiled.of(program, choice.plan.kept, choice.plan)
    over = report["measured_peak"] - budget
    raise InfeasibleError(
        f"budget {fmt_bytes(budget)} cannot be met on the real step: the best plan ({choice.plan.solver}) "
        f"measured {fmt_bytes(report['measured_peak'])} ({report['method']}), {fmt_bytes(over)} "
        f"({100 * over / budget:.1f}%) over; predicted {fmt_bytes(choice.peak)}. Raise the budget by at "
        f"least that much")


def measure_restoring(module: nn.Module, inputs: Any, method: str = "auto", gradients: str = "auto"):
    """``measure`` one step (``method``: see ``remat.measure``), which gives back gradients, buffers
    (BatchNorm statistics) and RNG. The step runs on copies of the input tensors: the user's keep
    their data (a forward may write into an input) and their ``.grad`` (an input may require
    one), and no gradient flows out of them into what computed them."""
    inputs = pytree.tree_map_only(torch.Tensor, _input_copy, inputs)
    # on CUDA one warm-up step first: the first matmul allocates cuBLAS's workspace, not an activation
    on_cuda = any(p.is_cuda for p in module.parameters())
    ours = type(module).__module__.startswith("remat.")
    try:
        with progress.task("verifying the plan: one real training step" if ours else
                           f"measuring one vanilla training step of {type(module).__name__}"):
            return measure(module, inputs, method=method, warmup=1 if on_cuda else 0, gradients=gradients)
    except Exception as e:  # noqa: BLE001 - the user's model failing on its inputs: one clear line
        if ours or isinstance(e, (RematError, MemoryError)) or "OutOfMemory" in type(e).__name__:
            raise
        raise explain(e, type(module).__name__, "run") from e

