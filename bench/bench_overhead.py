"""Framework overhead: `python train.py` against a minimal hand-written MindSpore script doing the
same work - same network class, data files and transforms, Momentum (lr 0.01), batch 64,
GRAPH_MODE, an evaluation of the test split after every epoch - the script with
`dataset_sink_mode` off and on (train.py trains per step: its callbacks act per step).

Figures, each job in a fresh process and fresh folder, the same oneDNN ISA cap for all
(sporeflow's default), medians over repeats:
  steady state  images/s in epochs 2.., evaluation left out; per-step mode measured between
                step ends (as sporeflow's `train/images_per_sec`), sink mode over whole epochs;
  start-up      seconds from process start to the end of the first training step (imports,
                config, data, graph compilation; sporeflow: `train/seconds_to_first_step`);
  wall          the whole process (sporeflow adds its MLflow store, checkpoints, final eval).
train.py runs with its compile cache off, and warm (a run of the same job filled it first).
Then what MLflow costs where it now runs (the tracking writer, a child process since issue 21;
the trainer no longer pays it before its first step): its import, opening a fresh and an
existing sqlite store (each in a fresh process).
Goals (issue 13): steady state <= 1.03x the script's time per image, start-up <= 1.5x.
Usage: python bench/bench_overhead.py [lenet5,resnet18] [repeats]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trainjob import REPO, metric_history, run_train, runs

sys.path.insert(0, str(REPO / "src"))

CASES = {  # model -> (training images, epochs); both on Fashion-MNIST at 32x32, test split capped alike
    "lenet5": (12000, 4),
    "resnet18": (1024, 3),
}
BATCH, LR = 64, 0.01

SCRIPT = r"""
import json, sys, time
import psutil
born = psutil.Process().create_time()
import mindspore as ms
import mindspore.dataset as mds
from mindspore import Model, nn
from mindspore.dataset import transforms, vision
from mindspore.train import Callback
model_name, n, epochs, batch, lr, sink, data_dir, out = sys.argv[1:]
n, epochs, batch, lr, sink = int(n), int(epochs), int(batch), float(lr), sink == "1"
ms.set_context(mode=ms.GRAPH_MODE)
ms.set_device("CPU")
ms.set_seed(0)

def dataset(usage):
    data = mds.MnistDataset(data_dir, usage=usage, shuffle=usage == "train", num_samples=n)
    data = data.map([vision.Resize((32, 32)), vision.Rescale(1 / 255, 0), vision.Normalize([0.2860], [0.3530]),
                     vision.HWC2CHW()], input_columns="image")
    return data.map(transforms.TypeCast(ms.int32), input_columns="label").batch(batch)

if model_name == "lenet5":
    from sporeflow.models.lenet import LeNet5
    net = LeNet5(num_classes=10, num_channel=1)
else:
    from sporeflow.models.resnet import resnet18
    net = resnet18(num_classes=10, num_channel=1)
model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
              nn.Momentum(net.trainable_params(), lr, 0.9), metrics={"acc", "loss"})
train, test = dataset("train"), dataset("test")
steps = train.get_dataset_size()
result = {"rates": []}

class Clock(Callback):
    def on_train_epoch_begin(self, rc):
        self.begin, self.last, self.images, self.seconds = time.perf_counter(), None, 0, 0.0
    def on_train_step_end(self, rc):
        now = time.perf_counter()
        result.setdefault("startup", time.time() - born)
        if self.last is not None:
            self.images, self.seconds = self.images + batch, self.seconds + now - self.last
        self.last = now
    def on_train_epoch_end(self, rc):
        result["rates"].append(steps * batch / (time.perf_counter() - self.begin) if sink
                               else self.images / self.seconds)
        result["acc"] = model.eval(test, dataset_sink_mode=False)["acc"]

model.train(epochs, train, callbacks=[Clock()], dataset_sink_mode=sink)
json.dump(result, open(out, "w"))
"""


def isa_env() -> dict:
    from sporeflow.runtime.cpu_isa import resolve

    isa = resolve("auto")
    return {**os.environ, "MLFLOW_TRACKING_URI": "", **({"ONEDNN_MAX_CPU_ISA": isa} if isa else {})}


def script(model: str, sink: bool) -> dict:
    from sporeflow.data.idx import ensure_raw

    images, epochs = CASES[model]
    data_dir = ensure_raw(
        "/usr/share/datasets/fashion-mnist",
        str(Path.home() / ".cache" / "sporeflow" / "fashion_mnist"),
    )
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        start = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-c",
                SCRIPT,
                model,
                str(images),
                str(epochs),
                str(BATCH),
                str(LR),
                "1" if sink else "0",
                str(data_dir),
                str(out),
            ],
            env=isa_env(),
            check=True,
            capture_output=True,
            text=True,
        )
        found = json.loads(out.read_text())
    return {
        "rate": statistics.fmean(found["rates"][1:]),
        "startup": found["startup"],
        "wall": time.perf_counter() - start,
        "acc": found["acc"],
    }


def sporeflow(model: str, extra: list[str]) -> dict:
    images, epochs = CASES[model]
    with tempfile.TemporaryDirectory() as tmp:
        wall = run_train(
            [
                f"hydra.run.dir={tmp}/run",
                f"model={model}",
                "dataset=fashion_mnist",
                f"dataset.num_samples={images}",
                f"dataset.batch_size={BATCH}",
                "dataset.val_split=0",  # trains on the script's images; evaluates on its test split
                "optimizer=momentum",
                f"optimizer.lr={LR}",
                f"epochs={epochs}",
                *extra,
            ],
            Path(tmp),
            isa_env(),
        )
        client, (run,) = runs(Path(tmp))
        rates = metric_history(client, run, "train/images_per_sec")
        return {
            "rate": statistics.fmean(rates[1:]),
            "startup": run.data.metrics["train/seconds_to_first_step"],
            "wall": wall,
            "acc": run.data.metrics["test/acc"],
        }


MLFLOW_COST = r"""
import sys, time
t = time.perf_counter()
from mlflow.tracking import MlflowClient
imported = time.perf_counter()
client = MlflowClient(sys.argv[1])
client.get_experiment_by_name("sporeflow") or client.create_experiment("sporeflow")
print(f"RESULT {imported - t:.3f} {time.perf_counter() - imported:.3f}")
"""


def mlflow_cost() -> dict:
    """Seconds to import MLflow and to open a fresh / an existing sqlite store, in fresh processes."""
    found = {}
    with tempfile.TemporaryDirectory() as tmp:
        for store in ("fresh", "existing"):
            out = subprocess.run(
                [sys.executable, "-c", MLFLOW_COST, f"sqlite:///{tmp}/mlflow.db"],
                env=isa_env(),
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            imported, opened = (float(v) for v in out.split("RESULT")[1].split())
            found["import"], found[store] = imported, opened
    return found


def median_of(repeats: int, measure, *args) -> dict:
    runs = [measure(*args) for _ in range(repeats)]
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def main() -> None:
    models = sys.argv[1].split(",") if len(sys.argv) > 1 else list(CASES)
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    rows = {}
    for model in models:
        rows[model] = {
            "script, sink off": median_of(repeats, script, model, False),
            "script, sink on": median_of(repeats, script, model, True),
            "train.py, cache off": median_of(
                repeats, sporeflow, model, ["runtime.compile_cache=false"]
            ),
        }
        with tempfile.TemporaryDirectory() as cache:
            warm = [f"runtime.compile_cache_dir={cache}"]
            sporeflow(model, warm)  # fills the cache: the repeats below find it warm
            rows[model]["train.py, cache warm"] = median_of(repeats, sporeflow, model, warm)
        print(f"  measured {model}", file=sys.stderr, flush=True)
    cost = median_of(repeats, mlflow_cost)
    print(
        f"train.py vs a hand-written MindSpore script, Fashion-MNIST 32x32, batch {BATCH}, GRAPH_MODE, "
        f"CPU ({os.cpu_count()} cores), median of {repeats} runs each:"
    )
    print(
        f"  {'case':34s} {'images/s':>9s} {'time/image':>11s} {'start-up s':>11s} {'ratio':>6s} {'wall s':>7s} "
        f"{'test acc':>9s}"
    )
    for model, found in rows.items():
        images, epochs = CASES[model]
        base = found["script, sink off"]
        for label, r in found.items():
            print(
                f"  {f'{model} {images} images x{epochs} epochs, {label}':34s} {r['rate']:9.0f} "
                f"{base['rate'] / r['rate']:10.2f}x {r['startup']:11.1f} {r['startup'] / base['startup']:5.2f}x "
                f"{r['wall']:7.1f} {r['acc']:9.4f}"
            )
    print(
        "  MLflow, paid by the tracking writer process (off train.py's path to its first step): "
        f"import {cost['import']:.1f} s, open a fresh sqlite store {cost['fresh']:.1f} s "
        f"(schema migrations), an existing one {cost['existing']:.1f} s"
    )


if __name__ == "__main__":
    main()
