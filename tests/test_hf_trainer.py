"""Hugging Face Trainer with one line, ``remat.hf.enable(model, budget=...)``, and plain
TrainingArguments (no remove_unused_columns, no label_names): trains, evaluates (``eval_loss``),
saves; the loss curve and the final weights equal a plain Trainer run's, and the saved model
loads back with ``from_pretrained``."""

from __future__ import annotations

import pytest
import torch

import remat
import remat.hf

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # Trainer needs it

V = 64


def _train(tmp_path, name: str, use_remat: bool):
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=V, n_positions=32, bos_token_id=0, eos_token_id=0))
    if use_remat:
        model = remat.hf.enable(model, budget="60%")  # the one line
    g = torch.Generator().manual_seed(0)
    data = []
    for _ in range(16):
        ids = torch.randint(0, V, (16,), generator=g)
        data.append({"input_ids": ids, "labels": ids.clone()})
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / name), max_steps=4, per_device_train_batch_size=4, per_device_eval_batch_size=4,
        learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
        disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, eval_dataset=data[:8])
    trainer.train()
    metrics = trainer.evaluate()
    trainer.save_model(str(tmp_path / name / "final"))
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return model, metrics, losses


def test_trainer_one_line(tmp_path):
    model, metrics, losses = _train(tmp_path, "remat", use_remat=True)
    planned = remat.hf.planned(model)
    assert planned is not None, "the training steps did not run through remat"
    assert len(planned._steps) == 1  # one signature: planned once, not per step
    assert planned.report["recomputed_ops"] > 0
    assert planned.report["measured_peak"] <= planned.report["budget"] * 1.01
    assert "eval_loss" in metrics

    plain, plain_metrics, plain_losses = _train(tmp_path, "plain", use_remat=False)
    assert losses == plain_losses and len(losses) == 4
    assert metrics["eval_loss"] == plain_metrics["eval_loss"]
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), plain.parameters()))

    loaded = transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path / "remat" / "final"))
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), loaded.parameters()))


def test_enable_and_disable_keep_the_model():
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=1, n_embd=32, n_head=2, vocab_size=V, n_positions=32, bos_token_id=0, eos_token_id=0))
    own = type(model).forward
    enabled = remat.hf.enable(model, budget="100%")
    assert enabled is model and type(model).forward is own
    import inspect

    assert "labels" in inspect.signature(model.forward).parameters  # what Trainer's column filter reads
    ids = torch.randint(0, V, (2, 8))
    model.eval()
    with torch.no_grad():
        model(input_ids=ids)  # evaluation runs the model's own forward: nothing planned
    assert remat.hf.planned(model) is None
    remat.hf.disable(model)
    assert "forward" not in model.__dict__ and remat.hf.planned(model) is None
    with pytest.raises(remat.BudgetError):
        remat.hf.enable(model, budget="lots")
