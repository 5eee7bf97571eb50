"""How well a classifier's outputs match the labels: top-1 and top-k accuracy, accuracy per
class and the confusion matrix, from the outputs themselves (numpy only), so a run's evaluation
can be recomputed from its saved logits."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

TOP_K = 5


def top_k_accuracy(logits: np.ndarray, labels: np.ndarray, k: int) -> float:
    """Share of images whose label is among the k highest outputs."""
    best = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    return float(np.mean(np.any(best == labels[:, None], axis=1))) if len(labels) else 0.0


def confusion_matrix(predicted: np.ndarray, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """counts[true, predicted] (rows: the label, columns: the top-1 class)."""
    counts = np.zeros((num_classes, num_classes), np.int64)
    np.add.at(counts, (labels, predicted), 1)
    return counts


def per_class_accuracy(confusion: np.ndarray) -> dict[int, float]:
    """Top-1 accuracy among the images of each class that has any (recall per class)."""
    support = confusion.sum(axis=1)
    return {c: float(confusion[c, c] / support[c]) for c in range(len(support)) if support[c]}


def classification_metrics(
    logits: np.ndarray, labels: np.ndarray, class_names: Sequence[str] | None = None
) -> dict[str, float]:
    """`acc`, `acc_top5` (only with more than 5 classes: else it is always 1) and
    `acc_class_<class>` for each class present, named by `class_names` (label order; by
    number without them)."""
    num_classes = logits.shape[1]
    predicted = logits.argmax(axis=1)
    metrics = {"acc": float(np.mean(predicted == labels)) if len(labels) else 0.0}
    if num_classes > TOP_K:
        metrics[f"acc_top{TOP_K}"] = top_k_accuracy(logits, labels, TOP_K)
    confusion = confusion_matrix(predicted, labels, num_classes)
    keys = class_keys(class_names, num_classes)
    metrics.update({f"acc_class_{keys[c]}": v for c, v in per_class_accuracy(confusion).items()})
    return metrics


def class_keys(class_names: Sequence[str] | None, num_classes: int) -> list[str]:
    """Each class's part of a metric name: its name with what MLflow refuses in a metric name
    made `_`, or its number where there are no names or two would read the same."""
    names = list(class_names or [])
    if len(names) != num_classes:
        return [str(c) for c in range(num_classes)]
    keys = [re.sub(r"[^\w\-. /]", "_", name) for name in names]
    return keys if len(set(keys)) == len(keys) else [str(c) for c in range(num_classes)]
