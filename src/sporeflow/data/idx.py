"""MNIST-family IDX files (MNIST, Fashion-MNIST) read by MindSpore's MnistDataset.

`root` may hold the raw files or the `.gz` files the publishers (and Debian's
`dataset-fashion-mnist`) ship; gzipped ones are expanded once into `cache_dir`, atomically,
since MnistDataset reads raw files only.
"""

from __future__ import annotations

import gzip
import os
import shutil
import struct
from pathlib import Path
from typing import Annotated

import mindspore.dataset as mds
import numpy as np

from sporeflow.core.errors import DataError
from sporeflow.core.ranges import Count, NonNegative
from sporeflow.data.base import DataSource, ImageDataset
from sporeflow.storage.files import atomic_path

FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
_MAGIC = {"images": 2051, "labels": 2049}


def _expected_layout(root: Path) -> str:
    names = [n for pair in FILES.values() for n in pair]
    return f"{root} must hold " + ", ".join(f"{n}[.gz]" for n in names)


def ensure_raw(root: str | os.PathLike, cache_dir: str | os.PathLike | None) -> Path:
    """The directory MnistDataset should read: `root` itself, or the cache with gunzipped copies."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DataError(
            f"dataset.root={root} does not exist or is not a directory; " + _expected_layout(root)
        )
    names = [n for pair in FILES.values() for n in pair]
    if all((root / n).is_file() for n in names):
        return root
    missing = [n for n in names if not (root / n).is_file() and not (root / f"{n}.gz").is_file()]
    if missing:
        raise DataError(
            f"dataset.root={root} lacks {', '.join(missing)} (raw or .gz); "
            + _expected_layout(root)
        )
    if cache_dir is None:
        raise DataError(
            f"dataset.root={root} holds gzipped IDX files; set dataset.cache_dir "
            "to a writable directory to expand them into"
        )
    cache = Path(cache_dir).expanduser()
    cache.mkdir(parents=True, exist_ok=True)
    for name in names:
        target = cache / name
        source = root / name if (root / name).is_file() else root / f"{name}.gz"
        if target.is_file() and target.stat().st_mtime >= source.stat().st_mtime:
            continue
        opener = gzip.open if source.suffix == ".gz" else open
        try:
            with atomic_path(target) as tmp, opener(source, "rb") as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst)
        except (OSError, EOFError) as ex:
            raise DataError(f"cannot expand {source} into {cache}: {ex}") from ex
    return cache


def read_idx_header(path: Path) -> tuple[int, int]:
    """(magic, count) of an IDX file; checks that the file is IDX at all."""
    with open(path, "rb") as f:
        head = f.read(8)
    if len(head) < 8:
        raise DataError(f"{path} is too short to be an IDX file")
    magic, count = struct.unpack(">II", head)
    if magic not in _MAGIC.values():
        raise DataError(f"{path} is not an IDX file (magic {magic}, expected 2051 or 2049)")
    return magic, count


class IdxImages(ImageDataset):
    native_size = 28

    def __init__(
        self,
        root: str,
        cache_dir: str | None = None,
        batch_size: Annotated[int, Count] = 64,
        image_size: Annotated[int, Count] = 28,
        num_classes: Annotated[int, Count] = 10,
        channels: Annotated[int, Count] = 1,
        mean: float = 0.1307,
        std: float = 0.3081,
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
        self.root = root
        self.cache_dir = cache_dir
        self.num_samples = num_samples

    def stored_rows(self, split):
        directory = ensure_raw(self.root, self.cache_dir)
        images, labels = (directory / n for n in FILES[split])
        _, n_images = read_idx_header(images)
        _, n_labels = read_idx_header(labels)
        if n_images != n_labels:
            raise DataError(f"{images} has {n_images} images but {labels} has {n_labels} labels")
        if n_images == 0:
            raise DataError(f"the {split} split in {directory} is empty")
        return min(n_images, self.num_samples) if self.num_samples else n_images

    def stored_source(self, split):
        directory = ensure_raw(self.root, self.cache_dir)
        selection = f"first {self.num_samples}" if self.num_samples else ""
        return DataSource(
            Path(self.root).name, str(self.root), [directory / n for n in FILES[split]], selection
        )

    def stored_labels(self, split):
        """The label file's bytes: the first num_samples where a subset is read."""
        path = ensure_raw(self.root, self.cache_dir) / FILES[split][1]
        return np.fromfile(path, dtype=np.uint8, offset=8)[: self.num_samples or None]

    def _source(self, split, sampler):
        directory = ensure_raw(self.root, self.cache_dir)
        return mds.MnistDataset(str(directory), usage=split, sampler=sampler)
