"""Store addresses as they may be shown: a database URI's password never reaches a log line,
an error message, an MLflow tag or a file."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit, urlunsplit

# scheme://user:password@ anywhere in a text (a command line, a YAML file, a param value)
_CREDENTIALS = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@'\"]*):[^\s@/'\"]+@")


def redacted(uri: str) -> str:
    """postgresql://user:secret@host/db -> postgresql://user:***@host/db (others unchanged)."""
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def without_login(uri: str) -> str:
    """https://user:secret@host:5000/x -> https://host:5000/x: an address to open or link to,
    its login left to where MLflow reads it (MLFLOW_TRACKING_USERNAME/_PASSWORD)."""
    parts = urlsplit(uri)
    if parts.username is None and parts.password is None:
        return uri
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def redact_text(text: str) -> str:
    """Every URI password in a text replaced by *** (what MLflow records of a config)."""
    return _CREDENTIALS.sub(r"\1:***@", text)


SQLITE = "sqlite:///"


def sqlite_uri(path: str | Path) -> str:
    """The sqlite:/// URI of a database file, its path %-encoded: SQLAlchemy (MLflow's and
    Optuna's store) reads '?' as the start of a query and '#' as a fragment, so an unencoded
    launch folder named 'x y?#' would put the store in a file named 'x y'."""
    return SQLITE + quote(str(path), safe="/")


def sqlite_file(uri: str) -> Path | None:
    """The database file of a sqlite:/// URI, %-decoded as SQLAlchemy decodes it (None: another
    store)."""
    return Path(unquote(uri[len(SQLITE) :])) if uri.startswith(SQLITE) else None


STORE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql", "http", "https")
ALLOWED_STORES = (
    "sqlite:///<path>, postgresql://<user>@<host>/<db> (mysql://, mssql:// alike), "
    "http(s)://<host>:<port>"
)


def store_uri_problem(uri: str) -> str | None:
    """Why `uri` is not an MLflow store address sporeflow can write to, in words that follow
    `key=uri: `; None when it is one. Only its form is checked here (no connection): a file
    name, a scheme MLflow does not store runs in, an http address with a space or no host."""
    scheme = uri.split("://", 1)[0].split("+", 1)[0].lower() if "://" in uri else ""
    if scheme not in STORE_SCHEMES:
        hint = (
            f" (did you mean sqlite:///{uri}?)" if uri.endswith(".db") and "://" not in uri else ""
        )
        return f"not a store URI; allowed: {ALLOWED_STORES}{hint}"
    if any(c.isspace() for c in uri):
        return "a store URI may not contain a space; quote nothing into it, or %20-encode it"
    if scheme == "sqlite":
        path = uri[len("sqlite://") :]
        return None if path.startswith("/") and len(path) > 1 else "needs a path: sqlite:///<path>"
    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as ex:
        return f"not a valid URI ({ex})"
    if not parts.hostname:
        return f"needs a host: {scheme}://<host>..."
    return None


def is_database(uri: str) -> bool:
    """A store spoken to as a database server (postgresql://, mysql://...), not a file or HTTP."""
    scheme = uri.split("://", 1)[0] if "://" in uri else ""
    return bool(scheme) and not scheme.startswith(("sqlite", "http", "file"))


def database_problem(uri: str, timeout_s: int = 5) -> str | None:
    """None when a database URI connects and authenticates; otherwise why not, in one line and
    without the password (a wrong password, a refused port, no such database, no driver)."""
    import sqlalchemy
    from sqlalchemy.exc import SQLAlchemyError

    try:
        engine = sqlalchemy.create_engine(
            uri, connect_args={"connect_timeout": timeout_s}, poolclass=sqlalchemy.pool.NullPool
        )
        with engine.connect():
            pass
    except ModuleNotFoundError as ex:
        return f"no driver for it ({ex.name}): pip install -e '.[team]' (psycopg for postgresql://)"
    except (SQLAlchemyError, ValueError) as ex:
        cause = getattr(ex, "orig", None) or ex
        lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
        text = lines[0] if lines else type(cause).__name__
        parts = urlsplit(uri)
        if parts.password:
            text = text.replace(parts.password, "***")
        return text
    return None


@contextmanager
def database_lock(uri: str, name: str) -> Iterator[None]:
    """Held by one process at a time per PostgreSQL database and `name` (an advisory lock):
    around the creation of a store's tables, which MLflow and Optuna do on first use and which
    two processes doing at once break ("duplicate key ... pg_type"). Other stores: no lock."""
    if not uri.startswith("postgresql"):
        yield
        return
    import zlib

    import sqlalchemy

    key = zlib.crc32(name.encode())
    engine = sqlalchemy.create_engine(uri, poolclass=sqlalchemy.pool.NullPool)
    with engine.connect() as conn:
        conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": key})
        try:
            yield
        finally:
            conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
