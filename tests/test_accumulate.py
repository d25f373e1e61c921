"""The generated backward adds each parameter's gradient into its allocated ``.grad`` where it is
made (``remat.compiled.accumulate``), as eager autograd does, instead of returning all of them
when it ends; where autograd must accumulate itself (a hook) it returns them, and says so."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import remat
from remat.compiled.accumulate import ACCUMULATED


def _wide() -> tuple[nn.Module, torch.Tensor]:
    """Gradients (6 MB) far above the activations (a few KB): what the step holds is gradients."""
    torch.manual_seed(0)
    layers = [m for _ in range(6) for m in (nn.Linear(512, 512), nn.Tanh())]
    return nn.Sequential(*layers), torch.randn(4, 512)


def _steps(net: nn.Module, x: torch.Tensor, n: int = 2) -> list[torch.Tensor]:
    for p in net.parameters():
        p.grad = torch.zeros_like(p)
    for _ in range(n):
        net(x).sum().backward()
    return [p.grad for p in net.parameters()]


def test_each_gradient_is_added_in_where_made_bitwise_and_the_peak_is_the_predicted_one():
    """With ``.grad`` allocated the step holds one gradient at a time, as eager's does, so a budget
    of eager's peak is met by the generated code (before, it held all 6 MB at the backward's end
    and was refused), the measured peak is the predicted one, and two accumulated steps give
    eager's gradients bit for bit."""
    model, x = _wide()
    ref = copy.deepcopy(model)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    vanilla = remat.measure(copy.deepcopy(model), (x,), gradients="allocated").peak
    assert vanilla < params / 4  # the premise: eager holds one layer's gradient at a time
    module = remat.optimize(model, (x,), vanilla, gradients="allocated", solver="none", verify=False)
    step = module.step
    assert step.planned.split.backward.meta.get(ACCUMULATED)  # the accumulating form was planned and walked
    peak = remat.measure(module, (x,), gradients="allocated", method="profiler").peak
    assert peak <= vanilla * 1.01 and abs(peak - module.report.predicted_peak) <= 0.01 * peak
    assert all(torch.equal(g, e) for g, e in zip(_steps(module, x), _steps(ref, x)))


def test_a_hook_on_a_parameter_takes_the_returning_form_and_says_so():
    """A post-accumulate hook needs autograd's own accumulation: the backward returns the gradients,
    the hook runs every step, gradients are eager's, and a warning says the step holds more."""
    model, x = _wide()
    ref = copy.deepcopy(model)
    module = remat.optimize(model, (x,), "100%", gradients="allocated", solver="none", verify=False)
    calls = []
    next(module.parameters()).register_post_accumulate_grad_hook(lambda p: calls.append(1))
    with pytest.warns(UserWarning, match="returns the parameters' gradients when it ends"):
        got = _steps(module, x)
    assert len(calls) == 2
    assert all(torch.equal(g, e) for g, e in zip(got, _steps(ref, x)))


def test_with_grad_none_each_returned_gradient_becomes_it():
    """``.grad`` None (``zero_grad()``'s default): the returning form runs, no warning, eager's gradients."""
    model, x = _wide()
    ref = copy.deepcopy(model)
    module = remat.optimize(model, (x,), "100%", gradients="allocated", solver="none", verify=False)
    for net in (module, ref):
        net.zero_grad(set_to_none=True)
        net(x).sum().backward()
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(module.parameters(), ref.parameters()))


def test_a_plan_made_for_grad_none_warns_once_when_grad_is_allocated_after_all():
    """Planned with ``.grad`` set to None (``gradients="auto"`` on the CPU), a step that finds it
    allocated holds the returned gradients until the backward ends, above the plan's peak: a
    warning names the fix, once; steps with ``.grad`` None do not warn, and gradients stay eager's."""
    import warnings

    model, x = _wide()
    ref = copy.deepcopy(model)
    module = remat.optimize(model, (x,), "100%", solver="none", verify=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module.zero_grad(set_to_none=True)
        module(x).sum().backward()
    with pytest.warns(UserWarning, match="gradients='allocated'") as caught:
        got = [g.clone() for g in _steps(module, x)]
        allocated = remat.measure(module, (x,), gradients="allocated", method="profiler").peak
    assert sum("gradients='allocated'" in str(w.message) for w in caught) == 1
    assert allocated > module.report.predicted_peak * 1.5  # what it warns of: the gradients held dwarf the plan
    assert all(torch.equal(g, e) for g, e in zip(got, _steps(ref, x)))
