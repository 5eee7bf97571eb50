"""scikit-learn's bundled handwritten digits: 1,797 8x8 images, no download, the default data set.

The 0..16 pixel values are stretched to 0..255 uint8 so the shared pipeline treats them like
any stored image; the train/test split is stratified and fixed (seed 0), whatever the run seed.
"""

from __future__ import annotations

import functools
import importlib.util
from importlib.metadata import version
from pathlib import Path
from typing import Annotated

import mindspore.dataset as mds
import numpy as np

from sporeflow.core.ranges import Count, NonNegative, OpenUnit
from sporeflow.data.base import DataSource, ImageDataset
from sporeflow.storage.cache import user_cache_dir
from sporeflow.storage.files import DiskFullError, atomic_path


def _sklearn_file(name: str) -> Path:
    """A file of scikit-learn's package, found without importing it (that takes seconds)."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("dataset=digits needs scikit-learn: pip install scikit-learn")
    return Path(spec.origin).parent / name


DIGITS_CSV = "datasets/data/digits.csv.gz"


def load_digits_split(
    split: str, test_fraction: Annotated[float, OpenUnit]
) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 8, 8, 1) uint8 and labels (N,) int32 of one split."""
    x_train, y_train, x_test, y_test = digits_splits(test_fraction)
    return (x_train, y_train) if split == "train" else (x_test, y_test)


@functools.lru_cache(maxsize=4)
def digits_splits(test_fraction: float) -> tuple[np.ndarray, ...]:
    """split_digits(test_fraction), read once per process from the user cache, keyed by
    scikit-learn's version and the fraction (importing scikit-learn for its split costs every
    job of a sweep about two seconds); made and kept there when absent or unreadable, made
    only when there is no cache to write."""
    names = ("x_train", "y_train", "x_test", "y_test")
    cached = _cache_file(test_fraction)
    if cached is None:
        return split_digits(test_fraction)
    try:
        with np.load(cached) as arrays:
            return tuple(arrays[n] for n in names)
    except (OSError, KeyError, ValueError):
        pass  # absent or partial: split again
    made = split_digits(test_fraction)
    try:
        with atomic_path(cached) as tmp:
            np.savez(tmp, **dict(zip(names, made, strict=True)))
    except (OSError, DiskFullError):
        pass  # a cache that cannot be written only costs the next job the split
    return made


def _cache_file(test_fraction: float) -> Path | None:
    """Where the split is kept; None when the user cache cannot be made (a read-only home)."""
    try:
        folder = user_cache_dir("digits")
    except OSError:
        return None
    return folder / f"split-sklearn{version('scikit-learn')}-test{test_fraction!r}.npz"


def split_digits(test_fraction: float) -> tuple[np.ndarray, ...]:
    """scikit-learn's digits split stratified with seed 0: x_train, y_train, x_test, y_test."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = np.clip(digits.images * (255.0 / 16.0), 0, 255).astype(np.uint8)[..., None]
    labels = digits.target.astype(np.int32)
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=test_fraction, random_state=0, stratify=labels
    )
    return x_train, y_train, x_test, y_test


class Digits(ImageDataset):
    native_size = 8

    def __init__(
        self,
        batch_size: Annotated[int, Count] = 32,
        image_size: Annotated[int, Count] = 32,
        num_classes: Annotated[int, Count] = 10,
        channels: Annotated[int, Count] = 1,
        test_fraction: Annotated[float, OpenUnit] = 0.2,
        mean: float = 0.3,
        std: float = 0.4,
        num_parallel_workers: Annotated[int, Count] = 1,
        drop_remainder: bool = False,
        val_split: Annotated[float, NonNegative] = 0.1,
        split_seed: Annotated[int, NonNegative] = 0,
        root: str | None = None,
    ):
        super().__init__(
            batch_size,
            image_size,
            num_classes,
            channels,
            mean,
            std,
            num_parallel_workers,
            drop_remainder,
            val_split,
            split_seed,
        )
        if not 0.0 < test_fraction < 1.0:
            raise ValueError(f"dataset.test_fraction={test_fraction}: must be between 0 and 1")
        self.test_fraction = test_fraction

    def stored_rows(self, split):
        return len(load_digits_split(split, self.test_fraction)[1])

    def stored_source(self, split):
        return DataSource(
            "sklearn-digits",
            "sklearn.datasets.load_digits",
            [_sklearn_file(DIGITS_CSV)],
            f"test_fraction={self.test_fraction} split seed 0",
        )

    def stored_labels(self, split):
        return load_digits_split(split, self.test_fraction)[1]

    def _source(self, split, sampler):
        images, labels = load_digits_split(split, self.test_fraction)
        return mds.NumpySlicesDataset({"image": images, "label": labels}, sampler=sampler)
