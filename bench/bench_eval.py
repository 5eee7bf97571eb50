"""What evaluating and predicting with a finished run cost (issue 34): the default job (LeNet-5
on digits, one epoch) is trained once, then, in turn per repetition, each in a fresh process:
`python eval.py source=<run dir>` (its 360 test images), and `sporeflow predict <run dir>` on a
.npy batch and on a folder of PNG files, each with one image and with N images. A command's
fixed cost is its one-image wall time; its throughput is (N - 1) / (wall(N) - wall(1)), so the
figures compare the per-image work of reading PNG files against a ready array. A last arm does
predict's work by hand with MindSpore alone (the same network and weights, the data set's eval
transforms in a NumpySlicesDataset, `Model.predict` per batch, softmax, a CSV): what sporeflow's
command costs over writing it yourself.
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


# predict's work written by hand: MindSpore's data pipeline and Model.predict, nothing of sporeflow
# but the network's class (argv: checkpoint, .npy batch, output CSV)
BY_HAND = """
import sys, numpy as np, mindspore as ms
import mindspore.dataset as mds
from mindspore.dataset import vision
from sporeflow.models.lenet import LeNet5
ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
net = LeNet5(num_classes=10, num_channel=1)
ms.load_checkpoint(sys.argv[1], net)
model = ms.Model(net)
images = np.load(sys.argv[2])[..., None]
ops = [vision.Resize((32, 32)), vision.Rescale(1 / 255, 0.0),
       vision.Normalize(mean=[0.3], std=[0.4]), vision.HWC2CHW()]
data = mds.NumpySlicesDataset({"image": images}, shuffle=False).map(ops, "image").batch(32)
rows = []
for (batch,) in data.create_tuple_iterator(num_epochs=1):
    logits = model.predict(batch).asnumpy().astype(np.float64)
    p = np.exp(logits - logits.max(1, keepdims=True))
    rows.append(p / p.sum(1, keepdims=True))
probs = np.concatenate(rows)
with open(sys.argv[3], "w") as out:
    for i, row in enumerate(probs):
        out.write(f"{i},{row.argmax()}," + ",".join(f"{v:.6g}" for v in row) + "\\n")
"""


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
        (weights,) = run_dir.glob("**/final.ckpt")
        for n in (1, count):
            arms[f"by hand npy, {n} images"] = [
                sys.executable,
                "-c",
                BY_HAND,
                str(weights),
                str(given[n]["npy"]),
                f"h_{n}.csv",
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
    for kind in ("npy", "png", "by hand"):
        key = "by hand npy" if kind == "by hand" else f"predict {kind}"
        rates[kind] = (count - 1) / (median[f"{key}, {count} images"] - median[f"{key}, 1 images"])
        print(f"  {key}: {rates[kind]:8.0f} images/s beyond its fixed cost")
    print(f"  png / npy throughput: {rates['png'] / rates['npy']:.2f}x")
    print(f"  predict npy / by hand throughput: {rates['npy'] / rates['by hand']:.2f}x")
    fixed = median["predict npy, 1 images"] / median["by hand npy, 1 images"]
    print(f"  predict npy / by hand fixed cost: {fixed:.2f}x")


if __name__ == "__main__":
    main()
