"""A source's final weights applied to a user's own images (`sporeflow predict`): each image
goes through the eval transforms of the data set the weights were trained on (its stored size,
rescale, normalisation), in batches, and comes out as one probability per class, named by the
class names stored with the weights (not by the data set's folders as they are now)."""

from __future__ import annotations

import csv
import io
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from sporeflow.config.components import build_dataset
from sporeflow.config.facts import container
from sporeflow.config.schema import ParallelConfig, RunConfig, RuntimeConfig
from sporeflow.config.validation import validate
from sporeflow.core.errors import ConfigError
from sporeflow.data.image_files import ImageInput, image_input
from sporeflow.engine import compile_cache
from sporeflow.job.eval_run import class_headings, loaded_network, model_class_names
from sporeflow.runtime.mindspore_context import init_context, refuse_compile_cache
from sporeflow.stage.source import Source

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prediction:
    """Each image's name and class probabilities (N x classes), in the input's order."""

    names: tuple[str, ...]
    probabilities: np.ndarray
    class_names: tuple[str, ...] | None = None  # the model's names of the labels, if any
    caveat: str = ""  # what the user should know before trusting them (images scaled up)

    @property
    def labels(self) -> np.ndarray:
        return self.probabilities.argmax(axis=1)


def checked_inputs(source: Source, images: Path) -> tuple[DictConfig, ImageInput]:
    """The config to predict with (the source's own, in one process on this machine) and the
    checked images; ConfigError / DataError before any work."""
    if source.config is None:
        raise ConfigError(
            f"source={source.name}: a checkpoint outside a run dir says nothing of its network "
            "or data; give the run dir it came from, or evaluate it with python eval.py "
            f"source={source.name} model=... dataset=..."
        )
    cfg = OmegaConf.create(container(source.config))
    cfg.parallel = OmegaConf.structured(ParallelConfig)
    cfg.runtime = OmegaConf.structured(RuntimeConfig)
    cfg.resume = False
    plain = validate(cfg)
    refuse_compile_cache()
    checked = image_input(images, int(plain.dataset.channels))
    if checked.left_out:
        log.warning("%s", checked.left_out)
    return plain, checked


def predict(cfg: DictConfig, source: Source, images: ImageInput, progress: bool) -> Prediction:
    """The network of `cfg` (validated: checked_inputs) with `source`'s weights on `images`,
    batch by batch."""
    run = OmegaConf.to_object(cfg)  # its typed twin: what settings are read from
    assert isinstance(run, RunConfig), "predict takes a validated config (checked_inputs)"
    init_context(cfg)
    network = loaded_network(cfg, source)
    network.set_train(False)
    dataset = build_dataset(cfg)
    batches = dataset.from_images(images.images, encoded=images.encoded)
    bar = tqdm(total=len(images.names), desc="predict", unit="image", disable=not progress)
    found = []
    with compile_cache.cached(run.runtime), bar:
        for (batch,) in batches.create_tuple_iterator(num_epochs=1):
            found.append(softmax(network(batch).asnumpy().astype(np.float64)))
            bar.update(len(found[-1]))
    names = model_class_names(source, dataset)
    caveat = scaled_up_caveat(images, dataset.native_size or dataset.image_size)
    return Prediction(images.names, np.concatenate(found), tuple(names) if names else None, caveat)


def scaled_up_caveat(images: ImageInput, side: int) -> str:
    """A line naming the images scaled up 2x or more to the `side` pixels the data set's own
    images have as stored: what the network predicts from a few pixels blown up is a guess."""
    small = images.scaled_up(side)
    if not small:
        return ""
    name, least = small[0]
    return (
        f"{len(small)} of {len(images.names)} images are less than half the {side} x {side} "
        f"pixels of the images the network learned from and were scaled up to them (the "
        f"smallest, {name}, {side / least:.0f}x from {least} pixel{'s' * (least > 1)} on its "
        "shorter side): "
        "their predictions rest on little"
    )


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def csv_text(prediction: Prediction) -> str:
    """`file,label,[class,]p_<class>,...`: one row per image, the label the most probable class
    (and its name, where the model names its classes: an image folder's class folders as it
    trained); each probability headed by its class's name (else number)."""
    out = io.StringIO()
    table = csv.writer(out, lineterminator="\n")
    named = prediction.class_names
    probabilities = [f"p_{h}" for h in class_headings(named, prediction.probabilities.shape[1])]
    table.writerow(["file", "label", *(["class"] if named else []), *probabilities])
    for name, label, probs in zip(
        prediction.names, prediction.labels, prediction.probabilities, strict=True
    ):
        label_name = [named[label] if label < len(named) else ""] if named else []
        table.writerow([name, int(label), *label_name, *(f"{p:.6g}" for p in probs)])
    return out.getvalue()
