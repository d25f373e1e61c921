"""ImageNet classifiers of the papers: AlexNet, VGG, ResNet (any depth), DenseNet.

Layer shapes follow torchvision's definitions (the reference for parameter counts; tests assert
torchvision's published counts exactly), written here because torchvision is not available.
Differences that do not change parameters or outputs, chosen for planning:

- every ReLU is out-of-place and every residual sum is ``out + identity`` (no ``+=``), so each
  op yields a fresh value, as in the graphs of seed 000 and seed 003;
- DenseNet concatenates sequentially (``x = cat(x, new)``), the Chainer form behind seed 000's
  #V = 568 for DenseNet161; the tensor each dense layer reads is the same as torchvision's
  per-layer ``cat(all previous features)``.

Weights use PyTorch's default initialisation (torchvision's custom init is not reproduced: it
does not change shapes, memory or compute).
"""

from __future__ import annotations

import torch
from torch import nn

from ..errors import InputError

# ---- AlexNet ---------------------------------------------------------------------------------


class AlexNet(nn.Module):
    """torchvision's AlexNet (the one-GPU variant of Krizhevsky et al. 2012)."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 11, stride=4, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(),
            nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(),
            nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(dropout), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(),
            nn.Dropout(dropout), nn.Linear(4096, 4096), nn.ReLU(),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


# ---- VGG -------------------------------------------------------------------------------------

VGG_CONFIGS: dict[int, list[int | str]] = {
    11: [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    13: [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    16: [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    19: [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M",
         512, 512, 512, 512, "M", 512, 512, 512, 512, "M"],
}


class VGG(nn.Module):
    """VGG without batch norm (configurations A, B, D, E of Simonyan & Zisserman 2015)."""

    def __init__(self, depth: int, num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for v in VGG_CONFIGS[depth]:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(channels, v, 3, padding=1), nn.ReLU()]
                channels = v
        self.features = nn.Sequential(*layers)
        # Identity at 224x224; kept (as torchvision does) so smaller test images reach the
        # same 25088-wide classifier.
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


# ---- ResNet ----------------------------------------------------------------------------------


def _conv3x3(cin: int, cout: int, stride: int = 1, dilation: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=dilation, dilation=dilation, bias=False)


def _conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int = 1, downsample: nn.Module | None = None,
                 dilation: int = 1) -> None:
        super().__init__()
        self.conv1 = _conv3x3(cin, planes, stride, dilation)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu1 = nn.ReLU()
        self.conv2 = _conv3x3(planes, planes, 1, dilation)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.relu2 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        return self.relu2(out + identity)


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck (stride on the 3x3 conv), as torchvision."""

    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int = 1, downsample: nn.Module | None = None,
                 dilation: int = 1) -> None:
        super().__init__()
        self.conv1 = _conv1x1(cin, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu1 = nn.ReLU()
        self.conv2 = _conv3x3(planes, planes, stride, dilation)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu2 = nn.ReLU()
        self.conv3 = _conv1x1(planes, planes * 4)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.downsample = downsample
        self.relu3 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.relu2(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu3(out + identity)


class PreActBottleneck(nn.Module):
    """Pre-activation bottleneck (He et al. 2016, "Identity mappings"): BN-ReLU-conv three
    times and an identity sum with no activation after it, the block of 1000-layer ResNets."""

    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int = 1, downsample: nn.Module | None = None,
                 dilation: int = 1) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin)
        self.relu1 = nn.ReLU()
        self.conv1 = _conv1x1(cin, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu2 = nn.ReLU()
        self.conv2 = _conv3x3(planes, planes, stride, dilation)
        self.bn3 = nn.BatchNorm2d(planes)
        self.relu3 = nn.ReLU()
        self.conv3 = _conv1x1(planes, planes * 4)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = self.relu1(self.bn1(x))
        # The projection shortcut reads the pre-activated input, as in the paper's code.
        identity = x if self.downsample is None else self.downsample(pre)
        out = self.conv1(pre)
        out = self.conv2(self.relu2(self.bn2(out)))
        out = self.conv3(self.relu3(self.bn3(out)))
        return out + identity


RESNET_LAYERS: dict[int, tuple[type[nn.Module], tuple[int, int, int, int]]] = {
    18: (BasicBlock, (2, 2, 2, 2)),
    34: (BasicBlock, (3, 4, 6, 3)),
    50: (Bottleneck, (3, 4, 6, 3)),
    101: (Bottleneck, (3, 4, 23, 3)),
    152: (Bottleneck, (3, 8, 36, 3)),
    200: (Bottleneck, (3, 24, 36, 3)),
}


def resnet_layers(depth: int) -> tuple[int, int, int, int]:
    """Blocks per stage for a bottleneck ResNet of ``depth`` weighted layers.

    The standard depths use the published tables. Any other depth gets ``(depth - 2) // 3``
    bottleneck blocks (3 convolutions each, plus the stem conv and the classifier) spread evenly
    over the four stages, the remainder going to the third: seed 002 §5.2 grows "the depth of
    each residual stage". A depth that is not 3k + 2 is rounded down to one.
    """
    if depth in RESNET_LAYERS and RESNET_LAYERS[depth][0] is Bottleneck:
        return RESNET_LAYERS[depth][1]
    if depth < 14:
        raise InputError(f"resnet depth must be at least 14 (one bottleneck block per stage), got {depth}")
    blocks = (depth - 2) // 3
    base, extra = divmod(blocks, 4)
    per_stage = [base] * 4
    for i in (2, 1, 3)[:extra]:
        per_stage[i] += 1
    return tuple(per_stage)  # type: ignore[return-value]


class ResNet(nn.Module):
    """torchvision's ResNet, plus the pre-activation variant and dilated stages for PSPNet.

    ``deep_stem`` replaces the 7x7 stem by three 3x3 convolutions (64, 64, 128 channels), the
    backbone of PSPNet; ``dilate`` makes stages 3 and 4 keep their resolution with dilations 2
    and 4 (output stride 8); ``num_classes=None`` drops the pooling and classifier.
    """

    def __init__(self, block: type[nn.Module], layers: tuple[int, ...], num_classes: int | None = 1000,
                 deep_stem: bool = False, dilate: bool = False) -> None:
        super().__init__()
        self.preact = block is PreActBottleneck
        self.inplanes = 128 if deep_stem else 64
        self.stem = self._stem(deep_stem)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        strides, dilations = ((1, 2, 1, 1), (1, 1, 2, 4)) if dilate else ((1, 2, 2, 2), (1, 1, 1, 1))
        self.layer1 = self._make_layer(block, 64, layers[0], strides[0], dilations[0])
        self.layer2 = self._make_layer(block, 128, layers[1], strides[1], dilations[1])
        self.layer3 = self._make_layer(block, 256, layers[2], strides[2], dilations[2])
        self.layer4 = self._make_layer(block, 512, layers[3], strides[3], dilations[3])
        width = 512 * block.expansion  # type: ignore[attr-defined]
        # Pre-activation nets end with the BN-ReLU their last block did not apply.
        self.final = nn.Sequential(nn.BatchNorm2d(width), nn.ReLU()) if self.preact else None
        self.num_classes = num_classes
        if num_classes is not None:
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(width, num_classes)

    def _stem(self, deep: bool) -> nn.Sequential:
        if not deep:
            return nn.Sequential(nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
                                 nn.BatchNorm2d(64), nn.ReLU())
        layers: list[nn.Module] = []
        for cin, cout, stride in ((3, 64, 2), (64, 64, 1), (64, 128, 1)):
            layers += [_conv3x3(cin, cout, stride), nn.BatchNorm2d(cout), nn.ReLU()]
        return nn.Sequential(*layers)

    def _make_layer(self, block: type[nn.Module], planes: int, blocks: int, stride: int,
                    dilation: int) -> nn.Sequential:
        out = planes * block.expansion  # type: ignore[attr-defined]
        downsample = None
        if stride != 1 or self.inplanes != out:
            proj = _conv1x1(self.inplanes, out, stride)
            downsample = proj if self.preact else nn.Sequential(proj, nn.BatchNorm2d(out))
        # Dilated stages use half the dilation in their first block, as PSPNet's backbone does.
        first_dilation = max(1, dilation // 2)
        layers = [block(self.inplanes, planes, stride, downsample, first_dilation)]
        self.inplanes = out
        layers += [block(out, planes, 1, None, dilation) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Outputs of stages 3 and 4 (PSPNet's auxiliary head reads stage 3)."""
        x = self.maxpool(self.stem(x))
        c3 = self.layer3(self.layer2(self.layer1(x)))
        c4 = self.layer4(c3)
        if self.final is not None:
            c4 = self.final(c4)
        return c3, c4

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, x = self.features(x)
        if self.num_classes is None:
            return x
        return self.fc(torch.flatten(self.avgpool(x), 1))


def make_resnet(depth: int, preact: bool = False, num_classes: int = 1000) -> ResNet:
    """A ResNet of ``depth`` weighted layers; see ``resnet_layers`` for non-standard depths."""
    if depth in RESNET_LAYERS and not preact:
        block, layers = RESNET_LAYERS[depth]
        return ResNet(block, layers, num_classes)
    if depth in (18, 34) and preact:
        raise InputError("preact=True builds bottleneck blocks; use a depth of 50 or more")
    block = PreActBottleneck if preact else Bottleneck
    return ResNet(block, resnet_layers(depth), num_classes)


# ---- DenseNet --------------------------------------------------------------------------------

DENSENET_CONFIGS: dict[int, tuple[int, tuple[int, int, int, int], int]] = {
    121: (32, (6, 12, 24, 16), 64),
    161: (48, (6, 12, 36, 24), 96),
    169: (32, (6, 12, 32, 32), 64),
    201: (32, (6, 12, 48, 32), 64),
}


class DenseLayer(nn.Module):
    """BN-ReLU-conv1x1-BN-ReLU-conv3x3, its new features appended to its input."""

    def __init__(self, cin: int, growth: int, bn_size: int) -> None:
        super().__init__()
        self.norm1 = nn.BatchNorm2d(cin)
        self.relu1 = nn.ReLU()
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth)
        self.relu2 = nn.ReLU()
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        new = self.conv2(self.relu2(self.norm2(self.conv1(self.relu1(self.norm1(x))))))
        return torch.cat([x, new], 1)


class Transition(nn.Sequential):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__(nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, cout, 1, bias=False),
                         nn.AvgPool2d(2, 2))


class DenseNet(nn.Module):
    def __init__(self, depth: int, num_classes: int = 1000, bn_size: int = 4) -> None:
        super().__init__()
        growth, blocks, channels = DENSENET_CONFIGS[depth]
        layers: list[nn.Module] = [
            nn.Conv2d(3, channels, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(channels),
            nn.ReLU(), nn.MaxPool2d(3, stride=2, padding=1),
        ]
        for i, n in enumerate(blocks):
            for _ in range(n):
                layers.append(DenseLayer(channels, growth, bn_size))
                channels += growth
            if i != len(blocks) - 1:
                layers.append(Transition(channels, channels // 2))
                channels //= 2
        layers += [nn.BatchNorm2d(channels), nn.ReLU(), nn.AdaptiveAvgPool2d((1, 1))]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))
