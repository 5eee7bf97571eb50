"""Per-example outputs on the eval split: what a paired comparison of two stages, top-k and
per-class accuracy are computed from, and the split's accuracy and loss from the same pass."""

from __future__ import annotations

import numpy as np
from mindspore import nn


def eval_metrics() -> dict:
    """What every stage's `mindspore.Model` evaluates: MindSpore's own accuracy and loss."""
    return {"acc": nn.Accuracy(), "loss": nn.Loss()}


def logits_and_labels(model, eval_data) -> tuple[np.ndarray, np.ndarray]:
    """The outputs (N x classes, float32) and the labels, image by image in the data's order."""
    logits, labels, _ = evaluated(model, eval_data)
    return logits, labels


def evaluated(model, eval_data) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """(outputs N x classes float32, labels N int64, {"acc", "loss"}) from one pass of `model`'s
    eval network: the cell `Model.eval` runs (mindspore.nn.WithEvalCell: loss, logits, label),
    in the phase `Model.eval` leaves it (its compiled graph), its outputs fed to MindSpore's
    `nn.Accuracy` and `nn.Loss` as `Model._update_metrics` feeds them: the metrics equal
    `model.eval(eval_data)`'s, bit for bit, without a second pass over the split
    (tests/unit/test_predictions.py). Empty metrics for an empty split."""
    cell = model.eval_network
    cell.set_train(False)  # which also sets the phase to "predict": a graph of its own
    cell.phase = "eval"  # as Model.eval leaves it (Model._exec_preprocess): its graph
    metrics = eval_metrics()
    outputs, labels = [], []
    for images, batch_labels in eval_data.create_tuple_iterator(num_epochs=1):
        loss, logits, label = cell(images, batch_labels)
        metrics["loss"].update(loss)
        metrics["acc"].update(logits, label)
        outputs.append(logits.asnumpy().astype(np.float32))
        labels.append(label.asnumpy())
    if not outputs:
        return np.zeros((0, 0), np.float32), np.zeros(0, np.int64), {}
    measured = {name: float(metric.eval()) for name, metric in metrics.items()}
    return np.concatenate(outputs), np.concatenate(labels).astype(np.int64), measured
