"""A breadth check on architectures nobody here wrote: transformers models from small public
configs, with their default arguments (dropout included), planned by ``remat.optimize`` as a user
would call it, gradients compared with eager's bit for bit.

``ARCHITECTURES`` maps a name to the config class, the model class and the config fields that
make it small (4 layers or stages, width 64, vocabularies of 256, 64-pixel images); everything
else is the config's default. ``check(name, budget, dtype)`` plans one within ``budget``
(on a refusal, again within the budget the refusal names: remat's floor there), runs one step
of it and one of an untouched copy from the same RNG state, and reports measured peaks,
gradient equality, what was planned and how long planning took, and the peak of per-block
checkpointing (the library's own, else its residual blocks wrapped in ``torch.utils.checkpoint``).
``bench/bench_architectures.py`` runs them all.
"""

from __future__ import annotations

import contextlib
import copy
import re
import time
from typing import Any

import torch

from ..errors import InfeasibleError, InputError

_LM = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4, vocab_size=256)
_VISION = dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1], num_labels=2)
_VIT = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=128, image_size=64,
            patch_size=8, num_labels=2)

# name: (config class, model class, the fields that make it small, inputs: ``_inputs``'s kind)
ARCHITECTURES: dict[str, tuple[str, str, dict[str, Any], str]] = {
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {**_LM, "num_key_value_heads": 2}, "text"),
    "phi": ("PhiConfig", "PhiForCausalLM", _LM, "text"),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {**_LM, "head_dim": 16, "num_key_value_heads": 1}, "text"),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", _LM, "text"),
    "opt": ("OPTConfig", "OPTForCausalLM", {"hidden_size": 64, "ffn_dim": 128, "num_hidden_layers": 4,
                                            "num_attention_heads": 4, "vocab_size": 256,
                                            "word_embed_proj_dim": 64}, "text"),
    "falcon": ("FalconConfig", "FalconForCausalLM", {"hidden_size": 64, "num_hidden_layers": 4,
                                                     "num_attention_heads": 4, "vocab_size": 256}, "text"),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", {**_LM, "num_key_value_heads": 2, "num_local_experts": 4,
                                                        "num_experts_per_tok": 2}, "text"),
    "bert": ("BertConfig", "BertForMaskedLM", _LM, "text"),
    "roberta": ("RobertaConfig", "RobertaForMaskedLM", _LM, "text"),
    "distilbert": ("DistilBertConfig", "DistilBertForMaskedLM", {"dim": 64, "hidden_dim": 128, "n_layers": 4,
                                                                 "n_heads": 4, "vocab_size": 256}, "text"),
    "t5": ("T5Config", "T5ForConditionalGeneration", {"d_model": 64, "d_ff": 128, "num_layers": 2, "num_heads": 4,
                                                      "d_kv": 16, "vocab_size": 256, "decoder_start_token_id": 0,
                                                      "pad_token_id": 0}, "text"),
    "bart": ("BartConfig", "BartForConditionalGeneration", {
        "d_model": 64, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "encoder_layers": 2, "decoder_layers": 2,
        "encoder_attention_heads": 4, "decoder_attention_heads": 4, "vocab_size": 256}, "text"),
    # the second batch: newer decoders, mixtures of experts, shared layers (ALBERT), a state-space model (Mamba)
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {**_LM, "num_key_value_heads": 2, "head_dim": 16}, "text"),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", {
        **_LM, "num_key_value_heads": 2, "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
        "moe_intermediate_size": 64}, "text"),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {**_LM, "head_dim": 16, "num_key_value_heads": 2}, "text"),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", {**_LM, "head_dim": 16, "num_key_value_heads": 2}, "text"),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {**_LM, "pad_token_id": 0}, "text"),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", _LM, "text"),
    "starcoder2": ("Starcoder2Config", "Starcoder2ForCausalLM", {**_LM, "num_key_value_heads": 2}, "text"),
    "granite": ("GraniteConfig", "GraniteForCausalLM", _LM, "text"),
    "cohere": ("CohereConfig", "CohereForCausalLM", _LM, "text"),
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM", {**_LM, "num_key_value_heads": 2, "pad_token_id": 0}, "text"),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM", {
        **_LM, "num_key_value_heads": 2, "head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2}, "text"),
    "gptj": ("GPTJConfig", "GPTJForCausalLM", {"n_embd": 64, "n_layer": 4, "n_head": 4, "vocab_size": 256,
                                               "rotary_dim": 8}, "text"),
    "bloom": ("BloomConfig", "BloomForCausalLM", {"hidden_size": 64, "n_layer": 4, "n_head": 4, "vocab_size": 256},
              "text"),
    "gpt_bigcode": ("GPTBigCodeConfig", "GPTBigCodeForCausalLM", {"n_embd": 64, "n_layer": 4, "n_head": 4,
                                                                  "vocab_size": 256}, "text"),
    "mamba": ("MambaConfig", "MambaForCausalLM", {"hidden_size": 64, "num_hidden_layers": 4, "vocab_size": 256,
                                                  "state_size": 8}, "text"),
    "modernbert": ("ModernBertConfig", "ModernBertForMaskedLM", {**_LM, "pad_token_id": 0}, "text"),
    "electra": ("ElectraConfig", "ElectraForMaskedLM", {**_LM, "embedding_size": 64}, "text"),
    "albert": ("AlbertConfig", "AlbertForMaskedLM", {**_LM, "embedding_size": 32}, "text"),
    # the third batch: relative-position attention (XLNet, DeBERTa-v2: a dropped-out positional embedding
    # expanded over the batch, gathers whose bf16 backward scatters through an fp32 copy), MPNet, Funnel's pooling
    "xlnet": ("XLNetConfig", "XLNetLMHeadModel", {"d_model": 64, "d_inner": 128, "n_layer": 4, "n_head": 4,
                                                  "vocab_size": 256}, "text"),
    "deberta_v2": ("DebertaV2Config", "DebertaV2ForMaskedLM", {**_LM, "relative_attention": True,
                                                               "pos_att_type": ["p2c", "c2p"]}, "text"),
    "mpnet": ("MPNetConfig", "MPNetForMaskedLM", _LM, "text"),
    "funnel": ("FunnelConfig", "FunnelForMaskedLM", {"d_model": 64, "d_inner": 128, "n_head": 4, "d_head": 16,
                                                      "block_sizes": [1, 1], "vocab_size": 256}, "text"),
    "convnext": ("ConvNextConfig", "ConvNextForImageClassification", _VISION, "image"),
    "swin": ("SwinConfig", "SwinForImageClassification", {
        "image_size": 64, "patch_size": 2, "embed_dim": 32, "depths": [1, 1, 2, 1], "num_heads": [1, 2, 4, 8],
        "window_size": 4, "num_labels": 2}, "image"),
    "deit": ("DeiTConfig", "DeiTForImageClassification", {
        "image_size": 64, "patch_size": 8, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_labels": 2}, "image"),
    "dinov2": ("Dinov2Config", "Dinov2ForImageClassification", {
        "image_size": 64, "patch_size": 8, "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_labels": 2}, "image"),
    "mobilenet_v2": ("MobileNetV2Config", "MobileNetV2ForImageClassification", {
        "image_size": 64, "depth_multiplier": 0.35, "num_labels": 2}, "image"),
    "efficientnet": ("EfficientNetConfig", "EfficientNetForImageClassification", {
        "image_size": 64, "width_coefficient": 1.0, "depth_coefficient": 1.0, "hidden_dim": 1280,
        "num_labels": 2}, "image"),
    "regnet": ("RegNetConfig", "RegNetForImageClassification", _VISION, "image"),
    "segformer": ("SegformerConfig", "SegformerForImageClassification", {
        "hidden_sizes": [16, 32, 64, 128], "depths": [1, 1, 1, 1], "num_labels": 2, "decoder_hidden_size": 64},
        "image"),
    "convnextv2": ("ConvNextV2Config", "ConvNextV2ForImageClassification", _VISION, "image"),
    "beit": ("BeitConfig", "BeitForImageClassification", {
        "image_size": 64, "patch_size": 8, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_labels": 2}, "image"),
    "levit": ("LevitConfig", "LevitForImageClassification", {"image_size": 64, "num_labels": 2}, "image"),
    "poolformer": ("PoolFormerConfig", "PoolFormerForImageClassification", {
        "hidden_sizes": [16, 32, 64, 128], "depths": [1, 1, 2, 1], "num_labels": 2}, "image"),
    "swinv2": ("Swinv2Config", "Swinv2ForImageClassification", {
        "image_size": 64, "patch_size": 2, "embed_dim": 32, "depths": [1, 1, 2, 1], "num_heads": [1, 2, 4, 8],
        "window_size": 4, "num_labels": 2}, "image"),
    "mobilevit": ("MobileViTConfig", "MobileViTForImageClassification", {"image_size": 64, "num_labels": 2}, "image"),
    "hiera": ("HieraConfig", "HieraForImageClassification", {
        "image_size": [64, 64], "embed_dim": 32, "depths": [1, 1, 2, 1], "num_labels": 2}, "image"),
    # inputs of their own (``_inputs``): speech (log-mel features), image and text pairs, masked images
    "whisper": ("WhisperConfig", "WhisperForConditionalGeneration", {
        "d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
        "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "vocab_size": 256,
        "num_mel_bins": 16, "max_source_positions": 32, "max_target_positions": 32, "pad_token_id": 0,
        "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 1}, "speech"),
    "clip": ("CLIPConfig", "CLIPModel", {
        "text_config": {"vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                        "intermediate_size": 128, "max_position_embeddings": 32},
        "vision_config": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                          "intermediate_size": 128, "image_size": 32, "patch_size": 8},
        "projection_dim": 32}, "image-text"),
    "vit_mae": ("ViTMAEConfig", "ViTMAEForPreTraining", {
        "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
        "image_size": 32, "patch_size": 8, "decoder_hidden_size": 32, "decoder_num_hidden_layers": 1,
        "decoder_num_attention_heads": 4, "decoder_intermediate_size": 64}, "masked-image"),
    # a vision tower's patches as tokens of a language model: image tokens in the ids, checked by value
    "llava": ("LlavaConfig", "LlavaForConditionalGeneration", {
        "vision_config": {"model_type": "clip_vision_model", "hidden_size": 64, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "intermediate_size": 128, "image_size": 32, "patch_size": 8},
        "text_config": {"model_type": "llama", **_LM, "num_key_value_heads": 2},
        "image_token_index": 255}, "image-tokens"),
    # the fifth batch: 2025-26 designs. Latent attention with routed experts (DeepSeek-V3), state-space and
    # hybrid stacks (Mamba-2, Jamba, Bamba, Zamba2, LFM2's short convolutions), a gated delta net
    # (Qwen3-Next: a softplus whose gradient comes back laid out across its input), lightning attention
    # (MiniMax), per-layer inputs and AltUp (Gemma 3n), Llama 4's interleaved experts, GLM-4, DBRX
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM", {
        **_LM, "num_key_value_heads": 4, "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
        "first_k_dense_replace": 1, "kv_lora_rank": 16, "q_lora_rank": 32, "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 8, "v_head_dim": 16, "n_group": 1, "topk_group": 1}, "text"),
    "mamba2": ("Mamba2Config", "Mamba2ForCausalLM", {"hidden_size": 64, "num_hidden_layers": 4, "vocab_size": 256,
                                                    "state_size": 8, "num_heads": 8, "head_dim": 16, "n_groups": 1,
                                                    "chunk_size": 16}, "text"),
    "jamba": ("JambaConfig", "JambaForCausalLM", {
        **_LM, "num_key_value_heads": 2, "num_experts": 4, "num_experts_per_tok": 2, "mamba_d_state": 8,
        "attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2, "expert_layer_offset": 1}, "text"),
    "bamba": ("BambaConfig", "BambaForCausalLM", {
        **_LM, "num_key_value_heads": 2, "mamba_d_state": 8, "mamba_n_heads": 8, "mamba_d_head": 16,
        "mamba_chunk_size": 16, "attn_layer_indices": [1, 3]}, "text"),
    "zamba2": ("Zamba2Config", "Zamba2ForCausalLM", {
        **_LM, "num_key_value_heads": 4, "mamba_d_state": 8, "n_mamba_heads": 8, "mamba_ngroups": 1,
        "layers_block_type": ["mamba", "hybrid", "mamba", "hybrid"], "chunk_size": 16}, "text"),
    "lfm2": ("Lfm2Config", "Lfm2ForCausalLM", {**_LM, "num_key_value_heads": 2, "block_ff_dim": 128,
                                              "full_attn_idxs": [1, 3]}, "text"),
    "qwen3_next": ("Qwen3NextConfig", "Qwen3NextForCausalLM", {
        **_LM, "num_key_value_heads": 2, "head_dim": 16, "linear_num_value_heads": 4, "linear_num_key_heads": 2,
        "linear_key_head_dim": 16, "linear_value_head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
        "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32, "full_attention_interval": 2}, "text"),
    "minimax": ("MiniMaxConfig", "MiniMaxForCausalLM", {**_LM, "num_key_value_heads": 2, "head_dim": 16,
                                                       "num_local_experts": 2, "num_experts_per_tok": 1,
                                                       "block_size": 16}, "text"),
    "gemma3n": ("Gemma3nTextConfig", "Gemma3nForCausalLM", {
        **_LM, "num_key_value_heads": 2, "head_dim": 16, "hidden_size_per_layer_input": 16,
        "vocab_size_per_layer_input": 256, "num_kv_shared_layers": 0, "laurel_rank": 8,
        "activation_sparsity_pattern": None}, "text"),
    "llama4": ("Llama4TextConfig", "Llama4ForCausalLM", {**_LM, "intermediate_size_mlp": 128, "num_key_value_heads": 2,
                                                         "head_dim": 16, "num_local_experts": 2,
                                                         "num_experts_per_tok": 1}, "text"),
    "glm4": ("Glm4Config", "Glm4ForCausalLM", {**_LM, "num_key_value_heads": 2, "head_dim": 16, "pad_token_id": 0},
             "text"),
    "dbrx": ("DbrxConfig", "DbrxForCausalLM", {  # clip_qkv: the default (None) fails in eager (transformers 5.24)
        "d_model": 64, "n_heads": 4, "n_layers": 4, "vocab_size": 256, "max_seq_len": 64,
        "ffn_config": {"ffn_hidden_size": 64, "moe_num_experts": 4, "moe_top_k": 2},
        "attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0}}, "text"),
    # vision of the same years: pyramid attention with spatial reduction (PVTv2), focal modulation (FocalNet),
    # register tokens (DINOv2 with registers), I-JEPA's ViT, and two convolutional backbones (HGNetV2, TextNet)
    "pvt_v2": ("PvtV2Config", "PvtV2ForImageClassification", {
        "hidden_sizes": [16, 32, 64, 128], "depths": [1, 1, 1, 1], "num_attention_heads": [1, 2, 4, 8],
        "image_size": 64, "num_labels": 2}, "image"),
    "focalnet": ("FocalNetConfig", "FocalNetForImageClassification", {"embed_dim": 16, "depths": [1, 1, 2, 1],
                                                                     "image_size": 64, "num_labels": 2}, "image"),
    "dinov2_registers": ("Dinov2WithRegistersConfig", "Dinov2WithRegistersForImageClassification", _VIT, "image"),
    "ijepa": ("IJepaConfig", "IJepaForImageClassification", _VIT, "image"),
    "hgnet_v2": ("HGNetV2Config", "HGNetV2ForImageClassification", {"num_labels": 2}, "image"),
    "textnet": ("TextNetConfig", "TextNetForImageClassification", {"num_labels": 2}, "image"),
}


# the residual blocks of models whose library has no per-block checkpointing, wrapped in
# ``torch.utils.checkpoint`` instead (``heldout.wrap_blocks``), as a user would
BLOCKS: dict[str, tuple[str, ...]] = {
    "convnext": ("ConvNextLayer",), "mobilenet_v2": ("MobileNetV2InvertedResidual",),
    "efficientnet": ("EfficientNetBlock",), "regnet": ("RegNetXLayer", "RegNetYLayer"),
    "albert": ("AlbertLayer",), "convnextv2": ("ConvNextV2Layer",), "poolformer": ("PoolFormerLayer",),
    "levit": ("LevitResidualLayer",), "xlnet": ("XLNetLayer",), "mpnet": ("MPNetLayer",), "funnel": ("FunnelLayer",),
}


def build(name: str, seed: int = 0) -> tuple[torch.nn.Module, dict[str, torch.Tensor], str]:
    """The model in training mode, its inputs (keyword arguments, labels included: the model
    returns its loss) and the line that builds it, as a user would write it."""
    import transformers

    if name not in ARCHITECTURES:
        raise InputError(f"unknown architecture {name!r}: one of {', '.join(ARCHITECTURES)}")
    config_cls, model_cls, fields, kind = ARCHITECTURES[name]
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**fields)).train()
    args = ", ".join(f"{k}={v!r}" for k, v in fields.items())
    return model, _inputs(kind, fields, seed), f"transformers.{model_cls}(transformers.{config_cls}({args}))"


def _inputs(kind: str, fields: dict[str, Any], seed: int) -> dict[str, Any]:
    """A batch of 2 the model computes its loss from: token ids (labels the same ids), 64-pixel
    images with labels, log-mel features with target ids (speech), 4 image-text pairs (a
    contrastive loss: ``return_loss``), 32-pixel images alone (masked-image pretraining), or token
    ids with an image's tokens and the image (a vision-language model)."""
    gen = torch.Generator().manual_seed(seed)
    if kind == "text":
        ids = torch.randint(0, 256, (2, 32), generator=gen)
        return {"input_ids": ids, "labels": ids}
    if kind == "image":
        return {"pixel_values": torch.randn(2, 3, 64, 64, generator=gen), "labels": torch.tensor([0, 1])}
    if kind == "speech":  # the encoder's convolutions halve the frames to max_source_positions
        frames = 2 * fields["max_source_positions"]
        return {"input_features": torch.randn(2, fields["num_mel_bins"], frames, generator=gen),
                "labels": torch.randint(3, fields["vocab_size"], (2, 12), generator=gen)}
    if kind == "image-text":
        size = fields["vision_config"]["image_size"]
        return {"input_ids": torch.randint(0, fields["text_config"]["vocab_size"], (4, 16), generator=gen),
                "pixel_values": torch.randn(4, 3, size, size, generator=gen), "return_loss": True}
    if kind == "image-tokens":  # an image's 16 patch features take the places of 16 image tokens
        vision = fields["vision_config"]
        patches = (vision["image_size"] // vision["patch_size"]) ** 2
        ids = torch.randint(0, fields["image_token_index"], (2, 32), generator=gen)
        ids[:, 1:1 + patches] = fields["image_token_index"]
        return {"input_ids": ids, "labels": ids,
                "pixel_values": torch.randn(2, 3, vision["image_size"], vision["image_size"], generator=gen)}
    assert kind == "masked-image", kind
    return {"pixel_values": torch.randn(2, 3, fields["image_size"], fields["image_size"], generator=gen)}


def _dtype(dtype: str) -> torch.dtype | None:
    return torch.bfloat16 if dtype == "bf16" else None


def _autocast(dtype: str) -> Any:
    return torch.autocast("cpu", torch.bfloat16) if dtype == "bf16" else contextlib.nullcontext()


def _step(model: Any, inputs: dict[str, Any], dtype: str) -> torch.Tensor:
    torch.manual_seed(1)  # the same dropout masks in both
    with _autocast(dtype):
        loss = model(**inputs).loss
    loss.backward()
    return loss.detach()


def _forward(model: Any, inputs: dict[str, Any], dtype: str) -> Any:
    with _autocast(dtype):
        return model(**inputs)


def _fp64_grads(model: torch.nn.Module, inputs: dict[str, Any]) -> list | None:
    """The gradients of one eager step of a float64 copy (no autocast) from the same seed: what
    the fp32 and bf16 steps approximate. None where the model does not run in float64."""
    wide = copy.deepcopy(model).double()
    try:
        _step(wide, {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}, "fp32")
    except (RuntimeError, TypeError, NotImplementedError):
        return None
    return _grads(wide)


def _per_block(name: str, model: torch.nn.Module, inputs: dict[str, Any], dtype: str) -> float | None:
    """The measured peak of per-block checkpointing: the library's own, else ``BLOCKS`` wrapped;
    None where the model has neither."""
    import sys

    from ..measure import measure
    from .heldout import wrap_blocks

    peer = copy.deepcopy(model)
    if getattr(model, "supports_gradient_checkpointing", False):
        peer.gradient_checkpointing_enable()
    elif name in BLOCKS:
        module = sys.modules[type(model).__module__]
        wrap_blocks(peer, tuple(getattr(module, b) for b in BLOCKS[name]))
    else:
        return None
    with _autocast(dtype):
        return float(measure(peer, inputs, method="profiler", loss_fn=lambda out: out.loss).peak)


def check(name: str, budget: str = "50%", dtype: str = "fp32", search: Any = None) -> dict[str, Any]:
    """Plan ``name`` within ``budget`` (bf16: under CPU autocast, as the user trains it), step it
    and an eager copy, and report what happened (see the module docstring). ``search``: the
    planner's search limits (``remat.Searching``), default the defaults."""
    import remat

    model, inputs, source = build(name)
    ref = copy.deepcopy(model)
    row: dict[str, Any] = {"model": name, "source": source, "dtype": dtype, "budget": budget}
    started = time.perf_counter()
    with _autocast(dtype):
        try:
            planned = remat.optimize(model, inputs, budget, search=search)
        except InfeasibleError as e:
            row["refused"] = str(e)
            named = re.search(r"(\d+) bytes\)", str(e))
            if named is None:
                return row
            planned = remat.optimize(model, inputs, int(named.group(1)))
    row["seconds"] = time.perf_counter() - started
    report = planned.report
    row.update(planned_within=report.budget, measured_peak=report.measured_peak,
               vanilla_peak=report.vanilla_measured_peak, solver=report.solver,
               recompute_fraction=report.recompute_fraction, plan_seconds=report.compile_seconds)
    row["peak_fraction"] = report.measured_peak / report.vanilla_measured_peak
    ours, theirs = _step(planned, inputs, dtype), _step(ref, inputs, dtype)
    row["loss_equal"] = bool(torch.equal(ours, theirs))
    pairs = [(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters()) if q.grad is not None]
    row["grads_equal"] = all(a is not None and torch.equal(a, b) for a, b in pairs)
    row["grads_compared"] = len(pairs)
    if not row["grads_equal"]:
        from .heldout import grad_difference, grad_floor

        row["grad_diff"] = grad_difference(*zip(*pairs), floor=grad_floor(_dtype(dtype)))
    row["notes"] = list(report.notes)
    block = _per_block(name, ref, inputs, dtype)
    if block is not None:
        row["per_block_fraction"] = block / report.vanilla_measured_peak
    return row


def _grads(model: torch.nn.Module) -> list:
    return [p.grad for p in model.parameters()]


def check_compiled(name: str, fraction: float = 0.5, dtype: str = "fp32") -> dict[str, Any]:
    """``torch.compile(model, backend=remat.backend(budget, compiler="inductor"))`` within
    ``fraction`` of the eager step's measured peak, as bytes (on a refusal, again within the budget
    the refusal names), beside ``torch.compile(model)`` (inductor, activation budget 1.0): measured
    peaks (allocator level), each one's gradients against eager's, one step from the same seed, and
    each one's first step in seconds (``seconds``: remat's whole row, measurements included)."""
    import remat
    from torch._dynamo.exc import BackendCompilerFailed

    from ..measure import measure
    from .heldout import draws_random, grad_difference, grad_floor, raise_dynamo_limits, second_step_grads

    raise_dynamo_limits()
    model, inputs, source = build(name)
    row: dict[str, Any] = {"model": name, "source": source, "dtype": dtype, "fraction": fraction}
    floor = grad_floor(_dtype(dtype))

    def peak(net: torch.nn.Module) -> float:
        with _autocast(dtype):
            return float(measure(net, inputs, method="profiler", loss_fn=lambda out: out.loss).peak)

    def first(net: torch.nn.Module) -> float:  # seconds of the first step: tracing, planning, compiling
        started = time.perf_counter()
        with _autocast(dtype):
            net(**inputs).loss.backward()
        net.zero_grad(set_to_none=True)
        return time.perf_counter() - started

    vanilla = peak(copy.deepcopy(model))
    row.update(vanilla_peak=vanilla, budget=fraction * vanilla)
    ref, peer = copy.deepcopy(model), copy.deepcopy(model)
    torch._dynamo.reset()
    started = time.perf_counter()
    ours = copy.deepcopy(model)
    backend = remat.backend(budget=int(row["budget"]), compiler="inductor")
    net = torch.compile(ours, backend=backend)
    try:
        row["first_step_seconds"] = first(net)
        row["peak"] = peak(net)
    except BackendCompilerFailed as e:
        named = re.findall(r"(\d+) bytes\)", str(e))  # the least budget the refusal names
        if "raise the budget" not in str(e).lower() or not named:
            raise
        row["refused"] = str(e).splitlines()[-1][:300]
        row["budget"] = float(named[-1])
        torch._dynamo.reset()
        ours = copy.deepcopy(model)
        backend = remat.backend(budget=int(row["budget"]), compiler="inductor")
        net = torch.compile(ours, backend=backend)
        row["first_step_seconds"] = first(net)
        row["peak"] = peak(net)
    row["seconds"] = time.perf_counter() - started
    reps = backend.report
    row.update(predicted_peak=max(r["predicted_peak"] for r in reps), graphs=len(reps),
               solver="+".join(str(r.get("chosen") or r.get("solver")) for r in reps),
               recompute_time=sum(r.get("recompute_time") or 0.0 for r in reps))
    row["peak_fraction"] = row["peak"] / vanilla
    row["within_budget"] = row["peak"] <= 1.01 * row["budget"]
    # gradients: where the model draws random numbers, a fresh compile of each under eager's
    # generator (``eager_rng``), else inductor's dropout masks are not eager's
    row["eager_rng"] = draws_random(lambda: _forward(ref, inputs, dtype))
    _step(ref, inputs, dtype)
    eager = _grads(ref)
    # how far eager itself is from the gradient it approximates; not where the model draws random
    # numbers, which a float64 copy may draw otherwise (stochastic depth's ``rand`` does)
    truth = None if row["eager_rng"] else _fp64_grads(model, inputs)
    if truth is not None:
        row["eager_grad_err"] = grad_difference(eager, truth, floor)

    def grads(net: Any, base: torch.nn.Module, make: Any) -> list:
        if row["eager_rng"]:
            torch._dynamo.reset()
            return second_step_grads(make, lambda again: _step(again, inputs, dtype))
        base.zero_grad(set_to_none=True)
        _step(net, inputs, dtype)
        return _grads(base)

    def remat_net() -> tuple[Any, torch.nn.Module]:
        base = copy.deepcopy(model)
        return torch.compile(base, backend=remat.backend(budget=int(row["budget"]), compiler="inductor")), base

    row["grad_diff"] = grad_difference(grads(net, ours, remat_net), eager, floor)
    torch._dynamo.reset()
    compiled = torch.compile(peer)
    row["compile_first_step_seconds"] = first(compiled)
    row["compile_peak_fraction"] = peak(compiled) / vanilla

    def peer_net() -> tuple[Any, torch.nn.Module]:
        base = copy.deepcopy(model)
        return torch.compile(base), base

    row["compile_grad_diff"] = grad_difference(grads(compiled, peer, peer_net), eager, floor)
    torch._dynamo.reset()
    return row
