"""The Optuna sweeper's `sampler` and `custom_search_space`: data, checked before anything of
theirs is imported, called or built.

`hydra.sweeper.sampler` is a short form (`tpe`, `random`, `grid`) or a node naming a class of
`optuna.samplers` by `_target_` with that class's arguments, as in Hydra's official plugin:

    sampler:
      _target_: optuna.samplers.TPESampler
      multivariate: true
      seed: 123

The `_target_` must read `optuna.samplers.<Name>` where `<Name>` is a `BaseSampler` subclass
(`builtins.open`, `os.system` or `optuna.study.Study` are refused before anything is imported
from their modules); the arguments must be ones its constructor takes, plain data (a nested
`_target_` is not built). A node without `_target_` is the default sampler's (TPESampler's)
arguments: the official plugin's `hydra/sweeper/sampler: tpe` default with e.g. `seed: 123`.
`optuna.samplers.GridSampler` runs the same grid as `grid` (its `search_space` comes from
`params`). A sampler given no `seed` gets `hydra.sweeper.seed` when its class takes one.

`hydra.sweeper.custom_search_space` is a dotted path `module.function` to a function
`f(cfg, trial)` that suggests further (e.g. conditional) parameters on each trial. Input is data,
never code: the module must be a file of the sweep's own project - under the launch folder or
the folder that holds the app's config folder - found there without importing anything; a name of
the standard library, a module already imported from elsewhere, or an attribute that is not a
function defined in that module is refused.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sporeflow.core.errors import ConfigError

SHORT_FORMS = ("tpe", "random", "grid")
PREFIX = "optuna.samplers."
KEY = "hydra.sweeper.sampler"
SEARCH_KEY = "hydra.sweeper.custom_search_space"
# packages a sampler imports only when it first samples: checked before the sweep instead
NEEDS = {"CmaEsSampler": ("cmaes",), "GPSampler": ("torch", "scipy")}
RESERVED = ("_target_", "_partial_")  # `_partial_`: the official GridSamplerConfig's, ignored


# `hydra/sweeper/sampler=<name>`: the official plugin's names, each a node of its class's
# plain-data arguments at Optuna 5's defaults (so `hydra.sweeper.sampler.seed=123` needs no `+`)
GROUP: dict[str, dict[str, Any]] = {
    "tpe": {
        "_target_": f"{PREFIX}TPESampler",
        "seed": None,
        "n_startup_trials": 10,
        "n_ei_candidates": 24,
        "multivariate": None,
        "group": False,
        "constant_liar": True,
        "consider_endpoints": None,
        "consider_magic_clip": None,
        "prior_weight": None,
        "warn_independent_sampling": None,
    },
    "random": {"_target_": f"{PREFIX}RandomSampler", "seed": None},
    "grid": {"_target_": f"{PREFIX}GridSampler", "seed": None},
    "cmaes": {
        "_target_": f"{PREFIX}CmaEsSampler",
        "seed": None,
        "x0": None,
        "sigma0": None,
        "n_startup_trials": 1,
        "warn_independent_sampling": True,
        "consider_pruned_trials": False,
        "restart_strategy": None,
        "popsize": None,
        "inc_popsize": -1,
        "use_separable_cma": False,
        "with_margin": False,
        "lr_adapt": False,
    },
    "nsgaii": {
        "_target_": f"{PREFIX}NSGAIISampler",
        "seed": None,
        "population_size": 50,
        "mutation_prob": None,
        "crossover_prob": 0.9,
        "swapping_prob": 0.5,
    },
    "gp": {
        "_target_": f"{PREFIX}GPSampler",
        "seed": None,
        "n_startup_trials": 10,
        "deterministic_objective": False,
        "warn_independent_sampling": True,
    },
    "qmc": {
        "_target_": f"{PREFIX}QMCSampler",
        "seed": None,
        "qmc_type": "sobol",
        "scramble": False,
        "warn_asynchronous_seeding": True,
        "warn_independent_sampling": True,
    },
}


def sampler_classes() -> dict[str, type]:
    """The samplers a `_target_` may name: `optuna.samplers.<Name>` -> class."""
    import optuna.samplers

    found = {}
    for name in dir(optuna.samplers):
        value = getattr(optuna.samplers, name)
        if (
            not name.startswith("_")
            and isinstance(value, type)
            and issubclass(value, optuna.samplers.BaseSampler)
            and not inspect.isabstract(value)
        ):
            found[name] = value
    return found


def allowed() -> str:
    return f"{', '.join(SHORT_FORMS)}, or _target_: " + ", ".join(
        PREFIX + name for name in sampler_classes()
    )


@dataclass
class SamplerSpec:
    """A checked sampler: its class's name in optuna.samplers (None: a short form) and
    arguments."""

    short: str | None = None
    name: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)

    @property
    def grid(self) -> bool:
        return self.short == "grid" or self.name == "GridSampler"

    @property
    def label(self) -> str:
        return self.short or f"{PREFIX}{self.name}"

    def build(self, seed: int, n_startup_trials: int, offset: int = 0) -> Any:
        """The sampler (a grid's trials are enqueued: random draws fill anything else a
        custom_search_space asks), seeded with its own `seed` or else the sweeper's, plus
        `offset` (the trials a continued study holds: it draws new points)."""
        import optuna

        own = self.arguments.get("seed")
        seed = (own if own is not None else seed) + offset
        if self.short == "tpe":
            return optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup_trials)
        if self.short == "random" or self.grid:
            return optuna.samplers.RandomSampler(seed=seed)
        cls = sampler_classes()[str(self.name)]
        arguments = dict(self.arguments)
        if "seed" in inspect.signature(cls).parameters:
            arguments["seed"] = seed
        try:
            return cls(**arguments)
        except (TypeError, ValueError) as ex:
            raise ConfigError(f"{KEY}: {self.label}({_args(arguments)}) refused: {ex}") from ex


def _args(arguments: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in arguments.items())


def checked_sampler(value: Any) -> SamplerSpec:
    """`hydra.sweeper.sampler` -> a SamplerSpec, or a ConfigError naming the key and what is
    allowed. Imports nothing but optuna.samplers and builds nothing."""
    if isinstance(value, str):
        if value in SHORT_FORMS:
            return SamplerSpec(short=value)
        hint = f" (or the node hydra/sweeper/sampler={value})" if value in GROUP else ""
        raise ConfigError(f"{KEY}={value!r}: allowed are {allowed()}{hint}")
    if not isinstance(value, Mapping):
        raise ConfigError(f"{KEY}={value!r}: allowed are {allowed()}")
    node = dict(value)
    target = node.pop("_target_", f"{PREFIX}TPESampler")
    node.pop("_partial_", None)
    name = _sampler_name(target)
    _check_data(node)
    _check_packages(name, target)
    if name == "GridSampler":
        extra = sorted(set(node) - {"seed"})
        if extra:
            raise ConfigError(
                f"{KEY}.{extra[0]}: not taken by the grid (its points come from "
                "hydra.sweeper.params and the command line; it takes seed)"
            )
    else:
        _check_arguments(name, node)
    return SamplerSpec(name=name, arguments=node)


def _sampler_name(target: Any) -> str:
    """The class name a `_target_` gives, when it names a sampler class of optuna.samplers."""
    name = target[len(PREFIX) :] if isinstance(target, str) and target.startswith(PREFIX) else ""
    if name not in sampler_classes():
        raise ConfigError(
            f"{KEY}._target_={target!r}: not a sampler class of optuna.samplers; allowed are "
            f"{allowed()}"
        )
    return name


def _check_data(node: Mapping[str, Any]) -> None:
    """A sampler's arguments are data: no reserved key, no nested `_target_`."""
    for key, argument in node.items():
        if key.startswith("_") and key.endswith("_"):
            raise ConfigError(
                f"{KEY}.{key}: not taken (a sampler node takes {', '.join(RESERVED)} and its "
                "class's arguments)"
            )
        if _has_target(argument):
            raise ConfigError(
                f"{KEY}.{key}: a nested _target_ is not built (a sampler's arguments are data)"
            )


def _check_packages(name: str, target: Any) -> None:
    """The packages a sampler needs at its first draw, found before the sweep starts."""
    for package in NEEDS.get(name, ()):
        if importlib.util.find_spec(package) is None:
            raise ConfigError(
                f"{KEY}._target_={target!r}: {PREFIX}{name} needs the package {package}, "
                f"which is not installed (pip install {package}); allowed are {allowed()}"
            )


def _check_arguments(name: str, node: Mapping[str, Any]) -> None:
    """Every argument one the class takes, and every argument it requires given."""
    signature = inspect.signature(sampler_classes()[name])
    takes_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    for key in node:
        if key not in signature.parameters and not takes_any:
            names = ", ".join(p for p in signature.parameters if p != "self")
            raise ConfigError(
                f"{KEY}.{key}: {PREFIX}{name} takes no argument {key!r}; it takes {names}"
            )
    for key, value in node.items():
        if key in signature.parameters:
            problem = argument_problem(name, key, value, signature.parameters[key].annotation)
            if problem:
                raise ConfigError(problem)
    missing = [
        p.name
        for p in signature.parameters.values()
        if p.default is p.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and p.name not in node
    ]
    if missing:
        raise ConfigError(
            f"{KEY}: {PREFIX}{name} needs {', '.join(missing)}, which a config cannot give "
            f"(an object); allowed are {allowed()}"
        )


# what a config's value can be, by the words of an annotation: anything else is an object
_DATA_KINDS = {
    "None": "null",
    "bool": "true or false",
    "int": "a whole number",
    "float": "a number",
    "str": "a string",
    "dict": "a mapping",
    "Mapping": "a mapping",
    "list": "a list",
    "tuple": "a list",
    "Sequence": "a list",
    "Any": "any value",
}


def argument_problem(name: str, key: str, value: Any, annotation: Any) -> str | None:
    """Why `value` cannot be the argument `key` of optuna.samplers.<name>, read from its
    annotation's text (Optuna's are strings: `Callable[[int], int] | None`): a function or an
    object (`gamma=os.system` was a string its first draw called); None when it fits or the
    argument has no annotation."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    if annotation is inspect.Parameter.empty or not text:
        return None
    kinds = [a for a in map(_data_kind, _alternatives(text)) if a is not None]
    if any(_fits(value, kind) for kind in kinds):
        return None
    allowed = " or ".join(dict.fromkeys(_DATA_KINDS[k] for k in kinds)) or (
        "nothing a config can give (leave it unset)"
    )
    return (
        f"{KEY}.{key}={value!r}: {PREFIX}{name} takes {text} there, and a sampler's arguments "
        f"are data (never a name to import or call); allowed: {allowed}"
    )


def _alternatives(text: str) -> list[str]:
    """`a | b[c | d] | e` -> [a, b[c | d], e] (the top level's alternatives)."""
    found, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += (char == "[") - (char == "]")
        if char == "|" and depth == 0:
            found.append(text[start:i].strip())
            start = i + 1
    return [*found, text[start:].strip()]


def _data_kind(alternative: str) -> str | None:
    """The alternative's outer kind (a key of _DATA_KINDS) when every word of it is data
    (`dict[str, Any]`, `Sequence[Sequence[float]]`); None for a function or an object."""
    words = re.findall(r"[A-Za-z_][\w.]*", alternative)
    if not words or any(w.split(".")[-1] not in _DATA_KINDS for w in words):
        return None
    return words[0].split(".")[-1]


def _fits(value: Any, kind: str) -> bool:
    if kind == "Any":
        return True
    if kind == "None" or value is None:
        return kind == "None" and value is None
    if kind in ("int", "float") and isinstance(value, bool):
        return False
    types: dict[str, Any] = {
        "bool": bool,
        "int": int,
        "float": (int, float),
        "str": str,
        "dict": Mapping,
        "Mapping": Mapping,
    }
    if kind in types:
        return isinstance(value, types[kind])
    return isinstance(value, Sequence) and not isinstance(value, str)


def _has_target(value: Any) -> bool:
    if isinstance(value, Mapping):
        return "_target_" in value or any(_has_target(v) for v in value.values())
    if isinstance(value, Sequence) and not isinstance(value, str):
        return any(_has_target(v) for v in value)
    return False


# --- custom_search_space ---------------------------------------------------------------------


@dataclass
class FunctionPath:
    """A checked `custom_search_space`: the module's name and file, the function's name."""

    module: str
    file: Path
    root: Path
    function: str

    def load(self) -> Any:
        """Import the checked module (its root first on sys.path while it imports) and return
        the function, refusing anything that is not the checked file's function."""
        added = str(self.root) not in sys.path
        if added:
            sys.path.insert(0, str(self.root))
        try:
            module = importlib.import_module(self.module)
        finally:
            if added and str(self.root) in sys.path:
                sys.path.remove(str(self.root))
        where = Path(getattr(module, "__file__", "") or "").resolve()
        if where != self.file:
            raise ConfigError(
                f"{SEARCH_KEY}: module {self.module!r} was imported from {where}, not from the "
                f"sweep's own {self.file}"
            )
        function = getattr(module, self.function, None)
        if not inspect.isfunction(function) or function.__module__ != module.__name__:
            raise ConfigError(
                f"{SEARCH_KEY}={self.module}.{self.function}: not a function defined in {self.file}"
            )
        return function


def project_roots(launch_dir: Path, config_sources: Sequence[Mapping[str, Any]] = ()) -> list[Path]:
    """Where the sweep's own code lives: the launch folder and the folder that holds the app's
    primary config folder (a `file://` source of provider `main`, e.g. `conf/` beside train.py)."""
    roots = [Path(launch_dir).resolve()]
    for source in config_sources or ():
        if source.get("provider") == "main" and source.get("schema") == "file":
            folder = Path(str(source.get("path"))).resolve().parent
            if folder not in roots:
                roots.append(folder)
    return roots


def checked_search_space(value: Any, roots: Sequence[Path]) -> FunctionPath | None:
    """`hydra.sweeper.custom_search_space` -> the module file and function it names, found
    under `roots` without importing anything; None when unset; a ConfigError otherwise."""
    if value is None or value == "":
        return None
    rule = (
        "a dotted path module.function to a function of the sweep's own code (a module file "
        f"under {' or '.join(str(r) for r in roots)})"
    )
    if not isinstance(value, str) or "." not in value.strip(".") or value.startswith("."):
        raise ConfigError(f"{SEARCH_KEY}={value!r}: must be {rule}")
    *parts, function = value.split(".")
    if not all(parts) or not function.isidentifier():
        raise ConfigError(f"{SEARCH_KEY}={value!r}: must be {rule}")
    top = parts[0]
    if top in sys.builtin_module_names or top in getattr(sys, "stdlib_module_names", ()):
        raise ConfigError(
            f"{SEARCH_KEY}={value!r}: {top!r} is Python's own module, not the sweep's code; "
            f"must be {rule}"
        )
    for root in roots:
        file = _module_file(root, parts)
        if file is None:
            continue
        module = ".".join(parts)
        loaded = sys.modules.get(module)
        there = getattr(loaded, "__file__", None) if loaded is not None else None
        if loaded is not None and (not there or Path(there).resolve() != file):
            raise ConfigError(
                f"{SEARCH_KEY}={value!r}: {module!r} is already imported from {there or 'a built-in'}, "
                f"not from {file}; must be {rule}"
            )
        return FunctionPath(module, file, root, function)
    raise ConfigError(
        f"{SEARCH_KEY}={value!r}: no module file {'/'.join(parts)}.py; must be {rule}"
    )


def _module_file(root: Path, parts: Sequence[str]) -> Path | None:
    """`root/a/b.py` or `root/a/b/__init__.py` for parts [a, b], resolved and still under
    root (no link leads out); None if there is none."""
    root = root.resolve()
    folder = root.joinpath(*parts[:-1])
    for candidate in (folder / f"{parts[-1]}.py", folder / parts[-1] / "__init__.py"):
        if candidate.is_file():
            file = candidate.resolve()
            if file.is_relative_to(root):
                return file
    return None
