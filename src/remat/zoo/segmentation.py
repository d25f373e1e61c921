"""Segmentation nets of seed 000's Table 1: U-Net (572x572) and PSPNet (713x713).

U-Net is the original of Ronneberger et al. 2015: unpadded 3x3 convolutions, 2x2 up-convolutions,
the skip features centre-cropped before concatenation, a 388x388 output map from a 572x572 input,
one input channel and two classes by default.

PSPNet (Zhao et al. 2017) is its Cityscapes configuration (713x713 crops, 19 classes): a dilated
ResNet-101 with the three-conv stem (output stride 8), the pyramid pooling module with bins
1, 2, 3, 6, and the auxiliary head on stage 3 used in training (``aux=True``, the default).
In training mode it returns ``(out, aux_out)``, both upsampled to the input size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .classification import Bottleneck, ResNet
from ..errors import InputError

# ---- U-Net -----------------------------------------------------------------------------------


def _double_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3), nn.ReLU(), nn.Conv2d(cout, cout, 3), nn.ReLU())


def _center_crop(x: torch.Tensor, start: int, size: int) -> torch.Tensor:
    # Offsets are plain ints fixed at construction, so fx records one slicing op.
    return x[:, :, start:start + size, start:start + size]


def unet_output_size(size: int) -> int:
    """Side of U-Net's output map for a square input of side ``size`` (0 if it is too small)."""
    for _ in range(4):
        size -= 4
        if size <= 0 or size % 2:
            return 0
        size //= 2
    size -= 4
    for _ in range(4):
        size = size * 2 - 4
        if size <= 0:
            return 0
    return size


class UNet(nn.Module):
    def __init__(self, in_channels: int = 1, num_classes: int = 2, image_size: int = 572,
                 width: int = 64) -> None:
        super().__init__()
        if unet_output_size(image_size) <= 0:
            raise InputError(f"U-Net cannot take a {image_size}x{image_size} input: every pooled map must "
                             "have an even side; use 572 (the paper's) or 16k + 124, e.g. 188 or 252")
        self.in_channels = in_channels
        chans = [width * 2 ** i for i in range(5)]
        self.down = nn.ModuleList([_double_conv(in_channels, chans[0])] +
                                  [_double_conv(chans[i], chans[i + 1]) for i in range(4)])
        self.pools = nn.ModuleList([nn.MaxPool2d(2) for _ in range(4)])
        self.ups = nn.ModuleList([nn.ConvTranspose2d(chans[i + 1], chans[i], 2, stride=2)
                                  for i in reversed(range(4))])
        self.up_convs = nn.ModuleList([_double_conv(chans[i + 1], chans[i]) for i in reversed(range(4))])
        self.head = nn.Conv2d(chans[0], num_classes, 1)
        self.crops = self._crops(image_size)

    @staticmethod
    def _crops(size: int) -> list[tuple[int, int]]:
        """(start, side) of the centre crop of each skip, deepest first."""
        skips = []
        for _ in range(4):
            skips.append(size - 4)
            size = (size - 4) // 2
        size -= 4
        crops = []
        for skip in reversed(skips):
            size *= 2
            crops.append(((skip - size) // 2, size))
            size -= 4
        return crops

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for conv, pool in zip(self.down[:4], self.pools):
            x = conv(x)
            skips.append(x)
            x = pool(x)
        x = self.down[4](x)
        for up, conv, skip, (start, side) in zip(self.ups, self.up_convs, reversed(skips), self.crops):
            x = conv(torch.cat([_center_crop(skip, start, side), up(x)], 1))
        return self.head(x)


# ---- PSPNet ----------------------------------------------------------------------------------


def _conv_bn_relu(cin: int, cout: int, kernel: int) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, kernel, padding=kernel // 2, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]


def _upsample(x: torch.Tensor, size: int) -> torch.Tensor:
    return F.interpolate(x, size=(size, size), mode="bilinear", align_corners=True)


def pspnet_feature_size(size: int) -> int:
    """Side of the backbone's output map: three stride-2 steps (stem conv, max-pool, stage 2)."""
    for _ in range(3):
        size = (size - 1) // 2 + 1
    return size


class PyramidPooling(nn.Module):
    def __init__(self, cin: int, size: int, bins: tuple[int, ...] = (1, 2, 3, 6)) -> None:
        super().__init__()
        self.size = size
        cout = cin // len(bins)
        self.stages = nn.ModuleList([nn.Sequential(nn.AdaptiveAvgPool2d(b), *_conv_bn_relu(cin, cout, 1))
                                     for b in bins])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = [_upsample(stage(x), self.size) for stage in self.stages]
        return torch.cat([x, *pooled], 1)


class PSPNet(nn.Module):
    def __init__(self, num_classes: int = 19, aux: bool = True, image_size: int = 713,
                 layers: tuple[int, ...] = (3, 4, 23, 3), dropout: float = 0.1) -> None:
        super().__init__()
        # Output sizes are fixed at construction so the traced graph has no shape arithmetic.
        self.image_size = image_size
        self.backbone = ResNet(Bottleneck, layers, num_classes=None, deep_stem=True, dilate=True)
        self.ppm = PyramidPooling(2048, pspnet_feature_size(image_size))
        self.head = nn.Sequential(*_conv_bn_relu(4096, 512, 3), nn.Dropout2d(dropout),
                                  nn.Conv2d(512, num_classes, 1))
        self.aux = (nn.Sequential(*_conv_bn_relu(1024, 256, 3), nn.Dropout2d(dropout),
                                  nn.Conv2d(256, num_classes, 1)) if aux else None)

    def forward(self, x: torch.Tensor):
        c3, c4 = self.backbone.features(x)
        out = _upsample(self.head(self.ppm(c4)), self.image_size)
        if self.aux is None or not self.training:
            return out
        return out, _upsample(self.aux(c3), self.image_size)
