"""Applying a journal to the store, in order and exactly once.

Before each write the applier saves the seq range it is about to send (`in_flight`); after
it, the new position. A range found in flight at the next try (the writer died, or a request
timed out and may still land on the server) is replayed with checks instead of blindly: a run
is looked up by its key before it is created, metric points already stored are not sent
again (MLflow keeps duplicates of a point otherwise), params/tags/status/artifacts are
idempotent. A record the store refuses outright is counted in `rejected` and named in the
writer's log, never retried forever.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sporeflow.core.names import CLOSED_TAG, FAILURE_TAG, PARENT_RUN_TAG, RUN_KEY_TAG
from sporeflow.tracking.journal import (
    AppliedState,
    JournalTail,
    Op,
    header_of,
    is_key,
    read_records,
)
from sporeflow.tracking.store import (
    Rejected,
    Store,
    StoreError,
    deleted_run_line,
    process_tags,
)
from sporeflow.tracking.system_metrics import SystemMetrics

log = logging.getLogger(__name__)

ENDED_TAGS = (FAILURE_TAG, CLOSED_TAG)  # why a run ended: cleared by a resume


class NotYet(StoreError):
    """A record names a run another journal creates, and the store does not have it yet."""


class RunDeleted(StoreError):
    """A record names a run the store holds as deleted: no waiting brings it back, its
    restore does (the message names the command)."""


def _groups(records: list[dict]) -> Iterator[list[dict]]:
    """Consecutive metric records of one run go as one batch; every other record alone."""
    group: list[dict] = []
    for record in records:
        if group and (
            record["op"] != Op.metrics
            or group[0]["op"] != Op.metrics
            or record["run"] != group[0]["run"]
        ):
            yield group
            group = []
        group.append(record)
    if group:
        yield group


class Applier:
    """Brings the store up to date with one journal (see the module docstring)."""

    def __init__(
        self, journal: Path, store: Store | None = None, monitors: SystemMetrics | None = None
    ):
        self.journal = Path(journal)
        self.monitors = monitors  # live runs' system metrics (the writer); None for a sync
        self.header = header_of(self.journal)
        self.store = store or Store(
            self.header["uri"], self.header["experiment"], self.header.get("artifact_root")
        )
        self.state = AppliedState.load(self.journal)
        self.closed = False  # the owner's "close" record has been applied
        self._tail = JournalTail(self.journal)
        self._per_run = self._handlers()  # record kind -> how it is applied to its run

    def pending(self) -> list[dict]:
        return self._tail.records_after(self.state.seq)

    def apply_pending(self) -> int:
        """Send every record not yet in the store; returns how many. Raises StoreError when the
        store cannot take one (the position stays before it)."""
        done = 0
        for group in _groups(self.pending()):
            first, last = group[0]["seq"], group[-1]["seq"]
            doubt = self.state.in_flight  # a range an earlier try may or may not have written
            uncertain = doubt is not None and first <= doubt[1] and last >= doubt[0]
            self.state.in_flight = (
                [min(first, doubt[0]), max(last, doubt[1])] if doubt else [first, last]
            )
            self.state.save(self.journal)
            try:
                self._apply(group, uncertain)
            except Rejected as ex:
                self.state.rejected += len(group)
                log.error(
                    "the store refused records %d..%d (%s): %s", first, last, group[0]["op"], ex
                )
            self.state.seq = last
            self.state.in_flight = doubt if doubt is not None and doubt[1] > last else None
            self.state.save(self.journal)
            done += len(group)
        return done

    def resolve(self, ref: str) -> str:
        """The MLflow id of a run named by key or id."""
        if not is_key(ref):
            return ref
        if ref not in self.state.runs:
            found = self.store.find_by_key(ref)
            if found is None:
                self._refuse_deleted(ref)
                raise NotYet(f"run {ref} is not in the store yet (another journal creates it)")
            self.state.runs[ref] = found
        return self.state.runs[ref]

    def _refuse_deleted(self, key: str) -> None:
        """RunDeleted when the run of `key` is in the store, deleted (issue 77: `sync` waited
        for it as for a run another journal had yet to create)."""
        deleted = self.store.deleted_by_key(key)
        if deleted is not None:
            raise RunDeleted(
                f"{deleted_run_line(self.store.uri, key, deleted)}; then send its records: "
                f"sporeflow sync {self.journal.parent.parent}"
            )

    def _value(self, value: Any) -> str:
        if isinstance(value, dict) and "$run" in value:
            return self.resolve(value["$run"])
        return str(value)

    def _apply(self, group: list[dict], uncertain: bool) -> None:
        record = group[0]
        op = record["op"]
        if op in (Op.header, Op.close):
            self.closed = self.closed or op == Op.close
            return
        if op == Op.create_run:
            self._create(record, uncertain)
            return
        if op == Op.experiment_tag:
            self.store.set_experiment_tag(record["key"], record["value"])
            return
        handler = self._per_run.get(op)
        if handler is None:
            raise Rejected(f"unknown journal record {op!r} (written by a newer sporeflow?)")
        handler(self.resolve(record["run"]), group, uncertain)

    def _handlers(self) -> dict[str, Callable[[str, list[dict], bool], None]]:
        """Record kind -> how it is applied to its run: (MLflow id, the group, uncertain)."""
        return {
            Op.metrics: self._metrics,
            Op.params: lambda run_id, g, _: self.store.log_batch(
                run_id, params=list(g[0]["params"].items())
            ),
            Op.tags: lambda run_id, g, _: self.store.log_batch(
                run_id, tags=[(k, self._value(v)) for k, v in g[0]["tags"].items()]
            ),
            Op.artifact: self._artifact,
            Op.dataset: lambda run_id, g, _: self.store.log_dataset(run_id, g[0]),
            Op.model: lambda run_id, g, uncertain: self.store.log_model(run_id, g[0], uncertain),
            Op.link_model: lambda run_id, g, _: self.store.link_model(
                run_id, self.resolve(g[0]["source"]), g[0]["name"]
            ),
            Op.register: self._register,
            Op.text: lambda run_id, g, _: self.store.log_text(run_id, g[0]["text"], g[0]["file"]),
            Op.resume: self._resume,
            Op.end: self._end,
            Op.delete: lambda run_id, g, _: self.store.delete_run(run_id),
        }

    def _register(self, run_id: str, group: list[dict], _uncertain: bool) -> None:
        """A new registry version; its number is kept with the applied state (the sweep that
        asked prints it)."""
        record = group[0]
        self.state.versions[str(record["seq"])] = self.store.register_model(run_id, record) or ""

    def _metrics(self, run_id: str, group: list[dict], uncertain: bool) -> None:
        """One batch; points an interrupted earlier try already stored are not sent again."""
        points = [tuple(p) for r in group for p in r["points"]]
        if uncertain:
            stored: set = set()
            for key in {p[0] for p in points}:
                stored |= self.store.metric_points(run_id, key)
            points = [p for p in points if (p[0], float(p[1]), int(p[2]), int(p[3])) not in stored]
        self.store.log_batch(run_id, metrics=points)

    def _artifact(self, run_id: str, group: list[dict], uncertain: bool) -> None:
        record = group[0]
        if not Path(record["path"]).exists():
            raise Rejected(f"{record['path']} no longer exists")
        self.store.log_artifact(run_id, record["path"], record.get("dir"))

    def _resume(self, run_id: str, group: list[dict], uncertain: bool) -> None:
        record = group[0]
        self.store.set_status(run_id, "RUNNING")
        self.store.delete_tags(run_id, ENDED_TAGS)  # why it ended before no longer stands
        self.store.log_batch(run_id, tags=list(process_tags(record["process"]).items()))
        self._opened(record["run"])
        self._monitor(run_id, record, resume=True)

    def _end(self, run_id: str, group: list[dict], uncertain: bool) -> None:
        record = group[0]
        if self.monitors is not None:
            self.monitors.stop(run_id)
        self.store.set_status(run_id, record["status"], record["t"])
        if record["run"] in self.state.open:
            self.state.open.remove(record["run"])

    def _create(self, record: dict, uncertain: bool) -> None:
        key = record["run"]
        found = self.store.find_by_key(key) if uncertain else None
        if found is None:
            tags = {k: self._value(v) for k, v in record["tags"].items()}
            tags[RUN_KEY_TAG] = key
            if record.get("parent"):
                tags[PARENT_RUN_TAG] = self.resolve(record["parent"])
            found = self.store.create_run(record["name"], tags, record["t"])
        self.state.runs[key] = found
        self._opened(key)
        self._monitor(found, record)

    def _monitor(self, run_id: str, record: dict, resume: bool = False) -> None:
        if self.monitors is not None and record.get("system_metrics"):
            self.monitors.start(run_id, float(record["system_metrics"]), resume)

    def _opened(self, ref: str) -> None:
        if ref not in self.state.open:
            self.state.open.append(ref)

    def owner_closed(self) -> bool:
        """Whether the owner wrote its close record: it ended what it meant to end, and a run it
        left open goes on elsewhere (a job SLURM requeued continues it)."""
        if self.closed:
            return True
        records = read_records(self.journal, self.state.seq - 1)
        return bool(records) and records[-1]["op"] == Op.close

    def end_open(self, status: str, reason: str) -> list[str]:
        """End every run this journal opened and did not end (its process died): `status`,
        with `reason` in the tag `sporeflow.closed`. Returns their MLflow ids."""
        ended = []
        for ref in list(self.state.open):
            run_id = self.resolve(ref)
            if self.monitors is not None:
                self.monitors.stop(run_id)
            self.store.log_batch(run_id, tags=[(CLOSED_TAG, reason)])
            self.store.set_status(run_id, status)
            self.state.open.remove(ref)
            self.state.save(self.journal)
            ended.append(run_id)
        return ended
