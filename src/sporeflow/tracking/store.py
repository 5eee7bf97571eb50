"""The MLflow store, spoken to directly: reads, and the writes the journal's writer applies.

The training process never writes through this module (it journals, tracking.tracker); it only
reads here (stage-1 reuse, resume), and only when it must, so MLflow is not imported before a
plain job's first step. A sqlite store busy with another process's write ("database is
locked") is retried with back-off; other failures raise `StoreError` to the caller, who
decides (the writer retries for as long as its run lives; a read falls back to "not found").
Several processes may open one fresh sqlite store at once: its creation (schema migration,
experiment) happens under a file lock beside the database (tracking.sqlite_store builds it).

Store: `tracking.uri`, else $MLFLOW_TRACKING_URI, else `sqlite:///<launch dir>/mlflow.db` with
artifacts in `<launch dir>/mlartifacts` (absolute), so `mlflow ui` started there shows all.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing, contextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from sporeflow.core.names import HOST_TAG, PID_TAG, PROCESS_START_TAG, RUN_KEY_TAG
from sporeflow.core.uris import (
    database_lock,
    database_problem,
    is_database,
    redacted,
    sqlite_file,
    sqlite_uri,
    store_uri_problem,
)
from sporeflow.storage.files import unwritable
from sporeflow.storage.locks import exclusive
from sporeflow.tracking.sqlite_store import create_sqlite_store

log = logging.getLogger(__name__)

T = TypeVar("T")
# MLflow's limits (mlflow.utils.validation, and its runs table's name column), written here so
# a check before work imports no MLflow; held to MLflow's own by tests/unit/test_refusals.py
# (test_mlflow_s_limits_are_the_ones_checked_before_work).
MAX_EXPERIMENT_NAME_LENGTH = 500
MAX_RUN_NAME_LENGTH = 250  # runs.name is VARCHAR(250): a database store refuses a longer one
MAX_KEY_LENGTH = 250  # a param's or tag's key
MAX_PARAM_LENGTH = 6000  # a param's value
MAX_TAG_LENGTH = 8000  # a tag's value
BATCH_LIMIT = 1000  # metrics per log_batch call (MLflow's limit)
PARAM_BATCH_LIMIT = 100
BUSY_RETRIES = (0.1, 0.2, 0.5, 1.0, 2.0, 4.0)  # seconds between tries of a busy sqlite store
# A store's answers that no retry changes: a bad value, a changed param, and a login that may
# not write (401/403: a viewer's job on a team server); the record is kept and counted.
REFUSALS = (
    "INVALID_PARAMETER_VALUE",
    "BAD_REQUEST",
    "INVALID_STATE",
    "PERMISSION_DENIED",
    "UNAUTHENTICATED",
)
HTTP_TIMEOUT_S = "10"  # one request to a tracking server; the writer retries on its own


class StoreError(Exception):
    """The store could not be reached or refused the call (the message says which)."""


class Rejected(StoreError):
    """The store answered and refused the record itself (retrying cannot help)."""


def default_uri(launch_dir: Path) -> str:
    return sqlite_uri(Path(launch_dir).resolve() / "mlflow.db")


def resolve_uri(configured: str | None, launch_dir: Path) -> str:
    return configured or os.environ.get("MLFLOW_TRACKING_URI") or default_uri(launch_dir)


def default_artifact_root(uri: str, launch_dir: Path) -> Path | None:
    return Path(launch_dir).resolve() / "mlartifacts" if uri == default_uri(launch_dir) else None


def flatten(
    tree: Mapping[str, Any], prefix: str = "", limit: int | None = MAX_PARAM_LENGTH
) -> dict[str, str]:
    """{"optimizer": {"lr": 0.1}} -> {"optimizer.lr": "0.1"}; values cut to MLflow's limit
    (`limit=None`: whole, for the check that refuses an over-long one before work)."""
    flat: dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}.", limit))
        else:
            flat[name] = str(getattr(value, "value", value))[:limit]
    return flat


@contextmanager
def store_lock(uri: str):
    """Hold an exclusive lock on `<db>.lock` (sqlite) or an advisory lock (PostgreSQL) while a
    store is created or migrated, so concurrent first runs do not race MLflow's schema creation
    ("table ... already exists")."""
    db = sqlite_file(uri)
    if db is None:
        with database_lock(uri, "mlflow tables"):  # PostgreSQL: an advisory lock
            yield
        return
    with exclusive(db.with_name(db.name + ".lock")):
        yield


def _import_client(uri: str) -> None:
    """Import MLflow's client (and, for a database, its SQLAlchemy store, whose mappers take
    seconds to configure) before `store_lock`: under load a writer holding the lock while it
    imports kept every other job's writer waiting."""
    import mlflow.tracking

    if not uri.startswith(("http://", "https://")):
        import mlflow.store.tracking.sqlalchemy_store  # noqa: F401


def process_tags(me: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Which process writes a run: how a later look tells a run whose process died from a live one."""
    from sporeflow.core.processes import this_process

    me = me or this_process()
    return {
        PID_TAG: str(me["pid"]),
        HOST_TAG: str(me["host"]),
        PROCESS_START_TAG: repr(me["started"]),
    }


def _is_busy(ex: BaseException) -> bool:
    return "database is locked" in str(ex)


def _lost_a_race(ex: BaseException) -> bool:
    """Another process inserted the same row between MLflow's look for it and its insert
    (`log_inputs` looks for the run's data set, then adds it: jobs started together on one
    store log the same data set at once). Trying again finds that row and uses it."""
    text = str(ex)
    return "UNIQUE constraint failed" in text or "duplicate key value violates unique" in text


def _is_rejection(ex: BaseException) -> bool:
    """The store answered with a refusal of the request itself (bad value, changed param), or
    the record cannot be applied however often it is tried (a file it names is gone, a bug)."""
    if isinstance(ex, (TypeError, AttributeError, KeyError, FileNotFoundError)):
        return True
    code = getattr(ex, "error_code", "")
    return code in REFUSALS and not _is_busy(ex)


def server_problem(uri: str, timeout: float = 3.0) -> str | None:
    """None when an http(s) tracking server answers its health check; otherwise why not."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout) as resp:
            return None if resp.status == 200 else f"HTTP {resp.status}"
    except (urllib.error.URLError, OSError) as ex:
        return str(getattr(ex, "reason", ex))


def store_refusal(configured: str | None, experiment: str | None = None) -> str | None:
    """Why a store cannot be used, in one line naming the key and the URI without its password:
    a database that does not connect or take the credentials, or a server that answers but
    refuses this machine's login (no journal makes either right). None otherwise; a server
    that does not answer is not refused: its records wait in the journal."""
    uri = configured or os.environ.get("MLFLOW_TRACKING_URI") or ""
    key = "tracking.uri" if configured else "MLFLOW_TRACKING_URI"
    problem = store_uri_problem(uri) if uri else None
    if problem:
        return f"{key}={redacted(uri)}: {problem}"
    if is_database(uri):
        problem = database_problem(uri)
        return f"{key}={redacted(uri)}: cannot connect: {problem}" if problem else None
    if uri.startswith(("http://", "https://")):
        problem = login_problem(uri) or (experiment and write_problem(uri, experiment))
        return f"{key}={redacted(uri)}: {problem}" if problem else None
    return None


def too_long(value: str, limit: int) -> str | None:
    """Why MLflow will refuse (or cut) `value`, in words that follow `key=...: `; None if it fits."""
    if len(value) <= limit:
        return None
    return f"{len(value)} characters; MLflow keeps at most {limit}"


def shown(value: str, width: int = 60) -> str:
    """A value short enough for a one-line refusal: an over-long one cut, marked with ..."""
    return value if len(value) <= width else value[:width] + "..."


def experiment_refusal(uri: str, name: str) -> str | None:
    """Why runs cannot be created in experiment `name` of the store at `uri` (resolved: the
    default sqlite file included), in words that follow `tracking.experiment_name=...: `:
    it was deleted (MLflow keeps a deleted experiment's name and refuses runs in it). None when
    it is active, does not exist yet, or the store cannot be read now (the journal waits)."""
    found = _experiment_state(uri, name)
    if found is None or found[1] != "deleted":
        return None
    return f"{deleted_experiment_line(uri, found[0])} or choose another tracking.experiment_name"


def deleted_experiment_line(uri: str, experiment_id: str) -> str:
    """What a deleted experiment says wherever it stops a command (a job before work, the
    writer, `sporeflow sync`: records journalled before it was deleted wait for its restore,
    not refused one by one)."""
    return (
        f"experiment {experiment_id} was deleted in the MLflow store {redacted(uri)}; "
        f"restore it (MLFLOW_TRACKING_URI={redacted(uri)} mlflow experiments restore "
        f"--experiment-id {experiment_id})"
    )


def deleted_run_line(uri: str, ref: str, run_id: str) -> str:
    """What a deleted run says wherever it stops a command (a resume before work, `sporeflow
    sync`, the writer's problem line), each adding what to do after: MLflow keeps a deleted run
    and takes no record for it until it is restored."""
    named = f"run {ref}" if ref == run_id else f"run {ref} (MLflow run {run_id})"
    return (
        f"{named} was deleted in the MLflow store {redacted(uri)}; restore it "
        f"(MLFLOW_TRACKING_URI={redacted(uri)} mlflow runs restore --run-id {run_id}, or "
        "MlflowClient().restore_run)"
    )


def run_refusal(uri: str, ref: str) -> str | None:
    """Why the run named `ref` (an MLflow id, or the journal key its writer tagged it with)
    cannot take records: it was deleted (deleted_run_line). None when it is active, not in the
    store (yet), or the store cannot be read now. A sqlite file or database is read directly;
    a server is not asked (its writer says it)."""
    found = _sql_state(uri, RUN_STATE_SQL, {"ref": ref, "tag": RUN_KEY_TAG})
    if found is None or found[1] != "deleted":
        return None
    return deleted_run_line(uri, ref, found[0])


def _experiment_state(uri: str, name: str) -> tuple[str, str] | None:
    """(id, lifecycle stage) of experiment `name`, read the cheapest way the store allows: a
    sqlite file with sqlite3 (no MLflow import: a plain job's trainer never imports it), a
    database with SQLAlchemy, a server with one REST call. None if not found or not readable."""
    if uri.startswith(("http://", "https://")):
        return None if server_problem(uri) else _server_experiment_state(uri, name)
    return _sql_state(uri, EXPERIMENT_STATE_SQL, {"name": name})


EXPERIMENT_STATE_SQL = "SELECT experiment_id, lifecycle_stage FROM experiments WHERE name = :name"
RUN_STATE_SQL = (  # a run by id, or by the journal key its writer tagged it with
    "SELECT run_uuid, lifecycle_stage FROM runs WHERE run_uuid = :ref UNION ALL "
    "SELECT runs.run_uuid, runs.lifecycle_stage FROM runs JOIN tags "
    "ON tags.run_uuid = runs.run_uuid WHERE tags.key = :tag AND tags.value = :ref"
)


def _sql_state(uri: str, sql: str, values: dict[str, str]) -> tuple[str, str] | None:
    """The first row (two columns) of `sql` on a sqlite file or database store; None when
    there is none, the store is neither, or it cannot be read now."""
    db = sqlite_file(uri)
    if db is not None:
        return _sqlite_row(db, sql, values)
    if is_database(uri):
        return _database_row(uri, sql, values)
    return None


def _sqlite_row(db: Path, sql: str, values: dict[str, str]) -> tuple[str, str] | None:
    import sqlite3

    if not db.is_file():
        return None
    try:
        with closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)) as con:
            row = con.execute(sql, values).fetchone()
    except sqlite3.Error:
        return None  # not an MLflow store yet, or busy: the writer's own checks apply
    return (str(row[0]), str(row[1])) if row else None


def _database_row(uri: str, sql: str, values: dict[str, str]) -> tuple[str, str] | None:
    import sqlalchemy
    from sqlalchemy.exc import SQLAlchemyError

    try:
        engine = sqlalchemy.create_engine(uri, poolclass=sqlalchemy.pool.NullPool)
        with engine.connect() as con:
            row = con.execute(sqlalchemy.text(sql), values).fetchone()
    except (SQLAlchemyError, ModuleNotFoundError, ValueError):
        return None
    return (str(row[0]), str(row[1])) if row else None


def sqlite_refusal(uri: str, launch_dir: Path) -> str | None:
    """Why a sqlite store cannot take this job's records, in words that follow
    `<key>=<uri>: `: its file (or its folder: sqlite writes its rollback journal beside it, a
    new store is made there) or the default store's artifact folder cannot be written. None
    when it can, or the store is not a sqlite file. MLflow would open a read-only file and fail
    at its first write, in the writer, after the training."""
    db = sqlite_file(uri)
    if db is None:
        return None
    places = [db]
    artifacts = default_artifact_root(uri, launch_dir)
    if artifacts is not None:
        places.append(artifacts)
    for place in places:
        problem = unwritable(place)
        if problem:
            what = "" if place == db else "its artifact folder "
            return (
                f"{what}{place} cannot be written ({problem}), so none of this job's records "
                "could be kept: give a store it can write (tracking.uri=sqlite:///<a writable "
                "folder>/mlflow.db) or tracking.enabled=false"
            )
    return None


def _server_experiment_state(uri: str, name: str, timeout: float = 5.0) -> tuple[str, str] | None:
    import urllib.parse

    query = urllib.parse.urlencode({"experiment_name": name})
    try:
        found = _server_json(uri, f"/api/2.0/mlflow/experiments/get-by-name?{query}", timeout)
        return str(found["experiment"]["experiment_id"]), found["experiment"]["lifecycle_stage"]
    except (OSError, ValueError, KeyError):
        return None  # urllib's HTTPError is an OSError: no such experiment, or no answer


def _server_json(uri: str, path: str, timeout: float) -> dict:
    """GET `path` of the server with this machine's MLflow login (env first, then
    ~/.mlflow/credentials), as JSON; urllib's HTTPError or OSError when it does not answer 200."""
    import base64
    import urllib.request

    from mlflow.utils.credentials import read_mlflow_creds

    creds = read_mlflow_creds()
    request = urllib.request.Request(f"{uri.rstrip('/')}{path}")
    if creds.username:
        token = base64.b64encode(f"{creds.username}:{creds.password or ''}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return json.loads(answer.read() or b"{}")


def login_problem(uri: str, timeout: float = 5.0) -> str | None:
    """Why a server that answers refuses this machine's requests (HTTP 401 or 403), saying
    where MLflow takes the login from; None when it takes them or does not answer at all."""
    import urllib.error

    from mlflow.utils.credentials import read_mlflow_creds

    if server_problem(uri, timeout):
        return None
    try:
        _server_json(uri, "/api/2.0/mlflow/experiments/search?max_results=1", timeout)
    except urllib.error.HTTPError as ex:
        return _login_refusal(ex.code, read_mlflow_creds().username)
    except (OSError, ValueError):
        pass
    return None


def write_problem(uri: str, experiment: str, timeout: float = 5.0) -> str | None:
    """Why this machine's login may read but not write runs into `experiment` on a server
    with logins (MLflow's effective permission on it lacks can_update), before any work. None
    when it may, when the server has no logins, or when the experiment does not exist yet (a
    login that may not create it is refused by the server when the run starts, and its
    records are counted as refused)."""
    import urllib.error
    import urllib.parse

    from mlflow.utils.credentials import read_mlflow_creds

    user = read_mlflow_creds().username
    if not user:
        return None
    query = urllib.parse.urlencode({"experiment_name": experiment})
    try:
        found = _server_json(uri, f"/api/2.0/mlflow/experiments/get-by-name?{query}", timeout)
        experiment_id = found["experiment"]["experiment_id"]
        query = urllib.parse.urlencode(
            {"username": user, "resource_type": "experiment", "resource_id": experiment_id}
        )
        permission = _server_json(uri, f"/api/3.0/mlflow/users/permissions/get?{query}", timeout)
    except (urllib.error.HTTPError, OSError, ValueError, KeyError):
        return None  # no such experiment yet, or a server without logins
    name = permission.get("permission", "")
    if name in ("READ", "USE", "DENY", "NO_PERMISSIONS"):  # MLflow's, without can_update
        return (
            f"user {user!r} may read but not write runs in experiment {experiment!r} "
            f"(permission {name}): train under a trainer's login (MLFLOW_TRACKING_USERNAME), "
            "or ask the server's admin to make this user a trainer"
        )
    return None


def _login_refusal(status: int, username: str | None) -> str | None:
    where = "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or ~/.mlflow/credentials)"
    if status == 401 and not username:
        return f"the server asks for a login (HTTP 401): set {where}"
    if status == 401:
        return f"the server refused the login of user {username!r} (HTTP 401): check {where}"
    if status == 403:
        return f"user {username!r} may not read this server's runs (HTTP 403)"
    return None


class Store:
    """One experiment of one MLflow store, with busy-retries and clear failures."""

    def __init__(self, uri: str, experiment_name: str, artifact_root: Path | None = None):
        self.uri = uri
        self.experiment_name = experiment_name
        self.artifact_root = Path(artifact_root) if artifact_root else None
        self._client: Any = None
        self.experiment_id: str | None = None

    @property
    def client(self) -> Any:
        self.connect()
        return self._client

    def preload(self) -> None:
        """Import MLflow's client now (seconds), while this process waits for something else:
        the first read then opens the store without it."""
        _import_client(self.uri)

    def call(self, what: str, fn: Callable[[], T], busy_retries=BUSY_RETRIES) -> T:
        """fn(), retried while a sqlite store is busy or another writer won an insert race;
        StoreError (or Rejected) otherwise."""
        for pause in (*busy_retries, None):
            try:
                return fn()
            except Exception as ex:
                if _lost_a_race(ex) and pause is not None:
                    time.sleep(pause * random.uniform(0.5, 1.5))
                    continue
                if _is_rejection(ex):
                    raise Rejected(f"{what}: {ex}") from ex
                if not _is_busy(ex) or pause is None:
                    raise StoreError(
                        f"{what} against {self.uri}: {' '.join(str(ex).split())[:300]}"
                    ) from ex
                time.sleep(
                    pause * random.uniform(1.0, 1.5)
                )  # jitter: concurrent jobs do not retry in step
        raise AssertionError("unreachable")

    def connect(self, create: bool = True) -> bool:
        """Open the store and (with `create`) create the experiment; False when the experiment
        does not exist and `create` is off (nothing to read). Raises StoreError."""
        if self._client is not None:
            return True
        db = sqlite_file(self.uri)
        if not create and db is not None and not db.exists():
            return False  # a reader never creates a store
        if self.uri.startswith(("http://", "https://")):
            problem = server_problem(self.uri)
            if problem:
                raise StoreError(f"connect to {self.uri}: {problem}")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", HTTP_TIMEOUT_S)

        def open_store() -> tuple[Any, str | None, str]:
            """(client, experiment id, its lifecycle stage)."""
            from mlflow.tracking import MlflowClient

            client = MlflowClient(tracking_uri=self.uri)
            found = client.get_experiment_by_name(self.experiment_name)
            if found is not None:
                return client, found.experiment_id, found.lifecycle_stage
            if not create:
                return client, None, ""
            location = None
            if self.artifact_root is not None:
                location = (self.artifact_root / self.experiment_name).as_uri()
            made = client.create_experiment(self.experiment_name, artifact_location=location)
            return client, made, "active"

        for chatty in ("mlflow.store.db.utils", "alembic"):  # "Creating initial MLflow tables..."
            logging.getLogger(chatty).setLevel(logging.WARNING)
        _import_client(self.uri)  # seconds of imports, outside the lock other writers wait on
        with store_lock(self.uri):
            if db is not None and not db.exists():
                self.call("create the store", partial(create_sqlite_store, db))
            client, experiment_id, stage = self.call("connect", open_store)
        if create and stage == "deleted":  # a write: MLflow refuses runs in it, every one
            raise StoreError(deleted_experiment_line(self.uri, str(experiment_id)))
        if experiment_id is None:
            return False
        self._client, self.experiment_id = client, experiment_id
        return True

    # -- reads ---------------------------------------------------------------------------
    def search_runs(self, filter_string: str, max_results: int = 20) -> list:
        """Runs of this experiment matching an MLflow filter, newest first."""
        if not self.connect(create=False):
            return []
        return list(
            self.call(
                "search_runs",
                lambda: self._client.search_runs(
                    [self.experiment_id],
                    filter_string,
                    max_results=max_results,
                    order_by=["attributes.start_time DESC"],
                ),
            )
        )

    def get_run(self, run_id: str) -> Any:
        """The MLflow Run, or None if the store does not know it."""
        if not self.connect(create=False):
            return None
        try:
            return self._client.get_run(run_id)
        except Exception as ex:
            if getattr(ex, "error_code", "") == "RESOURCE_DOES_NOT_EXIST":
                return None
            raise StoreError(f"get_run {run_id} against {self.uri}: {ex}") from ex

    def model_version_run_id(self, name: str, ref: str) -> str | None:
        """The run that made version `ref` (a number, or an alias: `name@ref`) of registered
        model `name`; None when the store has no such model or version, "" when the version
        names no run (registered from a path or from a logged model made outside a run)."""
        if not self.connect(create=False):
            return None

        def read() -> str | None:
            try:
                if ref.isdigit():
                    version = self._client.get_model_version(name, ref)
                else:
                    version = self._client.get_model_version_by_alias(name, ref)
                return version.run_id or ""
            except Exception as ex:
                if getattr(ex, "error_code", "") in (
                    "RESOURCE_DOES_NOT_EXIST",
                    "INVALID_PARAMETER_VALUE",
                ):
                    return None
                raise

        return self.call("get_model_version", read)

    def metric_history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        """(step, value) of one metric of a run, by step."""
        if not self.connect(create=False):
            return []
        found = self.call(
            "get_metric_history", lambda: self._client.get_metric_history(run_id, key)
        )
        return sorted((m.step, m.value) for m in found)

    def find_by_key(self, key: str) -> str | None:
        """The MLflow id of the run a journal created under `key` (None if not there yet)."""
        found = self.search_runs(f"tags.`{RUN_KEY_TAG}` = '{key}'", max_results=1)
        return found[0].info.run_id if found else None

    def deleted_by_key(self, key: str) -> str | None:
        """The MLflow id of a deleted run the journal created under `key` (None: none is):
        why a run the store does not show will never appear by waiting."""
        from mlflow.entities import ViewType

        if not self.connect(create=False):
            return None
        found = self.call(
            "search_runs",
            lambda: self._client.search_runs(
                [self.experiment_id],
                f"tags.`{RUN_KEY_TAG}` = '{key}'",
                run_view_type=ViewType.DELETED_ONLY,
                max_results=1,
            ),
        )
        return found[0].info.run_id if found else None

    # -- writes (the journal's writer) -------------------------------------------------------
    def create_run(self, name: str, tags: Mapping[str, str], start_ms: int) -> str:
        self.connect()
        run = self.call(
            "create_run",
            lambda: self._client.create_run(
                self.experiment_id, run_name=name, tags=dict(tags), start_time=start_ms
            ),
        )
        return run.info.run_id

    def log_batch(self, run_id: str, metrics=(), params=(), tags=()) -> None:
        """Metrics as (key, value, timestamp_ms, step), params and tags as (key, value)."""
        from mlflow.entities import Metric, Param, RunTag

        self.connect()
        batches: list[tuple[str, dict[str, list]]] = []
        points = [Metric(k, float(v), int(t), int(s)) for k, v, t, s in metrics]
        batches += [
            ("log_metrics", {"metrics": points[i : i + BATCH_LIMIT]})
            for i in range(0, len(points), BATCH_LIMIT)
        ]
        values = [Param(k, str(v)[:MAX_PARAM_LENGTH]) for k, v in params]
        batches += [
            ("log_params", {"params": values[i : i + PARAM_BATCH_LIMIT]})
            for i in range(0, len(values), PARAM_BATCH_LIMIT)
        ]
        if tags:
            batches.append(("set_tags", {"tags": [RunTag(k, str(v)) for k, v in tags]}))
        for what, batch in batches:
            self.call(what, partial(self._client.log_batch, run_id, **batch))

    def metric_points(self, run_id: str, key: str) -> set[tuple[str, float, int, int]]:
        """Every stored point of a metric as (key, value, timestamp_ms, step): what a replay
        checks before it sends a point again."""
        self.connect()
        found = self.call(
            "get_metric_history", lambda: self._client.get_metric_history(run_id, key)
        )
        return {(m.key, float(m.value), int(m.timestamp), int(m.step)) for m in found}

    def list_artifacts(self, run_id: str, path: str | None = None) -> list[str]:
        """The artifact paths directly under `path` of a run ([] when it has none)."""
        if not self.connect(create=False):
            return []
        found = self.call("list_artifacts", lambda: self._client.list_artifacts(run_id, path))
        return [f.path for f in found]

    def download_artifacts(self, run_id: str, path: str, dst: Path) -> Path:
        """A run's artifact (a file or a folder) copied under `dst`; its local path. MLflow's
        own progress bars stay off: they would break a refusal's one line and a job's console."""
        self.connect(create=False)
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        return Path(
            self.call(
                "download_artifacts",
                lambda: self._client.download_artifacts(run_id, path, str(dst)),
            )
        )

    def log_artifact(self, run_id: str, path: str, artifact_path: str | None) -> None:
        self.connect()
        self.call("log_artifact", lambda: self._client.log_artifact(run_id, path, artifact_path))

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        self.connect()
        self.call("log_text", lambda: self._client.log_text(run_id, text, artifact_file))

    def log_dataset(self, run_id: str, record: Mapping[str, Any]) -> None:
        """A journal `dataset` record as an MLflow dataset input (the store de-duplicates)."""
        from sporeflow.tracking.datasets import dataset_input

        self.connect()
        found = dataset_input(record)
        self.call("log_inputs", lambda: self._client.log_inputs(run_id, datasets=[found]))

    def log_model(self, run_id: str, record: Mapping[str, Any], uncertain: bool) -> None:
        """A journal `model` record as an MLflow logged model of the run; a replay after a
        writer died mid-write skips a model that is already READY."""
        from sporeflow.tracking.models import find_logged_model, log_packaged_model

        self.connect()
        experiment_id = str(self.experiment_id)
        if uncertain and self.call(
            "search_logged_models",
            lambda: find_logged_model(self._client, experiment_id, run_id, record["name"]),
        ):
            return
        self.call(
            "log_model",
            lambda: log_packaged_model(self._client, experiment_id, run_id, dict(record)),
        )

    def link_model(self, run_id: str, source_run_id: str, name: str) -> None:
        """The model `source_run_id` logged as an output of `run_id` too (idempotent); nothing
        when that run logged none (tracking.log_model=false)."""
        from mlflow.entities import LoggedModelOutput

        from sporeflow.tracking.models import find_logged_model

        self.connect()
        experiment_id = str(self.experiment_id)
        model_id = self.call(
            "search_logged_models",
            lambda: find_logged_model(self._client, experiment_id, source_run_id, name),
        )
        if model_id is None or model_id in self._model_outputs(run_id):
            return  # none logged, or linked already (a continued pipeline links it again)
        self.call(
            "log_outputs",
            lambda: self._client.log_outputs(run_id, [LoggedModelOutput(model_id, step=0)]),
        )

    def _model_outputs(self, run_id: str) -> set[str]:
        """The ids of the logged models a run lists as its outputs."""
        run = self.call("get_run", lambda: self._client.get_run(run_id))
        outputs = getattr(run, "outputs", None)
        return {o.model_id for o in getattr(outputs, "model_outputs", None) or []}

    def register_model(self, run_id: str, record: Mapping[str, Any]) -> str | None:
        """A journal `register` record: a version of the model the source run logged, unless
        this run registered it already (a replay); returns the version (None: no model)."""
        from sporeflow.tracking.models import register

        self.connect()
        experiment_id = str(self.experiment_id)
        with _global_tracking_uri(self.uri):  # MLflow's registry looks up models:/m-... there
            return self.call(
                "register_model",
                lambda: register(self._client, experiment_id, run_id, dict(record)),
            )

    def set_status(self, run_id: str, status: str, end_ms: int | None = None) -> None:
        self.connect()
        if status == "RUNNING":
            self.call("update_run", lambda: self._client.update_run(run_id, status="RUNNING"))
        else:
            self.call(
                "set_terminated",
                lambda: self._client.set_terminated(run_id, status, end_time=end_ms),
            )

    def delete_tags(self, run_id: str, keys) -> None:
        """Remove those of `keys` the run has (a resumed run's reasons for ending before)."""
        self.connect()
        run = self.call("get_run", lambda: self._client.get_run(run_id))
        for key in (k for k in keys if k in run.data.tags):
            self.call("delete_tag", partial(self._client.delete_tag, run_id, key))

    def last_steps(self, run_id: str) -> dict[str, int]:
        """Each metric of a run -> the last step it has a point at (a continued run's history
        goes on after it)."""
        self.connect(create=False)
        run = self.call("get_run", lambda: self._client.get_run(run_id))
        found = {}
        for key in run.data.metrics:
            history = self.call(
                "get_metric_history", partial(self._client.get_metric_history, run_id, key)
            )
            found[key] = max((int(m.step) for m in history), default=-1)
        return found

    def set_experiment_tag(self, key: str, value: str) -> None:
        self.connect()
        experiment_id = str(self.experiment_id)
        self.call(
            "set_experiment_tag",
            lambda: self._client.set_experiment_tag(experiment_id, key, value),
        )

    def delete_run(self, run_id: str) -> None:
        self.connect()
        self.call("delete_run", lambda: self._client.delete_run(run_id))


@contextmanager
def _global_tracking_uri(uri: str) -> Iterator[None]:
    """MLflow's model registry resolves a `models:/<model id>` source through the process's
    global tracking URI, not the client's: without this a version is registered against the
    `mlflow.db` of whatever folder the writer runs in (found registering from another folder)."""
    import mlflow

    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(previous)
