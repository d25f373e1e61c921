"""Plans that persist (remat.plancache): a plan cache keyed by structure, signature, autocast and
budget; ``module.plan`` to and from JSON; ``shapes=[...]`` planned up front; a signature first
seen in training planned as the first one (its own measured vanilla peak, the check step), once."""

from __future__ import annotations

import contextlib
import copy
import json
import warnings

import pytest
import torch
from torch import nn

import remat
import importlib
from remat.measure import measure

optimize_module = importlib.import_module("remat.optimize")
from remat.plan import Plan


def _mlp(width: int = 64) -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Linear(16, width)]
    for _ in range(5):
        layers += [nn.LayerNorm(width), nn.GELU(), nn.Linear(width, width)]
    return nn.Sequential(*layers, nn.Linear(width, 4))


def _x(n: int = 32) -> torch.Tensor:
    return torch.randn(n, 16, generator=torch.Generator().manual_seed(n))


def _grads_equal(model: nn.Module, module: nn.Module, x: torch.Tensor, autocast: bool = False) -> bool:
    ref = copy.deepcopy(model)
    for p in model.parameters():
        p.grad = None
    ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if autocast else contextlib.nullcontext
    with ctx():
        module(x).square().mean().backward()
    with ctx():
        ref(x).square().mean().backward()
    return all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters()))


def _no_planning(monkeypatch) -> None:
    """Planning or measuring from here on fails the test."""
    def fail(*_a, **_k):
        raise AssertionError("planned or measured although the plan is cached")

    monkeypatch.setattr(optimize_module, "plan_within", fail)
    monkeypatch.setattr(optimize_module, "measure_restoring", fail)


def test_second_call_loads_without_planning(tmp_path, monkeypatch):
    first = remat.optimize(_mlp(), (_x(),), "50%", plan_cache=tmp_path)
    assert first.report.extra["plan_cache"].startswith("stored")
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1

    _no_planning(monkeypatch)
    model = _mlp()
    second = remat.optimize(model, (_x(),), "50%", plan_cache=tmp_path)
    assert second.report.extra["plan_cache"].startswith("loaded")
    assert second.plan.kept == first.plan.kept and second.plan.schedule == first.plan.schedule
    assert second.report.measured_peak == first.report.measured_peak  # the stored report, measurements included
    assert second.report.extra["inputs"] == "32x16 float32; autocast off"
    assert _grads_equal(model, second, _x())


def test_key_covers_budget_signature_autocast_and_structure(tmp_path):
    from remat.plancache import cache_key

    m = _mlp()
    x = _x()
    base = cache_key(m, (x,), {}, "50%", "auto", "time", "flops")
    assert base == cache_key(_mlp(), (x,), {}, 0.5, "auto", "time", "flops")  # same budget, parsed
    others = [cache_key(m, (x,), {}, "40%", "auto", "time", "flops"),
              cache_key(m, (x,), {}, "50%", "chen-greedy", "time", "flops"),
              cache_key(m, (_x(8),), {}, "50%", "auto", "time", "flops"),
              cache_key(_mlp(width=32), (x,), {}, "50%", "auto", "time", "flops")]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        others.append(cache_key(m, (x,), {}, "50%", "auto", "time", "flops"))
    others.append(cache_key(m, (x,), {}, "50%", "auto", "time", "flops", search=remat.Searching(room=0.5)))
    assert base == cache_key(m, (x,), {}, "50%", "auto", "time", "flops", search=remat.Searching())  # the defaults
    m.eval()
    others.append(cache_key(m, (x,), {}, "50%", "auto", "time", "flops"))
    assert len({base, *others}) == len(others) + 1


def test_search_limits_are_passed_in_not_read_from_module_switches():
    """``search=`` (a frozen ``remat.Searching``) reaches the planner of ``optimize`` and of the backend, each
    its own; anything else is refused before any work, naming the type."""
    search = remat.Searching(code_seconds=0.5, room=0.2)
    module = remat.optimize(_mlp(), (_x(),), "50%", verify=False, search=search)
    assert module.step.planned is not None and module._make_planner().search is search
    assert remat.backend(search=search).planner.search is search
    assert remat.backend().planner.search == remat.Searching()
    with pytest.raises(remat.InputError, match="remat.Searching"):
        remat.optimize(_mlp(), (_x(),), "50%", search={"room": 0.2})
    with pytest.raises(remat.InputError, match="compiled executor"):
        remat.optimize(_mlp(), (_x(),), "50%", executor="interpret", search=search)


def test_autocast_state_is_cached_separately(tmp_path, monkeypatch):
    x = _x()
    remat.optimize(_mlp(), (x,), "60%", solver="chen-greedy", verify=False, plan_cache=tmp_path)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        remat.optimize(_mlp(), (x,), "60%", solver="chen-greedy", verify=False, plan_cache=tmp_path)
    assert len(list(tmp_path.glob("*.json"))) == 2
    _no_planning(monkeypatch)
    model = _mlp()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        module = remat.optimize(model, (x,), "60%", solver="chen-greedy", verify=False, plan_cache=tmp_path)
    assert module.report.extra["plan_cache"].startswith("loaded")
    assert "autocast cpu bfloat16" in module.report.extra["inputs"]
    assert _grads_equal(model, module, x, autocast=True)


def test_a_stale_cached_plan_is_replanned_and_said(tmp_path):
    remat.optimize(_mlp(), (_x(),), "60%", solver="chen-greedy", verify=False, plan_cache=tmp_path)
    (path,) = tmp_path.glob("*.json")
    entry = json.loads(path.read_text())
    entry["plan"]["stats"]["graph"]["fingerprint"] = "0" * 64  # as if the model's code had changed
    path.write_text(json.dumps(entry))
    model = _mlp()
    with pytest.warns(UserWarning, match="does not fit.*another graph.*Planning again"):
        module = remat.optimize(model, (_x(),), "60%", solver="chen-greedy", verify=False, plan_cache=tmp_path)
    assert module.report.extra["plan_cache"].startswith("stored")
    assert json.loads(path.read_text())["plan"]["stats"]["graph"]["fingerprint"] != "0" * 64
    assert _grads_equal(model, module, _x())


def test_plan_saves_to_and_loads_from_json(tmp_path, monkeypatch):
    module = remat.optimize(_mlp(), (_x(),), "50%")
    path = tmp_path / "plan.json"
    module.plan.save(path)
    loaded = Plan.load(path)
    assert loaded.to_json() == json.loads(json.dumps(module.plan.to_json()))
    assert loaded.schedule == module.plan.schedule and loaded.kept == module.plan.kept

    _no_planning(monkeypatch)
    model = _mlp()
    again = remat.optimize(model, (_x(),), "50%", plan=path)  # a path or a Plan
    assert again.plan.schedule == module.plan.schedule
    assert again.report.extra["plan_cache"] == "loaded the plan given"
    assert _grads_equal(model, again, _x())
    with pytest.raises(remat.InputError, match="made for another graph"):
        remat.optimize(_mlp(width=32), (_x(),), "50%", plan=loaded)


def test_shapes_are_planned_up_front():
    model = _mlp()
    module = remat.optimize(model, (_x(32),), "50%", shapes=[(_x(8),), (_x(20),)])
    assert len(module._steps) == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no planning while training
        for n in (32, 8, 20):
            assert _grads_equal(model, module, _x(n))
            assert module.report.extra["inputs"].startswith(f"{n}x16")
            assert module.report.measured_peak <= module.report.budget * 1.01


def test_replanning_holds_the_budget_and_says_so_once():
    model = _mlp()
    module = remat.optimize(model, (_x(32),), "50%")
    first = module.report
    small = _x(12)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            assert _grads_equal(model, module, small)
    said = [w for w in caught if "new input signature" in str(w.message)]
    assert len(said) == 1 and "12x16 float32" in str(said[0].message)
    report = module.report
    assert report is not first and report.extra["inputs"].startswith("12x16")
    vanilla = measure(copy.deepcopy(model), (small,), method="profiler").peak  # this shape's own (allocator level)
    assert report.vanilla_measured_peak == vanilla
    assert report.budget == pytest.approx(0.5 * vanilla)
    assert report.verify_rounds is not None and report.measured_peak <= report.budget * 1.01
    module(_x(32)).sum().backward()
    assert module.report is first  # back on the first shape: its report
