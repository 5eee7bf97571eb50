"""One stage's training as one object, in the shape of detectron2's `TrainerBase`: a `Trainer`
is built from the stage's settings (stage.settings, resolved once) and spec - its splits opened,
its parts built, a resumed checkpoint loaded - before any run exists; `train(run)` registers its
hooks by phase (stage.hooks), fits around MindSpore's `Model.train` (engine.loop), exports the
weights, measures them on the validation split and, once, on the test split, writes every
record through its one writer (stage.writer) and returns the typed `StageResult`.

Hooks reach each other only through the trainer: a requeue's checkpoint is
`Trainer.save_checkpoint`, the cost meter reads `snapshot_seconds`/`eval_seconds`, what the
hooks remember is the trainer's `state_dict` (saved beside each checkpoint, loaded on resume).
A resumed stage continues at the next epoch (or batch) in the same MLflow run."""

from __future__ import annotations

import logging
import math
from contextlib import nullcontext
from pathlib import Path

from omegaconf import DictConfig

from sporeflow.config.schema import RunConfig
from sporeflow.core.errors import DataError, DivergedError
from sporeflow.core.names import STEPS_PER_EPOCH_TAG
from sporeflow.dim_reduce.step import SETTING_PREFIX
from sporeflow.engine.divergence import TrainingDiverged
from sporeflow.engine.events import EventRecord
from sporeflow.engine.hooks import HookBase, hooks_state, read_hooks_state, restore_hooks_state
from sporeflow.engine.loop import fit
from sporeflow.nn.optimizers import DECAY_NAME, RATE_NAME
from sporeflow.runtime.mindspore_context import Worker
from sporeflow.stage import hooks as wiring
from sporeflow.stage.build import build_stage_parts
from sporeflow.stage.result import Ended, StageResult, ended, save_predictions, with_passes
from sporeflow.stage.settings import StageSettings
from sporeflow.stage.spec import StageSpec
from sporeflow.stage.writer import StageWriter
from sporeflow.storage.checkpoints import (
    checkpoint_dir,
    checkpoint_files,
    class_names_entry,
    newest_complete_checkpoint,
    restore_exact,
    save_atomic,
)
from sporeflow.tracking.tracker import TrackedRun

log = logging.getLogger(__name__)


def set_by_config(name: str) -> bool:
    """A parameter the config sets (the optimizer's weight decay, stage 2's settings: graph
    inputs since issue 50), which a checkpoint written before may lack: the config's value holds
    (a resume trains on its run's own config)."""
    return name == DECAY_NAME or name.startswith(SETTING_PREFIX)


def rebuilt_by_config(name: str) -> bool:
    """The optimizer's learning rate (a float or the schedule's per-update table, built for the
    resumed run's `epochs`): never taken from a checkpoint; the optimizer's update count
    (`global_step`) and moments are, so the schedule goes on at the update it reached."""
    return name == RATE_NAME


class Trainer:
    """One stage of one job on this worker. Built before its MLflow run is opened: a stage that
    cannot get this far leaves no trace in MLflow (and a resumed run keeps its status).
    `cfg` is read only where components are built (network, optimizer, loss, data, a user's
    hooks, the packaged model); the build reads its settings (train step, AMP, shards, stage
    2's) from `config`, the same config typed (job.plan's `plan.run`); every other setting
    comes from `settings`."""

    def __init__(
        self,
        cfg: DictConfig,
        config: RunConfig,
        settings: StageSettings,
        spec: StageSpec,
        data,
        worker: Worker,
        resume: bool = False,
    ):
        self.cfg, self.config, self.settings = cfg, config, settings
        self.spec, self.worker = spec, worker
        self.data = data  # the job's ImageDataset: train, val and test come from it
        if worker.is_main:
            log.info("stage %s: building the network and its train step", spec.name)
        self.ckpt_dir = checkpoint_dir(spec.stage_dir, worker.rank, worker.world_size)
        self.start_epoch, start_batches, state = 0, 0, None
        self.resumed_from: Path | None = None  # the checkpoint a resumed stage continues from
        if resume:
            self.resumed_from, state = newest_complete_checkpoint(self.ckpt_dir)
            self.start_epoch = int(state["epoch_num"].asnumpy())
            if "epoch_step" in state:  # written mid-epoch (a requeue): batches already trained
                start_batches = int(state["epoch_step"].asnumpy())
            log.info(
                "resuming %s from %s (epoch %d, %d batches into the next)",
                spec.name,
                self.resumed_from,
                self.start_epoch,
                start_batches,
            )
        self.train_data = data.create(
            "train", seed=settings.seed, start_epoch=self.start_epoch, **worker.dataset_args()
        )
        if start_batches:  # MindSpore's own fast-forward: its first epoch starts after them
            self.train_data.set_init_step(start_batches)
        self.steps_per_epoch = self.train_data.get_dataset_size()
        if self.steps_per_epoch == 0:
            raise DataError(
                f"the training split of {config.dataset['_target_']} yields no batch of "
                f"{settings.worker_batch} (drop_remainder={getattr(data, 'drop_remainder', False)})"
            )
        self.val_data = data.create("val")  # every evaluation during training: what chooses
        self.test_data = data.create("test")  # read once, at the stage's end: what reports
        self.parts = build_stage_parts(cfg, config, spec, self.steps_per_epoch)
        if state is not None:
            restore_exact(
                state, *self.parts.state_cells, from_config=set_by_config, rebuilt=rebuilt_by_config
            )
        self.record = EventRecord(
            settings.epochs, self.steps_per_epoch, self.start_epoch, start_batches
        )
        self.writer = StageWriter(None)  # the run's, once train() has one
        self.hooks: list[HookBase] = []  # in the order fit runs them
        self.own: wiring.StageHooks | None = None

    # --- hooks ---------------------------------------------------------------------------------
    def register_hooks(self, built: wiring.StageHooks) -> None:
        """sporeflow's hooks by phase, each user hook right after the phase its `place` names,
        and last the stop for a requeue (it needs every other hook's work of the step done)."""
        self.own = built
        ordered: list[HookBase] = []
        for phase, own in built.phases.items():
            ordered += [*own, *(hook for hook in built.user if hook.place == phase)]
        self.hooks = [*ordered, built.requeue]

    def state_dict(self) -> dict:
        """What the user's hooks remember: saved beside every full checkpoint."""
        return hooks_state(self.own.user) if self.own is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.own is not None:
            restore_hooks_state(self.own.user, state)

    def save_checkpoint(self, cb, epoch_step: int = 0) -> Path:
        """The full checkpoint of the step MindSpore's `cb` is at (a requeue's, mid-epoch)."""
        assert self.own is not None, "register_hooks first"
        return self.own.checkpoints.save(cb, epoch_step)

    def snapshot_seconds(self) -> float:
        return sum(hook.seconds for hook in self.own.snapshots) if self.own is not None else 0.0

    def eval_seconds(self) -> float:
        return self.own.evaluator.seconds if self.own is not None else 0.0

    # --- the stage -----------------------------------------------------------------------------
    def plan_line(self, batching: str) -> str:
        """What the stage will train; a resume of a stage that trained all its epochs says
        there is nothing left: its weights are only evaluated and exported."""
        name, epochs = self.spec.name, self.settings.epochs
        if self.start_epoch >= epochs:
            return (
                f"stage {name}: nothing left to train: {self.resumed_from} is at epoch "
                f"{self.start_epoch} of its {epochs} (a larger epochs= trains on); its "
                "weights are evaluated and exported again"
            )
        return (
            f"stage {name}: epochs {self.start_epoch + 1}..{epochs} x "
            f"{self.steps_per_epoch} steps; {batching}"
        )

    def train(self, run: TrackedRun) -> StageResult:
        """Train up to the stage's epochs (or until a hook stops it), export `final.<format>`,
        measure it on validation and test, record it all through the writer; the result."""
        settings = self.settings
        batching = settings.batching(self.steps_per_epoch)
        log.info("%s", self.plan_line(batching))
        self.writer = StageWriter(run if self.worker.is_main else None)
        self.writer.tags(self._batching_tags())
        self.writer.data(self.data)
        self.register_hooks(wiring.stage_hooks(self))
        self._fit()
        own = self.own
        assert own is not None
        latest = self.record.latest_eval()
        final = latest[1] if latest is not None else own.evaluator.evaluate()
        last_epoch = latest[0] if latest is not None else settings.epochs  # a hook may stop
        last_step = last_epoch * self.steps_per_epoch
        weights, end, predictions = self._export(self._exported(final), last_step)
        cost = own.cost.cost()
        self.writer.files(predictions)
        spent = cost.metrics()
        if last_epoch in own.cost.by_epoch:  # its epoch's end put cost/passes at this step
            spent.pop("cost/passes")
        self.writer.metrics({**end.metrics(), **spent}, last_step)
        speed = own.throughput.mean  # NaN when no step was timed: not a measurement
        self.writer.metrics(
            {"final/images_per_sec": speed} if math.isfinite(speed) else {}, last_step, flush=True
        )
        self.writer.files([weights], "checkpoints")
        return StageResult(
            self.spec.name,
            end.val,
            weights,
            speed,
            with_passes(self.record.evals, own.cost.by_epoch),
            batching,
            end.val_correct,
            run.run_id,
            self.spec.stage_dir,
            cost=cost.metrics(),
            test_metrics=end.test,
            test_correct=end.test_correct,
            trained_steps=cost.steps - self.record.steps_before,
        )

    def _batching_tags(self) -> dict:
        settings = self.settings
        return {
            "batch.per_worker": settings.worker_batch,
            "batch.global": settings.global_batch,
            "batch.workers": settings.workers,
            STEPS_PER_EPOCH_TAG: self.steps_per_epoch,
        }

    def _fit(self) -> None:
        if self.resumed_from is not None:
            self.load_state_dict(read_hooks_state(self.resumed_from))
        try:
            fit(self.parts, self.train_data, self.settings.epochs, self.hooks, self.start_epoch)
        except TrainingDiverged as ex:
            raise DivergedError(self._diverged_message(ex)) from None

    def _diverged_message(self, ex: TrainingDiverged) -> str:
        finite = checkpoint_files(self.ckpt_dir, "epoch_*")
        kept = (
            f"the last finite checkpoint is {finite[-1]} (resume={self.spec.stage_dir} "
            "continues from it)"
            if finite
            else "no checkpoint was written before it"
        )
        return (
            f"stage {self.spec.name} {ex}; nothing after it was saved, {kept}. Lower "
            "optimizer.lr or set train.clip_grad_norm; callbacks.stop_on_divergence=false "
            "trains on regardless"
        )

    def _exported(self, final: dict) -> dict:
        """The metrics of the weights the stage exports: the EMA ones (named without `_ema`)
        when they are ranked, else the raw ones."""
        if self.settings.ema_ranked:
            return {k[:-4]: v for k, v in final.items() if k.endswith("_ema")}
        return {k: v for k, v in final.items() if not k.endswith("_ema")}

    def _export(self, val: dict, last_step: int) -> tuple[Path, Ended, list[Path]]:
        """`final.<format>` (and `final_ema.<format>` when EMA is kept but not ranked), holding
        the data set's class names (storage.checkpoints.class_names_entry), the
        exported weights measured on validation and test (`val`: their last validation
        metrics) with right/wrong per image saved (rank 0: predictions.npy,
        test_predictions.npy), and (rank 0) the packaged model on the run."""
        parts, fmt = self.parts, self.settings.checkpoint_format
        ema_ranked = self.settings.ema_ranked
        swapped = parts.ema_swap if ema_ranked and parts.ema_swap is not None else nullcontext
        names = class_names_entry(self.data.class_names())  # they travel with the weights
        with swapped():
            weights = save_atomic(parts.network, self.ckpt_dir / f"final.{fmt}", names)
            end = ended(parts.model, val, self.val_data, self.test_data)
            main = self.worker.is_main
            predictions = save_predictions(self.spec.stage_dir, end) if main else []
            self.writer.model(
                self.cfg,
                self.config,
                parts.network,
                weights,
                self.test_data,
                self.spec.stage_dir,
                last_step,
            )
        if parts.ema_swap is not None and not ema_ranked:
            with parts.ema_swap():
                save_atomic(parts.network, self.ckpt_dir / f"final_ema.{fmt}", names)
        return weights, end, predictions
