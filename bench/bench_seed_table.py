"""The seed's table at CPU scale: does stage 2 beat plain training for the same budget?

The seed (ResNet-50 / ImageNet): 70 epochs of stage 1 (66.05%) + 2 dim-reduce epochs = 74.31%,
against 70.18% for plain training to 80 epochs. Here, on real Fashion-MNIST (Debian's
`dataset-fashion-mnist`): 16 epochs of Momentum (lr 0.01), snapshots from epoch 8, 4 per epoch
(36), then every arm from the same stage 1, per seed:

    stage 1                    the 16 epochs alone
    stage 2 (sporeflow)        2 dim-reduce epochs from stage 1's final weights
    stage 2 (built-in)         MindSpore's boost DimReduce: same snapshots, weights, data, settings
    stage 2 from mean          sporeflow's, started at the snapshot mean (boost.start_from=mean)
    plain +2 / +10 epochs      plain training continued (the seed's "80 epochs" is +10)
    annealed +2                plain continuation at 0.1 x lr
    budget (stage 2's cost)    plain continuation for the passes stage 2 spent (snapshots and
                               PCA included), lr decayed linearly to zero: the equal-cost arm
    snapshot mean              the mean of the 36 snapshots, no training

sporeflow's arms are two `python train.py boost=dim_reduce` jobs per seed on one MLflow store (the
second reuses stage 1); the built-in runs in its own process (a process-wide singleton). Printed:
mean +- sd over seeds of test accuracy and loss, wall time and forward+backward passes (engine.cost;
stage 2's with its snapshots and PCA) per arm, and stage 2 against each arm
paired on the same test images, pooled over seeds (difference in images, 95% CI, exact McNemar p).
Usage: python bench/bench_seed_table.py [lenet5,resnet18] [seeds, e.g. 1,2,3] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trainjob import REPO, run_train, runs

sys.path.insert(0, str(REPO / "src"))

RECIPE = [
    "dataset=fashion_mnist",
    "optimizer=momentum",
    "optimizer.lr=0.01",
    "epochs=16",
    "boost=dim_reduce",
    "boost.snapshot.start_epoch=8",
    "boost.snapshot.per_epoch=4",
    "callbacks.progress_bar=false",
    "callbacks.best.keep=0",
    "boost.baselines=[baseline,annealed,snapshot_mean,budget]",
]
MODELS = {  # training images per model: what fits the budget here (the test split is capped alike)
    "lenet5": ["model=lenet5", "dataset.num_samples=12000"],
    "resnet18": ["model=resnet18", "dataset.num_samples=1536"],
}
SECOND_JOB = ["boost.start_from=mean", "boost.baselines=[baseline]", "boost.baseline_epochs=10"]
ARMS = {  # arm -> (job, stage) whose run and predictions.npy hold it
    "stage 1": ("a", "stage1"),
    "stage 2 (sporeflow)": ("a", "stage2"),
    "stage 2 (built-in)": ("builtin", None),
    "stage 2 from mean": ("b", "stage2"),
    "plain +2 epochs": ("a", "baseline"),
    "plain +10 epochs": ("b", "baseline"),
    "annealed +2": ("a", "annealed"),
    "budget (stage 2's cost)": ("a", "budget"),
    "snapshot mean": ("a", "snapshot_mean"),
}
REFERENCE = "stage 2 (sporeflow)"


def stage_runs(launch: Path, run_dir: Path) -> dict[str, object]:
    """The pipeline's runs by stage (a reused stage 1 is not among them: it belongs to job a)."""
    _, (pipeline,) = runs(launch, f"tags.run_dir = '{run_dir}' and tags.stage = 'pipeline'")
    _, children = runs(launch, f"tags.mlflow.parentRunId = '{pipeline.info.run_id}'")
    return {"pipeline": pipeline, **{r.data.tags["stage"]: r for r in children}}


def arm_result(run, stage_dir: Path, pipeline) -> dict:
    import numpy as np

    m = run.data.metrics
    return {
        "acc": m["test/acc"],  # the exported weights on the test split: what a table reports
        "loss": m["test/loss"],
        "seconds": (run.info.end_time - run.info.start_time) / 1000,
        # the parent's: stage 2's with its snapshots and PCA (pipeline_cost)
        "passes": pipeline.data.metrics.get(f"{run.data.tags['stage']}/passes", float("nan")),
        "correct": np.load(stage_dir / "test_predictions.npy").tolist(),
    }


def builtin_worker(run_dir: str, out: str) -> None:
    """MindSpore's built-in DimReduce from this job's stage 1: its snapshots (as .ckpt files, the
    built-in computes its own PCA), its final weights, the same data order and settings."""
    import mindspore as ms
    import numpy as np
    from mindspore import Model, nn
    from mindspore.train import FixedLossScaleManager
    from omegaconf import OmegaConf

    from sporeflow.config.components import build_dataset, build_loss, build_model
    from sporeflow.dim_reduce.pca import Layout, read_all
    from sporeflow.dim_reduce.snapshots import list_snapshots
    from sporeflow.engine.predictions import eval_metrics, logits_and_labels
    from sporeflow.storage.checkpoints import load_weights

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    run = Path(run_dir)
    cfg = OmegaConf.load(run / ".hydra" / "config.yaml")
    ms.set_seed(cfg.seed)
    net = build_model(cfg)
    layout = Layout.of(net)
    ckpts = run / "builtin_snapshots"
    ckpts.mkdir(exist_ok=True)
    for i, path in enumerate(list_snapshots(run / "stage1" / "snapshots")):
        weights = read_all(path, layout)
        ms.save_checkpoint(
            [{"name": n, "data": ms.Tensor(v)} for n, v in weights.items()],
            str(ckpts / f"snapshot_{i:04d}.ckpt"),
        )
    load_weights(net, run / "stage1" / "checkpoints" / "final.ckpt")
    b = cfg.boost
    config = {
        "boost": {"mode": "manual", "dim_reduce": True},
        "dim_reduce": {
            "rho": b.rho,
            "gamma": b.gamma,
            "alpha": b.alpha,
            "sigma": b.sigma,
            "n_components": b.n_component,
            "pca_mat_path": None,
            "weight_load_dir": str(ckpts),
            "timeout": 1800,
        },
    }
    data = build_dataset(cfg)
    train_data = data.create("train", seed=cfg.seed, start_epoch=0)
    loss_fn = build_loss(cfg)
    start = time.perf_counter()
    model = Model(
        net,
        loss_fn=loss_fn,
        optimizer=nn.SGD(net.trainable_params(), 0.01),
        boost_level="O1",
        boost_config_dict=config,
        loss_scale_manager=FixedLossScaleManager(1.0, drop_overflow_update=False),
    )
    model.train(b.epochs, train_data, dataset_sink_mode=False)
    seconds = time.perf_counter() - start
    eval_data = data.create("test")
    evaluator = Model(net, loss_fn=loss_fn, metrics=eval_metrics())
    result = evaluator.eval(eval_data, dataset_sink_mode=False)
    logits, labels = logits_and_labels(evaluator, eval_data)
    correct = logits.argmax(axis=1) == labels
    Path(out).write_text(
        json.dumps(
            {
                "acc": float(result["acc"]),
                "loss": float(result["loss"]),
                "seconds": seconds,
                "passes": float("nan"),  # not counted: MindSpore's own cell
                "correct": np.asarray(correct).tolist(),
            }
        )
    )


def run_seed(model: str, seed: int, root: Path) -> dict[str, dict]:
    launch = root / model
    launch.mkdir(parents=True, exist_ok=True)
    args = [*RECIPE, *MODELS[model], f"seed={seed}"]
    job = {"a": launch / f"seed{seed}_a", "b": launch / f"seed{seed}_b"}
    started = time.perf_counter()
    run_train([f"hydra.run.dir={job['a']}", *args], launch)
    run_train([f"hydra.run.dir={job['b']}", *args, *SECOND_JOB], launch)
    out = job["a"] / "builtin.json"
    subprocess.run(
        [sys.executable, __file__, "--builtin-worker", str(job["a"]), str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
    by_job = {name: stage_runs(launch, path) for name, path in job.items()}
    results = {}
    for arm, (name, stage) in ARMS.items():
        if name == "builtin":
            results[arm] = json.loads(out.read_text())
            continue
        run = by_job[name][stage]
        stage_dir = Path(run.data.tags["run_dir"])
        results[arm] = arm_result(run, stage_dir, by_job[name]["pipeline"])
    results["_pca_seconds"] = by_job["a"]["pipeline"].data.metrics.get("pca_seconds", float("nan"))
    print(
        f"  {model} seed {seed}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True
    )
    return results


def spread(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.4f} +- {sd:.4f}"


def report(model: str, per_seed: list[dict]) -> None:
    import numpy as np

    from sporeflow.report.paired import compare_paired

    n_test = len(per_seed[0][REFERENCE]["correct"])
    pca = statistics.fmean(r["_pca_seconds"] for r in per_seed)
    print(
        f"\n{model} / Fashion-MNIST ({MODELS[model][1].split('=')[1]} training, {n_test} test images), "
        f"{len(per_seed)} seeds; stage-2 arms: 2 epochs, k=32 (sporeflow's PCA {pca:.1f} s, not in its wall time)"
    )
    print(
        f"  {'arm':24s} {'test acc (mean +- sd)':>22s} {'test loss':>18s} {'wall s':>8s} "
        f"{'passes':>7s}   "
        f"{'stage 2 vs arm, pooled over seeds':s}"
    )
    reference = np.concatenate([r[REFERENCE]["correct"] for r in per_seed])
    for arm in ARMS:
        accs = [r[arm]["acc"] for r in per_seed]
        losses = [r[arm]["loss"] for r in per_seed]
        wall = statistics.fmean(r[arm]["seconds"] for r in per_seed)
        passes = statistics.fmean(r[arm]["passes"] for r in per_seed)
        if arm == REFERENCE:
            versus = "-"
        else:
            cmp = compare_paired(reference, np.concatenate([r[arm]["correct"] for r in per_seed]))
            low, high = cmp.ci95
            versus = f"{cmp.images:+5d} images, {cmp.diff:+.4f} (95% CI {low:+.4f}..{high:+.4f}), p={cmp.p_value:.2g}"
        print(
            f"  {arm:24s} {spread(accs):>22s} {spread(losses):>18s} {wall:8.1f} "
            f"{'-' if passes != passes else f'{passes:.0f}':>7s}   {versus}"
        )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--builtin-worker":
        return builtin_worker(*sys.argv[2:4])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="?", default="lenet5,resnet18")
    parser.add_argument("seeds", nargs="?", default="1,2,3")
    parser.add_argument(
        "--out", help="keep the runs and the MLflow stores here (default: a temp dir)"
    )
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.out or tmp).resolve()
        results = {
            model: [run_seed(model, seed, root) for seed in seeds]
            for model in args.models.split(",")
        }
    print(
        "The seed: ResNet-50/ImageNet, stage 1 70 epochs 66.05%; + 2 dim-reduce epochs 74.31%; "
        "plain to 80 epochs 70.18%"
    )
    for model, per_seed in results.items():
        report(model, per_seed)


if __name__ == "__main__":
    main()
