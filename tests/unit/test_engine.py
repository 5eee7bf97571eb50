"""The engine on its own: built parts + data + callbacks, no config, no Hydra, no MLflow.

Real MindSpore (GRAPH_MODE, CPU) trains a small softmax classifier; the callbacks measure into
the EventRecord and the readers (best-k, progress bar) act on what it holds."""

from __future__ import annotations

import os
import signal
import time

import mindspore as ms
import mindspore.dataset as mds
import numpy as np
import psutil
import pytest
from mindspore import Model, nn

from helpers.mindspore_setup import graph_mode_on_cpu
from sporeflow.core import signals
from sporeflow.engine.callbacks import (
    BestCheckpoints,
    CheckpointEachEpoch,
    EvalEachEpoch,
    ProgressBar,
    StepLoss,
    Throughput,
)
from sporeflow.engine.events import EventRecord
from sporeflow.engine.hooks import HookBase
from sporeflow.engine.loop import StageParts, fit

BATCH, N = 8, 64  # 8 steps per epoch


def data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, 6)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)  # learnable
    return mds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH)


def parts(seed=0) -> StageParts:
    ms.set_seed(seed)
    net = nn.Dense(6, 2)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), 0.1, 0.9)
    return StageParts(
        net, Model(net, loss, opt, metrics={"acc": nn.Accuracy(), "loss": nn.Loss()}), (net, opt)
    )


def callbacks(record, p, tmp_path, with_bar=False):
    cbs = [
        Throughput(record, BATCH),
        StepLoss(record, 2),
        EvalEachEpoch(record, p.model, data(1)),
        BestCheckpoints(record, p.network, tmp_path, "loss", "min", keep=1),
        CheckpointEachEpoch(record, tmp_path, keep_last=1),
    ]
    return cbs + ([ProgressBar(record, "test", shown=True)] if with_bar else [])


def test_callbacks_measure_into_the_record(tmp_path):
    graph_mode_on_cpu()
    p = parts()
    record = EventRecord(epochs=3, steps_per_epoch=N // BATCH)
    queue = record.subscribe()
    alive_before_fit = time.time() - psutil.Process().create_time()
    fit(p, data(), 3, callbacks(record, p, tmp_path))
    alive_after_fit = time.time() - psutil.Process().create_time()
    losses = [e for e in queue if e.name == "train/loss"]
    assert [e.step for e in losses] == list(range(2, 25, 2))  # every 2nd of 24 global steps
    assert losses[-1].value < losses[0].value
    assert [e.step for e in queue if e.name == "val/acc"] == [8, 16, 24]
    (startup,) = [e for e in queue if e.name == "train/seconds_to_first_step"]  # once, at step 1
    assert startup.step == 1 and alive_before_fit < startup.value < alive_after_fit
    assert [epoch for epoch, _ in record.evals] == [1, 2, 3]
    # the evaluation recorded is the model's own, on the weights as they are now
    direct = p.model.eval(data(1), dataset_sink_mode=False)
    assert abs(record.evals[-1][1]["acc"] - direct["acc"]) < 1e-6
    best_loss = min(result["loss"] for _, result in record.evals)
    (best,) = tmp_path.glob("best_loss_*.ckpt")
    assert f"{best_loss:.4f}" in best.name
    assert sorted(f.name for f in tmp_path.glob("epoch_*.ckpt")) == ["epoch_0003.ckpt"]
    assert int(ms.load_checkpoint(str(tmp_path / "epoch_0003.ckpt"))["step_num"].asnumpy()) == 24


def test_resumed_fit_continues_steps_and_the_progress_bar_shows_the_current_epoch(tmp_path):
    """start_epoch=2 of 3: global steps continue at 17, the bar counts from 16 of 24 steps and
    ends showing epoch 3/3 with the accuracy of the evaluation just made (not the previous one)."""
    graph_mode_on_cpu()
    p = parts()
    record = EventRecord(epochs=3, steps_per_epoch=N // BATCH, start_epoch=2)
    queue = record.subscribe()
    cbs = callbacks(record, p, tmp_path, with_bar=True)
    bar = cbs[-1].bar
    assert (bar.n, bar.total) == (16, 24)
    fit(p, data(), 3, cbs, start_epoch=2)
    assert [e.step for e in queue if e.name == "train/loss"] == [18, 20, 22, 24]
    assert record.evals[0][0] == 3 and len(record.evals) == 1
    assert bar.n == 24
    assert (
        bar.postfix.startswith("epoch=3/3")
        and f"acc={record.evals[-1][1]['acc']:.4f}" in bar.postfix
    )


def test_fit_does_nothing_when_the_stage_is_already_done(tmp_path):
    graph_mode_on_cpu()
    p = parts()
    before = p.network.weight.asnumpy().copy()
    record = EventRecord(epochs=2, steps_per_epoch=N // BATCH, start_epoch=2)
    fit(p, data(), 2, callbacks(record, p, tmp_path), start_epoch=2)
    np.testing.assert_array_equal(p.network.weight.asnumpy(), before)
    assert record.evals == []


@pytest.fixture
def handlers_installed():
    """sporeflow's SIGINT/SIGTERM handlers for the test; the process's own put back after it."""
    saved = {sig: signal.getsignal(sig) for sig in signals.HANDLED}
    signals.install()
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)
    signals._received.clear()


def test_a_ctrl_c_that_mindspore_turns_into_sigterm_is_said_as_maybe_a_ctrl_c(handlers_installed):
    """issue 51 item 3: MindSpore's graph runtime puts a C-level SIGINT handler of its own in
    place at every graph step, which sends the process SIGTERM. Before any step a SIGTERM is
    said as SIGTERM; after a real GRAPH_MODE step, a SIGINT arrives as Interrupted(SIGTERM),
    which the user is told may be their Ctrl-C."""
    graph_mode_on_cpu()
    assert not signals.sigint_held_by_another_handler()
    with pytest.raises(signals.Interrupted) as plain:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert plain.value.said == "SIGTERM"
    net = nn.Dense(4, 3)
    step = nn.TrainOneStepCell(
        nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True)),
        nn.SGD(net.trainable_params(), 0.1),
    )
    step(ms.Tensor(np.ones((2, 4), np.float32)), ms.Tensor(np.zeros(2, np.int32)))
    assert signals.sigint_held_by_another_handler()
    with pytest.raises(signals.Interrupted) as converted:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    assert converted.value.signum == signal.SIGTERM
    assert converted.value.said.startswith("SIGTERM (or Ctrl-C, which MindSpore turns")


class SignalAtStep(HookBase):
    """Sends this process SIGTERM from its Python code at the begin of step 3."""

    begun = 0

    def on_train_step_begin(self, run_context):
        self.begun += 1
        if self.begun == 3:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.5)  # the handler runs here: it may only record the signal

    def on_train_step_end(self, run_context):  # needs no record
        pass


def test_a_signal_during_training_is_raised_at_the_step_end_and_a_second_at_once(
    handlers_installed,
):
    """A SIGTERM that lands inside MindSpore's training loop (here: a hook's Python code at the
    begin of step 3) is raised where the loop calls raise_if_received, at that step's end, not
    wherever the main thread was (core.signals.deferred); a second signal raises at once, and a
    signal held when the block ends is raised there."""
    graph_mode_on_cpu()
    hook = SignalAtStep()
    with pytest.raises(signals.Interrupted) as stopped:
        fit(parts(), data(), 2, [hook])
    assert stopped.value.signum == signal.SIGTERM and hook.begun == 3
    assert stopped.traceback[-1].name == "raise_if_received", stopped.traceback[-1]
    with pytest.raises(signals.Interrupted) as forced:
        with signals.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.5)
            with pytest.raises(signals.Interrupted) as second:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            assert second.traceback[-1].name == "_raise"
    assert forced.traceback[-1].name == "deferred"  # the first, held to the block's end
