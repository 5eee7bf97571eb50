"""Validation of a composed config, before any work: every problem found is reported at once,
one line per bad key (ConfigError, exit 2).

- sporeflow's own nodes: Hydra already checked keys and types against config/schema.py while
  composing; here each field's range (`Annotated[..., Range]`) and each node's `relations()`.
- user-swappable components (model, dataset, optimizer, loss): their keys, types, required
  arguments and ranges against the `_target_`'s own signature and annotations, so
  `optimizer.lrr` or `optimizer.lr=-0.1` fails before MindSpore builds anything.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Iterator
from dataclasses import fields, is_dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from sporeflow.config.schema import COMPONENT_GROUPS, RunConfig
from sporeflow.config.targets import checked_target, hook_place_problem
from sporeflow.core.errors import ConfigError
from sporeflow.core.ranges import range_of, without_range
from sporeflow.nn import schedules

# Arguments sporeflow passes itself when it builds a component; a config must not set them.
_SUPPLIED_AT_BUILD = {"optimizer": {"params", "steps_per_epoch", "epochs", "accumulation_steps"}}
_KINDS = {float: "a number", int: "a whole number", bool: "true or false", str: "a string"}


def validate(cfg: DictConfig) -> DictConfig:
    """Check a composed config completely; returns it resolved (no interpolations left), typed
    by the schema and read-only: no stage can rewrite it (a stage's own epochs or rate are its
    spec's, stage.spec). Derived facts are read from config.facts.

    Raises ConfigError with one line per problem, each naming the full key and what is allowed.
    """
    try:
        resolved = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except OmegaConfBaseException as ex:
        key = getattr(ex, "full_key", "") or "config"
        raise ConfigError(f"{key}: {ex.msg if hasattr(ex, 'msg') else ex}") from ex
    assert isinstance(resolved, dict)
    resolved.pop("hydra", None)
    plain = OmegaConf.merge(OmegaConf.structured(RunConfig), resolved)
    assert isinstance(plain, DictConfig)
    found = [line for group in COMPONENT_GROUPS for line in component_problems(group, plain[group])]
    found += schedule_problems(plain.optimizer)
    found += hook_problems(plain.callbacks.hooks)
    found += node_problems(OmegaConf.to_object(plain))
    if found:
        raise ConfigError("\n".join(found))
    OmegaConf.set_readonly(plain, True)
    return plain


def node_problems(node: Any, path: str = "") -> list[str]:
    """Every range and relation problem of a schema dataclass instance and the nodes inside it."""
    found = []
    hints = typing.get_type_hints(type(node), include_extras=True)
    for f in fields(node):
        value = getattr(node, f.name)
        rule = range_of(hints[f.name])
        why = rule.problem(value) if rule is not None else None
        if why:
            found.append(f"{path}{f.name}={value!r}: {why}")
        if is_dataclass(value):
            found += node_problems(value, f"{path}{f.name}.")
    if not found and hasattr(node, "relations"):  # relations assume each value in its range
        found += list(node.relations())
    return found


def _signature(node: DictConfig, group: str, kind: str):
    """The parameters of the node's `_target_` (None for builtins without a signature) and its
    type hints with their ranges (empty where they cannot be resolved); ConfigError when the
    target is not a `kind` (config.targets: checked before anything is called)."""
    target = checked_target(kind, group, node["_target_"])
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return None, {}
    try:
        annotated = target.__init__ if inspect.isclass(target) else target
        hints = typing.get_type_hints(annotated, include_extras=True)
    except Exception:  # noqa: BLE001 - unresolvable annotations: types are simply not checked
        hints = {}
    return params, hints


def component_settings(group: str, node: DictConfig, kind: str | None = None) -> list[str] | None:
    """The keys a component node may set (None: the target takes **kwargs, or has no signature)."""
    params, _ = _signature(node, group, kind or group)
    if params is None or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    supplied = _SUPPLIED_AT_BUILD.get(group, set())
    return [
        n
        for n, p in params.items()
        if p.kind is not inspect.Parameter.VAR_POSITIONAL and n not in supplied
    ]


def _fits(value: Any, hint: Any) -> bool:
    """Whether a config value can stand for an argument annotated `hint` (simple types only)."""
    hint = without_range(hint)
    if typing.get_origin(hint) is typing.Union:
        args = typing.get_args(hint)
        return (value is None and type(None) in args) or any(
            _fits(value, a) for a in args if a is not type(None)
        )
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint in (bool, str):
        return isinstance(value, hint)
    return True


def _kind(hint: Any) -> str:
    hint = without_range(hint)
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    return " or ".join(_KINDS.get(a, getattr(a, "__name__", str(a))) for a in args)


def component_problems(group: str, node: DictConfig, kind: str | None = None) -> Iterator[str]:
    """A target that is not of its kind (`kind`, default the group: config.targets), keys the
    target does not take, values of the wrong type or outside the argument's range, and
    required arguments that are missing."""
    if "_target_" not in node:
        yield f"{group}._target_ is missing: name the class or function that builds the {group}"
        return
    try:
        params, hints = _signature(node, group, kind or group)
    except ConfigError as ex:
        yield str(ex)
        return
    if params is None:
        return  # builtins without a signature: nothing to check against
    allowed = component_settings(group, node, kind)
    target = node["_target_"]
    keys = [str(k) for k in node.keys() if not str(k).startswith("_")]
    for key in keys:
        if allowed is not None and key not in allowed:
            yield f"{group}.{key} is not a setting of {target}; allowed: {', '.join(allowed)}"
            continue
        value, hint = node[key], hints.get(key)
        if hint is None:
            continue
        if not _fits(value, hint):
            yield f"{group}.{key}={value!r}: must be {_kind(hint)} ({target} takes {key}: {_kind(hint)})"
        elif (rule := range_of(hint)) is not None and (why := rule.problem(value)):
            yield f"{group}.{key}={value!r}: {why}"
    if not node.get("_partial_", False):
        supplied = _SUPPLIED_AT_BUILD.get(group, set())
        for name, p in params.items():
            required = p.default is inspect.Parameter.empty and p.kind in (
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                inspect.Parameter.KEYWORD_ONLY,
            )
            if required and name not in keys and name not in supplied:
                yield f"{group}.{name} is required by {target} but not set"


def hook_problems(hooks) -> list[str]:
    """callbacks.hooks: each a `_target_` node of a HookBase subclass, its keys checked like a
    component's (hooks get the stage's record when the stage starts, not from the config)."""
    found = []
    for i, node in enumerate(hooks):
        key = f"callbacks.hooks[{i}]"
        if not isinstance(node, DictConfig):
            found.append(f"{key}={node!r}: must be a node with a _target_ (a HookBase subclass)")
            continue
        problems = list(component_problems(key, node, "hook"))
        placed = (
            None
            if problems
            else hook_place_problem(key, checked_target("hook", key, node["_target_"]))
        )
        found += problems + ([placed] if placed else [])
    return found


def schedule_problems(node: DictConfig) -> list[str]:
    """optimizer.schedule: a known name, only the keys schedules.learning_rates takes, each in
    its range."""
    schedule = node.get("schedule")
    if not schedule:
        return []
    name = schedule.get("name", "constant")
    if name not in schedules.NAMES:
        return [f"optimizer.schedule.name={name!r}; allowed: {', '.join(schedules.NAMES)}"]
    hints = typing.get_type_hints(schedules.learning_rates, include_extras=True)
    allowed = [
        p
        for p in inspect.signature(schedules.learning_rates).parameters
        if p not in ("lr_max", "steps_per_epoch", "epochs", "accumulation_steps")
    ]
    found = []
    for key in schedule:
        if key not in allowed:
            found.append(
                f"optimizer.schedule.{key} is not a schedule setting; allowed: {', '.join(allowed)}"
            )
        elif (rule := range_of(hints.get(key))) is not None and (
            why := rule.problem(schedule[key])
        ):
            found.append(f"optimizer.schedule.{key}={schedule[key]!r}: {why}")
    return found
