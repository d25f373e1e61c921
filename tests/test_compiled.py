"""The compiled runtime (remat.compiled): plans run as fx-generated forward/backward graphs.

Exactness against eager PyTorch (fp32 and bf16 autocast, dropout, BatchNorm statistics, HF
models with their default arguments), every solver's plan through the generated code with its
measured peak against the prediction, schedules that recompute a value several times, and the
torch.compile backend with both compilers.
"""

from __future__ import annotations

import contextlib
import copy
import os
import subprocess
import sys
import textwrap
from typing import Any, Callable

import pytest
import torch
from torch import nn

import remat
from remat.bench import heldout
from remat.compiled.module import compile_step, run
from remat.compiled.partitioner import Planner
from remat.compiled.searching import Searching
from remat.measure import default_loss, measure

# an end-to-end check of a minute or more whose path a cheaper test here also takes: ``make test-extended``
# runs these, ``make test`` (CI) leaves them out to keep within its 15 minutes
EXTENDED = pytest.mark.extended


def _mlp() -> tuple[nn.Module, tuple]:
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.LayerNorm(64), nn.GELU(), nn.Dropout(0.1), nn.Linear(64, 64)) for _ in range(5)]
    return nn.Sequential(nn.Linear(16, 64), *blocks, nn.Linear(64, 4)), (torch.randn(32, 16),)


def _bn_cnn() -> tuple[nn.Module, tuple]:
    torch.manual_seed(0)
    blocks: list[nn.Module] = [nn.Conv2d(3, 8, 3, padding=1)]
    for _ in range(4):
        blocks += [nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1)]
    return nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3)), (torch.randn(4, 3, 16, 16),)


def _hf(name: str) -> tuple[nn.Module, dict]:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if name == "gpt2":
        cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32)
        model = transformers.GPT2LMHeadModel(cfg)
    else:
        cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64,
                                       num_attention_heads=4, num_key_value_heads=2, vocab_size=64)
        model = transformers.LlamaForCausalLM(cfg)
    model.train()
    ids = torch.randint(0, 64, (2, 16))
    return model, {"input_ids": ids, "labels": ids}  # default arguments: use_cache left as the config has it


def _call(model: nn.Module, inputs) -> torch.Tensor:
    out = model(**inputs) if isinstance(inputs, dict) else model(*inputs)
    loss = getattr(out, "loss", None)
    return loss if loss is not None else default_loss(out)


def _step(model: nn.Module, inputs, autocast: bool, seed: int = 1) -> torch.Tensor:
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    torch.manual_seed(seed)
    with ctx:
        loss = _call(model, inputs)
    loss.backward()
    return loss.detach()


class _SharedLayer(nn.Module):
    """One Linear read four times (ALBERT's shared layers, a module called in a loop): under autocast
    eager casts its weight once and sums the four gradients in bf16 (``castcache``)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64), nn.Tanh())
        self.head = nn.Linear(64, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(4):
            x = self.layer(x) + x
        return self.head(x)


def _shared() -> tuple[nn.Module, tuple]:
    torch.manual_seed(0)
    return _SharedLayer(), (torch.randn(256, 64),)


class _LoRA(nn.Module):
    """A frozen Linear plus a trainable low-rank update behind dropout: what peft's LoRA layer adds
    (B starts random here, not zero, so that A's gradient is not zero)."""

    def __init__(self, base: nn.Linear, rank: int = 4, alpha: float = 8.0) -> None:
        super().__init__()
        self.base = base
        self.a = nn.Linear(base.in_features, rank, bias=False)
        self.b = nn.Linear(rank, base.out_features, bias=False)
        self.drop = nn.Dropout(0.1)
        self.scale = alpha / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.b(self.a(self.drop(x))) * self.scale


def _lora() -> tuple[nn.Module, dict]:
    """HF Llama fine-tuned LoRA-style: every weight frozen, adapters on the query and value
    projections (peft's default targets for Llama)."""
    model, inputs = _hf("llama")
    model.requires_grad_(False)
    for layer in model.model.layers:
        layer.self_attn.q_proj = _LoRA(layer.self_attn.q_proj)
        layer.self_attn.v_proj = _LoRA(layer.self_attn.v_proj)
    return model, inputs


BUILDERS = {"mlp-dropout": _mlp, "bn-cnn": _bn_cnn, "shared-layer": _shared, "hf-gpt2": lambda: _hf("gpt2"),
            "hf-llama": lambda: _hf("llama"), "hf-llama-lora": _lora}
# the budget the exactness test plans within: 70%, but LoRA's (its frozen weights' inputs are not saved:
# chen-greedy's floor is 85.5% of its vanilla peak in fp32)
BUDGETS = {"hf-llama-lora": "90%"}


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
@pytest.mark.parametrize("name", list(BUILDERS))
def test_gradients_equal_eager(name, autocast):
    """torch.equal to eager: outputs, every parameter gradient, BatchNorm statistics (moved once);
    dropout under bf16 included (remat.compiled.eager_ops traces it as eager runs it on the CPU);
    frozen weights (LoRA) get no gradient, as in eager."""
    model, inputs = BUILDERS[name]()
    ref = copy.deepcopy(model)
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with ctx:  # optimize called inside the autocast region: its state is part of the plan's key
        module = remat.optimize(model, inputs, BUDGETS.get(name, "70%"), solver="chen-greedy", verify=False)
    assert module.step.planned.split.recomputed > 0, "the plan must recompute something to test anything"
    loss = _step(module, inputs, autocast)
    loss_ref = _step(ref, inputs, autocast)
    assert torch.equal(loss, loss_ref)
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        assert (p.grad is None) == (q.grad is None), n
        assert p.grad is None or torch.equal(p.grad, q.grad), n
    for (n, b), c in zip(model.named_buffers(), ref.buffers()):
        assert torch.equal(b, c), n


def _calls(model: nn.Module, inputs, op, phase: str) -> int:
    """Calls of ``op`` in one training step's ``phase``: "forward" or "backward"."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += func is op
            return func(*args, **(kwargs or {}))

    with Count() if phase == "forward" else contextlib.nullcontext():
        loss = _call(model, inputs)
    with Count() if phase == "backward" else contextlib.nullcontext():
        loss.backward()
    return Count.n


def test_generated_backward_detaches_no_more_than_eager():
    """AOTAutograd's backward detaches each saved activation it reads (a ReLU's output); the graphs
    run without autograd, so the generated code reads the value itself: its backward calls
    ``aten.detach`` no more often than eager's does (once per parameter, accumulating its gradient,
    and where eager unpacks a saved output)."""
    model, inputs = BUILDERS["bn-cnn"]()
    ref = copy.deepcopy(model)
    module = remat.optimize(model, inputs, "70%", solver="chen-greedy", verify=False)
    assert module.step.planned.split.backward.code.count("aten.detach") > 0  # the partition has some
    detach = torch.ops.aten.detach.default
    assert _calls(module, inputs, detach, "backward") <= _calls(ref, inputs, detach, "backward")
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.equal(p.grad, q.grad)


def test_batch_norm_statistics_move_in_place_as_eager():
    """Running statistics and ``num_batches_tracked`` are updated in place inside the forward, as
    eager's kernels do: the forward copies nothing into the buffers (AOTAutograd's epilogue would
    make three copies per batch norm), and the buffers equal eager's."""
    model, inputs = BUILDERS["bn-cnn"]()
    ref = copy.deepcopy(model)
    module = remat.optimize(model, inputs, "70%", solver="chen-greedy", verify=False)
    copy_ = torch.ops.aten.copy_.default
    assert _calls(module, inputs, copy_, "forward") <= _calls(ref, inputs, copy_, "forward")
    for b, c in zip(model.buffers(), ref.buffers()):
        assert torch.equal(b, c)


@pytest.mark.parametrize("name", ["hf-gpt2", "bn-cnn"])
def test_backward_inside_autocast_runs_as_eager_outside(name):
    """``loss.backward()`` inside the autocast region: the generated backward runs with autocast
    off (its casts are in the graph), so it neither fails on dtypes nor re-casts its ops: the
    gradients are those of eager with the backward outside, PyTorch's recommended placement (and
    what eager does on CUDA, where autograd's device thread has autocast off)."""
    model, inputs = BUILDERS[name]()
    ref = copy.deepcopy(model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        module = remat.optimize(model, inputs, "60%", solver="chen-greedy", verify=False)
        torch.manual_seed(1)
        loss = _call(module, inputs)
        loss.backward()
    assert module.step.planned.split.recomputed > 0
    assert torch.equal(loss.detach(), _step(ref, inputs, autocast=True))
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        assert p.grad is None and q.grad is None or torch.equal(p.grad, q.grad), n


def test_autocast_state_is_part_of_the_key():
    """Planned in fp32, then trained under autocast: a second plan for that state, exact too."""
    model, inputs = _mlp()  # dropout included
    ref = copy.deepcopy(model)
    module = remat.optimize(model, inputs, "70%", solver="chen-greedy", verify=False)
    with pytest.warns(UserWarning, match="new input signature or autocast state"):
        loss = _step(module, inputs, autocast=True)
    assert len(module._steps) == 2
    assert torch.equal(loss, _step(ref, inputs, autocast=True))
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters()))


def test_a_parameter_swapped_in_after_planning_is_the_one_trained():
    """The step reads each parameter from where the module holds it (FSDP2 and
    ``load_state_dict(assign=True)`` put new tensors there), and a removed one is named."""
    model, inputs = _mlp()
    module = remat.optimize(model, inputs, "70%", solver="chen-greedy", verify=False)
    old = model[0].weight
    model[0].weight = nn.Parameter(old.detach() * 2)
    ref = copy.deepcopy(model)
    assert torch.equal(_step(module, inputs, autocast=False), _step(ref, inputs, autocast=False))
    assert old.grad is None and torch.equal(model[0].weight.grad, ref[0].weight.grad)
    del model[-1].bias
    model[-1].bias = None
    with pytest.raises(remat.errors.StepError, match="parameters were added or removed"):
        _step(module, inputs, autocast=False)


def test_torch_compile_of_the_optimized_module_runs_its_plan_and_names_the_backend():
    """``torch.compile(remat.optimize(...))``: dynamo cannot trace a planned step, so the step runs
    as remat's own code (one graph break, the same gradients), says so once, and names the way to
    compiled code within a budget; ``fullgraph=True`` refuses with the same words."""
    import warnings

    model, inputs = _mlp()  # dropout included
    ref = copy.deepcopy(model)
    module = remat.optimize(model, inputs, "70%", solver="chen-greedy", verify=False)
    torch._dynamo.reset()
    compiled = torch.compile(module, backend="eager")
    with pytest.warns(UserWarning, match=r"backend=remat\.backend\(budget="):
        loss = _step(compiled, inputs, autocast=False)
    assert torch.equal(loss, _step(ref, inputs, autocast=False))
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters()))
    module.zero_grad(set_to_none=True)  # (a step into allocated .grad warns: planned for None, ``accumulate``)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(_step(compiled, inputs, autocast=False, seed=2), _step(ref, inputs, autocast=False, seed=2))
    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"backend=remat\.backend"):
        torch.compile(module, backend="eager", fullgraph=True)(*inputs)
    torch._dynamo.reset()


def test_hf_cache_output_is_dropped_and_reported():
    model, inputs = _hf("gpt2")
    module = remat.optimize(model, inputs, "100%", verify=False)
    out = module(**inputs)
    if model.config.use_cache:
        assert all(out.get(name) is None for name in ("cache", "past_key_values"))  # renamed in transformers 5.24
        assert module.step.flat.dropped in (["cache"], ["past_key_values"])


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
def test_dropout_recomputed_from_the_saved_generator_state(autocast):
    """A plan that recomputes dropout draws them again from the generator state saved before the
    forward's draw (``run_and_save_rng_state`` / ``run_with_rng_state``): the same masks, so
    gradients equal eager's, and the states are in the measured peak as in the prediction."""
    model, _ = _mlp()
    inputs = (torch.randn(512, 16),)
    ref = copy.deepcopy(model)
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with ctx:
        step = compile_step(model, inputs, {}, Planner("60%", solver="chen-greedy"))
    states = [s for s in step.planned.split.saved if s.endswith("_rng_state")]
    assert states, "the plan must recompute a dropout draw to test anything"
    replays = [n for n in step.planned.split.backward.graph.nodes if n.target is torch._prims.rng_prims.run_with_rng_state]
    assert len(replays) >= len(states)
    torch.manual_seed(3)
    with ctx:
        out = run(step, inputs, {})
    default_loss(out).backward()
    loss_ref = _step(ref, inputs, autocast, seed=3)
    assert torch.equal(default_loss(out).detach(), loss_ref)
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters()))
    after = torch.rand(1)  # the step leaves the generator where eager leaves it
    torch.manual_seed(3)
    with ctx:
        default_loss(ref(*inputs))
    assert torch.equal(after, torch.rand(1))


def _solvers() -> list[str]:
    skip = {"auto", "dp-exhaustive"}  # auto: covered above; exhaustive: tiny graphs only
    return [s for s in remat.solvers.names("training") if s not in skip]


@pytest.fixture
def quick_milp(monkeypatch):
    """MILP's incumbent within a few seconds: what is tested here is the code, not optimality."""
    import remat.solvers.milp as milp

    monkeypatch.setattr(milp, "DEFAULT_TIME_LIMIT", 4.0)


@pytest.mark.parametrize("solver", _solvers())
def test_every_solver_runs_through_the_generated_code(solver, quick_milp):
    """Gradients exact and the measured peak (live storage) within 2% of the prediction."""
    model, inputs = _mlp()
    ref = copy.deepcopy(model)
    for budget in ("60%", "75%", "90%", "100%"):  # the first this solver reaches here
        try:
            step = compile_step(model, inputs, {}, Planner(budget, solver=solver))
            break
        except ValueError as e:  # below the solver's floor (blocks: no repeated module) says so
            reason = str(e)[:160]
    else:
        pytest.skip(reason)
    predicted = step.planned.peak

    class Wrapped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, x):
            return run(step, (x,), {})

    measured = measure(Wrapped(), inputs, method="tracker", warmup=0).peak
    assert abs(measured - predicted) <= 0.02 * predicted, (measured, predicted)
    for p in model.parameters():
        p.grad = None
    torch.manual_seed(2)
    default_loss(run(step, inputs, {})).backward()
    torch.manual_seed(2)
    default_loss(ref(*inputs)).backward()
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters()))


@pytest.mark.parametrize("name", ["hf-gpt2", "hf-llama"])
def test_generated_code_peak_is_the_measured_peak(name):
    """The peak predicted from the generated graphs (``codepeak``) is the measured one (within
    2%), also where the planning graph does not model every backward temporary (HF losses), and
    that peak is within the budget. (GPT-2 at 62%: with its tied weight's gradient parts counted,
    60% is below the planning graph's floor for selective.)"""
    model, inputs = BUILDERS[name]()
    module = remat.optimize(model, inputs, "62%", solver="selective", verify=False)
    planned = module.step.planned
    measured = measure(module, inputs, method="tracker", warmup=0).peak
    assert abs(measured - planned.peak) <= 0.02 * planned.peak, (measured, planned.peak, planned.prediction.peak)
    assert planned.peak <= planned.budget * 1.005


@pytest.mark.parametrize("solver,depth", [("twremat", 32), ("milp", 12)])
def test_schedules_that_recompute_a_value_several_times(solver, depth, quick_milp):
    """A value computed three or more times becomes that many nodes of the backward graph."""
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(depth)])
    x = torch.randn(64, 32)
    ref = copy.deepcopy(model)
    step = compile_step(model, (x,), {}, Planner("30%", solver=solver))
    counts: dict[str, int] = {}
    for kind, v in step.planned.steps:
        if kind == "fwd":
            counts[v] = counts.get(v, 0) + 1
    assert max(counts.values()) >= 3, "the schedule must compute some value three times to test anything"
    assert step.planned.split.recomputed == sum(c - 1 for c in counts.values())
    assert step.planned.split.unplanned == 0
    run(step, (x,), {}).sum().backward()
    ref(x).sum().backward()
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters()))


@pytest.mark.parametrize("compiler", ["eager", "inductor"])
def test_backend(compiler):
    """The backend with both compilers on the dropout MLP, with a plan that recomputes dropout draws
    (replayed from the generator state saved before each: ``run_with_rng_state``). Inductor draws
    its own random numbers, so its masks would not be eager's; under ``fallback_random`` (the
    benchmarks' ``heldout.eager_rng``) they are, and its gradients are eager's up to rounding."""
    torch._dynamo.reset()
    model, (x,) = _mlp()
    ref = copy.deepcopy(model)
    be = remat.backend(budget="60%", solver="chen-greedy", compiler=compiler)
    with heldout.eager_rng():
        _step(torch.compile(model, backend=be), (x,), False, seed=3)
    _step(ref, (x,), False, seed=3)
    (slot,) = be.slots
    assert len(be.report) == 1 and be.report[0]["recomputed_ops"] > 0
    replays = [n for n in slot.planned.split.backward.graph.nodes
               if n.target is torch._prims.rng_prims.run_with_rng_state]
    assert replays, "the plan must recompute a dropout draw to test anything"
    got, eager = [p.grad for p in model.parameters()], [p.grad for p in ref.parameters()]
    if compiler == "eager":
        assert all(torch.equal(g, e) for g, e in zip(got, eager))
    else:  # inductor fuses and reorders arithmetic, as torch.compile at budget 1.0 does
        assert heldout.grad_difference(got, eager) < 1e-5
    torch._dynamo.reset()


@pytest.mark.parametrize("gradients", ["allocated", "none"])
@pytest.mark.parametrize("compiler", ["eager", "inductor"])
def test_the_backends_backward_holds_one_gradient_at_a_time_and_its_peak_is_predicted(compiler, gradients):
    """AOTAutograd's backward returns the parameters' gradients when it ends; with ``.grad``
    allocated before the step (gradient accumulation, ``zero_grad(set_to_none=False)``, and
    ``measure`` on CUDA) autograd would add them in only then, all held together. remat's backward
    adds each into its ``.grad`` where it is made (``accumulate``), inductor's code too; with
    ``.grad`` None each returned one becomes it. On a wide MLP at batch 2, whose gradients are
    3 MB against a few KB of activations, the step holds at most one layer's gradient (1 MB) either
    way, as predicted; gradients are eager's (inductor: to rounding)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 512), nn.Tanh(), nn.Linear(512, 512), nn.Tanh(), nn.Linear(512, 512))
    ref, x = copy.deepcopy(model), torch.randn(2, 512)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    be = remat.backend(budget=4 * params, compiler=compiler, gradients=gradients)
    net = torch.compile(model, backend=be)
    peak = measure(net, (x,), method="profiler", gradients=gradients).peak
    (rep,) = be.report
    assert peak <= params / 2
    assert abs(peak - rep["predicted_peak"]) <= 0.01 * peak
    for m in (net, ref):
        for p in m.parameters():
            p.grad = torch.zeros_like(p) if gradients == "allocated" else None
        for _ in range(2):
            m(x).sum().backward()
    assert heldout.grad_difference([p.grad for p in model.parameters()], [p.grad for p in ref.parameters()]) \
        <= (0.0 if compiler == "eager" else 1e-5)
    torch._dynamo.reset()


def test_backend_shows_its_planning_and_compiling_when_progress_is_on(capsys):
    """The first call of a model under ``remat.backend`` plans and compiles (seconds to minutes):
    with progress on, a line says which graph is being planned and compiled."""
    from remat import progress

    torch._dynamo.reset()
    model, (x,) = _mlp()
    progress.enable(True)
    try:
        torch.compile(model, backend=remat.backend(budget="60%", compiler="eager"))(x).sum().backward()
    finally:
        progress.enable(None)
    err = capsys.readouterr().err
    assert "remat.backend: graph 0 of the step" in err and "planning the joint graph" in err
    torch._dynamo.reset()


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
def test_backend_eager_hf_gpt2_training_is_exact(autocast):
    """HF GPT-2 from a tiny config in training mode (dropout on, attention dropout included) through
    torch.compile with fx codegen: gradients as eager's, on both graphs of its loss's graph break. Under
    bf16 the backward is traced without autocast, as eager runs it (torch's default casts the backward
    of attention's fp32 math path to bf16: 6.5e-3 off)."""
    torch._dynamo.reset()
    model, inputs = _hf("gpt2")
    ref = copy.deepcopy(model)
    compiled = torch.compile(model, backend=remat.backend(budget="100%", compiler="eager"))
    assert torch.equal(_step(compiled, inputs, autocast), _step(ref, inputs, autocast))
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters()))
    torch._dynamo.reset()


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
def test_backend_eager_hf_gpt2_accumulating_gradients_is_exact(autocast):
    """The same with ``.grad`` allocated (``gradients="allocated"``): each graph's backward adds its
    gradients into ``.grad`` where they are made, its loss-only form too (the logits' gradient never
    comes), and two accumulated steps give eager's gradients bit for bit."""
    torch._dynamo.reset()
    model, inputs = _hf("gpt2")
    ref = copy.deepcopy(model)
    be = remat.backend(budget="100%", compiler="eager", gradients="allocated")
    compiled = torch.compile(model, backend=be)
    for net in (model, ref):
        for p in net.parameters():
            p.grad = torch.zeros_like(p)
    for _ in range(2):
        assert torch.equal(_step(compiled, inputs, autocast), _step(ref, inputs, autocast))
    assert any(s.planned.split.backward.meta.get("remat_accumulated") for s in be.slots)
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters()))
    torch._dynamo.reset()


def test_backend_eager_shared_layer_is_exact_under_autocast():
    """fx codegen through torch.compile: a layer read four times under bf16 autocast is cast once and
    its gradients summed in bf16, as eager's autocast cache makes them (``castcache``)."""
    torch._dynamo.reset()
    model, (x,) = _shared()
    ref = copy.deepcopy(model)
    compiled = torch.compile(model, backend=remat.backend(budget="60%", solver="chen-greedy", compiler="eager"))
    assert torch.equal(_step(compiled, (x,), True), _step(ref, (x,), True))
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters()))
    torch._dynamo.reset()


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
def test_backend_eager_dropout_is_exact(autocast):
    """fx codegen through torch.compile: dropout masks and bf16 roundings as eager's."""
    torch._dynamo.reset()
    model, (x,) = _mlp()
    ref = copy.deepcopy(model)
    be = remat.backend(budget="60%", solver="chen-greedy", compiler="eager")
    compiled = torch.compile(model, backend=be)
    assert torch.equal(_step(compiled, (x,), autocast), _step(ref, (x,), autocast))
    (rep,) = be.report
    assert rep["recompute_time"] == rep["recompute_cost"] > 0  # eager code runs each recomputed op alone
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters()))


def test_backend_rejects_bad_arguments():
    with pytest.raises(ValueError, match="compiler must be one of"):
        remat.backend(compiler="tvm")
    with pytest.raises(ValueError, match="known solvers"):
        remat.backend(solver="magic")
    with pytest.raises(ValueError, match="budget"):
        remat.backend(budget="lots")


class _Broken(nn.Module):
    """Two MLPs with a graph break between them: torch.compile makes two graphs."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Linear(16, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 256))
        self.b = nn.Sequential(nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        torch._dynamo.graph_break()
        return self.b(h)


def _broken_probe(model: nn.Module, x: torch.Tensor) -> list[dict]:
    """Each graph's summary at "100%" (no recomputation) for ``_Broken``."""
    torch._dynamo.reset()
    probe = remat.backend(budget="100%", solver="auto", compiler="eager")
    torch.compile(copy.deepcopy(model), backend=probe)(x).sum().backward()
    torch._dynamo.reset()
    return probe.report


def test_backend_byte_budget_holds_across_a_graph_break():
    """A byte budget over a step split by a graph break: the first step runs the graph before the
    break at its floor; the next plans it again, leaving room for what the graph after it needs
    while its own saved values live; gradients stay eager's and the step's measured peak fits."""
    torch.manual_seed(0)
    model, x = _Broken(), torch.randn(64, 16)
    ref = copy.deepcopy(model)
    first, second = _broken_probe(model, x)
    budget = int(1.3 * first["vanilla_predicted_peak"])  # less than the two graphs' plain steps need
    assert budget < first["after_forward"] + second["predicted_peak"]
    be = remat.backend(budget=budget, solver="auto", compiler="eager")
    compiled = torch.compile(model, backend=be)
    for step in range(2):
        model.zero_grad(), ref.zero_grad()
        compiled(x).sum().backward()
        ref(x).sum().backward()
        assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters()))
        g0, g1 = be.report
        assert g0["provisional"] == (step == 0) and not g1["provisional"]
        assert g1["held_before"] > 0 and g1["predicted_peak"] <= budget - g1["held_before"]
    g0, g1 = be.report
    assert g0["tail"] >= g1["predicted_peak"] and g0["replans"]
    assert g0["after_forward"] + g0["tail"] <= budget and g0["predicted_peak"] <= budget
    assert measure(compiled, (x,), method="profiler").peak <= budget * 1.01
    torch._dynamo.reset()


class _BrokenDropout(_Broken):
    """``_Broken`` with dropout before the break: the benches compare its gradients with eager's."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = nn.functional.dropout(self.a(x), 0.2, self.training)
        torch._dynamo.graph_break()
        return self.b(h)


def test_gradients_compared_with_eager_are_of_the_plan_for_good_not_the_first_steps_floor():
    """The benches take a compiled method's gradients from its second step
    (``heldout.second_step_grads``): with a graph break and a byte budget, the first step runs the
    graph before the break at its floor plan, and only the next runs the plan being measured."""
    torch.manual_seed(0)
    model, x = _BrokenDropout(), torch.randn(64, 16)
    ref = copy.deepcopy(model)
    torch.manual_seed(3)
    ref(x).sum().backward()
    first, second = _broken_probe(model, x)
    budget = int(1.3 * first["vanilla_predicted_peak"])
    made = []

    def make() -> tuple[Any, nn.Module]:
        made.append(remat.backend(budget=budget, solver="auto", compiler="eager"))
        net = copy.deepcopy(model)
        return torch.compile(net, backend=made[-1]), net

    def step(net: Any) -> None:
        torch.manual_seed(3)
        net(x).sum().backward()

    torch._dynamo.reset()
    grads = heldout.second_step_grads(make, step)
    (be,) = made
    assert [g["provisional"] for g in be.report] == [False, False] and be.report[0]["replans"]
    assert all(torch.equal(g, p.grad) for g, p in zip(grads, ref.parameters()))
    torch._dynamo.reset()


@pytest.mark.parametrize("budget", [pytest.param("100%", marks=EXTENDED), "60%"])
def test_backend_inductor_step_peak_is_measured_on_a_tied_embedding(budget):
    """HF GPT-2 ties its lm_head to the token embedding; dynamo breaks the graph at the loss.
    Inductor computes the lm_head's weight gradient where it is added to the embedding's, at the
    end of the first graph's backward (``codepeak._addmm_add``), so the logits' gradient lives
    until then: the step's predicted peak is the measured one (it was 4% under at 100%)."""
    torch._dynamo.reset()
    model, _ = _hf("gpt2")
    model.eval()
    inputs = _lengths(64, (32,))[0]
    be = remat.backend(budget=budget, solver="auto", compiler="inductor")
    compiled = torch.compile(model, backend=be)
    _step(compiled, inputs, False)
    model.zero_grad(set_to_none=True)
    measured = measure(LossStep(compiled), inputs, method="profiler").peak
    assert be.step_peak == pytest.approx(measured, rel=0.002)
    torch._dynamo.reset()


class _FusedGateUp(nn.Module):
    """SwiGLU layers with one projection for gate and up, split in two (Phi-3, a Mixtral expert):
    the split's gradient is a concatenation of two pointwise results."""

    def __init__(self, width: int = 64, layers: int = 3) -> None:
        super().__init__()
        self.up = nn.ModuleList(nn.Linear(width, 4 * width) for _ in range(layers))
        self.down = nn.ModuleList(nn.Linear(2 * width, width) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for up, down in zip(self.up, self.down):
            gate, value = up(x).chunk(2, dim=-1)
            x = x + down(nn.functional.silu(gate) * value)
        return x


def _inductor_peaks(make: Callable[[], nn.Module], budget: str, shape: tuple = (256, 64),
                    grads: list | None = None) -> tuple[float, float]:
    """The backend's predicted step peak under inductor and the measured one, for ``make()`` on a
    batch of ``shape`` (256 rows of 64); the first step's gradients and eager's appended to
    ``grads``."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, x = make(), torch.randn(shape)
    ref = copy.deepcopy(model)
    be = remat.backend(budget=budget, solver="auto", compiler="inductor")
    compiled = torch.compile(model, backend=be)
    compiled(x).sum().backward()
    if grads is not None:
        ref(x).sum().backward()
        grads += [[p.grad for p in model.parameters()], [p.grad for p in ref.parameters()]]
    model.zero_grad(set_to_none=True)
    measured = measure(compiled, (x,), method="profiler").peak
    torch._dynamo.reset()
    return be.step_peak, measured


@pytest.mark.parametrize("budget", [pytest.param("100%", marks=EXTENDED), "60%"])  # (60% recomputes: the harder)
def test_backend_inductor_step_peak_is_measured_where_a_concatenation_is_computed_in_place(budget):
    """Inductor writes the parts of a concatenation straight into its buffer, which exists from
    the first part's kernel on while what every part reads still lives (``codepeak._concat_parts``;
    the fused walk had each part a buffer of its own, freed as the next was made): the step's
    predicted peak is the measured one."""
    predicted, measured = _inductor_peaks(_FusedGateUp, budget)
    assert predicted == pytest.approx(measured, rel=0.002)


class _CeilPooled(nn.Module):
    """Convolutions, then an average pool whose one window is larger than the map (``ceil_mode``):
    HF EfficientNet's ``AvgPool2d(1280, ceil_mode=True)`` over its last 2 x 2."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.SiLU(), nn.Conv2d(16, 32, 3, padding=1),
                                   nn.SiLU())
        self.pool = nn.AvgPool2d(24, ceil_mode=True)
        self.head = nn.Linear(32, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.convs(x)).flatten(1))


def test_backend_inductor_pools_an_overhanging_window_as_eager_does():
    """Inductor's average-pool backward divides an overhanging ``ceil_mode`` window by the whole
    kernel (pytorch/pytorch#198119): torch.compile's gradients there are 144 times too small
    (24² against the 4 values inside). remat's code runs eager's kernel there
    (``inductor_fixes.exact_pool_backward``), walked as a kernel of its own: gradients as eager's,
    the predicted peak the measured one (without the fix: 99% off, 2.2% over the prediction)."""
    grads: list = []
    predicted, measured = _inductor_peaks(_CeilPooled, "60%", (8, 3, 2, 2), grads)
    assert heldout.grad_difference(*grads) < 1e-5
    assert predicted == pytest.approx(measured, rel=0.002)


class _SplitHeads(nn.Module):
    """Gated heads: one projection split per head into a value and a gate, each gate reshaped to
    rows of a head and normalized (Qwen3-Next's gated norm): the gate's gradient reaches the
    split's concatenation through views."""

    def __init__(self, width: int = 64, heads: int = 4, layers: int = 3) -> None:
        super().__init__()
        self.heads = heads
        self.proj = nn.ModuleList(nn.Linear(width, 2 * width) for _ in range(layers))
        self.out = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, w = x.shape
        for proj, out in zip(self.proj, self.out):
            a, z = proj(x).view(n, self.heads, -1).split(w // self.heads, dim=-1)
            z = z.reshape(-1, w // self.heads)
            g = z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + 1e-6) * nn.functional.silu(z)
            x = x + out((a * g.view(n, self.heads, -1)).reshape(n, w))
        return x


def test_backend_inductor_step_peak_is_measured_where_a_concatenation_computes_a_view_of_its_part():
    """A part that reaches its concatenation only through views is computed inline into the
    concatenation's slice where it runs, taking no buffer, so what it reads lives until then
    (``codepeak._concatenated_through_views``; the fused walk had it a buffer made early, 7% under
    the measured peak at 60%): the step's predicted peak is the measured one."""
    predicted, measured = _inductor_peaks(_SplitHeads, "60%")
    assert predicted == pytest.approx(measured, rel=0.002)


def test_backend_byte_budget_after_a_graph_break_says_why_it_cannot_fit():
    """A byte budget below what the graph after a break needs on top of what the graph before it
    holds at its floor: the error names the graph break, the bytes held, and budgets that work."""
    from remat.compiled.partitioner import BudgetSplitError

    torch.manual_seed(0)
    model, x = _Broken(), torch.randn(64, 16)
    first, _ = _broken_probe(model, x)
    tight = remat.backend(budget=int(first["vanilla_predicted_peak"]), solver="auto", compiler="eager")
    with pytest.raises(Exception) as info:
        torch.compile(model, backend=tight)(x).sum().backward()
    err = info.value  # torch.compile wraps it: BackendCompilerFailed.inner_exception
    while not isinstance(err, BudgetSplitError) and (getattr(err, "inner_exception", None) or err.__cause__):
        err = getattr(err, "inner_exception", None) or err.__cause__
    assert isinstance(err, BudgetSplitError), repr(info.value)
    msg = str(err)
    assert "graph break" in msg and "percentage budget" in msg
    held = tight.report[0]["after_forward"]
    assert f"{held / 1024:.2f} KiB" in msg or f"{held / 1024 ** 2:.2f} MiB" in msg
    torch._dynamo.reset()


def _per_block(budget: Any, compiler: str = "eager", inners: tuple[int, ...] = (256, 256, 256)
               ) -> tuple[nn.Module, Any]:
    """``MLPBlocks`` with each block compiled with one backend: dynamo compiles the block's forward
    once, and the one graph runs three times a step (as under FSDP2's per-block hooks); blocks of
    different widths make a graph each, each compiled as a step of its own."""
    from models import MLPBlocks

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = MLPBlocks(inners)
    be = remat.backend(budget=budget, solver="auto", compiler=compiler)
    for block in model.blocks:
        block.compile(backend=be)
    return model, be


def _block_step(model: nn.Module, x: torch.Tensor) -> None:
    model(x).square().mean().backward()


def test_backend_byte_budget_holds_for_a_graph_run_per_layer():
    """A block compiled once and run per layer holds its forward's leftovers once per call: the
    first step records the calls, and a byte budget the step then exceeds has the block planned
    again so that all three calls fit; gradients stay eager's at every step."""
    from models import MLPBlocks

    x = torch.randn(256, 16)
    torch.manual_seed(0)
    ref = MLPBlocks()
    vanilla = measure(lambda: _block_step(ref, x), method="profiler").peak
    budget = int(0.75 * vanilla)
    plain, probe = _per_block("100%")
    _block_step(plain, x)
    (alone,) = probe.report
    assert alone["calls_per_step"] == 3
    # planned per call, the plain plan's three calls would not fit
    assert 2 * alone["after_forward"] + alone["predicted_peak"] > budget
    model, be = _per_block(budget)
    for step in range(3):
        model.zero_grad(), ref.zero_grad()
        _block_step(model, x)
        _block_step(ref, x)
        assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters()))
    (g,) = be.report
    assert g["calls_per_step"] == 3 and g["recomputed_ops"] > 0
    assert "planned again so that the step's calls fit" in g["replans"][-1]
    assert be.step_peak <= budget
    # the input projection runs eagerly: its output, block 0's input, is held outside the graphs
    outside = x.shape[0] * model.inp.out_features * 4
    assert measure(lambda: _block_step(model, x), method="profiler").peak <= budget + outside
    torch._dynamo.reset()


def test_backend_byte_budget_below_a_repeated_graphs_floor_warns():
    """Below what the repeated block's floor plan needs over its three calls: that plan runs, and the
    warning names the repetition, the bytes needed, and what to do."""
    x = torch.randn(256, 16)
    plain, probe = _per_block("100%")
    _block_step(plain, x)
    model, be = _per_block(int(probe.report[0]["vanilla_predicted_peak"]))  # one call fits, three do not
    _block_step(model, x)
    with pytest.warns(UserWarning, match=r"runs 3 times a step .* even at its floor .* raise the budget"):
        _block_step(model, x)
    (g,) = be.report
    assert "at its floor" in g["replans"][-1]
    torch._dynamo.reset()


def test_backend_byte_budget_holds_for_graphs_compiled_as_steps_of_their_own():
    """Blocks of three widths compiled one by one: three graphs, none ending at a graph break, so each
    is first planned within the whole budget. The first step shows they need more together; the
    second runs them at their floors; the third has each planned again, in call order, within what
    the ones before it hold and leaving what the ones after need. Gradients stay eager's."""
    from models import MLPBlocks

    inners = (192, 256, 320)
    x = torch.randn(256, 16)
    torch.manual_seed(0)
    ref = MLPBlocks(inners)
    budget = int(0.75 * measure(lambda: _block_step(ref, x), method="profiler").peak)
    model, be = _per_block(budget, inners=inners)
    for step in range(4):
        model.zero_grad(), ref.zero_grad()
        _block_step(model, x)
        _block_step(ref, x)
        assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters()))
        if step == 0:
            assert sum(g["after_forward"] for g in be.report[:2]) + be.report[2]["predicted_peak"] > budget
    assert len(be.report) == 3 and all(g["calls_per_step"] == 1 for g in be.report)
    for i, g in enumerate(be.report):
        assert g["replans"][-1].startswith(f"planned again as call {i} of the step's 3")
        assert not g["provisional"]
    assert be.step_peak <= budget
    # the input projection runs eagerly: its output, block 0's input, is held outside the graphs
    outside = x.shape[0] * model.inp.out_features * 4
    assert measure(lambda: _block_step(model, x), method="profiler").peak <= budget + outside
    torch._dynamo.reset()


class _BrokenHead(nn.Module):
    """An output head with a graph break inside: a chain of two graphs after the blocks."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(64, 256), nn.Linear(256, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.gelu(self.a(x))
        torch._dynamo.graph_break()
        return self.b(h)


def test_backend_byte_budget_holds_for_blocks_and_a_graph_break_chain():
    """Blocks compiled one by one, then a head whose graph break makes a chain of two graphs: the step
    is judged once the chain's first graph is planned for good, and all five calls are then planned
    again together (floors, then in call order). Gradients stay eager's at every step."""
    from models import MLPBlocks

    inners = (192, 256, 320)
    x = torch.randn(256, 16)
    torch.manual_seed(0)
    ref = MLPBlocks(inners)
    ref.out = _BrokenHead()
    budget = int(0.7 * measure(lambda: _block_step(ref, x), method="profiler").peak)
    model, be = _per_block(budget, inners=inners)
    model.out = copy.deepcopy(ref.out)
    model.out.compile(backend=be)
    for step in range(6):
        model.zero_grad(), ref.zero_grad()
        _block_step(model, x)
        _block_step(ref, x)
        assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters()))
    assert [g["calls_per_step"] for g in be.report] == [1] * 5
    for i, g in enumerate(be.report):
        assert g["replans"][-1].startswith(f"planned again as call {i} of the step's 5"), g["replans"]
    assert be.step_peak <= budget
    outside = x.shape[0] * model.inp.out_features * 4  # block 0's input, made by the eager input projection
    assert measure(lambda: _block_step(model, x), method="profiler").peak <= budget + outside
    torch._dynamo.reset()


def test_backend_byte_budget_over_hf_gpt2_blocks_compiled_one_by_one():
    """HF GPT-2 from a tiny config, default arguments (dropout on), each transformer block compiled with
    one backend, the TorchTitan layout: one graph run per block. At 60% of what the plain plan's calls
    need, the block is planned again to fit, and gradients equal eager's at every step, dropout masks
    included, before and after the re-plan."""
    from remat.bench import heldout

    held = heldout.build("gpt2", "cpu", "quick")
    ref = copy.deepcopy(held.model)

    def step(model: nn.Module, seed: int) -> None:
        model.zero_grad(set_to_none=True)
        torch.manual_seed(seed)
        heldout.Task(model, held.kind, held.labels)(**held.inputs).backward()

    def per_block(budget: Any) -> tuple[nn.Module, Any]:
        torch._dynamo.reset()
        model, be = copy.deepcopy(held.model), remat.backend(budget=budget, compiler="eager")
        for block in model.transformer.h:
            block.compile(backend=be)
        return model, be

    plain, probe = per_block("100%")
    step(plain, 0)
    budget = int(0.6 * probe.step_peak)
    model, be = per_block(budget)
    for seed in range(3):
        step(model, seed), step(ref, seed)
        assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters())
                   if q.grad is not None)
    (g,) = be.report
    assert g["calls_per_step"] == len(held.model.transformer.h) == 2
    assert "planned again so that the step's calls fit" in g["replans"][-1] and be.step_peak <= budget
    torch._dynamo.reset()


def test_a_model_returning_a_loss_is_planned_for_the_loss_alone():
    """HF GPT-2 given labels: logits come back without a gradient path, so the backward takes no
    logits-sized zeros gradient (the measured peak is the code's own prediction, no higher than
    the plain step's); a gradient that reaches logits raises, naming the fix."""
    from remat.errors import StepError

    model, inputs = _hf("gpt2")
    module = remat.optimize(model, inputs, "100%", verify=False)
    out = module(**inputs)
    assert list(module.step.flat.loss_only) == ["logits"]
    assert out.loss.requires_grad and out.logits.requires_grad
    out.loss.backward()
    peak = measure(module, inputs, method="tracker").peak
    assert abs(peak - module.step.planned.peak) <= 64  # the code walk is exact to a few bytes
    assert peak <= measure(model, inputs, method="tracker").peak
    with pytest.raises(StepError, match="`logits` output"):
        module(**inputs).logits.float().sum().backward()


def test_backend_inductor_takes_inductors_own_partition_when_it_holds_less_than_saving_everything():
    """Under inductor with a budget that needs no recomputation, torch.compile's own partition
    (layer norm and GELU recomputed from the matmuls' outputs) is used when it peaks no higher
    than saving every value: it saves less; gradients as torch.compile's."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), *[nn.Sequential(nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 64))
                                               for _ in range(4)], nn.Linear(64, 4))
    x = torch.randn(32, 16)
    ref = copy.deepcopy(model)
    be = remat.backend(budget="100%", solver="auto", compiler="inductor")
    torch.compile(model, backend=be)(x).sum().backward()
    ref(x).sum().backward()
    (rep,) = be.report
    assert rep["chosen"] == "inductor-min-cut" and rep["recomputed_ops"] > 0
    everything = be.planner.planned[-1].plan.stats["saving_everything"]
    assert rep["predicted_peak"] <= everything["peak"]
    assert rep["after_forward"] < everything["after_forward"]
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    torch._dynamo.reset()


def test_backend_inductor_at_100_percent_takes_the_lower_of_two_plans_over_it():
    """"100%" recomputes nothing; with ``.grad`` allocated, a tiny HF ResNet's inductor code saving every
    value peaks over it (its channels-last copies), and so does inductor's own partition, lower: the
    partition is taken (it had been dropped for not fitting, and the higher one run), and its
    measured peak is the predicted one."""
    model = _hf_vision("resnet")
    inputs = {"pixel_values": torch.randn(8, 3, 32, 32), "labels": torch.randint(0, 10, (8,))}
    torch._dynamo.reset()
    be = remat.backend(budget="100%", compiler="inductor", gradients="allocated")
    peak = measure(LossStep(torch.compile(model, backend=be)), inputs, method="profiler", gradients="allocated").peak
    (rep,) = be.report
    assert rep["chosen"] == "inductor-min-cut"
    everything = be.planner.planned[-1].plan.stats["saving_everything"]["peak"]
    assert rep["budget"] < rep["predicted_peak"] < everything
    assert abs(peak - rep["predicted_peak"]) <= 0.01 * peak
    torch._dynamo.reset()


def test_backend_inductor_plans_for_the_fused_code_below_the_unfused_floor():
    """Under bf16 autocast, recomputing a log-softmax from the bf16 logits costs three fp32
    buffers in the planning graph's terms and none in inductor's fused code: below every
    solver's unfused floor, the plan is made and judged for the fused code, and its measured
    peak stays within the byte budget. (An HF Llama, vocabulary large enough that the loss's
    buffers dominate, as in real language models.)"""
    transformers = pytest.importorskip("transformers")
    from remat.optimize import smallest_budget

    torch._dynamo.reset()
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(num_hidden_layers=1, hidden_size=64, intermediate_size=256,
                                   num_attention_heads=4, vocab_size=2048)
    model = transformers.LlamaForCausalLM(cfg).train()
    ids = torch.randint(0, 2048, (2, 64))
    inputs = {"input_ids": ids, "labels": ids}

    class Step(nn.Module):
        def __init__(self, net: nn.Module) -> None:
            super().__init__()
            self.net = net

        def forward(self, **kw):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return self.net(**kw).loss

    ref = copy.deepcopy(model)
    budget = 0.4 * measure(Step(ref), inputs, method="profiler").peak
    be = remat.backend(budget=budget, solver="auto", compiler="inductor")
    compiled = Step(torch.compile(model, backend=be))
    peak = measure(compiled, inputs, method="profiler").peak
    compiled(**inputs).backward()  # (measure gives the gradients back as it found them: None)
    Step(ref)(**inputs).backward()
    (rep,) = be.report
    assert "selective-fused" in rep["chosen"]
    assert 0 < rep["recompute_time"] < rep["recompute_cost"]  # fused kernels recompute for less (``fusedcost``)
    assert budget < smallest_budget(be.planner.planned[-1].joint.graph, "auto")  # no unfused plan fits
    assert peak <= budget * 1.01
    for p, q in zip(model.parameters(), ref.parameters()):  # as close as torch.compile's bf16 kernels
        torch.testing.assert_close(p.grad, q.grad, rtol=0.05, atol=0.05 * q.grad.abs().max().item())
    torch._dynamo.reset()


def test_backend_inductor_searches_the_vanilla_step_with_and_without_a_chain_limit(monkeypatch):
    """The fused search runs from the vanilla step twice, as its moves come and with chains of at most
    ``Searching.fused_chain_limit`` recomputed values (``selective.drop_order``), and the plan it keeps meets the budget."""
    from remat.solvers import selective

    calls: list[tuple[bool, Any]] = []
    solve = selective.solve

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append((kwargs.get("start") is None, kwargs.get("chain_limit")))
        return solve(*args, **kwargs)

    monkeypatch.setattr(selective, "solve", spy)
    torch._dynamo.reset()
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32)) for _ in range(6)]

    class Stream(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(blocks)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for b in self.blocks:
                x = x + b(x)
            return x.square().mean()

    model, x = Stream(), torch.randn(64, 32)
    budget = 0.5 * measure(copy.deepcopy(model), x, method="profiler").peak
    be = remat.backend(budget=budget, solver="auto", compiler="inductor")
    peak = measure(torch.compile(model, backend=be), x, method="profiler").peak
    assert (True, None) in calls and (True, Searching().fused_chain_limit) in calls
    assert Searching().fused_chain_limit is not None
    assert peak <= budget * 1.01
    torch._dynamo.reset()


class _Traced:
    """The references for the backend's fx code: eager, and ``aot_eager`` (torch.compile's own
    partition, run op by op) on copies of ``model``. The fx code runs the program dynamo traced,
    so it equals ``aot_eager`` bit for bit; it equals eager wherever that program is eager's. Not
    everywhere: transformers 5.17 builds under dynamo the causal mask its eager path skips, so
    HF Llama's gradients under torch.compile differ from eager's in the last bits (5.24 skips it
    in both)."""

    def __init__(self, model: nn.Module) -> None:
        self.eager = copy.deepcopy(model)
        self.aot = copy.deepcopy(model)
        self.compiled = torch.compile(self.aot, backend="aot_eager")

    def assert_same(self, model: nn.Module, step, step_of) -> None:
        for m in (model, self.eager, self.aot):
            m.zero_grad(set_to_none=True)
        loss, eager, aot = step(), step_of(self.eager), step_of(self.compiled)
        assert torch.equal(loss, aot)
        assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), self.aot.parameters()))
        if torch.equal(aot, eager) and all(torch.equal(p.grad, q.grad)
                                           for p, q in zip(self.aot.parameters(), self.eager.parameters())):
            assert torch.equal(loss, eager)
            assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), self.eager.parameters()))


def _lengths(vocab: int, lengths: tuple[int, ...]) -> list[dict]:
    torch.manual_seed(1)
    return [{"input_ids": (ids := torch.randint(0, vocab, (2, n))), "labels": ids} for n in lengths]


# exact at every length in the suite: test_backend_holds_a_byte_budget_at_every_length_of_a_dynamic_shape_graph
@pytest.mark.parametrize("name, autocast", [pytest.param("gpt2", False, marks=EXTENDED),
                                            pytest.param("llama", True, marks=EXTENDED)],
                         ids=["gpt2", "llama-bf16-autocast"])
def test_backend_eager_plans_a_dynamic_shape_graph_once_and_is_exact_at_every_length(name, autocast):
    """Batches of several sequence lengths (padding to each batch's longest): after the second
    length torch.compile traces with symbolic sizes. The graph is planned once, at the sizes of
    the call that compiled it; it runs at every length with no recompile (turning a size into
    an int would specialize it: a recompile and a new plan per length), and gradients equal
    eager's at each. (GPT-2: a graph break at the loss, so two graphs a step.)"""
    torch._dynamo.reset()
    model, _ = _hf(name)
    model.eval()  # no dropout: torch.equal against eager
    ref = _Traced(model)
    be = remat.backend(budget="50%", solver="auto", compiler="eager")
    compiled = torch.compile(model, backend=be)
    per_step = None
    for i, inputs in enumerate(_lengths(64, (16, 12, 9, 14, 5))):
        ref.assert_same(model, lambda: _step(compiled, inputs, autocast), lambda m: _step(m, inputs, autocast))
        per_step = len(be.report) if i == 0 else per_step
    assert len(be.report) == 2 * per_step  # the static graph(s) of the first length, the dynamic one(s)
    for dynamic in be.report[per_step:]:
        assert any("dynamic shapes: planned at the sizes of the call that compiled it (" in n and "=12)" in n
                   for n in dynamic["notes"])
    assert sum(r["recomputed_ops"] for r in be.report[per_step:]) > 0
    torch._dynamo.reset()


# a byte budget held at every length, exact, a longer batch planned in a bucket of its own, in the suite:
# test_bench.py's test_bench_dynamic_smoke (the same Llama's graphs, fx codegen)
@pytest.mark.parametrize("name, compiler", [pytest.param("llama", "eager", marks=EXTENDED),
                                            pytest.param("gpt2", "inductor", marks=EXTENDED)])
def test_backend_holds_a_byte_budget_at_every_length_of_a_dynamic_shape_graph(name, compiler, tmp_path,
                                                                              monkeypatch):
    """A byte budget is a promise about every step. A dynamic-shape graph compiled at length 24 is
    planned at 32, the top of its power-of-two bucket, and guarded to lengths up to 32: each
    shorter length runs the same schedule on smaller values (a peak no higher); a longer one
    compiles a plan of its own. Planned at 24 alone, the step at 32 would hold what the plan at 24
    left unrecomputed, over the budget. (GPT-2: a graph break at the loss, so its graphs share the
    budget and the first is planned again once the loss graph is known, from dynamo's symbolic
    inputs: compiled from the call's tensors, it ran code for length 24 alone. Inductor: its own
    partition, a candidate at budgets that need no recomputation, runs on the symbolic graph; on
    the hinted copy it failed, writing min_cut_failed_graph.txt into the working directory.)"""
    monkeypatch.chdir(tmp_path)
    torch._dynamo.reset()
    model, _ = _hf(name)
    model.eval()  # no dropout: torch.equal against eager
    ref = copy.deepcopy(model)
    longest = _lengths(64, (32,))[0]
    budget = 0.5 * measure(LossStep(copy.deepcopy(ref)), longest, method="profiler").peak
    be = remat.backend(budget=budget, solver="auto", compiler=compiler)
    compiled = torch.compile(model, backend=be)
    graphs = []
    traced = _Traced(ref) if compiler == "eager" else None
    for inputs in _lengths(64, (16, 12, 24, 32, 9, 20)):
        if traced is not None:
            traced.assert_same(model, lambda: _step(compiled, inputs, False), lambda m: _step(m, inputs, False))
        else:
            model.zero_grad(set_to_none=True)
            ref.zero_grad(set_to_none=True)
            _step(compiled, inputs, False), _step(ref, inputs, False)
            for p, q in zip(model.parameters(), ref.parameters()):
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5 * q.grad.abs().max().item())
        assert measure(LossStep(compiled), inputs, method="profiler").peak <= budget * 1.01
        graphs.append(len(be.report))
    per_step = graphs[0]
    assert graphs == [per_step, 2 * per_step] + [3 * per_step] * 4  # a recompile at 24 only, none after
    notes = [" ".join(r["notes"]) for r in be.report]
    assert all("planned at s" in n and "=16, the top of the sizes' power-of-two bucket" in n and "=12)" in n
               for n in notes[per_step:2 * per_step])
    assert all("=32, the top of the sizes' power-of-two bucket" in n and "=24)" in n for n in notes[2 * per_step:])
    assert sum(r["recomputed_ops"] for r in be.report[2 * per_step:]) > 0  # the budget needs it at 32
    assert not list(tmp_path.iterdir())
    torch._dynamo.reset()


# inductor's compile of the dynamic graph is a minute and a half on a 2-core machine: both in make test-extended;
# a plan made at symbolic sizes runs exact at every length in the suite (fx codegen): test_bench_dynamic_smoke
@pytest.mark.parametrize("marked", [pytest.param(True, marks=EXTENDED), pytest.param(False, marks=EXTENDED)],
                         ids=["marked", "automatic"])
def test_backend_inductor_runs_a_dynamic_shape_plan_at_every_length_as_predicted(marked):
    """Inductor compiles the dynamic-shape graphs remat splits. At the length it was planned for,
    the measured peak is the predicted one (the walk pairs the backward's inputs with the saved
    values, sizes first, as AOTAutograd orders them); at every other length the peak is the same
    fraction of the eager step's; no length recompiles; gradients are as close to eager's as
    inductor's arithmetic. Lengths marked dynamic (``torch._dynamo.maybe_mark_dynamic``) compile one
    graph, planned at the first length; left to dynamo, the second length compiles the dynamic
    one."""
    torch._dynamo.reset()
    model, _ = _hf("llama")
    ref = copy.deepcopy(model)
    be = remat.backend(budget="50%", solver="auto", compiler="inductor")
    compiled = LossStep(torch.compile(model, backend=be))
    fractions = []
    lengths = (24, 24, 32, 16, 28) if marked else (32, 24, 24, 16, 28)
    for inputs in _lengths(64, lengths):
        if marked:
            for t in inputs.values():
                torch._dynamo.maybe_mark_dynamic(t, 1)
        peak = measure(compiled, inputs, method="profiler").peak
        fractions.append(peak / measure(LossStep(copy.deepcopy(ref)), inputs, method="profiler").peak)
        if len(fractions) == (2 if marked else 3):  # the planned length, run again
            assert be.report[-1]["predicted_peak"] == pytest.approx(peak, rel=0.02)
    assert len(be.report) == (1 if marked else 2)
    assert max(fractions[1:]) - min(fractions[1:]) < 0.05, fractions
    for inputs in _lengths(64, (20,)):
        model.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
        _step(compiled.net, inputs, False)
        _step(ref, inputs, False)
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5 * q.grad.abs().max().item())
    torch._dynamo.reset()


class LossStep(nn.Module):
    """An HF model's training step as a module: its ``.loss``."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, **kw):
        return self.net(**kw).loss


def _hf_classifier(name: str) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if name == "vit":
        cfg = transformers.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=64,
                                     num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, num_labels=10)
        return transformers.ViTForImageClassification(cfg).train()
    cfg = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                                    layer_type="bottleneck", num_labels=10)
    return transformers.ResNetForImageClassification(cfg).train()


def _hf_vision(name: str) -> nn.Module:
    """The classifier with ``config.problem_type`` set, as its first call sets it: one compile, not
    two (the second, of the same graph, takes the first one's plan: tested on its own)."""
    model = _hf_classifier(name)
    model.config.problem_type = "single_label_classification"
    return model


# the refusal's path under inductor: test_a_graph_compiled_again_unchanged_takes_its_plan_and_its_refusal_again
@EXTENDED
def test_backend_byte_budget_below_the_fused_floor_names_one_that_is_met():
    """A byte budget inductor's code cannot meet is refused (not compiled over it), and the least
    budget the error names is met (45%: a plan made for 50% fits, so the one named is not yet
    the least there is. 30% is refused and met the same way: left out for its two minutes).
    Inductor runs a CNN's convolutions channels-last, copying their inputs: the budget named is
    below what that code can meet, so it is compiled without the layout optimization instead of
    refused, says so, and its measured peak is the predicted one."""
    fraction = 0.45
    import re

    from torch._dynamo.exc import BackendCompilerFailed

    model = _hf_vision("resnet")
    inputs = {"pixel_values": torch.randn(8, 3, 32, 32), "labels": torch.randint(0, 10, (8,))}

    vanilla = measure(LossStep(copy.deepcopy(model)), inputs, method="profiler").peak
    budget = fraction * vanilla
    torch._dynamo.reset()
    with pytest.raises(BackendCompilerFailed, match="(?i)raise the budget to at least") as err:
        net = torch.compile(copy.deepcopy(model), backend=remat.backend(budget=budget, compiler="inductor"))
        LossStep(net)(**inputs)
    named = int(re.search(r"(\d+) bytes\)", str(err.value)).group(1))
    assert named > budget
    torch._dynamo.reset()
    be = remat.backend(budget=named, solver="auto", compiler="inductor")
    peak = measure(LossStep(torch.compile(model, backend=be)), inputs, method="profiler").peak
    assert peak <= named * 1.01
    (rep,) = be.report
    assert any("without inductor's channels-last layout optimization" in n for n in rep["notes"]), rep["notes"]
    assert abs(peak - rep["predicted_peak"]) <= 0.01 * peak
    torch._dynamo.reset()


class _SetsOnFirstCall(nn.Module):
    """An MLP that sets an attribute in its first call, as an HF classifier sets
    ``config.problem_type``: dynamo compiles the same graph again on the next call."""

    def __init__(self) -> None:
        super().__init__()
        from models import DeepMLP

        self.net, self.kind = DeepMLP(depth=6), None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind is None:
            self.kind = "set"
        return self.net(x)


@pytest.mark.parametrize("compiler", ["eager", "inductor"])
def test_a_graph_compiled_again_unchanged_takes_its_plan_and_its_refusal_again(compiler, monkeypatch):
    """The second compile of an unchanged graph under the same budget takes the first one's plan
    (the search is not run again: it would find the same plan) and runs with eager's gradients;
    a budget refused for the graph is refused again the same way, without a search."""
    from remat.compiled import partitioner

    searched = []
    fit = partitioner.Planner._fit
    monkeypatch.setattr(partitioner.Planner, "_fit", lambda self, *a, **k: searched.append(1) or fit(self, *a, **k))
    torch.manual_seed(0)
    model, x = _SetsOnFirstCall(), torch.randn(32, 64)
    ref = copy.deepcopy(model)
    torch._dynamo.reset()
    be = remat.backend(budget="50%", compiler=compiler)
    net = torch.compile(model, backend=be)
    for _ in range(2):
        model.zero_grad(set_to_none=True)
        net(x).square().mean().backward()
    ref(x).square().mean().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    first, again = be.report
    assert searched == [1] and again["predicted_peak"] == first["predicted_peak"]
    assert any("its plan is used again" in n for n in again["notes"]) and again["recomputed_ops"] > 0

    torch._dynamo.reset()
    from torch._dynamo.exc import BackendCompilerFailed

    model.kind, searched[:] = None, []
    net = torch.compile(model, backend=remat.backend(budget=1000, compiler=compiler))
    messages = []
    for _ in range(2):
        with pytest.raises(BackendCompilerFailed, match="raise the budget to at least") as err:
            net(x).square().mean().backward()
        messages.append(str(err.value).split("\n")[0])
        model.kind = None  # (the refused call set it: unset, the next call compiles the same graph again)
    assert messages[0] == messages[1] and len(searched) <= 1
    torch._dynamo.reset()


def test_backend_refusal_names_the_gradients_torch_compile_hands_its_outputs():
    """An HF causal LM called without labels (its loss computed outside the graph) returns its
    logits and (use_cache left at the config's True) every layer's key and value cache;
    torch.compile's autograd function hands the backward a gradient for each, zeros for the
    caches, which eager autograd never allocates. A refusal says how much of its least budget
    they are, and how to drop the caches': 2 layers x (key, value) + logits, 16 KiB here."""
    from torch._dynamo.exc import BackendCompilerFailed

    torch._dynamo.reset()
    model, inputs = _hf("llama")
    be = remat.backend(budget=1000, compiler="eager")
    net = torch.compile(model, backend=be)
    with pytest.raises(BackendCompilerFailed, match="raise the budget to at least") as err:
        net(input_ids=inputs["input_ids"]).logits.float().logsumexp(-1).mean().backward()
    assert "receives 16.00 KiB of gradients for 5 of the graph's outputs" in str(err.value)
    assert "use_cache=False drops them" in str(err.value)
    torch._dynamo.reset()


def _mlp_of_norm_layers() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), *[nn.Sequential(nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 64))
                                              for _ in range(4)], nn.Linear(64, 4))


def _inductors_own_partition(x: torch.Tensor) -> tuple[dict, float]:
    """remat.backend at "100%" on ``_mlp_of_norm_layers``: inductor's own partition, its report
    and the bytes it saves."""
    torch._dynamo.reset()
    be = remat.backend(budget="100%", solver="auto", compiler="inductor")
    torch.compile(_mlp_of_norm_layers(), backend=be)(x).sum().backward()
    theirs = be.report[-1]
    assert theirs["chosen"] == "inductor-min-cut" and theirs["recompute_time"] is not None
    stats = be.planner.planned[-1].plan.stats
    assert theirs["predicted_peak"] < stats["saving_everything"]["peak"]  # so that a plan within it must recompute
    return theirs, stats["saved"]


def _within_inductors_peak(x: torch.Tensor, theirs: dict) -> dict:
    """remat.backend within the peak of inductor's own partition: its report, gradients checked against eager's."""
    torch._dynamo.reset()
    model, ref = _mlp_of_norm_layers(), _mlp_of_norm_layers()
    be = remat.backend(budget=int(theirs["predicted_peak"]), solver="auto", compiler="inductor")
    torch.compile(model, backend=be)(x).sum().backward()
    rep = be.report[-1]
    assert rep["predicted_peak"] <= theirs["predicted_peak"]
    ref(x).sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    return rep


@pytest.mark.parametrize("mine", [0.0, 1.0])
def test_backend_inductor_weighs_its_plan_against_inductors_partition_in_fused_seconds(monkeypatch, mine):
    """Below "100%", inductor's own partition replaces remat's plan when it fits and its
    recomputation costs less as inductor's fused code runs it (``fusedcost``), whatever the
    planning graph's unfused costs say: remat's plan predicted at ``mine`` seconds, 0 (nothing
    recomputes for less) or 1 (anything does); what each saves is priced at nothing here."""
    from remat.compiled import fusedcost, partitioner

    x = torch.randn(32, 16)
    theirs, _ = _inductors_own_partition(x)
    real = partitioner.Planner._recompute_time
    monkeypatch.setattr(partitioner.Planner, "_recompute_time",
                        lambda self, jg, steps, *a: mine if steps else real(self, jg, steps, *a))
    monkeypatch.setattr(fusedcost, "saved_seconds", lambda *a, **k: 0.0)
    rep = _within_inductors_peak(x, theirs)
    if mine == 0.0:
        assert rep["chosen"] != "inductor-min-cut"
    else:
        assert rep["chosen"] == "inductor-min-cut" and rep["recompute_time"] == pytest.approx(theirs["recompute_time"])
        assert any("as inductor's fused code runs each" in n for n in rep["notes"])


@pytest.mark.parametrize("theirs_cost", [0.0, 2.0])
def test_backend_inductor_weighs_what_each_partition_saves(monkeypatch, theirs_cost):
    """Where remat's plan and inductor's partition recompute for the same seconds, what each
    saves decides: the forward writes it and the backward reads it back (``saved_seconds``).
    Inductor's saved bytes priced at ``theirs_cost`` seconds, remat's plan's at 1: the partition is
    taken when its saved values cost less to move, and only then."""
    from remat.compiled import fusedcost, partitioner

    x = torch.randn(32, 16)
    theirs, saved = _inductors_own_partition(x)
    real = partitioner.Planner._recompute_time
    monkeypatch.setattr(partitioner.Planner, "_recompute_time",
                        lambda self, jg, steps, *a: theirs["recompute_time"] if steps else real(self, jg, steps, *a))
    monkeypatch.setattr(fusedcost, "saved_seconds", lambda jg, b, *a, **k: theirs_cost if b == saved else 1.0)
    rep = _within_inductors_peak(x, theirs)
    if theirs_cost < 1.0:
        assert rep["chosen"] == "inductor-min-cut"
        assert any("with what each saves written and read back" in n for n in rep["notes"])
    else:
        assert rep["chosen"] != "inductor-min-cut"


def test_backend_inductor_weighs_inductors_partition_against_a_plan_recomputing_nothing(monkeypatch):
    """A budget the fused code of saving everything fits, below the planning graph's vanilla peak:
    remat's plan recomputes nothing, and inductor's partition, which recomputes a little and saves
    less, is still weighed against it (its saved bytes priced at nothing, the plan's at 1 s here)."""
    from remat.compiled import fusedcost

    x = torch.randn(32, 16)
    theirs, saved = _inductors_own_partition(x)
    monkeypatch.setattr(fusedcost, "saved_seconds", lambda jg, b, *a, **k: 0.0 if b == saved else 1.0)
    torch._dynamo.reset()
    be = remat.backend(budget="100%", solver="auto", compiler="inductor")
    torch.compile(_mlp_of_norm_layers(), backend=be)(x).sum().backward()
    planned = be.planner.planned[-1]
    everything = planned.plan.stats["saving_everything"]["peak"]
    budget = int(everything * 1.02)
    assert budget < planned.vanilla  # (the planning graph: every value a buffer)
    torch._dynamo.reset()
    be = remat.backend(budget=budget, solver="auto", compiler="inductor")
    torch.compile(_mlp_of_norm_layers(), backend=be)(x).sum().backward()
    rep = be.report[-1]
    assert rep["chosen"] == "inductor-min-cut"
    monkeypatch.setattr(fusedcost, "saved_seconds", lambda *a, **k: 0.0)
    torch._dynamo.reset()
    be = remat.backend(budget=budget, solver="auto", compiler="inductor")
    torch.compile(_mlp_of_norm_layers(), backend=be)(x).sum().backward()
    assert be.report[-1]["chosen"] != "inductor-min-cut" and be.report[-1]["recompute_fraction"] == 0


def test_saved_seconds_write_each_saved_byte_once_and_read_it_once():
    """A saved value costs its bytes twice over the device's bandwidth (forward write, backward read)."""
    from remat.compiled import fusedcost

    assert fusedcost.saved_seconds(None, 3e6, figures={"bandwidth": 2e9, "flops": 1e12}) == pytest.approx(3e-3)
    torch._dynamo.reset()


@pytest.mark.parametrize("compiler", ["eager", pytest.param("inductor", marks=EXTENDED)])
def test_backend_allocates_no_gradient_for_outputs_the_loss_does_not_use(compiler):
    """An HF causal LM given labels returns its loss, its logits and (use_cache left at the config's
    True) every layer's key and value. Under plain torch.compile autograd hands the backward zeros
    for each output the loss does not use (16 KiB here), which eager never allocates; under
    remat.backend they are not allocated, and the predicted peak, which counts none, is the
    measured one."""
    torch._dynamo.reset()
    model, inputs = _hf("llama")
    model.eval()
    ref = copy.deepcopy(model)
    be = remat.backend(budget="100%", compiler=compiler)
    compiled = torch.compile(model, backend=be)
    peak = measure(LossStep(compiled), inputs, method="profiler").peak
    assert be.report[-1]["predicted_peak"] == pytest.approx(peak, rel=0.02)
    assert any("outputs besides the loss are assumed never to come" in n for n in be.report[-1]["notes"])
    if compiler == "eager":  # saving everything, as eager does, without the zeros
        assert peak <= measure(LossStep(copy.deepcopy(ref)), inputs, method="profiler").peak
    else:  # torch.compile's own partition (budget 1.0), without the zeros
        assert "inductor-min-cut" in be.report[-1]["chosen"]
        torch._dynamo.reset()
        plain = measure(LossStep(torch.compile(copy.deepcopy(ref))), inputs, method="profiler").peak
        assert peak <= plain - 4096  # (the zeros of the key/value caches outlive the peak there)
    model.zero_grad(set_to_none=True)
    _step(compiled, inputs, False)
    _step(ref, inputs, False)
    for p, q in zip(model.parameters(), ref.parameters()):
        if compiler == "eager":
            assert torch.equal(p.grad, q.grad)
        else:
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5 * q.grad.abs().max().item())
    torch._dynamo.reset()


def test_backend_runs_the_backward_as_traced_when_a_gradient_reaches_another_output():
    """A step that also backpropagates from an output other than the loss gets eager's gradients
    (the backward as traced), with a warning that its plan counted that gradient as never coming;
    an unused second scalar output (an auxiliary loss) gets zeros, as autograd would make."""

    class WithAux(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(8, 32), nn.Linear(32, 8)

        def forward(self, x):
            y = self.b(torch.tanh(self.a(x)))
            return y.pow(2).mean(), 0.1 * y.abs().mean(), y

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = WithAux()
    ref = copy.deepcopy(model)
    compiled = torch.compile(model, backend=remat.backend(budget="100%", compiler="eager"))
    x = torch.randn(4, 8)

    def grads(net, losses):
        net.zero_grad(set_to_none=True)
        loss, aux, y = net(x)
        sum(t for name, t in (("loss", loss), ("aux", aux), ("y", y.sum())) if name in losses).backward()
        return [p.grad for p in net.parameters()]

    assert all(torch.equal(g, h) for g, h in zip(grads(compiled, "loss"), grads(ref, "loss")))
    with pytest.warns(UserWarning, match="a gradient reached an output of graph .* other than its loss"):
        got = grads(compiled, ("loss", "y"))
    assert all(torch.equal(g, h) for g, h in zip(got, grads(ref, ("loss", "y"))))
    assert all(torch.equal(g, h) for g, h in zip(grads(compiled, ("loss", "aux")), grads(ref, ("loss", "aux"))))
    assert all(torch.equal(g, h) for g, h in zip(grads(compiled, "loss"), grads(ref, "loss")))
    torch._dynamo.reset()


def test_inductor_fuses_far_kernels_horizontally_only_where_a_guard_holds_the_walks_peak(monkeypatch):
    """A graph remat walked has a fusion guard, which vetoes any fusion that would raise the
    peak: its kernels fuse horizontally as inductor decides. A graph with none (a dynamic-shape
    graph's code) fuses only adjacent kernels: inductor's own put tiny Llama 24% over its walk."""
    from types import SimpleNamespace

    from torch._inductor.choices import InductorChoices

    from remat.compiled.fusion import UNGUARDED_DISTANCE, _choices

    asked = []
    monkeypatch.setattr(InductorChoices, "can_fuse_horizontal", staticmethod(lambda *a: asked.append(a) or True))
    a = SimpleNamespace(min_order=0, max_order=0)
    far = SimpleNamespace(min_order=UNGUARDED_DISTANCE + 1, max_order=UNGUARDED_DISTANCE + 1)
    near = SimpleNamespace(min_order=UNGUARDED_DISTANCE, max_order=UNGUARDED_DISTANCE)
    assert _choices().can_fuse_horizontal(None, a, far, 100) is False and not asked
    assert _choices().can_fuse_horizontal(None, a, near, 100) is True and len(asked) == 1
    assert _choices(guard=object()).can_fuse_horizontal(None, a, far, 100) is True and len(asked) == 2


@EXTENDED  # grouped-query attention under inductor: every inductor test of ``_hf("llama")``
def test_backend_inductor_holds_a_multi_query_attention_model_to_its_budget(request):
    """HF Falcon (one key-value head for four query heads), built as a user would from a small
    config, planned for inductor at half the eager step's peak: the measured peak is within the
    budget. Before, it was 14.8% over: inductor copies each saved key (scaled, transposed and
    expanded to every head: an output view of a permuted value) into a buffer four times the
    value's (``codepeak._output_copy``), and fused a GELU recomputation with the GELU gradient
    three kernels later, moving the weight gradient's matmul that reads it after both (vetoed
    by the fusion guard where it would raise the peak; ``fusion``). Two threads: inductor's
    parallel scatter-add in Falcon's backward wrote out of bounds (``inductor_fixes``)."""
    peak, budget, _ = _architecture_at(request, "falcon", threads=2)
    assert peak <= budget * 1.01


def _architecture_at(request: Any, name: str, threads: int, fraction: float = 0.5) -> tuple[float, int, dict]:
    """An architectures-benchmark model under ``remat.backend(compiler="inductor")`` at ``fraction``
    of the eager step's measured peak, with ``threads`` threads: its measured peak, the budget, and
    its one graph's report."""
    from remat.bench import architectures

    torch._dynamo.reset()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    request.addfinalizer(lambda: torch.set_num_threads(before))
    model, inputs, _ = architectures.build(name)
    loss = lambda out: out.loss  # noqa: E731
    budget = int(fraction * measure(copy.deepcopy(model), inputs, method="profiler", loss_fn=loss).peak)
    be = remat.backend(budget=budget, solver="auto", compiler="inductor")
    peak = measure(torch.compile(model, backend=be), inputs, method="profiler", loss_fn=loss).peak
    torch._dynamo.reset()
    rep = be.report[-1]  # (a classifier sets config.problem_type in its first call: compiled again, same plan)
    return peak, budget, rep


def test_backend_inductor_scatter_adds_within_the_buffer_with_several_threads():
    """The repro of pytorch/pytorch#191837 (a permute and reshape into ``F.fold``: a scatter-add
    in a 2-D tiled kernel) through ``remat.backend`` with two threads gives eager's values.
    Inductor in torch 2.13 offsets the scatter's index twice in its parallel path and writes
    past the buffer (``free(): invalid next size``; plain ``torch.compile`` does, 3 runs in 3);
    remat's compiles carry the upstream fix (``inductor_fixes``). HF Falcon's backward has such
    a kernel: remat's code for it corrupted the heap within 8 steps with two threads. In a
    subprocess: the failure is an abort."""
    code = textwrap.dedent("""
        import torch, torch.nn.functional as F, remat
        torch.set_num_threads(2)
        def fold(x):
            x = x.permute(0, 1, 4, 3, 2).reshape(1, 192 * 3 * 3, 2 * 2)
            return F.fold(x, output_size=(4, 4), kernel_size=3, padding=1, stride=2)
        x = torch.randn(1, 6, 4, 9, 32)
        got = torch.compile(fold, backend=remat.backend(budget="100%", compiler="inductor"))(x)
        torch.testing.assert_close(got, fold(x))
    """)
    env = {**os.environ, "TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


@EXTENDED  # the fused walk over convolutions: test_backend_inductor_plans_a_vision_model_with_the_fused_walk...
def test_backend_inductor_plans_depthwise_convolutions_as_inductor_lays_them_out(request):
    """HF ConvNeXt from a small config (depthwise 7x7 convolutions whose inputs are channels-last
    in fx, through the permutes around each layer norm) at 80% of the eager step's peak. Inductor
    decides the backward's layout itself: it lays each depthwise backward's input out in the
    order of its weight gradient's layout, not channels-last, and aten runs it contiguous, with
    0.1 MB of scratch where channels-last takes 6.4 MB (``codepeak.conv_backwards``). Before, the
    walk counted the channels-last scratch: it predicted 6.7x the measured peak, and the backend
    refused any budget under 90% of the eager peak. One thread, as the benchmark. At 80%: an AMD
    EPYC host's oneDNN takes 270 KB of scratch (measured, ``workspace``) for the last stage's
    forward 7x7 convolution, which puts the fused code's floor at 73.7% of the eager peak there;
    the Intel Xeon host this was first measured on met 50%."""
    peak, budget, rep = _architecture_at(request, "convnext", threads=1, fraction=0.8)
    assert peak <= budget * 1.01
    assert abs(peak - rep["predicted_peak"]) <= 0.05 * peak


def test_backend_inductor_gives_back_from_a_solvers_plan_whose_fused_code_fits(monkeypatch, nominal_cpu_costs):
    """An HF ResNet (tiny config, default arguments, without inductor's channels-last layouts): where
    the fused search from the vanilla step finds no plan (here made to find none, as on the CPU
    held-out ResNet fp32 at 50%), a solver's plan is used (here auto with chen-greedy alone). Its
    fused code fits with room (0.74 of the budget at 80%): the plan recomputes for bytes the fused
    code does not hold. The fused search, started from it, keeps again what fits: the plan used
    recomputes less (before: chen-greedy's, 0.61 of a forward; now 0.10), its code fits, and the
    measured peak is the predicted one. (The held-out ResNet's plan fitted only once made within less
    of the planning graph, ``_below``: the same search runs from it, measured in
    ``bench/results/fused_giveback_cpu``; at this size whether it gives back there varies by host.)"""
    import torch._inductor.config as inductor_config

    from remat.solvers import auto

    transformers = pytest.importorskip("transformers")
    monkeypatch.setattr(auto, "default_candidates", lambda: ("chen-greedy",))
    torch._dynamo.reset()
    torch.manual_seed(0)
    cfg = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                                    layer_type="bottleneck", num_labels=10)
    model = transformers.ResNetForImageClassification(cfg).train()
    model.config.problem_type = "single_label_classification"
    inputs = {"pixel_values": torch.randn(8, 3, 32, 32), "labels": torch.randint(0, 10, (8,))}
    ref = copy.deepcopy(model)
    seeded: list[tuple[Any, Any]] = []  # (the plan it starts from, its result)
    judged = Planner._judged_selective

    def from_plans_only(self, jg, pg, target, tail, seeds=None, *args, **kwargs):
        if seeds is None:
            return None  # the search from the vanilla step finds nothing
        got = judged(self, jg, pg, target, tail, seeds, *args, **kwargs)
        seeded.append((seeds[0], got))
        return got

    monkeypatch.setattr(Planner, "_judged_selective", from_plans_only)
    budget = 0.8 * measure(LossStep(copy.deepcopy(model)), inputs, method="profiler").peak
    be = remat.backend(budget=budget, solver="auto", compiler="inductor")
    with inductor_config.patch(layout_optimization=False):  # one compile (its fallback has a test of its own)
        compiled = LossStep(torch.compile(model, backend=be))
        peak = measure(compiled, inputs, method="profiler").peak
        compiled(**inputs).backward()  # (measure gives the gradients back as it found them: None)
    (rep,) = be.report
    ((start, got),) = seeded
    assert start.plan.stats["chosen"] == "chen-greedy" and start.recompute_cost > 0
    assert rep["chosen"].startswith("chen-greedy+selective-fused")  # in either move order ("(fused prices)")
    assert rep["recompute_cost"] < start.recompute_cost
    assert peak <= budget * 1.01
    assert abs(peak - rep["predicted_peak"]) <= 0.02 * peak
    LossStep(ref)(**inputs).backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-4 * q.grad.abs().max().item())
    torch._dynamo.reset()


@pytest.mark.parametrize("name, fraction", [("vit", 0.8), pytest.param("resnet", 0.9, marks=EXTENDED)])
def test_backend_inductor_plans_a_vision_model_with_the_fused_walk_within_its_budget(name, fraction,
                                                                                   nominal_cpu_costs):
    """HF ViT (its patch embedding a convolution that reads the images) and ResNet plan for
    inductor's fused code: the walk counts the channels-last copies of the convolutions' inputs,
    their workspaces, a max-pool gradient's zeros computed in its scatter's buffer, and the 3x3
    weight gradients autograd copies into ``.grad``; the measured peak is the predicted one,
    within the budget. (ViT with inductor's buffer pool on: a GELU gradient kept for the next
    layer's put it at 790 KB against 719 KB predicted, ``fusion``; ResNet on the op-by-op walk:
    21% over its prediction. At this size inductor's channels-last copies of the weights put
    saving everything at 1.22x the eager step's peak: the plan recomputes to fit. The op costs
    order the fused search's moves: with an AMD EPYC host's measured ones its floor for ResNet is
    above 0.9, so the nominal CPU figures are used.)"""
    torch._dynamo.reset()
    model = _hf_vision(name)
    inputs = {"pixel_values": torch.randn(8, 3, 32, 32), "labels": torch.randint(0, 10, (8,))}

    budget = fraction * measure(LossStep(copy.deepcopy(model)), inputs, method="profiler").peak
    be = remat.backend(budget=budget, solver="auto", compiler="inductor")
    peak = measure(LossStep(torch.compile(model, backend=be)), inputs, method="profiler").peak
    (rep,) = be.report
    assert "fused" in rep["chosen"]
    assert peak <= budget * 1.01
    assert abs(peak - rep["predicted_peak"]) <= 0.01 * peak
    torch._dynamo.reset()


def _tiny_bloom() -> tuple[torch.nn.Module, dict]:
    """An HF Bloom from a tiny config (default arguments), in training mode, and its LM inputs."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.BloomConfig(vocab_size=256, hidden_size=32, n_layer=2, n_head=4)
    model = transformers.BloomForCausalLM(cfg).train()
    ids = torch.randint(3, 256, (2, 16))
    return model, {"input_ids": ids, "labels": ids}


def test_code_over_the_budget_searches_the_planning_budgets_down_to_the_floor():
    """A tiny Bloom's generated code holds more than its planning graph does, by an amount that
    differs from plan to plan, so the code's peak is not monotone in the planning budget: planning
    again within the budget less the code's excess overshoots (below the planning graph's floor,
    or onto a plan whose code is over again). The planner searches the planning budgets between
    the floor and the budget: each of these budgets, which some plan's code meets, is met (before:
    the first plan over it was kept, 1.5% to 2.5% over); below them all it keeps the plan of least
    code peak (before: the first over, 193028 bytes against 186372), and its note says what was tried."""
    model, inputs = _tiny_bloom()

    module = remat.optimize(copy.deepcopy(model), inputs, 200_480)  # measured: within the budget
    assert module.report["measured_peak"] <= 200_480 * 1.01
    peaks = {}
    for budget in (194_570, 200_480, 206_390):
        rep = module.report if budget == 200_480 else remat.optimize(copy.deepcopy(model), inputs, budget,
                                                                     verify=False).report
        assert rep["predicted_peak"] <= budget, (budget, rep["notes"])
        peaks[budget] = rep["predicted_peak"]
    # below every plan's code (182,750 was, until the DP solvers' floors were sought above eq. (2)'s least
    # budget, ``judge.FLOOR_GRID``: a plan's code now meets 178,948 there)
    rep = remat.optimize(copy.deepcopy(model), inputs, 165_000, verify=False).report
    assert rep["predicted_peak"] > 165_000  # no plan's code meets it
    assert rep["predicted_peak"] <= min(peaks.values())         # the least found, not the first over
    assert any("none of the" in n and "floor" in n for n in rep["notes"]), rep["notes"]


def test_code_a_few_percent_over_is_planned_within_less_before_the_judged_search(monkeypatch):
    """A tiny Bloom (default arguments) at 196,000 bytes: auto's plan is made within the budget and
    its generated code peaks over it (the code's own temporaries: 8,804 bytes, 4.5%, on the host this
    was written on). Over by at most ``Searching.below_first`` (here set to take any excess, so that the test
    holds on hosts whose temporaries differ), the planner plans again within less of the planning
    graph first, and the code-judged search runs once, from the plan that fits. Before (as with
    ``below_first=0``), the judged search ran from the plan over the budget, and again after the
    re-plans: on HF ResNet-152 at "50%" that took planning from 13.7 to 21.5 s for the same plan.
    Either way the plan's code fits, and the new order's plan recomputes no more."""
    from remat.compiled.partitioner import Planner

    model, inputs = _tiny_bloom()
    calls: list[str] = []
    for name in ("_below", "_code_selective"):
        def recorded(self, *args, _name=name, _was=getattr(Planner, name), **kwargs):
            calls.append(_name)
            return _was(self, *args, **kwargs)
        monkeypatch.setattr(Planner, name, recorded)

    def planned(below_first: float) -> tuple[Any, list[str]]:
        calls.clear()
        search = Searching(below_first=below_first)
        return remat.optimize(copy.deepcopy(model), inputs, 196_000, verify=False, search=search).step.planned, \
            list(calls)

    new, order = planned(1.0)
    old, before = planned(0.0)
    assert order[0] == "_below" and order.count("_code_selective") == 1, order
    assert before[0] == "_code_selective", before
    assert new.peak <= 196_000 and old.peak <= 196_000
    assert new.prediction.recompute_cost <= old.prediction.recompute_cost


@EXTENDED  # the code-judged search, tried first for auto: test_code_over_the_budget_searches_the_planning_budgets...
def test_eager_code_over_its_planning_graph_is_planned_by_its_own_peak(monkeypatch, nominal_cpu_costs):
    """An HF ResNet (tiny config, default arguments): convolution workspaces and batch-norm
    backward temporaries, which the planning graph does not model, put the code of every plan the
    solvers make over the planning graph's peak. Just under the least code peak the solvers' plans
    reach (164,792 bytes on an Intel Xeon host, 164,656 on an AMD EPYC one: the workspaces are
    measured on the host), none of them fits; the selective search judged by the generated code's
    own peak, started from the solvers' plans, finds one within it. The measured peak (allocator
    level) is the predicted one, and the gradients are eager's. (The budget is found on the host:
    at a fixed 70% the search found a plan within it on the Intel host, and none exists on the
    AMD one.)"""
    from remat.compiled.partitioner import Planner

    transformers = pytest.importorskip("transformers")

    def build():
        torch.manual_seed(0)
        cfg = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[16, 32], depths=[1, 1],
                                        layer_type="bottleneck", num_labels=5)
        return transformers.ResNetForImageClassification(cfg).train(), {"pixel_values": torch.randn(4, 3, 32, 32)}

    model, inputs = build()
    ref = copy.deepcopy(model)

    def solvers_alone(budget: Any) -> Any:  # the solvers' plans only, the least code peak when none fits
        with monkeypatch.context() as m:
            m.setattr(Planner, "_code_selective", lambda *a, **k: None)
            return remat.optimize(copy.deepcopy(ref), inputs, budget, verify=False).step.planned

    for fraction in ("70%", "60%", "50%", "40%"):  # (the workspaces are the host's: at 70% the solvers' plan fits
        low = solvers_alone(fraction)              # on an AMX host)
        if low.peak > low.budget:
            break
    assert low.peak > low.budget  # the code holds more than the planning graph
    budget = int(0.995 * low.peak)
    for _ in range(3):  # (planned within more, a solver's plan may meet it: then just under that one)
        alone = solvers_alone(budget)
        if alone.peak > budget:
            break
        budget = int(0.995 * alone.peak)
    assert alone.peak > budget  # no solver's plan meets it
    module = remat.optimize(model, inputs, budget, verify=False)
    planned = module.step.planned
    assert str(planned.plan.stats["chosen"]).endswith("selective-code"), planned.notes
    assert planned.peak <= budget
    measured = measure(module, inputs, method="profiler", warmup=0).peak
    assert abs(measured - planned.peak) <= 0.02 * planned.peak, (measured, planned.peak)
    model.load_state_dict(ref.state_dict())  # measure ran a step: start both from the same state
    for m_ in (model, ref):
        m_.zero_grad(set_to_none=True)
    default_loss(module(**inputs)).backward()
    default_loss(ref(**inputs)).backward()
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        assert torch.equal(p.grad, q.grad), n


@EXTENDED
def test_backend_inductor_percentage_below_its_channels_last_floor_compiles_without_the_layout_optimization():
    """A percentage the channels-last code cannot meet is met without the layout optimization, with
    no warning, as a byte budget is; before, that code's plan ran over the budget with a warning.
    This HF ResNet's code meets 71.8% of its simulated vanilla peak without the optimization and
    73-74% with it (once 100%: it copied and saved its inputs channels-last, ``fusion.uncopied_inputs``);
    72.5% is between."""
    import warnings

    torch._dynamo.reset()
    model = _hf_vision("resnet")
    inputs = {"pixel_values": torch.randn(8, 3, 32, 32), "labels": torch.randint(0, 10, (8,))}
    be = remat.backend(budget="72.5%", solver="auto", compiler="inductor")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="remat")
        peak = measure(LossStep(torch.compile(model, backend=be)), inputs, method="profiler").peak
    rep = be.report[-1]
    layout = next(n for n in rep["notes"] if "without inductor's channels-last layout optimization" in n)
    assert "Raise the budget to at least" in layout
    assert peak <= rep["budget"] * 1.01
    assert abs(peak - rep["predicted_peak"]) <= 0.01 * peak
    torch._dynamo.reset()


def test_a_schedule_is_judged_once_per_planning_call():
    """The fused search for the floor after the one for the budget probes the same prefixes: each
    executed schedule's code is split and walked once per planning call (a ResNet-152's refused
    channels-last plan spent 40 s walking them again), and a new call walks again."""
    from types import SimpleNamespace

    planner = Planner("50%", fused=True)
    walked = []

    def code(jg, steps, judged=False):
        assert judged  # only walked: its forward may be the call's edited graph (``split.Forward``)
        walked.append(tuple(steps))
        return None, SimpleNamespace(peak=100.0 * len(steps), after_forward=10.0)

    planner._code = code
    jg = object()
    a, b = [("fwd", "x"), ("bwd", "x")], [("fwd", "x"), ("fwd", "y"), ("bwd", "x")]
    first, second = planner._fused_judge(jg, 0.0), planner._fused_judge(jg, 0.0)
    assert [first(set(), a, None), second(set(), a, None), second(set(), b, None)] == \
        [first(set(), a, None), 200.0 * (1 + Searching().fused_margin), 300.0 * (1 + Searching().fused_margin)]
    assert walked == [tuple(a), tuple(b)]
    assert planner._fused_judge(jg, 5.0)(set(), a, None) == 200.0 * (1 + Searching().fused_margin)  # another tail
    assert len(walked) == 3
    planner._judged = {}  # what each planning call starts from
    planner._fused_judge(jg, 0.0)(set(), a, None)
    assert len(walked) == 4


def test_at_the_planning_floor_the_floor_plan_is_judged_besides_the_cheapest_plan_made_there(monkeypatch):
    """The generated code of the plan within the budget is over it, and the budget is the planning graph's floor:
    within it the solver's cheapest plan and its least-peak plan are different plans, and the floor plan's code
    fits. Planning again below the budget reaches the floor plan; it is judged, not taken for tried because its
    planning budget was (a CPU-size HF Mistral in bf16 under auto: the cheapest plan's code needed 6.50 MB, the
    floor plan's 5.47 MB, and the budget 5.47 MB was refused)."""
    from types import SimpleNamespace as NS

    optimize_module = __import__("remat.optimize", fromlist=["plan_within"])
    target = 1000.0
    cheap = NS(plan=NS(schedule=[("fwd", "a")], stats={}), peak=target, recompute_cost=1.0)
    low = NS(plan=NS(schedule=[("fwd", "b")], stats={"floor": True}), peak=target, recompute_cost=5.0)
    code_peak = {id(cheap): 1300.0, id(low): 990.0}

    def plan_within(pg, budget, *args, **kwargs):  # noqa: ANN001, ANN202 -- the solver: nothing below its floor
        if budget < target:
            raise remat.InfeasibleError("below the floor")
        return cheap

    monkeypatch.setattr(optimize_module, "plan_within", plan_within)
    planner = Planner(target, solver="selective")
    planner._floor = lambda pg: low
    planner._split = lambda jg, choice, pg: (None, NS(recompute_cost=choice.recompute_cost), None,
                                             NS(peak=code_peak[id(choice)]))
    first = (cheap, *planner._split(None, cheap, None))
    best, planning, _ = planner._below(None, None, target, target, lambda code: code.peak - target, first, [])
    assert best[0] is low and best[4].peak <= target and planning == target


def test_the_code_floor_judges_each_candidates_own_floor_plan(monkeypatch):
    """Under auto, candidates tied at the planning graph's floor differ in their generated code: besides its
    searches, the least code peak is sought among the candidates' floor plans found so far (no search runs for
    them); the least of all is kept, and named after its solver."""
    from dataclasses import dataclass, field
    from types import SimpleNamespace as NS

    from remat import judge
    from remat.compiled import judged
    from remat.solvers import selective

    @dataclass
    class FakePlan:
        name: str
        peak: float
        recompute_cost: float = 1.0
        stats: dict = field(default_factory=dict)

    needs = {"search": 1200.0, "a": 1100.0, "b": 1000.0, "c": 990.0}
    floors = {"a": FakePlan("a", 900.0), "b": FakePlan("b", 950.0), "c": FakePlan("c", 1250.0)}  # c: planned above
    monkeypatch.setattr(selective, "lowest", lambda *a, **k: FakePlan("search", needs["search"]))
    monkeypatch.setattr(judge, "found_floors", lambda pg, mode: floors)
    monkeypatch.setattr(__import__("remat.optimize", fromlist=["smallest_choice"]), "smallest_choice",
                        lambda *a, **k: None)
    monkeypatch.setattr(__import__("remat.runtime", fromlist=["_executed"]), "_executed",
                        lambda pg, plan: ([("fwd", plan.name)], None))
    monkeypatch.setattr(judged, "held_across", lambda pg, steps: set())
    planner = Planner(1000.0, solver="auto")
    planner._fused_judge = lambda jg, tail: lambda kept, steps, sim: needs[steps[0][1]]
    planner._split = lambda jg, choice, pg: (None, None, None, NS(peak=choice.peak))
    choice = planner._code_floor(None, None, 0.0)[0]
    assert choice.plan.name == "b" and choice.peak == 1000.0 and choice.plan.stats["chosen"] == "b (floor)"
    assert floors["b"].stats == {}  # the cached floor itself is not changed
    planner.solver = "selective"
    assert planner._code_floor(None, None, 0.0)[0].plan.name == "search"  # only auto's candidates


def test_lower_planning_budgets_replan_with_the_candidates_cheapest_at_the_budget():
    """auto's plan over its generated code's budget is planned again within less by the (at most
    three) candidates that made the cheapest fitting plans, those recomputing at most 1.5x the
    cheapest's (a re-plan by all of them took 3 s on a MobileNet; on HF ResNet-152 dp-approx at 2.1x
    the cheapest took 1.3 s of each 1.9 s re-plan and was never chosen); with three or fewer that
    fit, by all; where the cheapest recomputes nothing, by the three."""
    from types import SimpleNamespace

    from remat.compiled.partitioner import _shortlist

    size, within = Searching().shortlist, Searching().shortlist_within

    tried = [{"solver": "twremat", "fits": True, "recompute_cost": 5.0},
             {"solver": "selective", "fits": True, "recompute_cost": 1.0},
             {"solver": "selective", "fits": True, "recompute_cost": 0.5},
             {"solver": "dp-approx", "fits": False, "recompute_cost": 0.1},
             {"solver": "blocks", "fits": True, "recompute_cost": 0.7},
             {"solver": "chen-greedy", "fits": True, "recompute_cost": 0.5 * within + 0.01},
             {"solver": "milp", "fits": False, "message": "no plan"}]
    assert _shortlist(SimpleNamespace(stats={"tried": tried}), size, within) == ("selective", "blocks")
    assert _shortlist(SimpleNamespace(stats={"tried": tried[:5]}), size, within) is None
    assert _shortlist(SimpleNamespace(stats={}), size, within) is None
    free = [{**t, "recompute_cost": 0.0} if t["solver"] == "selective" else t for t in tried]
    assert _shortlist(SimpleNamespace(stats={"tried": free}), size, within) == ("selective", "blocks", "chen-greedy")


def test_a_refused_attempts_planning_time_is_counted_in_the_plan_made_after_it(monkeypatch):
    """The backend plans a CNN again without inductor's layout optimization after a refusal: the
    seconds of the refused attempt belong to the graph's planning time, and the report says so."""
    import time

    from remat.compiled import partitioner
    from remat.errors import InfeasibleError

    model, (x,) = _mlp()
    planner = Planner("100%", solver="chen-greedy")
    real, calls = Planner._plan, []

    def plan(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.3)
            raise InfeasibleError("remat: refused (a stand-in)")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(partitioner.Planner, "_plan", plan)
    with pytest.raises(InfeasibleError):
        compile_step(copy.deepcopy(model), (x,), {}, planner)
    compile_step(copy.deepcopy(model), (x,), {}, planner)
    (planned,) = planner.planned
    assert planned.seconds >= 0.3 and any("refused attempt" in n for n in planned.notes)


def test_the_code_judged_search_also_starts_from_the_selective_familys_own_plans(monkeypatch):
    """Under auto, the eager code's judged search starts from auto's choice, per-block checkpointing's
    floor and the plans of ``Searching.code_seeds`` that are not among them (the ViT bf16 plan at per-block
    checkpointing's peak: 5.50 ms of recomputation against 5.77 from the choice alone); each start keeps
    the share of the time limit it had without them, and a budget below a seed's floor gives no seed."""
    from remat.optimize import plan_within
    from remat.simulate import simulate
    from strategies import residual

    g = residual(12)
    top = simulate(g, remat.schedule.vanilla(g)).peak
    planner = Planner(int(top), solver="auto")
    chosen = plan_within(g, 0.6 * top, "selective", "time")
    seeds = planner._selective_seeds(g, 0.6 * top, [chosen])
    assert [s.plan.solver for s in seeds] == [n for n in Searching().code_seeds if n != "selective"]
    assert all(s.peak <= 0.6 * top for s in seeds)
    assert planner._selective_seeds(g, 1e-3 * top, [None]) == []
    got: dict[str, Any] = {}

    def judged(self, jg, pg, target, tail, seeds=None, seconds=None):  # noqa: ANN001 -- what the search gets
        got.update(seeds=seeds, seconds=seconds)

    monkeypatch.setattr(Planner, "_judged_selective", judged)
    assert planner._code_selective(None, g, 0.6 * top, 0.0, [chosen], lambda code: 0.0, blocks=False) is None
    assert [s.plan.solver for s in got["seeds"]] == ["selective", *(s.plan.solver for s in seeds)]
    assert got["seconds"] == pytest.approx(Searching().code_seconds * (1 + len(seeds) / 2))
