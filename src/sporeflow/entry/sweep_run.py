"""A sweep is one MLflow run: the Hydra callback registered in conf/train.yaml
(`hydra.callbacks.sweep_run`).

on_multirun_start  first checks the whole sweep (entry.sweep_check: every point composed and
                   checked as its job, the store, the sweeper's and SLURM's settings; refused:
                   exit 2 and one line, before anything of the sweep exists), then starts the
                   sweep's one tracking writer on this machine (tracking.shared_writer:
                   its jobs' ends do not wait for a writer of their own; a SLURM sweep's jobs
                   use it from the nodes, sampling their machines themselves) and creates the parent
                   run `sweep-<date>-<time>` (tags: the sweep's overrides, sweeper, launcher,
                   sweep dir, objective) in the main process, without waiting for the
                   writer to make it: the jobs name it by its journal key (an Optuna study's
                   sweep waits: which study's parent stays is decided on MLflow ids);
on_job_start       runs wherever the job runs (this process, a joblib worker, a submitit/SLURM
                   task: the callback travels pickled inside Hydra's context) and exports the
                   parent id, the swept keys and the job number as environment variables
                   (context.SweepJob) and where the sweep's writer says who it is - msrun
                   workers inherit them too. Not MLFLOW_RUN_ID: MLflow would resume that run
                   and drop the variable;
on_job_end         writes `sporeflow_job.json` (status, value or error) into the job's dir;
on_multirun_end    waits until the store has every job's records, ends the parent: best job's
                   params and objective, jobs finished/failed/pruned, the table and plots
                   (sweep_report) logged and written into the sweep dir; then stops the writer
                   and names the records it could not send.

A decision (winner or tie, front, registered version, Optuna's best) is made on every job's
records or not at all. If the sweep's writer dies (SIGKILL, OOM), a thread of this process
starts a writer for the sweep's own journals (the parent's creation: the jobs' writers name
it) and each job notices within a second and starts its own; at the end, records a writer
left (dead, or no progress for tracking.drain_timeout s) are applied by this process
(tracking.sync). Records that still cannot be had (the store down): one line names the jobs
whose records are missing, the parent ends FAILED, nothing is registered, the process exits 1;
`sporeflow sync <sweep dir>` then `sporeflow compare --sweep <sweep dir>` decides.

When a job raises, Hydra 1.3's BasicSweeper re-raises and never calls on_multirun_end:
app.run_cli calls `end_unfinished(error)`, so the parent still ends (FAILED, or KILLED on
Ctrl-C) with the same summary. Single runs never touch any of this.

The pieces it stands on: sweep_jobs (the job-outcome files), sweep_study (the config's swept
keys and Optuna study), sweep_summary (the table, plots, best job and trials at the end).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from sporeflow.config import objective, search_space
from sporeflow.config.facts import is_dim_reduce
from sporeflow.core.context import TRIAL_LINK_ENV, SweepJob
from sporeflow.core.errors import ConfigError
from sporeflow.core.names import (
    FAILURE_TAG,
    STAGE_TAG,
    SWEEP_COST_TAG,
    SWEEP_KEYS_TAG,
    SWEEP_OBJECTIVE_TAG,
)
from sporeflow.core.processes import this_process
from sporeflow.core.signals import Interrupted, raise_if_received
from sporeflow.entry.sweep_check import SweepRefused, check_sweep, left_behind
from sporeflow.entry.sweep_jobs import (
    job_outcome,
    read_outcomes,
    short_error,
    write_job_outcome,
)
from sporeflow.entry.sweep_power import say_power
from sporeflow.entry.sweep_study import (
    registered_model_name,
    study_lock,
    study_parent,
    study_storage,
    study_tags,
    swept_keys,
    trial_link,
)
from sporeflow.entry.sweep_summary import Summary, Sweep, end_job_runs, status_line
from sporeflow.launch import slurm
from sporeflow.report.sweep_report import SWEEP_NAME_FORMAT
from sporeflow.runtime import heap
from sporeflow.tracking.journal import (
    DIR_NAME,
    SUFFIX,
    Op,
    header_of,
    is_key,
    journals_under,
    pending,
    read_records,
)
from sporeflow.tracking.shared_writer import WRITER_ENV, SharedWriter, writer_file
from sporeflow.tracking.store import StoreError
from sporeflow.tracking.sync import Synced, sync_until, writer_alive
from sporeflow.tracking.tracker import Tracker, start_writer
from sporeflow.tracking.writer import owner_alive

log = logging.getLogger(__name__)
_ACTIVE: list[SweepRun] = []  # sweeps started in this process and not ended yet
_WRITERS: dict[Path, SharedWriter] = {}  # sweep dir -> its writer (a process: never pickled)
_WATCHES: dict[Path, threading.Event] = {}  # sweep dir -> stops the thread watching its writer
_UNDECIDED: list[str] = []  # sweeps of this process that ended without every job's records
WATCH_S = 0.5  # how often the sweep's process looks whether its writer is still there


class SweepRun(Callback):
    """The MLflow parent run of one multirun (see the module docstring)."""

    def __init__(self) -> None:
        self.sweep = Sweep()
        self.tracking: dict = {}
        self.launch_dir = Path.cwd()
        self.resumed_status = ""  # an Optuna study's parent this process continues: its status
        self.writer_file = ""  # where the sweep's writer says who it is (its host's name in it)

    @property
    def run_id(self) -> str | None:
        return self.sweep.run_id

    def _tracker(self) -> Tracker:
        """A tracker of this process with its own journal in the sweep dir (made for each use:
        the callback travels pickled to the jobs, a writer process does not)."""
        return Tracker.from_config(
            OmegaConf.create(self.tracking), self.launch_dir, journal_dir=self.sweep.sweep_dir
        )

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        refuse_unless_whole(config)
        say_power(config)  # what its validation images and seeds can decide (report.power)
        if not config.tracking.enabled:
            return
        self.launch_dir = Path(config.hydra.runtime.cwd or Path.cwd())
        self.tracking = OmegaConf.to_container(config.tracking, resolve=True)
        self.sweep = Sweep(
            keys=swept_keys(config),
            sweep_dir=Path(config.hydra.sweep.dir).resolve(),
            objective=objective.primary(config.sweep.objective),
            cost=objective.cost_of(config.sweep.objective, is_dim_reduce(config)),
            registered_model=registered_model_name(config),
            started=time.time() - 1.0,  # file times have coarse resolution on some filesystems
        )
        self.sweep.study_name, self.sweep.study_storage = study_storage(config)
        self._start_writer()
        with self._tracker() as tracker, study_lock(config):
            self._start(tracker, config)
        if self not in _ACTIVE:  # no parent run: the jobs write as single runs do
            self._stop_writer()

    def _start_writer(self) -> None:
        writer = SharedWriter(self.sweep.sweep_dir, float(self.tracking.get("drain_timeout", 30)))
        if writer.start():
            _WRITERS[self.sweep.sweep_dir] = writer
            self.writer_file = str(writer_file(self.sweep.sweep_dir))
            os.environ[WRITER_ENV] = self.writer_file
            stop = _WATCHES[self.sweep.sweep_dir] = threading.Event()
            threading.Thread(
                target=watch_writer,
                args=(writer, self.sweep.sweep_dir, stop),
                name="sweep-writer-watch",
                daemon=True,
            ).start()

    def _stop_writer(self, patient: bool = True) -> None:
        """Stop the sweep's writer once every journal it follows is done; name what is left
        (not `patient`: at once, this process applies what it left)."""
        os.environ.pop(WRITER_ENV, None)
        watching = _WATCHES.pop(self.sweep.sweep_dir, None)
        if watching is not None:
            watching.set()
        writer = _WRITERS.pop(self.sweep.sweep_dir, None)
        if not patient:
            if writer is not None:
                writer.stop(patient=False)
            return
        left = writer.stop() if writer is not None else 0
        if left:
            print(
                f"[sporeflow] {left} tracking records of the sweep are kept in its journals; "
                f"send them with: sporeflow sync {self.sweep.sweep_dir}",
                file=sys.stderr,
            )

    def _start(self, tracker: Tracker, config: DictConfig) -> None:
        study = study_tags(config)
        found = study_parent(tracker.reads, study) if study else None
        if found is not None:  # an Optuna study's sweep continues (another process, a restart)
            self._continue(tracker, found)
            _ACTIVE.append(self)
            print(
                f"[sporeflow] sweep run {self.run_id} of Optuna study "
                f"{study['optuna.study']!r} continues in {tracker.uri}; this process's jobs "
                f"write under {self.sweep.sweep_dir}",
                file=sys.stderr,
            )
            return
        name = time.strftime(SWEEP_NAME_FORMAT)
        run = tracker.start_run(name, tags=self._tags(config, study))
        if study:  # which study's parent stays is decided on MLflow ids: wait for this one's
            self.sweep.run_id = tracker.real_id(run, timeout=tracker.drain_timeout) or run.run_id
            self._first_parent_stays(tracker, study)
        else:
            # the jobs are tagged with the parent's journal key (the writer puts its MLflow id
            # in): the first job starts while the sweep's writer is still creating the run
            self.sweep.run_id = run.run_id
        if self.run_id is None:
            return
        _ACTIVE.append(self)
        named = self.run_id if not is_key(self.run_id) else f"{name!r} (its id at the end)"
        print(
            f"[sporeflow] sweep run {named} in {tracker.uri}; jobs write under "
            f"{self.sweep.sweep_dir}",
            file=sys.stderr,
        )

    def _first_parent_stays(self, tracker: Tracker, study: dict) -> None:
        """Two processes may have created a parent for the study at once: the first stays."""
        if self.run_id is None or is_key(self.run_id):
            return
        first = study_parent(tracker.reads, study)
        if first is not None and first.info.run_id != self.run_id:
            tracker.delete_run(self.run_id)
            self._continue(tracker, first)

    def _continue(self, tracker: Tracker, found) -> None:
        self.sweep.run_id, self.resumed_status = found.info.run_id, found.info.status
        tracker.resume_run(self.run_id)

    def _tags(self, config: DictConfig, study: dict) -> dict:
        return {
            STAGE_TAG: "sweep",
            "sweep.overrides": " ".join(OmegaConf.to_container(config.hydra.overrides.task)),
            SWEEP_KEYS_TAG: ",".join(self.sweep.keys),
            "sweep.dir": str(self.sweep.sweep_dir),
            "sweep.sweeper": str(config.hydra.sweeper.get("_target_", "")),
            "sweep.launcher": str(config.hydra.launcher.get("_target_", "")),
            SWEEP_OBJECTIVE_TAG: self.sweep.objective,
            **({SWEEP_COST_TAG: self.sweep.cost} if self.sweep.cost else {}),
            **study,
        }

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        raise_if_received()  # an interrupt swallowed where it landed starts no further job
        link = trial_link(config)
        if link is not None:
            os.environ.update(link.environ())
        if self.run_id is None:
            return
        optuna = config.hydra.sweeper.get("_target_") == search_space.OPTUNA_SWEEPER
        job = SweepJob(
            self.run_id, tuple(self.sweep.keys), int(config.hydra.job.num), copies=not optuna
        )
        os.environ.update(job.environ())
        if self.writer_file:  # the job uses it while it is alive (on a node: by its heartbeat)
            os.environ[WRITER_ENV] = self.writer_file

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        os.environ.pop(TRIAL_LINK_ENV, None)  # the next job in this process has its own trial
        if self.run_id is None or slurm.node_rank() != 0:  # a multi-node job reports from node 0
            return
        from hydra.core.utils import JobStatus

        ok = job_return.status == JobStatus.COMPLETED
        error = job_return._return_value  # noqa: SLF001 - return_value would re-raise it
        value = job_return.return_value if ok else None
        outcome = job_outcome(
            int(config.hydra.job.num), list(config.hydra.overrides.task), ok, value, error
        )
        write_job_outcome(Path(config.hydra.runtime.output_dir), outcome)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self.end()

    def outcomes(self, interrupted: bool = False) -> list[dict]:
        """Each started job's outcome (sweep_jobs.read_outcomes)."""
        return read_outcomes(self.sweep.sweep_dir, self.sweep.started, interrupted)

    def end(self, error: BaseException | None = None) -> None:
        """End the parent run with what the jobs did; FAILED if a job failed, KILLED when the
        sweep was interrupted. Never raises: a summary must not hide the sweep's own error."""
        heap.release()  # the jobs of this process kept their start's objects frozen
        if self.run_id is None or self not in _ACTIVE:
            return
        _ACTIVE.remove(self)
        missing = self._missing_records()
        with self._tracker() as tracker:
            self._end(tracker, error, missing)
        self._stop_writer()

    def _missing_records(self) -> str:
        """Wait until the store has every record of the sweep's journals (its writer while it
        gets on; then this process applies what is left, the writer stopped): "" then, else the
        line naming the jobs whose records are missing."""
        writer = _WRITERS.get(self.sweep.sweep_dir)
        if writer is not None:
            writer.flush()
        if not records_left(self.sweep.sweep_dir):
            return ""
        if writer is not None:
            log.warning("the sweep's tracking writer left records: this process applies them")
            self._stop_writer(patient=False)
        timeout = float(self.tracking.get("drain_timeout", 30))
        done = sync_until(self.sweep.sweep_dir, timeout, counts=of_the_sweep)
        left = [r for r in done if r.left]
        return missing_line(self.sweep.sweep_dir, left)

    def _end(self, tracker: Tracker, error: BaseException | None, missing: str = "") -> None:
        if is_key(self.run_id):  # created while the store was out of reach: has it now?
            found = tracker.reads.get_run(self.run_id)
            self.sweep.run_id = found.info.run_id if found is not None else self.run_id
        parent = tracker.run(self.run_id)
        interrupted = isinstance(error, (KeyboardInterrupt, Interrupted))
        outcomes = self.outcomes(interrupted)
        if not outcomes and error is None:
            self._end_empty(tracker, parent)
            return
        for ended in (o for o in outcomes if o.get("scheduler")):
            end_job_runs(tracker, self.run_id, ended)
        failed = [o for o in outcomes if o["status"] == "FAILED"]
        count = Counter(o["status"] for o in outcomes)  # COMPLETED, FAILED, PRUNED, KILLED
        status = (
            "KILLED" if interrupted else "FAILED" if failed or error is not None else "FINISHED"
        )
        if missing:
            self._end_undecided(parent, missing, count, tracker.uri)
            return
        lines = self._summary_lines(tracker, parent, failed, count)
        if failed:
            why = "; ".join(f"job {o['job']}: {o['error']}" for o in failed)
            parent.set_tags({FAILURE_TAG: why[:5000]})
        elif error is not None:
            parent.set_tags({FAILURE_TAG: short_error(error)})
        parent.end(status)
        why = str(error) if status == "FAILED" and not failed and error is not None else ""
        head = status_line(status, count, self.run_id, tracker.uri, why)
        print("\n".join([head, *lines]), file=sys.stderr)

    def _end_undecided(self, parent, missing: str, count: Counter, uri: str) -> None:
        """Records of some jobs are not in the store: no summary read from part of them (no
        decision, front, registered version), the parent FAILED naming them; the process exits
        1 (end_unfinished)."""
        parent.set_tags({FAILURE_TAG: missing[:5000]})
        parent.end("FAILED")
        _UNDECIDED.append(missing)
        print(status_line("FAILED", count, str(self.run_id), uri, missing), file=sys.stderr)

    def _summary_lines(
        self, tracker: Tracker, parent, failed: list[dict], count: Counter
    ) -> list[str]:
        try:
            if is_key(self.run_id):
                raise StoreError(f"the store {tracker.uri} does not have the sweep's run yet")
            return Summary(tracker, parent, self.sweep).lines(failed, count)
        except Exception as ex:  # noqa: BLE001 - the parent must still end
            log.warning("sweep summary failed: %s", ex)
            return []

    def _end_empty(self, tracker: Tracker, parent) -> None:
        """No job ran: a continued study's parent stays as it was; a new parent is deleted."""
        hint = (
            "(an Optuna study that already has hydra.sweeper.n_trials trials continues with a "
            "larger n_trials)"
        )
        if self.resumed_status:
            parent.end(self.resumed_status)
            print(
                f"[sporeflow] sweep: no job ran; the study's run {self.run_id} stays as it was {hint}",
                file=sys.stderr,
            )
            return
        tracker.delete_run(self.run_id)
        print(f"[sporeflow] sweep: no job ran, so it leaves no MLflow run {hint}", file=sys.stderr)


def refuse_unless_whole(config: DictConfig) -> None:
    """The whole sweep checked before anything of it exists (entry.sweep_check); a refusal
    raised past Hydra's callback runner (SweepRefused: `end_unfinished` raises its ConfigError)."""
    try:
        check_sweep(config)
    except ConfigError as ex:
        with contextlib.suppress(OSError):
            left_behind(config)
        raise SweepRefused(ex) from None
    except Exception as ex:  # noqa: BLE001 - a check that breaks must not cost the parent run
        log.warning(
            "the sweep's check before its first job failed (%r): each job checks itself", ex
        )


def end_unfinished(error: BaseException | None) -> None:
    """End every sweep of this process that Hydra did not end (a job raised, or Ctrl-C); exit 1
    after a sweep that ended without every job's records (its line is said). A sweep refused
    before its start (SweepRefused) raises the ConfigError it carries: the entry's exit 2 and
    its one line (run_cli), the Python API's ConfigError."""
    if isinstance(error, SweepRefused):
        raise error.error from None
    for sweep in list(_ACTIVE):
        sweep.end(error)
    if _UNDECIDED and error is None:
        _UNDECIDED.clear()
        raise SystemExit(1)


def watch_writer(writer: SharedWriter, sweep_dir: Path, stop: threading.Event) -> None:
    """A thread of the sweep's process: once its shared writer is gone, each journal of this
    process in the sweep dir (the parent's creation, closed) gets a writer of its own, so the
    jobs' writers find the parent run (each job starts its own writer within a second)."""
    while not stop.wait(WATCH_S):
        if writer.gone():
            log.warning("the sweep's tracking writer is gone: its own records get a new writer")
            for journal in own_closed_journals(sweep_dir):
                start_writer(journal)
            return


def own_closed_journals(sweep_dir: Path) -> list[Path]:
    """Journals of this process in the sweep dir that it closed and no writer applies, with
    records the store does not have yet."""
    me = this_process()
    found = []
    for journal in sorted((sweep_dir / DIR_NAME).glob(f"*{SUFFIX}")):
        owner, closed = who_and_closed(journal)
        mine = owner is not None and owner["pid"] == me["pid"]
        mine = mine and abs(float(owner["started"]) - me["started"]) < 0.01
        if mine and closed and pending(journal) and not writer_alive(journal):
            found.append(journal)
    return found


def records_left(sweep_dir: Path) -> bool:
    """Whether a journal of the sweep's (`of_the_sweep`) has records the store does not have."""
    return any(pending(j) for j in journals_under(sweep_dir) if of_the_sweep(j))


def of_the_sweep(journal: Path) -> bool:
    """Whether the sweep's end waits for the journal's records: not when a live process still
    writes it (not closed: another process's job of a shared Optuna study's dir, not this
    sweep's, whose jobs have all returned)."""
    owner, closed = who_and_closed(journal)
    return owner is not None and (closed or not owner_alive({"owner": owner}))


def who_and_closed(journal: Path) -> tuple[dict | None, bool]:
    """The journal's owner (None: not a journal it can read) and whether it wrote its close."""
    try:
        owner = header_of(journal)["owner"]
        records = read_records(journal)
    except (OSError, ValueError, KeyError):
        return None, False
    return owner, bool(records) and records[-1]["op"] == Op.close


def missing_line(sweep_dir: Path, left: list[Synced]) -> str:
    """One line naming whose records the store lacks (jobs by number, the sweep's own run) and
    what to run; "" when nothing is left."""
    if not left:
        return ""
    jobs, own = set(), False
    for result in left:
        parts = result.journal.relative_to(sweep_dir).parts
        if parts[0].isdigit():
            jobs.add(int(parts[0]))
        else:
            own = True
    names = [f"job{'s' if len(jobs) > 1 else ''} {', '.join(map(str, sorted(jobs)))}"] * bool(jobs)
    names += ["the sweep's own run"] * own
    records = sum(r.left for r in left)
    return (
        f"the store does not have every record of {' and '.join(names)} ({records} records "
        f"kept in their journals): no decision, nothing registered; send them with: sporeflow "
        f"sync {sweep_dir}, then decide with: sporeflow compare --sweep {sweep_dir}"
    )
