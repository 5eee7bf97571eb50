"""Run MindSpore's built-in boost DimReduce (the reference) in its own process.

It must run alone in a process: its AutoBoost config is a process-wide singleton.
Usage: python builtin_dim_reduce.py CASE.npz OUT.npz [model_metrics=1]
CASE holds init weights w0..wn, basis, xs, ys, hyper-parameters; OUT gets per-step weights.
"""

import sys

import mindspore as ms
import mindspore.dataset as mds
import numpy as np
from mindspore import Model, nn
from mindspore.train import Callback, FixedLossScaleManager

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from dim_reduce_cases import build_net


def main(case_path, out_path, with_metrics="1"):
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    case = np.load(case_path)
    net = build_net(case)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    basis_path = case_path.replace(".npz", "_basis.npy")
    np.save(basis_path, case["basis"].astype(np.float64))
    config = {
        "boost": {"mode": "manual", "dim_reduce": True},
        "dim_reduce": {
            "rho": float(case["rho"]),
            "gamma": float(case["gamma"]),
            "alpha": float(case["alpha"]),
            "sigma": float(case["sigma"]),
            "n_components": int(case["basis"].shape[0]),
            "pca_mat_path": basis_path,
            "weight_load_dir": None,
            "timeout": 60,
        },
    }
    metrics = {"acc"} if with_metrics == "1" else None
    model = Model(
        net,
        loss_fn=loss_fn,
        optimizer=nn.SGD(net.trainable_params(), 0.1),
        metrics=metrics,
        boost_level="O1",
        boost_config_dict=config,
        loss_scale_manager=FixedLossScaleManager(1.0, drop_overflow_update=False),
    )
    data = mds.NumpySlicesDataset(
        {"x": case["xs"].reshape(-1, case["xs"].shape[-1]), "y": case["ys"].reshape(-1)},
        shuffle=False,
    ).batch(case["xs"].shape[1])
    history, losses = [], []

    class Record(Callback):
        def on_train_step_end(self, run_context):
            history.append(np.concatenate([p.asnumpy().ravel() for p in net.trainable_params()]))
            out = run_context.original_args().net_outputs
            losses.append(np.nan if out is None else float(out.asnumpy()))

    model.train(1, data, callbacks=[Record()], dataset_sink_mode=False)
    np.savez(out_path, history=np.stack(history), losses=np.array(losses))


if __name__ == "__main__":
    main(*sys.argv[1:])
