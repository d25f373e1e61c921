"""The generated eager code writes a (log-)softmax and its gradient over their dying first input
(``remat.compiled.inplace``): the values are eager's bit for bit, only a value read nowhere after
is overwritten, and a language model's no-recomputation step peaks below eager's."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.fx as fx
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import remat
from remat.measure import measure
from remat.compiled.inplace import REUSABLE, write_over_dying_inputs

aten = torch.ops.aten


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 9), cols=st.integers(1, 300), bf16=st.booleans(), which=st.integers(0, 3),
       seed=st.integers(0, 99))
def test_writing_over_the_first_input_gives_eagers_values(rows, cols, bf16, which, seed):
    """Each row is reduced before it is written, so the aliased call equals the allocating one."""
    dtype = torch.bfloat16 if bf16 else torch.float32
    g = torch.Generator().manual_seed(seed)
    x, grad = (torch.randn(rows, cols, generator=g).mul(3).to(dtype) for _ in range(2))
    op = list(REUSABLE)[which]
    overload, name, _ = REUSABLE[op]
    if which < 2:  # the forward op: (input, dim, half_to_float)
        args = (x, -1, False)
    else:  # its gradient: (incoming gradient, the forward's output, dim, input dtype)
        forward = aten._log_softmax if "log" in str(op) else aten._softmax
        args = (grad, forward(x, -1, False), -1, dtype)
    reference = op(*args)
    result = overload(*args, **{name: args[0]})
    assert result.data_ptr() == args[0].data_ptr()
    assert torch.equal(result, reference)


def _traced(fn, *shapes) -> fx.GraphModule:
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn, tracing_mode="fake")(*(torch.randn(s) for s in shapes))


def test_only_a_value_made_here_and_read_nowhere_after_is_overwritten():
    def dies(a, o):  # the incoming gradient is made here and dies at the op: rewritten
        return aten._log_softmax_backward_data(a * 2, o, -1, torch.float32)

    def read_after(a, o):  # read again after the op: kept
        g = a * 2
        return aten._log_softmax_backward_data(g, o, -1, torch.float32) + g

    def an_input(a, o):  # a graph input (a tangent): never written
        return aten._log_softmax_backward_data(a, o, -1, torch.float32)

    def a_view(a, o):  # another value shares its storage: kept
        g = a * 2
        return aten._log_softmax_backward_data(g, o, -1, torch.float32), g.view(-1)

    def forward_dies(a, o):  # a forward log-softmax of a value made here
        return aten._log_softmax(a * 2, -1, False) + o

    def forward_returned(a, o):  # its input is an output of the graph (a saved value): kept
        x = a * 2
        return aten._log_softmax(x, -1, False), x

    cases = (dies, read_after, an_input, a_view, forward_dies, forward_returned)
    counts = {f.__name__: write_over_dying_inputs(_traced(f, (4, 8), (4, 8))) for f in cases}
    assert counts == {"dies": 1, "read_after": 0, "an_input": 0, "a_view": 0, "forward_dies": 1,
                      "forward_returned": 0}
    gm = _traced(dies, (4, 8), (4, 8))
    write_over_dying_inputs(gm)
    a, o = torch.randn(4, 8), torch.log_softmax(torch.randn(4, 8), -1)
    assert torch.equal(gm(a, o), dies(a, o))


class _LM(nn.Module):
    """Embedding, a block, a vocabulary-sized head and cross-entropy: the loss's backward holds the
    step's peak."""

    def __init__(self, vocab: int = 512, dim: int = 16) -> None:
        super().__init__()
        self.emb, self.body, self.head = nn.Embedding(vocab, dim), nn.Linear(dim, dim), nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.body(self.emb(ids)))
        return nn.functional.cross_entropy(self.head(h).flatten(0, 1), ids.flatten())


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
def test_a_language_models_plain_step_peaks_below_eagers_with_its_gradients(autocast):
    torch.manual_seed(0)
    model, ids = _LM().train(), torch.randint(0, 512, (4, 64))
    ref = copy.deepcopy(model)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        module = remat.optimize(model, (ids,), "100%")
        module(ids).backward()
        ref(ids).backward()
    report = module.report
    assert report.solver == "none"  # nothing recomputed
    assert report.measured_peak == pytest.approx(report.predicted_peak, rel=0.01)
    # the vocabulary-sized result no longer sits beside both of its inputs: one of three buffers fewer
    logits = 4 * 64 * 512 * 4
    assert report.measured_peak <= report.vanilla_measured_peak - 0.9 * logits
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.equal(p.grad, q.grad)


def test_a_stored_plan_runs_the_same_code(tmp_path):
    """A plan loaded instead of planned (``plan=``, ``plan_cache``) is split and rewritten as when
    it was made: the same predicted and measured peak."""
    torch.manual_seed(0)
    ids = torch.randint(0, 512, (4, 64))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        first = remat.optimize(_LM().train(), (ids,), "100%")
        first.plan.save(tmp_path / "plan.json")
        torch.manual_seed(0)
        again = remat.optimize(_LM().train(), (ids,), "100%", plan=tmp_path / "plan.json")
        measured = measure(again, (ids,), method="profiler").peak
    assert again.report.predicted_peak == first.report.predicted_peak
    assert measured == first.report.measured_peak < first.report.vanilla_measured_peak
