"""Per-step cost of each TrainStep feature against the plain cell mindspore.Model builds.

LeNet-5, batch 32, GRAPH_MODE, CPU; each variant's step is timed in turn (round-robin, so
machine noise hits all alike) and the median is reported with its ratio to plain.
Usage: python bench/bench_train_step.py [rounds] [steps_per_round]
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")  # the default runtime.cpu_isa on AVX-512

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn

from sporeflow.engine.train_step import TrainStep
from sporeflow.models.lenet import LeNet5

VARIANTS = {
    "plain (Model's TrainOneStepCell)": None,
    "TrainStep, all off": {},
    "loss_scale=1024": {"loss_scale": 1024.0},
    "clip_grad_norm=1": {"clip_grad_norm": 1.0},
    "accumulation_steps=4": {"accumulation_steps": 4},
    "ema decay=0.999": {"ema_decay": 0.999},
    "all together": {
        "loss_scale": 1024.0,
        "clip_grad_norm": 1.0,
        "accumulation_steps": 4,
        "ema_decay": 0.999,
    },
}


def build(kwargs):
    ms.set_seed(0)
    net = LeNet5()
    loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    opt = nn.Momentum(net.trainable_params(), 0.01, 0.9)
    return nn.TrainOneStepCell(loss, opt) if kwargs is None else TrainStep(loss, opt, **kwargs)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    x = Tensor(np.random.randn(32, 1, 32, 32).astype(np.float32))
    y = Tensor(np.random.randint(0, 10, 32).astype(np.int32))
    cells = {name: build(kw) for name, kw in VARIANTS.items()}
    for cell in cells.values():
        for _ in range(3):
            cell(x, y).asnumpy()  # compile + warm up
    times = {name: [] for name in cells}
    for _ in range(rounds):
        for name, cell in cells.items():
            t = time.perf_counter()
            for _ in range(steps):
                out = cell(x, y)
            out.asnumpy()
            times[name].append((time.perf_counter() - t) / steps * 1000)
    base = np.median(times["plain (Model's TrainOneStepCell)"])
    print(
        f"LeNet-5 batch 32, GRAPH_MODE, median of {rounds} rounds x {steps} steps "
        f"(ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA')})"
    )
    for name, t in times.items():
        print(f"  {name:34s} {np.median(t):7.2f} ms/step  x{np.median(t) / base:5.2f}")


if __name__ == "__main__":
    main()
