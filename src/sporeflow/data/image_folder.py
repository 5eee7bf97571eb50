"""ImageNet-style JPEG trees read by MindSpore's ImageFolderDataset (labels = the training
split's sorted class folder names, for every split).

Two layouts: `<root>/train/<class>/*.JPEG` and `<root>/val/<class>/*.JPEG` (ImageNet's own:
its `val/` is the TEST split, and validation is held out of `train/` by dataset.val_split), or
`train/ val/ test/`, mapped one to one (the stored `val/` is the validation split; val_split
and split_seed are then unused). `train/ test/` reads `test/` as the test split.

Transforms as in the seeds: train RandomCropDecodeResize(image_size) + RandomHorizontalFlip;
eval Decode, Resize(image_size * 256 / 224), CenterCrop(image_size); then Normalize, HWC2CHW.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import mindspore.dataset as mds
import numpy as np
from mindspore.dataset import vision

from sporeflow.core.errors import DataError
from sporeflow.core.ranges import Count, NonNegative
from sporeflow.data.base import DataSource, ImageDataset
from sporeflow.data.readable import check_readable

EXTENSIONS = [".JPEG", ".jpeg", ".jpg", ".JPG", ".png", ".PNG"]
SPLIT_DIRS = {"train": "train", "test": "val"}  # ImageNet's layout: val/ is the test split
THREE_DIRS = {"train": "train", "val": "val", "test": "test"}  # a stored validation split
log = logging.getLogger(__name__)


class ImageFolder(ImageDataset):
    def __init__(
        self,
        root: str,
        batch_size: Annotated[int, Count] = 32,
        image_size: Annotated[int, Count] = 224,
        num_classes: Annotated[int, Count] = 1000,
        channels: Annotated[int, Count] = 3,
        mean=(0.485, 0.456, 0.406),
        std=(0.229, 0.224, 0.225),
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
        self.native_size = image_size  # decode_ops already produce image_size x image_size
        self.root = Path(root).expanduser()

    def split_dirs(self) -> dict[str, str]:
        """Stored split -> its folder under root: THREE_DIRS when root holds val/ and test/,
        train/ and test/ when it holds test/ without val/, else ImageNet's SPLIT_DIRS."""
        has = {name: (self.root / name).is_dir() for name in ("val", "test")}
        if has["val"] and has["test"]:
            return THREE_DIRS
        return {"train": "train", "test": "test"} if has["test"] else SPLIT_DIRS

    def stored_splits(self):
        return tuple(self.split_dirs())

    def _split_dir(self, split: str) -> Path:
        folder = self.split_dirs()[split]
        directory = self.root / folder
        if not directory.is_dir():
            raise DataError(
                f"dataset.root={self.root} lacks {folder}/; expected "
                f"{self.root}/train/<class>/*.JPEG and {self.root}/val/<class>/*.JPEG "
                "(or train/, val/ and test/)"
            )
        return directory

    def check_stored(self) -> None:
        """The base checks, then every image of every split decodes (data.readable): a
        damaged file is refused before work, not met by MindSpore's decoder mid-epoch."""
        super().check_stored()
        for split in self.stored_splits():
            directory = self._split_dir(split)
            self._say_missing_classes(directory)
            check_readable(directory, _image_files(directory))

    def _say_missing_classes(self, directory: Path) -> None:
        """A split lacking some of the training split's classes is labelled by the training
        split's numbering all the same: said in one line."""
        found = {d.name for d in _class_dirs(directory)}
        missing = [name for name in self.class_names() or [] if name not in found]
        if missing:
            log.info(
                "%s holds no %s: its images are labelled by the training split's %d classes",
                directory,
                ", ".join(missing),
                len(self.class_names() or []),
            )

    def _class_indexing(self, directory: Path) -> dict[str, int]:
        """The training split's label of each class folder of `directory`: a class the training
        split lacks cannot be labelled (DataError naming the folder)."""
        trained = self.class_names() or []
        unknown = [d.name for d in _class_dirs(directory) if d.name not in trained]
        if unknown:
            raise DataError(
                f"{directory}: class folder(s) {', '.join(unknown)} not in the training split "
                f"{self._split_dir('train')} (its classes: {', '.join(trained)}); "
                "every split is labelled by the training split's folders"
            )
        return {name: label for label, name in enumerate(trained)}

    def class_names(self):
        """The training split's class folders in sorted order: MindSpore's label numbering."""
        directory = self.root / "train"
        return [d.name for d in _class_dirs(directory)] if directory.is_dir() else None

    def stored_rows(self, split):
        directory = self._split_dir(split)
        classes = _class_dirs(directory)
        if len(classes) > self.num_classes:
            raise DataError(
                f"{directory} has {len(classes)} class folders but dataset.num_classes="
                f"{self.num_classes}"
            )
        count = len(_image_files(directory))
        if count == 0:
            raise DataError(
                f"the {split} split {directory} holds no images ({', '.join(EXTENSIONS)}) "
                "in class folders"
            )
        return count

    def stored_labels(self, split):
        """Each image's label from the folder listing, in the order ImageFolderDataset reads
        a split with a sequential sampler (class folders sorted, files sorted in each)."""
        directory = self._split_dir(split)
        indexing = self._class_indexing(directory)
        return np.array([indexing[f.parent.name] for f in _image_files(directory)], np.int64)

    def stored_source(self, split):
        # a directory: its digest covers the file names and sizes, not every image's bytes
        return DataSource(self.root.name, str(self.root), [self._split_dir(split)], "")

    def _source(self, split, sampler):
        directory = self._split_dir(split)  # the training split's numbering for every split
        return mds.ImageFolderDataset(
            str(directory),
            sampler=sampler,
            extensions=EXTENSIONS,
            class_indexing=self._class_indexing(directory),
            decode=False,
        )

    def decode_ops(self, split):
        size = self.image_size
        if split == "train":
            return [vision.RandomCropDecodeResize(size, scale=(0.08, 1.0), ratio=(0.75, 1.333))]
        return [vision.Decode(), *self.stored_size_ops()]

    def stored_size_ops(self):
        size = self.image_size
        return [vision.Resize(int(size * 256 / 224)), vision.CenterCrop(size)]

    def augment_ops(self):
        return [vision.RandomHorizontalFlip(prob=0.5)]


def _image_files(split_dir: Path) -> list[Path]:
    """The files MindSpore's ImageFolderDataset reads of a split: those with one of EXTENSIONS
    directly in a class folder."""
    return [
        f for c in _class_dirs(split_dir) for f in sorted(c.iterdir()) if f.suffix in EXTENSIONS
    ]


def _class_dirs(split_dir: Path) -> list[Path]:
    """A split's class folders in sorted order (MindSpore's ImageFolderDataset numbers them so)."""
    return sorted(d for d in split_dir.iterdir() if d.is_dir())
