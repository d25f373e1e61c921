"""castcache: a parameter read several times under autocast is cast once and its gradients summed in
the low precision, as eager autocast's cast cache makes them; anything else is left as traced."""

from __future__ import annotations

import pytest
import torch
import torch.fx as fx
from functorch.compile import default_partition, nop
from torch._functorch.aot_autograd import aot_function

from remat.compiled.castcache import share_casts


def _joint(f, *args) -> tuple[fx.GraphModule, int]:
    """AOTAutograd's joint graph of ``f`` (a scalar out) on ``args``, and its number of forward outputs."""
    got: list = []

    def partition(gm, inputs, **kw):
        got.append((gm, kw["num_fwd_outputs"]))
        return default_partition(gm, inputs, **kw)

    aot_function(f, fw_compiler=nop, bw_compiler=nop, partition_fn=partition)(*args).backward()
    return got[0]


def _casts_of(gm: fx.GraphModule, name: str) -> list[fx.Node]:
    (p,) = [n for n in gm.graph.nodes if n.name == name]
    return [u for u in p.users if u.target is torch.ops.aten._to_copy.default]


def _loop(w, b, x):
    with torch.autocast("cpu", torch.bfloat16):
        for _ in range(4):
            x = torch.tanh(torch.nn.functional.linear(x, w, b)) + x
    return x.float().sum()


def _params():
    torch.manual_seed(0)
    return torch.randn(8, 8, requires_grad=True), torch.randn(8, requires_grad=True), torch.randn(4, 8)


def test_a_weight_read_four_times_has_its_gradients_summed_in_bf16_and_cast_once():
    gm, n_out = _joint(_loop, *_params())
    assert share_casts(gm, n_out) == 2
    for name in ("primals_1", "primals_2"):  # the forward as traced: a cast per read
        assert [c.kwargs["dtype"] for c in _casts_of(gm, name)] == [torch.bfloat16] * 4
    out = next(n for n in gm.graph.nodes if n.op == "output")
    for grad in out.args[0][n_out:n_out + 2]:  # each gradient: one fp32 cast of a bf16 chain of 3 adds
        assert grad.target is torch.ops.aten._to_copy.default and grad.kwargs["dtype"] == torch.float32
        chain, adds = grad.args[0], 0
        while chain.target is torch.ops.aten.add.Tensor:
            assert chain.meta["val"].dtype == torch.bfloat16
            chain, adds = chain.args[0], adds + 1
        assert adds == 3
    assert share_casts(gm, n_out) == 0  # nothing left to share


def _branches(w, b, x):  # two reads side by side, their products meeting later
    with torch.autocast("cpu", torch.bfloat16):
        lin = torch.nn.functional.linear
        y = lin(x, w, b) * lin(x.flip(0), w, b)
        y = lin(torch.tanh(y), w) + lin(y, w, b)
    return y.float().square().mean()


def _nested(w, b, x):  # reads of reads
    with torch.autocast("cpu", torch.bfloat16):
        lin = torch.nn.functional.linear
        y = lin(torch.sigmoid(lin(lin(x, w, b), w, b)), w) * lin(x, w)
    return y.float().sum()


@pytest.mark.parametrize("f", [_loop, _branches, _nested], ids=["loop", "branches", "nested"])
def test_the_rewritten_graph_computes_eagers_gradients(f):
    """The joint graph run before and after the rewrite, against eager autograd with autocast's cache:
    after it, each gradient is eager's bit for bit; before it, the shared weight's is not."""
    w, b, x = _params()
    gm, n_out = _joint(f, w, b, x)
    tangent = torch.ones(())

    def grads(g):
        outs, grad_ins = g([w.detach(), b.detach(), x], [tangent])  # (forward outputs, input gradients)
        return grad_ins[:2]

    before = grads(gm)
    share_casts(gm, n_out)
    after = grads(gm)
    w.grad = b.grad = None  # (tracing ran a step)
    f(w, b, x).backward()
    assert torch.equal(after[0], w.grad) and torch.equal(after[1], b.grad)
    assert not torch.equal(before[0], w.grad)


def test_a_weight_also_read_in_fp32_is_left_as_traced():
    """Read through casts and directly: eager adds the shared cast's gradient where its last read's
    arrives among the others, an order the rewrite does not claim; the graph stays as traced."""

    def f(w, b, x):
        with torch.autocast("cpu", torch.bfloat16):
            y = torch.nn.functional.linear(torch.nn.functional.linear(x, w, b), w, b)
        return y.float().sum() + (w * w).sum()

    gm, n_out = _joint(f, *_params())
    code = gm.code
    assert share_casts(gm, n_out) == 1  # the bias only
    out = next(n for n in gm.graph.nodes if n.op == "output")
    w_grad, b_grad = out.args[0][n_out:n_out + 2]
    assert b_grad.target is torch.ops.aten._to_copy.default  # one cast of the bf16 sum
    assert w_grad.target is torch.ops.aten.add.Tensor and w_grad.meta["val"].dtype == torch.float32
    assert code != gm.code
