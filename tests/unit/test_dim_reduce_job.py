"""`python train.py boost=dim_reduce` through train.py's entry in this process: stages, MLflow
parent/child runs, refusals. Sweeps and concurrent jobs: tests/e2e/test_dim_reduce_pipeline.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.inprocess import run_train_here as run_train
from helpers.inprocess import sporeflow_here
from helpers.store import by_stage, client_of, runs_of

SMALL = ["debug=dim_reduce"]  # conf/debug/dim_reduce.yaml: 3 epochs x 4 snapshots, 8 components


def runs_by_stage(launch_dir):
    return client_of(launch_dir), by_stage(runs_of(launch_dir))


def test_pipeline_records_every_stage_and_the_comparison(tmp_path):
    proc = run_train(SMALL, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for stage in ("stage1", "stage2", "baseline", "annealed", "snapshot_mean", "gain"):
        assert stage in proc.stderr

    client, by_stage = runs_by_stage(tmp_path)
    (parent,) = by_stage["pipeline"]
    for stage in ("stage1", "stage2", "baseline", "annealed", "snapshot_mean"):
        (child,) = by_stage[stage]
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.info.status == "FINISHED"
        assert 0.1 < parent.data.metrics[f"val/{stage}/acc"] <= 1.0
        assert f"val/{stage}/loss" in parent.data.metrics
    best_baseline = max(
        parent.data.metrics[f"val/{b}/acc"] for b in ("baseline", "annealed", "snapshot_mean")
    )
    assert parent.data.metrics["val/gain"] == pytest.approx(
        parent.data.metrics["val/stage2/acc"] - best_baseline
    )
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"comparison.png", "comparison.txt"} <= artifacts
    (stage1,) = by_stage["stage1"]  # the basis belongs to stage 1: stored once, on its run
    assert parent.data.tags["pca_basis_run"] == stage1.info.run_id
    assert [a.path for a in client.list_artifacts(stage1.info.run_id, "pca")]
    (stage2,) = by_stage["stage2"]
    assert stage2.data.tags["n_snapshots"] == str(3 * 4)
    assert stage2.data.params["boost.n_component"] == "8"
    assert stage2.data.tags["start_from"] == "final"
    assert (
        0
        < parent.data.metrics["pca_seconds"]
        < (stage2.info.start_time - stage1.info.end_time) / 1000
    )

    table = sporeflow_here(tmp_path, "compare")
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if line.startswith(parent.info.run_id))
    assert (
        f"{parent.data.metrics['test/stage2/acc']:.4f}" in row  # compare shows what reports
        and f"{parent.data.metrics['test/gain']:+.4f}" in row
    )

    run_dir = tmp_path / "run"
    assert len(list((run_dir / "stage1" / "snapshots").glob("snapshot_*.npy"))) == 12
    assert (run_dir / "stage2" / "checkpoints" / "final.ckpt").is_file()

    # paired statistics: per-image results agree with each stage's own Model.eval accuracy, and
    # the parent's gain statistics are recomputed here from those files, with scipy's test
    import numpy as np
    from scipy.stats import binomtest

    right = {
        stage: np.load(run_dir / stage / "predictions.npy")
        for stage in ("stage1", "stage2", "baseline", "annealed", "snapshot_mean")
    }
    n = len(right["stage2"])  # the validation images (what decides), the same for every stage
    assert {len(r) for r in right.values()} == {n} and n == 144  # digits' 1437 less 10% held out
    tested = {s: np.load(run_dir / s / "test_predictions.npy") for s in right}
    assert {len(r) for r in tested.values()} == {360}  # the test images: reported
    for stage, r in tested.items():
        assert r.mean() == pytest.approx(parent.data.metrics[f"test/{stage}/acc"], abs=1e-6)
    for stage, r in right.items():
        assert r.mean() == pytest.approx(parent.data.metrics[f"val/{stage}/acc"], abs=1e-6), stage
    best = max(
        ("baseline", "annealed", "snapshot_mean"), key=lambda b: parent.data.metrics[f"val/{b}/acc"]
    )
    b, c = int((right["stage2"] & ~right[best]).sum()), int((~right["stage2"] & right[best]).sum())
    m = parent.data.metrics
    assert m["val/gain_images"] == b - c and m["val/gain"] == pytest.approx((b - c) / n, abs=1e-6)
    assert m["val/gain_p_value"] == pytest.approx(
        binomtest(min(b, c), b + c).pvalue if b + c else 1.0
    )
    assert m["val/gain_ci_low"] <= m["val/gain"] <= m["val/gain_ci_high"]
    on_val = proc.stderr.split("paired on the validation images:", 1)[1].split("\n\n")[0]
    line = next(ln for ln in on_val.splitlines() if f"stage2 vs {best}: " in ln)
    assert f"stage2 vs {best}: {b - c:+d} images" in line, line
    # issue 76 item 1: the interval on MLflow is Newcombe's paired one (the paper's formula,
    # helpers.intervals), and the console and comparison.txt show those numbers
    from helpers.intervals import newcombe_method10

    both = int((right["stage2"] & right[best]).sum())
    low, high = newcombe_method10(both, b, c, n - both - b - c)
    assert (m["val/gain_ci_low"], m["val/gain_ci_high"]) == pytest.approx((low, high), abs=1e-9)
    assert -1.0 <= low < high <= 1.0
    shown = f"95% CI {m['val/gain_ci_low']:+.4f}..{m['val/gain_ci_high']:+.4f}"
    assert shown in line, line
    kept = Path(client.download_artifacts(parent.info.run_id, "comparison.txt", str(tmp_path)))
    assert line in kept.read_text()
    verdict = "not significant at 5%" if m["val/gain_p_value"] >= 0.05 else "significant at 5%"
    assert verdict in line and ("not significant" in line) == (m["val/gain_p_value"] >= 0.05), line
    # the annealed baseline really used the annealed learning rate
    (annealed,) = by_stage["annealed"]
    assert float(annealed.data.params["optimizer.lr"]) == pytest.approx(0.1 * 0.02)


def test_stage2_can_start_from_the_snapshot_mean(tmp_path):
    """boost.start_from=mean: stage 2's first weights are the mean of stage 1's snapshots (numpy's)."""
    import mindspore as ms
    import numpy as np

    proc = run_train(SMALL + ["boost.start_from=mean", "boost.baselines=[]"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / "run"
    layout = __import__("json").loads(
        (run_dir / "stage1" / "snapshots" / "layout.json").read_text()
    )
    flat = np.mean(
        [
            np.load(p).astype(np.float64)
            for p in (run_dir / "stage1" / "snapshots").glob("snapshot_*.npy")
        ],
        axis=0,
    )
    start = ms.load_checkpoint(str(run_dir / "stage2" / "start_mean_rank_0.ckpt"))
    offset = 0
    for name, shape in zip(layout["names"], layout["shapes"], strict=False):
        size = int(np.prod(shape))
        np.testing.assert_allclose(
            start[name].asnumpy(), flat[offset : offset + size].reshape(shape), atol=1e-6
        )
        offset += size
    final = ms.load_checkpoint(str(run_dir / "stage1" / "checkpoints" / "final.ckpt"))
    assert any(not np.allclose(start[n].asnumpy(), final[n].asnumpy()) for n in layout["names"])
    (stage2,) = runs_by_stage(tmp_path)[1]["stage2"]
    assert (
        stage2.data.tags["start_from"] == "mean"
        and stage2.data.params["boost.start_from"] == "mean"
    )


@pytest.mark.parametrize(
    "override,expected",
    [
        (["boost.n_component=32"], ["12 snapshots", "n_component=32"]),
        (
            ["boost.n_components=8"],
            ["boost.n_components: no such key", "allowed under boost", "n_component"],
        ),
        (["boost.baselines=[plain]"], ["plain", "baseline, annealed, snapshot_mean"]),
        (["boost.start_from=centre"], ["boost.start_from", "final, mean"]),
    ],
)
def test_bad_dim_reduce_config_exits_2_before_training(tmp_path, override, expected):
    proc = run_train(SMALL + override, tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    for text in expected:
        assert text in proc.stderr
    assert not (tmp_path / "run" / "stage1").exists()


def test_unknown_stage1_run_is_a_clear_error(tmp_path):
    proc = run_train(SMALL + ["boost.stage1_run=0123456789abcdef"], tmp_path)
    assert proc.returncode == 1
    assert "boost.stage1_run=0123456789abcdef: no such MLflow run" in proc.stderr
