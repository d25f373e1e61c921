"""Inputs and ops that eager PyTorch runs by a path of its own, which the traced step must follow
to keep gradients ``torch.equal`` to eager (``remat.compiled.eager_ops``, ``remat.hf_inputs``):
dropout on a tensor that is not contiguous, dropout with p = 0, and a Hugging Face model given
the all-ones ``attention_mask`` a tokenizer returns for a batch without padding, or no mask."""

from __future__ import annotations

import copy
import math
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import remat
from remat.compiled import eager_ops


def _train_step(module: nn.Module, *args, **kwargs) -> torch.Tensor:
    torch.manual_seed(7)
    out = module(*args, **kwargs)
    loss = out if isinstance(out, torch.Tensor) else out.loss
    loss.backward()
    return loss.detach()


def _assert_same_step(model: nn.Module, module: nn.Module, ref: nn.Module, *args, **kwargs) -> None:
    assert torch.equal(_train_step(module, *args, **kwargs), _train_step(ref, *args, **kwargs))
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        assert (p.grad is None) == (q.grad is None), n
        assert p.grad is None or torch.equal(p.grad, q.grad), n


class _ChannelsLastHead(nn.Module):
    """A sequence of tokens viewed as an image (Segformer's decode head): the view is channels-last
    in memory, and so are the convolution and ReLU after it, where dropout draws its mask."""

    def __init__(self) -> None:
        super().__init__()
        self.proj, self.conv, self.drop, self.head = nn.Linear(8, 8), nn.Conv2d(8, 8, 1), nn.Dropout(0.1), nn.Conv2d(8, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.proj(x).transpose(1, 2).reshape(2, 8, 4, 4)
        y = torch.relu(self.conv(y * 2))
        assert not y.is_contiguous()  # what this test is about
        return self.head(self.drop(y)).square().mean()


@pytest.mark.parametrize("budget", ["100%", "92%"])
def test_dropout_on_a_channels_last_value_draws_eagers_mask(budget):
    """Eager draws into ``empty_like(input)`` in memory order; traced, the draws go into a fresh
    tensor in the same memory order and are permuted to the input's layout, so the masks match
    whether the mask is kept or recomputed."""
    torch.manual_seed(0)
    model, x = _ChannelsLastHead().train(), torch.randn(2, 16, 8)
    ref = copy.deepcopy(model)
    module = remat.optimize(model, (x,), budget, solver="selective", verify=False)
    assert (module.step.planned.split.recomputed > 0) == (budget != "100%")
    _assert_same_step(model, module, ref, x)


class _ExpandedDropout(nn.Module):
    """XLNet's positional embedding: computed once, expanded over the batch (stride 0), then
    dropped out, and read by a projection whose weight gets the gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.r, self.drop = nn.Parameter(torch.randn(16, 4, 8)), nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pos = torch.sin(torch.arange(12.0)[:, None] * torch.arange(16.0)[None, :] / 16)
        pos = self.drop(pos[:, None, :].expand(-1, x.shape[0], -1))
        return (torch.einsum("ibh,hnd->ibnd", pos, self.r) * x[None, :, None, None]).square().sum()


def test_dropout_on_an_expanded_value_draws_eagers_mask():
    """``empty_like`` of an expanded tensor is laid out contiguously (a dimension of stride 0 keeps
    its place), not with the expanded dimension innermost: the traced draws follow that order
    (before, XLNet's positional projection got gradients 97% off)."""
    torch.manual_seed(0)
    model, x = _ExpandedDropout().train(), torch.randn(2)
    ref = copy.deepcopy(model)
    module = remat.optimize(model, (x,), "100%", verify=False)
    _assert_same_step(model, module, ref, x)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.data())
def test_the_traced_mask_layout_is_empty_likes(sizes, data):
    """``eager_ops._memory_order`` against ATen's ``empty_like`` on tensors permuted, sliced and
    expanded at random: the same order of the dimensions in memory."""
    from remat.compiled.eager_ops import _memory_order

    t = torch.empty([s * 2 for s in sizes])
    t = t.permute(data.draw(st.permutations(range(len(sizes)))))
    t = t[tuple(slice(None, None, data.draw(st.sampled_from([1, 2]))) for _ in sizes)]
    expand = [data.draw(st.sampled_from([-1, 3])) if n == 1 else -1 for n in t.shape]
    t = t[tuple(slice(0, 1) if e == 3 else slice(None) for e in expand)].expand(
        [3 if e == 3 else n for e, n in zip(expand, t.shape)])
    like = torch.empty_like(t)
    order = _memory_order(t)
    assert like.permute(order).is_contiguous(), (tuple(t.shape), t.stride(), like.stride(), order)


def test_dropout_with_p_zero_is_the_input_itself():
    """ATen returns the input for p = 0 (the default of many Hugging Face configs); a copy there
    put a "100%" plan 12% over the vanilla peak of a small network."""
    class Net(nn.Module):
        def __init__(self, drop: nn.Module) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), drop, nn.Conv2d(8, 4, 3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x).square().mean()

    def net(drop: nn.Module) -> nn.Module:
        torch.manual_seed(0)
        return Net(drop).train()

    x = torch.randn(2, 3, 16, 16)
    peaks = {}
    for name, drop in (("identity", nn.Identity()), ("dropout0", nn.Dropout(0.0))):
        model = net(drop)
        ref = copy.deepcopy(model)
        module = remat.optimize(model, (x,), "100%", verify=False)
        peaks[name] = module.report["predicted_peak"]
        _assert_same_step(model, module, ref, x)
    assert peaks["dropout0"] == peaks["identity"]


transformers = pytest.importorskip("transformers")


def _llama() -> nn.Module:
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2)).train()


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
def test_an_all_ones_attention_mask_takes_eagers_unmasked_path(autocast):
    """Eager transformers runs attention without an all-ones mask; traced, it would apply it (and
    round differently: 3e-7 in fp32, 0.9% under bf16 on a tiny Qwen2). The mask is given as None,
    which the model reads the same way."""
    model = _llama()
    ref = copy.deepcopy(model)
    ids = torch.randint(0, 128, (2, 16))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        module = remat.optimize(model, inputs, "70%", verify=False)
        _assert_same_step(model, module, ref, **inputs)


def test_a_padded_batch_keeps_its_mask_and_is_planned_as_its_own_signature():
    """A mask with padding changes the result, so it is traced and applied (as eager applies it)."""
    model = _llama()
    ref = copy.deepcopy(model)
    ids = torch.randint(0, 128, (2, 16))
    ones = torch.ones_like(ids)
    padded = ones.clone()
    padded[0, :5] = 0  # left padding
    module = remat.optimize(model, {"input_ids": ids, "attention_mask": ones, "labels": ids}, "70%", verify=False)
    with pytest.warns(UserWarning, match="new input signature"):
        _assert_same_step(model, module, ref, input_ids=ids, attention_mask=padded, labels=ids)
    assert len(module._steps) == 2


def _attention_calls(module: nn.Module) -> list:
    graph = module.step.planned.split.forward.graph
    return [n for n in graph.nodes if n.op == "call_function" and "scaled_dot_product" in str(n.target)]


def test_without_a_mask_attention_runs_is_causal_as_in_eager():
    """Given no mask in training, eager transformers checks the position ids for packed sequences
    and, finding none, runs attention ``is_causal`` with no mask. Traced, the check cannot read
    values; told eager's answer, the step saves no mask per layer, and the no-recomputation plan
    peaks where eager does (a 4-layer Llama saved 1 MiB more, and "100%" then needed recomputation)."""
    model = _llama()
    ref = copy.deepcopy(model)
    ids = torch.randint(0, 128, (2, 16))
    inputs = {"input_ids": ids, "labels": ids, "use_cache": False}  # no cache: the training set-up
    module = remat.optimize(model, inputs, "100%", verify=False)
    calls = _attention_calls(module)
    assert calls and all(n.kwargs.get("attn_mask") is None and n.args[4] is True for n in calls)
    _assert_same_step(model, module, ref, **inputs)


def test_libraries_that_ask_whether_they_are_compiled_are_traced_on_their_eager_path():
    """Libraries branch on ``torch.compiler.is_compiling()``: Hugging Face's mask helpers before
    transformers 5.24 build a causal mask under it where eager passes ``is_causal`` (on an H200 the
    masked cuDNN attention took 2.1x the time). The capture traces eager's branch, and the step is
    eager's to the bit."""

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(16, 48)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k, v = self.qkv(x).unflatten(-1, (3, 2, 8)).permute(2, 0, 3, 1, 4)
            if torch.compiler.is_compiling():
                mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
                return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask).square().sum()
            return nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).square().sum()

    model = Attention()
    ref = copy.deepcopy(model)
    x = torch.randn(2, 8, 16)
    module = remat.optimize(model, (x,), "100%", verify=False)
    calls = _attention_calls(module)
    assert calls and all(n.kwargs.get("attn_mask") is None and n.args[4:5] == (True,) for n in calls), calls[0].args
    _assert_same_step(model, module, ref, x)


class _ActivationAcross(nn.Module):
    """An activation whose gradient comes back laid out across its input: read transposed and
    flattened, so the gradient arrives transposed while the saved input is contiguous. Eager's
    kernel lays the input gradient out as the gradient; torch's Python decomposition, which fake
    tensors run, as the input, so a trace bakes the linear's backward as a ``view`` that the real
    gradient cannot take (HF Qwen3-Next's ``softplus``; ``torch.compile(backend="aot_eager")``
    fails on this module)."""

    def __init__(self, act: nn.Module) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.lin(x) + 1.0).transpose(1, 2).reshape(x.shape[0], -1).square().sum()


@pytest.mark.parametrize("act", [nn.Softplus(), nn.ELU(), nn.Hardswish(), nn.Hardsigmoid(), nn.Hardtanh()],
                         ids=lambda a: type(a).__name__)
def test_an_activation_gradient_laid_out_across_its_input_trains_as_in_eager(act):
    model = _ActivationAcross(act)
    ref = copy.deepcopy(model)
    x = torch.randn(2, 16, 8)
    _assert_same_step(model, remat.optimize(model, (x,), "100%", verify=False), ref, x)


def test_an_activation_gradient_laid_out_across_its_input_trains_under_the_backend():
    torch._dynamo.reset()
    model = _ActivationAcross(nn.Softplus())
    ref = copy.deepcopy(model)
    x = torch.randn(2, 16, 8)
    compiled = torch.compile(model, backend=remat.backend(budget="100%", compiler="eager"))
    _assert_same_step(model, compiled, ref, x)
    torch._dynamo.reset()


@pytest.mark.parametrize("name", eager_ops.LAYOUT_OPS)
def test_fake_layouts_of_activation_backwards_are_eagers(name):
    """Under ``eager_layouts`` each listed op's fake output has the strides of its real output,
    for a gradient laid out across the input and the other way round."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    op = getattr(torch.ops.aten, name).default
    args = {"softplus_backward": lambda g, x: (g, x, 1.0, 20.0), "elu_backward": lambda g, x: (g, 1.0, 1.0, 1.0, False, x),
            "hardtanh_backward": lambda g, x: (g, x, -1.0, 1.0), "logit_backward": lambda g, x: (g, x, None),
            "native_dropout_backward": lambda g, x: (g, x > 0.5, 1.25)}.get(name, lambda g, x: (g, x))
    across, along = torch.rand(2, 8, 16).transpose(1, 2), torch.rand(2, 16, 8)
    for grad, other in ((across, along), (along, across)):
        given = args(grad, other)
        real = op(*given)
        with eager_ops.eager_layouts(), FakeTensorMode() as mode:
            fake = op(*[mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in given])
        assert fake.stride() == real.stride(), (name, grad.stride())


def test_eager_layouts_puts_back_only_its_own_entries():
    """A decomposition registered while remat traces (a module imported then) stays registered."""
    from torch._decomp import decomposition_table

    op, other = torch.ops.aten.softplus_backward.default, torch.ops.aten.sin.default
    before = dict(decomposition_table)
    try:
        with eager_ops.eager_layouts():
            assert decomposition_table[op] is not before[op]
            decomposition_table[other] = "registered meanwhile"
        assert decomposition_table[other] == "registered meanwhile"
        assert decomposition_table[op] is before[op]
    finally:
        decomposition_table.pop(other, None)
        decomposition_table.update(before)


class _Experts(nn.Module):
    """A mixture of experts' matmul as transformers calls it: tokens sorted by expert, one
    ``grouped_mm`` over the experts' weights, in fp32 (the CPU kernel takes it; the fake kernel
    took bf16 only)."""

    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(8, 3)
        self.up = nn.Parameter(torch.randn(3, 8, 16) / 4)
        self.down = nn.Parameter(torch.randn(3, 16, 8) / 4)

    def forward(self, x: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        h = nn.functional.grouped_mm(x * self.router(x).softmax(-1).amax(-1, keepdim=True), self.up, offs=offs)
        return nn.functional.grouped_mm(nn.functional.silu(h), self.down, offs=offs).square().sum()


@pytest.mark.skipif(not hasattr(nn.functional, "grouped_mm"), reason="this torch has no grouped_mm")
def test_a_grouped_matmul_in_fp32_is_traced_on_eagers_path():
    model = _Experts()
    ref = copy.deepcopy(model)
    x, offs = torch.randn(12, 8), torch.tensor([4, 7, 12], dtype=torch.int32)
    module = remat.optimize(model, (x, offs), "80%", verify=False)
    assert not any("torch.compile traces it" in n for n in module.report.notes)
    _assert_same_step(model, module, ref, x, offs)


def test_a_step_traceable_only_as_torch_compile_traces_it_says_so():
    """A library whose eager path cannot be traced (a branch on a tensor's value) but whose
    compile-time path can: the step is traced as torch.compile traces it, and the report says so
    and why, since that path may compute otherwise than eager's."""

    class Branchy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.lin(x)
            if not torch.compiler.is_compiling() and h.sum().item() < -1e9:  # eager's check reads a value
                raise ValueError("unreachable")
            return h.relu().square().sum()

    model = Branchy()
    ref = copy.deepcopy(model)
    x = torch.randn(4, 8)
    module = remat.optimize(model, (x,), "100%", verify=False)
    (note,) = [n for n in module.report.notes if "torch.compile traces it" in n]
    assert "eager's path failed to trace (DataDependent" in note
    _assert_same_step(model, module, ref, x)
    plain = remat.optimize(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), (x,), "100%", verify=False)
    assert not any("torch.compile traces it" in n for n in plain.report.notes)


def test_packed_position_ids_keep_the_mask_and_are_planned_as_their_own_signature():
    """Position ids that restart within a row mark packed sequences, which eager masks apart; the
    trace keeps that mask, and unpacked position ids of the same shape get a plan of their own."""
    model = _llama()
    ref = copy.deepcopy(model)
    ids = torch.randint(0, 128, (2, 16))
    plain = torch.arange(16).expand(2, 16)
    packed = torch.cat([torch.arange(6), torch.arange(10)]).expand(2, 16)
    inputs = {"input_ids": ids, "position_ids": plain, "labels": ids, "use_cache": False}
    module = remat.optimize(model, inputs, "70%", verify=False)
    assert all(n.kwargs.get("attn_mask") is None for n in _attention_calls(module))
    with pytest.warns(UserWarning, match="new input signature"):
        _assert_same_step(model, module, ref, **{**inputs, "position_ids": packed})
    assert len(module._steps) == 2
    assert all(n.kwargs.get("attn_mask") is not None for n in _attention_calls(module))


@pytest.mark.parametrize("threads", [1, 2])
def test_a_budget_under_the_ops_own_temporaries_is_refused_naming_one_that_is_met(threads):
    """On the CPU a depthwise 7x7 convolution's backward allocates im2col columns many times its
    input, which no plan can avoid. Measured at the allocator level (as the generated code's walk
    predicts), a budget below that is refused, naming the bytes the least plan needs; at those
    bytes the plan runs and measures within them. oneDNN's kernels differ by thread count (on one
    thread the planning graph's floor is over 50% but under what its code needs): both are named
    right."""
    import re

    class DepthwiseBlock(nn.Module):  # ConvNext's token mixer
        def __init__(self) -> None:
            super().__init__()
            self.stem, self.dw, self.pw = nn.Conv2d(3, 32, 4, stride=4), nn.Conv2d(32, 32, 7, padding=3, groups=32), \
                nn.Linear(32, 32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.stem(x)
            return self.pw(self.dw(y).permute(0, 2, 3, 1)).square().mean()

    torch.manual_seed(0)
    model, x = DepthwiseBlock().train(), torch.randn(2, 3, 32, 32)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with pytest.raises(remat.InfeasibleError, match="temporaries inside ops") as info:
            remat.optimize(copy.deepcopy(model), (x,), "50%")
        need = int(re.search(r"(\d+) bytes\)", str(info.value)).group(1))
        assert math.ceil(info.value.needed) == need  # what the message names, as a number (the demo's retry)
        assert "of the measured vanilla peak" in str(info.value)  # the base of "50%": verify measured it
        with pytest.raises(remat.InfeasibleError, match="of the vanilla peak its planning graph simulates") as low:
            remat.optimize(copy.deepcopy(model), (x,), "20%", verify=False)  # unmeasured: which vanilla, said
        # above 100% of that base: the refusal says why (the convolution's backward, whatever is recomputed)
        assert re.search(r"\(1\d\d\.\d%, \d+ bytes\); whatever a plan recomputes, its generated code needs .* \(the "
                         r"backward's convolution_backward runs with", str(low.value))
        module = remat.optimize(model, (x,), need)
    finally:
        torch.set_num_threads(before)
    assert module.report.method == "profiler"
    assert module.report.measured_peak <= need * 1.01


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_interpolate_is_traced_as_eagers_kernels(mode, monkeypatch):
    """Upsampling keeps ATen's kernels in the trace: gradients equal eager's, and the generated
    code's peak is not above eager's (the decomposition's gathers made it 15% larger)."""
    class Head(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 3, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.nn.functional.interpolate(torch.relu(self.a(x)), scale_factor=4, mode=mode)
            return self.b(y).square().mean()

    torch.manual_seed(0)
    model, x = Head().train(), torch.randn(2, 3, 8, 8)
    ref = copy.deepcopy(model)
    monkeypatch.setattr(sys.modules["remat.optimize"], "EAGER_SHARE", 2.0)  # the generated code runs
    module = remat.optimize(model, (x,), "100%")
    assert module.report.executor == "compiled"
    graph = module.step.planned.split.forward.graph
    assert any("upsample" in str(n.target) for n in graph.nodes)
    assert not any("_unsafe_index" in str(n.target) for n in graph.nodes)
    assert module.report.measured_peak <= module.report.vanilla_measured_peak
    _assert_same_step(model, module, ref, x)


def _room_case() -> dict:
    """The HF ResNet bf16 plans of ``test_a_plan_whose_code_peaks_well_under_the_budget_gives_back_
    recomputation``, made in a fresh process: with nominal CPU costs, the first budget from 50% to 70%
    whose plan leaves room under it (``Searching.room`` huge: no search), then the same budget searched
    from 1% of room."""
    from remat.bench import heldout
    from remat.compiled import costs

    fig = {**costs.DEVICES["cpu"], "measured": 1.0, "version": costs.FIGURES_VERSION}
    costs.calibrate = lambda: fig  # as the ``nominal_cpu_costs`` fixture
    torch.set_num_threads(1)  # the bench's (and CI's) thread count: oneDNN's kernels and costs depend on it
    held = heldout.build("resnet", "cpu", "cpu")

    def planned(budget, room):
        with heldout.autocast("cpu", torch.bfloat16):
            module = remat.optimize(held.model, held.inputs, budget, search=remat.Searching(room=room))
        p = module.step.planned
        return {"code": p.code.peak, "budget": p.budget, "cost": p.prediction.recompute_cost,
                "measured": module.report.measured_peak}

    room = 0.01
    for budget in ("50%", "60%", "70%"):
        try:
            plain = planned(budget, 10.0)
        except remat.InfeasibleError:
            continue
        if plain["code"] < (1 - room) * plain["budget"] and plain["cost"] > 0:
            break
    else:
        return {"budget": None}
    return {"budget": budget, "plain": plain, "searched": planned(budget, room)}


@pytest.mark.extended  # three minutes, and skipped where no budget leaves room (an AMD EPYC host): the give-back
# passes are tested on random graphs in test_selective, the code-judged search in test_compiled
def test_a_plan_whose_code_peaks_well_under_the_budget_gives_back_recomputation():
    """HF ResNet under bf16 autocast: where auto's plan fits the planning graph with room to spare
    and its generated code peaks well under the budget (at 50% on the host this was written on:
    7% under, 1.68 -> 1.22 ms predicted, measured 1.18x -> 1.13x vanilla), the code-judged
    search from it gives back recomputation while the code fits. With that search off (``Searching.room``
    huge) the plan stays where it was.

    The least plan and the room a plan leaves depend on the machine's peaks and op costs (50%: 7%
    room on the host this was written on, 1.6% on an AMD EPYC one, refused on an Intel Xeon whose
    least plan needs 51.2%), and on what ran before in the process (on that Xeon, after this file's
    other tests no budget to 70% left room; alone, 70% did, then in a later run did not: auto's
    searches are time-limited): nominal costs, the first budget whose plan leaves room, in a fresh
    process (``_room_case``); without one, the premise is missing and the test skips."""
    import json
    import subprocess
    from pathlib import Path

    here = Path(__file__).parent
    code = "import json, test_eager_paths as t; print(json.dumps(t._room_case()))"
    run = subprocess.run([sys.executable, "-c", code], cwd=here, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    if got["budget"] is None:  # the premise, not the search: missing in 3 of 6 runs on an Intel host
        pytest.skip("no budget from 50% to 70% left room under its plan with recomputation here")
    plain, searched = got["plain"], got["searched"]
    assert searched["code"] <= searched["budget"] and searched["measured"] <= 1.01 * searched["budget"]
    assert searched["cost"] < plain["cost"]
    assert searched["code"] > plain["code"]


def test_a_plan_whose_code_is_predicted_over_and_measures_over_is_refused_after_one_planning(monkeypatch):
    """The first plan's code predicted over the budget, and the measured step over it too: the planner's own
    search found nothing that fits, so ``optimize`` refuses at once, naming the least plan's bytes, without
    planning again within less (a CPU-size HF ResNet bf16 at "50%": 26.5 -> 15.5 s, the same bytes named).
    The floor check that refuses such budgets on its own is taken out here, so the prediction alone decides."""
    class DepthwiseBlock(nn.Module):  # the depthwise convolution's backward temporaries set the code's floor
        def __init__(self) -> None:
            super().__init__()
            self.stem, self.dw, self.pw = nn.Conv2d(3, 32, 4, stride=4), nn.Conv2d(32, 32, 7, padding=3, groups=32), \
                nn.Linear(32, 32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.pw(self.dw(self.stem(x)).permute(0, 2, 3, 1)).square().mean()

    import importlib

    from remat.compiled.module import CompiledModule

    optimize_module = importlib.import_module("remat.optimize")
    monkeypatch.setattr(optimize_module, "below_floor", lambda *a, **k: False)
    planned = []
    real = CompiledModule.compile_for
    monkeypatch.setattr(CompiledModule, "compile_for", lambda self, *a, **k: planned.append(1) or real(self, *a, **k))
    torch.manual_seed(0)
    with pytest.raises(remat.InfeasibleError, match="needs when it runs") as info:
        remat.optimize(DepthwiseBlock().train(), (torch.randn(2, 3, 32, 32),), "50%")
    assert len(planned) == 1
    assert info.value.needed > 0


def test_the_code_floor_is_sought_with_every_chain_limit_and_the_refusal_names_the_least(monkeypatch):
    """The least budget a refusal names comes from the search judged by the generated code's own peak, from the
    vanilla step with chains of each of ``selective.CHAIN_LIMITS`` (as ``selective-chains`` searches), not only
    4: which limit reaches least depends on the graph (the CPU-size held-out HF ResNet in bf16: 1,810,776 bytes
    with chains of 2, 1,850,584 with 4, and its "50%" budget, 1.72 MiB, was refused). Here the tests' tiny HF
    ResNet at a budget below any plan: the refusal names no more than the least of those searches' peaks."""
    from remat.bench import heldout
    from remat.compiled import partitioner
    from remat.solvers import selective

    searched: list[tuple] = []  # (chain limit, from the vanilla step, judged peak) of the code floor's searches
    inside = []
    real_lowest, real_floor = selective.lowest, partitioner.Planner._code_floor

    def lowest(*args, **kwargs):
        plan = real_lowest(*args, **kwargs)
        if inside:
            searched.append((kwargs.get("chain_limit"), kwargs.get("start") is None, plan.peak))
        return plan

    def code_floor(self, *args, **kwargs):
        inside.append(1)
        try:
            return real_floor(self, *args, **kwargs)
        finally:
            inside.pop()

    monkeypatch.setattr(selective, "lowest", lowest)
    monkeypatch.setattr(partitioner.Planner, "_code_floor", code_floor)
    held = heldout.build("resnet", "cpu", "quick")
    with pytest.raises(remat.InfeasibleError) as info:
        remat.optimize(held.model, held.inputs, "5%")
    from_vanilla = [limit for limit, vanilla, _ in searched if vanilla]
    assert from_vanilla[:1 + len(selective.CHAIN_LIMITS)] == [None, *selective.CHAIN_LIMITS]
    # (the solvers' own floor plan may need less still: the refusal names the least of all)
    assert 0 < info.value.needed <= int(min(peak for _, _, peak in searched)) + 1


def test_at_the_code_floor_the_plan_recomputing_least_at_that_peak_is_taken(monkeypatch):
    """The code floor's search seeks the least peak, not the least recomputation at it. Where no plan's code fits
    the budget and the floor's plan is taken (the CPU-size HF ResNet in bf16 at "50%", 0.2% over the budget), the
    judged search runs again from it at its own peak (``Planner._cheapest_at``): 2.00 -> 1.74 ms recomputed there.
    Here on the tests' tiny HF ResNet: from the floor plan its refusal's search finds, that search recomputes less,
    and its code peaks no higher. (The candidates' own floor plans, which the code floor judges too, are left out:
    on this model twremat's is lower, 117,744 bytes against the search's 134,961, and none cheaper is found at it.)"""
    from remat import judge
    from remat.bench import heldout
    from remat.compiled import partitioner

    monkeypatch.setattr(judge, "found_floors", lambda *a, **k: {})
    floors: list[tuple] = []
    real_floor = partitioner.Planner._code_floor

    def code_floor(self, jg, pg, tail):
        low = real_floor(self, jg, pg, tail)
        floors.append((self, jg, pg, tail, low))
        return low

    monkeypatch.setattr(partitioner.Planner, "_code_floor", code_floor)
    held = heldout.build("resnet", "cpu", "quick")
    with pytest.raises(remat.InfeasibleError):
        remat.optimize(held.model, held.inputs, "5%")
    planner, jg, pg, tail, low = floors[0]
    notes: list[str] = []
    got = planner._cheapest_at(jg, pg, low, tail, notes)
    assert max(got[4].peak, got[4].after_forward + tail) <= max(low[4].peak, low[4].after_forward + tail)
    assert got[2].recompute_cost < low[2].recompute_cost
    assert notes and "at no higher a peak" in notes[0]
