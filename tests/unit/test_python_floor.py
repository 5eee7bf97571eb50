"""The Python versions sporeflow claims are the ones its tools check: setup.cfg's
python_requires floor is ruff's target version and mypy's python_version (so `make lint` fails
on syntax or standard-library use the floor lacks), and README says the same range."""

from __future__ import annotations

import configparser
import re
import sys

from helpers.train import REPO


def floor_and_ceiling() -> tuple[tuple[int, int], tuple[int, int]]:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    spec = cfg["options"]["python_requires"]
    low = re.search(r">=\s*3\.(\d+)", spec).group(1)
    high = re.search(r"<\s*3\.(\d+)", spec).group(1)
    return (3, int(low)), (3, int(high))


def test_ruff_and_mypy_check_the_floor_setup_cfg_claims():
    (major, minor), _ = floor_and_ceiling()
    pyproject = (REPO / "pyproject.toml").read_text()  # tomllib is 3.11's: not on the floor
    assert (
        re.search(r'^target-version = "(py\d+)"', pyproject, re.M).group(1) == f"py{major}{minor}"
    )
    assert (
        re.search(r'^python_version = "([\d.]+)"', pyproject, re.M).group(1) == f"{major}.{minor}"
    )


def test_the_readme_states_the_same_range_and_this_python_is_in_it():
    (major, low), (_, high) = floor_and_ceiling()
    readme = (REPO / "README.md").read_text()
    assert f"CPython {major}.{low}–{major}.{high - 1}" in readme
    assert (major, low) <= sys.version_info[:2] < (major, high)
