"""remat's ``blocks`` plan against transformers' own per-block checkpointing, measured.

``gradient_checkpointing_enable()`` wraps each GPT-2 block in ``torch.utils.checkpoint``; the
``blocks`` solver is the same plan made by remat (solvers/blocks.py). On one small GPT-2 with
default dropout, both are measured on the same inputs (CPU allocator level, ``remat.measure``
method "profiler", which counts the generator states ``torch.utils.checkpoint`` saves) and
remat's plan, given transformers' measured peak as its budget, must fit and measure no higher,
with the same loss and gradients as the plain step. The vocabulary is large enough for the step
to peak in the loss's backward, as the benchmark's GPT-2 does: there, before the solver trimmed
the values outside the blocks (``trim_outside``), its plan peaked above transformers' (3,349,632
bytes against 3,321,272: the causal mask the traced model materialized, and a generator state
per dropout rather than per block) and the budget was refused; trimmed it measured 3,246,664.
Since the trace runs eager's unmasked attention (``hf_inputs``) and the loss's log-softmax
gradient is written over the incoming one (``compiled.inplace``), the untrimmed plan measures
2,293,900 (trimming is tested on hand-sized graphs in ``test_frontier``).
"""

from __future__ import annotations

import copy

import pytest
import torch

import remat
from remat.measure import measure

transformers = pytest.importorskip("transformers")


def _gpt2():
    from transformers.utils import logging

    logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=2048, n_positions=64)
    model = transformers.GPT2LMHeadModel(cfg).train()
    ids = torch.randint(0, cfg.vocab_size, (2, 64), generator=torch.Generator().manual_seed(0))
    return model, {"input_ids": ids, "labels": ids, "use_cache": False}


def _step(model, inputs, seed: int = 1):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    loss = model(**inputs).loss
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def test_blocks_plan_measures_no_higher_than_transformers_per_block_checkpointing():
    model, inputs = _gpt2()
    hf = copy.deepcopy(model)
    if hasattr(hf, "activation_checkpointing_enable"):  # gradient_checkpointing_enable, renamed
        hf.activation_checkpointing_enable()
    else:
        hf.gradient_checkpointing_enable()
    peer = measure(hf, inputs, method="profiler").peak

    planned = remat.optimize(model, inputs, peer, solver="blocks")
    plan = planned.plan
    assert plan.solver == "blocks" and plan.feasible and plan.stats["checkpointed"] == 2
    assert plan.peak <= peer
    ours = measure(planned, inputs, method="profiler").peak
    assert ours <= peer, f"remat blocks measured {ours} bytes, transformers per-block {peer}"
    assert measure(planned, inputs, method="tracker").peak <= peer

    # the same step: dropout replays its draws, so loss and gradients equal the plain model's
    loss, grads = _step(model, inputs)
    loss2, grads2 = _step(planned, inputs)
    assert torch.equal(loss, loss2) and all(torch.equal(a, b) for a, b in zip(grads, grads2))
