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

import sys
import tempfile
from pathlib import Path

from trainjob import REPO, interleaved_wall_times, print_paired

sys.path.insert(0, str(REPO / "src"))

ARMS = {
    "off": ["tracking.log_model=false", "tracking.system_metrics_interval=0"],
    "model": ["tracking.system_metrics_interval=0"],
    "metrics": ["tracking.log_model=false"],
    "both": [],
}


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
    times = interleaved_wall_times(ARMS, repeats)
    print_paired(times, "off", "default job (lenet5-digits, 10 epochs)")
    for name, mb in package_sizes().items():
        print(f"  packaged model {name}: {mb:.1f} MB (weights.ckpt + network.mindir + example)")


if __name__ == "__main__":
    main()
