"""DimReduceStep: the stage-2 train cell, in GRAPH_MODE.

Per step, with P the k x M PCA basis (rows orthonormal) and g the batch gradient:
  gk = P g;  H <- BFGS(H, y = gk - gk_prev, s = last accepted step) when y.s > 1e-20;
  dk = -H gk;  dn = P^T dk;
  line search on the same batch: r = 1, then r = rho; accept the first with
      loss(w + r dn) < loss(w) + sigma r gk.dk,  else r = 0 (H and gk_prev roll back);
  m = gamma m + (g - P^T gk);  w <- w - (alpha m - r dn)  [- alpha wd w, optional].

It matches MindSpore 2.10's `mindspore.boost` DimReduce step for step (tests/test_dim_reduce_step.py)
and differs where that one is wrong:
  - it returns the loss (the built-in returns None without a FixedLossScaleManager(1.0));
  - it is an ordinary cell: no process-wide AutoBoost singleton, no dependence on Model metrics;
  - data parallel: gradients and losses are averaged by AllReduce / n (true division; the
    built-in floor-divides the loss), so every rank takes the same decision and weights stay
    bit-identical; each rank holds the whole basis (no row split, no marker-file handshake);
  - BatchNorm statistics (every non-trainable parameter) touched by the trial forward passes
    are restored: only the step's own forward pass updates them;
  - optional decoupled weight decay on the out-of-subspace update (`weight_decay`);
  - its settings (rho, gamma, alpha, sigma, weight_decay) are Parameters, graph inputs rather
    than folded constants: one compiled graph serves a whole sweep over them (engine.graph_pool);
  - it counts the line search's forward passes (`trial_forwards`: 1 when r = 1 is accepted,
    else 2), in the graph and in its checkpoints, so a stage's cost is known exactly
    (engine.cost) without reading anything to the host per step.
"""

from __future__ import annotations

import numpy as np
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops
from mindspore import dtype as mstype
from mindspore.communication import get_group_size
from mindspore.context import ParallelMode
from mindspore.parallel._utils import _get_parallel_mode

_assign = ops.MultitypeFuncGraph("assign")
_project = ops.MultitypeFuncGraph("project")
_back_project = ops.MultitypeFuncGraph("back_project")
_trial = ops.MultitypeFuncGraph("trial")
_residual_momentum = ops.MultitypeFuncGraph("residual_momentum")
_final = ops.MultitypeFuncGraph("final")


@_assign.register("Tensor", "Tensor")
def _assign_value(target, value):
    return ops.assign(target, value)


@_project.register("Tensor", "Tensor")
def _project_grad(p_slice_t, grad):
    """(P g) for one weight as a 1 x k row: g^T (size x k); the basis slice is read once, in place."""
    return ops.matmul(ops.reshape(grad, (1, -1)), p_slice_t)


@_back_project.register("Tensor", "Tensor", "Tensor")
def _back_project_vec(vec_k, p_slice_t, like):
    """P^T v for one weight: (size x k) @ (k x 1), no transpose of the basis."""
    return ops.reshape(ops.matmul(p_slice_t, vec_k), ops.shape(like))


@_trial.register("Tensor", "Tensor", "Tensor", "Tensor")
def _trial_weight(r, weight, clone, dn):
    return ops.assign(weight, clone - (-r * dn))


@_residual_momentum.register("Tensor", "Tensor", "Tensor", "Tensor")
def _update_residual_momentum(gamma, momentum, grad, grad_proj):
    new = gamma * momentum + grad - grad_proj
    ops.assign(momentum, new)
    return new


@_final.register("Tensor", "Tensor", "Tensor", "Tensor", "Tensor", "Tensor")
def _final_update(alpha, weight_decay, r, weight, momentum, dn):
    # the decay term is always in the graph (0 * w adds an exact 0): one graph for every value
    delta = alpha * momentum - r * dn + alpha * weight_decay * weight
    return ops.assign(weight, weight - delta)


SETTING_PREFIX = "dim_reduce."  # the settings' Parameter names: dim_reduce.rho, ...


def _setting(name: str, value: float) -> Parameter:
    """A stage-2 setting as a graph input: a sweep over it runs one compiled graph."""
    return Parameter(
        Tensor(float(value), mstype.float32), name=SETTING_PREFIX + name, requires_grad=False
    )


def split_basis(basis: np.ndarray, weights) -> tuple:
    """The k x M basis as one size(w) x k slice per weight (transposed once, here: the layout
    both projections read without copying), in the optimizer's weight order."""
    slices, start = [], 0
    for w in weights:
        size = int(np.prod(w.shape)) if len(w.shape) else 1
        slices.append(
            Tensor(np.ascontiguousarray(basis[:, start : start + size].T), mstype.float32)
        )
        start += size
    if start != basis.shape[1]:
        raise ValueError(
            f"the PCA basis has {basis.shape[1]} columns but the network's trainable "
            f"weights hold {start} values"
        )
    return tuple(slices)


class DimReduceStep(nn.Cell):
    def __init__(
        self,
        network_with_loss: nn.Cell,
        weights,
        basis: np.ndarray,
        rho: float = 0.55,
        gamma: float = 0.9,
        alpha: float = 0.001,
        sigma: float = 0.4,
        weight_decay: float = 0.0,
    ):
        super().__init__(auto_prefix=False)
        self.network = network_with_loss
        self.network.set_grad()
        self.weights = ParameterTuple(weights)
        self.basis = split_basis(basis, self.weights)
        k = basis.shape[0]
        self.n_component = k
        self.one, self.zero = Tensor(1.0, mstype.float32), Tensor(0.0, mstype.float32)
        self.rho, self.gamma, self.alpha, self.sigma, self.weight_decay = (
            _setting(name, value)
            for name, value in (
                ("rho", rho),
                ("gamma", gamma),
                ("alpha", alpha),
                ("sigma", sigma),
                ("weight_decay", weight_decay),
            )
        )
        self.value_and_grad = ops.value_and_grad(
            self.network, grad_position=None, weights=self.weights
        )
        self.hyper_map = ops.HyperMap()
        self.eye = Tensor(np.eye(k), mstype.float32)
        self.epsilon = 1e-20

        self._init_state(k, network_with_loss)

        self.parallel = _get_parallel_mode() in (
            ParallelMode.DATA_PARALLEL,
            ParallelMode.HYBRID_PARALLEL,
        )
        if self.parallel:
            self.allreduce = ops.AllReduce()
            self.world = float(get_group_size())

    def _init_state(self, k: int, network_with_loss: nn.Cell) -> None:
        """What a step carries to the next (saved in a stage's checkpoints): the BFGS matrix and
        last projected gradient (each with the copy a rejected step rolls back to), the last
        accepted step, the trial-forward count, the residual momentum, and the clones of the
        weights and BatchNorm statistics the line search restores."""
        self.h = Parameter(Tensor(np.eye(k), mstype.float32), name="dim_reduce.h")
        self.h_back = Parameter(Tensor(np.eye(k), mstype.float32), name="dim_reduce.h_back")
        self.gk_last = Parameter(
            Tensor(np.zeros((k, 1)), mstype.float32), name="dim_reduce.gk_last"
        )
        self.gk_last_back = Parameter(
            Tensor(np.zeros((k, 1)), mstype.float32), name="dim_reduce.gk_last_back"
        )
        self.has_last = Parameter(Tensor(False), name="dim_reduce.has_last")
        self.sk = Parameter(Tensor(np.zeros((k, 1)), mstype.float32), name="dim_reduce.sk")
        self.trial_forwards = Parameter(
            Tensor(0.0, mstype.float32), name="dim_reduce.trial_forwards", requires_grad=False
        )
        self.one_trial, self.two_trials = Tensor(1.0, mstype.float32), Tensor(2.0, mstype.float32)
        self.momentum = self.weights.clone(prefix="dim_reduce.m", init="zeros")
        self.weights_clone = self.weights.clone(prefix="dim_reduce.w0", init="same")
        stats = [p for p in network_with_loss.get_parameters() if not p.requires_grad]
        self.stats = ParameterTuple(stats)
        self.stats_clone = (
            self.stats.clone(prefix="dim_reduce.stats0", init="same") if stats else None
        )

    def _mean(self, value):
        """Average across ranks with true division (the built-in floor-divides the loss)."""
        return self.allreduce(value) / self.world if self.parallel else value

    def _quasi_newton(self, gk):
        if self.has_last:
            yk = gk - self.gk_last
            ys = ops.squeeze(ops.matmul(ops.transpose(yk, (1, 0)), self.sk))
            if ys > self.epsilon:
                p = 1.0 / ys
                t = self.eye - ops.matmul(p * yk, ops.transpose(self.sk, (1, 0)))
                new_h = ops.matmul(ops.matmul(ops.transpose(t, (1, 0)), self.h), t) + ops.matmul(
                    p * self.sk, ops.transpose(self.sk, (1, 0))
                )
                ops.assign(self.h, new_h)
        else:
            ops.assign(self.has_last, Tensor(True))
        ops.assign(self.gk_last, gk)
        return -1 * ops.matmul(self.h, gk)

    def _accepts(self, r, gk, dk, dn, old_loss, *inputs):
        """Try w + r dn on the same batch; weights (and BN statistics) are restored after."""
        moved = self.hyper_map(ops.partial(_trial, r), self.weights, self.weights_clone, dn)
        old_loss = ops.depend(old_loss, moved)
        new_loss = self._mean(ops.depend(self.network(*inputs), moved))
        bound = old_loss + self.sigma * r * ops.squeeze(ops.matmul(ops.transpose(gk, (1, 0)), dk))
        ok = bound > new_loss
        if ok:
            ops.assign(self.sk, r * dk)
        restored = self.hyper_map(_assign, self.weights, ops.depend(self.weights_clone, bound))
        return ops.depend(ok, restored)

    def construct(self, *inputs):
        # w0: the weights this step starts from (trials and the update are relative to it)
        inputs = ops.depend(inputs, self.hyper_map(_assign, self.weights_clone, self.weights))
        # one forward pass for loss and gradients: BatchNorm statistics move exactly once
        loss, grads = self.value_and_grad(*inputs)
        grads = self.hyper_map(self._mean, grads)
        old_loss = self._mean(loss)
        if self.stats_clone is not None:
            old_loss = ops.depend(old_loss, self.hyper_map(_assign, self.stats_clone, self.stats))

        gk = ops.transpose(ops.addn(self.hyper_map(_project, self.basis, grads)), (1, 0))  # k x 1
        ops.assign(self.gk_last_back, self.gk_last)
        ops.assign(self.h_back, self.h)
        dk = self._quasi_newton(gk)
        dn = self.hyper_map(ops.partial(_back_project, dk), self.basis, grads)
        grad_proj = self.hyper_map(ops.partial(_back_project, gk), self.basis, grads)

        r, trials = self.zero, self.two_trials
        if self._accepts(self.one, gk, dk, dn, old_loss, *inputs):
            r, trials = self.one, self.one_trial
        elif self._accepts(self.rho, gk, dk, dn, old_loss, *inputs):
            r = self.rho
        else:
            ops.assign(self.gk_last, self.gk_last_back)
            ops.assign(self.h, self.h_back)
        r = ops.depend(r, ops.assign_add(self.trial_forwards, trials))
        if self.stats_clone is not None:
            r = ops.depend(r, self.hyper_map(_assign, self.stats, self.stats_clone))

        momentum = self.hyper_map(
            ops.partial(_residual_momentum, self.gamma), self.momentum, grads, grad_proj
        )
        done = self.hyper_map(
            ops.partial(_final, self.alpha, self.weight_decay, r), self.weights, momentum, dn
        )
        return ops.depend(old_loss, done)
