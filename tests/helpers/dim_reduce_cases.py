"""Small deterministic problems for dim-reduce tests, shared by the test and the reference process."""

import numpy as np
from mindspore import Tensor, nn


class TinyMLP(nn.Cell):
    def __init__(self, n_in=16, hidden=12, n_out=4, batchnorm=False):
        super().__init__()
        self.fc1 = nn.Dense(n_in, hidden)
        self.bn = nn.BatchNorm1d(hidden, momentum=0.9) if batchnorm else None
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(hidden, n_out)

    def construct(self, x):
        x = self.fc1(x)
        if self.bn is not None:
            x = self.bn(x)
        return self.fc2(self.relu(x))


def make_case(path, steps=24, batch=16, k=8, seed=0, rho=0.55, gamma=0.9, alpha=0.001, sigma=0.4):
    """Init weights, an orthonormal k x M basis, batches; saved to `path` (npz)."""
    rng = np.random.default_rng(seed)
    net = TinyMLP()
    weights = [
        rng.normal(scale=0.5, size=p.shape).astype(np.float32) for p in net.trainable_params()
    ]
    m = sum(w.size for w in weights)
    q, _ = np.linalg.qr(rng.normal(size=(m, k)))
    xs = rng.normal(size=(steps, batch, 16)).astype(np.float32)
    ys = rng.integers(0, 4, size=(steps, batch)).astype(np.int32)
    np.savez(
        path,
        basis=q.T.astype(np.float32),
        xs=xs,
        ys=ys,
        rho=rho,
        gamma=gamma,
        alpha=alpha,
        sigma=sigma,
        n_weights=len(weights),
        **{f"w{i}": w for i, w in enumerate(weights)},
    )
    return np.load(path)


def build_net(case, batchnorm=False):
    net = TinyMLP(batchnorm=batchnorm)
    for i, p in enumerate((net.fc1.weight, net.fc1.bias, net.fc2.weight, net.fc2.bias)):
        p.set_data(Tensor(case[f"w{i}"]))
    return net
