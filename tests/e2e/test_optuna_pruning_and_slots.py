"""The Optuna sweeper's pruner and its slots (issue 23): a real sweep of sporeflow's train.py,
a real Optuna study in sqlite, real MLflow runs.

Pruning: three trials on a grid (the order is known), the third with a learning rate that
cannot learn; the median pruner (2 start-up trials) must stop it after its first epoch and
must not stop the two that learn. Slots: with joblib and n_jobs=2 a short trial starts as soon
as a slot frees, while a long one still runs."""

from __future__ import annotations

import csv
import signal
import statistics
import time
from pathlib import Path

import optuna
import psutil
import pytest

from helpers.store import by_stage, client_of, runs_of
from helpers.train import multirun, start_multirun

pytestmark = pytest.mark.e2e

OPTUNA = ["hydra/sweeper=sporeflow_optuna", "hydra.sweeper.sampler=grid"]
LEARNS_NOT = "1e-09"
PRUNING = [
    *OPTUNA,
    "hydra.sweeper.pruner=median",
    "hydra.sweeper.n_startup_trials=2",
    f"optimizer.lr=0.05,0.03,{LEARNS_NOT}",
    "epochs=3",
]


def study_of(launch_dir: Path, name: str = "sporeflow") -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{launch_dir / 'optuna.db'}")


def trials_csv(launch_dir: Path) -> list[dict]:
    with open(launch_dir / "multirun" / "optuna_trials.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def pruned_sweep(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("pruning")
    proc = multirun(cwd, *PRUNING)
    return cwd, proc


def test_a_trial_behind_the_others_is_pruned_after_its_first_epoch(pruned_sweep):
    cwd, proc = pruned_sweep
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = study_of(cwd).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE", "PRUNED"]
    assert [t.params["optimizer.lr"] for t in trials] == [0.05, 0.03, 1e-09]
    learners, hopeless = trials[:2], trials[2]
    assert [sorted(t.intermediate_values) for t in learners] == [[1, 2, 3], [1, 2, 3]]
    assert sorted(hopeless.intermediate_values) == [1], "stopped after epoch 1"
    # the median pruner's rule, from the recorded values: behind the others' median at epoch 1
    others = statistics.median(t.intermediate_values[1] for t in learners)
    assert hopeless.intermediate_values[1] < others
    assert "job 2: trial 2 pruned by the median pruner after epoch 1 of 3" in proc.stderr
    assert [r["state"] for r in trials_csv(cwd)] == ["COMPLETE", "COMPLETE", "PRUNED"]


def test_what_a_trial_is_told_is_what_its_run_recorded(pruned_sweep):
    """Each epoch's reported value is that epoch's val/acc in MLflow; a complete trial's
    value is its run's final/val/acc."""
    cwd, _ = pruned_sweep
    client = client_of(cwd)
    runs = {int(r.data.tags["sweep.job"]): r for r in by_stage(runs_of(cwd))["train"]}
    for trial in study_of(cwd).get_trials():
        history = client.get_metric_history(runs[trial.number].info.run_id, "val/acc")
        by_epoch = {i + 1: m.value for i, m in enumerate(sorted(history, key=lambda m: m.step))}
        assert trial.intermediate_values == pytest.approx(
            {e: by_epoch[e] for e in trial.intermediate_values}
        )
        if trial.state.name == "COMPLETE":
            assert trial.value == pytest.approx(runs[trial.number].data.metrics["final/val/acc"])


def test_a_pruned_job_ends_killed_with_the_reason_and_its_epoch_saved(pruned_sweep):
    cwd, _ = pruned_sweep
    stages = by_stage(runs_of(cwd))
    runs = {int(r.data.tags["sweep.job"]): r for r in stages["train"]}
    assert [runs[j].info.status for j in range(3)] == ["FINISHED", "FINISHED", "KILLED"]
    assert "pruned by the median pruner after epoch 1" in runs[2].data.tags["sporeflow.pruned"]
    assert "sporeflow.failure" not in runs[2].data.tags
    ckpts = sorted(p.name for p in (cwd / "multirun" / "2" / "checkpoints").glob("epoch_*.ckpt"))
    assert ckpts == ["epoch_0001.ckpt"], "the epoch it was pruned after is saved, none later"
    (parent,) = stages["sweep"]
    assert parent.info.status == "FINISHED", "a pruned trial is not a failed job"
    metrics = parent.data.metrics
    assert (metrics["jobs_finished"], metrics["jobs_pruned"], metrics["jobs_failed"]) == (2, 1, 0)
    table = (cwd / "multirun" / "comparison.txt").read_text().splitlines()
    assert any(line.split()[:2] == ["2", "PRUNED"] for line in table), table


@pytest.mark.parametrize(
    "override, named",
    [
        ("hydra.sweeper.pruner=percentile", "hydra.sweeper.pruner='percentile': allowed are"),
        ("hydra.sweeper.pruner_min_epochs=0", "hydra.sweeper.pruner_min_epochs=0: must be >= 1"),
        ("hydra.sweeper.storage=null", "hydra.sweeper.pruner=median needs a hydra.sweeper.storage"),
    ],
)
def test_bad_pruner_settings_exit_2_before_any_job(tmp_path, override, named):
    proc = multirun(tmp_path, *PRUNING, override)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert named in proc.stderr
    assert not (tmp_path / "multirun" / "0").exists()
    assert runs_of(tmp_path) == [], "no sweep parent run either"


SLOTS = [
    *OPTUNA,
    "hydra/launcher=joblib",
    "hydra.launcher.n_jobs=2",
    "hydra.sweeper.n_jobs=2",
]


def test_a_slot_starts_the_next_trial_while_a_long_one_still_runs(tmp_path):
    """Job 0 trains 30 epochs, jobs 1-3 one each: jobs 2 and 3 run in the slot job 1 frees
    while job 0 is still training (in batches, job 2 would wait for job 0)."""
    proc = multirun(tmp_path, *SLOTS, "epochs=30,1,1,1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = {int(r.data.tags["sweep.job"]): r for r in by_stage(runs_of(tmp_path))["train"]}
    assert sorted(runs) == [0, 1, 2, 3]
    assert all(r.info.status == "FINISHED" for r in runs.values())
    assert runs[2].info.start_time < runs[0].info.end_time
    assert runs[3].info.start_time < runs[0].info.end_time
    states = {t.number: t.state.name for t in study_of(tmp_path).get_trials()}
    assert states == {0: "COMPLETE", 1: "COMPLETE", 2: "COMPLETE", 3: "COMPLETE"}
    assert [int(r["job"]) for r in trials_csv(tmp_path)] == [0, 1, 2, 3]


def test_batched_true_waits_for_the_whole_batch(tmp_path):
    proc = multirun(tmp_path, *SLOTS, "hydra.sweeper.batched=true", "epochs=3,1,1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = {int(r.data.tags["sweep.job"]): r for r in by_stage(runs_of(tmp_path))["train"]}
    assert runs[2].info.start_time > runs[0].info.end_time


def test_ctrl_c_stops_every_slot_and_gives_the_trials_back(tmp_path):
    proc = start_multirun(tmp_path, *SLOTS, "epochs=300,301,302")
    firsts = [tmp_path / "multirun" / str(j) / "checkpoints" / "epoch_0001.ckpt" for j in (0, 1)]
    deadline = time.monotonic() + 240
    while not all(f.exists() for f in firsts) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        time.sleep(0.5)
    workers = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    _, alive = psutil.wait_procs(workers, timeout=30)
    assert not alive, f"outlived the sweep: {[p.cmdline() for p in alive]}"
    stages = by_stage(runs_of(tmp_path))
    (parent,) = stages["sweep"]
    assert parent.info.status == "KILLED"
    trials = study_of(tmp_path).get_trials()
    given_back = [t for t in trials if t.state.name == "FAIL"]
    assert sorted(t.params["epochs"] for t in given_back) == [300, 301]
    queued = [t.user_attrs.get("sporeflow.retry_of") for t in trials if t.state.name == "WAITING"]
    assert sorted(q for q in queued if q is not None) == [0, 1], "their parameters run again"
    assert not (tmp_path / "multirun" / "2").exists(), "no trial starts after Ctrl-C"
