"""CustomNet: a convolutional net with no splitting vertex, after seed 003's CustomNet.

Seed 003 (Table 1, appendix D) adds a "customized network" on which even the manual version of
Chen's segment-based method is "not applicable": segment planning cuts the graph at articulation
points (vertices every path from input to output passes through), and this topology has none
between the stem and the head. Its exact layers are only drawn in the paper's figure, so this is a
net in the same spirit, not a copy:

- cells ``s[i+1] = relu(bn(conv(relu(bn(conv(s[i]))))) + bn(conv1x1(s[i-1])))``: every cell also
  reads the state two steps back, so skip connections overlap and no single state separates the
  graph (second-order residuals);
- a long skip from the end of the first stage to the classifier, pooled and concatenated with the
  final features, which spans every later state.

Four stages of ``cells`` cells each (64, 128, 256, 512 channels, stride 2 at each stage start),
224x224 input as in seed 003.
"""

from __future__ import annotations

import torch
from torch import nn

from ..errors import InputError


def _conv_bn(cin: int, cout: int, kernel: int, stride: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False),
                         nn.BatchNorm2d(cout))


class Cell(nn.Module):
    """Two 3x3 convolutions on the previous state, plus a projection of the state before it."""

    def __init__(self, cin: int, cin_skip: int, cout: int, stride: int, skip_stride: int) -> None:
        super().__init__()
        self.conv1 = _conv_bn(cin, cout, 3, stride)
        self.relu1 = nn.ReLU()
        self.conv2 = _conv_bn(cout, cout, 3, 1)
        self.skip = _conv_bn(cin_skip, cout, 1, skip_stride)
        self.relu2 = nn.ReLU()

    def forward(self, prev: torch.Tensor, prev2: torch.Tensor) -> torch.Tensor:
        return self.relu2(self.conv2(self.relu1(self.conv1(prev))) + self.skip(prev2))


class CustomNet(nn.Module):
    def __init__(self, num_classes: int = 1000, cells: int = 3,
                 channels: tuple[int, ...] = (64, 128, 256, 512)) -> None:
        super().__init__()
        if cells < 1:
            raise InputError(f"customnet needs at least one cell per stage, got cells={cells}")
        self.stem = nn.Sequential(nn.Conv2d(3, channels[0], 7, stride=2, padding=3, bias=False),
                                  nn.BatchNorm2d(channels[0]), nn.ReLU(), nn.MaxPool2d(3, 2, padding=1))
        self.stem2 = nn.Sequential(_conv_bn(channels[0], channels[0], 3, 1), nn.ReLU())
        # (channels, stride relative to the stem output) of the two states each cell reads.
        shapes = [(channels[0], 1), (channels[0], 1)]
        cell_list = []
        for stage, width in enumerate(channels):
            for i in range(cells):
                stride = 2 if stage > 0 and i == 0 else 1
                (c2, r2), (c1, r1) = shapes[-2], shapes[-1]
                r = r1 * stride
                cell_list.append(Cell(c1, c2, width, stride, r // r2))
                shapes.append((width, r))
        self.cells = nn.ModuleList(cell_list)
        self.long_skip_at = cells + 1  # the state closing the first stage
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.pool_skip = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(channels[-1] + channels[0], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s0 = self.stem(x)
        states = [s0, self.stem2(s0)]
        for cell in self.cells:
            states.append(cell(states[-1], states[-2]))
        feats = torch.cat([self.pool(states[-1]), self.pool_skip(states[self.long_skip_at])], 1)
        return self.fc(torch.flatten(feats, 1))
