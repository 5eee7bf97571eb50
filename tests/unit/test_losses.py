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


def test_soft_target_cross_entropy_against_numpy_and_the_one_hot_case(batch):
    """On mixed rows it is numpy's cross entropy against the smoothed mixture; on one-hot rows
    it equals CrossEntropySmooth on the integer labels (the eval loss of a mixed run)."""
    from sporeflow.nn.losses import SoftTargetCrossEntropy

    ms.set_context(mode=ms.GRAPH_MODE)
    logits, labels = batch
    one_hot = np.eye(5, dtype=np.float32)[labels]
    lam = np.random.default_rng(1).uniform(size=(6, 1)).astype(np.float32)
    mixed = lam * one_hot + (1 - lam) * one_hot[::-1]
    for smooth in (0.0, 0.1):
        loss = SoftTargetCrossEntropy(smooth_factor=smooth, num_classes=5)
        off = smooth / 4
        expected = np_ce(logits, mixed * (1 - smooth - off) + off)
        got = loss(Tensor(logits), Tensor(mixed)).asnumpy()
        np.testing.assert_allclose(got, expected, rtol=1e-5)
        sparse = CrossEntropySmooth(sparse=True, smooth_factor=smooth, num_classes=5)
        np.testing.assert_allclose(
            loss(Tensor(logits), Tensor(one_hot)).asnumpy(),
            sparse(Tensor(logits), Tensor(labels)).asnumpy(),
            rtol=1e-5,
        )
