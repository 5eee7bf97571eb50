"""A run's files as its maker recorded them: which files another machine needs to reuse a
run (SHARED), where fetched copies go, and the checks every copy passes before it is used.

The maker tags each shared file's SHA-256 on its run (`TrackedRun.log_artifact(checksum=True)`,
only the run's own writer can set it); a file fetched from the artifact store, or found in a
run dir on this disk, is used only when its digest is the recorded one. So whoever can write
the artifact store cannot choose the weights a job starts from.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from sporeflow.core.names import CHECKSUM_TAG
from sporeflow.storage.files import sha256_file

FETCHED_DIR = Path(".sporeflow") / "runs"  # under the launch dir: runs copied from the store
SHARED = [
    "checkpoints",
    "snapshots",
    "pca",
    "predictions.npy",
    "test_predictions.npy",
]  # a run dir's reusable files
MANIFEST = "manifest.json"  # snapshot file -> mtime_ns (the PCA basis cache key includes it)


def checksum_tag(artifact_file: str) -> str:
    """The tag holding the SHA-256 of a run's artifact `artifact_file` (e.g.
    `sha256/checkpoints/final.ckpt`): in the tracking database, apart from the artifact store."""
    return f"{CHECKSUM_TAG}{artifact_file}"


def unverified_here(run_dir: Path, tags: dict[str, str]) -> str | None:
    """The first file of a run dir whose SHA-256 is not the one its run's tags recorded, said
    in a few words; None when each recorded file that is here matches (a file not here is
    the reuse's own concern: a stage without its weights is not usable anyway)."""
    for tag in sorted(t for t in tags if t.startswith(CHECKSUM_TAG)):
        name = tag[len(CHECKSUM_TAG) :]
        path = Path(run_dir) / name
        if path.is_file() and sha256_file(path) != tags[tag]:
            return f"{name} is not the file its run made (SHA-256 differs from the recorded one)"
    return None


def unverified(folder: Path, tags: dict[str, str]) -> str | None:
    """The first fetched file under `folder` whose SHA-256 is not the one its run's tags
    recorded (or that has none), said in a few words; None when every file matches."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        name = path.relative_to(folder).as_posix()
        if name == f"snapshots/{MANIFEST}":  # names and times only: checked by its reader
            continue
        expected = tags.get(checksum_tag(name))
        if expected is None:
            return f"{name} has no SHA-256 recorded with its run"
        if sha256_file(path) != expected:
            return f"{name} is not the file its run made (SHA-256 differs from the recorded one)"
    return None


def restore_snapshot_times(folder: Path) -> str | None:
    """Give the fetched snapshots the file times the basis cache key was made with (the
    manifest beside them), or say which manifest entry is not a file of that folder."""
    manifest = folder / "snapshots" / MANIFEST
    if not manifest.is_file():
        return None
    for name, mtime_ns in json.loads(manifest.read_text()).items():
        target = manifest.parent / name
        if Path(name).name != name or name in ("", ".", "..") or not target.is_file():
            return f"snapshots/{MANIFEST} names {name!r}, not a file of its folder"
        os.utime(target, ns=(int(mtime_ns), int(mtime_ns)))
    manifest.unlink()
    return None
