"""A sweep job reports its progress to its Optuna trial and stops when the pruner says so.

The Optuna sweeper with `hydra.sweeper.pruner=median|hyperband` links each job to its trial
(core.context.TrialLink). The stage that shows the objective while it trains (stage 2 of a
pipeline, the only stage of a plain job: config.objective.progress) reports its evaluation each
epoch to the trial in the study's storage; the pruner compares it with the other trials at the
same epoch. A pruned stage raises TrialPruned after that epoch's metrics and checkpoint are
written: its runs end KILLED with `sporeflow.pruned`, the sweeper tells the trial PRUNED.

In a job of several workers rank 0 asks and every rank gets the answer (an AllReduce), so all
stop at the same step.
"""

from __future__ import annotations

import logging
from typing import Any

from sporeflow.core.context import TrialLink
from sporeflow.core.errors import TrialPruned
from sporeflow.engine.events import EventRecord
from sporeflow.engine.hooks import HookBase
from sporeflow.runtime.mindspore_context import Worker, any_rank
from sporeflow.stage.settings import StageSettings

log = logging.getLogger(__name__)


def pruner(link: TrialLink) -> Any:
    import optuna

    if link.pruner == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=link.startup_trials, n_warmup_steps=link.min_epochs
        )
    if link.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=max(1, link.min_epochs))
    raise ValueError(f"no pruner {link.pruner!r}")  # the sweeper checked the name


class ReportToTrial(HookBase):
    """At each epoch with an evaluation: report `metric` to the trial, stop if it is pruned."""

    def __init__(self, record: EventRecord, link: TrialLink, metric: str, worker: Worker):
        super().__init__()
        self.bind(record)
        self.link, self.metric, self.worker = link, metric, worker
        self.trial: Any = None
        if worker.is_main:
            import optuna

            optuna.logging.set_verbosity(optuna.logging.WARNING)
            study = optuna.load_study(
                study_name=link.study, storage=link.storage, pruner=pruner(link)
            )
            self.trial = optuna.Trial(study, link.trial_id)

    def _decide(self, epoch: int, value: float) -> bool:
        """Rank 0 reports and asks the pruner; a failing storage never stops training."""
        try:
            self.trial.report(value, epoch)
            return bool(self.trial.should_prune())
        except Exception as ex:  # noqa: BLE001 - the sweep's storage hiccuped: train on
            log.warning("could not report epoch %d to Optuna trial: %s", epoch, ex)
            return False

    def after_epoch(self, epoch: int) -> None:
        latest = self.record.latest_eval()
        if latest is None or latest[0] != epoch:
            return  # no evaluation this epoch
        value = float(latest[1][self.metric])
        prune = self._decide(epoch, value) if self.worker.is_main else False
        if epoch >= self.record.epochs:
            return  # reported for the other trials' sake; the job itself has finished
        if any_rank(self.worker, prune):  # rank 0 decides; every rank stops at this epoch
            raise TrialPruned(
                f"trial {self.trial.number if self.trial else '?'} pruned by the {self.link.pruner} "
                f"pruner after epoch {epoch} of {self.record.epochs}: eval {self.metric} "
                f"{value:.4f} is behind the study's other trials at that epoch"
            )


def for_stage(settings: StageSettings, record: EventRecord, worker: Worker) -> ReportToTrial | None:
    """The reporter of the stage `settings` describe when this job belongs to a pruning sweep
    and the stage shows its objective while it trains (`settings.progress_metric`); None
    otherwise."""
    if settings.trial is None or settings.progress_metric is None:
        return None
    return ReportToTrial(record, settings.trial, settings.progress_metric, worker)
