"""What knowing every image readable before work costs (issue 60): an image folder's check
(`ImageFolder.check`: every file decoded once by Pillow, data.readable) cold, then again with its
record of checked files, side by side with one pass of MindSpore's own decoding of the same
files (the eval split's pipeline: Decode, Resize, CenterCrop, normalise, over the train, val
and test splits: every file the check read), which every epoch pays.
Two folders: small JPEGs (64 x 64, CIFAR-sized) and photo-sized ones (500 x 375, ImageNet's
median), half in train/, half in val/, each class in both (val/ is labelled by class name).
Usage: python bench/bench_image_check.py [small images] [photo images] [repeats]
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")

import numpy as np
from PIL import Image


def write_folder(root: Path, count: int, size: tuple[int, int], classes: int = 10) -> None:
    rng = np.random.default_rng(0)
    for i in range(count):
        split = "train" if i % 2 == 0 else "val"  # every class in both: val/ is read by name
        folder = root / split / f"c{i // 2 % classes}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (size[1] // 8, size[0] // 8, 3), np.uint8)
        Image.fromarray(pixels).resize(size).save(folder / f"{i}.jpg", quality=90)


def median_s(work, repeats: int, before=lambda: None) -> float:
    times = []
    for _ in range(repeats):
        before()
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(root: Path, count: int, repeats: int) -> tuple[float, float, float]:
    from sporeflow.data.image_folder import ImageFolder

    data = ImageFolder(root=str(root), image_size=64, num_classes=10, batch_size=50)
    records = Path(os.environ["XDG_CACHE_HOME"]) / "sporeflow" / "image-checks"
    cold = median_s(data.check, repeats, before=lambda: shutil.rmtree(records, True))
    warm = median_s(data.check, repeats)

    def decode_every_file():  # train/ (less the validation held out of it), that, and val/
        for split in ("train", "val", "test"):
            for _ in data.create(split, shuffle=False, augment=False).create_tuple_iterator():
                pass

    decoded = median_s(decode_every_file, repeats)
    return cold, warm, decoded


def main() -> None:
    small, photos, repeats = (
        int(a) for a in (sys.argv[1:] + ["4000", "400", "3"][len(sys.argv) - 1 :])
    )
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["XDG_CACHE_HOME"] = str(Path(tmp) / "cache")
        rows = []
        for name, count, size in (("64 x 64", small, (64, 64)), ("500 x 375", photos, (500, 375))):
            root = Path(tmp) / name.replace(" ", "")
            write_folder(root, count, size)
            rows.append((name, count, *measure(root, count, repeats)))
    print(f"image folder check, median of {repeats}, 2 cores (s; ms per image):")
    print(
        f"  {'JPEGs':<10} {'files':>6} {'check cold':>16} {'check again':>16} "
        f"{'one decode pass':>18} {'cold / pass':>11}"
    )
    for name, count, cold, warm, decoded in rows:
        per = 1000 / count
        print(
            f"  {name:<10} {count:>6} {cold:7.2f} ({cold * per:5.2f}) {warm:7.3f} "
            f"({warm * per:6.3f}) {decoded:8.2f} ({decoded * per:5.2f}) {cold / decoded:10.2f}x"
        )


if __name__ == "__main__":
    main()
