"""LeNet-5 train-step time under each ONEDNN_MAX_CPU_ISA cap (the runtime.cpu_isa choice).

Each setting runs in a fresh process (oneDNN reads the variable once, at its first kernel: the
last row sets it after `import mindspore`, as train.py does). Prints ms/step and the ratio to
the uncapped (native) setting. Usage: python bench/bench_cpu_isa.py [steps] [batch]
"""

from __future__ import annotations

import os
import subprocess
import sys

WORKER = r"""
import os, time, numpy as np, mindspore as ms
from mindspore import nn
if len(sys.argv) > 3:  # the cap set after the import, before the first step (as train.py does)
    os.environ["ONEDNN_MAX_CPU_ISA"] = sys.argv[3]
from sporeflow.models.lenet import LeNet5
ms.set_context(mode=ms.GRAPH_MODE); ms.set_device("CPU")
steps, batch = int(sys.argv[1]), int(sys.argv[2])
net = LeNet5()
step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")),
                           nn.Momentum(net.trainable_params(), 0.01, 0.9))
x = ms.Tensor(np.random.randn(batch, 1, 32, 32).astype(np.float32))
y = ms.Tensor(np.random.randint(0, 10, batch).astype(np.int32))
for _ in range(5): step(x, y)
times = []
for _ in range(steps):
    t = time.perf_counter(); step(x, y).asnumpy(); times.append(time.perf_counter() - t)
print(f"RESULT {np.median(times) * 1000:.3f}")
"""


def measure(isa: str | None, steps: int, batch: int, after_import: bool = False) -> float:
    env = dict(os.environ)
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    if isa and not after_import:
        env["ONEDNN_MAX_CPU_ISA"] = isa
    late = [isa] if isa and after_import else []
    out = subprocess.run(
        [sys.executable, "-c", "import sys\n" + WORKER, str(steps), str(batch), *late],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return float(next(line.split()[1] for line in out.splitlines() if line.startswith("RESULT")))


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    from sporeflow.runtime.cpu_isa import resolve

    print(
        f"LeNet-5 train step, batch {batch}, median of {steps} steps; auto here -> {resolve('auto')}"
    )
    base = measure(None, steps, batch)
    print(f"  {'native (no cap)':16s} {base:8.2f} ms/step  1.00x")
    for isa in ("AVX2", "AVX512_CORE"):
        ms_step = measure(isa, steps, batch)
        print(f"  {isa:16s} {ms_step:8.2f} ms/step  {base / ms_step:5.2f}x faster than native")
    late = measure("AVX2", steps, batch, after_import=True)
    print(
        f"  {'AVX2 after import':16s} {late:8.2f} ms/step  {base / late:5.2f}x faster than native"
    )


if __name__ == "__main__":
    main()
