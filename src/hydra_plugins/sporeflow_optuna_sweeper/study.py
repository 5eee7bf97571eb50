"""The Optuna study a sweeper process shares with others: opening it, keeping its trials alive,
taking a dead process's trials back, and counting `n_trials` across every process.

- Heartbeats: each process beats for the trials it runs (Optuna's RDB heartbeat table); a
  RUNNING trial whose last beat is older than the grace period belonged to a process that died
  (SIGKILL, a lost machine) and is told FAIL by whichever process sees it first, its parameters
  queued again. A live process's trials are never touched, however long they run.
- Budget: `n_trials` counts every trial of the study except the failed ones whose parameters
  were queued again (the queued trial counts instead) and the surplus ones (two processes
  asking for the last trial at the same moment: the later number is marked surplus, not run).
  Trial numbers are given out by the storage in one order: every process agrees on the n-th.
"""

from __future__ import annotations

import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sporeflow.core.errors import ConfigError
from sporeflow.core.uris import database_lock

RETRY_OF = "sporeflow.retry_of"  # on a queued trial: the number of the FAIL trial it runs again
SURPLUS = "sporeflow.surplus"  # a trial asked beyond n_trials by a concurrent process: not run
ERROR = "sporeflow.error"  # why a trial failed: "Type: message"
BEATING = "sporeflow.heartbeat"  # set once a trial's first heartbeat is recorded


@contextmanager
def quiet() -> Iterator[None]:
    """Optuna warns that heartbeats are experimental and meant for Study.optimize: this sweeper
    uses them with ask/tell on purpose (it beats for its trials itself)."""
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
        yield


def fail_stale(study: Any, grace_s: float) -> None:
    """Dead processes' trials: FAIL, and their parameters queued again (`requeue`). Optuna finds
    those whose heartbeat stopped; a RUNNING trial that never beat (left by a version without
    heartbeats, or by a process killed between asking and its first beat) is dead once it is
    older than the grace period."""
    import datetime

    import optuna
    from optuna.trial import TrialState

    with quiet():
        optuna.storages.fail_stale_trials(study)
    now = datetime.datetime.now()
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        started = trial.datetime_start or now
        if trial.user_attrs.get(BEATING) or (now - started).total_seconds() <= grace_s:
            continue
        try:
            study.tell(trial.number, state=TrialState.FAIL)
        except (optuna.exceptions.UpdateFinishedTrialError, ValueError, RuntimeError):
            continue  # another process took it first
        requeue(study, trial)


def requeue(study: Any, trial: Any) -> None:
    """Optuna's stale-trial callback (and ours on an interrupt), for a trial told FAIL: run its
    parameters again in a queued trial that names it (a finished trial takes no more attrs)."""
    study.enqueue_trial(trial.params, user_attrs={RETRY_OF: trial.number}, skip_if_exists=False)


def grace_period(heartbeat_interval: int) -> int:
    """Seconds without a beat after which a trial's process is taken for dead."""
    return 3 * heartbeat_interval


def storage(url: str | None, heartbeat_interval: int) -> Any:
    """An RDB storage with heartbeats (sqlite or a server database); None: in memory."""
    import optuna

    if not url:
        return None
    with quiet(), database_lock(url, "optuna tables"):  # first use creates them
        return optuna.storages.RDBStorage(
            url,
            heartbeat_interval=heartbeat_interval,
            grace_period=grace_period(heartbeat_interval),
            heartbeat_stale_trial_callback=requeue,
            engine_kwargs={"pool_pre_ping": True} if not url.startswith("sqlite") else None,
        )


def check_space(study: Any, distributions: dict[str, Any], where: str, more: bool = False) -> None:
    """A study searched over other keys or ranges is another experiment: refuse to mix them.
    `more`: a custom_search_space suggests further keys, compared only on `distributions`'."""
    for trial in study.get_trials(deepcopy=False):
        if trial.distributions:
            theirs = trial.distributions
            if more:
                theirs = {k: v for k, v in theirs.items() if k in distributions}
            if theirs != distributions:
                theirs = ", ".join(f"{k} {v}" for k, v in trial.distributions.items())
                raise ConfigError(
                    f"hydra.sweeper.study_name={study.study_name!r}: the study in {where} "
                    f"searches another space ({theirs}); pick a new study_name or the same params"
                )
            return


def counted(trials: list) -> list:
    """The trials n_trials counts: not those run again under another number, nor surplus ones."""
    retried = {t.user_attrs[RETRY_OF] for t in trials if RETRY_OF in t.user_attrs}
    return [t for t in trials if t.number not in retried and not t.user_attrs.get(SURPLUS)]


def budget_used(study: Any) -> tuple[int, int]:
    """(trials ended, trials running) that count against n_trials; a WAITING (queued) trial is
    still to be asked for, by whichever process asks next."""
    from optuna.trial import TrialState

    trials = counted(study.get_trials(deepcopy=False))
    ended = sum(1 for t in trials if t.state.is_finished())
    return ended, sum(1 for t in trials if t.state == TrialState.RUNNING)


TAKEN_BACK = (
    "its trial was told FAIL by another process meanwhile (no heartbeat for 3 intervals: a "
    "stalled machine or database) and its parameters queued again"
)


def tell(study: Any, trial: Any, value: float | None, error: str, pruned: bool = False) -> bool:
    """The job's value, PRUNED (its last reported value stays), or FAIL with the reason kept on
    the trial (for dashboards and other processes). False when another process took the trial
    back first (its heartbeat was late): the result is dropped, its parameters run again."""
    import optuna
    from optuna.trial import TrialState

    try:
        if pruned:
            study.tell(trial, state=TrialState.PRUNED)
        elif value is not None:
            study.tell(trial, value)
        else:
            study._storage.set_trial_user_attr(trial._trial_id, ERROR, error)  # noqa: SLF001
            study.tell(trial, state=TrialState.FAIL)
    except (optuna.exceptions.UpdateFinishedTrialError, ValueError, RuntimeError):
        if study._storage.get_trial(trial._trial_id).state.is_finished():  # noqa: SLF001
            return False
        raise
    return True


def within_budget(study: Any, trial: Any, n_trials: int) -> bool:
    """Whether this freshly asked trial is among the first n_trials counted ones; if not it is
    marked surplus and told FAIL (a concurrent process took the last place)."""
    from optuna.trial import TrialState

    rank = sum(1 for t in counted(study.get_trials(deepcopy=False)) if t.number <= trial.number)
    if rank <= n_trials:
        return True
    study._storage.set_trial_user_attr(trial._trial_id, SURPLUS, True)  # noqa: SLF001
    study.tell(trial, state=TrialState.FAIL)
    return False


class Heartbeat:
    """One thread beating for every trial this process runs, every `interval` seconds."""

    def __init__(self, study: Any, interval: float) -> None:
        self.study, self.interval = study, interval
        self.trial_ids: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="optuna-heartbeat", daemon=True)
        self.beats = hasattr(study._storage, "record_heartbeat")  # noqa: SLF001

    def __enter__(self) -> Heartbeat:
        if self.beats:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def add(self, trial_id: int) -> None:
        with self._lock:
            self.trial_ids.add(trial_id)
        self._record([trial_id])  # at once: Optuna never finds a trial stale that never beat
        self.study._storage.set_trial_user_attr(trial_id, BEATING, True)  # noqa: SLF001

    def discard(self, trial_id: int) -> None:
        with self._lock:
            self.trial_ids.discard(trial_id)

    def _record(self, trial_ids: list[int]) -> None:
        if self.beats:
            for trial_id in trial_ids:
                self.study._storage.record_heartbeat(trial_id)  # noqa: SLF001

    def _beat(self) -> None:
        from sqlalchemy.exc import SQLAlchemyError

        while not self._stop.wait(self.interval):
            with self._lock:
                running = list(self.trial_ids)
            try:
                self._record(running)
            except (SQLAlchemyError, OSError):  # a database hiccup: the next beat tries again
                pass


def ask(study, distributions: dict):
    """A new trial with its params, or None (said in one line) when another process ended it
    while its params were being set: it found a RUNNING trial without a heartbeat yet."""
    import optuna

    try:
        with quiet():
            return study.ask(distributions)
    except optuna.exceptions.UpdateFinishedTrialError as ex:
        print(
            f"[sporeflow] {ex} (another process ended it while it was asked): not run",
            file=sys.stderr,
        )
        return None
