"""`train/lr` (issue 63 item 5): the rate the optimizer's last update of each epoch used, at
the epoch's last global step, against the schedule computed here in numpy (not with
sporeflow.nn.schedules): warm-up then cosine or step decay, with gradient accumulation (the
schedule advances once per optimizer update), across a resume, and in a dim-reduce pipeline
(stage 2's rate, the budget arm's linear decay to zero). Real short jobs, read back from the
launch dir's sqlite store."""

from __future__ import annotations

import math

import numpy as np
import pytest

from helpers.inprocess import TINY
from helpers.inprocess import run_train_here as run_train
from helpers.store import by_stage, client_of, runs_of

LR = 0.02  # conf/optimizer/momentum.yaml, the default optimizer


def warmup_then(decay, lr, per_epoch, epochs, warmup_epochs, lr_init=0.0):
    """Per-update rates: linear warm-up from lr_init to lr over warmup_epochs (its last step at
    lr), then `decay(i, warmup, total)` for the steps after it."""
    total, warmup = epochs * per_epoch, round(warmup_epochs * per_epoch)
    rates = [
        lr_init + (lr - lr_init) * (i + 1) / warmup if i < warmup else decay(i, warmup, total)
        for i in range(total)
    ]
    return np.asarray(rates, dtype=np.float32)


def cosine(lr, lr_end):
    def decay(i, warmup, total):
        return lr_end + (lr - lr_end) * 0.5 * (
            1 + math.cos(math.pi * (i - warmup) / (total - warmup))
        )

    return decay


def step_decay(lr, per_epoch, step_epochs, gamma):
    def decay(i, warmup, total):
        return lr * gamma ** sum(i >= e * per_epoch for e in step_epochs)

    return decay


def lr_history(launch, run=None):
    """(steps, values) of `train/lr` of `run` (the launch dir's only run when None)."""
    if run is None:
        (run,) = runs_of(launch)
    points = client_of(launch).get_metric_history(run.info.run_id, "train/lr")
    points = sorted(points, key=lambda m: m.step)
    return [m.step for m in points], np.array([m.value for m in points])


def per_epoch_of(launch) -> int:
    (run,) = runs_of(launch)
    return int(run.data.tags["batch.steps_per_epoch"])


def test_a_warmed_up_cosine_schedule_is_recorded_at_each_epochs_end(tmp_path):
    """Plain mindspore.Model (no train-step feature): after epoch e the last update was global
    step e * per_epoch, which used entry e * per_epoch - 1 of the schedule."""
    epochs, lr_init, lr_end = 4, 0.002, 0.0005
    schedule = [
        "optimizer.schedule.name=cosine",
        "optimizer.schedule.warmup_epochs=1",
        f"+optimizer.schedule.lr_init={lr_init}",
        f"+optimizer.schedule.lr_end={lr_end}",
    ]
    proc = run_train([*TINY, f"epochs={epochs}", *schedule], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    per_epoch = per_epoch_of(tmp_path)
    want = warmup_then(cosine(LR, lr_end), LR, per_epoch, epochs, 1, lr_init)
    steps, values = lr_history(tmp_path)
    assert steps == [per_epoch * e for e in range(1, epochs + 1)]
    np.testing.assert_allclose(values, want[np.array(steps) - 1], rtol=1e-6)
    assert values[0] == pytest.approx(LR)  # the warm-up's last step reaches the peak
    assert lr_end < values[-1] < LR / 10  # the cosine's tail: one step short of lr_end
    assert np.all(np.diff(values) < 0)


def test_a_constant_rate_is_recorded_as_it_is(tmp_path):
    proc = run_train([*TINY, "epochs=2", "optimizer.lr=0.03"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    per_epoch = per_epoch_of(tmp_path)
    steps, values = lr_history(tmp_path)
    assert steps == [per_epoch, 2 * per_epoch]
    np.testing.assert_allclose(values, [0.03, 0.03], rtol=1e-6)


def test_with_accumulation_the_rate_is_the_last_updates(tmp_path):
    """train.accumulation_steps=3 (sporeflow's TrainStep): the optimizer updates every third
    micro-step, its count running across epoch ends, and each update reads the schedule at its
    own count: after epoch e, floor(e * per_epoch / 3) updates, the last one at entry one less."""
    epochs, k, lr_end = 3, 3, 0.001
    schedule = [
        "optimizer.schedule.name=cosine",
        "optimizer.schedule.warmup_epochs=1",
        f"+optimizer.schedule.lr_end={lr_end}",
        f"train.accumulation_steps={k}",
    ]
    proc = run_train([*TINY, f"epochs={epochs}", *schedule], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    per_epoch = per_epoch_of(tmp_path)
    assert per_epoch % k, "the test wants epochs that are not whole updates"
    want = warmup_then(cosine(LR, lr_end), LR, per_epoch, epochs, 1)
    steps, values = lr_history(tmp_path)
    assert steps == [per_epoch * e for e in range(1, epochs + 1)]
    updates = np.array([per_epoch * e // k for e in range(1, epochs + 1)])
    np.testing.assert_allclose(values, want[updates - 1], rtol=1e-6)


def test_a_resumed_run_continues_the_schedule(tmp_path):
    """Interrupted in its third epoch, resumed from epoch 2's checkpoint: epochs 3 and 4 read
    the schedule where the restored optimizer count left it (warm-up, then x0.5 after epochs 2, 3),
    each epoch end recorded once in the one run."""
    epochs, gamma = 4, 0.5
    args = [
        *TINY,
        f"epochs={epochs}",
        "optimizer.schedule.name=step",
        "optimizer.schedule.warmup_epochs=1",
        "+optimizer.schedule.step_epochs=[2,3]",
        f"+optimizer.schedule.gamma={gamma}",
    ]
    per_epoch = 4  # TINY: 115 training images (13 held out), batch 32, last batch kept
    stop = f"callbacks.hooks=[{{_target_: helpers.resource_hooks.InterruptAt, step: {2 * per_epoch + 1}}}]"
    first = run_train([*args, stop], tmp_path)
    assert first.returncode != 0 and "Interrupted" in first.stderr, first.stderr[-3000:]
    assert per_epoch_of(tmp_path) == per_epoch
    assert lr_history(tmp_path)[0] == [per_epoch, 2 * per_epoch]
    resumed = run_train([*args, f"resume={tmp_path / 'run'}"], tmp_path, run_dir="again")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    want = warmup_then(step_decay(LR, per_epoch, (2, 3), gamma), LR, per_epoch, epochs, 1)
    steps, values = lr_history(tmp_path)
    assert steps == [per_epoch * e for e in range(1, epochs + 1)]
    np.testing.assert_allclose(values, want[np.array(steps) - 1], rtol=1e-6)
    # x0.5 from epoch 3's first step on, again from epoch 4's
    np.testing.assert_allclose(values, [LR, LR, LR * gamma, LR * gamma**2], rtol=1e-6)


def test_a_pipeline_records_stage2s_rate_and_the_budget_arms_decay(tmp_path):
    """Stage 1 at its constant rate; stage 2 at boost.alpha (its step outside the PCA subspace:
    it has no optimizer); the budget arm decaying linearly from optimizer.lr towards zero over
    exactly its budget of T steps (Budgeted Training): entry i is lr * (1 - i / T)."""
    alpha = 0.003
    args = [*TINY, "debug=dim_reduce", "boost.baselines=[budget]", f"boost.alpha={alpha}"]
    proc = run_train(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = by_stage(runs_of(tmp_path))
    (stage1,), (stage2,), (budget,) = runs["stage1"], runs["stage2"], runs["budget"]
    per_epoch = int(stage1.data.tags["batch.steps_per_epoch"])
    steps, values = lr_history(tmp_path, stage1)
    assert steps == [per_epoch * e for e in (1, 2, 3)]
    np.testing.assert_allclose(values, LR, rtol=1e-6)
    steps, values = lr_history(tmp_path, stage2)
    assert steps == [per_epoch]  # debug=dim_reduce: one stage-2 epoch
    np.testing.assert_allclose(values, alpha, rtol=1e-6)
    total = int(budget.data.tags["budget.steps"])
    steps, values = lr_history(tmp_path, budget)
    ends = [min(per_epoch * e, total) for e in range(1, math.ceil(total / per_epoch) + 1)]
    assert steps == ends
    np.testing.assert_allclose(values, [LR * (1 - (s - 1) / total) for s in ends], rtol=1e-5)
    assert values[-1] == pytest.approx(LR / total, rel=1e-5)  # the last step's, one from zero


def test_the_rate_of_a_learning_rate_schedule_cell_and_before_any_update():
    """A user's LearningRateSchedule cell (MindSpore's CosineDecayLR) is read at the last
    update's count; an optimizer that has not updated yet used no rate."""
    import mindspore as ms
    from mindspore import Tensor, nn

    from sporeflow.engine.callbacks import optimizer_in, rate_used

    ms.set_seed(0)
    net = nn.Dense(5, 3)
    low, high, decay_steps = 0.001, 0.1, 10
    opt = nn.Momentum(net.trainable_params(), nn.CosineDecayLR(low, high, decay_steps), 0.9)
    step = nn.TrainOneStepCell(
        nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")), opt
    )
    assert optimizer_in((step,)) is opt and optimizer_in((net,)) is None
    assert rate_used(opt) is None
    rng = np.random.default_rng(0)
    for taken in range(1, 4):
        step(
            Tensor(rng.normal(size=(4, 5)).astype(np.float32)),
            Tensor(rng.integers(0, 3, 4).astype(np.int32)),
        )
        used = taken - 1
        want = low + 0.5 * (high - low) * (1 + math.cos(math.pi * used / decay_steps))
        assert rate_used(opt) == pytest.approx(want, rel=1e-5)
