"""The forward graph of a split is AOTAutograd's own, node for node (``split.forward_graph``)."""

from __future__ import annotations

import pytest
import torch
import torch.fx as fx
from torch._functorch.partitioners import _extract_graph_with_inputs_outputs

import remat
import remat.compiled.split as split_mod
from remat.compiled.module import compile_step
from remat.compiled.partitioner import Planner

from test_compiled import _bn_cnn, _hf, _mlp


def _shape(g: fx.Graph) -> list[tuple]:
    """Each node: op, name, target, what it reads (by name), and its metadata's value object."""
    def name(a):
        return a.name if isinstance(a, fx.Node) else a

    return [(n.op, n.name, str(n.target), repr(fx.map_arg((n.args, n.kwargs), name)),
             id(n.meta.get("val")), sorted(n.meta)) for n in g.nodes]


@pytest.mark.parametrize("build,budget,fused,compiler", [
    (_mlp, "60%", False, None), (_mlp, "60%", True, None), (_mlp, "60%", False, "eager"),
    (_bn_cnn, "90%", False, None), (_bn_cnn, "60%", True, None), (lambda: _hf("llama"), "50%", True, None)])
def test_forward_graph_is_aot_autograds_node_for_node(build, budget, fused, compiler, monkeypatch):
    """Dropout (random ops), batch norm's running statistics (in-place updates: side effects dead
    code elimination keeps) and an HF decoder, at every kept set the planner splits."""
    ours = split_mod.forward_graph
    compared = []

    def both(joint, inputs, outputs, descs):
        got = ours(joint, inputs, outputs, descs)
        want = _extract_graph_with_inputs_outputs(joint, inputs, outputs, descs, "forward")
        got.lint()
        assert _shape(got) == _shape(want)
        out = next(iter(got.find_nodes(op="output")))
        assert out.meta["desc"] == next(iter(want.find_nodes(op="output"))).meta["desc"]
        compared.append(len(got.nodes))
        return got

    monkeypatch.setattr(split_mod, "forward_graph", both)
    model, inputs = build()
    args, kwargs = (inputs, {}) if isinstance(inputs, tuple) else ((), inputs)
    if compiler is None:
        compile_step(model, args, kwargs, Planner(budget, solver="auto", fused=fused))
    else:  # under Dynamo: dead code elimination takes random ops as pure (inductor's ``fallback_random``)
        torch._dynamo.reset()
        torch.compile(model, backend=remat.backend(budget=budget, compiler=compiler))(*args, **kwargs).sum().backward()
    assert compared


def test_forward_graph_falls_back_where_an_output_needs_the_backward():
    """An output computed from a tangent cannot be in the forward: AOTAutograd's function says so."""
    g = fx.Graph()
    x, t = g.placeholder("primals_1"), g.placeholder("tangents_1")
    y = g.call_function(torch.ops.aten.mul.Tensor, (x, t))
    g.output((y,))
    with pytest.raises(AssertionError, match="invalid, but is output"):
        split_mod.forward_graph(g, [x], [y], [None])


def test_forward_graph_keeps_an_unread_in_place_update_and_drops_dead_values():
    g = fx.Graph()
    x, buf = g.placeholder("primals_1"), g.placeholder("primals_2")
    dead = g.call_function(torch.ops.aten.sin.default, (x,))
    upd = g.call_function(torch.ops.aten.copy_.default, (buf, x))
    y = g.call_function(torch.ops.aten.cos.default, (x,))
    g.output((y,))
    got = split_mod.forward_graph(g, [x, buf], [y], [None])
    names = [n.name for n in got.nodes]
    assert dead.name not in names and upd.name in names and y.name in names
    assert _shape(got) == _shape(_extract_graph_with_inputs_outputs(g, [x, buf], [y], [None], "forward"))
