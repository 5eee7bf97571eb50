"""Shared fixtures: Hydra compose against the real conf/, real subprocess runs of train.py."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from sporeflow.schema import register_configs

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
TRAIN = REPO / "train.py"

# CI machines run other work too: keep MindSpore's CPU pool small and the fast conv path on.
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")


def graph_mode_on_cpu() -> None:
    """GRAPH_MODE on the CPU; the device can be set once per process, before the first kernel."""
    import mindspore as ms

    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        ms.set_device("CPU")
    except RuntimeError:  # already running on the default device, which is the CPU here
        pass


@pytest.fixture
def compose_cfg():
    """compose_cfg(["optimizer=sgd", ...]) -> the composed DictConfig, as train.py would see it."""
    register_configs()

    def _compose(overrides=()):
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return compose(config_name="train", overrides=list(overrides))

    yield _compose
    GlobalHydra.instance().clear()


def train_command(args, cwd: Path, run_dir: str | None = "run", env: dict | None = None):
    """(argv, env) of `python train.py ARGS` launched in `cwd`, Hydra run dir cwd/<run_dir>
    (run_dir=None: Hydra's own default, outputs/<date>/<time>_<uid>)."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("HYDRA_FULL_ERROR", None)
    where = [f"hydra.run.dir={cwd / run_dir}"] if run_dir is not None else []
    cmd = [sys.executable, str(TRAIN), *where, "callbacks.progress_bar=false", *args]
    return cmd, full_env


def run_train(args, cwd: Path, env: dict | None = None, timeout: float = 600,
              run_dir: str | None = "run") -> subprocess.CompletedProcess:
    """Run `python train.py ARGS` to the end in `cwd` (the launch dir)."""
    cmd, full_env = train_command(args, cwd, run_dir, env)
    return subprocess.run(cmd, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)


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


@pytest.fixture
def idx_dir(tmp_path):
    """A small gzipped IDX data set: class k images are bright in band k (learnable, not random)."""
    import numpy as np

    rng = np.random.default_rng(0)

    def make(n):
        labels = rng.integers(0, 10, n)
        images = rng.integers(0, 40, (n, 28, 28))
        for i, k in enumerate(labels):
            images[i, 2 * k + 4: 2 * k + 6, :] = 250
        return images, labels

    root = tmp_path / "idx"
    write_idx(root, "train", *make(256))
    write_idx(root, "test", *make(64))
    return root


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
        (root / name).write_bytes(np.concatenate([labels[:, None], pixels.reshape(records, -1)], axis=1).tobytes())


def write_jpeg_tree(root: Path, train: int, val: int) -> None:
    """An ImageNet-style tree of 3 classes; class k's images are bright in channel k."""
    from PIL import Image

    colours = {"n01": (250, 0, 0), "n02": (0, 250, 0), "n03": (0, 0, 250)}
    for split, count in (("train", train), ("val", val)):
        for cls, rgb in colours.items():
            (root / split / cls).mkdir(parents=True)
            for i in range(count):
                Image.new("RGB", (300 + 10 * i, 260), rgb).save(root / split / cls / f"{i}.JPEG", quality=95)
