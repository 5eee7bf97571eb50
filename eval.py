"""sporeflow eval: `python eval.py source=<run dir | stage dir | MLflow run id> [split=test|train]
[key=value ...]` evaluates a finished run's final weights again (see --help)."""

from sporeflow.core import signals

signals.exit_at_once()  # a Ctrl-C while this loads ends it at once, in one line

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from sporeflow.entry.app import mindspore_loaded, run_cli, run_context  # noqa: E402
from sporeflow.entry.hydra_setup import register_configs  # noqa: E402

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="eval")
def main(cfg: DictConfig) -> float:
    """Resolve the source -> its config with these keys over it -> evaluate; returns top-1."""
    mindspore_loaded(cfg, run_context().run_dir)
    from sporeflow.entry.eval_app import run_eval  # imports MindSpore: after its settings

    return run_eval(cfg)


if __name__ == "__main__":
    run_cli(main)
