"""``remat demo``: the main job on a default example, in a few seconds.

Plans a ResNet-50-shaped graph (seed 000's network, batch 96) with every fast solver at the
minimal, 50% and 100% budgets and prints predicted peak and recompute cost side by side. Then it
trains a small ResNet-18 (batch 4, 128x128) for real within 60% of its measured activation peak
(``remat run``), or at the least budget remat names where this machine cannot meet that, and prints
measured and predicted peaks, the time ratio and the gradient check.
"""

from __future__ import annotations

import argparse

from .. import progress
from ..api import min_budget, solve
from ..simulate import simulate
from ._output import emit_json, seconds, size, table, text

NAME = "demo"
HELP = "plan a ResNet-50 graph with every fast solver, then train a small ResNet-18 within budget"
SOLVERS = ("none", "chen-sqrt", "chen-greedy", "dp-approx", "reforward", "twremat", "greedy", "auto")


def _graph():
    from .. import zoo
    with progress.task("building the ResNet-50 graph (batch 96)"):
        return zoo.graph("resnet50", batch=96)


def small_resnet():
    """The demo's real model: ResNet-18 at batch 4 on 128x128 images (a fifth of a second a step).
    Not 64x64: there the last stage's 3x3 convolutions run on 2x2 maps, where oneDNN's weight
    gradient on an AMD EPYC takes 75.6 MB of scratch (eight partial copies of the 9.4 MB
    gradient) against 6.9 MB of activations, so no plan could go below 92.6% of the vanilla peak;
    at 128x128 (4x4 maps) it takes none, and 60% is met (0.597, 1.10x)."""
    from .. import zoo
    return zoo.build("resnet18", batch=4, image_size=128)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object (planning part only)")
    p.add_argument("--no-train", action="store_true", help="skip the real training step")


def run(args: argparse.Namespace) -> int:
    from .. import solvers
    g = _graph()
    vanilla = simulate(g, solve(g, None, solver="none")).peak
    low = min_budget(g, solver="dp-approx", mode="time")
    rows = []
    names = [n for n in SOLVERS if n in solvers.names("training")]
    budgets = (("min (dp-approx)", low), ("50%", 0.5 * vanilla), ("100%", vanilla))
    with progress.task(f"planning {g.name} with {len(names)} solvers at 3 budgets",
                       total=len(names) * len(budgets)) as bar:
        for label, budget in budgets:
            for name in names:
                plan = solve(g, budget, solver=name)
                sim = simulate(g, plan) if plan.schedule else None
                rows.append({"budget": label, "solver": name, "feasible": plan.feasible,
                             "simulated_peak_GiB": sim.peak / 2**30 if sim else None,
                             "recompute_cost": sim.recompute_cost if sim else None,
                             "solve_seconds": plan.solve_seconds})
                bar.advance()
    if args.json:
        emit_json({"graph": g.name, "nodes": len(g), "vanilla_peak_GiB": vanilla / 2**30, "rows": rows})
        return 0
    table(f"{g.name}: {len(g)} nodes, vanilla simulated peak {size(vanilla)}",
          ["budget", "solver", "feasible", "peak", "recompute", "solve time"],
          [[r["budget"], r["solver"], r["feasible"],
            "-" if r["simulated_peak_GiB"] is None else size(r["simulated_peak_GiB"] * 2**30),
            r["recompute_cost"], seconds(r["solve_seconds"])] for r in rows],
          caption="peak: simulated; recompute cost in seed 000 units (conv 10, other ops 1)")
    if args.no_train:
        return 0
    return train()


def train(budget: str = "60%") -> int:
    """Train the small ResNet-18 within ``budget`` (``remat run``). Where this machine's least plan
    needs more (the temporaries inside convolutions differ by CPU and by shape: ``small_resnet``),
    show the refusal, then train at the budget it names."""
    import math

    from ..budget import fmt_bytes
    from ..errors import InfeasibleError
    from . import run as run_command

    sub = argparse.ArgumentParser()
    run_command.add_arguments(sub)

    def within(b: str) -> int:
        return run_command.run(sub.parse_args([f"{__name__}:small_resnet", "--budget", b]))

    text(f"\nTraining ResNet-18 (batch 4, 128x128) within {budget} of its measured activation peak:")
    try:
        return within(budget)
    except InfeasibleError as e:
        if e.needed is None:
            raise
        text(f"remat refused it: {e}\n\nTraining at the least budget it names instead, {fmt_bytes(e.needed)}:")
        return within(str(math.ceil(e.needed)))
