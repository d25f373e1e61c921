"""``remat explain TARGET [--budget 50%] [--batch N] [--depth D] [--png FILE] [--json]``.

Plans one training step of TARGET within the budget, on fake tensors (the model is built on the
meta device: no memory is allocated), and shows what the plan does to each module: the bytes the
vanilla step saves for the backward, the bytes the plan keeps and recomputes, the extra time it
costs (predicted, as a share of one step) and what is live at the planned peak. A figure of the
memory timeline of one step, vanilla against the plan, stacked by module, is saved as PNG.

TARGET is a zoo name, package.module:callable returning (model, inputs) (called with batch=N
when --batch is given) or hf:NAME (a Hugging Face causal LM from its config). The budget is
bytes, a size (4GiB), a percentage of the vanilla peak (40%) or a fraction of it (0.4), the
vanilla peak being the simulated one. In Python: module.explain() on what remat.optimize returns.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from ._output import add_json_arguments, emit_json, text
from .solve import add_solver_argument

NAME = "explain"
HELP = "what a plan keeps and recomputes in each module, and a figure of one step's memory timeline"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", help="zoo name, package.module:callable, or hf:NAME")
    p.add_argument("--budget", default="50%",
                   help="bytes, a size (4GiB), a percentage of the vanilla peak (40%%) or a fraction of it (0.4); "
                        "default 50%%")
    p.add_argument("--batch", type=int, default=None, help="batch size passed to the builder")
    p.add_argument("--seq-len", type=int, default=None, help="sequence length (hf: models, zoo transformer)")
    add_solver_argument(p, "auto")
    p.add_argument("--mode", choices=["time", "memory"], default="time")
    p.add_argument("--depth", type=int, default=None,
                   help="module path components per row (default: one below the repeated blocks)")
    p.add_argument("--png", default=None, metavar="FILE",
                   help="where to save the figure (default remat-explain-TARGET.png in the current folder)")
    p.add_argument("--no-png", action="store_true", help="do not draw the figure")
    add_json_arguments(p)


def run(args: argparse.Namespace) -> int:
    from .. import progress
    from ..explain import explain_steps
    from ..fit import build_on_meta, builder, trace_graph
    from ..optimize import parse_budget, plan_within, vanilla_peak
    from ..runtime import executed_schedule

    fixed: dict[str, Any] = {} if args.seq_len is None else {"seq_len": args.seq_len}
    model_fn = builder(args.target, "batch", fixed)
    with progress.task(f"building {args.target} on the meta device"):
        model, inputs = build_on_meta(model_fn, args.batch)
    name = args.target if not args.target.startswith("hf:") else args.target[3:].rstrip("/").split("/")[-1]
    graph = trace_graph(model, inputs, name=name)
    budget = parse_budget(args.budget, vanilla_peak(graph), what="--budget")
    with progress.task(f"planning {name} within {args.budget}"):
        choice = plan_within(graph, budget, args.solver, args.mode)
    steps = executed_schedule(graph, choice.plan)
    with progress.task("explaining the plan by module"):
        exp = explain_steps(graph, steps, depth=args.depth, budget=budget, name=name,
                            solver=choice.plan.stats.get("chosen", choice.plan.solver))
    png = None
    if not args.no_png:
        png = Path(args.png) if args.png else Path(f"remat-explain-{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}.png")
        with progress.task(f"drawing {png}"):
            exp.save(png)
    if args.json:
        emit_json({**exp.to_json(), "png": str(png) if png else None})
    else:
        _table(exp)
        if png:
            text(f"memory timeline (vanilla against the plan, by module): {png}")
    return 0


def _table(exp: Any) -> None:
    """The per-module table, folded to the terminal's width (values never cut)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    t = Table(title=exp.title(), caption=exp.caption(), title_justify="left", caption_justify="left",
              box=box.SIMPLE_HEAD, pad_edge=False)
    for i, c in enumerate(exp.COLUMNS):
        t.add_column(c, justify="left" if i == 0 else "right", overflow="fold")
    cells = exp.cells()
    for k, row in enumerate(cells):
        t.add_row(*row, end_section=k == len(cells) - 2)
    Console(soft_wrap=False, highlight=False).print(t)

