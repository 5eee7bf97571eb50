"""Tracking as the training process sees it: every write is journalled, a child process
writes it to MLflow, and nothing here can cost a run.

A write (run creation, params, tags, metrics, artifacts, status) is appended to this process's
journal (tracking.journal) and counts as made; the writer (tracking.writer, started on the
first write, restarted if it dies) applies it to the store, retrying while the store is busy
or down. The process does not import MLflow for its writes; a read (stage-1 reuse, resume)
opens the store here, and a store that cannot be read is "not found" with a warning, so that
stage is trained anew. At the end the process waits for the writer while it makes progress,
and `tracking.drain_timeout` seconds once it makes none; what is still unsent is named in one
console line with the command that sends it. A job that finds a shared writer on its machine
(tracking.shared_writer: a sweep's, or one started for many short jobs) starts no writer of its
own: the shared one follows its journal (a SLURM sweep's, on the submitting machine, follows
its jobs on the nodes), and a sweep's job's end only makes the journal durable (the sweep's end
waits once).
Only rank 0 writes; other ranks construct a read-only Tracker. Reads of the store are
`tracker.reads` (tracking.store_reads), apart from the journal.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tqdm import tqdm

from sporeflow.core import signals
from sporeflow.core.errors import SporeflowError
from sporeflow.core.processes import this_process
from sporeflow.core.uris import redact_text
from sporeflow.storage.files import sha256_file
from sporeflow.tracking.drain import drain, wait_while_progressing
from sporeflow.tracking.journal import (
    PROBLEM,
    AppliedState,
    Journal,
    Op,
    is_key,
    new_run_key,
    pending,
    run_ref,
    sibling,
)
from sporeflow.tracking.machine_samples import RunSamples, next_step
from sporeflow.tracking.run_files import checksum_tag
from sporeflow.tracking.shared_writer import WRITER_ENV, WriterRef, live_writer, writer_file
from sporeflow.tracking.store import (
    flatten,
    process_tags,
    server_problem,
)
from sporeflow.tracking.store_reads import StoreReads

__all__ = ["Tracker", "TrackedRun", "flatten"]

log = logging.getLogger(__name__)
DRAIN_TIMEOUT_S = 30.0
PROBLEM_LOOK_S = 1.0  # how often a record's append looks for the writer's problem file
AWAY_LOOK_S = 1.0  # how long the first record waits for a tracking server's health check


class Tracker:
    """One process's tracking: its journal, its writer, and reads from the store."""

    def __init__(
        self,
        reads: StoreReads,
        read_only: bool = False,
        journal_dir: Path | None = None,
        drain_timeout: float = DRAIN_TIMEOUT_S,
    ):
        # the store's read side (where, which experiment, on or off): this process's runs are
        # known by journal key until the writer applies them
        self.reads = reads
        reads.applied_ids = lambda: self.applied().runs
        self.read_only = read_only  # ranks > 0: may look runs up (stage-1 reuse), never write
        self.journal_dir = Path(journal_dir or Path.cwd())
        self.drain_timeout = drain_timeout
        self._journal: Journal | None = None
        self._writer: subprocess.Popen | None = None
        self._shared: WriterRef | None = None  # the shared writer following this journal
        self._shared_looked = float("-inf")
        self._problem_said, self._problem_looked = False, float("-inf")
        self._names: dict[str, str] = {}  # run key -> name, for the end line
        self._samples = RunSamples()  # runs whose machine figures this process takes itself
        self.left: int = 0  # records still unsent after finish()
        self.rejected: int = 0  # records the store refused, after finish()

    @classmethod
    def from_config(
        cls,
        tracking_cfg: Any,
        launch_dir: Path,
        read_only: bool = False,
        journal_dir: Path | None = None,
    ) -> Tracker:
        return cls(
            StoreReads.of_config(tracking_cfg, launch_dir),
            read_only,
            journal_dir or launch_dir,
            float(getattr(tracking_cfg, "drain_timeout", DRAIN_TIMEOUT_S)),
        )

    @property
    def uri(self) -> str:
        return self.reads.uri

    @property
    def experiment_name(self) -> str:
        return self.reads.experiment_name

    @property
    def enabled(self) -> bool:
        return self.reads.enabled

    @property
    def writes(self) -> bool:
        return self.enabled and not self.read_only

    # -- the journal and its writer -------------------------------------------------------
    @property
    def journal(self) -> Path | None:
        return self._journal.path if self._journal is not None else None

    def _open_journal(self) -> Journal:
        """This process's journal, made at its first record with the writer it names."""
        if self._journal is None:
            self._shared = live_writer(os.environ.get(WRITER_ENV))
            self._journal = Journal.create(
                self.journal_dir,
                {
                    "uri": self.uri,
                    "experiment": self.experiment_name,
                    "artifact_root": str(root) if (root := self.reads.artifact_root) else None,
                    "owner": this_process(),
                    "drain_timeout": self.drain_timeout,
                    "writer": self._shared.ident if self._shared else "own",
                },
            )
            if self._shared is not None:
                self._shared.register(self._journal.path)
            self._say_server_away()
        return self._journal

    def _say_server_away(self) -> None:
        """A tracking server that does not answer now, said at once (a refused connection is
        known in milliseconds; the writer would learn it seconds later, after importing MLflow)."""
        if not self.uri.startswith(("http://", "https://")):
            return
        problem = server_problem(self.uri, timeout=AWAY_LOOK_S)
        if problem:
            self._say(f"connect to {redact_text(self.uri)}: {problem}")

    def _append(self, op: Op, **fields: Any) -> int:
        journal = self._open_journal()
        self.take_samples(fields.get("run") if op is Op.end else None)
        seq = journal.append(op, **fields)
        self._ensure_writer()
        self._say_problem()
        return seq

    def take_samples(self, ending: str | None = None) -> None:
        """Journal this machine's figures for the runs sampled here, when due (at every write,
        and at a flush that has nothing else to write: a continued run's skipped points)."""
        journal = self._open_journal()
        for run, points in self._samples.take(ending):
            journal.append(Op.metrics, run=run, points=points)

    def _say_problem(self) -> None:
        """The writer's first failed contact with the store, as one console line, once: the
        user learns within seconds, not at the end, that nothing is being stored yet."""
        if self._problem_said or self._journal is None:
            return
        now = time.monotonic()
        if now - self._problem_looked < PROBLEM_LOOK_S:
            return
        self._problem_looked = now
        try:
            problem = sibling(self._journal.path, PROBLEM).read_text().strip()
        except OSError:
            return
        self._say(problem)

    def _say(self, problem: str) -> None:
        """The store's problem as one console line, once per process."""
        if self._problem_said or self._journal is None:
            return
        self._problem_said = True
        tqdm.write(  # on a line of its own above a progress bar, not glued to its line
            f"[sporeflow] tracking: {problem}; training goes on, its records wait in "
            f"{self._journal.path} and are sent once the store answers",
            file=sys.stderr,
        )

    def _ensure_writer(self) -> None:
        """Start the writer, or a new one if it died (SIGKILL, OOM): the journal is the truth.
        A journal a shared writer follows gets its own only once that one is gone."""
        if self._shared is not None and self._shared_alive():
            return
        if self._writer is not None and self._writer.poll() is None:
            return
        if self._writer is not None:
            log.warning(
                "tracking writer ended (exit %s): starting a new one", self._writer.returncode
            )
        assert self._journal is not None
        self._writer = start_writer(self._journal.path)

    def _shared_alive(self) -> bool:
        """Whether the shared writer still runs (looked at most once a second)."""
        now = time.monotonic()
        if now - self._shared_looked >= PROBLEM_LOOK_S:
            self._shared_looked = now
            if self._shared is not None and not self._shared.alive():
                log.warning("the shared tracking writer is gone: this job starts its own")
                self._shared = None
        return self._shared is not None

    def sync(self) -> None:
        """Make what is journalled durable (fsync) and the writer alive: every epoch end,
        checkpoint and exit."""
        if self._journal is not None:
            self._journal.sync()
            self._ensure_writer()

    def applied(self) -> AppliedState:
        """What the writer has applied to the store (its applied file: another thread may read
        it while this one writes)."""
        return AppliedState.load(self.journal) if self.journal else AppliedState()

    def written(self) -> int:
        """The journal's position after every record written so far, made durable: what
        `wait_applied_while_progressing` and `applied().seq` compare with (0 without a
        journal)."""
        if self._journal is None:
            return 0
        self.sync()
        return self._journal.seq

    def writer_pid(self) -> int | None:
        """The writer applying this journal: this process's own, or the shared one it follows."""
        shared, writer = self._shared, self._writer
        if shared is not None:
            return shared.pid
        return writer.pid if writer is not None else None

    def wait_applied_while_progressing(self, upto: int) -> bool:
        """Wait until the store has the journal up to `upto` (`written()`) (True), or until its
        writer made no progress (applied nothing, computed nothing) for drain_timeout s, as the
        tracker's end counts it (False). It only reads (the applied file, the writer's CPU), so
        another thread may wait while this one writes; a writer this thread starts again (its
        next `sync`) is followed."""

        def applied() -> int:
            return self.applied().seq

        while applied() < upto:
            pid = self.writer_pid()
            if pid is None:
                return False

            def moved(pid: int = pid) -> bool:  # applied, or another writer took over
                return applied() >= upto or self.writer_pid() != pid

            if not wait_while_progressing(pid, applied, self.drain_timeout, moved):
                return False
        return True

    def wait_applied(self, timeout: float) -> bool:
        """Wait until the store has every record written so far (True), or `timeout` s; a
        writer that died is started again."""
        if self._journal is None:
            return True
        target = self.written()
        deadline = time.monotonic() + timeout
        while self.applied().seq < target:
            if time.monotonic() > deadline:
                return False
            self._ensure_writer()
            time.sleep(0.05)
        return True

    def _id_once_created(self, key: str, timeout: float) -> str | None:
        """The MLflow id of the run journalled as `key`, waiting up to `timeout` s while the
        writer starts and creates it (a short run can end first); None at once when the
        writer has said the store does not answer (its problem file)."""
        if self._journal is None:
            return None
        self.sync()
        deadline = time.monotonic() + timeout
        while not (found := self.applied().runs.get(key)):
            if sibling(self._journal.path, PROBLEM).exists() or time.monotonic() > deadline:
                return None
            self._ensure_writer()
            time.sleep(0.1)
        return found

    def real_id(self, run: TrackedRun, timeout: float) -> str | None:
        """The MLflow id of a run this process created, waiting up to `timeout` s for the
        writer to create it (None if the store does not have it by then). The wait imports
        MLflow's client first: a writer starting up takes as long, and this process reads the
        store later anyway (reuse, the sweep's summary)."""
        if not is_key(run.run_id):
            return run.run_id
        if self.enabled:
            self.reads.store().preload()
        self.wait_applied(timeout)
        return self.applied().runs.get(run.run_id or "")

    def finish(self) -> int:
        """End of the process: wait up to drain_timeout for the writer, then say what is left
        (one console line) and stop the writer. Returns the records left in the journal."""
        if self._journal is None:
            return 0
        target = self._append(Op.close)
        self._journal.close()
        if self._shared is not None and self._shared_alive():
            if not self._shared.jobs_wait:
                return 0  # durable now; the sweep's end waits for its writer, names what is left
            self._wait_for_shared(target)
        if self._writer is not None:
            self._drain(self._writer)
        self.left = pending(self._journal.path)
        self.rejected = self.applied().rejected
        if self.rejected:
            print(f"[sporeflow] {self.refused_line()}", file=sys.stderr)
        if self.left:
            print(
                f"[sporeflow] {self.left} tracking records of run {self._run_name()} are kept in "
                f"{self._journal.path}; send them with: sporeflow sync {self.journal_dir}",
                file=sys.stderr,
            )
        return self.left

    def _drain(self, writer: subprocess.Popen) -> None:
        said: list[bool] = []

        def waiting() -> None:  # once: the store is not taking what is left
            if not said and self._journal is not None:
                said.append(True)
                print(
                    f"[sporeflow] the store {self.uri} is not taking records: waiting up to "
                    f"{self.drain_timeout:.0f} s (tracking.drain_timeout) before keeping "
                    f"{pending(self._journal.path)} of them in {self._journal.path}",
                    file=sys.stderr,
                )

        drain(writer, lambda: self.applied().seq, self.drain_timeout, waiting)

    def _wait_for_shared(self, target: int) -> None:
        """Wait, as for a writer of its own, until the shared writer has applied up to `target`;
        if it dies meanwhile, a writer of this process's own sends the rest."""
        assert self._shared is not None
        wait_while_progressing(
            self._shared.pid,
            lambda: self.applied().seq,
            self.drain_timeout,
            lambda: self.applied().seq >= target or not self._shared_alive(),
        )
        if self._shared is None:
            self._ensure_writer()

    def _run_name(self) -> str:
        return next(iter(self._names.values()), "?")

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self.finish()
        if (
            exc_type is None and self.rejected
        ):  # the run's record is incomplete: say so in the status
            raise RecordsRefused(self.refused_line())

    def refused_line(self) -> str:
        assert self._journal is not None
        log_file = (  # the writer that applied it: the sweep's (shared) or this process's own
            writer_file(self._shared.home, self._shared.host).with_suffix(".log")
            if self._shared is not None
            else sibling(self._journal.path, ".writer.log")
        )
        return (
            f"the store {self.uri} refused {self.rejected} tracking records of run "
            f"{self._run_name()}: they are kept in {self._journal.path}, and {log_file} says why"
        )

    def describe(self, run_id: str | None = None) -> str:
        """Where this process's records go, as the console summary says it: with the run's
        MLflow id once the store has given it, else that they wait in the journal."""
        if not self.enabled:
            return "MLflow off (tracking.enabled=false)"
        if run_id is None:
            return f"MLflow {self.uri}"
        known = self._id_once_created(run_id, self.drain_timeout) if is_key(run_id) else run_id
        if known is None and self._journal is not None:
            return (
                f"MLflow {self.uri} does not have run {run_id} yet: its records wait in "
                f"{self._journal.path}"
            )
        return f"MLflow {self.uri}, run {known or run_id}"

    # -- writes ------------------------------------------------------------------------------
    def start_run(
        self,
        run_name: str,
        tags: Mapping[str, Any] | None = None,
        parent: TrackedRun | None = None,
        system_metrics: float = 0.0,
    ) -> TrackedRun:
        """A new MLflow run (a child of `parent` when given); a no-op run if this process does
        not write. Its id is a journal key until the writer creates it. `system_metrics`:
        seconds between the writer's samples of the machine for this run (0 = none)."""
        if not self.writes:
            return TrackedRun(self, None)
        key = new_run_key()
        self._names[key] = run_name
        here = self._samples_here(system_metrics)
        self._append(
            Op.create_run,
            run=key,
            name=run_name,
            tags={k: _tag_value(v) for k, v in {**process_tags(), **(tags or {})}.items()},
            parent=parent.run_id if parent is not None else None,
            system_metrics=0.0 if here else system_metrics,
        )
        if here:
            self._samples.add(key, system_metrics)
        return TrackedRun(self, key)

    def _samples_here(self, system_metrics: float) -> bool:
        """Whether this process samples its machine for a run itself: it asks for system
        metrics and its writer is the shared one of another host, which cannot sample this
        one (tracking.machine_samples)."""
        if system_metrics <= 0:
            return False
        self._open_journal()
        return self._shared is not None and self._shared.elsewhere

    def run(self, run_id: str | None) -> TrackedRun:
        """An existing run (an MLflow id, or a journal key) to write to, as it is."""
        return TrackedRun(self, run_id if self.writes else None)

    def resume_run(self, run_id: str, system_metrics: float = 0.0) -> TrackedRun:
        """Continue an existing run: its status goes back to RUNNING, metrics append to it."""
        run = self.run(run_id)
        if run.run_id is not None:
            run.logged_until = self.reads.last_steps(run_id)
            here = self._samples_here(system_metrics)
            self._append(
                Op.resume,
                run=run_id,
                process=this_process(),
                system_metrics=0.0 if here else system_metrics,
            )
            if here:
                self._samples.add(run_id, system_metrics, next_step(self.journal_dir, run_id))
        return run

    def delete_run(self, run_id: str | None) -> None:
        """Move a run to MLflow's trash (`mlflow gc` removes it for good)."""
        if self.writes and run_id:
            self._append(Op.delete, run=run_id)

    def set_experiment_tag(self, key: str, value: str) -> None:
        """A tag of the experiment (a saved view of MLflow's UI, report.views)."""
        if self.writes:
            self._append(Op.experiment_tag, key=key, value=value)


def start_writer(journal: Path) -> subprocess.Popen:
    """A writer process of `journal` alone (tracking.writer): a tracker's own, or one a sweep
    starts for its own journals when its shared writer died before applying them."""
    with (
        open(sibling(journal, ".writer.log"), "a") as writer_log,  # the child keeps its copy
        signals.kept_from_children(signal.SIGUSR2),  # SLURM's warning is the trainer's
    ):
        return subprocess.Popen(
            [sys.executable, "-m", "sporeflow.tracking.writer", str(journal)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=writer_log,
            close_fds=True,
        )


class RecordsRefused(SporeflowError):
    """The store refused records of a finished process: its MLflow record is incomplete."""


class TrackedRun:
    """One MLflow run, as journal records. Metrics are buffered and journalled per flush."""

    def __init__(self, tracker: Tracker, run_id: str | None):
        self.tracker = tracker
        self.run_id = run_id
        self._pending: list[list] = []
        self.logged_until: dict[str, int] = {}  # a resumed run's last stored step per metric

    def _append(self, op: Op, **fields: Any) -> int | None:
        if self.run_id is None:
            return None
        return self.tracker._append(op, run=self.run_id, **fields)  # noqa: SLF001 - one module's pair

    def log_params(self, params: Mapping[str, Any]) -> None:
        self._append(Op.params, params={k: redact_text(str(v)) for k, v in params.items()})

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        self._append(Op.tags, tags={k: _tag_value(v) for k, v in tags.items()})

    def log_metrics(self, metrics: Mapping[str, float], step: int, flush: bool = False) -> None:
        """Journal metric points at `step`; a continued run skips the points it has already
        (the epoch whose checkpoint was lost is trained again: each step stays once)."""
        if self.run_id is None:
            return
        now = int(time.time() * 1000)
        self._pending += [
            [k, float(v), now, int(step)]
            for k, v in metrics.items()
            if int(step) > self.logged_until.get(k, -1)
        ]
        if flush:
            self.flush()

    def flush(self) -> None:
        """Journal the buffered metrics and make the journal durable."""
        pending, self._pending = self._pending, []
        if pending:
            self._append(Op.metrics, points=pending)
        elif self.run_id is not None:
            self.tracker.take_samples()
        if self.run_id is not None:
            self.tracker.sync()

    def log_artifact(
        self, path: str | os.PathLike, artifact_path: str | None = None, checksum: bool = False
    ) -> None:
        """`checksum`: also tag the file's SHA-256 (`checksum_tag`), taken here by the process
        that made the file, for a machine that later fetches the artifact to check it by."""
        if checksum and self.run_id is not None:
            artifact_file = "/".join(filter(None, [artifact_path, Path(path).name]))
            self.set_tags({checksum_tag(artifact_file): sha256_file(path)})
        self._append(Op.artifact, path=str(Path(path).resolve()), dir=artifact_path)

    def log_text(self, text: str, artifact_file: str) -> None:
        self._append(Op.text, text=redact_text(text), file=artifact_file)

    def log_artifacts(
        self, paths: Iterable[Path], artifact_path: str | None = None, checksum: bool = False
    ) -> None:
        for p in paths:
            if Path(p).exists():
                self.log_artifact(p, artifact_path, checksum)

    def log_dataset(
        self, name: str, location: str, files: list[str], selection: str, rows: int, context: str
    ) -> None:
        """An MLflow dataset input (`context`: training or evaluation); the writer hashes
        `files` into its digest, off the training process."""
        self._append(
            Op.dataset,
            name=name,
            location=location,
            files=[str(Path(f).resolve()) for f in files],
            selection=selection,
            rows=int(rows),
            context=context,
        )

    def log_model(
        self,
        directory: Path,
        example: Path,
        input_shape: tuple[int, ...],
        num_classes: int,
        step: int,
        name: str = "model",
        tags: Mapping[str, str] | None = None,
    ) -> None:
        """A packaged network directory (sporeflow.serving.package), to become an MLflow
        python_function model of this run."""
        self._append(
            Op.model,
            name=name,
            dir=str(Path(directory).resolve()),
            example=str(Path(example).resolve()),
            input=[int(d) for d in input_shape],
            classes=int(num_classes),
            step=int(step),
            tags=dict(tags or {}),
        )

    def link_model(self, source_run: str, name: str = "model") -> None:
        """Show the model `source_run` logged (a pipeline's stage 2) among this run's outputs."""
        self._append(Op.link_model, source=source_run, name=name)

    def register_model(
        self, source_run: str, stage: str, name: str, tags: Mapping[str, str], timeout: float
    ) -> str | None:
        """Register the model that `source_run` (or its child run of `stage`) logged as a new
        version of registered model `name`, tagged with this run and `tags`; wait up to
        `timeout` s for the writer and return the version ("" when that run logged no model,
        None when the store does not have it by then)."""
        seq = self._append(Op.register, source=source_run, stage=stage, name=name, tags=dict(tags))
        if seq is None or not self.tracker.wait_applied(timeout):
            return None
        return self.tracker.applied().versions.get(str(seq))

    def end(self, status: str = "FINISHED") -> None:
        """Flush metrics and close the run; status FINISHED, FAILED or KILLED."""
        self.flush()
        self._append(Op.end, status=status)
        if self.run_id is not None:
            self.tracker.sync()


def _tag_value(value: Any) -> Any:
    """A tag naming a run this process created (a journal key) goes as a reference the writer
    resolves to the run's MLflow id; every other value as text, URI passwords as ***."""
    return run_ref(value) if is_key(value) else redact_text(str(value))
