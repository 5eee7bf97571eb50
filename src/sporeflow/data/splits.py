"""The validation split held out of a stored training split (issue 61: validation images choose,
test images report).

Held out by `dataset.split_seed`, never the training seed, so every arm, seed and job of a sweep
holds out the same images; stratified by class, so validation accuracy weighs the classes as
the training split does (scikit-learn's `train_test_split(stratify=...)`, mindcv's
`--val_split`).
"""

from __future__ import annotations

import hashlib
import math
from numbers import Real

import numpy as np

from sporeflow.core.errors import DataError

KEY = "dataset.val_split"


def held_out(labels: np.ndarray, val_split: float, split_seed: int) -> np.ndarray:
    """The rows of a training split held out for validation: sorted int64 indices into `labels`
    (shape (N,), the split's class labels in stored order), shape (M,), M = 0 when `val_split`
    is 0.

    The rule: `val_split` in (0, 1) is a fraction, the total M0 = round(val_split * N) (Python's
    round: halves to even); an integer >= 1 is the total itself. M0 is allocated to the classes in proportion to their
    sizes by largest remainder (ties: the smaller class label); every class with at least two
    images then holds out at least one (so a few-image class is validated too and M may exceed
    M0). Each class's images are drawn without replacement by `np.random.default_rng(split_seed)`,
    classes in label order. DataError (one line naming dataset.val_split) when the value is not
    allowed or leaves the training split, a class or the validation split without images."""
    labels = np.asarray(labels)
    total = _total(val_split, len(labels))
    if val_split == 0:
        return np.zeros(0, np.int64)
    classes, counts = np.unique(labels, return_counts=True)
    per_class = np.maximum(_largest_remainder(total, counts), counts >= 2)
    _check_allocation(val_split, classes, counts, per_class)
    rng = np.random.default_rng(split_seed)
    rows = [
        rng.choice(np.flatnonzero(labels == label), size=int(take), replace=False)
        for label, take in zip(classes, per_class, strict=True)
    ]
    return np.sort(np.concatenate(rows)).astype(np.int64)


def digest(rows: np.ndarray) -> str:
    """8 hex digits naming a set of held-out rows (their sorted int64 indices' bytes)."""
    return hashlib.sha256(np.sort(np.asarray(rows, np.int64)).tobytes()).hexdigest()[:8]


def _total(val_split: float, rows: int) -> int:
    """How many images `val_split` asks of a training split of `rows` images."""
    if isinstance(val_split, bool) or not isinstance(val_split, Real) or math.isnan(val_split):
        raise DataError(f"{KEY}={val_split!r}: {_ALLOWED}")
    if val_split < 0:
        raise DataError(f"{KEY}={val_split}: must not be negative; {_ALLOWED}")
    if 0 < val_split < 1:
        total = round(val_split * rows)
    elif float(val_split).is_integer():
        total = int(val_split)
    else:
        raise DataError(f"{KEY}={val_split}: a fraction must be below 1; {_ALLOWED}")
    if val_split and total >= rows:
        raise DataError(
            f"{KEY}={val_split} holds out {total} of the training split's {rows} images and "
            f"leaves it empty; {_ALLOWED}"
        )
    return total


_ALLOWED = (
    "allowed: a fraction in (0, 1) of the training split, a count of images >= 1 below its "
    "size, or 0 (no validation split: choices then read the test split)"
)


def _largest_remainder(total: int, counts: np.ndarray) -> np.ndarray:
    """`total` seats shared in proportion to `counts` (Hamilton's method), int64 per class."""
    quotas = total * counts / counts.sum()
    seats = np.floor(quotas).astype(np.int64)
    order = np.argsort(-(quotas - seats), kind="stable")  # largest remainder first
    seats[order[: total - int(seats.sum())]] += 1
    return seats


def _check_allocation(
    val_split: float, classes: np.ndarray, counts: np.ndarray, per_class: np.ndarray
) -> None:
    """Every class keeps a training image; the validation split is not empty."""
    emptied = classes[per_class >= counts]
    if len(emptied):
        raise DataError(
            f"{KEY}={val_split} holds out every training image of class(es) "
            f"{', '.join(map(str, emptied.tolist()))}; {_ALLOWED}"
        )
    if not per_class.sum():
        raise DataError(
            f"{KEY}={val_split} holds out no image of the {int(counts.sum())}-image training "
            f"split; {_ALLOWED}"
        )
