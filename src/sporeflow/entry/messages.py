"""What the user reads when a command is refused: one line naming the key (or group option,
or file) and what is allowed, built from Hydra's and OmegaConf's own exceptions."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TextIO

from sporeflow.config.schema import COMPONENT_GROUPS, allowed_keys
from sporeflow.config.validation import component_settings
from sporeflow.core.errors import ConfigError, DataError


def usage_errors() -> tuple[type[BaseException], ...]:
    """What a user fixes in the command or its input files: exit 2."""
    from hydra.errors import (
        ConfigCompositionException,
        MissingConfigException,
        OverrideParseException,
    )
    from omegaconf.errors import OmegaConfBaseException

    return (
        ConfigError,
        DataError,
        ConfigCompositionException,
        MissingConfigException,
        OverrideParseException,
        OmegaConfBaseException,
    )


def refusal(ex: BaseException) -> str:
    """The console line for a usage error (exit 2)."""
    kind = "Data error" if isinstance(ex, DataError) else "Config error"
    return f"{kind}: {describe(ex)}  (python train.py --help lists groups and options)"


def _component_keys(group: str, argv: list[str]) -> list[str]:
    """The settings of the component `group` would build with this command's other overrides
    (composed again from the entry script's conf/ without the override that failed)."""
    if group not in COMPONENT_GROUPS or not argv:
        return []
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    keep = [
        a for a in argv[1:] if not a.startswith("-") and not a.lstrip("+~").startswith(f"{group}.")
    ]
    try:
        GlobalHydra.instance().clear()
        with initialize_config_dir(
            config_dir=str(Path(argv[0]).resolve().parent / "conf"), version_base="1.3"
        ):
            node = compose("train", overrides=[a for a in keep if not a.startswith("hydra")])[group]
        return component_settings(group, node) or []
    except Exception:  # noqa: BLE001 - only a hint: the error itself is already known
        return []


def describe(ex: BaseException, argv: list[str] | None = None) -> str:
    """A config error as one line: the key (or group option) and what is allowed."""
    if isinstance(ex, (ConfigError, DataError)) and ex.__cause__ is None:
        return str(ex)  # sporeflow's own: already one line per bad key
    cause = ex.__cause__ if ex.__cause__ is not None else ex
    text = str(ex).split("\nConfig search path:")[0].strip()
    full_key = str(getattr(cause, "full_key", None) or getattr(ex, "full_key", None) or "")
    missing = re.search(r"Could not find '([^']+)/([^']+)'", text)
    if missing:
        group, option = missing.groups()
        options = re.findall(r"^\t(\S+)$", text, re.M)
        return f"{group}={option}: no such option; available: {', '.join(options) or 'none'}"
    if full_key and re.search(r"Key '[^']+' (is )?not in", str(cause)):
        parent = full_key.rpartition(".")[0]
        allowed = allowed_keys(parent) or _component_keys(
            parent, sys.argv if argv is None else argv
        )
        where = parent or "the top level"
        if parent in COMPONENT_GROUPS and full_key.rpartition(".")[2] in allowed:
            return (
                f"{full_key}: a setting the {parent} takes but its group file does not list; "
                f"add it with +{full_key}=<value>"
            )
        return f"{full_key}: no such key" + (
            f"; allowed under {where}: {', '.join(allowed)}" if allowed else ""
        )
    converted = re.search(r"Value '(.*)' of type '\w+' could not be converted to (\w+)", str(cause))
    if full_key and converted:
        return f"{full_key}={converted.group(1)!r}: must be {converted.group(2).lower()}"
    enum = re.search(r"Invalid value '(.*)', expected one of \[(.*)\]", str(cause))
    if full_key and enum:
        return f"{full_key}={enum.group(1)!r}: allowed: {enum.group(2)}"
    first = next((line for line in text.splitlines() if line.strip()), text)
    return " ".join(first.split())


class WithoutHydraJobLine:
    """stderr minus Hydra's "Error executing job with overrides: [...]" line, which a single
    run's own one-line message makes redundant (a sweep keeps it: it names the failed job)."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> int:
        return (
            len(text)
            if text.startswith("Error executing job with overrides:")
            else self.stream.write(text)
        )

    def __getattr__(self, name: str):
        return getattr(self.stream, name)
