"""`python train.py`'s entry run in this process (helpers.inprocess): checkpoints on disk, the
MLflow run read back through MlflowClient. Only the probe of the training process's imports
needs a process of its own (tests/e2e/test_train_e2e.py)."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from helpers.inprocess import run_train_here as run_train
from helpers.store import only_run
from helpers.train import REPO


def test_default_job_trains_tracks_and_checkpoints(tmp_path):
    proc = run_train(["epochs=6"], tmp_path, env={"MLFLOW_TRACKING_URI": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[sporeflow] train: val acc=" in proc.stderr

    ckpts = tmp_path / "run" / "checkpoints"
    assert (ckpts / "final.ckpt").stat().st_size > 1000
    assert sorted(p.name for p in ckpts.glob("epoch_*.ckpt")) == [
        "epoch_0005.ckpt",
        "epoch_0006.ckpt",
    ]

    client, run = only_run(f"sqlite:///{tmp_path}/mlflow.db")
    assert run.info.status == "FINISHED"
    params = run.data.params
    assert params["optimizer.lr"] == "0.02" and params["model.num_classes"] == "10"
    assert (
        params["mode"] == "graph" and params["dataset._target_"] == "sporeflow.data.digits.Digits"
    )
    assert run.data.tags["stage"] == "train"
    # runtime.cpu_isa=auto chose the ISA itself (the tests export none): AVX2 on AVX-512 CPUs
    flags = next(ln for ln in open("/proc/cpuinfo") if ln.startswith("flags")).split()
    expected_isa = "AVX2" if {"avx512f", "avx2"} <= set(flags) else ""
    assert run.data.tags["onednn_max_cpu_isa"] == expected_isa
    # launched outside the checkout: the commit is the running code's, with a dirty flag
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    assert run.data.tags["git_commit"] == head and run.data.tags["git_dirty"] in ("true", "false")
    assert "Creating initial MLflow database tables" not in proc.stdout + proc.stderr

    # 1437 stored training images, 144 (10%, stratified) held out for validation: 1293 / batch
    # 32, last batch kept (45 steps before the validation split)
    steps_per_epoch = 41
    assert run.data.tags["batch.steps_per_epoch"] == str(steps_per_epoch)
    losses = client.get_metric_history(run.info.run_id, "train/loss")
    assert [m.step for m in losses] == list(range(1, 6 * steps_per_epoch + 1))
    accs = client.get_metric_history(run.info.run_id, "val/acc")
    assert [m.step for m in accs] == [steps_per_epoch * e for e in range(1, 7)]
    assert accs[-1].value > 0.5  # chance is 0.1
    assert losses[-1].value < losses[0].value
    assert run.data.metrics["final/images_per_sec"] > 0

    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "checkpoints")}
    assert artifacts == {"checkpoints/final.ckpt"}
    config_files = {a.path for a in client.list_artifacts(run.info.run_id, "config")}
    assert {"config/config.yaml", "config/overrides.txt", "config/hydra"} <= config_files
    text = client.download_artifacts(run.info.run_id, "config/overrides.txt", str(tmp_path))
    assert "epochs=6" in open(text).read()


def test_pynative_equals_graph_and_env_uri_overrides(tmp_path):
    """Both execution modes train (numpy<2 pin) and, seeded alike, reach the same weights."""
    finals = {}
    for mode in ("graph", "pynative"):
        launch = tmp_path / mode
        launch.mkdir()
        uri = f"sqlite:///{launch}/elsewhere.db"
        proc = run_train(["epochs=1", f"mode={mode}"], launch, env={"MLFLOW_TRACKING_URI": uri})
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert not (launch / "mlflow.db").exists()
        _, run = only_run(uri)
        assert run.data.params["mode"] == mode
        finals[mode] = run.data.metrics
    assert finals["pynative"]["final/val/loss"] == pytest.approx(
        finals["graph"]["final/val/loss"], rel=1e-4
    )
    assert finals["pynative"]["final/val/acc"] == pytest.approx(
        finals["graph"]["final/val/acc"], abs=1e-3
    )


def test_fashion_mnist_idx_job(tmp_path, idx_dir):
    proc = run_train(
        [
            "dataset=fashion_mnist",
            f"dataset.root={idx_dir}",
            "epochs=4",
            "optimizer.lr=0.05",
            f"dataset.cache_dir={tmp_path / 'cache'}",
            "dataset.batch_size=32",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, run = only_run(f"sqlite:///{tmp_path}/mlflow.db")
    assert run.data.metrics["final/val/acc"] > 0.5  # bands are easy; chance is 0.1


def test_train_step_features_inside_model_train(tmp_path):
    """The custom cell under Model.train (GRAPH_MODE): EMA ranked and exported, accumulation."""
    proc = run_train(
        [
            "epochs=2",
            "train.accumulation_steps=2",
            "train.loss_scale=1024",
            "train.ema.enabled=true",
            "train.ema.decay=0.9",
            "train.ema.eval_with=ema",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    client, run = only_run(f"sqlite:///{tmp_path}/mlflow.db")
    ema_acc = client.get_metric_history(run.info.run_id, "val/acc_ema")
    assert len(ema_acc) == 2
    assert run.data.metrics["final/val/acc"] == ema_acc[-1].value  # the EMA weights are the export
    ckpts = tmp_path / "run" / "checkpoints"
    best = list(ckpts.glob("best_acc_ema_*_epoch_*.ckpt"))
    assert len(best) == 1
    import mindspore as ms

    final = ms.load_checkpoint(str(ckpts / "final.ckpt"))
    full = ms.load_checkpoint(str(ckpts / "epoch_0002.ckpt"))
    assert (final["fc3.weight"].asnumpy() == full["ema.fc3.weight"].asnumpy()).all()
    assert not (final["fc3.weight"].asnumpy() == full["fc3.weight"].asnumpy()).all()
    steps = 2 * int(run.data.tags["batch.steps_per_epoch"])  # 2 epochs' batches; 2 a step
    assert int(full["micro_step"].asnumpy()) == steps
    assert int(full["global_step"].asnumpy()) == steps // 2


@pytest.mark.parametrize("dataset", ["mnist", "cifar10", "imagenet"])
def test_each_dataset_trains_a_real_epoch(tmp_path, idx_dir, dataset):
    from helpers.formats import write_cifar_bin, write_jpeg_tree

    if dataset == "mnist":
        args = [f"dataset.root={idx_dir}", f"dataset.cache_dir={tmp_path / 'cache'}"]
    elif dataset == "cifar10":
        write_cifar_bin(tmp_path / "cifar")
        args = [f"dataset.root={tmp_path / 'cifar'}", "dataset.num_samples=256"]
    else:
        write_jpeg_tree(tmp_path / "imagenet", train=6, val=2)
        args = [
            f"dataset.root={tmp_path / 'imagenet'}",
            "dataset.image_size=32",
            "dataset.num_classes=3",
            "dataset.batch_size=6",
        ]
    proc = run_train([f"dataset={dataset}", "epochs=1", *args], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    client, run = only_run(f"sqlite:///{tmp_path}/mlflow.db")
    assert run.data.params["dataset._target_"].endswith(
        {"mnist": "IdxImages", "cifar10": "Cifar10", "imagenet": "ImageFolder"}[dataset]
    )
    # one epoch of this data set's own size: its images / the batch, every step logged
    train_images, batch = {"mnist": (256, 32), "cifar10": (256, 32), "imagenet": (18, 6)}[dataset]
    losses = client.get_metric_history(run.info.run_id, "train/loss")
    assert [m.step for m in losses] == list(range(1, -(-train_images // batch) + 1))
    # the accuracy reported is the one of the predictions kept on disk
    correct = np.load(tmp_path / "run" / "predictions.npy")
    assert run.data.metrics["final/val/acc"] == pytest.approx(correct.mean(), abs=1e-6)


def test_dynamic_loss_scale_with_mixed_precision(tmp_path):
    proc = run_train(
        [
            "epochs=2",
            "train.amp_level=O2",
            "train.loss_scale_manager=dynamic",
            "train.loss_scale=65536",
            "train.loss_scale_window=20",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, run = only_run(f"sqlite:///{tmp_path}/mlflow.db")
    assert run.data.metrics["final/val/acc"] > 0.3
    import mindspore as ms

    state = ms.load_checkpoint(str(tmp_path / "run" / "checkpoints" / "epoch_0002.ckpt"))
    scale = float(state["loss_scale"].asnumpy())
    assert (
        scale != 65536 and np.log2(scale).is_integer()
    )  # it adapted (float16 overflows shrink it)


def test_a_bug_in_component_code_is_not_a_config_error(tmp_path):
    """A constructor that raises is the user's code failing, not a typo: traceback, exit 1."""
    proc = run_train(
        ["model._target_=helpers.failing_models.BrokenInit"],
        tmp_path,
        env={"PYTHONPATH": str(REPO / "tests")},
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" in proc.stderr and "bug in the user's model code" in proc.stderr
    assert "Config error" not in proc.stderr


def test_tracking_off_trains_and_touches_no_store(tmp_path):
    """tracking.enabled=false: the run trains and checkpoints, no store is created, and the
    summary says tracking was off instead of naming a store."""
    proc = run_train(
        ["debug=quick", "tracking.enabled=false"], tmp_path, env={"MLFLOW_TRACKING_URI": ""}
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "run" / "checkpoints" / "final.ckpt").stat().st_size > 1000
    assert not list(tmp_path.glob("mlflow.db*")) and not (tmp_path / "mlartifacts").exists()
    (summary,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("[sporeflow] train:")]
    assert summary.endswith("MLflow off (tracking.enabled=false)"), summary


def test_a_trained_stage_compiles_its_eval_graph_once(tmp_path, monkeypatch):
    """The per-image predictions at a stage's end run the graph its evaluations compiled
    (the Model's eval network in phase "eval"): a job compiles a train and an eval graph, no
    third one for the predictions (it did until the predictions ran the bare network), and no
    second eval graph for a smaller last batch (72 test images: 3 batches of 24, not 32, 32
    and 8; the 24 validation images are one batch of that shape too). Counted at MindSpore's own
    compile: a graph it had not compiled before."""
    from mindspore.graph.api import _CellGraphExecutor

    from helpers.inprocess import TINY

    compile_graph, compiled = _CellGraphExecutor.compile, []

    def counting(self, obj, *args, phase="predict", **kwargs):
        full_phase, new = compile_graph(self, obj, *args, phase=phase, **kwargs)
        if new:
            compiled.append((type(obj).__name__, phase))
        return full_phase, new

    monkeypatch.setattr(_CellGraphExecutor, "compile", counting)
    args = [*TINY, "dataset.num_samples=152", "dataset.val_split=24", "dataset.test_samples=72"]
    args += ["epochs=2", "tracking.log_model=false"]  # 128 training images: 4 batches of 32
    proc = run_train(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert compiled == [("TrainOneStepCell", "train"), ("WithEvalCell", "eval")]
    assert (tmp_path / "run" / "predictions.npy").is_file()
