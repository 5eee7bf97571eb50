"""A team's store on a real PostgreSQL server (issue 23): MLflow straight on the database and
behind `sporeflow server`, one Optuna study shared by sweeper processes in different launch
dirs, and bad addresses refused before any work. The server is Debian's PostgreSQL, started by
the session's `postgres` fixture on 127.0.0.1."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient

from helpers.postgres import PASSWORD as DB_PASSWORD
from helpers.servers import free_port, stop, wait_until_healthy
from helpers.shell import user_env
from helpers.store import by_stage
from helpers.train import TRAIN, multirun, run_train, train_command
from hydra_plugins.sporeflow_optuna_sweeper.study import SURPLUS
from sporeflow.core.names import STAGE1_FINGERPRINT_TAG
from sporeflow.tracking.journal import AppliedState, pending

SPHERE = Path(__file__).resolve().parents[1] / "helpers" / "sphere" / "sphere.py"
SPORECLI = str(Path(sys.executable).parent / "sporeflow")


def runs_in(uri: str) -> list:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("sporeflow")
    return client.search_runs([experiment.experiment_id], max_results=1000) if experiment else []


ADMIN_PASSWORD = "admin-Pass-0001"
TRAINER, TRAINER_PASSWORD = "bob", "bob-Pass-00001"
VIEWER, VIEWER_PASSWORD = "carol", "carol-Pass-0001"


@pytest.fixture(scope="module")
def team_server(postgres, tmp_path_factory):
    """`sporeflow server --auth` on a free port as docs/team.md sets it up: the database's URI
    (password included) in MLFLOW_BACKEND_STORE_URI, the admin's password in
    SPOREFLOW_SERVER_ADMIN_PASSWORD, a trainer and a viewer added with `sporeflow server
    add-user`; this module's jobs and clients log in as the trainer (MLFLOW_TRACKING_USERNAME
    and _PASSWORD in the environment while it runs): (url, db uri, its folder, the server)."""
    db = postgres.new_database("team")
    root = tmp_path_factory.mktemp("team_server")
    port = free_port()
    log = open(root / "server.log", "w")
    secrets = {"MLFLOW_BACKEND_STORE_URI": db, "SPOREFLOW_SERVER_ADMIN_PASSWORD": ADMIN_PASSWORD}
    proc = subprocess.Popen(
        [SPORECLI, "server", "--auth", "--artifacts", str(root / "artifacts"), "--port", str(port)],
        cwd=root,
        env=user_env(secrets),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    wait_until_healthy(url, proc, timeout=120)
    for name, password, role in (
        (TRAINER, TRAINER_PASSWORD, []),
        (VIEWER, VIEWER_PASSWORD, ["--viewer"]),
    ):
        added = subprocess.run(
            [SPORECLI, "server", "add-user", name, "--url", url, *role],
            input=password + "\n",
            env=user_env(login("admin", ADMIN_PASSWORD)),
            capture_output=True,
            text=True,
        )
        assert added.returncode == 0, added.stderr
    saved = {k: os.environ.get(k) for k in login("", "")}
    os.environ.update(login(TRAINER, TRAINER_PASSWORD))
    yield url, db, root, proc
    for key, value in saved.items():
        os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)
    stop(proc)
    log.close()


def login(user: str, password: str) -> dict[str, str]:
    return {"MLFLOW_TRACKING_USERNAME": user, "MLFLOW_TRACKING_PASSWORD": password}


def test_a_job_tracks_straight_into_postgresql(postgres, tmp_path):
    db = postgres.new_database("direct")
    proc = run_train(["epochs=2", f"tracking.uri={db}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = runs_in(db)
    assert run.info.status == "FINISHED"
    assert run.data.params["epochs"] == "2" and "optimizer.lr" in run.data.params
    # what MLflow keeps of the config never holds the password
    assert run.data.params["tracking.uri"] == db.replace(":team-secret@", ":***@")
    assert "team-secret" not in run.data.tags["overrides"]
    config = MlflowClient(db).download_artifacts(run.info.run_id, "config", str(tmp_path / "got"))
    assert not [p for p in Path(config).rglob("*.*") if "team-secret" in p.read_text()]
    history = sorted(
        MlflowClient(db).get_metric_history(run.info.run_id, "val/acc"), key=lambda m: m.step
    )
    assert len(history) == 2 and history[0].step < history[1].step  # one per epoch
    assert run.data.metrics["final/val/acc"] == history[-1].value
    # the tables are PostgreSQL's: the database itself holds the run
    assert postgres.psql("SELECT count(*) FROM runs", database="direct").strip() == "1"


def test_the_team_server_takes_runs_models_and_artifacts(team_server, tmp_path):
    url, db, root, _ = team_server
    proc = run_train(["epochs=1", f"tracking.uri={url}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = [r for r in runs_in(db) if r.info.run_name.startswith("lenet5")][-1:]
    assert run.info.status == "FINISHED"
    # the logged model's files went to the server's artifact folder, not the launch dir
    weights = list((root / "artifacts").rglob("weights.ckpt"))
    assert weights and not list(tmp_path.glob("mlruns")) and not list(tmp_path.glob("mlartifacts"))


def test_the_team_server_lets_in_only_its_users_and_shows_no_secret(team_server, tmp_path):
    """Without a login: 401, and a job refuses before any work (exit 2, one line naming what to
    set); a viewer reads but cannot write; no password is on any command line of the server's
    processes (`ps` shows those to every local user)."""
    import urllib.error
    import urllib.request

    import psutil

    url, _, _, server = team_server
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{url}/api/2.0/mlflow/experiments/search?max_results=1")
    assert refused.value.code == 401
    anonymous = {k: v for k, v in user_env().items() if not k.startswith("MLFLOW_TRACKING_")}
    for env, why in (
        (anonymous, "asks for a login (HTTP 401)"),
        (user_env(login(TRAINER, "wrong-Pass-001")), "refused the login of user 'bob'"),
    ):
        proc = subprocess.run(
            train_command([f"tracking.uri={url}"], tmp_path)[0],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 2, proc.stderr[-2000:]
        (line,) = [x for x in proc.stderr.splitlines() if f"tracking.uri={url}" in x]
        assert why in line and "MLFLOW_TRACKING_USERNAME" in line, line
        assert not list(tmp_path.rglob("checkpoints")), "no work may start"
    viewer = user_env(login(VIEWER, VIEWER_PASSWORD))
    code = (
        "from mlflow.tracking import MlflowClient; import sys; c = MlflowClient(sys.argv[1]);"
        "e = c.get_experiment_by_name('sporeflow'); print(len(c.search_runs([e.experiment_id])));"
        "c.create_run(e.experiment_id)"
    )
    read = subprocess.run(
        [sys.executable, "-c", code, url], env=viewer, capture_output=True, text=True
    )
    assert int(read.stdout.split()[0]) >= 1, read.stderr[-2000:]  # reads the trainer's runs
    assert read.returncode != 0 and "403" in read.stderr, "a viewer cannot write"
    shown = [
        " ".join(p.cmdline())
        for p in [psutil.Process(server.pid), *psutil.Process(server.pid).children(recursive=True)]
    ]
    assert any("basic-auth" in c for c in shown), shown
    assert not [c for c in shown if "team-secret" in c or ADMIN_PASSWORD in c], shown


def test_a_viewer_creates_nothing_and_a_recorded_digest_is_never_rewritten(
    team_server, tmp_path, monkeypatch
):
    """issue 52 item 1: a viewer who creates the team's experiment (or a registered model)
    first would be its manager and could later replace a trainer's weights, digest tag and
    all. The viewer's create gets 403 naming the rule; the trainer and the admin create. A
    recorded SHA-256 tag is written once, for everyone: the same value again passes (a
    replayed journal), another value or a delete, by set-tag or log-batch, gets 403."""
    import hashlib

    from mlflow.entities import RunTag
    from mlflow.exceptions import MlflowException

    url = team_server[0]
    client = MlflowClient(url)

    def as_user(name: str, password: str) -> None:
        for key, value in login(name, password).items():
            monkeypatch.setenv(key, value)

    def refused(call, why: str) -> None:
        with pytest.raises(MlflowException) as answer:
            call()
        assert answer.value.get_http_status_code() == 403, answer.value
        assert why in str(answer.value), answer.value

    as_user(VIEWER, VIEWER_PASSWORD)
    team = f"team-{tmp_path.name}"
    refused(lambda: client.create_experiment(team), f"user '{VIEWER}' may read but not create")
    refused(lambda: client.create_registered_model(team), f"user '{VIEWER}' may read")
    assert client.get_experiment_by_name(team) is None
    as_user(TRAINER, TRAINER_PASSWORD)
    run_id = client.create_run(client.create_experiment(team)).info.run_id
    weights = tmp_path / "final.ckpt"
    weights.write_bytes(os.urandom(256))
    client.log_artifact(run_id, str(weights), "checkpoints")
    tag, digest = "sha256/checkpoints/final.ckpt", hashlib.sha256(weights.read_bytes()).hexdigest()
    client.set_tag(run_id, tag, digest)
    client.set_tag(run_id, tag, digest)  # the same value again: a journal replayed
    client.log_batch(run_id, tags=[RunTag(tag, digest), RunTag("note", "any other tag")])
    planted = "0" * 64
    for name, password in ((TRAINER, TRAINER_PASSWORD), ("admin", ADMIN_PASSWORD)):
        as_user(name, password)
        refused(lambda: client.set_tag(run_id, tag, planted), f"{tag} of run {run_id}")
        refused(lambda: client.log_batch(run_id, tags=[RunTag(tag, planted)]), "written once")
        refused(lambda: client.delete_tag(run_id, tag), "written once")
    assert client.get_run(run_id).data.tags[tag] == digest
    assert client.get_run(run_id).data.tags["note"] == "any other tag"
    assert client.create_registered_model(f"{team}-model").name == f"{team}-model"  # the admin


def test_a_viewer_s_training_job_is_refused_before_work_or_its_records_counted_as_refused(
    team_server, tmp_path, monkeypatch
):
    """A viewer's `train.py` against the team's experiment stops in preflight (exit 2, one
    line naming the user, the experiment and MLflow's permission); into an experiment that
    does not exist yet it gets past preflight, and the server's 403 on each record is a
    refusal (counted, kept, exit 1), not a store away (which would end 0)."""
    from sporeflow.tracking.store import Rejected, Store, store_refusal

    url = team_server[0]
    team, later = f"team-{tmp_path.name}", f"later-{tmp_path.name}"
    for key, value in login(TRAINER, TRAINER_PASSWORD).items():
        monkeypatch.setenv(key, value)
    MlflowClient(url).create_experiment(team)
    assert store_refusal(url, team) is None
    for key, value in login(VIEWER, VIEWER_PASSWORD).items():
        monkeypatch.setenv(key, value)
    assert store_refusal(url, team) == (
        f"tracking.uri={url}: user '{VIEWER}' may read but not write runs in experiment "
        f"'{team}' (permission READ): train under a trainer's login (MLFLOW_TRACKING_USERNAME), "
        "or ask the server's admin to make this user a trainer"
    )
    assert store_refusal(url, later) is None  # not made yet: the server refuses its creation
    with pytest.raises(Rejected, match="may read but not create"):
        Store(url, later).connect()


def test_a_server_beyond_loopback_or_a_password_on_its_command_line_is_refused(postgres, tmp_path):
    """`--host 0.0.0.0` turns logins on and needs the admin's password first (no --insecure);
    a database password on `--db` is refused (`ps` shows it): exit 2, one line, no server."""
    no_password = postgres.uri(password=None)
    anyone = [SPORECLI, "server", "--artifacts", str(tmp_path / "a"), "--home", str(tmp_path / "h")]
    env = {k: v for k, v in user_env().items() if k != "SPOREFLOW_SERVER_ADMIN_PASSWORD"}
    env["PGPASSWORD"] = DB_PASSWORD
    for extra, why in (
        (["--db", no_password, "--host", "0.0.0.0"], "set SPOREFLOW_SERVER_ADMIN_PASSWORD"),
        (["--db", postgres.uri()], "a password on the command line"),
    ):
        proc = subprocess.run(
            [*anyone, *extra], env=env, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 2, proc.stderr[-2000:]
        (line,) = proc.stderr.strip().splitlines()
        assert why in line and "team-secret" not in line, line


def test_ui_reads_a_database_password_as_the_server_does_and_never_shows_it(postgres, tmp_path):
    """issue 77 item 5: `sporeflow ui --uri postgresql://user:password@...` took the password
    from its command line (`ps` shows it) where `sporeflow server --db` refuses it. Now it is
    refused in one line, and taken from PGPASSWORD (or the whole URI in MLFLOW_TRACKING_URI),
    as the server takes it: the links are printed and no line shows the password; a wrong one
    is one line within seconds."""
    uri = postgres.new_database("ui_login")
    experiment = MlflowClient(uri).create_experiment("sporeflow")
    link = f"http://127.0.0.1:5000/#/experiments/{experiment}/runs?workflowType=machine_learning"
    plain = {**user_env(), "MLFLOW_TRACKING_URI": ""}
    without = uri.replace(f":{DB_PASSWORD}@", "@")
    wrong = uri.replace(DB_PASSWORD, "not-the-password")
    for argv, env, code, said in (
        (["--uri", uri], plain, 2, "a password on the command line"),
        (["--uri", without], {**plain, "PGPASSWORD": DB_PASSWORD}, 0, "dashboard:"),
        ([], {**plain, "MLFLOW_TRACKING_URI": uri}, 0, "dashboard:"),
        ([], {**plain, "MLFLOW_TRACKING_URI": wrong}, 2, "password authentication failed"),
    ):
        start = time.monotonic()
        proc = subprocess.run(
            [SPORECLI, "ui", "--links-only", *argv],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        took = time.monotonic() - start
        assert proc.returncode == code, proc.stderr[-2000:]
        assert proc.stdout.split() == (["experiment", link] if code == 0 else []), proc.stdout
        (line,) = proc.stderr.strip().splitlines()
        assert said in line, line
        assert DB_PASSWORD not in proc.stderr and "not-the-password" not in proc.stderr, line
        assert took < 60, (argv, took)


@pytest.mark.slow
def test_eight_concurrent_jobs_against_the_server_lose_nothing(team_server, tmp_path):
    """8 joblib jobs at once: every run FINISHED, each with the same param keys and every
    epoch's metrics; every record each job journalled was applied (counted from the journals)."""
    url, db, _, _ = team_server
    proc = multirun(
        tmp_path,
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=8",
        "seed=range(1,9)",
        "epochs=2",
        f"tracking.uri={url}",
        "tracking.log_model=false",
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = runs_in(db)
    (sweep,) = [
        r for r in by_stage(runs)["sweep"] if r.data.tags["sweep.dir"].startswith(str(tmp_path))
    ]
    jobs = [r for r in runs if r.data.tags.get("sweep.run_id") == sweep.info.run_id]
    assert len(jobs) == 8 and {r.info.status for r in jobs} == {"FINISHED"}
    assert sorted(int(r.data.params["seed"]) for r in jobs) == list(range(1, 9))
    assert len({frozenset(r.data.params) for r in jobs}) == 1  # every param of every job
    client = MlflowClient(db)
    for key, expected in (("val/acc", {2}), ("train/loss", None)):  # per epoch; every n steps
        counts = {len(client.get_metric_history(job.info.run_id, key)) for job in jobs}
        assert counts == (expected or counts) and len(counts) == 1 and 0 not in counts, (
            key,
            counts,
        )
    journals = list(tmp_path.glob("multirun/*/tracking/*.jsonl"))
    assert len(journals) == 8
    for journal in journals:  # the store took every record of every job, refused none
        state = AppliedState.load(journal)
        assert pending(journal) == 0 and state.rejected == 0 and state.seq > 0, journal


# --- refused before any work -----------------------------------------------------------------


def test_a_wrong_password_or_a_closed_port_exits_2_without_the_password(postgres, tmp_path):
    wrong = postgres.uri(password="not-the-password")
    closed = f"postgresql://sporeflow:team-secret@127.0.0.1:{free_port()}/sporeflow"
    for name in ("job", "sweep", "search"):
        (tmp_path / name).mkdir()
    for uri, why in ((wrong, "password authentication failed"), (closed, "Connection refused")):
        for command in (
            run_train([f"tracking.uri={uri}"], tmp_path / "job"),
            multirun(tmp_path / "sweep", "seed=1,2", f"tracking.uri={uri}"),
            multirun(
                tmp_path / "search",
                "hparams_search=dim_reduce_optuna",
                f"hydra.sweeper.storage={uri}",
            ),
            subprocess.run(  # the URI in the environment: a password on --db is refused
                [SPORECLI, "server", "--artifacts", str(tmp_path / "a")],
                env=user_env({"MLFLOW_BACKEND_STORE_URI": uri}),
                capture_output=True,
                text=True,
            ),
        ):
            assert command.returncode == 2, command.stderr[-2000:]
            # Hydra itself logs a failed job's overrides as typed: keep passwords off the
            # command line (PGPASSWORD or ~/.pgpass, docs/team.md); ours never show it
            ours = [
                x for x in command.stderr.splitlines() if "executing job with overrides" not in x
            ]
            (line,) = [x for x in ours if "cannot connect" in x]
            assert why in line and ":***@127.0.0.1" in line, line
            assert not [x for x in ours if "team-secret" in x or "not-the-password" in x]
    assert not list(tmp_path.rglob("checkpoints")), "no work may start"


# --- one study, many processes ---------------------------------------------------------------


def sphere_search(cwd: Path, storage: str, *overrides: str) -> subprocess.Popen:
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [
            sys.executable,
            str(SPHERE),
            "-m",
            f"hydra.sweep.dir={cwd / 'multirun'}",
            f"hydra.sweeper.storage={storage}",
            "hydra.sweeper.study_name=shared",
            "hydra.sweeper.heartbeat_interval=1",
            *overrides,
        ],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def trials_of(cwd: Path) -> list[dict]:
    with open(cwd / "multirun" / "optuna_trials.csv") as f:
        return list(csv.DictReader(f))


def test_two_sweepers_on_two_machines_share_one_study(postgres, tmp_path):
    """Two processes in two launch dirs (no shared files) on one PostgreSQL study, started 1 s
    apart: 12 trials in all, each run by exactly one of them, none failed or lost. (Before the
    heartbeats the second told the first's running trials FAIL and the first died.)"""
    storage = postgres.new_database("study_two")
    first = sphere_search(tmp_path / "a", storage, "hydra.sweeper.n_trials=12", "+sleep=1")
    time.sleep(1)
    second = sphere_search(tmp_path / "b", storage, "hydra.sweeper.n_trials=12", "+sleep=1")
    for proc in (first, second):
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    mine = {name: [int(t["trial"]) for t in trials_of(tmp_path / name)] for name in ("a", "b")}
    assert mine["a"] and mine["b"], "both processes ran trials"
    assert not set(mine["a"]) & set(mine["b"]), "no trial ran twice"
    study = optuna.load_study(study_name="shared", storage=storage)
    complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert sorted(mine["a"] + mine["b"]) == sorted(t.number for t in complete)
    assert len(complete) == 12
    unrun = [t for t in study.trials if t.state != optuna.trial.TrialState.COMPLETE]
    assert all(t.user_attrs.get(SURPLUS) for t in unrun), unrun  # at most a surplus ask


def test_a_killed_sweeper_s_trial_is_run_again_by_the_live_one(postgres, tmp_path):
    """SIGKILL one of two processes while its trial runs: its heartbeat stops, the other process
    sees the trial stale after 3 s, tells it FAIL and runs its parameters again; the study
    still ends with n_trials complete trials."""
    storage = postgres.new_database("study_kill")
    survivor = sphere_search(tmp_path / "a", storage, "hydra.sweeper.n_trials=6", "+sleep=2")
    victim = sphere_search(tmp_path / "b", storage, "hydra.sweeper.n_trials=6", "+sleep=30")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until both run a trial with all its parameters set
        time.sleep(0.5)
        try:
            study = optuna.load_study(study_name="shared", storage=storage)
        except KeyError:  # not created yet
            continue
        running = study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
        # a trial is RUNNING from `ask`, before its parameters are drawn one by one: killed
        # then, its retry draws the missing ones anew (seen once on a loaded machine)
        if len(running) == 2 and all(set(t.params) == {"x", "y", "z"} for t in running):
            break
    victim.kill()
    victim.wait()
    _, err = survivor.communicate(timeout=300)
    assert survivor.returncode == 0, err[-3000:]
    study = optuna.load_study(study_name="shared", storage=storage)
    states = [t.state for t in study.trials]
    assert states.count(optuna.trial.TrialState.COMPLETE) == 6
    (dead,) = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    (again,) = [t for t in study.trials if t.user_attrs.get("sporeflow.retry_of") == dead.number]
    assert again.state == optuna.trial.TrialState.COMPLETE and again.params == dead.params
    assert dead.number not in [int(t["trial"]) for t in trials_of(tmp_path / "a")]


def sporeflow_search(cwd: Path, storage: str, tracking: str, n_trials: int) -> subprocess.Popen:
    """`python train.py -m` of a learning-rate search on the shared study, tracked into the
    team's server: one "machine" (its own launch dir)."""
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [
            sys.executable,
            str(TRAIN),
            "-m",
            "hydra/sweeper=sporeflow_optuna",
            "hydra.sweeper.sampler=random",
            f"hydra.sweeper.n_trials={n_trials}",
            f"hydra.sweeper.storage={storage}",
            "hydra.sweeper.study_name=lr",
            "hydra.sweeper.heartbeat_interval=2",
            "optimizer.lr=interval(0.01, 0.1)",
            "debug=quick",
            f"tracking.uri={tracking}",
            f"hydra.sweep.dir={cwd / 'multirun'}",
        ],
        cwd=cwd,
        env=user_env({"MLFLOW_TRACKING_URI": ""}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_machines_sweep_one_study_under_one_parent_run(postgres, team_server, tmp_path):
    """Two sweeper processes (two launch dirs) on one study and one server: one sweep parent
    run for the study, every job of both its child, job numbers = trial numbers; started again
    with a larger n_trials, a process continues the same parent."""
    url, _, _, _ = team_server
    storage = postgres.new_database("study_parent")
    procs = [sporeflow_search(tmp_path / m, storage, url, 4) for m in ("a", "b")]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]

    def study_parents() -> list:
        return [r for r in runs_in(url) if r.data.tags.get("optuna.study") == "lr"]

    (parent,) = study_parents()
    jobs = [r for r in runs_in(url) if r.data.tags.get("sweep.run_id") == parent.info.run_id]
    assert sorted(int(j.data.tags["sweep.job"]) for j in jobs) == [0, 1, 2, 3]
    assert {j.data.tags["mlflow.parentRunId"] for j in jobs} == {parent.info.run_id}
    assert all(j.info.status == "FINISHED" for j in jobs)
    ran = {m: {int(t["trial"]) for t in trials_of(tmp_path / m)} for m in ("a", "b")}
    assert ran["a"] and ran["b"] and not ran["a"] & ran["b"], ran
    study = optuna.load_study(study_name="lr", storage=storage)
    for job in jobs:  # each job's run is its trial's: same number, same value
        trial = study.trials[int(job.data.tags["sweep.job"])]
        assert trial.value == pytest.approx(job.data.metrics["final/val/acc"])

    again = sporeflow_search(tmp_path / "a", storage, url, 5)
    _, err = again.communicate(timeout=600)
    assert again.returncode == 0, err[-3000:]
    assert [p.info.run_id for p in study_parents()] == [parent.info.run_id], "it continues"
    children = [r for r in runs_in(url) if r.data.tags.get("sweep.run_id") == parent.info.run_id]
    # job numbers are trial numbers: a trial the two processes asked for beyond n_trials at the
    # same moment (marked surplus, never run) keeps its number, and the next job takes the one
    # after it (CI of 456a392 saw jobs 0-3 and 5)
    study = optuna.load_study(study_name="lr", storage=storage)
    run = sorted(t.number for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE)
    surplus = [t.number for t in study.trials if t.user_attrs.get(SURPLUS)]
    assert len(run) == 5 and run[:4] == [0, 1, 2, 3] and not set(run) & set(surplus), run
    assert sorted(int(j.data.tags["sweep.job"]) for j in children) == run
    assert MlflowClient(url).get_run(parent.info.run_id).info.status == "FINISHED"


# --- stage 1 reused across machines -----------------------------------------------------------


def test_a_second_machine_reuses_stage1_and_the_baseline_from_the_server(team_server, tmp_path):
    """Machine a trains stage 1 and the baseline against the team's server, then its disk is
    gone; machine b (another launch dir, nothing shared but the server) runs another rho: it
    finds both by fingerprint, copies their files from the server's artifacts (each checked
    against the SHA-256 its run recorded) and trains neither again; its basis is the one a
    computed (no PCA again). Weights replaced in the artifact store are not reused (machine c)."""
    import hashlib
    import shutil

    url, _, root, _ = team_server
    common = ["debug=dim_reduce", "boost.baselines=[baseline]", "seed=7", f"tracking.uri={url}"]
    for machine in ("a", "b"):
        (tmp_path / machine).mkdir()
    first = run_train([*common, "boost.rho=0.4"], tmp_path / "a")
    assert first.returncode == 0, first.stderr[-3000:]

    def seed7(stage: str) -> list:
        return [
            r
            for r in runs_in(url)
            if r.data.tags.get("stage") == stage and "seed=7" in r.data.tags.get("overrides", "")
        ]

    (stage1,) = seed7("stage1")
    weights = tmp_path / "a" / "run" / "stage1" / "checkpoints" / "final.ckpt"
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    bases = [p.name for p in (tmp_path / "a" / "run" / "stage1" / "pca").glob("*.npy")]
    shutil.rmtree(tmp_path / "a")  # the other machine's disk: out of reach from here on

    second = run_train([*common, "boost.rho=0.7"], tmp_path / "b")
    assert second.returncode == 0, second.stderr[-3000:]
    assert len(seed7("stage1")) == 1 and len(seed7("baseline")) == 1, "neither trained again"
    pipelines = {r.data.tags["overrides"]: r for r in seed7("pipeline")}
    (mine,) = [p for o, p in pipelines.items() if "boost.rho=0.7" in o]
    assert mine.data.tags["stage1_reused_from"] == stage1.info.run_id
    assert mine.data.tags["baseline_reused_from"] == seed7("baseline")[0].info.run_id
    fetched = tmp_path / "b" / ".sporeflow" / "runs" / stage1.info.run_id
    copied = fetched / "checkpoints" / "final.ckpt"
    assert hashlib.sha256(copied.read_bytes()).hexdigest() == digest
    assert bases and [p.name for p in (fetched / "pca").glob("*.npy")] == bases, "a's basis"
    assert "val/gain_p_value" in mine.data.metrics, "the comparison had the baseline's predictions"
    assert "pca_seconds" not in mine.data.metrics, "no PCA computed on b"

    # someone who can write to the server's artifact folder replaces stage 1's weights: machine
    # c (a third launch dir) checks what it fetched, trains its own stage 1 and says why
    (stored,) = (root / "artifacts").rglob(f"{stage1.info.run_id}/artifacts/checkpoints/final.ckpt")
    stored.write_bytes(b"not the weights stage 1 made")
    (tmp_path / "c").mkdir()
    third = run_train([*common, "boost.rho=0.55"], tmp_path / "c")
    assert third.returncode == 0, third.stderr[-3000:]
    logged = third.stdout.splitlines()  # Hydra's console log handler writes to stdout
    said = [x for x in logged if f"not reusing run {stage1.info.run_id}" in x and "WARNING" in x]
    assert said and "checkpoints/final.ckpt is not the file its run made" in said[0], logged[-40:]
    assert len(seed7("stage1")) == 2, "c trained its own stage 1"
    assert not (tmp_path / "c" / ".sporeflow" / "runs" / stage1.info.run_id).exists()


def test_a_machine_that_starts_while_another_trains_stage1_waits_and_reuses_it(
    team_server, tmp_path
):
    """Machine b starts while machine a's stage 1 is RUNNING in the server: b waits for it
    (the local file lock cannot see another machine) and reuses it instead of training its own.
    a is held (SIGSTOP, its writer too) from the moment its stage 1 shows RUNNING until b says
    it waits, so b finds it running whatever the machine's load, without a stage 1 made long
    enough to outlast b's start (minutes of CPU, and still too short once on a loaded machine)."""
    import threading

    import psutil

    url, _, _, _ = team_server
    args = ["debug=dim_reduce", "epochs=8", "boost.baselines=[baseline]", "seed=8"]
    args.append(f"tracking.uri={url}")

    def start(machine: str, rho: str) -> subprocess.Popen:
        (tmp_path / machine).mkdir()
        cmd, env = train_command([*args, f"boost.rho={rho}"], tmp_path / machine)
        return subprocess.Popen(  # the log (stdout) and stderr, in one stream
            cmd,
            cwd=tmp_path / machine,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def stage1_runs() -> list:
        return [
            r
            for r in runs_in(url)
            if r.data.tags.get("stage") == "stage1" and "seed=8" in r.data.tags.get("overrides", "")
        ]

    def findable(run) -> bool:  # what b's look for a running stage 1 asks of the store
        return run.info.status == "RUNNING" and STAGE1_FINGERPRINT_TAG in run.data.tags

    first = start("a", "0.4")
    deadline = time.monotonic() + 300
    while not [r for r in stage1_runs() if findable(r)]:
        assert time.monotonic() < deadline and first.poll() is None, "a's stage 1 never ran"
        time.sleep(0.2)
    held = [psutil.Process(first.pid), *psutil.Process(first.pid).children(recursive=True)]
    for proc in held:
        proc.suspend()
    try:
        second = start("b", "0.7")
        said, waits = [], threading.Event()

        def read_b() -> None:
            for line in second.stdout:
                said.append(line)
                if "is being trained by run" in line:
                    waits.set()

        reader = threading.Thread(target=read_b, daemon=True)
        reader.start()
        if not waits.wait(300):
            second.kill()
            raise AssertionError("b never waited for a's stage 1: " + "".join(said)[-3000:])
    finally:
        for proc in held:
            proc.resume()
    errs = {"a": first.communicate(timeout=600)[0]}
    second.wait(timeout=600)
    reader.join(timeout=60)
    errs["b"] = "".join(said)
    for name, proc in (("a", first), ("b", second)):
        assert proc.returncode == 0, errs[name][-3000:]
    (stage1,) = stage1_runs()
    assert "on another machine" in errs["b"]
    (mine,) = [
        r
        for r in runs_in(url)
        if r.data.tags.get("stage") == "pipeline"
        and "seed=8" in r.data.tags.get("overrides", "")
        and "boost.rho=0.7" in r.data.tags.get("overrides", "")
    ]
    assert mine.data.tags["stage1_reused_from"] == stage1.info.run_id
