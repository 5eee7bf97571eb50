"""Store addresses as they may be shown: a database URI's password never reaches a log line,
an error message, an MLflow tag or a file."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def redacted(uri: str) -> str:
    """postgresql://user:secret@host/db -> postgresql://user:***@host/db (others unchanged)."""
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))
