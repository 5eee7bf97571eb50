"""What this machine can host for a test (root, namespaces, a browser), and what to do when it
cannot: skip with the reason on a developer's machine, fail under CI=true, where .ci/run has
installed and may use everything, so a skip would hide a broken capability."""

from __future__ import annotations

import os

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(reason: str) -> None:
    """Skip (developer machine) or fail (CI) with `reason`; never returns."""
    if in_ci():
        pytest.fail(f"CI must be able to run this test: {reason}")
    pytest.skip(reason)
