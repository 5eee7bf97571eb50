"""MLflow's python_function loader for a packaged sporeflow model (serving.package).

MLflow calls `_load_pyfunc(<model dir>/data)` when a user runs `mlflow.pyfunc.load_model(uri)`
or `mlflow models serve -m uri`; the returned object's `predict` takes an image batch as the
network sees it (float32, N x C x H x W) and returns each image's class probabilities and label,
and the label's class name (`class`) where the model stored its class names (network.yaml).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sporeflow.serving.package import NETWORK, packaged_weights


class Classifier:
    """The network rebuilt from its resolved config, holding the packaged weights."""

    def __init__(self, path: Path):
        import mindspore as ms
        from omegaconf import OmegaConf

        from sporeflow.config.components import build_model
        from sporeflow.config.targets import checked_target
        from sporeflow.storage.checkpoints import load_weights

        spec = yaml.safe_load((path / NETWORK).read_text())
        checked_target("model", "model", spec["model"]["_target_"])  # data, never a call
        self.input = spec["input"]
        self.class_names = spec.get("class_names")  # label order; None: classes are numbers
        self.network = build_model(OmegaConf.create({"model": spec["model"]}))
        load_weights(self.network, packaged_weights(path))
        self.network.set_train(False)
        self._tensor = ms.Tensor

    def predict(self, model_input: Any, params: dict | None = None) -> dict[str, np.ndarray]:
        batch = np.asarray(getattr(model_input, "values", model_input), dtype=np.float32)
        want = (self.input["channels"], self.input["height"], self.input["width"])
        if batch.ndim != 4 or tuple(batch.shape[1:]) != want:
            raise ValueError(
                f"expected an image batch of shape (N, {', '.join(map(str, want))}); "
                f"got {batch.shape}"
            )
        logits = self.network(self._tensor(batch)).asnumpy().astype(np.float64)
        exp = np.exp(logits - logits.max(axis=1, keepdims=True))
        probabilities = (exp / exp.sum(axis=1, keepdims=True)).astype(np.float32)
        labels = probabilities.argmax(axis=1).astype(np.int64)
        named = {"class": np.array(self.class_names)[labels]} if self.class_names else {}
        return {"label": labels, **named, "probabilities": probabilities}


def _load_pyfunc(data_path: str) -> Classifier:
    return Classifier(Path(data_path))
