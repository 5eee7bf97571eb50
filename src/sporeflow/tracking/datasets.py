"""A journal `dataset` record as an MLflow dataset input: what a run trained and was evaluated on.

The digest is computed here, in the writer, from the bytes of the files the data set named
(directories: their file names and sizes, so an image tree is not read whole) and what selects
the images from them; the same data gives the same digest on any machine, so the runs table's
Dataset column tells runs that saw the same images from those that did not.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from sporeflow.storage.files import sha256_file

CONTEXT_TAG = "mlflow.data.context"


@lru_cache(maxsize=64)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    p = Path(path)
    if p.is_dir():
        for f in sorted(q for q in p.rglob("*") if q.is_file()):
            h.update(f"{f.relative_to(p)}\0{f.stat().st_size}\n".encode())
        return h.hexdigest()
    return sha256_file(p)


def digest(name: str, files: list[str], selection: str) -> str:
    """12 hex digits over the name (it carries the split), the files' contents (in order) and
    the selection."""
    h = hashlib.sha256(f"{name}\0{selection}".encode())
    for f in files:
        st = Path(f).stat()
        h.update(_file_digest(f, st.st_size, st.st_mtime_ns).encode())
    return h.hexdigest()[:12]


def dataset_input(record: Mapping[str, Any]) -> Any:
    from mlflow.entities import Dataset, DatasetInput, InputTag

    dataset = Dataset(
        name=record["name"],
        digest=digest(record["name"], record["files"], record["selection"]),
        source_type="local",
        source=json.dumps({"uri": record["location"]}),
        profile=json.dumps({"num_rows": record["rows"], "selection": record["selection"]}),
    )
    return DatasetInput(dataset=dataset, tags=[InputTag(key=CONTEXT_TAG, value=record["context"])])
