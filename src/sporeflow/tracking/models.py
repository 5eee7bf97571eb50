"""A packaged network (sporeflow.serving.package) logged as an MLflow 3 model, in the writer.

The model is a python_function model whose loader is `sporeflow.serving.pyfunc` (MLflow's
`loader_module` protocol): its data directory is the packaged directory, its signature says
what it takes (float32 images, N x C x H x W) and returns (`label`, `probabilities`). MLflow
does not load it while logging: the writer never imports MindSpore.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sporeflow.core.names import PARENT_RUN_TAG, REGISTERED_BY_TAG, STAGE_TAG

LOADER = "sporeflow.serving.pyfunc"


def signature(input_shape: list[int], num_classes: int) -> Any:
    import numpy as np
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Schema, TensorSpec

    return ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(np.float32), (-1, *input_shape))]),
        outputs=Schema(
            [
                TensorSpec(np.dtype(np.int64), (-1,), "label"),
                TensorSpec(np.dtype(np.float32), (-1, num_classes), "probabilities"),
            ]
        ),
    )


def find_logged_model(client: Any, experiment_id: str, run_id: str, name: str) -> str | None:
    """The id of the READY model `name` logged by `run_id` (a replay must not log it twice)."""
    found = client.search_logged_models(
        experiment_ids=[experiment_id],
        filter_string=f"source_run_id = '{run_id}' AND name = '{name}'",
    )
    ready = [m for m in found if str(m.status).endswith("READY")]
    return ready[0].model_id if ready else None


def log_packaged_model(client: Any, experiment_id: str, run_id: str, record: dict[str, Any]) -> str:
    """Log the packaged directory a journal `model` record names as a model of `run_id`;
    returns the model's id. The steps of MLflow's `Model.log`, without its serving check (it
    would load the network, and MindSpore, in the writer): create the logged model, save the
    python_function files, upload them, mark the model READY, link it to the run's outputs."""
    import tempfile

    import mlflow.pyfunc
    import numpy as np
    from mlflow.entities import LoggedModelOutput, LoggedModelStatus
    from mlflow.models import Model

    model = client.create_logged_model(
        experiment_id,
        name=record["name"],
        source_run_id=run_id,
        tags=record.get("tags") or {},
        model_type="classifier",
    )
    pins = requirements()
    with tempfile.TemporaryDirectory() as tmp, _pins_checked_alone(pins):
        local = Path(tmp) / "model"
        mlflow.pyfunc.save_model(
            path=str(local),
            loader_module=LOADER,
            data_path=record["dir"],
            signature=signature(record["input"], record["classes"]),
            input_example=np.load(record["example"], allow_pickle=False),
            pip_requirements=pins,
            mlflow_model=Model(
                artifact_path=model.artifact_location,
                model_uuid=model.model_id,
                run_id=run_id,
                model_id=model.model_id,
            ),
        )
        client.log_model_artifacts(model.model_id, str(local))
    client.finalize_logged_model(model.model_id, LoggedModelStatus.READY)
    client.log_outputs(run_id, [LoggedModelOutput(model.model_id, step=record["step"])])
    return model.model_id


@contextmanager
def _pins_checked_alone(pins: list[str]) -> Iterator[None]:
    """MLflow checks that a model's pins are installed (a warning only), but first maps the
    modules of every installed distribution to their packages: 3.3 s of a tiny job's 4 s of
    model logging with this venv. The pins are distributions named like their module, read
    from this environment: the check is given those names alone (MLflow still compares their
    installed versions), and MLflow's map is put back."""
    from mlflow.utils import requirements_utils

    saved = requirements_utils._MODULES_TO_PACKAGES  # noqa: SLF001
    if saved is None:
        names = ["mlflow", *(pin.split("==")[0] for pin in pins)]
        only_pins = {n: [n] for n in names}
        requirements_utils._MODULES_TO_PACKAGES = only_pins  # type: ignore[assignment]  # noqa: SLF001
    try:
        yield
    finally:
        requirements_utils._MODULES_TO_PACKAGES = saved  # noqa: SLF001


def requirements() -> list[str]:
    """What loading the model needs: sporeflow (its loader and networks) and MindSpore."""
    from importlib.metadata import version

    return [f"sporeflow=={version('sporeflow')}", f"mindspore=={version('mindspore')}"]


def model_of(client: Any, experiment_id: str, run_id: str, stage: str) -> Any | None:
    """The model `run_id` logged, or (a pipeline) the one its child run of `stage` logged."""
    owners = [run_id] + [
        r.info.run_id
        for r in client.search_runs(
            [experiment_id],
            filter_string=f"tags.{PARENT_RUN_TAG} = '{run_id}' AND tags.{STAGE_TAG} = '{stage}'",
        )
    ]
    for owner in owners:
        found = client.search_logged_models(
            experiment_ids=[experiment_id], filter_string=f"source_run_id = '{owner}'"
        )
        ready = [m for m in found if str(m.status).endswith("READY")]
        if ready:
            return ready[0]
    return None


def register(client: Any, experiment_id: str, run_id: str, record: dict[str, Any]) -> str | None:
    """A new version of registered model `record["name"]` from the model of `record["source"]`
    (see model_of); none when that run logged no model. Returns the version."""
    from mlflow.exceptions import MlflowException

    name = record["name"]
    for version in client.search_model_versions(f"name = '{name}'"):
        if version.tags.get(REGISTERED_BY_TAG) == run_id:
            return str(version.version)  # a replay: this run registered it already
    model = model_of(client, experiment_id, record["source"], record["stage"])
    if model is None:
        return None
    try:
        client.create_registered_model(name)
    except MlflowException as ex:
        if "RESOURCE_ALREADY_EXISTS" not in str(ex.error_code):
            raise
    version = client.create_model_version(
        name,
        source=model.model_uri,
        run_id=model.source_run_id,
        tags={**record.get("tags", {}), REGISTERED_BY_TAG: run_id},
        model_id=model.model_id,
    )
    return str(version.version)
