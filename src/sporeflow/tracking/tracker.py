"""MLflow tracking that can never cost a training run.

Every MLflow call goes through `Tracker.call`: a sqlite store that is busy with another
process's write ("database is locked") is retried with back-off; any other failure
(unreachable server, bad URI) is logged once as a warning and tracking switches off for the
rest of the process; training carries on. A store still busy after a minute of retries (many
concurrent sweep jobs on one sqlite file) loses that one write, with a warning, and stays on. Only rank
0 constructs an enabled Tracker. Several processes may open one fresh sqlite store at once:
its creation (schema migration, experiment) happens under a file lock beside the database.

Store: `tracking.uri`, else $MLFLOW_TRACKING_URI, else `sqlite:///<launch dir>/mlflow.db` with
artifacts in `<launch dir>/mlartifacts` (absolute), so `mlflow ui` started there shows all.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

from sporeflow.storage.locks import exclusive

log = logging.getLogger(__name__)

MAX_PARAM_LENGTH = 6000  # MLflow 3's limit on a param value
BATCH_LIMIT = 1000  # metrics per log_batch call (MLflow's limit)
PARAM_BATCH_LIMIT = 100
LOCKED_RETRIES = (
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    4.0,
    8.0,
    15.0,
    30.0,
)  # seconds between tries of a busy sqlite store


def default_uri(launch_dir: Path) -> str:
    return f"sqlite:///{Path(launch_dir).resolve() / 'mlflow.db'}"


def resolve_uri(configured: str | None, launch_dir: Path) -> str:
    return configured or os.environ.get("MLFLOW_TRACKING_URI") or default_uri(launch_dir)


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """{"optimizer": {"lr": 0.1}} -> {"optimizer.lr": "0.1"}; values cut to MLflow's limit."""
    flat: dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = str(getattr(value, "value", value))[:MAX_PARAM_LENGTH]
    return flat


def sqlite_path(uri: str) -> Path | None:
    """The database file of a sqlite:/// URI (None for other stores)."""
    return Path(uri[len("sqlite:///") :]) if uri.startswith("sqlite:///") else None


@contextmanager
def store_lock(uri: str):
    """Hold an exclusive lock on `<db>.lock` while a sqlite store is created or migrated, so
    concurrent first runs do not race MLflow's schema creation ("table ... already exists")."""
    db = sqlite_path(uri)
    if db is None:
        yield
        return
    with exclusive(db.with_name(db.name + ".lock")):
        yield


def process_tags() -> dict[str, str]:
    """Which process writes a run: how a later start tells a run whose process died from a live one."""
    from sporeflow.core.processes import this_process

    me = this_process()
    return {
        "sporeflow.pid": str(me["pid"]),
        "sporeflow.host": me["host"],
        "sporeflow.process_start": repr(me["started"]),
    }


def _is_busy(ex: BaseException) -> bool:
    return "database is locked" in str(ex)


def _server_reachable(uri: str, timeout: float = 3.0) -> str | None:
    """None when an http(s) tracking server answers; otherwise why not."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout) as resp:
            return None if resp.status == 200 else f"HTTP {resp.status}"
    except (urllib.error.URLError, OSError) as ex:
        return str(getattr(ex, "reason", ex))


class Tracker:
    """Owns the MLflow client and the 'tracking still works' state shared by all its runs."""

    def __init__(
        self,
        uri: str,
        experiment_name: str,
        enabled: bool = True,
        artifact_root: Path | None = None,
        read_only: bool = False,
    ):
        self.uri = uri
        self.experiment_name = experiment_name
        self.enabled = enabled
        self.read_only = read_only  # ranks > 0: may look runs up (stage-1 reuse), never write
        self.artifact_root = artifact_root
        self._client = None
        self._experiment_id: str | None = None
        self._failed: str | None = None  # what failed when tracking switched itself off

    @property
    def client(self) -> Any:
        """The connected MlflowClient (None before `connect`, or with tracking off)."""
        return self._client

    @classmethod
    def from_config(cls, tracking_cfg: Any, launch_dir: Path, read_only: bool = False) -> Tracker:
        uri = resolve_uri(tracking_cfg.uri, launch_dir)
        artifact_root = (
            Path(launch_dir).resolve() / "mlartifacts" if uri == default_uri(launch_dir) else None
        )
        return cls(
            uri, tracking_cfg.experiment_name, tracking_cfg.enabled, artifact_root, read_only
        )

    def _disable(self, what: str, ex: BaseException) -> None:
        log.warning(
            "MLflow tracking disabled for this run (%s failed against %s: %s); training continues",
            what,
            self.uri,
            ex,
        )
        self.enabled = False
        self._failed = what

    def describe(self) -> str:
        """Where this process's records went, as the console summary says it."""
        if self._failed is not None:
            return f"MLflow off since {self._failed} failed against {self.uri}: this run is not fully recorded"
        if not self.enabled:
            return "MLflow off (tracking.enabled=false)"
        return f"MLflow {self.uri}"

    def call(self, what: str, fn: Callable[[], Any], write: bool = True) -> Any:
        if not self.enabled or (write and self.read_only):
            return None
        for pause in (*LOCKED_RETRIES, None):
            try:
                return fn()
            except Exception as ex:  # noqa: BLE001 - tracking must never end a run
                if not _is_busy(ex):
                    self._disable(what, ex)
                    return None
                if pause is None:  # busy for a minute: this write is lost, later ones are tried
                    log.warning(
                        "MLflow store %s still busy after %.0f s of retries: %s lost; tracking stays on",
                        self.uri,
                        sum(LOCKED_RETRIES),
                        what,
                    )
                    return None
                log.debug("%s: %s busy, retrying in %.1f s", what, self.uri, pause)
                time.sleep(
                    pause * random.uniform(1.0, 1.5)
                )  # jitter: concurrent jobs do not retry in step
        return None

    def connect(self) -> None:
        """Open the store and create the experiment if needed (done once, on first use)."""
        if self._client is not None or not self.enabled:
            return
        db = sqlite_path(self.uri)
        if self.read_only and db is not None and not db.exists():
            self.enabled = (
                False  # nothing to look up, and a reader never creates a store (node > 0)
            )
            return
        if self.uri.startswith(("http://", "https://")):
            problem = _server_reachable(self.uri)
            if problem:
                self._disable("connect", ConnectionError(problem))
                return
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")

        def open_store():
            from mlflow.tracking import MlflowClient

            for chatty in (
                "mlflow.store.db.utils",
                "alembic",
            ):  # "Creating initial MLflow database tables..."
                logging.getLogger(chatty).setLevel(logging.WARNING)

            client = MlflowClient(tracking_uri=self.uri)
            found = client.get_experiment_by_name(self.experiment_name)
            if found is None and self.read_only:
                return
            if found is None:
                location = None
                if self.artifact_root is not None:
                    location = (self.artifact_root / self.experiment_name).as_uri()
                exp_id = client.create_experiment(self.experiment_name, artifact_location=location)
            else:
                exp_id = found.experiment_id
            self._client, self._experiment_id = client, exp_id

        with store_lock(self.uri):
            self.call("connect", open_store, write=False)

    def start_run(
        self,
        run_name: str,
        tags: Mapping[str, str] | None = None,
        parent: TrackedRun | None = None,
    ) -> TrackedRun:
        """A new MLflow run (a child of `parent` when given); a no-op run if tracking is off."""
        self.connect()
        tags = {**process_tags(), **(tags or {})}
        if parent is not None and parent.run_id:
            tags["mlflow.parentRunId"] = parent.run_id
        run = self.call(
            "create_run",
            lambda: self._client.create_run(self._experiment_id, run_name=run_name, tags=tags),
        )
        return TrackedRun(self, run.info.run_id if run is not None else None)

    def get_run(self, run_id: str):
        """The MLflow Run (info, data.tags, data.metrics) or None if unknown/unreachable."""
        self.connect()
        if self._client is None:
            return None
        try:
            return self._client.get_run(run_id)
        except Exception:  # noqa: BLE001 - unknown id: the caller names it
            return None

    def search_runs(self, filter_string: str, max_results: int = 20) -> list:
        """Runs of this experiment matching an MLflow filter, newest first ([] when tracking is off)."""
        self.connect()
        if self._client is None:
            return []
        found = self.call(
            "search_runs",
            lambda: self._client.search_runs(
                [self._experiment_id],
                filter_string,
                max_results=max_results,
                order_by=["attributes.start_time DESC"],
            ),
            write=False,
        )
        return list(found or [])

    def metric_history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        """(step, value) of one metric of a run, by step ([] when tracking is off or it has none)."""
        self.connect()
        if self._client is None:
            return []
        found = self.call(
            "get_metric_history", lambda: self._client.get_metric_history(run_id, key), write=False
        )
        return sorted((m.step, m.value) for m in found or [])

    def delete_run(self, run_id: str) -> None:
        """Move a run to MLflow's trash (`mlflow gc` removes it for good)."""
        self.connect()
        self.call("delete_run", lambda: self._client.delete_run(run_id))

    def resume_run(self, run_id: str) -> TrackedRun:
        """Continue an existing run: its status goes back to RUNNING, metrics append to it."""
        self.connect()
        self.call("resume_run", lambda: self._client.update_run(run_id, status="RUNNING"))
        run = self.run(run_id)
        run.set_tags(process_tags())
        return run

    def run(self, run_id: str) -> TrackedRun:
        """An existing run to write to, as it is (no status change)."""
        self.connect()
        return TrackedRun(self, run_id if self.enabled else None)


class TrackedRun:
    """One MLflow run. Metrics are buffered and written in batches (one DB round trip each)."""

    def __init__(self, tracker: Tracker, run_id: str | None):
        self.tracker = tracker
        self.run_id = run_id
        self._pending: list = []

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        return self.tracker.call(what, fn) if self.run_id is not None else None

    def log_params(self, params: Mapping[str, Any]) -> None:
        from_items = list(params.items())

        def write():
            from mlflow.entities import Param

            for i in range(0, len(from_items), PARAM_BATCH_LIMIT):
                chunk = [
                    Param(k, str(v)[:MAX_PARAM_LENGTH])
                    for k, v in from_items[i : i + PARAM_BATCH_LIMIT]
                ]
                self.tracker.client.log_batch(self.run_id, params=chunk)

        self._call("log_params", write)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        def write():
            from mlflow.entities import RunTag

            self.tracker.client.log_batch(
                self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()]
            )

        self._call("set_tags", write)

    def log_metrics(self, metrics: Mapping[str, float], step: int, flush: bool = False) -> None:
        if self.run_id is None:
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._pending += [Metric(k, float(v), now, int(step)) for k, v in metrics.items()]
        if flush or len(self._pending) >= BATCH_LIMIT:
            self.flush()

    def flush(self) -> None:
        pending, self._pending = self._pending, []

        def write():
            for i in range(0, len(pending), BATCH_LIMIT):
                self.tracker.client.log_batch(self.run_id, metrics=pending[i : i + BATCH_LIMIT])

        if pending:
            self._call("log_metrics", write)

    def log_artifact(self, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        self._call(
            "log_artifact",
            lambda: self.tracker.client.log_artifact(self.run_id, str(path), artifact_path),
        )

    def log_text(self, text: str, artifact_file: str) -> None:
        self._call(
            "log_text", lambda: self.tracker.client.log_text(self.run_id, text, artifact_file)
        )

    def log_artifacts(self, paths: Iterable[Path], artifact_path: str | None = None) -> None:
        for p in paths:
            if Path(p).exists():
                self.log_artifact(p, artifact_path)

    def end(self, status: str = "FINISHED") -> None:
        """Flush metrics and close the run; status FINISHED, FAILED or KILLED."""
        self.flush()
        self._call(
            "set_terminated", lambda: self.tracker.client.set_terminated(self.run_id, status)
        )
