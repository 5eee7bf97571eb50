"""Validation of a composed config, before any work: every problem found is reported at once,
one line per bad key (ConfigError, exit 2).

- sporeflow's own nodes: Hydra already checked keys and types against config/schema.py while
  composing; here each field's range (`Annotated[..., Range]`) and each node's `relations()`.
- user-swappable components (model, dataset, optimizer, loss) and `callbacks.hooks`: their
  keys, types, required arguments, ranges and allowed values (`Literal[...]`; a hook's
  `Annotated[str, ValidationMetric]` against the metrics the job's stages record) against the
  `_target_`'s own signature and annotations, so `optimizer.lrr`, `optimizer.lr=-0.1` or an
  early stop's `mode=maximize` fails before MindSpore builds anything.
"""

from __future__ import annotations

import difflib
import inspect
import re
import typing
from collections.abc import Iterator, Sequence
from dataclasses import fields, is_dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from sporeflow.config import objective
from sporeflow.config.facts import is_dim_reduce
from sporeflow.config.schema import COMPONENT_GROUPS, RunConfig
from sporeflow.config.targets import checked_target, hook_place_problem
from sporeflow.core.errors import ConfigError
from sporeflow.core.ranges import names_metric, rule_of, without_range
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
        raise ConfigError(resolution_problem(ex)) from None
    assert isinstance(resolved, dict)
    resolved.pop("hydra", None)
    plain = OmegaConf.merge(OmegaConf.structured(RunConfig), resolved)
    assert isinstance(plain, DictConfig)
    found = [line for group in COMPONENT_GROUPS for line in component_problems(group, plain[group])]
    found += schedule_problems(plain.optimizer)
    recorded = objective.validation_metrics(plain.train.ema.enabled, is_dim_reduce(plain))
    found += hook_problems(plain.callbacks.hooks, recorded)
    found += node_problems(OmegaConf.to_object(plain))
    if found:
        raise ConfigError("\n".join(found))
    OmegaConf.set_readonly(plain, True)
    return plain


def resolution_problem(ex: OmegaConfBaseException, overrides: Sequence[str] = ()) -> str:
    """A value that cannot be resolved, as one line: the key that holds it and what it holds
    (`tracking.run_name=${model.nme}`), then what is missing - a key of the config (with the
    closest one), an environment variable (and how to give a default), a resolver. Hydra's own
    keys (`hydra.run.dir` holds `${resume}`) are named by the command's override that brought
    the interpolation in, one of `overrides`."""
    key = getattr(ex, "full_key", "") or "config"
    node = getattr(ex, "child_node", None)
    held = node._value() if node is not None else None  # noqa: SLF001 - the value as written
    said = f"{key}={held}" if isinstance(held, str) and "${" in held else key
    text = str(getattr(ex, "msg", ex)).split("\n")[0]
    named = re.findall(r"'([^']+)'", text)
    brought = [o for o in overrides if "${" in o and any(n in o for n in named)]
    if key.startswith("hydra.") and brought:
        said = brought[0]
    if missing := re.search(r"Interpolation key '([^']+)' not found", text):
        name = missing.group(1)
        close = difflib.get_close_matches(name, _dotted_keys(node), n=1, cutoff=0.75)
        meant = f"; did you mean {close[0]}?" if close else ""
        return f"{said}: the config has no key {name}{meant}"
    if unset := re.search(r"Environment variable '([^']+)' not found", text):
        name = unset.group(1)
        return (
            f"{said}: the environment variable {name} is not set; set it, or give a default: "
            f"${{oc.env:{name},<default>}}"
        )
    if unknown := re.search(r"Unsupported interpolation type (\S+)", text):
        from omegaconf.basecontainer import BaseContainer

        known = ", ".join(sorted(BaseContainer._resolvers))  # noqa: SLF001 - OmegaConf's registry
        return f"{said}: no resolver named {unknown.group(1)}; registered: {known}"
    return f"{said}: {text}"


def _dotted_keys(node: Any) -> list[str]:
    """Every key of the config `node` belongs to, as an interpolation names it (`model.name`)."""
    if node is None:
        return []
    found: list[str] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                found.append(f"{path}{k}")
                walk(v, f"{path}{k}.")

    walk(OmegaConf.to_container(node._get_root(), resolve=False), "")  # noqa: SLF001
    return found


def node_problems(node: Any, path: str = "") -> list[str]:
    """Every range and relation problem of a schema dataclass instance and the nodes inside it."""
    found = []
    hints = typing.get_type_hints(type(node), include_extras=True)
    for f in fields(node):
        value = getattr(node, f.name)
        why = rule_of(hints[f.name]).problem(value)
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


def _choices(hint: Any) -> tuple | None:
    """The values a `Literal[...]` hint allows (also inside Optional[...]: with None); None
    when the hint is no Literal."""
    hint = without_range(hint)
    if typing.get_origin(hint) is typing.Literal:
        return typing.get_args(hint)
    if typing.get_origin(hint) is typing.Union:
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(inner) == 1 and typing.get_origin(inner[0]) is typing.Literal:
            return (*typing.get_args(inner[0]), None)
    return None


def _value_problem(
    key: str, value: Any, hint: Any, takes: str, recorded: list[str] | None
) -> str | None:
    """Why `value` at `key` does not fit the argument's annotation `hint`: outside its
    Literal's values, not a validation metric of `recorded` (a ValidationMetric argument of a
    hook), of the wrong type (`takes`: what says so) or outside its range; None when it fits."""
    choices = _choices(hint)
    if choices is not None:
        shown = ", ".join("null" if c is None else str(c) for c in choices)
        return None if value in choices else f"{key}={value!r}; allowed: {shown}"
    if recorded is not None and names_metric(hint):
        return objective.monitor_refusal(key, value, recorded)
    if not _fits(value, hint):
        return f"{key}={value!r}: must be {_kind(hint)} ({takes}: {_kind(hint)})"
    why = rule_of(hint).problem(value)
    return f"{key}={value!r}: {why}" if why else None


def _kind(hint: Any) -> str:
    hint = without_range(hint)
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    return " or ".join(_KINDS.get(a, getattr(a, "__name__", str(a))) for a in args)


def component_problems(
    group: str, node: DictConfig, kind: str | None = None, recorded: list[str] | None = None
) -> Iterator[str]:
    """A target that is not of its kind (`kind`, default the group: config.targets), keys the
    target does not take, values of the wrong type, outside the argument's range or its allowed
    values (`recorded`: the validation metrics a hook's ValidationMetric argument may name), and
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
        takes = f"{target} takes {key}"
        problem = _value_problem(f"{group}.{key}", node[key], hints.get(key), takes, recorded)
        if problem:
            yield problem
    if not node.get("_partial_", False):
        supplied = _SUPPLIED_AT_BUILD.get(group, set())
        for name, p in params.items():
            required = p.default is inspect.Parameter.empty and p.kind in (
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                inspect.Parameter.KEYWORD_ONLY,
            )
            if required and name not in keys and name not in supplied:
                yield f"{group}.{name} is required by {target} but not set"


def hook_problems(hooks, recorded: list[str]) -> list[str]:
    """callbacks.hooks: each a `_target_` node of a HookBase subclass, its keys checked like a
    component's (hooks get the stage's record when the stage starts, not from the config); an
    argument that names a validation metric, against `recorded` (what the stages record)."""
    found = []
    for i, node in enumerate(hooks):
        key = f"callbacks.hooks[{i}]"
        if not isinstance(node, DictConfig):
            found.append(f"{key}={node!r}: must be a node with a _target_ (a HookBase subclass)")
            continue
        problems = list(component_problems(key, node, "hook", recorded))
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
        elif why := rule_of(hints.get(key)).problem(schedule[key]):
            found.append(f"optimizer.schedule.{key}={schedule[key]!r}: {why}")
    return found
