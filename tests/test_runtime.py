"""The runtime against eager PyTorch (micrograd-style differential tests, STYLE.md §8).

Same model with and without remat: outputs, parameter gradients and buffers bit-identical
(``torch.equal``) for every registered training solver; plus the count of recomputed ops against
the schedule, and the measured peak against ``remat.simulate`` of the executed schedule.
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch
import torch.utils._pytree as pytree

import remat
from remat import solvers
from remat.capture import trace
from remat.measure import call, default_loss, measure
from remat.runtime import Compiled, RematModule, executed_schedule, predict

import models
from remat import zoo

SLOW = {"milp": "milp solves take ~60 s each on these graphs (tested on abstract graphs in test_milp)",
        "auto": "auto returns one of the other solvers' plans, each of which is tested here"}


@functools.lru_cache(maxsize=None)
def captured(name: str):
    model, inputs = models.MODELS[name]()
    return model, inputs, trace(model, inputs)


def reference_step(model, inputs, seed=0):
    """Eager step on a copy: outputs, gradients by name, buffers by name."""
    ref = copy.deepcopy(model)
    torch.manual_seed(seed)
    out = call(ref, inputs)
    default_loss(out).backward()
    return out, {n: p.grad for n, p in ref.named_parameters()}, dict(ref.named_buffers())


def remat_step(model, inputs, program, kept, seed=0, plan=None):
    work = copy.deepcopy(model)
    module = RematModule(work, Compiled.of(program, kept, plan))
    torch.manual_seed(seed)
    out = call(module, inputs)
    default_loss(out).backward()
    return out, {n: p.grad for n, p in work.named_parameters()}, dict(work.named_buffers()), module


def assert_identical(a, b):
    out_a, grads_a, bufs_a = a[:3]
    out_b, grads_b, bufs_b = b[:3]
    for x, y in zip(pytree.tree_leaves(out_a), pytree.tree_leaves(out_b)):
        if isinstance(x, torch.Tensor):
            assert torch.equal(x, y)
    assert grads_a.keys() == grads_b.keys()
    for n in grads_a:
        assert torch.equal(grads_a[n], grads_b[n]), f"gradient of {n} differs"
    for n in bufs_a:
        assert torch.equal(bufs_a[n], bufs_b[n]), f"buffer {n} differs"


def plan_for(graph, solver):
    """The solver's plan at 50% of the vanilla peak, else its smallest plan, else unlimited."""
    half = 0.5 * remat.simulate(graph, remat.schedule.vanilla(graph)).peak
    try:
        plan = remat.solve(graph, half, solver=solver)
        if not plan.schedule:
            plan = remat.solve(graph, None, solver=solver)
    except ValueError as e:  # a solver that refuses graphs of this size says so
        pytest.skip(f"{solver} refuses this graph: {e}")
    return plan


@pytest.mark.parametrize("name", sorted(models.MODELS))
@pytest.mark.parametrize("solver", [s for s in solvers.names("training")])
def test_gradients_identical_for_every_solver(name, solver):
    if solver in SLOW:
        pytest.skip(SLOW[solver])
    model, inputs, program = captured(name)
    plan = plan_for(program.graph, solver)
    expected = reference_step(model, inputs)
    got = remat_step(model, inputs, program, plan.kept, plan=plan)
    assert_identical(expected, got)
    assert got[3].stats.unplanned == 0 and got[3].stats.unmatched == 0
    assert got[3].stats.recomputed == got[3].compiled.recomputes


@pytest.mark.parametrize("name", sorted(models.MODELS))
def test_recompute_everything_is_identical_and_counted(name):
    """kept = {}: every value is dropped and recomputed (dropout masks replayed, BN stats once)."""
    model, inputs, program = captured(name)
    expected = reference_step(model, inputs)
    got = remat_step(model, inputs, program, [])
    assert_identical(expected, got)
    steps = executed_schedule(program.graph, [])
    recomputes = sum(1 for i, (k, v) in enumerate(steps) if k == "fwd" and ("fwd", v) in steps[:i])
    assert got[3].stats.recomputed == recomputes > 0


def test_batchnorm_statistics_move_once():
    model, inputs, program = captured("cnn")
    _, _, bufs, _ = remat_step(model, inputs, program, [])
    tracked = [v for k, v in bufs.items() if k.endswith("num_batches_tracked")]
    assert tracked and all(int(t) == int(model.state_dict()[k]) + 1
                           for k, t in bufs.items() if k.endswith("num_batches_tracked"))


class TwoInTwoOut(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(6, 6), torch.nn.Linear(6, 3)

    def forward(self, x, y, scale=2.0):
        h = torch.relu(self.a(x)) * y
        return {"h": h.sum(-1), "out": (self.b(h) * scale, h)}


def test_several_inputs_outputs_and_input_gradients():
    torch.manual_seed(0)
    model = TwoInTwoOut()
    x = torch.randn(5, 6)
    y = torch.randn(5, 6, requires_grad=True)
    program = trace(model, (x, y))
    work = copy.deepcopy(model)
    module = RematModule(work, Compiled.of(program, []))
    ref = copy.deepcopy(model)
    y_ref = y.detach().clone().requires_grad_(True)
    y_opt = y.detach().clone().requires_grad_(True)
    a, b = ref(x, y_ref), module(x, y_opt)
    assert a.keys() == b.keys() and isinstance(b["out"], tuple)
    default_loss(a).backward()
    default_loss(b).backward()
    assert torch.equal(y_ref.grad, y_opt.grad)
    for (_, p), (_, q) in zip(ref.named_parameters(), work.named_parameters()):
        assert torch.equal(p.grad, q.grad)


def test_parameters_stay_the_models_own_and_an_optimizer_works():
    model, inputs = models.build_mlp()
    module = RematModule(model, Compiled.of(trace(model, inputs), []))
    assert [id(p) for p in module.parameters()] == [id(p) for p in model.parameters()]
    assert module.state_dict().keys() == model.state_dict().keys()
    ref = copy.deepcopy(model)
    for m in (ref, module):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            default_loss(call(m, inputs)).backward()
            opt.step()
    for p, q in zip(ref.parameters(), model.parameters()):
        assert torch.equal(p, q)


def test_eval_and_no_grad_run_the_plain_model():
    model, inputs = models.build_cnn()
    module = RematModule(model, Compiled.of(trace(model, inputs), []))
    with torch.no_grad():
        a = module(*inputs)
    assert module.stats.recomputed == 0 and not a.requires_grad
    module.eval()
    assert torch.equal(module(*inputs), model(*inputs))
    assert not model.training


def test_new_input_shape_replans_or_says_so():
    model, inputs = models.build_mlp()
    fixed = RematModule(model, Compiled.of(trace(model, inputs), []))
    bigger = (torch.randn(7, 64),)
    with pytest.raises(RuntimeError, match="optimize again"):
        fixed(*bigger)
    module = remat.optimize(model, inputs, "100%", solver="chen-sqrt", verify=False, executor="interpret")
    ref = copy.deepcopy(model)
    default_loss(module(*bigger)).backward()
    default_loss(ref(*bigger)).backward()
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(ref.parameters(), model.parameters()))
    assert len(module._plans) == 2


@pytest.mark.parametrize("name", sorted(models.MODELS))
@pytest.mark.parametrize("solver", ["none", "twremat", "dp-approx", "chen-sqrt", "reforward"])
def test_measured_peak_against_prediction(name, solver):
    """Measured (storage tracker, op level) vs simulate(executed schedule): within 10% both ways.

    Never more than 5% above the prediction (GPT-2's logits outlive the forward in the caller's
    hands, ~4%, where the graph frees them at once). Gradient buffers shared by add/cat
    (Node.grad_alias) and values without gradient (Node.requires_grad) are what make the
    skip-connection and dropout models agree, and Node.saved_mem (a batch norm's backward keeps
    its mean and invstd, not its output) the batch-norm CNN. Not modelled: temporaries autograd's
    formulas make inside one node's backward (a tanh-GELU's ``pow``: ``x ** 2`` and ``3 * x ** 2``);
    GPT-2's dp-approx plan at 50% measures 4.7% over, and one with its peak in that backward
    (memory-centric at twice eq. (2)'s least budget) measured 17% over (2026-11-28)."""
    model, inputs, program = captured(name)
    plan = plan_for(program.graph, solver)
    module = RematModule(copy.deepcopy(model), Compiled.of(program, plan.kept, plan))
    predicted = module.compiled.prediction.peak
    measured = measure(module, inputs).peak
    assert measured <= predicted * 1.05
    assert abs(measured - predicted) / measured <= 0.10


def test_prediction_is_exact_on_a_net_of_multi_output_ops():
    """GoogLeNet (small input): max pooling and batch norm return tuples, whose elements must be
    traced to their values even when Python reuses the id of a dead tensor object. Before that
    was so, some saved indices were held as untraced tensors: measured 5-13% above the
    prediction here, and on CUDA 17% for U-Net at 572 px."""
    model, inputs = zoo.build("googlenet", batch=2, image_size=64)
    program = trace(model, inputs)
    plan = remat.solve(program.graph, 0.6 * remat.simulate(program.graph, remat.schedule.vanilla(program.graph)).peak,
                       solver="reforward")
    module = RematModule(copy.deepcopy(model), Compiled.of(program, plan.kept))
    measured = measure(module, inputs).peak
    assert module.stats.unmatched == 0
    assert abs(measured - module.compiled.prediction.peak) <= 64  # bytes: scalars outside the graph


def test_memory_really_drops_on_a_50_block_residual_network():
    """Both peaks measured by optimize itself: the eager step's, and the optimized step's."""
    model, inputs = models.build_residual(blocks=50)
    module = remat.optimize(model, inputs, "40%", solver="dp-approx", mode="memory")
    assert module.report["measured_peak"] <= 0.4 * module.report["vanilla_measured_peak"]


def test_predict_is_the_simulation_of_the_executed_schedule():
    _, _, program = captured("mlp")
    g = program.graph
    kept = list(g.order)[::4]
    assert predict(g, kept).peak == remat.simulate(g, remat.schedule.from_kept(g, kept)).peak


def test_a_plan_that_recomputes_nothing_runs_the_model_itself():
    model, inputs = models.build_cnn()
    program = trace(model, inputs)
    calls = []
    model.register_forward_hook(lambda *_: calls.append(1))
    everything = RematModule(model, Compiled.of(program, list(program.graph.order)))
    default_loss(everything(*inputs)).backward()
    assert everything.compiled.recomputes == 0 and calls == [1]
    nothing = RematModule(model, Compiled.of(program, []))
    default_loss(nothing(*inputs)).backward()
    assert nothing.compiled.recomputes > 0 and calls == [1] and nothing.stats.recomputed > 0


def from_scratch(graph):
    """Before each backward step, recompute what it reads from the inputs up: the least memory
    and quadratic time; values are recomputed many times, each copy freed after its last read."""
    pos = {v: i for i, v in enumerate(graph.order)}
    steps = [("fwd", v) for v in graph.order]
    for v in reversed(graph.order):
        need, stack = set(), list(graph[v].saved)
        while stack:
            u = stack.pop()
            if u not in need:
                need.add(u)
                stack += graph[u].inputs
        steps += [("fwd", u) for u in sorted(need, key=pos.__getitem__)] + [("bwd", v)]
    return steps


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_a_schedule_that_recomputes_values_many_times_runs_as_planned(name):
    """The runtime follows a solver's own schedule, not only a kept set: here each value is
    recomputed once per backward step that needs it, and measured = predicted."""
    model, inputs, program = captured(name)
    g = program.graph
    steps = from_scratch(g)
    plan = remat.Plan(solver="scratch", budget=None, feasible=True, schedule=steps, kept=[])
    assert executed_schedule(g, plan) == remat.schedule.executable(g, steps)
    assert predict(g, plan).peak < predict(g, []).peak
    expected = reference_step(model, inputs)
    got = remat_step(model, inputs, program, [], plan=plan)
    assert_identical(expected, got)
    module = got[3]
    counts = {}
    for kind, v in executed_schedule(g, plan):
        counts[v] = counts.get(v, 0) + (kind == "fwd")
    assert max(counts.values()) >= 3
    assert module.stats.recomputed == sum(counts.values()) - len(counts) == module.compiled.recomputes
    assert module.stats.unplanned == 0 and module.stats.unmatched == 0
    measured = measure(RematModule(copy.deepcopy(model), Compiled.of(program, [], plan)), inputs).peak
    assert abs(measured - module.compiled.prediction.peak) <= 128  # bytes: 0-dim scalars outside the graph
