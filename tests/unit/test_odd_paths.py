"""Paths with characters other programs' rules give a meaning (issue 60): each path sporeflow
hands on is encoded for the rule it meets. The whole commands run in such a folder in the
process tier (tests/e2e/test_fresh_process.py)."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from sqlalchemy.engine import make_url

from sporeflow.core.uris import sqlite_file, sqlite_uri
from sporeflow.launch.msrun import override
from sporeflow.serving.package import export_mindir

NAMES = [
    "x y",
    "what?",
    "no#1",
    "100%",
    "50%20off",
    "é ü 数据",
    "it's",
    'say "hi"',
    "a=b,c",
    "back\\slash",
    "plain_name",
]


@pytest.mark.parametrize("name", NAMES)
def test_the_store_uri_of_a_folder_names_that_folder_for_sqlalchemy(tmp_path, name):
    db = tmp_path / name / "mlflow.db"
    uri = sqlite_uri(db)
    assert make_url(uri).database == str(db)  # what MLflow's and Optuna's engines open
    assert sqlite_file(uri) == db


@pytest.mark.parametrize("name", NAMES)
def test_an_override_hydra_parses_back_to_the_same_path(tmp_path, name):
    path = tmp_path / name / "run"
    parsed = OverridesParser.create().parse_overrides([override("hydra.run.dir", path)])
    assert parsed[0].key_or_group == "hydra.run.dir"
    assert parsed[0].value() == str(path)


@pytest.mark.parametrize("name", ["x y", "no#1?", "100%", "é"])
def test_a_mindir_is_exported_into_a_folder_mindspore_refuses_as_a_file_name(tmp_path, name):
    from mindspore import nn

    network = nn.Dense(3, 2)
    dest = tmp_path / name / "network.mindir"
    dest.parent.mkdir()
    export_mindir(network, ms.Tensor(np.ones((1, 3), np.float32)), dest)
    graph = nn.GraphCell(ms.load(str(dest)))
    x = np.random.default_rng(0).random((1, 3)).astype(np.float32)
    np.testing.assert_allclose(
        graph(ms.Tensor(x)).asnumpy(), network(ms.Tensor(x)).asnumpy(), rtol=1e-6
    )
