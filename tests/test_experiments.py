"""Every preset in experiments/ runs for a short budget on this machine, reduced by the
overrides the README documents (presets for Ascend/8 devices are run stand-alone on CPU)."""
from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from conftest import REPO, run_train

pytestmark = pytest.mark.e2e

SHORT = ["epochs=1", "callbacks.checkpoint.keep_last=1"]
REDUCED = {
    "lenet_mnist": ["dataset.num_samples=256"],
    "resnet50_cifar10": ["device_target=CPU", "parallel=standalone", "dataset=synthetic", "dataset.batch_size=8",
                         "dataset.num_samples=16", "dataset.test_samples=8"],
    "mnist_semi_auto": ["device_target=CPU", "parallel=standalone", "dataset.num_samples=256"],
}
PRESETS = sorted(p.stem for p in (REPO / "experiments").glob("*.yaml"))


def test_every_preset_has_a_reduced_run():
    assert sorted(REDUCED) == PRESETS


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_runs_reduced(tmp_path, preset):
    proc = run_train([f"experiment={preset}", *SHORT, *REDUCED[preset]], tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("sporeflow").experiment_id])
    assert run.info.status == "FINISHED" and run.data.tags["experiment"] == preset
    assert "final/acc" in run.data.metrics
