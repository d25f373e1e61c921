"""GoogLeNet (Szegedy et al. 2015) and Inception v3 (Szegedy et al. 2016), torchvision's layers.

GoogLeNet is torchvision's batch-normalised version without auxiliary classifiers (6,624,904
parameters), including its 3x3 convolution in the "5x5" branch. Inception v3 keeps its auxiliary
classifier (torchvision's default, 27,161,264 parameters); in training mode it returns
``(logits, aux_logits)`` and the zoo's loss sums both. Seed 003 feeds it 300x300 images.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class BasicConv2d(nn.Module):
    """conv (no bias) - BN (eps 1e-3) - ReLU, the unit of both nets; ``bn=False`` gives the
    original GoogLeNet's conv (with bias) - ReLU."""

    def __init__(self, cin: int, cout: int, kernel_size, stride=1, padding=0, bn: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel_size, stride=stride, padding=padding, bias=not bn)
        self.bn = nn.BatchNorm2d(cout, eps=0.001) if bn else None
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        return self.relu(x if self.bn is None else self.bn(x))


# ---- GoogLeNet -------------------------------------------------------------------------------


class GoogLeNetInception(nn.Module):
    def __init__(self, cin: int, ch1: int, ch3red: int, ch3: int, ch5red: int, ch5: int, proj: int,
                 bn: bool = True) -> None:
        super().__init__()
        self.branch1 = BasicConv2d(cin, ch1, 1, bn=bn)
        self.branch2 = nn.Sequential(BasicConv2d(cin, ch3red, 1, bn=bn),
                                     BasicConv2d(ch3red, ch3, 3, padding=1, bn=bn))
        self.branch3 = nn.Sequential(BasicConv2d(cin, ch5red, 1, bn=bn),
                                     BasicConv2d(ch5red, ch5, 3, padding=1, bn=bn))
        self.branch4 = nn.Sequential(nn.MaxPool2d(3, stride=1, padding=1, ceil_mode=True),
                                     BasicConv2d(cin, proj, 1, bn=bn))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], 1)


class GoogLeNet(nn.Module):
    """``bn=False`` drops the batch norms (convolutions get biases): the 2015 paper's net, closer
    to the graph behind seed 000's #V = 134 than torchvision's batch-normalised one."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.2, bn: bool = True) -> None:
        super().__init__()
        self.conv1 = BasicConv2d(3, 64, 7, stride=2, padding=3, bn=bn)
        self.maxpool1 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.conv2 = BasicConv2d(64, 64, 1, bn=bn)
        self.conv3 = BasicConv2d(64, 192, 3, padding=1, bn=bn)
        self.maxpool2 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.inception3a = GoogLeNetInception(192, 64, 96, 128, 16, 32, 32, bn=bn)
        self.inception3b = GoogLeNetInception(256, 128, 128, 192, 32, 96, 64, bn=bn)
        self.maxpool3 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.inception4a = GoogLeNetInception(480, 192, 96, 208, 16, 48, 64, bn=bn)
        self.inception4b = GoogLeNetInception(512, 160, 112, 224, 24, 64, 64, bn=bn)
        self.inception4c = GoogLeNetInception(512, 128, 128, 256, 24, 64, 64, bn=bn)
        self.inception4d = GoogLeNetInception(512, 112, 144, 288, 32, 64, 64, bn=bn)
        self.inception4e = GoogLeNetInception(528, 256, 160, 320, 32, 128, 128, bn=bn)
        self.maxpool4 = nn.MaxPool2d(2, stride=2, ceil_mode=True)
        self.inception5a = GoogLeNetInception(832, 256, 160, 320, 32, 128, 128, bn=bn)
        self.inception5b = GoogLeNetInception(832, 384, 192, 384, 48, 128, 128, bn=bn)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(1024, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool1(self.conv1(x))
        x = self.maxpool2(self.conv3(self.conv2(x)))
        x = self.maxpool3(self.inception3b(self.inception3a(x)))
        for name in ("inception4a", "inception4b", "inception4c", "inception4d", "inception4e"):
            x = getattr(self, name)(x)
        x = self.inception5b(self.inception5a(self.maxpool4(x)))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(self.dropout(x))


# ---- Inception v3 ----------------------------------------------------------------------------


class InceptionA(nn.Module):
    def __init__(self, cin: int, pool_features: int) -> None:
        super().__init__()
        self.branch1x1 = BasicConv2d(cin, 64, 1)
        self.branch5x5 = nn.Sequential(BasicConv2d(cin, 48, 1), BasicConv2d(48, 64, 5, padding=2))
        self.branch3x3dbl = nn.Sequential(BasicConv2d(cin, 64, 1), BasicConv2d(64, 96, 3, padding=1),
                                          BasicConv2d(96, 96, 3, padding=1))
        self.branch_pool = BasicConv2d(cin, pool_features, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pool = self.branch_pool(F.avg_pool2d(x, 3, stride=1, padding=1))
        return torch.cat([self.branch1x1(x), self.branch5x5(x), self.branch3x3dbl(x), pool], 1)


class InceptionB(nn.Module):
    def __init__(self, cin: int) -> None:
        super().__init__()
        self.branch3x3 = BasicConv2d(cin, 384, 3, stride=2)
        self.branch3x3dbl = nn.Sequential(BasicConv2d(cin, 64, 1), BasicConv2d(64, 96, 3, padding=1),
                                          BasicConv2d(96, 96, 3, stride=2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pool = F.max_pool2d(x, 3, stride=2)
        return torch.cat([self.branch3x3(x), self.branch3x3dbl(x), pool], 1)


class InceptionC(nn.Module):
    def __init__(self, cin: int, c7: int) -> None:
        super().__init__()
        self.branch1x1 = BasicConv2d(cin, 192, 1)
        self.branch7x7 = nn.Sequential(
            BasicConv2d(cin, c7, 1), BasicConv2d(c7, c7, (1, 7), padding=(0, 3)),
            BasicConv2d(c7, 192, (7, 1), padding=(3, 0)))
        self.branch7x7dbl = nn.Sequential(
            BasicConv2d(cin, c7, 1), BasicConv2d(c7, c7, (7, 1), padding=(3, 0)),
            BasicConv2d(c7, c7, (1, 7), padding=(0, 3)), BasicConv2d(c7, c7, (7, 1), padding=(3, 0)),
            BasicConv2d(c7, 192, (1, 7), padding=(0, 3)))
        self.branch_pool = BasicConv2d(cin, 192, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pool = self.branch_pool(F.avg_pool2d(x, 3, stride=1, padding=1))
        return torch.cat([self.branch1x1(x), self.branch7x7(x), self.branch7x7dbl(x), pool], 1)


class InceptionD(nn.Module):
    def __init__(self, cin: int) -> None:
        super().__init__()
        self.branch3x3 = nn.Sequential(BasicConv2d(cin, 192, 1), BasicConv2d(192, 320, 3, stride=2))
        self.branch7x7x3 = nn.Sequential(
            BasicConv2d(cin, 192, 1), BasicConv2d(192, 192, (1, 7), padding=(0, 3)),
            BasicConv2d(192, 192, (7, 1), padding=(3, 0)), BasicConv2d(192, 192, 3, stride=2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pool = F.max_pool2d(x, 3, stride=2)
        return torch.cat([self.branch3x3(x), self.branch7x7x3(x), pool], 1)


class InceptionE(nn.Module):
    def __init__(self, cin: int) -> None:
        super().__init__()
        self.branch1x1 = BasicConv2d(cin, 320, 1)
        self.branch3x3_1 = BasicConv2d(cin, 384, 1)
        self.branch3x3_2a = BasicConv2d(384, 384, (1, 3), padding=(0, 1))
        self.branch3x3_2b = BasicConv2d(384, 384, (3, 1), padding=(1, 0))
        self.branch3x3dbl_1 = BasicConv2d(cin, 448, 1)
        self.branch3x3dbl_2 = BasicConv2d(448, 384, 3, padding=1)
        self.branch3x3dbl_3a = BasicConv2d(384, 384, (1, 3), padding=(0, 1))
        self.branch3x3dbl_3b = BasicConv2d(384, 384, (3, 1), padding=(1, 0))
        self.branch_pool = BasicConv2d(cin, 192, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b3 = self.branch3x3_1(x)
        b3 = torch.cat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], 1)
        dbl = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        dbl = torch.cat([self.branch3x3dbl_3a(dbl), self.branch3x3dbl_3b(dbl)], 1)
        pool = self.branch_pool(F.avg_pool2d(x, 3, stride=1, padding=1))
        return torch.cat([self.branch1x1(x), b3, dbl, pool], 1)


class InceptionAux(nn.Module):
    def __init__(self, cin: int, num_classes: int) -> None:
        super().__init__()
        self.conv0 = BasicConv2d(cin, 128, 1)
        self.conv1 = BasicConv2d(128, 768, 5)
        self.fc = nn.Linear(768, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(self.conv0(F.avg_pool2d(x, 5, stride=3)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1))


class Inception3(nn.Module):
    def __init__(self, num_classes: int = 1000, aux_logits: bool = True, dropout: float = 0.5) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            BasicConv2d(3, 32, 3, stride=2), BasicConv2d(32, 32, 3), BasicConv2d(32, 64, 3, padding=1),
            nn.MaxPool2d(3, stride=2), BasicConv2d(64, 80, 1), BasicConv2d(80, 192, 3),
            nn.MaxPool2d(3, stride=2))
        self.mixed_5 = nn.Sequential(InceptionA(192, 32), InceptionA(256, 64), InceptionA(288, 64))
        self.mixed_6 = nn.Sequential(InceptionB(288), InceptionC(768, 128), InceptionC(768, 160),
                                     InceptionC(768, 160), InceptionC(768, 192))
        self.aux = InceptionAux(768, num_classes) if aux_logits else None
        self.mixed_7 = nn.Sequential(InceptionD(768), InceptionE(1280), InceptionE(2048))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, x: torch.Tensor):
        x = self.mixed_6(self.mixed_5(self.stem(x)))
        # As torchvision: the auxiliary classifier runs only in training mode.
        aux = self.aux(x) if self.aux is not None and self.training else None
        x = self.mixed_7(x)
        logits = self.fc(self.dropout(torch.flatten(self.avgpool(x), 1)))
        return logits if aux is None else (logits, aux)
