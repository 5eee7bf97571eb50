"""Issue 75 items 6 and 7: no FINISHED without training, no choice on the test split. A batch
larger than the training split, an early stop's setting outside its allowed values or watching a
metric no stage records, and an optimising sweep over eval.py's test accuracy: each exit 2 with
one line naming the key and what is allowed, before any work (no run dir, no MLflow store, no
sweep dir, no Optuna study)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf
from test_refusals import refused

from helpers.inprocess import TINY, run_job, train_cli
from sporeflow.config import objective
from sporeflow.config.validation import validate
from sporeflow.core.errors import ConfigError
from sporeflow.engine.events import EventRecord
from sporeflow.engine.hooks import EarlyStopping

HOOK = ["callbacks=early_stop"]
PLAIN = "val/acc, val/loss"

CASES = {
    "a batch larger than the training split": (
        ["dataset.batch_size=100000"],
        "dataset.batch_size=100000: larger than the training split (115 images), so no step "
        "would train on a whole batch; allowed: at most 115",
    ),
    "the same with drop_remainder (it would yield no batch at all)": (
        ["dataset.batch_size=116", "+dataset.drop_remainder=true"],
        "dataset.batch_size=116: larger than the training split (115 images), so no step "
        "would train on a whole batch; allowed: at most 115",
    ),
    "a global batch whose worker's share is larger than the worker's shard": (
        ["parallel=data2", "dataset.batch_size=118"],
        "dataset.batch_size=118 is 59 per worker of parallel.workers=2: larger than a worker's "
        "share of the training split (58 of its 115 images), so no step would train on a whole "
        "batch; allowed: at most 116",
    ),
    "a per-worker batch larger than the worker's shard": (
        ["parallel=data2", "parallel.per_worker_batch=true", "dataset.batch_size=59"],
        "dataset.batch_size=59 per worker (parallel.per_worker_batch=true): larger than a "
        "worker's share of the training split (58 of its 115 images), so no step would train "
        "on a whole batch; allowed: at most 58",
    ),
    "an early stop's mode outside its allowed values": (
        [*HOOK, "+callbacks.hooks.0.mode=maximize"],
        "callbacks.hooks[0].mode='maximize'; allowed: max, min",
    ),
    "an early stop watching a test metric": (
        [*HOOK, "+callbacks.hooks.0.monitor=test/acc"],
        "callbacks.hooks[0].monitor='test/acc': a stage chooses on the validation split, never "
        f"on the test images that report it; allowed: {PLAIN}",
    ),
    "an early stop watching a metric no stage records": (
        [*HOOK, "+callbacks.hooks.0.monitor=val/f1"],
        "callbacks.hooks[0].monitor='val/f1': not a metric the stage records on the validation "
        f"split; allowed: {PLAIN}",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_job_that_would_not_train_or_would_choose_blind_is_refused_before_any_work(
    tmp_path, case
):
    args, line = CASES[case]
    assert refused([*TINY, *args], tmp_path) == [line]


def test_a_batch_as_large_as_the_training_split_trains(compose_cfg, tmp_path, monkeypatch):
    """The bound is the split itself: one whole batch an epoch is a step, not refused."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    args = [*TINY, "epochs=1", "dataset.batch_size=115", "tracking.enabled=false"]
    value, _ = run_job(compose_cfg, tmp_path, args)
    assert 0.0 <= value <= 1.0
    assert (tmp_path / "run" / "checkpoints" / "epoch_0001.ckpt").is_file()


def checked(compose_cfg, *args: str) -> str | None:
    """The refusal of a composed config (None: validated)."""
    try:
        validate(compose_cfg([*TINY, *args]))
    except ConfigError as ex:
        return str(ex)
    return None


def test_an_ema_metric_is_watched_only_where_every_stage_records_it(compose_cfg):
    """acc_ema and loss_ema are recorded with train.ema.enabled, but never by a pipeline's
    stage 2 (its step keeps no EMA weights): there they are refused, naming what is recorded."""
    ema = "train.ema.enabled=true"
    watch = "+callbacks.hooks.0.monitor=val/acc_ema"
    assert checked(compose_cfg, *HOOK, watch) == (
        "callbacks.hooks[0].monitor='val/acc_ema': recorded with train.ema.enabled=true, "
        f"outside a dim-reduce pipeline; allowed: {PLAIN}"
    )
    assert checked(compose_cfg, *HOOK, ema, watch) is None
    assert checked(compose_cfg, *HOOK, ema, "+callbacks.hooks.0.monitor=acc_ema") is None
    refusal = checked(compose_cfg, *HOOK, ema, watch, "debug=dim_reduce")
    assert refusal is not None and refusal.endswith(f"; allowed: {PLAIN}"), refusal
    assert objective.validation_metrics(ema=True, dim_reduce=False) == [
        "val/acc",
        "val/loss",
        "val/acc_ema",
        "val/loss_ema",
    ]


def test_early_stopping_watches_a_val_name_and_refuses_a_mode_it_does_not_know():
    """`val/loss` is the record's `loss` (`loss` alike); mode min stops when it rises."""
    hook = EarlyStopping(monitor="val/loss", patience=1, mode="min").bind(EventRecord(10, 10))
    for epoch, loss in enumerate([2.0, 1.5, 1.7], start=1):
        hook.record.put_eval(epoch, epoch * 10, {"loss": loss, "acc": 0.1 * epoch})
        hook.after_epoch(epoch)
    assert hook._stop_requested and hook.best == pytest.approx(-1.5)
    with pytest.raises(ValueError, match="mode='maximize'; allowed: max, min"):
        EarlyStopping(mode="maximize")


def eval_sweep(tmp_path, *args: str) -> tuple[int, str]:
    return train_cli(["-m", *args], tmp_path, run_dir=None, app="eval")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two finished runs of train.py (one epoch of the tiny job each) to evaluate."""
    launch = tmp_path_factory.mktemp("sources")
    for name, seed in (("a", 1), ("b", 2)):
        code, err = train_cli([*TINY, "epochs=1", f"seed={seed}"], launch, run_dir=name)
        assert code == 0, err[-3000:]
    return launch / "a", launch / "b"


@pytest.mark.parametrize(
    "sweeper, swept",
    [
        ("sporeflow_optuna", ["source=choice({a},{b})", "hydra.sweeper.sampler=grid"]),
        ("sporeflow_race", ["source={a},{b}"]),
    ],
)
def test_an_optimising_sweep_of_eval_on_the_test_split_is_refused_before_any_trial(
    tmp_path, two_runs, monkeypatch, sweeper, swept
):
    """eval.py returns its split's accuracy; Optuna (or the race) choosing by it on split=test
    would choose on the test images: refused as sweep.objective=test/acc is for train.py."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    a, b = two_runs
    args = [f"hydra/sweeper={sweeper}", *(s.format(a=a, b=b) for s in swept), "split=test"]
    code, err = eval_sweep(tmp_path, *args)
    assert code == 2, err[-3000:]
    assert err == (
        f"Config error: split=test with hydra/sweeper={sweeper}: the sweep would choose by "
        "what eval.py returns, the accuracy on the test images that report the result (as "
        "sweep.objective=test/acc would for train.py); use split=val, or a plain -m sweep "
        "that reports each source and chooses none  (python eval.py --help lists groups and "
        "options)\n"
    )
    assert list(tmp_path.iterdir()) == [], "no sweep dir, no Optuna study, no MLflow store"


def test_a_plain_eval_sweep_on_the_test_split_reports_each_source_and_chooses_none(
    tmp_path, two_runs, monkeypatch
):
    """Hydra's basic sweeper only reports: each source's test accuracy, no best, no study."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    a, b = two_runs
    code, err = eval_sweep(tmp_path, f"source={a},{b}", "split=test")
    assert code == 0, err[-3000:]
    assert err.count("on its test split: acc=") == 2, err[-3000:]
    assert "best" not in err and not (tmp_path / "optuna.db").exists()


def test_an_optimising_sweep_of_eval_on_validation_or_of_train_is_not_refused_for_its_split():
    """The refusal is eval.py's split=test alone: split=val chooses on validation, and a
    train.py config (no `source`) has its own check (`sweep.objective`)."""
    for config in ({"split": "val", "source": "x"}, {"split": "test"}, {"epochs": 1}):
        assert objective.choice_on_test_refusal(OmegaConf.create(config), "a sweeper") is None
    refused_config = OmegaConf.create({"split": "test", "source": "???"})  # a swept source
    assert objective.choice_on_test_refusal(refused_config, "a sweeper") is not None
