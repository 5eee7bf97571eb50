"""The sweep's Hydra callback in this process: real tiny jobs run between its on_job_start
and on_job_end the way Hydra's basic launcher runs them, against a real sqlite store; the
parent run, the job-outcome files, the summary and the best job are read back."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from statsmodels.stats.contingency_tables import mcnemar

from helpers.inprocess import TINY
from helpers.store import client_of, runs_of
from helpers.sweeps import run_sweep
from sporeflow.core.context import SWEEP_RUN_ENV, SweepJob
from sporeflow.entry.sweep_jobs import JOB_FILE
from sporeflow.tracking.journal import is_key

LRS = ("0.05", "0.2")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    launch = tmp_path_factory.mktemp("sweep")
    jobs = [[f"optimizer.lr={lr}", "epochs=1"] for lr in LRS]
    callback = run_sweep(launch, jobs, [f"optimizer.lr={','.join(LRS)}", "epochs=1"])
    return launch, callback


def test_the_sweep_is_one_parent_with_a_child_per_job(sweep):
    launch, callback = sweep
    runs = {r.info.run_id: r for r in runs_of(launch)}
    parent = runs[callback.run_id]
    assert parent.info.status == "FINISHED" and parent.data.tags["stage"] == "sweep"
    assert parent.data.tags["sweep.keys"] == "optimizer.lr"
    children = [
        r for r in runs.values() if r.data.tags.get("mlflow.parentRunId") == callback.run_id
    ]
    assert sorted(r.data.tags["sweep.job"] for r in children) == ["0", "1"]
    assert sorted(r.data.params["optimizer.lr"] for r in children) == sorted(LRS)
    assert parent.data.metrics["jobs_finished"] == 2 and parent.data.metrics["jobs_failed"] == 0


def test_the_first_job_starts_before_the_writer_has_made_the_parent(sweep):
    """The sweep's start does not wait for its writer to create the parent run: the first job
    is handed the parent's journal key, and the writer puts the run's MLflow id in its tags."""
    launch, callback = sweep
    assert is_key(callback.handed[0]) and not is_key(callback.run_id)
    children = [r for r in runs_of(launch) if r.data.tags.get("sweep.job") == "0"]
    (child,) = [r for r in children if r.data.tags.get("stage") != "sweep"]
    assert child.data.tags["mlflow.parentRunId"] == callback.run_id
    assert child.data.tags["sweep.run_id"] == callback.run_id


def test_each_job_leaves_its_outcome_with_the_value_its_run_recorded(sweep):
    launch, callback = sweep
    finals = {
        r.data.tags["sweep.job"]: r.data.metrics["final/val/acc"]
        for r in runs_of(launch)
        if r.data.tags.get("sweep.run_id") == callback.run_id
    }
    for job in ("0", "1"):
        outcome = json.loads((launch / "multirun" / job / JOB_FILE).read_text())
        assert outcome["status"] == "COMPLETED"
        assert outcome["value"] == pytest.approx(finals[job])
        assert outcome["overrides"] == [f"optimizer.lr={LRS[int(job)]}", "epochs=1"]


def predictions_of(launch, run) -> np.ndarray:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        return np.load(
            client_of(launch).download_artifacts(run.info.run_id, "predictions.npy", tmp)
        )


def test_the_summary_ranks_the_jobs_and_decides_on_their_per_image_outcomes(sweep):
    """The leading job is a winner only when the exact McNemar test (statsmodels, on the jobs'
    own prediction artifacts) says the other is worse; the parent, the job's run and the
    registered version all carry the decision. A tie of two points at the same cost (the same
    epochs) has no leader (report.decision.lead): nothing is tagged best or registered."""
    launch, callback = sweep
    runs = {r.info.run_id: r for r in runs_of(launch)}
    parent = runs[callback.run_id]
    jobs = [r for r in runs.values() if r.data.tags.get("sweep.run_id") == callback.run_id]
    first, other = sorted(jobs, key=lambda r: -r.data.metrics["final/val/acc"])
    a, b = predictions_of(launch, first), predictions_of(launch, other)
    assert a.mean() == pytest.approx(first.data.metrics["final/val/acc"])
    table = [[int((a & b).sum()), int((a & ~b).sum())], [int((~a & b).sum()), int((~a & ~b).sum())]]
    shown_worse = mcnemar(table, exact=True).pvalue < 0.05 and a.sum() > b.sum()
    decision = "winner" if shown_worse else "tie"
    assert parent.data.tags["sporeflow.decision"] == decision
    for name in ("comparison.txt", "comparison.md", "comparison.csv"):
        assert (launch / "multirun" / name).is_file()
    csv_lines = (launch / "multirun" / "comparison.csv").read_text().splitlines()
    assert len(csv_lines) == 3
    versions = [
        v
        for r in jobs
        for v in client_of(launch).search_model_versions(f"run_id = '{r.info.run_id}'")
    ]
    if not shown_worse:  # the same epochs, the same cost: no leader
        assert parent.data.tags["sporeflow.tied_with"] in {
            f"optimizer.lr={r.data.params['optimizer.lr']}" for r in jobs
        }
        assert parent.data.tags["sporeflow.leader"] == "none"
        assert "sweep.best_run_id" not in parent.data.tags and versions == []
        return
    best = runs[parent.data.tags["sweep.best_run_id"]]
    assert best.info.run_id == first.info.run_id
    assert csv_lines[1].startswith(best.data.tags["sweep.job"] + ",")
    assert best.data.tags["sporeflow.decision"] == decision
    assert best.data.tags["sporeflow.best_in_sweep"] == "true"
    assert parent.data.metrics["best/final/val/acc"] == best.data.metrics["final/val/acc"]
    assert len(versions) == 1 and versions[0].tags["objective"] == "final/val/acc"
    assert versions[0].tags["sporeflow.decision"] == decision


def test_a_sweep_started_again_copies_the_jobs_it_finished_and_trains_the_rest(sweep, capsys):
    """sweep.skip_finished (default): a second sweep in the same store with lr 0.05 (the first
    sweep's job 0) and 0.1 (new) copies job 0 - no training, its run names the original and
    carries its metrics and per-image predictions - and trains job 1."""
    launch, first = sweep
    jobs = [[f"optimizer.lr={lr}", "epochs=1"] for lr in ("0.05", "0.1")]
    second = run_sweep(launch, jobs, ["optimizer.lr=0.05,0.1", "epochs=1"], sweep_dir="again")
    err = capsys.readouterr().err
    runs = runs_of(launch)
    before = {
        r.data.params["optimizer.lr"]: r
        for r in runs
        if r.data.tags.get("sweep.run_id") == first.run_id
    }
    now = {
        r.data.params["optimizer.lr"]: r
        for r in runs
        if r.data.tags.get("sweep.run_id") == second.run_id
    }
    copy, original = now["0.05"], before["0.05"]
    assert copy.data.tags["sporeflow.copied_from"] == original.info.run_id
    assert copy.data.tags["sporeflow.job_key"] == original.data.tags["sporeflow.job_key"]
    assert copy.info.status == "FINISHED"
    assert copy.data.metrics["final/val/acc"] == original.data.metrics["final/val/acc"]
    np.testing.assert_array_equal(predictions_of(launch, copy), predictions_of(launch, original))
    assert not list((launch / "again" / "0").rglob("*.ckpt")), "job 0 trained nothing"
    assert f"finished before as MLflow run {original.info.run_id}" in err
    trained = now["0.1"]
    assert "sporeflow.copied_from" not in trained.data.tags
    assert trained.data.tags["sporeflow.job_key"] != original.data.tags["sporeflow.job_key"]
    assert list((launch / "again" / "1").rglob("*.ckpt")), "job 1 trained"


def test_a_failed_job_fails_the_sweep_and_is_named_on_its_parent(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    too_few = ["dataset.num_samples=16", "+dataset.drop_remainder=true"]  # no whole batch of 32
    jobs = [["epochs=1"], ["epochs=1", *too_few]]
    # the sweep's check refuses a point it can see fail before work (dataset.num_samples=16:
    # entry.sweep_check); here job 1 fails as a job does on what only its run finds
    callback = run_sweep(tmp_path, jobs, ["epochs=1", "dataset.num_samples=128,129"])
    parent = next(r for r in runs_of(tmp_path) if r.info.run_id == callback.run_id)
    assert parent.info.status == "FAILED"
    assert parent.data.tags["sporeflow.failure"].startswith("job 1: DataError: the training split")
    outcome = json.loads((tmp_path / "multirun" / "1" / JOB_FILE).read_text())
    assert outcome["status"] == "FAILED" and "yields no batch of 32" in outcome["error"]
    assert "Traceback" in outcome["traceback"]


def test_a_seeded_sweep_decides_between_points_over_their_seeds(tmp_path, monkeypatch, capsys):
    """`optimizer.lr=a,b seed=1,2`: two points of two jobs each. The decision pools each
    point's seeds, pairing images within a seed; recomputed here from the jobs' artifacts with
    statsmodels on the concatenated outcomes (the pooled discordant counts are the same)."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    grid = [(lr, seed) for lr in LRS for seed in (1, 2)]
    # the registry version is printed once the writer has it: on a loaded machine (three test
    # workers on two cores) that took longer than the default 30 s drain
    patient = ["epochs=1", "tracking.drain_timeout=300"]
    jobs = [[f"optimizer.lr={lr}", f"seed={seed}", *patient] for lr, seed in grid]
    callback = run_sweep(tmp_path, jobs, [f"optimizer.lr={','.join(LRS)}", "seed=1,2", *patient])
    err = capsys.readouterr().err
    runs = runs_of(tmp_path)
    parent = next(r for r in runs if r.info.run_id == callback.run_id)
    by_point: dict[str, list] = {lr: [] for lr in LRS}
    for run in sorted(
        (r for r in runs if r.data.tags.get("sweep.run_id") == callback.run_id),
        key=lambda r: r.data.params["seed"],
    ):
        by_point[run.data.params["optimizer.lr"]].append(predictions_of(tmp_path, run))
    pooled = {lr: np.concatenate(arrays) for lr, arrays in by_point.items()}
    best_lr = max(LRS, key=lambda lr: (pooled[lr].mean(), -LRS.index(lr)))
    other_lr = next(lr for lr in LRS if lr != best_lr)
    a, b = pooled[best_lr], pooled[other_lr]
    table = [[int((a & b).sum()), int((a & ~b).sum())], [int((~a & b).sum()), int((~a & ~b).sum())]]
    winner = mcnemar(table, exact=True).pvalue < 0.05 and a.sum() > b.sum()
    assert parent.data.tags["sporeflow.decision"] == ("winner" if winner else "tie")
    line = next(ln for ln in err.splitlines() if ln.startswith(("winner: ", "tie: ")))
    assert line.split(" (")[0].split(": ", 1)[1] == f"optimizer.lr={best_lr}", line
    assert f"(Holm, 2 seeds, {a.size // 2} validation images each)" in line
    if not winner:
        assert parent.data.tags["sporeflow.tied_with"] == f"optimizer.lr={other_lr}"
    points = (tmp_path / "multirun" / "points.txt").read_text().splitlines()  # one row a point
    assert points[0].split()[:3] == ["point", "seeds", "jobs"]
    assert [ln.split()[:2] for ln in points[1:]] == [
        [f"optimizer.lr={best_lr}", "1,2"],
        [f"optimizer.lr={other_lr}", "1,2"],
    ]
    assert points[2].split()[-1] == ("worse" if winner else "tie")
    # issue 51 item 6: the lead is the point, its seeds pooled, then its best job; issue 76
    # item 2: a tie at the same cost (the same epochs) has no leader and registers nothing
    (lead,) = [ln for ln in err.splitlines() if ln.startswith("leader: ")]
    versions = client_of(tmp_path).search_model_versions()
    if not winner:
        assert lead.startswith("leader: none (") and versions == []
        return
    assert lead.startswith(f"leader: optimizer.lr={best_lr} (better than every other point")
    pooled_acc = f"{pooled[best_lr].mean():.4f}"
    assert f"  its 2 seeds pooled, final/val/acc {pooled_acc}; its job: job" in err
    (version,) = versions
    assert f"its model: models:/{version.name}/{version.version}, tagged winner" in err


@pytest.mark.parametrize("copies", [True, False])
def test_whether_a_job_may_be_copied_reaches_the_job_through_its_environment(copies):
    """A grid's or a race's job may be copied, an Optuna trial's not (the callback decides from
    the sweeper; the job, maybe an msrun worker or a SLURM task, reads it from its environment)."""
    job = SweepJob("run", ("optimizer.lr",), 3, copies=copies)
    assert SweepJob.from_environ(job.environ()) == job
    assert SweepJob.from_environ({SWEEP_RUN_ENV: "run"}).copies, "an older sweep's job: copies"


def test_a_sweep_on_the_gain_at_equal_cost_decides_on_stage2_against_each_points_budget_arm(
    tmp_path, monkeypatch, capsys
):
    """`sweep.objective=gain_at_cost` over two stage-2 settings: each job's budget arm is its
    own (stage 2's cost differs), so the points are compared per image on stage 2 right minus
    that job's budget arm right, from the pipelines' own prediction artifacts."""
    from sporeflow.report.decision import sign_flip_p

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    fixed = ["debug=dim_reduce", "sweep.objective=gain_at_cost"]
    jobs = [[f"boost.rho={rho}", *fixed] for rho in ("0.4", "0.7")]
    callback = run_sweep(tmp_path, jobs, ["boost.rho=0.4,0.7", *fixed])
    err = capsys.readouterr().err
    runs = runs_of(tmp_path)
    parent = next(r for r in runs if r.info.run_id == callback.run_id)
    jobs_runs = [
        r
        for r in runs
        if r.data.tags.get("sweep.run_id") == callback.run_id and r.data.tags["stage"] == "pipeline"
    ]
    score = {}
    for run in jobs_runs:
        right = {s: stage_predictions(tmp_path, run, s) for s in ("stage2", "budget")}
        score[run.data.params["boost.rho"]] = right["stage2"].astype(int) - right["budget"]
        assert score[run.data.params["boost.rho"]].mean() == pytest.approx(
            run.data.metrics["val/gain_at_cost"]
        )
    best = max(score, key=lambda rho: (score[rho].mean(), rho == "0.4"))
    other = next(rho for rho in score if rho != best)
    diff = score[best] - score[other]
    winner = sign_flip_p(diff) < 0.05 and diff.sum() > 0
    assert parent.data.tags["sporeflow.decision"] == ("winner" if winner else "tie")
    line = next(ln for ln in err.splitlines() if ln.startswith(("winner: ", "tie: ")))
    assert line.split(" (")[0].split(": ", 1)[1] == f"boost.rho={best}", line
    assert f"(val/gain_at_cost {score[best].mean():.4f})" in line


def stage_predictions(launch, run, stage) -> np.ndarray:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = f"predictions/{stage}/predictions.npy"
        return np.load(client_of(launch).download_artifacts(run.info.run_id, path, tmp)).astype(int)


def test_a_sweep_failed_by_a_trial_without_a_value_names_the_trial_and_what_it_returned(tmp_path):
    """issue 60 item 6: an Optuna sweep whose trial's job returned a non-finite value ended
    `sweep FAILED: 2 jobs finished, 0 failed`. The real Optuna sweeper and train.py's entry
    here; the diverging job trains on (stop_on_divergence=false) and returns its loss, inf."""
    import re

    from helpers.inprocess import train_cli

    args = [
        "-m",
        "hydra/sweeper=sporeflow_optuna",
        *TINY,
        "epochs=1",
        f"hydra.sweep.dir={tmp_path}/multirun",
        "hydra.sweeper.sampler=grid",
        "hydra.sweeper.n_trials=2",
        f"hydra.sweeper.storage=sqlite:///{tmp_path}/optuna.db",
        "optimizer.lr=choice(0.01,1e6)",
        "callbacks.stop_on_divergence=false",
        "sweep.objective=loss",
    ]
    code, err = train_cli(args, tmp_path, run_dir=None)
    assert code == 1, err[-3000:]
    (head,) = [line for line in err.splitlines() if line.startswith("[sporeflow] sweep FAILED")]
    assert "jobs finished, 0 failed" not in head, head
    assert re.match(
        r"\[sporeflow\] sweep FAILED: 1 of 2 trials failed: trial (\d) \(job \1\): the job "
        r"returned (inf|nan), not a finite number \(more than hydra.sweeper.max_failure_rate=0.0 "
        r"allows\); its jobs: 2 ran to their end, 0 raised; MLflow run ",
        head,
    ), head


def gone_journal(run_dir, like, records) -> None:
    """A closed journal in `run_dir` written like journal `like` by a process that is gone,
    holding `records` ((op, fields) pairs)."""
    from sporeflow.tracking.journal import Journal, header_of

    found = header_of(like)
    gone = {**found["owner"], "pid": 2**22 + 7}  # above Linux's largest pid: never alive
    header = {**found, "owner": gone}
    journal = Journal.create(run_dir, {**header, "writer": "own"})
    for op, fields in records:
        journal.append(op, **fields)
    journal.close()


def test_a_sweep_without_every_jobs_records_decides_nothing(tmp_path, monkeypatch, capsys):
    """Issue 75 item 2: records of job 1 the store cannot take (they name a run no journal
    creates, as a job's do while its writer is gone and the store out of reach): no decision,
    no registered version, the parent FAILED naming job 1 in one line, the process exits 1."""
    from sporeflow.entry import sweep_run
    from sporeflow.entry.sweep_run import SweepRun
    from sporeflow.tracking.journal import Op, new_run_key

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    ending = SweepRun.on_multirun_end

    def stuck_then_end(self, config, **kwargs):
        job = self.sweep.sweep_dir / "1"
        like = next((job / "tracking").glob("*.jsonl"))
        gone_journal(job, like, [(Op.tags, {"run": new_run_key(), "tags": {"a": "b"}})])
        ending(self, config, **kwargs)

    monkeypatch.setattr(SweepRun, "on_multirun_end", stuck_then_end)
    err, parent, runs = _impatient_sweep(tmp_path, capsys)
    assert parent.info.status == "FAILED"
    assert (
        "sporeflow.decision" not in parent.data.tags and "jobs_finished" not in parent.data.metrics
    )
    assert client_of(tmp_path).search_model_versions() == []
    (line,) = [ln for ln in err.splitlines() if ln.startswith("[sporeflow] sweep FAILED")]
    assert "does not have every record of job 1 (1 records kept" in line, line
    assert f"sporeflow compare --sweep {tmp_path / 'multirun'}" in line
    assert parent.data.tags["sporeflow.failure"].startswith("the store does not have every record")
    assert not [ln for ln in err.splitlines() if ln.startswith(("winner: ", "tie: "))]
    done = [r for r in runs if r.data.tags.get("sweep.run_id") == parent.info.run_id]
    assert sorted(r.info.status for r in done) == ["FINISHED", "FINISHED"], "the jobs' own records"
    with pytest.raises(SystemExit) as ended:
        sweep_run.end_unfinished(None)
    assert ended.value.code == 1


def test_the_missing_records_line_names_the_jobs_and_the_sweeps_own_run(tmp_path):
    from sporeflow.entry.sweep_run import missing_line
    from sporeflow.tracking.sync import Synced

    left = [
        Synced(tmp_path / "2" / "tracking" / "a.jsonl", left=3),
        Synced(tmp_path / "10" / "stage1" / "tracking" / "b.jsonl", left=4),
        Synced(tmp_path / "tracking" / "c.jsonl", left=1),
    ]
    line = missing_line(tmp_path, left)
    assert line.startswith(
        "the store does not have every record of jobs 2, 10 and the sweep's own run (8 records"
    ), line
    assert missing_line(tmp_path, []) == ""


def test_a_writer_that_stops_getting_on_leaves_the_sweeps_end_every_record(
    tmp_path, monkeypatch, capsys, caplog
):
    """Issue 75 item 2, the flaky `started_again` test's cause: on a loaded machine the niced
    writer made no progress for tracking.drain_timeout s, and the sweep's end read the store
    without job 1's records. Here the writer is stopped (SIGSTOP) from job 1's start until
    5 s into the sweep's end: the end applies job 1's records itself and decides on both."""
    import contextlib
    import signal
    import threading

    from sporeflow.entry import sweep_run
    from sporeflow.entry.sweep_run import SweepRun

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    starting, ending = SweepRun.on_job_start, SweepRun.on_multirun_end
    stopped: list[int] = []

    def stop_the_writer_at_job_1(self, config, **kwargs):
        if int(config.hydra.job.num) == 1:
            stopped.append(sweep_run._WRITERS[self.sweep.sweep_dir]._proc.pid)
            os.kill(stopped[0], signal.SIGSTOP)
        starting(self, config, **kwargs)

    def let_it_go() -> None:
        with contextlib.suppress(ProcessLookupError):  # the end may have ended it already
            os.kill(stopped[0], signal.SIGCONT)

    def end_then_let_it_go(self, config, **kwargs):
        later = threading.Timer(5.0, let_it_go)
        later.start()
        try:
            ending(self, config, **kwargs)
        finally:
            later.cancel()
            let_it_go()

    monkeypatch.setattr(SweepRun, "on_job_start", stop_the_writer_at_job_1)
    monkeypatch.setattr(SweepRun, "on_multirun_end", end_then_let_it_go)
    err, parent, runs = _impatient_sweep(tmp_path, capsys)
    assert parent.info.status == "FINISHED", err[-3000:]
    assert parent.data.metrics["jobs_finished"] == 2
    assert "the sweep's tracking writer left records: this process applies them" in caplog.text
    points = (tmp_path / "multirun" / "points.txt").read_text().splitlines()
    assert len(points) == 3, points  # a header and both points: decided on both jobs
    done = [r for r in runs if r.data.tags.get("sweep.run_id") == parent.info.run_id]
    assert sorted(r.info.status for r in done) == ["FINISHED", "FINISHED"]


def _impatient_sweep(tmp_path, capsys):
    """(stderr, the parent run, every run) of an LRS sweep whose jobs wait 1 s for a writer."""
    fixed = ["epochs=1", "tracking.drain_timeout=1"]
    jobs = [[f"optimizer.lr={lr}", *fixed] for lr in LRS]
    callback = run_sweep(tmp_path, jobs, [f"optimizer.lr={','.join(LRS)}", *fixed])
    err, runs = capsys.readouterr().err, runs_of(tmp_path)
    return err, next(r for r in runs if r.info.run_id == callback.run_id), runs
