"""The network takes the data set's images, checked before any work: `dataset.image_size=3`
with LeNet-5 was a Conv2d traceback after the run had started and its MLflow run was made
(issue 77). One forward pass of a zero image of the data set's shape (engine.shapes: MindSpore's
own shape inference, no step trained); a refusal names the model, the size and the sizes it
takes. A model and image shape found to fit are not tried again in this process (a sweep's
jobs), keyed on the model's whole config by value."""

from __future__ import annotations

import json

from omegaconf import OmegaConf

from sporeflow.config.components import build_model
from sporeflow.config.schema import DeviceTarget
from sporeflow.core.errors import ConfigError
from sporeflow.engine import shapes
from sporeflow.job.plan import JobPlan
from sporeflow.runtime.mindspore_context import take_device

SEARCH_SECONDS = 2.0  # the most a refusal spends finding the sizes the network takes
LARGEST_TRIED = 512  # ... and the largest size it tries

_FITS: set[str] = set()  # model configs and image shapes found to fit, in this process


def check_network_input(plan: JobPlan, data) -> None:
    """The network built from `model` runs on one image of the data set's shape (channels x
    dataset.image_size x dataset.image_size). Not in the launcher of a parallel job on an
    accelerator: it would hold a device it never trains on (its workers build the network)."""
    if plan.run.device_target is not DeviceTarget.CPU and plan.run.parallel.workers > 1:
        return
    size, channels = int(data.image_size), int(data.channels)
    model = OmegaConf.to_container(plan.cfg.model, resolve=True)
    fits = json.dumps([model, channels, size], sort_keys=True, default=str)
    if fits in _FITS:
        return
    take_device(plan.run.device_target)
    network = build_model(plan.cfg)
    why = shapes.input_problem(network, (channels, size, size))
    if why is None:
        _FITS.add(fits)
        return
    raise ConfigError(
        f"dataset.image_size={size}: the model {plan.cfg.model['_target_']} does not take "
        f"{channels}x{size}x{size} images ({why.rstrip('.')}); {_sizes_hint(network, channels, size)}"
    )


def _sizes_hint(network, channels: int, size: int) -> str:
    """The image sizes the network takes, as far as a short search finds them."""
    upto = min(max(64, 2 * size), LARGEST_TRIED)
    taken = shapes.sizes_taken(network, channels, range(1, upto + 1), SEARCH_SECONDS)
    if not taken:
        return f"it takes none of the sizes 1..{upto} (check the model's settings)"
    return f"allowed: {shapes.spans(taken)} (of the sizes 1..{upto} tried)"
