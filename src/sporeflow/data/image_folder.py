"""ImageNet-style image trees: `<split>/<class folder>/<images, at any depth>`. Labels are the
training split's sorted class folder names (torchvision's `find_classes`), for every split; a
model's own class names (stored with its weights, `label_by`) where eval reads a folder for a
trained network: each class folder is then labelled by its name, and one the model lacks is
refused. Which files are images is one rule for every split and for predict
(`image_files.inspect_image`, judged once per file: `readable`): every other file is left out
and named in one line; a training class folder with no image is refused before work, as
torchvision's ImageFolder refuses it.

Two layouts: `<root>/train/<class>/*.JPEG` and `<root>/val/<class>/*.JPEG` (ImageNet's own:
its `val/` is the TEST split, and validation is held out of `train/` by dataset.val_split), or
`train/ val/ test/`, mapped one to one (the stored `val/` is the validation split; val_split
and split_seed are then unused). `train/ test/` reads `test/` as the test split.

Transforms as in the seeds: train RandomCropDecodeResize(image_size) + RandomHorizontalFlip;
eval Decode, Resize(image_size * 256 / 224), CenterCrop(image_size); then Normalize, HWC2CHW.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import mindspore.dataset as mds
import numpy as np
from mindspore.dataset import vision

from sporeflow.core.errors import DataError
from sporeflow.core.ranges import Count, NonNegative
from sporeflow.data.base import DataSource, ImageDataset
from sporeflow.data.image_files import decoder_bytes, formats_said, left_out_line
from sporeflow.data.readable import checked_files

SPLIT_DIRS = {"train": "train", "test": "val"}  # ImageNet's layout: val/ is the test split
THREE_DIRS = {"train": "train", "val": "val", "test": "test"}  # a stored validation split
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Listing:
    """A split folder as read: its class folders (sorted), its images in reading order (class
    folders sorted, files sorted by path in each) with their formats and class folder names,
    and the files left out (not images)."""

    directory: Path
    classes: tuple[str, ...]
    files: tuple[Path, ...]
    formats: tuple[str, ...]
    file_classes: tuple[str, ...]
    left_out: tuple[Path, ...]
    total: int  # every file under the class folders

    def empty_classes(self) -> list[str]:
        return sorted(set(self.classes) - set(self.file_classes))


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
        self._model_classes: list[str] | None = None  # label_by: a trained model's names
        self._listings: dict[str, Listing] = {}

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
                f"{self.root}/train/<class>/<images> and {self.root}/val/<class>/<images> "
                "(or train/, val/ and test/)"
            )
        return directory

    def listing(self, split: str) -> Listing:
        """Stored `split`'s folder as read (Listing), judged once per instance: every file
        under its class folders by `image_files.inspect_image` (DataError naming a damaged
        one)."""
        if split not in self._listings:
            directory = self._split_dir(split)
            classes = _class_dirs(directory)
            found = [(c.name, f) for c in classes for f in sorted(c.rglob("*")) if f.is_file()]
            verdicts = checked_files(directory, [f for _, f in found])
            kept = [(c, f, v) for (c, f), v in zip(found, verdicts, strict=True) if v is not None]
            self._listings[split] = Listing(
                directory,
                tuple(c.name for c in classes),
                tuple(f for _, f, _ in kept),
                tuple(v[0] for _, _, v in kept),
                tuple(c for c, _, _ in kept),
                tuple(f for (_, f), v in zip(found, verdicts, strict=True) if v is None),
                len(found),
            )
        return self._listings[split]

    def check_stored(self, splits=None) -> None:
        """The base checks, then every file of every split judged (data.readable): a damaged
        image is refused before work, not met by MindSpore's decoder mid-epoch; files left out
        are said in one line per split; a training class folder with no image is refused."""
        checked = self.stored_splits() if splits is None else splits
        for split in checked:  # judged again as the files are now
            self._listings.pop(split, None)
        super().check_stored(splits)
        for split in checked:
            found = self.listing(split)
            if found.left_out:
                log.warning("%s", left_out_line(found.directory, found.left_out, found.total))
            if split == "train":
                _refuse_empty_classes(found)
            self._say_missing_classes(found)

    def _say_missing_classes(self, found: Listing) -> None:
        """A split lacking some of the classes is labelled by the full numbering all the same:
        said in one line."""
        missing = [name for name in self.class_names() or [] if name not in found.file_classes]
        if missing:
            log.info(
                "%s holds no %s: its images are labelled by the %d classes of %s",
                found.directory,
                ", ".join(missing),
                len(self.class_names() or []),
                self._numbering(),
            )

    def _numbering(self) -> str:
        """Where the labels' numbering comes from, for messages."""
        if self._model_classes is not None:
            return "the model (its class names, stored with its weights)"
        return f"the training split {self.root / 'train'}"

    def _class_indexing(self, found: Listing) -> dict[str, int]:
        """The label of each class folder of a split: a class the numbering lacks cannot be
        labelled (DataError naming the folder)."""
        trained = self.class_names() or []
        unknown = [name for name in found.classes if name not in trained]
        if unknown:
            raise DataError(
                f"{found.directory}: class folder(s) {', '.join(unknown)} not in "
                f"{self._numbering()} (its classes: {', '.join(trained)}); every split is "
                "labelled by those classes, by name"
            )
        return {name: label for label, name in enumerate(trained)}

    def class_names(self):
        """Each label's name: the model's (`label_by`), else the training split's class folders
        in sorted order."""
        if self._model_classes is not None:
            return list(self._model_classes)
        directory = self.root / "train"
        return [d.name for d in _class_dirs(directory)] if directory.is_dir() else None

    def label_by(self, names) -> None:
        """Label every split by a trained model's class names (in its label order): a class
        folder is its name's label wherever it sorts now."""
        self._model_classes = list(names)
        self._held_out = None

    def stored_rows(self, split):
        found = self.listing(split)
        self._class_indexing(found)  # a class folder unknown to the numbering: named first
        if len(found.classes) > self.num_classes:
            raise DataError(
                f"{found.directory} has {len(found.classes)} class folders but "
                f"dataset.num_classes={self.num_classes}"
            )
        if not found.files:
            raise DataError(
                f"the {split} split {found.directory} holds no images ({formats_said()}) "
                "in class folders"
            )
        return len(found.files)

    def stored_labels(self, split):
        """Each image's label, in the order `_source` reads the split's images."""
        found = self.listing(split)
        indexing = self._class_indexing(found)
        return np.array([indexing[name] for name in found.file_classes], np.int64)

    def stored_source(self, split):
        # a directory: its digest covers the file names and sizes, not every image's bytes
        return DataSource(self.root.name, str(self.root), [self._split_dir(split)], "")

    def _source(self, split, sampler):
        found = self.listing(split)
        labels = self.stored_labels(split)
        return mds.GeneratorDataset(
            _Images(found, labels),
            ["image", "label"],
            sampler=sampler,
            python_multiprocessing=False,
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


class _Images:
    """A split's images by row, as MindSpore's decoder takes them (`decoder_bytes`), with
    their labels: the random-access source a sampler indexes."""

    def __init__(self, found: Listing, labels: np.ndarray):
        self.found = found
        self.labels = labels

    def __len__(self) -> int:
        return len(self.found.files)

    def __getitem__(self, row: int):
        found = self.found
        return decoder_bytes(found.files[row], found.formats[row]), self.labels[row]


def _refuse_empty_classes(found: Listing) -> None:
    """A training class folder with no image would train a class it never shows: refused,
    naming the folder(s) (torchvision's ImageFolder refuses it so)."""
    empty = found.empty_classes()
    if empty:
        left = len([f for f in found.left_out if f.relative_to(found.directory).parts[0] in empty])
        raise DataError(
            f"{found.directory}: class folder(s) {', '.join(empty)} hold no image "
            f"({formats_said()}, by content{f'; {left} other files there left out' if left else ''})"
            ": add images or remove the folder"
        )


def _class_dirs(split_dir: Path) -> list[Path]:
    """A split's class folders in sorted order: the label numbering (torchvision's
    `find_classes`)."""
    return sorted(d for d in split_dir.iterdir() if d.is_dir())
