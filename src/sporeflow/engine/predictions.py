"""Per-example outputs on the eval split: what a paired comparison of two stages, top-k and
per-class accuracy are computed from."""

from __future__ import annotations

import numpy as np


def logits_and_labels(model, eval_data) -> tuple[np.ndarray, np.ndarray]:
    """The outputs (N x classes, float32) and the labels, image by image in the data's order,
    from `model`'s eval network: the cell `Model.eval` runs (mindspore.nn.WithEvalCell: loss,
    logits, label). After a `Model.eval` on the same data its compiled graph is reused; the bare
    network called here compiled a graph of its own, once per stage (BENCHMARKS table 6)."""
    cell = model.eval_network
    cell.set_train(False)  # which also sets the phase to "predict": a graph of its own
    cell.phase = "eval"  # as Model.eval leaves it (Model._exec_preprocess): its graph
    outputs, labels = [], []
    for images, batch_labels in eval_data.create_tuple_iterator(num_epochs=1):
        _, logits, label = cell(images, batch_labels)
        outputs.append(logits.asnumpy().astype(np.float32))
        labels.append(label.asnumpy())
    if not outputs:
        return np.zeros((0, 0), np.float32), np.zeros(0, np.int64)
    return np.concatenate(outputs), np.concatenate(labels).astype(np.int64)
