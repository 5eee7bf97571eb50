"""The read side of the MLflow store: finding runs, a finished stage or job by its tag, a
source's files, a registered model's run, a metric's history.

Kept apart from the Tracker, which only journals writes: a lookup (a viewer's `sporeflow
compare`, preflight's fine-tune check, a sweep's summary, a notebook's `results()`) opens no
journal and starts no writer. A store that cannot be read is "not found" with one warning, so
a stage that could have been reused is trained anew rather than failing the job. A run this
process created is known first by its journal key (tracking.journal): `applied_ids` maps the
keys the writer has applied to their MLflow ids.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from sporeflow.core.names import PARENT_RUN_TAG, STAGE_TAG, StageKind
from sporeflow.storage.run_marker import read_run_marker
from sporeflow.tracking import run_files
from sporeflow.tracking.journal import applied_run_id, is_key, is_run_key
from sporeflow.tracking.store import Store, StoreError, default_artifact_root, resolve_uri

log = logging.getLogger(__name__)
T = TypeVar("T")
RUN_ID = re.compile(r"^[0-9a-f]{32}$")  # an MLflow run id
MODEL_URI = re.compile(r"^models:/(?P<name>[^/@]+)(?:/(?P<version>\d+)|@(?P<alias>[\w-]+))$")


def names_a_run(name: str) -> bool:
    """Whether `name` is a run's MLflow id or its journal key (`sf-...`)."""
    return bool(RUN_ID.match(name)) or is_run_key(name)


def names_a_model_version(name: str) -> bool:
    """Whether `name` is `models:/<name>/<version>` or `models:/<name>@<alias>`."""
    return bool(MODEL_URI.match(name))


def marked_run_id(stage_dir: Path, run_dir: Path) -> str | None:
    """The MLflow run id of the run that made `stage_dir` (or its job's run), from the run
    marker: a journal key there is looked up in what the run's writers applied."""
    key = (read_run_marker(stage_dir) or read_run_marker(run_dir)).get("mlflow_run_id")
    if not isinstance(key, str) or RUN_ID.match(key):
        return key if isinstance(key, str) else None
    return applied_run_id(run_dir, key)


class StoreReads:
    """Reads of one experiment of one store; opened at the first read."""

    def __init__(
        self,
        uri: str,
        experiment_name: str,
        enabled: bool = True,
        artifact_root: Path | None = None,
        applied_ids: Callable[[], Mapping[str, str]] = dict,
    ):
        self.uri = uri
        self.experiment_name = experiment_name
        self.enabled = enabled
        self.artifact_root = artifact_root
        self.applied_ids = applied_ids  # journal key -> MLflow id, for this process's runs
        self._store: Store | None = None
        self._unread: str | None = None  # why the store could not be read, once warned

    @classmethod
    def at(
        cls,
        uri: str | None,
        experiment_name: str,
        launch_dir: Path | None = None,
        enabled: bool = True,
    ) -> StoreReads:
        """The store a command names (`--uri`, else $MLFLOW_TRACKING_URI, else the launch
        dir's mlflow.db), as train.py writes it from that launch dir."""
        where = Path(launch_dir or os.getcwd())
        resolved = resolve_uri(uri, where)
        return cls(resolved, experiment_name, enabled, default_artifact_root(resolved, where))

    @classmethod
    def of_config(cls, tracking: Any, launch_dir: Path) -> StoreReads:
        """The store a job's `tracking` node names, as its runs are written from `launch_dir`."""
        return cls.at(tracking.uri, str(tracking.experiment_name), launch_dir, tracking.enabled)

    def store(self) -> Store:
        if self._store is None:
            self._store = Store(self.uri, self.experiment_name, self.artifact_root)
        return self._store

    def _read(self, what: str, fn: Callable[[Store], T], missing: T) -> T:
        """A read of the store; `missing` (with one warning) when tracking is off or the store
        cannot be read: the caller then does the work itself instead of reusing."""
        if not self.enabled:
            return missing
        try:
            return fn(self.store())
        except StoreError as ex:
            if self._unread is None:
                log.warning(
                    "MLflow store %s cannot be read (%s): %s treated as not found",
                    self.uri,
                    ex,
                    what,
                )
            self._unread = str(ex)
            return missing

    def search_runs(self, filter_string: str, max_results: int = 20) -> list:
        """Runs of this experiment matching an MLflow filter, newest first (none when the store
        cannot be read)."""
        return self.search_runs_if_read(filter_string, max_results) or []

    def finished_with_tag(self, tag: str, value: str, max_results: int = 20) -> list:
        """FINISHED runs of this experiment whose tag `tag` is `value`, newest first: the one
        query behind reuse (a stage's fingerprint) and a sweep's finished jobs (a job's key).
        The tag is quoted, so names with dots (`sweep.key`) mean what they say."""
        return self.search_runs(
            f"tags.`{tag}` = '{value}' and attributes.status = 'FINISHED'", max_results
        )

    def search_runs_if_read(self, filter_string: str, max_results: int = 20) -> list | None:
        """As search_runs, but None when the store did not answer (not: no such runs)."""
        return self._read("search_runs", lambda s: s.search_runs(filter_string, max_results), None)

    @property
    def shared(self) -> bool:
        """Whether other machines may read this store (a server or a database, not a file on
        this one): what a run leaves on local disk must then travel as artifacts."""
        return self.enabled and not self.uri.startswith(("sqlite:", "file:", "/"))

    def download(self, run_id: str, paths: list[str], dst: Path) -> bool:
        """Copy the run's artifacts `paths` (files or folders; a missing one is skipped) under
        `dst`; False when the store cannot be read or the run has none of them."""

        def fetch(store: Store) -> bool:
            present = set(store.list_artifacts(run_id))
            wanted = [p for p in paths if p in present]
            for path in wanted:
                store.download_artifacts(run_id, path, dst)
            return bool(wanted)

        return self._read("download", fetch, False)

    def artifact_names(self, run_id: str) -> set[str] | None:
        """The paths at the top of the run's artifacts; None when the store cannot list them
        (an `mlflow-artifacts:` run read from its database, a store that does not answer)."""

        def listed(store: Store) -> set[str]:
            return set(store.list_artifacts(run_id))

        return self._read("artifact list", listed, None)

    def last_activity(self, run: Any) -> float:
        """When a run last showed life, in seconds since the epoch: its newest metric point's
        time (a training run logs its loss every few steps), else its start."""

        def newest(store: Store) -> float:
            keys = [k for k in ("train/loss", "val/acc", "eval/acc") if k in run.data.metrics]
            stamps = [p[2] for key in keys for p in store.metric_points(run.info.run_id, key)]
            return max([run.info.start_time, *stamps]) / 1000.0

        return self._read("last_activity", newest, run.info.start_time / 1000.0)

    def get_run(self, run_id: str) -> Any:
        """The MLflow Run (info, data.tags, data.metrics) or None if unknown/unreadable."""

        def read(store: Store) -> Any:
            found = self._mlflow_id(store, run_id)
            return store.get_run(found) if found else None

        return self._read("get_run", read, None)

    def _mlflow_id(self, store: Store, run_id: str) -> str | None:
        """A run's MLflow id from its id or its journal key (None: not in the store yet)."""
        if not is_key(run_id):
            return run_id
        return self.applied_ids().get(run_id) or store.find_by_key(run_id)

    def last_steps(self, run_id: str) -> dict[str, int]:
        """Each metric of a run (by id or key) -> its last stored step ({} when unreadable)."""

        def read(store: Store) -> dict[str, int]:
            found = self._mlflow_id(store, run_id)
            return store.last_steps(found) if found else {}

        return self._read("last_steps", read, {})

    def model_version_run_id(self, name: str, ref: str) -> str | None:
        """The run id behind `models:/name/ref` (or `models:/name@ref`); None if unknown, ""
        when the version names no run."""
        return self._read("get_model_version", lambda s: s.model_version_run_id(name, ref), None)

    def metric_history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        """(step, value) of one metric of a run, by step ([] when it cannot be read)."""
        return self._read("get_metric_history", lambda s: s.metric_history(run_id, key), [])

    def fetched(self, run: Any, launch_dir: Path) -> tuple[Path | None, str | None]:
        """A run's files from the store's artifacts: a local copy laid out as its run dir (made
        once per launch dir; concurrent jobs each download, the first copy stays), or (None, why)
        when the store has none of its files or they are not the files the run made."""
        run_id = run.info.run_id
        dst = Path(launch_dir) / run_files.FETCHED_DIR / run_id
        if (dst / ".complete").is_file():
            return dst, None
        part = dst.with_name(f"{run_id}.part-{os.getpid()}")
        shutil.rmtree(part, ignore_errors=True)
        part.mkdir(parents=True)
        try:
            if not self.download(run_id, run_files.SHARED, part):
                return None, f"the store has none of its files ({', '.join(run_files.SHARED)})"
            tags = run.data.tags
            problem = run_files.unverified(part, tags) or run_files.restore_snapshot_times(part)
            if problem:
                return None, problem
            (part / ".complete").touch()
            try:
                part.rename(dst)
            except OSError:  # another job's copy got there first
                pass
            log.info("run %s's files copied from %s into %s", run_id, self.uri, dst)
            return (dst, None) if (dst / ".complete").is_file() else (None, f"{dst} was not made")
        finally:
            shutil.rmtree(part, ignore_errors=True)

    def run_named(self, name: str) -> tuple[Any | None, str | None]:
        """The finished work `name` stands for: a run by its MLflow id or journal key, or the
        run that made a registered model version (`models:/<name>/<version>`, `@<alias>`); a
        dim-reduce pipeline's run stands for its stage 2 (the network it made). (None, why)
        when the store has none, said with the store's URI."""
        model = MODEL_URI.match(name)
        run_id = name
        if model:
            made_by = self.model_version_run_id(model["name"], model["version"] or model["alias"])
            if made_by is None:
                return None, f"no such registered model version in {self.uri}"
            run_id = made_by
            if not run_id:
                return None, (
                    "this version names no run (registered from a path or a model logged "
                    "outside a run), so its config and weights are unknown to sporeflow; give "
                    "the run that trained it (its run dir or run id)"
                )
        run = self.get_run(run_id)
        if run is None and is_run_key(run_id):
            return None, (
                f"no run with this key in {self.uri} (if its records still wait in its run "
                "dir's journal: sporeflow sync <run dir>; or give the run dir itself)"
            )
        if run is None:
            return None, f"no such MLflow run in {self.uri}"
        if run.data.tags.get(STAGE_TAG) != "pipeline":
            return run, None
        found = self.search_runs(
            f"tags.`{PARENT_RUN_TAG}` = '{run.info.run_id}' and tags.{STAGE_TAG} = '{StageKind.stage2}'",
            1,
        )
        if not found:
            return None, f"a dim-reduce pipeline without a stage-2 run in {self.uri}"
        return found[0], None
