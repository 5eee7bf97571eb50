"""Stage-2 cost, measured side by side:
1. step time of sporeflow's DimReduceStep vs a plain SGD step (LeNet-5, batch 32, k=32);
2. PCA peak memory: sporeflow's streaming PCA (from .ckpt snapshots, and from the .npy
   snapshots sporeflow's stage 1 writes) vs MindSpore's built-in (`_load_weights` +
   `_compute_pca_mat`), each in a fresh process on the same synthetic snapshots; the basis is
   written to a memory-mapped .npy, whose dirty pages count in the peak.
Usage: python bench/bench_dim_reduce.py [n_snapshots] [million_params]
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")

import numpy as np  # noqa: E402

PCA_WORKER = r"""
import resource, sys, time
import numpy as np
import mindspore as ms
from mindspore import nn
from pathlib import Path
kind, folder, k, hidden = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
net = nn.SequentialCell([nn.Dense(1000, hidden), nn.Dense(hidden, 10)])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
if kind == "builtin":
    from mindspore.boost.base import _load_weights, _compute_pca_mat
    basis = _compute_pca_mat(_load_weights(str(folder), net), k)
else:
    from sporeflow.dim_reduce.pca import Layout, streaming_pca
    from sporeflow.dim_reduce.snapshots import list_snapshots
    npy = folder.parent / "npy"
    basis = streaming_pca(list_snapshots(npy if kind == "streaming-npy" else folder), Layout.of(net), k,
                          out_path=folder.parent / "basis.npy", chunk_mb=64)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(f"RESULT {(peak - base) / 1024:.1f} {time.perf_counter() - t:.2f} {basis.dtype} {basis.shape}")
"""


def step_times(steps: int = 60):
    import mindspore as ms
    from mindspore import Tensor, nn

    from sporeflow.dim_reduce.step import DimReduceStep
    from sporeflow.models.lenet import LeNet5

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    x = Tensor(np.random.randn(32, 1, 32, 32).astype(np.float32))
    y = Tensor(np.random.randint(0, 10, 32).astype(np.int32))
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    cells = {}
    net = LeNet5()
    cells["plain SGD (TrainOneStepCell)"] = nn.TrainOneStepCell(nn.WithLossCell(net, loss),
                                                                nn.SGD(net.trainable_params(), 0.01))
    net2 = LeNet5()
    m = sum(p.size for p in net2.trainable_params())
    basis = np.linalg.qr(np.random.randn(m, 32))[0].T.astype(np.float32)
    cells["DimReduceStep (k=32)"] = DimReduceStep(nn.WithLossCell(net2, loss), net2.trainable_params(), basis)
    for cell in cells.values():
        for _ in range(3):
            cell(x, y).asnumpy()
    times = {name: [] for name in cells}
    for _ in range(steps):
        for name, cell in cells.items():
            t = time.perf_counter()
            cell(x, y).asnumpy()
            times[name].append((time.perf_counter() - t) * 1000)
    return {name: float(np.median(v)) for name, v in times.items()}


def write_snapshots(folder: Path, n: int, hidden: int):
    import mindspore as ms
    from mindspore import Tensor, nn

    net = nn.SequentialCell([nn.Dense(1000, hidden), nn.Dense(hidden, 10)])
    import json

    rng = np.random.default_rng(0)
    npy = folder.parent / "npy"
    npy.mkdir()
    params = net.trainable_params()
    (npy / "layout.json").write_text(json.dumps({"names": [p.name for p in params],
                                                 "shapes": [list(p.shape) for p in params]}))
    for i in range(n):
        values = [rng.normal(size=p.shape).astype(np.float32) for p in params]
        ms.save_checkpoint([{"name": p.name, "data": Tensor(v)} for p, v in zip(params, values)],
                           str(folder / f"snapshot_{i:03d}.ckpt"))
        np.save(npy / f"snapshot_e{i + 1:04d}_s00001.npy", np.concatenate([v.ravel() for v in values]))
    return sum(p.size for p in params)


def pca_peak(kind: str, folder: Path, k: int, hidden: int):
    out = subprocess.run([sys.executable, "-c", PCA_WORKER, kind, str(folder), str(k), str(hidden)],
                         capture_output=True, text=True, check=True).stdout
    line = next(l for l in out.splitlines() if l.startswith("RESULT"))
    mb, seconds, dtype, *shape = line.split()[1:]
    return float(mb), float(seconds), dtype, " ".join(shape)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    million = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    times = step_times()
    base = times["plain SGD (TrainOneStepCell)"]
    print("stage-2 step, LeNet-5 batch 32, GRAPH_MODE, median:")
    for name, t in times.items():
        print(f"  {name:30s} {t:7.2f} ms/step  x{t / base:5.2f}")

    hidden = int(million * 1e6 / 1010)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "snapshots"
        folder.mkdir()
        m = write_snapshots(folder, n, hidden)
        print(f"PCA of {n} snapshots x {m / 1e6:.2f} M params (one snapshot = {m * 4 / 2**20:.0f} MB), k=32:")
        results = {kind: pca_peak(kind, folder, 32, hidden)
                   for kind in ("builtin", "streaming-ckpt", "streaming-npy")}
    for kind, (mb, seconds, dtype, shape) in results.items():
        print(f"  {kind:15s} peak +{mb:8.1f} MB  {seconds:6.2f} s  basis {dtype} {shape}")
    for kind in ("streaming-ckpt", "streaming-npy"):
        print(f"  memory ratio built-in / {kind}: {results['builtin'][0] / results[kind][0]:.1f}x")


if __name__ == "__main__":
    main()
