"""Mixed precision (`train.amp_level`): MindSpore's auto_mixed_precision levels O0-O3.

O2 keeps BatchNorm in float32 by itself; O3 casts everything to float16 unless
`train.keep_batchnorm_fp32` is on. Parameter names do not change, so checkpoints of an AMP run
load into a float32 network and back.
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

import mindspore as ms
from mindspore import dtype as mstype
from mindspore import nn

from sporeflow.storage.cache import usable_cache_dir


@functools.cache
def _temp_scratch() -> Path:
    """A folder of this process's own for MindSpore's rewrite when the user cache cannot be
    written (it is read again at every compile, so it lives as long as the process)."""
    return Path(tempfile.mkdtemp(prefix="sporeflow-amp-"))


def apply_amp(network: nn.Cell, level: str, keep_batchnorm_fp32: bool = True) -> nn.Cell:
    """The network to train and evaluate at `level` (the same cell for O0)."""
    if level == "O0":
        return network
    # MindSpore's rewrite writes the rewritten network's source to ./rewritten_network/, imports
    # it and reads it again at graph compile: keep it in a cache dir, not the launch directory
    here = os.getcwd()
    scratch = usable_cache_dir("amp", off="the rewritten network goes to a temp folder")
    os.chdir(scratch or _temp_scratch())
    try:
        wrapped = ms.amp.auto_mixed_precision(network, level)
    finally:
        os.chdir(here)
    if level == "O3" and keep_batchnorm_fp32:
        for _, cell in network.cells_and_names():
            if isinstance(cell, nn.layer.normalization._BatchNorm):  # noqa: SLF001 - MindSpore's base class
                cell.to_float(mstype.float32)
    return wrapped
