"""`sporeflow server`: a team's MLflow server that lets in only the team.

Anyone who reaches an MLflow server without a login reads every run and artifact, writes runs
and replaces artifacts (the weights other machines reuse). So a server that listens beyond
loopback runs MLflow's basic-auth app: every request names a user (MLflow clients send
MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD or ~/.mlflow/credentials), users read
everything, and write or create experiments and models only with the trainer role (`sporeflow
server add-user NAME`; `--viewer` leaves it out); a recorded SHA-256 is written once (the
login check is entry/team_auth.py). `--insecure` opts out, with a warning line.

No secret reaches a command line (`ps` shows every process's arguments to every local user):
the database URI goes to `mlflow server` as MLFLOW_BACKEND_STORE_URI, the admin's password comes
from SPOREFLOW_SERVER_ADMIN_PASSWORD or a file, new users' passwords from a prompt or stdin.
The server's own files (a generated Flask secret key, the auth app's config and its user
database) are kept 0600 in `--home`.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import secrets
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from sporeflow.core.uris import (
    database_problem,
    is_database,
    redacted,
    sqlite_uri,
    without_login,
)
from sporeflow.entry.team_auth import TRAINER_ROLE

ADMIN = "admin"
ADMIN_PASSWORD_ENV = "SPOREFLOW_SERVER_ADMIN_PASSWORD"
DB_ENV = "MLFLOW_BACKEND_STORE_URI"  # what `mlflow server` reads when --backend-store-uri is absent
WORKSPACE = "default"  # MLflow's workspace when workspaces are not set up
AUTH_INI = """\
[mlflow]
default_permission = READ
database_uri = {database}
admin_username = {admin}
authorization_function = sporeflow.entry.team_auth:authenticate_request
auth_cache_ttl_seconds = {cache_s}
"""
# A password is checked with scrypt (about 0.17 s of CPU here) on every request unless the
# check is cached: a job's writer sends hundreds. Cached for a minute per server worker: a
# changed password or a removed user still gets in for up to that long (docs/team.md).
AUTH_CACHE_S = 60


class Refusal(Exception):
    """A server command that must not start: one line for the user, exit 2."""


@dataclass(frozen=True)
class ServerPlan:
    """What `mlflow server` is started with: its arguments (no secret among them), the
    environment it gets on top of ours, and whether logins are on."""

    command: list[str]
    env: dict[str, str]
    auth: bool


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach `host` (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def refuse_password_on_argv(key: str, uri: str | None, whole_uri_env: str) -> None:
    """Refusal when `uri`, given as option `key`, holds a password: `ps` shows every process's
    arguments to every user of the machine. The line says where the password goes instead,
    as `sporeflow server` and MLflow read it: a database's from PGPASSWORD or ~/.pgpass (or
    the whole URI in the environment variable `whole_uri_env`), a server's login from
    MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD."""
    if not uri or urlsplit(uri).password is None:
        return
    if uri.startswith(("http://", "https://")):
        instead = (
            "set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or ~/.mlflow/credentials)"
        )
    else:
        instead = f"set PGPASSWORD (or ~/.pgpass), or give the whole URI in {whole_uri_env}"
    raise Refusal(
        f"{key} {redacted(uri)}: a password on the command line is visible to every user of "
        f"this machine (ps); leave it out and {instead}"
    )


def database_uri(args: argparse.Namespace) -> str:
    """The store's database: --db without a password (PGPASSWORD or ~/.pgpass hold it) or the
    whole URI in MLFLOW_BACKEND_STORE_URI. A password on --db is refused: `ps` shows it."""
    refuse_password_on_argv("--db", args.db, DB_ENV)
    uri = args.db or os.environ.get(DB_ENV, "")
    key = "--db" if args.db else DB_ENV
    if not uri:
        raise Refusal(f"--db: missing; give postgresql://user@host:port/db (or set {DB_ENV})")
    if not is_database(uri):
        raise Refusal(
            f"{key} {redacted(uri)}: not a database URI; give postgresql://user@host:port/db"
        )
    refuse_unreachable(key, uri)
    return uri


def refuse_unreachable(key: str, uri: str) -> None:
    """Refusal, within seconds, when the store at `uri` (named by `key`) does not answer: a
    database that does not connect or take the credentials, a tracking server that does not
    answer its health check or refuses this machine's login. MLflow's own clients retry for
    minutes first, without a word (SQLAlchemy over 60 s, HTTP seven times with back-off).
    A sqlite file is not probed: it is made on first use."""
    if is_database(uri):
        problem = database_problem(uri)
        if problem:
            raise Refusal(f"{key}={redacted(uri)}: cannot connect: {problem}")
        return
    if not uri.startswith(("http://", "https://")):
        return
    from sporeflow.tracking.store import login_problem, server_problem

    plain = without_login(uri)  # MLflow takes a login from MLFLOW_TRACKING_USERNAME/_PASSWORD
    problem = server_problem(plain, timeout=5.0)
    if problem:
        raise Refusal(
            f"{key}={redacted(uri)}: the tracking server does not answer ({problem}); start it, "
            "or give the address it serves at"
        )
    refused = None if urlsplit(uri).password else login_problem(plain)
    if refused:
        raise Refusal(f"{key}={redacted(uri)}: {refused}")


def admin_password(args: argparse.Namespace) -> str | None:
    """The admin's password from --admin-password-file or SPOREFLOW_SERVER_ADMIN_PASSWORD,
    refused here (one line, never the password) when MLflow's password rules would refuse it
    as the server starts (a traceback, after the port was taken)."""
    from mlflow.exceptions import MlflowException
    from mlflow.utils.validation import _validate_password  # MLflow's own rules

    if args.admin_password_file:
        path = Path(args.admin_password_file)
        if not path.is_file():
            raise Refusal(f"--admin-password-file {path}: no such file")
        password, where = path.read_text().strip() or None, f"--admin-password-file {path}"
    else:
        password, where = os.environ.get(ADMIN_PASSWORD_ENV) or None, ADMIN_PASSWORD_ENV
    try:
        if password is not None:
            _validate_password(password)
    except MlflowException as ex:
        raise Refusal(f"{where}: the admin's password is refused: {ex.message}") from None
    return password


def private_file(path: Path, make) -> str:
    """The content of a file only its owner reads, made once by `make()`."""
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(make())
    return path.read_text().strip()


def auth_env(args: argparse.Namespace, home: Path) -> dict[str, str]:
    """The auth app's environment: its config and user database in `home`, the Flask secret
    key kept there, and the admin's password the first time (MLflow creates the admin from it
    once and ignores it afterwards)."""
    users = home / "users.db"
    config = home / "basic_auth.ini"
    password = admin_password(args)  # checked before anything is made in `home`
    made = users.is_file() and users.stat().st_size > 0  # a server ran here and made its admin
    if password is None and not made:
        raise Refusal(
            f"--host {args.host}: logins are on and there is no admin yet: set "
            f"{ADMIN_PASSWORD_ENV} or give --admin-password-file (never the password itself)"
        )
    ini = AUTH_INI.format(database=sqlite_uri(users), admin=ADMIN, cache_s=AUTH_CACHE_S)
    config.unlink(missing_ok=True)  # written afresh: a server made by an older sporeflow
    private_file(config, lambda: ini)  # gets today's login check
    private_file(users, str)  # an empty SQLite database, 0600: MLflow fills it (password hashes)
    env = {
        "MLFLOW_AUTH_CONFIG_PATH": str(config),
        "MLFLOW_FLASK_SERVER_SECRET_KEY": private_file(
            home / "secret_key", lambda: secrets.token_hex(32)
        ),
    }
    if password is not None:
        env["MLFLOW_AUTH_ADMIN_PASSWORD"] = password
    return env


def allowed_hosts(host: str, port: int) -> str:
    """The Host headers the server answers (MLflow's check against DNS rebinding): the
    address it serves, this machine's names and addresses, and loopback."""
    names = {"localhost", "127.0.0.1", "[::1]"}
    if host in ("0.0.0.0", "::"):
        fqdn = socket.getfqdn()
        names |= {socket.gethostname(), fqdn}
        try:
            names |= set(socket.gethostbyname_ex(fqdn)[2])
        except OSError:
            pass
    else:
        names.add(host)
    return ",".join(sorted(n for name in names for n in (name, f"{name}:{port}")))


def plan(args: argparse.Namespace, mlflow: str) -> ServerPlan:
    """Check everything, then say how `mlflow server` is started; Refusal when it must not."""
    uri = database_uri(args)
    auth = args.auth or not (is_loopback(args.host) or args.insecure)
    env = {DB_ENV: uri}
    if auth:
        env.update(auth_env(args, Path(args.home).resolve()))
    artifacts = Path(args.artifacts).resolve()
    artifacts.mkdir(parents=True, exist_ok=True, mode=0o750)
    extra = args.mlflow_args[1:] if args.mlflow_args[:1] == ["--"] else args.mlflow_args
    command = [mlflow, "server", "--artifacts-destination", str(artifacts), "--serve-artifacts"]
    command += ["--host", args.host, "--port", str(args.port)]
    if auth:
        command += ["--app-name", "basic-auth"]
    if "--allowed-hosts" not in extra:
        command += ["--allowed-hosts", allowed_hosts(args.host, args.port)]
    return ServerPlan(command + extra, env, auth)


def announce(args: argparse.Namespace, server: ServerPlan) -> None:
    """Where the server is and how machines reach it; a warning when anyone may get in."""
    shown = args.host if args.host not in ("0.0.0.0", "::") else "<this machine's name>"
    db = redacted(server.env[DB_ENV])
    print(
        f"serving {db} with artifacts in {Path(args.artifacts).resolve()} at "
        f"http://{args.host}:{args.port} (Ctrl-C stops it); on every machine: "
        f"tracking.uri=http://{shown}:{args.port}",
        file=sys.stderr,
    )
    if server.auth:
        print(
            f"logins on: users are added with `sporeflow server add-user NAME --url "
            f"http://{shown}:{args.port}`; clients set MLFLOW_TRACKING_USERNAME and "
            "MLFLOW_TRACKING_PASSWORD",
            file=sys.stderr,
        )
    elif not is_loopback(args.host):
        print(
            f"warning: --insecure: anyone who reaches {args.host}:{args.port} reads and writes "
            "every run and artifact",
            file=sys.stderr,
        )


def read_new_password(name: str) -> str:
    """A new user's password: typed twice at a terminal, else the first line of stdin."""
    if not sys.stdin.isatty():
        return sys.stdin.readline().strip()
    import getpass

    first = getpass.getpass(f"password for {name}: ")
    if getpass.getpass("again: ") != first:
        raise Refusal(f"{name}: the two passwords differ")
    return first


def add_user(args: argparse.Namespace) -> None:
    """Create user NAME on a running server (as the admin: MLFLOW_TRACKING_USERNAME and
    MLFLOW_TRACKING_PASSWORD) with the trainer role, or only the default READ (--viewer)."""
    from mlflow.exceptions import MlflowException
    from mlflow.server.auth.client import AuthServiceClient

    password = read_new_password(args.name)
    if not password:
        raise Refusal(f"{args.name}: an empty password (give it on stdin or at the prompt)")
    client = AuthServiceClient(args.url)
    try:
        client.create_user(args.name, password)
        if not args.viewer:
            client.assign_role(args.name, trainer_role(client))
    except MlflowException as ex:
        raise Refusal(f"add-user {args.name} at {args.url}: {ex.message.splitlines()[0]}") from None
    role = "viewer (reads every run)" if args.viewer else f"{TRAINER_ROLE} (reads and writes runs)"
    print(f"user {args.name} added as {role}", file=sys.stderr)


def trainer_role(client) -> int:
    """The id of the role that may write runs and models, made on first use."""
    for role in client.list_roles(WORKSPACE):
        if role.name == TRAINER_ROLE:
            return role.id
    role = client.create_role(WORKSPACE, TRAINER_ROLE, "writes runs, artifacts and models")
    for resource in ("experiment", "registered_model"):
        client.add_role_permission(role.id, resource, "*", "EDIT")
    return role.id
