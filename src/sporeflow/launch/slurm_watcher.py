"""submitit's reader of SLURM's accounting, with a task's own record over its array's.

submitit asks `sacct` about a sweep's job array in one call and lets the last row of each task
win. SLURM's accounting can keep the array's first record listing tasks that have since started
and ended (`6_[0-2%3]|PENDING` after `6_0|NODE_FAIL`, for as long as the sweep ran), so a job
SLURM had ended looked pending and the sweep waited on. Imported only when a sweep submits to
SLURM (submitit's import is not paid by every `train.py`)."""

from __future__ import annotations

from submitit.slurm.slurm import SlurmInfoWatcher, SlurmJob

from sporeflow.launch.slurm import own_records_last


class OwnRecordsWatcher(SlurmInfoWatcher):
    def read_info(self, string: bytes | str) -> dict[str, dict[str, str]]:
        text = string if isinstance(string, str) else string.decode()
        header, *rows = text.splitlines() or [""]
        return super().read_info("\n".join([header, *own_records_last(rows)]))


def watch_own_records() -> None:
    """Every SlurmJob of this process reads sacct through OwnRecordsWatcher (submitit's jobs
    share one watcher, a class attribute: array tasks are made as plain SlurmJob)."""
    if not isinstance(SlurmJob.watcher, OwnRecordsWatcher):
        SlurmJob.watcher = OwnRecordsWatcher(delay_s=600)
