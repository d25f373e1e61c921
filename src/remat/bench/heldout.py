"""Held-out models for ``bench/bench_compiled.py``: networks nobody here wrote, built from public
configs with default arguments as a user would, and the peers a user would reach for instead.

Models (``build(name, device, size)``; ``size`` "gpu": the sizes of issue 12, "cpu": small
versions of the same that step in well under a second on 2 cores, "quick": tiny, for the tests):

- ``gpt2``: transformers ``GPT2LMHeadModel`` (GPU: ``GPT2Config()``, 12 layers, n_embd 768,
  batch 8 x 1024 tokens). Loss: ``model(input_ids=ids, labels=ids, use_cache=False).loss``.
- ``llama``: transformers ``LlamaForCausalLM`` (GPU: 16 layers, hidden 1024, intermediate
  4096, 16 heads, vocab 32000, batch 8 x 1024 tokens), same loss.
- ``vit``: timm ``vit_base_patch16_224`` (``pretrained=False``, batch 64) where timm imports,
  else transformers ``ViTForImageClassification(ViTConfig(num_labels=1000))``, the same network;
  cross-entropy on the logits.
- ``resnet``: torchvision ``resnet152()`` (batch 64, 224 px) where torchvision imports, else
  transformers ``ResNetForImageClassification`` with ResNet-152's depths; cross-entropy.

The CPU sizes keep 4 blocks of width 128; their LM vocabularies are 4096 rather than the
configs' 50257/32000, since at width 128 the logits of a 50k vocabulary would be most of the step's
memory (GPT-2 at 4 x 128 with 50257 words cannot go below 87% of its peak), unlike at the GPU sizes.

Peers (each on a deep copy; parameters start equal to the model's):

- ``per_block``: the library's own per-block activation checkpointing: transformers
  ``activation_checkpointing_enable()`` (``gradient_checkpointing_enable()`` on older
  versions), timm ``set_grad_checkpointing()``; torchvision and transformers' ResNet have none, so
  each residual block is wrapped in ``torch.utils.checkpoint`` (``use_reentrant=False``).
- ``sac_matmul``: selective activation checkpointing per block
  (``create_selective_checkpoint_contexts``), saving the outputs of matmuls, convolutions and
  scaled-dot-product attention and recomputing everything else.
- ``Compiled``: a ``torch.compile`` of the model under a given
  ``torch._functorch.config.activation_memory_budget`` (patched around every call, so the
  compile and any recompile plan under it), through a function with its own code object so that
  two budgets never share Dynamo's cache.

``Task`` turns any of these into a module whose call is one forward and its loss (under bf16
autocast when asked), which is what is timed and measured.
"""

from __future__ import annotations

import copy
import functools
import types
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from ..errors import InputError

MODELS = ("gpt2", "llama", "vit", "resnet")
SIZES = ("gpu", "cpu", "quick")


@dataclass
class HeldOut:
    name: str
    source: str                     # what was built, as a user would write it
    model: nn.Module
    inputs: dict[str, Any]          # keyword arguments of model(**inputs)
    kind: str                       # "lm": the model returns its loss; "vision": cross-entropy on logits
    labels: torch.Tensor | None = None
    config: dict[str, Any] = field(default_factory=dict)
    blocks: tuple[type, ...] = ()   # block classes to wrap where the library has no checkpointing API
    library: str = "transformers"   # "transformers" | "timm" | "torchvision"

    def dropout(self) -> dict[str, float]:
        """Non-zero dropout probabilities of the model (config defaults), by module class."""
        found: dict[str, float] = {}
        for m in self.model.modules():
            if isinstance(m, nn.Dropout) and m.p > 0:
                found[type(m).__name__] = m.p
        for key in ("attn_pdrop", "resid_pdrop", "embd_pdrop", "attention_dropout", "hidden_dropout_prob",
                    "attention_probs_dropout_prob"):
            v = self.config.get(key)
            if isinstance(v, (int, float)) and v > 0:
                found[key] = float(v)
        return found


# ---- builders --------------------------------------------------------------------------------


def _quiet_transformers() -> None:
    from transformers.utils import logging

    logging.set_verbosity_error()


def _lm(name: str, model: nn.Module, source: str, batch: int, seq: int, device: str, seed: int) -> HeldOut:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), generator=g).to(device)
    cfg = {k: v for k, v in model.config.to_dict().items() if isinstance(v, (int, float, str, bool))}
    blocks = tuple({type(m) for m in model.modules() if is_hf_layer(m)})
    return HeldOut(name, source, model.to(device).train(), {"input_ids": ids, "labels": ids, "use_cache": False},
                   "lm", None, {**cfg, "batch": batch, "seq": seq}, blocks)


def is_hf_layer(m: nn.Module) -> bool:
    """A transformers decoder/encoder layer (the block per-block checkpointing wraps)."""
    try:
        from transformers.modeling_layers import GradientCheckpointingLayer
    except ImportError:  # older transformers: the models' own flag
        return False
    return isinstance(m, GradientCheckpointingLayer)


def build_gpt2(size: str, device: str, seed: int = 0) -> HeldOut:
    from transformers import GPT2Config, GPT2LMHeadModel

    _quiet_transformers()
    torch.manual_seed(seed)
    if size == "gpu":
        cfg, args, batch, seq = GPT2Config(), "GPT2Config()", 8, 1024
    elif size == "cpu":
        kw = dict(n_layer=4, n_embd=128, n_head=4, vocab_size=4096)
        cfg, args, batch, seq = GPT2Config(**kw), _args(kw), 4, 128
    else:
        kw = dict(n_layer=2, n_embd=32, n_head=2, vocab_size=256, n_positions=64)
        cfg, args, batch, seq = GPT2Config(**kw), _args(kw), 2, 32
    return _lm("gpt2", GPT2LMHeadModel(cfg), f"transformers GPT2LMHeadModel(GPT2Config({args}))", batch, seq,
               device, seed)


def build_llama(size: str, device: str, seed: int = 0) -> HeldOut:
    from transformers import LlamaConfig, LlamaForCausalLM

    _quiet_transformers()
    torch.manual_seed(seed)
    if size == "gpu":
        kw, batch, seq = dict(num_hidden_layers=16, hidden_size=1024, intermediate_size=4096,
                              num_attention_heads=16, vocab_size=32000), 8, 1024
    elif size == "cpu":
        kw, batch, seq = dict(num_hidden_layers=4, hidden_size=128, intermediate_size=512,
                              num_attention_heads=4, vocab_size=4096), 4, 128
    else:
        kw, batch, seq = dict(num_hidden_layers=2, hidden_size=32, intermediate_size=64,
                              num_attention_heads=2, vocab_size=256), 2, 32
    return _lm("llama", LlamaForCausalLM(LlamaConfig(**kw)),
               f"transformers LlamaForCausalLM(LlamaConfig({_args(kw)}))", batch, seq, device, seed)


def _images(batch: int, side: int, classes: int, device: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 3, side, side, generator=g)
    y = torch.randint(0, classes, (batch,), generator=g)
    return x.to(device), y.to(device)


def build_vit(size: str, device: str, seed: int = 0, external: bool = True) -> HeldOut:
    torch.manual_seed(seed)
    if size == "gpu" and external:
        try:
            import timm
        except ImportError:
            timm = None
        if timm is not None:
            model = timm.create_model("vit_base_patch16_224", pretrained=False)
            x, y = _images(64, 224, 1000, device, seed)
            blocks = (type(model.blocks[0]),)
            return HeldOut("vit", "timm.create_model('vit_base_patch16_224', pretrained=False)",
                           model.to(device).train(), {"x": x}, "vision", y,
                           {"batch": 64, "image_size": 224, "classes": 1000}, blocks, "timm")
    from transformers import ViTConfig, ViTForImageClassification

    _quiet_transformers()
    if size == "gpu":
        kw, batch = dict(num_labels=1000), 64
    elif size == "cpu":
        kw, batch = dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512,
                         image_size=64, patch_size=8, num_labels=100), 8
    else:
        kw, batch = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                         image_size=32, patch_size=8, num_labels=10), 2
    cfg = ViTConfig(**kw)
    model = ViTForImageClassification(cfg)
    x, y = _images(batch, cfg.image_size, cfg.num_labels, device, seed)
    blocks = tuple({type(m) for m in model.modules() if is_hf_layer(m)})
    return HeldOut("vit", f"transformers ViTForImageClassification(ViTConfig({_args(kw)}))",
                   model.to(device).train(), {"pixel_values": x}, "vision", y,
                   {"batch": batch, "image_size": cfg.image_size, "classes": cfg.num_labels,
                    "hidden_size": cfg.hidden_size, "layers": cfg.num_hidden_layers}, blocks)


def build_resnet(size: str, device: str, seed: int = 0, external: bool = True) -> HeldOut:
    torch.manual_seed(seed)
    if size == "gpu" and external:
        try:
            import torchvision
        except ImportError:  # also a torchvision built for another torch
            torchvision = None
        except Exception:  # noqa: BLE001
            torchvision = None
        if torchvision is not None:
            from torchvision.models.resnet import BasicBlock, Bottleneck

            model = torchvision.models.resnet152()
            x, y = _images(64, 224, 1000, device, seed)
            return HeldOut("resnet", "torchvision.models.resnet152()", model.to(device).train(), {"x": x},
                           "vision", y, {"batch": 64, "image_size": 224, "classes": 1000},
                           (Bottleneck, BasicBlock), "torchvision")
    from transformers import ResNetConfig, ResNetForImageClassification
    from transformers.models.resnet.modeling_resnet import ResNetBasicLayer, ResNetBottleNeckLayer

    _quiet_transformers()
    if size == "gpu":
        kw, batch, side = dict(depths=[3, 8, 36, 3], layer_type="bottleneck", num_labels=1000), 64, 224
    elif size == "cpu":
        kw, batch, side = dict(embedding_size=16, hidden_sizes=[32, 64, 128, 256], depths=[2, 2, 2, 2],
                               layer_type="bottleneck", num_labels=100), 8, 64
    else:
        kw, batch, side = dict(embedding_size=8, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                               layer_type="bottleneck", num_labels=10), 2, 32
    cfg = ResNetConfig(**kw)
    model = ResNetForImageClassification(cfg)
    x, y = _images(batch, side, cfg.num_labels, device, seed)
    return HeldOut("resnet", f"transformers ResNetForImageClassification(ResNetConfig({_args(kw)}))",
                   model.to(device).train(), {"pixel_values": x}, "vision", y,
                   {"batch": batch, "image_size": side, "classes": cfg.num_labels, "depths": list(cfg.depths)},
                   (ResNetBottleNeckLayer, ResNetBasicLayer))


BUILDERS: dict[str, Callable[..., HeldOut]] = {"gpt2": build_gpt2, "llama": build_llama, "vit": build_vit,
                                               "resnet": build_resnet}


def build(name: str, device: str = "cpu", size: str = "cpu", seed: int = 0) -> HeldOut:
    if name not in BUILDERS:
        raise InputError(f"unknown model {name!r}: use one of {', '.join(BUILDERS)}")
    if size not in SIZES:
        raise InputError(f"unknown size {size!r}: use one of {', '.join(SIZES)}")
    return BUILDERS[name](size, device, seed)


def _args(kw: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kw.items())


# ---- loss and the timed unit -----------------------------------------------------------------


def _output(out: Any, name: str) -> torch.Tensor:
    """``out.<name>`` of a transformers output, or the first element of a tuple/dict."""
    value = getattr(out, name, None)
    if value is None and isinstance(out, dict):
        value = out.get(name)
    if value is None and isinstance(out, (tuple, list)):
        value = out[0]
    if value is None:
        raise InputError(f"no {name} in the model's output {type(out).__name__}")
    return value


def lm_loss(out: Any) -> torch.Tensor:
    """``out.loss`` of a transformers output, or the first element of a tuple/dict."""
    return _output(out, "loss")


def logits_of(out: Any) -> torch.Tensor:
    return out if isinstance(out, torch.Tensor) else _output(out, "logits")


class Task(nn.Module):
    """One forward and its loss, under autocast when ``dtype`` is given: the unit timed and measured.

    ``net`` is the model, a peer or remat's module; it is called ``net(**inputs)``.
    """

    def __init__(self, net: nn.Module, kind: str, labels: torch.Tensor | None = None,
                 dtype: torch.dtype | None = None, device_type: str = "cpu") -> None:
        super().__init__()
        self.net = net
        self.kind = kind
        self.labels = labels
        self.dtype = dtype
        self.device_type = device_type

    def forward(self, **inputs: Any) -> torch.Tensor:
        with torch.autocast(self.device_type, dtype=self.dtype or torch.bfloat16, enabled=self.dtype is not None):
            out = self.net(**inputs)
            if self.kind == "lm":
                return lm_loss(out)
            return F.cross_entropy(logits_of(out), self.labels)


GRAD_FLOOR = 1e-6  # of the largest reference gradient: below it, a parameter's gradient is compared at it


def grad_floor(dtype: torch.dtype | None) -> float:
    """``GRAD_FLOOR``, or an eighth of the autocast dtype's epsilon where that is larger.

    Under bf16 autocast each product is rounded to 8 bits, so a gradient that is zero in exact
    arithmetic (a key bias) comes out as rounding at about 4e-6 of the largest one, differently in
    eager and compiled code: HF ViT's measured 1.5 against torch.compile at budget 1.0, where every
    other parameter agreed within 0.7%."""
    return GRAD_FLOOR if dtype is None else max(GRAD_FLOOR, torch.finfo(dtype).eps / 8)


def grad_difference(got: list, ref: list, floor: float = GRAD_FLOOR) -> float:
    """Worst parameter's max |g - g_ref| / max |g_ref| over two lists of gradients (None where a
    parameter has none: a gradient on one side only counts 1 unless it is all zeros).

    Each scale is at least ``floor`` (see ``grad_floor``) of the largest reference gradient. A parameter whose
    true gradient is zero (a key projection's bias, which softmax ignores; a bias before a batch
    norm) has a reference made of rounding alone, and a difference divided by that says nothing:
    DistilBERT's key bias has 5e-13 against 0.15 elsewhere, and torch.compile's step, within 4e-7
    of eager's on every other parameter, differs by 170% there."""
    if len(got) != len(ref):
        raise RuntimeError(f"{len(got)} parameters against the reference's {len(ref)}")
    worst = 0.0
    with torch.no_grad():
        floor = floor * max((r.abs().max().float().item() for r in ref if r is not None and r.numel()),
                                 default=0.0)
        for g, r in zip(got, ref):
            if g is None and r is None:
                continue
            if g is None or r is None:
                worst = max(worst, 1.0 if (g if g is not None else r).abs().max() > 0 else 0.0)
                continue
            if g.shape != r.shape:
                raise RuntimeError(f"gradient shapes differ: {tuple(g.shape)} vs {tuple(r.shape)}")
            if not r.numel():
                continue
            scale = max(r.abs().max().float().item(), floor)
            diff = (g.float() - r.float()).abs().max().item()
            worst = max(worst, diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf")))
    return worst


def draws_random(forward: Callable[[], Any]) -> bool:
    """Whether ``forward()`` draws from torch's default generators (dropout masks, stochastic
    depth): their states move. The states are put back afterwards."""
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    cpu_state = torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if cuda else []
    with torch.no_grad():
        forward()
    moved = not torch.equal(cpu_state, torch.get_rng_state())
    moved = moved or any(not torch.equal(a, b) for a, b in zip(cuda_states, torch.cuda.get_rng_state_all()))
    torch.set_rng_state(cpu_state)
    if cuda:
        torch.cuda.set_rng_state_all(cuda_states)
    return moved


def eager_rng() -> Any:
    """Inductor draws random numbers with eager's generator and ops (``fallback_random``), so a
    compiled step from a seed draws eager's dropout masks. By default it draws its own, and a
    compiled model's gradients then differ from eager's wherever dropout is active: a comparison
    with eager says nothing there."""
    import torch._inductor.config as inductor_config

    return inductor_config.patch(fallback_random=True)


def second_step_grads(make: Callable[[], tuple[Any, torch.nn.Module]],
                      step: Callable[[Any], Any]) -> list[torch.Tensor | None]:
    """The parameter gradients of the second ``step`` of a fresh compiled build (``make`` -> the
    compiled net and its model) under eager's generator (``eager_rng``), to compare with eager's
    step from the same seed (``step`` seeds). Not the first step's: with a graph break,
    ``remat.backend`` runs a graph's first call at its floor plan as fx code, until the graphs
    after it are known, so a first step's gradients are not those of the code being measured."""
    with eager_rng():
        net, base = make()
        step(net)
        base.zero_grad(set_to_none=True)
        step(net)
    return [p.grad for p in base.parameters()]


def autocast(device_type: str, dtype: torch.dtype | None):
    """The autocast context of a dtype (``None``: fp32, disabled)."""
    return torch.autocast(device_type, dtype=dtype or torch.bfloat16, enabled=dtype is not None)


# ---- peers -----------------------------------------------------------------------------------


def _sac_ops() -> frozenset:
    names = ("mm", "addmm", "bmm", "convolution", "_scaled_dot_product_flash_attention",
             "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
             "_scaled_dot_product_flash_attention_for_cpu")
    return frozenset(getattr(torch.ops.aten, n) for n in names if hasattr(torch.ops.aten, n))


SAC_SAVED = _sac_ops()


def sac_policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
    """Save the outputs of matmuls, convolutions and attention; recompute the rest.

    A fused attention that draws dropout (CUDA's flash or efficient kernel with ``dropout_p`` > 0)
    is recomputed too: SAC hands a saved op's output back in the recomputation without running it,
    so the random numbers it drew are not drawn again and every later dropout in the block gets
    another mask (on the H100, HF GPT-2's gradients under this policy were 0.87 from eager's, where
    the CPU's attention draws through a separate op and matched exactly)."""
    if getattr(op, "overloadpacket", op) not in SAC_SAVED or _draws(op, args, kwargs):
        return CheckpointPolicy.PREFER_RECOMPUTE
    return CheckpointPolicy.MUST_SAVE


def _draws(op: Any, args: tuple, kwargs: dict) -> bool:
    """Whether an op with a ``dropout_p`` argument is called with a non-zero one."""
    names = [a.name for a in getattr(getattr(op, "_schema", None), "arguments", ())]
    if "dropout_p" not in names:
        return False
    at = names.index("dropout_p")
    p = kwargs.get("dropout_p", args[at] if at < len(args) else 0.0)
    return bool(p)


def sac_context() -> Callable[[], Any]:
    return functools.partial(create_selective_checkpoint_contexts, sac_policy)


class Checkpointed(nn.Module):
    """``inner`` under non-reentrant ``torch.utils.checkpoint``, with an optional ``context_fn``."""

    def __init__(self, inner: nn.Module, context_fn: Callable[[], Any] | None = None) -> None:
        super().__init__()
        self.inner = inner
        self.context_fn = context_fn

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        extra = {"context_fn": self.context_fn} if self.context_fn is not None else {}
        return checkpoint(self.inner, *args, use_reentrant=False, **extra, **kwargs)


def wrap_blocks(model: nn.Module, blocks: tuple[type, ...], context_fn: Callable[[], Any] | None = None) -> int:
    """Wrap every module of a class in ``blocks`` (outermost only) in ``Checkpointed``; how many."""
    count = 0

    def visit(parent: nn.Module) -> None:
        nonlocal count
        for name, child in list(parent._modules.items()):
            if child is None:
                continue
            if isinstance(child, blocks):
                parent._modules[name] = Checkpointed(child, context_fn)
                count += 1
            else:
                visit(child)

    visit(model)
    return count


def _hf_enable(model: nn.Module, kwargs: dict[str, Any] | None) -> str:
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        return "activation_checkpointing_enable"
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    return "gradient_checkpointing_enable"


def per_block(held: HeldOut) -> tuple[nn.Module, str]:
    """A copy of the model with per-block checkpointing the library's way; how it was done."""
    model = copy.deepcopy(held.model)
    if held.library == "transformers" and getattr(model, "supports_gradient_checkpointing", False):
        return model, f"{_hf_enable(model, None)}()"
    if held.library == "timm" and hasattr(model, "set_grad_checkpointing"):
        model.set_grad_checkpointing(True)
        return model, "timm set_grad_checkpointing(True)"
    n = wrap_blocks(model, held.blocks)
    if not n:
        raise InputError(f"{type(model).__name__}: no blocks of {held.blocks} to checkpoint")
    return model, f"torch.utils.checkpoint(use_reentrant=False) on {n} {'/'.join(b.__name__ for b in held.blocks)}"


def sac_matmul(held: HeldOut) -> tuple[nn.Module, str]:
    """A copy of the model with selective checkpointing per block (matmuls/convs/SDPA saved)."""
    model = copy.deepcopy(held.model)
    ctx = sac_context()
    if held.library == "transformers" and getattr(model, "supports_gradient_checkpointing", False):
        how = _hf_enable(model, {"use_reentrant": False, "context_fn": ctx})
        return model, f"{how}(use_reentrant=False, context_fn=SAC policy)"
    n = wrap_blocks(model, held.blocks, ctx)
    if not n:
        raise InputError(f"{type(model).__name__}: no blocks of {held.blocks} to checkpoint")
    return model, f"SAC (use_reentrant=False, context_fn=SAC policy) on {n} {'/'.join(b.__name__ for b in held.blocks)}"


def fresh_entry(model: Callable[..., Any], tag: str) -> Callable[..., Any]:
    """``model(*args, **kwargs)`` as a function with its own code object (Dynamo caches per code
    object; two budgets compiled from the same forward would otherwise share one graph)."""
    def entry(*args: Any, **kwargs: Any) -> Any:
        return model(*args, **kwargs)

    code = entry.__code__.replace(co_name=f"heldout_{tag}")
    return types.FunctionType(code, entry.__globals__, code.co_name, None, entry.__closure__)


class Distinct:
    """A backend that compares equal only to itself.

    Dynamo keys its cache entries by code object, guards and backend (compared with ``==``).
    Where a model's forward breaks the graph (transformers' causal-LM heads do, at the loss), the
    rest of the forward is compiled as a frame of its own, the model's ``forward`` code object,
    which every compiled wrapper of that model shares; the backend is then all that tells two
    budgets apart, and "inductor" wrappers with the same options compare equal. Without this a
    second budget silently reuses the first budget's graph."""

    def __init__(self, backend: Any) -> None:
        if isinstance(backend, str):
            from torch._dynamo import lookup_backend

            backend = lookup_backend(backend)
        self.backend = backend

    def __call__(self, gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
        return self.backend(gm, example_inputs, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name == "backend" or name.startswith("_torchdynamo"):  # Dynamo unwraps those: stay distinct
            raise AttributeError(name)
        return getattr(self.backend, name)

    __eq__ = object.__eq__
    __hash__ = object.__hash__


class Compiled(nn.Module):
    """``torch.compile(model, backend=...)`` planned under ``activation_memory_budget = budget``
    (``None``: the config as it is); ``inner`` holds the model, so its parameters are this module's.

    Each instance has its own entry code object and its own backend object (``Distinct``), so
    two instances never share a compiled graph, even over one model."""

    def __init__(self, inner: nn.Module, backend: Any, budget: float | None, tag: str) -> None:
        super().__init__()
        self.inner = inner
        self.budget = budget
        self.fn = torch.compile(fresh_entry(inner, tag), backend=Distinct(backend))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.budget is None:
            return self.fn(*args, **kwargs)
        import torch._functorch.config as functorch_config

        with functorch_config.patch(activation_memory_budget=self.budget):
            return self.fn(*args, **kwargs)


def raise_dynamo_limits(n: int = 64) -> None:
    """Room for every compiled method of a run (each has its own code object anyway)."""
    import torch._dynamo.config as dc

    for key in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                "accumulated_recompile_limit"):
        if hasattr(dc, key):
            setattr(dc, key, max(getattr(dc, key), n))
