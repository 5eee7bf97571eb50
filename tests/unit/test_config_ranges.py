"""Every option the project ships has its meaningful range checked before any work: the
framework's own nodes (config/schema.py) and the arguments of the models, data sets,
optimizers and losses in conf/. Each case below is generated from the annotations themselves,
so an option added with a range is tested without a new line here. Real Hydra composition
against the real conf/."""

from __future__ import annotations

import inspect
import typing
from dataclasses import fields, is_dataclass

import pytest
import yaml

from helpers.train import CONF
from sporeflow.config.schema import RunConfig
from sporeflow.config.validation import validate
from sporeflow.core.errors import ConfigError
from sporeflow.core.ranges import Range, range_of


def outside(rule: Range, kind: type) -> float:
    """A value just outside `rule` (below it where it has a lower bound)."""
    if rule.low is not None:
        return rule.low if rule.low_open else rule.low - 1
    assert rule.high is not None
    return rule.high if rule.high_open else rule.high + 1


def annotated_type(hint):
    """The type a range is written on: `Annotated[float, ...]`, also inside `Optional[...]`."""
    for candidate in (hint, *typing.get_args(hint)):
        if typing.get_origin(candidate) is typing.Annotated:
            return typing.get_args(candidate)[0]
    raise AssertionError(f"no Annotated type in {hint}")


def schema_ranges(node=RunConfig, path=""):
    """(dotted key, Range, type) of every ranged field of the schema."""
    hints = typing.get_type_hints(node, include_extras=True)
    for f in fields(node):
        hint = hints[f.name]
        rule = range_of(hint)
        if rule is not None:
            yield f"{path}{f.name}", rule, annotated_type(hint)
        inner = typing.get_type_hints(node)[f.name]
        if is_dataclass(inner):
            yield from schema_ranges(inner, f"{path}{f.name}.")


SCHEMA_CASES = list(schema_ranges())
# overrides a range case needs to be reachable (the node it belongs to switched on)
CONTEXT = {"boost.": ["boost=dim_reduce"]}


def context_for(key: str) -> list[str]:
    return next((extra for prefix, extra in CONTEXT.items() if key.startswith(prefix)), [])


def test_the_schema_declares_ranges():
    keys = {key for key, _, _ in SCHEMA_CASES}
    assert {"epochs", "boost.rho", "boost.sigma", "train.ema.decay", "parallel.workers"} <= keys


@pytest.mark.parametrize("key, rule, kind", SCHEMA_CASES, ids=[c[0] for c in SCHEMA_CASES])
def test_a_framework_option_outside_its_range_is_named(compose_cfg, key, rule, kind):
    bad = kind(outside(rule, kind))
    with pytest.raises(ConfigError) as caught:
        validate(compose_cfg([*context_for(key), f"{key}={bad}"]))
    lines = str(caught.value).splitlines()
    assert any(line.startswith(f"{key}={bad!r}: must be {rule}") for line in lines), lines


def component_cases():
    """(group, option, key, Range, type) for every ranged argument a conf/ component sets."""
    import importlib

    for group in ("model", "dataset", "optimizer", "loss"):
        for path in sorted((CONF / group).glob("*.yaml")):
            node = yaml.safe_load(path.read_text())
            module, _, attr = node["_target_"].rpartition(".")
            target = getattr(importlib.import_module(module), attr)
            fn = target.__init__ if inspect.isclass(target) else target
            hints = typing.get_type_hints(fn, include_extras=True)
            for key in node:
                rule = range_of(hints.get(key))
                if rule is not None:
                    kind = typing.get_args(hints[key])[0]
                    yield group, path.stem, key, rule, kind


COMPONENT_CASES = list(component_cases())


def test_shipped_components_declare_ranges():
    ranged = {(g, k) for g, _, k, _, _ in COMPONENT_CASES}
    assert {
        ("optimizer", "lr"),
        ("optimizer", "weight_decay"),
        ("optimizer", "momentum"),
        ("dataset", "image_size"),
        ("dataset", "batch_size"),
        ("model", "num_classes"),
    } <= ranged


@pytest.mark.parametrize(
    "group, option, key, rule, kind",
    COMPONENT_CASES,
    ids=[f"{g}={o}:{k}" for g, o, k, _, _ in COMPONENT_CASES],
)
def test_a_component_argument_outside_its_range_is_named(
    compose_cfg, group, option, key, rule, kind
):
    bad = kind(outside(rule, kind))
    with pytest.raises(ConfigError) as caught:
        validate(compose_cfg([f"{group}={option}", f"{group}.{key}={bad}"]))
    lines = str(caught.value).splitlines()
    assert f"{group}.{key}={bad!r}: must be {rule}" in lines, lines


def test_every_bad_key_is_reported_at_once(compose_cfg):
    """The issue's bad inputs together: one line each, nothing else, in one error."""
    with pytest.raises(ConfigError) as caught:
        validate(
            compose_cfg(
                [
                    "optimizer.lr=-0.1",
                    "optimizer.weight_decay=-1",
                    "optimizer.momentum=1.5",
                    "dataset.image_size=-3",
                    "boost=dim_reduce",
                    "boost.sigma=1.5",
                    "boost.gamma=-0.1",
                ]
            )
        )
    assert str(caught.value).splitlines() == [
        "dataset.image_size=-3: must be >= 1",
        "optimizer.lr=-0.1: must be > 0",
        "optimizer.momentum=1.5: must be in [0, 1)",
        "optimizer.weight_decay=-1: must be >= 0",
        "boost.gamma=-0.1: must be in [0, 1)",
        "boost.sigma=1.5: must be in (0, 1)",
    ]


def test_values_inside_their_ranges_pass(compose_cfg):
    cfg = validate(compose_cfg(["optimizer.momentum=0", "boost=dim_reduce", "boost.gamma=0"]))
    assert cfg.optimizer.momentum == 0 and cfg.boost.gamma == 0


def test_relations_are_checked_once_values_are_in_range(compose_cfg):
    with pytest.raises(ConfigError, match="parallel.device_num=4 must equal parallel.workers=2"):
        validate(compose_cfg(["parallel=data2", "parallel.device_num=4"]))


# keys a group file may set to the schema's default: the option's identity
IDENTITY = {"name", "mode", "workers", "device_num"}


def defaults_repeated(data: dict, node, path: str) -> list[str]:
    repeated = []
    for f in fields(node):
        if f.name not in data or f.name in IDENTITY:
            continue
        value = data[f.name]
        default = getattr(node(), f.name)
        if is_dataclass(default) and isinstance(value, dict):
            repeated += defaults_repeated(value, type(default), f"{path}{f.name}.")
        elif getattr(default, "value", default) == value:
            repeated.append(f"{path}{f.name}")
    return repeated


@pytest.mark.parametrize("group", ["parallel", "boost", "callbacks"])
def test_group_files_do_not_repeat_the_schema_defaults(group):
    """A default is written once, in config/schema.py: a group file sets what its option changes."""
    node = typing.get_type_hints(RunConfig)[group]
    for path in sorted((CONF / group).glob("*.yaml")):
        data = yaml.safe_load(path.read_text()) or {}
        assert not defaults_repeated(data, node, f"{group}."), (
            f"{path.name} repeats schema defaults"
        )
