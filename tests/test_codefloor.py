"""The floor of every plan's generated eager code (``remat.compiled.codefloor``): no plan's code
peaks below it, and a budget below it is refused after one planning, not searched."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn

import remat
from remat.compiled import partitioner as part
from remat.compiled.codepeak import SCALAR_BYTES
from remat.errors import InfeasibleError, SolverError

from test_compiled import EXTENDED, _SharedLayer, _bn_cnn, _hf, _mlp


class _Tied(nn.Module):
    """An embedding whose weight is the output projection's too (GPT-2's tied ``lm_head``)."""

    def __init__(self, vocab: int = 512, width: int = 64) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.mix = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, width))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.mix(self.emb(ids))
        return torch.logsumexp(h @ self.emb.weight.t(), dim=-1).mean()


def _tied() -> tuple[nn.Module, tuple]:
    torch.manual_seed(0)
    return _Tied().train(), (torch.randint(0, 512, (2, 8)),)


def _recording(monkeypatch) -> tuple[list, list, list]:
    """Record each floor the planner takes, each code peak it judges, and each planning call."""
    floors, peaks, plans = [], [], []
    least, code, plan = part.Planner._least_possible, part.Planner._code, part.Planner._plan

    def least_possible(self, jg):
        floors.append(least(self, jg))
        return floors[-1]

    def judged(self, jg, steps, judged=False):
        got = code(self, jg, steps, judged)
        peaks.append(got[1].peak)
        return got

    def planning(self, *a, **kw):
        plans.append(1)
        return plan(self, *a, **kw)

    monkeypatch.setattr(part.Planner, "_least_possible", least_possible)
    monkeypatch.setattr(part.Planner, "_code", judged)
    monkeypatch.setattr(part.Planner, "_plan", planning)
    return floors, peaks, plans


SOLVERS = ("none", "chen-sqrt", "chen-greedy", "twremat", "dp-approx", "selective", "blocks", "greedy")


@pytest.mark.parametrize("build", [_mlp, _bn_cnn, lambda: _hf("gpt2"),
                                   pytest.param(lambda: _hf("llama"), marks=EXTENDED),  # (untied: as the MLP)
                                   lambda: (_SharedLayer(), (torch.randn(64, 64),)), _tied, "tied-bf16"],
                         ids=["dropout-mlp", "batchnorm-cnn", "hf-gpt2", "hf-llama", "shared-layer", "tied",
                              "tied-bf16"])
def test_no_plan_peaks_below_the_floor(build):
    """Dropout, batch norm, HF decoders with their default arguments, a layer read four times and
    tied embeddings (also under bf16 autocast, where the output projection reads the weight's cast):
    the plans of eight solvers at four budgets (TWRemat's recompute values several times), split
    and walked as the runtime runs them, all peak at or above the floor."""
    from remat.compiled.module import compile_step
    from remat.optimize import vanilla_peak
    from remat.runtime import _executed

    bf16 = build == "tied-bf16"
    model, inputs = _tied() if bf16 else build()
    args, kwargs = (inputs, {}) if isinstance(inputs, tuple) else ((), inputs)
    planner = part.Planner("100%")
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        compile_step(model, args, kwargs, planner)
    jg = planner.planned[-1].joint
    graph = jg.graph
    floor = planner._least_possible(jg)
    peaks: dict[tuple, float] = {}  # schedule -> its code's peak
    for solver in SOLVERS:
        for share in (1.0, 0.8, 0.6, 0.4):
            try:
                plan = remat.solve(graph, share * vanilla_peak(graph), solver=solver)
            except SolverError:  # (blocks: a model without repeated blocks)
                continue
            steps = tuple(_executed(graph, plan)[0])
            if plan.feasible and steps not in peaks:
                peaks[steps] = planner._code(jg, list(steps))[1].peak
    assert len(peaks) >= 3 and floor.peak > 0
    assert min(peaks.values()) >= floor.peak, (min(peaks.values()), floor)


def _joint(model: nn.Module, inputs: Any) -> tuple[part.Planner, Any]:
    """The planner and joint graph of one plain compile."""
    from remat.compiled.module import compile_step

    args, kwargs = (inputs, {}) if isinstance(inputs, tuple) else ((), inputs)
    planner = part.Planner("100%")
    compile_step(model, args, kwargs, planner)
    return planner, planner.planned[-1].joint


def test_tied_embeddings_floor_is_where_their_gradient_parts_meet_and_a_plan_meets_it():
    """The tied weight's two gradient parts are live together in the embedding's backward
    whatever is recomputed: the floor is there, and a plan meets it (measured, allocator level)."""
    model, inputs = _tied()
    planner, jg = _joint(copy.deepcopy(model), inputs)
    floor = planner._least_possible(jg)
    assert floor.op.startswith("embedding_dense_backward") and floor.summed
    assert floor.grads >= 2 * 512 * 64 * 4
    met = remat.optimize(copy.deepcopy(model), inputs, int(floor.peak))
    assert met.report["measured_peak"] <= floor.peak + SCALAR_BYTES  # (the walk and the allocator: a scalar apart)


def _hf_resnet() -> tuple[nn.Module, dict]:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[16, 32], depths=[1, 1], layer_type="bottleneck",
                                    num_labels=5)
    return transformers.ResNetForImageClassification(cfg).train(), {"pixel_values": torch.randn(4, 3, 32, 32)}


def test_a_budget_below_the_floor_is_planned_at_it_and_refused_after_one_planning(monkeypatch):
    """An HF ResNet (default arguments): its batch-norm backwards' temporaries, which the planning
    graph does not model, put every plan's code above a budget the planning graph meets. Such a
    budget is planned within the floor, not searched for, and ``optimize`` refuses it after the
    first measured step (before: planned again within less, a second search), naming the floor."""
    model, inputs = _hf_resnet()
    planner, jg = _joint(copy.deepcopy(model), inputs)
    floor = planner._least_possible(jg)
    budget = int(0.9 * floor.peak)  # (the planning graph's floor is lower: 0.75 of the code's on an AMD EPYC)
    module = remat.optimize(copy.deepcopy(model), inputs, budget, verify=False)
    assert any("no plan's generated code can meet" in n for n in module.report["notes"])
    assert module.report["predicted_peak"] >= floor.peak
    _, _, plans = _recording(monkeypatch)
    with pytest.raises(InfeasibleError, match="needs at least") as e:
        remat.optimize(copy.deepcopy(model), inputs, budget)
    assert len(plans) == 1
    assert e.value.needed >= floor.peak


def test_the_planning_graph_counts_a_tied_weights_gradient_parts():
    """The planning graph's vanilla step holds what its code holds: the tied weight's first
    gradient part from the output projection's backward to the embedding's (``shared_grads``;
    before: 82,048 bytes against the code's 266,244)."""
    from remat import schedule
    from remat.optimize import vanilla_peak

    planner, jg = _joint(*_tied())
    (readers, size), = jg.graph.shared_grads
    assert len(readers) == 2 and size == 512 * 64 * 4
    code = planner._code(jg, schedule.vanilla(jg.graph))[1].peak
    assert code - SCALAR_BYTES <= vanilla_peak(jg.graph) <= code
