"""What a component's `_target_` may name: a class of its kind (a network or loss Cell, an
ImageDataset, an optimizer, a hook), or a function annotated to return one. Checked after the
target is imported and before anything is called, for every config: the command line's, a
run dir's `.hydra/config.yaml` (eval.py, `sporeflow predict`) and a packaged model's, so a
config is data that builds components and never a way to call something else (`os.system`,
`builtins.open`). Hydra's own instantiate has only a blocklist; this is an allow-list by kind.

Before that, the name alone decides whether its module may be imported at all (importing runs
a module: `this` prints, `antigravity` opens a browser): a module not yet imported is imported
only when importlib.util.find_spec (which runs nothing: a top-level name, or a module whose
package is already imported) finds it outside Python's standard library - in an installed
package (site-packages, an editable install) or the user's own modules (the launch folder,
PYTHONPATH) - and it is no package's `__main__` (a script). Python's own modules already
imported (`os`, `builtins`) are looked up, and refused by kind. A run dir's stored config is
checked whole this way when it is read (`stored_config_problem`), naming the file.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import site
import sys
import sysconfig
import typing
from collections.abc import Iterator
from pathlib import Path
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


IMPORTABLE = (
    "a class or function of an installed package or of your own modules (the launch folder, "
    "PYTHONPATH), not of Python's standard library"
)


def import_target(path: str, key: str) -> Any:
    """The object `path` names, or ConfigError naming `key` (`name_problem`: before anything is
    imported)."""
    problem = name_problem(key, path)
    if problem:
        raise ConfigError(problem)
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


def name_problem(key: str, path: str, file: Path | None = None) -> str | None:
    """Why `path` (the `_target_` at `key`, of the stored config `file` if any) may not have its
    module imported (module doc), decided before anything is imported; None when it may (a name
    that is no dotted path, or names nothing, is left to the import to say)."""
    why = _import_refusal(str(path))
    if why is None:
        return None
    where = f" in {file}" if file is not None else ""
    return f"{key + '.' if key else ''}_target_={path}{where}: {why} (nothing imported); allowed: {IMPORTABLE}"


def _import_refusal(path: str) -> str | None:
    """Why importing the module of `path` would run what no config may run: its first module
    not yet imported is a `__main__`, or Python's own (`_is_pythons_own`)."""
    parts = path.split(".")[:-1]
    if not parts or not all(p.isidentifier() for p in parts):
        return None
    for depth in range(1, len(parts) + 1):
        module = ".".join(parts[:depth])
        if module in sys.modules:
            continue
        if "__main__" in parts[depth - 1 :]:
            return f"{'.'.join(parts)} is a script (a __main__ module runs when imported)"
        if _is_pythons_own(module):
            return f"{module!r} is a module of Python's standard library"
        return None
    return None


def _is_pythons_own(module: str) -> bool:
    """Whether `module` (a top-level name, or one whose package is imported: found without
    running anything) is built in, frozen, or a file of the standard library's folders that
    is not under site-packages."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return False  # the import says what is wrong
    if spec is None:
        return False
    if spec.origin in ("built-in", "frozen"):
        return True
    where = spec.origin or next(iter(spec.submodule_search_locations or ()), None)
    if where is None:
        return False
    where = str(Path(where).resolve())
    return _under(where, _folders("stdlib", "platstdlib")) and not _under(
        where, _folders("purelib", "platlib", site=True)
    )


def _folders(*names: str, site: bool = False) -> list[str]:
    """sysconfig's folders `names` (with site's package folders: `site`), resolved."""
    found = [sysconfig.get_paths()[n] for n in names]
    if site:
        found += [*_site_packages(), _user_site()]
    return [str(Path(f).resolve()) for f in found if f]


def _site_packages() -> list[str]:
    getter = getattr(site, "getsitepackages", None)  # absent in an old virtualenv's site
    return list(getter()) if getter else []


def _user_site() -> str:
    return site.getusersitepackages() or ""


def _under(path: str, folders: list[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def stored_config_problem(config: Any, file: Path) -> str | None:
    """The first `_target_` of a stored config (`file`: a run dir's `.hydra/config.yaml`, a
    fetched run's config) whose module may not be imported (`name_problem`), naming its key and
    the file; None when every one may."""
    for key, path in _targets(config, ""):
        problem = name_problem(key, path, file)
        if problem:
            return problem
    return None


def _targets(node: Any, key: str) -> Iterator[tuple[str, str]]:
    """(key, `_target_`) of every node under `node` (a plain container), `key` its path."""
    if isinstance(node, dict):
        target = node.get("_target_")
        if isinstance(target, str):
            yield key, target
        for k, value in node.items():
            yield from _targets(value, f"{key}.{k}" if key else str(k))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _targets(value, f"{key}[{i}]")
