"""Losses against a numpy reference."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor

from sporeflow.nn.losses import CrossEntropySmooth, SoftmaxCrossEntropyExpand


def np_ce(logits, targets):
    z = logits - logits.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    return -(targets * logp).sum(1).mean()


@pytest.fixture
def batch():
    rng = np.random.default_rng(0)
    return rng.normal(size=(6, 5)).astype(np.float32) * 3, rng.integers(0, 5, 6).astype(np.int32)


@pytest.mark.parametrize("mode", [ms.GRAPH_MODE, ms.PYNATIVE_MODE])
def test_label_smoothing(batch, mode):
    ms.set_context(mode=mode)
    logits, labels = batch
    got = CrossEntropySmooth(sparse=True, smooth_factor=0.1, num_classes=5)(
        Tensor(logits), Tensor(labels)
    )
    targets = np.full((6, 5), 0.1 / 4)
    targets[np.arange(6), labels] = 0.9
    assert float(got.asnumpy()) == pytest.approx(
        np_ce(logits.astype(np.float64), targets), rel=1e-5
    )


def test_expand_equals_plain_cross_entropy(batch):
    ms.set_context(mode=ms.GRAPH_MODE)
    logits, labels = batch
    got = SoftmaxCrossEntropyExpand(sparse=True, num_classes=5)(Tensor(logits), Tensor(labels))
    assert float(got.asnumpy()) == pytest.approx(
        np_ce(logits.astype(np.float64), np.eye(5)[labels]), rel=1e-5
    )
