"""A user's own images for `sporeflow predict`: a folder of JPEG/PNG files or a `.npy` batch,
read as HWC uint8 arrays with a data set's channels (1: grey, 3: RGB). Every file is checked
before any is used, so bad input is refused before the network is built; an image whose header
declares more than MAX_PIXELS is refused unread, so a small file cannot take the memory."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from sporeflow.core.errors import DataError

SUFFIXES = (".jpg", ".jpeg", ".png")
DECODED_FORMATS = ("JPEG", "PNG")  # Pillow's names of what the suffixes promise
MAX_PIXELS = 50_000_000  # a 50 MP photo decodes to 150 MB of RGB; a larger image is refused
CHANNELS = (1, 3)  # grey or RGB


@dataclass(frozen=True)
class ImageInput:
    """The images of one folder or `.npy` file: their names (a file's path inside the folder,
    `batch.npy[i]`) and, by `images()`, the arrays in the same order."""

    path: Path
    names: tuple[str, ...]
    channels: int
    shorter_sides: tuple[int, ...]  # each image's shorter side in pixels, as stored

    def scaled_up(self, side: int, factor: int = 2) -> list[tuple[str, int]]:
        """(name, shorter side) of the images a network taking `side` pixels sees scaled up
        `factor` times or more, smallest first."""
        small = [(n, s) for n, s in zip(self.names, self.shorter_sides, strict=True)]
        return sorted((p for p in small if p[1] * factor <= side), key=lambda p: p[1])

    @property
    def encoded(self) -> bool:
        """A folder's images come as their files' bytes, for MindSpore's decoder to decode as it
        decodes training images (`ImageDataset.from_images`); a .npy batch's as arrays."""
        return self.path.is_dir()

    def images(self) -> Iterator[np.ndarray]:
        if self.encoded:
            for name in self.names:
                yield np.fromfile(self.path / name, np.uint8)
        else:
            for image in np.load(self.path, mmap_mode="r"):
                yield _with_channel_axis(np.array(image))


def image_input(path: Path, channels: int) -> ImageInput:
    """The checked images at `path`; DataError naming the file and what is allowed."""
    if channels not in CHANNELS:
        raise DataError(f"images of {channels} channels cannot be read from files (1 or 3)")
    if path.is_dir():
        names, sides = _checked_files(path)
        return ImageInput(path, names, channels, sides)
    if path.suffix == ".npy" and path.is_file():
        names, sides = _checked_batch(path, channels)
        return ImageInput(path, names, channels, sides)
    raise DataError(f"{path}: not a folder of {'/'.join(SUFFIXES)} images or a .npy file")


def _checked_files(folder: Path) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The image files' names in the folder and their shorter sides."""
    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in SUFFIXES and p.is_file())
    if not files:
        raise DataError(f"{folder} holds no image files ({', '.join(SUFFIXES)})")
    sides = tuple(check_image(file) for file in files)
    return tuple(str(p.relative_to(folder)) for p in files), sides


def check_image(file: Path) -> int:
    """The shorter side of an image MindSpore's decoder reads as it reads a training image: a
    JPEG or PNG by content (whatever its suffix), of at most MAX_PIXELS as its header declares
    (judged before anything is decoded: a 100 KB PNG can declare 30000 x 30000 pixels, a
    decompression bomb), decoded whole once by Pillow, so a truncated or corrupt file is named
    here (MindSpore's `vision.Decode` dies of SIGFPE on some, issue 60). DataError naming the
    file and why."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # refused just below
            with Image.open(file) as image:
                width, height = image.size
                if width * height > MAX_PIXELS:
                    raise DataError(_too_large(file, f"{width} x {height} pixels"))
                if image.format not in DECODED_FORMATS:
                    raise DataError(
                        f"{file}: a {image.format} file; images are read by MindSpore's decoder, "
                        f"which takes {' and '.join(DECODED_FORMATS)}: convert it"
                    )
                image.load()
                return min(width, height)
    except Image.DecompressionBombError:
        raise DataError(_too_large(file, f"over {2 * Image.MAX_IMAGE_PIXELS} pixels")) from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as ex:
        raise DataError(f"{file}: not a readable image ({ex})") from None


def _too_large(file: Path, declared: str) -> str:
    return (
        f"{file}: declares {declared}; images of more than {MAX_PIXELS // 10**6} megapixels are "
        "refused before decoding (each is decoded whole before it is scaled): scale it down first"
    )


def _checked_batch(path: Path, channels: int) -> tuple[tuple[str, ...], tuple[int, ...]]:
    try:
        batch = np.load(path, mmap_mode="r")
    except (ValueError, OSError) as ex:
        raise DataError(f"{path}: not a NumPy array file ({ex})") from None
    shape = batch.shape
    layout_ok = len(shape) == 3 and channels == 1 or len(shape) == 4 and shape[3] == channels
    if batch.dtype != np.uint8 or not layout_ok or not shape[0]:
        raise DataError(
            f"{path}: {batch.dtype} array of shape {shape}; expected uint8 images N x H x W"
            f"{' (x 1)' if channels == 1 else ''} x {channels} channels, as the data set's"
            " own images"
        )
    names = tuple(f"{path.name}[{i}]" for i in range(shape[0]))
    return names, (min(shape[1], shape[2]),) * shape[0]


def _with_channel_axis(image: np.ndarray) -> np.ndarray:
    return image[:, :, None] if image.ndim == 2 else image
