"""sporeflow from Python (notebooks, scripts): `run`, `sweep`, `results`, `load` and `compare`.

Each call is its command, in the calling process: `run` is `python train.py`, `sweep` is
`python train.py -m`, `results` is `sporeflow compare --sweep`, `load(...).predict` is
`sporeflow predict`, `compare(a, b)` is `sporeflow compare RUN_A RUN_B`. The same Hydra
composition of the checkout's `conf/`, the same checks, run dirs, MLflow records and console
lines; a bad override raises `ConfigError` carrying the line the command prints (where the
command exits 2), a failed run raises what made it fail.
What comes back is read from what the run recorded (its run dir and its MLflow run), so a
result here and the MLflow UI never disagree.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from sporeflow.core import signals, telemetry
from sporeflow.core.errors import ConfigError
from sporeflow.core.names import RUN_DIR_TAG, STAGE_TAG
from sporeflow.entry import messages
from sporeflow.storage.run_marker import PIPELINE

if TYPE_CHECKING:  # the store's reads import MLflow at first use, not with sporeflow
    from sporeflow.job.job_result import JobResult
    from sporeflow.report.run_pair import RunPair
    from sporeflow.tracking.store_reads import StoreReads

TRAIN = "train"
DEFAULT_CONF = Path(__file__).resolve().parents[3] / "conf"  # the checkout's, beside train.py
EXPERIMENT = "sporeflow"  # tracking.experiment_name's default
SPLITS = ("val", "test")  # a pipeline's comparison metrics: val/<stage>/acc, test/<stage>/acc


@dataclass(frozen=True)
class RunResult:
    """One finished job, as recorded. `metrics` are its MLflow run's final metrics
    (`final/val/acc` and `test/acc` for a plain run; a pipeline's `val/stage2/acc`,
    `test/stage2/acc`, `val/gain`, `test/gain`, ... on its parent run), or with tracking off
    (`run_id` None) the same results as the job returned them; `stages` a pipeline's stages by
    name with their metrics on `split` (`stages["budget"]["acc"]`: validation)."""

    run_dir: Path
    objective: float  # what train.py returns: `sweep.objective` of this job
    run_id: str | None  # the MLflow run (a pipeline's parent); None: tracking off or not stored
    uri: str
    metrics: dict[str, float] = field(default_factory=dict)
    weights: Path | None = None  # the final weights (a pipeline's: stage 2's)

    @property
    def stages(self) -> dict[str, dict[str, float]]:
        """A pipeline's stages (stage1, stage2, each baseline) with their exported weights' acc
        and loss on the validation split; empty for a plain run."""
        return self.stages_on("val")

    def stages_on(self, split: str) -> dict[str, dict[str, float]]:
        """`stages` on `split` (val or test)."""
        if split not in SPLITS:
            raise ValueError(f"split={split!r}; allowed: {', '.join(SPLITS)}")
        found: dict[str, dict[str, float]] = {}
        for key, value in self.metrics.items():
            head, _, rest = key.partition("/")
            stage, _, name = rest.partition("/")
            if head == split and name in ("acc", "loss") and not stage.startswith("vs_"):
                found.setdefault(stage, {})[name] = value
        return found

    @property
    def answer(self) -> str:
        """A pipeline's one-line answer on the test images (stage 2 against stage 1, each
        baseline and the budget arm, with intervals, p and a verdict word), as its console,
        comparison.txt and `sporeflow compare` say it; "" for a plain run."""
        from sporeflow.report.comparison import answer

        if not any(k.startswith("test/vs_") for k in self.metrics):
            return ""
        return answer(self.metrics)

    @property
    def gain(self) -> float | None:
        """A pipeline's stage 2 minus its best baseline (chosen on validation) at equal
        epochs, on the test images (None: a plain run)."""
        return self.metrics.get("test/gain")


@dataclass(frozen=True)
class SweepResults:
    """A sweep as `sporeflow compare --sweep` shows it: `jobs` one row per job, best first by
    `objective`; `points` one row per point (its jobs but the seed) with its pooled value, 95%
    interval, difference from the best, Holm p and verdict, all on the validation images;
    `decision` "winner" or "tie" (None: no per-image outcomes to decide on), as the parent
    run's `sporeflow.decision` tag; `leader` the point the sweep names by its one rule
    (report.decision.lead: the winner, else the cheapest of the tied; "none" when their cost
    is shared), as the `sporeflow.leader` tag, `leader_line` why; `reported` the leader on the
    test images and `answer` its one-line answer (stage 2 against stage 1 and each baseline,
    with interval, p and verdict word). A sweep of
    `sweep.objective=[<accuracy>, <cost>]` (its parent's `sweep.cost` tag): `front` one row per
    point, cheapest first - point, acc, ci_low, ci_high, cost, on_front, beaten_by, how, p_holm
    (NaN on the front), seeds, jobs - as the sweep's front.csv; empty for one objective."""

    run_id: str
    uri: str
    objective: str
    jobs: Any  # pandas.DataFrame
    points: Any  # pandas.DataFrame (empty without a decision)
    decision: str | None
    verdict: str  # the decision as the sweep's console says it
    reported: str = ""  # the leader on the test images, as the line after the verdict
    front: Any = None  # pandas.DataFrame: a sweep of [accuracy, cost]'s points (empty otherwise)
    leader: str | None = None  # the leader's point, "none" (no leader), None (no decision)
    leader_line: str = ""  # the leader and why, as the console says it (report.decision.lead)
    answer: str = ""  # the leader's one-line answer on the test images, as the console says it


def compose(
    overrides: Sequence[str] = (),
    *,
    app: str = TRAIN,
    config_dir: str | Path | None = None,
    validate: bool = True,
    with_hydra: bool = False,
) -> Any:
    """The config `python train.py OVERRIDES` (or eval.py: `app="eval"`) would run with, and
    nothing run: with `validate`, checked and resolved as train.py checks it (the plain
    config its stages read; this imports MindSpore to check the components); `with_hydra`
    keeps Hydra's own node (`cfg.hydra`). Raises ConfigError with the command's line."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from sporeflow.config.typed_text import as_typed
    from sporeflow.config.validation import validate as checked

    conf = _conf_dir(config_dir)
    argv = [str(conf.parent / f"{app}.py"), *overrides]
    try:
        with _hydra_state(), initialize_config_dir(str(conf), version_base="1.3"):
            cfg = as_typed(
                hydra_compose(app, list(overrides), return_hydra_config=with_hydra), list(overrides)
            )
        return checked(cfg) if validate else cfg
    except messages.usage_errors() as ex:
        raise ConfigError(messages.refusal(ex, argv)) from None


def run(overrides: Sequence[str] = (), *, config_dir: str | Path | None = None) -> RunResult:
    """`python train.py OVERRIDES` in this process, from the current folder (its outputs/,
    its mlflow.db unless `tracking.uri` says otherwise). Raises ConfigError (the command's
    refusal line) before any work, or what made the run fail; KeyboardInterrupt ends the run
    KILLED as Ctrl-C does."""
    from sporeflow.entry.app import run_job

    with _hydra(config_dir, list(overrides)) as hydra:  # one run, whatever a preset declares
        job = hydra.run(TRAIN, run_job, [*overrides, "hydra.mode=RUN"])
    return _job_result(job.hydra_cfg.hydra.runtime.output_dir, job.cfg, job.return_value)


def sweep(overrides: Sequence[str] = (), *, config_dir: str | Path | None = None) -> SweepResults:
    """`python train.py -m OVERRIDES` in this process (a grid, `hparams_search=...` Optuna, or
    a race; Hydra's launcher runs the jobs: in this process, or joblib's or SLURM's), then its
    table and decision as `results` reads them. Raises as `run` does; a failed job does not
    stop the others (its row says FAILED)."""
    from sporeflow.entry import sweep_run
    from sporeflow.entry.app import refuse_resume_in_sweep, run_task

    refuse_resume_in_sweep(list(overrides))
    started = time.time()
    with _hydra(config_dir, list(overrides), sweep=True) as hydra:
        try:  # as Hydra's own `-m`: the mode set whatever a preset declares
            hydra.multirun(TRAIN, run_task, [*overrides, "hydra.mode=MULTIRUN"])
        except BaseException as ex:
            sweep_run.end_unfinished(ex)
            raise
        sweep_run.end_unfinished(None)
        reads = _store_of(_composed(hydra, overrides))
    found = _find_sweep(reads, "latest")
    if found.info.start_time / 1000 < started - 1:
        raise ConfigError(f"the sweep left no parent run in {reads.uri} (tracking.enabled=false?)")
    return _sweep_results(reads, found)


@overload
def results(
    sweep: str = "latest", *, uri: str | None = None, experiment: str = EXPERIMENT
) -> SweepResults: ...


@overload
def results(
    *, run: str | Path, uri: str | None = None, experiment: str = EXPERIMENT
) -> RunResult: ...


def results(
    sweep: str = "latest",
    *,
    run: str | Path | None = None,
    uri: str | None = None,
    experiment: str = EXPERIMENT,
) -> SweepResults | RunResult:
    """What a finished sweep or run recorded, from any store (`uri`: default as train.py's,
    the current folder's mlflow.db or MLFLOW_TRACKING_URI). A sweep by its parent run's id or
    name (`sweep-<date>-<time>`, as its start prints it) or `latest` (SweepResults); with
    `run=`, one job by its MLflow run id, the `sf-...` key its run dir holds, or its run dir
    (RunResult). Raises ConfigError naming what is not there."""
    from sporeflow.tracking.store_reads import StoreReads

    reads = StoreReads.at(uri, experiment)
    if run is not None:
        return _recorded_run(reads, str(run))
    return _sweep_results(reads, _find_sweep(reads, sweep))


def load(source: str | Path, *, uri: str | None = None, experiment: str = EXPERIMENT) -> Trained:
    """A trained network by what `eval.py source=` takes: a run or stage dir, an MLflow run id
    (or the `sf-...` key a run dir holds), a `models:/name/version`; fetched and checked as
    eval.py does. Raises ConfigError naming what is wrong."""
    from sporeflow.stage.source import resolve
    from sporeflow.tracking.store_reads import StoreReads

    return Trained(resolve(str(source), StoreReads.at(uri, experiment)))


def compare(
    a: str | Path, b: str | Path, *, uri: str | None = None, experiment: str = EXPERIMENT
) -> RunPair:
    """`sporeflow compare RUN_A RUN_B`: run `a` against run `b` (each what `eval.py source=`
    takes: a run or stage dir, an MLflow run id or sf- key, a `models:/` URI) on the test
    images both were tested on - a `report.run_pair.RunPair` with each accuracy and its Wilson
    interval, the difference with Newcombe's interval, McNemar's exact p, the verdict, the
    cost side by side and the config keys that differ; `.lines()` is what the command prints.
    Raises ConfigError (the command's line) for runs tested on other images or not found."""
    from sporeflow.job.run_sides import compared
    from sporeflow.tracking.store_reads import StoreReads

    return compared(str(a), str(b), StoreReads.at(uri, experiment))


@dataclass(frozen=True)
class Trained:
    """A source's network with the config it was trained with (`source.config`)."""

    source: Any  # stage.source.Source: name, weights, config, run_id

    def predict(self, images: str | Path | np.ndarray) -> Any:
        """Class probabilities for a folder of image files, a `.npy` batch, or a uint8 array
        (N x H x W or N x H x W x C, as the data set keeps its images), through the data set's
        eval transforms: a `job.predict.Prediction` (`names`, `probabilities`, `labels`,
        `class_names`, `caveat`). Raises ConfigError or DataError before any work."""
        from sporeflow.job import predict as predicting

        def predicted(path: Path) -> Any:
            cfg, checked = predicting.checked_inputs(self.source, path)
            return predicting.predict(cfg, self.source, checked, progress=False)

        if not isinstance(images, np.ndarray):
            return predicted(Path(images))
        with tempfile.TemporaryDirectory() as folder:  # checked as a .npy file is
            np.save(Path(folder, "images.npy"), images)
            found = predicted(Path(folder, "images.npy"))
        return dataclasses.replace(found, names=tuple(map(str, range(len(found.names)))))


# -- composing and running as the command does ---------------------------------------------


@contextlib.contextmanager
def _hydra(config_dir: str | Path | None, overrides: list[str], sweep: bool = False) -> Iterator:
    """Hydra as `@hydra.main` sets it up for train.py, for one call: its config search path,
    version base and plugins; Hydra's global state, the root logger's handlers (Hydra points
    them at the job's log file) and the signal handlers put back after; the command's usage
    errors raised as ConfigError with its refusal line."""
    from hydra import version
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path

    conf = _conf_dir(config_dir)
    telemetry.off_unless_chosen()
    version.setbase("1.3")
    argv = [str(conf.parent / f"{TRAIN}.py"), *(["-m"] if sweep else []), *overrides]
    with signals.embedded(), root_logger_kept(), _stderr_without_hydra_job_line(sweep):
        with _hydra_state():
            try:
                yield Hydra.create_main_hydra2(TRAIN, create_config_search_path(str(conf)))
            except messages.usage_errors() as ex:
                raise ConfigError(messages.refusal(ex, argv)) from None


def _conf_dir(config_dir: str | Path | None) -> Path:
    conf = Path(config_dir) if config_dir is not None else DEFAULT_CONF
    if not (conf / f"{TRAIN}.yaml").is_file():
        raise ConfigError(f"config_dir={conf}: no {TRAIN}.yaml there (the checkout's conf/)")
    return conf


@contextlib.contextmanager
def _hydra_state() -> Iterator[None]:
    """sporeflow's schemas registered and Hydra's global state fresh, and cleared after."""
    from hydra.core.global_hydra import GlobalHydra

    from sporeflow.entry.hydra_setup import register_configs

    register_configs()
    GlobalHydra.instance().clear()
    try:
        yield
    finally:
        GlobalHydra.instance().clear()


@contextlib.contextmanager
def _stderr_without_hydra_job_line(sweep: bool) -> Iterator[None]:
    """A single run's failure without Hydra's "Error executing job with overrides" line, as
    train.py prints it (a sweep keeps it: it names the failed job)."""
    if sweep:
        yield
        return
    before = sys.stderr
    sys.stderr = messages.WithoutHydraJobLine(before)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stderr = before


@contextlib.contextmanager
def root_logger_kept() -> Iterator[None]:
    """The root logger's handlers and level as before; the handlers added inside (Hydra's
    console and job-log handlers) closed."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        for added in set(root.handlers) - set(handlers):
            added.close()
        root.handlers[:] = handlers
        root.setLevel(level)


def _composed(hydra: Any, overrides: Sequence[str]) -> Any:
    """The config `overrides` compose, sweep values left as given (Hydra's own look ahead)."""
    from hydra.types import RunMode

    return hydra.compose_config(
        TRAIN,
        list(overrides),
        run_mode=RunMode.MULTIRUN,
        with_log_configuration=False,
        validate_sweep_overrides=False,
    )


def _store_of(cfg: Any) -> StoreReads:
    """The store a job of `cfg` records in, as train.py run from the current folder writes it."""
    from sporeflow.tracking.store_reads import StoreReads

    return StoreReads.of_config(cfg.tracking, Path.cwd())


def _final_weights(reads: StoreReads, ref: str) -> Path | None:
    """A job's final weights (a pipeline's: stage 2's), as eval.py's source= finds them."""
    from sporeflow.stage.source import resolve

    try:
        return resolve(ref, reads).weights
    except ConfigError:
        return None  # a job that trained nothing of its own (copied from a finished one)


def _job_result(run_dir: str, cfg: Any, job: JobResult) -> RunResult:
    """The job at `run_dir` as it returned: its objective (a list objective's accuracy), run,
    weights and metrics - those its MLflow run recorded when there is one (every final metric,
    system metrics too, as `results` reads it back), else the job's own (tracking off)."""
    from sporeflow.tracking.store_reads import marked_run_id

    value = job.objective  # [accuracy, cost] for a list objective: the accuracy
    value = value[0] if isinstance(value, (list, tuple)) else value
    reads, folder = _store_of(cfg), Path(run_dir)
    run_id = job.run_id or marked_run_id(folder, folder)  # a copied finished job: its marker's
    recorded = reads.get_run(run_id) if run_id else None
    return RunResult(
        folder,
        float(value),
        recorded.info.run_id if recorded is not None else None,
        reads.uri,
        dict(recorded.data.metrics) if recorded is not None else dict(job.metrics),
        job.weights or _final_weights(reads, str(folder)),
    )


def _recorded_run(reads: StoreReads, ref: str) -> RunResult:
    """A job's top-level run by its id, key or run dir, read back as `run` returns it: its
    objective is the metric its `sweep.objective` names."""
    from sporeflow.config import objective
    from sporeflow.tracking.store_reads import marked_run_id

    folder = Path(ref).expanduser()
    run_id = marked_run_id(folder, folder) if folder.is_dir() else ref
    recorded = reads.get_run(run_id) if run_id else None
    if recorded is None:
        raise ConfigError(
            f"run={ref}: no such run in experiment {reads.experiment_name!r} of {reads.uri} "
            "(an MLflow run id, the sf-... key in a run dir's sporeflow_run.json, or the run dir)"
        )
    metrics = dict(recorded.data.metrics)
    chosen = recorded.data.params.get("sweep.objective", "auto")
    key = objective.metric_key(
        objective.primary(chosen), recorded.data.tags.get(STAGE_TAG) == PIPELINE
    )
    return RunResult(
        Path(recorded.data.tags.get(RUN_DIR_TAG, "")),
        float(metrics.get(key, float("nan"))),
        recorded.info.run_id,
        reads.uri,
        metrics,
        _final_weights(reads, recorded.info.run_id),
    )


def _find_sweep(reads: StoreReads, which: str) -> Any:
    from sporeflow.report.sweep_report import sweep_run

    found = sweep_run(reads, which)
    if found is None:
        raise ConfigError(
            f"sweep={which}: no sweep run in experiment {reads.experiment_name!r} of {reads.uri} "
            "(a sweep parent's run id or name sweep-<date>-<time>; `latest` is the newest)"
        )
    return found


def _sweep_results(reads: StoreReads, run: Any) -> SweepResults:
    import pandas as pd

    from sporeflow.report import sweep_report as report

    found = report.summarize(reads, run)
    jobs = pd.DataFrame(
        [
            {"job": j.number, "status": j.status, "run_id": j.run_id, "seed": j.seed}
            | {k: j.values.get(k) for k in found.keys}
            | j.metrics
            for j in found.jobs
        ]
    )
    decision, leader = found.decision, found.leader
    on_test = report.selected_on_test(found.jobs)
    point = leader.point if leader is not None else None
    tested = None if point is None else report.reported(reads, found.jobs, point, found.key)
    return SweepResults(
        run.info.run_id,
        reads.uri,
        found.key,
        jobs,
        pd.DataFrame(decision.records(point) if decision is not None else []),
        decision.kind if decision is not None else None,
        decision.line(found.key, "test" if on_test else "validation") if decision else "",
        report.reported_line(point, tested, on_test) if point and tested else "",
        pd.DataFrame(found.front_records(), columns=FRONT_COLUMNS),
        leader.label if leader is not None else None,
        leader.line() if leader is not None else "",
        found.answer,
    )


FRONT_COLUMNS = [
    "point",
    "acc",
    "ci_low",
    "ci_high",
    "cost",
    "on_front",
    "beaten_by",
    "how",
    "p_holm",
    "seeds",
    "jobs",
]
