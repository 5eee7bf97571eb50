"""What a component's `_target_` may name: a class of its kind (a network or loss Cell, an
ImageDataset, an optimizer, a hook), or a function annotated to return one. Checked after the
target is imported and before anything is called, for every config: the command line's, a
run dir's `.hydra/config.yaml` (eval.py, `sporeflow predict`) and a packaged model's, so a
config is data that builds components and never a way to call something else (`os.system`,
`builtins.open`). Hydra's own instantiate has only a blocklist; this is an allow-list by kind.
"""

from __future__ import annotations

import importlib
import inspect
import typing
from typing import Any

from sporeflow.core.errors import ConfigError

# group -> (module, class) whose subclasses the group's target must build; imported when asked
KINDS = {
    "model": ("mindspore.nn", "Cell"),
    "loss": ("mindspore.nn", "Cell"),
    "optimizer": ("mindspore.nn", "Optimizer"),
    "dataset": ("sporeflow.data.base", "ImageDataset"),
    "hook": ("sporeflow.engine.hooks", "HookBase"),
}


def import_target(path: str, key: str) -> Any:
    """The object `path` names, or ConfigError naming `key`."""
    module_name, _, attr = str(path).rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as ex:
        raise ConfigError(f"{key}._target_: cannot import {path!r} ({ex})") from ex


def kind_base(kind: str) -> type:
    module, name = KINDS[kind]
    return getattr(importlib.import_module(module), name)


def built_class(target: Any) -> type | None:
    """The class a target builds: itself, or a function's annotated return type (None when it
    says none a check could read)."""
    if inspect.isclass(target):
        return target
    if not callable(target):
        return None
    try:
        returned = typing.get_type_hints(target).get("return")
    except Exception:  # noqa: BLE001 - unresolvable annotations say nothing checkable
        return None
    return returned if inspect.isclass(returned) else None


def hook_place_problem(key: str, hook: type) -> str | None:
    """Why a hook class's `place` (after which of a stage's own phases it runs) is not one of
    engine.hooks.PLACES; None when it is."""
    places = importlib.import_module(KINDS["hook"][0]).PLACES
    place = getattr(hook, "place", None)
    if place in places:
        return None
    return (
        f"{key}._target_={hook.__module__}.{hook.__qualname__}: place={place!r}; allowed: "
        f"{', '.join(places)} (the stage's phase it runs after)"
    )


def kind_problem(kind: str, key: str, path: str, target: Any) -> str | None:
    """Why `target` (imported from `path`, set at `key`) may not build a `kind`; None if it may."""
    base = kind_base(kind)
    allowed = f"a subclass of {'.'.join(KINDS[kind])}"
    if kind != "hook":
        allowed += " or a function annotated to return one"
    built = built_class(target)
    a_kind = f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"
    if built is None or not issubclass(built, base) or (kind == "hook" and built is not target):
        return f"{key}._target_={path}: not {a_kind} (nothing is called); allowed: {allowed}"
    return None


def checked_target(kind: str, key: str, path: str) -> Any:
    """The target `path` names once it is of `kind`; ConfigError (one line) otherwise."""
    target = import_target(path, key)
    problem = kind_problem(kind, key, path, target)
    if problem:
        raise ConfigError(problem)
    return target
