"""Small real models for the runtime tests and the runtime benchmark.

Each ``build_*`` returns ``(model, inputs)`` with fixed seeds, sized so that one training step
takes milliseconds on one CPU core yet activations dominate memory. Outputs are small heads
(logits), as in real training, so the loss's gradient seed is a minor part of the peak.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn


class SkipCNN(nn.Module):
    """Conv-BN-ReLU blocks with identity skips (in-place add and ReLU, as torchvision writes them)."""

    def __init__(self, channels: int = 8, blocks: int = 3, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU())
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels),
                          nn.ReLU(inplace=True), nn.Conv2d(channels, channels, 3, padding=1, bias=False),
                          nn.BatchNorm2d(channels))
            for _ in range(blocks))
        self.head = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for b in self.blocks:
            y = b(x)
            y += x
            x = torch.relu_(y)
        return self.head(x.mean((2, 3)))


class TransformerBlock(nn.Module):
    """Pre-norm self-attention + MLP block with dropout, followed by a small head."""

    def __init__(self, dim: int = 32, heads: int = 2, p: float = 0.2, classes: int = 4) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, dropout=p, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Dropout(p), nn.Linear(4 * dim, dim))
        self.drop = nn.Dropout(p)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.drop(self.attn(h, h, h, need_weights=False)[0])
        x = x + self.drop(self.mlp(self.ln2(x)))
        return self.head(x)


class DeepMLP(nn.Module):
    def __init__(self, dim: int = 64, depth: int = 12, classes: int = 4) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(dim, dim) for _ in range(depth))
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return self.head(x)


class ResidualNet(nn.Module):
    """``blocks`` residual blocks x + W2 relu(W1 x): the 1000-layer-ResNet shape of seed 002 §5."""

    def __init__(self, dim: int = 32, blocks: int = 50, classes: int = 4) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))
                                    for _ in range(blocks))
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = x + b(x)
        return self.head(x)


class MLPBlock(nn.Module):
    """A residual MLP block: the unit FSDP2 shards, and torch.compile compiles, one by one."""

    def __init__(self, inner: int = 256) -> None:
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(64), nn.Linear(64, inner), nn.Linear(inner, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class MLPBlocks(nn.Module):
    """``MLPBlock``s (three alike by default) between an input and an output projection (16 -> 64 -> 4
    features)."""

    def __init__(self, inners: tuple[int, ...] = (256, 256, 256)) -> None:
        super().__init__()
        self.inp, self.out = nn.Linear(16, 64), nn.Linear(64, 4)
        self.blocks = nn.ModuleList(MLPBlock(n) for n in inners)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.out(x)


def build_cnn(batch: int = 4) -> tuple[nn.Module, Any]:
    torch.manual_seed(0)
    return SkipCNN(), (torch.randn(batch, 3, 12, 12),)


def build_transformer(batch: int = 4) -> tuple[nn.Module, Any]:
    torch.manual_seed(0)
    return TransformerBlock(), (torch.randn(batch, 16, 32),)


def build_mlp(batch: int = 64) -> tuple[nn.Module, Any]:
    torch.manual_seed(0)
    return DeepMLP(), (torch.randn(batch, 64),)


def build_gpt2(batch: int = 4) -> tuple[nn.Module, Any]:
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    logging.set_verbosity_error()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=100, n_positions=32))
    ids = torch.randint(0, 100, (batch, 16))
    return model, {"input_ids": ids, "use_cache": False}


def build_residual(batch: int = 64, blocks: int = 50) -> tuple[nn.Module, Any]:
    torch.manual_seed(0)
    return ResidualNet(blocks=blocks), (torch.randn(batch, 32),)


MODELS: dict[str, Callable[..., tuple[nn.Module, Any]]] = {
    "cnn": build_cnn, "transformer": build_transformer, "mlp": build_mlp, "gpt2": build_gpt2,
}
