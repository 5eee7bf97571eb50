"""Every preset in experiments/ runs for a short budget on this machine, reduced by the
overrides the manual documents (presets for Ascend/8 devices are run stand-alone on CPU);
train.py's entry in this process."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from helpers.inprocess import run_train_here as run_train
from helpers.train import REPO

SHORT = ["debug=quick"]  # conf/debug/quick.yaml: one epoch, one checkpoint kept
REDUCED = {
    "lenet_fashion_mnist": ["dataset.num_samples=256"],
    "resnet50_cifar10": [
        "device_target=CPU",
        "parallel=standalone",
        "dataset=synthetic",
        "dataset.batch_size=8",
        "dataset.num_samples=16",
        "dataset.test_samples=8",
    ],
    "resnet18_cifar10_strong": [
        "dataset=synthetic",  # no CIFAR-10 files here: random RGB 32 x 32, the recipe unchanged
        "dataset.batch_size=8",
        "dataset.num_samples=16",
        "dataset.test_samples=8",
    ],
    "mnist_semi_auto": ["device_target=CPU", "parallel=standalone", "dataset.num_samples=256"],
    "resnet50_imagenet_stage1": [
        "parallel=standalone",
        "dataset=synthetic",
        "dataset.batch_size=4",
        "dataset.num_samples=8",
        "dataset.test_samples=4",
        "dataset.num_classes=10",
        "optimizer.lr=0.01",
        "train.amp_level=O0",
    ],
    "resnet50_imagenet_dim_reduce": [
        "epochs=2",
        "parallel=standalone",
        "dataset=synthetic",
        "dataset.batch_size=4",
        "dataset.num_samples=8",
        "dataset.test_samples=4",
        "dataset.num_classes=10",
        "boost.snapshot.start_epoch=1",
        "boost.snapshot.per_epoch=2",
        "boost.n_component=3",
        "dataset.val_split=0",  # 8 images, 10 classes: none to hold out; 2 steps an epoch
        "boost.epochs=1",
        "boost.baselines=[]",  # a baseline trains stage 1's network on: nothing new to run
        "optimizer.lr=0.01",
        "train.amp_level=O0",
    ],
}
# Presets on Fashion-MNIST read a generated IDX folder in the same layout as Debian's package
# (gzipped files): the package is optional (README), and its own reading is tested in
# tests/unit/test_data.py
ON_FASHION_MNIST = {"lenet_fashion_mnist", "mnist_semi_auto"}
PRESETS = sorted(p.stem for p in (REPO / "experiments").glob("*.yaml"))
SLOW_PRESETS = {"resnet50_imagenet_dim_reduce"}  # a ResNet-50 graph compiled for two stages


def test_every_preset_has_a_reduced_run():
    assert sorted(REDUCED) == PRESETS


@pytest.mark.parametrize(
    "preset",
    [pytest.param(p, marks=[pytest.mark.slow] if p in SLOW_PRESETS else []) for p in PRESETS],
)
def test_preset_runs_reduced(tmp_path, preset, idx_dir):
    data = [f"dataset.root={idx_dir}", f"dataset.cache_dir={tmp_path / 'cache'}"]
    own = data if preset in ON_FASHION_MNIST else []
    proc = run_train(
        [f"experiment={preset}", *SHORT, *REDUCED[preset], *own], tmp_path, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("sporeflow").experiment_id])
    assert runs and all(
        r.info.status == "FINISHED" and r.data.tags["experiment"] == preset for r in runs
    )
    assert any("final/val/acc" in r.data.metrics or "stage2/acc" in r.data.metrics for r in runs)


def test_the_documented_reduced_example_is_the_one_tested():
    """The configuration page shows how to run a preset made for Ascend on this machine: that
    command must be the one test_preset_runs_reduced runs (it diverged when the two drifted
    apart)."""
    text = (REPO / "docs" / "configuration.md").read_text().replace("\\\n", " ")
    (line,) = [
        ln for ln in text.splitlines() if "train.py experiment=resnet50_imagenet_stage1 " in ln
    ]
    args = line.split("train.py", 1)[1].split()
    preset = "resnet50_imagenet_stage1"
    assert sorted(args) == sorted([f"experiment={preset}", *SHORT, *REDUCED[preset]])
