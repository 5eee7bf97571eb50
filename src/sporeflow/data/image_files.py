"""What is an image (one rule for training, eval and predict, issue 75), and a user's own images
for `sporeflow predict`: a folder of image files or a `.npy` batch, read as HWC uint8 arrays with
a data set's channels (1: grey, 3: RGB).

An image is a file Pillow identifies BY CONTENT as one of READ_FORMATS and decodes whole,
whatever its name (`4.Jpeg`, `x.TIF`, a PNG named `.jpg`). MindSpore's `vision.Decode` is given
the file's own bytes where it reads the format (NATIVE_FORMATS: JPEG, PNG, BMP); the others
(TIFF, WebP, GIF, PPM: Pillow reads them, MindSpore's decoder not at all or not as Pillow checked
them) are given to it as the lossless PNG of what Pillow decoded. A file that is not an image is
left out and named (`left_out_line`), unless its name promises an image (a suffix of one of
READ_FORMATS): that one, like an image that does not decode, is refused, naming it. Every file is
checked before any is used, so bad input is refused before the network is built; an image whose
header declares more than MAX_PIXELS is refused unread, so a small file cannot take the memory."""

from __future__ import annotations

import functools
import io
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from sporeflow.core.errors import DataError

NATIVE_FORMATS = ("JPEG", "MPO", "PNG", "BMP")  # Pillow's names; MPO: a camera's JPEG
CONVERTED_FORMATS = ("TIFF", "WEBP", "GIF", "PPM")  # given to MindSpore's decoder as PNG
READ_FORMATS = NATIVE_FORMATS + CONVERTED_FORMATS
PNG_MODES = ("L", "LA", "RGB", "RGBA")  # kept as they are in the PNG a converted image becomes
NAMED = 5  # left-out files named in a line; the rest counted
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
    formats: tuple[str, ...] = ()  # each image file's format (a folder's), Pillow's name
    left_out: str = ""  # the line naming a folder's files that are not images, if any

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
            for name, found in zip(self.names, self.formats, strict=True):
                yield decoder_bytes(self.path / name, found)
        else:
            for image in np.load(self.path, mmap_mode="r"):
                yield _with_channel_axis(np.array(image))


def image_input(path: Path, channels: int) -> ImageInput:
    """The checked images at `path`; DataError naming the file and what is allowed."""
    if channels not in CHANNELS:
        raise DataError(f"images of {channels} channels cannot be read from files (1 or 3)")
    if path.is_dir():
        return _checked_folder(path, channels)
    if path.suffix == ".npy" and path.is_file():
        names, sides = _checked_batch(path, channels)
        return ImageInput(path, names, channels, sides)
    raise DataError(f"{path}: not a folder of image files ({formats_said()}) or a .npy file")


def _checked_folder(folder: Path, channels: int) -> ImageInput:
    """Every file under `folder` (sorted, at any depth) judged by `inspect_image`: the images,
    their formats and shorter sides, and the line naming the files left out."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    found = [inspect_image(file) for file in files]
    images = [(f, v) for f, v in zip(files, found, strict=True) if v is not None]
    left_out = [f for f, v in zip(files, found, strict=True) if v is None]
    if not images:
        raise DataError(f"{folder} holds no image files ({formats_said()}) at any depth")
    return ImageInput(
        folder,
        tuple(str(f.relative_to(folder)) for f, _ in images),
        channels,
        tuple(side for _, (_, side) in images),
        tuple(kind for _, (kind, _) in images),
        left_out_line(folder, left_out, len(files)),
    )


def formats_said() -> str:
    return ", ".join(name for name in READ_FORMATS if name != "MPO")


@functools.cache
def image_suffixes() -> frozenset[str]:
    """The suffixes (lower case) Pillow gives the formats read: a file named so is meant as an
    image, so it is refused, not left out, when it is none."""
    return frozenset(s for s, kind in Image.registered_extensions().items() if kind in READ_FORMATS)


def inspect_image(file: Path) -> tuple[str, int] | None:
    """(format, shorter side) of an image by the one rule (module doc), None for a file left
    out (not an image, and not named as one). The image is of at most MAX_PIXELS as its header
    declares (judged before anything is decoded: a 100 KB PNG can declare 30000 x 30000
    pixels, a decompression bomb), decoded whole once by Pillow, so a truncated or corrupt
    file is named here (MindSpore's `vision.Decode` dies of SIGFPE on some, issue 60).
    DataError naming the file and why."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # refused just below
            with Image.open(file) as image:
                width, height = image.size
                if image.format not in READ_FORMATS:
                    return _not_an_image(
                        file, f"a {image.format} file; images are {formats_said()}: convert it"
                    )
                if width * height > MAX_PIXELS:
                    raise DataError(_too_large(file, f"{width} x {height} pixels"))
                image.load()
                return str(image.format), min(width, height)
    except Image.DecompressionBombError:
        raise DataError(_too_large(file, f"over {2 * Image.MAX_IMAGE_PIXELS} pixels")) from None
    except UnidentifiedImageError as ex:
        return _not_an_image(file, f"not a readable image ({ex})")
    except (OSError, SyntaxError, ValueError) as ex:
        raise DataError(f"{file}: not a readable image ({ex})") from None


def _not_an_image(file: Path, why: str) -> None:
    """A file that is no image read: left out (None), or refused when its name promises one."""
    if file.suffix.lower() in image_suffixes():
        raise DataError(f"{file}: {why}")
    return None


def decoder_bytes(file: Path, kind: str) -> np.ndarray:
    """What MindSpore's decoder is given for an image file of format `kind`: the file's bytes
    where it reads the format, else the lossless PNG of what Pillow decodes (its first frame),
    in a mode PNG keeps (others as RGB, or RGBA where the image has transparency)."""
    if kind in NATIVE_FORMATS:
        return np.fromfile(file, np.uint8)
    with Image.open(file) as image:
        image.seek(0)
        if image.mode not in PNG_MODES:
            clear = "transparency" in image.info or image.mode.endswith(("A", "a"))
            image = image.convert("RGBA" if clear else "RGB")
        out = io.BytesIO()
        image.save(out, "PNG", compress_level=1)
    return np.frombuffer(out.getvalue(), np.uint8)


def left_out_line(folder: Path, files: Sequence[Path], total: int) -> str:
    """One line counting and naming the files of `folder` that are not images (the first
    NAMED of them by path), or "" when there are none."""
    if not files:
        return ""
    shown = ", ".join(str(f.relative_to(folder)) for f in files[:NAMED])
    more = f" and {len(files) - NAMED} more" if len(files) > NAMED else ""
    return (
        f"{folder}: {len(files)} of {total} files left out, not images ({formats_said()} by "
        f"content): {shown}{more}"
    )


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
