"""CIFAR-10 in its binary form (`cifar-10-batches-bin`), read by MindSpore's Cifar10Dataset.

Train augmentation as in the seeds: RandomCrop(32, padding 4) and RandomHorizontalFlip.
Note: Cifar10Dataset rejects .bin files of fewer than 10,000 records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import mindspore.dataset as mds
import numpy as np
from mindspore.dataset import vision

from sporeflow.core.errors import DataError
from sporeflow.core.ranges import Count, NonNegative
from sporeflow.data.base import DataSource, ImageDataset

RECORD = 1 + 32 * 32 * 3
FILES = {"train": [f"data_batch_{i}.bin" for i in range(1, 6)], "test": ["test_batch.bin"]}


class Cifar10(ImageDataset):
    native_size = 32

    def __init__(
        self,
        root: str,
        batch_size: Annotated[int, Count] = 32,
        image_size: Annotated[int, Count] = 32,
        num_classes: Annotated[int, Count] = 10,
        channels: Annotated[int, Count] = 3,
        mean=(0.4914, 0.4822, 0.4465),
        std=(0.2470, 0.2435, 0.2616),
        augment: bool = True,
        num_samples: int | None = None,
        num_parallel_workers: Annotated[int, Count] = 1,
        drop_remainder: bool = False,
        val_split: Annotated[float, NonNegative] = 0.1,
        split_seed: Annotated[int, NonNegative] = 0,
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
        self.root = Path(root).expanduser()
        self.augment = augment
        self.num_samples = num_samples

    def _files(self, split: str) -> list[Path]:
        if not self.root.is_dir():
            raise DataError(
                f"dataset.root={self.root} does not exist; it must be the cifar-10-batches-bin "
                f"folder holding {', '.join(FILES['train'] + FILES['test'])}"
            )
        missing = [n for n in FILES[split] if not (self.root / n).is_file()]
        if missing:
            raise DataError(
                f"dataset.root={self.root} lacks {', '.join(missing)}; expected the "
                "cifar-10-batches-bin layout: data_batch_1..5.bin and test_batch.bin"
            )
        return [self.root / n for n in FILES[split]]

    def stored_rows(self, split):
        files = self._files(split)
        sizes = [f.stat().st_size for f in files]
        bad = [f.name for f, size in zip(files, sizes, strict=False) if size % RECORD]
        if bad:
            raise DataError(
                f"{', '.join(bad)} in {self.root}: size is not a multiple of {RECORD}-byte records"
            )
        total = sum(sizes) // RECORD
        if total == 0:
            raise DataError(f"the {split} split in {self.root} is empty")
        return min(total, self.num_samples) if self.num_samples else total

    def stored_source(self, split):
        selection = f"first {self.num_samples}" if self.num_samples else ""
        return DataSource(self.root.name, str(self.root), self._files(split), selection)

    def stored_labels(self, split):
        """The label byte of every record read (a strided read through a memory map; the
        first num_samples where a subset is read)."""
        labels = [
            np.memmap(f, dtype=np.uint8, mode="r").reshape(-1, RECORD)[:, 0]
            for f in self._files(split)
        ]
        return np.concatenate(labels)[: self.num_samples or None]

    def _source(self, split, sampler):
        self._files(split)
        return mds.Cifar10Dataset(str(self.root), usage=split, sampler=sampler)

    def augment_ops(self) -> list:
        if not self.augment:
            return []
        return [vision.RandomCrop((32, 32), (4, 4, 4, 4)), vision.RandomHorizontalFlip()]
