"""``remat.explain``: what a plan does to each module of the model, and the memory of one step.

``explain(module)`` (or ``module.explain()``) on what ``remat.optimize`` returns, or
``explain(graph, plan)`` on any planning Graph, gives an :class:`Explanation`:

- one row per module path (``model.layers.3.mlp``, at ``depth`` components; by default the
  level just under the repeated blocks, as Hugging Face's per-block view): the bytes the
  vanilla step saves for the backward, the bytes the plan keeps, the bytes it recomputes (each
  recomputation counted), the recompute cost and the extra time it adds, predicted as a
  fraction of one step (``report.time_ratio``'s yardstick: backward = 2 x forward);
- what is live at the plan's peak, by module ("where the memory goes");
- a figure of the memory timeline of one training step, vanilla against the plan, stacked by
  module (the level of the repeated blocks, ``model.layers.3``; the largest 11 by their own
  peak, the rest as "other") with gradient buffers on top: ``save("plan.png")``, or displayed
  inline in a notebook (``_repr_html_``/``_repr_png_``).

Values are the planning Graph's nodes; ``Node.module`` is the path of the module whose forward
produced the value (recorded by the compiled trace; values produced by the model's own forward
code, outside any submodule, are ``(top level)``). The timelines are ``simulate``'s own memory
accounting split by module: at every step the parts add up to ``Simulation.timeline``
(tested in tests/test_explain.py), the vanilla one of ``schedule.vanilla`` as
``optimize.vanilla_peak``, the plan's of the schedule the runtime executes.
"""

from __future__ import annotations

import base64
import io
import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import schedule
from .graph import Graph
from .plan import Step
from .simulate import _backward, _Grads, _last_reads, simulate_training

TOP = "(top level)"
GRADIENTS = "gradients"
OTHER = "other"
FIGURE_GROUPS = 11  # module colours in the figure; the rest is "other"


# ---- module paths --------------------------------------------------------------------------

def auto_depth(paths: list[str | None]) -> int:
    """Path components of a row: one under the repeated block (``model.layers.3.mlp``: the first
    numeric component, most common among the paths, plus one), else 2."""
    firsts = Counter()
    for p in paths:
        if not p:
            continue
        parts = p.split(".")
        i = next((k for k, s in enumerate(parts) if s.isdigit()), None)
        if i is not None:
            firsts[i] += 1
    if not firsts:
        return 2
    return firsts.most_common(1)[0][0] + 2


def group(path: str | None, depth: int) -> str:
    """``path`` cut to ``depth`` components (``(top level)`` for no path)."""
    if not path:
        return TOP
    return ".".join(path.split(".")[:depth])


# ---- the step, split by module ---------------------------------------------------------------

@dataclass
class Interval:
    """``bytes`` of value ``node`` in memory during steps ``first`` .. ``last`` (inclusive)."""

    node: str
    bytes: float
    first: int
    last: int


def intervals(graph: Graph, steps: list[Step]) -> tuple[list[Interval], list[float], list[float]]:
    """Every copy of every forward value as the intervals it is in memory, the gradient memory
    during each step and ``simulate``'s total during each step; the intervals covering a step
    plus its gradient memory are that total (the same walk as ``simulate_training``)."""
    total = simulate_training(graph, steps).timeline  # validates the schedule
    ends, shrinks = _last_reads(graph, steps)
    start: dict[str, int] = {}
    size: dict[str, float] = {}
    out: list[Interval] = []
    grads = _Grads()
    grad_during: list[float] = []
    for k, (kind, v) in enumerate(steps):
        node = graph[v]
        if kind == "fwd":
            if v not in size:
                size[v], start[v] = node.mem, k
            held = grads.mem
        elif kind == "bwd" and node.requires_grad:
            held = _backward(graph, node, grads)
        else:
            held = grads.mem
        grad_during.append(held)
        for u in shrinks[k]:
            if u in size:
                keep = graph[u].self_kept
                out.append(Interval(u, size[u] - keep, start[u], k))
                size[u] = keep
        for u in ends[k]:
            if u in size:
                out.append(Interval(u, size.pop(u), start.pop(u), k))
    for u in list(size):  # never read again and never ended (cannot happen for a valid schedule)
        out.append(Interval(u, size.pop(u), start.pop(u), len(steps) - 1))
    return out, grad_during, total


@dataclass
class Timeline:
    """Memory during each step of one schedule, stacked: ``layers[label][k]`` bytes of that
    module's values during step k (labels largest first, then ``other``), then gradients."""

    name: str
    total: list[float]
    layers: dict[str, list[float]]
    gradients: list[float]
    peak: float
    peak_step: int
    backward_starts: int  # index of the first backward step
    at_peak: dict[str, float] = field(default_factory=dict)  # row label -> bytes live at the peak

    def to_json(self) -> dict:
        return {"name": self.name, "steps": len(self.total), "peak": self.peak, "peak_step": self.peak_step,
                "backward_starts": self.backward_starts, "at_peak": self.at_peak}


def _series(graph: Graph, steps: list[Step], colour_depth: int, row_depth: int) -> dict[str, Any]:
    """Per-colour arrays of bytes during each step, gradients, totals, and the peak by row."""
    import numpy as np

    ivs, grad_during, total = intervals(graph, steps)
    n = len(steps)
    peak_step = max(range(n), key=total.__getitem__) if n else 0
    diffs: dict[str, Any] = {}
    live: dict[str, float] = {}
    for iv in ivs:
        label = group(graph[iv.node].module, colour_depth)
        d = diffs.get(label)
        if d is None:
            d = diffs[label] = np.zeros(n + 1)
        d[iv.first] += iv.bytes
        d[iv.last + 1] -= iv.bytes
        if iv.first <= peak_step <= iv.last:
            row = group(graph[iv.node].module, row_depth)
            live[row] = live.get(row, 0.0) + iv.bytes
    if grad_during:
        live[GRADIENTS] = grad_during[peak_step]
    first_bwd = next((k for k, (kind, _) in enumerate(steps) if kind == "bwd"), n)
    return {"series": {label: np.cumsum(d)[:n] for label, d in diffs.items()}, "gradients": grad_during,
            "total": list(total), "peak_step": peak_step, "backward_starts": first_bwd,
            "at_peak": dict(sorted(live.items(), key=lambda kv: -kv[1]))}


def _largest(parts: list[dict[str, Any]], groups: int) -> list[str]:
    """The ``groups`` colour labels of largest own peak over all the timelines."""
    top: dict[str, float] = {}
    for p in parts:
        for label, s in p["series"].items():
            top[label] = max(top.get(label, 0.0), float(s.max()) if len(s) else 0.0)
    return sorted(top, key=lambda x: -top[x])[:groups]


def _timeline(name: str, part: dict[str, Any], keep: list[str]) -> Timeline:
    import numpy as np

    series, n = part["series"], len(part["total"])
    layers = {label: series[label].tolist() for label in keep if label in series}
    rest = [s for label, s in series.items() if label not in layers]
    if rest:
        layers[OTHER] = np.sum(rest, axis=0).tolist()
    total, k = part["total"], part["peak_step"]
    return Timeline(name=name, total=total, layers=layers, gradients=part["gradients"],
                    peak=total[k] if n else 0.0, peak_step=k, backward_starts=part["backward_starts"],
                    at_peak=part["at_peak"])


def timeline(graph: Graph, steps: list[Step], name: str = "plan", colour_depth: int = 1,
             row_depth: int = 2, groups: int = FIGURE_GROUPS) -> Timeline:
    """The stacked timeline of ``steps``: colours at ``colour_depth`` (the ``groups`` of largest
    own peak, the rest as ``other``), what is live at the peak by module at ``row_depth``."""
    part = _series(graph, steps, colour_depth, row_depth)
    return _timeline(name, part, _largest([part], groups))


def at_peak(graph: Graph, steps: list[Step], depth: int | None = None) -> tuple[dict[str, float], int, int]:
    """Bytes live at the peak of ``steps`` by module path cut to ``depth`` (default: the level
    of the repeated blocks), with ``gradients``; the peak step and the step count."""
    if depth is None:
        depth = max(1, auto_depth([graph[v].module for v in graph.order]) - 1)
    part = _series(graph, steps, 1, depth)
    return part["at_peak"], part["peak_step"], len(steps)


# ---- per-module rows ----------------------------------------------------------------------

@dataclass
class ModuleRow:
    """One module path: what the vanilla step saves, what the plan keeps and recomputes."""

    module: str
    values: int              # forward values the module produces
    saved_vanilla: float     # bytes the vanilla step holds for the backward
    kept: float              # bytes the plan's forward pass holds for the backward
    recomputed: float        # bytes recomputed (each recomputation counted)
    recomputations: int      # ops recomputed (each recomputation counted)
    recompute_cost: float    # in the graph's cost unit (flops by default)
    extra_time: float        # predicted extra time, as a fraction of one vanilla step
    live_at_peak: float      # bytes of the module's values live at the plan's peak


def held_across(graph: Graph, steps: list[Step]) -> set[str]:
    """Values whose forward-pass copy is read in the backward part (held across the turn)."""
    from .runtime import Instances

    inst = Instances.of(graph, steps)
    return {v for v in graph.order if inst.reads[v] and inst.reads[v][0] > 0}


def forward_cost(graph: Graph) -> float:
    return math.fsum(graph[v].cost for v in graph.order)


def rows(graph: Graph, steps: list[Step], vanilla_steps: list[Step], depth: int,
         live: dict[str, float] | None = None) -> list[ModuleRow]:
    """Per-module rows, in the order the forward pass first reaches each module."""
    kept, saved = held_across(graph, steps), held_across(graph, vanilla_steps)
    step_cost = 3.0 * forward_cost(graph)
    out: dict[str, ModuleRow] = {}

    def row(v: str) -> ModuleRow:
        label = group(graph[v].module, depth)
        r = out.get(label)
        if r is None:
            r = out[label] = ModuleRow(label, 0, 0.0, 0.0, 0.0, 0, 0.0, 0.0, (live or {}).get(label, 0.0))
        return r

    for v in graph.order:
        r = row(v)
        r.values += 1
        r.kept += graph[v].mem if v in kept else 0.0
        r.saved_vanilla += graph[v].mem if v in saved else 0.0
    seen: set[str] = set()
    for kind, v in steps:
        if kind != "fwd":
            continue
        if v in seen:
            r = row(v)
            r.recomputed += graph[v].mem
            r.recomputations += 1
            r.recompute_cost += graph[v].cost
        seen.add(v)
    for r in out.values():
        r.extra_time = r.recompute_cost / step_cost if step_cost else 0.0
    return list(out.values())


# ---- the explanation ------------------------------------------------------------------------

@dataclass
class Explanation:
    """Per-module rows and the two timelines of one training step (see module docstring)."""

    name: str
    depth: int
    budget: float | None
    vanilla_peak: float
    peak: float
    time_ratio: float
    rows: list[ModuleRow]
    vanilla: Timeline
    plan: Timeline
    solver: str | None = None

    # text
    def __str__(self) -> str:
        return self.table()

    def title(self) -> str:
        from .optimize import fmt_bytes

        return (f"remat explain {self.name}: peak {fmt_bytes(self.vanilla_peak)} vanilla -> "
                f"{fmt_bytes(self.peak)} planned"
                + (f" (budget {fmt_bytes(self.budget)})" if self.budget is not None else "")
                + f", predicted time ratio {self.time_ratio:.2f}x"
                + (f", solver {self.solver}" if self.solver else ""))

    COLUMNS = ("module", "saved", "kept", "recomputed", "+time", "at peak")

    def cells(self, limit: int | None = None) -> list[tuple[str, ...]]:
        """The table's rows as text (``COLUMNS``), the total last."""
        from .optimize import fmt_bytes

        body = [(r.module, fmt_bytes(r.saved_vanilla), fmt_bytes(r.kept), fmt_bytes(r.recomputed),
                 _percent(r.extra_time) if r.recomputations else "-",
                 fmt_bytes(r.live_at_peak) if r.live_at_peak else "-")
                for r in self.rows[:limit]]
        grads = self.plan.at_peak.get(GRADIENTS, 0.0)
        total = ("total", fmt_bytes(sum(r.saved_vanilla for r in self.rows)),
                 fmt_bytes(sum(r.kept for r in self.rows)),
                 fmt_bytes(sum(r.recomputed for r in self.rows)),
                 _percent(self.time_ratio - 1), fmt_bytes(self.peak - grads))
        return [*body, total]

    def caption(self) -> str:
        from .optimize import fmt_bytes

        return (f"saved: bytes the vanilla step holds for the backward; kept: bytes the plan holds; recomputed: "
                f"bytes the plan computes again; +time: that work as a share of one vanilla step (predicted); "
                f"at peak: bytes live at the planned peak, with "
                f"{fmt_bytes(self.plan.at_peak.get(GRADIENTS, 0.0))} of gradient buffers")

    def table(self, limit: int = 80) -> str:
        """Plain text: the title, one row per module (``limit`` at most), the total."""
        cells = self.cells(limit)
        widths = [max(len(c), *(len(b[i]) for b in cells)) for i, c in enumerate(self.COLUMNS)]

        def line(row: tuple) -> str:
            return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))

        out = [self.title(), line(self.COLUMNS), "  ".join("-" * w for w in widths), *(line(b) for b in cells[:-1])]
        if len(self.rows) > limit:
            out.append(f"... {len(self.rows) - limit} more modules (to_json() has them all)")
        out += [line(cells[-1]), self.caption()]
        return "\n".join(out)

    def to_json(self) -> dict:
        return {"name": self.name, "depth": self.depth, "budget": self.budget, "solver": self.solver,
                "vanilla_peak": self.vanilla_peak, "peak": self.peak, "time_ratio": self.time_ratio,
                "modules": [asdict(r) for r in self.rows],
                "vanilla": self.vanilla.to_json(), "plan": self.plan.to_json()}

    # figure
    def figure(self) -> Any:
        """A matplotlib Figure: the vanilla step above, the plan below, stacked by module."""
        from matplotlib.figure import Figure

        unit, scale = _unit(max(self.vanilla_peak, self.peak, self.budget or 0.0))
        labels = list(dict.fromkeys([*self.vanilla.layers, *self.plan.layers]))
        named = [x for x in labels if x != OTHER]
        colours = _colours(named)
        colours[OTHER] = "#c8c8c8"
        fig = Figure(figsize=(12, 7), layout="constrained")
        axes = fig.subplots(2, 1, sharey=True)
        for ax, tl, title in ((axes[0], self.vanilla, "vanilla"), (axes[1], self.plan, "remat plan")):
            xs = range(len(tl.total))
            ys = [[b / scale for b in tl.layers.get(x, [0.0] * len(tl.total))] for x in labels]
            ys.append([b / scale for b in tl.gradients])
            ax.stackplot(xs, *ys, colors=[colours[x] for x in labels] + ["#404040"], linewidth=0)
            ax.axvline(tl.backward_starts, color="black", linestyle="--", linewidth=0.8)
            ax.axhline(tl.peak / scale, color="tab:red", linewidth=0.8)
            right = tl.peak_step > 0.7 * max(len(tl.total), 1)  # the label stays inside the axes
            ax.annotate(f"peak {tl.peak / scale:.3g} {unit}", (tl.peak_step, tl.peak / scale),
                        textcoords="offset points", xytext=(-4 if right else 4, 4), fontsize=8, color="tab:red",
                        ha="right" if right else "left")
            if title != "vanilla" and self.budget is not None:
                ax.axhline(self.budget / scale, color="tab:blue", linestyle=":", linewidth=1.0)
                ax.annotate(f"budget {self.budget / scale:.3g} {unit}", (0, self.budget / scale),
                            textcoords="offset points", xytext=(4, 4), fontsize=8, color="tab:blue")
            ax.set_title(f"{title}: {len(tl.total)} steps (forward | backward at the dashed line)", fontsize=10)
            ax.set_ylabel(f"memory ({unit})")
            ax.margins(x=0)
        axes[1].set_xlabel("step of the schedule")
        handles = [_patch(colours[x]) for x in labels] + [_patch("#404040")]
        fig.legend(handles, [*labels, GRADIENTS], loc="outside right center", fontsize=8, title="module")
        fig.suptitle(f"{self.name}: memory of one training step, by module "
                     f"(predicted time ratio {self.time_ratio:.2f}x)", fontsize=11)
        return fig

    def png(self, dpi: int = 110) -> bytes:
        buf = io.BytesIO()
        self.figure().savefig(buf, format="png", dpi=dpi)
        return buf.getvalue()

    def save(self, path: str | Path, dpi: int = 110) -> Path:
        """Write the figure (PNG, or any format matplotlib knows from the suffix)."""
        path = Path(path)
        fmt = path.suffix.lstrip(".").lower() or "png"
        self.figure().savefig(path, format=fmt, dpi=dpi)
        return path

    def _repr_png_(self) -> bytes:
        return self.png()

    def _repr_html_(self) -> str:
        import html

        data = base64.b64encode(self.png()).decode()
        return (f"<pre>{html.escape(self.table())}</pre>"
                f"<img src='data:image/png;base64,{data}' style='max-width:100%'/>")


def _percent(x: float) -> str:
    return "<0.1%" if 0 < x < 0.001 else f"{100 * x:.1f}%"


def _unit(top: float) -> tuple[str, float]:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if top >= size:
            return unit, float(size)
    return "B", 1.0


def _colours(labels: list[str]) -> dict[str, Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab20" if len(labels) > 10 else "tab10"]
    return {x: cmap(i % cmap.N) for i, x in enumerate(labels)}


def _patch(colour: Any) -> Any:
    from matplotlib.patches import Patch

    return Patch(facecolor=colour)


# ---- entry points ---------------------------------------------------------------------------

def explain(target: Any, plan: Any = None, *, depth: int | None = None, budget: float | None = None,
            name: str | None = None) -> Explanation:
    """Explain a plan by module: ``explain(module)`` on what ``remat.optimize`` returns, or
    ``explain(graph, plan)`` with a Plan, a kept set or an executed step schedule."""
    from .runtime import _executed

    solver = None
    if isinstance(target, Graph):
        graph = target
        if plan is None:
            raise TypeError("explain(graph, plan): give the plan (a Plan, a kept set or a step schedule)")
    else:
        graph = getattr(target, "graph", None)
        plan = getattr(target, "plan", None)
        if not isinstance(graph, Graph) or plan is None:
            raise TypeError(f"explain() takes what remat.optimize returns, or (graph, plan); got "
                            f"{type(target).__name__}, which has no plan yet")
        report = getattr(target, "report", None)
        if budget is None and report:
            budget = report.get("budget") if hasattr(report, "get") else None
        solver = report.get("solver") if report and hasattr(report, "get") else None
        name = name or type(getattr(target, "module", target)).__name__
    planned = getattr(getattr(target, "step", None), "planned", None)  # a CompiledModule's own schedule
    if planned is not None and getattr(planned, "steps", None):
        steps = list(planned.steps)
        solver = solver or plan.stats.get("chosen", plan.solver)
    elif isinstance(plan, list) and plan and isinstance(plan[0], (tuple, list)):
        steps = [tuple(s) for s in plan]
    else:
        steps = _executed(graph, plan)[0]
        solver = solver or getattr(plan, "stats", {}).get("chosen", getattr(plan, "solver", None))
    return explain_steps(graph, steps, depth=depth, budget=budget, name=name or graph.name, solver=solver)


def explain_steps(graph: Graph, steps: list[Step], *, depth: int | None = None, budget: float | None = None,
                  name: str = "model", solver: str | None = None) -> Explanation:
    """The Explanation of an executed schedule ``steps`` against ``schedule.vanilla(graph)``."""
    paths = [graph[v].module for v in graph.order]
    row_depth = depth if depth is not None else auto_depth(paths)
    colour_depth = max(1, row_depth - 1)  # colours: one level up (model.layers.3)
    vanilla_steps = schedule.vanilla(graph)
    plan_part = _series(graph, steps, colour_depth, row_depth)
    van_part = _series(graph, vanilla_steps, colour_depth, row_depth)
    first: dict[str, int] = {}
    for i, v in enumerate(graph.order):  # stacked in the order the forward pass reaches them
        first.setdefault(group(graph[v].module, colour_depth), i)
    keep = sorted(_largest([van_part, plan_part], FIGURE_GROUPS), key=lambda x: first.get(x, 0))
    plan_tl, van_tl = _timeline("plan", plan_part, keep), _timeline("vanilla", van_part, keep)
    recompute = math.fsum(graph[v].cost for v in _recomputed(steps))
    from .report import time_ratio

    return Explanation(name=name, depth=row_depth, budget=budget, vanilla_peak=van_tl.peak, peak=plan_tl.peak,
                       time_ratio=time_ratio(recompute, forward_cost(graph)),
                       rows=rows(graph, steps, vanilla_steps, row_depth, plan_tl.at_peak),
                       vanilla=van_tl, plan=plan_tl, solver=solver)


def _recomputed(steps: list[Step]) -> list[str]:
    seen: set[str] = set()
    out = []
    for kind, v in steps:
        if kind == "fwd":
            if v in seen:
                out.append(v)
            seen.add(v)
    return out
