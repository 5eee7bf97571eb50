"""What made a reusable stage besides its config: the code that trained it, MindSpore's version
and the bytes of its data. They are part of its reuse fingerprint, so a stage 1 trained by older
code, another MindSpore or other data files with the same config is not reused; its run carries
them as tags (`provenance.*`), so a lookup that finds such a run says what differs."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

from sporeflow.tracking.datasets import digest

TAG_PREFIX = "provenance."
SPLITS = ("train", "val", "test")  # data.base.SPLITS (not imported: that imports MindSpore)


@lru_cache(maxsize=1)
def code_digest() -> str:
    """12 hex digits over sporeflow's own source files (paths and bytes): any edit, committed
    or not, is other code."""
    package = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        h.update(f"{path.relative_to(package)}\0".encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def data_digest(data) -> str:
    """The data set's train, val and test splits as MLflow's dataset inputs digest them (a
    held-out split's selection names val_split, split_seed and its rows' digest)."""
    parts = []
    for split in SPLITS:
        source = data.source(split)
        parts.append(
            digest(f"{source.name}-{split}", [str(f) for f in source.files], source.selection)
        )
    return "-".join(parts)


def of(data) -> dict[str, str]:
    """This job's provenance: code, MindSpore and data."""
    import mindspore

    return {"code": code_digest(), "mindspore": mindspore.__version__, "data": data_digest(data)}


def tags(provenance: dict[str, str]) -> dict[str, str]:
    return {TAG_PREFIX + k: v for k, v in provenance.items()}


def differences(run, provenance: dict[str, str]) -> list[str]:
    """What a run was made with that this job is not ('code abc123 here def456'), from its tags;
    a run from before these tags says so."""
    theirs = run.data.tags
    if not any(k.startswith(TAG_PREFIX) for k in theirs):
        return ["its provenance is unknown (trained before sporeflow recorded it)"]
    return [
        f"{key} {theirs.get(TAG_PREFIX + key, '?')} (here {mine})"
        for key, mine in provenance.items()
        if theirs.get(TAG_PREFIX + key) != mine
    ]
