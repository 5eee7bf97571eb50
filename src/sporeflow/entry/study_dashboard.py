"""`sporeflow ui`'s optuna-dashboard: the latest (or chosen) sweep's Optuna study, served read-only
on 127.0.0.1 beside the MLflow UI, by a child process that ends with `sporeflow ui`.

The study is found on the sweep's parent run (tags `optuna.study` and `optuna.storage`, set by
entry/sweep_study.py); a grid sweep, or an Optuna study kept in memory, has none: one line says
so and no dashboard is served.

Only on loopback: optuna-dashboard has no login (`run_server(storage, host, port)` and its WSGI
app let anyone who reaches them read the study, delete it and tell its trials), and the team's
logins live in `sporeflow server`'s MLflow basic-auth app, which cannot be put in front of
another program. So a `--dashboard-host` beyond loopback is refused (exit 2): reach the dashboard
through an SSH tunnel. On loopback it is served read-only (a viewer never changes the study that
a sweep may still be writing: POST/PUT/DELETE get 405) and answers only Host headers naming
loopback (a web page cannot reach it by DNS rebinding).

No secret on a command line: the child gets the storage URL in its environment (the tag holds
it without a password: PGPASSWORD or ~/.pgpass supply one).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from dataclasses import dataclass
from typing import Any

from sporeflow.core.names import OPTUNA_STORAGE_TAG, OPTUNA_STUDY_TAG
from sporeflow.core.uris import sqlite_file
from sporeflow.entry.team_server import Refusal, is_loopback

STORAGE_ENV = "SPOREFLOW_DASHBOARD_STORAGE"
LINKS_ONLY_PORT = 8080  # optuna-dashboard's own default port: `optuna-dashboard <storage>`


@dataclass(frozen=True)
class Dashboard:
    """What `sporeflow ui` serves for a sweep's study: the child's command (no secret in it),
    the environment it gets on top of ours, and the link it prints."""

    command: list[str]
    env: dict[str, str]
    url: str
    link: str


def refuse_host(host: str) -> None:
    """A dashboard host beyond loopback is refused: optuna-dashboard has no login."""
    if not is_loopback(host):
        raise Refusal(
            f"--dashboard-host {host}: optuna-dashboard has no login (anyone who reaches it "
            "reads, deletes and changes the study) and `sporeflow server`'s logins cannot be put "
            "in front of it; it is served on 127.0.0.1 only: from another machine, "
            "ssh -L <port>:127.0.0.1:<port> this machine"
        )


def study_of(sweep: Any) -> tuple[str, str] | None:
    """(study name, storage URL) that the sweep's parent run names; None: no stored study."""
    if sweep is None:
        return None
    tags = sweep.data.tags
    name, storage = tags.get(OPTUNA_STUDY_TAG), tags.get(OPTUNA_STORAGE_TAG)
    if not name or not storage:
        return None
    # the tag is redacted (user:***@host): the password comes from PGPASSWORD or ~/.pgpass
    return name, storage.replace(":***@", "@")


def study_id(storage: str, name: str) -> int:
    """The study's id in its storage (optuna-dashboard's URLs name it); Refusal when the
    storage is gone or does not hold the study."""
    import optuna

    path = sqlite_file(storage)
    if path is not None and not path.is_file():  # opening it would create an empty one
        raise Refusal(f"the study's storage {path} is gone")
    try:
        opened = optuna.storages.get_storage(storage)
        return opened.get_study_id_from_name(name)
    except KeyError:
        raise Refusal(f"the study {name!r} is not in its storage") from None
    except Exception as ex:  # noqa: BLE001 - any driver's error: one line, no dashboard
        raise Refusal(f"the study's storage does not open: {type(ex).__name__}: {ex}") from None


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def free_port(host: str) -> int:
    """A port nobody listens on now (the OS's choice)."""
    with socket.socket(_family(host)) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def port_taken(host: str, port: int) -> str | None:
    """Why `host`:`port` cannot be the dashboard's (another process holds it), or None."""
    with socket.socket(_family(host)) as probe:
        try:
            probe.bind((host, port))
        except OSError as ex:
            return f"{host}:{port} is taken ({ex.strerror})"
    return None


def base_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def link(host: str, port: int, study: int) -> str:
    return f"{base_url(host, port)}/dashboard/studies/{study}"


def answers(url: str, proc, timeout: float = 120.0) -> bool:
    """Wait until the dashboard we started answers at `url`; False if it ended or never did."""
    import time
    import urllib.request

    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/api/meta", timeout=2.0) as resp:
                if resp.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.3)
    return False


def plan(sweep: Any, host: str, port: int | None, serve: bool = True) -> Dashboard | None:
    """The dashboard for `sweep`'s study, or None after one line saying why there is none.
    Refusal (exit 2) for a host beyond loopback, checked before anything else."""
    refuse_host(host)
    found = study_of(sweep)
    if found is None:
        why = (
            "no sweep in this experiment"
            if sweep is None
            else f"sweep {sweep.info.run_name} has no stored Optuna study (a grid sweep, or a "
            "study kept in memory)"
        )
        print(f"dashboard: {why}: no dashboard", file=sys.stderr)
        return None
    if serve:
        try:
            import optuna_dashboard  # noqa: F401
        except ImportError:
            print(
                "dashboard: optuna-dashboard is not installed (pip install -e . installs it): "
                "no dashboard",
                file=sys.stderr,
            )
            return None
    name, storage = found
    try:
        sid = study_id(storage, name)
    except Refusal as ex:
        print(f"dashboard: {ex}: no dashboard", file=sys.stderr)
        return None
    if serve and port:
        taken = port_taken(host, port)
        if taken:
            raise Refusal(f"--dashboard-port {port}: {taken}; give another --dashboard-port")
    port = port or (free_port(host) if serve else LINKS_ONLY_PORT)
    command = [sys.executable, "-m", "sporeflow.entry.study_dashboard"]
    command += ["--host", host, "--port", str(port)]
    return Dashboard(command, {STORAGE_ENV: storage}, base_url(host, port), link(host, port, sid))


def read_only(app, port: int):
    """`app` answering only GET/HEAD, and only requests whose Host names loopback."""
    hosts = {f"{name}:{port}" for name in ("127.0.0.1", "localhost", "[::1]")}

    def guarded(environ, start_response):
        if environ.get("HTTP_HOST", "") not in hosts:
            start_response("403 Forbidden", [("Content-Type", "text/plain")])
            return [b"only 127.0.0.1 and localhost are served\n"]
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Content-Type", "text/plain")])
            return [b"read-only: sporeflow ui never changes a study\n"]
        return app(environ, start_response)

    return guarded


def serve(host: str, port: int, storage: str) -> None:
    """The child: optuna-dashboard's WSGI app, read-only, threaded, no line per request."""
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    import optuna_dashboard

    class Quiet(WSGIRequestHandler):
        def log_message(self, format, *args):  # noqa: A002 - the base class's name
            pass

    class Threaded(ThreadingMixIn, WSGIServer):
        daemon_threads = True

    app = read_only(optuna_dashboard.wsgi(storage), port)
    with make_server(host, port, app, server_class=Threaded, handler_class=Quiet) as server:
        server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sporeflow.entry.study_dashboard")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args(argv)
    refuse_host(args.host)
    storage = os.environ.get(STORAGE_ENV)
    if not storage:
        print(f"{STORAGE_ENV}: missing (the study's storage URL)", file=sys.stderr)
        return 2
    try:
        serve(args.host, args.port, storage)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
