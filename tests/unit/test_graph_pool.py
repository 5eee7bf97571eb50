"""engine.graph_pool: a compiled graph used again, another stage's values copied in, computes
what a fresh build of that stage computes - bit for bit, for every train cell sporeflow builds -
and the jobs of one process give the results each gives alone."""

from __future__ import annotations

import logging

import mindspore as ms
import numpy as np
import pytest
from mindspore import Model, Tensor, nn

import sporeflow
from helpers.constant_nets import KINDS, Scaled
from helpers.inprocess import TINY, TINY_PIPELINE, shared_writer_named
from helpers.mindspore_setup import graph_mode_on_cpu
from sporeflow.dim_reduce.step import DimReduceStep
from sporeflow.engine import graph_pool
from sporeflow.engine.loop import StageParts
from sporeflow.engine.train_step import TrainStep
from sporeflow.nn import optimizers

N_IN, N_OUT, BATCH = 6, 4, 8


@pytest.fixture(autouse=True)
def graph_mode():
    graph_mode_on_cpu()
    graph_pool.forget_all()
    yield
    graph_pool.forget_all()


def _batches(n=4):
    rng = np.random.default_rng(0)
    return [
        (
            Tensor(rng.normal(size=(BATCH, N_IN)).astype(np.float32) * 3),
            Tensor(rng.integers(0, N_OUT, BATCH).astype(np.int32)),
        )
        for _ in range(n)
    ]


def _loss():
    return nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")


def _momentum(net, lr, momentum):
    return nn.Momentum(net.trainable_params(), lr, momentum)


def _parts(kind: str, seed: int, value: float) -> StageParts:
    """A stage's parts of one kind; `seed` and `value` are what differs between two stages of
    one graph (start weights, and a learning rate or stage-2 setting)."""
    ms.set_seed(seed)
    net = nn.Dense(N_IN, N_OUT)
    if kind == "sequential":  # as ResNet's stages: nn.SequentialCell also lists its cells
        net = nn.SequentialCell([nn.Dense(N_IN, 5), nn.ReLU(), nn.Dense(5, N_OUT)])
    if kind in ("plain", "weight_decay", "sequential"):
        opt = (  # the decay is a graph input (optimizers.DecayRate) as the rate is
            optimizers.momentum(net.trainable_params(), value, 0.9, weight_decay=value / 10)
            if kind == "weight_decay"
            else _momentum(net, value, 1.0 - value)
        )
        return StageParts(net, Model(net, _loss(), opt), (net, opt))
    if kind == "dim_reduce":
        size = N_IN * N_OUT + N_OUT
        # one basis: it is a constant of the graph (two stage 1s' bases are two graphs)
        basis = np.linalg.qr(np.random.default_rng(0).normal(size=(size, 3)))[0].T
        settings = {"rho": value, "sigma": value / 4, "gamma": value, "alpha": value / 10}
        cell = DimReduceStep(
            nn.WithLossCell(net, _loss()),
            net.trainable_params(),
            basis,
            **settings,
            weight_decay=value / 100,
        )
    else:
        features = {
            "dynamic_scale": {"dynamic_scale": True, "loss_scale": 2.0**value, "scale_window": 2},
            "accumulate_ema": {"accumulation_steps": 2, "ema_decay": 0.9, "clip_grad_norm": 0.5},
        }[kind]
        cell = TrainStep(nn.WithLossCell(net, _loss()), _momentum(net, value / 10, 0.9), **features)
    model = Model(cell, eval_network=nn.WithEvalCell(net, _loss()), eval_indexes=[0, 1, 2])
    return StageParts(net, model, (cell,))


def _trained(parts: StageParts) -> tuple[list, dict]:
    cell = parts.model._train_network
    losses = [float(cell(x, y).asnumpy()) for x, y in _batches()]
    return losses, {n: p.asnumpy().copy() for n, p in graph_pool.parameters(parts).items()}


@pytest.mark.parametrize(
    "kind",
    ["plain", "sequential", "weight_decay", "dynamic_scale", "accumulate_ema", "dim_reduce"],
)
def test_a_reused_graph_computes_what_a_fresh_build_computes(kind):
    alone = _trained(_parts(kind, seed=2, value=0.3))

    earlier = graph_pool.reused(_parts(kind, seed=1, value=0.7))
    _trained(earlier)  # compiled, and its state moved on
    later = graph_pool.reused(_parts(kind, seed=2, value=0.3))

    assert later is earlier, "the second build did not reuse the first one's graph"
    losses, params = _trained(later)
    assert losses == alone[0]
    assert params.keys() == alone[1].keys()
    for name, value in params.items():
        np.testing.assert_array_equal(value, alone[1][name], err_msg=name)


def test_another_graph_is_built_and_compiled_on_its_own():
    plain = graph_pool.reused(_parts("plain", seed=1, value=0.5))
    ms.set_seed(1)
    wider = nn.Dense(N_IN, N_OUT + 1)
    opt = _momentum(wider, 0.5, 0.5)
    other = graph_pool.reused(StageParts(wider, Model(wider, _loss(), opt), (wider, opt)))
    assert other is not plain and graph_pool.kept() == 2


def test_a_network_with_dropout_is_never_reused():
    ms.set_seed(1)
    net = nn.SequentialCell(nn.Dense(N_IN, N_OUT), nn.Dropout(p=0.5))
    opt = _momentum(net, 0.1, 0.9)
    parts = StageParts(net, Model(net, _loss(), opt), (net, opt))
    assert graph_pool.reused(parts) is parts and graph_pool.kept() == 0


def _compiles_counted(monkeypatch) -> list:
    """The cell classes of the graphs MindSpore compiles from now on (new graphs only)."""
    from mindspore.graph.api import _CellGraphExecutor

    compile_graph, compiled = _CellGraphExecutor.compile, []

    def counting(self, obj, *args, phase="predict", **kwargs):
        full_phase, new = compile_graph(self, obj, *args, phase=phase, **kwargs)
        if new:
            compiled.append(type(obj).__name__)
        return full_phase, new

    monkeypatch.setattr(_CellGraphExecutor, "compile", counting)
    return compiled


def _alone_and_after_another(monkeypatch, tmp_path, job, other) -> tuple:
    """`job`'s RunResult run first in an emptied pool, and run after `other` in one process;
    and the graphs `job` compiled after `other`."""
    results, compiled = [], _compiles_counted(monkeypatch)
    for order, jobs in (("first", (job,)), ("second", (other, job))):
        graph_pool.forget_all()
        monkeypatch.chdir((tmp_path / order).mkdir() or tmp_path / order)
        with shared_writer_named():
            for overrides in jobs:
                compiled.clear()
                result = sporeflow.run(overrides)
        results.append(result)
    return (*results, list(compiled))


ONE = [*TINY_PIPELINE, "boost.rho=0.4", "boost.sigma=0.2", "tracking.log_model=false"]
TWO = [*TINY_PIPELINE, "boost.rho=0.7", "boost.sigma=0.4", "tracking.log_model=false"]


@pytest.mark.parametrize(
    ("job", "other"), [(ONE, TWO), (TWO, ONE)], ids=["0.4_after_0.7", "0.7_after_0.4"]
)
def test_a_job_gives_what_it_gives_alone_after_another_in_one_process(
    tmp_path, monkeypatch, job, other
):
    """Two dim-reduce jobs of the README sweep's kind (another boost.rho and boost.sigma), in
    both orders: run after the other job, in one process, a job's stage 2 ends with the metrics
    and final weights it ends with run first (the graphs the other job compiled are reused, its
    own values copied in; stage 1 is trained by the first job of each launch dir, reused after):
    the later job compiles neither a stage-2 graph nor an eval graph of its own."""
    alone, after, compiled_after = _alone_and_after_another(monkeypatch, tmp_path, job, other)
    assert not {"DimReduceStep", "WithEvalCell"} & set(compiled_after), compiled_after
    for key in ("val/stage2/acc", "val/stage2/loss", "val/stage1/acc", "val/baseline/acc"):
        assert after.metrics[key] == alone.metrics[key], key
    reached, expected = (
        ms.load_checkpoint(str(after.weights)),
        ms.load_checkpoint(str(alone.weights)),
    )
    assert reached.keys() == expected.keys()
    for name, value in reached.items():
        np.testing.assert_array_equal(value.asnumpy(), expected[name].asnumpy(), err_msg=name)


class _HeldInATuple(nn.Cell):
    """A layer kept in a tuple attribute: out of MindSpore's cell tree, its weights are not
    among the cell's parameters (MindSpore's optimizers keep a weight-decay Cell this way:
    optimizers.decay_registered puts it in the tree)."""

    def __init__(self):
        super().__init__()
        self.layers = (nn.Dense(N_IN, N_OUT),)

    def construct(self, x):
        return self.layers[0](x)


def test_parameters_held_outside_the_cell_tree_are_never_shared():
    net = _HeldInATuple()
    assert not list(net.get_parameters())  # what makes them unreachable for a copy
    opt = _momentum(nn.Dense(N_IN, N_OUT), 0.1, 0.9)
    parts = StageParts(net, Model(net, _loss(), opt), (net, opt))
    assert graph_pool.reused(parts) is parts and graph_pool.kept() == 0


def _scaled_parts(kind: str, scale: float) -> StageParts:
    """A stage of a user network holding a constant of `kind` (helpers.constant_nets), one
    start and learning rate for every scale: only the constant differs."""
    ms.set_seed(1)
    net = nn.SequentialCell([nn.Dense(N_IN, N_OUT), Scaled(kind, scale)])
    opt = _momentum(net, 0.1, 0.9)
    return StageParts(net, Model(net, _loss(), opt), (net, opt))


@pytest.mark.parametrize("kind", KINDS)
def test_each_value_of_a_constant_a_network_holds_is_a_graph_of_its_own(kind):
    """A constant is described by value (numpy scalars and arrays by their bytes, a dtype by
    name, a function by its code and closure, an enum by member); a value of a class that has
    no such description (a plain object) leaves the parts unshared, never reduced to its type:
    a stage after another of another value computes what it computes alone."""
    alone = _trained(_scaled_parts(kind, 0.0))
    graph_pool.forget_all()

    earlier = graph_pool.reused(_scaled_parts(kind, 1.0))
    other = _trained(earlier)
    later = graph_pool.reused(_scaled_parts(kind, 0.0))
    assert later is not earlier
    losses, params = _trained(later)
    assert losses != other[0]  # the two values compute two things
    assert losses == alone[0]
    for name, value in params.items():
        np.testing.assert_array_equal(value, alone[1][name], err_msg=name)

    again = graph_pool.reused(_scaled_parts(kind, 0.0))  # one value: one graph, when described
    assert (again is later) == (kind != "object")


def test_a_value_that_cannot_be_described_is_said_at_debug_level(caplog):
    caplog.set_level(logging.DEBUG, logger="sporeflow.engine.graph_pool")
    parts = _scaled_parts("object", 1.0)
    assert graph_pool.reused(parts) is parts and graph_pool.kept() == 0
    (record,) = [r for r in caplog.records if r.name == "sporeflow.engine.graph_pool"]
    assert record.levelno == logging.DEBUG
    assert "1.held (Scaled)" in record.getMessage()
    assert "helpers.constant_nets.Settings" in record.getMessage()


SCALED = [*TINY, "debug=quick", "model._target_=helpers.constant_nets.ScaledMLP"]


def test_jobs_of_a_user_network_with_another_numpy_constant_give_what_each_gives_alone(
    tmp_path, monkeypatch
):
    """The issue's sweep, in one process: `+model.scale=1.0,0.0` over a network holding
    `np.float32(scale)`; the second job ran the first one's graph (scale 1) and reported its
    accuracy."""
    zero, one = [*SCALED, "+model.scale=0.0"], [*SCALED, "+model.scale=1.0"]
    alone, after, _ = _alone_and_after_another(monkeypatch, tmp_path, zero, one)
    graph_pool.forget_all()
    monkeypatch.chdir((tmp_path / "one").mkdir() or tmp_path / "one")
    with shared_writer_named():
        scaled = sporeflow.run(one)
    scores = [k for k in alone.metrics if k.startswith(("val/", "test/"))]
    assert {"val/acc", "val/loss", "test/loss"} <= set(scores), scores
    for key in scores:
        assert after.metrics[key] == alone.metrics[key], key
    assert scaled.metrics["val/loss"] != alone.metrics["val/loss"]
