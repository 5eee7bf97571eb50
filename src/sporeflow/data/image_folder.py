"""ImageNet-style JPEG trees: `<root>/train/<class>/*.JPEG` and `<root>/val/<class>/*.JPEG`,
read by MindSpore's ImageFolderDataset (labels = sorted class folder names).

Transforms as in the seeds: train RandomCropDecodeResize(image_size) + RandomHorizontalFlip;
eval Decode, Resize(image_size * 256 / 224), CenterCrop(image_size); then Normalize, HWC2CHW.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import mindspore.dataset as mds
from mindspore.dataset import vision

from sporeflow.core.errors import DataError
from sporeflow.core.ranges import Count
from sporeflow.data.base import DataSource, ImageDataset
from sporeflow.data.readable import check_readable

EXTENSIONS = [".JPEG", ".jpeg", ".jpg", ".JPG", ".png", ".PNG"]
SPLIT_DIRS = {"train": "train", "test": "val"}
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
        self.native_size = image_size  # decode_ops already produce image_size x image_size
        self.root = Path(root).expanduser()

    def _split_dir(self, split: str) -> Path:
        directory = self.root / SPLIT_DIRS[split]
        if not directory.is_dir():
            raise DataError(
                f"dataset.root={self.root} lacks {SPLIT_DIRS[split]}/; expected "
                f"{self.root}/train/<class>/*.JPEG and {self.root}/val/<class>/*.JPEG"
            )
        return directory

    def check(self) -> None:
        """The base checks, then every image of both splits decodes (data.readable): a
        damaged file is refused before work, not met by MindSpore's decoder mid-epoch."""
        super().check()
        self._check_classes()
        for split in SPLIT_DIRS:
            directory = self._split_dir(split)
            check_readable(directory, _image_files(directory))

    def _check_classes(self) -> None:
        """Every split is labelled by the training split's class folders: a class the training
        split lacks cannot be labelled (refused); one a split lacks is said in one line."""
        trained = self.class_names() or []
        directory = self._split_dir("test")
        found = [d.name for d in _class_dirs(directory)]
        unknown = [name for name in found if name not in trained]
        if unknown:
            raise DataError(
                f"{directory}: class folder(s) {', '.join(unknown)} not in the training split "
                f"{self._split_dir('train')} (its classes: {', '.join(trained)}); "
                "every split is labelled by the training split's folders"
            )
        missing = [name for name in trained if name not in found]
        if missing:
            log.info(
                "%s holds no %s: its images are labelled by the training split's %d classes",
                directory,
                ", ".join(missing),
                len(trained),
            )

    def class_names(self):
        """The training split's class folders in sorted order: MindSpore's label numbering."""
        directory = self.root / SPLIT_DIRS["train"]
        return [d.name for d in _class_dirs(directory)] if directory.is_dir() else None

    def num_rows(self, split):
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

    def source(self, split):
        # a directory: its digest covers the file names and sizes, not every image's bytes
        return DataSource(self.root.name, str(self.root), [self._split_dir(split)], "")

    def _source(self, split, sampler):
        classes = self.class_names() or []  # the training split's numbering for every split
        return mds.ImageFolderDataset(
            str(self._split_dir(split)),
            sampler=sampler,
            extensions=EXTENSIONS,
            class_indexing={name: label for label, name in enumerate(classes)},
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
