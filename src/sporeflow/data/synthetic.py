"""Random images and labels of any shape, generated in memory from a seed: for benchmarks and
for trying a model before its data set is at hand (accuracy on it means nothing)."""

from __future__ import annotations

from typing import Annotated

import mindspore.dataset as mds
import numpy as np

from sporeflow.core.ranges import Count, NonNegative
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
        data_seed: Annotated[int, NonNegative] = 0,
        mean: float = 0.5,
        std: float = 0.25,
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
        self.native_size = image_size
        self.sizes = {"train": num_samples, "test": test_samples}
        self.data_seed = data_seed

    def stored_rows(self, split):
        return self.sizes[split]

    def stored_source(self, split):
        return DataSource(
            "synthetic", "generated", [], f"data_seed={self.data_seed} images={self.sizes[split]}"
        )

    def stored_labels(self, split):
        return self._arrays(split)[1]

    def _source(self, split, sampler):
        images, labels = self._arrays(split)
        return mds.NumpySlicesDataset({"image": images, "label": labels}, sampler=sampler)

    def _arrays(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """Images (N, S, S, C) uint8 and labels (N,) int32 of a stored split: one draw, so the
        labels `stored_labels` gives are the ones the pipeline reads."""
        rng = np.random.default_rng(self.data_seed + (split == "test"))
        n, s = self.sizes[split], self.image_size
        images = rng.integers(0, 256, (n, s, s, self.channels), dtype=np.uint8)
        return images, rng.integers(0, self.num_classes, n).astype(np.int32)
