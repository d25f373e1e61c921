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


def _shape(g: fx.Graph, origin: dict | None = None) -> list[tuple]:
    """Each node: op, the name of the joint node it copies, target, what it reads (by those names),
    and its metadata's value object."""
    def name(a):
        return (origin or {}).get(a, a.name) if isinstance(a, fx.Node) else a

    return [(n.op, name(n), str(n.target), repr(fx.map_arg((n.args, n.kwargs), name)),
             id(n.meta.get("val")), sorted(n.meta)) for n in g.nodes]


@pytest.mark.parametrize("build,budget,fused,compiler", [
    (_mlp, "60%", False, None), (_mlp, "60%", True, None), (_mlp, "60%", False, "eager"),
    (_bn_cnn, "90%", False, None), (_bn_cnn, "60%", True, None), (lambda: _hf("llama"), "50%", True, None)])
def test_forward_graph_is_aot_autograds_node_for_node(build, budget, fused, compiler, monkeypatch):
    """Dropout (random ops), batch norm's running statistics (in-place updates: side effects dead
    code elimination keeps) and an HF decoder, at every kept set the planner splits: made afresh,
    or (plans judged for inductor's code) edited from the previous plan's forward graph, where a
    node copied in again may have another name."""
    ours = split_mod.Forward.graph_for
    compared = {True: 0, False: 0}

    def both(self, outputs, descs, fresh=False):
        got = ours(self, outputs, descs, fresh)
        want = _extract_graph_with_inputs_outputs(self.joint, self.inputs, outputs, descs, "forward")
        got.lint()
        origin = None if fresh else {v: k.name for k, v in self.env.items()}
        assert _shape(got, origin) == _shape(want)
        out = next(iter(got.find_nodes(op="output")))
        assert out.meta["desc"] == next(iter(want.find_nodes(op="output"))).meta["desc"]
        compared[fresh] += 1
        return got

    monkeypatch.setattr(split_mod.Forward, "graph_for", both)
    model, inputs = build()
    args, kwargs = (inputs, {}) if isinstance(inputs, tuple) else ((), inputs)
    if compiler is None:
        compile_step(model, args, kwargs, Planner(budget, solver="auto", fused=fused))
    else:  # under Dynamo: dead code elimination takes random ops as pure (inductor's ``fallback_random``)
        torch._dynamo.reset()
        torch.compile(model, backend=remat.backend(budget=budget, compiler=compiler))(*args, **kwargs).sum().backward()
    assert compared[True]
    if fused and build is not _mlp:  # judged plans, without random ops (their forward saves generator states)
        assert compared[False] > 5


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
