"""sporeflow: Hydra-configured MindSpore experiments with two-stage dimension-reduce training.

From Python: `sporeflow.run([...])`, `sporeflow.sweep([...])`, `sporeflow.results(...)`,
`sporeflow.load(source).predict(images)`, `sporeflow.compare(a, b)` (entry/python_api.py;
docs/api.md).

Importing this package does not import MindSpore: the CPU instruction-set choice
(`runtime.cpu_isa`) must reach the environment before MindSpore's oneDNN loads; the API is
imported at its first use.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["ConfigError", "compare", "compose", "load", "results", "run", "sweep"]


def __getattr__(name: str) -> Any:
    """The Python API's names, imported when first used (PEP 562)."""
    if name == "ConfigError":
        from sporeflow.core.errors import ConfigError

        return ConfigError
    if name in ("compare", "compose", "load", "results", "run", "sweep"):
        from sporeflow.entry import python_api

        return getattr(python_api, name)
    raise AttributeError(f"module 'sporeflow' has no attribute {name!r}")
