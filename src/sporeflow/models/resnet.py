"""ResNet v1.5 as in MindSpore's model zoo: stride on the 3x3 conv of the bottleneck, He-normal
conv init, BatchNorm after every conv, global average pooling. ResNet-18 (basic blocks) and
ResNet-50 (bottlenecks); the same stem for 32x32 (CIFAR) and 224x224 (ImageNet) input."""

from __future__ import annotations

import math
from typing import Annotated

from mindspore import nn, ops
from mindspore.common.initializer import HeNormal, Uniform

from sporeflow.core.ranges import Count


def _conv(in_ch: int, out_ch: int, kernel: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(
        in_ch,
        out_ch,
        kernel,
        stride=stride,
        pad_mode="pad",
        padding=kernel // 2,
        has_bias=False,
        weight_init=HeNormal(mode="fan_out", nonlinearity="relu"),
    )


def _bn(channels: int, zero_init: bool = False) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, momentum=0.9, gamma_init="zeros" if zero_init else "ones")


def _add_shortcut(block: nn.Cell, in_ch: int, out: int, stride: int) -> None:
    """A strided 1x1 conv + BN on the residual path when the block changes the shape."""
    block.down = stride != 1 or in_ch != out
    if block.down:
        block.down_sample = nn.SequentialCell([_conv(in_ch, out, 1, stride), _bn(out)])


class BasicBlock(nn.Cell):
    expansion = 1

    def __init__(self, in_ch: int, channels: int, stride: int = 1):
        super().__init__()
        out = channels * self.expansion
        self.conv1, self.bn1 = _conv(in_ch, channels, 3, stride), _bn(channels)
        self.conv2, self.bn2 = _conv(channels, out, 3), _bn(out)
        self.relu = nn.ReLU()
        _add_shortcut(self, in_ch, out, stride)

    def construct(self, x):
        identity = self.down_sample(x) if self.down else x
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + identity)


class Bottleneck(nn.Cell):
    expansion = 4

    def __init__(self, in_ch: int, channels: int, stride: int = 1):
        super().__init__()
        out = channels * self.expansion
        self.conv1, self.bn1 = _conv(in_ch, channels, 1), _bn(channels)
        self.conv2, self.bn2 = _conv(channels, channels, 3, stride), _bn(channels)
        self.conv3, self.bn3 = _conv(channels, out, 1), _bn(out)
        self.relu = nn.ReLU()
        _add_shortcut(self, in_ch, out, stride)

    def construct(self, x):
        identity = self.down_sample(x) if self.down else x
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + identity)


class ResNet(nn.Cell):
    def __init__(
        self, block, layers, num_classes: Annotated[int, Count] = 1000, num_channel: int = 3
    ):
        super().__init__()
        self.conv1, self.bn1 = _conv(num_channel, 64, 7, 2), _bn(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, pad_mode="same")
        in_ch, stages = 64, []
        for i, (channels, count) in enumerate(zip((64, 128, 256, 512), layers, strict=False)):
            blocks = []
            for j in range(count):
                blocks.append(block(in_ch, channels, 2 if (j == 0 and i > 0) else 1))
                in_ch = channels * block.expansion
            stages.append(nn.SequentialCell(blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        bound = 1.0 / math.sqrt(in_ch)
        self.end_point = nn.Dense(
            in_ch, num_classes, weight_init=Uniform(bound), bias_init=Uniform(bound)
        )

    def construct(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.end_point(ops.mean(x, (2, 3)))


def resnet18(num_classes: Annotated[int, Count] = 1000, num_channel: int = 3) -> ResNet:
    return ResNet(BasicBlock, (2, 2, 2, 2), num_classes, num_channel)


def resnet50(num_classes: Annotated[int, Count] = 1000, num_channel: int = 3) -> ResNet:
    return ResNet(Bottleneck, (3, 4, 6, 3), num_classes, num_channel)
