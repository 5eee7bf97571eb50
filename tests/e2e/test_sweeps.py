"""Sweeps end to end: one MLflow parent per multirun, shared stage 1 and baselines, failed jobs,
concurrent joblib jobs on one sqlite store, sporeflow's Optuna sweeper, the comparison table."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from statsmodels.stats.contingency_tables import mcnemar

from helpers.browser import ASSISTANT_CLOSED, Browser, chromium, keep_for_docs
from helpers.machine import unavailable
from helpers.store import by_stage, client_of, runs_of
from helpers.train import multirun, sporeflow_cli, start_multirun
from sporeflow.core.uris import sqlite_uri
from sporeflow.entry.cli import server_env
from sporeflow.report import views

pytestmark = pytest.mark.e2e


def store(cwd: Path):
    return client_of(cwd), runs_of(cwd)


def test_a_sweep_is_one_parent_run_with_jobs_named_by_what_differs(rho_sweep):
    cwd, proc = rho_sweep
    client, runs = store(cwd)
    stages = by_stage(runs)
    (sweep,) = stages["sweep"]
    assert sweep.info.status == "FINISHED" and sweep.data.tags["sweep.keys"] == "boost.rho"
    assert (
        sweep.info.run_name.startswith("sweep-")
        and "boost.rho=0.4,0.7" in sweep.data.tags["sweep.overrides"]
    )
    pipelines = stages["pipeline"]
    assert sorted(p.info.run_name for p in pipelines) == [
        "dim_reduce rho=0.4",
        "dim_reduce rho=0.7",
    ]
    assert {p.data.tags["mlflow.parentRunId"] for p in pipelines} == {sweep.info.run_id}
    # a winner only if stage 2's per-image outcomes (the pipelines' own artifacts) say so:
    # the exact McNemar test of statsmodels, here the only comparison (Holm changes nothing)
    top = max(pipelines, key=lambda p: p.data.metrics["val/stage2/acc"])
    other = next(p for p in pipelines if p is not top)
    a, b = (stage2_outcomes(client, p) for p in (top, other))
    table = [[int((a & b).sum()), int((a & ~b).sum())], [int((~a & b).sum()), int((~a & ~b).sum())]]
    winner = mcnemar(table, exact=True).pvalue < 0.05 and a.sum() > b.sum()
    assert sweep.data.tags["sporeflow.decision"] == ("winner" if winner else "tie")
    assert ("\nwinner: " if winner else "\ntie: ") in proc.stderr
    assert sweep.data.metrics["jobs_finished"] == 2 and sweep.data.metrics["jobs_failed"] == 0
    names = {a.path for a in client.list_artifacts(sweep.info.run_id)}
    assert {"comparison.csv", "comparison.md", "gain_vs_params.png"} <= names
    # the leader (report.decision.lead): the winner, else the cheaper of the tie, else none
    leader = sweep.data.tags["sporeflow.leader"]
    assert f"\nleader: {leader} (" in proc.stderr
    if leader == "none":
        assert not winner and "sweep.best_run_id" not in sweep.data.tags
        return
    best = next(p for p in pipelines if f"boost.rho={p.data.params['boost.rho']}" == leader)
    assert not winner or best is top
    assert sweep.data.metrics["best/val/stage2/acc"] == pytest.approx(
        best.data.metrics["val/stage2/acc"]
    )
    assert sweep.data.params["best.boost.rho"] == best.data.params["boost.rho"]
    # decided on validation, reported on the test images nothing chose (one seed: its job's)
    assert sweep.data.metrics["best/test/value"] == pytest.approx(
        best.data.metrics["test/stage2/acc"], abs=1e-6
    )
    assert sweep.data.tags["sweep.best_run_id"] == best.info.run_id
    best_tags = client.get_run(best.info.run_id).data.tags
    assert best_tags["sporeflow.best_in_sweep"] == ("true" if winner else "false")
    assert "best_job_curves.png" in names
    assert "sweep FINISHED: 2 jobs finished, 0 failed" in proc.stderr


def stage2_outcomes(client, pipeline) -> np.ndarray:
    """Stage 2's right/wrong per test image, as the pipeline's run keeps it."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = client.download_artifacts(pipeline.info.run_id, "predictions/stage2", tmp)
        return np.load(Path(path) / "predictions.npy")


def test_a_sweep_trains_stage1_and_each_baseline_once(rho_sweep):
    cwd, _ = rho_sweep
    client, runs = store(cwd)
    stages = by_stage(runs)
    assert (
        len(stages["stage1"]) == 1
        and len(stages["baseline"]) == 1
        and len(stages["snapshot_mean"]) == 1
    )
    assert len(stages["stage2"]) == 2
    first, second = sorted(stages["pipeline"], key=lambda p: int(p.data.tags["sweep.job"]))
    assert second.data.tags["baseline_reused_from"] == stages["baseline"][0].info.run_id
    assert second.data.tags["snapshot_mean_reused_from"] == stages["snapshot_mean"][0].info.run_id
    for pipeline in (first, second):  # the comparison still shows every arm per job
        assert (
            pipeline.data.metrics["val/baseline/acc"]
            == stages["baseline"][0].data.metrics["final/val/acc"]
        )
        assert (
            "val/gain_p_value" in pipeline.data.metrics
            and "test/vs_baseline/p_value" in pipeline.data.metrics
        )
        # stage 1's per-epoch curve is on every pipeline, reused or not, equal to stage 1's own
        curve = [m.value for m in client.get_metric_history(pipeline.info.run_id, "curve/stage1")]
        own = [
            m.value
            for m in sorted(
                client.get_metric_history(stages["stage1"][0].info.run_id, "val/acc"),
                key=lambda m: m.step,
            )
        ]
        assert curve == own and len(curve) == 3
        assert pipeline.data.tags["pca_basis_run"] == stages["stage1"][0].info.run_id
        assert not [a for a in client.list_artifacts(pipeline.info.run_id) if a.path == "pca"]
    # the basis is stored once, on stage 1's run
    assert [a.path for a in client.list_artifacts(stages["stage1"][0].info.run_id, "pca")]


def test_compare_sweep_table_is_sorted_by_the_objective(rho_sweep):
    cwd, _ = rho_sweep
    proc = sporeflow_cli(cwd, "compare", "--sweep", "latest", "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert [r["boost.rho"] for r in rows] and set(r["boost.rho"] for r in rows) == {"0.4", "0.7"}
    _, runs = store(cwd)
    pipelines = {p.data.params["boost.rho"]: p for p in by_stage(runs)["pipeline"]}
    (sweep,) = by_stage(runs)["sweep"]
    leader = sweep.data.tags["sporeflow.leader"]  # its jobs first (issue 76 item 2)
    expected = sorted(
        pipelines,
        key=lambda rho: (
            f"boost.rho={rho}" != leader,
            -pipelines[rho].data.metrics["val/stage2/acc"],
        ),
    )
    assert [r["boost.rho"] for r in rows] == expected
    for row in rows:
        assert float(row["stage2_val"]) == pytest.approx(
            pipelines[row["boost.rho"]].data.metrics["val/stage2/acc"], abs=5e-5
        )
    markdown = sporeflow_cli(cwd, "compare", "--sweep", "latest", "--format", "markdown").stdout
    assert markdown.splitlines()[0].startswith("| job | status | boost.rho |")
    # the text table ends with the verdict the sweep itself ended with, the leader, what it
    # reports on the test images and its one-line answer
    text = sporeflow_cli(cwd, "compare", "--sweep", "latest").stdout.splitlines()
    verdict = next(i for i, ln in enumerate(text) if ln.startswith(("winner: ", "tie: ")))
    assert text[verdict].startswith(sweep.data.tags["sporeflow.decision"] + ": ")
    assert text[verdict + 1].startswith(f"leader: {leader} (")
    if leader != "none":
        assert text[verdict + 2].startswith(f"reported: {leader} on the test images")
        assert text[verdict + 3].startswith(f"answer ({leader}, test images, 1 seed): stage 2 ")
    assert sporeflow_cli(cwd, "compare", "--sweep", "0123abc").returncode == 2


def test_a_failed_job_ends_the_parent_failed_and_the_summary_names_it(tmp_path):
    """A job that fails on what only its run finds (lr=1e6 diverges: a bad setting such as
    train.clip_grad_norm=-1 is refused before the sweep starts, entry.sweep_check)."""
    proc = multirun(tmp_path, "epochs=3", "optimizer.lr=0.01,1e6")
    assert proc.returncode == 1, proc.stderr[-2000:]
    _, runs = store(tmp_path)
    stages = by_stage(runs)
    (sweep,) = stages["sweep"]
    assert sweep.info.status == "FAILED", "the parent must never stay RUNNING"
    assert sweep.data.metrics["jobs_finished"] == 1 and sweep.data.metrics["jobs_failed"] == 1
    assert (
        "job 1" in sweep.data.tags["sporeflow.failure"]
        and "diverged at epoch" in sweep.data.tags["sporeflow.failure"]
    )
    trains = stages["train"]  # the diverged job's run ended FAILED, the other FINISHED
    assert sorted(t.info.status for t in trains) == ["FAILED", "FINISHED"]
    assert {t.data.tags["mlflow.parentRunId"] for t in trains} == {sweep.info.run_id}
    assert "failed: job 1 (lr=" in proc.stderr and "diverged at epoch" in proc.stderr


def test_joblib_runs_two_jobs_at_once_on_one_sqlite_store(tmp_path):
    proc = multirun(
        tmp_path,
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "epochs=2",
        "optimizer.lr=0.01,0.02",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    client, runs = store(tmp_path)
    stages = by_stage(runs)
    (sweep,) = stages["sweep"]
    assert sweep.data.tags["sweep.launcher"].endswith("JoblibLauncher")
    jobs = stages["train"]
    assert sorted(j.info.run_name for j in jobs) == [
        "lenet5-digits lr=0.01",
        "lenet5-digits lr=0.02",
    ]
    pids = set()
    for (
        job
    ) in jobs:  # complete: ended, every epoch's eval, final metrics, config, checkpoint artifact
        assert (
            job.info.status == "FINISHED"
            and job.data.tags["mlflow.parentRunId"] == sweep.info.run_id
        )
        assert len(client.get_metric_history(job.info.run_id, "val/acc")) == 2
        assert "final/val/acc" in job.data.metrics and job.data.params["optimizer.lr"] in (
            "0.01",
            "0.02",
        )
        assert [a.path for a in client.list_artifacts(job.info.run_id, "checkpoints")]
        pids.add(job.data.tags["sporeflow.pid"])
    assert len(pids) == 2 and str(os.getpid()) not in pids, "each job ran in its own joblib worker"
    assert sweep.info.status == "FINISHED" and sweep.data.metrics["jobs_finished"] == 2
    table = sporeflow_cli(
        tmp_path, "compare", "--sweep", "latest", "--format", "csv"
    )  # plain runs: acc, loss
    rows = list(csv.DictReader(io.StringIO(table.stdout)))
    best_first = sorted(jobs, key=lambda j: -j.data.metrics["final/val/acc"])
    assert [r["optimizer.lr"] for r in rows] == [
        j.data.params["optimizer.lr"] for j in best_first
    ], table.stderr
    assert float(rows[0]["val_acc"]) == pytest.approx(
        best_first[0].data.metrics["final/val/acc"], abs=5e-5
    )


def test_a_sigkilled_joblib_job_is_counted_by_its_sweep(tmp_path):
    """A job's process SIGKILLed writes no result of its own: the sweep counts it as failed from
    its dir and journal (joblib then stops its other worker too), and the killed job's writer
    ends its run KILLED."""
    sweep = start_multirun(
        tmp_path, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "epochs=300", "seed=1,2"
    )
    journal = tmp_path / "multirun" / "0" / "tracking"
    deadline = time.time() + 300
    while not list((tmp_path / "multirun" / "0" / "checkpoints").glob("epoch_*.ckpt")):
        assert sweep.poll() is None and time.time() < deadline, "job 0 never saved an epoch"
        time.sleep(0.2)
    header = json.loads(next(journal.glob("*.jsonl")).read_text().splitlines()[0])
    os.kill(header["owner"]["pid"], signal.SIGKILL)  # the joblib worker running job 0
    _, err = sweep.communicate(timeout=300)
    assert sweep.returncode == 1, err[-3000:]
    assert "[sporeflow] sweep FAILED" in err
    assert "failed: job 0 (seed=1): the job's process died without reporting" in err
    deadline = time.time() + 120
    while True:  # the killed job's writer drains and ends its run
        runs = by_stage(runs_of(tmp_path))
        (job0,) = [r for r in runs["train"] if r.data.params["seed"] == "1"]
        if job0.info.status != "RUNNING" or time.time() > deadline:
            break
        time.sleep(0.5)
    assert job0.info.status == "KILLED" and "sporeflow.closed" in job0.data.tags
    (parent,) = runs["sweep"]
    assert parent.info.status == "FAILED" and parent.data.metrics["jobs_failed"] >= 1
    assert "job 0: the job's process died" in parent.data.tags["sporeflow.failure"]


@pytest.mark.slow
def test_data_parallel_jobs_under_joblib_each_run_their_own_msrun(tmp_path):
    """parallel=data2 in two concurrent joblib jobs: two msrun launches (own ports, own worker
    logs), both runs complete children of the sweep, each trained by 2 workers."""
    proc = multirun(
        tmp_path,
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "parallel=data2",
        "epochs=1",
        "optimizer.lr=0.01,0.02",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, runs = store(tmp_path)
    stages = by_stage(runs)
    (sweep,) = stages["sweep"]
    assert len(stages["train"]) == 2
    for job in stages["train"]:
        assert (
            job.info.status == "FINISHED"
            and job.data.tags["mlflow.parentRunId"] == sweep.info.run_id
        )
        assert job.data.tags["batch.workers"] == "2" and "final/val/acc" in job.data.metrics
        run_dir = Path(job.data.tags["run_dir"])
        assert (run_dir / "msrun_logs" / "worker_0.log").is_file() and (
            run_dir / "msrun_logs" / "worker_1.log"
        ).is_file()


def test_submitit_local_runs_a_data_parallel_job_in_a_process_of_its_own(tmp_path):
    """submitit runs a job as `python -m submitit.core._submit <folder>`: the job's msrun must
    re-run train.py for its workers, not sys.argv[0] (found on a real SLURM cluster)."""
    proc = multirun(
        tmp_path, "hydra/launcher=submitit_local", "epochs=1", "optimizer.lr=0.01", "parallel=data2"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, runs = store(tmp_path)
    stages = by_stage(runs)
    (sweep,), (job,) = stages["sweep"], stages["train"]
    assert (
        sweep.data.tags["sweep.launcher"].endswith("LocalLauncher")
        and sweep.info.status == "FINISHED"
    )
    assert (
        job.data.tags["mlflow.parentRunId"] == sweep.info.run_id and job.info.status == "FINISHED"
    )
    assert job.data.tags["batch.workers"] == "2", "trained by two msrun workers"
    assert job.data.tags["sporeflow.pid"] != sweep.data.tags["sporeflow.pid"], (
        "submitit ran the job elsewhere"
    )
    assert list((tmp_path / "multirun" / ".submitit").glob("*/*_result.pkl")), (
        "submitit's own job files"
    )


@pytest.mark.slow
def test_optuna_search_records_trials_and_continues_its_study(tmp_path):
    import optuna

    search = ["hparams_search=dim_reduce_optuna", "debug=dim_reduce", "boost.baselines=[baseline]"]
    first = multirun(tmp_path, *search, "hydra.sweeper.n_trials=2")
    assert first.returncode == 0, first.stderr[-3000:]
    second = multirun(
        tmp_path, *search, "hydra.sweeper.n_trials=3"
    )  # the same study: one more trial
    assert second.returncode == 0, second.stderr[-3000:]
    assert "2 trials done, 1 to run" in second.stderr
    study = optuna.load_study(
        study_name="dim_reduce", storage=f"sqlite:///{tmp_path / 'optuna.db'}"
    )
    trials = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(trials) == 3
    client, runs = store(tmp_path)
    stages = by_stage(runs)
    assert len(stages["stage1"]) == 1 and len(stages["baseline"]) == 1, (
        "stage 1 and the baseline are shared"
    )
    pipelines = {int(p.data.tags["optuna.trial"]): p for p in stages["pipeline"]}
    for (
        trial
    ) in trials:  # each trial's value is its job's stage-2 accuracy, its params the job's config
        job = pipelines[trial.number]
        assert trial.value == pytest.approx(job.data.metrics["val/stage2/acc"])
        for key, value in trial.params.items():
            assert float(job.data.params[key]) == pytest.approx(value)
            assert low_high(key)[0] <= value <= low_high(key)[1]
    # one parent run for the study: the second command continued it (trial numbers = job numbers)
    (parent,) = stages["sweep"]
    assert parent.data.tags["optuna.study"] == "dim_reduce"
    history = client.get_metric_history(parent.info.run_id, "trial/value")
    assert [m.step for m in history] == [0, 1, 2]
    assert parent.data.tags["optuna.best_trial"] == str(max(trials, key=lambda t: t.value).number)
    assert sorted(int(p.data.tags["sweep.job"]) for p in stages["pipeline"]) == [0, 1, 2]

    # docs/troubleshooting.md: an interrupted search, started again with the same
    # command, tries the interrupted trial's parameters again
    started = time.time()
    proc = start_multirun(tmp_path, *search, "hydra.sweeper.n_trials=4")
    deadline = time.monotonic() + 300
    while (
        proc.poll() is None
        and time.monotonic() < deadline
        and not [
            m
            for m in (tmp_path / "multirun").glob("*/stage2/sporeflow_run.json")
            if m.stat().st_mtime > started
        ]
    ):
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)  # while the fourth trial trains its stage 2
    _, err = proc.communicate(timeout=120)
    assert proc.returncode in (130, 143), err[-3000:]
    study = optuna.load_study(
        study_name="dim_reduce", storage=f"sqlite:///{tmp_path / 'optuna.db'}"
    )
    # the interrupted process told its trial FAIL and queued its parameters again: nothing is
    # left RUNNING for a heartbeat to time out, the restart takes it at once
    assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    (queued,) = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    cut = study.trials[queued.user_attrs["sporeflow.retry_of"]]
    assert cut.state == optuna.trial.TrialState.FAIL
    assert queued.system_attrs["fixed_params"] == cut.params
    again = multirun(tmp_path, *search, "hydra.sweeper.n_trials=4")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "3 trials done, 1 to run" in again.stderr
    study = optuna.load_study(
        study_name="dim_reduce", storage=f"sqlite:///{tmp_path / 'optuna.db'}"
    )
    complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(complete) == 4 and complete[-1].params == cut.params
    assert study.trials[cut.number].state == optuna.trial.TrialState.FAIL

    # a study that has all its trials: the same command runs nothing and leaves no empty sweep
    sweeps_before = {r.info.run_id for r in by_stage(runs_of(tmp_path))["sweep"]}
    done = multirun(tmp_path, *search, "hydra.sweeper.n_trials=4")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "4 trials done, 0 to run" in done.stderr and "no job ran" in done.stderr, done.stderr
    assert {r.info.run_id for r in by_stage(runs_of(tmp_path))["sweep"]} == sweeps_before


def low_high(key: str) -> tuple[float, float]:
    return {
        "boost.rho": (0.3, 0.8),
        "boost.gamma": (0.5, 0.99),
        "boost.alpha": (1e-4, 1e-2),
        "boost.sigma": (0.1, 0.6),
    }[key]


def test_optuna_search_space_syntax_maps_to_optuna_distributions():
    import optuna.distributions as d

    from sporeflow.config.search_space import distribution
    from sporeflow.core.errors import ConfigError

    assert distribution("a", "interval(0.3, 0.8)") == d.FloatDistribution(0.3, 0.8)
    assert distribution("a", "tag(log, interval(1e-4, 1e-2))") == d.FloatDistribution(
        1e-4, 1e-2, log=True
    )
    assert distribution("a", "int(interval(1, 4))") == d.IntDistribution(1, 4)
    assert distribution("a", "choice(16, 32)") == d.CategoricalDistribution([16, 32])
    assert distribution("a", "range(1, 5)") == d.IntDistribution(1, 4)
    with pytest.raises(ConfigError, match=r"hydra.sweeper.params.boost.rho"):
        distribution("boost.rho", "0.5")


def _mlflow_server(cwd: Path) -> tuple[subprocess.Popen, int]:
    """A real `mlflow server` on 127.0.0.1 over the launch dir's store, answering /health."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "mlflow"),
            "server",
            "--backend-store-uri",
            sqlite_uri(cwd / "mlflow.db"),  # %-encoded: the shared sweep's folder has '?', '#'...
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        cwd=cwd,
        env=server_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                if resp.status == 200:
                    return server, port
        except OSError:
            pass
        if time.monotonic() > deadline:
            os.killpg(server.pid, signal.SIGTERM)
            pytest.fail("mlflow server did not answer within 90 s")
        time.sleep(0.5)


def test_mlflow_ui_opens_the_sweep_with_its_deciding_columns_and_charts(rho_sweep, tmp_path):
    """The links `sporeflow ui` prints, opened by headless Chromium (no click) on a real
    `mlflow server` over the sweep's store: the saved view shows the jobs sorted by the
    objective with the swept key, each stage's accuracy and the gain as columns, values equal
    to the store's; its charts link shows stage 2 against stage 1 and the swept key against the
    objective. The best job's model is a new version of the registered model."""
    browser_exe = chromium()
    if browser_exe is None:
        unavailable("no Chromium here: .ci/run installs Debian's `chromium` for this test")
    cwd, _ = rho_sweep
    server, port = _mlflow_server(cwd)
    try:
        proc = sporeflow_cli(cwd, "ui", "--links-only", "--port", str(port))
        assert proc.returncode == 0, proc.stderr
        links = dict(line.split(None, 1) for line in proc.stdout.splitlines() if line.strip())
        assert "viewStateShareKey=" in links["sweep"] and "compareRunsMode=CHART" in links["charts"]
        _, runs = store(cwd)
        # the saved view's order: each job's `sweep/rank` (the leader's jobs 1, issue 76 item 2)
        pipelines = sorted(
            by_stage(runs)["pipeline"],
            key=lambda r: (r.data.metrics["sweep/rank"], -r.data.metrics["val/stage2/acc"]),
        )
        names = [p.info.run_name for p in pipelines]
        ranked = len({p.data.metrics["sweep/rank"] for p in pipelines}) == len(pipelines)
        # the deciding metrics the jobs have, in the order the table shows them (by name)
        metrics = sorted(k for k in views.DECIDING if k in pipelines[0].data.metrics)
        assert {"val/stage1/acc", "val/stage2/acc", "test/gain", "test/gain_p_value"} <= set(
            metrics
        )
        with Browser(tmp_path / "profile", width=2400, height=900) as browser:
            browser.open(links["sweep"], ASSISTANT_CLOSED)
            text = browser.wait_for_text([*names, *metrics, "boost.rho", "Sort: sweep/rank"])
            time.sleep(1)  # let the grid settle before reading it
            rows = browser.grid_rows()
            # the jobs in the view's order (tied ranks: any order), values equal to the store's
            shown = [r["attributes.`Run Name`"].split("\n")[-1] for r in rows]
            assert shown == names if ranked else sorted(shown) == sorted(names)
            by_name = {p.info.run_name: p for p in pipelines}
            for row, run in zip(rows, [by_name[n] for n in shown], strict=False):
                for key in metrics:
                    shown = row[f"metrics.`{key}`"]
                    assert float(shown) == pytest.approx(run.data.metrics[key], abs=1e-9), key
                assert row["params.`boost.rho`"] == run.data.params["boost.rho"]
            assert "sklearn-digits-train" in text, "the Dataset column names the data"
            browser.screenshot(tmp_path / "sweep_runs.png")
            keep_for_docs(tmp_path / "sweep_runs.png")
            browser.open(links["charts"])
            browser.wait_for_text(
                ["val/stage1/acc vs. val/stage2/acc", "boost.rho vs. val/stage2/acc"]
            )
            time.sleep(2)  # the plots draw after their titles
            browser.screenshot(tmp_path / "sweep_charts.png")
            keep_for_docs(tmp_path / "sweep_charts.png")
        client = client_of(cwd)
        sweep = next(r for r in runs if r.data.tags.get("stage") == "sweep")
        versions = client.search_model_versions("name = 'lenet5-digits'")
        if sweep.data.tags["sporeflow.leader"] == "none":  # a tie at one cost: nothing registered
            assert versions == [] and "sweep.best_run_id" not in sweep.data.tags
            return
        (version,) = versions
        best = sweep.data.tags["sweep.best_run_id"]
        stage2 = next(
            r
            for r in runs
            if r.data.tags.get("mlflow.parentRunId") == best and r.data.tags["stage"] == "stage2"
        )
        assert version.run_id == stage2.info.run_id, "the version is the best job's stage 2"
        assert version.tags["sweep"] == sweep.info.run_id
        leading = next(p for p in pipelines if p.info.run_id == best)
        assert float(version.tags["value"]) == pytest.approx(
            leading.data.metrics["val/stage2/acc"], abs=1e-6
        )
        assert version.tags["sporeflow.leader"] == sweep.data.tags["sporeflow.leader"]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def test_a_loss_objective_ranks_the_lowest_loss_first(tmp_path):
    """sweep.objective=loss: the parent names the job with the smallest final loss as best."""
    proc = multirun(tmp_path, "debug=quick", "sweep.objective=loss", "optimizer.lr=0.005,0.05")
    assert proc.returncode == 0, proc.stderr[-3000:]
    stages = by_stage(runs_of(tmp_path))
    (parent,) = stages["sweep"]
    jobs = stages["train"]
    assert len(jobs) == 2
    lowest = min(jobs, key=lambda r: r.data.metrics["final/val/loss"])
    assert parent.data.tags["sweep.best_run_id"] == lowest.info.run_id
    assert parent.data.metrics["best/final/val/loss"] == pytest.approx(
        lowest.data.metrics["final/val/loss"]
    )


def test_ctrl_c_during_a_sweep_ends_the_running_job_and_the_parent_killed(tmp_path):
    """docs/troubleshooting.md: the running job ends KILLED, then the sweep's parent run;
    the jobs not started yet never start."""
    proc = start_multirun(tmp_path, "epochs=300", "optimizer.lr=0.01,0.02")
    first = tmp_path / "multirun" / "0" / "checkpoints" / "epoch_0001.ckpt"
    deadline = time.monotonic() + 240
    while not first.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
    assert first.exists(), "job 0 never reached its first checkpoint"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode in (130, 143), err[-3000:]  # SIGINT, or MindSpore's SIGTERM in a step
    stages = by_stage(runs_of(tmp_path))
    (parent,) = stages["sweep"]
    assert parent.info.status == "KILLED"
    assert [r.info.status for r in stages["train"]] == ["KILLED"], "job 1 must never start"
    assert not (tmp_path / "multirun" / "1").exists()
