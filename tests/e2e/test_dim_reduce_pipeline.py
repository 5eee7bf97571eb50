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


def sweep(tmp_path, *overrides):
    """`python train.py -m SMALL ... OVERRIDES` with one baseline; the runs by stage."""
    proc = multirun(tmp_path, *SMALL, *overrides, "boost.baselines=[baseline]")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return runs_by_stage(tmp_path)[1]


def sporeflow_compare(tmp_path, *args):
    return sporeflow_cli(tmp_path, "compare", *args)


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
    for key in ("test/stage1/acc", "test/stage2/acc", "test/baseline/acc", "test/gain"):
        values = [p.data.metrics[key] for p in parents]
        assert f"{statistics.fmean(values):.4f}+-{statistics.stdev(values):.4f}" in row, key
    assert row.split()[0] == "2" and "seed=" not in row
    assert (tmp_path / "seeds.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plain = sporeflow_compare(tmp_path)
    for parent in parents:
        line = next(ln for ln in plain.stdout.splitlines() if ln.startswith(parent.info.run_id))
        m = parent.data.metrics
        assert f"{m['test/gain_ci_low']:+.4f}..{m['test/gain_ci_high']:+.4f}" in line


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
