"""The backend's plans kept on disk (``remat.backend(plan_cache=...)``, ``remat.compiled.storedplans``):
a graph compiled again under the same terms, in a fresh dynamo as a restarted run has, loads its
plan (or its refusal) instead of searching, runs the same schedule, and gives the same gradients."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from torch import nn

import remat
from remat.bench import heldout
from remat.compiled.partitioner import Planner
from remat.errors import InfeasibleError


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), *[nn.Sequential(nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 64))
                                              for _ in range(5)], nn.Linear(64, 4))


_X = torch.randn(32, 16, generator=torch.Generator().manual_seed(1))


def _compiled(model: nn.Module, budget, compiler: str, cache) -> tuple[remat.compiled.backend.RematBackend, list]:
    """One fresh compile (as a restarted run: dynamo reset) and training step; the backend and the gradients."""
    torch._dynamo.reset()
    be = remat.backend(budget=budget, compiler=compiler, plan_cache=cache)
    torch.compile(model, backend=be)(_X).square().mean().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    torch._dynamo.reset()
    return be, grads


def _no_search(monkeypatch) -> None:
    """Planning a graph from here on fails the test."""
    def fail(*_a, **_k):
        raise AssertionError("searched for a plan although one is stored")

    monkeypatch.setattr(Planner, "_fit", fail)
    monkeypatch.setattr(Planner, "_floor", fail)


def _loaded(be) -> bool:
    return any(n.startswith("plan cache: loaded") for n in be.report[-1]["notes"])


@pytest.mark.parametrize("compiler,budget", [("eager", "50%"), ("inductor", "50%"), ("inductor", "100%")])
def test_a_graph_compiled_again_loads_its_plan_and_runs_it(tmp_path, monkeypatch, compiler, budget):
    """The second compile searches nothing (``_fit`` fails the test), runs the stored schedule with
    the same prediction, and its gradients are the first's (bitwise with fx code; to inductor's
    rounding otherwise). At "100%" under inductor the stored choice is inductor's own partition,
    made again. Under inductor the partitioner's cache key is the same for both, so inductor's own
    cache of compiled graphs serves the second (its forward and backward)."""
    first, grads = _compiled(_mlp(), budget, compiler, tmp_path)
    (entry,) = [json.loads(f.read_text()) for f in tmp_path.glob("*.json")]
    assert entry["partition"] == (budget == "100%") and not _loaded(first)
    _no_search(monkeypatch)
    from torch._dynamo.utils import counters

    counters.clear()
    again, regrads = _compiled(_mlp(), budget, compiler, tmp_path)
    assert _loaded(again) and len(list(tmp_path.glob("*.json"))) == 1
    if compiler == "inductor" and torch._inductor.config.fx_graph_cache:  # inductor's compiled graphs serve it
        assert counters["inductor"]["fxgraph_cache_hit"] >= 2
    a, b = first.planner.planned[-1], again.planner.planned[-1]
    assert a.steps == b.steps and a.plan.stats["chosen"] == b.plan.stats["chosen"]
    assert again.report[-1]["predicted_peak"] == first.report[-1]["predicted_peak"]
    assert heldout.grad_difference(regrads, grads) <= (0.0 if compiler == "eager" else 1e-6)
    if compiler == "eager":
        ref = _mlp()
        ref(_X).square().mean().backward()
        assert all(torch.equal(g, p.grad) for g, p in zip(regrads, ref.parameters()))


def test_each_budget_is_a_plan_of_its_own_and_a_stale_one_is_planned_again(tmp_path):
    """Another budget stores another file. An entry whose code now peaks over what it recorded
    (stood for here by a lowered ``peak``: remat's code walk changed) is planned again, and replaced."""
    _compiled(_mlp(), "50%", "eager", tmp_path)
    _compiled(_mlp(), "70%", "eager", tmp_path)
    files = sorted(tmp_path.glob("*.json"), key=lambda f: f.stat().st_mtime)
    assert len(files) == 2
    entry = json.loads(files[0].read_text())
    true_peak, entry["peak"] = entry["peak"], entry["peak"] / 2
    files[0].write_text(json.dumps(entry))
    be, _ = _compiled(_mlp(), "50%", "eager", tmp_path)
    assert not _loaded(be)
    assert json.loads(files[0].read_text())["peak"] == true_peak


def test_a_stored_refusal_is_raised_again_without_searching(tmp_path, monkeypatch):
    """A byte budget no plan meets is refused with the least budget that is; compiled again, the
    same refusal comes from the file."""
    from torch._dynamo.exc import BackendCompilerFailed

    with pytest.raises(BackendCompilerFailed, match="(?i)raise the budget") as first:
        _compiled(_mlp(), 2_000, "eager", tmp_path)
    (entry,) = [json.loads(f.read_text()) for f in tmp_path.glob("*.json")]
    assert entry["refused"] and entry["needed"] > 2_000
    _no_search(monkeypatch)
    with pytest.raises(BackendCompilerFailed) as again:
        _compiled(_mlp(), 2_000, "eager", tmp_path)
    cause = again.value.__cause__ if again.value.__cause__ is not None else again.value.inner_exception
    assert isinstance(cause, InfeasibleError) and cause.needed == entry["needed"]
    assert str(cause) in str(first.value)
