"""What the user reads when a command is refused: one line naming the key (or group option,
or file) and what is allowed, built from Hydra's and OmegaConf's own exceptions."""

from __future__ import annotations

import difflib
import re
import shlex
import sys
from pathlib import Path
from typing import TextIO

from sporeflow.config.schema import COMPONENT_GROUPS, EVAL_KEYS, allowed_keys, range_at
from sporeflow.config.unused import override_key
from sporeflow.config.validation import component_settings, resolution_problem
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


def refusal(ex: BaseException, argv: list[str] | None = None) -> str:
    """What a refused command prints (exit 2): every problem of its overrides, one line each -
    Hydra stops composing at the first, so the others are found by composing again without
    it (`other_problems`)."""
    argv = sys.argv if argv is None else argv
    kind = "Data error" if isinstance(ex, DataError) else "Config error"
    lines = [describe(ex, argv)]
    if not isinstance(ex, (ConfigError, DataError)):
        lines += [line for line in other_problems(ex, argv) if line not in lines]
    script = Path(argv[0]).name if argv and argv[0].endswith(".py") else "train.py"
    return f"{kind}: " + "\n".join(lines) + f"  (python {script} --help lists groups and options)"


def _culprit(ex: BaseException, overrides: list[str]) -> str | None:
    """The override a composition error is about (by the key or group option it names)."""
    cause = ex.__cause__ if ex.__cause__ is not None else ex
    text = f"{ex} {cause}"
    named = [str(getattr(cause, "full_key", None) or getattr(ex, "full_key", None) or "")]
    named += re.findall(r"(?:override|argument) '([^'=]+)", text)
    named += [g for g, _ in re.findall(r"Could not find '([^']+)/([^']+)'", text)]
    for key in filter(None, named):  # the override of that very key before a group's
        exact = [o for o in overrides if override_key(o) == key]
        within = [o for o in overrides if key.startswith(override_key(o) + ".")]
        if exact or within:
            return (exact or within)[0]
    return None


def _compose(script: str, overrides: list[str]):
    """The run config `script` (train.py or eval.py) composes from these overrides."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    app = "eval" if Path(script).stem == "eval" else "train"
    GlobalHydra.instance().clear()
    try:
        conf = Path(script).resolve().parent / "conf"
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            composed = compose(app, overrides=overrides)
    finally:
        GlobalHydra.instance().clear()
    if app == "train":
        return composed
    plain = OmegaConf.to_container(composed)
    for key in EVAL_KEYS:
        plain.pop(key, None)
    return OmegaConf.create(plain)


def other_problems(ex: BaseException, argv: list[str]) -> list[str]:
    """The problems of the overrides after the one `ex` is about: compose without each bad
    override in turn, then validate what composes (types, ranges, unknown keys, relations)."""
    from sporeflow.config.validation import validate

    overrides = [a for a in argv[1:] if "=" in a and not a.startswith(("-", "hydra."))]
    if any(a in ("-m", "--multirun") for a in argv[1:]):  # a job's values are its own, not these
        overrides = [a for a in overrides if not _sweeps(a)]
    bad = _culprit(ex, overrides)
    if bad is None or not argv:
        return []
    rest, found = [o for o in overrides if o != bad], []
    for _ in range(len(overrides)):
        try:
            validate(_compose(argv[0], rest))
        except ConfigError as invalid:
            found += str(invalid).splitlines()
        except usage_errors() as again:
            found.append(describe(again, [argv[0], *rest]))
            culprit = _culprit(again, rest)
            if culprit is not None:
                rest.remove(culprit)
                continue
        except Exception:  # noqa: BLE001 - only more of what is wrong: the first is known
            pass
        break
    return found


def _sweeps(override: str) -> bool:
    """Whether a command-line override sweeps several values (`a=1,2`, `a=range(3)`)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_overrides([override])[0].is_sweep_override()
    except Exception:  # noqa: BLE001 - an override Hydra cannot parse is not a sweep
        return False


def _component_keys(group: str, argv: list[str]) -> list[str]:
    """The settings of the component `group` would build with this command's other overrides
    (composed again from the entry script's conf/ without the override that failed)."""
    if group not in COMPONENT_GROUPS or not argv:
        return []
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    # the group choices alone decide which component it is (other overrides may be bad too)
    keep = [
        a for a in argv[1:] if "=" in a and "." not in override_key(a) and not a.startswith("-")
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
    from hydra.errors import OverrideParseException
    from omegaconf.errors import InterpolationResolutionError

    cause = ex.__cause__ if ex.__cause__ is not None else ex
    argv = sys.argv if argv is None else argv
    if isinstance(cause, InterpolationResolutionError):
        return resolution_problem(cause, [a for a in argv[1:] if "=" in a])
    if isinstance(cause, OverrideParseException):
        return unreadable_override(cause.override, cause.message)
    text = str(ex).split("\nConfig search path:")[0].strip()
    full_key = str(getattr(cause, "full_key", None) or getattr(ex, "full_key", None) or "")
    missing = re.search(r"Could not find '([^']+)/([^']+)'", text)
    if missing:
        group, option = missing.groups()
        options = re.findall(r"^\t(\S+)$", text, re.M)
        return f"{group}={option}: no such option; available: {', '.join(options) or 'none'}"
    if full_key and re.search(r"Key '[^']+' (is )?not in", str(cause)):
        parent = full_key.rpartition(".")[0]
        allowed = allowed_keys(parent) or _component_keys(parent, argv)
        where = parent or "the top level"
        if parent in COMPONENT_GROUPS and full_key.rpartition(".")[2] in allowed:
            return (
                f"{full_key}: a setting the {parent} takes but its group file does not list; "
                f"add it with +{full_key}=<value>"
            )
        close = difflib.get_close_matches(full_key.rpartition(".")[2], allowed, n=1, cutoff=0.75)
        meant = f"; did you mean {(parent + '.') if parent else ''}{close[0]}?" if close else ""
        return f"{full_key}: no such key{meant}" + (
            f"; allowed under {where}: {', '.join(allowed)}" if allowed else ""
        )
    converted = re.search(r"Value '(.*)' of type '\w+' could not be converted to (\w+)", str(cause))
    if full_key and converted:
        within = range_at(full_key)  # `boost.rho=0.7x`: what a number there must be, too
        return f"{full_key}={converted.group(1)!r}: must be {converted.group(2).lower()}" + (
            f" {within}" if within else ""
        )
    enum = re.search(r"Invalid value '(.*)', expected one of \[(.*)\]", str(cause))
    if full_key and enum:
        return f"{full_key}={enum.group(1)!r}: allowed: {enum.group(2)}"
    ambiguous = re.search(r"Ambiguous value for argument '([^']+)'", text)
    if ambiguous:
        override = ambiguous.group(1)
        key, values = override.split("=", 1)
        return (
            f"{override}: several values run a sweep, which needs -m "
            f"({sweep_command(argv)}); a list is {key}=[{values}]"
        )
    first = next((line for line in text.splitlines() if line.strip()), text)
    return " ".join(first.split())


# what Hydra's override grammar takes in a value left unquoted, besides letters and digits
_UNQUOTED = "_-+./$%*@?|\\:"


def unreadable_override(override: str, message: str) -> str:
    """An override Hydra's grammar cannot read (its message names an ANTLR exception and a
    caret), said in words: the override, what stopped the reading and how to write it."""
    lexer = re.match(r"LexerNoViableAltException: .*\n( *)\^", message)
    key, equals, value = override.partition("=")
    if lexer:
        at = len(lexer.group(1)) - len("LexerNoViableAltException: ")
        char = override[at] if 0 <= at < len(override) else override[-1:]
        if not equals or at < len(key):
            return (
                f"{override}: {char!r} cannot be part of a key; a key is names joined by dots "
                "(dataset.image_size), written key=value"
            )
        if char in "'\"":
            return f"{override}: the quote {char} is never closed; write {key}='<value>'"
        null = " (null is written null)" if value == "~" else ""
        return (
            f"{override}: Hydra's override grammar does not take {char!r} in a value left "
            f"unquoted{null}; quote the value, {key}='{value}' (in a shell: \"{key}='{value}'\"), "
            f"or keep to letters, digits and {_UNQUOTED}"
        )
    if not equals or "missing EQUAL" in message:
        return f"{override}: an override is key=value (+key=value adds a key, ~key deletes one)"
    found = re.search(r"(?:extraneous|no viable alternative at) input '([^']*)'", message)
    where = f" at {found.group(1)!r}" if found else ""
    return (
        f"{override}: Hydra's override grammar cannot read this value{where}: close every "
        f"bracket ([a,b], {{k: v}}), keep '=', '(' and ')' for sweeps and functions, or quote "
        f"the value: {key}='{value}'"
    )


def sweep_command(argv: list[str]) -> str:
    """The user's whole command again, with -m: a hint that dropped the other overrides would
    sweep another experiment (issue 51)."""
    script = Path(argv[0]).name if argv else "train.py"
    args = [shlex.quote(a) for a in argv[1:] if a not in ("-m", "--multirun")]
    return " ".join(["python", script, "-m", *args])


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
