"""Small data sets written in the real on-disk formats the data sets read (IDX, CIFAR-10 .bin,
an ImageNet-style JPEG tree)."""

from __future__ import annotations

from pathlib import Path


def write_idx(directory: Path, split: str, images, labels, gz: bool = True) -> None:
    """Write images (N, 28, 28) uint8 and labels (N,) in the real IDX format (optionally gzipped)."""
    import gzip
    import struct

    import numpy as np

    prefix = "train" if split == "train" else "t10k"
    images = np.asarray(images, dtype=np.uint8)
    labels = np.asarray(labels, dtype=np.uint8)
    blobs = {
        f"{prefix}-images-idx3-ubyte": struct.pack(">IIII", 2051, *images.shape) + images.tobytes(),
        f"{prefix}-labels-idx1-ubyte": struct.pack(">II", 2049, len(labels)) + labels.tobytes(),
    }
    directory.mkdir(parents=True, exist_ok=True)
    for name, blob in blobs.items():
        if gz:
            with gzip.open(directory / f"{name}.gz", "wb") as f:
                f.write(blob)
        else:
            (directory / name).write_bytes(blob)


def write_cifar_bin(root, n_train_files=5, records=10_000, seed=0):
    """Full-size CIFAR-10 .bin files (Cifar10Dataset rejects smaller ones): label byte + CHW bytes.
    Class k has its red channel at 20 * k, so labels can be checked against pixels."""
    import numpy as np

    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for name in [f"data_batch_{i}.bin" for i in range(1, n_train_files + 1)] + ["test_batch.bin"]:
        labels = rng.integers(0, 10, records).astype(np.uint8)
        pixels = rng.integers(0, 256, (records, 3, 32, 32)).astype(np.uint8)
        pixels[:, 0] = (labels * 20)[:, None, None]
        (root / name).write_bytes(
            np.concatenate([labels[:, None], pixels.reshape(records, -1)], axis=1).tobytes()
        )


def write_jpeg_tree(root: Path, train: int, val: int) -> None:
    """An ImageNet-style tree of 3 classes; class k's images are bright in channel k."""
    from PIL import Image

    colours = {"n01": (250, 0, 0), "n02": (0, 250, 0), "n03": (0, 0, 250)}
    for split, count in (("train", train), ("val", val)):
        for cls, rgb in colours.items():
            (root / split / cls).mkdir(parents=True)
            for i in range(count):
                Image.new("RGB", (300 + 10 * i, 260), rgb).save(
                    root / split / cls / f"{i}.JPEG", quality=95
                )
