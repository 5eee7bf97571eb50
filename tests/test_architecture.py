"""The layer map of docs/architecture.md, enforced: every module of the package belongs to one
layer, and imports only from the layers that map allows (and no third-party library it bans)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "sporeflow"

# module (or package prefix) -> layer; the longest matching prefix wins
LAYER_OF = {
    "app": "entry", "cli": "entry", "cpu_isa": "entry", "sweep": "entry",
    "launch": "topology", "logfollow": "topology",
    "stages": "stages",
    "schema": "config",
    "components": "builders", "strategies": "builders",
    "runtime": "runtime",
    "engine": "engine",
    "dim_reduce": "dim_reduce",
    "data": "library", "models": "library", "losses": "library", "optim": "library", "schedules": "library",
    "tracking": "tracking", "checkpoints": "services", "files": "services", "rundir": "services",
    "errors": "base", "context": "base", "signals": "base", "processes": "base", "locks": "base",
    "objective": "base", "slurm": "base", "": "base",   # "" = sporeflow/__init__.py
}
# layer -> the layers it may import (its own included)
MAY_IMPORT = {
    "entry": {"entry", "topology", "stages", "config", "builders", "runtime", "engine", "dim_reduce", "library",
              "tracking", "services", "base"},
    "topology": {"topology", "config", "base"},
    "stages": {"stages", "builders", "runtime", "engine", "dim_reduce", "library", "tracking", "services", "base"},
    "config": {"config", "library", "services", "base"},
    "builders": {"builders", "base"},
    "runtime": {"runtime", "base"},
    "engine": {"engine", "services", "base"},
    "dim_reduce": {"dim_reduce", "services", "base"},
    "library": {"library", "services", "base"},
    "tracking": {"tracking", "base"},
    "services": {"services", "base"},
    "base": {"base"},
}
# layer -> third-party top-level packages it must not import
BANNED = {
    "engine": {"hydra", "omegaconf", "mlflow"},
    "dim_reduce": {"hydra", "omegaconf", "mlflow"},
    "library": {"hydra", "omegaconf", "mlflow"},
    "services": {"hydra", "omegaconf", "mlflow"},
    "tracking": {"hydra", "omegaconf", "mindspore"},
    "runtime": {"hydra", "mlflow"},
    "topology": {"mlflow", "mindspore"},
    "stages": {"hydra"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> str:
    best = max((p for p in LAYER_OF if p == "" or module == p or module.startswith(p + ".")), key=len)
    return LAYER_OF[best]


def imports_of(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "sporeflow":   # from sporeflow import x: x is a module
                found += [f"sporeflow.{alias.name}" for alias in node.names]
            else:
                found.append(node.module)
    return found


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer():
    unplaced = [module_name(p) for p in MODULES if module_name(p) and
                not any(module_name(p) == k or module_name(p).startswith(k + ".") for k in LAYER_OF if k)]
    assert not unplaced, f"place these modules in LAYER_OF (and docs/architecture.md): {unplaced}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p) or "__init__")
def test_module_imports_only_downward(path):
    layer = layer_of(module_name(path))
    wrong = []
    for imported in imports_of(path):
        top = imported.split(".")[0]
        if top == "sporeflow":
            target = layer_of(imported[len("sporeflow."):] if "." in imported else "")
            if target not in MAY_IMPORT[layer]:
                wrong.append(f"{imported} ({target})")
        elif top in BANNED.get(layer, ()):
            wrong.append(imported)
    assert not wrong, f"{module_name(path)} ({layer}) may not import {wrong}"


def test_the_checker_catches_an_upward_import(tmp_path):
    """The engine importing tracking, stages or Hydra is exactly what the map forbids."""
    fake = tmp_path / "leaky.py"
    fake.write_text("from sporeflow.tracking import Tracker\nimport sporeflow.stages.stage\nimport omegaconf\n")
    assert imports_of(fake) == ["sporeflow.tracking", "sporeflow.stages.stage", "omegaconf"]
    assert layer_of("tracking") not in MAY_IMPORT["engine"] and layer_of("checkpoints") in MAY_IMPORT["engine"]
    assert "stages" not in MAY_IMPORT["engine"] and "omegaconf" in BANNED["engine"]
    assert "builders" not in MAY_IMPORT["engine"]   # components: the Hydra-instantiating builders
