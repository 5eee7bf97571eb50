"""eval.py (issue 34): a finished run's final weights evaluated again, in this process against
a real sqlite store. The accuracy it reports is the run's own `final/acc`; top-5, per-class
accuracy and the confusion matrix are checked against scikit-learn on the logits it saved."""

from __future__ import annotations

import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from sklearn.metrics import confusion_matrix as sk_confusion
from sklearn.metrics import recall_score, top_k_accuracy_score

from helpers.inprocess import TINY, run_train_here
from sporeflow.report import classification


def runs(launch, stage: str) -> list:
    client = MlflowClient(f"sqlite:///{launch}/mlflow.db")
    experiment = client.get_experiment_by_name("sporeflow")
    found = client.search_runs([experiment.experiment_id], f"tags.stage = '{stage}'")
    return sorted(found, key=lambda r: r.info.start_time)


def evaluate(launch, run_dir: str, *args: str):
    return run_train_here(list(args), launch, run_dir=run_dir, app="eval")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished plain run (a tiny network, one epoch): (launch dir, its MLflow run)."""
    launch = tmp_path_factory.mktemp("launch")
    proc = run_train_here([*TINY, "epochs=1", "seed=3"], launch)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = runs(launch, "train")
    return launch, run


def test_metrics_from_logits_equal_scikit_learn():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(500, 10)).astype(np.float32)
    labels = rng.integers(0, 10, 500)
    labels[labels == 4] = 3  # a class without images is left out of the per-class figures
    got = classification.classification_metrics(logits, labels)
    assert got["acc_top5"] == pytest.approx(
        top_k_accuracy_score(labels, logits, k=5, labels=range(10))
    )
    predicted = logits.argmax(axis=1)
    assert got["acc"] == pytest.approx(np.mean(predicted == labels))
    recall = recall_score(labels, predicted, labels=range(10), average=None, zero_division=0)
    assert "acc_class_4" not in got
    for c in (0, 1, 2, 3, 5, 6, 7, 8, 9):
        assert got[f"acc_class_{c}"] == pytest.approx(recall[c])
    assert (
        classification.confusion_matrix(predicted, labels, 10)
        == sk_confusion(labels, predicted, labels=range(10))
    ).all()
    assert "acc_top5" not in classification.classification_metrics(logits[:, :5], labels % 5)


def test_eval_of_a_run_reproduces_its_final_accuracy_and_records_what_it_measured(trained):
    launch, source = trained
    proc = evaluate(launch, "eval_dir", f"source={launch / 'run'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = runs(launch, "eval")
    assert run.info.status == "FINISHED"
    assert run.data.metrics["eval/acc"] == source.data.metrics["final/acc"]
    assert run.data.metrics["eval/loss"] == pytest.approx(
        source.data.metrics["final/loss"], rel=1e-5
    )
    assert run.data.tags["sporeflow.source_run"] == source.info.run_id
    assert run.data.tags["eval.split"] == "test" and run.data.params["model.hidden"] == "16"
    out = launch / "eval_dir"
    logits, labels = np.load(out / "logits.npy"), np.load(out / "labels.npy")
    assert len(labels) == 64  # TINY's test split, every image once
    assert run.data.metrics["eval/acc_top5"] == pytest.approx(
        top_k_accuracy_score(labels, logits, k=5, labels=range(10))
    )
    table = np.loadtxt(out / "confusion_matrix.csv", delimiter=",", skiprows=1, dtype=int)[:, 1:]
    assert (table == sk_confusion(labels, logits.argmax(axis=1), labels=range(10))).all()
    assert (np.load(out / "predictions.npy") == (logits.argmax(axis=1) == labels)).all()
    client = MlflowClient(f"sqlite:///{launch}/mlflow.db")
    logged = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"logits.npy", "confusion_matrix.csv", "confusion_matrix.png"} <= logged
    assert f"eval of {launch / 'run'} on its test split: acc=" in proc.stderr


def test_eval_by_run_id_on_the_train_split_with_a_key_over_the_source(trained):
    launch, source = trained
    proc = evaluate(
        launch, "by_id", f"source={source.info.run_id}", "split=train", "dataset.batch_size=7"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = runs(launch, "eval")[-1]
    assert run.data.tags["eval.split"] == "train" and run.data.params["dataset.batch_size"] == "7"
    labels = np.load(launch / "by_id" / "labels.npy")
    assert len(labels) == 128, "the whole train split, once"
    assert 0.0 <= run.data.metrics["eval/acc"] <= 1.0


@pytest.mark.parametrize(
    ("source", "extra", "says"),
    [
        ("{launch}/nope", [], "not a run dir, a stage dir or an MLflow run id"),
        ("{launch}/mlartifacts", [], "holds no .hydra/config.yaml"),
        ("{launch}/run", ["model=mlp", "model.hidden=32"], "shape"),
        ("0123456789abcdef0123456789abcdef", [], "no such MLflow run"),
    ],
)
def test_a_source_that_cannot_be_evaluated_exits_2_before_any_work(trained, source, extra, says):
    launch, _ = trained
    before = len(runs(launch, "eval"))
    proc = evaluate(launch, "refused", f"source={source.format(launch=launch)}", *extra)
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("Config error: source=") and says in line, line
    assert len(runs(launch, "eval")) == before and not (launch / "refused").exists()
