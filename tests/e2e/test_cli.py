"""The `sporeflow` console script, run as a real subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import mindspore as ms
import numpy as np
from mindspore import Tensor
from mindspore.train import node_strategy_pb2 as pb

SPOREFLOW = str(Path(sys.executable).parent / "sporeflow")


def write_strategy(path: Path, layouts: dict, devices: int) -> None:
    """A real MindSpore strategy file: param -> tensor_map over a 1-D device matrix."""
    strategy = pb.ParallelStrategyMap()
    strategy.current_stage = 1
    for name, tensor_map in layouts.items():
        item = strategy.parallel_layout_item.add()
        item.param_name = name
        layout = item.parallel_layouts
        layout.dev_matrix.add().dim.extend([devices])
        layout.tensor_map.add().dim.extend(tensor_map)
        layout.param_split_shape.add()
        layout.indices_offset.add()
        layout.field, layout.opt_weight_shard_step, layout.opt_weight_shard_size = 0, 0, 0
    path.write_bytes(strategy.SerializeToString())


def test_merge_ckpt_rebuilds_the_full_weights(tmp_path):
    rng = np.random.default_rng(0)
    full = {
        "layer1.weight": rng.normal(size=(8, 6)).astype(np.float32),  # split along dim 1
        "layer3.weight": rng.normal(size=(4, 2)).astype(np.float32),  # split along dim 0
        "layer1.bias": rng.normal(size=(6,)).astype(np.float32),
    }  # replicated
    write_strategy(
        tmp_path / "strategy.ckpt",
        {"layer1.weight": [-1, 0], "layer3.weight": [0, -1], "layer1.bias": [-1]},
        2,
    )
    for r in range(2):
        (tmp_path / "ckpts" / f"rank_{r}").mkdir(parents=True)
        sliced = {
            "layer1.weight": full["layer1.weight"][:, 3 * r : 3 * r + 3],
            "layer3.weight": full["layer3.weight"][2 * r : 2 * r + 2],
            "layer1.bias": full["layer1.bias"],
        }
        ms.save_checkpoint(
            [{"name": k, "data": Tensor(v)} for k, v in sliced.items()],
            str(tmp_path / "ckpts" / f"rank_{r}" / "final.ckpt"),
        )
    out = tmp_path / "merged" / "full.ckpt"
    proc = subprocess.run(
        [
            SPOREFLOW,
            "merge-ckpt",
            "--src",
            str(tmp_path / "ckpts"),
            "--strategy",
            str(tmp_path / "strategy.ckpt"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    merged = ms.load_checkpoint(str(out))
    for name, value in full.items():
        np.testing.assert_array_equal(merged[name].asnumpy(), value)


def test_merge_ckpt_clear_errors(tmp_path):
    proc = subprocess.run(
        [
            SPOREFLOW,
            "merge-ckpt",
            "--src",
            str(tmp_path),
            "--strategy",
            str(tmp_path / "nope.ckpt"),
            "--out",
            str(tmp_path / "o.ckpt"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "nope.ckpt does not exist" in proc.stderr
    (tmp_path / "s.ckpt").write_bytes(b"")
    proc = subprocess.run(
        [
            SPOREFLOW,
            "merge-ckpt",
            "--src",
            str(tmp_path),
            "--strategy",
            str(tmp_path / "s.ckpt"),
            "--out",
            str(tmp_path / "o.ckpt"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "rank_<r>/" in proc.stderr


def test_help_lists_commands():
    proc = subprocess.run([SPOREFLOW, "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "merge-ckpt" in proc.stdout and "compare" in proc.stdout
