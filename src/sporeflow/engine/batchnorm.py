"""BatchNorm statistics for weights that were not trained as they stand (a snapshot mean)."""

from __future__ import annotations

import numpy as np
from mindspore import Tensor, nn

from sporeflow.storage.checkpoints import overwrite


def recompute_batchnorm(network: nn.Cell, train_data, max_batches: int = 100) -> bool:
    """Re-estimate BatchNorm moving statistics: reset them, then forward passes in train mode
    (the layers' own momentum; after 100 batches at 0.9 the reset value weighs 0.9**100 ~ 3e-5).
    Returns False when the network has no BatchNorm."""
    base = nn.layer.normalization._BatchNorm  # noqa: SLF001 - MindSpore's one base of every BatchNorm
    norms = [c for _, c in network.cells_and_names() if isinstance(c, base)]
    if not norms:
        return False
    for bn in norms:
        overwrite(bn.moving_mean, Tensor(np.zeros(bn.moving_mean.shape, np.float32)))
        overwrite(bn.moving_variance, Tensor(np.ones(bn.moving_variance.shape, np.float32)))
    network.set_train(True)
    for i, (images, _) in enumerate(train_data.create_tuple_iterator(num_epochs=1)):
        if i >= max_batches:
            break
        network(images)
    network.set_train(False)
    return True
