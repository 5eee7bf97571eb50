"""Stage-2 step cost, side by side: a plain SGD step vs sporeflow's DimReduceStep vs MindSpore's
built-in boost DimReduce step, same network, batch (32) and basis (k=32, orthonormal rows), at
~60 k (LeNet-5), ~1 M (MLP, hidden 700) and ~11 M (ResNet-18 at 32x32) parameters. Each
(network, step) pair runs in a fresh process (the built-in is a process-wide singleton); the
figure is the median step time after warm-up. Goal (issue 13): DimReduceStep <= 3x SGD at every
size and below the built-in everywhere.
Usage: python bench/bench_stage2_step.py [steps] [sizes, e.g. lenet,mlp,resnet18]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")

WORKER = r"""
import sys, time
import numpy as np
import mindspore as ms
from mindspore import Tensor, nn
kind, size, steps, folder = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
ms.set_context(mode=ms.GRAPH_MODE)
ms.set_device("CPU")
if size == "lenet":
    from sporeflow.models.lenet import LeNet5
    net, shape = LeNet5(), (32, 1, 32, 32)
elif size == "mlp":
    from sporeflow.models.mlp import MLP
    net, shape = MLP(hidden=700), (32, 1, 28, 28)
else:
    from sporeflow.models.resnet import resnet18
    net, shape = resnet18(num_classes=10), (32, 3, 32, 32)
rng = np.random.default_rng(0)
x = rng.normal(size=shape).astype(np.float32)
y = rng.integers(0, 10, 32).astype(np.int32)
m = sum(p.size for p in net.trainable_params())
basis = np.linalg.qr(rng.normal(size=(m, 32)).astype(np.float32))[0].T.astype(np.float32)
loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
times = []
if kind == "builtin":
    import mindspore.dataset as mds
    from mindspore import Model
    from mindspore.train import Callback, FixedLossScaleManager
    path = folder + "/basis.npy"
    np.save(path, basis)
    config = {"boost": {"mode": "manual", "dim_reduce": True},
              "dim_reduce": {"rho": 0.55, "gamma": 0.9, "alpha": 0.001, "sigma": 0.4, "n_components": 32,
                             "pca_mat_path": path, "weight_load_dir": None, "timeout": 60}}
    model = Model(net, loss_fn=loss, optimizer=nn.SGD(net.trainable_params(), 0.01), metrics={"acc"},
                  boost_level="O1", boost_config_dict=config,
                  loss_scale_manager=FixedLossScaleManager(1.0, drop_overflow_update=False))
    data = mds.NumpySlicesDataset({"x": np.repeat(x, steps + 3, 0), "y": np.tile(y, steps + 3)},
                                  shuffle=False).batch(32)
    class Clock(Callback):
        def on_train_step_begin(self, rc):
            self.t = time.perf_counter()
        def on_train_step_end(self, rc):
            times.append((time.perf_counter() - self.t) * 1000)
    model.train(1, data, callbacks=[Clock()], dataset_sink_mode=False)
    times = times[3:]
else:
    if kind == "sgd":
        cell = nn.TrainOneStepCell(nn.WithLossCell(net, loss), nn.SGD(net.trainable_params(), 0.01))
    else:
        from sporeflow.dim_reduce.step import DimReduceStep
        cell = DimReduceStep(nn.WithLossCell(net, loss), net.trainable_params(), basis)
    xt, yt = Tensor(x), Tensor(y)
    for _ in range(3):
        cell(xt, yt).asnumpy()
    for _ in range(steps):
        t = time.perf_counter()
        cell(xt, yt).asnumpy()
        times.append((time.perf_counter() - t) * 1000)
print(f"RESULT {m} {float(np.median(times)):.2f}")
"""

KINDS = ("sgd", "sporeflow", "builtin")


def measure(kind: str, size: str, steps: int) -> tuple[int, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [sys.executable, "-c", WORKER, kind, size, str(steps), tmp],
            capture_output=True,
            text=True,
        )
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")), None)
    if line is None:
        raise RuntimeError(f"{kind}/{size} failed:\n{out.stderr[-2000:]}")
    params, ms = line.split()[1:]
    return int(params), float(ms)


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    sizes = sys.argv[2].split(",") if len(sys.argv) > 2 else ["lenet", "mlp", "resnet18"]
    rows = []
    for size in sizes:
        found = {kind: measure(kind, size, steps) for kind in KINDS}
        rows.append((size, found["sgd"][0], {k: v[1] for k, v in found.items()}))
        print(f"  measured {size}", file=sys.stderr)
    print(
        f"stage-2 step, batch 32, k=32, GRAPH_MODE, CPU ({os.cpu_count()} cores), median of {steps} steps:"
    )
    print(
        f"  {'network':9s} {'params':>10s} {'SGD ms':>9s} {'sporeflow ms':>13s} {'built-in ms':>12s} "
        f"{'sporeflow/SGD':>14s} {'sporeflow/built-in':>19s}"
    )
    for size, params, t in rows:
        print(
            f"  {size:9s} {params:10d} {t['sgd']:9.2f} {t['sporeflow']:13.2f} {t['builtin']:12.2f} "
            f"{t['sporeflow'] / t['sgd']:13.2f}x {t['sporeflow'] / t['builtin']:18.2f}x"
        )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    main()
