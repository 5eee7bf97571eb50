"""One pass over a split gives what Model.eval reports and the per-image outputs."""

from __future__ import annotations

import mindspore as ms
import mindspore.dataset as mds
import numpy as np
import pytest
from mindspore import Model, nn

from sporeflow.engine.predictions import eval_metrics, evaluated


def _data(rows: int, batch: int) -> mds.Dataset:
    rng = np.random.default_rng(rows)
    images = rng.normal(size=(rows, 6)).astype(np.float32)
    labels = rng.integers(0, 4, rows).astype(np.int32)
    source = mds.NumpySlicesDataset({"image": images, "label": labels}, shuffle=False)
    return source.batch(batch)


@pytest.mark.parametrize("rows,batch", [(48, 12), (50, 12)])  # equal batches; a short last one
def test_one_pass_measures_what_model_eval_reports_bit_for_bit(rows, batch):
    """acc and loss equal `Model.eval`'s exactly (the same graph, MindSpore's own metrics fed as
    Model feeds them), and the logits equal the network's own forward pass computed apart
    (numpy's argmax and a per-batch mean of the cross entropy as the reference)."""
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(3)
    network = nn.Dense(6, 4)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    model = Model(network, loss_fn=loss_fn, metrics=eval_metrics())
    data = _data(rows, batch)
    reported = model.eval(data, dataset_sink_mode=False)
    logits, labels, measured = evaluated(model, data)
    assert measured == {k: float(v) for k, v in reported.items()}
    assert logits.shape == (rows, 4) and labels.shape == (rows,)
    weight, bias = (p.asnumpy() for p in network.trainable_params())
    images = np.concatenate([b[0].asnumpy() for b in data.create_tuple_iterator(num_epochs=1)])
    want = images @ weight.T + bias
    np.testing.assert_allclose(logits, want, rtol=1e-5, atol=1e-6)
    assert measured["acc"] == pytest.approx(np.mean(want.argmax(axis=1) == labels))
    shifted = want - want.max(axis=1, keepdims=True)
    per_image = np.log(np.exp(shifted).sum(axis=1)) - shifted[np.arange(rows), labels]
    per_batch = [per_image[i : i + batch].mean() for i in range(0, rows, batch)]
    assert measured["loss"] == pytest.approx(np.mean(per_batch), rel=1e-5)
