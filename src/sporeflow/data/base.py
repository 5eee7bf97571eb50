"""What every image data set shares: splits, sharding, the transform chain, batching.

A data-set class describes its STORED splits (`stored_splits`, `stored_rows`, `stored_labels`,
`stored_source`, `_source`: where the samples come from); this base turns them into the three
splits a job reads (`SPLITS`), each with one job (docs: "Which images decide"): `train` trains,
`val` chooses (every evaluation during training, best-k, early stopping, sweeps), `test`
reports once. `val` is the stored validation split where the data set has one, else the rows
`dataset.val_split` holds out of the stored training split (data.splits, drawn by
`dataset.split_seed`), `train` what is left; with `val_split=0` there is none and choices read
the test split (`selection_split`). Each split becomes a MindSpore pipeline: map (resize,
rescale, normalize, HWC->CHW), label cast, batch, and on a mixed training split (augment.mix)
one-hot labels mixed with their images after batching.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import mindspore as ms
import mindspore.dataset as mds
import numpy as np
from mindspore.dataset import transforms, vision

from sporeflow.core.errors import DataError
from sporeflow.core.ranges import Count, NonNegative
from sporeflow.data import splits
from sporeflow.data.sampling import EpochSampler

SPLITS = ("train", "val", "test")
EVALUATED = ("val", "test")  # what a stage evaluates, read in order
STORED_SPLITS = ("train", "test")  # what most formats store; an image folder may add val


def even_batch_size(rows: int, batch_size: int) -> int:
    """The size that cuts `rows` into equal batches of at least half `batch_size`, with the
    fewest batches that allows (a split smaller than that is one batch); `batch_size` when no
    such size exists. In GRAPH_MODE a smaller last batch is a second input shape: every network
    that evaluates the split would compile a second graph for it."""
    if 0 < rows < batch_size // 2:
        return rows
    return common_even_batch_size([rows], batch_size) or batch_size


def common_even_batch_size(counts: Sequence[int], batch_size: int) -> int | None:
    """The largest size from half `batch_size` (rounded down, at least 1) up to `batch_size`
    that cuts each of `counts` into equal batches, or None. The validation and test splits read
    at one such size are one input shape: a network evaluating both compiles one graph, not two
    (the digits splits, 144 and 360 images at batch 32: 24 for both, where each alone would take
    24 and 30)."""
    for size in range(batch_size, max(1, batch_size // 2) - 1, -1):
        if all(count % size == 0 for count in counts):
            return size
    return None


@dataclass(frozen=True)
class DataSource:
    """Where a split comes from: a name users know, a location, the files whose bytes are the
    data (hashed into the record's digest) and what else selects the images (`selection`)."""

    name: str
    location: str
    files: list[Path]
    selection: str


class ImageDataset(ABC):
    """A split-able image classification data set; `create()` returns a MindSpore Dataset.

    `val_split` and `split_seed` (every data set's keys) choose the validation split held out
    of the stored training split: a fraction in (0, 1), an image count >= 1, or 0 for none
    (data.splits.held_out says how); `split_seed` is not the training seed, so every arm, seed
    and job of a sweep holds out the same images."""

    native_size: int = 0  # side of the stored images; resized to image_size when different
    recipe: tuple[str, ...] = ()  # augment.ops: MindSpore's recipes after augment_ops (train)
    mix: tuple[str, float] | None = None  # augment.mix and mix_alpha: batches mixed (train)

    def __init__(
        self,
        batch_size: Annotated[int, Count],
        image_size: Annotated[int, Count],
        num_classes: Annotated[int, Count],
        channels: Annotated[int, Count],
        mean: float | Sequence[float],
        std: float | Sequence[float],
        num_parallel_workers: Annotated[int, Count] = 1,
        drop_remainder: bool = False,
        val_split: Annotated[float, NonNegative] = 0.1,
        split_seed: Annotated[int, NonNegative] = 0,
    ):
        self.batch_size = batch_size
        self.image_size = image_size
        self.num_classes = num_classes
        self.channels = channels
        self.mean = _per_channel(mean, channels)
        self.std = _per_channel(std, channels)
        self.num_parallel_workers = num_parallel_workers
        self.drop_remainder = drop_remainder
        self.val_split = val_split
        self.split_seed = split_seed
        self._held_out: np.ndarray | None = None

    # -- what a data-set class says: its stored splits --------------------------------------

    def stored_splits(self) -> tuple[str, ...]:
        """The splits the files hold: train and test, and val where the data set ships one."""
        return STORED_SPLITS

    @abstractmethod
    def stored_rows(self, split: str) -> int:
        """How many samples stored `split` holds (DataError when it is missing or empty)."""

    def stored_labels(self, split: str) -> np.ndarray:
        """Every label of stored `split` in stored order (the order `_source` numbers its rows).
        Here read through the MindSpore pipeline once (the label column only); a format whose
        files give their labels cheaply says so itself."""
        sampler = EpochSampler(self.stored_rows(split), 0, shuffle=False)
        data = self._source(split, sampler).project(["label"])
        rows = data.create_tuple_iterator(output_numpy=True, num_epochs=1)
        return np.array([int(label) for (label,) in rows], np.int64)

    def stored_source(self, split: str) -> DataSource:
        """What stored `split` is read from, for the run's record."""
        return DataSource(type(self).__name__.lower(), "", [], "")

    @abstractmethod
    def _source(self, split: str, sampler: EpochSampler) -> mds.Dataset:
        """Stored `split` as a dataset with columns `image` (HWC uint8) and `label`, read in
        `sampler`'s order (its indices number the stored rows)."""

    def class_names(self) -> list[str] | None:
        """Each label's name, in label order, where the data set has names (None: only numbers)."""
        return None

    # -- what a job reads: train, val, test ---------------------------------------------------

    def held_out(self) -> np.ndarray:
        """The stored training rows held out for validation (sorted int64; empty when the data
        set stores its own validation split or val_split is 0), drawn once per instance."""
        if self._held_out is None:
            self._held_out = self._draw_held_out()
        return self._held_out

    def _draw_held_out(self) -> np.ndarray:
        if "val" in self.stored_splits() or self.val_split == 0:
            return np.zeros(0, np.int64)
        rows = self.stored_rows("train")
        labels = self.stored_labels("train")
        if len(labels) != rows:
            raise DataError(f"the train split has {rows} images but {len(labels)} labels")
        return splits.held_out(labels, self.val_split, self.split_seed)

    @property
    def selection_split(self) -> str:
        """The split choices read: "val", or "test" when there is no validation split
        (val_split=0 on a data set that stores none): a stage says so and tags it."""
        return "test" if self._read("val")[0] == "test" else "val"

    def _read(self, split: str) -> tuple[str, np.ndarray | None]:
        """(the stored split `split` reads, its stored rows; None: all of them)."""
        if split not in SPLITS:
            raise ValueError(f"split={split!r}; allowed: {', '.join(SPLITS)}")
        if split == "test" or "val" in self.stored_splits():
            return split, None
        held = self.held_out()
        if not len(held):
            return ("test" if split == "val" else split), None
        if split == "val":
            return "train", held
        return "train", np.setdiff1d(np.arange(self.stored_rows("train")), held)

    def num_rows(self, split: str) -> int:
        """How many samples `split` holds (DataError when it is missing or empty)."""
        stored, rows = self._read(split)
        count = self.stored_rows(stored)
        return count if rows is None else len(rows)

    def labels(self, split: str) -> np.ndarray:
        """Every label of `split`, in the order `create(split, shuffle=False)` reads them."""
        stored, rows = self._read(split)
        labels = self.stored_labels(stored)
        return labels if rows is None else labels[rows]

    def source(self, split: str) -> DataSource:
        """What `split` is read from, for the run's record (its MLflow dataset input): a split
        held out of (or left by) validation names val_split, split_seed and the held-out rows'
        digest in its `selection`."""
        stored, rows = self._read(split)
        found = self.stored_source(stored)
        if rows is None:
            return found
        held = (
            f"val_split={self.val_split} split_seed={self.split_seed} "
            f"held out {len(self.held_out())} rows ({splits.digest(self.held_out())})"
        )
        part = "those rows" if split == "val" else "the rest"
        selection = "; ".join(p for p in (found.selection, f"{held}: {part}") if p)
        return DataSource(found.name, found.location, found.files, selection)

    def check(self, splits: Sequence[str] = SPLITS) -> None:
        """What can be known about the files before training: each stored split exists, is in
        the expected format and layout and is not empty, its labels lie in 0..num_classes-1,
        and val_split holds out a validation split that leaves every class a training image.
        Only what `splits` read (eval.py checks the split it evaluates). Raises DataError
        naming the file or key."""
        self.check_stored(self.stored_for(splits))
        for split in splits:
            self.num_rows(split)

    def stored_for(self, splits: Sequence[str]) -> tuple[str, ...]:
        """The stored splits that `splits` read: a validation split not stored is held out of
        the stored training split (or, with val_split=0, is the test split)."""
        wanted = set(splits)
        if "val" in wanted and "val" not in self.stored_splits():
            wanted |= {"train", "test"}
        return tuple(s for s in self.stored_splits() if s in wanted)

    def label_by(self, names: Sequence[str]) -> None:
        """Label the splits by a trained model's class names (eval of a model that stored
        them). Here the labels are fixed by the files: a data set that names them otherwise is
        refused (DataError); one whose classes are only numbers is read by its numbers."""
        own = self.class_names()
        if own is not None and list(own) != list(names):
            raise DataError(
                f"the data set's classes ({', '.join(own)}) are not the model's "
                f"({', '.join(names)}, stored with its weights)"
            )

    def check_stored(self, splits: Sequence[str] | None = None) -> None:
        """The stored splits' checks (`check`; `splits`: only those); a format with more to
        check extends this."""
        for split in self.stored_splits() if splits is None else splits:
            self.stored_rows(split)
            labels = self.stored_labels(split)
            if len(labels) and (labels.min() < 0 or labels.max() >= self.num_classes):
                bad = labels.max() if labels.max() >= self.num_classes else labels.min()
                raise DataError(
                    f"the {split} split has label {int(bad)}, outside 0..{self.num_classes - 1} "
                    f"(dataset.num_classes={self.num_classes})"
                )

    def create(
        self,
        split: str = "train",
        shuffle: bool | None = None,
        num_shards: int | None = None,
        shard_id: int | None = None,
        seed: int = 0,
        start_epoch: int = 0,
        augment: bool | None = None,
        mix: bool | None = None,
    ) -> mds.Dataset:
        """The batched pipeline for `split` (train, val or test); shuffled and augmented by
        default for train only (eval.py split=train reads it in order and as the network is
        evaluated); mixed batches (float32 soft labels, N x num_classes) where `mix` (default:
        augmented) and augment.mix.

        The order of epoch e depends only on (seed, e), so a run resumed at `start_epoch`
        sees the same batches as one that never stopped. A split read in order (an
        evaluation) comes in equal batches where its size allows (`even_batch_size`).
        """
        stored, rows = self._read(split)
        shuffle = (split == "train") if shuffle is None else shuffle
        count = self.num_rows(split)
        sampler = EpochSampler(count, seed, shuffle, start_epoch, num_shards, shard_id, rows)
        data = self._source(stored, sampler)
        augmented = split == "train" if augment is None else augment
        ops = list(self.decode_ops(split))
        if augmented:
            ops += self.augment_ops() + recipe_ops(self.recipe, on_tensor=False)
        ops += self.image_ops()
        if augmented:
            ops += recipe_ops(self.recipe, on_tensor=True)
        data = data.map(ops, input_columns="image", num_parallel_workers=self.num_parallel_workers)
        data = data.map(transforms.TypeCast(ms.int32), input_columns="label")
        mixed = self.mix is not None and (augmented if mix is None else mix)
        if mixed:
            data = data.map(transforms.OneHot(self.num_classes), input_columns="label")
        size = self.batch_size
        if not shuffle and not self.drop_remainder:
            size = self._in_order_batch_size(split, sampler.per_shard, sampler.num_shards)
        data = data.batch(size, drop_remainder=self.drop_remainder)
        return self._mixed(data) if mixed else data

    def _in_order_batch_size(self, split: str, rows: int, num_shards: int) -> int:
        """A split read in order: equal batches where its size allows (`even_batch_size`); the
        validation and test splits at one size when one cuts both (`common_even_batch_size`)."""
        own = even_batch_size(rows, self.batch_size)
        if split not in EVALUATED:
            return own
        try:
            shards = [math.ceil(self.num_rows(s) / num_shards) for s in EVALUATED]
        except DataError:  # the other split cannot be read: said where it is read
            return own
        return common_even_batch_size(shards, self.batch_size) or own

    def _mixed(self, batches: mds.Dataset) -> mds.Dataset:
        """MindSpore's MixUpBatch or CutMixBatch over batches of CHW images and one-hot labels;
        the labels come out as float32 mixtures."""
        assert self.mix is not None
        name, alpha = self.mix
        if name == "mixup":
            op = vision.MixUpBatch(alpha)
        else:
            op = vision.CutMixBatch(vision.ImageBatchFormat.NCHW, alpha, prob=1.0)
        batches = batches.map(op, input_columns=["image", "label"])
        return batches.map(transforms.TypeCast(ms.float32), input_columns="label")

    def decode_ops(self, split: str) -> list:
        """Ops that turn stored bytes into an HWC uint8 image (none: sources yield arrays)."""
        return []

    def file_decode_ops(self) -> list:
        """Ops that turn a JPEG/PNG file's bytes into an HWC uint8 image of this data set's
        channels: MindSpore's `vision.Decode` (RGB, what an image folder's split is decoded
        with: 16-bit, palette and alpha images come out as training sees them), then grey
        (OpenCV's RGB2GRAY, Pillow's "L" weights) for a one-channel data set."""
        if self.channels != 1:
            return [vision.Decode()]
        return [vision.Decode(), vision.ConvertColor(vision.ConvertMode.COLOR_RGB2GRAY), _hw1]

    def stored_size_ops(self) -> list:
        """Ops that give a decoded image of any size the size this data set's eval images have
        before `image_ops` (its stored size); what a user's own image files go through."""
        return [vision.Resize((self.native_size, self.native_size))] if self.native_size else []

    def from_images(
        self, images: Callable[[], Iterator[np.ndarray]], encoded: bool = False
    ) -> mds.Dataset:
        """Batches of other images (any size) as the eval split is fed to the network: `images`
        is called once and yields them in order, as HWC uint8 arrays of this data set's
        channels, or (`encoded`) as the bytes of JPEG/PNG files, decoded by MindSpore's decoder
        as an image folder's training images are (`file_decode_ops`)."""
        data = mds.GeneratorDataset(lambda: ((i,) for i in images()), ["image"], shuffle=False)
        ops = (self.file_decode_ops() if encoded else []) + self.stored_size_ops()
        ops += self.image_ops()
        data = data.map(ops, input_columns="image", num_parallel_workers=self.num_parallel_workers)
        return data.batch(self.batch_size)

    def augment_ops(self) -> list:
        """Random transforms for the training split only (none by default)."""
        return []

    def image_ops(self) -> list:
        ops = []
        if self.image_size != self.native_size:
            ops.append(vision.Resize((self.image_size, self.image_size)))
        ops += [
            vision.Rescale(1.0 / 255.0, 0.0),
            vision.Normalize(mean=self.mean, std=self.std),
            vision.HWC2CHW(),
        ]
        return ops


_RECIPES = {  # augment.ops: (the op, whether it takes the normalised CHW tensor)
    "randaugment": (vision.RandAugment, False),
    "autoaugment": (vision.AutoAugment, False),
    "trivialaugment": (vision.TrivialAugmentWide, False),
    "random_erasing": (vision.RandomErasing, True),
}


def recipe_ops(recipe: Sequence[str], on_tensor: bool) -> list:
    """The recipe's ops that take the HWC uint8 image (on_tensor False) or the normalised CHW
    tensor (True), in the recipe's order."""
    return [make() for make, tensor in map(_RECIPES.__getitem__, recipe) if tensor == on_tensor]


def _hw1(image: np.ndarray) -> np.ndarray:
    """H x W -> H x W x 1 (the channel axis a grey image decodes without)."""
    return image[:, :, None]


def _per_channel(value: float | Sequence[float], channels: Annotated[int, Count]) -> list[float]:
    if isinstance(value, (int, float)):
        return [float(value)] * channels
    values = [float(v) for v in value]
    if len(values) != channels:
        raise ValueError(f"{len(values)} normalisation values for {channels} channels")
    return values
