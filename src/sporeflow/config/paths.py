"""One rule for every path-valued option: a relative path is the launch folder's.

With `hydra.job.chdir=true` Hydra moves the process into the run dir before the job starts, so
`dataset.root=data` would be looked for there (issue 60). The options below are made absolute
against the folder the command was started in before the config is checked, so a refusal
names the absolute path it checked, and msrun's workers, started in that folder, agree.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

# always a file or folder (a component's `root`/`cache_dir`: the data sets' own constructors)
PATH_KEYS = (
    "dataset.root",
    "dataset.cache_dir",
    "runtime.compile_cache_dir",
    "boost.pca_mat_path",
    "parallel.strategy_ckpt_config.load_file",
    "parallel.strategy_ckpt_config.save_file",
)
# a run dir or file, or else an MLflow run id / models:/ URI / true-false: a relative value is
# made absolute only where it names something in the launch folder
RUN_KEYS = ("resume", "train.init_from", "boost.stage1_run", "source")


def from_launch_dir(cfg: DictConfig, launch_dir: Path) -> DictConfig:
    """`cfg` with each relative path option made absolute against `launch_dir` and `~`
    expanded (in place; the same object is returned). Options missing from `cfg` or unset are
    left alone."""
    for key in PATH_KEYS + RUN_KEYS:
        value = OmegaConf.select(cfg, key, default=None, throw_on_missing=False)
        if not isinstance(value, str) or not value or "://" in value or ":/" in value:
            continue
        path = launch_dir / Path(value).expanduser()  # an absolute path stays itself
        if str(path) == value or key in RUN_KEYS and not path.exists():
            continue
        OmegaConf.update(cfg, key, str(path), merge=False)
    return cfg
