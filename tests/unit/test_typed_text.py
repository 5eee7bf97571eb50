"""Text settings keep what the user typed (issue 77): Hydra reads `2024_12` as the integer
202412, `1e3` as 1000.0 and `true` as a boolean before the schema sees them."""

from __future__ import annotations

import pytest

from helpers.inprocess import run_train_here as run_train
from helpers.store import client_of
from sporeflow.config.typed_text import as_typed

TYPED = [
    ("tracking.experiment_name", "2024_12"),
    ("tracking.run_name", "1e3"),
    ("tracking.run_name", "0x1F"),
    ("tracking.run_name", "true"),
    ("tracking.experiment_name", "007"),
]


@pytest.mark.parametrize(("key", "text"), TYPED)
def test_a_text_setting_keeps_the_characters_typed(compose_cfg, key, text):
    """sporeflow.compose (as train.py) gives the text (Hydra alone gives 202412, 1000.0, 31,
    True, 7)."""
    assert _at(compose_cfg([f"{key}={text}"]), key) == text


def test_numbers_stay_numbers_and_quoted_text_stays_as_it_was(compose_cfg):
    overrides = ["optimizer.lr=1e-2", "seed=007", "tracking.run_name='42'"]
    cfg = as_typed(compose_cfg(overrides), overrides)
    assert cfg.optimizer.lr == 0.01 and cfg.seed == 7
    assert cfg.tracking.run_name == "42"


def test_the_run_and_its_experiment_are_named_as_typed(tmp_path):
    done = run_train(
        ["debug=quick", "tracking.experiment_name=2024_12", "tracking.run_name=1e3"], tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    client = client_of(tmp_path)
    experiment = client.get_experiment_by_name("2024_12")
    assert experiment is not None and client.get_experiment_by_name("202412") is None
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "1e3"


def _at(cfg, key: str):
    node = cfg
    for part in key.split("."):
        node = node[part]
    return node
