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
