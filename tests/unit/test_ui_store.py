"""`sporeflow ui` (and `compare`, which open the store the same way) before anything starts
(issue 77 item 5): a password is never taken from the command line (`ps` shows it to every
user of the machine) but read as `sporeflow server` reads it, from the environment; a store
that does not answer is said in one line within seconds (MLflow's clients retried for over
60 s without a word). In-process, against ports nobody listens on: no server is needed to
show that one does not answer. A tracking server that answers is tests/e2e/test_cli.py's."""

from __future__ import annotations

import time

import pytest

from helpers.servers import free_port
from sporeflow.entry.cli import main as cli_main

SECRET = "hunter2-secret"
EXTRA = {"ui": ["--links-only"], "compare": []}  # nothing served: only the store is opened
QUICK_S = 20.0  # "within seconds": the probe's own timeout is 5 s; MLflow's retries took 60+


def run(capsys, *argv: str) -> tuple[int, str, str, float]:
    """(exit code, stdout, stderr, seconds) of `sporeflow <argv>` run in this process."""
    start = time.monotonic()
    code = cli_main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err, time.monotonic() - start


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["ui", "compare"])
@pytest.mark.parametrize(
    ("uri", "instead"),
    [
        (f"postgresql://sf:{SECRET}@127.0.0.1:{{port}}/db", "set PGPASSWORD (or ~/.pgpass)"),
        (f"http://sf:{SECRET}@127.0.0.1:{{port}}", "set MLFLOW_TRACKING_USERNAME and MLFLOW_"),
    ],
)
def test_a_password_on_the_command_line_is_refused_saying_where_it_goes(
    capsys, monkeypatch, command, uri, instead
):
    """Before: `ui --uri postgresql://user:password@...` took it (and SQLAlchemy retried for
    over 60 s); `sporeflow server --db` refused the same URI."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = uri.format(port=free_port())
    code, out, err, took = run(capsys, command, "--uri", uri, *EXTRA[command])
    assert code == 2 and not out, out
    (line,) = err.strip().splitlines()
    assert line.startswith(f"--uri {uri.replace(SECRET, '***')}: a password on the command line")
    assert instead in line, line
    assert SECRET not in err
    assert took < QUICK_S, took


@pytest.mark.timeout(120)
@pytest.mark.parametrize("scheme", ["postgresql", "http"])
def test_a_store_that_does_not_answer_is_said_in_one_line_within_seconds(
    capsys, monkeypatch, scheme
):
    """Before: nothing for over 60 s (SQLAlchemy's retries; MLflow's HTTP client retries with
    back-off for minutes), then a traceback."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"{scheme}://sf@127.0.0.1:{free_port()}/db"
    code, out, err, took = run(capsys, "ui", "--uri", uri, "--links-only")
    assert code == 2 and not out, out
    (line,) = err.strip().splitlines()
    assert line.startswith(f"--uri={uri}: "), line
    assert ("cannot connect" if scheme == "postgresql" else "does not answer") in line, line
    assert "refused" in line.lower(), line
    assert took < QUICK_S, took


@pytest.mark.timeout(120)
def test_a_password_in_the_environment_is_used_and_never_shown(capsys, monkeypatch):
    """The whole URI in MLFLOW_TRACKING_URI (where `ui --uri` sends it): taken, and every
    line that names the store shows it without the password."""
    uri = f"postgresql://sf:{SECRET}@127.0.0.1:{free_port()}/db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    code, out, err, took = run(capsys, "ui", "--links-only")
    assert code == 2 and not out, out
    (line,) = err.strip().splitlines()
    assert line.startswith(f"MLFLOW_TRACKING_URI={uri.replace(SECRET, '***')}: cannot connect")
    assert SECRET not in err
    assert took < QUICK_S, took
