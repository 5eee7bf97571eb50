"""Hooks: their own state, chosen in config, saved with each checkpoint and given back on
resume; a stage a hook stops still exports what it has."""

from __future__ import annotations

import json

import pytest

from helpers.inprocess import TINY, run_job
from helpers.store import runs_of
from sporeflow.config.validation import validate
from sporeflow.core.errors import ConfigError
from sporeflow.engine.events import EventRecord
from sporeflow.engine.hooks import EarlyStopping, load_hooks_state, save_hooks_state

STOPPER = "sporeflow.engine.hooks.EarlyStopping"


def hooks_override(**settings) -> str:
    inner = ", ".join(f"{k}: {v}" for k, v in {"_target_": STOPPER, **settings}.items())
    return f"callbacks.hooks=[{{{inner}}}]"


def evaluated(hook: EarlyStopping, epoch: int, value: float) -> None:
    hook.record.put_eval(epoch, epoch * 10, {hook.monitor: value})
    hook.after_epoch(epoch)


def test_early_stopping_counts_evaluations_without_improvement():
    hook = EarlyStopping(monitor="acc", patience=2, min_delta=0.01).bind(EventRecord(10, 10))
    for epoch, acc in enumerate([0.5, 0.6, 0.605, 0.59], start=1):
        evaluated(hook, epoch, acc)
    assert hook._stop_requested and hook.bad_evals == 2 and hook.best == pytest.approx(0.6)


def test_early_stopping_with_mode_min_and_no_eval_this_epoch():
    hook = EarlyStopping(monitor="loss", patience=1, mode="min").bind(EventRecord(10, 10))
    evaluated(hook, 1, 2.0)
    hook.after_epoch(2)  # no evaluation after epoch 2: nothing counted
    evaluated(hook, 3, 1.5)
    assert not hook._stop_requested
    evaluated(hook, 4, 1.7)
    assert hook._stop_requested and hook.last_seen == 4


def test_hooks_state_round_trips_beside_a_checkpoint(tmp_path):
    hook = EarlyStopping(patience=5).bind(EventRecord(10, 10))
    evaluated(hook, 1, 0.7)
    evaluated(hook, 2, 0.6)
    ckpt = tmp_path / "epoch_0002.ckpt"
    save_hooks_state(ckpt, [hook])
    fresh = EarlyStopping(patience=5).bind(EventRecord(10, 10))
    load_hooks_state(ckpt, [fresh])
    assert fresh.state_dict() == hook.state_dict() == {"best": 0.7, "bad_evals": 1, "last_seen": 2}
    assert json.loads((tmp_path / "epoch_0002.hooks.json").read_text())


def test_a_bad_hook_setting_and_a_class_that_is_no_hook_are_refused(compose_cfg):
    with pytest.raises(ConfigError) as caught:
        validate(
            compose_cfg(
                [
                    "callbacks.hooks=[{_target_: sporeflow.engine.hooks.EarlyStopping, patiense: 2},"
                    "{_target_: sporeflow.engine.events.EventRecord, epochs: 1, steps_per_epoch: 1}]"
                ]
            )
        )
    lines = str(caught.value).splitlines()
    assert lines[0].startswith(
        f"callbacks.hooks[0].patiense is not a setting of {STOPPER}; allowed:"
    )
    assert "patience" in lines[0]
    assert lines[1] == (
        "callbacks.hooks[1]._target_=sporeflow.engine.events.EventRecord: not a hook (nothing "
        "is called); allowed: a subclass of sporeflow.engine.hooks.HookBase"
    )


@pytest.fixture
def launch(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


def run_of(launch, run_dir):
    return next(r for r in runs_of(launch) if r.data.tags.get("run_dir") == str(run_dir))


def test_a_hook_stops_a_stage_and_its_state_survives_a_resume(compose_cfg, launch):
    """min_delta far above any change: epoch 1 sets the best, every later eval counts. With
    patience 2 and 2 epochs nothing stops; resumed to 5 epochs, the restored count (1) stops
    the stage after epoch 3 - a fresh hook would have run to epoch 5."""
    never_better = hooks_override(patience=2, min_delta=1000.0)
    run_job(compose_cfg, launch, [*TINY, "epochs=2", never_better], run="first")
    state = json.loads((launch / "first" / "checkpoints" / "epoch_0002.hooks.json").read_text())
    assert list(state.values()) == [
        {"best": pytest.approx(state["0:EarlyStopping"]["best"]), "bad_evals": 1, "last_seen": 2}
    ]

    resumed = [*TINY, "epochs=5", never_better, f"resume={launch / 'first'}"]
    run_job(compose_cfg, launch, resumed, run="second")
    run = run_of(launch, launch / "first")
    assert run.info.status == "FINISHED"
    history = run_history(launch, run.info.run_id)
    per_epoch = int(run.data.tags["batch.steps_per_epoch"])
    assert [step // per_epoch for step in history] == [1, 2, 3]
    assert (launch / "first" / "checkpoints" / "final.ckpt").is_file()
    assert run.data.metrics["final/val/acc"] == pytest.approx(history[3 * per_epoch])


def run_history(launch, run_id) -> dict:
    from helpers.store import client_of

    return {m.step: m.value for m in client_of(launch).get_metric_history(run_id, "val/acc")}


HOLDER = "helpers.resource_hooks.HoldsAFile"
INTERRUPTER = "{_target_: helpers.resource_hooks.InterruptAt, step: 2}"


@pytest.mark.parametrize(
    "ends, lr, also, raised",
    [
        ("cleanly", "0.01", "", None),
        ("TrainingDiverged", "1e12", "", "DivergedError"),
        ("Interrupted", "0.01", f", {INTERRUPTER}", "Interrupted"),
    ],
)
def test_after_train_releases_what_a_hook_holds_however_training_ends(
    compose_cfg, launch, ends, lr, also, raised
):
    """MindSpore calls on_train_end only after a clean loop; a hook's after_train runs all the
    same when training diverged or was interrupted, with `failure` saying why."""
    held = launch / "held.txt"
    hooks = f"callbacks.hooks=[{{_target_: {HOLDER}, path: '{held}'}}{also}]"
    args = [*TINY, "epochs=2", f"optimizer.lr={lr}", hooks]
    if raised is None:
        run_job(compose_cfg, launch, args)
    else:
        with pytest.raises(BaseException) as caught:
            run_job(compose_cfg, launch, args)
        assert type(caught.value).__name__ == raised
    assert held.read_text() == f"held\nreleased: {ends}\n"


def test_a_hook_runs_after_the_phase_its_place_names(compose_cfg, launch):
    """At `measure` (the default) a hook reads the loss of the step that just ran; at `guard`
    it runs before the loss is measured, so it reads the step before's."""
    seen = {}
    for name in ("LossSeen", "LossSeenAtGuard"):
        out = launch / f"{name}.json"
        hooks = f"callbacks.hooks=[{{_target_: helpers.resource_hooks.{name}, path: '{out}'}}]"
        run_job(compose_cfg, launch, [*TINY, "epochs=1", hooks], run=name)
        seen[name] = json.loads(out.read_text())
    at_measure, at_guard = seen["LossSeen"], seen["LossSeenAtGuard"]
    assert len(at_measure) == len(at_guard) > 2 and None not in at_measure
    assert at_guard[0] is None  # nothing measured yet at the first step
    # the same losses one step later (each run trains the same seed on the same data)
    assert at_guard[1:] == pytest.approx(at_measure[:-1], rel=1e-5)


def test_a_hook_that_names_no_phase_is_refused_with_the_allowed_places(compose_cfg):
    hooks = "callbacks.hooks=[{_target_: helpers.resource_hooks.LossSeenNowhere, path: x}]"
    with pytest.raises(ConfigError) as caught:
        validate(compose_cfg([hooks]))
    assert str(caught.value) == (
        "callbacks.hooks[0]._target_=helpers.resource_hooks.LossSeenNowhere: "
        "place='somewhere'; allowed: guard, measure, record (the stage's phase it runs after)"
    )


def test_a_diverged_stage_keeps_the_losses_it_measured_before_it_diverged(compose_cfg, launch):
    """The MLflow writer is a hook like any other: its after_train runs when training raised,
    so the losses of the diverging epoch reach the run (its run ends FAILED)."""
    with pytest.raises(BaseException) as caught:
        run_job(compose_cfg, launch, [*TINY, "epochs=2", "optimizer.lr=1e12"])
    assert type(caught.value).__name__ == "DivergedError"
    run = run_of(launch, launch / "run")
    assert run.info.status == "FAILED"
    from helpers.store import client_of

    losses = client_of(launch).get_metric_history(run.info.run_id, "train/loss")
    diverged_at = int(run.data.tags["sporeflow.failure"].split("step ")[1].split(":")[0])
    assert diverged_at > 1 and [m.step for m in losses] == list(range(1, diverged_at))
