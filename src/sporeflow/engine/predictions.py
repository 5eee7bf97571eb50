"""Per-example results on the eval split: what a paired comparison of two stages needs."""

from __future__ import annotations

import numpy as np


def correct_per_example(network, eval_data) -> np.ndarray:
    """Whether the network's top-1 class is the label, image by image in the eval split's
    (unshuffled) order - the same images for every stage of a pipeline."""
    network.set_train(False)
    right = [
        network(images).asnumpy().argmax(axis=1) == labels.asnumpy()
        for images, labels in eval_data.create_tuple_iterator(num_epochs=1)
    ]
    return np.concatenate(right) if right else np.zeros(0, bool)


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
