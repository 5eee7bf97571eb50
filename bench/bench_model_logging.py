"""What issue 22's additions cost the default job (`python train.py`: LeNet-5 on the digits,
10 epochs), each arm in a fresh process and a fresh launch dir, arms interleaved, median of N:

  off          tracking.log_model=false tracking.system_metrics_interval=0
  model        the logged model only (package + MINDIR in the trainer, MLflow model in the writer)
  metrics      system metrics only (MLflow's monitor in the writer, every 10 s)
  both         the defaults

Wall time is the whole command (the run waits at its end until its writer has sent
everything, so the writer's work on the model shows here). The ratio is taken pair by pair
(each repetition's arm over the same repetition's "off"), then its median: the machine's drift
between repetitions cancels, which a ratio of medians does not do. Then the size of what a logged
model holds for LeNet-5 and ResNet-50 (224 x 224), packaged from freshly built networks (sizes
do not depend on training).
Usage: python bench/bench_model_logging.py [repeats]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from trainjob import REPO, run_train

sys.path.insert(0, str(REPO / "src"))

ARMS = {
    "off": ["tracking.log_model=false", "tracking.system_metrics_interval=0"],
    "model": ["tracking.system_metrics_interval=0"],
    "metrics": ["tracking.log_model=false"],
    "both": [],
}


def wall_times(repeats: int) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for _ in range(repeats):
        for arm, args in ARMS.items():
            with tempfile.TemporaryDirectory() as tmp:
                found[arm].append(run_train([*args, "callbacks.progress_bar=false"], Path(tmp)))
    return found


def package_sizes() -> dict[str, float]:
    import numpy as np

    from sporeflow.models.lenet import LeNet5
    from sporeflow.models.resnet import resnet50
    from sporeflow.serving.package import package_model
    from sporeflow.storage.checkpoints import save_atomic

    sizes = {}
    for name, network, shape in (
        ("lenet5", LeNet5(num_classes=10, num_channel=1), (1, 32, 32)),
        ("resnet50", resnet50(num_classes=1000), (3, 224, 224)),
    ):
        with tempfile.TemporaryDirectory() as tmp:
            weights = save_atomic(network, Path(tmp) / "final.ckpt")
            out = package_model(
                network,
                {"_target_": "x"},
                weights,
                np.zeros((4, *shape), np.float32),
                10,
                Path(tmp) / "model",
            )
            sizes[name] = sum(f.stat().st_size for f in out.path.iterdir()) / 2**20
    return sizes


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    times = wall_times(repeats)
    print(
        f"default job (lenet5-digits, 10 epochs), wall s, median of {repeats}, CPU (2 cores);"
        " x off: median of the paired ratios [min-max]:"
    )
    for arm, found in times.items():
        ratios = [t / off for t, off in zip(found, times["off"])]
        print(
            f"  {arm:8s} {statistics.median(found):6.1f} s  {statistics.median(ratios):5.3f}x"
            f" [{min(ratios):.3f}-{max(ratios):.3f}]   runs: {', '.join(f'{t:.1f}' for t in found)}"
        )
    for name, mb in package_sizes().items():
        print(f"  packaged model {name}: {mb:.1f} MB (weights.ckpt + network.mindir + example)")


if __name__ == "__main__":
    main()
