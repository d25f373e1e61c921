"""What the planner says when a budget cannot be met: the least budget that can, and why.

A refusal names bytes a later call is met at (``InfeasibleError.needed``): below the planning graph's
floor, the least budget the generated code meets (``_too_small``: for eager code the code-judged
search's floor, under inductor the fused search's); a byte budget the backend's plan is over
(``_over_budget``); a graph after a graph break left too little by the graphs before it
(``_split_error``). Where the gradients torch.compile allocates for a graph's outputs weigh in
(a transformers model's key and value cache), the refusal says so.

``Refusals`` is a part of ``partitioner.Planner``, which provides the planning call's state:
``solver``, ``mode``, ``search``, ``_fused``, ``_fallback``, ``_unused``, ``_base_words``, and the floors
(``_floor``, ``_split``, ``_least_possible``, ``JudgedSearches``' ``_fused_floor`` and ``_code_floor``).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from ..errors import InfeasibleError
from .codepeak import CodePeak
from .judged import code_needs
from .jointgraph import JointGraph

class BudgetSplitError(InfeasibleError):
    """A byte budget is used up by the graphs planned before this one (torch.compile graph breaks)."""


class Refusals:
    """The refusals (the module docstring), as methods of the planner."""

    def _too_small(self, jg: JointGraph, pg: Any, target: float, base: float, tail: float,
                   cause: InfeasibleError) -> InfeasibleError:
        """A budget below the planning graph's floor (which ``cause`` names): the refusal names the
        least budget the generated code meets. Under inductor that is below the planning floor
        (the fused search's floor); for eager code it can be above it, when the floor plan's
        code needs more than the planning graph sees (on one CPU thread a depthwise backward's
        im2col columns: 107 KB against a 64 KB planning floor), and a budget between the two
        would only be refused again after a measured step. With auto or selective, the least is
        also sought by the code-judged search (``_code_floor``), as ``_fit`` does when no plan's
        code fits (an HF ConvNeXt V2 on an AMD EPYC host: 0.476 of the vanilla peak, where the
        solvers' floor plan's code needs 0.539)."""
        from ..budget import fmt_bytes

        if self._fused:
            low = self._fused_floor(jg, pg, tail)
        else:
            floor = self._floor(pg)
            codes = [self._split(jg, floor, pg)[3]]
            if self.solver in ("auto", "selective"):
                codes.append(self._code_floor(jg, pg, tail)[4])
            low = min(code_needs(code, tail) for code in codes)
            low = low if low > floor.peak else float("inf")
        if not low < float("inf"):
            worth = self.search.output_grads_worth
            told = _output_grads_text(jg, floor.peak, self._unused, worth) if not self._fused else ""
            return InfeasibleError(f"{cause}{told}", needed=getattr(cause, "needed", None)) if told else cause
        what = (" with inductor's fused code" if self._fused
                else " (its generated code, temporaries inside ops included)")
        why = ""
        if not self._fused and (least := self._least_possible(jg)).peak >= 0.99 * low:  # (within 1%: it binds)
            # the code's own floor binds, which the planning graph's peaks do not show (a ConvNeXt V2: 422.6% of them)
            why = f"; whatever a plan recomputes, its generated code needs {fmt_bytes(least.peak)} ({least.why()})"
        return InfeasibleError(
            f"budget {fmt_bytes(target)} ({100 * target / base:.1f}% of {self._base_words}, {fmt_bytes(base)}) "
            f"is below the minimum: the smallest budget {self.solver} can meet on {jg.graph.name}{what} is "
            f"{fmt_bytes(low)} ({100 * low / base:.1f}%, {int(low) + 1} bytes){why}: raise the budget to at least "
            "that" + _output_grads_text(jg, low, self._unused, self.search.output_grads_worth), needed=int(low) + 1)

    def _refuse_early(self, jg: JointGraph, pg: Any, target: float, base: float, held: float, tail: float) -> None:
        """With a fallback (``__call__``), once the fused search found no plan: raise
        InfeasibleError where its floor (``_fused_floor``) is over ``target``, before the solvers'
        searches that could not meet it either (on a ResNet-152 a minute each). Not before the
        fused search: under the layout optimization a plan's judged peak is far from monotone in
        what it drops (the held-out ResNet: 1.13, 0.58, 0.89, 1.03 and 1.13 of torch.compile's
        peak along the order), so no cheaper look tells a budget it cannot meet."""
        low = self._fused_floor(jg, pg, tail)
        if low > target:
            raise InfeasibleError(f"remat: {self._over_text(jg, target, low, base, held)}{_raise_to(low + held)}",
                                  needed=int(low + held) + 1)

    def _over_budget(self, jg: JointGraph, pg: Any, code: CodePeak, target: float, base: float, relative: bool,
                     held: float, tail: float) -> None:
        """The backend's best plan is over a budget: an error for a byte budget (the budget is a
        promise about the measured peak), naming one the fused search meets; a warning for a
        percentage (that plan is used)."""
        from ..budget import fmt_bytes

        low = code.peak
        if self._fused:  # the least of the fused search's floor, the solvers' floor and this plan, as fused code
            low = self._fused_floor(jg, pg, tail, [code])
        text = self._over_text(jg, target, low, base, held)
        if relative and not self._fallback:
            warnings.warn(f"remat: {text}; the plan used peaks at {fmt_bytes(code.peak)}", stacklevel=4)
            return
        raise InfeasibleError(f"remat: {text}{_raise_to(low + held)}", needed=int(low + held) + 1)

    def _over_text(self, jg: JointGraph, target: float, low: float, base: float, held: float) -> str:
        """Why the generated code cannot meet ``target``: its plans meet budgets from ``low`` up."""
        from ..budget import fmt_bytes

        text = (f"{'inductor' if self._fused else 'the'} generated code of graph {jg.graph.name} needs more than the "
                f"budget of {fmt_bytes(target + held)}: remat's plans for it meet budgets from {fmt_bytes(low)} up "
                f"({100 * low / max(base, 1):.1f}% of its vanilla peak"
                f"{', with ' + fmt_bytes(held) + ' held by earlier graphs' if held else ''}; the least of its "
                f"plans' {'fused' if self._fused else 'generated'} code)")
        return text + _output_grads_text(jg, low, self._unused, self.search.output_grads_worth)

    def _split_error(self, graph: Any, left: float, held: float, before: int,
                     cause: Exception, jg: JointGraph | None = None) -> "BudgetSplitError":
        """Why a graph after a graph break cannot fit what the graphs before it left of a byte
        budget, and the budgets and changes that would make it fit (under inductor: the least its
        fused code needs)."""
        from ..budget import fmt_bytes
        from ..optimize import smallest_budget
        from ..solvers import selective

        need = smallest_budget(graph, self.solver, self.mode)
        if self._fused and jg is not None:
            need = min(need, selective.lowest(graph, jg.fusible, self._fused_judge(jg, 0.0)).peak)
        if not need < float("inf"):
            return BudgetSplitError(f"remat: graph {graph.name} (after a graph break): {cause}")
        total = held + left
        return BudgetSplitError(
            f"remat: graph {graph.name} comes after {before} graph break(s) and needs at least "
            f"{fmt_bytes(need)} while it runs, but the graph(s) before it hold {fmt_bytes(held)} of the "
            f"{fmt_bytes(total)} budget at their floor (saved values and outputs), which leaves "
            f"{fmt_bytes(max(left, 0.0))}. Give a budget of at least {fmt_bytes(held + need)}, a percentage budget "
            f"(each graph is planned within that share of its own peak), or remove the graph break "
            f"(torch._dynamo.explain(model)(*inputs) lists them; transformers' causal-LM heads break at the loss: "
            f"call the model without labels and compute the loss outside the compiled module)")


def _output_grads(jg: JointGraph, unused: frozenset[str]) -> tuple[float, int]:
    """Bytes and number of the gradients the backward receives for the graph's non-scalar outputs,
    but those assumed never to come (``unused``, ``tangents``). torch.compile's autograd function
    allocates them before the backward runs, zeros for an output no loss uses (transformers'
    past_key_values, returned by default); eager autograd allocates none of those zeros."""
    from .dynamic import hint
    from .jointgraph import is_tangent

    sizes = [hint(t.numel()) * t.element_size() for n in jg.gm.graph.find_nodes(op="placeholder")
             if is_tangent(n) and n.name not in unused
             for t in [n.meta.get("val")] if isinstance(t, torch.Tensor) and hint(t.numel()) > 1]
    return float(sum(sizes)), len(sizes)


def _output_grads_text(jg: JointGraph, low: float, unused: frozenset[str], worth: float) -> str:
    """A refusal's account of the outputs' gradients (``_output_grads``), where they weigh in."""
    from ..budget import fmt_bytes

    size, count = _output_grads(jg, unused)
    if size < worth * low:
        return ""
    return (f". Its backward also receives {fmt_bytes(size)} of gradients for {count} of the graph's outputs, "
            "which torch.compile allocates before it runs (zeros for those no loss uses: a transformers model "
            "returns, by default, every layer's key and value cache; use_cache=False drops them)")


def _raise_to(least: float) -> str:
    from ..budget import fmt_bytes

    return f". Raise the budget to at least {fmt_bytes(least)} ({int(least) + 1} bytes)"
