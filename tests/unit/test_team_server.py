"""`sporeflow server`'s checks and files, in-process (issue 35); the running server with logins
is tests/e2e/test_team_store.py's."""

from __future__ import annotations

import argparse
import os
import socket
import stat

import pytest

from sporeflow.core import telemetry
from sporeflow.entry import cli, team_server
from sporeflow.entry.team_server import Refusal


def args(tmp_path, **kw) -> argparse.Namespace:
    base = {"host": "127.0.0.1", "port": 5000, "db": None, "admin_password_file": None}
    return argparse.Namespace(**{**base, "home": str(tmp_path / "home"), **kw})


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("localhost", True)]
    + [("0.0.0.0", False), ("::", False), ("10.1.2.3", False), ("store.example", False)],
)
def test_only_loopback_addresses_count_as_this_machine_only(host, loopback):
    assert team_server.is_loopback(host) is loopback


def test_the_allowed_hosts_are_the_served_address_this_machine_and_loopback():
    named = team_server.allowed_hosts("10.1.2.3", 5001).split(",")
    assert {"10.1.2.3", "10.1.2.3:5001", "127.0.0.1:5001", "localhost:5001"} <= set(named)
    everywhere = team_server.allowed_hosts("0.0.0.0", 5001).split(",")
    assert f"{socket.gethostname()}:5001" in everywhere and "0.0.0.0:5001" not in everywhere


def test_a_database_password_on_the_command_line_is_refused_without_showing_it(tmp_path):
    with pytest.raises(Refusal, match=r"--db postgresql://u:\*\*\*@h/db: a password") as ex:
        team_server.database_uri(args(tmp_path, db="postgresql://u:hunter2@h/db"))
    assert "hunter2" not in str(ex.value)


def test_the_server_s_secret_key_and_auth_config_are_made_once_and_private(tmp_path, monkeypatch):
    monkeypatch.delenv(team_server.ADMIN_PASSWORD_ENV, raising=False)
    with pytest.raises(Refusal, match="no admin yet: set SPOREFLOW_SERVER_ADMIN_PASSWORD"):
        team_server.auth_env(args(tmp_path), tmp_path / "home")
    assert not (tmp_path / "home").exists(), "a refusal left the server's home behind"
    secret_file = tmp_path / "pw"
    secret_file.write_text("from-a-file-0001\n")
    first = team_server.auth_env(
        args(tmp_path, admin_password_file=str(secret_file)), tmp_path / "home"
    )
    assert first["MLFLOW_AUTH_ADMIN_PASSWORD"] == "from-a-file-0001"
    monkeypatch.setenv(team_server.ADMIN_PASSWORD_ENV, "from-the-env-01")
    again = team_server.auth_env(args(tmp_path), tmp_path / "home")
    assert again["MLFLOW_AUTH_ADMIN_PASSWORD"] == "from-the-env-01"
    assert again["MLFLOW_FLASK_SERVER_SECRET_KEY"] == first["MLFLOW_FLASK_SERVER_SECRET_KEY"]
    assert len(first["MLFLOW_FLASK_SERVER_SECRET_KEY"]) == 64
    for name in ("secret_key", "basic_auth.ini", "users.db"):  # users.db: the password hashes
        assert stat.S_IMODE((tmp_path / "home" / name).stat().st_mode) == 0o600
    assert "default_permission = READ" in (tmp_path / "home" / "basic_auth.ini").read_text()


def test_an_admin_password_mlflow_would_refuse_is_refused_before_the_server_starts(
    tmp_path, monkeypatch
):
    """issue 51 item 6: MLflow refuses a short admin password only as the server bootstraps
    (a traceback); here it is one line naming where the password came from, never showing it."""
    monkeypatch.setenv(team_server.ADMIN_PASSWORD_ENV, "short-1")
    with pytest.raises(
        Refusal, match="SPOREFLOW_SERVER_ADMIN_PASSWORD: the admin's password is"
    ) as ex:
        team_server.auth_env(args(tmp_path), tmp_path / "home")
    assert "short-1" not in str(ex.value) and "12" in str(ex.value), ex.value
    assert not (tmp_path / "home").exists()


def test_an_older_server_s_auth_config_is_rewritten_to_sporeflow_s_login_check(
    tmp_path, monkeypatch
):
    """issue 52 item 1: the auth app's config names team_auth's check (read back by MLflow's own
    config reader), also in a home an older sporeflow made; the check refuses creating exactly
    the requests after which MLflow makes the requester a manager (its own table)."""
    from mlflow.server.auth.config import read_auth_config

    from sporeflow.entry import team_auth

    home = tmp_path / "home"
    home.mkdir()
    older = "authorization_function = mlflow.server.auth:authenticate_request_basic_auth"
    (home / "basic_auth.ini").write_text(f"[mlflow]\n{older}\n")
    monkeypatch.setenv(team_server.ADMIN_PASSWORD_ENV, "from-the-env-01")
    env = team_server.auth_env(args(tmp_path), home)
    monkeypatch.setenv("MLFLOW_AUTH_CONFIG_PATH", env["MLFLOW_AUTH_CONFIG_PATH"])
    function = read_auth_config().authorization_function
    assert function == "sporeflow.entry.team_auth:authenticate_request"
    assert stat.S_IMODE((home / "basic_auth.ini").stat().st_mode) == 0o600
    for path in ("experiments/create", "registered-models/create"):
        for api in ("/api/2.0/mlflow/", "/ajax-api/2.0/mlflow/"):
            assert team_auth.creates(api + path, "POST"), api + path
    for path, method in (("runs/create", "POST"), ("experiments/create", "GET")):
        assert not team_auth.creates(f"/api/2.0/mlflow/{path}", method), path


@pytest.mark.parametrize(("chosen", "expected"), [(None, "true"), ("false", "false")])
def test_mlflow_telemetry_is_off_unless_the_user_chose(monkeypatch, capsys, chosen, expected):
    monkeypatch.setenv(telemetry.SWITCH, chosen or "")  # restored after the test
    if chosen is None:
        monkeypatch.delenv(telemetry.SWITCH)
    with pytest.raises(SystemExit):
        cli.main(["compare", "--help"])
    assert os.environ[telemetry.SWITCH] == expected
    assert cli.server_env()[telemetry.SWITCH] == expected
