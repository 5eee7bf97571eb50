"""Hydra's submitit_slurm launcher, for jobs the scheduler may end (`cluster=slurm` names it as
`hydra.launcher._target_`; Hydra instantiates launchers from the hydra_plugins package only).

Hydra's own launcher waits for the jobs one by one with submitit's `results()`: the first job
that ended without a result (scancel, a time limit, a lost node) raises there, the sweep stops
waiting and the other jobs run on unwatched. This one waits for every job, and a job SLURM
ended becomes a FAILED job whose error is SLURM's account of it (`launch.slurm.verdict`), also
written as the job's outcome in its dir, so the sweeper goes on and the sweep's parent run names
it and ends the job's runs with it. Ctrl-C (or SIGTERM) in the submitting process cancels the
jobs still queued or running (no job outlives its sweep) and exits 130 (143).

Requeue at the time limit (`hydra.launcher.max_num_timeout` > 0; the jobs are submitted with
`--requeue`): SIGUSR2, which submitit asks SLURM to send `signal_delay_s` before the limit,
makes the job checkpoint at its next step and leave its runs open (core.signals.Requeued);
here it then asks SLURM to queue it again and ends without a result, so the sweep keeps waiting
for it (on several nodes node 0's task asks; the other nodes' tasks end once their workers
stopped at the same step). The requeued job continues the same run dir and MLflow runs (entry.app). A job
requeued max_num_timeout times ignores the signal and is ended at its limit by SLURM (SIGTERM:
its runs end KILLED), and the sweep says TIMEOUT after so many requeues. With
max_num_timeout=0 (the default) every job ignores SIGUSR2 and ends at its limit. Each task
starts Python with SIGUSR2 ignored (`launch.slurm.python_ignoring_the_warning`): a warning that
arrives while the task still imports would otherwise kill it.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from omegaconf import OmegaConf, open_dict

from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as HydraSlurm
from sporeflow.core import signals
from sporeflow.core.errors import ConfigError, SchedulerEnded
from sporeflow.launch import slurm

POLL = 10.0  # seconds between asking SLURM's accounting about the sweep's jobs (one sacct call)
STOP_WAIT = 120.0  # seconds a stopped sweep waits for its cancelled jobs to end (SLURM's KillWait)


class SlurmLauncher(HydraSlurm):
    """Hydra's SlurmLauncher with sporeflow's waiting and reporting (the module docstring)."""

    def __call__(self, *args: Any, **kwargs: Any) -> JobReturn:
        """One job, on its node (see the module docstring for SIGUSR2)."""
        before = slurm.restart_count()
        if before < int(self.params.get("max_num_timeout") or 0):
            signals.requeue_on(signal.SIGUSR2, before)
        else:
            signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        try:
            return super().__call__(*args, **kwargs)
        except signals.Requeued as stop:  # its runs are open and its record durable
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # SLURM's end of this run of the job
            why_not = slurm.requeue_this_job()
            print(
                f"[sporeflow] {stop}: " + (why_not or "requeued; it continues where it stopped"),
                file=sys.stderr,
            )
            raise SystemExit(1 if why_not else 0) from None  # no result: the sweep waits on

    def _executor(self):
        """submitit's executor with this sweep's parameters, as Hydra's launcher builds it; its
        jobs read SLURM's accounting task record first (launch.slurm_watcher)."""
        import submitit

        from sporeflow.launch.slurm_watcher import watch_own_records

        watch_own_records()
        init = {
            "folder": self.params["submitit_folder"],
            "slurm_python": slurm.python_ignoring_the_warning(sys.executable),
        }
        if "max_num_timeout" in self.params:
            init["slurm_max_num_timeout"] = self.params["max_num_timeout"]
        executor = submitit.AutoExecutor(cluster="slurm", **init)
        queue_keys = set(OmegaConf.structured(BaseQueueConf).keys())
        params = {
            key if key in queue_keys else f"slurm_{key}": value
            for key, value in self.params.items()
            if key not in ("submitit_folder", "max_num_timeout")
        }
        if int(self.params.get("max_num_timeout") or 0) > 0:  # requeue-able (scontrol requeue)
            extra = dict(params.get("slurm_additional_parameters") or {})
            params["slurm_additional_parameters"] = {**extra, "requeue": True}
        executor.update_parameters(**params)
        return executor

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        assert self.config is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        # before any job is submitted
        refusal = slurm.requeue_refusal(self.params) or slurm.folder_refusal(str(sweep_dir))
        if refusal:
            raise ConfigError(refusal)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        jobs_args = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            print(
                f"[sporeflow] job {idx}: {' '.join(filter_overrides(overrides))}", file=sys.stderr
            )
            jobs_args.append(
                (
                    list(overrides),
                    "hydra.sweep.dir",
                    idx,
                    f"job_id_for_{idx}",
                    Singleton.get_state(),
                )
            )
        jobs = self._executor().map_array(self, *zip(*jobs_args, strict=False))
        print(
            f"[sporeflow] submitted {len(jobs)} SLURM jobs: {', '.join(j.job_id for j in jobs)}; "
            f"their logs in {self.params['submitit_folder']}",
            file=sys.stderr,
        )
        missing = slurm.accounting_missing(jobs[0].job_id)
        if missing:
            print(
                f"[sporeflow] warning: SLURM's accounting does not answer {missing}: a job SLURM "
                "ends without a result (scancel, its time limit, a lost node) cannot be seen to "
                "end, and the sweep would wait for it (Ctrl-C cancels the sweep's jobs)",
                file=sys.stderr,
            )
        signals.install()  # Ctrl-C / SIGTERM: Interrupted, exit 130 / 143 (app.run_cli)
        try:
            wait_for(jobs)
        except BaseException as stop:  # the sweep's jobs go with it
            jobs[0].watcher.update()  # what SLURM ended before the stop is not "cancelled"
            cancelled = [job.job_id for job in jobs if not job.done()]
            for job in jobs:
                if job.job_id in cancelled:
                    job.cancel(check=False)
            print(f"[sporeflow] cancelling SLURM jobs {', '.join(cancelled)}", file=sys.stderr)
            try:  # they end their runs on SLURM's SIGTERM; their outcomes then say so
                wait_for(jobs, timeout=STOP_WAIT)
            except BaseException:  # noqa: BLE001 - a second Ctrl-C: leave at once
                pass
            self._results(jobs, job_overrides, initial_job_idx, cancelled)
            if isinstance(stop, signals.Interrupted):
                stop.hint = f"the sweep's SLURM jobs {', '.join(cancelled)} were cancelled"
            raise
        return self._results(jobs, job_overrides, initial_job_idx)

    def _results(
        self,
        jobs: list,
        job_overrides: Sequence[Sequence[str]],
        initial_job_idx: int,
        cancelled: Sequence[str] = (),
    ) -> list[JobReturn]:
        """Each job's JobReturn; a job SLURM ended (or that was `cancelled` because the sweep
        was stopped) gets its outcome written into its dir, for the sweep's parent run."""
        from sporeflow.entry.sweep_jobs import record_scheduler_end  # the plugin scan stays light

        results = []
        for num, (job, overrides) in enumerate(
            zip(jobs, job_overrides, strict=True), initial_job_idx
        ):
            result = returned(job, overrides)
            error = result._return_value  # noqa: SLF001 - return_value would re-raise it
            stopped = job.job_id in cancelled
            if isinstance(error, SchedulerEnded):
                said = f"cancelled with the sweep: {error}" if stopped else self._after(error)
                record_scheduler_end(
                    self._job_dir(overrides, num),
                    num,
                    list(overrides),
                    said,
                    status="KILLED" if stopped else "FAILED",
                )
            results.append(result)
        return results

    def _after(self, error: BaseException) -> str:
        """SLURM's account, and at a time limit how often the job was requeued before it."""
        times = int(self.params.get("max_num_timeout") or 0)
        if times and ": TIMEOUT" in str(error):
            return f"{error}; after the requeues allowed (hydra.launcher.max_num_timeout={times})"
        return str(error)

    def _job_dir(self, overrides: Sequence[str], num: int) -> Path:
        """The job's dir (node 0's, where its outcome goes), as the job itself resolves it."""
        assert self.hydra_context is not None and self.config is not None
        config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(config.hydra.job):
            config.hydra.job.num = num
        return Path(str(config.hydra.sweep.dir)) / str(config.hydra.sweep.subdir)


def wait_for(jobs: list, timeout: float | None = None) -> None:
    """Until every job has a result or SLURM says it ended, and none is still on SLURM's queue
    (completing: its processes being killed): result files are looked for each
    second, the accounting asked every POLL seconds (one sacct call for all of submitit's jobs;
    submitit alone asks ever more rarely, up to every 10 minutes, and a multi-node job's
    `done(force_check=True)` does not pass the force on to its tasks)."""
    asked = float("-inf")
    deadline = None if timeout is None else time.monotonic() + timeout
    while deadline is None or time.monotonic() < deadline:
        if time.monotonic() - asked >= POLL:
            jobs[0].watcher.update()
            asked = time.monotonic()
        if all(job.done() for job in jobs) and not slurm.listed([job.job_id for job in jobs]):
            return  # and off the queue: SLURM has killed what a job left (COMPLETING is over)
        time.sleep(1.0)


def returned(job, overrides: Sequence[str]) -> JobReturn:
    """The job's own JobReturn (its first task's, node 0's, as Hydra's launcher takes it), or a
    FAILED one carrying SLURM's account of its end. A job SLURM ended (sacct) without a result
    file is not waited for: submitit's results() gives a missing file 15 s per job to appear."""
    from submitit.core.utils import FailedJobError, UncompletedJobError

    first = job.task(0)
    error: BaseException
    if slurm.ended_by_slurm(job.state) and not first.paths.result_pickle.exists():
        error = SchedulerEnded(slurm.verdict(job.job_id))
    else:
        try:
            return first.result()
        except FailedJobError as ex:  # the job's process raised outside the task: its traceback
            error = ex
        except UncompletedJobError:
            error = SchedulerEnded(slurm.verdict(job.job_id))
    ended = JobReturn(overrides=list(overrides), status=JobStatus.FAILED)
    ended.return_value = error
    return ended
