"""One run dir, one run. Hydra names run dirs by the second (plus sporeflow's random suffix,
`${sporeflow.uid:}`), and a user may pass the same `hydra.run.dir` twice: before any work the
entry claims the dir, and a dir that a live process on this host still holds is refused, so
two runs never write into the same checkpoints/."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import psutil

from sporeflow.core.errors import SporeflowError
from sporeflow.core.processes import is_alive, this_process
from sporeflow.storage.files import write_text_atomic

CLAIM_FILE = ".sporeflow_claim.json"
_UID = secrets.token_hex(2)  # one per process: every interpolation in this process agrees


def uid() -> str:
    """The `${sporeflow.uid:}` resolver: 4 hex digits, fixed for this process."""
    return _UID


class RunDirInUse(SporeflowError):
    """Another live run writes into this run dir."""


def _alive_elsewhere(holder: dict) -> bool:
    """True when `holder` is a live process on this host other than this one or its ancestors."""
    mine = {p.pid for p in [psutil.Process(), *psutil.Process().parents()]}
    return holder.get("pid") not in mine and bool(
        is_alive(holder.get("pid"), holder.get("host"), holder.get("started"))
    )


def claim_run_dir(run_dir: Path) -> None:
    """Record this process as the run dir's owner; RunDirInUse if a live run already owns it."""
    path = Path(run_dir) / CLAIM_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        try:
            holder = json.loads(path.read_text())
        except (OSError, ValueError):
            holder = {}
        if _alive_elsewhere(holder):
            raise RunDirInUse(
                f"run dir {run_dir} is in use by another run (pid {holder['pid']}); "
                "start again, or give another hydra.run.dir"
            ) from None
        write_text_atomic(
            path, json.dumps(this_process())
        )  # a finished or dead run's dir: take it over
        return
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(this_process()))
