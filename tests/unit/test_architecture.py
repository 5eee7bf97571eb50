"""The layer map of docs/architecture.md, enforced: every folder of the package is one layer,
nothing but `__init__.py` sits at the package root, and each module imports only from the
layers its own may import (and no third-party library its layer bans). The Hydra plugins in
src/hydra_plugins are a layer of their own above the entry. The page itself is kept true: its
tree names every module and no module that is gone, and its lists of the hooks' exceptions are
the classes' own."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "sporeflow"
PLUGINS = SRC / "hydra_plugins"
DOC = SRC.parent / "docs" / "architecture.md"

# top-level folder of the package -> its layer
LAYER_OF_FOLDER = {
    "entry": "entry",
    "launch": "launch",
    "job": "job",
    "stage": "stage",
    "serving": "serving",
    "report": "report",
    "runtime": "runtime",
    "config": "config",
    "engine": "engine",
    "dim_reduce": "dim_reduce",
    "data": "library",
    "models": "library",
    "nn": "library",
    "tracking": "tracking",
    "storage": "storage",
    "core": "core",
}
# what the job and the stage layers may import below themselves (the stage never the job)
BELOW_STAGE = {
    "serving",
    "report",
    "runtime",
    "config",
    "engine",
    "dim_reduce",
    "library",
    "tracking",
    "storage",
    "core",
}
# layer -> the layers it may import (its own included); from the top down
MAY_IMPORT = {
    "root": {"entry", "core"},  # `sporeflow.run` ...: the Python API, re-exported lazily
    "plugins": {"entry", "launch", "config", "storage", "core"},
    "entry": {"entry", "launch", "job", "stage", *BELOW_STAGE},
    "launch": {"launch", "config", "storage", "core"},
    "job": {"job", "stage", *BELOW_STAGE},
    "stage": {"stage", *BELOW_STAGE},
    "report": {"report", "config", "tracking", "core"},
    "serving": {"serving", "config", "library", "storage", "core"},
    "runtime": {"runtime", "config", "core"},
    "config": {"config", "library", "storage", "core"},
    "engine": {"engine", "storage", "core"},
    "dim_reduce": {"dim_reduce", "engine", "storage", "core"},  # its hook is a HookBase
    "library": {"library", "storage", "core"},
    "tracking": {"tracking", "storage", "core"},
    "storage": {"storage", "core"},
    "core": {"core"},
}
# layer -> third-party top-level packages it must not import
BANNED = {
    "engine": {"hydra", "omegaconf", "mlflow"},
    "dim_reduce": {"hydra", "omegaconf", "mlflow"},
    "library": {"hydra", "omegaconf", "mlflow"},
    "storage": {"hydra", "omegaconf", "mlflow"},
    "core": {"hydra", "omegaconf", "mlflow", "mindspore"},
    "tracking": {"hydra", "omegaconf", "mindspore"},
    "report": {"hydra", "mindspore"},
    "runtime": {"hydra", "mlflow"},
    "launch": {"mlflow", "mindspore"},
    "job": {"hydra"},
    "stage": {"hydra"},
    "serving": {"mlflow"},  # MLflow imports the loader, not the other way round
}


def layer_of(path: Path) -> str:
    """The layer of a source file, from the folder it sits in (its first folder below src/)."""
    parts = path.relative_to(SRC).parts
    if parts[0] == "hydra_plugins":
        return "plugins"
    if len(parts) == 2:  # at the package root: only __init__.py belongs there
        return "root"
    return LAYER_OF_FOLDER.get(parts[1], "unplaced")


def layer_of_module(dotted: str) -> str | None:
    """The layer of an imported sporeflow module ('sporeflow.storage.files'); None for the root."""
    parts = dotted.split(".")
    return LAYER_OF_FOLDER.get(parts[1], "unplaced") if len(parts) > 1 else None


def imports_of(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "sporeflow":  # from sporeflow import x: x is a folder
                found += [f"sporeflow.{alias.name}" for alias in node.names]
            else:
                found.append(node.module)
    return found


def wrong_imports(path: Path) -> list[str]:
    """What `path` imports that its layer may not (sporeflow layers and banned libraries)."""
    layer = layer_of(path)
    allowed = MAY_IMPORT.get(layer, set())
    wrong = []
    for imported in imports_of(path):
        top = imported.split(".")[0]
        if top == "sporeflow":
            target = layer_of_module(imported)
            if target is not None and target not in allowed:
                wrong.append(f"{imported} ({target})")
        elif top == "hydra_plugins" and layer != "plugins":
            wrong.append(f"{imported} (plugins)")
        elif top in BANNED.get(layer, ()):
            wrong.append(imported)
    return wrong


SOURCES = sorted([*PACKAGE.rglob("*.py"), *PLUGINS.rglob("*.py")])


def test_only_init_sits_at_the_package_root():
    loose = [p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"]
    assert not loose, f"move these into the folder of their layer: {loose}"


def test_every_folder_is_a_layer():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(LAYER_OF_FOLDER), (
        f"unmapped: {sorted(folders - set(LAYER_OF_FOLDER))}, gone: {sorted(set(LAYER_OF_FOLDER) - folders)}"
        " (map each folder in LAYER_OF_FOLDER and docs/architecture.md)"
    )


def test_the_plugins_are_checked_too():
    assert any(layer_of(p) == "plugins" for p in SOURCES)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(SRC)))
def test_module_imports_only_downward(path):
    wrong = wrong_imports(path)
    assert not wrong, f"{path.relative_to(SRC)} ({layer_of(path)}) may not import {wrong}"


@pytest.mark.parametrize(
    "layer_folder, source, expected",
    [
        (
            "engine",
            "from sporeflow.tracking.tracker import Tracker\n",
            ["sporeflow.tracking.tracker (tracking)"],
        ),
        ("engine", "import sporeflow.job.runner\n", ["sporeflow.job.runner (job)"]),
        ("engine", "import omegaconf\n", ["omegaconf"]),
        ("core", "from sporeflow import storage\n", ["sporeflow.storage (storage)"]),
        ("storage", "import mlflow\n", ["mlflow"]),
        (
            "config",
            "from sporeflow.stage.spec import StageSpec\n",
            ["sporeflow.stage.spec (stage)"],
        ),
        ("stage", "from sporeflow.job.reuse import turn\n", ["sporeflow.job.reuse (job)"]),
        ("job", "from sporeflow.stage.trainer import Trainer\n", []),
        ("engine", "from sporeflow.storage.files import atomic_path\nimport mindspore\n", []),
    ],
)
def test_the_checker_catches_an_upward_import(
    tmp_path, monkeypatch, layer_folder, source, expected
):
    """A module written into a layer's folder is judged by that folder: upward imports and
    banned libraries are reported, downward ones are not."""
    fake_src = tmp_path / "src"
    module = fake_src / "sporeflow" / layer_folder / "leaky.py"
    module.parent.mkdir(parents=True)
    module.write_text(source)
    monkeypatch.setitem(globals(), "SRC", fake_src)
    assert wrong_imports(module) == expected


def test_a_loose_module_at_the_root_is_found(tmp_path, monkeypatch):
    fake_src = tmp_path / "src"
    (fake_src / "sporeflow").mkdir(parents=True)
    loose = fake_src / "sporeflow" / "helpers.py"
    loose.write_text("")
    monkeypatch.setitem(globals(), "SRC", fake_src)
    assert (
        layer_of(loose) == "root"
        and layer_of(fake_src / "sporeflow" / "engine" / "x.py") == "engine"
    )


@pytest.mark.parametrize(
    "module, absent",
    [
        ("sporeflow", {"mindspore", "mlflow", "hydra"}),  # the ISA choice must precede MindSpore
        ("sporeflow.job.runs", {"mindspore"}),  # the launcher's MLflow hooks stay light
        ("sporeflow.entry.app", {"mindspore"}),  # MindSpore's log variables precede it
        ("sporeflow.launch.msrun", {"mindspore", "mlflow"}),
        ("sporeflow.config.schema", {"mindspore", "mlflow"}),
        ("sporeflow.tracking.tracker", {"mindspore", "mlflow"}),  # the trainer only journals
        ("sporeflow.job.pipeline", {"mlflow"}),  # what a training process imports
    ],
)
def test_importing_a_light_module_loads_no_heavy_library(module, absent):
    """What the docs promise about import cost, checked in a fresh interpreter."""
    code = f"import sys, {module}; print(sorted(m for m in {sorted(absent)!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", f"importing {module} loads {out.stdout.strip()}"


# --- the page's tree: every module named, no module that is gone ------------------------------
TREE_HEADING = "## The tree, top layer first"
ROOT_INDENT, ENTRY_INDENT = 4, 6  # `src/sporeflow/`; `tracking/  journal (...), ...`
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def tree_block(page: str) -> list[str]:
    """The indented block after the tree's heading (the first one below it)."""
    lines = page.split(TREE_HEADING, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(" " * ROOT_INDENT))
    block = []
    for line in lines[start:]:
        if line.strip() and not line.startswith(" " * ROOT_INDENT):
            break
        block.append(line)
    return block


def top_level(text: str, separator: str) -> list[int]:
    """Where `separator` stands outside parentheses and backticks in `text`."""
    found, depth, quoted = [], 0, False
    for i, char in enumerate(text):
        if char == "`":
            quoted = not quoted
        elif quoted:
            continue
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(
                    f"a ')' with no '(' before it: ...{text[max(0, i - 60) : i + 1]!r}"
                )
        elif char == separator and depth == 0:
            found.append(i)
    if depth or quoted:
        raise ValueError(f"a '(' or '`' left open in ...{text[-80:]!r}")
    return found


def split_items(text: str) -> list[str]:
    """`a (x, y), b, c (`p, q`)` -> the three items: a comma inside parentheses or backticks
    belongs to its item."""
    cuts = [-1, *top_level(text, ","), len(text)]
    items = [text[start + 1 : end].strip() for start, end in zip(cuts[:-1], cuts[1:], strict=True)]
    return [item for item in items if item]


def leading_name(item: str, name: re.Pattern) -> str:
    """The name an item starts with; the rest may only be one parenthesised description."""
    found = name.match(item)
    rest = item[found.end() :].strip() if found else ""
    if found is None or not (rest == "" or _one_parenthesis(rest)):
        raise ValueError(f"not `name` or `name (what it does)`: {item!r}")
    return found.group(found.lastindex or 0)


def _one_parenthesis(text: str) -> bool:
    """Whether `text` is one '(...)': the '(' it starts with closed by its last character."""
    depth = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return i > 0 and i == len(text) - 1
    return False


def documented_modules(page: str) -> dict[str, list[str]]:
    """folder (`src/sporeflow/tracking`) -> the modules its entry in the tree names. A root
    (`src/sporeflow/`) starts at ROOT_INDENT, a folder's entry (`tracking/`) at ENTRY_INDENT,
    its lines below it deeper; a line at ENTRY_INDENT not naming a folder lists the root's own
    modules (`__init__`)."""
    entries: dict[str, list[str]] = {}
    root = folder = None
    for line in tree_block(page):
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        head, _, rest = line.strip().partition(" ")
        if indent == ROOT_INDENT and head.endswith("/"):
            root, folder = head.rstrip("/"), None  # what follows it describes the root
        elif indent == ENTRY_INDENT and root is not None:
            folder = f"{root}/{head.rstrip('/')}" if head.endswith("/") else root
            entries.setdefault(folder, []).append(rest if head.endswith("/") else line.strip())
        elif indent > ENTRY_INDENT and folder is not None:
            entries[folder].append(line.strip())
        else:
            raise ValueError(f"a line of the tree outside any folder's entry: {line!r}")
    return {
        folder: [leading_name(item, IDENTIFIER) for item in split_items(" ".join(texts))]
        for folder, texts in entries.items()
    }


def source_modules() -> dict[str, set[str]]:
    """folder (`src/sporeflow/tracking`) -> its modules; `__init__` only at the package root."""
    found: dict[str, set[str]] = {}
    for path in SOURCES:
        if path.name == "__init__.py" and path != PACKAGE / "__init__.py":
            continue
        found.setdefault(path.parent.relative_to(SRC.parent).as_posix(), set()).add(path.stem)
    return found


def test_the_pages_tree_names_every_module_and_no_module_that_is_gone():
    documented = documented_modules(DOC.read_text())
    twice = {f: sorted({m for m in ms if ms.count(m) > 1}) for f, ms in documented.items()}
    assert not any(twice.values()), f"named twice in docs/architecture.md's tree: {twice}"
    listed = {(folder, m) for folder, modules in documented.items() for m in modules}
    actual = {(folder, m) for folder, modules in source_modules().items() for m in modules}
    unnamed = sorted(f"{folder}/{m}.py" for folder, m in actual - listed)
    gone = sorted(f"{folder}/{m}" for folder, m in listed - actual)
    assert not unnamed and not gone, (
        f"docs/architecture.md's tree does not name {unnamed} (add `name (what it does)` to its"
        f" folder's entry) and names {gone}, which do not exist"
    )


def test_the_tree_reader_reads_entries_across_lines_and_refuses_prose():
    page = "\n".join(
        [
            TREE_HEADING,
            "",
            "A sentence.",
            "",
            "    src/pkg/",
            "      __init__     (the root: a, b)",
            "      a/           one (x, y: `p, q`), two,",
            "                   three (z (nested), w)",
            "    src/plugins/   (found by a scan)",
            "      p/           four",
            "",
            "After the block, not read: five/ six",
        ]
    )
    assert documented_modules(page) == {
        "src/pkg": ["__init__"],
        "src/pkg/a": ["one", "two", "three"],
        "src/plugins/p": ["four"],
    }
    with pytest.raises(ValueError, match="not `name`"):
        documented_modules(page.replace("two,", "two and"))  # prose, not a list of modules
    with pytest.raises(ValueError, match="left open"):
        documented_modules(page.replace("(z (nested), w)", "(z (nested, w)"))
    with pytest.raises(ValueError, match="outside any folder"):
        documented_modules(page.replace("      p/", "     p/"))


# --- the page's claims about hooks ------------------------------------------------------------
# the labels of the page's lists of what is not of the hooks' one shape -> what the classes say
HOOK_CLAIMS = {
    "callbacks that are not hooks": "not hooks",
    "hooks that hold an MLflow run": "hold a run",
    "hooks handed another hook": "given a hook",
}
CLASS_NAME = re.compile(r"`([a-z_][\w.]*\.[A-Z]\w*)`")  # `engine.loop.StopOnSignal`

# run in a fresh interpreter: every module of src/ imported, MindSpore's Callback's subclasses
# defined there, by what the page says of them
INSPECT_CLASSES = r"""
import importlib, inspect, json, re, sys
from pathlib import Path

src = Path(sys.argv[1])
for path in sorted(src.rglob("*.py")):
    parts = path.relative_to(src).with_suffix("").parts
    importlib.import_module(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
from mindspore.train import Callback
from sporeflow.engine.hooks import HookBase

def below(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from below(sub)

ours = {c for c in below(Callback) if c.__module__.split(".")[0] in ("sporeflow", "hydra_plugins")}
hooks = {c for c in ours if issubclass(c, HookBase)}
hook_names = re.compile(r"\b(%s)\b" % "|".join(sorted(c.__name__ for c in hooks)))
run = re.compile(r"\b(TrackedRun|Tracker)\b")

def name(c):
    return f"{c.__module__.removeprefix('sporeflow.')}.{c.__qualname__}"

def takes(c, pattern):
    params = inspect.signature(c.__init__).parameters.values()
    return any(pattern.search(str(p.annotation)) for p in params)

print(json.dumps({
    "not hooks": sorted(name(c) for c in ours - hooks),
    "hold a run": sorted(name(c) for c in hooks if takes(c, run)),
    "given a hook": sorted(name(c) for c in hooks if takes(c, hook_names)),
}))
"""


def page_hook_claims(page: str) -> dict[str, list[str]]:
    """Each HOOK_CLAIMS list of the page: a bullet `- <label> (...): `a.b.C` (why), ...` (or
    `none`), its lines below it indented."""
    bullets, current = [], None
    for line in page.splitlines():
        if line.startswith("- "):
            current = [line[2:]]
            bullets.append(current)
        elif current is not None and line.startswith("  ") and line.strip():
            current.append(line.strip())
        else:
            current = None
    claims = {}
    for text in (" ".join(lines) for lines in bullets):
        label = next((label for label in HOOK_CLAIMS if text.startswith(label)), None)
        if label is None:
            continue
        assert label not in claims, f"docs/architecture.md lists {label!r} twice"
        colons = top_level(text, ":")
        if not colons:
            raise ValueError(f"no ':' before the list of {label!r}: {text!r}")
        listed = text[colons[0] + 1 :].strip()
        claims[label] = (
            []
            if listed.rstrip(".") == "none"
            else [leading_name(item, CLASS_NAME) for item in split_items(listed)]
        )
    return claims


def test_the_pages_lists_of_the_hooks_exceptions_are_the_classes_own():
    """The page says which callbacks are not hooks (HookBase), which hooks hold an MLflow run
    and which are handed another hook; each list must be exactly what the classes in src/ are,
    so whoever makes a callback a hook (or a new exception) changes the page with it."""
    claims = page_hook_claims(DOC.read_text())
    assert set(claims) == set(HOOK_CLAIMS), (
        f"docs/architecture.md lacks {set(HOOK_CLAIMS) - set(claims)}"
    )
    out = subprocess.run(
        [sys.executable, "-c", INSPECT_CLASSES, str(SRC)],
        capture_output=True,
        text=True,
        check=True,
    )
    found = json.loads(out.stdout.strip().splitlines()[-1])
    for label, key in HOOK_CLAIMS.items():
        assert sorted(claims[label]) == found[key], (
            f"docs/architecture.md's {label!r}: {sorted(claims[label])}; the classes: {found[key]}"
        )


def test_the_hook_claims_reader_reads_a_wrapped_list_and_none():
    page = "\n".join(
        [
            "- callbacks that are not hooks (raw, not `HookBase`s): `engine.loop.Stop` (first,",
            "  by `fit`), `dim_reduce.snapshots.Snap`",
            "- hooks that hold an MLflow run: none",
            "- hooks handed another hook: `engine.callbacks.Save` (the user hooks, `a.B`)",
            "- a bullet about something else: `x.Y`",
        ]
    )
    assert page_hook_claims(page) == {
        "callbacks that are not hooks": ["engine.loop.Stop", "dim_reduce.snapshots.Snap"],
        "hooks that hold an MLflow run": [],
        "hooks handed another hook": ["engine.callbacks.Save"],
    }
