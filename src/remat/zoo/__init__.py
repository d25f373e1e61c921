"""The benchmark networks of the papers, written in this project (no torchvision or timm).

    model, inputs = remat.zoo.build("resnet152", batch=48)            # real tensors on CPU
    model, inputs = remat.zoo.build("resnet152", batch=48, device="meta")  # no memory at all
    out = model(*inputs)
    remat.zoo.loss(out).backward()                                   # the training step
    g = remat.zoo.graph("resnet152", batch=48)                       # seed 000's abstract graph

Training-step convention: every model returns its normal output (logits, a segmentation map, or
a tuple of them for nets with auxiliary heads in training mode), and the step's loss is
``remat.zoo.loss(out)``: the float32 sum of every element of every output. A sum needs no
target, backpropagates into every output element, and gives each net the same backward graph as
a real loss would (a per-element loss only adds one elementwise op at the end).
``loss_fn(name)`` returns that function for any name.

Networks and their sources (the default batch is the paper's):

    alexnet, vgg11/13/16/19, resnet18/34/50/101/152, densenet121/161/169/201   torchvision's layers
    resnet (depth=..., preact=False)    any depth; seed 002's 1000-layer nets (classification.py)
    googlenet, inception_v3             torchvision's; Inception v3 at 300x300 as seed 003
    unet (572x572), pspnet (713x713)    seed 000 Table 1 (segmentation.py)
    customnet                           seed 003's CustomNet: no articulation points (custom.py)
    ffn (depth=...), transformer        seed 004 §4 (sequence.py)
    lstm                                seed 002 §5.3: 4 layers x 64 steps, unrolled (sequence.py)

Tested in tests/test_zoo.py against torchvision's published parameter counts, by small CPU
forward/backward passes, and by the node counts of seed 000's Table 1 for ``graph``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from . import classification as _cls
from . import custom as _custom
from . import inception as _inc
from . import segmentation as _seg
from . import sequence as _seq
from ..errors import InputError


@dataclass(frozen=True)
class Spec:
    """How to build one network: its factory, what input it reads, the paper's batch size."""

    factory: Callable[..., nn.Module]
    inputs: str              # "image", "tokens", "sequence" or "vector"
    batch: int               # default batch: the paper's (seed 000, else seed 003, 002, 004)
    image_size: int = 224    # side of the square input image, for "image" nets
    size_option: bool = False  # the factory itself needs image_size (static crop/upsample sizes)
    source: str = ""


def _resnet(depth: int | None = None, preact: bool = False, num_classes: int = 1000) -> nn.Module:
    if depth is None:
        raise InputError("resnet needs depth=..., e.g. build('resnet', batch=32, depth=1001)")
    return _cls.make_resnet(depth, preact=preact, num_classes=num_classes)


def _fixed_resnet(depth: int) -> Callable[..., nn.Module]:
    return lambda num_classes=1000: _cls.make_resnet(depth, num_classes=num_classes)


SPECS: dict[str, Spec] = {
    "alexnet": Spec(_cls.AlexNet, "image", 1024, source="seed 003 Table 1"),
    **{f"vgg{d}": Spec(lambda d=d, **kw: _cls.VGG(d, **kw), "image", 64, source="seed 000/003")
       for d in (11, 13, 16, 19)},
    "resnet18": Spec(_fixed_resnet(18), "image", 256, source="seed 003 Table 1"),
    "resnet34": Spec(_fixed_resnet(34), "image", 128, source="seed 003 Table 1"),
    "resnet50": Spec(_fixed_resnet(50), "image", 96, source="seed 000 Table 1"),
    "resnet101": Spec(_fixed_resnet(101), "image", 32, source="seed 003 Table 1"),
    "resnet152": Spec(_fixed_resnet(152), "image", 48, source="seed 000 Table 1"),
    "resnet": Spec(_resnet, "image", 32, source="seed 002 §5.2 (any depth)"),
    "densenet121": Spec(lambda **kw: _cls.DenseNet(121, **kw), "image", 32, source="seed 003 Table 1"),
    "densenet161": Spec(lambda **kw: _cls.DenseNet(161, **kw), "image", 32, source="seed 000 Table 1"),
    "densenet169": Spec(lambda **kw: _cls.DenseNet(169, **kw), "image", 32, source="seed 003 Table 1"),
    "densenet201": Spec(lambda **kw: _cls.DenseNet(201, **kw), "image", 16, source="seed 003 Table 1"),
    "googlenet": Spec(_inc.GoogLeNet, "image", 256, source="seed 000 Table 1"),
    "inception_v3": Spec(_inc.Inception3, "image", 32, image_size=300, source="seed 003 Table 1"),
    "unet": Spec(_seg.UNet, "image", 8, image_size=572, size_option=True, source="seed 000 Table 1"),
    "pspnet": Spec(_seg.PSPNet, "image", 2, image_size=713, size_option=True, source="seed 000 Table 1"),
    "customnet": Spec(_custom.CustomNet, "image", 64, source="seed 003 Table 1"),
    "ffn": Spec(_seq.FFN, "vector", 128, source="seed 004 §4"),
    "transformer": Spec(_seq.Transformer, "tokens", 16, source="seed 004 Table 2"),
    "lstm": Spec(_seq.LSTM, "sequence", 64, source="seed 002 §5.3"),
}


def names() -> list[str]:
    """Every network ``build`` and ``graph`` accept, in lower case."""
    return list(SPECS)


def spec(name: str) -> Spec:
    try:
        return SPECS[name]
    except KeyError:
        raise InputError(f"unknown network {name!r}; remat.zoo.names() lists: {', '.join(SPECS)}") from None


def build(name: str, batch: int | None = None, *, device: str | torch.device = "cpu",
          dtype: torch.dtype = torch.float32, image_size: int | None = None, seed: int = 0,
          train: bool = True, **options: Any) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Build network ``name`` and example inputs for it.

    ``batch`` defaults to the batch the papers used. ``device="meta"`` allocates nothing, so any
    batch can be planned. ``image_size`` shrinks image inputs for tests (U-Net needs 16k + 124).
    ``seed`` fixes weights and inputs without touching the global RNG. ``train`` sets the mode
    (auxiliary heads of Inception v3 and PSPNet exist only in training). Other options go to the
    network: ``depth`` and ``preact`` for resnet, ``depth``/``width`` for ffn, ``num_classes``,
    ``dropout``, ``aux`` (pspnet), ``size``/``seq_len``/``vocab``/``layers`` (transformer),
    ``steps``/``hidden``/``layers`` (lstm), ``cells`` (customnet).
    """
    sp = spec(name)
    batch = sp.batch if batch is None else batch
    if not isinstance(batch, int) or batch < 1:
        raise InputError(f"batch must be a positive int, got {batch!r}")
    if image_size is not None and sp.inputs != "image":
        raise InputError(f"{name} does not read images; image_size applies to image nets only")
    size = sp.image_size if image_size is None else image_size
    if sp.size_option:
        options["image_size"] = size
    device = torch.device(device)
    # Fork only the generator that will be used, so seeding leaves every global RNG as it was.
    cuda = []
    if device.type == "cuda":
        cuda = [device.index if device.index is not None else torch.cuda.current_device()]
    with torch.random.fork_rng(devices=cuda), device:
        torch.manual_seed(seed)
        model = sp.factory(**options).to(dtype=dtype)
        inputs = _inputs(sp, model, batch, size, dtype, device)
    return model.train(train), inputs


def _inputs(sp: Spec, model: nn.Module, batch: int, size: int, dtype: torch.dtype,
            device: torch.device) -> tuple[torch.Tensor, ...]:
    if sp.inputs == "tokens":
        shape = (batch, model.seq_len)
        return tuple(torch.randint(0, model.vocab, shape, device=device) for _ in range(2))
    if sp.inputs == "sequence":
        return (torch.randn(batch, model.steps, model.in_features, dtype=dtype, device=device),)
    if sp.inputs == "vector":
        return (torch.randn(batch, model.in_features, dtype=dtype, device=device),)
    channels = getattr(model, "in_channels", 3)
    return (torch.randn(batch, channels, size, size, dtype=dtype, device=device),)


def loss(output: Any) -> torch.Tensor:
    """The zoo's training loss: the float32 sum of every element of every output tensor."""
    if isinstance(output, torch.Tensor):
        return output.float().sum()
    if isinstance(output, (tuple, list)):
        return sum((loss(o) for o in output), torch.zeros((), device=_first_device(output)))
    if isinstance(output, dict):
        return loss(list(output.values()))
    raise InputError(f"cannot form a loss from a {type(output).__name__}; expected tensors")


def _first_device(output: Any) -> torch.device:
    for o in output:
        if isinstance(o, torch.Tensor):
            return o.device
    return torch.device("cpu")


def loss_fn(name: str) -> Callable[[Any], torch.Tensor]:
    """The loss that forms a training step for network ``name`` (the same sum for every net)."""
    spec(name)
    return loss


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


from .abstract import graph, trace_graph  # noqa: E402  (abstract imports build from here)

__all__ = ["Spec", "build", "count_parameters", "graph", "loss", "loss_fn", "names", "spec", "trace_graph"]
