"""What evaluating and predicting with a finished run cost (issue 34): the default job (LeNet-5
on digits, one epoch) is trained once, then, in turn per repetition, each in a fresh process:
`python eval.py source=<run dir>` (its 360 test images), and `sporeflow predict <run dir>` on a
.npy batch and on a folder of PNG files, each with one image and with N images. A command's
fixed cost is its one-image wall time; its throughput is (N - 1) / (wall(N) - wall(1)), so the
figures compare the per-image work of reading PNG files against a ready array.
Usage: python bench/bench_eval.py [images] [repeats]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from trainjob import REPO, run_train

os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")


def wall(cmd: list[str], cwd: Path) -> float:
    """Wall seconds of one command (raises with its stderr when it fails)."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - start


def inputs(root: Path, count: int) -> dict[str, Path]:
    """Digits-sized images (8 x 8 grey, uint8) as a .npy batch and as a folder of PNG files."""
    images = np.random.default_rng(0).integers(0, 256, (count, 8, 8), dtype=np.uint8)
    np.save(root / f"batch_{count}.npy", images)
    folder = root / f"png_{count}"
    folder.mkdir()
    for i, image in enumerate(images):
        Image.fromarray(image, mode="L").save(folder / f"{i:05d}.png")
    return {"npy": root / f"batch_{count}.npy", "png": folder}


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    with tempfile.TemporaryDirectory() as tmp:
        launch = Path(tmp)
        run_train(["epochs=1", "callbacks.progress_bar=false"], launch)
        (run_dir,) = [p.parent for p in launch.glob("outputs/*/*/.hydra")]
        given = {1: inputs(launch, 1), count: inputs(launch, count)}
        predict = [sys.executable, "-m", "sporeflow.entry.cli", "predict", str(run_dir)]
        arms = {
            "eval.py (360 test images)": [
                sys.executable,
                str(REPO / "eval.py"),
                f"source={run_dir}",
            ]
        }
        for kind in ("npy", "png"):
            for n in (1, count):
                arms[f"predict {kind}, {n} images"] = [
                    *predict,
                    str(given[n][kind]),
                    "--out",
                    f"p_{kind}_{n}.csv",
                ]
        times: dict[str, list[float]] = {arm: [] for arm in arms}
        for _ in range(repeats):
            for arm, cmd in arms.items():
                times[arm].append(wall(cmd, launch))
    median = {arm: statistics.median(t) for arm, t in times.items()}
    print(
        f"LeNet-5 / digits run, {repeats} repetitions in turn, median wall s, {os.cpu_count()} cores:"
    )
    for arm, seconds in median.items():
        print(f"  {arm:34s} {seconds:7.2f} s")
    rates = {}
    for kind in ("npy", "png"):
        rates[kind] = (count - 1) / (
            median[f"predict {kind}, {count} images"] - median[f"predict {kind}, 1 images"]
        )
        print(f"  predict {kind}: {rates[kind]:8.0f} images/s beyond its fixed cost")
    print(f"  png / npy throughput: {rates['png'] / rates['npy']:.2f}x")


if __name__ == "__main__":
    main()
