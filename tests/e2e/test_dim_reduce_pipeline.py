"""`python train.py boost=dim_reduce` end to end: stages, MLflow parent/child runs, stage-1 reuse."""

from __future__ import annotations

import shutil

import pytest

from helpers.store import by_stage, client_of, runs_of
from helpers.train import multirun, run_train, sporeflow_cli

pytestmark = pytest.mark.e2e

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
        assert 0.1 < parent.data.metrics[f"{stage}/acc"] <= 1.0
        assert f"{stage}/loss" in parent.data.metrics
    best_baseline = max(
        parent.data.metrics[f"{b}/acc"] for b in ("baseline", "annealed", "snapshot_mean")
    )
    assert parent.data.metrics["gain"] == pytest.approx(
        parent.data.metrics["stage2/acc"] - best_baseline
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

    table = sporeflow_compare(tmp_path)
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if line.startswith(parent.info.run_id))
    assert (
        f"{parent.data.metrics['stage2/acc']:.4f}" in row
        and f"{parent.data.metrics['gain']:+.4f}" in row
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
    assert {len(r) for r in right.values()} == {360}
    for stage, r in right.items():
        assert r.mean() == pytest.approx(parent.data.metrics[f"{stage}/acc"], abs=1e-6), stage
    best = max(
        ("baseline", "annealed", "snapshot_mean"), key=lambda b: parent.data.metrics[f"{b}/acc"]
    )
    b, c = int((right["stage2"] & ~right[best]).sum()), int((~right["stage2"] & right[best]).sum())
    m = parent.data.metrics
    assert m["gain_images"] == b - c and m["gain"] == pytest.approx((b - c) / 360, abs=1e-6)
    assert m["gain_p_value"] == pytest.approx(binomtest(min(b, c), b + c).pvalue if b + c else 1.0)
    assert m["gain_ci_low"] <= m["gain"] <= m["gain_ci_high"]
    (line,) = [
        ln for ln in proc.stderr.splitlines() if f"stage2 vs {best}: {b - c:+d} images" in ln
    ]
    verdict = "not significant at 5%" if m["gain_p_value"] >= 0.05 else "significant at 5%"
    assert verdict in line and ("not significant" in line) == (m["gain_p_value"] >= 0.05), line
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


def sweep(tmp_path, *overrides):
    """`python train.py -m SMALL ... OVERRIDES` with one baseline; the runs by stage."""
    proc = multirun(tmp_path, *SMALL, *overrides, "boost.baselines=[baseline]")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return runs_by_stage(tmp_path)[1]


def sporeflow_compare(tmp_path, *args):
    return sporeflow_cli(tmp_path, "compare", *args)


def test_sweep_trains_stage1_once_and_reuse_can_be_refused(rho_sweep, tmp_path):
    cwd, _ = rho_sweep
    found = runs_by_stage(cwd)[1]
    assert len(found["pipeline"]) == 2 and len(found["stage2"]) == 2
    assert len(found["stage1"]) == 1, "the sweep should train stage 1 once"
    reused = [p for p in found["pipeline"] if "stage1_reused_from" in p.data.tags]
    assert (
        len(reused) == 1
        and reused[0].data.tags["stage1_reused_from"] == found["stage1"][0].info.run_id
    )
    assert sorted(r.data.params["boost.rho"] for r in found["stage2"]) == ["0.4", "0.7"]

    launch = tmp_path / "launch"  # the shared sweep's store stays as the other tests read it
    shutil.copytree(cwd, launch)
    proc = run_train(SMALL + ["boost.reuse_stage1=false", "boost.baselines=[]"], launch)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(runs_by_stage(launch)[1]["stage1"]) == 2


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


@pytest.mark.slow
def test_compare_aggregates_a_seed_sweep(tmp_path):
    """`-m seed=1,2` then `sporeflow compare --seeds`: one row, mean +- sd per arm over the seeds."""
    import statistics

    # a single seed-1 run first, with the same overrides as the sweep: never pooled with it
    single = run_train([*SMALL, "boost.baselines=[baseline]"], tmp_path)
    assert single.returncode == 0, single.stderr[-3000:]
    by_stage = sweep(tmp_path, "seed=1,2")
    parents = [p for p in by_stage["pipeline"] if "sweep.run_id" in p.data.tags]
    assert len(parents) == 2 and len(by_stage["stage1"]) == 2  # seed 1's stage 1 is reused
    table = sporeflow_compare(tmp_path, "--seeds", "--plot", str(tmp_path / "seeds.png"))
    assert table.returncode == 0, table.stderr
    rows = [line for line in table.stdout.splitlines()[1:] if line.strip()]
    assert sorted(r.split()[0] for r in rows) == ["1", "2"], rows
    (row,) = [r for r in rows if r.split()[0] == "2"]
    for key in ("stage1/acc", "stage2/acc", "baseline/acc", "gain"):
        values = [p.data.metrics[key] for p in parents]
        assert f"{statistics.fmean(values):.4f}+-{statistics.stdev(values):.4f}" in row, key
    assert row.split()[0] == "2" and "seed=" not in row
    assert (tmp_path / "seeds.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plain = sporeflow_compare(tmp_path)
    for parent in parents:
        line = next(ln for ln in plain.stdout.splitlines() if ln.startswith(parent.info.run_id))
        m = parent.data.metrics
        assert f"{m['gain_ci_low']:+.4f}..{m['gain_ci_high']:+.4f}" in line


@pytest.mark.slow
def test_two_jobs_started_together_take_turns_on_one_stage1(tmp_path):
    """Two pipelines of one fingerprint started at once in one launch dir: the lock makes one
    train stage 1 and the baseline while the other waits, then reuses both."""
    import subprocess

    from helpers.train import train_command

    procs = []
    for rho in ("0.4", "0.7"):
        cmd, env = train_command(
            [*SMALL, "boost.baselines=[baseline]", f"boost.rho={rho}"],
            tmp_path,
            run_dir=None,
            env={"MLFLOW_TRACKING_URI": ""},
        )
        procs.append(
            subprocess.Popen(cmd, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
        )
    for proc in procs:
        _, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-3000:]
    found = runs_by_stage(tmp_path)[1]
    assert len(found["stage1"]) == 1 and len(found["baseline"]) == 1, "trained once, not twice"
    assert len(found["pipeline"]) == 2 and all(
        p.info.status == "FINISHED" for p in found["pipeline"]
    )
    reused = [p for p in found["pipeline"] if "stage1_reused_from" in p.data.tags]
    assert (
        len(reused) == 1
        and reused[0].data.tags["stage1_reused_from"] == found["stage1"][0].info.run_id
    )
    # the baseline is trained by whichever job gets to it first (not necessarily stage 1's)
    (took,) = [p for p in found["pipeline"] if "baseline_reused_from" in p.data.tags]
    assert took.data.tags["baseline_reused_from"] == found["baseline"][0].info.run_id
    assert sorted(r.data.params["boost.rho"] for r in found["stage2"]) == ["0.4", "0.7"]
