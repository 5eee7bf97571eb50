"""Fine-tuning (issue 34): `train.init_from` starts a run from another run's final weights where
names and shapes match, `train.freeze` keeps parameters fixed. A LeNet-5 trained on all ten
digit classes starts a five-class run (classes 0-4 of the same images, written as real IDX
files): only the classifier is left as initialised, and after one epoch it is ahead of the same
network trained from scratch with the same seed."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from PIL import Image

from helpers.formats import write_idx
from helpers.inprocess import TINY, TINY_PIPELINE, run_train_here
from sporeflow.data.digits import load_digits_split
from sporeflow.models.lenet import LeNet5
from sporeflow.storage.checkpoints import restore_matching

QUIET = ["callbacks.progress_bar=false"]


def test_matching_weights_are_copied_and_the_rest_left_alone():
    ms.set_seed(0)
    ten, five = LeNet5(num_classes=10), LeNet5(num_classes=5)
    before = {p.name: p.asnumpy().copy() for p in five.get_parameters()}
    state = {p.name: p for p in ten.get_parameters()}
    loaded, skipped = restore_matching(state, five)
    assert skipped == ["fc3.weight", "fc3.bias"]
    for p in five.get_parameters():
        expected = state[p.name].asnumpy() if p.name in loaded else before[p.name]
        assert np.array_equal(p.asnumpy(), expected), p.name


def five_digit_classes(root):
    """Digits 0-4 of the digits data set's own splits, resized to MNIST's 28 x 28, as IDX."""
    for split in ("train", "test"):
        images, labels = load_digits_split(split, 0.2)
        keep = labels < 5
        big = [np.asarray(Image.fromarray(i[:, :, 0]).resize((28, 28))) for i in images[keep]]
        write_idx(root, split, np.stack(big), labels[keep], gz=False)


def final_run(launch):
    client = MlflowClient(f"sqlite:///{launch}/mlflow.db")
    experiment = client.get_experiment_by_name("sporeflow")
    (run,) = client.search_runs([experiment.experiment_id])
    return run


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A finished ten-class LeNet-5 digits run (its launch dir)."""
    launch = tmp_path_factory.mktemp("ten")
    proc = run_train_here([*QUIET, "epochs=4", "seed=2"], launch)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return launch


@pytest.fixture(scope="module")
def tiny_source(tmp_path_factory):
    """A finished run of the tiny MLP (its launch dir): a source no LeNet weight fits, and the
    start of a dim-reduce pipeline of the same network."""
    launch = tmp_path_factory.mktemp("tiny")
    proc = run_train_here([*TINY, "epochs=1", "seed=4"], launch)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return launch


def five_class_run(launch, data, *extra):
    args = [
        *QUIET,
        "dataset=mnist",
        f"dataset.root={data}",
        "dataset.num_classes=5",
        "dataset.mean=0.3",  # the digits data set's own normalisation
        "dataset.std=0.4",
        "epochs=1",
        "seed=5",
        *extra,
    ]
    launch.mkdir()
    proc = run_train_here(args, launch)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return final_run(launch)


def test_a_five_class_run_fine_tuned_from_ten_classes_skips_only_the_classifier_and_leads(
    source, tmp_path
):
    data = tmp_path / "five"
    five_digit_classes(data)
    tuned = five_class_run(tmp_path / "tuned", data, f"train.init_from={source / 'run'}")
    scratch = five_class_run(tmp_path / "scratch", data)
    accs = tuned.data.metrics["final/val/acc"], scratch.data.metrics["final/val/acc"]
    assert accs[0] > accs[1], f"fine-tuned {accs[0]:.4f}, from scratch {accs[1]:.4f}"
    assert tuned.data.tags["sporeflow.init_from"] == str(source / "run")
    assert tuned.data.tags["sporeflow.init_from_run"] == final_run(source).info.run_id
    assert tuned.data.params["train.init_from"] == str(source / "run")
    said = (tmp_path / "tuned" / "run" / "train.log").read_text()
    assert "train.init_from: 6 of 8 parameters loaded from" in said
    assert "(not in it, or another shape): fc3.weight, fc3.bias" in said


def test_frozen_parameters_keep_the_sources_values_and_the_rest_train(source, tmp_path):
    run = tmp_path / "frozen"
    run.mkdir()
    args = [*QUIET, "epochs=1", f"train.init_from={source / 'run'}", "train.freeze=[conv1,fc1]"]
    proc = run_train_here(args, run)
    assert proc.returncode == 0, proc.stderr[-3000:]
    start = ms.load_checkpoint(str(source / "run" / "checkpoints" / "final.ckpt"))
    end = ms.load_checkpoint(str(run / "run" / "checkpoints" / "final.ckpt"))
    for name in ("conv1.weight", "fc1.weight", "fc1.bias"):
        assert np.array_equal(end[name].asnumpy(), start[name].asnumpy()), name
    for name in ("conv2.weight", "fc2.weight", "fc3.weight"):
        assert not np.array_equal(end[name].asnumpy(), start[name].asnumpy()), name
    # issue 51 item 6: the log (on the console: Hydra's INFO lines) says what was loaded and
    # what is kept fixed
    said = (run / "run" / "train.log").read_text()
    assert "train.init_from: 8 of 8 parameters loaded from" in said, said[-2000:]
    assert "train.freeze: 3 parameters kept fixed: conv1.weight, fc1.weight, fc1.bias" in said


def test_a_source_none_of_whose_weights_fit_is_refused_before_any_work(tiny_source, tmp_path):
    from helpers.inprocess import train_cli

    mlp, lenet = tiny_source, tmp_path / "lenet"
    lenet.mkdir()
    code, err = train_cli([f"train.init_from={mlp / 'run'}"], lenet)
    assert code == 2, err[-3000:]
    assert f"train.init_from={mlp / 'run'}: none of its weights" in err
    assert "model=sporeflow.models.lenet.LeNet5" in err and "Traceback" not in err
    assert not (lenet / "run").exists()


def test_a_dim_reduce_stage1_starts_from_the_source_and_its_fingerprint_knows_it(
    tiny_source, tmp_path
):
    source, tuned = tiny_source, tmp_path / "tuned"
    tuned.mkdir()
    proc = run_train_here([*TINY_PIPELINE, f"train.init_from={source / 'run'}"], tuned)
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{tuned}/mlflow.db")
    experiment = client.get_experiment_by_name("sporeflow").experiment_id
    (stage1,) = client.search_runs([experiment], "tags.stage = 'stage1'")
    weights = source / "run" / "checkpoints" / "final.ckpt"
    assert stage1.data.tags["sporeflow.init_weights"] == str(weights)
    from sporeflow.storage.files import sha256_file

    assert stage1.data.tags["provenance.init_weights"] == sha256_file(weights)[:12]
    (stage2,) = client.search_runs([experiment], "tags.stage = 'stage2'")
    assert "sporeflow.init_from" not in stage2.data.tags  # stage 2 starts from stage 1
