"""The planner as an AOTAutograd partition function: joint graph in, planned forward and
backward graphs out. ``remat.optimize`` (via ``aot_module_simplified``) and ``remat.backend``
(via torch.compile, eager or inductor) both partition with it, so one plan, one code.

For each joint graph it is called with: build the planning Graph (``jointgraph.build``), turn
the budget into bytes (a percentage is of this graph's vanilla peak: measured when the caller
gives it, else simulated), plan within it (``optimize.plan_within``: the cheapest plan whose
executed schedule fits), and split the joint graph by that schedule (``split.split``). With
several graphs (torch.compile graph breaks), a byte budget is shared (``chain``): each graph is
planned within what the graphs before it hold (``held``), leaving room for the graphs after it
(``tail``), or provisionally at its floor until those are known (``floor``).
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import torch.fx as fx

from .. import heap, progress
from ..errors import InfeasibleError, RematError
from ..explain import held_across
from ..measure import held_gradients
from ..plan import Plan
from ..simulate import Simulation
from . import accumulate, batchnorm, castcache, costs, fusedcost, fusionguard, storedplans, tangents
from .chain import with_tail, without_tail
from .codefloor import CodeFloor, code_floor
from .codepeak import CodePeak, code_peak
from .batchnorm import update_statistics_in_place
from .gradlayout import grads_as_parameters
from .inplace import write_over_dying_inputs
from .costs import DEFAULT_COST
from .jointgraph import JointGraph, build, total_cost
from .judged import JudgedSearches, code_needs
from .refusals import BudgetSplitError, Refusals
from .searching import Searching, cache_term, checked_search
from .split import Split, split

LEFTOVER = "leftover"  # ``floor=LEFTOVER``: the provisional plan that leaves the least after its forward
NOT_YET = object()  # a value not computed yet (where None is a value)


@dataclass
class Planned:
    """What one partition decided, for the report."""

    joint: JointGraph
    plan: Plan
    steps: list
    prediction: Simulation
    vanilla: float                  # simulated vanilla peak of this graph
    budget: float                   # bytes this graph was planned within
    split: Split
    seconds: float                  # planning + splitting
    kept_bytes: float
    notes: list[str] = field(default_factory=list)
    tried: list[dict] = field(default_factory=list)   # each candidate's plan at each planning budget
    code: CodePeak | None = None    # the peak of the generated graphs themselves (``codepeak``)
    held: float = 0.0               # bytes earlier graphs (graph breaks) hold while this one runs
    tail: float = 0.0               # bytes later graphs need on top of what this one's forward leaves
    provisional: bool = False       # planned at its floor until the graphs after it are known
    recompute_time: float | None = None  # predicted device seconds of the code's recomputation (``fusedcost``)
    unused: frozenset[str] = frozenset()  # tangents assumed to arrive as None (``tangents``)
    zero_grads_skipped: bool = False      # its autograd function hands None for them (``tangents.no_zero_grads``)

    @property
    def peak(self) -> float:
        """The predicted peak of the step as it runs: the generated code's, else the simulated one."""
        return self.code.peak if self.code is not None else self.prediction.peak

    @property
    def recompute_fraction(self) -> float:
        """Recomputed work as a fraction of one forward, in the graph's own costs."""
        total = total_cost(self.joint.graph)
        return self.prediction.recompute_cost / total if total else 0.0

    def summary(self) -> dict[str, Any]:
        return {"graph": self.joint.graph.name, "nodes": len(self.joint.graph), "solver": self.plan.solver,
                "chosen": self.plan.stats.get("chosen", self.plan.solver),
                "budget": self.budget, "vanilla_predicted_peak": self.vanilla,
                "predicted_peak": self.peak, "simulated_peak": self.prediction.peak,
                "cost": self.joint.cost, "recompute_cost": self.prediction.recompute_cost,
                "recompute_fraction": self.recompute_fraction, "forward_cost": total_cost(self.joint.graph),
                "recompute_time": self.recompute_time,
                "kept_bytes": self.kept_bytes,
                "saved_values": len(self.split.saved), "recomputed_ops": self.split.recomputed,
                "unplanned_ops": self.split.unplanned, "planning_seconds": self.seconds,
                "held_before": self.held, "tail": self.tail, "provisional": self.provisional,
                "after_forward": self.code.after_forward if self.code is not None else None, "notes": self.notes}


class StalePlanError(RematError, ValueError):
    """A stored plan (plan cache, ``optimize(plan=...)``) was made for another joint graph."""


class Planner(JudgedSearches, Refusals):
    """AOTAutograd ``partition_fn`` that plans each joint graph within ``budget``.

    ``budget``: bytes, a size string ("2GiB") or a percentage ("40%"; a float in (0, 1) is a
    fraction). ``vanilla``: the measured vanilla peak percentages are of (one graph), else each
    graph's simulated vanilla peak. ``planning_budget``: bytes to plan for instead of the budget
    (``optimize`` tightens it after a measured step came out over). ``strict=False`` (the
    backend): a graph whose floor is above a percentage budget (a loss computed in a graph of its
    own after a graph break) is planned at its floor, with a warning, instead of failing.
    ``plan``: a stored plan (``Plan.load``, the plan cache) for the first graph: no solver runs; its
    recorded graph fingerprint must be this graph's, else ``StalePlanError``. ``gradients``:
    whether ``.grad`` is allocated before each step ("allocated": gradient accumulation, DDP,
    ``zero_grad(set_to_none=False)``; "none"; "auto": as ``remat.measure`` steps on the graph's
    device, allocated on CUDA): where it is, the returned gradients count until the backward ends.
    ``cache``: a directory where each graph's plan (or refusal) is kept and loaded from (``storedplans``).
    ``search``: the limits of the planner's own searches (``searching.Searching``; default: its defaults).
    """

    def __init__(self, budget: Any, solver: str = "auto", mode: str = "time", cost: str = DEFAULT_COST,
                 vanilla: float | None = None, device: Any = None, name: str = "model",
                 planning_budget: float | None = None, strict: bool = True, plan: Plan | None = None,
                 fused: bool = False, loss_only: bool = False, gradients: str = "auto", cache: Any = None,
                 search: Searching | None = None) -> None:
        from ..plancache import PlanCache

        held_gradients(gradients, None)  # (a bad value fails here)
        self.search = checked_search(search)
        self.cache = PlanCache(cache) if cache is not None else None  # plans kept on disk (``storedplans``)
        self._disk: str | None = None  # this call's file name in it
        self.budget = budget
        self.gradients = gradients  # parameter gradients allocated before the step? (``measure.held_gradients``)
        self._held_grads = False    # this call's
        self.plan = plan
        self.solver = solver
        self.mode = mode
        self.cost = cost
        self.vanilla = vanilla
        self.device = device
        self.name = name
        self.planning_budget = planning_budget
        self.strict = strict  # False: a graph a percentage cannot be met on is planned at its floor
        self.fused = fused    # the code runs under inductor: its peak is walked as fused kernels run it
                              # (graphs with convolutions excepted: ResNet on the CPU measured up to 34% over)
        self._fused = fused   # this call's
        self.loss_only = loss_only  # a graph with a scalar output is backpropagated from it alone (``tangents``)
        self._unused: frozenset[str] = frozenset()  # this call's tangents assumed to arrive as None
        self._fallback = False  # this call's caller compiles otherwise when the budget is not met
        self._refused_seconds = 0.0  # planning spent on refusals since the last plan made
        self.params: tuple[int, ...] = ()  # forward inputs that are parameters, each gradient added in by the
        self._params: tuple[int, ...] = ()  # backward itself where ``.grad`` is allocated (``accumulate``); this call's
        self.planned: list[Planned] = []
        self._judged: dict[tuple, dict[tuple, float]] = {}  # this call's judged schedules (``_fused_judge``)
        self._forwards: dict = {}  # this call's edited forward graph per joint graph (``_code``)
        self._margin = self.search.fused_margin  # this call's aside for the fused walk (``fused_margin_cpu`` on a CPU)
        self._made: dict[tuple, Any] = {}  # ``_again``: plans (or refusals) by the graph and terms they were made for
        self._key: tuple | None = None     # this call's key to ``_made``

    def __call__(self, gm: fx.GraphModule, joint_inputs: Any, *, num_fwd_outputs: int, held: float = 0.0,
                 before: int = 0, tail: float = 0.0, floor: bool | str = False, index: int | None = None,
                 fused: bool | None = None, price: float = 0.0, fallback: bool = False,
                 params: tuple[int, ...] | None = None, **options: Any) -> tuple[fx.GraphModule, fx.GraphModule]:
        """Plan one joint graph. With a byte budget after graph breaks (``chain``): ``held`` bytes are
        held by the ``before`` graphs before it, ``tail`` bytes are needed by those after it while
        its forward's leftovers live; ``floor``: plan at the solver's floor (provisional; ``LEFTOVER``:
        the plan leaving the least after its forward, for graphs planned together later); ``index``:
        its place in the step (graph names); ``fused``: this call's code runs under inductor (default:
        the planner's ``fused``); ``price``: the graphs before it recompute about this much per byte
        they free, so a floor freeing bytes for less is taken whatever the budget (a loss graph after
        a break: its room goes to the graphs before it); ``fallback``: the caller compiles the graph
        another way when this one's code cannot meet the budget (inductor without its layout
        optimization), so a budget it cannot meet raises InfeasibleError, a percentage too, as soon
        as the fused search's floor shows it."""
        from . import dynamic
        from .memo import remembering

        castcache.share_casts(gm, num_fwd_outputs)  # gradients of a parameter read k times under autocast, as eager
        symbolic = dynamic.is_dynamic(gm)
        # a byte budget holds at every size: planned at the top of the sizes' buckets, guarded to them
        at = dynamic.tops(gm) if symbolic and not _is_relative(self.budget) else {}
        kw = dict(num_fwd_outputs=num_fwd_outputs, held=held, before=before, tail=tail, floor=floor, index=index,
                  fused=fused, price=price, options=options)
        self._fallback = fallback
        self._params = self.params if params is None else tuple(params)
        with heap.frozen(), remembering(), progress.task(f"planning the joint graph ({len(gm.graph.nodes)} nodes) within "
                                          f"{self.budget}{', dynamic shapes' if symbolic else ''}"):
            # (the walks of this graph's splits read each value's storages once)
            if not symbolic:
                fw, bw = self._plan_once(gm, joint_inputs, **kw)
                return self._loss_only(fw, accumulate.for_aot(bw))
            called = dynamic.symbols(gm)
            try:
                fw, bw = self._plan_once(dynamic.hinted(gm, at), joint_inputs, **kw)
            except InfeasibleError as e:
                if all(called.get(k) == v for k, v in at.items()):
                    raise
                fits_at = f"the budget does not fit the top of the sizes' bucket ({_sizes(at)}): {e}"
                at = {k: called[k] for k in at}  # planned, and guarded, at the compiling call's sizes
                fw, bw = self._plan_once(dynamic.hinted(gm, at), joint_inputs, **kw)
                self.planned[-1].notes.append(fits_at)
        # planned at the compiling call's sizes (or its buckets' tops); the code that runs is split
        # from the symbolic graph
        planned = self.planned[-1]
        if at:
            dynamic.bound(gm, at)
            where = (f"{_sizes(at)}, the top of the sizes' power-of-two bucket (the call that compiled it: "
                     f"{_sizes(called)})" if at != called else f"the sizes of the call that compiled it ({_sizes(at)})")
            planned.notes.append(f"dynamic shapes: planned at {where}, and guarded to sizes up to those: a larger size "
                                 "compiles a plan of its own, so the byte budget holds at every size")
        else:
            planned.notes.append(f"dynamic shapes: planned at the sizes of the call that compiled it "
                                 f"({_sizes(called)}); the code runs at every size, its memory scaling with them")
        if not planned.steps:  # inductor's own partition
            return _inductor_partition(gm, joint_inputs, num_fwd_outputs, options)
        if not self._fused:
            batchnorm.real_statistics(gm)  # as ``build`` did on the copy
        planned.split = self._split_code(planned.joint.on(gm), planned.steps)
        return planned.split.forward, accumulate.for_aot(planned.split.backward)

    def _guard(self, jg: JointGraph, sp: Split, code: CodePeak) -> None:
        """Under inductor: its fusions held to the fused walk's peak (``fusionguard``)."""
        if self._fused:
            traces: dict = {}
            code_peak(sp.forward, sp.backward, jg.num_fwd_outputs, fused=True, unused=self._unused, traces=traces,
                      held_grads=self._held_grads)
            fusionguard.attach(sp.forward, sp.backward, traces, code.peak)

    def _loss_only(self, fw: fx.GraphModule, bw: fx.GraphModule) -> tuple[fx.GraphModule, fx.GraphModule]:
        """The backward that reads none of the tangents this plan assumed unused (``tangents``)."""
        if not self._unused:
            return fw, bw
        self.planned[-1].unused = self._unused
        self.planned[-1].notes.append(
            f"the gradients of the graph's {len(self._unused)} outputs besides the loss are assumed never to come "
            "(only the loss is backpropagated from): not allocated, not counted; a step where one comes runs the "
            "backward as traced, with a warning")
        stripped = tangents.without(bw, self._unused)
        stripped.meta[tangents.ORIGINAL].planned = self.planned[-1]
        if (acc := bw.meta.get(accumulate.ACCUMULATING)) is not None:  # both forms read no unused tangent
            stripped.meta[accumulate.ACCUMULATING] = tangents.without(acc, self._unused)
            stripped.meta[accumulate.ACCUMULATING].meta[tangents.ORIGINAL].planned = self.planned[-1]
        bw = stripped
        return fw, bw

    def _plan_once(self, gm: fx.GraphModule, joint_inputs: Any, **kw: Any) -> tuple[fx.GraphModule, fx.GraphModule]:
        """``_plan``, its refusal kept for the same graph and terms (``_again``)."""
        self._key, self._disk = None, None
        started, count = time.perf_counter(), len(self.planned)
        try:
            made = self._plan(gm, joint_inputs, **kw)
        except InfeasibleError as e:
            if self._key is not None:
                self._made[self._key] = e
            if self._disk is not None:
                self.cache.store(self._disk, storedplans.refusal_entry(e))
            self._refused_seconds += time.perf_counter() - started
            raise
        if self._refused_seconds and len(self.planned) > count:  # the attempt the caller retried otherwise (inductor's layout optimization off)
            planned = self.planned[-1]
            planned.notes.append(f"planning took {planned.seconds:.1f} s, and {self._refused_seconds:.1f} s more "
                                 "in the refused attempt before it (counted in planning_seconds)")
            planned.seconds += self._refused_seconds
            self._refused_seconds = 0.0
        return made

    def _plan(self, gm: fx.GraphModule, joint_inputs: Any, *, num_fwd_outputs: int, held: float, before: int,
              tail: float, floor: bool | str, index: int | None, fused: bool | None, price: float,
              options: dict) -> tuple[fx.GraphModule, fx.GraphModule]:
        from ..optimize import BudgetError, parse_budget, plan_within, vanilla_peak

        from . import dynamic

        started = time.perf_counter()
        self._judged = {}
        self._forwards = {}
        self._fused = self.fused if fused is None else fused
        self._unused = tangents.assumed_unused(gm) if self.loss_only and tangents.available() else frozenset()
        inductor = self._fused  # this call's code goes to inductor (whatever walk its peak is read with)
        index = len(self.planned) if index is None else index
        jg = build(gm, num_fwd_outputs, cost=self.cost, name=f"{self.name}#{index}" if index else self.name,
                   device=self.device, statistics=not inductor)
        graph = jg.graph
        graph.pinned = jg.pinned  # always kept: generator states (draws are replayed), unreplayable draws
        device = next(filter(None, map(costs.node_device, jg.node_of.values())), None)
        # (a dynamic-shape graph's code is split again from the symbolic graph, unguarded: 3.4% over its walk at
        # a length below its bucket's top, on a tiny GPT-2)
        cpu = device is not None and device.type == "cpu" and dynamic.ORIGIN not in gm.meta
        self._margin = self.search.fused_margin_cpu if cpu else self.search.fused_margin
        self._held_grads = held_gradients(self.gradients, device)
        vanilla = vanilla_peak(graph)
        notes: list[str] = []
        if self.plan is not None and not self.planned:
            return self._stored(jg, vanilla, started)
        relative = _is_relative(self.budget)
        measured = self.vanilla is not None and not self.planned
        base = self.vanilla if measured else vanilla
        self._base_words = "the measured vanilla peak" if measured else "the vanilla peak its planning graph simulates"
        target = parse_budget(self.budget, base)
        if self.planning_budget is not None and not self.planned:
            target = min(target, self.planning_budget)
        if relative:
            held, tail = 0.0, 0.0  # a percentage applies to each graph's own peak
        if held:
            left = target - held
            notes.append(f"budget shared with {before} earlier graph(s) holding {held:.0f} bytes: this graph "
                         f"gets {max(left, 0):.0f}")
            if left <= 0:
                raise BudgetSplitError(
                    f"remat: the budget of {target:.0f} bytes is used up by the {before} graph(s) "
                    f"torch.compile made before this one (graph breaks; they hold {held:.0f} bytes while this "
                    f"graph runs). Remove the graph breaks (torch._dynamo.explain(model)(inputs) lists them), "
                    f"or give a percentage budget, which applies to each graph's own peak")
            target = left
        made_for = (fingerprint(graph)["fingerprint"], target, base, held, before, tail, floor, price, inductor,
                    self._fallback, self._unused, self.solver, self.mode, repr(sorted(options.items())))
        self._key = made_for
        if (again := self._again(jg, made_for, vanilla, held, tail, floor, started)) is not None:
            return again
        if self.cache is not None:
            import torch._inductor.config as inductor_config

            self._disk = storedplans.key(made_for, cost=self.cost, device=str(device), held_grads=self._held_grads,
                                         params=self._params, layout=inductor and inductor_config.layout_optimization,
                                         **({"search": term} if (term := cache_term(self.search)) else {}))
            if (loaded := self._load(jg, gm, joint_inputs, options, vanilla, target, started, held=held, tail=tail,
                                     provisional=bool(floor))) is not None:
                return loaded
        pg = with_tail(graph, tail) if tail > 0 else graph  # the graph the solvers plan on
        if tail > 0:
            notes.append(f"the graphs after this one need {tail:.0f} bytes while its forward's leftovers live")
        whole = relative and parse_budget(self.budget, 1.0) >= 1.0 and self.planning_budget is None  # "100%"
        plain = vanilla if pg is graph else vanilla_peak(pg)  # the plain step's peak, tail included
        choice = None
        if floor == LEFTOVER:  # a tail above any peak: the end of the forward binds, the least left there
            on = with_tail(graph, 2 * vanilla + 1)
            choice = self._floor(on)
            notes.append("provisional: planned to leave the least after its forward, until the step's graphs, "
                         "recorded, are planned together")
            steps, prediction, sp, code = self._split(jg, choice, on)
        elif floor:
            choice = self._floor(graph)
            notes.append("provisional: planned at its floor until the graphs after this graph break are known")
            steps, prediction, sp, code = self._split(jg, choice)
            if held and code.peak > target:
                raise self._split_error(graph, target, held, before, InfeasibleError("its floor does not fit"))
        elif whole or target >= plain:  # nothing to recompute
            choice = plan_within(pg, max(target, plain), "none", self.mode, base=base)  # "100%": no recompute
            from ..budget import fmt_bytes

            covers = ("the vanilla peak" if whole else f"the planning graph's vanilla peak ({fmt_bytes(plain)}, "
                      f"without the ops' own temporaries)")
            notes.append(f"the budget covers {covers}: nothing is recomputed ({self.solver} not run)")
            steps, prediction, sp, code = self._split(jg, choice, pg)
            if not whole and code_needs(code, tail) > target:
                # the generated code holds more than the planning graph (inductor's channels-last
                # copies of convolution inputs): plan as for any budget below the peak
                notes.append("saving everything peaks over the budget in the generated code: planned within it")
                choice = None
            elif (low := self._cheap_floor(jg, pg, tail, price, code, notes) if price > 0 else None) is not None:
                choice, steps, prediction, sp, code = low
            elif inductor:  # (after every split: inductor's partitioner edits the joint graph)
                # "100%" whose code saving everything is over it: inductor's partition where it peaks lower
                over = code_needs(code, tail) > target
                own = self._min_cut(jg, gm, joint_inputs, options, code.peak if over else target, tail, code)
                if own is not None:
                    choice, steps, prediction, sp, code = own
                    notes.append("inductor's own partitioner (torch.compile's default) fits, at a peak no higher "
                                 "than saving everything: its partition is used" if not over else
                                 "saving everything peaks over the budget, and so does inductor's own partitioner "
                                 "(torch.compile's default), lower: its partition is used")
        recompute_time: Any = NOT_YET  # the report's predicted seconds, where the min-cut comparison made them
        if not floor and choice is None:
            choice, steps, prediction, sp, code = self._fit(jg, pg, target, tail, base, relative, vanilla,
                                                            notes, held, before)
            low = self._cheap_floor(jg, pg, tail, price, code, notes) if price > 0 else None
            if low is not None:
                choice, steps, prediction, sp, code = low
            elif inductor:  # (a plan recomputing nothing too: the partition may save less for what it recomputes)
                mine = recompute_time = self._recompute_time(jg, steps, prediction, sp)
                own = self._min_cut(jg, gm, joint_inputs, options, target, tail, code,
                                    than=(prediction.recompute_cost, mine))
                if own is not None:
                    theirs = own[0].plan.stats.get("recompute_time")
                    less = (f"recomputes {1e3 * theirs:.3g} ms against {1e3 * mine:.3g} ms, as inductor's fused code "
                            f"runs each, and saves {own[4].saved:.0f} bytes against {code.saved:.0f}: less in all, "
                            "with what each saves written and read back"
                            if mine is not None and theirs is not None else
                            f"recomputes {own[0].recompute_cost:.3g} against {prediction.recompute_cost:.3g}")
                    notes.append(f"inductor's own partitioner (torch.compile's default) fits and {less}: "
                                 "its partition is used")
                    choice, steps, prediction, sp, code = own
                    recompute_time = theirs
        choice.plan.stats.update(graph=fingerprint(graph), target=target)  # what a stored plan is checked by
        if steps:  # (inductor's own partition, no remat schedule, is not kept: it is made again)
            self._made[made_for] = (choice, steps, prediction, list(notes), code.peak)
        if self._disk is not None:
            self.cache.store(self._disk, storedplans.plan_entry(choice.plan, notes, code.peak,
                                                                time.perf_counter() - started, partition=not steps))
        kept_bytes = sum(graph[v].mem for v in held_across(graph, steps)) if steps else code.saved
        self.planned.append(Planned(joint=jg, plan=choice.plan, steps=steps, prediction=prediction,
                                    vanilla=vanilla, budget=target, split=sp,
                                    seconds=time.perf_counter() - started, kept_bytes=kept_bytes, notes=notes,
                                    tried=choice.tried, code=code, held=held, tail=tail, provisional=bool(floor),
                                    recompute_time=(self._recompute_time(jg, steps, prediction, sp)
                                                    if recompute_time is NOT_YET else recompute_time)))
        self._guard(jg, sp, code)
        return sp.forward, sp.backward

    def _again(self, jg: JointGraph, made_for: tuple, vanilla: float, held: float, tail: float,
               floor: bool | str, started: float) -> tuple[fx.GraphModule, fx.GraphModule] | None:
        """The plan made before for the same joint graph under the same budget and terms, split
        again: dynamo compiles a graph again when a guard fails even though the graph is the same
        (a Hugging Face classifier sets ``config.problem_type`` in its first call), and the search
        (most of a plan's seconds) would find the same plan. None when there is none, or its code
        peaks higher now. A refusal made for them is raised again."""
        if made_for not in self._made:
            return None
        if isinstance(self._made[made_for], InfeasibleError):
            raise self._made[made_for]
        choice, steps, prediction, notes, peak = self._made[made_for]
        sp, code = self._code(jg, steps)
        if code.peak > peak:
            return None
        notes = [*notes, "the same joint graph as one planned before under the same budget (dynamo compiled it again): "
                 "its plan is used again, not searched for"]
        return self._use(jg, choice.plan, steps, prediction, sp, code, vanilla, made_for[1], started, notes,
                         tried=choice.tried, held=held, tail=tail, provisional=bool(floor))

    def _use(self, jg: JointGraph, plan: Plan, steps: list, prediction: Simulation, sp: Split, code: CodePeak,
             vanilla: float, target: float, started: float, notes: list[str],
             **more: Any) -> tuple[fx.GraphModule, fx.GraphModule]:
        """Record a plan made before (stored, or kept by ``_again``), split as ``sp``, and hand
        back its two graphs (no ``steps``: inductor's own partition, ``_partition``)."""
        kept_bytes = sum(jg.graph[v].mem for v in held_across(jg.graph, steps)) if steps else code.saved
        seconds = self._recompute_time(jg, steps, prediction, sp) if steps else plan.stats.get("recompute_time")
        self.planned.append(Planned(joint=jg, plan=plan, steps=steps, prediction=prediction, vanilla=vanilla,
                                    budget=target, split=sp, seconds=time.perf_counter() - started,
                                    kept_bytes=kept_bytes, notes=notes, code=code, recompute_time=seconds, **more))
        self._guard(jg, sp, code)
        return sp.forward, sp.backward

    def _fit(self, jg: JointGraph, pg: Any, target: float, tail: float, base: float, relative: bool,
             vanilla: float, notes: list[str], held: float, before: int, bounded: bool = False) -> tuple:
        """The solver's plan whose generated code fits ``target`` (and leaves ``tail`` after its
        forward), with its schedule, simulation, split and code peak.

        Eager code whose plan within the budget is over it, where the budget is below the floor of
        every plan's code (``codefloor``): nothing is searched for the budget; the plan is made
        within that floor (``bounded``: this is that call, whose plan the caller reports against
        the real budget).

        The generated code runs ops the planning graph does not model (a loss's backward
        temporaries): while its own peak is over the budget, plan again within less. Under
        inductor (``fused``) the code's peak is below the planning graph's, whose values are all
        buffers: while it is well under the budget, plan again within more (less recomputation),
        and below the planning graph's floor, take the floor plan if its fused code fits.

        With ``auto`` or ``selective`` under inductor, plans are made for the fused code first
        (``_judged_selective``); the solvers' own plans are the fallback when none fits, and where one fits
        only when made within less than the budget, or with room under it, the fused search starts again
        from it."""
        from ..optimize import BudgetError, plan_within

        def fits(code: CodePeak) -> float:  # bytes over the target (negative: room left); a plan fits at <= 0:
            # no slack, a byte budget holds (0.5% let ViT bf16 at SAC's peak measure 0.3% over it)
            margin = 1 + self._margin if self._fused else 1  # inductor's own scheduling of what it recomputes
            return max(code.peak * margin, code.after_forward + tail) - target

        fused = self._judged_selective(jg, pg, target, tail) if self._fused else None
        if fused is not None:
            notes.append(f"planned for inductor's fused code ({fused[0].plan.stats['chosen']}, judged by the "
                         "fused walk)")
            return fused
        if self._fallback and self._fused:  # refused (and compiled otherwise) without searches that cannot fit
            self._refuse_early(jg, pg, target, base, held, tail)
        planning = target
        try:
            choice = self._choose(pg, planning, base, relative, vanilla, notes)
        except InfeasibleError as e:
            low = self._floor(pg) if self._fused else None
            fused = self._judged_selective(jg, pg, target, tail, [low]) if low is not None else None
            if fused is not None:
                notes.append("below the planning graph's floor: planned for inductor's fused code "
                             f"({fused[0].plan.stats['chosen']} from the floor plan, judged by the fused walk)")
                return fused
            if low is not None and fits(self._split(jg, low, pg)[3]) <= 0:
                choice = low
                notes.append("below the planning graph's floor, but inductor's fused code at that floor fits: "
                             "planned at the floor")
            elif not held:
                raise self._too_small(jg, pg, target, base, tail, e) from None
            else:
                raise self._split_error(jg.graph, target, held, before, e, jg) from None
        best = (choice, *self._split(jg, choice, pg))
        first = best
        searched = ""
        if not bounded and not self._fused and fits(best[4]) > 0:
            least = self._least_possible(jg)
            if least.peak > target:
                notes.append(f"no plan's generated code can meet the budget of {target:.0f} bytes: whatever is "
                             f"recomputed, it needs {least.peak:.0f} ({least.why()}): planned within that floor")
                best = self._fit(jg, pg, least.peak, tail, base, relative, vanilla, notes, held, before,
                                 bounded=True)
                stats = {**best[0].plan.stats, "code_floor": least.peak, "code_floor_why": least.why()}
                plan = dataclasses.replace(best[0].plan, stats=stats)  # (a copy: floors are cached)
                best = (dataclasses.replace(best[0], plan=plan), *best[1:])
                return self._ended(jg, pg, best, target, base, relative, held, tail, notes, "")
        # (the judged search is selective's)
        judged_too = not choice.plan.stats.get("floor") and not self._fused and self.solver in ("auto", "selective")
        below_tried: tuple = ()  # ``_below``'s answer, where it was searched before the judged search
        if judged_too and 0 < fits(best[4]) <= self.search.below_first * target:
            # a few percent over (the code's own temporaries): within less of the planning graph
            # first, whose plan the judged search below starts from (HF ResNet-152 at "50%": 3% over
            # in fp32, 6% in bf16; planning 21.5 -> 13.7 s and 23.1 -> 17.2 s, the same plans)
            below_tried = self._below(jg, pg, target, base, fits, first, notes)
            if fits(below_tried[0][4]) <= 0:
                best, planning = below_tried[:2]
        if judged_too and fits(best[4]) > 0:
            # from the plan (and per-block checkpointing's floor) first; the solver's floor, which
            # auto seeks over every candidate (5 s of a tiny BERT's 8), only when that finds none
            judged = (self._code_selective(jg, pg, target, tail, [choice], fits)
                      or self._code_selective(jg, pg, target, tail, [self._floor(pg)], fits, blocks=False))
            if judged is not None:
                notes.append(f"the generated code of the plan within the budget peaks {fits(best[4]):.0f} bytes over "
                             f"it: planned by the code's own peak ({judged[0].plan.stats['chosen']})")
                best = judged
        if (best is not first and not below_tried
                and best[2].recompute_cost > self.search.judged_over * first[2].recompute_cost):
            # the judged search's moves may recompute far more than a plan within less of the
            # planning graph (HF EfficientNet bf16: 0.98 of a forward against 0.13): search that too
            below, planned_within, _ = self._below(jg, pg, target, base, fits, first, notes)
            if fits(below[4]) <= 0 and below[2].recompute_cost < best[2].recompute_cost:
                best, planning = below, planned_within
        if fits(best[4]) > 0 and not best[0].plan.stats.get("floor"):
            best, planning, searched = below_tried or self._below(jg, pg, target, base, fits, best, notes)
        elif self._fused:  # bisect the planning budget between the best fitting one and the first over
            lo, hi = planning, planning - fits(best[4])
            for _ in range(self.search.code_rounds + 1):
                if hi - lo <= self.search.loosen * target:
                    break
                try:
                    retry = plan_within(pg, hi, self.solver, self.mode, base=base, named=False)
                    got = (retry, *self._split(jg, retry, pg))
                except BudgetError:
                    break
                if fits(got[4]) > 0:
                    hi = (lo + hi) / 2
                    continue
                lo, hi = hi, hi - fits(got[4])
                if got[2].recompute_cost < best[2].recompute_cost:
                    notes.append(f"inductor's fused code fits when planned within {lo:.0f} bytes")
                    best = got
        fused = None
        if self._fused and fits(best[4]) > 0:
            fused = self._judged_selective(jg, pg, target, tail, [best[0]])
        elif self._fused and best[2].recompute_cost > 0 and (planning < target
                                                             or fits(best[4]) < -self.search.loosen * target):
            # a solver's plan that fits only when made within less (``_below``), or fits with room, recomputes
            # for what the planning graph holds and the fused code does not: from it, the fused search keeps
            # again what fits (the CPU held-out ResNet fp32 at 50%: 0.75 of a forward -> 0.43, 1.13-1.15x ->
            # 1.04-1.06x torch.compile's step)
            fused = self._judged_selective(jg, pg, target, tail, [best[0]], seconds=self.search.give_back_seconds)
            if fused is not None and (fits(fused[4]) > 0
                                      or fused[2].recompute_cost >= best[2].recompute_cost):
                fused = None
        if fused is not None:
            notes.append(f"planned for inductor's fused code ({fused[0].plan.stats['chosen']}, judged by the fused "
                         f"walk): it recomputes {fused[2].recompute_cost:.3g} against {best[2].recompute_cost:.3g}")
            best = fused
        elif not self._fused and best[2].recompute_cost > 0 and self.solver in ("auto", "selective") and (
                planning < target or fits(best[4]) < -self.search.room * target  # after ``_below``, or with room,
                or (fits(best[4]) < 0 and best[0].plan.stats.get("from_floor"))):  # or a least-peak plan with room
            judged = self._code_selective(jg, pg, target, tail, [best[0]], fits, blocks=planning < target)
            if judged is not None and judged[2].recompute_cost < best[2].recompute_cost:
                notes.append(f"planned by its generated code's own peak ({judged[0].plan.stats['chosen']}): it "
                             f"recomputes {judged[2].recompute_cost:.3g} against {best[2].recompute_cost:.3g}")
                best = judged
        if fits(best[4]) > 0 and not self._fused and self.solver in ("auto", "selective"):
            low = self._code_floor(jg, pg, tail)  # none fits: the least over is the one to name
            if low[4].peak < best[4].peak:
                notes.append(f"the code-judged search's floor ({low[0].plan.stats['chosen']}) needs "
                             f"{low[4].peak:.0f} bytes, against {best[4].peak:.0f} for the solvers' least plan"
                             + (": planned at it" if fits(low[4]) <= 0 else ""))
                best = self._cheapest_at(jg, pg, low, tail, notes)
        return best if bounded else self._ended(jg, pg, best, target, base, relative, held, tail, notes, searched)

    def _ended(self, jg: JointGraph, pg: Any, best: tuple, target: float, base: float, relative: bool, held: float,
               tail: float, notes: list[str], searched: str) -> tuple:
        """``_fit``'s best, after a note (and for the backend, ``_over_budget``) where its code is over ``target``."""
        code = best[4]
        if code.peak - target > 0:
            notes.append(f"the generated code peaks at {code.peak:.0f} bytes, over the budget of {target:.0f}"
                         + searched)
            if not self.strict:  # torch.compile: no measured step follows to re-plan from
                self._over_budget(jg, pg, code, target, base, relative, held, tail)
        return best

    def _least_possible(self, jg: JointGraph) -> CodeFloor:
        """Eager code: the peak no plan's code goes below (``codefloor``), from the split saving everything."""
        from torch.fx._lazy_graph_module import _use_lazy_graph_module

        from ..schedule import vanilla as save_everything

        with _use_lazy_graph_module(True):
            sp = self._split_code(jg, save_everything(jg.graph))
        return code_floor(sp.forward, sp.backward, jg.num_fwd_outputs, self._unused, self._held_grads)

    def _below(self, jg: JointGraph, pg: Any, target: float, base: float, fits: Callable[[CodePeak], float],
               first: tuple, notes: list[str]) -> tuple[tuple, float, str]:
        """The generated code of the plan within ``target`` peaks over it: search the planning
        budgets between the planning graph's floor and ``target`` for the plan of least
        recomputation whose code fits (``fits``, as in ``_fit``; ``first`` is the plan within
        ``target``, as ``_fit``'s best). The code's peak is not monotone in the planning budget
        (another plan is cheapest within each), so a budget that overshoots below the floor, or
        past a plan that fits, is not the end of the search.

        First, as before, plan again within the budget less the code's excess (at most
        ``search.code_rounds`` times; below the floor: at the floor); then, at most ``search.code_rounds + 1``
        more plans: with a plan that fits, bisect between the highest planning budget that fits
        and the lowest one above it that does not (less recomputation); with none, the floor,
        then the middle of the widest gap between the planning budgets tried. Returns the plan
        that fits with the least recomputation, else the one whose code is least over; its
        planning budget; and, when none fits, what was tried (for the note)."""
        from ..optimize import BudgetError, plan_within

        slack = 0.0
        tried: list[tuple[float, tuple]] = [(target, first)]  # (planning budget, _fit's best)
        floor: Any = None  # the floor choice, once a planning budget was below it or it was sought

        def ok(got: tuple) -> bool:
            return fits(got[4]) <= slack

        shortlist = (_shortlist(first[0].plan, self.search.shortlist, self.search.shortlist_within)
                     if self.solver == "auto" else None)

        def attempt(budget: float) -> tuple | None:  # the plan within budget, None when already tried
            nonlocal floor
            if floor is not None and budget <= floor.peak:
                budget, choice = floor.peak, floor
            else:
                try:
                    try:  # auto: its candidates cheapest at the budget first (a MobileNet: 3 s a re-plan for all 15)
                        choice = plan_within(pg, budget, self.solver, self.mode, base=base, named=False,
                                             **({"candidates": shortlist} if shortlist else {}))
                    except BudgetError:
                        if not shortlist:
                            raise
                        choice = plan_within(pg, budget, self.solver, self.mode, base=base, named=False)
                except BudgetError:
                    floor = self._floor(pg)
                    budget, choice = floor.peak, floor
            if any(b == budget and _same_plan(g[0], choice) for b, g in tried):
                return None
            got = (choice, *self._split(jg, choice, pg))
            tried.append((budget, got))
            return got

        planning, got = target, first
        for _ in range(self.search.code_rounds):
            over = fits(got[4])
            if over <= slack or got[0].plan.stats.get("floor"):
                break
            retry = attempt(planning - over)
            if retry is None:
                break
            asked = planning - over
            planning, got = tried[-1][0], retry
            notes.append(f"the generated code peaks {over:.0f} bytes over the budget: planned again within "
                         f"{planning:.0f}" + (f" (the planning graph's floor; {asked:.0f} is below it)"
                                              if planning > asked else ""))
        spent = 0
        while spent <= self.search.code_rounds:
            fitting = [b for b, g in tried if ok(g)]
            if fitting:  # towards less recomputation: between the highest that fits and the next over
                lo = max(fitting)
                hi = min((b for b, g in tried if b > lo and not ok(g)), default=None)
                if hi is None or hi - lo <= self.search.loosen * target:
                    break
                budget = (lo + hi) / 2
            elif floor is None:  # none fits: the least the planning graph allows first
                floor = self._floor(pg)
                if any(_same_plan(g[0], floor) for _, g in tried):  # the descent's last plan was its floor
                    continue
                budget = floor.peak
            else:  # then the middle of the widest gap between the planning budgets tried
                marks = sorted({b for b, _ in tried})
                width, budget = max(((b - a, (a + b) / 2) for a, b in zip(marks, marks[1:])), default=(0.0, 0.0))
                if width <= self.search.loosen * target:
                    break
            if attempt(budget) is None:
                break
            spent += 1
        fitting = [(b, g) for b, g in tried if ok(g)]
        if fitting:
            planning, best = min(fitting, key=lambda t: (t[1][2].recompute_cost, fits(t[1][4])))
            if best is not got:
                notes.append(f"planned within {planning:.0f}: its generated code fits, with the least recomputation "
                             f"of the {len(tried)} planning budgets tried")
            return best, planning, ""
        planning, best = min(tried, key=lambda t: (fits(t[1][4]), t[1][2].recompute_cost))
        marks = [b for b, _ in tried]
        at_floor = " (the planning graph's floor)" if floor is not None else ""
        return best, planning, (f": the generated code of none of the {len(tried)} plans made within planning budgets "
                                f"from {min(marks):.0f}{at_floor} to {max(marks):.0f} fits; the one of least peak "
                                f"(planned within {planning:.0f}) is used")

    def _recompute_time(self, jg: JointGraph, steps: list, prediction: Simulation, sp: Split) -> float | None:
        """Predicted device seconds of what the code recomputes: the plan's own cost for eager code,
        the fused model for inductor's (``fusedcost``); None where costs are not seconds."""
        if self.cost not in costs.SECONDS:
            return None
        if not self._fused:
            return prediction.recompute_cost
        again = fusedcost.recomputations(steps) if steps else _forward_ops_in(jg, sp.backward)  # (inductor's own)
        return fusedcost.recompute_seconds(jg, again, self.device)

    def _min_cut(self, jg: JointGraph, gm: fx.GraphModule, joint_inputs: Any, options: dict, target: float,
                 tail: float, code: CodePeak, than: tuple[float, float | None] | None = None) -> tuple | None:
        """Inductor's own partition (``min_cut_rematerialization_partition``, torch.compile at
        budget 1.0: it recomputes what fuses for free, batch norm and ReLU outputs from a
        convolution's) when it fits ``target`` and peaks no higher than ``code``, saving everything
        (it then saves less, and inductor runs its recomputations inside fused kernels), or, given
        ``than`` (remat's own plan within ``target``: its recompute cost and its predicted seconds
        in inductor's fused code, None where costs are not seconds), costs less: in those seconds
        where both have them (``fusedcost``), each with its saved values written by the forward and
        read back by the backward (``saved_seconds``), else in the planning graph's recompute
        costs. As a choice, schedule (none: not a remat schedule), prediction, split and code peak.

        Why seconds: the planning graph prices each recomputed op unfused, and inductor's partition
        recomputes many pointwise ops inside the kernels that read them. On an H200 (Llama 16x1024,
        bf16, at torch.compile b=1's peak; ``bench/results/gpu_probe_h200``) remat's plan recomputed
        0.092 of a forward in planning costs against the partition's 0.193, so it was kept; fused, the
        two came to 0.55 and 0.08 ms, and the steps measured 1.046-1.092x and 1.014x torch.compile's.
        Why what each saves: remat's plan fills the budget with values inductor recomputes inside its
        kernels for nothing but their reads (the CPU's Llama bf16 at the same peak: 0.174 against
        0.255 ms recomputed, 3.8 MB more saved, 0.964x against 0.919x torch.compile's step)."""
        own = self._partition(jg, gm, joint_inputs, options, target, tail)
        if own is None:
            return None
        theirs, cost, seconds = own[4], own[0].recompute_cost, own[0].plan.stats["recompute_time"]
        if than is None:
            if theirs.peak > code.peak:
                return None
        elif seconds is not None and than[1] is not None:  # with what each saves moved (``saved_seconds``)
            if seconds + fusedcost.saved_seconds(jg, theirs.saved, self.device) >= \
                    than[1] + fusedcost.saved_seconds(jg, code.saved, self.device):
                return None
        elif cost >= than[0]:
            return None
        own[0].plan.stats["saving_everything"] = {"peak": code.peak, "after_forward": code.after_forward}
        return own

    def _partition(self, jg: JointGraph, gm: fx.GraphModule, joint_inputs: Any, options: dict,
                   target: float, tail: float) -> tuple | None:
        """Inductor's own partition of ``gm`` as ``_min_cut``'s choice, schedule (none), prediction,
        split and code peak; None where it fails, or its code does not fit ``target`` (and ``tail``)."""
        from ..optimize import Choice

        from . import dynamic

        symbolic = dynamic.origin(gm)  # a dynamic-shape graph: partitioned as it is, judged at the planned sizes
        try:
            fw, bw = _inductor_partition(symbolic[0] if symbolic else gm, joint_inputs, jg.num_fwd_outputs, options)
        except Exception:  # noqa: BLE001 -- remat's own partition stands
            return None
        judged = (dynamic.hinted(fw, symbolic[1]), dynamic.hinted(bw, symbolic[1])) if symbolic else (fw, bw)
        theirs = code_peak(*judged, jg.num_fwd_outputs, fused=self._fused, unused=self._unused,
                           held_grads=self._held_grads)
        if code_needs(theirs, tail) > target:
            return None
        again = _forward_ops_in(jg, bw)
        cost = sum(jg.graph[v].cost * k for v, k in again.items())
        seconds = fusedcost.recompute_seconds(jg, again, self.device) if self.cost in costs.SECONDS else None
        plan = Plan(solver="inductor-min-cut", budget=target, feasible=True, peak=theirs.peak, recompute_cost=cost,
                    stats={"chosen": "inductor-min-cut", "recompute_time": seconds, "saved": theirs.saved})
        saved = [n.name for n in bw.graph.find_nodes(op="placeholder")]
        split_ = Split(forward=fw, backward=bw, saved=saved, recomputed=len(again), unplanned=0)
        return (Choice(plan=plan, peak=theirs.peak, recompute_cost=cost, planning_budget=target), [],
                Simulation(peak=theirs.peak, recompute_cost=cost), split_, theirs)

    def _load(self, jg: JointGraph, gm: fx.GraphModule, joint_inputs: Any, options: dict, vanilla: float,
              target: float, started: float, **more: Any) -> tuple[fx.GraphModule, fx.GraphModule] | None:
        """This call's plan from the cache (``storedplans``), split and walked; its refusal raised
        again. None where there is none, or its code now peaks over what was stored."""
        from ..runtime import _executed

        entry = self.cache.load(self._disk, kinds=("plan", "refused"))
        if entry is None:
            return None
        if (refused := storedplans.refusal(entry)) is not None:
            self._disk = None  # (stored already: ``_plan_once`` writes it no second time)
            raise refused
        plan = Plan.from_json(entry["plan"])
        if entry.get("partition"):  # inductor's own: made again
            own = self._partition(jg, gm, joint_inputs, options, target, more["tail"])
            if own is None:
                return None
            _, steps, prediction, sp, code = own
        else:
            steps, prediction = _executed(jg.graph, plan)
            sp, code = self._code(jg, steps)
        if not code.peak <= float(entry.get("peak", -1.0)) * (1 + 1e-9):
            return None
        notes = [*entry.get("notes", []), f"plan cache: loaded {self.cache.path(self._disk)} (planned in "
                 f"{float(entry.get('seconds', 0.0)):.1f} s when stored), not planned again"]
        return self._use(jg, plan, steps, prediction, sp, code, vanilla, target, started, notes, **more)

    def _floor(self, graph: Any) -> Any:
        """The solver's plan of least executed peak (a provisional plan before later graphs are seen)."""
        from ..optimize import smallest_choice

        choice = smallest_choice(graph, self.solver, self.mode)
        if choice is None:
            raise InfeasibleError(f"remat: {self.solver} makes no plan for graph {graph.name}")
        choice.plan.stats["floor"] = True
        return choice

    def _choose(self, graph: Any, target: float, base: float, relative: bool, vanilla: float,
                notes: list[str]) -> Any:
        """The solver's plan within ``target``, or (backend, percentage budget) its floor."""
        from ..optimize import BudgetError, plan_within, smallest_choice

        try:
            return plan_within(graph, target, self.solver, self.mode, base=base)
        except BudgetError:
            if self.strict or not relative or self._fallback:
                raise
            choice = smallest_choice(graph, self.solver, self.mode)
            if choice is None:
                raise
            choice.plan.stats["floor"] = True
            notes.append(f"{self.budget} of this graph's peak is below what any plan reaches: planned at "
                         f"its floor, {100 * choice.peak / max(vanilla, 1):.1f}%")
            warnings.warn(f"remat: graph {graph.name}: {notes[-1]}", stacklevel=3)
            return choice

    def _split(self, jg: JointGraph, choice: Any, planned_on: Any = None) -> tuple[list, Simulation, Split, CodePeak]:
        """The executed schedule of a choice (made on ``planned_on``, the graph or ``with_tail`` of
        it), its split into two graphs, and their own peak."""
        from ..runtime import _executed
        from ..simulate import simulate

        steps, prediction = _executed(planned_on or jg.graph, choice.plan)
        if planned_on is not None and planned_on is not jg.graph:
            steps = without_tail(steps)
            prediction = simulate(jg.graph, steps)
        return (steps, prediction, *self._code(jg, steps))

    def _code(self, jg: JointGraph, steps: list, judged: bool = False) -> tuple[Split, CodePeak]:
        """The two graphs that run ``steps``, as they will run, and their own peak. Their Python
        is generated when they first run: most splits are only judged (a tenth of planning time
        went to generating code for them). ``judged``: the split is walked and dropped, so its
        forward may be the planning call's one edited graph (``split.Forward``; fused code only:
        eager code's forward is rewritten in place after)."""
        from torch.fx._lazy_graph_module import _use_lazy_graph_module

        with _use_lazy_graph_module(True):
            sp = self._split_code(jg, steps, self._forwards if judged and self._fused else None)
        return sp, code_peak(sp.forward, sp.backward, jg.num_fwd_outputs, fused=self._fused, unused=self._unused,
                             held_grads=self._held_grads)

    def _split_code(self, jg: JointGraph, steps: list, forwards: dict | None = None) -> Split:
        """The two graphs that run ``steps``, with the in-place rewrites of fx-generated code."""
        sp = split(jg, steps, forwards)
        if not self._fused:  # fx-generated code: a (log-)softmax or its gradient over its dying input,
            write_over_dying_inputs(sp.forward)  # batch norms' running statistics updated in place
            write_over_dying_inputs(sp.backward)
            update_statistics_in_place(sp.forward)
            grads_as_parameters(sp.forward, sp.backward)  # each copied into .grad's layout where made
        else:  # inductor's channels-last weight gradients, copied where made (``gradlayout``)
            grads_as_parameters(sp.forward, sp.backward, jg.num_fwd_outputs)
        if self._held_grads and self._params and not accumulate.distributed():  # .grad allocated: each
            accumulate.in_place(sp.forward, sp.backward, self._params)         # added in where made, as eager does
        elif not self._held_grads:  # a .grad allocated after all is warned of (``accumulate._unheld``)
            sp.backward.meta[accumulate.UNHELD] = self._params
        return sp

    def _stored(self, jg: JointGraph, vanilla: float, started: float) -> tuple[fx.GraphModule, fx.GraphModule]:
        """Split by the stored plan ``self.plan``, after checking it was made for this graph."""
        from ..runtime import _executed

        graph, plan = jg.graph, self.plan
        made_for = (plan.stats or {}).get("graph") or {}
        here = fingerprint(graph)
        if made_for.get("fingerprint") != here["fingerprint"]:
            raise StalePlanError(
                f"the stored plan was made for another graph ({made_for.get('nodes', '?')} nodes, fingerprint "
                f"{str(made_for.get('fingerprint', '?'))[:12]}); this step traces to {here['nodes']} nodes, "
                f"fingerprint {here['fingerprint'][:12]} (the model's code, torch or remat changed)")
        target = float(plan.stats.get("target", plan.budget or vanilla))
        steps, prediction = _executed(graph, plan)
        sp, code = self._code(jg, steps)
        return self._use(jg, plan, steps, prediction, sp, code, vanilla, target, started,
                         ["stored plan: loaded, not planned"])


def _sizes(at: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in at.items())


def _same_plan(a: Any, b: Any) -> bool:
    """Two choices with one schedule. Within the planning graph's floor the solver's cheapest plan and its
    least-peak plan are different plans (a CPU-size HF Mistral in bf16 under auto: the cheapest's code needed
    6.50 MB, the floor plan's 5.47 MB, and the floor plan was taken for tried because its budget was)."""
    return a is b or a.plan.schedule == b.plan.schedule


def _inductor_partition(gm: fx.GraphModule, joint_inputs: Any, num_fwd_outputs: int,
                        options: dict) -> tuple[fx.GraphModule, fx.GraphModule]:
    """torch.compile's default partition of a joint graph (``min_cut_rematerialization_partition``)."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    static = options.get("static_lifetime_input_indices")
    return min_cut_rematerialization_partition(gm, joint_inputs, num_fwd_outputs=num_fwd_outputs,
                                               static_lifetime_input_indices=static)


def fingerprint(graph: Any) -> dict[str, Any]:
    """What a plan is valid for: the planning graph's node count and a hash of its nodes (names,
    ops, bytes, inputs) in order."""
    import hashlib

    h = hashlib.sha256()
    for v in graph.order:
        n = graph[v]
        h.update(repr((v, n.op, n.mem, tuple(n.inputs))).encode())
    return {"nodes": len(graph), "fingerprint": h.hexdigest()}


def _shortlist(plan: Any, size: int, within: float) -> tuple[str, ...] | None:
    """The ``size`` candidates of an auto plan that made the cheapest plans within its budget
    (from ``stats["tried"]``), None when it tried fewer: the ones to re-plan with just below it."""
    cheapest: dict[str, float] = {}
    for t in plan.stats.get("tried", []):
        if t.get("fits") and "recompute_cost" in t:
            cheapest[t["solver"]] = min(cheapest.get(t["solver"], float("inf")), t["recompute_cost"])
    if len(cheapest) <= size:
        return None
    least = min(cheapest.values())
    return tuple(s for s in sorted(cheapest, key=cheapest.get)[:size]
                 if not least or cheapest[s] <= within * least)


def _forward_ops_in(jg: JointGraph, backward: fx.GraphModule) -> Counter:
    """The joint graph's forward values a backward graph computes again (inductor's own partition), by count."""
    id_of = {n.name: v for v, n in jg.node_of.items()}
    return Counter(id_of[n.name] for n in backward.graph.nodes if n.op == "call_function" and n.name in id_of)


def _is_relative(budget: Any) -> bool:
    from ..budget import is_relative

    return is_relative(budget)  # "40%", 0.4 or "0.4": of the vanilla peak

