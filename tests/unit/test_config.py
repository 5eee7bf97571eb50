"""Every option of every group composes and validates; bad input fails with the promised error."""

from __future__ import annotations

import pytest

from helpers.train import CONF, run_train
from sporeflow.config.schema import allowed_keys
from sporeflow.config.validation import validate
from sporeflow.core.errors import ConfigError

GROUPS = [
    "model",
    "dataset",
    "optimizer",
    "loss",
    "parallel",
    "boost",
    "callbacks",
    "experiment",
    "debug",
]


def options(group):
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_option_composes_and_validates(compose_cfg, group, option):
    device = ["device_target=Ascend"] if option in ("semi_auto8", "auto8") else []
    cfg = validate(compose_cfg([f"{group}={option}", *device]))
    if group == "experiment":
        assert cfg.experiment == option, "a preset must set `experiment:` to its own name"
    elif group == "debug":
        assert cfg.callbacks.progress_bar is False and cfg.epochs <= 3, "debug runs are short"
    else:
        assert cfg[group] is not None
    assert cfg.model.num_classes == cfg.dataset.num_classes  # interpolated, not repeated


def test_every_group_has_an_option():
    for group in GROUPS:
        assert options(group), f"conf/{group} is empty"


def test_experiment_preset_overrides_group_choices(compose_cfg):
    cfg = validate(compose_cfg(["experiment=lenet_fashion_mnist"]))
    assert cfg.dataset._target_.endswith("IdxImages")
    assert cfg.experiment == "lenet_fashion_mnist"
    assert cfg.optimizer.lr == 0.01


def test_typo_in_component_key_names_key_and_allowed(compose_cfg):
    with pytest.raises(ConfigError) as err:
        validate(compose_cfg(["+optimizer.lrr=0.1"]))
    assert "optimizer.lrr" in str(err.value)
    assert "lr, momentum, weight_decay" in str(err.value)


def test_typo_in_existing_key_fails_at_compose(compose_cfg):
    with pytest.raises(ConfigError, match="optimizer.lrr"):
        compose_cfg(["optimizer.lrr=0.1"])


def test_bad_enum_value_lists_allowed(compose_cfg):
    with pytest.raises(ConfigError) as err:
        compose_cfg(["mode=eager"])
    assert "graph, pynative" in str(err.value)


def test_nonpositive_epochs_rejected(compose_cfg):
    with pytest.raises(ConfigError, match="epochs=0"):
        validate(compose_cfg(["epochs=0"]))


def test_unimportable_target_names_group(compose_cfg):
    with pytest.raises(ConfigError, match=r"model\._target_: cannot import 'nowhere\.Net'"):
        validate(compose_cfg(["model._target_=nowhere.Net"]))


def test_missing_required_argument(compose_cfg):
    with pytest.raises(ConfigError, match="required"):
        validate(compose_cfg(["~dataset.root", "dataset=fashion_mnist"]))


def test_allowed_keys_walks_nested_schema():
    assert "checkpoint" in allowed_keys("callbacks")
    assert allowed_keys("callbacks.checkpoint") == ["every_n_epochs", "keep_last", "format"]
    assert "epochs" in allowed_keys("")
    assert allowed_keys("optimizer") == []


def test_cli_help_lists_groups(tmp_path):
    proc = run_train(["--help"], tmp_path)
    assert proc.returncode == 0
    groups = dict(
        line.split(": ", 1)
        for line in proc.stdout.splitlines()
        if ": " in line and line.split(": ")[0] in GROUPS
    )
    assert set(groups) == set(GROUPS)
    assert groups["dataset"].split(", ") == options("dataset")
    assert "mlflow ui" in proc.stdout


@pytest.mark.parametrize(
    "overrides,said",
    [
        (
            ["boost=dim_reduce", "tracking.enabled=false"],
            "boost.reuse_stage1, boost.reuse_baselines",
        ),
        (
            ["boost=dim_reduce", "tracking.enabled=false", "boost.reuse_stage1=false"],
            "boost.reuse_baselines",
        ),
        (["boost=dim_reduce"], None),
        (
            [
                "boost=dim_reduce",
                "tracking.enabled=false",
                "boost.reuse_stage1=false",
                "boost.reuse_baselines=false",
            ],
            None,
        ),
        (["tracking.enabled=false"], None),
    ],
)
def test_a_dim_reduce_job_without_a_store_says_that_reuse_is_off(compose_cfg, overrides, said):
    from sporeflow.config.facts import reuse_off_reason

    reason = reuse_off_reason(validate(compose_cfg(overrides)))
    if said is None:
        assert reason is None
    else:
        assert (
            reason.startswith("reuse is off: tracking.enabled=false") and f"({said} need" in reason
        )
