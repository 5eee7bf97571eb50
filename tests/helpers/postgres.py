"""A real PostgreSQL server for a test: Debian's binaries, a cluster made by initdb in a temp
dir, listening on 127.0.0.1 at a free port, run as the `postgres` user (PostgreSQL refuses
root), with a password-protected role and database; stopped and removed afterwards."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from helpers.servers import free_port

USER, PASSWORD, DATABASE = "sporeflow", "team-secret", "sporeflow"


def binaries() -> Path | None:
    """The newest /usr/lib/postgresql/<version>/bin with initdb, or None."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: p.parent.parent.name
    )
    return found[-1].parent if found else None


def unavailable() -> str | None:
    """Why this machine cannot host the server (the skip reason), or None."""
    if os.geteuid() != 0:
        return "PostgreSQL runs as its own user: the fixture needs root to start it (runuser)"
    if binaries() is None:
        return "Debian's postgresql package is not installed (.ci/run installs it)"
    if shutil.which("runuser") is None:
        return "runuser (util-linux) is missing"
    return None


class PostgresServer:
    def __init__(self) -> None:
        self.bin = binaries()
        self.root = Path(tempfile.mkdtemp(prefix="sporeflow-pg-"))
        self.data = self.root / "data"
        self.port = free_port()

    def _as_postgres(self, *cmd: str, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["runuser", "-u", "postgres", "--", *cmd],
            check=True,
            capture_output=True,
            text=True,
            **kw,
        )

    def start(self) -> PostgresServer:
        os.chmod(self.root, 0o755)
        shutil.chown(self.root, "postgres")
        password_file = self.root / "superuser.pw"
        password_file.write_text(PASSWORD + "\n")
        shutil.chown(password_file, "postgres")
        self._as_postgres(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=scram-sha-256",
            f"--pwfile={password_file}",
            "--no-sync",
        )
        self._as_postgres(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.root / "server.log"),
            "-w",
            "-o",
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c fsync=off",
            "start",
        )
        self.psql(f"CREATE ROLE {USER} LOGIN PASSWORD '{PASSWORD}'")
        self.psql(f"CREATE DATABASE {DATABASE} OWNER {USER}")
        return self

    def psql(self, sql: str, database: str = "postgres") -> str:
        return subprocess.run(
            [
                "psql",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-d",
                database,
                "-v",
                "ON_ERROR_STOP=1",
                "-At",
                "-c",
                sql,
            ],
            env={**os.environ, "PGPASSWORD": PASSWORD},
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    def uri(self, database: str = DATABASE, password: str | None = PASSWORD) -> str:
        """The database's URI; password=None: without one (the driver reads PGPASSWORD)."""
        secret = f":{password}" if password is not None else ""
        return f"postgresql://{USER}{secret}@127.0.0.1:{self.port}/{database}"

    def new_database(self, name: str) -> str:
        """A fresh database of the role (one per test that must start empty)."""
        self.psql(f"CREATE DATABASE {name} OWNER {USER}")
        return self.uri(name)

    def stop(self) -> None:
        try:
            self._as_postgres(
                str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"
            )
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
