"""The stage-2 cell against MindSpore's built-in DimReduce and a numpy reference; one test per
defect of the built-in that sporeflow must not inherit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, nn

from helpers.dim_reduce_cases import build_net, make_case
from helpers.mindspore_setup import graph_mode_on_cpu
from sporeflow.dim_reduce.step import DimReduceStep

HELPERS = Path(__file__).resolve().parents[1] / "helpers"


@pytest.fixture(autouse=True)
def graph_mode():
    graph_mode_on_cpu()


def loss_cell(net):
    return nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))


def flat(net):
    return np.concatenate([p.asnumpy().ravel() for p in net.trainable_params()])


def run_ours(case, **kwargs):
    net = build_net(case)
    step = DimReduceStep(
        loss_cell(net),
        net.trainable_params(),
        case["basis"],
        rho=float(case["rho"]),
        gamma=float(case["gamma"]),
        alpha=float(case["alpha"]),
        sigma=float(case["sigma"]),
        **kwargs,
    )
    history, losses = [], []
    for x, y in zip(case["xs"], case["ys"], strict=False):
        out = step(Tensor(x), Tensor(y))
        losses.append(float(out.asnumpy()))
        history.append(flat(net))
    return np.stack(history), np.array(losses), step


def run_builtin(case_path: Path, with_metrics=True):
    out = case_path.with_name(case_path.stem + "_out.npz")
    proc = subprocess.run(
        [
            sys.executable,
            str(HELPERS / "builtin_dim_reduce.py"),
            str(case_path),
            str(out),
            "1" if with_metrics else "0",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=case_path.parent,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = np.load(out)
    return got["history"], got["losses"]


# ---- numpy reference -------------------------------------------------------------------------


def np_loss_grad(ws, x, y):
    """Loss and flat gradient of TinyMLP (fc1 -> relu -> fc2, softmax CE) in float64."""
    w1, b1, w2, b2 = (w.astype(np.float64) for w in ws)
    h = x @ w1.T + b1
    a = np.maximum(h, 0)
    z = a @ w2.T + b2
    z = z - z.max(1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    n = len(y)
    loss = -np.log(p[np.arange(n), y]).mean()
    dz = p.copy()
    dz[np.arange(n), y] -= 1
    dz /= n
    gw2, gb2 = dz.T @ a, dz.sum(0)
    da = dz @ w2 * (h > 0)
    gw1, gb1 = da.T @ x, da.sum(0)
    return loss, np.concatenate([g.ravel() for g in (gw1, gb1, gw2, gb2)])


def unflat(v, shapes):
    out, i = [], 0
    for s in shapes:
        n = int(np.prod(s))
        out.append(v[i : i + n].reshape(s))
        i += n
    return out


def np_dim_reduce(case):
    """The algorithm of issue #6 written from its text, in float64."""
    shapes = [case[f"w{i}"].shape for i in range(int(case["n_weights"]))]
    w = np.concatenate([case[f"w{i}"].ravel() for i in range(len(shapes))]).astype(np.float64)
    P = case["basis"].astype(np.float64)
    rho, gamma, alpha, sigma = (float(case[k]) for k in ("rho", "gamma", "alpha", "sigma"))
    k = P.shape[0]
    H, gk_prev, s, m = np.eye(k), None, np.zeros(k), np.zeros_like(w)
    history, accepted = [], []
    for x, y in zip(case["xs"], case["ys"], strict=False):
        loss, g = np_loss_grad(unflat(w, shapes), x, y)
        gk = P @ g
        H_old, prev_old = H.copy(), gk_prev
        if gk_prev is not None:
            yv = gk - gk_prev
            ys = yv @ s
            if ys > 1e-20:
                p = 1 / ys
                t = np.eye(k) - p * np.outer(yv, s)
                H = t.T @ H @ t + p * np.outer(s, s)
        gk_prev = gk
        dk = -H @ gk
        dn = P.T @ dk
        r = 0.0
        for trial in (1.0, rho):
            new_loss, _ = np_loss_grad(unflat(w + trial * dn, shapes), x, y)
            if new_loss < loss + sigma * trial * gk @ dk:
                r, s = trial, trial * dk
                break
        if r == 0.0:
            H, gk_prev = H_old, (prev_old if prev_old is not None else np.zeros(k))
        accepted.append(r)
        m = gamma * m + (g - P.T @ gk)
        w = w - alpha * m + r * dn
        history.append(w.copy())
    return np.stack(history), accepted


# ---- equivalence -----------------------------------------------------------------------------


def test_matches_builtin_reference_step_by_step(tmp_path):
    case = make_case(tmp_path / "case.npz", steps=24)
    ours, our_losses, _ = run_ours(case)
    ref, ref_losses = run_builtin(tmp_path / "case.npz")
    assert len(ours) == len(ref) >= 20
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(our_losses, ref_losses, rtol=1e-5)


def test_matches_numpy_reference_and_takes_both_branches(tmp_path):
    case = make_case(tmp_path / "case.npz", steps=24)
    ours, _, _ = run_ours(case)
    ref, accepted = np_dim_reduce(case)
    # ours is float32 against a float64 reference: after 24 steps a float32 matmul's reduction
    # order alone moves a weight by ~1e-5 (the float32 built-in comparison above holds 1e-5)
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=2e-5)
    assert 0.0 in accepted and 1.0 in accepted  # line search both rejects and accepts here


def test_the_line_search_forwards_are_counted_as_taken(tmp_path):
    """The cost of a step (engine.cost): one forward+backward pass, plus one trial forward when
    r = 1 is accepted, two when it is not (r = rho accepted, or both rejected). Counted by hand
    from the numpy reference's accepted step sizes, step by step."""
    case = make_case(tmp_path / "case.npz", steps=24)
    _, accepted = np_dim_reduce(case)
    by_hand = [1 if r == 1.0 else 2 for r in accepted]
    assert 1 in by_hand and 2 in by_hand  # both kinds of step happen in this case
    net = build_net(case)
    step = DimReduceStep(
        loss_cell(net),
        net.trainable_params(),
        case["basis"],
        **{k: float(case[k]) for k in ("rho", "gamma", "alpha", "sigma")},
    )
    counted, before = [], 0.0
    for x, y in zip(case["xs"], case["ys"], strict=False):
        step(Tensor(x), Tensor(y))
        now = float(step.trial_forwards.asnumpy())
        counted.append(round(now - before))
        before = now
    assert counted == by_hand


# ---- the built-in's defects, one test each ---------------------------------------------------


def test_defect_returns_none_without_loss_scale_manager_ours_returns_loss(tmp_path):
    case = make_case(tmp_path / "case.npz", steps=3)
    _, losses, _ = run_ours(case)
    ref_loss, _ = np_loss_grad([case[f"w{i}"] for i in range(4)], case["xs"][0], case["ys"][0])
    assert losses[0] == pytest.approx(ref_loss, rel=1e-5)
    assert np.isfinite(losses).all()


def test_defect_no_metrics_fallback_ours_needs_no_model(tmp_path):
    """The built-in silently trains plain SGD(lr=1) without metrics; our cell is self-contained,
    so it is the same step with or without a Model around it."""
    case = make_case(tmp_path / "case.npz", steps=6)
    ref_no_metrics, _ = run_builtin(tmp_path / "case.npz", with_metrics=False)
    ours, _, _ = run_ours(case)
    want, _ = np_dim_reduce(case)
    np.testing.assert_allclose(ours, want, rtol=1e-4, atol=1e-5)
    assert not np.allclose(ref_no_metrics, want, rtol=1e-3, atol=1e-4), (
        "the built-in no longer falls back to SGD without metrics: drop this half of the test"
    )


def test_defect_singleton_ours_works_after_other_models_in_process(tmp_path):
    """A plain Model (stage 1) built first in the process must not change what stage 2 does."""
    case = make_case(tmp_path / "case.npz", steps=6)
    net = build_net(case)
    ms.Model(
        net,
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        optimizer=nn.Momentum(net.trainable_params(), 0.1, 0.9),
        metrics={"acc"},
        boost_level="O0",
    )
    ours, _, _ = run_ours(case)
    want, _ = np_dim_reduce(case)
    np.testing.assert_allclose(ours, want, rtol=1e-4, atol=1e-5)


def test_defect_batchnorm_statistics_not_polluted_by_trials(tmp_path):
    case = make_case(tmp_path / "case.npz", steps=4)
    x, y = case["xs"][0], case["ys"][0]
    net = build_net(case, batchnorm=True)
    params = net.trainable_params()
    m = sum(p.size for p in params)
    basis = np.linalg.qr(np.random.default_rng(1).normal(size=(m, 8)))[0].T.astype(np.float32)
    step = DimReduceStep(loss_cell(net), params, basis)
    step.set_train()
    before = net.bn.moving_mean.asnumpy().copy()
    w1 = net.fc1.weight.asnumpy().astype(np.float64)
    b1 = net.fc1.bias.asnumpy().astype(np.float64)
    step(Tensor(x), Tensor(y))
    batch_mean = (x @ w1.T + b1).mean(axis=0)
    # exactly one forward pass (the step's own) moved the statistics: momentum 0.9
    np.testing.assert_allclose(
        net.bn.moving_mean.asnumpy(), 0.9 * before + 0.1 * batch_mean, rtol=1e-4, atol=1e-6
    )


def test_weight_decay_is_decoupled_and_off_by_default(tmp_path):
    case = make_case(tmp_path / "case.npz", steps=5)
    plain, _, _ = run_ours(case)
    decayed, _, _ = run_ours(case, weight_decay=0.5)
    assert not np.allclose(plain, decayed)
    assert np.linalg.norm(decayed[-1]) < np.linalg.norm(plain[-1])
