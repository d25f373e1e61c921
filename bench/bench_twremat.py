"""Seed 004 benchmarks: TWRemat speed and treewidths (Table 1), peak memory and schedule length
vs depth for NoRemat, GreedyRemat and TWRemat (Figures 2 and 3).

    .venv/bin/python bench/bench_twremat.py [--quick]

writes bench/results/twremat_speed.json, twremat_figures.json and twremat_figures.png.

The graphs: ``remat.zoo`` paper-network graph generators if present, else the private
generators below, written in the granularity of a TensorFlow training graph (seed 004 used
TF's official ResNet and Transformer): parameter reads (mem 0: parameters are always in memory),
batch norm as its primitive ops in training mode with its moving-average updates, L2 weight
decay per weight. Unit cost per op, as in seed 004 §4. Memory: float32 tensor bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

import remat  # noqa: E402
from remat.graph import Graph  # noqa: E402
from remat.joint import joint_graph  # noqa: E402

F32 = 4


class _Builder:
    """Adds ops with fresh ids; accumulates the weight-decay sum."""

    def __init__(self, name: str):
        self.g = Graph(name=name)
        self.n = 0
        self.decay: str | None = None

    def op(self, kind: str, mem: float, inputs: list[str]) -> str:
        self.n += 1
        node = f"{kind}{self.n}"
        self.g.add_node(node, mem, 1, inputs, op=kind)
        return node

    def param(self, shape_bytes: float) -> str:
        """A parameter read, plus its L2 weight-decay term added to the running sum."""
        w = self.op("read", 0, [])
        l2 = self.op("l2loss", F32, [w])
        self.decay = l2 if self.decay is None else self.op("add", F32, [self.decay, l2])
        return w

    def batchnorm(self, x: str, act: float, ch: int, relu: bool) -> str:
        vec = ch * F32
        gamma, beta, mmean, mvar = (self.op("read", 0, []) for _ in range(4))
        mean = self.op("mean", vec, [x])
        sg = self.op("stopgrad", vec, [mean])
        sq = self.op("sqdiff", act, [x, sg])
        var = self.op("mean", vec, [sq])
        rs = self.op("rsqrt", vec, [self.op("add", vec, [var])])
        scale = self.op("mul", vec, [rs, gamma])
        xs = self.op("mul", act, [x, scale])
        shift = self.op("sub", vec, [beta, self.op("mul", vec, [mean, scale])])
        out = self.op("add", act, [xs, shift])
        for moving, stat in ((mmean, mean), (mvar, var)):  # moving averages: side effects, sinks
            d = self.op("sub", vec, [moving, stat])
            self.op("assign_sub", vec, [moving, self.op("mul", vec, [d])])
        return self.op("relu", act, [out]) if relu else out


def resnet_graph(blocks: tuple[int, ...] = (3, 24, 36, 3), batch: int = 32, name: str = "resnet200") -> Graph:
    """Bottleneck ResNet for ImageNet (He et al.): ResNet200 is blocks (3, 24, 36, 3)."""
    b = _Builder(name)

    def unit(x: str, cin: int, cout: int, hw: int, k: int, relu: bool = True) -> str:
        w = b.param(cin * cout * k * k * F32)
        act = batch * cout * hw * hw * F32
        y = b.op("conv", act, [x, w])
        return b.batchnorm(y, act, cout, relu)

    x = b.op("input", batch * 3 * 224 * 224 * F32, [])
    x = unit(x, 3, 64, 112, 7)
    x = b.op("maxpool", batch * 64 * 56 * 56 * F32, [x])
    cin, hw = 64, 56
    for stage, nblocks in enumerate(blocks):
        width = 64 * 2 ** stage
        for i in range(nblocks):
            if i == 0 and stage > 0:
                hw //= 2
            cout = 4 * width
            h = unit(x, cin, width, hw, 1)
            h = unit(h, width, width, hw, 3)
            h = unit(h, width, cout, hw, 1, relu=False)
            short = unit(x, cin, cout, hw, 1, relu=False) if i == 0 else x
            act = batch * cout * hw * hw * F32
            x = b.op("relu", act, [b.op("add", act, [h, short])])
            cin = cout
    x = b.op("avgpool", batch * cin * F32, [x])
    logits = b.op("biasadd", batch * 1000 * F32, [b.op("matmul", batch * 1000 * F32, [x, b.param(0)]), b.param(0)])
    xent = b.op("xent", batch * F32, [logits, b.op("labels", batch * F32, [])])
    b.op("add", F32, [b.op("mean", F32, [xent]), b.decay])
    return b.g


def ffn_graph(layers: int = 100, width: int = 1024, batch: int = 256, name: str | None = None) -> Graph:
    """Feed-forward network with ReLU, mean squared error loss (seed 004 §4 (ii))."""
    b = _Builder(name or f"ffn{layers}")
    act = batch * width * F32
    x = b.op("input", act, [])
    for _ in range(layers):
        x = b.op("relu", act, [b.op("biasadd", act, [b.op("matmul", act, [x, b.param(0)]), b.param(0)])])
    y = b.op("biasadd", act, [b.op("matmul", act, [x, b.param(0)]), b.param(0)])
    sq = b.op("sqdiff", act, [y, b.op("labels", act, [])])
    b.op("add", F32, [b.op("mean", F32, [sq]), b.decay])
    return b.g


def transformer_graph(layers: int = 6, d: int = 512, heads: int = 8, ff: int = 2048, batch: int = 32,
                      length: int = 256, vocab: int = 32000, name: str = "transformer-base") -> Graph:
    """Transformer base (Vaswani et al.): 6+6 layers, d 512, 8 heads, ffn 2048, dropout."""
    b = _Builder(name)
    act, score = batch * length * d * F32, batch * heads * length * length * F32

    def layernorm(x: str) -> str:
        vec = batch * length * F32
        gamma, beta = b.op("read", 0, []), b.op("read", 0, [])
        mean = b.op("mean", vec, [x])
        var = b.op("mean", vec, [b.op("sqdiff", act, [x, mean])])
        rs = b.op("rsqrt", vec, [b.op("add", vec, [var])])
        y = b.op("mul", act, [b.op("sub", act, [x, mean]), rs])
        return b.op("add", act, [b.op("mul", act, [y, gamma]), beta])

    def proj(x: str, dout: int) -> str:
        return b.op("matmul", batch * length * dout * F32, [x, b.param(0)])

    def attention(x: str, memory: str) -> str:
        q = b.op("split_heads", act, [proj(x, d)])
        k = b.op("split_heads", act, [proj(memory, d)])
        v = b.op("split_heads", act, [proj(memory, d)])
        s = b.op("add", score, [b.op("scale", score, [b.op("matmul", score, [q, k])]), b.op("bias", score, [])])
        p = b.op("dropout", score, [b.op("softmax", score, [s])])
        o = b.op("combine_heads", act, [b.op("matmul", act, [p, v])])
        y = b.op("dropout", act, [proj(o, d)])
        return layernorm(b.op("add", act, [x, y]))

    def feedforward(x: str) -> str:
        h = b.op("dropout", batch * length * ff * F32,
                 [b.op("relu", batch * length * ff * F32, [b.op("biasadd", batch * length * ff * F32, [proj(x, ff), b.param(0)])])])
        y = b.op("dropout", act, [b.op("biasadd", act, [proj(h, d), b.param(0)])])
        return layernorm(b.op("add", act, [x, y]))

    emb = b.param(0)
    enc = b.op("dropout", act, [b.op("add", act, [b.op("gather", act, [emb]), b.op("posenc", act, [])])])
    for _ in range(layers):
        enc = feedforward(attention(enc, enc))
    dec = b.op("dropout", act, [b.op("add", act, [b.op("gather", act, [emb]), b.op("posenc", act, [])])])
    for _ in range(layers):
        dec = feedforward(attention(attention(dec, dec), enc))
    logits = b.op("matmul", batch * length * vocab * F32, [dec, emb])
    xent = b.op("xent", batch * length * F32, [logits, b.op("labels", batch * length * F32, [])])
    b.op("add", F32, [b.op("mean", F32, [xent]), b.decay])
    return b.g
