"""`sporeflow ui`'s optuna-dashboard, in process: the link to the sweep's study (found by the
parent run's tags), one line and no dashboard for a sweep without a study, and the refusal of a
host beyond loopback before anything starts. The served dashboard: tests/e2e/test_dashboard.py."""

from __future__ import annotations

import pytest

from helpers.studies import sweep_parent, told_study
from sporeflow.core.uris import sqlite_uri
from sporeflow.entry import cli, study_dashboard


def ui(tmp_path, *extra: str) -> int:
    return cli.main(["ui", "--uri", sqlite_uri(tmp_path / "mlflow.db"), *extra])


def test_the_link_names_the_sweeps_study_by_its_id_in_the_storage(tmp_path, capsys):
    storage, sid = told_study(tmp_path, "rho-sigma", others=2)
    assert sid == 3
    sweep_parent(tmp_path, {"optuna.study": "rho-sigma", "optuna.storage": storage})
    assert ui(tmp_path, "--links-only", "--dashboard-port", "8123") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].split() == ["dashboard", "http://127.0.0.1:8123/dashboard/studies/3"], out
    assert ui(tmp_path, "--links-only") == 0  # optuna-dashboard's own port when none is given
    assert capsys.readouterr().out.splitlines()[-1].endswith(":8080/dashboard/studies/3")


def test_a_sweep_without_a_study_says_so_in_one_line_and_links_no_dashboard(tmp_path, capsys):
    sweep_parent(tmp_path, {})  # a grid sweep: Hydra's BasicSweeper, no study
    assert ui(tmp_path, "--links-only") == 0
    captured = capsys.readouterr()
    assert "dashboard" not in captured.out, captured.out
    (line,) = [x for x in captured.err.splitlines() if x.startswith("dashboard")]
    assert "no stored Optuna study" in line and "grid sweep" in line, line


def test_a_study_missing_from_its_storage_is_said_and_no_empty_storage_is_made(tmp_path, capsys):
    gone = tmp_path / "moved" / "optuna.db"
    sweep_parent(tmp_path, {"optuna.study": "s", "optuna.storage": sqlite_uri(gone)})
    assert ui(tmp_path, "--links-only") == 0
    captured = capsys.readouterr()
    assert "dashboard" not in captured.out and f"{gone} is gone" in captured.err
    assert not gone.exists()


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.7", "::", "store.example.org"])
def test_a_dashboard_beyond_loopback_is_refused_before_anything_starts(
    tmp_path, capsys, monkeypatch, host
):
    """optuna-dashboard has no login and `sporeflow server`'s cannot front it: exit 2, one line,
    no process started (not even MLflow's), with or without a study."""
    storage, _ = told_study(tmp_path, "s", others=0)
    sweep_parent(tmp_path, {"optuna.study": "s", "optuna.storage": storage})
    started = []
    monkeypatch.setattr(cli, "start_group", lambda *a, **k: started.append(a))
    for extra in ([], ["--links-only"]):
        assert ui(tmp_path, "--dashboard-host", host, "--port", "0", *extra) == 2
        captured = capsys.readouterr()
        (line,) = captured.err.strip().splitlines()
        assert f"--dashboard-host {host}" in line and "no login" in line, line
        assert not captured.out and not started


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1"])
def test_loopback_hosts_are_served(host):
    study_dashboard.refuse_host(host)


def test_a_password_in_the_storage_tag_is_left_to_the_environment():
    class Run:
        class data:
            tags = {"optuna.study": "s", "optuna.storage": "postgresql://u:***@db:5432/optuna"}

    assert study_dashboard.study_of(Run) == ("s", "postgresql://u@db:5432/optuna")


def test_the_served_app_reads_only_and_answers_only_loopback_names():
    calls = []

    def app(environ, start_response):
        calls.append(environ["REQUEST_METHOD"])
        start_response("200 OK", [])
        return [b"ok"]

    guarded = study_dashboard.read_only(app, 8123)
    said = []

    def start(status, headers):
        said.append(status.split()[0])

    for method, host in [
        ("GET", "127.0.0.1:8123"),
        ("HEAD", "localhost:8123"),
        ("DELETE", "127.0.0.1:8123"),
        ("POST", "127.0.0.1:8123"),
        ("PUT", "localhost:8123"),
        ("GET", "evil.example.org:8123"),  # DNS rebinding: a page's own name
        ("GET", "127.0.0.1:9999"),
    ]:
        guarded({"REQUEST_METHOD": method, "HTTP_HOST": host}, start)
    assert said == ["200", "200", "405", "405", "405", "403", "403"]
    assert calls == ["GET", "HEAD"]


def test_the_child_gets_the_storage_in_its_environment_never_on_its_command_line(tmp_path):
    storage, _ = told_study(tmp_path, "s", others=0)
    sweep_parent(tmp_path, {"optuna.study": "s", "optuna.storage": storage})

    class Run:
        class info:
            run_name = "sweep-x"

        class data:
            tags = {"optuna.study": "s", "optuna.storage": storage}

    pytest.importorskip("optuna_dashboard")  # `make install` installs it (setup.cfg)
    plan = study_dashboard.plan(Run, "127.0.0.1", None)
    assert plan is not None and plan.env == {study_dashboard.STORAGE_ENV: storage}
    assert not any("sqlite" in part for part in plan.command), plan.command
    port = int(plan.url.rsplit(":", 1)[1])
    assert port > 0 and plan.link == f"http://127.0.0.1:{port}/dashboard/studies/1"
