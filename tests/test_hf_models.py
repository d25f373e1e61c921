"""Hugging Face models as they come: GPT-2, Llama, BERT, T5 and ViT built from small configs and
called with their default arguments (``use_cache`` as the config has it, dropout on), through
``remat.optimize``: loss and every gradient equal to eager (``torch.equal``), the cache a
training step never reads dropped and reported.

T5 ties one weight to three uses (encoder and decoder embeddings, LM head): the planned step
sums its gradient in eager's order because the model's parameters enter the traced step once
each (``compiled.module._Flat``).
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

import remat

transformers = pytest.importorskip("transformers")

V = 64


def _build(name: str):
    torch.manual_seed(0)
    ids = torch.randint(0, V, (2, 16))
    t = transformers
    if name == "gpt2":
        model = t.GPT2LMHeadModel(t.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=V, n_positions=32,
                                               bos_token_id=0, eos_token_id=0))
        return model, {"input_ids": ids, "labels": ids}
    if name == "llama":
        model = t.LlamaForCausalLM(t.LlamaConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64,
                                                 num_attention_heads=4, num_key_value_heads=2, vocab_size=V))
        return model, {"input_ids": ids, "labels": ids}
    if name == "bert":
        model = t.BertForMaskedLM(t.BertConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64,
                                               num_attention_heads=2, vocab_size=V, max_position_embeddings=32))
        return model, {"input_ids": ids, "labels": ids}
    if name == "t5":
        model = t.T5ForConditionalGeneration(t.T5Config(num_layers=2, num_decoder_layers=2, d_model=32, d_ff=64,
                                                        d_kv=16, num_heads=2, vocab_size=V, decoder_start_token_id=0,
                                                        pad_token_id=0))
        return model, {"input_ids": ids, "labels": ids}
    assert name == "vit"
    model = t.ViTForImageClassification(t.ViTConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64,
                                                    num_attention_heads=2, image_size=16, patch_size=4, num_labels=3))
    return model, {"pixel_values": torch.randn(2, 3, 16, 16), "labels": torch.tensor([0, 2])}


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert", "t5", "vit"])
def test_hf_model_as_it_comes(name):
    model, inputs = _build(name)
    model.train()
    ref = copy.deepcopy(model)
    module = remat.optimize(model, inputs, "70%", solver="chen-greedy", verify=False)
    assert module.report["recomputed_ops"] > 0, "the plan must recompute something to test anything"
    torch.manual_seed(1)
    out = module(**inputs)
    out.loss.backward()
    torch.manual_seed(1)
    expected = ref(**inputs)
    expected.loss.backward()
    assert torch.equal(out.loss, expected.loss)
    assert torch.equal(out.logits, expected.logits)
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        assert (p.grad is None) == (q.grad is None), n
        assert p.grad is None or torch.equal(p.grad, q.grad), n
    if getattr(model.config, "use_cache", False) and name != "bert":
        assert all(out.get(name) is None for name in ("cache", "past_key_values"))  # renamed in transformers 5.24
        assert module.report.get("dropped_outputs") in (["cache"], ["past_key_values"])


def test_a_model_that_checkpoints_itself_is_planned_in_place_of_it_and_says_so():
    """With transformers' gradient checkpointing on, the vanilla step is already checkpointed:
    remat traces through ``torch.utils.checkpoint`` and plans the step's ops in its place, with
    eager's gradients. The report says so, and a percentage it refuses names how to turn the
    model's own checkpointing off (a byte budget's refusal has nothing to add)."""
    from remat.optimize import own_checkpointing

    model, inputs = _build("llama")
    model.train()
    off = "activation" if hasattr(model, "activation_checkpointing_disable") else "gradient"  # the newer name
    getattr(model, f"{off}_checkpointing_enable")()
    ref = copy.deepcopy(model)
    with warnings.catch_warnings(record=True) as caught:  # its embeddings' hook is in the trace: not warned of
        warnings.simplefilter("always")
        module = remat.optimize(model, inputs, "90%")
    assert not any("module hooks" in str(w.message) for w in caught)
    assert any("_checkpointing_enable()" in note for note in module.report.notes)
    torch.manual_seed(1)
    module(**inputs).loss.backward()
    torch.manual_seed(1)
    ref(**inputs).loss.backward()
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters()))
    with pytest.raises(remat.errors.InfeasibleError, match=rf"call model\.{off}_checkpointing_disable\(\) first"):
        remat.optimize(model, inputs, "5%", solver="chen-greedy")
    with pytest.raises(remat.errors.InfeasibleError) as refused:
        remat.optimize(model, inputs, 4096, solver="chen-greedy")
    assert "checkpoint" not in str(refused.value)
    getattr(model, f"{off}_checkpointing_disable")()
    timm_like = torch.nn.Sequential(torch.nn.Linear(2, 2))
    assert own_checkpointing(model) is None and own_checkpointing(timm_like) is None
    timm_like.grad_checkpointing = True  # what timm's set_grad_checkpointing() sets
    assert own_checkpointing(timm_like) == ("timm's set_grad_checkpointing()", "model.set_grad_checkpointing(False)")


def test_a_multimodal_model_that_checks_its_inputs_values_is_planned():
    """LLaVA checks that the image tokens in ``input_ids`` match the image features, a condition on
    tensor values a fake-tensor trace cannot read: capture refused it as data-dependent. The
    trace skips transformers' checks (its own switch), eager runs them: gradients equal eager's.
    Its vision tower's own outputs, nested in the model's, are planned without a gradient path as
    its logits are: the vision layer after the feature layer (-2) gets no gradient, as in eager
    (it got zeros, which an optimizer's weight decay then applies)."""
    t = transformers
    torch.manual_seed(0)
    vision = t.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                image_size=16, patch_size=8)
    text = t.LlamaConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=V)
    model = t.LlavaForConditionalGeneration(t.LlavaConfig(vision_config=vision, text_config=text, image_token_index=V - 1,
                                                          vision_feature_select_strategy="full")).train()
    ids = torch.randint(0, V - 1, (2, 12))
    ids[:, 1:6] = V - 1  # one image: 4 patches and the class token
    inputs = {"input_ids": ids, "pixel_values": torch.randn(2, 3, 16, 16), "labels": ids}
    ref = copy.deepcopy(model)
    module = remat.optimize(model, inputs, "70%", solver="chen-greedy", verify=False)
    assert module.report["recomputed_ops"] > 0
    torch.manual_seed(1)
    module(**inputs).loss.backward()
    torch.manual_seed(1)
    ref(**inputs).loss.backward()
    assert all((p.grad is None and q.grad is None) or torch.equal(p.grad, q.grad)
               for p, q in zip(model.parameters(), ref.parameters()))
    assert all(p.grad is None for n, p in model.named_parameters() if "vision_tower" in n and "layers.0" in n)
    with pytest.raises(remat.errors.StepError, match="`image_outputs` output"):
        module(**inputs).image_outputs.last_hidden_state.sum().backward()
