"""The Hydra task function and the process exit codes around it.

`run_task` is what train.py's @hydra.main calls: it validates, applies the CPU ISA choice
before MindSpore loads, and hands a plain config and a RunContext to the pipeline (which
never imports Hydra). `run_cli` maps errors to exit codes: 2 for a config a user must fix
(a typo in a key or group option), 1 for a failed run.
"""
from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable

from omegaconf import DictConfig

from sporeflow import cpu_isa, launch, signals
from sporeflow.context import RunContext
from sporeflow.errors import ConfigError, SporeflowError
from sporeflow.rundir import claim_run_dir
from sporeflow.components import build_model
from sporeflow.schema import allowed_keys, validate
from sporeflow.strategies import check_parallel_plan

log = logging.getLogger("sporeflow")


def _git_commit(cwd: str) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True,
                             text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _run_context() -> RunContext:
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    launch_dir = hc.runtime.cwd
    return RunContext(
        run_dir=Path(hc.runtime.output_dir).resolve(),
        launch_dir=Path(launch_dir).resolve(),
        overrides=list(hc.overrides.task),
        hydra_dir=Path(hc.runtime.output_dir, hc.output_subdir).resolve() if hc.output_subdir else None,
        git_commit=_git_commit(launch_dir),
        entry_script=Path(sys.argv[0]).resolve(),
    )


def resume_hint(cfg: DictConfig, ctx: RunContext) -> str:
    """What to run after an interruption: the same command again (pipelines reuse a finished
    stage 1), or resume= from the newest checkpoint."""
    if cfg.boost.name.value == "dim_reduce":
        return "start the same command again: a finished stage 1 is reused"
    saved = sorted(ctx.run_dir.rglob("epoch_*.ckpt"), key=lambda p: p.stat().st_mtime)
    if not saved:
        return f"no checkpoint was written yet in {ctx.run_dir}"
    return (f"last checkpoint {saved[-1]}; continue with: python train.py {' '.join(ctx.overrides)} "
            f"resume={ctx.run_dir}").replace("  ", " ")


def run_task(cfg: DictConfig) -> float:
    """Validate, then run the pipeline; returns the final eval accuracy."""
    if launch.under_msrun():
        signals.die_with_parent()  # a worker (or msrun's scheduler) never outlives msrun
    signals.install()
    # before validate(): checking `_target_`s imports them, and they import MindSpore
    isa = cpu_isa.apply(getattr(cfg.runtime.cpu_isa, "value", cfg.runtime.cpu_isa))
    log.info("oneDNN ISA cap: %s", isa or "none (oneDNN's own choice)")
    plain = validate(cfg)
    check_parallel_plan(plain, lambda: build_model(plain))
    ctx = _run_context()
    if not launch.under_msrun():  # workers share their launcher's dir, and it checked resume=
        from sporeflow.stages.resume import check_resume  # imports MindSpore: after the ISA choice

        check_resume(plain, ctx)
        claim_run_dir(ctx.run_dir)
    try:
        if launch.needs_launch(plain):
            from sporeflow.stages import runs

            return launch.launch(plain, ctx, before_start=lambda: runs.prepare_store(plain, ctx),
                                 on_end=lambda status: runs.mark_ended(plain, ctx, status))
        from sporeflow.stages.pipeline import run_pipeline  # imports MindSpore: after the ISA choice

        acc = run_pipeline(plain, ctx)
    except signals.Interrupted as ex:
        ex.hint = resume_hint(plain, ctx)
        raise
    if launch.under_msrun():
        from mindspore.communication import get_rank

        if get_rank() == 0:
            launch.write_result(ctx, acc)
    return acc


def _config_errors() -> tuple[type[BaseException], ...]:
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
    from omegaconf.errors import OmegaConfBaseException

    return (ConfigError, ConfigCompositionException, MissingConfigException,
            OverrideParseException, OmegaConfBaseException)


def _describe(ex: BaseException) -> str:
    """Hydra's/OmegaConf's message, without the search-path dump, plus the allowed keys."""
    text = str(ex).strip()
    cause = ex.__cause__
    if cause is not None and str(cause).strip() and str(cause).strip() not in text:
        text += "\n" + str(cause).strip()
    text = text.split("\nConfig search path:")[0]
    full_key = getattr(cause, "full_key", None) or getattr(ex, "full_key", None)
    if full_key and re.search(r"Key '[^']+' (is )?not in", text):
        allowed = allowed_keys(str(full_key).rpartition(".")[0])
        if allowed:
            text += f"\nallowed keys under {str(full_key).rpartition('.')[0] or 'the top level'}: {', '.join(allowed)}"
    return text


class _WithoutHydraJobLine:
    """stderr minus Hydra's "Error executing job with overrides: [...]" line, which a single
    run's own one-line message makes redundant (a sweep keeps it: it names the failed job)."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        return len(text) if text.startswith("Error executing job with overrides:") else self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def run_cli(hydra_main: Callable[[], object]) -> None:
    """Run a @hydra.main function; exit 2 on a config error, 1 on a failed run."""
    user_wants_traceback = bool(os.environ.get("HYDRA_FULL_ERROR"))
    os.environ["HYDRA_FULL_ERROR"] = "1"  # let exceptions reach us instead of Hydra's exit(1)
    if not {"-m", "--multirun"} & set(sys.argv[1:]):
        sys.stderr = _WithoutHydraJobLine(sys.stderr)
    try:
        hydra_main()
    except signals.Interrupted as ex:
        print(f"Interrupted by {ex.name}" + (f": the run is marked KILLED; {ex.hint}" if ex.hint
                                             else " before any run started"), file=sys.stderr)
        sys.exit(ex.exit_code)
    except _config_errors() as ex:
        if user_wants_traceback:
            raise
        print(f"Config error: {_describe(ex)}", file=sys.stderr)
        print("(python train.py --help lists the groups and options; --cfg job shows the config)",
              file=sys.stderr)
        sys.exit(2)
    except SporeflowError as ex:
        if user_wants_traceback:
            raise
        print(f"Error: {_describe(ex)}", file=sys.stderr)
        sys.exit(1)
