"""TrainStep against an independent numpy reference of softmax regression + Momentum/SGD."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, nn

from helpers.mindspore_setup import graph_mode_on_cpu
from sporeflow.engine.train_step import TrainStep, ema_weights_in

N_IN, N_OUT, BATCH = 6, 4, 8
LR, MOMENTUM = 0.5, 0.9


@pytest.fixture(autouse=True)
def graph_mode():
    graph_mode_on_cpu()


def batches(n, batch=BATCH, seed=0):
    rng = np.random.default_rng(seed)
    return [
        (
            rng.normal(size=(batch, N_IN)).astype(np.float32) * 3,
            rng.integers(0, N_OUT, batch).astype(np.int32),
        )
        for _ in range(n)
    ]


def np_loss_and_grads(w, b, x, y):
    logits = x.astype(np.float64) @ w.T + b
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    loss = -np.log(p[np.arange(len(y)), y]).mean()
    p[np.arange(len(y)), y] -= 1
    d = p / len(y)
    return loss, d.T @ x, d.sum(axis=0)


def reference(w, b, micro_batches, k=1, clip=0.0, momentum=MOMENTUM, ema=None):
    """Numpy: per update, mean of k micro-batch grads -> global-norm clip -> momentum -> EMA."""
    w, b = w.astype(np.float64), b.astype(np.float64)
    vw, vb = np.zeros_like(w), np.zeros_like(b)
    ew, eb = w.copy(), b.copy()
    losses, history = [], []
    for u in range(len(micro_batches) // k):
        gw, gb = np.zeros_like(w), np.zeros_like(b)
        for x, y in micro_batches[u * k : (u + 1) * k]:
            loss, dw, db = np_loss_and_grads(w, b, x, y)
            losses.append(loss)
            gw, gb = gw + dw / k, gb + db / k
        if clip:
            norm = np.sqrt((gw**2).sum() + (gb**2).sum())
            factor = clip / max(norm, clip)
            gw, gb = gw * factor, gb * factor
        vw, vb = momentum * vw + gw, momentum * vb + gb
        w, b = w - LR * vw, b - LR * vb
        if ema:
            decay, warmup = ema
            d = decay * (1 - np.exp(-(u + 1) / warmup)) if warmup else decay
            ew, eb = d * ew + (1 - d) * w, d * eb + (1 - d) * b
        history.append((w.copy(), b.copy(), ew.copy(), eb.copy()))
    return losses, history


def make_cell(**kwargs):
    ms.set_seed(0)
    net = nn.Dense(N_IN, N_OUT)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), LR, MOMENTUM)
    cell = TrainStep(nn.WithLossCell(net, loss_fn), opt, **kwargs)
    return net, cell


def run_cell(cell, net, micro_batches, k=1):
    w0, b0 = net.weight.asnumpy().copy(), net.bias.asnumpy().copy()
    losses, history = [], []
    for i, (x, y) in enumerate(micro_batches):
        losses.append(float(cell(Tensor(x), Tensor(y)).asnumpy()))
        if (i + 1) % k == 0:
            ema = (
                (cell.ema_weights[0].asnumpy().copy(), cell.ema_weights[1].asnumpy().copy())
                if cell.use_ema
                else (None, None)
            )
            history.append((net.weight.asnumpy().copy(), net.bias.asnumpy().copy()) + ema)
    return (w0, b0), losses, history


def assert_matches(cell_history, ref_history, ema=False):
    assert len(cell_history) == len(ref_history) >= 5
    for got, want in zip(cell_history, ref_history, strict=False):
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-4, atol=1e-5)
        if ema:
            np.testing.assert_allclose(got[2], want[2], rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(got[3], want[3], rtol=1e-4, atol=1e-5)


def test_plain_step_matches_reference():
    net, cell = make_cell()
    data = batches(6)
    (w0, b0), losses, hist = run_cell(cell, net, data)
    ref_losses, ref = reference(w0, b0, data)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    assert_matches(hist, ref)


def test_clip_by_global_norm_once_per_update():
    net, cell = make_cell(clip_grad_norm=0.05)
    data = batches(6)
    (w0, b0), _, hist = run_cell(cell, net, data)
    _, ref = reference(w0, b0, data, clip=0.05)
    _, unclipped = reference(w0, b0, data)
    assert not np.allclose(ref[0][0], unclipped[0][0])  # the norm really was clipped
    assert_matches(hist, ref)


def test_accumulation_equals_one_step_on_k_times_the_batch():
    k = 4
    net, cell = make_cell(accumulation_steps=k)
    data = batches(5 * k)
    (w0, b0), _, hist = run_cell(cell, net, data, k=k)
    _, ref = reference(w0, b0, data, k=k)
    assert_matches(hist, ref)
    big = [
        (
            np.concatenate([x for x, _ in data[i : i + k]]),
            np.concatenate([y for _, y in data[i : i + k]]),
        )
        for i in range(0, len(data), k)
    ]
    _, ref_big = reference(w0, b0, big)
    assert_matches(hist, ref_big)


def test_weights_do_not_move_between_updates():
    net, cell = make_cell(accumulation_steps=3)
    before = net.weight.asnumpy().copy()
    for x, y in batches(2):
        cell(Tensor(x), Tensor(y))
    np.testing.assert_array_equal(net.weight.asnumpy(), before)
    x, y = batches(1, seed=1)[0]
    cell(Tensor(x), Tensor(y))
    assert not np.allclose(net.weight.asnumpy(), before)
    np.testing.assert_array_equal(cell.accum[0].asnumpy(), 0)  # emptied after the update


@pytest.mark.parametrize("warmup", [0.0, 3.0])
def test_ema_follows_each_update(warmup):
    net, cell = make_cell(ema_decay=0.9, ema_warmup=warmup)
    data = batches(6)
    (w0, b0), _, hist = run_cell(cell, net, data)
    _, ref = reference(w0, b0, data, ema=(0.9, warmup))
    assert_matches(hist, ref, ema=True)
    assert not np.allclose(hist[-1][2], hist[-1][0])  # shadow differs from the raw weights


def test_everything_together_with_loss_scale_1024():
    k = 2
    net, cell = make_cell(
        loss_scale=1024.0, clip_grad_norm=0.1, accumulation_steps=k, ema_decay=0.8, ema_warmup=2.0
    )
    data = batches(6 * k)
    (w0, b0), losses, hist = run_cell(cell, net, data, k=k)
    ref_losses, ref = reference(w0, b0, data, k=k, clip=0.1, ema=(0.8, 2.0))
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)  # the unscaled loss comes back
    assert_matches(hist, ref, ema=True)


def test_loss_scale_alone_is_invisible():
    net, cell = make_cell(loss_scale=1024.0)
    data = batches(5)
    (w0, b0), _, hist = run_cell(cell, net, data)
    _, ref = reference(w0, b0, data)
    assert_matches(hist, ref)


@pytest.mark.parametrize("level", ["O1", "O2", "O3"])
def test_amp_levels_train_and_keep_parameter_names(level, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from sporeflow.engine.precision import apply_amp
    from sporeflow.models.resnet import resnet18
    from sporeflow.storage.checkpoints import save_atomic

    net = resnet18(num_classes=10)
    names = [p.name for p in net.get_parameters()]
    amp_net = apply_amp(net, level, keep_batchnorm_fp32=True)
    step = nn.TrainOneStepCell(
        nn.WithLossCell(amp_net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")),
        nn.Momentum(amp_net.trainable_params(), 0.01, 0.9),
    )
    step.set_train()
    x = Tensor(np.random.randn(2, 3, 32, 32).astype(np.float32))
    loss = step(x, Tensor(np.array([1, 2], np.int32)))
    assert np.isfinite(loss.asnumpy())
    assert amp_net(x).dtype == ms.float32  # outputs come back as float32
    saved = ms.load_checkpoint(str(save_atomic(amp_net, tmp_path / "amp.ckpt")))
    assert sorted(saved) == sorted(names)
    assert not (tmp_path / "rewritten_network").exists()  # MindSpore's rewrite dump kept out of cwd


def test_dynamic_loss_scale_skips_overflow_and_shrinks():
    net, cell = make_cell(
        loss_scale=2.0**120, dynamic_scale=True, scale_factor=2.0**20, scale_window=100
    )
    data = [(x * 1000, y) for x, y in batches(7)]
    w0, b0 = net.weight.asnumpy().copy(), net.bias.asnumpy().copy()
    cell(Tensor(data[0][0]), Tensor(data[0][1]))  # gradients x 2^120 overflow float32
    np.testing.assert_array_equal(net.weight.asnumpy(), w0)  # the update was skipped
    assert float(cell.scale.asnumpy()) == 2.0**100
    for x, y in data[1:]:
        cell(Tensor(x), Tensor(y))
    _, ref = reference(w0, b0, data[1:])  # then exactly the plain updates
    np.testing.assert_allclose(net.weight.asnumpy(), ref[-1][0], rtol=1e-4, atol=1e-5)


def test_dynamic_loss_scale_grows_after_a_window_of_finite_steps():
    _, cell = make_cell(loss_scale=1.0, dynamic_scale=True, scale_factor=2.0, scale_window=3)
    scales = []
    for x, y in batches(7):
        cell(Tensor(x), Tensor(y))
        scales.append(float(cell.scale.asnumpy()))
    assert scales == [1, 1, 2, 2, 2, 4, 4]


def _swap_in_and_out(cell):
    with ema_weights_in(cell):
        pass


@pytest.mark.parametrize("k", [1, 2])
def test_evaluating_with_the_ema_weights_mid_training_leaves_training_as_it_was(k):
    """The EMA weights are put into the network for an evaluation and taken out again between
    steps (written into the parameters' own buffers, storage.checkpoints.overwrite); training
    goes on from its own weights, with accumulation too (a train graph with control flow)."""
    data = batches(8)
    net, cell = make_cell(accumulation_steps=k, ema_decay=0.5)
    _, _, plain = run_cell(cell, net, data, k=k)
    net, cell = make_cell(accumulation_steps=k, ema_decay=0.5)
    swapped = []
    for i, (x, y) in enumerate(data):
        cell(Tensor(x), Tensor(y))
        _swap_in_and_out(cell)
        if (i + 1) % k == 0:
            swapped.append(net.weight.asnumpy().copy())
    for got, want in zip(swapped, [h[0] for h in plain], strict=True):
        np.testing.assert_array_equal(got, want)
