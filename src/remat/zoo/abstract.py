"""Seed 000's abstract graphs of the zoo's networks: one node per layer op.

``graph(name, batch)`` traces the zoo model with torch.fx, torch.nn layers (Conv, BatchNorm,
ReLU, Linear, pools, dropout, ...) kept whole as leaves, and runs it on the META device to learn
every op's output shape: no activation memory is allocated, so the papers' batch sizes cost
nothing. Each op becomes one ``remat.Graph`` node:

- ``mem``  bytes of the op's output (float32 nets: 4 bytes per element); an op returning several
  tensors (``chunk``) is one node holding all of them, and indexing into it is not a node;
- ``cost`` seed 000 §3's rule with ``cost="paper"``: 10 for a convolution, 1 for anything else;
  with ``cost="flops"``, the op's forward FLOPs (torch's flop counter) or, for ops it does not
  count (elementwise, pooling, normalisation), one per output element;
- ``op``   the layer kind: conv, batchnorm, relu, add, concat, maxpool, avgpool, linear, ...

The model's inputs and parameters are not nodes (seed 000 §2); values computed from parameters
alone (a transposed weight) are constants and not nodes either. One node ``loss`` (a float32
scalar, cost 1) reads every output, so each graph has a single sink, as the training step has.
Seed 000's counts include one such extra vertex too: ResNet50 is 175 layer ops + 1 = 176.
Abstract graphs leave ``bwd_uses`` at None (backward reads inputs and output).

Tested in tests/test_zoo.py: node counts against seed 000 Table 1, validity, single sink, and
byte sizes against a real CPU forward of the same model.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ..graph import Graph
from ..errors import InputError

COSTS = ("paper", "flops")
CONV_COST = 10  # seed 000 §3: "Tv = 10 for convolutional node, and Tv = 1 for all other types"

_MODULE_OPS: tuple[tuple[tuple[type, ...], str], ...] = (
    ((nn.modules.conv._ConvNd,), "conv"),
    ((nn.modules.batchnorm._BatchNorm,), "batchnorm"),
    ((nn.LayerNorm, nn.GroupNorm), "layernorm"),
    ((nn.ReLU,), "relu"),
    ((nn.Linear,), "linear"),
    ((nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AdaptiveMaxPool2d), "maxpool"),
    ((nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d, nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d), "avgpool"),
    ((nn.modules.dropout._DropoutNd,), "dropout"),
    ((nn.Softmax,), "softmax"),
    ((nn.Embedding,), "embedding"),
)

_FUNCTION_OPS: dict[str, str] = {
    "add": "add", "iadd": "add", "sub": "sub", "mul": "mul", "truediv": "div",
    "cat": "concat", "stack": "stack", "getitem": "slice",
    "avg_pool2d": "avgpool", "adaptive_avg_pool2d": "avgpool", "max_pool2d": "maxpool",
    "interpolate": "upsample", "relu": "relu",
}


def graph(name: str, batch: int | None = None, cost: str = "paper", **options: Any) -> Graph:
    """Seed 000's abstract graph of zoo network ``name`` at ``batch`` (default: the paper's).

    ``options`` go to ``remat.zoo.build`` (``image_size``, ``depth``, ...); the model is built on
    the meta device in training mode.
    """
    from . import build

    if cost not in COSTS:
        raise InputError(f"cost must be one of {COSTS}, got {cost!r}")
    options.setdefault("device", "meta")
    model, inputs = build(name, batch, **options)
    return trace_graph(model, inputs, name=name, cost=cost)


def trace_graph(model: nn.Module, inputs: tuple[torch.Tensor, ...], name: str = "graph",
                cost: str = "paper") -> Graph:
    """The abstract graph of any fx-traceable model, shapes from running it on ``inputs``.

    Pass meta tensors (and a meta model) to spend no memory.
    """
    if cost not in COSTS:
        raise InputError(f"cost must be one of {COSTS}, got {cost!r}")
    gm = fx.GraphModule(model, fx.Tracer().trace(model))
    recorder = _Recorder(gm, count_flops=cost == "flops")
    recorder.run(*inputs)
    return _to_graph(gm, recorder, name, cost)


class _Recorder(fx.Interpreter):
    """Runs the traced model once and keeps, per fx node, its output bytes and FLOPs."""

    def __init__(self, gm: fx.GraphModule, count_flops: bool) -> None:
        super().__init__(gm)
        self.count_flops = count_flops
        self.bytes: dict[str, int] = {}     # only for nodes whose output holds tensors
        self.numel: dict[str, int] = {}
        self.tuple_out: set[str] = set()    # nodes returning several tensors
        self.flops: dict[str, int] = {}

    def run_node(self, n: fx.Node) -> Any:
        if self.count_flops and n.op.startswith("call_"):
            with FlopCounterMode(display=False) as counter:
                out = super().run_node(n)
            self.flops[n.name] = counter.get_total_flops()
        else:
            out = super().run_node(n)
        tensors = _tensors(out)
        if tensors:
            self.bytes[n.name] = sum(t.numel() * t.element_size() for t in tensors)
            self.numel[n.name] = sum(t.numel() for t in tensors)
            if not isinstance(out, torch.Tensor):
                self.tuple_out.add(n.name)
        return out


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _to_graph(gm: fx.GraphModule, rec: _Recorder, name: str, cost: str) -> Graph:
    g = Graph(name=name)
    derived: set[str] = set()      # fx nodes whose value depends on a model input
    alias: dict[str, str] = {}     # fx node -> the remat node holding its value
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            derived.add(n.name)
        elif n.op == "output":
            outs = [alias[a.name] for a in n.all_input_nodes if a.name in alias]
            if not outs:
                raise InputError(f"{name}: the model's output does not depend on its inputs")
            g.add_node("loss", mem=4, cost=1, inputs=dict.fromkeys(outs), op="loss")
        elif n.op.startswith("call_") and any(a.name in derived for a in n.all_input_nodes):
            derived.add(n.name)
            if n.name not in rec.bytes:
                continue  # shape arithmetic: no tensor, no node
            producer = n.all_input_nodes[0].name if n.all_input_nodes else None
            if n.target is operator.getitem and producer in rec.tuple_out:
                alias[n.name] = alias[producer]  # picking one tensor of a multi-output op
                continue
            inputs = dict.fromkeys(alias[a.name] for a in n.all_input_nodes if a.name in alias)
            op = _op_name(gm, n)
            g.add_node(n.name, mem=rec.bytes[n.name], cost=_cost(op, n.name, rec, cost),
                       inputs=inputs, op=op)
            alias[n.name] = n.name
    g.validate()
    return g


def _op_name(gm: fx.GraphModule, n: fx.Node) -> str:
    if n.op == "call_module":
        module = gm.get_submodule(n.target)
        for types, op in _MODULE_OPS:
            if isinstance(module, types):
                return op
        return type(module).__name__.lower()
    target = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target))
    target = target.strip("_")
    return _FUNCTION_OPS.get(target, target)


def _cost(op: str, node: str, rec: _Recorder, cost: str) -> float:
    if cost == "paper":
        return CONV_COST if op == "conv" else 1
    return rec.flops.get(node) or rec.numel[node]
