"""ResNet builds, has the published size, and trains a real step at CIFAR and ImageNet input sizes."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, nn

from sporeflow.models.resnet import resnet18, resnet50


def n_params(net):
    return sum(p.size for p in net.trainable_params())


def test_resnet50_parameter_count():
    assert n_params(resnet50(num_classes=1000)) == 25_557_032  # torchvision/zoo ResNet-50 v1.5
    assert n_params(resnet18(num_classes=1000)) == 11_689_512


@pytest.mark.parametrize(
    "factory,size,batch", [(resnet18, 32, 4), (resnet50, 32, 2), (resnet50, 224, 1)]
)
def test_train_step(factory, size, batch):
    ms.set_context(mode=ms.GRAPH_MODE)
    net = factory(num_classes=10)
    step = nn.TrainOneStepCell(
        nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")),
        nn.Momentum(net.trainable_params(), 0.01, 0.9),
    )
    step.set_train()
    x = Tensor(np.random.randn(batch, 3, size, size).astype(np.float32))
    y = Tensor(np.arange(batch).astype(np.int32))
    before = net.end_point.weight.asnumpy().copy()
    loss = step(x, y)
    assert np.isfinite(loss.asnumpy()) and not np.allclose(net.end_point.weight.asnumpy(), before)
    assert net(x).shape == (batch, 10)
