"""A trained network as an MLflow 3 model, its data as dataset inputs, the machine's system
metrics: one real training job (the default job, 3 epochs, real sqlite store) read back through
MLflow's own loaders, a real `mlflow models serve` over HTTP, and MindSpore's MINDIR runtime.
The reference labels come from MindSpore's `Model.predict` on the run's own checkpoint."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
from omegaconf import OmegaConf

from helpers.shell import user_env
from helpers.store import client_of, runs_of
from helpers.train import run_train

pytestmark = pytest.mark.e2e
N_IMAGES = 256


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(launch dir, the run, its logged model, 256 test images, MindSpore's labels for them)."""
    cwd = tmp_path_factory.mktemp("model")
    proc = run_train(["epochs=3", "tracking.system_metrics_interval=1"], cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = runs_of(cwd)
    client = client_of(cwd)
    (model,) = client.search_logged_models(experiment_ids=[run.info.experiment_id])
    from sporeflow.config.components import build_dataset, build_model
    from sporeflow.storage.checkpoints import load_weights

    cfg = OmegaConf.load(cwd / "run" / ".hydra" / "config.yaml")
    # the first N_IMAGES of the split (an evaluation's batches are equal ones, not N_IMAGES)
    batches = (
        build_dataset(cfg).create("test").create_tuple_iterator(num_epochs=1, output_numpy=True)
    )
    images = np.concatenate([batch for batch, _ in batches])[:N_IMAGES]
    network = build_model(cfg)
    load_weights(network, cwd / "run" / "checkpoints" / "final.ckpt")
    network.set_train(False)
    reference = ms.Model(network).predict(ms.Tensor(images)).asnumpy().argmax(axis=1)
    return cwd, run, model, images, reference


@pytest.fixture
def mlflow_at_store(trained, monkeypatch):
    """mlflow with the job's store as its tracking URI, for this test only: MLflow's
    set_tracking_uri also exports MLFLOW_TRACKING_URI, which every later `train.py` would
    inherit."""
    import mlflow

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # put back after the test
    mlflow.set_tracking_uri(f"sqlite:///{trained[0] / 'mlflow.db'}")
    yield mlflow
    mlflow.set_tracking_uri(None)


def test_the_logged_model_loads_with_pyfunc_and_predicts_model_evals_labels(
    trained, mlflow_at_store
):
    cwd, run, model, images, reference = trained
    mlflow = mlflow_at_store
    assert model.source_run_id == run.info.run_id and str(model.status).endswith("READY")
    loaded = mlflow.pyfunc.load_model(model.model_uri)
    out = loaded.predict(images)
    assert len(images) == N_IMAGES
    np.testing.assert_array_equal(out["label"], reference)
    np.testing.assert_allclose(out["probabilities"].sum(axis=1), 1.0, rtol=1e-5)
    assert out["probabilities"].shape == (N_IMAGES, 10)
    inputs = loaded.metadata.signature.inputs.to_dict()
    assert list(inputs[0]["tensor-spec"]["shape"]) == [-1, 1, 32, 32]
    assert [o["name"] for o in loaded.metadata.signature.outputs.to_dict()] == [
        "label",
        "probabilities",
    ]
    assert loaded.metadata.saved_input_example_info["type"] == "ndarray"


def test_the_mindir_beside_it_runs_in_mindspore_alone(trained, mlflow_at_store):
    _, _, model, images, reference = trained
    local = Path(mlflow_at_store.artifacts.download_artifacts(model.model_uri))
    (mindir,) = local.rglob("network.mindir")
    graph = ms.nn.GraphCell(ms.load(str(mindir)))
    labels = graph(ms.Tensor(images)).asnumpy().argmax(axis=1)
    np.testing.assert_array_equal(labels, reference)
    assert graph(ms.Tensor(images[:7])).shape == (7, 10)  # the batch dimension is free


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_mlflow_models_serve_answers_with_the_same_labels(trained):
    cwd, _, model, images, reference = trained
    port = _free_port()
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "mlflow"),
            "models",
            "serve",
            "-m",
            model.model_uri,
            "--env-manager",
            "local",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        cwd=cwd,
        env=user_env({"MLFLOW_TRACKING_URI": f"sqlite:///{cwd / 'mlflow.db'}"}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2):
                    break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode()[-3000:]
                assert time.monotonic() < deadline, "mlflow models serve did not answer in 180 s"
                time.sleep(1)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/invocations",
            data=json.dumps({"inputs": images.tolist()}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as resp:
            answer = json.loads(resp.read())
        np.testing.assert_array_equal(np.array(answer["predictions"]["label"]), reference)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def test_the_run_names_its_data_with_a_digest_of_the_files(trained):
    _, run, _, _, _ = trained
    inputs = {
        d.dataset.name: (d.dataset, {t.key: t.value for t in d.tags})
        for d in run.inputs.dataset_inputs
    }
    assert set(inputs) == {"sklearn-digits-train", "sklearn-digits-val", "sklearn-digits-test"}
    train, tags = inputs["sklearn-digits-train"]
    assert tags["mlflow.data.context"] == "training"
    assert inputs["sklearn-digits-val"][1]["mlflow.data.context"] == "validation"
    assert inputs["sklearn-digits-test"][1]["mlflow.data.context"] == "evaluation"
    # 1437 stored training images, 144 (10%, stratified) of them held out for validation
    assert json.loads(train.profile)["num_rows"] == 1293
    assert json.loads(inputs["sklearn-digits-val"][0].profile)["num_rows"] == 144
    # the digest is the files' bytes and the selection, recomputed here independently
    import hashlib

    import sklearn.datasets

    data = Path(sklearn.datasets.__file__).parent / "data" / "digits.csv.gz"
    from sporeflow.data.digits import Digits
    from sporeflow.data.splits import digest

    held = digest(Digits().held_out())  # the held-out rows, named in the selection
    selection = (
        f"test_fraction=0.2 split seed 0; val_split=0.1 split_seed=0 held out 144 rows "
        f"({held}): the rest"
    )
    h = hashlib.sha256(b"sklearn-digits-train\0" + selection.encode())
    h.update(hashlib.sha256(data.read_bytes()).hexdigest().encode())
    assert train.digest == h.hexdigest()[:12]
    assert train.digest != inputs["sklearn-digits-test"][0].digest


def test_the_run_has_system_metrics_sampled_while_it_trained(trained):
    cwd, run, _, _, _ = trained
    history = client_of(cwd).get_metric_history(
        run.info.run_id, "system/cpu_utilization_percentage"
    )
    # at least the sample taken when the run ends; more when the writer (at nice 10) gets the
    # CPU during training - on a busy 2-core machine it may not
    assert len(history) >= 1
    assert all(0.0 <= m.value <= 100.0 for m in history)
    assert "system/system_memory_usage_megabytes" in run.data.metrics
