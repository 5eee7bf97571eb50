"""Optimizers, parameter groups and per-step LR schedules against numpy references."""

from __future__ import annotations

import math

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, nn

from sporeflow.core.errors import CheckpointError, ConfigError
from sporeflow.nn import optimizers as optim
from sporeflow.nn.schedules import learning_rates
from sporeflow.stage.trainer import rebuilt_by_config, set_by_config
from sporeflow.storage.checkpoints import restore_exact, save_atomic


def seed_get_lr(lr_init, lr_end, lr_max, warmup_epochs, total_epochs, steps_per_epoch):
    """The seeds' ResNet `get_lr(..., lr_decay_mode='linear')`, written out."""
    total, warmup = total_epochs * steps_per_epoch, warmup_epochs * steps_per_epoch
    out = []
    for i in range(total):
        if i < warmup:
            out.append(lr_init + (lr_max - lr_init) * (i + 1) / warmup)
        else:
            out.append(lr_max - (lr_max - lr_end) * (i - warmup) / (total - warmup))
    return np.array(out, np.float32)


def test_linear_warmup_matches_the_seed_recipe():
    got = learning_rates("linear", 0.8, 10, 90, warmup_epochs=5, lr_init=0.0, lr_end=0.0)
    np.testing.assert_allclose(got, seed_get_lr(0.0, 0.0, 0.8, 5, 90, 10), rtol=1e-6, atol=1e-7)
    assert got[49] == pytest.approx(0.8) and got.argmax() == 49


def test_cosine_and_step():
    cos = learning_rates("cosine", 1.0, 4, 5, lr_end=0.1)
    want = [0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * i / 20)) for i in range(20)]
    np.testing.assert_allclose(cos, want, rtol=1e-6)
    step = learning_rates("step", 1.0, 2, 6, step_epochs=[2, 4], gamma=0.1)
    np.testing.assert_allclose(
        step, [1, 1, 1, 1, 0.1, 0.1, 0.1, 0.1, 0.01, 0.01, 0.01, 0.01], rtol=1e-6
    )
    with pytest.raises(ValueError, match="constant, linear, cosine, step"):
        learning_rates("exp", 1.0, 2, 2)


def test_with_accumulation_a_schedule_has_one_rate_per_update_and_ends_at_the_end():
    """k batches an update, the count running across epoch ends (engine.train_step): 3 epochs
    of 4 batches are floor(12 / 3) = 4 updates; the warm-up is round(4 / 3) = 1 update, a step
    boundary applies from the first update whose last batch is past it, and a budget's
    `total_steps` counts batches."""
    cos = learning_rates("cosine", 1.0, 4, 3, warmup_epochs=1, lr_end=0.1, accumulation_steps=3)
    want = [1.0] + [0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * i / 3)) for i in range(3)]
    np.testing.assert_allclose(cos, want, rtol=1e-6)
    # updates end at batches 3, 6, 9, 12 (epochs 1, 2, 3, 3)
    step = learning_rates("step", 1.0, 4, 3, step_epochs=[1, 2], gamma=0.1, accumulation_steps=3)
    np.testing.assert_allclose(step, [1, 0.1, 0.01, 0.01], rtol=1e-6)
    budget = learning_rates("linear", 1.0, 4, 3, total_steps=10, accumulation_steps=2)
    np.testing.assert_allclose(budget, [1, 0.8, 0.6, 0.4, 0.2, 0.0], rtol=1e-6, atol=1e-7)
    for k in (1, 2, 3, 5, 7):
        rates = learning_rates("linear", 1.0, 10, 3, accumulation_steps=k)
        assert len(rates) == 30 // k and rates[-1] == pytest.approx(1 / (30 // k))
    np.testing.assert_array_equal(
        learning_rates("cosine", 1.0, 4, 5, accumulation_steps=1),
        learning_rates("cosine", 1.0, 4, 5),
    )


def test_accumulation_steps_is_supplied_not_configured():
    from omegaconf import OmegaConf

    from sporeflow.config.validation import schedule_problems

    node = OmegaConf.create({"schedule": {"name": "cosine", "accumulation_steps": 2}})
    (problem,) = schedule_problems(node)
    assert problem.startswith("optimizer.schedule.accumulation_steps is not a schedule setting")


def factory_before_accumulation(params, lr=0.1, schedule=None, steps_per_epoch=None, epochs=None):
    """A user's factory written when sporeflow supplied steps_per_epoch and epochs only."""
    return optim.momentum(
        params, lr=lr, schedule=schedule, steps_per_epoch=steps_per_epoch, epochs=epochs
    )


@pytest.mark.parametrize(
    "target", ["sporeflow.nn.optimizers.momentum", f"{__name__}.factory_before_accumulation"]
)
def test_build_optimizer_gives_the_accumulation_to_a_factory_that_takes_it(target):
    from omegaconf import OmegaConf

    from sporeflow.config.components import build_optimizer

    cfg = OmegaConf.create(
        {
            "epochs": 3,
            "train": {"accumulation_steps": 3},
            "optimizer": {
                "_target_": target,
                "_partial_": True,
                "lr": 0.1,
                "schedule": {"name": "linear"},
            },
        }
    )
    opt = build_optimizer(cfg, nn.Dense(2, 1).trainable_params(), steps_per_epoch=4)
    table = opt.learning_rate.learning_rate.asnumpy()
    k = 3 if target.endswith("momentum") else 1  # the older factory builds it in batches
    want = learning_rates("linear", 0.1, 4, 3, accumulation_steps=k)
    np.testing.assert_allclose(table, optim.padded(want), rtol=1e-6)


class BnNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 3)
        self.bn = nn.BatchNorm1d(3)

    def construct(self, x):
        return self.bn(self.fc(x))


def test_weight_decay_groups_exempt_bias_gamma_beta():
    groups = optim.group_params(BnNet().trainable_params(), 1e-4)
    decayed = {p.name for p in groups[0]["params"]}
    exempt = {p.name for p in groups[1]["params"]}
    assert decayed == {"fc.weight"} and exempt == {"fc.bias", "bn.gamma", "bn.beta"}
    assert float(groups[0]["weight_decay"].rate.asnumpy()) == np.float32(1e-4)
    assert groups[1]["weight_decay"] == 0.0


# each factory's MindSpore class, given the float decay MindSpore folds into the graph
MINDSPORE_FLOAT_DECAY = {
    "momentum": lambda groups: nn.Momentum(groups, 0.1, momentum=0.9),
    "adam": lambda groups: nn.Adam(groups, 0.1),
    "adamw": lambda groups: nn.AdamWeightDecay(groups, 0.1, eps=1e-8, weight_decay=0.0),
    "adagrad": lambda groups: nn.Adagrad(groups, accum=0.1, learning_rate=0.1),
}


def _decay_trained(make_optimizer, steps: int = 3):
    """The train step and all its parameters (BnNet's, the optimizer's) after `steps` steps of
    the optimizer `make_optimizer(params)` builds."""
    ms.set_seed(0)
    net = BnNet()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    step = nn.TrainOneStepCell(nn.WithLossCell(net, loss), make_optimizer(net.trainable_params()))
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 4)).astype(np.float32), np.arange(8, dtype=np.int32) % 3
    for _ in range(steps):
        step(Tensor(x), Tensor(y))
    return step, {p.name: p.asnumpy().copy() for p in step.get_parameters()}


@pytest.mark.parametrize("factory", sorted(MINDSPORE_FLOAT_DECAY))
def test_a_decay_as_graph_input_steps_as_mindspores_float_decay(factory):
    """The decay is a Parameter the graph reads (optim.DecayRate, registered in the optimizer's
    cell tree under its name), and each step equals MindSpore's own step with the float decay
    folded in: bit for bit, for two decay values."""
    ms.set_context(mode=ms.GRAPH_MODE)
    for decay in (0.01, 0.3):
        step, ours = _decay_trained(
            lambda params, d=decay: getattr(optim, factory)(params, lr=0.1, weight_decay=d)
        )
        assert optim.DECAY_NAME in {p.name for p in step.optimizer.get_parameters()}
        _, theirs = _decay_trained(
            lambda p, d=decay: MINDSPORE_FLOAT_DECAY[factory](
                optim.group_params(p, d, as_input=False)
            )
        )
        assert ours.keys() - theirs.keys() == {optim.DECAY_NAME}
        for name, value in theirs.items():  # weights, BatchNorm statistics, moments, step
            np.testing.assert_array_equal(ours[name], value, err_msg=f"{decay} {name}")


def test_one_compiled_step_takes_another_decay_from_its_parameter():
    """A step compiled with a decay of 0.01, then given every value of a fresh build with 0.3
    (as engine.graph_pool copies them in), takes the steps of that build."""
    ms.set_context(mode=ms.GRAPH_MODE)
    step, _ = _decay_trained(lambda p: optim.momentum(p, lr=0.1, weight_decay=0.01), steps=1)
    _, fresh_state = _decay_trained(lambda p: optim.momentum(p, lr=0.1, weight_decay=0.3), steps=0)
    params = {p.name: p for p in step.get_parameters()}
    assert params.keys() == fresh_state.keys()
    for name, value in fresh_state.items():  # the decay, weights, moments, step count
        params[name].set_data(Tensor(value))
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 4)).astype(np.float32), np.arange(8, dtype=np.int32) % 3
    for _ in range(3):
        step(Tensor(x), Tensor(y))
    _, expected = _decay_trained(lambda p: optim.momentum(p, lr=0.1, weight_decay=0.3))
    for name, value in expected.items():
        np.testing.assert_array_equal(params[name].asnumpy(), value, err_msg=name)


@pytest.mark.parametrize("factory", ["momentum", "sgd", "adam", "adamw", "adagrad"])
def test_every_optimizer_takes_a_real_step(factory):
    ms.set_context(mode=ms.GRAPH_MODE)
    net = BnNet()
    opt = getattr(optim, factory)(
        net.trainable_params(),
        lr=0.1,
        weight_decay=0.01,
        schedule={"name": "cosine", "warmup_epochs": 1},
        steps_per_epoch=3,
        epochs=2,
    )
    step = nn.TrainOneStepCell(
        nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")), opt
    )
    step.set_train()
    before = net.fc.weight.asnumpy().copy()
    loss = step(
        Tensor(np.random.randn(8, 4).astype(np.float32)), Tensor(np.arange(8).astype(np.int32) % 3)
    )
    assert np.isfinite(loss.asnumpy()) and not np.allclose(net.fc.weight.asnumpy(), before)


def test_resume_continues_mid_schedule(tmp_path):
    """The LR comes from the restored global_step, not from the start of the schedule."""
    ms.set_context(mode=ms.GRAPH_MODE)
    rates = learning_rates("linear", 0.5, 4, 3, warmup_epochs=1)

    def fresh():
        net = nn.Dense(4, 3)
        opt = optim.momentum(
            net.trainable_params(),
            lr=0.5,
            schedule={"name": "linear", "warmup_epochs": 1},
            steps_per_epoch=4,
            epochs=3,
        )
        return (
            net,
            opt,
            nn.TrainOneStepCell(
                nn.WithLossCell(
                    net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
                ),
                opt,
            ),
        )

    net, opt, step = fresh()
    x, y = (
        Tensor(np.random.randn(8, 4).astype(np.float32)),
        Tensor(np.arange(8).astype(np.int32) % 3),
    )
    for _ in range(5):
        step(x, y)
    state = ms.load_checkpoint(str(save_atomic(step, tmp_path / "s.ckpt")))
    _, opt2, step2 = fresh()
    restore_exact(state, step2)
    assert int(opt2.global_step.asnumpy()[0]) == 5
    assert float(opt2.get_lr().asnumpy()) == pytest.approx(float(rates[5]))


def test_a_resume_takes_the_rate_from_the_config_and_the_count_and_moments_from_the_checkpoint(
    tmp_path,
):
    """A run resumed with a larger `epochs=` builds a longer table (2 epochs of 4 steps: 8
    rates; 3 epochs: 12; 4 epochs: 16; all padded to 16; 5 epochs: 20, padded to 64): restored
    with `rebuilt_by_config`, the table stays the new one whatever its length (a shape mismatch
    was refused, an equal padded length silently replaced it), and
    global_step and the moments are the checkpoint's; a constant rate is the config's too."""
    ms.set_context(mode=ms.GRAPH_MODE)

    def fresh(epochs, schedule):
        ms.set_seed(0)
        net = nn.Dense(4, 3)
        opt = optim.momentum(
            net.trainable_params(),
            lr=0.5,
            schedule=schedule,
            steps_per_epoch=4,
            epochs=epochs,
        )
        loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        return opt, nn.TrainOneStepCell(nn.WithLossCell(net, loss), opt)

    cosine = {"name": "cosine"}
    opt, step = fresh(2, cosine)
    for _ in range(8):
        step(Tensor(np.random.randn(8, 4).astype(np.float32)), Tensor(np.arange(8) % 3, ms.int32))
    state = ms.load_checkpoint(str(save_atomic(step, tmp_path / "s.ckpt")))
    assert state[optim.RATE_NAME].shape == (16,)  # 8 rates, padded to a power of four
    for epochs, schedule in ((4, cosine), (3, cosine), (5, cosine), (4, None)):
        opt2, step2 = fresh(epochs, schedule)
        built = {p.name: p.asnumpy().copy() for p in opt2.get_parameters()}
        restore_exact(state, step2, from_config=set_by_config, rebuilt=rebuilt_by_config)
        assert int(opt2.global_step.asnumpy()[0]) == 8
        np.testing.assert_array_equal(opt2.moments[0].asnumpy(), state["moments.weight"].asnumpy())
        np.testing.assert_array_equal(
            [p for p in opt2.get_parameters() if p.name == optim.RATE_NAME][0].asnumpy(),
            built[optim.RATE_NAME],
        )
        if schedule is not None:
            want = learning_rates("cosine", 0.5, 4, epochs)[8]
            assert float(opt2.get_lr().asnumpy()) == pytest.approx(float(want))
    with pytest.raises(CheckpointError, match="learning_rate: checkpoint shape"):
        # without the config's names: exact shapes (5 epochs: 20 rates, padded to 64, not 16)
        restore_exact(state, fresh(5, cosine)[1])


def numpy_momentum(w0, xs, ys, lr, mu, nesterov, steps):
    """w after `steps` steps of (Nesterov) momentum on the mean squared error of x @ w - y."""
    w, v = w0.copy(), np.zeros_like(w0)
    for _ in range(steps):
        g = 2.0 / len(xs) * xs.T @ (xs @ w - ys)
        v = mu * v + g
        w = w - lr * (g + mu * v if nesterov else v)
    return w


@pytest.mark.parametrize("factory", ["momentum", "sgd"])
@pytest.mark.parametrize("nesterov", [False, True])
def test_momentum_and_nesterov_match_numpy(factory, nesterov):
    """Three steps of optimizer.{momentum,sgd} with nesterov off/on against numpy (MindSpore
    2.10's CPU nn.Momentum alone ignores use_nesterov: the factory must not use it for that)."""
    ms.set_context(mode=ms.GRAPH_MODE)
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((8, 4)).astype(np.float32)
    ys = rng.standard_normal((8, 1)).astype(np.float32)
    net = nn.Dense(4, 1, has_bias=False)
    w0 = net.weight.asnumpy().T.copy()
    opt = getattr(optim, factory)(net.trainable_params(), lr=0.05, momentum=0.9, nesterov=nesterov)
    step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt)
    step.set_train()
    for _ in range(3):
        step(Tensor(xs), Tensor(ys))
    want = numpy_momentum(w0, xs, ys, 0.05, 0.9, nesterov, 3)
    np.testing.assert_allclose(net.weight.asnumpy().T, want, rtol=1e-5, atol=1e-6)
    plain = numpy_momentum(w0, xs, ys, 0.05, 0.9, not nesterov, 3)
    assert not np.allclose(want, plain, atol=1e-4), "the two updates must differ on this data"


def test_nesterov_without_momentum_is_refused():
    with pytest.raises(ConfigError, match="optimizer.nesterov=true needs optimizer.momentum > 0"):
        optim.sgd(nn.Dense(2, 1).trainable_params(), momentum=0.0, nesterov=True)


def test_a_checkpoint_from_before_the_decay_was_an_input_resumes(tmp_path):
    """A checkpoint written while the decay was folded into the graph has no decay Parameter:
    a resume takes everything else from it and keeps the config's decay; any other parameter
    it lacks is still refused."""
    ms.set_context(mode=ms.GRAPH_MODE)
    step, trained = _decay_trained(lambda p: optim.momentum(p, lr=0.1, weight_decay=0.3))
    state = ms.load_checkpoint(str(save_atomic(step, tmp_path / "s.ckpt")))
    del state[optim.DECAY_NAME]  # what the code before wrote
    fresh, _ = _decay_trained(lambda p: optim.momentum(p, lr=0.1, weight_decay=0.3), steps=0)
    restore_exact(state, fresh, from_config=set_by_config)
    for param in fresh.get_parameters():
        np.testing.assert_array_equal(param.asnumpy(), trained[param.name], err_msg=param.name)
    del state["moments.fc.weight"]
    with pytest.raises(CheckpointError, match="moments.fc.weight"):
        restore_exact(state, fresh, from_config=set_by_config)
