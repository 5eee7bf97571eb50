"""Text settings keep the text the user typed.

Hydra's override grammar reads `2024_12` as the integer 202412, `1e3` as the float 1000.0 and
`true` as a boolean before any schema sees it (by design: an unquoted value is parsed as a
literal), and OmegaConf then turns the number back into text for a `str` setting - so
`tracking.experiment_name=2024_12` named the experiment `202412` and `tracking.run_name=1e3` the
run `1000.0`. For every setting the schema types as text, an unquoted override that Hydra read
as a number or a boolean is set back to the characters on the command line.
"""

from __future__ import annotations

import dataclasses
import logging
import typing

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger(__name__)


def as_typed(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """`cfg` with each text setting that an override gave as an unquoted number or boolean set to
    the override's own text (the job's task overrides, as Hydra recorded them)."""
    for override in OverridesParser.create().parse_overrides(overrides):
        text = _typed_text(cfg, override)
        if text is None:
            continue
        log.debug(
            "%s: Hydra read %r, kept as typed: %r", override.key_or_group, override.value(), text
        )
        with open_dict(cfg):
            OmegaConf.update(cfg, override.key_or_group, text, merge=False)
    return cfg


def _typed_text(cfg: DictConfig, override: Override) -> str | None:
    """The characters after `=` where `override` sets a text setting to a number or boolean."""
    if override.is_delete() or override.is_sweep_override() or override.package:
        return None
    if not isinstance(override.value(), (int, float)):  # bool is an int: true/false too
        return None
    if not _is_text(cfg, override.key_or_group):
        return None
    return str(override.input_line).split("=", 1)[1].strip()


def _is_text(cfg: DictConfig, key: str) -> bool:
    """Whether the schema's dataclass types `key` as text (`str`, `Optional[str]`, annotated)."""
    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
    schema = OmegaConf.get_type(parent) if isinstance(parent, DictConfig) else None
    if schema is None or not dataclasses.is_dataclass(schema):
        return False
    hint = typing.get_type_hints(schema).get(leaf)
    while typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    return hint is str or hint == typing.Optional[str]
