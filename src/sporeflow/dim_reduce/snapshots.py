"""Stage-1 weight snapshots: the trainable weights only, several per epoch.

sporeflow writes each snapshot as one flat float32 .npy (the weights concatenated in the
optimizer's order) with the names and shapes in `layout.json` beside them: the streaming PCA
then reads just the slice it needs through a memory map (MindSpore's load_checkpoint keeps
~5 MB of process memory per file read). A folder of MindSpore .ckpt files (what the seed's
`ModelCheckpoint(saved_network=net)` keeps) is read as well.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from sporeflow.core.errors import SporeflowError
from sporeflow.engine.events import EventRecord
from sporeflow.engine.hooks import HookBase
from sporeflow.storage.checkpoints import checkpoint_files
from sporeflow.storage.files import atomic_path, write_text_atomic

PATTERN = "snapshot_e*_s*.npy"
LAYOUT_FILE = "layout.json"


class DimReduceError(SporeflowError):
    """Snapshots or the PCA basis do not fit the request (too few, wrong network, missing)."""


def snapshot_steps(steps_per_epoch: int, per_epoch: int) -> set[int]:
    """Steps within an epoch (1-based) after which a snapshot is taken: evenly spaced, last = end."""
    per_epoch = min(per_epoch, steps_per_epoch)
    return {round((i + 1) * steps_per_epoch / per_epoch) for i in range(per_epoch)}


class TakeSnapshots(HookBase):
    """Saves the network's trainable weights `per_epoch` times an epoch from `start_epoch` on:
    a stage-1 hook of the `measure` phase (stage.hooks), before the cost meter, which takes
    its `seconds` out of the step's."""

    def __init__(
        self, record: EventRecord, network, directory: Path, start_epoch: int, per_epoch: int
    ):
        """At the steps of an epoch `snapshot_steps` names, counted by the record (also in a
        stage continued mid-epoch, whose fit counts its steps from 1 again)."""
        super().__init__()
        self.bind(record)
        self.params = network.trainable_params()
        self.directory = Path(directory)
        self.start_epoch = start_epoch
        self.at = snapshot_steps(record.steps_per_epoch, per_epoch)
        self.saved: list[Path] = []
        self.seconds = 0.0  # spent saving snapshots: engine.cost

    def after_step(self, step: int) -> None:
        cb = self.cb_params
        if cb.cur_epoch_num < self.start_epoch:
            return
        in_epoch = self.record.step_in_epoch(cb)
        if in_epoch in self.at:
            started = time.perf_counter()
            path = self.directory / f"snapshot_e{cb.cur_epoch_num:04d}_s{in_epoch:05d}.npy"
            flat = np.concatenate([p.asnumpy().astype(np.float32).ravel() for p in self.params])
            with atomic_path(path) as tmp:
                np.save(tmp, flat)
            self.saved.append(path)
            self.seconds += time.perf_counter() - started

    def before_train(self) -> None:
        layout = {
            "names": [p.name for p in self.params],
            "shapes": [list(p.shape) for p in self.params],
        }
        write_text_atomic(self.directory / LAYOUT_FILE, json.dumps(layout))


def read_layout(directory: Path) -> dict | None:
    """The names/shapes sporeflow recorded beside .npy snapshots (None for checkpoint folders)."""
    path = Path(directory) / LAYOUT_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def list_snapshots(directory: Path) -> list[Path]:
    directory = Path(directory)
    if not directory.is_dir():
        raise DimReduceError(
            f"snapshot folder {directory} does not exist; stage 1 writes it "
            "(boost.snapshot.*), or point boost.stage1_run at a finished stage-1 run"
        )
    found = sorted(directory.glob(PATTERN)) or checkpoint_files(directory, "*")
    if not found:
        raise DimReduceError(
            f"snapshot folder {directory} holds no snapshot_*.npy, .ckpt or .safetensors files"
        )
    return found
