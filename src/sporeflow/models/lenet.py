"""LeNet-5 as in MindSpore's model zoo (two 5x5 convs, three dense layers, 32x32 input), with
MindSpore's default initialisers: the zoo's Normal(0.02) dense init sits at chance for the
first epochs on small data sets."""

from typing import Annotated

from mindspore import nn

from sporeflow.core.ranges import Count


class LeNet5(nn.Cell):
    def __init__(
        self,
        num_classes: Annotated[int, Count] = 10,
        num_channel: Annotated[int, Count] = 1,
        include_top: bool = True,
    ):
        super().__init__()
        self.include_top = include_top
        self.conv1 = nn.Conv2d(num_channel, 6, 5, pad_mode="valid")
        self.conv2 = nn.Conv2d(6, 16, 5, pad_mode="valid")
        self.relu = nn.ReLU()
        self.max_pool2d = nn.MaxPool2d(kernel_size=2, stride=2)
        if include_top:
            self.flatten = nn.Flatten()
            self.fc1 = nn.Dense(16 * 5 * 5, 120)
            self.fc2 = nn.Dense(120, 84)
            self.fc3 = nn.Dense(84, num_classes)

    def construct(self, x):
        x = self.max_pool2d(self.relu(self.conv1(x)))
        x = self.max_pool2d(self.relu(self.conv2(x)))
        if not self.include_top:
            return x
        x = self.flatten(x)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        return self.fc3(x)
