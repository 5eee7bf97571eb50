"""Framework overhead: `python train.py` against a minimal hand-written MindSpore script doing the
same work - same network class, data files and transforms, Momentum (lr 0.01), batch 64,
GRAPH_MODE, an evaluation of the test split after every epoch - with `dataset_sink_mode` off and
on (the script) and `train.sink_mode` false / true (train.py).

Figures, each job in a fresh process, the same oneDNN ISA cap for all (sporeflow's default):
  steady state  images/s in epochs 2.., excluding evaluation; per-step mode measured between
                step ends (as sporeflow's `train/images_per_sec`), sink mode over whole epochs;
  start-up      seconds from process start to the end of the first training step (imports,
                config, data, graph compilation; sporeflow: `train/seconds_to_first_step`);
  wall          the whole process (sporeflow adds its MLflow store, checkpoints, final eval).
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

REPO = Path(__file__).resolve().parents[1]
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
    from sporeflow.cpu_isa import resolve

    isa = resolve("auto")
    return {**os.environ, "MLFLOW_TRACKING_URI": "", **({"ONEDNN_MAX_CPU_ISA": isa} if isa else {})}


def script(model: str, sink: bool) -> dict:
    from sporeflow.data.idx import ensure_raw

    images, epochs = CASES[model]
    data_dir = ensure_raw("/usr/share/datasets/fashion-mnist",
                          str(Path.home() / ".cache" / "sporeflow" / "fashion_mnist"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", SCRIPT, model, str(images), str(epochs), str(BATCH), str(LR),
                        "1" if sink else "0", str(data_dir), str(out)], env=isa_env(), check=True,
                       capture_output=True, text=True)
        found = json.loads(out.read_text())
    return {"rate": statistics.fmean(found["rates"][1:]), "startup": found["startup"],
            "wall": time.perf_counter() - start, "acc": found["acc"]}


def sporeflow(model: str, sink: bool) -> dict:
    from mlflow.tracking import MlflowClient

    images, epochs = CASES[model]
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, str(REPO / "train.py"), f"hydra.run.dir={tmp}/run", f"model={model}",
               "dataset=fashion_mnist", f"dataset.num_samples={images}", f"dataset.batch_size={BATCH}",
               "optimizer=momentum", f"optimizer.lr={LR}", f"epochs={epochs}", f"train.sink_mode={str(sink).lower()}"]
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=tmp, env=isa_env(), capture_output=True, text=True)
        wall = time.perf_counter() - start
        if proc.returncode:
            raise RuntimeError(f"{' '.join(cmd)}:\n{proc.stderr[-3000:]}")
        client = MlflowClient(f"sqlite:///{tmp}/mlflow.db")
        (run,) = client.search_runs([client.get_experiment_by_name("sporeflow").experiment_id])
        rates = [m.value for m in sorted(client.get_metric_history(run.info.run_id, "train/images_per_sec"),
                                         key=lambda m: m.step)]
        return {"rate": statistics.fmean(rates[1:]), "startup": run.data.metrics["train/seconds_to_first_step"],
                "wall": wall, "acc": run.data.metrics["final/acc"]}


def median_of(repeats: int, measure, *args) -> dict:
    runs = [measure(*args) for _ in range(repeats)]
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def main() -> None:
    models = sys.argv[1].split(",") if len(sys.argv) > 1 else list(CASES)
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    rows = []
    for model in models:
        for sink in (False, True):
            rows.append((model, sink, median_of(repeats, script, model, sink), median_of(repeats, sporeflow, model, sink)))
            print(f"  measured {model} sink={sink}", file=sys.stderr, flush=True)
    print(f"train.py vs a hand-written MindSpore script, batch {BATCH}, GRAPH_MODE, CPU ({os.cpu_count()} cores), "
          f"median of {repeats} runs each:")
    print(f"  {'case':22s} {'script img/s':>12s} {'train.py img/s':>15s} {'time/image':>11s} "
          f"{'script start s':>15s} {'train.py start s':>17s} {'start-up':>9s} {'wall s (script/train.py)':>25s}")
    for model, sink, base, ours in rows:
        images, epochs = CASES[model]
        label = f"{model} {images // 1000 if images >= 1000 else images}{'k' if images >= 1000 else ''} x{epochs}, sink {'on' if sink else 'off'}"
        print(f"  {label:22s} {base['rate']:12.0f} {ours['rate']:15.0f} {base['rate'] / ours['rate']:10.2f}x "
              f"{base['startup']:15.1f} {ours['startup']:17.1f} {ours['startup'] / base['startup']:8.2f}x "
              f"{base['wall']:12.1f} / {ours['wall']:.1f}")


if __name__ == "__main__":
    main()
