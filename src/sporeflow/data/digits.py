"""scikit-learn's bundled handwritten digits: 1,797 8x8 images, no download, the default data set.

The 0..16 pixel values are stretched to 0..255 uint8 so the shared pipeline treats them like
any stored image; the train/test split is stratified and fixed (seed 0), whatever the run seed.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated

import mindspore.dataset as mds
import numpy as np

from sporeflow.core.ranges import Count, OpenUnit
from sporeflow.data.base import DataSource, ImageDataset


@functools.lru_cache(maxsize=4)
def load_digits_split(
    split: str, test_fraction: Annotated[float, OpenUnit]
) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 8, 8, 1) uint8 and labels (N,) int32 of one split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = np.clip(digits.images * (255.0 / 16.0), 0, 255).astype(np.uint8)[..., None]
    labels = digits.target.astype(np.int32)
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=test_fraction, random_state=0, stratify=labels
    )
    return (x_train, y_train) if split == "train" else (x_test, y_test)


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
        )
        if not 0.0 < test_fraction < 1.0:
            raise ValueError(f"dataset.test_fraction={test_fraction}: must be between 0 and 1")
        self.test_fraction = test_fraction

    def num_rows(self, split):
        return len(load_digits_split(split, self.test_fraction)[1])

    def source(self, split):
        import sklearn.datasets

        data = Path(sklearn.datasets.__file__).parent / "data" / "digits.csv.gz"
        return DataSource(
            "sklearn-digits",
            "sklearn.datasets.load_digits",
            [data],
            f"test_fraction={self.test_fraction} split seed 0",
        )

    def labels(self, split):
        return load_digits_split(split, self.test_fraction)[1]

    def _source(self, split, sampler):
        images, labels = load_digits_split(split, self.test_fraction)
        return mds.NumpySlicesDataset({"image": images, "label": labels}, sampler=sampler)
