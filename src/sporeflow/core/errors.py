"""sporeflow's own errors: the entry turns each into one clear message and an exit code.

Two kinds: input the user must fix (ConfigError, DataError: exit 2, before any work), and a
run that failed for a reason sporeflow can name (a diverged run, a full disk, a worker that
died: exit 1, the MLflow run FAILED with the reason). Anything else is a bug and keeps its
traceback.
"""


class SporeflowError(Exception):
    """Base class: a failure sporeflow can explain in one message (no traceback needed)."""


class ConfigError(SporeflowError):
    """The composed config is invalid; one line per bad key, each naming the full key path and
    what is allowed. Exits with code 2 (usage error), like argparse."""


class DataError(SporeflowError):
    """A data set is missing, has the wrong layout or is empty; the message says what was
    expected. Exits with code 2."""


class DivergedError(SporeflowError):
    """Training produced a non-finite loss or weights; the message names the stage, step and
    value, and the last finite checkpoint. Exits with code 1."""


class CheckpointError(SporeflowError):
    """A checkpoint is missing, unreadable or does not fit the network (`resume=`: exit 2)."""


class TrialPruned(SporeflowError):
    """A sweep's pruner stopped this job early: its Optuna trial's progress (the evaluation each
    epoch) was worse than the study's other trials at the same epoch. Not a failure: the job's
    MLflow runs end KILLED with the reason in the tag `sporeflow.pruned`, its trial PRUNED."""


class SchedulerEnded(SporeflowError):
    """The cluster's scheduler ended a sweep job before it reported (SLURM: scancel, the time
    limit, a node lost); the message is the scheduler's own account of it (`sacct`, `sinfo -R`).
    The job's MLflow runs end KILLED with it in `sporeflow.failure`; the sweep is FAILED."""
