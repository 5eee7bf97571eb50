"""The layer map of docs/architecture.md, enforced: every folder of the package is one layer,
nothing but `__init__.py` sits at the package root, and each module imports only from the
layers its own may import (and no third-party library its layer bans). The Hydra plugins in
src/hydra_plugins are a layer of their own above the entry."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "sporeflow"
PLUGINS = SRC / "hydra_plugins"

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
# layer -> the layers it may import (its own included); from the top down
MAY_IMPORT = {
    "root": {"entry", "core"},  # `sporeflow.run` ...: the Python API, re-exported lazily
    "plugins": {"entry", "launch", "config", "storage", "core"},
    "entry": {
        "entry",
        "launch",
        "job",
        "stage",
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
    },
    "launch": {"launch", "config", "storage", "core"},
    "job": {
        "job",
        "stage",
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
    },
    "stage": {
        "stage",
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
    },
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
    import subprocess
    import sys

    code = f"import sys, {module}; print(sorted(m for m in {sorted(absent)!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", f"importing {module} loads {out.stdout.strip()}"
