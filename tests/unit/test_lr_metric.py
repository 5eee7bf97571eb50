"""`train/lr` (issue 63 item 5): the rate the optimizer's last update of each epoch used, at
the epoch's last global step, against the schedule computed here in numpy (not with
sporeflow.nn.schedules): warm-up then cosine or step decay, with gradient accumulation (the
schedule has one entry per optimizer update and ends at the stage's end), across a resume (one
with a larger `epochs=` too), and in a dim-reduce pipeline (stage 2's rate, the budget arm's
linear decay to zero, with accumulation too). Real short jobs, read back from the launch dir's
sqlite store."""

from __future__ import annotations

import math

import numpy as np
import pytest

from helpers.inprocess import TINY
from helpers.inprocess import run_train_here as run_train
from helpers.store import by_stage, client_of, runs_of

LR = 0.02  # conf/optimizer/momentum.yaml, the default optimizer


def warmup_then(decay, lr, per_epoch, epochs, warmup_epochs, lr_init=0.0, k=1):
    """Per-update rates of `epochs` epochs of `per_epoch` batches, k batches an update (the
    train step's count runs across epoch ends: floor(epochs * per_epoch / k) updates): linear
    warm-up from lr_init to lr over warmup_epochs' updates (its last one at lr), then
    `decay(i, warmup, total)` for the updates after it."""
    total, warmup = epochs * per_epoch // k, round(warmup_epochs * per_epoch / k)
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


def step_decay(lr, per_epoch, step_epochs, gamma, k=1):
    """x gamma from the first update whose last batch is past epoch e (of k batches each)."""

    def decay(i, warmup, total):
        return lr * gamma ** sum((i + 1) * k > e * per_epoch for e in step_epochs)

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


def test_with_accumulation_the_schedule_is_in_updates_and_ends_at_the_stages_end(tmp_path):
    """train.accumulation_steps=3 (sporeflow's TrainStep): the optimizer updates every third
    micro-step, its count running across epoch ends, and each update reads the schedule at its
    own count: after epoch e, floor(e * per_epoch / 3) updates, the last one at entry one less.
    The schedule is built in those updates (floor(3 * per_epoch / 3) of them, the warm-up
    round(per_epoch / 3)), so the 3-epoch cosine ends at the third epoch's end (it took a third
    of its course before: a table of batches walked once per update)."""
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
    want = warmup_then(cosine(LR, lr_end), LR, per_epoch, epochs, 1, k=k)
    steps, values = lr_history(tmp_path)
    assert steps == [per_epoch * e for e in range(1, epochs + 1)]
    updates = np.array([per_epoch * e // k for e in range(1, epochs + 1)])
    assert updates[-1] == len(want)  # the last update reads the schedule's last entry
    np.testing.assert_allclose(values, want[updates - 1], rtol=1e-6)
    assert values[-1] < LR / 3  # the cosine's tail (a table of batches read per update: 0.0171)


def test_a_step_schedule_with_accumulation_drops_with_the_epoch_of_the_update(tmp_path):
    """Step decay at epochs 1 and 2, 3 batches an update over epochs of 4 batches: an update
    counts in the epoch of its last batch (update 2, batches 4-6, is epoch 2's first)."""
    epochs, k, gamma = 3, 3, 0.5
    args = [
        *TINY,
        f"epochs={epochs}",
        "optimizer.schedule.name=step",
        "+optimizer.schedule.step_epochs=[1,2]",
        f"+optimizer.schedule.gamma={gamma}",
        f"train.accumulation_steps={k}",
        # 12 snapshots, the weights moved at every k-th: 12 / k directions for the PCA
        f"boost.n_component={min(8, 12 // k - 1)}",
    ]
    proc = run_train(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    per_epoch = per_epoch_of(tmp_path)
    want = warmup_then(step_decay(LR, per_epoch, (1, 2), gamma, k), LR, per_epoch, epochs, 0, k=k)
    steps, values = lr_history(tmp_path)
    updates = np.array([per_epoch * e // k for e in range(1, epochs + 1)])
    np.testing.assert_allclose(values, want[updates - 1], rtol=1e-6)
    # TINY: 4 batches an epoch: updates end at batches 3, 6, 9, 12 -> epochs 1, 2, 3, 3
    np.testing.assert_allclose(values, [LR, LR * gamma, LR * gamma**2], rtol=1e-6)


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


@pytest.mark.parametrize("first", [2, 3])
def test_a_resume_with_more_epochs_trains_on_the_longer_schedule(tmp_path, first):
    """A cosine run of `first` epochs resumed with epochs=4: the rate table is the config's (the
    4-epoch one), the update count the checkpoint's, so the epochs after `first` read the
    4-epoch schedule at their steps as an uninterrupted 4-epoch run does. Before, 2 -> 4 exited 1 (`parameter
    learning_rate: checkpoint shape (8,) != network shape (16,)`) and 3 -> 4 (both padded to 16)
    trained on the 3-epoch table."""
    epochs, lr_end = 4, 0.001
    args = [*TINY, "optimizer.schedule.name=cosine", f"+optimizer.schedule.lr_end={lr_end}"]
    resumed, straight = tmp_path / "resumed", tmp_path / "straight"
    for launch in (resumed, straight):
        launch.mkdir()
    proc = run_train([*args, f"epochs={first}"], resumed)
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = [*args, f"epochs={epochs}", f"resume={resumed / 'run'}"]
    proc = run_train(again, resumed, run_dir="again")
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run_train([*args, f"epochs={epochs}"], straight)
    assert proc.returncode == 0, proc.stderr[-3000:]
    per_epoch = per_epoch_of(resumed)
    before = warmup_then(cosine(LR, lr_end), LR, per_epoch, first, 0)
    want = warmup_then(cosine(LR, lr_end), LR, per_epoch, epochs, 0)
    steps, values = lr_history(resumed)
    assert steps == [per_epoch * e for e in range(1, epochs + 1)]
    np.testing.assert_allclose(values[:first], before[np.array(steps[:first]) - 1], rtol=1e-6)
    np.testing.assert_allclose(values[first:], want[np.array(steps[first:]) - 1], rtol=1e-6)
    assert values[-1] == pytest.approx(want[-1], rel=1e-6)  # the 4-epoch cosine's last entry
    straight_steps, straight_values = lr_history(straight)
    assert straight_steps == steps
    np.testing.assert_allclose(values[first:], straight_values[first:], rtol=1e-6)


@pytest.mark.parametrize("k", [1, 3])
def test_a_pipeline_records_stage2s_rate_and_the_budget_arms_decay(tmp_path, k):
    """Stage 1 at its constant rate; stage 2 at boost.alpha (its step outside the PCA subspace:
    it has no optimizer); the budget arm decaying linearly from optimizer.lr towards zero over
    exactly its budget of T steps (Budgeted Training): entry i is lr * (1 - i / U) for the
    U = floor(T / k) updates of its T batches, k batches an update, so it reaches its last
    entry, lr / U, with accumulation too."""
    alpha = 0.003
    args = [
        *TINY,
        "debug=dim_reduce",
        "boost.baselines=[budget]",
        f"boost.alpha={alpha}",
        f"train.accumulation_steps={k}",
        # 12 snapshots, the weights moved at every k-th: 12 / k directions for the PCA
        f"boost.n_component={min(8, 12 // k - 1)}",
    ]
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
    updates = total // k
    assert updates > 1
    steps, values = lr_history(tmp_path, budget)
    ends = [min(per_epoch * e, total) for e in range(1, math.ceil(total / per_epoch) + 1)]
    assert steps == ends
    want = [LR * (1 - (s // k - 1) / updates) for s in ends]
    np.testing.assert_allclose(values, want, rtol=1e-5)
    assert values[-1] == pytest.approx(LR / updates, rel=1e-5)  # the last update's, one from zero


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
