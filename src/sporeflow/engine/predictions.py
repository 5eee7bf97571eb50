"""Per-example outputs on the eval split: what a paired comparison of two stages, top-k and
per-class accuracy are computed from."""

from __future__ import annotations

import numpy as np


def logits_and_labels(network, eval_data) -> tuple[np.ndarray, np.ndarray]:
    """The network's outputs (N x classes, float32) and the labels, image by image in the
    data's order: what top-k, per-class accuracy and the confusion matrix are computed from."""
    network.set_train(False)
    outputs, labels = [], []
    for images, batch_labels in eval_data.create_tuple_iterator(num_epochs=1):
        outputs.append(network(images).asnumpy().astype(np.float32))
        labels.append(batch_labels.asnumpy())
    if not outputs:
        return np.zeros((0, 0), np.float32), np.zeros(0, np.int64)
    return np.concatenate(outputs), np.concatenate(labels).astype(np.int64)
