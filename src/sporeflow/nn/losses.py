"""Losses of the seeds: label-smoothed cross entropy (ResNet recipes) and the small-operator
softmax cross entropy the auto-parallel tutorial uses (every op shardable); and the softmax
cross entropy on mixed (soft) labels that MixUp and CutMix train with."""

from __future__ import annotations

from typing import Annotated

from mindspore import Tensor, nn, ops
from mindspore import dtype as mstype

from sporeflow.core.ranges import Count, Decay


class CrossEntropySmooth(nn.LossBase):
    """Softmax cross entropy against labels smoothed to 1 - s (true class) and s / (C - 1) (others)."""

    def __init__(
        self,
        sparse: bool = True,
        reduction: str = "mean",
        smooth_factor: Annotated[float, Decay] = 0.0,
        num_classes: Annotated[int, Count] = 1000,
    ):
        super().__init__()
        if num_classes < 2:
            raise ValueError(f"num_classes={num_classes}: label smoothing needs at least 2 classes")
        self.sparse = sparse
        self.num_classes = num_classes
        self.on_value = Tensor(1.0 - smooth_factor, mstype.float32)
        self.off_value = Tensor(smooth_factor / (num_classes - 1), mstype.float32)
        self.ce = nn.SoftmaxCrossEntropyWithLogits(reduction=reduction)

    def construct(self, logits, label):
        if self.sparse:
            label = ops.one_hot(label, self.num_classes, self.on_value, self.off_value)
        return self.ce(logits, label)


class SoftmaxCrossEntropyExpand(nn.Cell):
    """Mean softmax cross entropy built from elementary ops (max, exp, sum, div, log, mul), so
    AUTO_PARALLEL can shard each of them; numerically the same as the fused loss."""

    def __init__(self, sparse: bool = True, num_classes: Annotated[int, Count] = 10):
        super().__init__()
        self.sparse = sparse
        self.num_classes = num_classes
        self.eps = Tensor(1e-24, mstype.float32)

    def construct(self, logits, label):
        shifted = logits - ops.amax(logits, -1, keepdims=True)
        exp = ops.exp(shifted)
        softmax = exp / ops.sum(exp, -1, keepdim=True)
        if self.sparse:
            label = ops.one_hot(
                label, self.num_classes, Tensor(1.0, mstype.float32), Tensor(0.0, mstype.float32)
            )
        loss = -ops.sum(ops.log(softmax + self.eps) * label, -1)
        return ops.mean(loss, -1)


class SoftTargetCrossEntropy(nn.LossBase):
    """Mean softmax cross entropy against soft labels (rows of class weights summing to 1, as
    MixUp and CutMix make them), smoothed as CrossEntropySmooth smooths a one-hot row: each
    weight y becomes y * (1 - s - s / (C - 1)) + s / (C - 1)."""

    def __init__(
        self, smooth_factor: Annotated[float, Decay] = 0.0, num_classes: Annotated[int, Count] = 10
    ):
        super().__init__()
        if num_classes < 2:
            raise ValueError(f"num_classes={num_classes}: soft labels need at least 2 classes")
        self.off = smooth_factor / (num_classes - 1)
        self.scale = 1.0 - smooth_factor - self.off
        self.log_softmax = nn.LogSoftmax(axis=-1)

    def construct(self, logits, label):
        target = label * self.scale + self.off
        return ops.mean(-ops.sum(target * self.log_softmax(logits), -1))
