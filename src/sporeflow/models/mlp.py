"""The seed's sharded MLP (seed 003): three dense layers written with ops.MatMul, so that
SEMI_AUTO_PARALLEL strategies (`parallel.shard`) can be set per layer's matmul."""

from typing import Annotated

from mindspore import Parameter, nn, ops
from mindspore.common.initializer import initializer

from sporeflow.core.ranges import Count


class Dense(nn.Cell):
    """x @ W + b with W stored (in, out), as the seed writes it: `matmul.shard(((a, b), (b, d)))`."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.weight = Parameter(initializer("normal", [in_channels, out_channels]), name="weight")
        self.bias = Parameter(initializer("zeros", [out_channels]), name="bias")
        self.matmul = ops.MatMul()
        self.add = ops.Add()

    def construct(self, x):
        return self.add(self.matmul(x, self.weight), self.bias)


class MLP(nn.Cell):
    def __init__(
        self,
        num_classes: Annotated[int, Count] = 10,
        image_size: Annotated[int, Count] = 28,
        num_channel: Annotated[int, Count] = 1,
        hidden: Annotated[int, Count] = 512,
    ):
        super().__init__()
        self.flatten = ops.Flatten()
        self.layer1 = Dense(image_size * image_size * num_channel, hidden)
        self.relu1 = ops.ReLU()
        self.layer2 = Dense(hidden, hidden)
        self.relu2 = ops.ReLU()
        self.layer3 = Dense(hidden, num_classes)

    def construct(self, x):
        x = self.relu1(self.layer1(self.flatten(x)))
        x = self.relu2(self.layer2(x))
        return self.layer3(x)
