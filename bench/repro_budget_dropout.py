"""torch.compile below ``activation_memory_budget`` 1.0 trains a model with dropout on wrong
gradients: its partitioner recomputes the dropout draws in the backward, where they draw fresh
random numbers, so the backward applies other masks than the forward's (pytorch/pytorch#190758).
``remat.backend`` replays the forward's generator state where it recomputes a draw.

The check needs no eager reference, so it holds under inductor's own generator: the model returns
its last hidden activation ``h`` beside the output ``c(h)``, and the last layer's weight gradient
of ``c(h).sum()`` must be ``ones.T @ h``, the ``h`` the forward returned. Prints that gradient's
largest difference from ``ones.T @ h`` (relative to its largest entry) and what each plan
recomputes, per method and budget.

    PYTHONPATH=src .venv/bin/python bench/repro_budget_dropout.py [--budgets 1.0,0.5,0.2]
"""

from __future__ import annotations

import argparse

import torch
import torch._functorch.config as functorch_config
from torch import nn

import remat


class DropoutMLP(nn.Module):
    """Two dropout layers; returns the output and the activation the last layer reads."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(64, 256), nn.Linear(256, 256), nn.Linear(256, 8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = nn.functional.dropout(torch.relu(self.a(x)), 0.3, self.training)
        h = nn.functional.dropout(torch.tanh(self.b(h)), 0.3, self.training)
        return self.c(h), h


def mismatch(compile_model) -> float:
    """The last layer's weight gradient against the one the returned activation implies."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, x = DropoutMLP(), torch.randn(128, 64)
    out, h = compile_model(model)(x)
    out.sum().backward()
    implied = torch.ones_like(out).T @ h.detach()
    torch._dynamo.reset()
    return ((model.c.weight.grad - implied).abs().max() / implied.abs().max()).item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budgets", default="1.0,0.5,0.2")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print("| budget | torch.compile | remat.backend (inductor) |\n| --- | --- | --- |")
    for b in (float(v) for v in args.budgets.split(",")):
        with functorch_config.patch(activation_memory_budget=b):
            theirs = mismatch(torch.compile)
        be = remat.backend(budget=f"{100 * b:g}%", compiler="inductor")
        ours = mismatch(lambda m: torch.compile(m, backend=be))
        recompute = sum(r.get("recompute_time") or 0.0 for r in be.report)
        print(f"| {b:g} | {theirs:.2g} | {ours:.2g} (recomputes {1e3 * recompute:.3f} ms) |", flush=True)


if __name__ == "__main__":
    main()
