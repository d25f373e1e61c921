"""Non-convolutional nets of the papers: seed 004's feed-forward net and Transformer, and seed
002's unrolled LSTM.

- ``FFN`` (seed 004 §4, "a simple feed-forward neural network with ReLU activations"): ``depth``
  hidden Linear+ReLU layers of ``width`` units and a linear output layer.
- ``Transformer`` (seed 004 Table 2, the official TensorFlow Transformer): encoder-decoder with
  pre-layer-norm residual blocks, as that implementation; embeddings shared between source,
  target and the output projection; explicit attention ops (linear projections, matmul, softmax)
  so the captured graph shows them. "base": d=512, 8 heads, 2048 filter, 6+6 layers; "big":
  d=1024, 16 heads, 4096 filter.
- ``LSTM`` (seed 002 §5.3): four layers of 1024 units unrolled over 64 steps, 50 inputs per step,
  a 5000-way output at every step. Each step of each layer is its own cell call on explicit
  gate ops, so tracing yields the unrolled graph rather than one fused LSTM op.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..errors import InputError

# ---- FFN -------------------------------------------------------------------------------------


class FFN(nn.Module):
    def __init__(self, depth: int = 100, width: int = 512, in_features: int | None = None,
                 out_features: int | None = None) -> None:
        super().__init__()
        if depth < 1:
            raise InputError(f"ffn depth (hidden layers) must be at least 1, got {depth}")
        in_features = in_features or width
        layers: list[nn.Module] = []
        for i in range(depth):
            layers += [nn.Linear(in_features if i == 0 else width, width), nn.ReLU()]
        layers.append(nn.Linear(width, out_features or width))
        self.layers = nn.Sequential(*layers)
        self.in_features = in_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


# ---- Transformer -----------------------------------------------------------------------------

TRANSFORMER_SIZES = {
    "base": dict(d_model=512, heads=8, d_ff=2048, layers=6),
    "big": dict(d_model=1024, heads=16, d_ff=4096, layers=6),
}


class Attention(nn.Module):
    def __init__(self, d_model: int, heads: int, dropout: float, causal: bool, seq_len: int) -> None:
        super().__init__()
        self.heads, self.d_head = heads, d_model // heads
        self.q = nn.Linear(d_model, d_model, bias=False)
        self.k = nn.Linear(d_model, d_model, bias=False)
        self.v = nn.Linear(d_model, d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)
        self.softmax = nn.Softmax(dim=-1)
        self.dropout = nn.Dropout(dropout)
        self.causal = causal
        if causal:
            mask = torch.full((seq_len, seq_len), float("-inf")).triu(1)
            self.register_buffer("mask", mask, persistent=False)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        # unflatten/flatten need no shape arithmetic, so tracing records one op each.
        return x.unflatten(-1, (self.heads, self.d_head)).transpose(1, 2)

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(self.q(x)), self._split(self.k(memory)), self._split(self.v(memory))
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.d_head))
        if self.causal:
            scores = scores + self.mask
        ctx = torch.matmul(self.dropout(self.softmax(scores)), v)
        return self.out(ctx.transpose(1, 2).flatten(2))


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.relu = nn.ReLU()
        self.dropout = nn.Dropout(dropout)
        self.fc2 = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.dropout(self.relu(self.fc1(x))))


class EncoderLayer(nn.Module):
    def __init__(self, d_model: int, heads: int, d_ff: int, dropout: float, seq_len: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, heads, dropout, causal=False, seq_len=seq_len)
        self.drop1 = nn.Dropout(dropout)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.drop2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.drop1(self.attn(h, h))
        return x + self.drop2(self.ff(self.norm2(x)))


class DecoderLayer(nn.Module):
    def __init__(self, d_model: int, heads: int, d_ff: int, dropout: float, seq_len: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.self_attn = Attention(d_model, heads, dropout, causal=True, seq_len=seq_len)
        self.drop1 = nn.Dropout(dropout)
        self.norm2 = nn.LayerNorm(d_model)
        self.cross_attn = Attention(d_model, heads, dropout, causal=False, seq_len=seq_len)
        self.drop2 = nn.Dropout(dropout)
        self.norm3 = nn.LayerNorm(d_model)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.drop3 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.drop1(self.self_attn(h, h))
        x = x + self.drop2(self.cross_attn(self.norm2(x), memory))
        return x + self.drop3(self.ff(self.norm3(x)))


def _positional_encoding(seq_len: int, d_model: int) -> torch.Tensor:
    """The sinusoid of Vaswani et al., sines then cosines as in the TensorFlow implementation."""
    pos = torch.arange(seq_len, dtype=torch.float32)[:, None]
    inv = torch.exp(torch.arange(d_model // 2, dtype=torch.float32) * (-math.log(1e4) / max(d_model // 2 - 1, 1)))
    return torch.cat([torch.sin(pos * inv), torch.cos(pos * inv)], 1)


class Transformer(nn.Module):
    """Encoder-decoder Transformer; ``forward(src, tgt)`` takes token ids, returns logits."""

    def __init__(self, size: str = "base", vocab: int = 33708, seq_len: int = 256, dropout: float = 0.1,
                 layers: int | None = None) -> None:
        super().__init__()
        if size not in TRANSFORMER_SIZES:
            raise InputError(f"transformer size must be one of {sorted(TRANSFORMER_SIZES)}, got {size!r}")
        cfg = dict(TRANSFORMER_SIZES[size])
        if layers is not None:
            cfg["layers"] = layers
        d, self.vocab, self.seq_len = cfg["d_model"], vocab, seq_len
        self.embedding = nn.Embedding(vocab, d)
        self.scale = math.sqrt(d)
        self.register_buffer("pos", _positional_encoding(seq_len, d), persistent=False)
        self.src_drop = nn.Dropout(dropout)
        self.tgt_drop = nn.Dropout(dropout)
        args = (d, cfg["heads"], cfg["d_ff"], dropout, seq_len)
        self.encoder = nn.ModuleList([EncoderLayer(*args) for _ in range(cfg["layers"])])
        self.decoder = nn.ModuleList([DecoderLayer(*args) for _ in range(cfg["layers"])])
        self.enc_norm = nn.LayerNorm(d)
        self.dec_norm = nn.LayerNorm(d)

    def _embed(self, tokens: torch.Tensor, drop: nn.Module) -> torch.Tensor:
        return drop(self.embedding(tokens) * self.scale + self.pos)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        memory = self._embed(src, self.src_drop)
        for layer in self.encoder:
            memory = layer(memory)
        memory = self.enc_norm(memory)
        x = self._embed(tgt, self.tgt_drop)
        for layer in self.decoder:
            x = layer(x, memory)
        # The output projection reuses the embedding matrix, as the TensorFlow model does.
        return torch.matmul(self.dec_norm(x), self.embedding.weight.t())


# ---- LSTM ------------------------------------------------------------------------------------


class LSTMCell(nn.Module):
    """One LSTM step on explicit gate ops. ``state=None`` is the zero state (first step): its
    recurrent term is just the bias and its forget term vanishes, so neither is computed."""

    def __init__(self, in_features: int, hidden: int) -> None:
        super().__init__()
        self.ih = nn.Linear(in_features, 4 * hidden)
        self.hh = nn.Linear(hidden, 4 * hidden)

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None):
        gates = self.ih(x) + (self.hh.bias if state is None else self.hh(state[0]))
        i, f, g, o = gates.chunk(4, 1)
        c = torch.sigmoid(i) * torch.tanh(g)
        if state is not None:
            c = torch.sigmoid(f) * state[1] + c
        return torch.sigmoid(o) * torch.tanh(c), c


class LSTM(nn.Module):
    """``forward(x)`` with x of shape (batch, steps, in_features) -> (batch, steps, classes)."""

    def __init__(self, layers: int = 4, hidden: int = 1024, steps: int = 64, in_features: int = 50,
                 classes: int = 5000) -> None:
        super().__init__()
        self.steps, self.in_features = steps, in_features
        self.cells = nn.ModuleList([LSTMCell(in_features if i == 0 else hidden, hidden) for i in range(layers)])
        self.out = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        states: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * len(self.cells)
        outputs = []
        for t in range(self.steps):
            h = x[:, t]
            for layer, cell in enumerate(self.cells):
                states[layer] = cell(h, states[layer])
                h = states[layer][0]
            outputs.append(self.out(h))
        return torch.stack(outputs, 1)
