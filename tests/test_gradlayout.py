"""The generated eager backward copies a gradient into its parameter's layout where it is made
(``remat.compiled.gradlayout``), on an HF ConvNeXt V2 from a small config: its downsampling
convolutions read channels-last inputs (the permutes around each layer norm) and return their
weights' gradients channels-last."""

from __future__ import annotations

import copy

import torch

import remat
from remat.bench import architectures
from remat.compiled import gradlayout, partitioner
from remat.compiled.codepeak import code_peak
from remat.measure import measure


def _planned(model, inputs):
    module = remat.optimize(copy.deepcopy(model), inputs, "60%", solver="chen-greedy", verify=False)
    peak = measure(module, inputs, method="profiler", loss_fn=lambda out: out.loss).peak
    return module, peak


def _restrided(planned) -> int:
    """Returned gradients whose strides are not their parameter's."""
    return len(gradlayout.restrided(planned.split.forward, planned.split.backward))


def _end_of_backward(planned) -> float:
    """Bytes the walk of the generated code holds after the backward's last op."""
    traces: dict = {}
    code_peak(planned.split.forward, planned.split.backward, planned.joint.num_fwd_outputs, traces=traces)
    return traces["backward"][-1][1]


def test_gradients_are_returned_in_their_parameters_layout_and_the_step_holds_less(monkeypatch):
    """With the copies, no returned gradient breaks autograd's layout contract, the walk predicts
    the measured peak (allocator level) to 0.1%, and the same plan's step holds no more than without
    them, and less at the end of the backward (each channels-last gradient lived to it), whose peak
    the walk also predicts (it counts such a gradient as a temporary until autograd copies it)."""
    model, inputs, _ = architectures.build("convnextv2")
    ref = copy.deepcopy(model)
    module, peak = _planned(model, inputs)
    planned = module.step.planned
    assert _restrided(planned) == 0
    assert abs(peak - planned.peak) <= 1e-3 * peak
    with monkeypatch.context() as m:
        m.setattr(partitioner, "grads_as_parameters", lambda *a: 0)
        plain, plain_peak = _planned(model, inputs)
    assert _restrided(plain.step.planned) > 0  # the premise: the model returns such gradients
    assert abs(plain_peak - plain.step.planned.peak) <= 1e-3 * plain_peak
    # the copies end each such gradient where it is made: the end of the backward holds less, and
    # the peak is lower where it falls after them (the host's convolution kernels decide where it
    # falls: on a 2-core AMD EPYC, at a convolution backward before them, and both peaks are equal)
    assert _end_of_backward(planned) < _end_of_backward(plain.step.planned)
    assert peak <= plain_peak
    for net in (module, ref):
        net.zero_grad(set_to_none=True)
        net(**inputs).loss.backward()
    for (name, p), q in zip(module.named_parameters(), ref.parameters()):
        assert (p.grad is None) == (q.grad is None), name
        assert p.grad is None or (torch.equal(p.grad, q.grad) and p.grad.stride() == q.grad.stride()), name


def _inductor_step(held, copies: bool, monkeypatch, budget="90%", solver="chen-greedy"):
    """One compiled step of ``held``'s model under ``remat.backend`` (chen-greedy at 90%, inductor, FLOP
    costs), with or without the gradient copies: the plan, its measured peak, whether each returned 3x3 weight
    gradient was contiguous, and the gradients."""
    from remat.bench.heldout import Task

    torch._dynamo.reset()
    model = copy.deepcopy(held.model)
    contiguous: list[bool] = []
    for p in model.parameters():
        if p.dim() == 4 and p.shape[-1] > 1:
            p.register_hook(lambda g: contiguous.append(g.is_contiguous()))
    # FLOP costs: the same plan on any host and run (with measured op times the plan, and with it the walk's
    # error on it, moved with the host's timings: once 3% on the step without the copies)
    be = remat.backend(budget=budget, solver=solver, compiler="inductor", cost="flops")
    with monkeypatch.context() as m:
        if not copies:
            m.setattr(partitioner, "grads_as_parameters", lambda *a: 0)
        step = Task(torch.compile(model, backend=be), held.kind, held.labels)
        step(**held.inputs).backward()
    found = list(contiguous)
    grads = [p.grad.clone() for p in model.parameters()]
    peak = measure(step, held.inputs, method="profiler", loss_fn=lambda loss: loss).peak
    torch._dynamo.reset()
    return be.planner.planned[-1], peak, found, grads


def test_inductor_returns_weight_gradients_in_their_parameters_layout(monkeypatch):
    """Under inductor's layout optimization (a CNN on the CPU) each 3x3 weight's gradient comes
    channels-last and lived to the end of the backward; copied where made, each is returned in its
    parameter's layout. The walk predicts both steps' measured peaks, the peak is no higher, and
    the gradients are the same."""
    from remat.bench import heldout

    held = heldout.build("resnet", "cpu", "cpu")  # 64 px: the tests' 32 px one compiles without the optimization
    planned, peak, contiguous, grads = _inductor_step(held, True, monkeypatch)
    plain, plain_peak, plain_contiguous, plain_grads = _inductor_step(held, False, monkeypatch)
    assert plain_contiguous and not all(plain_contiguous)  # the premise: inductor returns some channels-last
    assert contiguous and all(contiguous)
    assert abs(peak - planned.peak) <= 0.01 * peak and abs(plain_peak - plain.peak) <= 0.01 * plain_peak
    assert peak <= plain_peak
    assert all(torch.equal(a, b) for a, b in zip(grads, plain_grads))


def test_a_convolution_input_recomputed_from_channels_last_values_is_channels_last(monkeypatch):
    """A batch norm and ReLU recomputed in the backward from a saved channels-last convolution
    output come out channels-last (inductor lays a kernel's output out as it reads), so the 3x3
    convolution backward reading them runs channels-last and its weight gradient is made so: copied
    into the parameter's layout, as the walk says, and the measured peak is the predicted one. Before
    the walk knew, those gradients came back channels-last (0.39 MB more at the peak)."""
    from remat.bench import heldout
    from remat.compiled import fusedcost

    held = heldout.build("resnet", "cpu", "cpu")
    planned, peak, contiguous, _ = _inductor_step(held, True, monkeypatch, budget="85%", solver="selective")
    again = fusedcost.recomputations(planned.steps)
    convolution_inputs = {a.name for n in planned.split.backward.graph.nodes
                          if n.target is torch.ops.aten.convolution_backward.default for a in n.args[1:2]}
    ops = {planned.joint.node_of[v].target for v in again if v in planned.joint.node_of}
    assert torch.ops.aten.convolution.default not in ops  # the premise: no convolution recomputed,
    assert convolution_inputs & {planned.joint.node_of[v].name for v in again}  # but a convolution's input
    assert contiguous and all(contiguous)
    assert abs(peak - planned.peak) <= 0.01 * peak
