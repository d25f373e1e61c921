"""Training steps as users write them, beyond ``model(x).backward()``: a forward that writes into
its input, an input that needs a gradient, two backward calls through one graph. The optimized
module behaves as eager does: the same gradients, the same input data afterwards, and
``remat.optimize`` leaves the example inputs as it got them."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import remat


class _DoublesItsInput(nn.Module):
    """Writes into its input (``x.mul_(2)``), then a tanh MLP: the first layer's weight gradient
    needs the doubled input."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return self.layers(x).sum()


def _mlp() -> nn.Module:
    return nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(6)])


def _same_grads(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(p.grad, q.grad) for p, q in zip(a.parameters(), b.parameters()))


@pytest.mark.parametrize("solver,executor", [("reforward", "compiled"), ("chen-greedy", "compiled"),
                                             ("twremat", "compiled"), ("dp-approx", "compiled"),
                                             ("chen-sqrt", "compiled"), ("reforward", "interpret"),
                                             ("chen-greedy", "interpret")])
def test_a_forward_that_writes_into_its_input_is_never_recomputed_from_the_new_data(solver, executor):
    """The step functionalizes ``x.mul_(2)`` into ``x * 2`` and a copy into ``x`` at the end of the
    forward, so in the backward ``x`` holds the doubled data: a plan that recomputed ``x * 2``
    there trained on ``4 x`` (these solvers' plans did: the first layer's gradients 31-62 off, absolute).
    What reads the input's old data is kept (``compiled.mutated``), by both executors."""
    torch.manual_seed(0)
    model, x = _DoublesItsInput(), torch.randn(512, 32)
    ref = copy.deepcopy(model)
    module = remat.optimize(model, (x.clone(),), "90%", solver=solver, verify=False, executor=executor)
    assert module.report["recomputed_ops"] > 0, "the plan must recompute something to test anything"
    mine, theirs = x.clone(), x.clone()
    module(mine).backward()
    ref(theirs).backward()
    assert torch.equal(mine, theirs) and torch.equal(mine, 2 * x)
    assert _same_grads(model, ref)


def test_optimize_measures_on_copies_of_the_inputs():
    """The measured steps (vanilla, then the plan's) run on copies: an input the forward writes
    into is written by the user's own steps, not by the measurements. (125%: the traced step
    holds ``x * 2`` beside ``x`` until the copy at the end of the forward, 20% over eager's step,
    which doubles ``x`` in place.)"""
    torch.manual_seed(0)
    model, x = _DoublesItsInput(), torch.randn(512, 32)
    given = x.clone()
    module = remat.optimize(model, (given,), "125%")
    assert module.report["measured_peak"] > 0
    assert torch.equal(given, x)


def test_an_input_that_needs_a_gradient_gets_eagers():
    """Planned on an input without a gradient, trained on one with: a new signature, planned and
    measured (on copies), and the input's gradient is eager's, not eager's plus the measured
    steps' (it was 2x)."""
    torch.manual_seed(0)
    model, x = _mlp(), torch.randn(512, 32)
    ref = copy.deepcopy(model)
    module = remat.optimize(model, (x,), "85%")
    mine, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    with pytest.warns(UserWarning, match="new input signature"):
        module(mine).sum().backward()
    ref(theirs).sum().backward()
    assert torch.equal(mine.grad, theirs.grad)
    assert _same_grads(model, ref)


def test_backward_twice_through_one_graph_with_retain_graph():
    """``backward(retain_graph=True)`` then ``backward()``: the saved values are not donated to the
    backward, so it runs twice, as eager's does (AOTAutograd refused the second run), and a third
    call fails as eager's does."""
    torch.manual_seed(0)
    model, x = _mlp(), torch.randn(512, 32)
    ref = copy.deepcopy(model)
    module = remat.optimize(model, (x,), "85%")
    assert module.report["recomputed_ops"] > 0
    for m in (module, ref):
        out = m(x).sum()
        out.backward(retain_graph=True)
        out.backward()
    assert _same_grads(model, ref)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        out = module(x).sum()
        out.backward()
        out.backward()


def test_a_model_cast_after_planning_is_told_to_plan_again():
    """``model.to(torch.float64)`` after ``remat.optimize``, called on the input it was planned for:
    the step was traced for fp32 and fails in its first matmul; the error names the tensor that
    moved and the fix. (A float64 input is a new signature, planned afresh with the model as it is.)"""
    torch.manual_seed(0)
    model, x = _mlp(), torch.randn(64, 32)
    module = remat.optimize(model, (x,), "85%", verify=False)
    model.to(torch.float64)
    with pytest.raises(remat.errors.StepError, match=r"0\.0\.weight is float64 on cpu, traced as float32.*"
                                                     r"remat\.optimize\(model, inputs, budget\) again"):
        module(x)
    with pytest.warns(UserWarning, match="new input signature"):
        assert module(x.double()).dtype == torch.float64


def test_module_hooks_are_said_to_run_only_while_tracing():
    """A forward hook collecting activations runs once, on the trace's tensors, not in each planned
    step: optimize says so, names where, and names the backend, under which it runs each step."""
    torch.manual_seed(0)
    model, x = _mlp(), torch.randn(64, 32)
    seen: list[torch.Tensor] = []
    model[2].register_forward_hook(lambda m, i, o: seen.append(o))
    with pytest.warns(UserWarning, match=r"module hooks on 2 \(forward hook\) run once.*remat\.backend"):
        module = remat.optimize(model, (x,), "85%", verify=False)
    traced = len(seen)
    module(x).sum().backward()
    assert len(seen) == traced
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=remat.backend(budget="85%", compiler="eager"))
    compiled(x).sum().backward()
    assert len(seen) == traced + 1 and torch.equal(seen[-1], model[:3](x))
    torch._dynamo.reset()


def test_many_input_lengths_are_told_how_to_plan_fewer():
    """Each new input signature is planned once and said; from the fourth on the warning also names
    padding to a few lengths and the backend, which plans one graph for every length."""
    torch.manual_seed(0)
    model = _mlp()
    module = remat.optimize(model, (torch.randn(64, 32),), "85%", verify=False)
    for n, many in ((48, False), (40, False), (56, True)):
        with pytest.warns(UserWarning, match="new input signature") as caught:
            module(torch.randn(n, 32)).sum().backward()
        assert any("pad_to_multiple_of" in str(w.message) for w in caught) == many
