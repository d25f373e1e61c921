"""Hugging Face inputs read as eager transformers reads them, for a step traced with fake tensors.

(Also: transformers' value checks on inputs, skipped in the trace, ``unchecked_values``.)

Eager transformers looks at the values of some inputs and, when they allow it, runs attention
without a mask (``is_causal`` scaled-dot-product attention). Traced, it cannot read values and
builds the mask: another kernel path, a mask per layer saved for the backward (1 MiB in all on a
4-layer Llama, batch 4, sequence 128: the no-recomputation step then needed more than eager's),
and other rounding. Here, the values are read once on the real inputs, the trace is told the
answer, and the answer is part of the plan's key.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
from typing import Any, Iterator

import torch
from torch import nn


def plain_mask(model: nn.Module, kwargs: dict) -> dict:
    """A Hugging Face model's all-ones ``attention_mask`` (what a tokenizer returns for a batch
    without padding) given as None, which the model reads the same way.

    Eager transformers checks the mask's values and, when it is all ones, runs attention without
    it; traced, it always applies the mask, which rounds differently: on a tiny Qwen2 the
    gradients were 3e-7 apart in fp32 and 0.9% under bf16 autocast. Given None, the traced step
    runs eager's own path, and a batch with padding is planned as a signature of its own."""
    mask = kwargs.get("attention_mask")
    if (not isinstance(mask, torch.Tensor) or mask.dim() != 2 or mask.is_floating_point()
            or not type(model).__module__.startswith("transformers.")):
        return kwargs
    try:
        default = inspect.signature(model.forward).parameters["attention_mask"].default
    except (KeyError, TypeError, ValueError):
        return kwargs
    if default is not None or not bool(mask.all()):
        return kwargs
    return {**kwargs, "attention_mask": None}


def _masking_utils() -> Any:
    """transformers' mask module, if the process has imported transformers (never imported here)."""
    if "transformers" not in sys.modules:
        return None
    try:
        import transformers.masking_utils as mu
    except ImportError:
        return None
    return mu if hasattr(mu, "find_packed_sequence_indices") else None


def packed_positions(kwargs: dict) -> bool:
    """Whether the ``position_ids`` given mark packed sequences (several sequences in one row),
    as eager transformers decides it: part of a plan's key, since the trace follows the answer.
    No ``position_ids``: False (the model counts 0, 1, 2, ... itself). Call it outside tracing:
    transformers answers "packed" whenever it believes it is compiled."""
    pos = kwargs.get("position_ids")
    mu = _masking_utils()
    if mu is None or not isinstance(pos, torch.Tensor) or pos.dim() != 2:
        return False
    return mu.find_packed_sequence_indices(pos) is not None


@contextlib.contextmanager
def eager_positions(packed: bool) -> Iterator[None]:
    """While tracing, transformers' packed-sequence check answers ``packed``, as eager does on the
    real inputs (``packed_positions``).

    Without an attention mask, in training, transformers looks at the position ids for packed
    sequences and, finding none, lets attention run ``is_causal`` without a mask. On fake tensors
    the check cannot read them and always finds packing, so each layer would build and save a
    mask. When the real position ids are not packed (or the model makes its own), the check is
    answered "not packed" for the trace."""
    mu = _masking_utils()
    if mu is None or packed:
        yield
        return
    original = mu.find_packed_sequence_indices
    mu.find_packed_sequence_indices = _not_packed
    try:
        yield
    finally:
        mu.find_packed_sequence_indices = original


def _not_packed(position_ids: torch.Tensor) -> None:
    """``find_packed_sequence_indices`` for position ids known not to be packed."""
    return None


@contextlib.contextmanager
def unchecked_values() -> Iterator[None]:
    """While tracing, transformers' ``torch_compilable_check`` is off (its own switch,
    ``TRANSFORMERS_DISABLE_TORCH_CHECK=1``, read at each check).

    Why: multimodal models check tensor conditions on the inputs (LLaVA: the image tokens in
    ``input_ids`` against the image features), which a trace on fake tensors cannot read, so
    capture refused every such model (data-dependent). The check guards the inputs, not the
    computation: eager runs it on the real inputs (``remat.optimize``'s measured vanilla step, and
    every evaluation call)."""
    from unittest import mock

    with mock.patch.dict(os.environ, {"TRANSFORMERS_DISABLE_TORCH_CHECK": "1"}):
        yield
