"""Write a stage's final network as a self-contained model directory.

    <stage dir>/model/
      network.yaml        the resolved `model` node, the input it takes (channels, size) and
                          its class names in label order (`class_names`, where the data set
                          names its classes: they are also in the weights file)
      weights.ckpt        the final weights (a hard link to checkpoints/final.ckpt when possible;
                          weights.safetensors with callbacks.checkpoint.format=safetensors)
      network.mindir      the same network exported with `mindspore.export` (batch dimension free)
      input_example.npy   the first eval images as the network sees them (float32, N x C x H x W)

Everything a loader needs is in the directory: `sporeflow.serving.pyfunc` rebuilds the network
from network.yaml and loads the weights; `mindspore.load` + `nn.GraphCell` runs the MINDIR
without sporeflow. The input is the eval pipeline's output (resized, rescaled, normalized,
CHW), so a prediction equals `Model.eval` on the same batch.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import mindspore as ms
import numpy as np
import yaml
from mindspore._checkparam import check_file_name_by_regular  # MindSpore's file-name rule

from sporeflow.storage.checkpoints import checkpoint_files, stored_class_names
from sporeflow.storage.files import atomic_path, write_text_atomic

NETWORK = "network.yaml"
WEIGHTS = "weights"  # + the final checkpoint's suffix
MINDIR = "network.mindir"
EXAMPLE = "input_example.npy"
EXAMPLE_IMAGES = 4


@dataclass(frozen=True)
class PackagedModel:
    path: Path
    input_shape: tuple[int, int, int]  # C, H, W
    num_classes: int
    class_names: tuple[str, ...] | None = None  # label order; None: classes are numbers


def packaged_weights(model_dir: Path) -> Path:
    """The weights file of a model directory, in whichever checkpoint format it was written."""
    found = checkpoint_files(model_dir, WEIGHTS)
    if not found:
        raise FileNotFoundError(f"{model_dir} holds no {WEIGHTS}.ckpt or {WEIGHTS}.safetensors")
    return found[0]


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.unlink(missing_ok=True)
    try:
        os.link(src, dst)  # same file system: no second copy of the weights
    except OSError:
        with atomic_path(dst) as tmp:
            shutil.copyfile(src, tmp)


def package_model(
    network, model_node: dict, weights: Path, example: np.ndarray, num_classes: int, out: Path
) -> PackagedModel:
    """Write `out` (see the module doc) for `network`, which holds `weights`; `example` is a
    batch of eval images (float32, N x C x H x W)."""
    out.mkdir(parents=True, exist_ok=True)
    example = np.ascontiguousarray(example[:EXAMPLE_IMAGES], dtype=np.float32)
    channels, height, width = (int(d) for d in example.shape[1:])
    names = stored_class_names(Path(weights))  # what the weights were saved with
    spec = {
        "model": model_node,
        "input": {"channels": channels, "height": height, "width": width},
        "num_classes": int(num_classes),
        **({"class_names": names} if names else {}),
    }
    write_text_atomic(out / NETWORK, yaml.safe_dump(spec, sort_keys=False))
    for old in checkpoint_files(out, WEIGHTS):  # a package rewritten in another format
        old.unlink()
    _link_or_copy(Path(weights), out / f"{WEIGHTS}{Path(weights).suffix}")
    with atomic_path(out / EXAMPLE) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, example, allow_pickle=False)
    network.set_train(False)
    free_batch = ms.Tensor(shape=[None, channels, height, width], dtype=ms.float32)
    with atomic_path(out / MINDIR) as tmp:
        export_mindir(network, free_batch, tmp)
    return PackagedModel(
        out, (channels, height, width), int(num_classes), tuple(names) if names else None
    )


def export_mindir(network, inputs, dest: Path) -> None:
    """`mindspore.export` as MINDIR into `dest` (a path ending .mindir). MindSpore refuses a
    file name outside ``[0-9a-zA-Z@_-.:/\\]`` (a space, '#', '%', a non-ASCII letter anywhere
    in the launch folder's path): such a file is exported into a temp folder and moved."""
    if _mindspore_accepts(str(dest)):
        ms.export(network, inputs, file_name=str(dest.with_suffix("")), file_format="MINDIR")
        return
    with tempfile.TemporaryDirectory(prefix="sporeflow-export-", dir=_plain_temp_root()) as tmp:
        plain = Path(tmp) / "network"
        ms.export(network, inputs, file_name=str(plain), file_format="MINDIR")
        shutil.move(plain.with_suffix(".mindir"), dest)


def _mindspore_accepts(file_name: str) -> bool:
    try:
        check_file_name_by_regular(file_name)
    except ValueError:
        return False
    return True


def _plain_temp_root() -> str:
    """The system's temp folder, or /tmp when $TMPDIR is itself a name MindSpore refuses."""
    root = tempfile.gettempdir()
    return root if _mindspore_accepts(root) else "/tmp"
