"""Random images and labels of any shape, generated in memory from a seed: for benchmarks and
for trying a model before its data set is at hand (accuracy on it means nothing)."""

from __future__ import annotations

from typing import Annotated

import mindspore.dataset as mds
import numpy as np

from sporeflow.core.ranges import Count
from sporeflow.data.base import DataSource, ImageDataset


class Synthetic(ImageDataset):
    def __init__(
        self,
        batch_size: Annotated[int, Count] = 32,
        image_size: Annotated[int, Count] = 32,
        num_classes: Annotated[int, Count] = 10,
        channels: Annotated[int, Count] = 3,
        num_samples: Annotated[int, Count] = 512,
        test_samples: Annotated[int, Count] = 128,
        data_seed: int = 0,
        mean: float = 0.5,
        std: float = 0.25,
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
        self.native_size = image_size
        self.sizes = {"train": num_samples, "test": test_samples}
        self.data_seed = data_seed

    def num_rows(self, split):
        return self.sizes[split]

    def source(self, split):
        return DataSource(
            "synthetic", "generated", [], f"data_seed={self.data_seed} images={self.sizes[split]}"
        )

    def _source(self, split, sampler):
        rng = np.random.default_rng(self.data_seed + (split == "test"))
        n, s = self.sizes[split], self.image_size
        images = rng.integers(0, 256, (n, s, s, self.channels), dtype=np.uint8)
        labels = rng.integers(0, self.num_classes, n).astype(np.int32)
        return mds.NumpySlicesDataset({"image": images, "label": labels}, sampler=sampler)
