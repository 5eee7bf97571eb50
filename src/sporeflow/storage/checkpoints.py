"""Checkpoint files: atomic writes (a kill mid-save never leaves a truncated file), pruning,
and resume (newest complete checkpoint, exact-name restore, the run marker).

A checkpoint's format is its suffix: `.ckpt` (MindSpore's own) or `.safetensors`
(`callbacks.checkpoint.format`); every reader here takes either, so a run resumed, evaluated
or fine-tuned from needs no setting to say which one it wrote."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mindspore as ms
import numpy as np

from sporeflow.core.errors import CheckpointError
from sporeflow.core.names import CLASS_NAMES_TAG
from sporeflow.storage.files import atomic_path

log = logging.getLogger(__name__)

SUFFIXES = (".ckpt", ".safetensors")  # MindSpore's checkpoint formats, one per suffix
CLASS_NAMES = CLASS_NAMES_TAG  # the entry holding a network's class names


def is_checkpoint(path: str | os.PathLike) -> bool:
    return Path(path).suffix in SUFFIXES


def file_format(path: str | os.PathLike) -> str:
    """MindSpore's `format=` for a checkpoint file: its suffix without the dot."""
    if not is_checkpoint(path):
        raise CheckpointError(f"{path}: not a checkpoint (allowed suffixes: {', '.join(SUFFIXES)})")
    return Path(path).suffix[1:]


def checkpoint_files(directory: str | os.PathLike, stem: str) -> list[Path]:
    """The checkpoints in `directory` whose stem matches the glob `stem`, in either format,
    sorted by name (names carry zero-padded epochs)."""
    found = (p for suffix in SUFFIXES for p in Path(directory).glob(f"{stem}{suffix}"))
    return sorted(found, key=lambda p: p.name)


def read_checkpoint(path: Path, **kwargs) -> dict:
    """MindSpore's reader in the file's format; its own errors pass through."""
    return ms.load_checkpoint(str(path), format=file_format(path), **kwargs)


def save_atomic(
    obj: Any, path: str | os.PathLike, append_dict: dict | None = None, integrated_save: bool = True
) -> Path:
    """Save a Cell or parameter list to `path` atomically (sporeflow.storage.files).

    integrated_save=False keeps each rank's slices of sharded parameters (semi/auto parallel);
    `sporeflow merge-ckpt` joins them later."""
    size = (
        sum(p.data.nbytes for p in obj.get_parameters()) if hasattr(obj, "get_parameters") else None
    )
    with atomic_path(path, size_hint=size) as tmp:
        try:
            ms.save_checkpoint(
                obj,
                str(tmp),
                append_dict=append_dict,
                integrated_save=integrated_save,
                format=file_format(path),
            )
        finally:
            tmp.with_suffix(".tmp").unlink(
                missing_ok=True
            )  # MindSpore writes <name>.tmp, then renames it
    return Path(path)


def class_names_entry(names) -> dict:
    """The `append_dict` entry that keeps a network's class names (label order) in its
    checkpoint, so they travel with the weights (timm keeps its class_map beside the model):
    their JSON as uint8 bytes, which both formats hold (safetensors holds no strings)."""
    if not names:
        return {}
    blob = np.frombuffer(json.dumps([str(n) for n in names]).encode(), np.uint8)
    return {CLASS_NAMES: ms.Tensor(blob.copy())}


def stored_class_names(path: Path) -> list[str] | None:
    """The class names a checkpoint holds (`class_names_entry`), None when it holds none (a
    checkpoint written before they were stored, or of a data set whose classes are numbers);
    only that entry is read (and one other: MindSpore refuses to return nothing)."""
    first: list[str] = []

    def wanted(name: str) -> bool:
        if name == CLASS_NAMES:
            return True
        first[:] = first or [name]
        return first == [name]

    state = load_checkpoint_file(path, choice_func=wanted)
    value = state.get(CLASS_NAMES)
    if value is None:
        return None
    try:
        names = json.loads(value.asnumpy().astype(np.uint8).tobytes().decode())
    except (ValueError, UnicodeDecodeError) as ex:
        raise CheckpointError(
            f"{path}: its {CLASS_NAMES} entry is not a list of names ({ex})"
        ) from None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise CheckpointError(f"{path}: its {CLASS_NAMES} entry is not a list of names")
    return names


def prune(files: list[Path], keep: int) -> list[Path]:
    """Delete all but the `keep` last of `files` (sorted by name); returns what was deleted."""
    doomed = files[:-keep] if keep > 0 else files
    for f in doomed:
        f.unlink(missing_ok=True)
    return doomed


def checkpoint_dir(stage_dir: Path, rank: int = 0, world_size: int = 1) -> Path:
    """Where a stage's checkpoints go: `<stage dir>/checkpoints`, `.../rank_<r>` in a parallel job."""
    base = Path(stage_dir) / "checkpoints"
    return base if world_size == 1 else base / f"rank_{rank}"


def final_weights(stage_dir: Path, rank: int = 0) -> Path:
    """A finished stage's `final.<format>` for this rank: its own rank's file when the stage ran
    in parallel, else the stand-alone one (so a stand-alone stage 1 serves a parallel job too);
    the `.ckpt` path (missing) when there is none."""
    for directory in (checkpoint_dir(stage_dir, rank, world_size=2), checkpoint_dir(stage_dir)):
        found = checkpoint_files(directory, "final")
        if found:
            return found[0]
    return checkpoint_dir(stage_dir) / f"final{SUFFIXES[0]}"


def newest_complete_checkpoint(directory: Path) -> tuple[Path, dict]:
    """The newest `epoch_*` checkpoint that loads; a corrupt one is skipped with a warning."""
    candidates = checkpoint_files(directory, "epoch_*")[::-1]
    for path in candidates:
        try:
            return path, read_checkpoint(path)
        except (ValueError, RuntimeError, OSError) as ex:
            log.warning("skipping unreadable checkpoint %s: %s", path, ex)
    raise CheckpointError(
        f"no readable epoch_* checkpoint in {directory} ({len(candidates)} found, none loads)"
    )


def load_checkpoint_file(path: Path, **kwargs) -> dict:
    """A checkpoint's parameters (`kwargs` to MindSpore's reader, e.g. `choice_func`); a clear
    error for a missing or corrupt file."""
    try:
        return read_checkpoint(Path(path), **kwargs)
    except (ValueError, RuntimeError, OSError) as ex:
        raise CheckpointError(f"cannot read checkpoint {path}: {ex}") from ex


def overwrite(param, value) -> None:
    """`value` into `param`'s own buffer. MindSpore 2.10 binds a compiled graph with control
    flow to the buffer a parameter had at compile; `set_data` puts in a new one, which such a
    graph never reads (tests/unit/test_graph_pool.py). A parameter not yet holding data takes
    `set_data`."""
    value = value.astype(param.dtype) if value.dtype != param.dtype else value
    if param.has_init:
        param.set_data(value)
    else:
        param.copy_(value)


def load_weights(network, path: Path) -> None:
    """Network weights from a checkpoint file, every parameter matched by its exact name."""
    restore_exact(load_checkpoint_file(path), network)


def matching(state: dict, network) -> tuple[list[str], list[str]]:
    """Fine-tuning: the parameters of `network` whose name and shape a checkpoint value matches,
    and those it does not; compares shapes only (no kernel runs: preflight calls it before
    MindSpore's device is set, and MindSpore refuses `set_device` after a kernel ran)."""
    loaded: list[str] = []
    skipped: list[str] = []
    for param in network.get_parameters():
        value = state.get(param.name)
        fits = value is not None and tuple(value.shape) == tuple(param.shape)
        (loaded if fits else skipped).append(param.name)
    return loaded, skipped


def restore_matching(state: dict, network) -> tuple[list[str], list[str]]:
    """Fine-tuning: copy every checkpoint value whose name and shape match a parameter of
    `network`; returns (the parameters loaded, those left as they were)."""
    loaded, skipped = matching(state, network)
    params = {p.name: p for p in network.get_parameters()}
    for name in loaded:
        overwrite(params[name], state[name])
    return loaded, skipped


def restore_exact(
    state: dict,
    *cells,
    from_config: Callable[[str], bool] | None = None,
    rebuilt: Callable[[str], bool] | None = None,
) -> list[str]:
    """Copy checkpoint values into the cells' parameters, matched by exact name.

    `load_param_into_net` matches names loosely (it strips prefixes), which let optimizer
    moments overwrite network weights; here every parameter must find its own name, but those
    `from_config` names (hyperparameters that are graph inputs: a checkpoint written before they
    were lacks them, and the config's value stays) and `rebuilt` names, never taken from the
    checkpoint: values the resumed run builds from its own config (the learning rate's
    per-update table: a resume with a larger `epochs=` builds a longer one, which holds).
    Returns the checkpoint entries not used.
    """
    params: dict[str, Any] = {}
    for cell in cells:
        for p in cell.get_parameters():
            if rebuilt is not None and rebuilt(p.name):
                continue
            if p.name in state or from_config is None or not from_config(p.name):
                params.setdefault(p.name, p)
    missing = [name for name in params if name not in state]
    if missing:
        raise CheckpointError(
            f"the checkpoint lacks {len(missing)} parameter(s) of this network, "
            f"e.g. {', '.join(missing[:5])}"
        )
    for name, param in params.items():
        value = state[name]
        if tuple(value.shape) != tuple(param.shape):
            raise CheckpointError(
                f"parameter {name}: checkpoint shape {tuple(value.shape)} "
                f"!= network shape {tuple(param.shape)}"
            )
        overwrite(param, value)
    return [name for name in state if name not in params]
