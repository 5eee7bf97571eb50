"""The manual's option reference, generated so that it cannot disagree with the code:

- every field of the schema (config/schema.py): its key, type, default, allowed values (its
  `Annotated` range or its enum) and its meaning, the docstring under the field;
- every option of every config group in conf/: what its file says it is (the first sentence of
  its header comment) and the keys it sets.

The documentation build puts `schema_markdown()` and `groups_markdown(conf)` where a page says
`<!-- reference: schema -->` / `<!-- reference: groups -->` (docs/hooks.py).
"""

from __future__ import annotations

import ast
import inspect
import itertools
import re
import textwrap
import typing
from collections.abc import Iterator
from dataclasses import MISSING, Field, dataclass, fields, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import yaml

from sporeflow.config.schema import RunConfig
from sporeflow.core.ranges import Range

GROUP_ORDER = (
    "model", "dataset", "optimizer", "loss", "parallel", "boost", "callbacks",
    "experiment", "hparams_search", "cluster", "debug",
)  # fmt: skip


@dataclass(frozen=True)
class Option:
    key: str
    type: str
    default: str
    allowed: str
    meaning: str


@dataclass(frozen=True)
class Node:
    """A dataclass node of the schema at its dotted path ("" = the root) and its own options."""

    path: str
    doc: str
    options: list[Option]


def field_meanings(cls: type) -> dict[str, str]:
    """The docstring under each field of dataclass `cls` (an attribute docstring: the string
    literal on the line after the field, as Python's tools and mkdocstrings read it)."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body  # type: ignore[attr-defined]
    meanings = {}
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            meanings[node.target.id] = " ".join(after.value.value.split())
    return meanings


def nodes(cls: type = RunConfig, path: str = "") -> Iterator[Node]:
    """Every dataclass node under `cls`, depth first, each with the options that are its own."""
    hints = typing.get_type_hints(cls, include_extras=True)
    meanings = field_meanings(cls)
    own, below = [], []
    for f in fields(cls):
        if f.name.startswith("_") or f.name == "defaults":
            continue  # `_target_`, a defaults list: how Hydra builds the node, not an option
        key = f"{path}.{f.name}" if path else f.name
        if is_dataclass(hints[f.name]):
            below.append((hints[f.name], key))
            continue
        hint = hints[f.name]
        own.append(Option(key, _type(hint), _default(f), _allowed(hint), meanings.get(f.name, "")))
    yield Node(path, " ".join((cls.__doc__ or "").split()), own)
    for sub, key in below:
        yield from nodes(sub, key)


def options() -> list[Option]:
    return [o for n in nodes() for o in n.options]


def _unwrap(hint: Any) -> tuple[Any, Range | None, bool]:
    """(the bare type, its range, whether null is allowed) of an annotation."""
    optional = False
    if typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional, hint = True, args[0]
    rng = None
    if typing.get_origin(hint) is typing.Annotated:
        hint, *extra = typing.get_args(hint)
        rng = next((e for e in extra if isinstance(e, Range)), None)
    return hint, rng, optional


def _type(hint: Any) -> str:
    bare, _, optional = _unwrap(hint)
    origin = typing.get_origin(bare)
    if origin in (list, list):
        (item,) = typing.get_args(bare) or (Any,)
        name = "list" if item is Any else f"list of {_type(item)}"
    elif origin in (dict, dict) or bare is dict:
        name = "mapping"
    elif isinstance(bare, type) and issubclass(bare, Enum):
        name = "choice"
    else:
        name = getattr(bare, "__name__", str(bare)).replace("Any", "any")
    return f"{name} or null" if optional else name


def _allowed(hint: Any) -> str:
    bare, rng, _ = _unwrap(hint)
    if typing.get_origin(bare) in (list, list):
        bare = (typing.get_args(bare) or (Any,))[0]
    if isinstance(bare, type) and issubclass(bare, Enum):
        return ", ".join(m.value for m in bare)
    return str(rng) if rng is not None else ""


def _default(f: Field) -> str:
    if f.default_factory is not MISSING:
        return _yaml_value(f.default_factory())
    return _yaml_value(f.default)


def _yaml_value(value: Any) -> str:
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, list):
        return "[" + ", ".join(_yaml_value(v) for v in value) + "]"
    if isinstance(value, dict) and not value:
        return "{}"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if value == "":
        return '""'
    return str(value)


def _cell(text: str) -> str:
    """Text safe in a table cell: a pipe would end the cell, and brackets outside `code` would
    read as a link."""
    parts = text.replace("|", "\\|").split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("[", "\\[").replace("]", "\\]")
    return "`".join(parts)


def schema_markdown(root: type = RunConfig, path: str = "", depth: str = "###") -> str:
    """A table per node of the dataclass `root` (the run schema unless told): key, type,
    default, allowed, meaning; `path` is the dotted key `root` lives at."""
    out = []
    for node in nodes(root, path):
        if not node.options:
            continue
        title = f"`{node.path}`" if node.path else "Run-level keys"
        out += [f"{depth} {title}", "", node.doc, ""]
        out += ["| key | type | default | allowed | meaning |", "| --- | --- | --- | --- | --- |"]
        out += [
            f"| `{o.key}` | {o.type} | {_cell(f'`{o.default}`')} | {_cell(o.allowed)} | {_cell(o.meaning)} |"
            for o in node.options
        ]
        out.append("")
    return "\n".join(out)


# -- config groups ---------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupOption:
    group: str
    name: str
    summary: str
    sets: list[str]


def header_summary(text: str) -> str:
    """The first sentence of a yaml file's leading comment (its `@package` line skipped): up
    to a line that ends in ':' (an example follows) or a full stop before a capital letter."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        if "@package" in line:
            continue
        lines.append(line.lstrip("#").strip())
        if lines[-1].endswith(":"):
            break
    paragraph = " ".join(lines).rstrip(":")
    match = re.match(r"(.+?[.!?])(\s+(?=[A-Z`])|$)", paragraph)
    return (match.group(1) if match else paragraph).strip()


def _flatten(node: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _flatten(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield f"{prefix}={_yaml_value(node)}"


def _sets(data: dict, group: str, global_package: bool) -> list[str]:
    """What an option's file sets, as overrides would say it."""
    picks = []
    for entry in data.pop("defaults", None) or []:
        if isinstance(entry, dict):
            for key, value in entry.items():
                picks.append(f"{str(key).removeprefix('override ').lstrip('/')}={value}")
    prefix = "" if global_package else group
    return picks + list(_flatten(data, prefix)) if data else picks


def group_options(conf: Path) -> list[GroupOption]:
    found = []
    groups = sorted(
        (d for d in conf.iterdir() if d.is_dir() and d.name != "hydra"),
        key=lambda d: (GROUP_ORDER.index(d.name) if d.name in GROUP_ORDER else 99, d.name),
    )
    for group in groups:
        for file in sorted(group.glob("*.yaml")):
            text = file.read_text()
            data = yaml.safe_load(text) or {}
            found.append(
                GroupOption(
                    group.name,
                    file.stem,
                    header_summary(text),
                    _sets(data, group.name, "@package _global_" in text),
                )
            )
    return found


def groups_markdown(conf: Path) -> str:
    """A table per config group: each option, what it is, and the keys its file sets."""
    out, current = [], None
    for opt in group_options(conf):
        if opt.group != current:
            current = opt.group
            out += [
                "",
                f"### `{current}`",
                "",
                "| option | what it is | sets |",
                "| --- | --- | --- |",
            ]
        sets = "<br>".join(f"`{_cell(s)}`" for s in opt.sets) or "(the schema's defaults)"
        out.append(f"| `{opt.name}` | {_cell(opt.summary)} | {sets} |")
    return "\n".join(out).lstrip() + "\n"
